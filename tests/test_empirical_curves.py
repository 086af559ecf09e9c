"""Learning curves on fresh HMMs (empirical/yardsticks/curves.py): chunked training is the uninterrupted run,
a stopped curve resumes without redoing points, a point's statistics are the competence rule's,
and bad settings are refused."""
import dataclasses
import json

import pytest
import torch

from empirical.training.checkpoint import load_checkpoint
from empirical.yardsticks.curves import BASELINES_FILE, CURVE_FILE, train_with_curve, written_points
from empirical.training.data import PromptStream
from empirical.training.presets import get_preset
from empirical.training.train import train
from hmm.prior_predictive import SMCSettings

TINY = get_preset("tiny")
PRESET = dataclasses.replace(TINY, train=dataclasses.replace(TINY.train, steps=40))
SETTINGS = SMCSettings(particles=8, moves=1)


def _curve(run_dir, every=20):
    return train_with_curve(PRESET, PRESET.model_config(PRESET.mixture_spec.num_tokens), run_dir, every, num_prompts=6,
                            fresh_tasks=8, settings=SETTINGS)


def _curve_until(stopped, run_dir, first_point):
    """``stopped``: the run of ``run_dir`` as it was after its first point (checkpoint at step 20,
    its log, its baselines, one point)."""
    stopped.mkdir()
    (stopped / BASELINES_FILE).write_text((run_dir / BASELINES_FILE).read_text())
    (stopped / CURVE_FILE).write_text(json.dumps(first_point) + "\n")
    mixture = PRESET.build_mixture()
    stream = PromptStream(mixture, PRESET.prompt_format, PRESET.train.batch_size, PRESET.data_seed)
    train(PRESET.model_config(mixture.num_tokens), PRESET.train, stream, stopped, task=PRESET.task(), stop_at=20,
          progress=False)


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("curve")
    return run_dir, _curve(run_dir)


@pytest.mark.long_running
def test_a_curve_trains_the_uninterrupted_run_and_resumes_without_redoing_points(curve, tmp_path):
    run_dir, points = curve
    assert [point["step"] for point in points] == [20, 40]
    assert [point["tokens"] for point in points] == [step * 16 * PRESET.prompt_format.length for step in (20, 40)]
    mixture = PRESET.build_mixture()
    stream = PromptStream(mixture, PRESET.prompt_format, PRESET.train.batch_size, PRESET.data_seed)
    whole = train(PRESET.model_config(mixture.num_tokens), PRESET.train, stream, None, progress=False).model
    chunked = load_checkpoint(run_dir / "checkpoint").model
    for (name, expected), actual in zip(whole.state_dict().items(), chunked.state_dict().values()):
        assert torch.equal(expected, actual), name
    # A stopped curve: its last point lost; the rerun trains from the step-20 checkpoint (a copy
    # of the run stopped there) and writes only that point.
    stopped = tmp_path / "stopped"
    _curve_until(stopped, run_dir, points[0])
    again = _curve(stopped)
    assert again[0] == points[0] and again[1]["step"] == 40
    assert again[1]["all_positions"]["model_loss"] == points[1]["all_positions"]["model_loss"]


@pytest.mark.long_running
def test_a_stop_request_checkpoints_mid_chunk_and_the_rerun_finishes_the_uninterrupted_curve(curve, tmp_path):
    """A stop request (SIGINT or SIGTERM to ``hmmtf curve``) inside the second chunk: the run stops
    at the next step with a checkpoint there and writes no point for that chunk; the rerun resumes
    from it and writes the uninterrupted run's last point."""
    run_dir, points = curve
    calls = []

    def stop_after_25_steps() -> bool:
        calls.append(None)
        return len(calls) > 24
    stopped = train_with_curve(PRESET, PRESET.model_config(PRESET.mixture_spec.num_tokens), tmp_path, 20,
                               num_prompts=6, fresh_tasks=8, settings=SETTINGS, stop_requested=stop_after_25_steps)
    assert stopped == points[:1]
    step = json.loads((tmp_path / "checkpoint" / "config.json").read_text())["step"]
    assert 20 < step < 40
    again = _curve(tmp_path)
    assert again == points


