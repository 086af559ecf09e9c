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
stay in cache across all T steps (see :func:`_block_shape`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from hmm.model import HMM, check_tokens

MATRIX_CACHE_BYTES = 8 << 20
"""Bytes of per-HMM matrices one block may hold: a block's ``[T | T O]`` matrices are re-read at
every step, so they should stay in the (32 MiB, shared) last-level cache."""

BUFFER_BYTES = 256 << 20
"""Bytes of per-step buffers (likelihoods, beliefs, predictions) of one block over all T steps."""


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


def _block_shape(rows: int, length: int, num_states: int, num_tokens: int, itemsize: int) -> tuple[int, int]:
    """``(HMMs, rows)`` per block: HMMs by :data:`MATRIX_CACHE_BYTES`, rows by :data:`BUFFER_BYTES`."""
    hmms = max(1, MATRIX_CACHE_BYTES // (itemsize * num_states * (num_states + num_tokens)))
    per_row = itemsize * length * (3 * num_states + num_tokens)
    rows_per_block = max(1, min(rows, BUFFER_BYTES // (per_row * hmms)))
    if rows_per_block < rows:  # many sequences per HMM: fewer HMMs, more rows each
        hmms = max(1, BUFFER_BYTES // (per_row * rows))
        rows_per_block = max(1, min(rows, BUFFER_BYTES // (per_row * hmms)))
    return hmms, rows_per_block


def _filter_block(initial, transition, emission, tokens, keep_beliefs: bool) -> dict[str, torch.Tensor]:
    """The recursion for one block: ``n`` HMMs, ``r`` sequences each, all ``T`` steps.

    All likelihoods ``O(s, o_t)`` are gathered before the loop, and one product per step gives
    both the next predicted belief and the next-token predictive:
    ``b_t @ [T | T O] = [b^-_{t+1} | P(o_{t+1} | o_<=t)]``, written in place into a buffer, so a
    step is four tensor operations.
    """
    n, r, T = tokens.shape
    S = transition.shape[-1]
    step = torch.cat([transition, transition @ emission], dim=-1).contiguous()  # (n, S, S + p)
    emission_by_token = emission.transpose(1, 2)  # (n, p, S)
    likelihood = emission_by_token[torch.arange(n, device=tokens.device)[:, None, None], tokens]  # (n, r, T, S)
    likelihood = likelihood.permute(2, 0, 1, 3).contiguous()  # (T, n, r, S)
    advanced = torch.empty(T, n, r, step.shape[-1], dtype=step.dtype, device=step.device)
    normalizers = torch.empty(T, n, r, 1, dtype=step.dtype, device=step.device)
    filtered = torch.empty(T if keep_beliefs else 1, n, r, S, dtype=step.dtype, device=step.device)
    predicted = initial[:, None, :].expand(n, r, S)
    for t in range(T):
        joint = predicted * likelihood[t]
        torch.sum(joint, dim=-1, keepdim=True, out=normalizers[t])
        belief = filtered[t if keep_beliefs else 0]
        torch.div(joint, normalizers[t], out=belief)
        torch.bmm(belief, step, out=advanced[t])
        predicted = advanced[t, ..., :S]
    out = {
        "next_token": advanced[..., S:].permute(1, 2, 0, 3),
        "log_normalizers": normalizers.squeeze(-1).log().permute(1, 2, 0),
    }
    if keep_beliefs:
        first = initial[:, None, None, :].expand(n, r, 1, S)
        out["predicted"] = torch.cat([first, advanced[:-1, ..., :S].permute(1, 2, 0, 3)], dim=2)
        out["filtered"] = filtered.permute(1, 2, 0, 3)
    return out


def _filter_groups(groups: _Groups, keep_beliefs: bool) -> dict[str, torch.Tensor]:
    """Run :func:`_filter_block` over ``(G, R)`` groups; tensors come back as ``(G, R, T, .)``:
    always ``next_token`` and ``log_normalizers``, plus ``predicted`` and ``filtered`` when
    ``keep_beliefs``."""
    G, R, T = groups.tokens.shape
    S, p = groups.emission.shape[-2:]
    dtype, device = groups.transition.dtype, groups.transition.device
    widths = {"next_token": (p,), "log_normalizers": ()}
    if keep_beliefs:
        widths.update(predicted=(S,), filtered=(S,))
    out = {name: torch.empty(G, R, T, *tail, dtype=dtype, device=device) for name, tail in widths.items()}
    hmms, rows = _block_shape(R, T, S, p, groups.transition.element_size())
    for g in range(0, G, hmms):
        gs = slice(g, min(g + hmms, G))
        for r in range(0, R, rows):
            rs = slice(r, min(r + rows, R))
            block = _filter_block(groups.initial[gs], groups.transition[gs], groups.emission[gs], groups.tokens[gs, rs], keep_beliefs)
            for name, value in block.items():
                out[name][gs, rs] = value
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
