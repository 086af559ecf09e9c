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
logaddexp(log P_e(s), sum_c log P_w(c s))``, the sum over children changed at each event by the
change of the one child on the event's path.

Cost: no loop over positions. Grouping each prompt's positions by their node at each depth (one
stable sort), the counts (those of :func:`empirical.yardsticks.ngram.context_counts` of order D + 1)
and ``log P_e`` are running sums within the groups, and ``log P_w`` follows bottom-up, one depth
at a time (:func:`stop_weights`); vectorised over prompts, in chunks of :data:`CHUNK_PROMPTS`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from empirical.yardsticks.ngram import check_prompts, fit_by_likelihood, scored_rows, segment_histories

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


class NodeGroups(NamedTuple):
    """The positions of each prompt grouped by their context node at one depth: ``order (B, N + 1)``
    sorts each prompt's positions by node, stably (so by time within a node); ``starts`` gives,
    in that sorted order, where each position's group starts; ``previous (B, N + 1)``, in time
    order, the last earlier position at the same node (-1: none)."""

    order: np.ndarray
    starts: np.ndarray
    previous: np.ndarray

    @classmethod
    def of(cls, nodes: np.ndarray) -> NodeGroups:
        order = np.argsort(nodes, axis=1, kind="stable")
        grouped = np.take_along_axis(nodes, order, 1)
        index = np.broadcast_to(np.arange(nodes.shape[1]), nodes.shape)
        is_start = np.ones(nodes.shape, dtype=bool)
        is_start[:, 1:] = grouped[:, 1:] != grouped[:, :-1]
        starts = np.maximum.accumulate(np.where(is_start, index, 0), axis=1)
        previous = np.empty_like(order)
        np.put_along_axis(previous, order, np.where(is_start, -1, np.roll(order, 1, axis=1)), 1)
        return cls(order, starts, previous)

    def running_sum(self, values: np.ndarray) -> np.ndarray:
        """``(B, N + 1)``: at each position, the sum of ``values`` over the positions up to it at its node."""
        ordered = np.take_along_axis(values, self.order, 1)
        sums = np.cumsum(ordered, axis=1)
        within = sums - np.take_along_axis(sums, self.starts, 1) + np.take_along_axis(ordered, self.starts, 1)
        out = np.empty_like(values)
        np.put_along_axis(out, self.order, within, 1)
        return out

    def before(self, values: np.ndarray) -> np.ndarray:
        """``(B, N + 1)``: ``values`` at the last earlier position at the same node (0: none)."""
        return np.where(self.previous >= 0, np.take_along_axis(values, np.maximum(self.previous, 0), 1), 0.0)


class TreeStatistics(NamedTuple):
    """What the weighting needs of some prompts, independent of the concentrations. Positions run
    over ``0..N``: position u < N is the prompt's, position N a placeholder after it, so that row t
    reads position t + 1."""

    counts: np.ndarray
    """``(D + 1, B, N, p)``: ``c(s_d, o)`` at row t's context path ``s_d(t + 1)``, events up to t."""
    symbols: np.ndarray
    """``(B, N)``: the token at position u (0 where u is a delimiter)."""
    is_event: np.ndarray
    """``(B, N + 1)`` bool: position u holds an HMM token."""
    groups: tuple[NodeGroups, ...]
    """Per depth d, the positions grouped by their node ``s_d(u)``."""
    seen: np.ndarray
    """``(B, N + 1, D + 1)`` bool: node ``s_d(u)`` has had an event at or before u."""
    totals: np.ndarray
    """``(D + 1, B, N, 1)``: ``n(s_d)`` at row t's path."""
    next_counts: np.ndarray
    """``(D + 1, B, N, 1)``: ``c(s_d, o_{t+1})`` at row t's path, of its next token (token 0 where it is none)."""


