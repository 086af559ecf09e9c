"""Initialisations of the Markov study (:mod:`empirical.markov.inits`): exact rank, singular values
and Frobenius norms of the low-rank matrices, their shared residual basis, the signs of the MLP and
value/output paths, the residual stream staying in the basis through the LayerNorms, agreement of
the Gaussian arm with the training loop's own model, the step-0 checkpoint the loop resumes, and
refusals of bad names and ranks."""
import math

import pytest
import torch

from empirical.markov.config import MarkovSweepConfig
from empirical.markov.inits import apply_low_rank, check_init, initial_model
from empirical.markov.runs import write_initial_checkpoint
from empirical.model import RoFormer, RoFormerConfig
from empirical.train import TrainConfig, train

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


@pytest.mark.parametrize("init", ["lowrank", "lowrank-anti"])
@pytest.mark.parametrize("rank, num_layers", [(1, 1), (3, 2), (WIDTH - 1, 1)])
def test_low_rank_matrices_have_the_stated_rank_and_scale(init, rank, num_layers):
    """Rank ``k`` (``min(r, V - 1) = 1`` for the binary embedding), every non-zero singular value
    ``sigma / sqrt(k)`` and Frobenius norm ``sigma = std sqrt(m n)``."""
    model, _ = low_rank_model(init, rank, num_layers)
    for name, (matrix, std, _) in structured_matrices(model).items():
        expected_rank = 1 if name == "embed" else rank
        norm = std * math.sqrt(matrix.numel())
        singular_values = torch.linalg.svdvals(matrix)
        assert torch.linalg.matrix_rank(matrix).item() == expected_rank, name
        assert torch.linalg.matrix_norm(matrix).item() == pytest.approx(norm, rel=1e-12), name
        torch.testing.assert_close(singular_values[:expected_rank],
                                   torch.full((expected_rank,), norm / math.sqrt(expected_rank), dtype=torch.float64),
                                   rtol=1e-10, atol=0)


@pytest.mark.parametrize("init, mlp_sign", [("lowrank", 1.0), ("lowrank-anti", -1.0)])
def test_low_rank_matrices_share_the_residual_basis_and_the_stated_signs(init, mlp_sign):
    rank = 2
    model, basis = low_rank_model(init, rank, num_layers=2)
    projector = basis @ basis.T
    torch.testing.assert_close(basis.T @ basis, torch.eye(rank, dtype=torch.float64), rtol=0, atol=1e-12)
    assert basis.sum(dim=0).abs().max().item() < 1e-12  # orthogonal to the all-ones vector
    for name, (matrix, _, space) in structured_matrices(model).items():
        projected = matrix @ projector if space == "rows" else projector @ matrix
        torch.testing.assert_close(projected, matrix, rtol=0, atol=1e-12, msg=name)
    embedding = model.embed.weight
    torch.testing.assert_close(embedding.sum(dim=0), torch.zeros(WIDTH, dtype=torch.float64), rtol=0, atol=1e-12)
    for block in model.blocks:
        up, down = block.mlp[0].weight, block.mlp[-1].weight
        ratio = torch.linalg.matrix_norm(down) / torch.linalg.matrix_norm(up)
        torch.testing.assert_close(down, mlp_sign * ratio * up.T, rtol=0, atol=1e-12)
        values = block.attn.qkv.weight[2 * WIDTH:]
        value_output = block.attn.out.weight @ values  # aligned in both: c B B^T with c > 0
        eigenvalues = torch.linalg.eigvalsh((value_output + value_output.T) / 2)
        assert eigenvalues.min().item() > -1e-12
        torch.testing.assert_close(value_output, value_output.T, rtol=0, atol=1e-12)


def test_untied_unembedding_keeps_its_gaussian_draw():
    config = RoFormerConfig(vocab_size=2, num_layers=1, num_heads=1, width=WIDTH, tie_embeddings=False, init_std=STD)
    gaussian = initial_model(config, "gaussian", 1, seed=3)
    structured = initial_model(config, "lowrank", 1, seed=3)
    assert torch.equal(structured.unembed.weight, gaussian.unembed.weight)
    assert not torch.equal(structured.embed.weight, gaussian.embed.weight)
    assert torch.linalg.matrix_rank(structured.unembed.weight).item() == 2


@pytest.mark.parametrize("init", ["lowrank", "lowrank-anti"])
def test_residual_stream_and_its_layer_norms_lie_in_the_basis_at_initialisation(init):
    """Every residual stream the blocks and the unembedding read, and its LayerNorm, is in
    ``span(B)``: LayerNorm maps ``span(B)`` into itself because ``1^T B = 0`` (module docstring of
    :mod:`empirical.markov.inits`)."""
    model, basis = low_rank_model(init, rank=2, num_layers=2)
    tokens = torch.randint(0, 2, (4, 16), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    streams = [(block.ln1, cache["hook_embed"] if layer == 0 else cache[f"blocks.{layer - 1}.hook_resid_post"])
               for layer, block in enumerate(model.blocks)]
    streams += [(block.ln2, cache[f"blocks.{layer}.hook_resid_mid"]) for layer, block in enumerate(model.blocks)]
    streams += [(model.ln_final, cache[f"blocks.{len(model.blocks) - 1}.hook_resid_post"])]
    complement = torch.eye(WIDTH, dtype=torch.float64) - basis @ basis.T
    for norm, stream in streams:
        for vectors in (stream, norm(stream)):
            assert (vectors @ complement).abs().max().item() < 1e-12 * vectors.abs().max().item()


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
