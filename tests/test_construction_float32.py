"""Where float32 breaks (measured and pinned, not hidden).

* Precision floor: in float32 the end-to-end error sits near 2e-7 (the GD layers' rounding), so
  the 1e-9 float64 target is out of reach at any beta.
* Angle: the position heads must resolve ``beta`` from ``beta cos theta`` when the logits carry
  relative rounding ~6e-8. Measured on 64-column prompts: features exact (error <= 1e-10) for
  ``theta >= 7e-4`` (``1 - cos theta >= 2.45e-7``), erratic (1e-7 .. 0.5, depending on the
  prompt) for ``4e-4 < theta < 7e-4``, broken (error >= 0.75) for ``theta <= 4e-4``
  (``1 - cos theta <= 8e-8``, 0.7 float32 epsilon). With ``theta = pi / (N + 1)`` float32 is safe
  up to N ~ 4500 columns and fails beyond N ~ 7900; float64 is exact at all these angles.
* Beta: raising beta does not hurt (the gap grows with the logits) until the weights ``beta R``
  overflow float32 (beyond 3.4e38), where the prediction becomes NaN.
"""
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from construction import (
    ConstructionSpec,
    amplification,
    build_layout,
    build_network,
    choose_beta,
    parameters_for_prompt,
    reference,
)
from test_construction_helpers import hmm_prompt

P, L, T = 3, 3, 10
TOKENS = hmm_prompt(P, [10, 10, 10, 10, 10], 8, seed=2)
NUM_COLUMNS = len(TOKENS) + 1
PARAMS = parameters_for_prompt(TOKENS, P, L, T)
EXPECTED = reference.prediction(TOKENS, P, L, PARAMS.eta, T)
HISTORY = reference.history(TOKENS, P, L)


def errors(network, dtype):
    """(max history-feature error, end-to-end error) of a forward pass in ``dtype``."""
    trace = network.forward(TOKENS, dtype=dtype)
    feature = max(
        float(np.abs(trace.slot(f"history.{r}", "label").double().numpy().T - HISTORY[:, r]).max()) for r in range(1, L)
    )
    return feature, float(np.abs(trace.prediction.double().numpy() - EXPECTED).max())


def test_float32_error_floor_is_far_above_the_float64_target():
    network = build_network(PARAMS)
    _, error64 = errors(network, torch.float64)
    feature32, error32 = errors(network, torch.float32)
    assert error64 <= 1e-9
    assert feature32 <= 1e-9
    assert 1e-8 <= error32 <= 1e-5


def beta_at(theta: float) -> float:
    return choose_beta(1e-9, theta, NUM_COLUMNS, amplification(build_layout(P, L), False, T, PARAMS.eta, PARAMS.penalty))


@pytest.mark.parametrize("theta, breaks", [(1e-3, False), (7e-4, False), (4e-4, True), (3e-4, True)])
def test_float32_position_heads_break_between_theta_7e_4_and_4e_4(theta, breaks):
    network = build_network(ConstructionSpec(P, L, T, PARAMS.eta, beta_at(theta), theta, penalty=PARAMS.penalty))
    feature64, error64 = errors(network, torch.float64)
    feature32, _ = errors(network, torch.float32)
    assert feature64 <= 1e-12 and error64 <= 1e-9
    if breaks:
        assert feature32 >= 0.75
    else:
        assert feature32 <= 1e-9


@pytest.mark.parametrize("scale", [1e3, 1e20])
def test_float32_is_insensitive_to_larger_beta(scale):
    baseline = errors(build_network(PARAMS), torch.float32)[1]
    scaled = replace(PARAMS, beta=PARAMS.beta * scale)
    feature32, error32 = errors(build_network(scaled), torch.float32)
    assert feature32 <= 1e-9
    assert error32 <= 2 * baseline


def test_float32_overflows_beyond_its_largest_beta():
    overflowing = replace(PARAMS, beta=1e39)
    network = build_network(overflowing)
    assert errors(network, torch.float64)[1] <= 1e-9
    assert math.isnan(errors(network, torch.float32)[1])
