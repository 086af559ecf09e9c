"""Causal RoFormer (Su et al. 2024): token embedding, pre-norm blocks of rotary self-attention and
an MLP, a final LayerNorm and an unembedding. There is no absolute position embedding: position
enters only through the rotation of queries and keys, so an attention logit depends on the two
tokens and their offset ``i - j`` (see :func:`apply_rotary`).

Block ``l`` (pre-norm, residual stream ``x``)::

    x <- x + Attn(LN1(x))        attention: softmax(rot(q) rot(k)^T / sqrt(d_head) + causal mask) v
    x <- x + MLP(LN2(x))         MLP: W2 GELU(W1 x)

Two forward paths share the weights: :meth:`RoFormer.forward` uses the fused
``scaled_dot_product_attention``; :meth:`RoFormer.run_with_cache` computes attention explicitly
and returns, under TransformerLens-like names (see :data:`HOOK_NAMES`), every layer's residual
stream, pre-softmax attention logits and attention weights. Both take ``patches``
(:class:`ResidualPatch`): interventions on the residual stream after a block, at one position.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from empirical.training.configs import JSONConfig, check_integers

INIT_STD = 0.02
"""Standard deviation of the normal initialisation of every weight matrix (GPT-2)."""

HOOK_NAMES = (
    "hook_embed",
    "blocks.{layer}.hook_resid_mid",
    "blocks.{layer}.hook_resid_post",
    "blocks.{layer}.attn.hook_attn_scores",
    "blocks.{layer}.attn.hook_pattern",
)
"""Names of the activations recorded by :meth:`RoFormer.run_with_cache` (``{layer}`` = 0..L-1).

