"""The GPU recipe sweep of issue 47: several RoFormers of one preset's size trained at once on one
device, each with the same data budget, each scored in the same call on fresh HMMs against the
in-context n-grams and the oracle.

    python benchmarks/gpu_recipe_sweep.py --preset paper --device cuda --out $OUT --detach   # start it
    python benchmarks/gpu_recipe_sweep.py --out $OUT --wait 540                              # follow it
    python benchmarks/gpu_recipe_sweep.py --preset paper-mini --device cpu --out /tmp/sweep \\
        --budget-prompts 256 --verdict-prompts 32 --verdict-fresh-tasks 32                  # CPU rehearsal
    python benchmarks/gpu_recipe_sweep.py --out $OUT --in-context-runs      # the runs that beat the bigram
    python benchmarks/gpu_recipe_sweep.py --preset paper --analysis-flags   # hmmtf analyze's flags for P

Each run is the project's own two commands, one after the other, in ``--work-dir/NAME``::

    hmmtf train --preset P --run-dir WORK/NAME --device D --checkpoint-every 0 <the recipe's flags>
    hmmtf ngram-verdict WORK/NAME/checkpoint --out WORK/NAME/verdict --prompts N --fresh-tasks M --device D

The second is the competence rule against the in-context 1/2/3-grams (fitted as the competence
result fits them; standard errors clustered by HMM) with the oracle beside, without the
prior-predictive ceiling, whose SMC over 128-state HMMs would take hours. Up to ``--concurrent``
runs go at once (separate processes sharing the device). At ``--train-minutes`` after the start,
a training still running is sent SIGTERM: it writes its checkpoint at a step boundary and exits
(143), and it is scored at the step it reached, recorded as ``stopped_early``.

A **recipe** (:class:`Recipe`) changes the levers of issue 47 against the preset: learning rate,
init scale, warm-up fraction, batch size at a fixed number of prompts (``steps = budget / batch``,
the schedule's shape kept), the decay (cosine from the warm-up's end, or warmup-stable-decay: the
peak rate held, then a linear decay over the last fraction of the steps) and the mixture. Every run
sees ``--budget-prompts`` prompts (default: the preset's ``steps x batch``, 131,072 for ``paper``,
the paper's budget).

The checkpoints stay in ``--work-dir`` after the sweep, for a caller that analyses a run that
learned in context before deleting them (``benchmarks/gpu_session.sh``): ``--in-context-runs``
names the scored runs whose verdict beats at least the in-context bigram, and
``--analysis-flags`` prints the ``hmmtf analyze`` flags of the preset's analysis settings
(``empirical.reproduce.config.ANALYSIS_CONFIGS``, those of ``hmmtf reproduce``).

What comes back (``--out``, at most five files, none large): ``sweep.json`` (the command, the
commit, the device, torch and CUDA versions, each run's recipe, flags, curve, return codes,
times and verdict report, device samples of ``nvidia-smi`` on CUDA, and with ``--step-benchmark``
the preset's step timed alone before the sweep), ``sweep.png`` (the
curves and each run's fresh-HMM loss against the n-grams and the oracle), ``sweep.log``,
``progress.json`` and ``detached.json``. The checkpoints stay in ``--work-dir``: a paper-size one
(about 200 M parameters) is larger than a returned file may be.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

import hmmtf  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.reproduce.config import ANALYSIS_CONFIGS  # noqa: E402
from empirical.analysis.report import AnalysisConfig  # noqa: E402
from empirical.yardsticks.competence import COMPETENT, RANKED_VERDICTS  # noqa: E402
from hmm.presets import MIXTURE_SPECS, PROMPT_FORMATS  # noqa: E402
from empirical.reproduce.record import (environment, git_state, metrics_records, process_alive, read_json,  # noqa: E402
                                        write_json)
from empirical.training.train import METRICS_FILE  # noqa: E402
from hmmtf.options import non_negative_int, positive_float, positive_int  # noqa: E402

SWEEP_FILE = "sweep.json"
FIGURE_FILE = "sweep.png"
LOG_FILE = "sweep.log"
PROGRESS_FILE = "progress.json"
DETACHED_FILE = "detached.json"
VERDICT_FILE = "ngram-verdict.json"
"""What ``hmmtf ngram-verdict`` writes in its ``--out``."""
POLL_SECONDS = 30.0
"""Interval of ``--wait``'s status lines and of the device samples."""
STOPPED_BY_SIGTERM = 128 + signal.SIGTERM
"""Exit code of ``hmmtf train`` stopped by SIGTERM (it has written its checkpoint)."""
CURVE_POINTS = 64
"""About how many ``metrics.jsonl`` records a run logs (its ``--log-every``)."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One run's levers; None keeps the preset's value. ``warmup_fraction``: the warm-up as a
    fraction of the run's steps (None: ``hmmtf train``'s rule, ``min(preset's, steps // 10)`` when
    the steps change); ``batch_size``: prompts per step, the steps following from the budget;
    ``decay_fraction``: warmup-stable-decay, the peak rate held after the warm-up and decayed
    linearly to ``min_lr_ratio`` over this fraction of the steps, the last ones (``hmmtf train
    --decay-steps``; None: the preset's cosine from the warm-up's end); ``mixture``: the mixture of
    :data:`hmm.MIXTURE_SPECS` and its prompt format (``--mixture NAME --prompt-format NAME``);
    ``curriculum_mixture``: a data curriculum (``hmmtf train --curriculum-mixture``, issue 51), that
    mixture in a share ``curriculum_share (1 - step / K)`` of each batch, ``K`` the first
    ``curriculum_fraction`` of the steps; ``soft_targets``: ``hmmtf train --soft-targets``."""

    name: str
    learning_rate: float | None = None
    init_std: float | None = None
    warmup_fraction: float | None = None
    batch_size: int | None = None
    min_lr_ratio: float | None = None
    decay_fraction: float | None = None
    mixture: str | None = None
    curriculum_mixture: str | None = None
    curriculum_fraction: float | None = None
    curriculum_share: float | None = None
    soft_targets: bool = False