def tree_statistics(tokens: torch.Tensor, num_tokens: int, depth: int) -> TreeStatistics:
    """:class:`TreeStatistics` of ``tokens (B, N)`` for trees of depth ``depth`` (module docstring)."""
    B, N = tokens.shape
    history = segment_histories(tokens, num_tokens, max(depth, 1))[..., :depth]  # (B, N, D): row t's context
    bos_row = torch.full((B, 1, depth), num_tokens + 1)
    paths = torch.cat([bos_row, history], dim=1)  # paths[:, u]: context of position u (u = N: after the prompt)
    # A node is (depth, context) within a prompt: digits 1..p + 2 in base p + 3, so depths never collide.
    base = num_tokens + 3
    codes = torch.zeros(B, N + 1, depth + 1, dtype=torch.long)
    for d in range(1, depth + 1):
        codes[..., d] = codes[..., d - 1] * base + paths[..., d - 1] + 1
    nodes = codes.numpy()
    is_event = np.zeros((B, N + 1), dtype=bool)
    is_event[:, :N] = (tokens != num_tokens).numpy()
    symbols = np.where(is_event[:, :N], tokens.numpy(), 0)
    groups = tuple(NodeGroups.of(nodes[..., d]) for d in range(depth + 1))
    one_hot = np.zeros((B, N + 1, num_tokens))
    np.put_along_axis(one_hot[:, :N], symbols[..., None], is_event[:, :N, None].astype(float), -1)
    # c(s_d(t + 1), o) after the events up to t: the running count at t + 1's node, less t + 1's own event.
    counts = np.stack([np.stack([group.running_sum(one_hot[..., o]) for o in range(num_tokens)], -1)[:, 1:]
                       - one_hot[:, 1:] for group in groups])
    seen = np.stack([group.running_sum(is_event.astype(float)) > 0 for group in groups], axis=-1)
    following = np.concatenate([symbols[:, 1:], np.zeros((B, 1), dtype=symbols.dtype)], axis=1)
    next_counts = np.take_along_axis(counts, np.broadcast_to(following[None, ..., None], counts.shape[:3] + (1,)), -1)
    return TreeStatistics(counts, symbols, is_event, groups, seen, counts.sum(-1, keepdims=True), next_counts)


def node_predictions(counts: np.ndarray, totals: np.ndarray, num_tokens: int, alphas: np.ndarray) -> np.ndarray:
    """``(D + 1, B, N, K)``: ``p_e(o | s_d) = q_{d+1}(o)`` at row t's path (module docstring) for the
    tokens whose counts ``counts (D + 1, B, N, K)`` holds (all p, or one a row), ``totals (D + 1, B, N, 1)``
    the nodes' ``n(s_d)``."""
    predictions = np.empty_like(counts)
    below = np.full(counts.shape[1:], 1.0 / num_tokens)
    for d, alpha in enumerate(alphas):
        below = (counts[d] + alpha * below) / (totals[d] + alpha)
        predictions[d] = below
    return predictions


def stop_weights(statistics: TreeStatistics, predictions: np.ndarray) -> np.ndarray:
    """``(D, B, N)``: ``w_d = 1/2 P_e(s_d) / P_w(s_d)`` at row t's path, d < D, after the events up to t
    (module docstring); ``predictions (D + 1, B, N - 1)``: :func:`node_predictions` of row t's next
    token, t < N - 1.

    Vectorised over positions, bottom-up: after the event at u, ``log P_e(s_d(u))`` is the running
    sum of the events' ``log p_e`` at that node, and the children's ``sum_c log P_w(c s_d(u))`` the
    running sum, over the same events, of how much each changed ``log P_w`` of its child on the path
    (the other children are untouched); a node with no event yet has ``P_e = P_w = 1``."""
    levels, B, N = predictions.shape[0], predictions.shape[1], predictions.shape[2] + 1
    depth = levels - 1
    # log p_e of each event at every depth of its path: row u - 1's prediction of position u, taken
    # before u is counted (the prompt's first token: no counts, so every q_d is uniform).
    increments = np.zeros((levels, B, N + 1))
    increments[:, :, 0] = -np.log(statistics.counts.shape[-1])
    increments[:, :, 1:N] = np.log(predictions)
    increments *= statistics.is_event
    weights = np.empty((depth, B, N))
    changes = None
    for d in range(depth, -1, -1):
        group = statistics.groups[d]
        log_estimate = group.running_sum(increments[d])
        if changes is None:
            log_weighted = log_estimate
        else:
            log_children = group.running_sum(changes)
            log_weighted = np.where(statistics.seen[..., d], LOG_HALF + np.logaddexp(log_estimate, log_children), 0.0)
            weights[d] = np.exp(LOG_HALF + group.before(log_estimate) - group.before(log_weighted))[:, 1:]
        changes = log_weighted - group.before(log_weighted)
    return weights


