"""A variable-order in-context predictor: context-tree weighting over the prompt's own tokens.

The rung above the in-context n-grams (:mod:`empirical.yardsticks.ngram`) on the ladder of
``docs/empirical.md`` ("Competence"): a :data:`empirical.yardsticks.evaluate.Predictor`
``tokens (B, N) -> (B, N, p)``, row t for the token after position t, computed from the prompt
alone. Issue 65 asks for it after Zhou, Tian and Diggavi (arXiv 2410.05493), who measure in-context
learning of variable-order Markov chains against context-tree weighting.

**Why CTW and not a mixture of the orders 1-6.** Context-tree weighting (Willems, Shtarkov and
Tjalkens 1995) is the exact Bayesian mixture over every *tree source* of depth at most D: every
suffix-complete set of contexts, each predicting its next token by its own estimator (here the
in-context n-gram of its depth plus one). The in-context (k + 1)-gram is the complete tree of
depth k, so the mixture of the orders is a sub-mixture of CTW's; CTW also holds the trees that use a long context after some tokens and
a short one after others (the variable-order sources the anchor paper studies), which a
mixture of fixed orders cannot express. Its prediction is exact and sequential, with no
Monte-Carlo error, at a cost linear in the prompt's length.

**Contexts** are the n-grams' (delimiter-aware): the context of depth d of position u is the d
tokens before u inside u's segment, padded with ``BOS``, so the context alphabet has p + 1
symbols and the first token of a segment has the context ``(BOS, ..., BOS)``. An event is an HMM
token ``o_u`` with its context path ``s_0(u) = () , s_1(u), ..., s_D(u)``; row t predicts
position t + 1 from the events up to t (its context all ``BOS`` when t is a delimiter; rows
whose next token is a delimiter predict the segment's continuation and are never scored).

**The estimator** at a node s of depth d is the in-context n-gram of order d + 1: the
interpolated Dirichlet back-off of :mod:`empirical.yardsticks.ngram`, with counts ``c(s_j, o)`` of the
events so far at the path's nodes ``s_j``, ``n(s_j) = sum_o c(s_j, o)``::

    q_0(o)              = 1 / p
    p_e(o | s_d)        = q_{d+1}(o) = (c(s_d, o) + alpha_{d+1} q_d(o)) / (n(s_d) + alpha_{d+1})
    P_e(s)              = prod over the events at s of p_e(o | s) at that event

(Krichevsky–Trofimov's estimator is ``alpha = p / 2`` with no back-off, ``q_d`` replaced by
uniform). Each factor is a conditional distribution of the event given the past, so ``P_e(s)``
is a sequential probability assignment and the weighting below is an exact Bayesian mixture
(Willems et al. need no more of the estimator). The back-off matters: on the 16-state ``paper``
family, CTW of depth 6 with Dirichlet(alpha_d / p) leaves fitted the same way lost 1.9276 nats a
token on the 512 fitting prompts, behind the in-context bigram's 1.9113 (``docs/empirical.md``).
The complete tree of depth k is the in-context (k + 1)-gram exactly, and ``alpha_1..alpha_{D+1}``,
one per order as the n-grams have, are fitted by the n-grams' protocol
(:func:`empirical.yardsticks.ngram.fit_by_likelihood`: maximum likelihood, L-BFGS-B over
``log alpha`` within the same bounds, from all ones) on the same prompts
(:func:`empirical.yardsticks.competence.fitted_in_context`). The depth-0 predictor is the
in-context unigram.

**The weighting** (Willems et al. 1995, eq. 4), with a leaf costing one bit::

    P_w(s) = P_e(s)                                         depth(s) = D
    P_w(s) = 1/2 P_e(s) + 1/2 prod_{c} P_w(c s)             depth(s) < D

over the p + 1 extensions ``c s`` of s by an older symbol (an extension with no event has
``P_w = 1``). ``P_w(())`` is the mixture ``sum_T 2^{-Gamma_D(T)} prod_{leaves s of T} P_e(s)``
over the trees T of depth at most D, ``Gamma_D(T)`` the number of T's nodes of depth < D
(internal nodes and shallow leaves). The **sequential prediction** is its ratio,
``q(o | x_{<=t}) = P_w(x_{<=t} o) / P_w(x_{<=t})``; only the nodes on the path of the next
position change, which gives it bottom-up::

    q_D(o) = p_e(o | s_D)
    q_d(o) = w_d p_e(o | s_d) + (1 - w_d) q_{d+1}(o),   w_d = 1/2 P_e(s_d) / P_w(s_d)
    q(o)   = q_0(o)

``w_d`` is the posterior probability that the tree ends at ``s_d`` given that it reaches it.
``P_e`` and ``P_w`` are kept as logarithms (float64): ``log P_w(s) = log 1/2 +
logaddexp(log P_e(s), sum_c log P_w(c s))``, the sum over children updated by the change of the
one child on the event's path.

Cost: the counts are :func:`empirical.yardsticks.ngram.context_counts` of order D + 1 (one matrix
product per depth); ``log P_w`` needs one pass over the positions, vectorised over prompts, in
chunks of :data:`CHUNK_PROMPTS` prompts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from empirical.yardsticks.ngram import check_prompts, context_counts, fit_by_likelihood, segment_histories

MAX_DEPTH = 6
"""The deepest context tree offered (issue 65: CTW of depth up to 6)."""
CHUNK_PROMPTS = 256
"""Prompts weighted at once: the counts of a chunk take ``256 N (D + 1) p`` floats (about 60 MB at
``N = 263``, ``D = 6``, ``p = 16``)."""
LOG_HALF = float(np.log(0.5))


def check_depth(depth) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth: {depth!r}; expected an integer in 0..{MAX_DEPTH} (0 = the in-context unigram)")
    return depth


class TreeStatistics(NamedTuple):
    """What the weighting needs of some prompts, independent of the concentrations."""

    counts: np.ndarray
    """``(B, N, D + 1, p)``: ``c(s_d, o)`` at row t's context path ``s_d(t + 1)``, events up to t."""
    symbols: np.ndarray
    """``(B, N)``: the token at position u (0 where u is a delimiter)."""
    is_event: np.ndarray
    """``(B, N)`` bool: position u holds an HMM token."""
    event_nodes: np.ndarray
    """``(B, N, D + 1)``: index of the node ``s_d(u)`` among the chunk's nodes."""
    query_nodes: np.ndarray
    """``(B, N, D + 1)``: index of row t's node ``s_d(t + 1)``."""
    num_nodes: int


