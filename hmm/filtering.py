"""Exact forward filtering (scaled forward algorithm), batched over HMMs and sequences.

For one HMM and tokens ``o_1..o_T`` the recursion is (``b^-_t`` predicted, ``b_t`` filtered belief)::

    b^-_1 = initial
    c_t = sum_s b^-_t(s) O(s, o_t)                     = P(o_t | o_<t)
    b_t(s) = b^-_t(s) O(s, o_t) / c_t                   = P(s_t = s | o_<=t)
    b^-_{t+1} = b_t^T T                                 = P(s_{t+1} | o_<=t)
    P(o_{t+1} = . | o_<=t) = b^-_{t+1}^T O
    log P(o_1..o_T) = sum_t log c_t

Normalising at every step (scaling) keeps every quantity in [0, 1], so the recursion is stable at
any length; the log-likelihood is a sum of logs, never a product.

Broadcasting: ``obs`` has shape ``(*obs_batch, T)`` and the model has ``batch_shape``; outputs have
the broadcast batch shape ``C = broadcast(model.batch_shape, obs_batch)``. So ``K`` HMMs scored on
the same ``N`` sequences is ``obs (N, 1, T)`` with ``batch_shape (K,)``, giving ``(N, K)``.

Work is grouped by HMM: the sequences that share an HMM are filtered together as one
``(rows, S) @ (S, S)`` product, and HMMs are processed in blocks small enough that their matrices
stay in cache across all T steps (see :func:`_block_size`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from hmm.model import HMM, check_tokens

CACHE_BUDGET_BYTES = 1 << 20
"""Bytes of matrices + beliefs one block of HMMs may occupy: about a core's L2 cache."""


class FilterResult(NamedTuple):
    """Every quantity of the forward recursion, batch shape ``C`` (see module docstring)."""

    predicted: torch.Tensor
    """``(*C, T, S)``: row t is ``P(s_t | o_<t)`` (row 0 is the initial distribution)."""
    filtered: torch.Tensor
    """``(*C, T, S)``: row t is ``P(s_t | o_<=t)``."""
    next_token: torch.Tensor
    """``(*C, T, p)``: row t is ``P(o_{t+1} | o_<=t)``."""
    log_normalizers: torch.Tensor
    """``(*C, T)``: entry t is ``log P(o_t | o_<t)``."""


class _Groups(NamedTuple):
    """The broadcast batch ``C`` regrouped as ``(G, R)``: G distinct HMMs, R sequences each."""

    batch_shape: torch.Size
    order: torch.Tensor  # (G*R,) flat indices into C, grouped by HMM
    initial: torch.Tensor  # (G, S)
    transition: torch.Tensor  # (G, S, S)
    emission: torch.Tensor  # (G, S, p)
    tokens: torch.Tensor  # (G, R, T)


def _group(model: HMM, obs: torch.Tensor) -> _Groups:
    """Broadcast ``obs`` against the model batch and group the sequences by HMM.

    Each element of the model batch is repeated the same number of times R in the broadcast batch
    (the product of the broadcast dimensions where the model batch has size 1), so grouping by a
    stable sort of the model index gives a dense ``(G, R)`` table.
    """
    try:
        batch = torch.broadcast_shapes(model.batch_shape, obs.shape[:-1])
    except RuntimeError as error:
        raise ValueError(
            f"obs: batch shape {tuple(obs.shape[:-1])} does not broadcast with the model batch shape "
            f"{tuple(model.batch_shape)}; expected broadcastable shapes (e.g. obs (N, 1, T) for K models)"
        ) from error
    full = model.expand()
    model_batch = full.transition.shape[:-2]
    model_index = torch.arange(math.prod(model_batch), device=obs.device).view(model_batch)
    model_index = model_index.expand(batch).reshape(-1)
    token_index = torch.arange(math.prod(obs.shape[:-1]), device=obs.device).view(obs.shape[:-1])
    token_index = token_index.expand(batch).reshape(-1)
    order = torch.sort(model_index, stable=True).indices
    groups = math.prod(model_batch)
    rows = order.numel() // max(groups, 1)
    S, p = model.num_states, model.num_tokens
    tokens = obs.reshape(-1, obs.shape[-1])[token_index[order]].view(groups, rows, obs.shape[-1])
    return _Groups(
        batch,
        order,
        full.initial.reshape(groups, S),
        full.transition.reshape(groups, S, S),
        full.emission.reshape(groups, S, p),
        tokens,
    )