def weighted_prediction(statistics: TreeStatistics, concentrations) -> np.ndarray:
    """``(B, N, p)``: ``q`` of the module docstring with ``alpha_1..alpha_{D+1}`` (``concentrations``)."""
    levels = statistics.counts.shape[0]
    alphas = np.array([float(a) for a in concentrations])
    if len(alphas) != levels or not np.all(np.isfinite(alphas) & (alphas > 0)):
        raise ValueError(f"concentrations: {alphas.tolist()}; expected {levels} finite numbers > 0, one per order "
                         f"1..{levels}")
    num_tokens = statistics.counts.shape[-1]
    predictions = node_predictions(statistics.counts, statistics.totals, num_tokens, alphas)
    return mixed(statistics, predictions, alphas)


def mixed(statistics: TreeStatistics, predictions: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``(B, N, K)``: ``q`` of the module docstring, mixing ``predictions (D + 1, B, N, K)`` over the
    depths by the stop weights (computed from the event tokens' own predictions)."""
    prediction = predictions[-1]
    if len(alphas) > 1:
        seen = node_predictions(statistics.next_counts[:, :, :-1], statistics.totals[:, :, :-1],
                                statistics.counts.shape[-1], alphas)[..., 0]
        weights = stop_weights(statistics, seen)[..., None]
        for d in range(len(alphas) - 2, -1, -1):
            prediction = weights[d] * predictions[d] + (1 - weights[d]) * prediction
    return prediction


def next_token_probability(statistics: TreeStatistics, concentrations) -> np.ndarray:
    """``(B, N)``: :func:`weighted_prediction` of each row's next token only (0's where it is a
    delimiter or past the prompt), at a p-th of the cost: the fit's objective."""
    alphas = np.array([float(a) for a in concentrations])
    predictions = node_predictions(statistics.next_counts, statistics.totals, statistics.counts.shape[-1], alphas)
    return mixed(statistics, predictions, alphas)[..., 0]


def variable_order_prediction(tokens, num_tokens: int, concentrations) -> torch.Tensor:
    """``(B, N, p)`` float64: the CTW predictor of depth ``len(concentrations) - 1`` on ``tokens``,
    in chunks of :data:`CHUNK_PROMPTS` prompts."""
    tokens = check_prompts(tokens, num_tokens)
    depth = check_depth(len(concentrations) - 1)
    chunks = [weighted_prediction(tree_statistics(chunk, num_tokens, depth), concentrations)
              for chunk in tokens.split(CHUNK_PROMPTS)]
    return torch.from_numpy(np.concatenate(chunks))


FIT_STOPPING = {"jac": "3-point", "options": {"ftol": 1e-15, "gtol": 1e-10, "maxiter": 1000}}
"""Where the variable-order fit stops: central-difference gradients (error about 1e-11, against 1e-8
for forward ones), a projected gradient of 1e-10, no stop on a small decrease. The n-grams' rule,
scipy's defaults (projected gradient 1e-5, relative decrease 2.2e-9), stopped this fit of the tiny
preset's 512 fitting prompts 2.0e-5 to 2.7e-5 nats above its minimum, and where two OpenBLAS kernel
sets (generic and SkylakeX) stopped it differed by up to a factor 100 in a concentration and by
5.5e-6 nats in the loss on half the prompts: seven concentrations, several of them along directions
where the loss is nearly flat. With this rule both stop at the same point to 1e-10 relative, for 3.5
times the loss evaluations (1110 against 272 and 320; measured 2026-12-07 on a Xeon with AVX512). The
n-grams keep the defaults, with which every committed result fitted them: their two or three
concentrations stop within 1.2e-4 relative of each other across those kernel sets, with losses that
agree within the canaries' FLOAT32, while this rule would move the evaluate canary's numbers past it
(a hand-built excess over the gap by 4e-4 relative)."""


def fit_depth_concentrations(tokens, num_tokens: int, depth: int) -> tuple[float, ...]:
    """``alpha_1..alpha_{depth+1}`` by the n-grams' protocol (:func:`empirical.yardsticks.ngram.fit_by_likelihood`)
    on ``tokens``, to :data:`FIT_STOPPING`; the statistics are computed once, the weighting once per
    evaluation."""
    tokens = check_prompts(tokens, num_tokens)
    depth = check_depth(depth)
    statistics = [tree_statistics(chunk, num_tokens, depth) for chunk in tokens.split(CHUNK_PROMPTS)]

    scored, _ = scored_rows(tokens, num_tokens)
    mask = scored.numpy()

    def loss(alphas: tuple[float, ...]) -> float:
        picked = np.concatenate([next_token_probability(chunk, alphas) for chunk in statistics])
        return float(-np.log(picked[mask]).mean())

    return fit_by_likelihood(loss, depth + 1, FIT_STOPPING)


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
