"""The shuffle test (the paper's Figure 2): do attention logits from the test sequence to the
demonstrations depend on where the demonstrations sit, or only on what they contain?

Shuffle. A prompt ``demo_1, p, ..., demo_n, p, test`` becomes ``demo_{pi(1)}, p, ..., demo_{pi(n)},
p, test`` for a derangement ``pi`` of the n demonstrations (every demonstration moves; each keeps
its tokens, their order and its delimiter). Token ``o`` of demonstration d at position j moves to
position ``move(j)``; test tokens stay where they are.

Metric. For one prompt, one layer and one head, with ``S`` the pre-softmax logits of the original
prompt and ``S'`` those of the shuffled one, test queries ``i`` and demonstration keys ``j``
(delimiters excluded)::

    shuffle_change = mean_{i, j} |S'[i, move(j)] - S[i, j]|  /  std_{i, j} S[i, j]

i.e. the logit of the same query to the same demonstration token (matched by identity, not by
position), its mean absolute change in units of the spread of the original logits. It is exactly
0 for a network whose logits depend on token content only, and of order 1 for a network whose
logits depend on positions. ``nan`` where the original logits are constant (std 0). One number per
(prompt, layer, head); reported as mean and spread over prompts, and averaged over heads per layer.

Variant ``min_context = c``: only queries and keys that are at least the c-th token of their
segment (0-based), so that their last c tokens lie in their own segment. A network that reads a
window of c previous tokens (the hand-built network with ``L = c + 1``) sees the same content at
such a key after the shuffle, while at the first tokens of a demonstration the window reaches
into the preceding demonstration, which the shuffle replaces: ``c = 0`` (all pairs) measures
dependence on position *and* on the neighbouring demonstrations, ``c > 0`` mostly on position.
"""
from __future__ import annotations

from typing import Callable

import torch

import hmm

ScoresFunction = Callable[[torch.Tensor], dict[str, torch.Tensor]]
"""``scores(tokens (B, N)) -> {layer name: logits (B, H, N, N)}`` indexed ``[prompt, head, query, key]``."""


def random_derangements(num_prompts: int, num_demos: int, generator: torch.Generator) -> torch.Tensor:
    """``(num_prompts, num_demos)`` int64: row b lists, for each new slot, the old demonstration
    placed there; no demonstration stays in its slot (rejection sampling of uniform permutations)."""
    if num_demos < 2:
        raise ValueError(f"num_demos: {num_demos!r}; expected at least 2 demonstrations to shuffle")
    rows = []
    while len(rows) < num_prompts:
        permutation = torch.randperm(num_demos, generator=generator)
        if bool((permutation != torch.arange(num_demos)).all()):
            rows.append(permutation)
    return torch.stack(rows)


def shuffle_demonstrations(
    tokens: torch.Tensor, prompt_format: hmm.PromptFormat, orders: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reorder the demonstrations of each prompt: slot s of prompt b receives old demonstration
    ``orders[b, s]``. Returns ``(shuffled tokens (B, N), move (B, N))`` with ``move[b, j]`` the new
    position of the token at old position j (test positions map to themselves)."""
    batch, length = tokens.shape
    if length != prompt_format.length:
        raise ValueError(f"tokens: length {length}; expected {prompt_format.length} (the prompt format's)")
    if orders.shape != (batch, prompt_format.num_demos):
        raise ValueError(f"orders: shape {tuple(orders.shape)}; expected {(batch, prompt_format.num_demos)}")
    stride = prompt_format.demo_length + 1
    new_slot_of_old = orders.argsort(dim=1)
    segment = prompt_format.segment_index.expand(batch, length)
    offset = torch.arange(length) - segment * stride
    in_demo = segment < prompt_format.num_demos
    new_segment = torch.where(in_demo, new_slot_of_old.gather(1, segment.clamp_max(prompt_format.num_demos - 1)), segment)
    move = torch.where(in_demo, new_segment * stride + offset, torch.arange(length).expand(batch, length))
    shuffled = torch.empty_like(tokens).scatter_(1, move, tokens)
    return shuffled, move


def shuffle_pairs(prompt_format: hmm.PromptFormat, min_context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query positions (test tokens) and key positions (demonstration tokens, delimiters
    excluded) whose index inside their segment is at least ``min_context``, as index tensors."""
    shortest = min(prompt_format.demo_length, prompt_format.test_length)
    if isinstance(min_context, bool) or not isinstance(min_context, int) or not 0 <= min_context < shortest:
        raise ValueError(f"min_context: {min_context!r}; expected an integer in 0..{shortest - 1} (shorter than every segment)")
    in_context = prompt_format.position_in_segment >= min_context
    queries = torch.nonzero(prompt_format.test_positions & in_context).squeeze(1)
    keys = torch.nonzero(~prompt_format.test_positions & in_context).squeeze(1)
    return queries, keys


def matched_logit_change(original: torch.Tensor, shuffled: torch.Tensor, move: torch.Tensor,
                         queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``(B, H)`` float64 on the CPU: ``mean |S'[i, move(j)] - S[i, j]| / std S[i, j]`` over the
    query positions ``i`` and key positions ``j`` given, for logits ``original`` and ``shuffled``
    ``(B, H, N, N)``; ``nan`` where the original logits are constant."""
    device = original.device
    queries, keys = queries.to(device), keys.to(device)
    before = original[:, :, queries][:, :, :, keys].double()
    after_rows = shuffled[:, :, queries]
    index = move[:, keys].to(device)[:, None, None, :].expand(*after_rows.shape[:3], len(keys))
    after = after_rows.gather(3, index).double()
    mean_change = (after - before).abs().mean(dim=(2, 3))
    spread = before.flatten(2).std(dim=2)
    return torch.where(spread > 0, mean_change / spread, torch.nan).cpu()


def shuffle_change(scores: ScoresFunction, tokens: torch.Tensor, prompt_format: hmm.PromptFormat,
                   orders: torch.Tensor, min_contexts: tuple[int, ...] = (0,)) -> dict[int, dict[str, torch.Tensor]]:
    """The module's metric: ``{min_context: {layer: (B, H)}}``, one value per prompt and head, for
    the pairs of :func:`shuffle_pairs` of each ``min_context``. ``scores`` is called once on the
    original and once on the shuffled prompts."""
    pairs = {min_context: shuffle_pairs(prompt_format, min_context) for min_context in min_contexts}
    shuffled_tokens, move = shuffle_demonstrations(tokens, prompt_format, orders)
    original_scores, shuffled_scores = scores(tokens), scores(shuffled_tokens)
    return {
        min_context: {layer: matched_logit_change(original, shuffled_scores[layer], move, queries, keys)
                      for layer, original in original_scores.items()}
        for min_context, (queries, keys) in pairs.items()
    }