RECIPES = (
    Recipe("preset"),
    Recipe("lr1e-3", learning_rate=1e-3),
    Recipe("lr1e-3-warmup10", learning_rate=1e-3, warmup_fraction=0.1),
    Recipe("batch128-lr6e-4", learning_rate=6e-4, batch_size=128, warmup_fraction=0.1),
    Recipe("batch128-lr1e-3", learning_rate=1e-3, batch_size=128, warmup_fraction=0.1),
    Recipe("wsd-lr1e-3", learning_rate=1e-3, warmup_fraction=0.1, decay_fraction=0.2, min_lr_ratio=0.0),
    Recipe("wsd-lr1e-3-sparse", learning_rate=1e-3, warmup_fraction=0.1, decay_fraction=0.2, min_lr_ratio=0.0,
           mixture="paper-sparse"),
    Recipe("wsd-lr1e-3-curriculum", learning_rate=1e-3, warmup_fraction=0.1, decay_fraction=0.2, min_lr_ratio=0.0,
           curriculum_mixture="paper-sparse", curriculum_fraction=0.5, curriculum_share=0.75),
)
"""The default sweep (``/work/shared/design/GPU.md``, "What peers used"): the preset's recipe
(init 0.02, lr 3e-4, warm-up 200 of 4096 steps, cosine, batch 32 for ``paper``); a 3x higher rate;
with Akyurek et al.'s 10% warm-up; Park et al.'s batch 128 and rate 6e-4 at the same prompts; batch
128 at the rate 1e-3 (a quarter of the steps: the larger batch takes the larger rate, and a recipe
this cheap leaves the paper-scale audit of one session time to analyse); warmup-stable-decay at lr
1e-3 (10% warm-up, the peak held, a linear decay to 0 over the last 20%: the schedule with which
2 x 4 x 64 networks left the token counter at 1.25-1.5 times the paper's budget on the CPU,
``/work/shared/design/PLATEAU.md``; ``benchmarks/gpu_session.sh`` runs it at twice the budget), and
the same on ``paper-sparse`` (Dirichlet 0.005 / 0.005: more in-context signal), and the same on
``paper`` with the plateau study's earliest arm (issue 51, ``figures/plateau/``): ``paper-sparse``
in 3/4 of each batch at the first step, falling linearly to none at half the steps (the paper's
budget, when the run sees twice it, as ``benchmarks/gpu_session.sh``'s does). On the CPU, 2 x 4 x 64
networks with that curriculum left the counter in (0.625, 0.75] times the paper's budget, against
(1.5, 1.75] without it.
Init scale: 0.02 at width 1024 is 0.64 / sqrt(width), about the relative scale of the init 0.1 that
ended the plateau at width 64 (0.8 / sqrt(64)), so the default sweep leaves it; ``--recipes FILE``
adds others (a JSON list of :class:`Recipe` fields)."""


