"""Initialisations of the Markov study (:mod:`empirical.studies.markov.inits`): exact rank, singular values
and Frobenius norms of the low-rank matrices, their shared residual basis, the signs of the MLP and
value/output paths, the residual stream staying in the basis through the LayerNorms, agreement of
the Gaussian arm with the training loop's own model, the step-0 checkpoint the loop resumes, and
refusals of bad names and ranks."""
import math

import pytest
import torch

from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.inits import apply_low_rank, check_init, initial_model, orthonormal_columns
from empirical.studies.markov.runs import write_initial_checkpoint
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.train import TrainConfig, train
from rounding import gamma, unit_roundoff

WIDTH, STD = 12, 0.05


def low_rank_model(init: str, rank: int, num_layers: int, tie: bool = True, seed: int = 0):
    """A RoFormer (vocab 2) with ``init`` applied in float64, and its residual basis."""
    config = RoFormerConfig(vocab_size=2, num_layers=num_layers, num_heads=2, width=WIDTH, tie_embeddings=tie,
                            init_std=STD)
    model = RoFormer(config).double()
    basis = apply_low_rank(model, init, rank, torch.Generator().manual_seed(seed))
    return model, basis


def structured_matrices(model: RoFormer) -> dict[str, tuple[torch.Tensor, float, str]]:
    """name -> (matrix, Gaussian std it replaces, which of its spaces lies in the residual basis:
    'rows' for the embedding and the matrices that read the stream, 'columns' for those that write it)."""
    residual_std = STD / math.sqrt(2 * model.config.num_layers)
    matrices = {"embed": (model.embed.weight, STD, "rows")}
    for layer, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv.weight.view(3, WIDTH, WIDTH)
        matrices |= {f"{layer}.W_Q": (q, STD, "rows"), f"{layer}.W_K": (k, STD, "rows"),
                     f"{layer}.W_V": (v, STD, "rows"), f"{layer}.W_O": (block.attn.out.weight, residual_std, "columns"),
                     f"{layer}.W_1": (block.mlp[0].weight, STD, "rows"),
                     f"{layer}.W_2": (block.mlp[-1].weight, residual_std, "columns")}
    return matrices


def orthonormal_rounding(rows: int, columns: int) -> float:
    """Bound on the 2-norm distance of each column of a computed ``orthonormal_columns(rows,
    columns)`` (float64 Householder QR) from a set of exactly orthonormal columns: ``gamma_{rows
    columns}`` (Higham, section 19.3: the explicitly formed ``Q_hat`` is within ``gamma~_{mn}`` of
    an exactly orthogonal Q a column; the small constant of ``gamma~`` taken as 1, as in
    :func:`rounding.least_squares_rounding`). The sign flips are exact."""
    return gamma(rows * columns)


def structure_rounding(shape: tuple[int, int], structure_rank: int, init_rank: int) -> float:
    """Bound on ``||W_hat - W||_F / c`` for a structured ``m x n`` matrix ``W_hat`` of rank
    ``k = structure_rank`` (:func:`apply_low_rank` of rank ``r = init_rank``) against its exact
    structure ``W = c Q_L Q_R^T``, ``c = sigma / sqrt(k)``, exactly orthonormal Q's:
    ``sqrt(k) (gamma_{mr} + gamma_{nr} + gamma_4) + k gamma_{k+1}``, first order in u.

    Its factors (k columns of QRs of at most ``m x r`` and ``n x r`` draws) are within
    :func:`orthonormal_rounding` a column of orthonormal ones, which moves ``L R^T`` by ``sqrt(k)
    (gamma_{mr} + gamma_{nr})`` in the Frobenius norm; the product ``(c L) R^T`` rounds by ``gamma_{k+1}
    |L| |R|^T`` entrywise, at most ``k gamma_{k+1}`` in norm (``||L||_F ||R||_F = k``); c (a square root
    and a quotient) and, for ``W_O`` and ``W_2``, the ratio of the two norms and the product with it add
    ``gamma_4`` relative, ``sqrt(k) gamma_4`` of ``||Q_L Q_R^T||_F``.
    """
    m, n = shape
    k = structure_rank
    factors = orthonormal_rounding(m, init_rank) + orthonormal_rounding(n, init_rank)
    return math.sqrt(k) * (factors + gamma(4)) + k * gamma(k + 1)


