"""Activation patching: a patch with the network's own activation changes nothing; bad input is
refused with the argument named. (Parity of a patch with TransformerLens's hooks:
tests/test_empirical_transformer_lens.py.)"""
import pytest
import torch

from empirical.model import ResidualPatch, RoFormerConfig
from test_empirical_transformer_lens import random_roformer

CONFIG = RoFormerConfig(vocab_size=5, num_layers=3, num_heads=2, width=16)


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (3, 20), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_patching_the_networks_own_activation_changes_nothing():
    model, prompts = random_roformer(CONFIG, torch.float32), tokens()
    logits, cache = model.run_with_cache(prompts)
    for layer in range(CONFIG.num_layers):
        for position in (0, 7, 19):
            own = cache[f"blocks.{layer}.hook_resid_post"][:, position]
            patched, patched_cache = model.run_with_cache(prompts, [ResidualPatch(layer, position, own)])
            assert torch.equal(patched, logits)
            assert all(torch.equal(patched_cache[name], value) for name, value in cache.items())
            zero = torch.zeros(CONFIG.width)
            assert torch.equal(model(prompts, [ResidualPatch(layer, position, zero, "add")]), model(prompts))


@torch.no_grad()
def test_a_patch_acts_from_its_position_on_and_add_is_replace_by_the_sum():
    model, prompts = random_roformer(CONFIG, torch.float32), tokens()
    _, cache = model.run_with_cache(prompts)
    stream = cache["blocks.1.hook_resid_post"][:, 7]
    shift = torch.randn(3, CONFIG.width, generator=torch.Generator().manual_seed(2))
    added, added_cache = model.run_with_cache(prompts, [ResidualPatch(1, 7, shift, "add")])
    replaced, _ = model.run_with_cache(prompts, [ResidualPatch(1, 7, stream + shift)])
    assert torch.equal(added, replaced)
    assert torch.equal(added_cache["blocks.1.hook_resid_post"][:, 7], stream + shift)  # the cache records the patch
    unpatched = model(prompts)
    fast = model(prompts, [ResidualPatch(1, 7, shift, "add")])
    assert torch.equal(fast[:, :7], unpatched[:, :7])  # causal: earlier positions are untouched
    change = (fast[:, 7:] - unpatched[:, 7:]).abs().amax(-1)
    assert change[:, 0].min() > 0.1 and change.min() > 1e-5  # ... and every later one moves
    torch.testing.assert_close(fast, added, rtol=0, atol=1e-5)  # fused and recording paths agree


def test_bad_patches_are_refused_with_the_argument_named():
    model, prompts = random_roformer(CONFIG, torch.float32), tokens()
    vector = torch.zeros(CONFIG.width)
    cases = [
        (ResidualPatch(3, 0, vector), r"patches\[0\]\.layer: 3; expected an integer in 0\.\.2"),
        (ResidualPatch(-1, 0, vector), r"patches\[0\]\.layer: -1; expected an integer in 0\.\.2"),
        (ResidualPatch(0, 20, vector), r"patches\[0\]\.position: 20; expected an integer in 0\.\.19"),
        (ResidualPatch(0, 0, torch.zeros(15)), r"patches\[0\]\.vector: shape \(15,\); expected \(16,\) or \(3, 16\)"),
        (ResidualPatch(0, 0, torch.zeros(2, 16)), r"patches\[0\]\.vector: shape \(2, 16\); expected \(16,\) or \(3, 16\)"),
    ]
    for patch, message in cases:
        with pytest.raises(ValueError, match=message):
            model(prompts, [patch])
        with pytest.raises(ValueError, match=message):
            model.run_with_cache(prompts, [patch])
    with pytest.raises(ValueError, match=r"mode: 'swap'; expected one of \('replace', 'add'\)"):
        ResidualPatch(0, 0, vector, "swap")
    with pytest.raises(ValueError, match="vector: list; expected a floating-point tensor"):
        ResidualPatch(0, 0, [0.0] * 16)
