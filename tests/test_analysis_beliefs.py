"""Belief-state probes (empirical/analysis/beliefs.py): the ridge fit against a planted linear map
and an independent least-squares solve, R^2 at its two ends (1 on the planted map, about 0 on
independent noise by a rule from the sample size), the belief target against path enumeration on
a prompt with a delimiter restart, the implied next-token distribution against the oracle
predictor, the shuffled-target control on a planted signal, and ``hmmtf beliefs`` end to end."""
import json
import math

import numpy as np
import pytest
import torch
from hmm_strategies import enumerate_joint
from recorded_figures import figures_recorded_not_drawn
from rounding import enumeration_rounding, filtering_rounding, gamma, predictive_rounding, unit_roundoff
from tiny_checkpoints import assert_refused_in_one_line, command_report

import hmm
import hmmtf
from empirical.analysis.beliefs import (
    BELIEF_ENTROPY,
    BELIEF_NEXT_TOKEN,
    BELIEF_SORTED,
    RIDGE_PENALTIES,
    BeliefSettings,
    as_distribution,
    belief_targets,
    deranged_within_position,
    filtered_beliefs,
    fit_probes,
    implied_next_token,
    kl_rows,
    probe_rows,
    prompt_split,
    r_squared,
    ridge_path,
)
from empirical.yardsticks.regime import oracle_predictor


