"""The Bayes-optimal predictor of a mixture of HMMs on in-context prompts.

For a prompt ``x_1..x_N`` (delimiter = token ``p``) and tasks ``k`` with weights ``pi_k``::

    log w_k(t) = log pi_k + sum_{u <= t, x_u != p} log P_k(x_u | segment prefix before u)
    P(x_{t+1} = o | x_<=t) = sum_k softmax_k(log w_k(t)) P_k(o | current segment prefix x_<=t)

A delimiter contributes no likelihood and restarts the chain: the next predicted belief is
``initial_k``. Row t of the result is the distribution of the *HMM token* following position t:
where the prompt format puts a delimiter next, that row is the HMM's continuation (the delimiter
itself is deterministic and is excluded from every metric).

With ``decode=True`` it also returns the Bayes-optimal *decoders* of the task and of the hidden
state at every position (the ceilings of any probe reading them from a prefix)::

    P(task = k | x_<=t) = softmax_k(log w_k(t))
    P(s_t = s | x_<=t) = sum_k P(task = k | x_<=t) P_k(s_t = s | current segment x_<=t)

(given the task, earlier segments carry no information about the current state: each segment is
a fresh run of the HMM). The decoders answer ``argmax``; their expected accuracy at t is the
largest posterior probability.

Memory is bounded by processing tasks in chunks and merging chunks with an online log-sum-exp:
with ``m`` a running max of ``log w``, the numerator ``sum_k e^{log w_k - m} P_k`` and the
denominator ``sum_k e^{log w_k - m}`` are rescaled by ``e^{m_old - m_new}`` whenever ``m`` grows.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from hmm.model import check_tokens
from hmm.prompts import Mixture

DEFAULT_CHUNK_BYTES = 4 << 20
"""Bytes of per-chunk state (matrices, beliefs, predictions) for :func:`bayes_predictive`: small
enough that a chunk's temporaries stay in cache between the tensor operations of one step
(measured at K = 1024, S = 128, 256 prompts: 62 GFLOP/s at 4 MiB, 58 at 8, 51 at 16, 37 at 64)."""


class BayesPrediction(NamedTuple):
    next_token: torch.Tensor
    """``(B, N, p)``: row t is the mixture's ``P(next HMM token | prompt[:t+1])``."""
    task_log_posterior: torch.Tensor
    """``(B, K)``: ``log P(task = k | whole prompt)``."""
    task_map: torch.Tensor | None = None
    """``(B, N)`` int64, with ``decode=True``: ``argmax_k P(task = k | prompt[:t+1])`` (ties: the lowest k)."""
    task_map_probability: torch.Tensor | None = None
    """``(B, N)``, with ``decode=True``: ``max_k P(task = k | prompt[:t+1])``."""
    state_posterior: torch.Tensor | None = None
    """``(B, N, S)``, with ``decode=True``: ``P(s_t = s | prompt[:t+1])`` over the state index s
    (mixed over tasks); NaN at delimiter positions, which have no hidden state."""


