"""RoFormer: rotary embeddings against an explicit rotation matrix, the relative-position property,
the recording path against the fused path, causality, and config errors."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from empirical.model import HOOK_NAMES, RoFormer, RoFormerConfig, apply_rotary, rotary_cos_sin

TINY = RoFormerConfig(vocab_size=5, num_layers=2, num_heads=2, width=16)


def rotation_matrix(position: int, head_dim: int, base: float) -> np.ndarray:
    """Block-diagonal R_m of RoFormer eq. 13, built entry by entry in float64."""
    matrix = np.zeros((head_dim, head_dim))
    for i in range(head_dim // 2):
        angle = position * base ** (-2 * i / head_dim)
        matrix[2 * i, 2 * i], matrix[2 * i, 2 * i + 1] = math.cos(angle), -math.sin(angle)
        matrix[2 * i + 1, 2 * i], matrix[2 * i + 1, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return matrix


@given(st.integers(0, 200), st.sampled_from([2, 4, 8, 16]), st.integers(0, 2**16))
def test_rotary_equals_explicit_rotation_matrix(position, head_dim, seed):
    vector = torch.randn(head_dim, generator=torch.Generator().manual_seed(seed))
    cos, sin = rotary_cos_sin(torch.tensor([position]), head_dim, 10000.0)
    rotated = apply_rotary(vector[None], cos, sin)[0]
    expected = rotation_matrix(position, head_dim, 10000.0) @ vector.double().numpy()
    # float32 angles of positions <= 200: rounding ~ 200 * 6e-8 rad, times |x| <= ~4.
    np.testing.assert_allclose(rotated.numpy(), expected, atol=1e-4, rtol=0)


@given(st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.integers(0, 2**16))
def test_rotary_logit_depends_on_offset_only(query_position, key_position, shift, seed):
    generator = torch.Generator().manual_seed(seed)
    query, key = torch.randn(2, 8, generator=generator)

    def logit(m, n):
        cos, sin = rotary_cos_sin(torch.tensor([m, n]), 8, 10000.0)
        rotated_query = apply_rotary(query[None], cos[:1], sin[:1])[0]
        rotated_key = apply_rotary(key[None], cos[1:], sin[1:])[0]
        return float(rotated_query @ rotated_key)

    original = logit(query_position, key_position)
    shifted = logit(query_position + shift, key_position + shift)
    assert shifted == pytest.approx(original, abs=2e-4)
    if query_position == key_position:  # no offset: the rotation cancels exactly in exact arithmetic
        assert original == pytest.approx(float(query @ key), abs=2e-4)


def test_rotary_logit_changes_with_offset():
    query = key = torch.ones(1, 8)
    cos, sin = rotary_cos_sin(torch.tensor([0, 1, 5]), 8, 10000.0)
    rotated_key = apply_rotary(key.expand(3, 8), cos, sin)
    logits = apply_rotary(query, cos[:1], sin[:1]) @ rotated_key.T
    assert len({round(float(x), 4) for x in logits[0]}) == 3


def test_recording_path_equals_fast_path_and_records_every_hook():
    torch.manual_seed(0)
    model = RoFormer(TINY)
    tokens = torch.randint(0, 5, (3, 11))
    fast = model(tokens)
    recorded, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(recorded, fast, rtol=1e-5, atol=1e-5)
    expected_names = {"hook_embed"} | {
        name.format(layer=layer) for name in HOOK_NAMES[1:] for layer in range(TINY.num_layers)
    }
    assert set(cache) == expected_names
    assert cache["blocks.1.hook_resid_post"].shape == (3, 11, 16)
    pattern = cache["blocks.0.attn.hook_pattern"]
    scores = cache["blocks.0.attn.hook_attn_scores"]
    assert pattern.shape == scores.shape == (3, 2, 11, 11)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(3, 2, 11))
    future = torch.ones(11, 11, dtype=torch.bool).triu(1)
    assert torch.isneginf(scores[..., future]).all() and torch.isfinite(scores[..., ~future]).all()
    assert (pattern[..., future] == 0).all()
    torch.testing.assert_close(pattern, scores.softmax(-1))


def test_final_residual_gives_logits():
    torch.manual_seed(1)
    model = RoFormer(TINY)
    tokens = torch.randint(0, 5, (2, 7))
    logits, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(model.unembed(model.ln_final(cache["blocks.1.hook_resid_post"])), logits)


def test_model_is_causal():
    torch.manual_seed(2)
    model = RoFormer(TINY)
    tokens = torch.randint(0, 5, (2, 9))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 5
    torch.testing.assert_close(model(tokens)[:, :6], model(changed)[:, :6], rtol=0, atol=1e-6)
    assert not torch.allclose(model(tokens)[:, 6:], model(changed)[:, 6:])


def test_tied_embeddings_share_one_matrix():
    model = RoFormer(RoFormerConfig(vocab_size=5, num_layers=1, num_heads=2, width=8, tie_embeddings=True))
    assert model.unembed.weight is model.embed.weight
    untied = RoFormer(RoFormerConfig(vocab_size=5, num_layers=1, num_heads=2, width=8))
    assert untied.num_parameters() - model.num_parameters() == 5 * 8
    assert model.num_parameters(embeddings=False) == untied.num_parameters(embeddings=False)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_heads": 3}, "num_heads: 3 does not divide width 16"),
        ({"num_layers": 0}, "num_layers: 0; expected an integer >= 1"),
        ({"vocab_size": 0}, "vocab_size: 0"),
        ({"num_heads": 16}, "head size 16/16 = 1, which is odd"),
        ({"width": 2.5}, "width: 2.5"),
        ({"rotary_base": 1.0}, "rotary_base: 1.0"),
    ],
)
def test_bad_model_configs_are_rejected(changes, message):
    values = TINY.to_dict() | changes
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        RoFormerConfig(**values)


def test_config_round_trips_and_rejects_unknown_keys():
    assert RoFormerConfig.from_dict(TINY.to_dict()) == TINY
    with pytest.raises(ValueError, match=r"unknown keys \['depth'\]"):
        RoFormerConfig.from_dict(TINY.to_dict() | {"depth": 3})


def test_rotary_tables_are_computed_once_per_forward_pass(monkeypatch):
    import empirical.model

    calls = []
    real = empirical.model.rotary_cos_sin

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(empirical.model, "rotary_cos_sin", counting)
    model = RoFormer(RoFormerConfig(vocab_size=5, num_layers=3, num_heads=2, width=16))
    tokens = torch.randint(0, 5, (2, 7))
    model(tokens)
    assert calls == [(7,)]
    model.run_with_cache(tokens)
    assert calls == [(7,), (7,)]