``hook_embed`` (B, N, W): token embedding = residual stream entering block 0.
``hook_resid_mid`` (B, N, W): residual stream after the attention sub-block.
``hook_resid_post`` (B, N, W): residual stream after the whole block.
``attn.hook_attn_scores`` (B, H, N, N): pre-softmax logits ``q_i . k_j / sqrt(d_head)``, with
``-inf`` above the diagonal (the causal mask, as in TransformerLens).
``attn.hook_pattern`` (B, H, N, N): attention weights, the row-wise softmax of the scores.
"""


PATCH_MODES = ("replace", "add")
"""How a :class:`ResidualPatch` changes the stream: ``x <- v`` or ``x <- x + v``."""


@dataclass(frozen=True)
class ResidualPatch:
    """An intervention at ``blocks.{layer}.hook_resid_post``, the residual stream after block
    ``layer`` (0-based), at prompt position ``position`` of every prompt of the batch::

        replace:  x[b, position] <- vector[b]         add:  x[b, position] <- x[b, position] + vector[b]

    ``vector`` is ``(W,)`` (the same for every prompt) or ``(B, W)`` (one per prompt). Later blocks
    read the patched stream, and :meth:`RoFormer.run_with_cache` records it. Layer, position and
    width are checked against the model and the tokens by :func:`check_patches`.
    """

    layer: int
    position: int
    vector: torch.Tensor
    mode: str = "replace"

    def __post_init__(self) -> None:
        if self.mode not in PATCH_MODES:
            raise ValueError(f"mode: {self.mode!r}; expected one of {PATCH_MODES}")
        if not isinstance(self.vector, torch.Tensor) or not self.vector.is_floating_point():
            raise ValueError(f"vector: {type(self.vector).__name__}; expected a floating-point tensor (W,) or (B, W)")


def check_patches(patches: Sequence[ResidualPatch], num_layers: int, width: int, tokens_shape: torch.Size) -> None:
    """``ValueError`` naming the first patch whose layer is not in ``0..num_layers-1``, whose
    position is not a position of the ``(B, N)`` prompts, or whose vector is not ``(W,)`` or ``(B, W)``."""
    batch, length = tokens_shape
    for index, patch in enumerate(patches):
        name = f"patches[{index}]"
        if isinstance(patch.layer, bool) or not isinstance(patch.layer, int) or not 0 <= patch.layer < num_layers:
            raise ValueError(f"{name}.layer: {patch.layer!r}; expected an integer in 0..{num_layers - 1} "
                             f"(blocks.{{layer}}.hook_resid_post of a {num_layers}-layer model)")
        if isinstance(patch.position, bool) or not isinstance(patch.position, int) or not 0 <= patch.position < length:
            raise ValueError(f"{name}.position: {patch.position!r}; expected an integer in 0..{length - 1} "
                             f"(a position of the {length}-token prompts)")
        if tuple(patch.vector.shape) not in ((width,), (batch, width)):
            raise ValueError(f"{name}.vector: shape {tuple(patch.vector.shape)}; expected ({width},) or "
                             f"({batch}, {width}) (the residual width, once or once per prompt)")


def apply_patches(x: torch.Tensor, layer: int, patches: Sequence[ResidualPatch]) -> torch.Tensor:
    """The stream ``x (B, N, W)`` after block ``layer`` with the patches of that layer applied in
    order (a new tensor if any applies; ``x`` itself otherwise)."""
    for patch in patches:
        if patch.layer == layer:
            x = x.clone()
            vector = patch.vector.to(device=x.device, dtype=x.dtype)
            if patch.mode == "replace":
                x[:, patch.position] = vector
            else:
                x[:, patch.position] += vector
    return x


@dataclass(frozen=True)
class RoFormerConfig(JSONConfig):
    """Shape of a :class:`RoFormer`; validated on construction.

    Args:
        vocab_size: number of input tokens (also the number of output logits).
        num_layers: number of blocks, >= 1.
        num_heads: attention heads per block; must divide ``width`` into an even head size.
        width: residual-stream dimension.
        mlp_ratio: hidden size of the MLP divided by ``width``.
        rotary_base: ``b`` in the rotary frequencies ``theta_i = b^(-2i/d_head)``.
        tie_embeddings: share the embedding matrix with the unembedding (``logits = x E^T``).
        init_std: standard deviation of the normal initialisation of every weight matrix
            (default :data:`INIT_STD`); see :meth:`RoFormer._init_weights`.
        attention_scale: ``c`` in the attention scores ``c q.k / sqrt(d_head)``: an inverse
            softmax temperature (1: the standard scale), a lever on the length of the counting
            plateau (issue 51; Gopalani & Hu 2025).
    """

    vocab_size: int
    num_layers: int
    num_heads: int
    width: int
    mlp_ratio: int = 4
    rotary_base: float = 10000.0
    tie_embeddings: bool = False
    init_std: float = INIT_STD
    attention_scale: float = 1.0

    def __post_init__(self) -> None:
        check_integers(self, ("vocab_size", "num_layers", "num_heads", "width", "mlp_ratio"), minimum=1)
        if self.width % self.num_heads:
            raise ValueError(
                f"num_heads: {self.num_heads} does not divide width {self.width}; expected a divisor of width"
            )
        if self.head_dim % 2:
            raise ValueError(
                f"num_heads: {self.num_heads} gives head size {self.width}/{self.num_heads} = {self.head_dim}, "
                f"which is odd; expected an even head size (rotary embeddings rotate pairs of coordinates)"
            )
        if not self.rotary_base > 1:
            raise ValueError(f"rotary_base: {self.rotary_base!r}; expected a number > 1")
        if not self.init_std > 0:
            raise ValueError(f"init_std: {self.init_std!r}; expected a number > 0")
        if not 0 < self.attention_scale < math.inf:
            raise ValueError(f"attention_scale: {self.attention_scale!r}; expected a finite number > 0")

    @property
    def head_dim(self) -> int:
        """``d_head = width / num_heads``."""
        return self.width // self.num_heads


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, base: float,
                   dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos(m theta_i)`` and ``sin(m theta_i)``, each ``(len(positions), head_dim / 2)`` of ``dtype``,
    for positions ``m`` and frequencies ``theta_i = base^(-2i/head_dim)``, ``i = 0..head_dim/2-1``
    (RoFormer, Su et al. 2024, eq. 15)."""
    exponents = torch.arange(0, head_dim, 2, dtype=dtype, device=positions.device) / head_dim
    frequencies = base ** (-exponents)
    angles = positions.to(dtype)[:, None] * frequencies[None, :]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each coordinate pair ``(x_{2i}, x_{2i+1})`` of ``x (..., N, d)`` by the angle
    ``m theta_i`` of its position ``m``::

        (x_{2i}, x_{2i+1}) -> (x_{2i} cos - x_{2i+1} sin,  x_{2i} sin + x_{2i+1} cos)

    so ``rot_m(q) . rot_n(k) = q^T R_{n-m} k`` depends on the positions only through ``n - m``.
    Computed in the tables' dtype (float32 at least: angles of late positions need it), returned
    in ``x.dtype``.
    """
    even, odd = x[..., 0::2].to(cos.dtype), x[..., 1::2].to(cos.dtype)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class RotarySelfAttention(nn.Module):
    """Multi-head causal self-attention with rotary queries and keys."""

    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                cache: dict[str, torch.Tensor] | None = None, prefix: str = "") -> torch.Tensor:
        """``x (B, N, W)`` -> ``(B, N, W)``; ``rotary`` is :func:`rotary_cos_sin` of positions
        ``0..N-1`` (computed once per forward pass by :class:`RoFormer`); with ``cache``, store
        scores and pattern under ``prefix``."""
        batch, length, width = x.shape
        heads, head_dim = self.config.num_heads, self.config.head_dim
        query, key, value = self.qkv(x).view(batch, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = rotary
        query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        if cache is None:
            mixed = F.scaled_dot_product_attention(query, key, value, is_causal=True,
                                                   scale=self.config.attention_scale / math.sqrt(head_dim))
        else:
            scores = query @ key.transpose(-1, -2) * self.config.attention_scale / math.sqrt(head_dim)
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
            pattern = scores.softmax(dim=-1)
            cache[f"{prefix}hook_attn_scores"] = scores
            cache[f"{prefix}hook_pattern"] = pattern
            mixed = pattern @ value
        return self.out(mixed.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + Attn(LN1 x)``, then ``+ MLP(LN2 x)``; with ``cache``, it
    records its attention and ``hook_resid_mid`` (the model records ``hook_resid_post``, after any
    patch)."""

    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.width)
        self.attn = RotarySelfAttention(config)
        self.ln2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, config.mlp_ratio * config.width),
            nn.GELU(),
            nn.Linear(config.mlp_ratio * config.width, config.width),
        )

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                cache: dict[str, torch.Tensor] | None = None, prefix: str = "") -> torch.Tensor:
        x = x + self.attn(self.ln1(x), rotary, cache, f"{prefix}attn.")
        if cache is not None:
            cache[f"{prefix}hook_resid_mid"] = x
        return x + self.mlp(self.ln2(x))


