"""In-context n-gram predictors: what counting the prompt's own tokens already predicts.

The rungs below the prior-predictive ceiling (:mod:`hmm.prior_predictive`) on the ladder of
predictors of ``docs/empirical.md`` ("Competence"). Each is a :data:`empirical.yardsticks.evaluate.Predictor`:
``tokens (B, N) -> (B, N, p)``, row t for the token after position t, computed from the prompt
alone (no HMM, no training set).

Contexts are delimiter-aware. A segment (a demonstration or the test sequence) is a fresh run of
the HMM, so a context never crosses a delimiter: the history of order ``n`` at position u is the
``n - 1`` tokens before u *inside u's segment*, padded with a start symbol ``BOS``; the first token
of a segment has the context ``(BOS, ..., BOS)``, a context of its own. An event is an HMM token
``o_u`` with its context ``h_n(u)``; row t predicts position t + 1, whose context is made of the
tokens up to t in t + 1's segment (all ``BOS`` when t is a delimiter). Where the prompt format puts
a delimiter after t, the row predicts the segment's continuation, as :func:`hmm.bayes_predictive`
does (such rows are never scored).

Interpolated Dirichlet back-off (MacKay and Peto 1995; the hierarchical Dirichlet language
model), with counts ``c_j(h, o)`` of the events of order j seen up to t::

    q_0(o)                = 1 / p
    q_j(o | h_j(t+1))     = (c_j(h_j, o) + alpha_j q_{j-1}(o | h_{j-1})) / (sum_o' c_j(h_j, o') + alpha_j)

``h_{j-1}`` drops the oldest token of ``h_j``. The order-n predictor is ``q_n``; it is the
posterior mean of a next-token distribution with a Dirichlet(alpha_j q_{j-1}) prior per context.
Uniform ``q_0`` is the prior mean of the next token for HMMs whose prior is symmetric in the tokens
(every preset's). ``alpha_1..alpha_n`` are fitted by :func:`fit_concentrations` (maximum likelihood
on prompts disjoint from those evaluated; :mod:`empirical.yardsticks.competence` says which).

Vectorised over prompts: the counts of every row come from one ``(B, N, N) @ (B, N, p)`` product
per order (context ids equal, earlier position, an event), no loop over tokens.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from hmm.model import check_tokens

CONCENTRATION_BOUNDS = (1e-3, 1e3)
"""Range searched for each ``alpha_j`` by :func:`fit_concentrations`."""


def _check_order(order) -> int:
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order: {order!r}; expected an integer >= 1 (1 = in-context unigram)")
    return order


def check_prompts(tokens, num_tokens: int) -> torch.Tensor:
    tokens = check_tokens(tokens, num_tokens, "tokens", allow_delimiter=True)
    if tokens.ndim != 2:
        raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected (B, N) prompts")
    return tokens


def segment_histories(tokens: torch.Tensor, num_tokens: int, depth: int) -> torch.Tensor:
    """``(B, N, depth)``: entry k is the token ``k`` steps before position t inside t's segment,
    ``t`` itself for k = 0, and ``BOS = num_tokens + 1`` where that crosses a delimiter or the
    prompt's start, or where t is a delimiter (the next position starts a segment)."""
    B, N = tokens.shape
    bos = num_tokens + 1
    index = torch.arange(N)
    is_delimiter = tokens == num_tokens
    last_delimiter = torch.where(is_delimiter, index, torch.full_like(tokens, -1)).cummax(dim=1).values
    position_in_segment = index - last_delimiter - 1  # -1 at a delimiter
    columns = []
    for k in range(depth):
        shifted = torch.full_like(tokens, bos)
        shifted[:, k:] = tokens[:, : N - k]
        columns.append(shifted.masked_fill(position_in_segment < k, bos))
    return torch.stack(columns, dim=-1)


def context_counts(tokens, num_tokens: int, order: int) -> torch.Tensor:
    """``(order, B, N, p)`` float64: entry ``[j - 1, b, t, o]`` is ``c_j(h_j(t+1), o)``, how often
    token o followed the order-j context of row t's target among the HMM tokens at positions
    ``<= t`` of prompt b (module docstring); ``c_1`` counts every token of the prompt so far."""
    order = _check_order(order)
    tokens = check_prompts(tokens, num_tokens)
    B, N = tokens.shape
    base = num_tokens + 2
    query = segment_histories(tokens, num_tokens, max(order - 1, 1))  # query[:, t]: context of position t + 1
    # Position u's own context is row u - 1's query; the prompt's first token has (BOS, ..., BOS).
    event_context = torch.cat([torch.full((B, 1, query.shape[-1]), num_tokens + 1), query[:, :-1]], dim=1)
    is_event = tokens != num_tokens
    one_hot = torch.nn.functional.one_hot(tokens.masked_fill(~is_event, 0), num_tokens).double()
    one_hot *= is_event[..., None]
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    counts = torch.empty(order, B, N, num_tokens, dtype=torch.float64)
    query_id = torch.zeros(B, N, dtype=torch.long)
    event_id = torch.zeros(B, N, dtype=torch.long)
    for j in range(1, order + 1):
        if j > 1:  # extend the context by the (j - 1)-th most recent token
            query_id = query_id * base + query[..., j - 2]
            event_id = event_id * base + event_context[..., j - 2]
        same_context = (query_id[:, :, None] == event_id[:, None, :]) & causal
        counts[j - 1] = same_context.double() @ one_hot
    return counts


