"""What the analyses read from the two networks, in one shape for both.

* Residual streams at chosen positions, ``{name: (B * positions, width)}``: for the RoFormer
  ``embedding`` and ``layer l`` (``blocks.{l-1}.hook_resid_post``); for the hand-built network
  ``embedding`` and each of its layer names (``history.1``, ..., ``label``, ``gd.1``, ...,
  ``readout``).
* Pre-softmax attention logits ``{name: (B, H, N, N)}`` (a :data:`ScoresFunction`) and attention
  weights, indexed by prompt position.

The hand-built network (``construction``) prepends a delimiter column, so its column c holds
prompt token c-1: column 0 is dropped everywhere below, and position t of the prompt is column
t+1. It is built for each prompt with :func:`construction.parameters_for_prompt` (its step size
is ``1/lambda_max`` of that prompt's regression problem), history length
``L = max_distance + 1`` (history layers 1..max_distance) and :data:`HAND_BUILT_STEPS` GD steps.
"""
from __future__ import annotations

import torch
from tqdm import tqdm

import construction
from empirical.analysis.offsets import composed_history_attention, offset_profile, offset_sums
from empirical.analysis.shuffle import ScoresFunction
from empirical.training.model import RoFormer

HAND_BUILT_STEPS = 2
"""Gradient-descent layers of the hand-built network used for comparison."""


def roformer_layer_name(layer: int) -> str:
    """``layer l`` for block ``l - 1`` (1-based, as in the figures)."""
    return f"layer {layer + 1}"


@torch.no_grad()
def roformer_streams(model: RoFormer, tokens: torch.Tensor, positions: torch.Tensor, device: torch.device,
                     batch_size: int, description: str) -> dict[str, torch.Tensor]:
    """Residual streams (float32, CPU) at ``positions (N,) bool`` of every prompt, prompt-major."""
    model.eval()
    columns = torch.nonzero(positions).squeeze(1).to(device)
    names = ["embedding"] + [roformer_layer_name(layer) for layer in range(model.config.num_layers)]
    hooks = ["hook_embed"] + [f"blocks.{layer}.hook_resid_post" for layer in range(model.config.num_layers)]
    chunks: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for batch in tqdm(tokens.split(batch_size), desc=description, unit="batch", leave=False):
        _, cache = model.run_with_cache(batch.to(device))
        for name, hook in zip(names, hooks):
            chunks[name].append(cache[hook][:, columns].float().flatten(0, 1).cpu())
    return {name: torch.cat(parts) for name, parts in chunks.items()}


