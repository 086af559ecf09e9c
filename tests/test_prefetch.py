"""empirical/training/prefetch.py: batches drawn ahead in a worker process are the batches the loop
would draw itself, step for step and after a jump; a failing draw and a dead worker are said where
the batch was asked; ``hmmtf train --prefetch`` trains the same run bit for bit."""
import os

import pytest
import torch

import hmmtf
from empirical.training.data import PromptStream
from empirical.training.prefetch import PrefetchedBatches
from empirical.training.presets import get_preset
from empirical.training.train import Batch
from run_folders import assert_same_runs

PRESET = get_preset("paper-mini")


@pytest.fixture(scope="module")
def stream():
    return PromptStream(PRESET.build_mixture(), PRESET.prompt_format, 8, PRESET.data_seed)


def test_prefetched_batches_equal_the_drawn_ones_in_order_and_after_a_jump(stream):
    with PrefetchedBatches(stream, 3) as prefetched:
        for step in [0, 1, 2, 3, 4, 9, 10, 2, 3]:
            batch, drawn = prefetched(step), stream(step)
            assert torch.equal(batch.inputs, drawn.inputs) and torch.equal(batch.targets, drawn.targets), step


def test_the_worker_ends_on_close_and_a_later_call_starts_another(stream):
    prefetched = PrefetchedBatches(stream, 2)
    prefetched(0)
    worker = prefetched.worker
    prefetched.close()
    assert not worker.is_alive()
    assert torch.equal(prefetched(5).inputs, stream(5).inputs)
    prefetched.close()


def failing_at_three(step: int) -> Batch:
    if step == 3:
        raise ArithmeticError("no batch at step three")
    return Batch(torch.full((2, 4), step), torch.zeros(2, 4, dtype=torch.int64))


def test_a_draw_that_raises_in_the_worker_is_raised_where_its_step_is_asked():
    with PrefetchedBatches(failing_at_three, 4) as prefetched:
        assert prefetched(2).inputs[0, 0] == 2
        with pytest.raises(RuntimeError, match="(?s)drawing the batch of step 3 failed.*no batch at step three"):
            prefetched(3)


def dying(step: int) -> Batch:
    os._exit(7)


def test_a_worker_that_dies_is_said_with_its_exit_code():
    with PrefetchedBatches(dying, 2) as prefetched:
        with pytest.raises(RuntimeError, match="the worker drawing step 0 ended with exit code 7"):
            prefetched(0)


@pytest.mark.parametrize("depth", [0, -1, 1.5, True])
def test_a_depth_that_is_not_a_positive_integer_is_refused(depth):
    with pytest.raises(ValueError, match=r"^depth: .*; expected an integer >= 1"):
        PrefetchedBatches(lambda step: None, depth)


def test_training_with_prefetch_is_the_same_run_bit_for_bit(tmp_path):
    for depth in ("0", "2"):
        assert hmmtf.main(["train", "--preset", "tiny", "--run-dir", str(tmp_path / depth), "--steps", "12",
                           "--log-every", "4", "--threads", "1", "--no-progress", "--prefetch", depth]) == 0
    assert_same_runs(tmp_path / "0", tmp_path / "2")