def _block_size(rows: int, num_states: int, num_tokens: int, itemsize: int) -> int:
    """HMMs per block: as many as fit :data:`CACHE_BUDGET_BYTES` with their ``rows`` beliefs."""
    per_hmm = itemsize * (num_states * (num_states + num_tokens) + 3 * rows * num_states)
    return max(1, CACHE_BUDGET_BYTES // per_hmm)


def _filter_groups(groups: _Groups, keep_beliefs: bool) -> dict[str, torch.Tensor]:
    """Run the recursion over ``(G, R)`` groups in cache-sized blocks of HMMs.

    Returns tensors of shape ``(G, R, T, .)``: always ``next_token`` and ``log_normalizers``,
    plus ``predicted`` and ``filtered`` when ``keep_beliefs``.
    """
    G, R, T = groups.tokens.shape
    S, p = groups.emission.shape[-2:]
    dtype, device = groups.transition.dtype, groups.transition.device
    out = {
        "next_token": torch.empty(G, R, T, p, dtype=dtype, device=device),
        "log_normalizers": torch.empty(G, R, T, dtype=dtype, device=device),
    }
    if keep_beliefs:
        out["predicted"] = torch.empty(G, R, T, S, dtype=dtype, device=device)
        out["filtered"] = torch.empty(G, R, T, S, dtype=dtype, device=device)
    block = _block_size(R, S, p, groups.transition.element_size())
    for start in range(0, G, block):
        sl = slice(start, min(start + block, G))
        transition = groups.transition[sl].contiguous()
        emission = groups.emission[sl].contiguous()
        # emission_by_token[g, o, s] = O_g(s, o): one gather per step picks the likelihood rows.
        emission_by_token = emission.transpose(1, 2).contiguous()
        tokens = groups.tokens[sl]
        n = transition.shape[0]
        group_index = torch.arange(n, device=device)[:, None]
        predicted = groups.initial[sl][:, None, :].expand(n, R, S)
        for t in range(T):
            likelihood = emission_by_token[group_index, tokens[:, :, t]]  # (n, R, S)
            joint = predicted * likelihood
            normalizer = joint.sum(-1, keepdim=True)
            filtered = joint / normalizer
            if keep_beliefs:
                out["predicted"][sl, :, t] = predicted
                out["filtered"][sl, :, t] = filtered
            out["log_normalizers"][sl, :, t] = normalizer.squeeze(-1).log()
            predicted = torch.bmm(filtered, transition)
            out["next_token"][sl, :, t] = torch.bmm(predicted, emission)
    return out


def _ungroup(groups: _Groups, grouped: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_group` for a ``(G, R, *tail)`` tensor: back to ``(*C, *tail)``."""
    tail = grouped.shape[2:]
    flat = torch.empty((groups.order.numel(), *tail), dtype=grouped.dtype, device=grouped.device)
    flat[groups.order] = grouped.reshape(-1, *tail)
    return flat.view((*groups.batch_shape, *tail))


def _check_possible(log_normalizers: torch.Tensor, obs_name: str = "obs") -> None:
    """Raise if some token had probability 0 under its HMM (the belief would be 0/0 = NaN)."""
    impossible = torch.isneginf(log_normalizers)
    if bool(impossible.any()):
        index = tuple(int(i) for i in impossible.nonzero()[0])
        raise ValueError(
            f"{obs_name}: the token at batch/position {index} has probability 0 under the model, so the "
            f"filtered belief is undefined; expected a sequence the HMM can emit"
        )


def _run(model: HMM, obs, keep_beliefs: bool) -> tuple[_Groups, dict[str, torch.Tensor]]:
    tokens = check_tokens(obs, model.num_tokens).to(model.device)
    groups = _group(model, tokens)
    result = _filter_groups(groups, keep_beliefs)
    _check_possible(_ungroup(groups, result["log_normalizers"]))
    return groups, result


def filter_beliefs(model: HMM, obs) -> FilterResult:
    """All quantities of the forward recursion: predicted and filtered beliefs, next-token
    predictive and per-step log normalisers, each with batch shape ``broadcast(model, obs)``.

    Raises ``ValueError`` for invalid tokens or a token the model cannot emit.
    """
    groups, result = _run(model, obs, keep_beliefs=True)
    return FilterResult(**{name: _ungroup(groups, value) for name, value in result.items()})


def next_token_probs(model: HMM, obs) -> torch.Tensor:
    """``(*C, T, p)``: row t is ``P(o_{t+1} = . | o_1..o_{t+1})`` in 0-based terms, i.e. the
    distribution of the token following ``obs[..., t]`` given ``obs[..., :t+1]``.

    Does not store beliefs, so memory is ``O(|C| T p)``.
    """
    groups, result = _run(model, obs, keep_beliefs=False)
    return _ungroup(groups, result["next_token"])


def log_likelihood(model: HMM, obs) -> torch.Tensor:
    """``(*C,)``: ``log P(obs)`` under each HMM, ``sum_t log P(o_t | o_<t)``."""
    groups, result = _run(model, obs, keep_beliefs=False)
    return _ungroup(groups, result["log_normalizers"].sum(-1))
