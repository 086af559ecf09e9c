"""Layout, embedding, parameter refusals, weight export, the ``construction-info`` command, and the
API section of docs/construction.md (its signatures are the code's, its example runs)."""
import dataclasses
import inspect
import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

import hmmtf
from construction import (
    amplification,
    build_layout,
    build_network,
    embed,
    layer_leak,
    load_weights,
    Network,
    parameters_for_prompt,
    save_weights,
    Stage,
    Trace,
)
from construction.leak import choose_beta
from rounding import gamma, leak_rounding
from test_construction_helpers import hmm_prompt

P, L, T = 3, 2, 4
TOKENS = hmm_prompt(P, [8, 9, 7], 5, seed=1)
PARAMS = parameters_for_prompt(TOKENS, P, L, T)


@pytest.mark.parametrize("p, history_length, m", [(2, 1, 1), (4, 3, 1), (3, 2, 2), (2, 3, 3)])
def test_layout_slots_tile_the_stream(p, history_length, m):
    layout = build_layout(p, history_length, m)
    starts = [start for _, start, _ in layout.slots]
    stops = [stop for _, _, stop in layout.slots]
    assert starts[0] == 0 and starts[1:] == stops[:-1]
    assert len({name for name, _, _ in layout.slots}) == len(layout.slots)
    joint = p**m if m >= 2 else 0
    assert layout.width == (p + 1) * (history_length + m) + 2 + 1 + 1 + joint + p**m * p * history_length + p**m
    assert len(layout.feature_rows()) == p * history_length and len(layout.target_rows()) == p**m
    assert len(layout.exclusion_rows()) == history_length + m + 1


def test_layout_refuses_unknown_slot():
    layout = build_layout(3, 2)
    with pytest.raises(ValueError, match="slot='history.2' does not exist"):
        layout.rows("history.2")
    with pytest.raises(ValueError, match="index=4 outside slot 'token' of size 4"):
        layout.row("token", 4)


def test_embedding_by_slot_name():
    layout = build_layout(P, L)
    theta = 0.01
    stream = embed(TOKENS, layout, theta)
    assert stream.shape == (layout.width, len(TOKENS) + 1)
    token = stream[list(layout.rows("token"))]
    assert np.array_equal(token.argmax(0), np.concatenate([[P], TOKENS])) and np.all(token.sum(0) == 1)
    position = stream[list(layout.rows("position"))]
    index = np.arange(1, len(TOKENS) + 2)
    assert np.array_equal(position, np.stack([np.cos(index * theta), np.sin(index * theta)]))
    test = stream[layout.row("test")]
    assert test.sum() == 5 and np.all(test[-5:] == 1)
    empty = [row for name, start, stop in layout.slots if name not in ("token", "position", "one", "test") for row in range(start, stop)]
    assert not stream[empty].any()


def test_trace_shapes_and_names():
    network = build_network(PARAMS)
    trace = network.forward(TOKENS)
    N, D = len(TOKENS) + 1, network.layout.width
    assert trace.layer_names == ("history.1", "label", "gd.1", "gd.2", "gd.3", "gd.4", "readout")
    assert len(trace.residuals) == len(trace.layer_names) + 1
    assert trace.layers_of(Stage.GD) == ("gd.1", "gd.2", "gd.3", "gd.4")
    assert trace.layers_of(Stage.HISTORY, Stage.LABEL) == ("history.1", "label")
    assert all(residual.shape == (D, N) and residual.dtype == torch.float64 for residual in trace.residuals)
    assert trace.attn_logits["history.1"].shape == (1, N, N)
    assert trace.attn_weights["gd.1"].shape == (2 * P, N, N)
    # Softmax rows sum to 1 within gamma_{N-1} + 2u (each weight is a computed exponential over the
    # computed sum of them all, whatever the exponentials' own error), the test's sum adds gamma_{N-1}.
    assert torch.allclose(trace.attn_weights["label"].sum(-1), torch.ones(1, N, dtype=torch.float64), rtol=0, atol=gamma(2 * N))
    assert trace.prediction.shape == (P,)
    assert torch.equal(trace.residual("embedding"), trace.residuals[0])
    with pytest.raises(ValueError, match="layer='gd.9' does not exist"):
        trace.residual("gd.9")
    assert network.forward(TOKENS, dtype=torch.float32).residuals[-1].dtype == torch.float32
    lean = network.forward(TOKENS, record_attention=False)
    assert lean.attn_logits == {} and lean.attn_weights == {}
    assert torch.equal(lean.prediction, trace.prediction)


