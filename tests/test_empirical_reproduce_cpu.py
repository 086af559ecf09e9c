"""``hmmtf reproduce --preset paper-cpu``: the 128-state audit on the CPU. Its recipe is the committed
competent network's (``models/paper-scale-cpu/sparse-4x4x64-2x``, read from its checkpoint), its
evaluation the committed 128-state evaluations' prompt count (``ledger.results.PAPER_SCALE_EVALUATE``);
the presets of ``paper`` and ``paper-mini`` keep their stages; the competence gate's plan counts
the FLOPs torch's counter counts; and the rehearsal ``paper-cpu-mini`` runs every stage on the CPU,
interrupted after the competence gate and resumed."""
import json
import re
import signal
import tarfile
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import hmm
import hmmtf
from empirical.reproduce import plan, stages
from empirical.reproduce.config import reproduce_config
from empirical.reproduce.record import read_status
from empirical.reproduce.stages import preset_stages
from empirical.training.model import INIT_STD, RoFormer, RoFormerConfig
from empirical.training.presets import PRESETS, get_preset
from empirical.training.train import TrainConfig
from recorded_figures import figures_recorded_not_drawn
from ledger.results import PAPER_SCALE_EVALUATE
from test_empirical_reproduce import FIGURES, HOST, PAPER_STAGES, RATES, RESULTS, last_line, signal_once

COMPETENT = Path(__file__).resolve().parents[1] / "models" / "paper-scale-cpu" / "sparse-4x4x64-2x"
AUDIT_STAGES = ["mixture", "train", "evaluate", "ngram-verdict", "analyze", "patching", "bundle"]
VERDICT_FILES = ("ngram-verdict/ngram-verdict.json", "ngram-verdict/ngram-verdict.png")


def test_paper_cpu_trains_the_committed_competent_network_s_recipe_on_its_data():
    saved = json.loads((COMPETENT / "checkpoint" / "config.json").read_text())
    preset = get_preset("paper-cpu")
    assert preset.train == TrainConfig.from_dict(saved["train"])
    assert preset.model_config(preset.mixture_spec.num_tokens) == RoFormerConfig.from_dict(saved["model"])
    data = ("mixture", "mixture_spec", "mixture_seed", "prompt_format", "data_seed")
    assert {key: preset.task()[key] for key in data} == {key: saved["task"][key] for key in data}
    assert preset.eval_prompts == int(re.search(r"--num-prompts (\d+)", PAPER_SCALE_EVALUATE).group(1))


def test_only_the_cpu_audit_presets_change_the_initialisation():
    assert {name for name, preset in PRESETS.items() if preset.init_std != INIT_STD} == {"paper-cpu", "paper-cpu-mini"}


def test_paper_and_paper_mini_keep_their_stages_and_settings_and_the_cpu_audit_adds_the_competence_gate():
    for name in ("paper", "paper-mini"):
        assert [stage.name for stage in preset_stages(name)] == list(PAPER_STAGES)
        assert "ngram_verdict" not in reproduce_config(name, "cpu").settings()
    for name in ("paper-cpu", "paper-cpu-mini"):
        assert [stage.name for stage in preset_stages(name)] == AUDIT_STAGES
    assert reproduce_config("paper-cpu", "cpu").analysis == reproduce_config("paper", "cpu").analysis
    assert reproduce_config("paper-cpu", "cpu").settings()["ngram_verdict"]["prompts"] == 4096


def test_the_competence_gate_is_costed_at_the_model_flops_torch_counts_over_its_prompts():
    config = reproduce_config("paper-cpu-mini", "cpu")
    preset = config.preset
    model = RoFormer(preset.model_config(preset.mixture_spec.num_tokens))
    prompts = hmm.sample_prompts(preset.build_mixture(), 5, preset.prompt_format, seed=1)
    # The recording path: explicit attention matmuls, which the counter sees (as the plan's other tests).
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        model.run_with_cache(prompts.tokens)
    cost = plan.ngram_verdict_cost(config, RATES, HOST)
    assert cost.flops["float32"] == forward.get_total_flops() / 5 * config.verdict_settings.prompts
    assert cost.caps == {"verdict_prompts": 64, "fresh_tasks": 16}


