"""``hmmtf reproduce``: the paper preset's data and schedule, the plan's FLOP counts (training,
evaluation, the Bayes filters, patching) against torch's FLOP counter, the bundle's size limit,
refusals of bad input, and the ``paper-mini`` pipeline end to end on the CPU -- stopped after a
stage and resumed, it gives the outputs of an uninterrupted run."""
import collections
import dataclasses
import json
import math
import re
import tarfile

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import hmm
import hmmtf
from empirical.analysis.report import patching_report, probe_mixture
from empirical.training.data import PromptStream
from empirical.yardsticks.evaluate import EVAL_BATCH
from empirical.training.model import RoFormer
from empirical.training.presets import get_preset
from empirical.reproduce import commands, plan
from empirical.reproduce.bundle import write_bundle
from empirical.reproduce.config import reproduce_config
from empirical.reproduce.record import read_status
from empirical.reproduce.stages import STAGE_NAMES, plan_costs
from empirical.training.train import learning_rate
from recorded_figures import figures_recorded_not_drawn
from rounding import gamma, learning_rate_rounding

RATES = plan.Rates(train=1e12, float32=1e12, float64=1e11, bandwidth=1e11, source="test")
HOST = plan.HostTimings(mixture_s=1.0, batch_s=0.01, hand_built_s=0.1, hand_built_forward_s=0.01, decode_s=1e-4,
                        hand_built_width=100, hand_built_layers=10, confident_fraction=0.2)
FIGURES = ("evaluate/in_context.png", "evaluate/training_loss.png", "analyze/shuffle.png",
           "analyze/probes_task_state.png", "analyze/probes_previous_tokens.png", "analyze/attention_trained.png",
           "analyze/attention_hand_built_vs_trained.png", "analyze/offset_profiles.png", "analyze/offset_summary.png",
           "patching/patching_state_forcing.png", "patching/patching_history.png")
RESULTS = ("mixture/mixture.json", "evaluate/evaluation.json", "analyze/analysis.json", "patching/patching.json",
           "train/metrics.jsonl")


def without_timings(path) -> list:
    """The JSON (or JSON-lines) records of ``path`` without their wall-clock fields."""
    timings = {"tokens_per_s", "elapsed_s"}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.suffix == ".jsonl" else [json.loads(path.read_text())]
    return [{key: value for key, value in record.items() if key not in timings} for record in records]


@pytest.fixture
def rates_not_measured(monkeypatch):
    """The plan's device rates are :data:`RATES`, not measured: measuring takes 1.8 s an
    invocation here, and the rates enter only the plan and the record's utilisations."""
    monkeypatch.setattr(plan, "measure_rates", lambda device, train_dtype: RATES)


def reproduce(out, *options: str) -> int:
    return hmmtf.main(["reproduce", "--preset", "paper-mini", "--device", "cpu", "--out", str(out), *options])


def test_paper_preset_trains_on_the_papers_131072_prompts_with_the_documented_schedule():
    paper = get_preset("paper")
    train = paper.train
    assert (train.steps, train.batch_size) == (64 * 64, 32)  # 64 epochs x 64 steps x batch 32 = 131,072 prompts
    assert paper.prompt_format == hmm.PromptFormat(num_demos=7, demo_length=32, test_length=32)
    assert paper.prompt_format.length == 7 * 33 + 32 == 263
    assert (train.learning_rate, train.warmup_steps, train.min_lr_ratio) == (3e-4, 200, 0.1)
    # The exact schedule of the stored floats reaches 3e-4 at the end of the warm-up and the floor
    # 0.1 x 3e-4 at the end, within 2u of 3e-5 (each literal within u of its value), as the literal
    # 3e-5 is within u: gamma_3 of 3e-5.
    assert learning_rate(train, 199) == pytest.approx(3e-4, rel=0, abs=learning_rate_rounding(train, 199))
    assert learning_rate(train, train.steps) == pytest.approx(
        3e-5, rel=0, abs=learning_rate_rounding(train, train.steps) + gamma(3) * 3e-5)
    assert (train.precision, train.compile) == ("bf16", True)
    spec = paper.mixture_spec
    assert (spec.num_tasks, spec.num_states, spec.num_tokens) == (8192, 128, 16)


