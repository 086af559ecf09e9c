"""The competence result (empirical/yardsticks/competence.py): its decision rule, its interval for the gap
closed, the command's output on the tiny pipeline, and the committed results' ordering."""
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

import hmm
import tiny_pipeline
import hmmtf
from empirical.yardsticks.competence import (CACHE_VARIABLE, CEILING_METHODS, COMPETENT, NGRAM_ORDERS,
                                             VARIABLE_ORDER, RANKED_VERDICTS, ceiling_estimates, competence_section,
                                             competence_verdict, gap_closed, is_competent, paired, per_prompt_loss,
                                             scope_rows)
from empirical.training.presets import get_preset
from empirical.yardsticks.regime import fresh_prompts
from hmm.collapsed_smc import CollapsedSMCSettings, collapsed_prior_predictive
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings

ROOT = Path(__file__).resolve().parents[1]
LADDER_ORDER = ("ngram 1", "ngram 2", "ngram 3")


def _beats(orders_beaten_in_test: int, orders_beaten_everywhere: int) -> dict:
    return {"test_sequence": {f"ngram {n}": n <= orders_beaten_in_test for n in NGRAM_ORDERS},
            "all_positions": {f"ngram {n}": n <= orders_beaten_everywhere for n in NGRAM_ORDERS}}


@pytest.mark.parametrize(("test", "everywhere", "verdict"), [
    (0, 3, "at the in-context-unigram level"), (1, 1, "beats the in-context unigram"), (3, 2, COMPETENT),
    (2, 2, COMPETENT), (3, 3, "beats every in-context n-gram")])
def test_the_verdict_is_the_lowest_order_not_beaten_in_both_scopes(test, everywhere, verdict):
    assert competence_verdict(_beats(test, everywhere)) == verdict
    assert RANKED_VERDICTS.index(verdict) == min(test, everywhere)


@pytest.mark.parametrize(("beats_variable_order", "verdict", "competent"), [
    ((True, True), "beats every in-context predictor", True), ((True, False), "beats every in-context n-gram", False),
    ((False, True), "beats every in-context n-gram", False)])
def test_the_variable_order_predictor_tops_the_verdict_and_gates_competence(beats_variable_order, verdict, competent):
    beats = _beats(3, 3)
    for scope, beaten in zip(beats, beats_variable_order):
        beats[scope][VARIABLE_ORDER] = beaten
    assert (competence_verdict(beats), is_competent(beats)) == (verdict, competent)


def test_a_network_that_beats_the_bigram_is_competent_only_if_it_beats_the_variable_order_predictor_too():
    beats = _beats(2, 3)
    assert competence_verdict(beats) == COMPETENT and is_competent(beats)  # a result made before it existed
    for scope in beats:
        beats[scope][VARIABLE_ORDER] = scope == "test_sequence"
    assert competence_verdict(beats) == COMPETENT and not is_competent(beats)
    for scope in beats:
        beats[scope][VARIABLE_ORDER] = True
    assert competence_verdict(beats) == COMPETENT and is_competent(beats)


def test_a_higher_order_beaten_does_not_count_past_a_lower_one_not_beaten():
    beats = {scope: {"ngram 1": True, "ngram 2": False, "ngram 3": True} for scope in ("test_sequence", "all_positions")}
    assert competence_verdict(beats) == "beats the in-context unigram"


def test_gap_closed_and_its_delta_method_interval_against_a_bootstrap():
    generator = torch.Generator().manual_seed(0)
    difficulty = torch.rand(4000, generator=generator, dtype=torch.float64)
    unigram = 2.0 + difficulty
    ceiling = unigram - 0.07 - 0.02 * torch.randn(4000, generator=generator, dtype=torch.float64)
    model = unigram - 0.035 - 0.03 * torch.randn(4000, generator=generator, dtype=torch.float64)
    result = gap_closed(unigram, model, ceiling)
    assert result["fraction"] == pytest.approx(((unigram - model).mean() / (unigram - ceiling).mean()).item(), rel=1e-12,
                                               abs=0)
    draws = torch.randint(0, 4000, (2000, 4000), generator=generator)
    boot = (unigram[draws] - model[draws]).mean(1) / (unigram[draws] - ceiling[draws]).mean(1)
    # The bootstrap's own standard deviation is known to 1/sqrt(2 * 2000) = 1.6% relative (normal
    # statistic); allow 5 of those.
    assert result["stderr"] == pytest.approx(boot.std().item(), rel=0.08, abs=0)
    low, high = result["interval_95"]
    assert low < 0.5 < high


