"""The plateau study (``hmmtf plateau``): the escape rule, an arm's range over seeds and the
comparison with the baseline, on planted learning curves whose answers are known by construction."""
import importlib
import json
import os
import re
import sys
from pathlib import Path

import pytest

import hmmtf
from empirical.studies.plateau import compare, escape, escape_range, paper_budget_tokens

BUDGET = 1000
"""Tokens of one paper budget in the planted curves of the rule's tests."""


def point(step: int, upper: float, tokens_per_step: int = 100) -> dict:
    """A curve point whose test-sequence ``model - bigram`` interval ends at ``upper``."""
    difference = {"mean": upper - 0.01, "stderr": 0.005, "interval_95": [upper - 0.02, upper]}
    return {"step": step, "tokens": step * tokens_per_step,
            "test_sequence": {"model_loss": 2.7, "model_minus": {"ngram 2": difference}},
            "all_positions": {"model_loss": 2.7, "model_minus": {"ngram 2": difference}}}


def test_a_run_escapes_at_its_first_point_below_the_bigram_with_its_interval():
    points = [point(5, 0.1), point(10, 0.001), point(15, -0.002), point(20, 0.01)]
    assert escape(points, BUDGET) == {"escaped": True, "step": 15, "budget": 1.5, "bracket": [1.0, 1.5]}
    assert escape([point(5, -0.1)], BUDGET)["bracket"] == [0.0, 0.5]


def test_a_run_that_never_escapes_is_censored_at_its_last_point():
    assert escape([point(5, 0.1), point(10, 0.0)], BUDGET) == {"escaped": False, "censored_at": 1.0}
    with pytest.raises(ValueError, match="points: none"):
        escape([], BUDGET)


def test_an_arm_range_is_the_hull_of_its_seeds_and_a_censored_seed_bounds_it_from_below():
    escaped = [{"escaped": True, "bracket": [1.0, 1.25]}, {"escaped": True, "bracket": [1.5, 1.75]}]
    assert escape_range(escaped) == {"escaped": True, "range": [1.0, 1.75]}
    assert escape_range([*escaped, {"escaped": False, "censored_at": 3.0}, {"escaped": False, "censored_at": 2.0}]) == {
        "escaped": False, "after": 2.0}


@pytest.mark.parametrize("arm, baseline, expected", [
    ({"escaped": True, "range": [0.5, 1.0]}, {"escaped": True, "range": [1.0, 1.5]}, "earlier"),
    ({"escaped": True, "range": [1.5, 2.0]}, {"escaped": True, "range": [1.0, 1.5]}, "later"),
    ({"escaped": True, "range": [0.75, 1.25]}, {"escaped": True, "range": [1.0, 1.5]}, "unresolved"),
    ({"escaped": True, "range": [0.5, 1.0]}, {"escaped": False, "after": 1.0}, "earlier"),
    ({"escaped": True, "range": [0.5, 1.25]}, {"escaped": False, "after": 1.0}, "unresolved"),
    ({"escaped": False, "after": 2.0}, {"escaped": True, "range": [1.5, 1.75]}, "later"),
    ({"escaped": False, "after": 1.0}, {"escaped": True, "range": [1.5, 1.75]}, "unresolved"),
    ({"escaped": False, "after": 1.0}, {"escaped": False, "after": 2.0}, "unresolved"),
])
def test_an_arm_is_earlier_or_later_only_when_every_seed_is(arm, baseline, expected):
    assert compare(arm, baseline) == expected


def test_the_paper_budget_is_its_prompts_times_their_length():
    assert paper_budget_tokens() == 131_072 * 263


