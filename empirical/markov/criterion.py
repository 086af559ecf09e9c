"""Where a run of the sweep ended, between the bigram line (the Markov kernel, ``H_rate``) and the
unigram line (the stationary distribution, ``H_unigram``) of its binary chain ``(p, q)``:

* ``excess`` = mean ``KL(P[x_t] || q_t)`` on held-out sequences
  (:func:`empirical.markov.chains.excess_losses`), so the final loss is ``H_rate + excess``, and
  ``relative_excess = excess / (H_unigram - H_rate)``: 0 on the bigram line, 1 on the unigram line;
* **trapped at unigram** iff ``relative_excess >= TRAP_THRESHOLD = 1/2``, i.e. the final loss is
  closer to the unigram line than to the bigram line; otherwise it **reached bigram**;
* the transition probabilities read back from the predictions, their spread over positions, and
  their memory coordinate
  (:func:`empirical.markov.chains.memory_coordinate`: 0 unigram, 1 bigram);
* the escape step (:func:`escape_step`): when the training loss first fell below the midpoint of
  the two lines. Runs that sit on the unigram plateau longer than the training budget count as
  trapped, so the trapped fraction of a budget is read off the survival curve of escape steps.
"""
from __future__ import annotations

import torch

from empirical.markov.chains import (
    ReferenceLosses,
    binary_kernel,
    excess_losses,
    memory_coordinate,
    read_back_kernel,
    reference_losses,
    sequence_log_losses,
)

TRAP_THRESHOLD = 0.5
"""A run is trapped at unigram iff its ``relative_excess >= TRAP_THRESHOLD`` (midpoint rule)."""

TRAP_CRITERION = (f"trapped at unigram iff relative_excess = excess / (H_unigram - H_rate) >= {TRAP_THRESHOLD}, "
                  f"excess = mean KL(P[x_t] || q_t) on held-out sequences")
"""The criterion in words, as ``results.json`` records it."""


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


def is_trapped(relative: float) -> bool:
    """The trap criterion: the final loss is at least as close to the unigram line as to the
    bigram line, ``relative_excess >= TRAP_THRESHOLD``."""
    return relative >= TRAP_THRESHOLD


def summarise_predictions(probabilities: torch.Tensor, tokens: torch.Tensor, p: float, q: float) -> dict:
    """Where a predictor ended on held-out ``tokens (B, T)`` of chain ``(p, q)``, from its
    next-token ``probabilities (B, T, 2)``: sampled loss, excess, final loss, relative excess, trap
    verdict, read-back kernel and memory coordinate (see the module docstring)."""
    kernel = binary_kernel(p, q)
    log_probs = probabilities.log()
    excess = float(excess_losses(kernel, tokens, log_probs).mean())
    relative = relative_excess(excess, p, q)
    read_back = read_back_kernel(tokens, probabilities)
    return {
        "sampled_loss": float(sequence_log_losses(log_probs, tokens).mean()),
        "excess": excess,
        "final_loss": reference_losses(kernel).bigram + excess,
        "relative_excess": relative,
        "trapped": is_trapped(relative),
        "read_back_kernel": read_back.mean.tolist(),
        "read_back_spread": read_back.spread.tolist(),
        "memory_coordinate": memory_coordinate(read_back.mean, kernel),
    }


def escape_step(curve: dict, p: float, q: float) -> int | None:
    """The first logged step whose training loss is below the midpoint
    ``(H_unigram + H_rate) / 2`` of the two lines, i.e. where the run left the unigram plateau;
    None if it never did. (Each logged loss averages ``log_every`` steps of fresh batches.)"""
    references = reference_lines(p, q)
    midpoint = (references.unigram + references.bigram) / 2
    return next((step for step, loss in zip(curve["step"], curve["loss"]) if loss < midpoint), None)