class RoFormer(nn.Module):
    """Causal RoFormer language model: ``tokens (B, N) int64 -> logits (B, N, vocab_size)``, where
    row t scores the token at position t + 1 given tokens 0..t."""

    def __init__(self, config: RoFormerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_final = nn.LayerNorm(config.width)
        self.unembed = nn.Linear(config.width, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.unembed.weight = self.embed.weight
        self._init_weights()

    def _init_weights(self) -> None:
        """Normal(0, init_std) matrices, zero biases; the projections that write into the residual
        stream are scaled by ``1/sqrt(2 L)`` so its variance stays O(1) with depth (GPT-2)."""
        residual_std = self.config.init_std / math.sqrt(2 * self.config.num_layers)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=self.config.init_std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            nn.init.normal_(block.attn.out.weight, std=residual_std)
            nn.init.normal_(block.mlp[-1].weight, std=residual_std)

    def _rotary(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary tables of positions ``0..N-1``, shared by every layer of one forward pass; float32,
        or float64 for a float64 model (so that its float64 forward pass has no float32 step)."""
        positions = torch.arange(tokens.shape[-1], device=tokens.device)
        dtype = torch.promote_types(self.embed.weight.dtype, torch.float32)
        return rotary_cos_sin(positions, self.config.head_dim, self.config.rotary_base, dtype)

    def forward(self, tokens: torch.Tensor, patches: Sequence[ResidualPatch] = ()) -> torch.Tensor:
        """Fast path (fused attention): logits ``(B, N, vocab_size)``, with ``patches`` applied."""
        check_patches(patches, self.config.num_layers, self.config.width, tokens.shape)
        x = self.embed(tokens)
        rotary = self._rotary(tokens)
        for layer, block in enumerate(self.blocks):
            x = apply_patches(block(x, rotary), layer, patches)
        return self.unembed(self.ln_final(x))

    def run_with_cache(self, tokens: torch.Tensor,
                       patches: Sequence[ResidualPatch] = ()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Recording path: the logits of :meth:`forward` and the activations of :data:`HOOK_NAMES`,
        with ``patches`` applied (``hook_resid_post`` records the patched stream)."""
        check_patches(patches, self.config.num_layers, self.config.width, tokens.shape)
        cache: dict[str, torch.Tensor] = {}
        x = self.embed(tokens)
        cache["hook_embed"] = x
        rotary = self._rotary(tokens)
        for layer, block in enumerate(self.blocks):
            x = apply_patches(block(x, rotary, cache, f"blocks.{layer}."), layer, patches)
            cache[f"blocks.{layer}.hook_resid_post"] = x
        return self.unembed(self.ln_final(x)), cache

    def num_parameters(self, *, embeddings: bool = True) -> int:
        """Number of distinct parameters (a tied matrix counted once); without the embedding and
        unembedding matrices when ``embeddings`` is False (the ``N`` of ``6 N`` FLOPs per token)."""
        matrices = {id(self.embed.weight), id(self.unembed.weight)}
        unique = {id(p): p for p in self.parameters()}
        return sum(p.numel() for key, p in unique.items() if embeddings or key not in matrices)


def forward_flops_per_token(config: RoFormerConfig, context: int) -> int:
    """Matrix-multiply FLOPs of one forward pass per token of a prompt of ``context`` tokens::

        2 (N_matrices + V W) + 4 L W N_ctx,    N_matrices = L (4 + 2 mlp_ratio) W^2

    ``N_matrices`` counts the weight matrices of the blocks (query/key/value ``3 W^2``, output
    ``W^2``, MLP ``2 mlp_ratio W^2``), ``V W`` the unembedding (the embedding is a lookup), and
    ``4 L W N_ctx`` the attention scores and the mixing over the full ``N_ctx x N_ctx`` square
    (PaLM's convention, Chowdhery et al. 2022, Appendix B, though causal attention needs half).
    Biases, LayerNorms, softmax and GELU are not counted.
    """
    matrices = config.num_layers * (4 + 2 * config.mlp_ratio) * config.width**2
    return 2 * (matrices + config.vocab_size * config.width) + 4 * config.num_layers * config.width * context


def training_flops_per_token(config: RoFormerConfig, context: int) -> int:
    """FLOPs of forward + backward per trained token: ``3 x`` :func:`forward_flops_per_token`
    (the backward pass multiplies by each matrix twice: for the input's and the weight's
    gradient), i.e. ``6 (N_matrices + V W) + 12 L W N_ctx``."""
    return 3 * forward_flops_per_token(config, context)