def test_plan_flops_equal_the_flop_counter_of_training_evaluation_and_the_bayes_filters():
    config = reproduce_config("paper-mini", "cpu")
    preset = config.preset
    model = RoFormer(preset.model_config(preset.mixture_spec.num_tokens))
    mixture = preset.build_mixture()
    batch = PromptStream(mixture, preset.prompt_format, preset.train.batch_size, 0)(0)
    # The recording path: explicit attention matmuls, which the counter sees (it does not count
    # the fused CPU attention kernel of the fast path); the arithmetic is the same.
    with FlopCounterMode(display=False) as step:
        model.run_with_cache(batch.inputs)[0].sum().backward()
    assert plan.train_cost(config, RATES, HOST).flops["float32"] == step.get_total_flops() * preset.train.steps

    prompts = hmm.sample_prompts(mixture, 5, preset.prompt_format, seed=1)
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        model.run_with_cache(prompts.tokens)
    with FlopCounterMode(display=False) as bayes:
        for chunk in prompts.tokens.split(2):
            hmm.bayes_predictive(mixture, chunk)
    spec = preset.mixture_spec
    assert bayes.get_total_flops() == plan.bayes_flops(spec.num_tasks, spec.num_states, spec.num_tokens, 5,
                                                       preset.prompt_format, batch=2)
    flops, _ = plan.evaluate_work(config)
    eval_prompts = preset.eval_prompts
    assert flops["float32"] == forward.get_total_flops() / 5 * eval_prompts
    assert flops["float64"] == plan.bayes_flops(spec.num_tasks, spec.num_states, spec.num_tokens, eval_prompts,
                                                preset.prompt_format, EVAL_BATCH)


def test_patching_flops_equal_the_flop_counter_over_the_passes_the_section_makes():
    config = reproduce_config("paper-mini", "cpu")
    # Two probed tasks, so that 32 centroid prompts give usable centroids and state forcing has items.
    analysis = dataclasses.replace(config.analysis, centroid_prompts=32, patching_prompts=8, hand_built_prompts=2,
                                   probe_tasks=2)
    config = dataclasses.replace(config, analysis=analysis)
    preset = config.preset
    model = RoFormer(preset.model_config(preset.mixture_spec.num_tokens))
    passes = collections.Counter()  # (method, length) -> prompts

    def recorded(name):
        method = getattr(model, name)

        def run(tokens, patches=()):
            passes[name, tokens.shape[1]] += tokens.shape[0]
            return method(tokens, patches)

        return run

    for name in ("forward", "run_with_cache"):
        setattr(model, name, recorded(name))
    report = patching_report(model, preset, preset.build_mixture(), analysis, torch.device("cpu"))
    forcing = report["state_forcing"]
    assert forcing["items"] > 0 and sum(forcing["items_by_test_position"]) == forcing["items"]
    # FLOPs are linear in the batch: count one prompt of each length and path (the explicit
    # attention of the math kernel, which the counter sees), times the prompts run so.
    counted = 0
    for (name, length), prompts in passes.items():
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            getattr(RoFormer, name)(model, torch.zeros(1, length, dtype=torch.long))
        counted += prompts * counter.get_total_flops()
    flops, attention_bytes = plan.patching_work(config, forcing["items_by_test_position"])
    assert flops == counted
    recorded_prompts = sum(prompts for (name, _), prompts in passes.items() if name == "run_with_cache")
    model_config = model.config
    assert attention_bytes == recorded_prompts * plan.ATTENTION_TOUCHES * 2 * model_config.num_layers * \
        model_config.num_heads * preset.prompt_format.length**2 * 4


@pytest.mark.parametrize("items", [[1.0] * 15, [1.0] * 15 + [-1.0], [1.0] * 15 + [math.nan], [1.0] * 15 + ["2"]])
def test_patching_work_refuses_items_that_are_not_one_count_per_test_position(items):
    config = reproduce_config("paper-mini", "cpu")
    with pytest.raises(ValueError, match=r"items_by_test_position: \[.*\]; expected 16 finite numbers >= 0, one "
                                         r"per test position of the format"):
        plan.patching_work(config, items)


def test_paper_plan_on_an_assumed_h100_fits_25_minutes_with_host_work_twice_as_slow_as_here():
    config = reproduce_config("paper", "cuda", planning_only=True)
    h100 = plan.assumed_rates(790, **plan.H100_ASSUMPTIONS)
    # Host work measured on the loaded 2-core CPU machine for the paper preset (mixture 15-42 s,
    # a batch 10-20 ms, decoding 0.4 s per 64 tasks x 4 prompts; the hand-built network built and
    # run once 2.9-5.0 s, each further pass 0.43-0.69 s at load averages 2-5), doubled; no test
    # position with a state posterior >= 0.9 (none of 16384 in the paper's first 64 tasks).
    slow_host = plan.HostTimings(mixture_s=84, batch_s=0.04, hand_built_s=10, hand_built_forward_s=1.4,
                                 decode_s=3e-3, hand_built_width=1675, hand_built_layers=9, confident_fraction=0.0)
    costs = plan_costs(config, h100, slow_host)
    assert [cost.stage for cost in costs] == list(STAGE_NAMES)
    plan.check_budget(costs, set(), 25)
    train, patching = costs[1], costs[4]
    assert train.flops == {"bfloat16": pytest.approx(4.34e16, rel=0.01, abs=0)}
    # 256 prompts x (1 + 5 (1 + 16)) passes of 263 tokens; the hand-built network on 4 prompts.
    assert patching.flops == {"float32": pytest.approx(2.43e15, rel=0.01, abs=0)}
    # A timing model, but the plan evaluates this very expression on these floats: exact.
    assert patching.host_s == 4 * (10 + 5 * 12 * 1.4) + 768 / 32 * 0.04 + plan.PATCHING_FIGURE_SECONDS