@pytest.mark.parametrize("init", ["lowrank", "lowrank-anti"])
@pytest.mark.parametrize("rank, num_layers", [(1, 1), (3, 2), (WIDTH - 1, 1)])
def test_low_rank_matrices_have_the_stated_rank_and_scale(init, rank, num_layers):
    """Rank ``k`` (``min(r, V - 1) = 1`` for the binary embedding), every non-zero singular value
    ``sigma / sqrt(k)`` and Frobenius norm ``sigma = std sqrt(m n)``, each within
    :func:`structure_rounding` (Weyl: a singular value moves by at most the 2-norm of the change)
    and its own evaluation: the norm sums ``m n`` squares (``gamma_{mn}``, halved by the square
    root, plus its u); the SVD (Householder bidiagonalisation from both sides) is exact for a matrix
    moved by ``gamma_{2mn} ||W||_F = sqrt(k) gamma_{2mn} c``, as :func:`rounding.least_squares_rounding`
    takes it; ``norm / sqrt(k)`` rounds twice."""
    model, _ = low_rank_model(init, rank, num_layers)
    for name, (matrix, std, _) in structured_matrices(model).items():
        expected_rank = 1 if name == "embed" else rank
        norm = std * math.sqrt(matrix.numel())  # sigma, computed as apply_low_rank computes it
        structure = structure_rounding(matrix.shape, expected_rank, rank)
        singular_values = torch.linalg.svdvals(matrix)
        assert torch.linalg.matrix_rank(matrix).item() == expected_rank, name
        frobenius = structure / math.sqrt(expected_rank) + gamma(matrix.numel())
        assert torch.linalg.matrix_norm(matrix).item() == pytest.approx(norm, rel=frobenius, abs=0), name
        singular = structure + math.sqrt(expected_rank) * gamma(2 * matrix.numel()) + gamma(2)
        torch.testing.assert_close(singular_values[:expected_rank],
                                   torch.full((expected_rank,), norm / math.sqrt(expected_rank), dtype=torch.float64),
                                   rtol=singular, atol=0, msg=name)


def factor_draws(rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The Gaussian draws behind the residual basis (``WIDTH x rank``) and the token factor
    (``2 x 1``) of ``low_rank_model(..., seed)``: the first two calls of :func:`orthonormal_columns`
    in :func:`apply_low_rank`, each a float64 ``randn`` of its shape from the model's generator."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(WIDTH, rank, generator=generator, dtype=torch.float64),
            torch.randn(2, 1, generator=generator, dtype=torch.float64))


def centring_rounding(draws: torch.Tensor) -> float:
    """Bound on ``max_j |1^T q_j|`` (exact sums) for the computed columns of
    ``orthonormal_columns(n, r, centred=True)`` drawn as ``draws (n, r)``: ``(||s||_2 + sqrt(n)
    gamma_{nr} ||A_c||_F) / sigma_min(A_c) + sqrt(n) gamma_{nr}``, first order in u, with ``A_c`` the
    centred draws and ``s_j = gamma_n ||a_j||_1 + u ||A_c e_j||_1``.

    Centring: a column mean rounds by ``gamma_n ||a_j||_1 / n`` and each difference by u, so the
    computed centred columns sum to at most ``s_j``. Householder QR (Higham, Theorem 19.4) computes
    R exactly for ``A_c + dA``, ``||dA||_F <= gamma_{nr} ||A_c||_F``, with an exactly orthonormal
    ``Q = (A_c + dA) R^-1``, whose column sums ``1^T (A_c + dA) R^-1`` have 2-norm at most ``(||s||_2 +
    sqrt(n) ||dA||_F) / sigma_min(R)``, ``sigma_min(R) = sigma_min(A_c)`` to first order; the computed
    columns are within :func:`orthonormal_rounding` of Q's, ``sqrt(n)`` times that on a sum.
    """
    n, r = draws.shape
    centred = draws - draws.mean(dim=0)
    sums = gamma(n) * draws.abs().sum(dim=0) + unit_roundoff() * centred.abs().sum(dim=0)
    factors = orthonormal_rounding(n, r)
    tilt = torch.linalg.vector_norm(sums) + math.sqrt(n) * factors * torch.linalg.matrix_norm(centred)
    return (tilt / torch.linalg.svdvals(centred)[-1]).item() + math.sqrt(n) * factors


