"""Initial weights of a Markov run: the RoFormer's own Gaussian initialisation, or a low-rank one
that confines the residual stream to a few directions, as in the rank-one initialisation of
Makkuva et al.'s code (``Bond1995/Markov``, ``Markov-Simple2/src/models/base.py``, ``--init
lowrank`` and ``--init good``; our reading is stated in ``docs/markov.md``).

``gaussian``: :class:`empirical.training.model.RoFormer`'s initialisation, weights ``N(0, s^2)``.

``lowrank`` and ``lowrank-anti`` (rank ``r``): a residual basis ``B`` (``d x r``, orthonormal
columns, ``1^T B = 0``) is drawn once per model. Every matrix that writes into the residual stream
writes into ``span(B)``, every matrix that reads from it reads through ``span(B)``::

    token embedding  E   = (sigma_E / sqrt(k)) C B_k^T       C: V x k, orthonormal, 1_V^T C = 0, k = min(r, V - 1)
    queries, keys    W_Q = (sigma / sqrt(r)) X_Q B^T,  W_K = (sigma / sqrt(r)) X_K B^T
    values, output   W_V = (sigma / sqrt(r)) X_V B^T,  W_O = (sigma_O / sigma) W_V^T       (W_O W_V = c B B^T, c > 0)
    MLP              W_1 = (sigma_1 / sqrt(r)) Z B^T,  W_2 = +-(sigma_2 / sigma_1) W_1^T

with ``X_Q``, ``X_K``, ``X_V`` (``d x r``, the rows of all heads) and ``Z`` (``4d x r``) drawn with
orthonormal columns; ``+`` for ``lowrank`` (the MLP writes back along the direction it reads, as
the authors' ``W_2 = alpha w^T = W_1^T``), ``-`` for ``lowrank-anti`` (it writes against it, as
their ``good`` initialisation ``c_fc = 2``, ``c_proj = -2``). Biases stay 0 and LayerNorms
``(1, 0)``; an untied unembedding keeps its Gaussian draw (the authors' ``lm_head`` is not
re-initialised).

Scale: each structured matrix ``W`` (``m x n``) has rank ``k`` and all ``k`` non-zero singular
values equal to ``sigma / sqrt(k)``, so ``||W||_F = sigma = s sqrt(m n)``, the root-mean-square
Frobenius norm of the Gaussian draw it replaces (``s = init_std``, or ``init_std / sqrt(2 L)`` for
``W_O`` and ``W_2``, as in the RoFormer): the structured initialisations change the structure,
not the scale.

Why ``1^T B = 0``: LayerNorm subtracts the mean over coordinates, which is 0 on ``span(B)``, so
for ``z = B c`` it returns ``B c / sqrt(|c|^2 / d + eps)``: every LayerNorm of the pre-norm RoFormer
maps ``span(B)`` into itself and, at initialisation, the residual stream of every position and
its LayerNorms lie in ``span(B)``. For ``r = 1`` and binary tokens the embeddings are
``+-(sigma_E / sqrt 2) b``, and the tied logit gap at position ``t`` has the sign of the residual
coordinate ``c_t`` along ``b`` (the final LayerNorm keeps its sign, the read-out is the
embedding). The embedding contributes the sign of the current token, an aligned MLP
(``W_2 = +W_1^T``) adds to ``c_t`` with ``c_t``'s own sign, and the aligned value/output path adds
a positive-weighted average of the attended tokens' signs: the prediction is monotone in the
tokens attended, so it can be anti-persistent (``P(1|1) < P(1|0)``, which ``p + q > 1`` needs)
only through attention to other positions or once training leaves the structure. ``lowrank-anti``
reverses the MLP's term.
"""
from __future__ import annotations

import math

import torch

from empirical.training.model import RoFormer, RoFormerConfig

INITS = ("gaussian", "lowrank", "lowrank-anti")
"""Names of the initialisations (module docstring)."""

MLP_SIGNS = {"lowrank": 1.0, "lowrank-anti": -1.0}
"""Sign of ``W_2`` relative to ``W_1^T`` in the low-rank initialisations."""


