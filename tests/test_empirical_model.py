"""RoFormer: rotary embeddings against an explicit rotation matrix, the relative-position property,
the recording path against the fused path, causality, and config errors."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from empirical.training.model import HOOK_NAMES, RoFormer, RoFormerConfig, apply_rotary, rotary_cos_sin
from rounding import gamma, reordered_forward_tolerance, sub_blocks_before, unit_roundoff

TINY = RoFormerConfig(vocab_size=5, num_layers=2, num_heads=2, width=16)


def rotation_matrix(position: int, head_dim: int, base: float) -> np.ndarray:
    """Block-diagonal R_m of RoFormer eq. 13, built entry by entry in float64."""
    matrix = np.zeros((head_dim, head_dim))
    for i in range(head_dim // 2):
        angle = position * base ** (-2 * i / head_dim)
        matrix[2 * i, 2 * i], matrix[2 * i, 2 * i + 1] = math.cos(angle), -math.sin(angle)
        matrix[2 * i + 1, 2 * i], matrix[2 * i + 1, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return matrix


DTYPES = st.sampled_from([torch.float32, torch.float64])


def rotation_error(position: int, base: float, dtype: torch.dtype) -> float:
    """Bound on ``|rot_m(x) - R_m x|_2 / |x|_2`` for :func:`apply_rotary` at position m in ``dtype``
    (unit roundoff u). The angle ``m theta_i`` is ``fl(m fl(base^-fl(2i/d)))``: the exponent's
    rounding moves ``theta_i`` by ``ln(base) u theta_i``, the power and the product by ``2u theta_i``
    more, so the angle is off by at most ``(ln(base) + 3) u m`` (``theta_i <= 1``), which rotates
    each coordinate pair by that much; cos and sin are each within u (1 ulp), ``sqrt(2) u |pair|``;
    the rotation's two products and a sum, ``gamma_2 |pair|``. A pair errs by ``sqrt(2)`` times its
    worst coordinate: ``sqrt(2) ((ln(base) + 3) m + 5) u``. The float64 oracle :func:`rotation_matrix`
    errs by the same with ``u = 2^-53``."""
    per_unit_roundoff = math.sqrt(2) * ((math.log(base) + 3) * position + 5)
    return per_unit_roundoff * (unit_roundoff(dtype) + unit_roundoff())


@given(st.integers(0, 200), st.sampled_from([2, 4, 8, 16]), st.integers(0, 2**16), DTYPES)
def test_rotary_equals_explicit_rotation_matrix(position, head_dim, seed, dtype):
    vector = torch.randn(head_dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    cos, sin = rotary_cos_sin(torch.tensor([position]), head_dim, 10000.0, dtype)
    rotated = apply_rotary(vector[None], cos, sin)[0]
    assert rotated.dtype == dtype
    expected = rotation_matrix(position, head_dim, 10000.0) @ vector.double().numpy()
    bound = rotation_error(position, 10000.0, dtype) * float(vector.double().norm())
    np.testing.assert_allclose(rotated.double().numpy(), expected, atol=bound, rtol=0)


@given(st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.integers(0, 2**16), DTYPES)
def test_rotary_logit_depends_on_offset_only(query_position, key_position, shift, seed, dtype):
    """Each computed logit ``rot_m(q) . rot_n(k)`` is within ``(e_m + e_n + gamma_8) |q| |k|`` of
    ``q^T R_{n-m} k`` (:func:`rotation_error` ``e``, then a dot product of 8 terms), so a logit and
    its shifted copy differ by at most the sum of their two bounds."""
    generator = torch.Generator().manual_seed(seed)
    query, key = torch.randn(2, 8, generator=generator, dtype=torch.float64).to(dtype)
    scale = float(query.double().norm() * key.double().norm())

    def logit(m, n):
        cos, sin = rotary_cos_sin(torch.tensor([m, n]), 8, 10000.0, dtype)
        rotated_query = apply_rotary(query[None], cos[:1], sin[:1])[0]
        rotated_key = apply_rotary(key[None], cos[1:], sin[1:])[0]
        return float(rotated_query @ rotated_key)

    def logit_error(m, n):
        return (rotation_error(m, 10000.0, dtype) + rotation_error(n, 10000.0, dtype) + gamma(8, dtype)) * scale

    original = logit(query_position, key_position)
    shifted = logit(query_position + shift, key_position + shift)
    assert shifted == pytest.approx(original, abs=logit_error(query_position, key_position)
                                    + logit_error(query_position + shift, key_position + shift))
    if query_position == key_position:  # no offset: the rotation cancels exactly in exact arithmetic
        plain = float(query @ key)  # within gamma_8 |q| |k| of the exact q . k
        assert original == pytest.approx(plain, abs=logit_error(query_position, key_position) + gamma(8, dtype) * scale)


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
    # The same function, summed in another order (explicit softmax vs the fused attention kernel).
    bound = reordered_forward_tolerance(torch.float32, TINY, tokens.shape[1], sub_blocks_before("logits", TINY),
                                        float(fast.detach().abs().max()))
    torch.testing.assert_close(recorded, fast, rtol=0, atol=bound)
    expected_names = {"hook_embed"} | {
        name.format(layer=layer) for name in HOOK_NAMES[1:] for layer in range(TINY.num_layers)
    }
    assert set(cache) == expected_names
    assert cache["blocks.1.hook_resid_post"].shape == (3, 11, 16)
    pattern = cache["blocks.0.attn.hook_pattern"]
    scores = cache["blocks.0.attn.hook_attn_scores"]
    assert pattern.shape == scores.shape == (3, 2, 11, 11)
    # A float32 softmax row divides its N = 11 computed exponentials by their computed sum (gamma_{N-1}
    # relative), at most two roundings an entry (a reciprocal and a product, or a quotient); the exact
    # sum of the entries is then within gamma_{N+1} of 1, and summing them here adds gamma_{N-1}.
    length = tokens.shape[1]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(3, 2, length), rtol=0, atol=gamma(2 * length, torch.float32))
    future = torch.ones(11, 11, dtype=torch.bool).triu(1)
    assert torch.isneginf(scores[..., future]).all() and torch.isfinite(scores[..., ~future]).all()
    assert (pattern[..., future] == 0).all()
    assert torch.equal(pattern, scores.softmax(-1))  # the recording path's own operation on the same scores


def test_final_residual_gives_logits():
    torch.manual_seed(1)
    model = RoFormer(TINY)
    tokens = torch.randint(0, 5, (2, 7))
    logits, cache = model.run_with_cache(tokens)
    # The recording path's own last two operations on the stream it recorded (no patch): exact.
    assert torch.equal(model.unembed(model.ln_final(cache["blocks.1.hook_resid_post"])), logits)


def test_model_is_causal():
    torch.manual_seed(2)
    model = RoFormer(TINY)
    tokens = torch.randint(0, 5, (2, 9))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 5
    # A masked score is -inf, its weight exactly 0, and adding 0 changes no sum: the first 6
    # positions are computed from the same numbers in the same order.
    assert torch.equal(model(tokens)[:, :6], model(changed)[:, :6])
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
    import empirical.training.model

    calls = []
    real = empirical.training.model.rotary_cos_sin

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(empirical.training.model, "rotary_cos_sin", counting)
    model = RoFormer(RoFormerConfig(vocab_size=5, num_layers=3, num_heads=2, width=16))
    tokens = torch.randint(0, 5, (2, 7))
    model(tokens)
    assert calls == [(7,)]
    model.run_with_cache(tokens)
    assert calls == [(7,), (7,)]