def gaussian(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def solve_tolerance(features: torch.Tensor, penalty: float) -> float:
    """First-order relative bound on the ridge weights computed from the normal equations, in the
    Frobenius norm: ``kappa (3 d gamma_n + gamma_{d^2})``, ``kappa`` the condition number of
    ``G = X_c^T X_c + lambda I``. Forming ``X_c^T X_c`` and ``X_c^T Y_c`` errs entrywise by
    ``gamma_n`` times the products of magnitudes (Higham, eq. 3.5), in norm at most ``gamma_n
    ||X_c||_F^2 <= d gamma_n ||G||``, once for each side and once for centring; the symmetric
    eigendecomposition and the products with its vectors are backward stable to ``gamma_{d^2}``
    ``||G||``; a relative perturbation eps of a system moves its solution by ``kappa eps``."""
    n, d = features.shape
    centred = features - features.mean(0)
    eigenvalues = torch.linalg.eigvalsh(centred.T @ centred) + penalty
    kappa = float(eigenvalues.max() / eigenvalues.min())
    return kappa * (3 * d * gamma(n) + gamma(d * d))


def noise_r2_bound(train_rows: int, test_rows: int, dimensions: int) -> float:
    """How far from 0 the held-out R^2 of a least-squares probe of targets independent of its
    ``dimensions`` Gaussian features may be. With ``e = yhat - ybar_train = (x - xbar) w_hat``, the
    held-out ``R^2 = (2 sum (y - ybar) e - sum e^2) / sum (y - ybar)^2``. For Gaussian features the
    fitted weights have ``E ||w_hat||^2 = sigma^2 d / (n - d - 2)`` (the mean of an inverse Wishart
    matrix of ``n - 1`` degrees of freedom), so ``E e^2 = v sigma^2`` with ``v = d / (n - d - 2)``;
    the cross term has mean 0 and standard deviation ``2 sqrt(v / m)`` for m held-out rows. Bound:
    twice the mean of the squared term plus four standard deviations of the cross term. A penalty
    only shrinks ``w_hat``, so it holds for every ridge probe."""
    v = dimensions / (train_rows - dimensions - 2)
    return 2 * v + 8 * math.sqrt(v / test_rows)


def test_ridge_without_penalty_recovers_a_planted_linear_map_and_its_r2_is_one():
    features = gaussian(2000, 10, seed=0) * torch.linspace(0.5, 2.0, 10) + 3.0
    weight, bias = gaussian(10, 3, seed=1), gaussian(3, seed=2)
    targets = features @ weight + bias
    ((fitted, intercept),) = ridge_path(features, targets, [0.0])
    tolerance = solve_tolerance(features, 0.0)
    assert float(torch.linalg.norm(fitted - weight) / torch.linalg.norm(weight)) <= tolerance
    # The intercept mean(Y) - mean(X) W errs by |mean(X)| times the weights' error plus rounding.
    slack = float(features.mean(0).norm() * torch.linalg.norm(weight)) * tolerance + gamma(12) * float(targets.abs().max())
    assert float((intercept - bias).abs().max()) <= slack
    # Each prediction errs by at most (||x|| + ||xbar||) ||dW||_F plus the rounding of x W + b.
    magnitude = features.abs() @ weight.abs() + bias.abs()
    row_error = ((features.norm(dim=1) + features.mean(0).norm()) * tolerance * torch.linalg.norm(weight))[:, None] + (
        gamma(11) * magnitude)
    total = (targets - targets.mean(0)).pow(2).sum()
    assert 1 - r_squared(targets, features @ fitted + intercept, targets.mean(0)) <= float(row_error.pow(2).sum() / total)


def test_ridge_with_a_penalty_is_least_squares_on_the_augmented_system():
    """An independent solve (LAPACK's SVD-based lstsq) of ``[X_c; sqrt(lambda) I] W = [Y_c; 0]``,
    whose normal equations are the ridge's."""
    features, targets = gaussian(300, 6, seed=3), gaussian(300, 2, seed=4)
    penalties = [1.0, 100.0]
    centred, centred_targets = features - features.mean(0), targets - targets.mean(0)
    for penalty, (fitted, intercept) in zip(penalties, ridge_path(features, targets, penalties)):
        augmented = np.vstack([centred.numpy(), math.sqrt(penalty) * np.eye(6)])
        expected = np.linalg.lstsq(augmented, np.vstack([centred_targets.numpy(), np.zeros((6, 2))]), rcond=None)[0]
        tolerance = 2 * solve_tolerance(features, penalty)
        assert np.linalg.norm(fitted.numpy() - expected) <= tolerance * np.linalg.norm(expected)
        torch.testing.assert_close(intercept, targets.mean(0) - features.mean(0) @ fitted, rtol=0, atol=0)


def test_held_out_r2_of_a_probe_of_independent_noise_is_about_zero():
    train_x, test_x = gaussian(2000, 10, seed=5), gaussian(2000, 10, seed=6)
    train_y, test_y = gaussian(2000, 1, seed=7), gaussian(2000, 1, seed=8)
    ((fitted, intercept),) = ridge_path(train_x, train_y, [0.0])
    r2 = r_squared(test_y, test_x @ fitted + intercept, train_y.mean(0))
    assert abs(r2) <= noise_r2_bound(2000, 2000, 10)


D = 2
"""The delimiter of the two-token HMMs below."""
TWO_STATE = hmm.Mixture.uniform(hmm.HMM(
    torch.tensor([[0.3, 0.7], [0.6, 0.4]], dtype=torch.float64),
    torch.tensor([[[0.9, 0.1], [0.2, 0.8]], [[0.5, 0.5], [0.3, 0.7]]], dtype=torch.float64),
    torch.tensor([[[0.8, 0.2], [0.25, 0.75]], [[0.6, 0.4], [0.1, 0.9]]], dtype=torch.float64)))
"""Two HMMs with S = p = 2, so a prompt's task matters."""
FORMAT = hmm.PromptFormat(num_demos=1, demo_length=4, test_length=3)


def test_the_belief_target_is_path_enumeration_restarted_at_the_delimiter():
    tokens = torch.tensor([[0, 1, 1, 0, D, 1, 0, 0], [1, 1, 0, 1, D, 0, 0, 1]])
    prompts = hmm.Prompts(tokens, torch.tensor([1, 0]), torch.full_like(tokens, -1), FORMAT)
    beliefs = filtered_beliefs(TWO_STATE, prompts)
    targets = belief_targets(TWO_STATE, prompts)
    for b, task in enumerate(prompts.task_ids.tolist()):
        model = TWO_STATE.hmm[task]
        assert beliefs[b, 4].isnan().all()
        for start, stop in ((0, 4), (5, 8)):  # the demonstration, then the test sequence from its own start
            segment = tokens[b, start:stop].tolist()
            for t in range(stop - start):
                joint = enumerate_joint(model, segment[:t + 1])
                tolerance = filtering_rounding(2, t + 1) + 2 * enumeration_rounding(2, t + 1) + unit_roundoff()
                expected = joint / joint.sum()
                torch.testing.assert_close(beliefs[b, start + t], expected, rtol=tolerance, atol=0)
                torch.testing.assert_close(targets[BELIEF_SORTED][b, start + t], expected.sort(descending=True).values,
                                           rtol=tolerance, atol=0)
                entropy = -float((expected * expected.log()).sum())
                # -sum b log b: each log errs by u + |d log b| <= u + tolerance, summed over 2 terms.
                assert float(targets[BELIEF_ENTROPY][b, start + t, 0]) == pytest.approx(
                    entropy, abs=3 * (tolerance + unit_roundoff()) * max(1.0, -float(expected.log().min())))


def test_the_implied_next_token_distribution_is_the_oracle_predictor():
    mixture = hmm.mixture_preset("tiny")
    fmt = hmm.PROMPT_FORMATS["tiny"]
    prompts = hmm.sample_prompts(mixture, 12, fmt, seed=4)
    rows = probe_rows(prompts.tokens, mixture.num_tokens)
    implied = implied_next_token(mixture, prompts.task_ids, filtered_beliefs(mixture, prompts))
    oracle = oracle_predictor(mixture, prompts)(prompts.tokens)
    # Both are b_t (A B) from a filter of the current segment, each within predictive_rounding.
    tolerance = 2 * predictive_rounding(mixture.hmm.num_states, max(fmt.demo_length, fmt.test_length))
    torch.testing.assert_close(implied[:, rows], oracle[:, rows], rtol=tolerance, atol=0)
    torch.testing.assert_close(belief_targets(mixture, prompts)[BELIEF_NEXT_TOKEN], implied, rtol=0, atol=0,
                               equal_nan=True)  # the same function; NaN at the delimiters, which hold no belief
    # The rows: an HMM token followed by one; the delimiters and each segment's last token are out.
    expected = ~fmt.is_delimiter & torch.cat([~fmt.is_delimiter[1:], torch.tensor([False])])
    assert torch.equal(rows, expected)


def planted_probe_data(prompts: int, positions: int, dimensions: int, seed: int):
    """Features ``(prompts * positions, d)`` and a target ``(prompts, positions, 1)`` = a planted
    linear map of them plus as much independent noise (R^2 of the true map: 1/2); nothing depends
    on the position."""
    features = gaussian(prompts, positions, dimensions, seed=seed)
    signal = features @ gaussian(dimensions, 1, seed=seed + 1)
    target = signal + signal.std() * gaussian(prompts, positions, 1, seed=seed + 2)
    return features.flatten(0, 1), target


def test_shuffled_targets_give_a_held_out_r2_near_zero_on_a_planted_signal():
    prompts, positions, dimensions = 64, 40, 8
    features, target = planted_probe_data(prompts, positions, dimensions, seed=10)
    split = prompt_split(prompts)
    groups = torch.arange(prompts).repeat_interleave(positions)
    shuffled = deranged_within_position(target, split, torch.Generator().manual_seed(0))
    for part in ("train", "held_out"):  # each position keeps its targets, and no prompt its own
        members = split[part]
        assert torch.equal(shuffled[members].sort(0).values, target[members].sort(0).values)
        assert bool((shuffled[members] != target[members]).all())
    true = fit_probes(features, {"y": target.flatten(0, 1)}, groups, split, set())["y"]
    control = fit_probes(features, {"y": shuffled.flatten(0, 1)}, groups, split, set())["y"]
    bound = noise_r2_bound(int(split["train"].sum()) * positions, int(split["held_out"].sum()) * positions, dimensions)
    assert abs(control["r2"]) <= bound
    assert true["r2"] > 0.5 - bound and true["r2"] > 10 * bound  # the same fit finds the planted signal
    assert true["alpha"] in RIDGE_PENALTIES and len(true["validation_r2"]) == len(RIDGE_PENALTIES)
    low, high = true["r2_interval_95"]
    assert low <= true["r2"] <= high


def test_a_probe_output_becomes_a_distribution_and_its_kl_is_zero_on_the_target():
    target = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    outputs = torch.tensor([[0.6, 0.6, -0.2], [0.2, 0.3, 0.5]], dtype=torch.float64)
    distribution = as_distribution(outputs)
    torch.testing.assert_close(distribution.sum(-1), torch.ones(2, dtype=torch.float64), rtol=0, atol=gamma(3))
    assert bool((distribution > 0).all())
    divergence = kl_rows(target, distribution)
    assert float(divergence[1]) == pytest.approx(0.0, abs=4 * gamma(3))  # its own distribution (floor below it)
    assert float(divergence[0]) == pytest.approx(math.log((1.2 + 1e-4) / 1.2), rel=4 * gamma(3))


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="^num_prompts: 7; expected an integer >= 8"):
        prompt_split(7)
    with pytest.raises(ValueError, match=r"^features, targets: shapes \(4, 2\), \(3, 1\); expected"):
        ridge_path(torch.zeros(4, 2), torch.zeros(3, 1), [1.0])
    with pytest.raises(ValueError, match=r"^penalties: \[-1.0\]; expected finite numbers >= 0"):
        ridge_path(torch.zeros(4, 2), torch.zeros(4, 1), [-1.0])
    with pytest.raises(ValueError, match="^tokens: delimiters at different positions"):
        probe_rows(torch.tensor([[0, D, 1], [0, 1, D]]), 2)
    with pytest.raises(ValueError, match="^prompts: 4; expected an integer >= 8"):
        BeliefSettings(prompts=4)
    with pytest.raises(ValueError, match="^seed: -1; expected an integer >= 0"):
        BeliefSettings(seed=-1)


