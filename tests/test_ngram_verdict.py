"""The n-gram verdict on many prompts (empirical/analysis/ngram_verdict.py): its clustered standard error
against closed forms, and the command on a tiny checkpoint."""
import math

import pytest
import torch
from tiny_checkpoints import assert_refused_in_one_line, command_report

from empirical.yardsticks.competence import (CEILING_BOUND, CEILING_METHODS, COLLAPSED_CEILING_SETTINGS, RANKED_VERDICTS,
                                             competence_verdict, is_competent)
from empirical.analysis.ngram_verdict import clustered_interval
from empirical.yardsticks.regime import Z_95

NGRAMS = ("ngram 1", "ngram 2", "ngram 3")


def test_with_one_prompt_per_hmm_the_clustered_error_is_the_naive_one_without_bessels_correction():
    differences = torch.randn(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    interval = clustered_interval(differences, torch.arange(50))
    # sum (d - mean)^2 / B^2 = Var_(B-1) (B - 1) / B^2 = naive^2 (B - 1) / B.
    assert interval["stderr"] == pytest.approx(interval["naive_stderr"] * math.sqrt(49 / 50), rel=1e-12)
    assert interval["interval_95"] == pytest.approx([interval["mean"] - Z_95 * interval["stderr"],
                                                     interval["mean"] + Z_95 * interval["stderr"]], rel=1e-12)


def test_prompts_repeated_within_an_hmm_add_no_information():
    """Each difference twice, both copies in one cluster: the clustered error is that of the
    singletons (the naive one shrinks by about sqrt 2, as if the copies were independent)."""
    differences = torch.randn(40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    single = clustered_interval(differences, torch.arange(40))
    doubled = clustered_interval(differences.repeat_interleave(2), torch.arange(40).repeat_interleave(2))
    assert doubled["mean"] == pytest.approx(single["mean"], rel=1e-12)
    assert doubled["stderr"] == pytest.approx(single["stderr"], rel=1e-12)
    assert doubled["naive_stderr"] < 0.75 * single["naive_stderr"]


@pytest.mark.long_running
def test_the_command_writes_the_comparison_and_its_verdict(tmp_path, capsys):
    printed, report = command_report("ngram-verdict", tmp_path, capsys, ["--prompts", "24", "--fresh-tasks", "6"])
    assert report["settings"] == {"prompts": 24, "fresh_tasks": 6, "ceiling_replicates": 0,
                                  "ceiling_particles": COLLAPSED_CEILING_SETTINGS.particles}
    assert report["distinct_hmms"] <= 6 and "ceiling_bound" not in report
    assert set(report["losses"]) == set(report["accuracy"]) == {"test_sequence", "all_positions"}
    assert all(0 <= value <= 1 for by_name in report["accuracy"].values() for value in by_name.values())
    for scope, comparisons in report["comparisons"].items():
        assert set(comparisons) == {"model - ngram 1", "model - ngram 2", "model - ngram 3", "model - variable order",
                                    "model - oracle"}
        for name, interval in comparisons.items():
            other = name.removeprefix("model - ")
            assert interval["mean"] == pytest.approx(report["losses"][scope]["model"] - report["losses"][scope][other],
                                                     abs=1e-12)
            if other != "oracle":
                assert report["beats"][scope][other] == (interval["interval_95"][1] < 0)
    assert report["verdict"] == competence_verdict(report["beats"]) in RANKED_VERDICTS
    assert report["competent"] == is_competent(report["beats"])
    assert len(report["variable_order_concentrations"]) == 7
    assert printed["verdict"] == report["verdict"]
    assert (tmp_path / "ngram-verdict" / "ngram-verdict.png").stat().st_size > 0


@pytest.mark.long_running
def test_the_ceilings_bound_is_scored_beside_the_ngrams_on_the_same_prompts(tmp_path, capsys):
    _, report = command_report("ngram-verdict", tmp_path, capsys, ["--prompts", "12", "--fresh-tasks", "4",
                                                                   "--ceiling-replicates", "2", "--ceiling-particles", "8"])
    bound = report["ceiling_bound"]
    assert bound["method"] == CEILING_METHODS["collapsed"] and bound["backend"] == "collapsed"
    assert (bound["replicates"], bound["particles"]) == (2, 8)
    for scope, comparisons in report["comparisons"].items():
        losses = report["losses"][scope]
        assert set(comparisons) == {*(f"model - {name}" for name in (*NGRAMS, "variable order", "oracle", CEILING_BOUND)),
                                    *(f"{CEILING_BOUND} - {name}" for name in (*NGRAMS, "variable order", "oracle"))}
        for name, interval in comparisons.items():
            first, second = name.split(" - ")
            assert interval["mean"] == pytest.approx(losses[first] - losses[second], abs=1e-12)
    assert report["verdict"] == competence_verdict(report["beats"])  # the bound is no n-gram: it decides nothing


def test_bad_settings_are_refused_in_one_line(tmp_path, capsys):
    assert_refused_in_one_line("ngram-verdict", tmp_path, capsys, [
        (["--prompts", "0"], "argument --prompts: 0; expected an integer >= 1"),
        (["--fresh-tasks", "-1"], "argument --fresh-tasks: -1; expected an integer >= 2"),
        (["--ceiling-replicates", "-1"], "argument --ceiling-replicates: -1; expected an integer >= 0"),
        (["--ceiling-particles", "0"], "argument --ceiling-particles: 0; expected an integer >= 1"),
    ])