def plant_run(folder: Path, uppers: list[float], seed: int = 0, mixture: str = "paper", every: int = 512,
              signal: float = 0.125) -> Path:
    """A run folder of ``hmmtf curve`` with one point every ``every`` steps of 32 prompts of 263 tokens,
    whose scoring prompts' in-context unigram loses ``signal`` nats to the bigram."""
    (folder / "checkpoint").mkdir(parents=True)
    config = {"command": f"hmmtf curve --run-dir {folder}", "model": {"num_layers": 2}, "step": every * len(uppers),
              "train": {"seed": seed, "batch_size": 32}, "task": {"mixture": mixture}}
    (folder / "checkpoint" / "config.json").write_text(json.dumps(config))
    baselines = {"num_prompts": 256, "fresh_tasks": 1024, "ceiling_settings": None,
                 "losses": {"test_sequence": {"ngram 1": [2.5 + signal, 2.75 + signal], "ngram 2": [2.5, 2.75]},
                            "all_positions": {"ngram 1": [2.7, 2.7], "ngram 2": [2.6, 2.6]}}}
    (folder / "curve_baselines.json").write_text(json.dumps(baselines))
    (folder / "curve.jsonl").write_text("".join(json.dumps(point(every * (index + 1), upper, 32 * 263)) + "\n"
                                                for index, upper in enumerate(uppers)))
    return folder


def test_the_command_writes_each_arm_per_family_against_the_baseline(tmp_path, capsys):
    plain = plant_run(tmp_path / "plain", [0.1, 0.1, 0.1, -0.01])
    soft = plant_run(tmp_path / "soft", [0.1, -0.01])
    soft_again = plant_run(tmp_path / "soft-seed1", [0.1, 0.1, -0.01], seed=1, signal=0.25)
    sparse = plant_run(tmp_path / "sparse", [-0.01], mixture="paper-sparse", signal=0.5)
    for folder, run, step, words in (("verdicts", "soft", 1024, "beats the in-context unigram"),
                                     ("other-verdicts", "soft", 512, "at the in-context-unigram level"),
                                     ("other-verdicts", "plain", 2048, "beats every in-context n-gram")):
        verdict = tmp_path / folder / run
        verdict.mkdir(parents=True)
        (verdict / "ngram-verdict.json").write_text(json.dumps({"step": step, "verdict": words,
                                                                "beats": {"test_sequence": {"ngram 2": False}}}))
    out = tmp_path / "out"
    assert hmmtf.main(["plateau", "--arm", "plain", str(plain), str(sparse), "--arm", "soft", str(soft), str(soft_again),
                       "--baseline", "plain", "--verdicts", str(tmp_path / "verdicts"), str(tmp_path / "other-verdicts"),
                       "--out", str(out)]) == 0
    study = json.loads((out / "plateau.json").read_text())
    assert (out / "plateau.png").stat().st_size > 0
    rows = {(row["arm"], row["family"]): row for row in study["arms"]}
    quarter = 512 * 32 * 263 / paper_budget_tokens()  # 512 steps of 32 prompts: 1/8 of the paper's budget
    assert quarter == 0.125
    assert rows["plain", "paper"]["escape"] == {"escaped": True, "range": [0.375, 0.5]}
    assert rows["soft", "paper"]["escape"] == {"escaped": True, "range": [0.125, 0.375]}
    assert rows["soft", "paper"]["against_baseline"] == "earlier"
    assert rows["plain", "paper-sparse"]["escape"] == {"escaped": True, "range": [0.0, 0.125]}
    assert [run["seed"] for run in rows["soft", "paper"]["runs"]] == [0, 1]
    assert rows["soft", "paper"]["runs"][0]["ngram_verdict"]["verdict"] == "beats the in-context unigram"  # the first folder's
    assert rows["plain", "paper"]["runs"][0]["ngram_verdict"]["step"] == 2048  # found in the second folder
    assert "ngram_verdict" not in rows["soft", "paper"]["runs"][1]
    assert study["families"] == {"paper": {"signal_nats": (0.125 + 0.125 + 0.25) / 3, "runs": 3},
                                 "paper-sparse": {"signal_nats": 0.5, "runs": 1}}
    assert study["signal_order"] == [{"arm": "plain", "families": ["paper", "paper-sparse"],
                                      "against_less_signal": ["earlier"]}]
    assert "Escape" in study["rules"] and "Signal" in study["rules"] and study["baseline"] == "plain"
    assert "paper / soft: 2 run(s), escaped in (0.125, 0.375]x the paper's budget; earlier than plain" in capsys.readouterr().out