def roformer_scores(model: RoFormer, device: torch.device) -> ScoresFunction:
    """The model's pre-softmax logits ``{layer l: (B, H, N, N)}`` (on ``device``)."""

    @torch.no_grad()
    def scores(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        model.eval()
        _, cache = model.run_with_cache(tokens.to(device))
        return {roformer_layer_name(layer): cache[f"blocks.{layer}.attn.hook_attn_scores"]
                for layer in range(model.config.num_layers)}

    return scores


@torch.no_grad()
def roformer_patterns(model: RoFormer, tokens: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Attention weights ``(B, L, H, N, N)`` of a few prompts (float32, CPU)."""
    model.eval()
    _, cache = model.run_with_cache(tokens.to(device))
    return torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"].float().cpu()
                        for layer in range(model.config.num_layers)], dim=1)


def hand_built_network(tokens: torch.Tensor, num_tokens: int, max_distance: int) -> construction.Network:
    """The hand-built network built for the prompt ``tokens (N,)``: history length
    ``max_distance + 1``, :data:`HAND_BUILT_STEPS` GD steps, spec from
    :func:`construction.parameters_for_prompt`. Its first forward pass also converts its weight
    matrices (cached for later passes)."""
    history_length = max_distance + 1
    spec = construction.parameters_for_prompt(tokens.numpy(), num_tokens, history_length, HAND_BUILT_STEPS)
    return construction.build_network(spec)


def hand_built_trace(tokens: torch.Tensor, num_tokens: int, max_distance: int) -> construction.Trace:
    """Forward pass (float64) of the hand-built network built for the prompt ``tokens (N,)``."""
    return hand_built_network(tokens, num_tokens, max_distance).forward(tokens.numpy())


def hand_built_streams(tokens: torch.Tensor, positions: torch.Tensor, num_tokens: int, max_distance: int,
                       description: str) -> dict[str, torch.Tensor]:
    """Residual streams of the hand-built network at ``positions`` of every prompt, prompt-major."""
    columns = torch.nonzero(positions).squeeze(1) + 1
    chunks: dict[str, list[torch.Tensor]] = {}
    for prompt in tqdm(tokens, desc=description, unit="prompt", leave=False):
        trace = hand_built_trace(prompt, num_tokens, max_distance)
        for name, stream in zip(("embedding",) + trace.layer_names, trace.residuals):
            chunks.setdefault(name, []).append(stream[:, columns].T.float())
    return {name: torch.cat(parts) for name, parts in chunks.items()}


def hand_built_scores(num_tokens: int, max_distance: int) -> ScoresFunction:
    """The hand-built network's logits ``{layer name: (B, H, N, N)}`` in prompt positions."""

    def scores(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        traces = [hand_built_trace(prompt, num_tokens, max_distance) for prompt in tokens]
        return {name: torch.stack([trace.attn_logits[name][:, 1:, 1:] for trace in traces])
                for name in traces[0].attn_logits}

    return scores


def hand_built_weights(trace: construction.Trace) -> dict[str, torch.Tensor]:
    """Attention weights ``{layer name: (H, N, N)}`` of a trace, in prompt positions."""
    return {name: weights[:, 1:, 1:] for name, weights in trace.attn_weights.items()}


def hand_built_composed_history(trace: construction.Trace) -> dict[str, torch.Tensor]:
    """``{history.r: C_r (N, N)}``, :func:`composed_history_attention` of the trace's history
    layers, composed over all columns and then restricted to prompt positions."""
    names = trace.layers_of(construction.Stage.HISTORY)
    composed = composed_history_attention([trace.attn_weights[name][0] for name in names])
    return {name: matrix[1:, 1:] for name, matrix in zip(names, composed)}


@torch.no_grad()
def roformer_offset_profiles(model: RoFormer, tokens: torch.Tensor, query_positions: torch.Tensor, max_offset: int,
                             device: torch.device, batch_size: int, description: str) -> torch.Tensor:
    """``(L, H, max_offset + 2)``: :func:`offset_profile` of every head over all ``tokens``."""
    total = torch.zeros(model.config.num_layers, model.config.num_heads, max_offset + 2, dtype=torch.float64)
    for batch in tqdm(tokens.split(batch_size), desc=description, unit="batch", leave=False):
        _, cache = model.run_with_cache(batch.to(device))
        for layer in range(model.config.num_layers):
            pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
            total[layer] += offset_profile(pattern, query_positions, max_offset) * len(batch)
    return total / len(tokens)


def centered_logits(scores: torch.Tensor) -> torch.Tensor:
    """``s[..., i, j] - mean_{j' <= i} s[..., i, j']`` for causal logits (``-inf`` above the diagonal,
    as in ``hook_attn_scores``; those entries stay ``-inf``): a softmax ignores a per-query constant,
    so only logits relative to the query's mean compare across queries and prompts."""
    visible = torch.isfinite(scores)
    mean = scores.masked_fill(~visible, 0.0).sum(-1, keepdim=True) / visible.sum(-1, keepdim=True)
    return scores - mean


@torch.no_grad()
def roformer_offset_summary(model: RoFormer, tokens: torch.Tensor, query_positions: torch.Tensor, max_offset: int,
                            device: torch.device, batch_size: int, description: str) -> dict[str, torch.Tensor]:
    """``{"attention": (L, H, max_offset + 1), "logit": (L, H, max_offset + 1)}``: every head's mean
    attention weight and mean :func:`centered_logits` at relative offsets ``0, -1, ..., -max_offset``
    (:func:`offset_sums`) over ``tokens`` and the chosen queries."""
    sums = {kind: torch.zeros(model.config.num_layers, model.config.num_heads, max_offset + 1, dtype=torch.float64)
            for kind in ("attention", "logit")}
    counts = torch.zeros(max_offset + 1, dtype=torch.float64)
    for batch in tqdm(tokens.split(batch_size), desc=description, unit="batch", leave=False):
        _, cache = model.run_with_cache(batch.to(device))
        for layer in range(model.config.num_layers):
            pattern, count = offset_sums(cache[f"blocks.{layer}.attn.hook_pattern"], query_positions, max_offset)
            logit, _ = offset_sums(centered_logits(cache[f"blocks.{layer}.attn.hook_attn_scores"].double()),
                                   query_positions, max_offset)
            sums["attention"][layer] += pattern
            sums["logit"][layer] += logit
        counts += count
    return {kind: total / counts for kind, total in sums.items()}
