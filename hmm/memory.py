"""The L-memory predictor of Lemma 1 and the linear predictors on one-hot histories.

L-memory predictor (docs/construction.md, section 0.3): at position t (0-based) forget everything before
``t-L+1``, put the *predicted* belief of ``s_{t-L+1}`` equal to a fixed prior ``b0`` and filter
only ``o_{t-L+1..t}``::

    P_L(o_{t+1} = . | o_{t-L+1..t}) = next-token predictive of HMM(initial=b0, T, O) on the window.

Where the window reaches the start of the sequence (``t - L + 1 <= 0``, i.e. ``t <= L - 1``) the
true prior of ``s_0`` is known, so the window is filtered from ``initial`` and ``P_L`` equals the
exact predictive there.

Priors ``b0``: ``"stationary"`` (the chain's stationary law), ``"uniform"``, a tensor ``(..., S)``,
or the G-optimal-design prior of :func:`g_optimal_prior` for a low-rank transition.

History features (docs/construction.md, section 0.3, the linear model)::

    x_t = [e(o_t); e(o_{t-1}); ...; e(o_{t-L+1})] in R^{pL}       (concatenated one-hot)
    z_t = e(o_t + p o_{t-1} + ... + p^{L-1} o_{t-L+1}) in R^{p^L}  (joint one-hot of the tuple)

Blocks before the start of the sequence are zero (``x``) or the row is zero (``z``). The linear
model ``P_L ~ W x_t`` is generally not exact for L > 1 (its error is the *linearization error*);
on ``z_t`` it is exact, since ``z_t`` indexes every history separately.
"""
from __future__ import annotations

import torch

from hmm.filtering import next_token_probs
from hmm.markov import stationary_distribution
from hmm.model import HMM, as_tensor, check_stochastic, check_tokens
from hmm.prompts import Mixture, Prompts


def _window_start_check(L: int, length: int) -> None:
    if not isinstance(L, int) or L < 1:
        raise ValueError(f"L: {L!r}; expected an integer >= 1")
    if L > length:
        raise ValueError(f"L: {L} is longer than the sequence (length {length}); expected 1 <= L <= {length}")


def resolve_prior(model: HMM, prior) -> torch.Tensor:
    """``b0`` as a tensor ``(..., S)`` from ``"stationary"``, ``"uniform"`` or an explicit array."""
    if isinstance(prior, str):
        if prior == "stationary":
            return stationary_distribution(model.transition)
        if prior == "uniform":
            return torch.full((model.num_states,), 1.0 / model.num_states, dtype=model.dtype, device=model.device)
        raise ValueError(f"prior: {prior!r}; expected 'stationary', 'uniform' or a probability vector (..., S)")
    b0 = as_tensor(prior, "prior", dtype=model.dtype, device=model.device)
    if b0.ndim < 1 or b0.shape[-1] != model.num_states:
        raise ValueError(f"prior: shape {tuple(b0.shape)}; expected (..., S) with S = {model.num_states}")
    check_stochastic(b0, "prior")
    return b0


def memory_predictor(model: HMM, obs, L: int, prior="stationary") -> torch.Tensor:
    """``(*C, T, p)``: row t is ``P_L(o_{t+1} | o_{t-L+1..t})`` (see module docstring).

    Batch shape ``C`` broadcasts the model batch with ``obs.shape[:-1]`` as in
    :func:`hmm.next_token_probs`.
    """
    tokens = check_tokens(obs, model.num_tokens).to(model.device)
    length = tokens.shape[-1]
    _window_start_check(L, length)
    b0 = resolve_prior(model, prior)
    exact_head = next_token_probs(model, tokens[..., :L])  # t = 0..L-1: windows reach the start
    if L == length:
        return exact_head
    windows = tokens[..., 1:].unfold(-1, L, 1)  # (..., T-L, L): windows ending at t = L..T-1
    windowed = HMM(b0[..., None, :], model.transition[..., None, :, :], model.emission[..., None, :, :])
    tail = next_token_probs(windowed, windows)[..., -1, :]
    batch = torch.broadcast_shapes(exact_head.shape[:-2], tail.shape[:-2])
    return torch.cat([exact_head.expand(*batch, -1, -1), tail.expand(*batch, -1, -1)], dim=-2)


def own_task_predictive(mixture: Mixture, prompts: Prompts) -> torch.Tensor:
    """``(B, N, p)`` float64: the exact next-token distribution of each prompt's own HMM (task
    ``prompts.task_ids[b]`` of ``mixture``) at every position -- :func:`memory_predictor` with every
    segment's whole length as L, the oracle; and the Rao-Blackwellised training target
    (``E[one_hot(x_{t+1}) | x_{<=t}, task]``).

    Every segment restarts the chain from the task's ``initial`` law, so row t of a segment is the
    forward filter of that segment's tokens up to t (:func:`hmm.filtering.next_token_probs`, all
    demonstrations of all prompts in one batch); a delimiter row is the next segment's first-token
    law ``mu^T O``; the last row predicts past the prompt's end (it is never a target).
    """
    fmt = prompts.format
    model = mixture.hmm[prompts.task_ids.to(mixture.hmm.device)]
    tokens = prompts.tokens.to(mixture.hmm.device)
    probabilities = torch.empty(*tokens.shape, mixture.num_tokens, dtype=torch.float64, device=tokens.device)
    span = fmt.demo_length + 1
    if fmt.num_demos:
        demos = tokens[:, : fmt.num_demos * span].view(-1, fmt.num_demos, span)[:, :, : fmt.demo_length]
        each_demo = HMM._derived(model.initial[:, None], model.transition[:, None], model.emission[:, None])
        demo_rows = probabilities[:, : fmt.num_demos * span].view(-1, fmt.num_demos, span, mixture.num_tokens)
        demo_rows[:, :, : fmt.demo_length] = next_token_probs(each_demo, demos).double()
        demo_rows[:, :, fmt.demo_length] = (model.initial[:, None, :] @ model.emission).double()
    start = fmt.num_demos * span
    probabilities[:, start:] = next_token_probs(model, tokens[:, start:]).double()
    return probabilities


