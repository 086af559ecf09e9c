"""Test configuration shared by every test module.

Hypothesis runs under a deterministic profile by default (derandomized, no deadline), so a
failure on CI is reproducible on any machine. ``HYPOTHESIS_PROFILE=explore`` searches more.

Every test runs with one torch thread: ``make test`` runs two pytest workers on two cores, and
torch's intra-op threads contending for the same cores make small-matrix code 10-100x slower.
torch is imported by the processes that run tests, not by an xdist controller, which only hands
them out: importing it there (2.4 s) would hold back the workers' start.

The tiny preset's pipeline (``tiny_run``, ``tiny_evaluation``, ``tiny_analysis``) is made once per
process and shared by the command-line tests (:mod:`tiny_pipeline`).
"""
import gc
import os

import pytest
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


def pytest_configure(config):
    """One torch thread from the start (the session fixtures below run before any test's fixture),
    in every process that runs tests: a worker, or a run without xdist."""
    if hasattr(config, "workerinput") or config.getoption("dist", "no") == "no":
        import torch

        torch.set_num_threads(1)


def pytest_unconfigure(config):
    """Leave the objects of the session to the interpreter's exit, without a last collection pass
    over them: ``gc.freeze()``. A worker that imported torch, matplotlib and sympy took 1.4 s to
    exit, 0.4 s with the freeze, and the run ends when its last worker has exited."""
    gc.freeze()


def pytest_collection_modifyitems(items):
    """The ``long_running`` tests first (a stable sort). xdist hands the tests out in this order,
    after the groups (it sends the largest first), so the short tests fill in at the end and
    neither worker is left running a long test alone: longest first is the classic greedy
    schedule for two machines."""
    items.sort(key=lambda item: item.get_closest_marker("long_running") is None)


@pytest.fixture(autouse=True)
def single_torch_thread():
    """One thread again after a test that set more (a command run with ``--threads``)."""
    yield
    import torch

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
    """``(out, argv, stdout)``: the folder ``hmmtf evaluate`` wrote for the tiny run, its arguments
    and what it printed (:class:`tiny_pipeline.CommandRun`)."""
    from tiny_pipeline import evaluate_argv, run_on_checkpoint

    return run_on_checkpoint(evaluate_argv, tiny_run, tmp_path_factory.mktemp("tiny-evaluation"))


@pytest.fixture(scope="session")
def tiny_analysis(tiny_run, tmp_path_factory):
    """``(out, argv, figures)``: the folder ``hmmtf analyze`` wrote for the tiny run, its
    arguments, and the paths of the figures it saved, which are empty files
    (:mod:`recorded_figures`: the paper-mini pipeline draws them)."""
    from recorded_figures import figures_recorded_not_drawn
    from tiny_pipeline import analyze_argv, run_on_checkpoint

    with figures_recorded_not_drawn() as figures:
        out, argv, _ = run_on_checkpoint(analyze_argv, tiny_run, tmp_path_factory.mktemp("tiny-analysis"))
    return out, argv, figures