def interpolate(counts: torch.Tensor, concentrations) -> torch.Tensor:
    """``(B, N, p)``: ``q_n`` of the module docstring from :func:`context_counts` and
    ``alpha_1..alpha_n`` (``concentrations``, one positive number per order)."""
    order, _, _, num_tokens = counts.shape
    alphas = [float(a) for a in concentrations]
    if len(alphas) != order or not all(np.isfinite(a) and a > 0 for a in alphas):
        raise ValueError(f"concentrations: {alphas}; expected {order} finite numbers > 0, one per order")
    prediction = torch.full(counts.shape[1:], 1.0 / num_tokens, dtype=torch.float64)
    for j, alpha in enumerate(alphas):
        prediction = (counts[j] + alpha * prediction) / (counts[j].sum(-1, keepdim=True) + alpha)
    return prediction


def scored_rows(tokens: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask (B, N) bool, targets (B, N))``: the rows whose next token is an HMM token, and that
    token (0 elsewhere): the rows every metric and fit is taken over."""
    following = torch.full_like(tokens, num_tokens)
    following[:, :-1] = tokens[:, 1:]
    mask = following != num_tokens
    return mask, following.masked_fill(~mask, 0)


def mean_loss(prediction: torch.Tensor, tokens: torch.Tensor, num_tokens: int) -> float:
    """Mean ``-log q(o_{t+1})`` over the scored rows of every prompt (nats/token)."""
    mask, targets = scored_rows(tokens, num_tokens)
    picked = prediction.gather(-1, targets[..., None]).squeeze(-1)
    return float(-picked.log()[mask].mean())


def fit_by_likelihood(loss: Callable[[tuple[float, ...]], float], count: int,
                      stopping: dict | None = None) -> tuple[float, ...]:
    """The ``count`` concentrations that minimise ``loss(concentrations)``, a predictor's
    :func:`mean_loss` on the fitting prompts: L-BFGS-B over their logarithms within
    :data:`CONCENTRATION_BOUNDS`, from all ones (the fitting protocol of every in-context predictor
    here), stopping by scipy's defaults (forward differences, projected gradient 1e-5; the n-grams) or
    by ``stopping``, ``minimize``'s gradient and options (the variable-order predictor's
    :data:`~empirical.yardsticks.variable_order.FIT_STOPPING`)."""
    bounds = [tuple(np.log(CONCENTRATION_BOUNDS))] * count
    result = minimize(lambda log_alphas: loss(tuple(np.exp(log_alphas))), np.zeros(count), method="L-BFGS-B",
                      bounds=bounds, **(stopping or {}))
    return tuple(float(a) for a in np.exp(result.x))


def fit_concentrations(tokens, num_tokens: int, order: int) -> tuple[float, ...]:
    """``alpha_1..alpha_order`` that minimise :func:`mean_loss` of ``q_order`` on ``tokens``
    (:func:`fit_by_likelihood`)."""
    tokens = check_prompts(tokens, num_tokens)
    counts = context_counts(tokens, num_tokens, order)
    return fit_by_likelihood(lambda alphas: mean_loss(interpolate(counts, alphas), tokens, num_tokens), order)


@dataclass(frozen=True)
class InContextNGram:
    """The order-``order`` in-context predictor ``q_order`` with fixed ``concentrations``
    (``alpha_1..alpha_order``); a :data:`empirical.yardsticks.evaluate.Predictor`."""

    order: int
    num_tokens: int
    concentrations: tuple[float, ...]

    def __post_init__(self) -> None:
        _check_order(self.order)
        if len(self.concentrations) != self.order:
            raise ValueError(f"concentrations: {self.concentrations}; expected {self.order} numbers, one per order")

    def __call__(self, tokens) -> torch.Tensor:
        return interpolate(context_counts(tokens, self.num_tokens, self.order), self.concentrations)

    @classmethod
    def fitted(cls, order: int, num_tokens: int, fitting_tokens) -> InContextNGram:
        """The predictor with :func:`fit_concentrations` on ``fitting_tokens``."""
        return cls(order, num_tokens, fit_concentrations(fitting_tokens, num_tokens, order))