def tree_statistics(tokens: torch.Tensor, num_tokens: int, depth: int) -> TreeStatistics:
    """:class:`TreeStatistics` of ``tokens (B, N)`` for trees of depth ``depth`` (module docstring)."""
    B, N = tokens.shape
    counts = context_counts(tokens, num_tokens, depth + 1).permute(1, 2, 0, 3).numpy()  # (B, N, D + 1, p)
    history = segment_histories(tokens, num_tokens, max(depth, 1))[..., :depth]  # (B, N, D): row t's context
    bos_row = torch.full((B, 1, depth), num_tokens + 1)
    paths = torch.cat([bos_row, history], dim=1)  # paths[:, u]: context of position u; [:, t + 1]: row t's
    # A node is (prompt, depth, context): digits 1..p + 2 in base p + 3, so that depths never collide.
    base = num_tokens + 3
    codes = torch.zeros(B, N + 1, depth + 1, dtype=torch.long)
    for d in range(1, depth + 1):
        codes[..., d] = codes[..., d - 1] * base + paths[..., d - 1] + 1
    keys = codes + torch.arange(B)[:, None, None] * base ** (depth + 1)
    _, nodes = torch.unique(keys, return_inverse=True)
    nodes = nodes.numpy()
    is_event = (tokens != num_tokens).numpy()
    symbols = np.where(is_event, tokens.numpy(), 0)
    return TreeStatistics(counts, symbols, is_event, nodes[:, :-1], nodes[:, 1:], int(nodes.max()) + 1)


