"""Relative-offset attention profiles and the comparison of trained heads with the hand-built
history layers.

Offset profile of a head: for offsets ``d = 0..max_offset`` the mean attention mass that a query
at position i puts on key ``i - d`` (entry d; entry 0 is the query's own position), averaged over
the chosen query positions and prompts; a last entry holds all remaining mass (further back, or
ahead in a non-causal network), so a profile sums to 1 and two profiles are comparable as
distributions.

Similarity of two profiles ``a``, ``b`` (the *matching score* of docs/analysis.md):
``1 - TV(a, b) = sum_d min(a_d, b_d)`` in [0, 1]; for a hand-built layer with all mass at one
offset ``-d`` it is the trained head's mass at ``-d``.

Offset summary of a head (:func:`offset_sums`): the mean of its attention, or of its logits, at
each relative offset ``-d``, over the queries for which key ``i - d`` exists.

Hand-built history layers (``construction``, sequential variant): layer r attends from column i
to column ``i - 1`` and copies ``history.{r-1}`` there, so its *direct* profile is all at offset
-1, while what it writes, ``history.r = o_{i-r}``, comes from offset ``-r``: the *composed*
attention ``C_r = A_r A_{r-1} ... A_1`` (row i: where the content of ``history.r`` at column i
was read) puts all mass at ``-r``.
"""
from __future__ import annotations

import torch


def _at_offsets(pattern: torch.Tensor, query_positions: torch.Tensor,
                max_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, H, Q, max_offset + 1)`` entries ``pattern[..., h, i, i - d]`` at the chosen queries i
    (``i - d`` clamped to 0) and ``(Q, max_offset + 1)`` whether ``i - d >= 0``; ``pattern`` is
    ``(H, N, N)`` or ``(B, H, N, N)``."""
    length = pattern.shape[-1]
    if isinstance(max_offset, bool) or not isinstance(max_offset, int) or not 1 <= max_offset < length:
        raise ValueError(f"max_offset: {max_offset!r}; expected an integer in 1..{length - 1} (prompt of {length} positions)")
    batched = pattern if pattern.dim() == 4 else pattern[None]
    queries = torch.nonzero(query_positions).squeeze(1).to(pattern.device)
    keys = queries[:, None] - torch.arange(max_offset + 1, device=pattern.device)
    rows = batched[:, :, queries].double()
    index = keys.clamp_min(0)[None, None].expand(*rows.shape[:3], max_offset + 1)
    return rows.gather(3, index), keys >= 0


def offset_profile(pattern: torch.Tensor, query_positions: torch.Tensor, max_offset: int) -> torch.Tensor:
    """``(H, max_offset + 2)`` float64: entry ``d`` (``d = 0..max_offset``) is the mean over prompts
    and query positions of ``pattern[..., h, i, i - d]`` (0 where ``i - d < 0``), the last entry
    the rest of the mass. ``pattern`` is ``(H, N, N)`` or ``(B, H, N, N)``, rows summing to 1."""
    entries, valid = _at_offsets(pattern, query_positions, max_offset)
    profile = (entries * valid).mean(dim=(0, 2))
    batched = pattern if pattern.dim() == 4 else pattern[None]
    queries = torch.nonzero(query_positions).squeeze(1).to(pattern.device)
    rest = (batched[:, :, queries].double().sum(3).mean(dim=(0, 2)) - profile.sum(1)).clamp_min(0.0)
    return torch.cat([profile, rest[:, None]], dim=1).cpu()


def offset_sums(values: torch.Tensor, query_positions: torch.Tensor, max_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H, max_offset + 1)`` sums over prompts and chosen queries i of ``values[..., h, i, i - d]``
    where ``i - d >= 0``, and ``(max_offset + 1,)`` how many (prompt, query) pairs each offset
    counted: their ratio is the mean of ``values`` at relative offset ``-d`` (accumulate both over
    batches first). ``values`` is ``(H, N, N)`` or ``(B, H, N, N)`` (attention, or logits)."""
    entries, valid = _at_offsets(values, query_positions, max_offset)
    batch = entries.shape[0]
    return (entries * valid).sum(dim=(0, 2)).cpu(), (valid.sum(0) * batch).double().cpu()


def composed_history_attention(history_weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """``[C_1, ..., C_R]`` with ``C_r = A_r C_{r-1}``, ``C_1 = A_1``, for single-head attention
    matrices ``A_r (N, N)`` of the hand-built history layers in order (module docstring)."""
    composed, current = [], None
    for weights in history_weights:
        current = weights if current is None else weights @ current
        composed.append(current)
    return composed


def profile_similarity(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """``sum_d min(a_d, b_d) = 1 - TV(a, b)`` over the last dimension (broadcasting)."""
    return torch.minimum(first, second).sum(-1)


def best_matching_heads(reference: dict[str, torch.Tensor], trained: torch.Tensor) -> dict[str, dict]:
    """For each reference profile ``(K+2,)`` the trained head ``(layer, head)`` of ``trained
    (L, H, K+2)`` with the largest :func:`profile_similarity`, its similarity and the whole
    ``(L, H)`` similarity matrix (layers 1-based, as in the figures)."""
    matches = {}
    for name, profile in reference.items():
        similarity = profile_similarity(trained, profile)
        flat = int(similarity.argmax())
        layer, head = divmod(flat, trained.shape[1])
        matches[name] = {
            "layer": layer + 1,
            "head": head,
            "similarity": float(similarity[layer, head]),
            "similarity_by_head": similarity.tolist(),
        }
    return matches