def one_hot_history(obs, L: int, num_tokens: int) -> torch.Tensor:
    """``(..., T, p*L)`` float64: concatenated one-hot history ``x_t``, block r = ``e(o_{t-r})``
    (zero where ``t - r < 0``)."""
    tokens = check_tokens(obs, num_tokens)
    _window_start_check(L, tokens.shape[-1])
    one_hot = torch.nn.functional.one_hot(tokens, num_tokens).to(torch.float64)
    blocks = [torch.nn.functional.pad(one_hot[..., : tokens.shape[-1] - r, :], (0, 0, r, 0)) for r in range(L)]
    return torch.cat(blocks, dim=-1)


def joint_one_hot_history(obs, L: int, num_tokens: int) -> torch.Tensor:
    """``(..., T, p**L)`` float64: one-hot of ``sum_r o_{t-r} p^r``; rows with ``t < L-1`` are zero."""
    tokens = check_tokens(obs, num_tokens)
    _window_start_check(L, tokens.shape[-1])
    windows = tokens.unfold(-1, L, 1)  # (..., T-L+1, L), last entry is o_t
    powers = num_tokens ** torch.arange(L - 1, -1, -1, device=tokens.device)
    index = (windows * powers).sum(-1)
    joint = torch.nn.functional.one_hot(index, num_tokens**L).to(torch.float64)
    return torch.nn.functional.pad(joint, (0, 0, L - 1, 0))


def least_squares(features: torch.Tensor, targets: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """``W (..., q, D)`` minimising ``sum_i ||y_i - W x_i||^2 + ridge ||W||_F^2``; for ``ridge = 0``
    the minimum-norm solution ``W = Y^T X^+`` (the one gradient descent from 0 converges to:
    its iterates stay in the row space of X). Leading dimensions are a batch of problems.

    Args:
        features: ``(..., n, D)`` rows ``x_i``.
        targets: ``(..., n, q)`` rows ``y_i``.
    """
    if features.ndim < 2 or targets.ndim != features.ndim or features.shape[:-1] != targets.shape[:-1]:
        raise ValueError(
            f"features/targets: shapes {tuple(features.shape)}, {tuple(targets.shape)}; expected (..., n, D) and (..., n, q)"
        )
    if ridge < 0:
        raise ValueError(f"ridge: {ridge}; expected >= 0")
    if ridge == 0:
        return (torch.linalg.pinv(features) @ targets).mT
    gram = features.mT @ features + ridge * torch.eye(features.shape[-1], dtype=features.dtype)
    return torch.linalg.solve(gram, features.mT @ targets).mT


def g_optimal_design(features: torch.Tensor, tolerance: float = 1e-3, max_iterations: int = 100_000) -> torch.Tensor:
    """Kiefer-Wolfowitz G-optimal design ``rho`` over the rows ``psi_s`` of ``features (S, d)``.

    Minimises ``max_s psi_s^T V(rho)^+ psi_s`` with ``V(rho) = sum_s rho_s psi_s psi_s^T``; by the
    Kiefer-Wolfowitz theorem the optimum equals ``rank(features)`` (= d for full rank). Solved by
    Fedorov-Wynn (Frank-Wolfe on ``log det V``): with ``g_s`` the leverage and ``s* = argmax g``,
    ``rho <- (1 - a) rho + a e_{s*}``, ``a = (g*/r - 1) / (g* - 1)``, until ``g* <= r (1 + tol)``.
    """
    rank = int(torch.linalg.matrix_rank(features))
    rho = torch.full((features.shape[0],), 1.0 / features.shape[0], dtype=features.dtype)
    for _ in range(max_iterations):
        design = features.T @ (rho[:, None] * features)
        leverage = ((features @ torch.linalg.pinv(design, hermitian=True)) * features).sum(-1)
        best = int(leverage.argmax())
        top = float(leverage[best])
        if top <= rank * (1 + tolerance):
            return rho
        step = (top / rank - 1) / (top - 1)
        rho = (1 - step) * rho
        rho[best] += step
    raise RuntimeError(f"g_optimal_design: no convergence in {max_iterations} iterations (max leverage {top:.6g}, rank {rank})")


def g_optimal_prior(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Prior ``b0 = rho (left @ right)`` with ``rho`` the G-optimal design over ``psi_s = left[s]``.

    Our reading of the paper's choice: the unknown belief of ``s_{t-L}`` is replaced by the design
    ``rho``, which covers every direction of ``{psi(s)}`` (every ``psi_s^T V^{-1} psi_s <= d``), and
    pushed one step through ``T = left @ right`` to give the predicted belief of ``s_{t-L+1}``.
    """
    return g_optimal_design(left) @ (left @ right)