def node_predictions(counts: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``(B, N, D + 1, p)``: ``p_e(o | s_d) = q_{d+1}(o)`` at row t's path (module docstring)."""
    num_tokens = counts.shape[-1]
    predictions = np.empty_like(counts)
    below = np.full(counts.shape[:2] + (num_tokens,), 1.0 / num_tokens)
    for d, alpha in enumerate(alphas):
        below = (counts[:, :, d] + alpha * below) / (counts[:, :, d].sum(-1, keepdims=True) + alpha)
        predictions[:, :, d] = below
    return predictions


def stop_weights(statistics: TreeStatistics, predictions: np.ndarray) -> np.ndarray:
    """``(B, N, D)``: ``w_d = 1/2 P_e(s_d) / P_w(s_d)`` at row t's path, d < D, after the events up to t
    (module docstring), from one pass over the positions; ``predictions``: :func:`node_predictions`."""
    B, N, levels, num_tokens = predictions.shape
    depth = levels - 1
    # log p_e of each event at every depth of its path: row u - 1's prediction of position u, taken
    # before u is counted (the prompt's first token: no counts, so every q_d is uniform).
    seen = np.take_along_axis(predictions[:, :-1], np.broadcast_to(statistics.symbols[:, 1:, None, None],
                                                                   (B, N - 1, levels, 1)), -1)[..., 0]
    increments = np.concatenate([np.full((B, 1, levels), -np.log(num_tokens)), np.log(seen)], axis=1)
    increments *= statistics.is_event[..., None]
    log_estimate = np.zeros(statistics.num_nodes)
    log_weighted = np.zeros(statistics.num_nodes)
    log_children = np.zeros(statistics.num_nodes)
    weights = np.empty((B, N, depth))
    for u in range(N):
        event = statistics.is_event[:, u]
        path = statistics.event_nodes[event, u]  # (b, D + 1)
        log_estimate[path] += increments[event, u]
        change = log_estimate[path[:, depth]] - log_weighted[path[:, depth]]
        log_weighted[path[:, depth]] = log_estimate[path[:, depth]]
        for d in range(depth - 1, -1, -1):
            node = path[:, d]
            log_children[node] += change
            updated = LOG_HALF + np.logaddexp(log_estimate[node], log_children[node])
            change = updated - log_weighted[node]
            log_weighted[node] = updated
        query = statistics.query_nodes[:, u, :depth]
        weights[:, u] = np.exp(LOG_HALF + log_estimate[query] - log_weighted[query])
    return weights


def weighted_prediction(statistics: TreeStatistics, concentrations) -> np.ndarray:
    """``(B, N, p)``: ``q`` of the module docstring with ``alpha_1..alpha_{D+1}`` (``concentrations``)."""
    levels = statistics.counts.shape[-2]
    alphas = np.array([float(a) for a in concentrations])
    if len(alphas) != levels or not np.all(np.isfinite(alphas) & (alphas > 0)):
        raise ValueError(f"concentrations: {alphas.tolist()}; expected {levels} finite numbers > 0, one per order "
                         f"1..{levels}")
    predictions = node_predictions(statistics.counts, alphas)
    prediction = predictions[:, :, -1]
    if levels > 1:
        weights = stop_weights(statistics, predictions)[..., None]
        for d in range(levels - 2, -1, -1):
            prediction = weights[:, :, d] * predictions[:, :, d] + (1 - weights[:, :, d]) * prediction
    return prediction


def variable_order_prediction(tokens, num_tokens: int, concentrations) -> torch.Tensor:
    """``(B, N, p)`` float64: the CTW predictor of depth ``len(concentrations) - 1`` on ``tokens``,
    in chunks of :data:`CHUNK_PROMPTS` prompts."""
    tokens = check_prompts(tokens, num_tokens)
    depth = check_depth(len(concentrations) - 1)
    chunks = [weighted_prediction(tree_statistics(chunk, num_tokens, depth), concentrations)
              for chunk in tokens.split(CHUNK_PROMPTS)]
    return torch.from_numpy(np.concatenate(chunks))


def fit_depth_concentrations(tokens, num_tokens: int, depth: int) -> tuple[float, ...]:
    """``alpha_1..alpha_{depth+1}`` by the n-grams' protocol (:func:`empirical.yardsticks.ngram.fit_by_likelihood`)
    on ``tokens``; the statistics are computed once, the weighting once per evaluation."""
    tokens = check_prompts(tokens, num_tokens)
    depth = check_depth(depth)
    statistics = [tree_statistics(chunk, num_tokens, depth) for chunk in tokens.split(CHUNK_PROMPTS)]

    def predict(alphas: tuple[float, ...]) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([weighted_prediction(chunk, alphas) for chunk in statistics]))

    return fit_by_likelihood(predict, tokens, num_tokens, depth + 1)


@dataclass(frozen=True)
class ContextTreeWeighting:
    """The CTW predictor of depth ``depth`` with fixed ``concentrations`` (``alpha_1..alpha_{depth+1}``);
    a :data:`empirical.yardsticks.evaluate.Predictor`."""

    depth: int
    num_tokens: int
    concentrations: tuple[float, ...]

    def __post_init__(self) -> None:
        check_depth(self.depth)
        if len(self.concentrations) != self.depth + 1:
            raise ValueError(f"concentrations: {self.concentrations}; expected {self.depth + 1} numbers, one per "
                             f"order 1..{self.depth + 1}")

    def __call__(self, tokens) -> torch.Tensor:
        return variable_order_prediction(tokens, self.num_tokens, self.concentrations)

    @classmethod
    def fitted(cls, depth: int, num_tokens: int, fitting_tokens) -> ContextTreeWeighting:
        """The predictor with :func:`fit_depth_concentrations` on ``fitting_tokens``."""
        return cls(depth, num_tokens, fit_depth_concentrations(fitting_tokens, num_tokens, depth))