def test_probe_prompts_come_from_the_first_tasks_with_their_ids():
    mixture = get_preset("paper-mini").build_mixture()
    probed = probe_mixture(mixture, 16)
    assert probed.num_tasks == 16 and torch.equal(probed.hmm.emission, mixture.hmm.emission[:16])
    # Uniform weights 1/128, their sum over 16 tasks, the quotients and their sum are powers of 2: exact.
    assert float(probed.weights.sum()) == 1.0
    prompts = hmm.sample_prompts(probed, 64, hmm.PROMPT_FORMATS["paper-mini"], seed=0)
    assert int(prompts.task_ids.max()) < 16 and len(set(prompts.task_ids.tolist())) > 8
    assert probe_mixture(mixture, 0) is mixture
    with pytest.raises(ValueError, match=r"probe_tasks: 129; expected at most the mixture's 128 tasks \(or 0\)"):
        probe_mixture(mixture, 129)


def test_bundle_holds_every_json_and_figure_and_refuses_more_than_the_limit(tmp_path):
    (tmp_path / "evaluate").mkdir()
    (tmp_path / "evaluate" / "evaluation.json").write_text("{}")
    (tmp_path / "train" / "checkpoint.tmp").mkdir(parents=True)
    (tmp_path / "train" / "checkpoint.tmp" / "config.json").write_text("{}")
    (tmp_path / "big.png").write_bytes(torch.randint(0, 256, (300_000,), dtype=torch.uint8).numpy().tobytes())
    archive = tmp_path / "bundle" / "results.tar.gz"
    bundle = write_bundle(tmp_path, archive, limit=1 << 20)
    assert bundle["members"] == ["big.png", "evaluate/evaluation.json"]
    with pytest.raises(ValueError, match=r"bundle: results.tar.gz is 0.3 MiB; expected at most 0.2 MiB .* "
                                         r"Largest members: big.png 0.3 MiB"):
        write_bundle(tmp_path, archive, limit=200 << 10)
    assert not archive.exists()