def projection_rounding(structure_rank: int, init_rank: int) -> float:
    """Bound on every entry of ``W_hat P_hat - W_hat`` (or ``P_hat W_hat - W_hat`` for a matrix that
    writes the stream), ``P_hat = B B^T`` computed, relative to ``||W_hat||_2``, for a structured
    matrix of rank ``k = structure_rank`` reading through the basis B (``WIDTH x r``, ``r =
    init_rank``): ``2 sqrt(r) gamma_{dr} + k gamma_{k+1} + r gamma_r + gamma_d + sqrt(k) u``, d = WIDTH.

    ``W_hat = c L B_k^T + F`` with the very basis B: ``c L B_k^T (B B^T - I) = c L H_k B^T``, H the
    first k rows of ``B^T B - I``, at most ``2 sqrt(r) gamma_{dr}`` in norm (:func:`orthonormal_rounding`);
    ``F (B B^T - I)``, F the product's rounding (:func:`structure_rounding`), at most ``k gamma_{k+1}``;
    forming P rounds by ``gamma_r |B| |B|^T``, ``r gamma_r`` in the Frobenius norm; the product with P
    by ``gamma_d`` of ``|W| |P|``, whose entries are at most ``||W||_2 ||P||_2``; ``W_O`` and ``W_2``
    round each entry once more when scaled, ``sqrt(k) u ||W||_2`` in norm.
    """
    k, r = structure_rank, init_rank
    return (2 * math.sqrt(r) * orthonormal_rounding(WIDTH, r) + k * gamma(k + 1) + r * gamma(r) + gamma(WIDTH)
            + math.sqrt(k) * unit_roundoff())


def embedding_sum_rounding(embedding: torch.Tensor, token_draws: torch.Tensor) -> float:
    """Bound on every entry of ``embedding.sum(dim=0)`` for the rank-one binary embedding ``E = c C
    b^T`` (:func:`apply_low_rank`), C the centred token factor drawn as ``token_draws``: ``c
    (centring_rounding + sqrt(2) gamma_2)``, first order in u.

    A column sum ``c (C_0 + C_1) b_l`` is at most ``c |1^T C|`` (``|b_l| <= 1``); each entry rounds
    twice (``c C_i``, the product with ``b_l``), ``gamma_2 c (|C_0| + |C_1|) <= sqrt(2) gamma_2 c``; adding
    the two entries rounds relative to their O(u) sum: second order.
    """
    scale = STD * math.sqrt(embedding.numel())  # c: sigma / sqrt(k) with k = 1
    return scale * (centring_rounding(token_draws) + math.sqrt(2) * gamma(2))