def test_per_prompt_loss_and_scopes_of_a_format():
    fmt = get_preset("tiny").prompt_format
    tokens = torch.zeros(2, fmt.length, dtype=torch.long)
    tokens[:, fmt.is_delimiter] = 4
    uniform = torch.full((2, fmt.length, 4), 0.25, dtype=torch.float64)
    scopes = scope_rows(fmt)
    assert int(scopes["test_sequence"].sum()) == fmt.test_length
    for rows in scopes.values():
        # A mean of n equal terms: n roundings of the running sum, one of the quotient.
        bound = (fmt.length + 1) * torch.finfo(torch.float64).eps
        assert per_prompt_loss(uniform, tokens, 4, rows).tolist() == pytest.approx([math.log(4)] * 2, rel=bound, abs=0)
    interval = paired(torch.tensor([1.0, 3.0], dtype=torch.float64))
    assert interval["mean"] == 2.0 and interval["stderr"] == 1.0


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_evaluate_writes_the_competence_result(tiny_evaluation):
    out, argv, _ = tiny_evaluation
    competence = json.loads((out / "competence.json").read_text())
    assert competence["command"] == "hmmtf " + " ".join(argv)
    assert competence["ceiling"]["particles"] == tiny_pipeline.CEILING_PARTICLES
    assert competence["num_prompts"] == tiny_pipeline.EVALUATE_PROMPTS
    assert competence["fresh_tasks"] == tiny_pipeline.FRESH_TASKS
    assert set(competence["ladder"]["all_positions"]) == {"unigram", *LADDER_ORDER, VARIABLE_ORDER, "model", "ceiling",
                                                          "oracle"}
    assert len(competence["variable_order"]["concentrations"]) == competence["variable_order"]["depth"] + 1
    assert "hand-built" in competence["hand_built"]["all_positions"]
    assert competence["verdict"] in RANKED_VERDICTS and competence["competent"] == is_competent(competence["beats"])
    assert all(VARIABLE_ORDER in beats for beats in competence["beats"].values())
    assert (out / "competence.png").stat().st_size > 0


def test_on_the_committed_results_the_ceiling_lies_between_the_oracle_and_every_baseline():
    results = sorted((ROOT / "figures").rglob("competence.json"))
    assert results, "no committed competence.json under figures/"
    for path in results:
        competence = json.loads(path.read_text())
        error = competence["ceiling"]["monte_carlo_stderr"]
        for scope in ("test_sequence", "all_positions"):
            loss = {name: value["loss"] for name, value in competence["ladder"][scope].items()}
            assert loss["oracle"] < loss["ceiling"], (path, scope)
            for baseline in ("unigram", *LADDER_ORDER):
                # The ceiling's estimate is biased upwards (an SMC evidence's -log is, by Jensen);
                # its Monte-Carlo error is the only slack allowed.
                assert loss["ceiling"] - 3 * error[scope] < loss[baseline], (path, scope, baseline)


def test_the_ceiling_cache_returns_what_was_computed_and_misses_on_any_other_computation(tmp_path, monkeypatch):
    spec = hmm.MixtureSpec(num_tasks=4, num_states=2, num_tokens=2, transition_concentration=0.5,
                           emission_concentration=0.5)
    prompt_format = hmm.PromptFormat(num_demos=1, demo_length=3, test_length=2)
    tokens = hmm.sample_prompts(spec.build(seed=0), 3, prompt_format, seed=1).tokens
    settings = SMCSettings(particles=16, moves=1)
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    uncached = ceiling_estimates(tokens, prompt_format, spec, settings)
    assert not uncached.cached and not any(tmp_path.iterdir())
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    first, again = (ceiling_estimates(tokens, prompt_format, spec, settings) for _ in range(2))
    assert (first.cached, again.cached) == (False, True) and again.seconds == first.seconds
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(uncached.replicates, first.replicates, again.replicates))
    assert len(list(tmp_path.glob("*.npz"))) == 1
    # Another seed, other prompts or another replicate count is another computation.
    for other in (ceiling_estimates(tokens, prompt_format, spec, dataclasses.replace(settings, seed=1)),
                  ceiling_estimates(tokens.flip(0), prompt_format, spec, settings),
                  ceiling_estimates(tokens, prompt_format, spec, settings, replicates=3)):
        assert not other.cached
    assert len(list(tmp_path.glob("*.npz"))) == 4


def _small_prompts():
    spec = hmm.MixtureSpec(num_tasks=4, num_states=3, num_tokens=2, transition_concentration=0.5,
                           emission_concentration=0.5)
    prompt_format = hmm.PromptFormat(num_demos=2, demo_length=3, test_length=2)
    return spec, prompt_format, hmm.sample_prompts(spec.build(seed=0), 3, prompt_format, seed=1).tokens


def test_the_collapsed_backend_averages_collapsed_runs_of_successive_seeds_and_is_labelled_a_bound(monkeypatch):
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    spec, prompt_format, tokens = _small_prompts()
    settings = CollapsedSMCSettings(particles=16, burn_in_steps=2, seed=5)
    ceiling = ceiling_estimates(tokens, prompt_format, spec, settings, replicates=3, backend="collapsed")
    direct = [collapsed_prior_predictive(tokens, prompt_format, DirichletHMMPrior.from_spec(spec),
                                         dataclasses.replace(settings, seed=5 + r)).next_token for r in range(3)]
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(ceiling.replicates, direct, strict=True))
    assert ceiling.upper_bound and ceiling.record()["backend"] == "collapsed"
    assert not ceiling_estimates(tokens, prompt_format, spec, SMCSettings(particles=16, moves=1)).upper_bound