@pytest.mark.parametrize(("options", "message"), [
    (["--preset", "huge"], r"--preset: 'huge'; expected one of \['cpu-small', 'paper', 'paper-mini', .*'tiny'\]"),
    (["--preset", "paper-mini", "--device", "cpu", "--budget-minutes", "0.0001"],
     r"--budget-minutes: 0.0001; the stages to run are planned at .* min \(mixture .* s, train .* s, .*, "
     r"patching .* s, bundle .* s\); "
     r"expected a budget of at least 1 min"),
    (["--preset", "paper-mini", "--device", "gpu"], r"--device: 'gpu' is not a torch device"),
    (["--preset", "paper-mini", "--assume-peak-tflops", "790"],
     r"--assume-peak-tflops: 790 without --plan; expected it only with --plan"),
])
def test_bad_input_is_refused_naming_the_argument_value_and_expectation(tmp_path, capsys, rates_not_measured,
                                                                         options, message):
    assert hmmtf.main(["reproduce", *options, "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("hmmtf reproduce: error: ")
    assert re.search(message, error), error
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_is_refused_where_torch_sees_no_gpu(tmp_path, capsys):
    assert reproduce(tmp_path, "--device", "cuda") == 2
    error = capsys.readouterr().err
    assert f"--device: 'cuda', but torch {torch.__version__} sees no CUDA device here" in error
    assert "expected 'cpu' on this machine" in error


PAPER_MINI_GROUP = "paper-mini"
"""xdist group of the tests that read the uninterrupted paper-mini run (made once per worker)."""


@pytest.fixture(scope="module")
def paper_mini_run(tmp_path_factory):
    """The folder of an uninterrupted ``hmmtf reproduce --preset paper-mini`` run on the CPU."""
    whole = tmp_path_factory.mktemp("paper-mini") / "whole"
    assert reproduce(whole, "--threads", "1") == 0
    return whole


@pytest.mark.long_running
@pytest.mark.xdist_group(PAPER_MINI_GROUP)
def test_paper_mini_runs_every_stage_and_bundles_its_results(paper_mini_run):
    whole = paper_mini_run
    record = json.loads((whole / "record.json").read_text())
    assert list(record["stages"]) == list(STAGE_NAMES)
    assert all(entry["status"] == "done" and len(entry["attempts"]) == 1 for entry in record["stages"].values())
    invocation = record["invocations"][0]
    assert invocation["command"] == f"hmmtf reproduce --preset paper-mini --device cpu --out {whole} --threads 1"
    assert invocation["environment"]["torch"] == torch.__version__ and invocation["git"]["commit"]
    train = record["stages"]["train"]["attempts"][0]
    assert train["steps"] == 64 and train["tokens"] == 64 * 32 * 67
    assert 0 < train["utilisation"]["float32"] < 1 and train["tokens_per_s"] > 0
    patching = record["stages"]["patching"]["attempts"][0]
    assert patching["forcing_items"] > 0 and patching["hand_built_prompts"] == 2 and patching["flops"]["float32"] > 0
    evaluation = json.loads((whole / "evaluate" / "evaluation.json").read_text())
    assert evaluation["bayes"] == {"dtype": "torch.float64", "device": "cpu", "tasks": 128}
    with tarfile.open(whole / "bundle" / "paper-mini-results.tar.gz") as archive:
        members = set(archive.getnames())
    assert {*FIGURES, *RESULTS, "record.json", "progress.json", "train/checkpoint/config.json"} <= members
    for figure in FIGURES:
        assert (whole / figure).stat().st_size > 10_000, figure
    assert read_status(whole)["state"] == "finished"


@pytest.mark.long_running
@pytest.mark.xdist_group(PAPER_MINI_GROUP)
def test_paper_mini_stopped_after_training_and_resumed_gives_the_outputs_of_an_uninterrupted_run(
        paper_mini_run, tmp_path, capsys, rates_not_measured):
    """The resumed run's numbers, record and checkpoint against the uninterrupted run's. Its
    figures are not drawn (:mod:`recorded_figures`: drawing reads only the stage's results,
    compared here, and the uninterrupted run's figures are checked above; drawing them would
    double the test's time), and the device's rates are not measured (:func:`rates_not_measured`)."""
    resumed = tmp_path / "resumed"
    with figures_recorded_not_drawn() as figures:
        assert reproduce(resumed, "--threads", "1", "--stop-after", "train") == 0
        assert read_status(resumed)["state"] == "stopped"
        assert not (resumed / "evaluate").exists()
        capsys.readouterr()
        assert reproduce(resumed, "--threads", "1") == 0
    assert sorted(path.relative_to(resumed).as_posix() for path in figures) == sorted(FIGURES)
    assert "mixture (done)" in capsys.readouterr().out
    record = json.loads((resumed / "record.json").read_text())
    assert [[attempt["invocation"] for attempt in entry["attempts"]] for entry in record["stages"].values()] == [
        [0], [0], [1], [1], [1], [1]]
    for name in RESULTS:
        assert without_timings(resumed / name) == without_timings(paper_mini_run / name), name
    checkpoint = "train/checkpoint/model.safetensors"
    assert (resumed / checkpoint).read_bytes() == (paper_mini_run / checkpoint).read_bytes()
    assert read_status(resumed)["state"] == "finished"


@pytest.mark.long_running
def test_a_detached_resume_is_followed_while_it_plans_until_it_fails_as_a_foreground_run_would(
        tmp_path, capsys, monkeypatch, rates_not_measured):
    """A run stopped after its mixture, resumed by a detached process with other settings: until
    that process begins its stages, ``--wait`` and ``--status`` follow it (its log: the refusal a
    foreground run prints), not the ``progress.json`` the stopped run left."""
    monkeypatch.setattr(commands, "POLL_SECONDS", 0.2)
    assert reproduce(tmp_path, "--stop-after", "mixture") == 0
    assert read_status(tmp_path)["state"] == "stopped"
    capsys.readouterr()
    assert reproduce(tmp_path, "--cpu-bf16", "--detach") == 0
    assert f"follow it with: hmmtf reproduce --preset paper-mini --out {tmp_path} --wait 540" in capsys.readouterr().out
    assert reproduce(tmp_path, "--wait", "120") == 1
    refusal = (f"hmmtf reproduce: error: --out: {str(tmp_path)!r} holds a run with other settings (train differ); "
               f"expected the same preset, options and device type to resume it, or another --out")
    assert capsys.readouterr().out.splitlines()[-1] == f"planning: {refusal}"
    assert reproduce(tmp_path, "--status") == 1
    status = json.loads(capsys.readouterr().out)
    assert (status["state"], status["log"]) == ("failed", refusal)
    assert read_status(tmp_path)["state"] == "stopped"
    assert reproduce(tmp_path / "empty", "--status") == 2
    assert "has no progress.json; expected the folder of a started run" in capsys.readouterr().err
