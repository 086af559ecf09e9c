"""The suite benchmark (benchmarks/bench_suite.py): its bounds and CPU breakdown on records worked
out by hand, and its pytest plugin on a planted run whose child's CPU is known by construction."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_suite", ROOT / "benchmarks" / "bench_suite.py")
bench_suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_suite)

CHILD_CPU_S = 0.3
PLANTED_TESTS = f'''
import subprocess
import sys

import pytest

BURN = "import time\\nstart = time.process_time()\\nwhile time.process_time() - start < {CHILD_CPU_S}: pass"


@pytest.mark.xdist_group("planted")
def test_waits_for_a_child_that_burns_cpu():
    subprocess.run([sys.executable, "-c", BURN], check=True)


@pytest.mark.long_running
def test_marked_long_running():
    pass
'''


def record(process, collection_cpu_s, *tests):
    return {"process": process, "collection_cpu_s": collection_cpu_s,
            "tests": [{"nodeid": nodeid, "cpu_s": cpu, "children_cpu_s": children, "wall_s": wall, "group": group,
                       "long_running": long_running} for nodeid, cpu, children, wall, group, long_running in tests]}


RECORDS = [record("gw0", 1.0, ("a", 3.0, 1.0, 4.0, "g", True), ("b", 2.0, 0.0, 2.5, "g", False)),
           record("gw1", 2.0, ("c", 1.0, 0.5, 1.0, None, False))]
"""Tests a and b share group g (6.5 s of wall one after the other); a is long-running."""


def test_cpu_bound_breakdown_and_cut_for_the_target():
    summary = bench_suite.summarise(RECORDS, wall_s=10.0, cpu_s=20.0, parallelism=2, target_s=6.0, top=2)
    assert (summary["cpu_bound_s"], summary["bound_s"], summary["efficiency"]) == (10.0, 10.0, 1.0)
    assert summary["largest_group"] == {"name": "g", "wall_s": 6.5}
    assert summary["cpu_to_cut_for_target_s"] == 20.0 - 6.0 * 2
    assert summary["cpu_breakdown_s"] == {"collection": 3.0, "long_running_tests": 4.0, "other_tests": 3.5,
                                          "unaccounted": 20.0 - 3.0 - 7.5}
    assert summary["most_cpu"] == [{"nodeid": "a", "cpu_s": 4.0}, {"nodeid": "b", "cpu_s": 2.0}]


def test_a_group_longer_than_the_cpu_bound_is_the_bound_and_a_met_target_needs_no_cut():
    summary = bench_suite.summarise(RECORDS, wall_s=8.0, cpu_s=10.0, parallelism=2, target_s=6.0, top=3)
    assert (summary["cpu_bound_s"], summary["bound_s"], summary["efficiency"]) == (5.0, 6.5, 6.5 / 8.0)
    assert summary["cpu_to_cut_for_target_s"] == 0.0


def test_the_plugin_records_each_test_its_children_and_the_collection(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text(PLANTED_TESTS)
    wall, cpu, code, records = bench_suite.run_suite(
        ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "no:hypothesispytest", str(planted)],
        workers=None)
    assert code == 0
    (main,) = records
    assert main["process"] == "main" and main["collection_cpu_s"] > 0
    burn, marked = main["tests"]
    assert (burn["nodeid"], burn["group"], burn["long_running"]) == (
        "test_planted.py::test_waits_for_a_child_that_burns_cpu", "planted", False)
    assert (marked["group"], marked["long_running"]) == (None, True)
    assert burn["children_cpu_s"] >= CHILD_CPU_S and marked["children_cpu_s"] == 0
    summary = bench_suite.summarise(records, wall, cpu, parallelism=1, target_s=60.0, top=2)
    # The tree's CPU holds pytest's own (collection and tests) and the child's.
    assert summary["cpu_breakdown_s"]["unaccounted"] >= 0 and cpu >= CHILD_CPU_S


def test_the_plugin_refuses_to_run_without_its_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(bench_suite.suite_accounting.DIRECTORY_VARIABLE, raising=False)
    with pytest.raises(pytest.UsageError, match="SUITE_ACCOUNTING_DIR: not set; expected the folder"):
        bench_suite.suite_accounting.pytest_configure(None)