BELIEFS_ARGV = ["--prompts", "8", "--fresh-tasks", "4", "--batch-size", "4", "--ceiling-particles", "4"]


@pytest.mark.long_running
def test_beliefs_command_writes_every_number_and_the_figure(tmp_path, capsys):
    printed, report = command_report("beliefs", tmp_path, capsys, BELIEFS_ARGV)
    out = tmp_path / "beliefs"
    assert report["ceiling"]["particles"] == 4 and report["settings"]["prompts"] == 8
    names = ["belief next-token", "belief sorted", "belief entropy", "ngram 1", "ngram 2", "ngram 3", "ceiling"]
    assert list(report["targets"]) == names
    assert set(report["probes"]) == {"trained", "random-init", "shuffled targets"} == set(printed["held_out_r2_by_layer"])
    layers = ["embedding", "layer 1", "layer 2"]
    for by_layer in report["probes"].values():
        assert list(by_layer) == layers
        for results in by_layer.values():
            assert set(results) == set(names)
            assert ("kl" in results["ceiling"]) and ("kl" not in results["belief entropy"])
    assert (out / "beliefs.png").stat().st_size > 0
    with figures_recorded_not_drawn():  # drawn above
        assert hmmtf.main(["beliefs", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "none"),
                           *BELIEFS_ARGV[:-1], "0"]) == 0
    without = json.loads((tmp_path / "none" / "beliefs.json").read_text())
    assert without["ceiling"] is None and "ceiling" not in without["targets"]
    assert (tmp_path / "none" / "beliefs.png").exists()


def test_beliefs_command_refuses_bad_options_in_one_line(tmp_path, capsys):
    cases = [(["--prompts", "7"], "--prompts: 7; expected an integer >= 8"),
             (["--batch-size", "0"], "argument --batch-size: 0; expected an integer >= 1"),
             (["--ceiling-particles", "-1"],
              "argument --ceiling-particles: -1; expected an integer >= 0")]
    assert_refused_in_one_line("beliefs", tmp_path, capsys, cases)