@pytest.mark.parametrize("init, mlp_sign", [("lowrank", 1.0), ("lowrank-anti", -1.0)])
def test_low_rank_matrices_share_the_residual_basis_and_the_stated_signs(init, mlp_sign):
    rank = 2
    model, basis = low_rank_model(init, rank, num_layers=2)
    basis_draws, token_draws = factor_draws(rank, seed=0)
    # The replay holds: the basis is orthonormal_columns of the generator's first draw.
    assert torch.equal(orthonormal_columns(WIDTH, rank, torch.Generator().manual_seed(0), centred=True), basis)
    projector = basis @ basis.T
    # Columns within orthonormal_rounding of orthonormal ones: ``B^T B - I`` within twice it an entry,
    # plus the inner products' own ``gamma_d``.
    orthonormality = 2 * orthonormal_rounding(WIDTH, rank) + gamma(WIDTH)
    torch.testing.assert_close(basis.T @ basis, torch.eye(rank, dtype=torch.float64), rtol=0, atol=orthonormality)
    # Orthogonal to the all-ones vector; summing a unit column's d entries rounds by gamma_{d-1} sqrt(d).
    ones = centring_rounding(basis_draws) + gamma(WIDTH - 1) * math.sqrt(WIDTH)
    assert basis.sum(dim=0).abs().max().item() <= ones
    for name, (matrix, _, space) in structured_matrices(model).items():
        projected = matrix @ projector if space == "rows" else projector @ matrix
        structure_rank = 1 if name == "embed" else rank
        atol = torch.linalg.matrix_norm(matrix, ord=2).item() * projection_rounding(structure_rank, rank)
        torch.testing.assert_close(projected, matrix, rtol=0, atol=atol, msg=name)
    embedding = model.embed.weight
    torch.testing.assert_close(embedding.sum(dim=0), torch.zeros(WIDTH, dtype=torch.float64), rtol=0,
                               atol=embedding_sum_rounding(embedding, token_draws))
    for block in model.blocks:
        up, down = block.mlp[0].weight, block.mlp[-1].weight
        # down is up^T times the ratio of the two sigmas, each entry rounded once; the computed ratio of
        # the norms is within 2 gamma_{mn} + 2u of that ratio (two sums of squares, the quotient), and
        # scaling up^T by it rounds once more.
        ratio = torch.linalg.matrix_norm(down) / torch.linalg.matrix_norm(up)
        torch.testing.assert_close(down, mlp_sign * ratio * up.T, rtol=2 * gamma(up.numel()) + gamma(4), atol=0)
        values = block.attn.qkv.weight[2 * WIDTH:]
        value_output = block.attn.out.weight @ values  # aligned in both: c B B^T with c > 0
        # W_O = rho W_V^T with each entry rounded once, so ``W_O W_V`` is the symmetric positive
        # semidefinite ``rho W_V^T W_V`` within ``gamma_{d+1} |W_O| |W_V|`` (that rounding, the d-term
        # products), and its transpose too.
        magnitudes = block.attn.out.weight.abs() @ values.abs()
        assert ((value_output - value_output.T).abs() <= gamma(WIDTH + 1) * (magnitudes + magnitudes.T)).all()
        # The symmetric part adds a rounding (gamma_{d+2}); the eigensolver (Householder
        # tridiagonalisation) is exact for a matrix moved by gamma_{2 d^2} of its Frobenius norm, and
        # an eigenvalue moves by at most the 2-norm of a symmetric change (Weyl).
        symmetric = (value_output + value_output.T) / 2
        eigenvalues = torch.linalg.eigvalsh(symmetric)
        perturbation = (gamma(WIDTH + 2) * torch.linalg.matrix_norm((magnitudes + magnitudes.T) / 2)
                        + gamma(2 * WIDTH**2) * torch.linalg.matrix_norm(symmetric)).item()
        assert eigenvalues.min().item() >= -perturbation


def test_untied_unembedding_keeps_its_gaussian_draw():
    config = RoFormerConfig(vocab_size=2, num_layers=1, num_heads=1, width=WIDTH, tie_embeddings=False, init_std=STD)
    gaussian = initial_model(config, "gaussian", 1, seed=3)
    structured = initial_model(config, "lowrank", 1, seed=3)
    assert torch.equal(structured.unembed.weight, gaussian.unembed.weight)
    assert not torch.equal(structured.embed.weight, gaussian.embed.weight)
    assert torch.linalg.matrix_rank(structured.unembed.weight).item() == 2


