"""The RoFormer exported to a TransformerLens HookedTransformer: logits and every activation of
HOOK_NAMES equal ours in float32 and float64 on random weights, a hook patch acts the same in both,
the export directory round-trips offline, configs it cannot express are refused, the project does
not import transformer_lens; and the hand-built network's softmax attention in TransformerLens's
``hook_pattern`` layout."""
import dataclasses
import importlib
import json
import math
import os
import socket
import stat
import sys

import pytest
import torch
from fresh_imports import project_imported_afresh

import construction
import hmmtf
from empirical.training.checkpoint import save_checkpoint
from empirical.training.model import HOOK_NAMES, ResidualPatch, RoFormer, RoFormerConfig
from empirical.interop.transformer_lens_interop import (
    export_hooked_transformer,
    hand_built_patterns,
    hooked_transformer_config,
    load_hooked_transformer,
    to_hooked_transformer,
)
from empirical.training.result_files import EXPORT_CONFIG_FILE, EXPORT_WEIGHTS_FILE
from rounding import reordered_forward_tolerance, sub_blocks_before, unit_roundoff
from test_construction_helpers import hmm_prompt

pytestmark = pytest.mark.xdist_group("transformer-lens")
"""One xdist worker runs this module: the first import of TransformerLens in a process (about
3 s on 2 cores) is paid once, not once per worker."""

TINY = RoFormerConfig(vocab_size=7, num_layers=1, num_heads=2, width=8)
# Non-default base, MLP width and tying, so a base, d_mlp or unembedding mistake shows.
SEVERAL = RoFormerConfig(vocab_size=7, num_layers=3, num_heads=4, width=32, mlp_ratio=2, rotary_base=500.0,
                         tie_embeddings=True)
SCALED = dataclasses.replace(SEVERAL, attention_scale=2.5)
"""A non-default attention scale, so an attn_scale mistake shows."""
PROMPT_SHAPE = (3, 40)