def test_each_backend_refuses_the_other_backends_settings():
    spec, prompt_format, tokens = _small_prompts()
    with pytest.raises(ValueError, match=r"^settings: SMCSettings; expected CollapsedSMCSettings for the collapsed"):
        ceiling_estimates(tokens, prompt_format, spec, SMCSettings(), backend="collapsed")
    with pytest.raises(ValueError, match=r"^settings: CollapsedSMCSettings; expected SMCSettings for the numpy"):
        ceiling_estimates(tokens, prompt_format, spec, CollapsedSMCSettings())
    with pytest.raises(ValueError, match=r"^backend: 'torch'; expected one of \('numpy', 'collapsed'\)"):
        competence_section(None, None, get_preset("tiny"), 4, 4, SMCSettings(), backend="torch")


def test_the_competence_result_with_the_collapsed_backend_records_its_ceiling_as_an_upper_bound(monkeypatch):
    """The tiny preset's ladder with the collapsed bound as its ceiling (a uniform predictor stands in
    for the model and the unigram): the record says what the ceiling is, and its paired difference is
    the one of the averaged collapsed runs on the same fresh prompts (:func:`ceiling_estimates`,
    checked against the collapsed SMC above)."""
    monkeypatch.delenv(CACHE_VARIABLE, raising=False)
    preset = get_preset("tiny")
    num_tokens = preset.mixture_spec.num_tokens
    uniform = lambda tokens: torch.full((*tokens.shape, num_tokens), 1 / num_tokens, dtype=torch.float64)  # noqa: E731
    settings = CollapsedSMCSettings(particles=16, burn_in_steps=2)
    result = competence_section(uniform, uniform, preset, 8, 4, settings, replicates=2, backend="collapsed")
    ceiling = result.ceiling
    assert ceiling["method"] == CEILING_METHODS["collapsed"] and ceiling["upper_bound"] is True
    assert (ceiling["backend"], ceiling["particles"], ceiling["burn_in_steps"], ceiling["replicates"]) == (
        "collapsed", 16, 2, 2)
    assert "moves" not in ceiling
    _, prompts = fresh_prompts(preset, 8, 4)
    bound = ceiling_estimates(prompts.tokens, preset.prompt_format, preset.mixture_spec, settings, 2, "collapsed")
    for scope, rows in scope_rows(preset.prompt_format).items():
        model = per_prompt_loss(uniform(prompts.tokens), prompts.tokens, num_tokens, rows)
        expected = model - per_prompt_loss(bound.probabilities, prompts.tokens, num_tokens, rows)
        assert result.comparisons[scope]["model - ceiling"]["mean"] == pytest.approx(expected.mean().item(), rel=1e-12)


@pytest.mark.parametrize(("options", "message"), [
    (["--ceiling-backend", "collapsed", "--ceiling-moves", "4"],
     "hmmtf evaluate: error: --ceiling-moves: 4; the collapsed backend makes no Gibbs moves (leave it out, or pass "
     "--ceiling-backend numpy)"),
    (["--ceiling-burn-in-steps", "4"],
     "hmmtf evaluate: error: --ceiling-burn-in-steps: 4; it sets the collapsed backend's burn-in (pass "
     "--ceiling-backend collapsed, or leave it out)"),
])
def test_evaluate_refuses_an_option_of_the_other_ceiling_backend_before_reading_anything(tmp_path, capsys, options,
                                                                                          message):
    out = tmp_path / "out"
    assert hmmtf.main(["evaluate", str(tmp_path / "no-checkpoint"), "--out", str(out), *options]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not out.exists()


def test_evaluate_writes_the_competence_result_on_its_own_prompts_with_the_collapsed_bound(tiny_run, tmp_path,
                                                                                          capsys):
    out = tmp_path / "out"
    argv = ["evaluate", str(tiny_run / "checkpoint"), "--out", str(out), "--num-prompts", "4", "--hand-built-prompts",
            "0", "--fresh-tasks", "4", "--reference-tasks", "8", "--competence-prompts", "6", "--ceiling-backend",
            "collapsed", "--ceiling-particles", "8", "--ceiling-replicates", "2", "--ceiling-burn-in-steps", "2"]
    assert hmmtf.main(argv) == 0
    capsys.readouterr()
    competence = json.loads((out / "competence.json").read_text())
    assert competence["num_prompts"] == 6 and competence["fresh_tasks"] == 4
    ceiling = competence["ceiling"]
    assert ceiling["upper_bound"] is True and ceiling["method"] == CEILING_METHODS["collapsed"]
    assert (ceiling["particles"], ceiling["burn_in_steps"], ceiling["replicates"]) == (8, 2, 2)
