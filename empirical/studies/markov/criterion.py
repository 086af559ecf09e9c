"""Where a run of the sweep ended, between the bigram line (the Markov kernel, ``H_rate``) and the
unigram line (the stationary distribution, ``H_unigram``) of its binary chain ``(p, q)``, and the
decision rule that calls it trapped.

Measured on ``B`` held-out sequences of ``T`` tokens after the last training step:

* ``excess`` = mean ``KL(P[x_t] || q_t)`` (:func:`empirical.studies.markov.chains.excess_losses`), so the
  expected loss is ``H_rate + excess``; ``relative_excess = excess / (H_unigram - H_rate)`` is 0 on
  the bigram line and 1 on the unigram line;
* **decision rule**: the run is **trapped** iff ``excess > trap_tolerance = z sqrt(V_{T-1} / B)``
  with ``z = TRAP_Z = 4``, where ``V_n`` is the exact variance of the bigram predictor's mean
  log-loss over ``n`` predicted tokens of one sequence
  (:func:`empirical.studies.markov.chains.bigram_loss_variance`): the run's loss lies above the bigram
  line by more than ``z`` standard deviations of the sampling noise of a held-out loss of this
  size (one-sided false-alarm probability ``Phi(-4) = 3e-5`` for the kernel's sampled loss; its
  ``excess`` is exactly 0). Otherwise it **reached bigram**;
* the transition probabilities read back from the predictions, their spread over positions, and
  their memory coordinate (:func:`empirical.studies.markov.chains.memory_coordinate`: 0 unigram, 1 bigram);
* the escape step (:func:`escape_step`): when the training loss first fell below the midpoint of
  the two lines; a run that never did is right-censored at the budget.
"""
from __future__ import annotations

import math

import torch

from empirical.studies.markov.chains import (
    ReferenceLosses,
    bigram_loss_variance,
    binary_kernel,
    excess_losses,
    memory_coordinate,
    read_back_kernel,
    reference_losses,
    sequence_log_losses,
)

TRAP_Z = 4.0
"""Standard deviations of the held-out loss's sampling noise that the excess must exceed for a run
to count as trapped."""

TRAP_CRITERION = (f"trapped iff excess > {TRAP_Z:g} sqrt(V_(T-1) / B), excess = mean KL(P[x_t] || q_t) on B held-out "
                  f"sequences of T tokens, V_n = exact variance of the bigram predictor's mean log-loss over n tokens")
"""The decision rule in words, as ``results.json`` records it."""


def reference_lines(p: float, q: float) -> ReferenceLosses:
    """The two lines of the binary chain ``(p, q)``: bigram ``H_rate`` and unigram ``H_unigram``."""
    return reference_losses(binary_kernel(p, q))


def unigram_bigram_gap(p: float, q: float) -> float:
    """``H_unigram - H_rate`` of the binary chain ``(p, q)``: the loss a trapped run leaves on the table."""
    references = reference_lines(p, q)
    return references.unigram - references.bigram


def relative_excess(excess: float, p: float, q: float) -> float:
    """``excess / (H_unigram - H_rate)``: 0 on the bigram line, 1 on the unigram line."""
    return excess / unigram_bigram_gap(p, q)


def trap_tolerance(p: float, q: float, num_sequences: int, length: int) -> float:
    """``TRAP_Z sqrt(V_{T-1} / B)`` for ``B = num_sequences`` held-out sequences of ``T = length``
    tokens of chain ``(p, q)``: the largest excess over the bigram line that the decision rule
    attributes to the sampling noise of a held-out loss of this size."""
    if isinstance(num_sequences, bool) or not isinstance(num_sequences, int) or num_sequences < 1:
        raise ValueError(f"num_sequences: {num_sequences!r}; expected an integer >= 1")
    if isinstance(length, bool) or not isinstance(length, int) or length < 2:
        raise ValueError(f"length: {length!r}; expected an integer >= 2 (one predicted token at least)")
    return TRAP_Z * math.sqrt(bigram_loss_variance(binary_kernel(p, q), length - 1) / num_sequences)


def is_trapped(excess: float, tolerance: float) -> bool:
    """The decision rule: trapped iff the excess over the bigram line exceeds ``tolerance``
    (:func:`trap_tolerance`)."""
    return excess > tolerance


def summarise_predictions(probabilities: torch.Tensor, tokens: torch.Tensor, p: float, q: float) -> dict:
    """Where a predictor ended on held-out ``tokens (B, T)`` of chain ``(p, q)``, from its
    next-token ``probabilities (B, T, 2)``: sampled loss, excess, final loss, relative excess,
    tolerance and trap verdict, read-back kernel with its spread, and memory coordinate (see the
    module docstring)."""
    kernel = binary_kernel(p, q)
    log_probs = probabilities.log()
    excess = float(excess_losses(kernel, tokens, log_probs).mean())
    tolerance = trap_tolerance(p, q, *tokens.shape)
    read_back = read_back_kernel(tokens, probabilities)
    return {
        "sampled_loss": float(sequence_log_losses(log_probs, tokens).mean()),
        "excess": excess,
        "final_loss": reference_losses(kernel).bigram + excess,
        "relative_excess": relative_excess(excess, p, q),
        "tolerance": tolerance,
        "trapped": is_trapped(excess, tolerance),
        "read_back_kernel": read_back.mean.tolist(),
        "read_back_spread": read_back.spread.tolist(),
        "memory_coordinate": memory_coordinate(read_back.mean, kernel),
    }


def escape_step(curve: dict, p: float, q: float) -> int | None:
    """The first logged step whose training loss is below the midpoint
    ``(H_unigram + H_rate) / 2`` of the two lines, i.e. where the run left the unigram plateau;
    None if it never did by the end of the curve (right-censored at the budget). Each logged
    loss averages ``log_every`` steps of fresh batches."""
    references = reference_lines(p, q)
    midpoint = (references.unigram + references.bigram) / 2
    return next((step for step, loss in zip(curve["step"], curve["loss"]) if loss < midpoint), None)