def complement_rounding(rank: int) -> float:
    """Bound on ``||C_hat - Pi||_2`` for the computed complement ``C_hat = I - B B^T`` of a residual
    basis B (``WIDTH x r``), where ``Pi = I - Q Q^T`` projects onto the complement of the exactly
    orthonormal columns Q within :func:`orthonormal_rounding` ``rho`` of B's: ``2 sqrt(r) rho + r gamma_r
    + u``, first order in u.

    ``||B - Q||_2 <= ||B - Q||_F <= sqrt(r) rho`` moves ``B B^T`` by at most twice that; forming it
    rounds by ``gamma_r |B| |B|^T``, at most ``r gamma_r`` in norm (``||B||_F^2 = r``); ``I - B B^T``
    rounds the diagonal once, u.
    """
    return 2 * math.sqrt(rank) * orthonormal_rounding(WIDTH, rank) + rank * gamma(rank) + unit_roundoff()


def writer_leak(structure_rank: int, init_rank: int) -> float:
    """Bound on ``||Pi W||_2 / ||W||_2`` for a structured matrix W of rank k that writes the stream
    (``W_O``, ``W_2``), and on ``||E Pi||_2 / ||E||_2`` for the embedding E (``Pi`` as in
    :func:`complement_rounding`, r = ``init_rank``): ``sqrt(k) (rho + u) + k gamma_{k+1}``, first order in u.

    ``W^T`` (or E) is ``(c L) B_k^T + F`` with the very basis, ``c = ||W||_2`` to first order:
    ``Pi B_k = Pi (B_k - Q_k)`` has norm at most ``sqrt(k) rho``, and F, the product's rounding, at most
    ``k gamma_{k+1} c`` (:func:`structure_rounding`); ``W_O`` and ``W_2``, scaled from ``W_V^T`` and
    ``W_1^T``, round each entry once more, ``sqrt(k) u c`` in norm (an upper bound for the embedding).
    """
    k = structure_rank
    return math.sqrt(k) * (orthonormal_rounding(WIDTH, init_rank) + unit_roundoff()) + k * gamma(k + 1)