def test_a_patch_sees_every_stream_in_order_and_the_next_layer_reads_what_it_returns():
    network = build_network(PARAMS)
    clean = network.forward(TOKENS)
    seen = []

    def identity(name, stream):
        seen.append(name)
        return stream

    assert all(torch.equal(a, b) for a, b in zip(network.forward(TOKENS, patch=identity).residuals, clean.residuals))
    assert seen == ["embedding", *clean.layer_names]
    # Write 1 into the output slot of the last column after gd.4: the read-out adds W_T x_test to
    # it, so the prediction moves by exactly 1; written after the read-out, the 1 is the prediction.
    output = network.layout.rows("output")

    def ones_after(layer):
        def patch(name, stream):
            if name != layer:
                return stream
            patched = stream.clone()
            patched[output.start : output.stop, -1] = 1.0
            return patched
        return patch

    before_readout = network.forward(TOKENS, patch=ones_after("gd.4"))
    assert torch.equal(before_readout.prediction, clean.prediction + 1.0)
    assert torch.equal(network.forward(TOKENS, patch=ones_after("readout")).prediction, torch.ones(P, dtype=torch.float64))
    assert torch.equal(before_readout.slot("output", "gd.4")[:, -1], torch.ones(P, dtype=torch.float64))  # recorded


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gd_steps": 0}, r"T=0: expected an integer >= 1"),
        ({"history_length": 0}, r"L=0: expected an integer >= 1"),
        ({"num_tokens": 1}, r"p=1: expected an integer >= 2"),
        ({"eta": 0.0}, r"eta=0.0: expected a finite number > 0"),
        ({"beta": -1.0}, r"beta=-1.0: expected a finite number > 0"),
        ({"theta": 4.0}, r"theta=4.0: expected 0 < theta < pi"),
        ({"penalty": float("inf")}, r"penalty=inf: expected a finite number > 0"),
    ],
)
def test_bad_construction_parameters_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        replace(PARAMS, **change)


def test_theta_that_wraps_is_refused():
    N = len(TOKENS) + 1
    network = build_network(replace(PARAMS, theta=math.pi / N))
    with pytest.raises(ValueError, match=rf"theta=.* wraps for a prompt of N={N} columns: .* >= pi; expected theta <"):
        network.forward(TOKENS)
    doubling = build_network(replace(PARAMS, history_length=3, theta=math.pi / (N + 1), doubling=True))
    with pytest.raises(ValueError, match=r"\(N-1\+2\)\*theta"):
        doubling.forward(TOKENS)


