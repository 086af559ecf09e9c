"""benchmarks/bench_malloc.py on the tiny preset: each process starts with the malloc settings it
is said to have, and the summaries are those of the processes (not how fast anything is)."""
import importlib
import json
import os
import sys
from pathlib import Path

import pytest

import hmmtf
from empirical.training import allocator

# Imported by name from its folder, not from a file spec: the spawned workers unpickle its worker
# function by module name, and they inherit this sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
bench = importlib.import_module("bench_malloc")


@pytest.mark.long_running
def test_each_process_runs_under_its_setting_and_the_summary_is_of_the_pairs(tmp_path):
    out = tmp_path / "malloc.json"
    assert bench.main(["--preset", "tiny", "--pairs", "2", "--steps", "1", "--warmup", "0", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    tuned = allocator.with_training_tunables(os.environ)["GLIBC_TUNABLES"]
    assert result["tuned_tunables"] == tuned and result["git_commit"] == hmmtf.source_commit()
    assert [pair["defaults"]["glibc_tunables"] for pair in result["pairs"]] == [os.environ.get("GLIBC_TUNABLES")] * 2
    assert [pair["tuned"]["glibc_tunables"] for pair in result["pairs"]] == [tuned] * 2
    for setting in bench.SETTINGS:
        for metric in bench.METRICS:
            values = [pair[setting][metric] for pair in result["pairs"]]
            assert min(values) >= 0 and result["medians"][setting][metric] == (values[0] + values[1]) / 2
    walls = {setting: [pair[setting]["wall_ms_per_step"] for pair in result["pairs"]] for setting in bench.SETTINGS}
    assert result["tuned_over_defaults_wall"]["ratios"] == [t / d for t, d in zip(walls["tuned"], walls["defaults"])]


def test_a_bad_argument_is_named_in_one_line(capsys):
    assert bench.main(["--pairs", "0"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bench_malloc.py: error: argument --pairs: 0; expected an integer >= 1")
