"""How the heads of a trained run attend: previous-token and induction-style scores per layer and
head, beside what a head spreading its weight evenly scores."""
from __future__ import annotations

import torch


def induction_targets(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` int64: for position ``t``, the position ``s(t) + 1`` after the previous
    occurrence ``s(t) = max{s < t : x_s = x_t}`` of the current token, or -1 where there is none
    or where ``s(t) = t - 1`` (then the "token after" is ``t`` itself, which says nothing about an
    induction mechanism)."""
    batch, length = tokens.shape
    positions = torch.arange(length).expand(batch, length)
    num_values = int(tokens.max()) + 1
    # last[b, t, v] = the last position s <= t with x_s = v (-1 if none).
    occurrences = torch.where(tokens[..., None] == torch.arange(num_values), positions[..., None], -1)
    last = occurrences.cummax(dim=1).values
    previous = torch.full((batch, length), -1, dtype=torch.int64)
    previous[:, 1:] = last[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)
    valid = (previous >= 0) & (previous <= positions - 2)
    return torch.where(valid, previous + 1, -1)


def attention_scores(cache: dict[str, torch.Tensor], tokens: torch.Tensor) -> dict:
    """Per layer and head, from the attention weights ``A[t, s]`` recorded in ``cache`` (from
    :meth:`RoFormer.run_with_cache` on ``tokens (B, N)``)::

        previous_token[l][h] = mean over (b, t >= 1) of A[t, t - 1]
        induction[l][h]      = mean over (b, t) with a target of A[t, s(t) + 1]
        uniform_induction    = mean over the same (b, t) of 1 / (t + 1)

    with ``s(t) + 1`` from :func:`induction_targets`. ``uniform_induction`` is what a head that
    spreads its weight evenly over the causal window scores; an induction head scores near 1.
    """
    targets = induction_targets(tokens)
    has_target = targets >= 0
    length = tokens.shape[1]
    uniform = (1.0 / torch.arange(1, length + 1, dtype=torch.float64)).expand_as(targets)
    result = {"previous_token": [], "induction": [], "uniform_induction": float(uniform[has_target].mean())}
    num_layers = sum(name.endswith("attn.hook_pattern") for name in cache)
    for layer in range(num_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"].double()
        previous = pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))
        gathered = pattern.gather(-1, targets.clamp_min(0)[:, None, :, None].expand(-1, pattern.shape[1], -1, 1))
        induction = gathered.squeeze(-1).permute(1, 0, 2)[:, has_target].mean(-1)
        result["previous_token"].append(previous.tolist())
        result["induction"].append(induction.tolist())
    return result