def test_beta_too_small_is_refused_or_warned_with_the_bound():
    N = len(TOKENS) + 1
    small = replace(PARAMS, beta=PARAMS.beta / 2)
    with pytest.raises(ValueError, match=rf"beta=.* too small for a prompt of N={N} columns: .*expected beta >= "):
        build_network(small).forward(TOKENS)
    network = build_network(small, allow_leak=True)
    with pytest.warns(UserWarning, match=rf"error bound is {network.spec.error_bound(N):.3g} > tolerance 1e-09"):
        network.forward(TOKENS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_network(PARAMS).forward(TOKENS)


def test_history_longer_than_a_demonstration_is_refused():
    network = build_network(replace(PARAMS, history_length=7))
    with pytest.raises(ValueError, match=r"history_length L=7 plus future_length m=1 exceeds demonstration 3 of length 7"):
        network.forward(TOKENS)


@pytest.mark.parametrize(
    "tokens, message",
    [
        (np.array([0, 1, 2, 0]), r"no delimiter 3"),
        (np.array([0, 1, 2, 3, 7]), r"values in \[0, 7\]"),
        (np.array([[0, 3, 1]]), r"expected a 1-d integer sequence"),
        (np.array([0.0, 3.0, 1.0]), r"expected a 1-d integer sequence"),
        (np.array([0, 1, 2, 0, 3, 1]), r"test sequence length 1 < history_length L=2"),
    ],
)
def test_malformed_prompts_are_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        build_network(PARAMS).forward(tokens)


def test_step_size_at_or_above_two_over_lambda_max_is_refused():
    # eta = 2 / lambda_max (beta doubled so that the larger eta keeps the error bound in tolerance)
    diverging = replace(PARAMS, eta=2.0 * PARAMS.eta, beta=2.0 * PARAMS.beta)
    with pytest.raises(ValueError, match=r"eta=.* >= 2/lambda_max = .* gradient descent diverges"):
        build_network(diverging).forward(TOKENS)
    build_network(replace(diverging, eta=1.99 * PARAMS.eta)).forward(TOKENS)


def test_penalty_too_small_is_refused():
    with pytest.raises(ValueError, match=r"penalty=1e-06 too small: a non-sample keeps GD score"):
        build_network(replace(PARAMS, penalty=1e-6), allow_leak=True).forward(TOKENS)


def test_choose_beta_refuses_a_non_positive_target():
    with pytest.raises(ValueError, match=r"target=0.0: expected a positive error"):
        choose_beta(0.0, 0.1, 10, amplification(build_layout(2, 1), False, 1, 1.0, 10.0))


def test_layer_leak_formula_closed_form():
    """eps = 2 sum_{k=1}^{N-1} exp(-beta (1 - cos k theta)), checked term by term against Python's
    math module: numpy's vectorised functions (within 4 ulps) and the C library's (within 1) are each
    within :func:`rounding.leak_rounding` of the exact value, so they differ by at most the sum."""
    beta, theta, N = 300.0, 0.1, 6
    expected = 2 * sum(math.exp(-beta * (1 - math.cos(k * theta))) for k in range(1, N))
    relative = leak_rounding(beta, theta, N, function_ulps=4) + leak_rounding(beta, theta, N, function_ulps=1)
    assert layer_leak(beta, theta, N) == pytest.approx(expected, rel=relative, abs=0)


@pytest.mark.parametrize("m, doubling", [(1, False), (2, True)])
def test_export_round_trip(tmp_path, m, doubling):
    params = parameters_for_prompt(TOKENS, P, L, T, future_length=m, doubling=doubling)
    network = build_network(params)
    path = tmp_path / "construction.safetensors"
    save_weights(network, path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
        names = set(handle.keys())
    assert "relu heads add (1/N) sum_j relu(s_ij) value h_j" in metadata["description"]
    assert json.loads(metadata["parameters"])["T"] == T
    assert {"label.1.head0.query", "gd.1.head0.value", "readout.head5.key"} <= names if m == 2 else "label.head0.query" in names
    loaded = load_weights(path)
    assert loaded.layout == network.layout
    assert torch.equal(loaded.forward(TOKENS).prediction, network.forward(TOKENS).prediction)


def test_construction_info_prints_the_shape_beside_the_paper(capsys):
    assert hmmtf.main(["construction-info", "--p", "4", "--L", "3", "--T", "10"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    assert lines["history"][1:3] == ["2", "1"] and lines["label"][1:3] == ["1", "1"]
    assert lines["gd"][1:3] == ["10", "8"] and lines["readout"][1:3] == ["1", "8"]
    assert lines["total"][1:3] == ["14", "14"]
    assert f"width D = {build_layout(4, 3).width}" in out and "p^m * pL = 48 rows" in out


def test_construction_info_exports(tmp_path, capsys):
    path = tmp_path / "w.safetensors"
    assert hmmtf.main(["construction-info", "--p", "2", "--L", "4", "--T", "2", "--doubling", "--export", str(path)]) == 0
    assert "history        2            1" in capsys.readouterr().out
    assert load_weights(path).spec.doubling


@pytest.mark.parametrize(
    "tokens, message",
    [
        ([0, 1, 2, 0, 1], r"tokens: no delimiter 3; expected"),  # was ZeroDivisionError
        ([0, 1, 3, 2, 1, 0], r"demonstration 1 of length 2; expected every demonstration to have at least L\+m = 3"),
        ([0, 1, 2, 3, 4, 1, 0], r"tokens: values in \[0, 4\]; expected tokens 0..2 and delimiter 3"),  # was IndexError
    ],
)
def test_parameters_for_prompt_refuses_a_malformed_prompt(tokens, message):
    with pytest.raises(ValueError, match=message):
        parameters_for_prompt(np.array(tokens), P, L, T)


def test_parameters_for_prompt_refuses_a_prompt_without_regression_samples(monkeypatch):
    """check_prompt already implies N' >= 1; the guard stops a ZeroDivisionError should the two disagree."""
    import construction.parameters

    monkeypatch.setattr(construction.parameters, "check_prompt", lambda tokens, layout: np.asarray(tokens))
    with pytest.raises(ValueError, match=r"tokens: N' = 0 regression samples; expected a demonstration of length >= L \+ m = 3"):
        parameters_for_prompt(np.array([0, 1, 3, 2, 1, 0]), P, L, T)


@pytest.mark.parametrize(
    "theta, num_columns, message",
    [
        (0.0, 10, r"theta=0.0: expected 0 < theta < pi"),
        (math.pi, 10, r"theta=3.14159\d*: expected 0 < theta < pi"),
        (-0.1, 10, r"theta=-0.1: expected 0 < theta < pi"),
        (float("nan"), 10, r"theta=nan: expected 0 < theta < pi"),
        (0.1, 1, r"num_columns=1: expected at least 2 columns"),
    ],
)
def test_choose_beta_refuses_a_bad_angle_or_too_few_columns(theta, num_columns, message):
    with pytest.raises(ValueError, match=message):
        choose_beta(1e-9, theta, num_columns, amplification(build_layout(2, 1), False, 1, 1.0, 10.0))


@pytest.mark.parametrize("beta, shown", [(-1.0, "-1.0"), (float("nan"), "nan")])
def test_layer_leak_refuses_a_negative_or_nan_beta(beta, shown):
    with pytest.raises(ValueError, match=rf"beta={shown}: expected a softmax scale >= 0"):
        layer_leak(beta, 0.1, 6)


API_SECTION = "## 10. The API in brief"


def api_section() -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "construction.md").read_text()
    return text[text.index(API_SECTION):]


def documented_signature(name: str, function) -> str:
    """``name(parameters) -> Return`` as ``inspect.signature`` gives it, without annotations and ``self``."""
    signature = inspect.signature(function)
    parameters = [parameter.replace(annotation=inspect.Parameter.empty)
                  for parameter in signature.parameters.values() if parameter.name != "self"]
    plain = signature.replace(parameters=parameters, return_annotation=inspect.Signature.empty)
    return f"{name}{plain} -> {signature.return_annotation}"


@pytest.mark.parametrize(("name", "function"), [
    ("construction.parameters_for_prompt", parameters_for_prompt),
    ("construction.build_network", build_network),
    ("Network.forward", Network.forward),
])
def test_the_docs_api_section_gives_the_signatures_of_the_code(name, function):
    assert f"    {documented_signature(name, function)}\n" in api_section()


def test_the_docs_api_example_runs_and_its_prediction_is_the_reference():
    section = api_section()
    example = section[section.index("```python\n") + len("```python\n"):section.index("```\n", section.index("```python"))]
    namespace: dict = {}
    exec(example, namespace)
    assert isinstance(namespace["trace"], Trace)
    assert "prediction" in {field.name for field in dataclasses.fields(Trace)}