def attention_hidden(block, stream: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """The concatenated head outputs ``pattern @ V`` ``(B, N, d)`` of ``block``'s attention on ``stream``,
    from its recorded ``pattern``: what the attention's output matrix reads."""
    batch, length, width = stream.shape
    heads = block.attn.config.num_heads
    values = block.attn.qkv(block.ln1(stream)).view(batch, length, 3, heads, width // heads)[:, :, 2]
    return (pattern @ values.transpose(1, 2)).transpose(1, 2).reshape(batch, length, width)


def sub_block_complement(bound: torch.Tensor, hidden: torch.Tensor, output: torch.Tensor, after: torch.Tensor,
                         leak: float) -> torch.Tensor:
    """Per position, a bound on ``||x' Pi||_2`` for ``x' = fl(x + fl(h W^T))``, the stream ``after`` a
    sub-block whose ``output`` matrix W (zero bias) reads its hidden activation h, given ``||x Pi||_2 <=
    bound``: ``bound + leak ||W||_2 ||h|| + gamma_n || |h| |W|^T || + u ||x'||``, n the width of h.
    The exact ``h W^T`` leaves ``span(Q)`` by at most ``||Pi W||_2 ||h||`` (``leak``: :func:`writer_leak`);
    the product's rounding and the sum's may point anywhere."""
    rounding = torch.linalg.vector_norm(hidden.abs() @ output.abs().T, dim=-1)
    written = leak * torch.linalg.matrix_norm(output, 2) * torch.linalg.vector_norm(hidden, dim=-1)
    return bound + written + gamma(hidden.shape[-1]) * rounding + unit_roundoff() * torch.linalg.vector_norm(after, dim=-1)


def stream_complements(model: RoFormer, cache: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """Per position ``(B, N)``, a bound on ``||x Pi||_2`` for every recorded residual stream x (by hook name) of
    a model of :func:`apply_low_rank` of rank ``rank``, first order in u: the embedding's rows are within
    ``||E Pi||_2`` (:func:`writer_leak`), then each sub-block adds :func:`sub_block_complement`, with its
    hidden activation recomputed from the cache (the attention's heads from the recorded pattern, the
    MLP's GELU). A recomputation that summed in another order would differ by O(u) |h|: second order."""
    stream = cache["hook_embed"]
    embedding_leak = writer_leak(1, rank) * torch.linalg.matrix_norm(model.embed.weight, 2)
    bound = embedding_leak.expand(stream.shape[:-1])
    bounds = {"hook_embed": bound}
    leak = writer_leak(rank, rank)
    for layer, block in enumerate(model.blocks):
        prefix = f"blocks.{layer}."
        mid, post = cache[prefix + "hook_resid_mid"], cache[prefix + "hook_resid_post"]
        attention = attention_hidden(block, stream, cache[prefix + "attn.hook_pattern"])
        bound = bounds[prefix + "hook_resid_mid"] = sub_block_complement(bound, attention, block.attn.out.weight,
                                                                         mid, leak)
        mlp = block.mlp[:-1](block.ln2(mid))
        bound = bounds[prefix + "hook_resid_post"] = sub_block_complement(bound, mlp, block.mlp[-1].weight, post, leak)
        stream = post
    return bounds


def layer_norm_complement(norm: torch.nn.LayerNorm, stream: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """Per position, a bound on ``||LN(x) Pi||_2`` for a LayerNorm at its initial weight 1 and bias 0, given
    ``||x Pi||_2 <= bound``: ``s (bound + sqrt(d) |mu| + gamma_3 (||x|| + sqrt(d) |mu|))``, first order in u.

    ``LN(x) = (x - mu 1) s`` with the mean mu and ``s = 1 / sqrt(var + eps)`` as the LayerNorm computes
    them, each entry rounded at most three times (a difference and a product, or two products and a sum);
    ``||1 Pi||_2 <= sqrt(d)``. ``mu`` is within ``gamma_d max|x|`` of the exact mean, whether summed
    (``gamma_d mean|x|``) or updated as a running (Welford) mean (``(d/2 + 4) u max|x|`` for d >= 8), as is
    the mean computed here; s is computed here rather than taken from the LayerNorm, a relative
    difference of O(d u) on an O(u) bound: second order.
    """
    width = stream.shape[-1]
    mean = stream.mean(-1).abs() + 2 * gamma(width) * stream.abs().amax(-1)
    scale = torch.rsqrt(stream.var(-1, unbiased=False) + norm.eps)
    off_mean = math.sqrt(width) * mean
    return scale * (bound + off_mean + gamma(3) * (torch.linalg.vector_norm(stream, dim=-1) + off_mean))


@pytest.mark.parametrize("init", ["lowrank", "lowrank-anti"])
def test_residual_stream_and_its_layer_norms_lie_in_the_basis_at_initialisation(init):
    """Every residual stream the blocks and the unembedding read, and its LayerNorm, is in
    ``span(B)``: LayerNorm maps ``span(B)`` into itself because ``1^T B = 0`` (module docstring of
    :mod:`empirical.studies.markov.inits`). Up to rounding: each stream and LayerNorm within its bound on
    ``||v Pi||_2`` (:func:`stream_complements`, :func:`layer_norm_complement`), which the computed
    ``v C_hat`` exceeds by at most ``||C_hat - Pi||_2 ||v||`` (:func:`complement_rounding`) and its own
    rounding, ``gamma_d |v| |C_hat|``."""
    rank = 2
    model, basis = low_rank_model(init, rank=rank, num_layers=2)
    tokens = torch.randint(0, 2, (4, 16), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    bounds = stream_complements(model, cache, rank)
    streams = [(block.ln1, "hook_embed" if layer == 0 else f"blocks.{layer - 1}.hook_resid_post")
               for layer, block in enumerate(model.blocks)]
    streams += [(block.ln2, f"blocks.{layer}.hook_resid_mid") for layer, block in enumerate(model.blocks)]
    streams += [(model.ln_final, f"blocks.{len(model.blocks) - 1}.hook_resid_post")]
    complement = torch.eye(WIDTH, dtype=torch.float64) - basis @ basis.T
    for norm, name in streams:
        assert torch.equal(norm.weight, torch.ones(WIDTH, dtype=torch.float64)) and not norm.bias.any()
        stream = cache[name]
        for vectors, bound in ((stream, bounds[name]), (norm(stream), layer_norm_complement(norm, stream, bounds[name]))):
            allowed = ((bound + complement_rounding(rank) * torch.linalg.vector_norm(vectors, dim=-1))[..., None]
                       + gamma(WIDTH) * vectors.abs() @ complement.abs())
            assert ((vectors @ complement).abs() <= allowed).all(), name


def test_gaussian_arm_is_the_training_loops_own_model():
    config = MarkovSweepConfig(width=8)
    model_config, train_config = config.model_config("2-layer-tied"), config.train_config(seed=5)
    fresh = train(model_config, train_config, lambda step: None, stop_at=0, device="cpu", progress=False).model
    ours = initial_model(model_config, "gaussian", 1, seed=5)
    assert fresh.state_dict().keys() == ours.state_dict().keys()
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, ours.state_dict()[name]), name


def test_training_loop_resumes_the_initial_checkpoint(tmp_path):
    config = MarkovSweepConfig(width=8)
    model_config = config.model_config("1-layer-tied")
    train_config = TrainConfig(steps=5, batch_size=2, seed=1, precision="fp32")
    initial = initial_model(model_config, "lowrank-anti", 1, seed=1)
    write_initial_checkpoint(initial, train_config, tmp_path, task={})
    resumed = train(model_config, train_config, lambda step: None, tmp_path, stop_at=0, device="cpu",
                    progress=False).model
    for name, value in initial.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


@pytest.mark.parametrize(
    "init, rank, message",
    [
        ("xavier", 1, r"init: 'xavier'; expected one of \['gaussian', 'lowrank', 'lowrank-anti'\]"),
        ("lowrank", 9, r"init_rank: 9 with width 8; expected an integer in \[1, width - 1 = 7\]"),
        ("lowrank", 8, r"init_rank: 8 with width 8; expected an integer in \[1, width - 1 = 7\]"),
        ("lowrank-anti", 0, r"init_rank: 0 with width 8"),
        ("lowrank", 1.0, r"init_rank: 1.0 with width 8; expected an integer"),
    ],
)
def test_bad_initialisations_are_refused(init, rank, message):
    with pytest.raises(ValueError, match=message):
        check_init(init, rank, 8)
    config = RoFormerConfig(vocab_size=2, num_layers=1, num_heads=1, width=8)
    with pytest.raises(ValueError, match=message):
        initial_model(config, init, rank, seed=0)


def test_gaussian_is_not_a_low_rank_structure():
    with pytest.raises(ValueError, match=r"init: 'gaussian'; expected a low-rank initialisation"):
        apply_low_rank(RoFormer(RoFormerConfig(vocab_size=2, num_layers=1, num_heads=1, width=8)), "gaussian", 1,
                       torch.Generator())


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"inits": ("lowrank", "xavier")}, r"inits: \['lowrank', 'xavier'\]; expected a non-empty subset"),
        ({"inits": ()}, r"inits: \[\]; expected a non-empty subset"),
        ({"init_rank": 12}, r"init_rank: 12 with width 8; expected an integer in \[1, width - 1 = 7\]"),
    ],
)
def test_sweep_config_refuses_bad_initialisations(overrides, message):
    with pytest.raises(ValueError, match=message):
        MarkovSweepConfig(**overrides)