def test_a_preset_without_the_competence_gate_refuses_its_cost_and_stopping_after_it(tmp_path, capsys, monkeypatch):
    with pytest.raises(ValueError, match=r"^preset: 'paper-mini' runs no ngram-verdict stage; expected one of "
                                         r"\['paper-cpu', 'paper-cpu-mini'\]$"):
        plan.ngram_verdict_cost(reproduce_config("paper-mini", "cpu"), RATES, HOST)
    monkeypatch.setattr(plan, "measure_rates", lambda device, train_dtype: RATES)
    monkeypatch.setattr(plan, "measure_host", lambda config: HOST)
    assert hmmtf.main(["reproduce", "--preset", "paper-mini", "--device", "cpu", "--out", str(tmp_path / "x"),
                       "--stop-after", "ngram-verdict", "--plan"]) == 2
    assert capsys.readouterr().err == ("hmmtf reproduce: error: --stop-after: 'ngram-verdict'; expected one of "
                                       "['mixture', 'train', 'evaluate', 'analyze', 'patching', 'bundle']\n")


@pytest.mark.long_running
def test_paper_cpu_mini_interrupted_after_the_competence_gate_resumes_and_writes_every_stage_s_files(
        tmp_path, capsys, monkeypatch):
    """SIGTERM during the competence gate stops the run when that stage ends (exit code 143), its
    files written and the analysis not begun; the rerun resumes at ``analyze`` and finishes, every
    stage's files in its folder and in the bundle. The figures are saved, not drawn
    (:mod:`recorded_figures`: the paper-mini pipeline draws them, and the competence gate's figure
    is drawn by ``tests/test_ngram_verdict.py``), and the device's rates and the host's timings are
    not measured (they enter only the plan and the record)."""
    monkeypatch.setattr(plan, "measure_rates", lambda device, train_dtype: RATES)
    monkeypatch.setattr(plan, "measure_host", lambda config: HOST)
    monkeypatch.setattr(stages, "ngram_verdict_report", signal_once(signal.SIGTERM, stages.ngram_verdict_report))
    out = tmp_path / "run"

    def reproduce() -> int:
        return hmmtf.main(["reproduce", "--preset", "paper-cpu-mini", "--device", "cpu", "--out", str(out),
                           "--threads", "1"])

    with figures_recorded_not_drawn() as figures:
        assert reproduce() == 143
    assert last_line(capsys.readouterr().err) == (
        "hmmtf reproduce: interrupted by SIGTERM after stage ngram-verdict; rerun the same command to resume")
    status = read_status(out)
    assert status["state"] == "interrupted" and status["stages"]["ngram-verdict"] == "done"
    assert all((out / name).is_file() for name in VERDICT_FILES) and not (out / "analyze").exists()

    with figures_recorded_not_drawn() as more_figures:
        assert reproduce() == 0
    assert (f"hmmtf reproduce: resuming {out}: mixture, train, evaluate, ngram-verdict done; from stage "
            f"analyze\n") in capsys.readouterr().err
    record = json.loads((out / "record.json").read_text())
    assert list(record["stages"]) == AUDIT_STAGES
    assert [[attempt["invocation"] for attempt in entry["attempts"]] for entry in record["stages"].values()] == [
        [0], [0], [0], [0], [1], [1], [1]]
    assert all(entry["status"] == "done" for entry in record["stages"].values())
    assert record["settings"]["model"]["init_std"] == 0.1
    gate = record["stages"]["ngram-verdict"]["attempts"][0]
    assert gate["counts"] == {"verdict_prompts": {"cap": 64, "ran": 64}, "fresh_tasks": {"cap": 16, "ran": 16}}
    verdict = json.loads((out / VERDICT_FILES[0]).read_text())
    assert verdict["checkpoint_step"] == 64 and verdict["settings"]["prompts"] == 64
    assert (gate["verdict"], gate["competent"]) == (verdict["verdict"], verdict["competent"])
    figure_names = (*FIGURES, VERDICT_FILES[1])
    assert sorted(path.relative_to(out).as_posix() for path in [*figures, *more_figures]) == sorted(figure_names)
    for name in (*RESULTS, VERDICT_FILES[0]):
        assert (out / name).stat().st_size > 0, name
    files = (*figure_names, *RESULTS, VERDICT_FILES[0])
    with tarfile.open(out / "bundle" / "paper-cpu-mini-results.tar.gz") as archive:
        assert {*files, "record.json", "train/checkpoint/config.json"} <= set(archive.getnames())
    assert read_status(out)["state"] == "finished"
