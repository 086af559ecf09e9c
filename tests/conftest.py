"""Test configuration shared by every test module.

Hypothesis runs under a deterministic profile by default (derandomized, no deadline), so a
failure on CI is reproducible on any machine. ``HYPOTHESIS_PROFILE=explore`` searches more.

Every test runs with one torch thread: ``make test`` runs two pytest workers on two cores, and
torch's intra-op threads contending for the same cores make small-matrix code 10-100x slower.

The tiny preset's pipeline (``tiny_run``, ``tiny_evaluation``, ``tiny_analysis``) is made once per
process and shared by the command-line tests (:mod:`tiny_pipeline`).
"""
import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=25,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


torch.set_num_threads(1)  # from the start: the session fixtures below run before any test's fixture


@pytest.fixture(autouse=True)
def single_torch_thread():
    """One thread again after a test that set more (a command run with ``--threads``)."""
    yield
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The run folder of ``hmmtf train`` on the tiny preset (:mod:`tiny_pipeline`)."""
    import hmmtf
    from tiny_pipeline import train_argv

    run_dir = tmp_path_factory.mktemp("tiny-run")
    assert hmmtf.main(train_argv(run_dir)) == 0
    return run_dir


@pytest.fixture(scope="session")
def tiny_evaluation(tiny_run, tmp_path_factory):
    """``(out, argv)``: the folder ``hmmtf evaluate`` wrote for the tiny run, and its arguments."""
    from tiny_pipeline import evaluate_argv, run_on_checkpoint

    return run_on_checkpoint(evaluate_argv, tiny_run, tmp_path_factory.mktemp("tiny-evaluation"))


@pytest.fixture(scope="session")
def tiny_analysis(tiny_run, tmp_path_factory):
    """``(out, argv)``: the folder ``hmmtf analyze`` wrote for the tiny run, and its arguments."""
    from tiny_pipeline import analyze_argv, run_on_checkpoint

    return run_on_checkpoint(analyze_argv, tiny_run, tmp_path_factory.mktemp("tiny-analysis"))