def random_roformer(config: RoFormerConfig, dtype: torch.dtype, seed: int = 0) -> RoFormer:
    """A RoFormer whose every parameter is random and O(1) in effect, unlike the initialisation:
    matrices N(0, 1/fan_in) (embedding N(0, 1)), LayerNorm weights 1 + N(0, 0.25), every bias
    and LayerNorm bias N(0, 0.25); a swapped or transposed tensor then changes the output."""
    model = RoFormer(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if name == "embed.weight":
                parameter.copy_(noise)
            elif parameter.ndim == 2:
                parameter.copy_(noise / math.sqrt(parameter.shape[1]))
            elif name.endswith("weight"):
                parameter.copy_(1 + 0.5 * noise)
            else:
                parameter.copy_(0.5 * noise)
    return model.to(dtype).eval()


def random_prompts(config: RoFormerConfig, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, PROMPT_SHAPE, generator=torch.Generator().manual_seed(seed))


def assert_matches(name: str, ours: torch.Tensor, theirs: torch.Tensor, config: RoFormerConfig) -> None:
    """Same shape, dtype and ``-inf`` entries (the causal mask), finite entries within
    :func:`rounding.reordered_forward_tolerance`: both libraries compute the same function in the
    same precision but sum in different orders."""
    assert theirs.shape == ours.shape and theirs.dtype == ours.dtype, name
    finite = torch.isfinite(ours)
    assert torch.equal(finite, torch.isfinite(theirs)) and torch.equal(ours[~finite], theirs[~finite]), name
    difference = float((ours[finite] - theirs[finite]).abs().max())
    bound = reordered_forward_tolerance(ours.dtype, config, PROMPT_SHAPE[1], sub_blocks_before(name, config),
                                        float(ours[finite].abs().max()))
    assert difference <= bound, f"{name}: |ours - TransformerLens| = {difference:.3g} > {bound:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("config", [TINY, SEVERAL, SCALED], ids=["1x2", "3x4x32", "3x4x32-scaled"])
def test_hooked_transformer_has_our_logits_and_activations(config, dtype):
    model = random_roformer(config, dtype)
    hooked = to_hooked_transformer(model)
    tokens = random_prompts(config)
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
        their_logits, their_cache = hooked.run_with_cache(tokens)
    assert_matches("logits", logits, their_logits, config)
    names = ["hook_embed"] + [name.format(layer=layer)
                              for name in HOOK_NAMES[1:] for layer in range(config.num_layers)]
    assert sorted(cache) == sorted(names)
    for name in names:
        assert_matches(name, cache[name], their_cache[name], config)


@pytest.mark.parametrize("mode", ["replace", "add"])
def test_a_hook_patch_acts_on_both_models_alike(mode):
    """``blocks.1.hook_resid_post`` replaced at one position by a given vector (or that vector
    added): in TransformerLens with ``run_with_hooks``, in ours with a :class:`ResidualPatch`."""
    model = random_roformer(SEVERAL, torch.float32)
    hooked = to_hooked_transformer(model)
    tokens = random_prompts(SEVERAL)
    position = 17
    vector = torch.randn(SEVERAL.width, generator=torch.Generator().manual_seed(3))

    def patch(stream: torch.Tensor, hook) -> torch.Tensor:
        patched = stream.clone()
        patched[:, position] = vector if mode == "replace" else patched[:, position] + vector
        return patched

    with torch.no_grad():
        ours = model(tokens, [ResidualPatch(1, position, vector, mode)])
        theirs = hooked.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_resid_post", patch)])
        unpatched = model(tokens)
    assert_matches("logits", ours, theirs, SEVERAL)
    torch.testing.assert_close(ours[:, :position], unpatched[:, :position], rtol=0, atol=0)
    assert (ours[:, position:] - unpatched[:, position:]).abs().amax(-1).min() > 1e-2


def test_export_directory_reloads_offline_with_the_same_logits(tmp_path, monkeypatch, capsys):
    model = random_roformer(SEVERAL, torch.float32)
    save_checkpoint(tmp_path / "checkpoint", model, None, {"step": 7, "task": {}, "train": {}})
    out = tmp_path / "lens"
    assert hmmtf.main(["export", str(tmp_path / "checkpoint"), "--to", "transformer-lens", str(out),
                       "--context-length", "64"]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == str(out)
    document = json.loads((out / EXPORT_CONFIG_FILE).read_text())
    assert document["hooked_transformer_config"] == hooked_transformer_config(SEVERAL, torch.float32, 64)
    assert document["source"]["step"] == 7 and document["source"]["model"] == SEVERAL.to_dict()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((out / EXPORT_WEIGHTS_FILE).stat().st_mode) == 0o666 & ~umask  # as its config.json, not 0600

    def refuse(*args, **kwargs):
        raise AssertionError("load_hooked_transformer tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    loaded = load_hooked_transformer(out)
    tokens = random_prompts(SEVERAL)
    with torch.no_grad():
        assert torch.equal(loaded(tokens), to_hooked_transformer(model, context_length=64)(tokens))
        assert_matches("logits", model(tokens), loaded(tokens), SEVERAL)
    assert loaded.cfg.n_ctx == 64


def test_export_from_a_checkpoint_path_equals_export_from_the_model(tmp_path):
    model = random_roformer(TINY, torch.float32)
    save_checkpoint(tmp_path / "checkpoint", model, None, {"step": 0})
    export_hooked_transformer(tmp_path / "checkpoint", tmp_path / "from_path")
    export_hooked_transformer(model, tmp_path / "from_model")
    from_path = load_hooked_transformer(tmp_path / "from_path").state_dict()
    from_model = load_hooked_transformer(tmp_path / "from_model").state_dict()
    assert all(torch.equal(tensor, from_model[name]) for name, tensor in from_path.items())


@dataclasses.dataclass(frozen=True)
class PostNormConfig(RoFormerConfig):
    """A config with an option HookedTransformer lacks (BERT-style post-norm blocks)."""

    norm_position: str = "post"


def test_export_refuses_what_transformer_lens_cannot_express(tmp_path):
    post_norm = RoFormer(PostNormConfig(**TINY.to_dict()))
    message = (r"PostNormConfig\.norm_position: 'post' has no TransformerLens HookedTransformer equivalent in "
               r"this export; expected a config with only the fields")
    with pytest.raises(ValueError, match=message):
        to_hooked_transformer(post_norm)
    with pytest.raises(ValueError, match="norm_position"):
        export_hooked_transformer(post_norm, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="context_length: 0; expected an integer >= 1"):
        to_hooked_transformer(RoFormer(TINY), context_length=0)
    with pytest.raises(TypeError, match="model_or_checkpoint: dict; expected a RoFormer or a checkpoint directory"):
        to_hooked_transformer({})
    with pytest.raises(ValueError, match="has no config.json; expected a TransformerLens export"):
        load_hooked_transformer(tmp_path)


def test_project_imports_without_transformer_lens():
    """``hmmtf`` with every subcommand's module, imported afresh with TransformerLens hidden: not
    one module tries to import it (:mod:`fresh_imports`)."""
    with project_imported_afresh(hidden=("transformer_lens",)) as imports:
        importlib.import_module("hmmtf").build_parser()
        importlib.import_module("empirical.interop.transformer_lens_interop")
        imported = set(sys.modules)
    assert imports.attempts == []
    assert {"empirical.interop.transformer_lens_interop", "empirical.training.model", "hmmtf.commands.bounds"} <= imported


def hand_built_traces() -> list[construction.Trace]:
    """Two prompts of one length (p = 3, L = 3, T = 1), each through the network built for it."""
    traces = []
    for seed in (1, 2):
        tokens = hmm_prompt(3, [8, 9], 5, seed=seed)
        parameters = construction.parameters_for_prompt(tokens, 3, 3, 1)
        traces.append(construction.build_network(parameters).forward(tokens))
    return traces


def test_hand_built_patterns_have_the_hook_pattern_layout():
    traces = hand_built_traces()
    patterns = hand_built_patterns(traces)
    assert list(patterns) == ["history.1", "history.2", "label"]
    columns = 8 + 1 + 9 + 1 + 5 + 1
    for name, pattern in patterns.items():
        heads = traces[0].attn_weights[name].shape[0]
        assert pattern.shape == (2, heads, columns, columns)  # (batch, head, query, key)
        # softmax then a sum of N terms, float64: the normaliser and the sum each round by <= N u.
        ones = torch.ones(2, heads, columns, dtype=torch.float64)
        bound = 2 * (columns + 1) * unit_roundoff()
        torch.testing.assert_close(pattern.sum(-1), ones, rtol=0, atol=bound)
        for index, trace in enumerate(traces):
            assert torch.equal(pattern[index], trace.attn_weights[name])


def test_hand_built_patterns_refuses_traces_it_cannot_stack():
    traces = hand_built_traces()
    with pytest.raises(ValueError, match="traces: empty"):
        hand_built_patterns([])
    tokens = hmm_prompt(3, [8, 9], 6, seed=3)
    longer = construction.build_network(construction.parameters_for_prompt(tokens, 3, 3, 1))
    with pytest.raises(ValueError, match="expected prompts of one length"):
        hand_built_patterns([traces[0], longer.forward(tokens)])
    message = r"traces\[0\]: no attention weights for \['history.1', 'history.2', 'label'\]"
    with pytest.raises(ValueError, match=message):
        hand_built_patterns([longer.forward(tokens, record_attention=False)])
