"""benchmarks/gpu_recipe_sweep.py: the recipes' flags keep the data budget, bad arguments are named
in one line, and the CPU rehearsal (paper-mini) trains and scores every run and records them."""
import importlib
import json
import sys
from pathlib import Path

import pytest

import hmmtf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sweep = importlib.import_module("gpu_recipe_sweep")


def flag(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


def test_every_recipe_sees_the_papers_budget_of_prompts():
    for recipe in sweep.RECIPES:
        flags = sweep.run_flags(recipe, "paper", 131_072)
        assert int(flag(flags, "--steps")) * int(flag(flags, "--batch-size")) == 131_072
        assert int(flag(flags, "--steps")) % int(flag(flags, "--log-every")) == 0
        assert flag(flags, "--checkpoint-every") == "0"
    batch128 = sweep.run_flags(sweep.Recipe("b", batch_size=128, warmup_fraction=0.1, learning_rate=6e-4), "paper",
                               131_072)
    assert (flag(batch128, "--steps"), flag(batch128, "--warmup-steps"), flag(batch128, "--learning-rate")) == (
        "1024", "102", "0.0006")
    assert "--warmup-steps" not in sweep.run_flags(sweep.Recipe("p"), "paper", 131_072)


def test_a_budget_that_is_not_whole_steps_is_refused_in_one_line(capsys, tmp_path):
    assert sweep.main(["--preset", "paper-mini", "--out", str(tmp_path), "--budget-prompts", "100"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gpu_recipe_sweep.py: error: --budget-prompts: 100; expected a multiple of recipe "
                           "'preset''s batch size 32")


def test_an_unknown_run_and_a_work_dir_under_out_are_refused(capsys, tmp_path):
    assert sweep.main(["--preset", "paper-mini", "--out", str(tmp_path), "--runs", "nope"]) == 2
    assert "--runs: ['nope']; expected names of" in capsys.readouterr().err
    assert sweep.main(["--preset", "paper-mini", "--out", str(tmp_path), "--work-dir", str(tmp_path / "w")]) == 2
    assert "--work-dir" in capsys.readouterr().err


@pytest.mark.long_running
def test_the_cpu_rehearsal_trains_and_scores_every_run(tmp_path, capsys):
    out, work, step = tmp_path / "out", tmp_path / "work", tmp_path / "step.json"
    step.write_text(json.dumps({"preset": "paper-mini", "tokens_per_s": 1.0}))
    assert sweep.main(["--preset", "paper-mini", "--device", "cpu", "--out", str(out), "--work-dir", str(work),
                       "--runs", "preset", "batch128-lr6e-4", "--budget-prompts", "256", "--concurrent", "2",
                       "--verdict-prompts", "16", "--verdict-fresh-tasks", "16", "--threads", "1",
                       "--step-benchmark", str(step), "--prefetch", "2"]) == 0
    report = json.loads((out / sweep.SWEEP_FILE).read_text())
    assert report["step_benchmark"] == {"preset": "paper-mini", "tokens_per_s": 1.0}
    assert sorted(path.name for path in out.iterdir()) == sorted([sweep.SWEEP_FILE, sweep.FIGURE_FILE,
                                                                  sweep.PROGRESS_FILE])
    assert report["git"]["commit"] == hmmtf.source_commit().removesuffix("+dirty")
    assert report["environment"]["device"] and report["environment"]["torch"]
    assert list(report["runs"]) == ["preset", "batch128-lr6e-4"]
    for name, batch in (("preset", 32), ("batch128-lr6e-4", 128)):
        run = report["runs"][name]
        assert run["train_returncode"] == 0 and not run["stopped_early"] and "--prefetch 2" in run["train_command"]
        assert run["final_step"] == run["planned_steps"] == 256 // batch
        assert run["verdict"]["settings"] == {"prompts": 16, "fresh_tasks": 16}
        assert set(run["verdict"]["losses"]["test_sequence"]) == {"ngram 1", "ngram 2", "ngram 3", "model", "oracle"}
    capsys.readouterr()
    assert sweep.main(["--out", str(out), "--wait", "1"]) == 0
    assert capsys.readouterr().out.startswith("finished: preset: done")


def test_a_step_benchmark_that_is_not_a_json_file_is_refused_in_one_line(capsys, tmp_path):
    assert sweep.main(["--preset", "paper-mini", "--out", str(tmp_path / "out"), "--step-benchmark",
                       str(tmp_path / "absent.json")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gpu_recipe_sweep.py: error: --step-benchmark: ") and "bench_training.py --out" in line