def check_init(init: str, rank: int, width: int) -> None:
    """``ValueError`` unless ``init`` is one of :data:`INITS` and ``rank`` an integer in
    ``[1, width - 1]`` (the residual basis is orthogonal to the all-ones vector)."""
    if init not in INITS:
        raise ValueError(f"init: {init!r}; expected one of {list(INITS)}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= width - 1:
        raise ValueError(
            f"init_rank: {rank!r} with width {width}; expected an integer in [1, width - 1 = {width - 1}] "
            f"(the residual basis is orthogonal to the all-ones vector that LayerNorm removes)"
        )


def orthonormal_columns(rows: int, columns: int, generator: torch.Generator, *, centred: bool = False) -> torch.Tensor:
    """``(rows, columns)`` float64 with orthonormal columns drawn from the Haar measure (QR of a
    Gaussian matrix, signs fixed by ``R``'s diagonal); with ``centred``, also orthogonal to the
    all-ones vector (the Gaussian matrix is centred over rows first), which needs ``columns < rows``."""
    draws = torch.randn(rows, columns, generator=generator, dtype=torch.float64)
    if centred:
        draws = draws - draws.mean(dim=0)
    q, r = torch.linalg.qr(draws)
    return q * torch.sign(torch.diagonal(r))


def rank_k_matrix(left: torch.Tensor, right: torch.Tensor, norm: float) -> torch.Tensor:
    """``(norm / sqrt(k)) left right^T`` for ``left (m, k)`` and ``right (n, k)`` with orthonormal
    columns: rank ``k``, every non-zero singular value ``norm / sqrt(k)``, Frobenius norm ``norm``."""
    return (norm / math.sqrt(left.shape[1])) * left @ right.T


def gaussian_norm(matrix: torch.Tensor, std: float) -> float:
    """``std sqrt(m n)``: the root-mean-square Frobenius norm of an ``m x n`` matrix of ``N(0, std^2)`` entries."""
    return std * math.sqrt(matrix.numel())


@torch.no_grad()
def apply_low_rank(model: RoFormer, init: str, rank: int, generator: torch.Generator) -> torch.Tensor:
    """Overwrite ``model``'s matrices with the ``init`` structure of rank ``rank`` (module
    docstring), drawing the factors from ``generator``; returns the residual basis ``B (d, r)``."""
    config = model.config
    check_init(init, rank, config.width)
    if init not in MLP_SIGNS:
        raise ValueError(f"init: {init!r}; expected a low-rank initialisation, one of {list(MLP_SIGNS)}")
    width, std = config.width, config.init_std
    residual_std = std / math.sqrt(2 * config.num_layers)
    basis = orthonormal_columns(width, rank, generator, centred=True)
    tokens = min(rank, config.vocab_size - 1)
    token_factor = orthonormal_columns(config.vocab_size, tokens, generator, centred=True)
    embedding = model.embed.weight
    embedding.copy_(rank_k_matrix(token_factor, basis[:, :tokens], gaussian_norm(embedding, std)))
    for block in model.blocks:
        qkv = block.attn.qkv.weight.view(3, width, width)
        for index in range(3):
            qkv[index].copy_(rank_k_matrix(orthonormal_columns(width, rank, generator), basis, gaussian_norm(qkv[index], std)))
        values = qkv[2].double()
        out = block.attn.out.weight
        out.copy_(values.T * (gaussian_norm(out, residual_std) / gaussian_norm(values, std)))
        up, down = block.mlp[0].weight, block.mlp[-1].weight
        up.copy_(rank_k_matrix(orthonormal_columns(up.shape[0], rank, generator), basis, gaussian_norm(up, std)))
        down.copy_(MLP_SIGNS[init] * up.double().T * (gaussian_norm(down, residual_std) / gaussian_norm(up, std)))
    return basis


def initial_model(config: RoFormerConfig, init: str, rank: int, seed: int) -> RoFormer:
    """The model a run starts from: the RoFormer that :func:`empirical.training.train.train` would build
    for ``seed`` (``torch.manual_seed(seed)``, global RNG state restored), then, unless ``init`` is
    ``gaussian``, :func:`apply_low_rank` with factors from a generator seeded with ``seed``."""
    check_init(init, rank, config.width)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RoFormer(config)
    if init != "gaussian":
        apply_low_rank(model, init, rank, torch.Generator().manual_seed(seed))
    return model
