"""benchmarks/gpu_recipe_sweep.py: the recipes' flags keep the data budget and give hmmtf train the
schedule and mixture they name, bad arguments are named in one line, the runs beyond the bigram and
the analysis flags are what benchmarks/gpu_session.sh audits with, and the CPU rehearsal
(paper-mini) trains and scores every run and records them."""
import dataclasses
import importlib
import json
import sys
from pathlib import Path

import pytest

import hmmtf
from empirical.analysis.report import AnalysisConfig
from empirical.reproduce.config import ANALYSIS_CONFIGS
from empirical.training.overrides import resolve
from hmmtf.override_options import flag_overrides
from empirical.training.train import learning_rate
from empirical.yardsticks.competence import COLLAPSED_CEILING_SETTINGS, RANKED_VERDICTS
from hmmtf.options import config_from_command_line

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


def resolved_train_run(flags: list[str], preset: str = "paper"):
    """What ``hmmtf train --preset PRESET FLAGS`` would train (no model built)."""
    args = hmmtf.build_parser("train").parse_args(["train", "--preset", preset, *flags])
    return resolve(preset, flag_overrides(args))


def test_warmup_stable_decay_holds_the_peak_and_decays_to_zero_over_the_last_fifth():
    (recipe,) = [recipe for recipe in sweep.RECIPES if recipe.name == "wsd-lr1e-3"]
    flags = sweep.run_flags(recipe, "paper", 2 * 131_072)
    assert [flag(flags, name) for name in ("--steps", "--warmup-steps", "--decay-steps", "--min-lr-ratio",
                                           "--learning-rate")] == ["8192", "819", "1638", "0.0", "0.001"]
    train = resolved_train_run(flags).preset.train
    assert (train.steps, train.warmup_steps, train.decay_steps, train.min_lr_ratio) == (8192, 819, 1638, 0.0)
    assert learning_rate(train, 819) == learning_rate(train, 8192 - 1638) == 1e-3
    assert learning_rate(train, 8192) == 0.0
    assert "--decay-steps" not in sweep.run_flags(sweep.Recipe("p", warmup_fraction=0.1), "paper", 131_072)


def test_a_recipes_mixture_is_trained_with_its_prompt_format():
    (recipe,) = [recipe for recipe in sweep.RECIPES if recipe.name == "wsd-lr1e-3-sparse"]
    flags = sweep.run_flags(recipe, "paper", 131_072)
    assert (flag(flags, "--mixture"), flag(flags, "--prompt-format")) == ("paper-sparse", "paper-sparse")
    preset = resolved_train_run(flags).preset
    assert preset.mixture == "paper-sparse"
    assert (preset.mixture_spec.transition_concentration, preset.mixture_spec.emission_concentration) == (0.005, 0.005)
    assert "--mixture" not in sweep.run_flags(sweep.Recipe("p"), "paper", 131_072)


def test_the_curriculum_recipe_anneals_paper_sparse_away_over_the_papers_budget_of_a_run_of_twice_it():
    (recipe,) = [recipe for recipe in sweep.RECIPES if recipe.name == "wsd-lr1e-3-curriculum"]
    flags = sweep.run_flags(recipe, "paper", 2 * 131_072)
    assert [flag(flags, name) for name in ("--curriculum-mixture", "--curriculum-steps", "--curriculum-share")] == [
        "paper-sparse", "4096", "0.75"]
    train = resolved_train_run(flags).preset.train
    assert (train.curriculum_mixture, train.curriculum_steps, train.curriculum_share) == ("paper-sparse", 4096, 0.75)
    assert not train.soft_targets
    assert "--curriculum-mixture" not in sweep.run_flags(sweep.Recipe("p"), "paper", 131_072)
    assert resolved_train_run(sweep.run_flags(sweep.Recipe("s", soft_targets=True), "paper", 131_072)
                              ).preset.train.soft_targets


def test_the_rehearsals_recipe_is_the_sessions_with_a_curriculum_mixture_of_paper_minis_tokens():
    (default,) = [recipe for recipe in sweep.RECIPES if recipe.name == "wsd-lr1e-3-curriculum"]
    (rehearsal,) = sweep.load_recipes(str(Path(sweep.__file__).parent / "gpu_rehearsal_recipes.json"))
    assert dataclasses.replace(rehearsal, curriculum_mixture=default.curriculum_mixture) == default
    flags = sweep.run_flags(rehearsal, "paper-mini", 512)
    assert resolved_train_run(flags, "paper-mini").preset.train.curriculum_mixture == "cpu-small"


