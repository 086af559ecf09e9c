"""Theorem 1's decomposition on real prompts and the main job's report on a tiny configuration."""
import json
import math
import re

import pytest
import torch

import hmm
import hmmtf
from bounds import theorem1
from hmmtf.commands.bounds import config_from_args
from bounds.serialize import to_json
from bounds.suites import build_member
from bounds.theorem1 import TERMS
from bounds.verify import measure
from rounding import gamma, least_squares_rounding, predictive_rounding, unit_roundoff

TINY = [
    "main", "--gammas", "0.5", "0.9", "--ranks", "2", "--concentrations", "1.0", "--seeds", "2", "--t2-gammas", "0.8",
    "--t2-sequences", "50",
    "--states", "3", "--tokens", "4", "--max-memory", "6", "--sequences", "100", "--L", "2", "--T", "4",
    "--demos", "3", "--demo-length", "8", "--test-length", "5", "--prompts", "1", "--sweep-prompts", "2",
    "--threads", "1", "--no-progress",
]


@pytest.mark.parametrize("seed", range(4))
def test_terms_add_up_to_at_least_the_total(seed):
    member = build_member(0, 3, 4, 0.5 + 0.1 * seed, 2, 1.0, seed=seed, half="fit")
    L, T = 2, 6
    W_star, lam = theorem1.population_regression(member.model, L)
    assert lam > 0
    fmt = hmm.PromptFormat(4, 10, 6)
    for tokens in theorem1.sample_prompt_tokens(member.model, 2, fmt, seed):
        row = theorem1.decompose_prompt(member.model, tokens, L, T, W_star)
        # The terms are l1 norms of differences along one chain of computed p-vectors, so the triangle
        # inequality holds exactly for their exact norms; each computed norm is within gamma_p of its
        # exact value (a subtraction and p - 1 additions per entry), the sum of the terms adds
        # gamma_{len(TERMS)-1} and the product one more u.
        p = member.model.num_tokens
        assert row.total <= sum(getattr(row, key) for key in TERMS) * (1 + gamma(2 * p + len(TERMS)))
        assert row.total > 0 and all(getattr(row, key) >= 0 for key in TERMS)
        assert row.optimization <= row.optimization_bound <= row.optimization_bound_paper
        assert row.construction <= row.construction_bound
        for stage in row.stages.values():
            assert stage.deviation <= stage.allowed


def test_population_regression_is_exact_for_L_1():
    """For L = 1 the memory predictor is linear in e(o_t): W* x = P_L, linearization 0 up to rounding.

    Both sides are the one-token predictive from the stationary law, each within
    :func:`rounding.predictive_rounding` ``(S, 1)`` of it entrywise (relative; its entries sum to 1).
    W* solves least squares with rows ``sqrt(P(o)) e(o)``, whose exact solution for the computed
    data is each window's predictive times ``(1 + u)`` at most (a product and its quotient by the
    same root); the solver adds :func:`rounding.least_squares_rounding` in the Frobenius norm, at most
    ``sqrt(p)`` times it in l1 for a one-hot ``x``; the l1 norm of the difference, ``gamma_p`` of it."""
    member = build_member(0, 3, 4, 0.7, 2, 1.0, seed=3, half="fit")
    model = member.model
    W_star, _ = theorem1.population_regression(model, 1)
    tokens = theorem1.sample_prompt_tokens(model, 1, hmm.PromptFormat(3, 6, 5), 0)[0]
    windows = torch.arange(model.num_tokens)[:, None]
    root = hmm.log_likelihood(model, windows).exp().sqrt()[:, None]
    features = root * torch.eye(model.num_tokens, dtype=torch.float64)
    targets = root * hmm.next_token_probs(model, windows)[:, -1]
    solver = math.sqrt(model.num_tokens) * least_squares_rounding(features, targets, W_star)
    rounding = (2 * predictive_rounding(model.num_states, 1) + unit_roundoff() + solver) * (1 + gamma(model.num_tokens))
    assert theorem1.regression_terms(model, tokens, 1, W_star).linearization <= rounding
    assert theorem1.regression_terms(member.model, tokens, 2, theorem1.population_regression(member.model, 2)[0]).linearization > 1e-6


