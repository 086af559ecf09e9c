"""empirical/yardsticks/family_calibration.py: the rule's density is the closed-form expected entropy, top-1
accuracy counts the hits of the scored rows, the rule chooses the densest family that meets all
three conditions, and one family's measurements are consistent with each other."""
import math

import pytest
import torch

import hmm
from empirical.yardsticks import family_calibration as calibration
from empirical.yardsticks.competence import (CACHE_VARIABLE, CEILING_BOUND, CEILING_METHODS, COLLAPSED_CEILING_SETTINGS,
                                             ceiling_estimates, per_prompt_loss, scope_rows)
from empirical.yardsticks.regime import FRESH_MIXTURE_STREAM, FRESH_PROMPT_STREAM, oracle_predictor
from empirical.yardsticks.signal import fresh_prompts_and_ngrams, streams_of_seed_zero


def test_expected_row_entropy_is_the_closed_form_and_matches_sampling():
    # Dirichlet(1, 1) is uniform on the segment: E[-x ln x - (1 - x) ln(1 - x)] = 2 * 1/4 = 1/2.
    assert calibration.expected_row_entropy(1.0, 2) == pytest.approx(0.5, abs=1e-12)
    torch.manual_seed(0)
    rows = torch.distributions.Dirichlet(torch.full((16,), 0.05, dtype=torch.float64)).sample((200_000,))
    entropy = -(rows * rows.clamp_min(1e-300).log()).sum(-1)
    # Monte Carlo: 4 standard errors of the mean of 200,000 draws.
    assert calibration.expected_row_entropy(0.05, 16) == pytest.approx(entropy.mean().item(),
                                                                       abs=4 * entropy.std().item() / 200_000 ** 0.5)


def test_density_grows_with_each_concentration():
    densities = {name: calibration.family_density(spec) for name, spec in calibration.grid_specs().items()}
    for t in calibration.GRID:
        row = [densities[f"T {t:g}, O {o:g}"] for o in calibration.GRID]
        column = [densities[f"T {o:g}, O {t:g}"] for o in calibration.GRID]
        assert row == sorted(row) and column == sorted(column)


def test_accuracy_counts_hits_over_the_scored_rows_of_the_scope():
    p = 3  # token 3 is the delimiter
    tokens = torch.tensor([[0, 1, 3, 2, 2]])
    probabilities = torch.zeros(1, 5, p, dtype=torch.float64)
    probabilities[0, :, 1] = 1.0  # always predicts token 1
    # Scored rows: 0 (target 1, hit), 2 (target 2, miss), 3 (target 2, miss); row 1's target is a delimiter.
    all_rows = torch.ones(5, dtype=torch.bool)
    assert calibration.per_prompt_accuracy(probabilities, tokens, p, all_rows).tolist() == [1 / 3]
    assert calibration.per_prompt_accuracy(probabilities, tokens, p, torch.tensor([0, 0, 1, 1, 1]).bool()).tolist() == [0.0]


def family(accuracy_low: float, gain_low: float, margin_low: float, density: float) -> dict:
    test = {"accuracy": {"oracle": {"interval_95": [accuracy_low, 1.0]}},
            "differences": {"ngram 1 - ngram 2": {"interval_95": [gain_low, 1.0]},
                            "best ngram - oracle": {"interval_95": [margin_low, 2.0]}}}
    return {"scopes": {"test_sequence": test}, "density_nats": density}


def test_the_rule_takes_the_densest_family_that_meets_all_three_conditions():
    families = {
        "dense but noisy": family(0.39, 0.2, 0.9, 4.0),
        "no bigram step": family(0.6, 0.09, 0.9, 3.5),
        "counter suffices": family(0.6, 0.2, 0.49, 3.2),
        "qualifies, sparse": family(0.7, 0.3, 1.2, 1.0),
        "qualifies, denser": family(0.45, 0.12, 0.6, 2.0),
    }
    assert calibration.choose_family(families) == "qualifies, denser"
    assert calibration.rule_checks(families["no bigram step"]) == {"oracle_accuracy": True, "bigram_gain": False,
                                                                   "oracle_margin": True}
    assert calibration.choose_family({"none": families["dense but noisy"]}) is None