def test_a_point_holds_the_competence_rule_statistics_of_the_model_against_each_baseline(curve):
    run_dir, points = curve
    point = points[-1]
    baselines = json.loads((run_dir / BASELINES_FILE).read_text())["losses"]
    for scope in ("test_sequence", "all_positions"):
        ngram_mean = sum(baselines[scope]["ngram 2"]) / len(baselines[scope]["ngram 2"])
        difference = point[scope]["model_minus"]["ngram 2"]
        # a mean of differences against a difference of means: rounding of 6 sums of a few nats
        assert difference["mean"] == pytest.approx(point[scope]["model_loss"] - ngram_mean, rel=0, abs=1e-13)
        assert difference["interval_95"][0] < difference["mean"] < difference["interval_95"][1]
        assert set(point[scope]["model_minus"]) == {"ngram 1", "ngram 2", "ngram 3", "variable order"}
    assert written_points(run_dir) == points


def test_a_curve_without_a_ceiling_has_the_same_points_less_the_gap_closed(curve, tmp_path):
    """``--ceiling-particles 0`` (settings None): the same network, n-grams and oracle, no ceiling in
    the baselines and no gap closed in the points (at 128 states the SMC's ceiling costs hours)."""
    run_dir, points = curve
    bare = train_with_curve(PRESET, PRESET.model_config(PRESET.mixture_spec.num_tokens), tmp_path, 20, num_prompts=6,
                            fresh_tasks=8, settings=None)
    baselines = json.loads((tmp_path / BASELINES_FILE).read_text())
    assert baselines["ceiling_settings"] is None
    assert all("ceiling" not in losses for losses in baselines["losses"].values())
    for with_ceiling, without in zip(points, bare):
        for scope in ("test_sequence", "all_positions"):
            assert "gap_closed" not in without[scope]
            assert without[scope] == {key: value for key, value in with_ceiling[scope].items() if key != "gap_closed"}


@pytest.mark.parametrize(("every", "message"), [(0, "expected a positive divisor"), (15, "expected a positive divisor"),
                                                (4, "expected a multiple of log_every = 10")])
def test_an_every_that_does_not_divide_the_run_into_log_windows_is_refused(tmp_path, every, message):
    with pytest.raises(ValueError, match=message):
        _curve(tmp_path, every=every)


def _with_schedule(**schedule):
    return dataclasses.replace(TINY, train=dataclasses.replace(TINY.train, **schedule))


CONSTANT = _with_schedule(steps=20, min_lr_ratio=1.0)
DECAYING = _with_schedule(steps=40, min_lr_ratio=0.0, decay_steps=20)


def _scheduled_curve(preset, run_dir, branch_from=None):
    return train_with_curve(preset, preset.model_config(preset.mixture_spec.num_tokens), run_dir, 20, num_prompts=6,
                            fresh_tasks=8, settings=SETTINGS, branch_from=branch_from)


@pytest.mark.long_running
def test_a_curve_branched_into_its_decay_is_the_decaying_curve_from_scratch(tmp_path):
    """A constant run's curve to step 20, branched into a decay over steps 20-40, gives the points
    and the weights of the decaying run trained from scratch; its point at step 20 is the source's."""
    source = _scheduled_curve(CONSTANT, tmp_path / "constant")
    (tmp_path / "straight").mkdir()
    (tmp_path / "straight" / BASELINES_FILE).write_text((tmp_path / "constant" / BASELINES_FILE).read_text())
    straight = _scheduled_curve(DECAYING, tmp_path / "straight")
    branched = _scheduled_curve(DECAYING, tmp_path / "branch", branch_from=tmp_path / "constant")
    assert branched[0] == source[0]
    assert [point["all_positions"] for point in branched] == [point["all_positions"] for point in straight]
    weights = [load_checkpoint(tmp_path / run / "checkpoint").model.state_dict() for run in ("straight", "branch")]
    for name, expected in weights[0].items():
        assert torch.equal(expected, weights[1][name]), name
    # Run again, the branch resumes its own checkpoint: nothing to train, nothing branched anew.
    assert _scheduled_curve(DECAYING, tmp_path / "branch", branch_from=tmp_path / "constant") == branched


def test_a_branch_from_a_curve_scored_on_another_probe_is_refused(tmp_path):
    source = tmp_path / "constant"
    source.mkdir()
    (source / BASELINES_FILE).write_text(json.dumps({"num_prompts": 7, "fresh_tasks": 8, "ceiling_settings": {}}))
    with pytest.raises(ValueError, match=r"was scored on the probe \{'num_prompts': 7, .*expected \{'num_prompts': 6"):
        _scheduled_curve(DECAYING, tmp_path / "branch", branch_from=source)