def run_flags(recipe: Recipe, preset_name: str, budget_prompts: int) -> list[str]:
    """The ``hmmtf train`` flags of ``recipe`` on ``preset_name`` with ``budget_prompts`` prompts;
    ``ValueError`` naming the recipe when the budget is not a whole number of its steps."""
    train = get_preset(preset_name).train
    batch = recipe.batch_size or train.batch_size
    if budget_prompts % batch:
        raise ValueError(f"--budget-prompts: {budget_prompts}; expected a multiple of recipe {recipe.name!r}'s batch "
                         f"size {batch}")
    steps = budget_prompts // batch
    log_every = max(1, min(train.log_every, steps // CURVE_POINTS))
    flags = ["--steps", str(steps), "--batch-size", str(batch), "--log-every", str(log_every),
             "--checkpoint-every", "0"]
    if recipe.warmup_fraction is not None:
        flags += ["--warmup-steps", str(min(round(recipe.warmup_fraction * steps), steps - 1))]
    if recipe.decay_fraction is not None:
        if not 0 < recipe.decay_fraction < 1 or recipe.decay_fraction + (recipe.warmup_fraction or 0) > 1:
            raise ValueError(f"recipe {recipe.name!r}: decay_fraction {recipe.decay_fraction}; expected a fraction "
                             f"in (0, 1) of the steps, at most 1 - warmup_fraction ({recipe.warmup_fraction})")
        flags += ["--decay-steps", str(max(round(recipe.decay_fraction * steps), 1))]
    if recipe.mixture is not None:
        if recipe.mixture not in MIXTURE_SPECS or recipe.mixture not in PROMPT_FORMATS:
            raise ValueError(f"recipe {recipe.name!r}: mixture {recipe.mixture!r}; expected a name of both "
                             f"hmm.MIXTURE_SPECS and hmm.PROMPT_FORMATS: "
                             f"{sorted(set(MIXTURE_SPECS) & set(PROMPT_FORMATS))}")
        flags += ["--mixture", recipe.mixture, "--prompt-format", recipe.mixture]
    flags += curriculum_flags(recipe, steps)
    if recipe.soft_targets:
        flags.append("--soft-targets")
    for field in ("learning_rate", "init_std", "min_lr_ratio"):
        value = getattr(recipe, field)
        if value is not None:
            flags += ["--" + field.replace("_", "-"), repr(value)]
    return flags


def curriculum_flags(recipe: Recipe, steps: int) -> list[str]:
    """The ``hmmtf train`` flags of ``recipe``'s data curriculum over a run of ``steps`` steps (none
    without ``curriculum_mixture``); ``ValueError`` naming the recipe when a field is missing or out
    of range (``hmmtf train`` checks the mixture's tokens against the preset's)."""
    fields = (recipe.curriculum_mixture, recipe.curriculum_fraction, recipe.curriculum_share)
    if all(field is None for field in fields):
        return []
    if None in fields:
        raise ValueError(f"recipe {recipe.name!r}: curriculum_mixture, curriculum_fraction, curriculum_share "
                         f"{list(fields)}; expected all three or none")
    if recipe.curriculum_mixture not in MIXTURE_SPECS:
        raise ValueError(f"recipe {recipe.name!r}: curriculum_mixture {recipe.curriculum_mixture!r}; expected one "
                         f"of hmm.MIXTURE_SPECS: {sorted(MIXTURE_SPECS)}")
    for name, value in (("curriculum_fraction", recipe.curriculum_fraction),
                        ("curriculum_share", recipe.curriculum_share)):
        if not 0 < value <= 1:
            raise ValueError(f"recipe {recipe.name!r}: {name} {value}; expected a fraction in (0, 1]")
    return ["--curriculum-mixture", recipe.curriculum_mixture,
            "--curriculum-steps", str(max(round(recipe.curriculum_fraction * steps), 1)),
            "--curriculum-share", repr(recipe.curriculum_share)]


def in_context_runs(report: dict) -> list[str]:
    """The runs of a ``sweep.json`` whose verdict beats at least the in-context bigram
    (:data:`empirical.yardsticks.competence.COMPETENT` or above), the lowest loss on the test
    sequence of fresh HMMs first."""
    learned = {name: run["verdict"] for name, run in report["runs"].items()
               if run["verdict"] is not None
               and RANKED_VERDICTS.index(run["verdict"]["verdict"]) >= RANKED_VERDICTS.index(COMPETENT)}
    return sorted(learned, key=lambda name: learned[name]["losses"]["test_sequence"]["model"])


def analysis_flags(preset_name: str) -> list[str]:
    """The ``hmmtf analyze`` flags of the analysis settings ``hmmtf reproduce`` uses for
    ``preset_name`` (:data:`empirical.reproduce.config.ANALYSIS_CONFIGS`, else
    :class:`~empirical.analysis.report.AnalysisConfig`'s defaults), every field but ``sections``,
    which the caller chooses."""
    config = ANALYSIS_CONFIGS.get(preset_name, AnalysisConfig())
    return [word for field in dataclasses.fields(config) if field.name != "sections"
            for word in ("--" + field.name.replace("_", "-"), str(getattr(config, field.name)))]


def hmmtf_command(arguments: list[str]) -> list[str]:
    """``python hmmtf/__main__.py ARGUMENTS`` of this repository, with this interpreter."""
    return [sys.executable, str(REPOSITORY / "hmmtf" / "__main__.py"), *arguments]


def subprocess_environment(threads: int) -> dict[str, str]:
    """This environment with the repository on ``PYTHONPATH``, the commit for a tree without
    ``.git`` (:func:`empirical.reproduce.record.git_state`) and ``threads`` OpenMP threads."""
    commit = git_state()["commit"]
    return {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": str(threads),
            **({"HMMTF_GIT_COMMIT": commit} if commit else {})}


class Sweep:
    """The driver: runs, their processes, ``progress.json``."""

    def __init__(self, args, recipes: list[Recipe]):
        self.args, self.recipes = args, recipes
        self.out, self.work = Path(args.out), Path(args.work_dir)
        self.started = time.time()
        self.deadline = self.started + args.train_minutes * 60
        self.lock = threading.Lock()
        self.states = {recipe.name: "waiting" for recipe in recipes}
        self.env = subprocess_environment(args.threads)

    def note(self, name: str, state: str) -> None:
        with self.lock:
            self.states[name] = state
            write_json(self.out / PROGRESS_FILE, {"state": "running", "pid": os.getpid(), "host": socket.gethostname(),
                                                  "work_dir": str(self.work), "runs": dict(self.states)})
        print(f"[{time.time() - self.started:7.1f} s] {name}: {state}", flush=True)

    def run(self, recipe: Recipe) -> dict:
        """Train ``recipe`` (stopped by SIGTERM at the deadline), then score its checkpoint."""
        run_dir = self.work / recipe.name
        flags = run_flags(recipe, self.args.preset, self.args.budget_prompts)
        train = hmmtf_command(["train", "--preset", self.args.preset, "--run-dir", str(run_dir), "--device",
                               self.args.device, "--threads", str(self.args.threads), "--no-progress",
                               "--prefetch", str(self.args.prefetch), *flags])
        self.note(recipe.name, "training")
        started = time.time()
        with open(run_dir.with_suffix(".train.log"), "wb") as log:
            process = subprocess.Popen(train, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=REPOSITORY)
            try:
                process.wait(timeout=max(self.deadline - time.time(), 0.0))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)
                process.wait()
        record = {"recipe": dataclasses.asdict(recipe), "flags": flags, "train_command": shlex.join(train[1:]),
                  "train_returncode": process.returncode, "train_seconds": time.time() - started,
                  "planned_steps": int(flags[flags.index("--steps") + 1]),
                  "curve": metrics_records(run_dir / METRICS_FILE)}
        record["final_step"] = record["curve"][-1]["step"] if record["curve"] else 0
        record["stopped_early"] = process.returncode == STOPPED_BY_SIGTERM
        record["train_log_tail"] = run_dir.with_suffix(".train.log").read_text(errors="replace")[-2000:]
        if process.returncode not in (0, STOPPED_BY_SIGTERM) or not (run_dir / "checkpoint").is_dir():
            self.note(recipe.name, f"training failed ({process.returncode})")
            return {**record, "verdict": None}
        self.note(recipe.name, f"scoring at step {record['final_step']}")
        verdict = hmmtf_command(["ngram-verdict", str(run_dir / "checkpoint"), "--out", str(run_dir / "verdict"),
                                 "--prompts", str(self.args.verdict_prompts), "--fresh-tasks",
                                 str(self.args.verdict_fresh_tasks), "--device", self.args.device,
                                 "--threads", str(self.args.threads)])
        started = time.time()
        scored = subprocess.run(verdict, capture_output=True, text=True, env=self.env, cwd=REPOSITORY)
        record.update(verdict_command=shlex.join(verdict[1:]), verdict_returncode=scored.returncode,
                      verdict_seconds=time.time() - started, verdict=read_json(run_dir / "verdict" / VERDICT_FILE))
        if scored.returncode:
            record["verdict_log_tail"] = (scored.stdout + scored.stderr)[-2000:]
        self.note(recipe.name, f"done: {record['verdict']['verdict'] if record['verdict'] else 'scoring failed'}")
        return record


def device_samples(stop: threading.Event, samples: list[dict]) -> None:
    """Every :data:`POLL_SECONDS` until ``stop``: the GPU's memory use and utilisation
    (``nvidia-smi``), for how many runs fit before each slows down."""
    while not stop.wait(POLL_SECONDS):
        query = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
        if query.returncode == 0 and query.stdout.strip():
            used, utilisation = query.stdout.split("\n")[0].split(",")
            samples.append({"time_s": time.time(), "memory_used_mib": float(used), "utilization_percent": float(utilisation)})


def sweep(args, recipes: list[Recipe]) -> int:
    """Run every recipe (:class:`Sweep`), then write ``sweep.json`` and ``sweep.png``."""
    out, work = Path(args.out), Path(args.work_dir)
    out.mkdir(parents=True, exist_ok=True)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    driver = Sweep(args, recipes)
    device = torch.device(args.device)
    samples: list[dict] = []
    stop = threading.Event()
    if device.type == "cuda" and shutil.which("nvidia-smi"):
        threading.Thread(target=device_samples, args=(stop, samples), daemon=True).start()
    with ThreadPoolExecutor(max_workers=args.concurrent) as pool:
        runs = list(pool.map(driver.run, recipes))
    stop.set()
    preset = get_preset(args.preset)
    report = {"command": args.command_line, "git": git_state(), "environment": environment(device),
              "preset": args.preset, "mixture_spec": dataclasses.asdict(preset.mixture_spec),
              "prompt_format": dataclasses.asdict(preset.prompt_format), "budget_prompts": args.budget_prompts,
              "concurrent": args.concurrent, "train_minutes": args.train_minutes,
              "verdict_settings": {"prompts": args.verdict_prompts, "fresh_tasks": args.verdict_fresh_tasks},
              "seconds": time.time() - driver.started, "device_samples": samples,
              "runs": {recipe.name: run for recipe, run in zip(recipes, runs)},
              "step_benchmark": read_json(Path(args.step_benchmark)) if args.step_benchmark else None}
    write_json(out / SWEEP_FILE, report)
    plot_sweep(report, out / FIGURE_FILE)
    failed = [name for name, run in report["runs"].items() if run["verdict"] is None]
    write_json(out / PROGRESS_FILE, {"state": "failed" if failed else "finished", "pid": os.getpid(),
                                     "host": socket.gethostname(), "work_dir": str(work), "runs": driver.states})
    for name, run in report["runs"].items():
        print(f"{name}: step {run['final_step']}/{run['planned_steps']}, "
              f"{run['verdict']['verdict'] if run['verdict'] else 'no verdict'}", flush=True)
    return 1 if failed else 0


def plot_sweep(report: dict, path: Path) -> None:
    """Left: each run's training loss against prompts seen. Right: each run's loss on the test
    sequence of fresh HMMs (its verdict's prompts) beside the in-context n-grams and the oracle on
    the same prompts (horizontal lines, from the first scored run: the prompts of every run on the
    same mixture are the same; a run on another mixture has its own bigram beside it, a dash)."""
    from empirical.plotting import plt  # deferred: the sweep's other commands start without matplotlib

    figure, (curves, scores) = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    runs = report["runs"]
    for name, run in runs.items():
        batch = run["recipe"]["batch_size"] or get_preset(report["preset"]).train.batch_size
        curves.plot([point["step"] * batch for point in run["curve"]], [point["loss"] for point in run["curve"]],
                    label=name)
    curves.set_xlabel("prompts seen")
    curves.set_ylabel("training loss (nats/token)")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=8)
    scored = {name: run["verdict"] for name, run in runs.items() if run["verdict"]}
    if scored:
        reference = next(iter(scored.values()))["losses"]["test_sequence"]
        for index, (name, style) in enumerate((("ngram 1", ":"), ("ngram 2", "--"), ("ngram 3", "-."), ("oracle", "-"))):
            scores.axhline(reference[name], color=f"C{index + 5}", linestyle=style, label=f"{name}: {reference[name]:.3f}")
        names = list(scored)
        scores.scatter(range(len(names)), [scored[name]["losses"]["test_sequence"]["model"] for name in names],
                       color="black", zorder=3, label="the run's network")
        mixtures = {name: runs[name]["recipe"].get("mixture") for name in names}
        others = [index for index, name in enumerate(names) if mixtures[name] != mixtures[names[0]]]
        if others:
            scores.scatter(others, [scored[names[index]]["losses"]["test_sequence"]["ngram 2"] for index in others],
                           marker="_", s=400, color="C6", zorder=3, label="ngram 2 of a run on another mixture")
        scores.set_xticks(range(len(names)), [f"{name}\n{scored[name]['verdict']}" for name in names], fontsize=7)
    scores.set_ylabel("loss on the test sequence of fresh HMMs (nats/token)")
    scores.grid(alpha=0.3)
    scores.legend(fontsize=8)
    environment = report["environment"]
    figure.suptitle(f"{report['preset']}: {report['budget_prompts']} prompts per run, "
                    f"{min(report['concurrent'], len(runs))} at once, "
                    f"on {environment['device']} (torch {environment['torch']}, CUDA {environment['cuda'] or 'none'}); commit "
                    f"{(report['git']['commit'] or 'unknown')[:10]}", fontsize=10)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def detach(args) -> int:
    """Start this command again without ``--detach`` in a new session, its output in ``OUT/sweep.log``."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arguments = [word for word in shlex.split(args.command_line) if word != "--detach"]
    with open(out / LOG_FILE, "ab") as log:
        child = subprocess.Popen([sys.executable, __file__, *arguments[1:]], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPOSITORY)
    write_json(out / DETACHED_FILE, {"pid": child.pid, "host": socket.gethostname(), "started": time.time()})
    print(f"started process {child.pid}, log {out / LOG_FILE}; follow it with: python {Path(__file__).name} "
          f"--out {out} --wait 540", flush=True)
    return 0


def status_line(out: Path) -> tuple[str, str]:
    """``(state, line)``: the sweep's state (``finished``, ``failed``, ``running``, ``gone``: its
    process no longer exists, ``starting``) and each run's state with its last logged step."""
    progress = read_json(out / PROGRESS_FILE)
    detached = read_json(out / DETACHED_FILE)
    if progress is None:
        alive = detached is not None and process_alive(detached["pid"])
        return ("starting" if alive else "gone"), "no progress.json yet"
    state = progress["state"]
    if state == "running" and progress["host"] == socket.gethostname() and not process_alive(progress["pid"]):
        state = "gone"
    parts = []
    for name, run_state in progress["runs"].items():
        records = metrics_records(Path(progress["work_dir"]) / name / METRICS_FILE)
        last = (f" step {records[-1]['step']} loss {records[-1]['loss']:.4f} "
                f"{records[-1]['tokens_per_s']:.3g} tok/s") if records else ""
        parts.append(f"{name}: {run_state}{last}")
    return state, f"{state}: " + "; ".join(parts)