def test_one_family_measurements_agree_with_each_other():
    spec = hmm.MixtureSpec(8, 4, 4, 0.05, 0.05)
    fmt = hmm.PromptFormat(num_demos=2, demo_length=8, test_length=8)
    result = calibration.calibrate_family(spec, fmt, num_prompts=16, fresh_tasks=8)
    for scope in ("test_sequence", "all_positions"):
        measured = result["scopes"][scope]
        best = measured["best_ngram"]
        assert measured["loss"][best]["mean"] == min(measured["loss"][f"ngram {n}"]["mean"] for n in (1, 2, 3))
        assert measured["differences"]["best ngram - oracle"]["mean"] == pytest.approx(
            measured["loss"][best]["mean"] - measured["loss"]["oracle"]["mean"], abs=1e-12)
        assert measured["uniform"] == {"loss": math.log(4), "accuracy": 0.25}
        assert all(0 <= value["mean"] <= 1 for value in measured["accuracy"].values())
    assert result["density_nats"] == calibration.family_density(spec)
    with pytest.raises(ValueError, match="num_prompts: 1; expected an integer >= 2"):
        calibration.calibrate_family(spec, fmt, num_prompts=1, fresh_tasks=8)


def test_the_ceilings_bound_is_measured_beside_a_family_only_when_asked_and_from_the_same_prompts(monkeypatch):
    """With ``ceiling_replicates`` the collapsed SMC's average is scored on the family's own prompts:
    its loss is the loss of :func:`ceiling_estimates` on them, and the rule reads nothing of it."""
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    spec = hmm.MixtureSpec(8, 4, 4, 0.05, 0.05)
    fmt = hmm.PromptFormat(num_demos=2, demo_length=8, test_length=8)
    plain = calibration.calibrate_family(spec, fmt, num_prompts=6, fresh_tasks=8)
    assert "ceiling_bound" not in plain
    with_bound = calibration.calibrate_family(spec, fmt, num_prompts=6, fresh_tasks=8, ceiling_replicates=2)
    record = with_bound["ceiling_bound"]
    assert (record["method"], record["backend"], record["replicates"]) == (CEILING_METHODS["collapsed"], "collapsed", 2)
    _, prompts, _ = fresh_prompts_and_ngrams(spec, fmt, 6, 8)
    bound = ceiling_estimates(prompts.tokens, fmt, spec, COLLAPSED_CEILING_SETTINGS, 2, "collapsed")
    for scope, rows in scope_rows(fmt).items():
        measured = with_bound["scopes"][scope]
        expected = per_prompt_loss(bound.probabilities, prompts.tokens, 4, rows).mean().item()
        assert measured["loss"][CEILING_BOUND]["mean"] == pytest.approx(expected, rel=1e-12)
        assert measured["differences"][f"{CEILING_BOUND} - oracle"]["mean"] == pytest.approx(
            expected - measured["loss"]["oracle"]["mean"], abs=1e-12)
        assert {name: value for name, value in measured["loss"].items() if name != CEILING_BOUND} == \
            plain["scopes"][scope]["loss"]
    assert calibration.rule_checks(with_bound) == calibration.rule_checks(plain)


def test_a_bad_concentration_is_named():
    with pytest.raises(ValueError, match=r"concentrations: -0.1; expected finite numbers > 0"):
        calibration.grid_specs((0.1, -0.1))


def test_the_oracle_loss_is_the_exact_filter_of_each_prompts_own_hmm():
    """The oracle's per-prompt loss equals -log p(test | demonstrations) of the prompt's own HMM,
    computed independently by :func:`hmm.bayes_predictive` on a one-HMM mixture."""
    spec = hmm.MixtureSpec(4, 3, 4, 0.1, 0.1)
    fmt = hmm.PromptFormat(num_demos=1, demo_length=5, test_length=5)
    fresh, prompts = streams_of_seed_zero(spec, fmt, 6, 4, FRESH_MIXTURE_STREAM, FRESH_PROMPT_STREAM)
    rows = scope_rows(fmt)["all_positions"]
    oracle = per_prompt_loss(oracle_predictor(fresh, prompts)(prompts.tokens), prompts.tokens, 4, rows)
    for b in range(6):
        task = int(prompts.task_ids[b])
        own = hmm.bayes_predictive(hmm.Mixture.uniform(fresh.hmm[task:task + 1]), prompts.tokens[b:b + 1]).next_token
        expected = per_prompt_loss(own, prompts.tokens[b:b + 1], 4, rows)
        assert oracle[b].item() == pytest.approx(expected.item(), abs=1e-10)