@pytest.mark.parametrize("arms, baseline, message", [
    ([["plain"]], "plain", "--arm: 'plain' names no run folder"),
    ([["plain", "RUN"], ["plain", "RUN"]], "plain", "--arm: names \\['plain', 'plain'\\]; expected each arm named once"),
    ([["plain", "RUN"]], "soft", "--baseline: 'soft'; expected one of the arms \\['plain'\\]"),
])
def test_an_arm_without_runs_twice_named_or_an_unknown_baseline_is_refused_in_one_line(tmp_path, capsys, arms,
                                                                                      baseline, message):
    run = plant_run(tmp_path / "run", [0.1])
    words = [word for arm in arms for word in ["--arm", *[str(run) if item == "RUN" else item for item in arm]]]
    assert hmmtf.main(["plateau", *words, "--baseline", baseline, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_the_queue_counts_the_points_after_a_runs_escape_and_finds_the_process_that_trains_it(tmp_path):
    """benchmarks/plateau_queue.py's stop rule (one point after the escape) and its adoption of a run
    another process trains (the pid in the run's lock file, alive)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    queue = importlib.import_module("plateau_queue")
    assert queue.points_after_escape(plant_run(tmp_path / "escaped", [0.1, -0.01, -0.02, -0.03])) == 2
    assert queue.points_after_escape(plant_run(tmp_path / "counting", [0.1, 0.05])) is None
    assert queue.points_after_escape(tmp_path / "unstarted") is None
    lock = tmp_path / "escaped" / "train.lock"
    lock.write_text(f"{os.getpid()}\n")
    assert queue.lock_holder(tmp_path / "escaped") == os.getpid()
    lock.write_text("")
    assert queue.lock_holder(tmp_path / "escaped") is None


def write_bounds(path: Path, bigram: float, prompts: int = 256, mixture: str = "paper") -> Path:
    """A bound on ``mixture``'s ceiling as benchmarks/ceiling_bounds.py writes it: 0.05 nats below the
    bigram on the test sequence, the oracle 1 nat below."""
    path.write_text(json.dumps({"mixture": mixture, "prompts": prompts, "fresh_tasks": 1024, "replicates": 4,
                                "settings": {"particles": 128},
                                "scopes": {"test_sequence": {"bound": {"mean": bigram - 0.05},
                                                             "baselines": {"ngram 2": {"mean": bigram},
                                                                           "oracle": {"mean": bigram - 1.0}}}}}))
    return path


def test_a_bound_on_the_ceiling_gives_each_run_its_share_of_the_window(tmp_path):
    """The planted runs' bigram is 2.625 on their scoring prompts and the unigram 0.125 above; the
    bound 0.05 below the bigram. A run whose last point is 0.02 below the bigram has closed
    (0.125 + 0.02) / (0.125 + 0.05) of the window; a bound on other prompts is refused."""
    plain = plant_run(tmp_path / "plain", [0.1, -0.01])
    out = tmp_path / "out"
    bounds = write_bounds(tmp_path / "ceiling-paper.json", 2.625)
    assert hmmtf.main(["plateau", "--arm", "plain", str(plain), "--baseline", "plain", "--ceilings", str(bounds),
                       "--out", str(out)]) == 0
    study = json.loads((out / "plateau.json").read_text())
    ceiling = study["families"]["paper"]["ceiling"]
    assert ceiling["bound_minus_bigram"] == pytest.approx(-0.05) and ceiling["oracle_minus_bigram"] == pytest.approx(-1.0)
    run = study["arms"][0]["runs"][0]
    assert run["window_share_at_last_point"] == pytest.approx((0.125 + 0.02) / (0.125 + 0.05))
    for name, other in (("prompts", write_bounds(tmp_path / "other.json", 2.625, prompts=512)),
                        ("bigram", write_bounds(tmp_path / "other.json", 2.6)),
                        ("family", write_bounds(tmp_path / "other.json", 2.625, mixture="paper-sparse"))):
        with pytest.raises(ValueError, match="--ceilings: "):
            hmmtf.main(["plateau", "--arm", "plain", str(plain), "--baseline", "plain", "--ceilings", str(other),
                        "--out", str(tmp_path / f"out-{name}"), "--debug"])