def _chunk_size(num_prompts: int, num_states: int, num_tokens: int, itemsize: int, chunk_bytes: int) -> int:
    per_task = itemsize * (num_states * (num_states + num_tokens) + num_prompts * (3 * num_states + 2 * num_tokens))
    return max(1, chunk_bytes // per_task)


def bayes_predictive(mixture: Mixture, tokens, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                     decode: bool = False) -> BayesPrediction:
    """Exact posterior-predictive of ``mixture`` at every position of every prompt.

    Args:
        mixture: K HMMs and their weights.
        tokens: ``(B, N)`` prompts, tokens ``0..p`` with ``p`` the delimiter.
        chunk_bytes: memory budget of one chunk of tasks (results do not depend on it).
        decode: also return the Bayes-optimal task and hidden-state decoders (module docstring).

    Raises ``ValueError`` for invalid tokens and for a prompt that no task can emit.
    """
    model = mixture.hmm
    tokens = check_tokens(tokens, model.num_tokens, "tokens", allow_delimiter=True).to(model.device)
    if tokens.ndim != 2:
        raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected (B, N)")
    B, N = tokens.shape
    K, S, p = mixture.num_tasks, model.num_states, model.num_tokens
    dtype, device = model.dtype, model.device
    is_delimiter = tokens == p
    safe_tokens = tokens.masked_fill(is_delimiter, 0)
    log_weights = mixture.weights.log()

    running_max = torch.full((B, N), -torch.inf, dtype=dtype, device=device)
    numerator = torch.zeros(B, N, p, dtype=dtype, device=device)
    denominator = torch.zeros(B, N, dtype=dtype, device=device)
    task_log_weight = torch.empty(B, K, dtype=dtype, device=device)
    if decode:
        state_numerator = torch.zeros(B, N, S, dtype=dtype, device=device)
        task_map = torch.zeros(B, N, dtype=torch.int64, device=device)

    # Per position: does any / every prompt have a delimiter here? (Python bools, so the common
    # cases -- no delimiter, or the fixed format's all-delimiter columns -- need no masking.)
    any_delimiter = is_delimiter.any(0).tolist()
    all_delimiter = is_delimiter.all(0).tolist()
    chunk = _chunk_size(B, S, p, model.transition.element_size(), chunk_bytes)
    for start in range(0, K, chunk):
        sl = slice(start, min(start + chunk, K))
        transition = model.transition[sl]
        emission = model.emission[sl]
        # One product gives both the next belief and the next-token predictive:
        # filtered @ [T | T O] = [b^-_{t+1} | b^-_{t+1} O].
        step = torch.cat([transition, transition @ emission], dim=-1).contiguous()  # (c, S, S + p)
        emission_by_token = emission.transpose(1, 2).contiguous()  # (c, p, S)
        initial = model.initial[sl][:, None, :]  # (c, 1, S)
        initial_prediction = initial @ emission  # (c, 1, p)
        c = step.shape[0]
        predicted = initial.expand(c, B, S)
        log_weight = log_weights[sl][:, None].expand(c, B).clone()
        for t in range(N):
            if all_delimiter[t]:
                predicted = initial.expand(c, B, S)
                prediction = initial_prediction.expand(c, B, p)
                filtered = None
            else:
                likelihood = emission_by_token[:, safe_tokens[:, t], :]  # (c, B, S)
                joint = predicted * likelihood
                normalizer = joint.sum(-1, keepdim=True)
                # A task that cannot emit the token gets normalizer 0: its belief becomes 0, its
                # log-weight -inf, and it contributes exactly 0 from then on.
                filtered = joint / normalizer.clamp_min(torch.finfo(dtype).tiny)
                log_normalizer = normalizer.squeeze(-1).log()
                advanced = torch.bmm(filtered, step)
                predicted, prediction = advanced[..., :S], advanced[..., S:]
                if any_delimiter[t]:
                    delimiter_now = is_delimiter[:, t]
                    log_normalizer = log_normalizer.masked_fill(delimiter_now, 0.0)
                    predicted = torch.where(delimiter_now[None, :, None], initial, predicted)
                    prediction = torch.where(delimiter_now[None, :, None], initial_prediction, prediction)
                log_weight = log_weight + log_normalizer
            chunk_max = log_weight.amax(0)  # (B,)
            new_max = torch.maximum(running_max[:, t], chunk_max)
            # A prompt no task seen so far can emit has new_max = -inf; shifting by 0 then keeps
            # every weight at exactly 0 instead of producing exp(-inf + inf) = NaN.
            shift = new_max.masked_fill(torch.isneginf(new_max), 0.0)
            scale_old = (running_max[:, t] - shift).exp()
            chunk_weight = (log_weight - shift[None, :]).exp()  # (c, B)
            numerator[:, t] = numerator[:, t] * scale_old[:, None] + torch.einsum("cb,cbp->bp", chunk_weight, prediction)
            denominator[:, t] = denominator[:, t] * scale_old + chunk_weight.sum(0)
            if decode:
                if filtered is not None:
                    state_numerator[:, t] = (state_numerator[:, t] * scale_old[:, None]
                                             + torch.einsum("cb,cbs->bs", chunk_weight, filtered))
                # A chunk takes over the MAP task only where its best weight beats the earlier chunks'.
                chunk_best = log_weight.argmax(0) + start
                task_map[:, t] = torch.where(chunk_max > running_max[:, t], chunk_best, task_map[:, t])
            running_max[:, t] = new_max
        task_log_weight[:, sl] = log_weight.transpose(0, 1)

    impossible = torch.isneginf(running_max)
    if bool(impossible.any()):
        b, t = (int(i) for i in impossible.nonzero()[0])
        raise ValueError(f"tokens: prompt {b} up to position {t} has probability 0 under every task; expected a prompt the mixture can emit")
    next_token = numerator / denominator[..., None]
    task_log_posterior = task_log_weight - torch.logsumexp(task_log_weight, dim=-1, keepdim=True)
    if not decode:
        return BayesPrediction(next_token, task_log_posterior)
    # The running max is the MAP task's log-weight, so its posterior is e^0 / denominator.
    state_posterior = (state_numerator / denominator[..., None]).masked_fill(is_delimiter[..., None], torch.nan)
    return BayesPrediction(next_token, task_log_posterior, task_map, 1.0 / denominator, state_posterior)