def wait_for(out: Path, seconds: float) -> int:
    """``--wait SECONDS``: a status line every :data:`POLL_SECONDS` until the sweep ends or the
    seconds pass; exit code 1 once it failed or its process is gone, else 0."""
    deadline = time.time() + seconds
    while True:
        state, line = status_line(out)
        print(line, flush=True)
        if state in ("failed", "gone"):
            return 1
        if state == "finished" or time.time() >= deadline:
            return 0
        time.sleep(min(POLL_SECONDS, max(deadline - time.time(), 0.0)))


def load_recipes(path: str | None) -> list[Recipe]:
    """:data:`RECIPES`, or the JSON list of :class:`Recipe` fields in ``path``."""
    if path is None:
        return list(RECIPES)
    entries = json.loads(Path(path).read_text())
    fields = {field.name for field in dataclasses.fields(Recipe)}
    recipes = []
    for entry in entries:
        unknown = sorted(set(entry) - fields)
        if unknown or "name" not in entry:
            raise ValueError(f"--recipes: entry {entry}; expected an object with 'name' and fields of {sorted(fields)}")
        recipes.append(Recipe(**entry))
    return recipes


def parser() -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(prog="gpu_recipe_sweep.py", description=__doc__.split("\n\n")[0])
    parse.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    parse.add_argument("--device", default="cuda", help="cuda (the lent GPU) or cpu (a rehearsal)")
    parse.add_argument("--out", help="folder of what comes back: sweep.json, sweep.png, sweep.log (required, "
                                      "except with --analysis-flags)")
    parse.add_argument("--work-dir", default="/tmp/hmmtf-gpu-sweep",
                       help="run folders with their checkpoints (emptied at the start; never under --out)")
    parse.add_argument("--recipes", metavar="FILE", help="a JSON list of recipes (default: RECIPES)")
    parse.add_argument("--runs", nargs="+", metavar="NAME", help="only these recipes, by name")
    parse.add_argument("--budget-prompts", type=positive_int,
                       help="prompts per run (default: the preset's steps x batch size; 131,072 for paper)")
    parse.add_argument("--concurrent", type=positive_int, default=4, help="runs trained at once")
    parse.add_argument("--train-minutes", type=positive_float, default=9.0,
                       help="after this, trainings still running are stopped with a checkpoint and scored")
    parse.add_argument("--verdict-prompts", type=positive_int, default=1024, help="fresh-HMM prompts of each verdict")
    parse.add_argument("--verdict-fresh-tasks", type=positive_int, default=1024,
                       help="fresh HMMs of the verdict's prompts (as many others fit the n-grams)")
    parse.add_argument("--threads", type=positive_int, default=2, help="CPU threads of each process")
    parse.add_argument("--prefetch", type=non_negative_int, default=0, metavar="DEPTH",
                       help="hmmtf train --prefetch of every run: its batches drawn up to DEPTH steps ahead in a "
                            "worker process (the same batches); 0: in the training loop (default)")
    parse.add_argument("--step-benchmark", metavar="FILE",
                       help="bench_training.py's JSON of the preset's step measured alone on this device before the "
                            "sweep, kept in sweep.json beside the runs it explains (their tokens/s with the data "
                            "pipeline and each other)")
    parse.add_argument("--detach", action="store_true", help="run in a new session in the background (log in --out)")
    parse.add_argument("--wait", type=positive_float, metavar="SECONDS",
                       help="follow the sweep in --out for at most this long (exit 1 if it failed)")
    parse.add_argument("--in-context-runs", action="store_true",
                       help="print the runs of --out's sweep.json whose verdict beats at least the in-context bigram, "
                            "one a line, the lowest fresh-HMM loss first (exit 2 without a sweep.json)")
    parse.add_argument("--analysis-flags", action="store_true",
                       help="print the hmmtf analyze flags of --preset's analysis settings (those of hmmtf reproduce; "
                            "every setting but --sections) on one line")
    return parse


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parse = parser()
    args = parse.parse_args(argv)
    args.command_line = shlex.join(["gpu_recipe_sweep.py", *argv])
    if args.analysis_flags:
        print(shlex.join(analysis_flags(args.preset)))
        return 0
    if args.out is None:
        print(hmmtf.error_line("gpu_recipe_sweep.py", "--out: not given; expected the sweep's folder"), file=sys.stderr)
        return 2
    try:
        if args.in_context_runs:
            report = read_json(Path(args.out) / SWEEP_FILE)
            if report is None:
                raise ValueError(f"--in-context-runs: {str(Path(args.out) / SWEEP_FILE)!r} is not a JSON file; "
                                 "expected the sweep.json of a finished sweep in --out")
            print("\n".join(in_context_runs(report)))
            return 0
        if args.wait is not None:
            return wait_for(Path(args.out), args.wait)
        if args.detach:
            return detach(args)
        recipes = load_recipes(args.recipes)
        if args.runs:
            unknown = sorted(set(args.runs) - {recipe.name for recipe in recipes})
            if unknown:
                raise ValueError(f"--runs: {unknown}; expected names of {[recipe.name for recipe in recipes]}")
            recipes = [recipe for recipe in recipes if recipe.name in args.runs]
        train = get_preset(args.preset).train
        args.budget_prompts = args.budget_prompts or train.steps * train.batch_size
        for recipe in recipes:
            run_flags(recipe, args.preset, args.budget_prompts)
        if args.step_benchmark and read_json(Path(args.step_benchmark)) is None:
            raise ValueError(f"--step-benchmark: {args.step_benchmark!r}; expected a JSON file written by "
                             "bench_training.py --out")
        if Path(args.work_dir).resolve().is_relative_to(Path(args.out).resolve()):
            raise ValueError(f"--work-dir: {args.work_dir!r}; expected a folder outside --out (checkpoints do not come back)")
    except ValueError as error:
        print(hmmtf.error_line("gpu_recipe_sweep.py", error), file=sys.stderr)
        return 2
    return sweep(args, recipes)


if __name__ == "__main__":
    sys.exit(main())
