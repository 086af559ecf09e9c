"""The calibration command measures the in-context signal with the Bayes-optimal predictor."""
import json

import pytest

import hmmtf
from empirical.yardsticks.calibrate import calibrate


def test_sparse_rows_give_a_rising_bayes_curve_and_dense_rows_a_flat_one():
    report = calibrate("tiny", [0.1, 50.0], num_prompts=400, seed=0)
    sparse, dense = report["results"]
    assert sparse["num_demonstrations"] == list(range(4))
    rise_sparse = sparse["bayes_accuracy"][-1] - sparse["bayes_accuracy"][0]
    rise_dense = dense["bayes_accuracy"][-1] - dense["bayes_accuracy"][0]
    assert rise_sparse > 4 * sparse["bayes_accuracy_stderr"][0]
    assert abs(rise_dense) < rise_sparse
    for entry in (sparse, dense):  # the Bayes-optimal predictor never loses to the unigram on average
        assert all(bayes <= unigram + 0.02 for bayes, unigram in zip(entry["bayes_loss"], entry["unigram_loss"]))


def test_command_writes_json_and_figure(tmp_path):
    assert hmmtf.main(["calibrate", "--preset", "tiny", "--concentrations", "0.2", "--num-prompts", "32", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "tiny.json").read_text())
    assert report["command"] == f"hmmtf calibrate --preset tiny --concentrations 0.2 --num-prompts 32 --out {tmp_path}"
    assert report["git_commit"] == hmmtf.source_commit()
    assert len(report["results"]) == 1
    assert (tmp_path / "tiny.png").stat().st_size > 0


def test_bad_concentration_is_refused():
    with pytest.raises(ValueError, match=r"concentrations: -0.5; expected numbers > 0"):
        calibrate("tiny", [-0.5], num_prompts=8, seed=0)