@pytest.mark.long_running
def test_main_job_writes_a_complete_report_consistent_with_the_table(tmp_path, capsys):
    code = hmmtf.main([*TINY, "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0
    for key in ("config", "suite", "lemma1", "generalization", "theorem1", "optimization_curves", "construction_curves",
                "network_counts", "table", "verdicts", "figures", "command", "git_commit", "options", "runtime_seconds",
                "theorem2"):
        assert key in report
    assert report["command"].startswith("hmmtf main --gammas 0.5 0.9")
    assert report["git_commit"] == hmmtf.source_commit()
    assert len(report["suite"]) == 4 and len(report["theorem1"]["prompts"]) == 4
    for path in report["figures"]:
        assert (tmp_path / path.split("/")[-1]).stat().st_size > 10_000
    lines = printed.splitlines()
    assert len(report["theorem2"]["suite"]) == 4 and len(report["theorem2"]["prompts"]) == 4 * 2  # m = 2, 3
    for row in report["table"] + report["theorem2"]["table"]:
        (line,) = [text for text in lines if text.startswith(row["term"])]
        numbers = re.split(r"\s+", line[len(row["term"]):].strip())
        assert [float(numbers[0]), float(numbers[1]), float(numbers[2])] == [
            float(f"{float(row[key]):.3g}") for key in ("mean_measured", "measured", "bound")
        ]
        assert numbers[3] == f"{row['holds']}/{row['units']}"
        # The shown pair is the worst measured/bound ratio: it holds iff every unit does.
        assert (row["holds"] == row["units"]) == (float(row["measured"]) <= float(row["bound"]))
    for verdict in report["verdicts"]:
        assert verdict in printed
    stationary = report["lemma1"]["fits"]["stationary"]
    fit_constants = [float(m["lemma1"]["stationary"]["smallest_C"]) for m in report["suite"] if m["half"] == "fit"]
    assert float(stationary["C"]) == max(fit_constants)


@pytest.mark.long_running
def test_a_second_process_measures_what_one_process_does():
    """``workers=2`` (``hmmtf main``'s default) moves Lemma 1 and Theorem 2 to a spawned process:
    every number measured is the one-process run's."""
    config = config_from_args(hmmtf.build_parser("main").parse_args(TINY))
    one, two = (to_json(measure(config, progress=False, workers=workers)[0]) for workers in (1, 2))
    assert one == two


def test_a_third_process_is_refused():
    with pytest.raises(ValueError, match=r"workers: 3; expected 1 \(one process\) or 2"):
        measure(config_from_args(hmmtf.build_parser("main").parse_args(TINY)), progress=False, workers=3)


def test_optimization_curve_reads_eta_off_its_spectrum_without_choosing_beta(monkeypatch):
    """eta = 1/lambda_max, the step construction.parameters_for_prompt gives, without its beta bisection."""
    import numpy as np

    from construction import parameters_for_prompt, reference

    member = build_member(0, 3, 4, 0.6, 2, 1.0, seed=1, half="fit")
    tokens = theorem1.sample_prompt_tokens(member.model, 1, hmm.PromptFormat(4, 10, 6), 0)[0]
    p, L, steps = 4, 2, 12
    eta = parameters_for_prompt(tokens, p, L, steps).eta
    X, Y, _ = reference.regression_problem(tokens, p, L)
    iterates = reference.gd_iterates(X, Y, eta, steps, len(tokens) + 1)
    W_hat = reference.min_norm_solution(X, Y)
    expected = [float(np.linalg.norm(iterates[t] - W_hat) / np.linalg.norm(W_hat)) for t in range(steps + 1)]

    def no_bisection(*args, **kwargs):
        raise AssertionError("optimization_curve ran the beta bisection")

    monkeypatch.setattr(theorem1, "parameters_for_prompt", no_bisection)
    assert theorem1.optimization_curve(tokens, p, L, steps).relative_distance == expected


def test_stage_checks_use_the_given_readout_and_bound(monkeypatch):
    """decompose_prompt hands stage_checks its W_T x_test and bound B: neither is recomputed."""
    from construction import build_network, parameters_for_prompt, reference

    member = build_member(0, 3, 4, 0.6, 2, 1.0, seed=2, half="fit")
    tokens = theorem1.sample_prompt_tokens(member.model, 1, hmm.PromptFormat(3, 8, 5), 0)[0]
    p, L, T = 4, 2, 4
    params = parameters_for_prompt(tokens, p, L, T)
    network = build_network(params)
    trace = network.forward(tokens)
    X, Y, x_test = reference.regression_problem(tokens, p, L)
    iterates = reference.gd_iterates(X, Y, params.eta, T, len(tokens) + 1)
    gd_prediction = iterates[-1] @ x_test
    # The network's read-out is within its error bound of W_T x_test (the readout check's bound),
    # so 0.25 more is 0.25 away within that bound and one float64 rounding of the sum.
    readout_error = network.spec.error_bound(len(tokens) + 1) + theorem1.STAGE_ROUNDING

    def recomputed(*args, **kwargs):
        raise AssertionError("stage_checks recomputed a value it was given")

    monkeypatch.setattr(theorem1.reference, "regression_problem", recomputed)
    monkeypatch.setattr(type(network.spec), "error_bound", recomputed)
    stages = theorem1.stage_checks(trace, network, tokens, iterates, gd_prediction + 0.25, 0.5)
    assert stages["readout"].deviation == pytest.approx(0.25, abs=readout_error)
    assert stages["readout"].allowed == stages["gd"].allowed == 0.5


def test_lemma1_figure_draws_the_floor_the_fits_use(tmp_path, monkeypatch):
    """The grey 'rounding floor' line of figure 1 is bounds.fitting.ROUNDING_FLOOR, not a copy of it."""
    import matplotlib.axes

    from bounds import figures, fitting

    monkeypatch.setattr(fitting, "ROUNDING_FLOOR", 3e-9)
    drawn = []
    original = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", lambda ax, y=0, *a, **k: drawn.append(y) or original(ax, y, *a, **k))
    lengths = [1, 2, 3]
    entry = {
        "gamma_knob": 0.5, "gamma": 0.5, "rank": 2, "transition_concentration": 1.0, "half": "fit",
        "lemma1": {"stationary": {"errors": [1e-2, 1e-4, 1e-6], "decay_rate": 4.6, "decay_intercept": 0.0}},
    }
    report = {"lemma1": {"lengths": lengths, "fits": {"stationary": {"C": 0.3}}}, "suite": [entry]}
    figures.lemma1_decay(report, tmp_path / "lemma1_decay.png")
    assert drawn == [3e-9]