@pytest.mark.parametrize("entry, expected", [
    ({"name": "c", "curriculum_mixture": "paper-sparse"}, "recipe 'c': curriculum_mixture, curriculum_fraction, "
                                                          "curriculum_share ['paper-sparse', None, None]; expected all "
                                                          "three or none"),
    ({"name": "c", "curriculum_mixture": "nope", "curriculum_fraction": 0.5, "curriculum_share": 0.5},
     "recipe 'c': curriculum_mixture 'nope'; expected one of hmm.MIXTURE_SPECS"),
    ({"name": "c", "curriculum_mixture": "cpu-small", "curriculum_fraction": 0.0, "curriculum_share": 0.5},
     "recipe 'c': curriculum_fraction 0.0; expected a fraction in (0, 1]"),
    ({"name": "w", "decay_fraction": 0.0}, "recipe 'w': decay_fraction 0.0; expected a fraction in (0, 1)"),
    ({"name": "w", "decay_fraction": 0.5, "warmup_fraction": 0.6}, "recipe 'w': decay_fraction 0.5; expected a "
                                                                    "fraction in (0, 1) of the steps, at most 1 - "
                                                                    "warmup_fraction (0.6)"),
    ({"name": "m", "mixture": "nope"}, "recipe 'm': mixture 'nope'; expected a name of both hmm.MIXTURE_SPECS"),
])
def test_a_bad_decay_or_mixture_is_refused_in_one_line(capsys, tmp_path, entry, expected):
    recipes = tmp_path / "recipes.json"
    recipes.write_text(json.dumps([entry]))
    assert sweep.main(["--preset", "paper-mini", "--out", str(tmp_path / "out"), "--recipes", str(recipes)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu_recipe_sweep.py: error: {expected}")


def scored_run(verdict: str, loss: float) -> dict:
    return {"verdict": {"verdict": verdict, "losses": {"test_sequence": {"model": loss}}}}


def test_the_runs_audited_are_those_beyond_the_bigram_the_lowest_loss_first(capsys, tmp_path):
    report = {"runs": {"counter": scored_run(RANKED_VERDICTS[1], 2.6), "unscored": {"verdict": None},
                       "bigram": scored_run(RANKED_VERDICTS[2], 2.5), "every": scored_run(RANKED_VERDICTS[3], 2.4),
                       "unigram": scored_run(RANKED_VERDICTS[0], 2.7), "variable": scored_run(RANKED_VERDICTS[4], 2.3)}}
    assert sweep.in_context_runs(report) == ["variable", "every", "bigram"]
    (tmp_path / sweep.SWEEP_FILE).write_text(json.dumps(report))
    assert sweep.main(["--out", str(tmp_path), "--in-context-runs"]) == 0
    assert capsys.readouterr().out.split() == ["variable", "every", "bigram"]
    assert sweep.main(["--out", str(tmp_path / "absent"), "--in-context-runs"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gpu_recipe_sweep.py: error: --in-context-runs: ") and "sweep.json" in line


@pytest.mark.parametrize("preset", ["paper", "paper-mini", "cpu-small"])
def test_the_analysis_flags_give_hmmtf_analyze_the_settings_of_hmmtf_reproduce(capsys, preset):
    assert sweep.main(["--preset", preset, "--analysis-flags"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == sweep.analysis_flags(preset)
    args = hmmtf.build_parser("analyze").parse_args(["analyze", "--sections", "shuffle", "probes", "offsets", *printed])
    expected = dataclasses.replace(ANALYSIS_CONFIGS.get(preset, AnalysisConfig()), sections=("shuffle", "probes", "offsets"))
    assert config_from_command_line(AnalysisConfig, vars(args)) == expected


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
        assert run["verdict"]["settings"] == {"prompts": 16, "fresh_tasks": 16, "ceiling_replicates": 0,
                                              "ceiling_particles": COLLAPSED_CEILING_SETTINGS.particles}
        assert set(run["verdict"]["losses"]["test_sequence"]) == {"ngram 1", "ngram 2", "ngram 3", "variable order", "model", "oracle"}
    capsys.readouterr()
    assert sweep.main(["--out", str(out), "--wait", "1"]) == 0
    assert capsys.readouterr().out.startswith("finished: preset: done")


def test_a_step_benchmark_that_is_not_a_json_file_is_refused_in_one_line(capsys, tmp_path):
    assert sweep.main(["--preset", "paper-mini", "--out", str(tmp_path / "out"), "--step-benchmark",
                       str(tmp_path / "absent.json")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("gpu_recipe_sweep.py: error: --step-benchmark: ") and "bench_training.py --out" in line
