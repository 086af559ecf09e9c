"""Canaries: a small run of the code that makes a kind of result, so that a change of its producers
that leaves every number as it was (a move, a merged twin, a faster kernel) keeps the result fresh,
and a change that moves a number does not (docs/ledger.md, "Canaries").

A canary runs the result's own ``hmmtf`` command at a tiny size, with fixed seeds, on a tiny network
trained for it (:class:`Workshop`), and keeps what the command wrote: every JSON value, without what
says where, when and how fast it ran (:data:`VOLATILE_KEY`). Beside the outputs it records the
**full-size settings** the tiny run overrides or never reaches: the command's option defaults, and
every module-level constant of the result's producers (``CEILING_SETTINGS``, ``FIT_PROMPTS``, ...;
a dict of named entries, such as ``MIXTURE_SPECS``, one entry per name, compared only where the
result's JSON names it, so that a change of the ``paper`` mixture leaves results on other mixtures
fresh).

**Agreement, not bits.** A canary's numbers now agree with a baseline's when every float does within
the canary's :class:`Tolerance` (``|now - then| <= atol + rtol |then|``, numpy's ``assert_allclose``
form) and every other value (an integer, a string, a verdict, the shape of the JSON) is equal. The
tolerance is derived from the arithmetic of the canary's path (:data:`FLOAT64`, :data:`FLOAT32`):
torch picks its CPU kernels by instruction set (AVX2, AVX512, none) and its reductions by thread
count, which move the last bits, so a bit-exact baseline held on one processor only.

Why this is sound. Let a result be made at commit C. A baseline of the canary was recorded at a commit
B, from a clean tree (:func:`record_baselines`). If the result's producers compute the same at B as at
C (:func:`ledger.provenance.changed_producers`: their syntax trees across moves), B's numbers are the
numbers of the code that made the result. If the canary now gives numbers that agree with them
(within the key names B's outputs used: a field the code now writes besides is not in the result),
and the full-size settings the result names are those of B, the code now computes, on everything
the canary exercises, what it computed then, to within the rounding of another kernel set. The
result is then fresh, "verified by canary"; otherwise stale. A canary whose own code or tolerance
changed is not the same witness (:func:`canary_digest`): a baseline recorded by another version of
it vouches for nothing.

What a canary cannot see (each canary says which apply, and the ledger prints it): code paths a
tiny run does not take (CUDA, bf16 on a GPU, ``torch.compile``, several processes, sizes past a
blocking or chunking threshold); inputs it does not read (the committed checkpoints and run
folders a result was measured on: the canary trains its own tiny network); timings; figures; and a
change that moves its numbers by less than its tolerance.

**Layering.** The ledger imports nothing of the command line: the canaries run ``hmmtf`` through the
:class:`CommandLine` that ``hmmtf ledger`` hands them, and the benchmark scripts as processes of their
own.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import io
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ledger.documents import LedgerError
from ledger.provenance import (GitUnavailable, Recorded, Vouch, changed_producers, code_fingerprint, git,
                               matches_producers, module_name)
from ledger.results import DEPTH_POINTS, RESULTS, Result

RECORD = "ledger/canaries.json"
"""The committed record: each canary's baselines (its numbers and settings at a commit) and its last
verification (whether it agrees with each baseline at the producers' present code)."""

VOLATILE_KEY = re.compile(r"command|git|git_commit|git_dirty|commit|torch|numpy|python|device|num_threads|threads|"
                          r"cpus|backend|verbose|debug|cached|host|hostname|platform|load.*|.*_seconds|seconds|.*_s|"
                          r".*_time|.*per_minute|.*per_second|.*per_s|smc_over_exact_filter|fraction_of_peak|binding")
"""JSON keys, and command options, that say where, when, on what, how chattily and how fast a
command ran (``smc_over_exact_filter``: a ratio of two timings; a roofline's ``fraction_of_peak``
and ``binding``: rates over the device's measured peaks, and the larger of the two), not what it
computed: left out of what a canary keeps (matched whole)."""

REPOSITORY = Path(__file__).resolve().parents[1]
"""The checkout the canaries run in: its path in an output is read as ``<repository>``."""

MODULE_PATH = re.compile(r"\b(?:hmm|construction|bounds|empirical|ledger|benchmarks)(?:[./][A-Za-z_]\w*)*[./]([A-Za-z_]\w*)")
"""A dotted module name or file path of the project inside a JSON string (``empirical.yardsticks.
hand_built.served_rows``): read as its last name only, so that a description naming where the code
lives does not change what the canary keeps when the code moves."""


@dataclass(frozen=True)
class Tolerance:
    """How far a float of a canary may move between two runs of the same code, on two processors or
    thread counts: ``|now - then| <= atol + rtol |then|``; ``reason``: the derivation."""

    rtol: float
    atol: float
    reason: str

    def allowed(self, then: float) -> float:
        return self.atol + self.rtol * abs(then)


FLOAT64 = Tolerance(1e-9, 1e-12, (
    "float64 arithmetic (numpy, torch float64): two kernel sets or thread counts round each operation "
    "differently by at most an ulp (2.2e-16 relative) and sum in another order; a canary's chain of a few "
    "thousand operations compounds that to about 1e-12 relative, and rtol 1e-9 leaves three decades for "
    "conditioning (a log of a small probability, a difference of two losses), atol 1e-12 the numbers near "
    "zero. A change of the code that moves a number by more than a part in 1e9 is caught"))
"""The tolerance of a canary whose every number is computed in float64."""

FLOAT32 = Tolerance(1e-5, 1e-5, (
    "float32 arithmetic (the RoFormer trained 6 steps and evaluated; torch tensors made from Python floats): "
    "torch's kernel sets differ by up to 5 ulp an operation (3.5e-7 relative, softmax, AVX2 against AVX512; "
    "torch.testing's float32 tolerance for one operation is rtol 1.3e-6, atol 1e-5), which the training "
    "steps and the evaluation carry on: measured on this project's canaries, scalar kernels "
    "(ATEN_CPU_CAPABILITY=default) against AVX2 moved 318 of the 4267 floats of evaluate and competence-bound, "
    "by at most 1.1e-6 relative beyond 1e-6 absolute. rtol 1e-5 is that amplified error with a decade to "
    "spare for other kernel sets; atol 1e-5 covers a difference of two losses near zero, whose error is that "
    "of the losses. A change of the code that moves a number by more than a part in 1e5 is caught"))
"""The tolerance of a canary with a float32 path: the widest of its paths decides."""

FITTED_KEY = re.compile(r".*\bngram_concentrations\.ngram \d+\[\d+\]|.*\bvariable_order\.concentrations\[\d+\]")
"""The places (as :func:`_leaves` names them) of numbers an optimiser chose, not computed: the
in-context predictors' concentrations, L-BFGS-B's argmin over their logarithms, which stops at a
projected gradient of 1e-5, so two runs whose losses differ in the last bits stop up to 1e-5 / lambda
apart where the loss has curvature lambda in log alpha, and anywhere along a direction where it is
flat. Measured (2026-12-07, a 2-core Xeon with AVX512): OpenBLAS's SkylakeX kernels, its Haswell
ones and an AVX2 machine stopped the ``evaluate`` canary's order-3 concentrations 1.2e-4 apart
relative; the generic x86-64 core against SkylakeX moved ``competence-bound``'s depth-6 variable-order
concentration, which the tiny run's loss hardly depends on, from 637.5 to 28.7; every loss agreed
within ``FLOAT32``. So :func:`disagreement` compares a fit through the losses it gives, not its
argmin: a change of the fitting code that matters moves them."""


class CommandLine(NamedTuple):
    """The ``hmmtf`` command line, as ``hmmtf ledger`` hands it to the canaries: ``main(argv)``, its
    exit code, and ``parser(subcommand)``, the parser whose subcommand's option defaults are
    full-size settings. Handed, not imported: the ledger lies below the command line."""

    main: Callable[[list[str]], int | None]
    parser: Callable[[str], object]


class Workshop:
    """The canaries' folder, the command line they run, and the tiny network and learning-curve run
    that several share (each made once, on first use, by ``hmmtf train`` and ``hmmtf curve`` at the
    ``tiny`` preset)."""

    def __init__(self, folder: Path, command_line: CommandLine | None) -> None:
        self.folder = folder
        self.command_line = command_line
        self._made: set[str] = set()

    def path(self, name: str) -> str:
        return str(self.folder / name)

    def hmmtf(self, argv: list[str]) -> None:
        """``hmmtf ARGV`` in this process, its printing held back; a nonzero exit raises
        :class:`LedgerError` naming the command (and one without a command line: only ``hmmtf
        ledger``, which hands it, can run a canary)."""
        if self.command_line is None:
            raise LedgerError(f"canary: `hmmtf {' '.join(argv)}` must run, and only `hmmtf ledger` can run it (it "
                              "hands the canaries the command line)")
        errors = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
            code = self.command_line.main(argv)
        if code:
            said = errors.getvalue().strip().splitlines()
            raise LedgerError(f"canary: `hmmtf {' '.join(argv)}` exited {code}" + (f": {said[-1]}" if said else ""))

    def script(self, path: str, argv: list[str], cwd: Path | None = None) -> None:
        """``python PATH ARGV`` (a benchmark, from the repository root), as a process of its own that
        imports this checkout's packages (``PYTHONPATH``); a nonzero exit raises :class:`LedgerError`
        naming the command and its last line on stderr."""
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPOSITORY),
                                                                                os.environ.get("PYTHONPATH"))))}
        done = subprocess.run([sys.executable, str(REPOSITORY / path), *argv], cwd=cwd or REPOSITORY,
                              capture_output=True, text=True, env=environment)
        if done.returncode:
            said = done.stderr.strip().splitlines()
            raise LedgerError(f"canary: `python {path} {' '.join(argv)}` exited {done.returncode}"
                              + (f": {said[-1]}" if said else ""))

    def once(self, name: str, argv: list[str]) -> str:
        """``hmmtf ARGV``, run the first time ``name`` is asked for; the folder ``name``."""
        if name not in self._made:
            self.hmmtf(argv)
            self._made.add(name)
        return self.path(name)

    def checkpoint(self) -> str:
        """A tiny RoFormer's checkpoint: 6 steps of the ``tiny`` preset."""
        run = self.once("run", ["train", "--preset", "tiny", "--steps", "6", "--warmup-steps", "2",
                                "--run-dir", self.path("run"), "--threads", "1", "--no-progress"])
        return f"{run}/checkpoint"


@dataclass(frozen=True)
class Canary:
    """``run`` makes, in the workshop, the files ``outputs`` (paths in it) at a tiny size;
    ``subcommand``: the command whose option defaults are full-size settings (None: no ``hmmtf``
    command); ``blind_to``: what it cannot see, beyond every canary's blind spots; ``tolerance``:
    how far its floats may move between two runs of the same code (:class:`Tolerance`)."""

    name: str
    run: Callable[[Workshop], None]
    outputs: tuple[str, ...]
    subcommand: str | None
    blind_to: str
    tolerance: Tolerance = FLOAT32


def _evaluate(shop: Workshop) -> None:
    shop.hmmtf(["evaluate", shop.checkpoint(), "--out", shop.path("evaluate"), "--num-prompts", "8",
               "--hand-built-prompts", "2", "--fresh-tasks", "4", "--reference-tasks", "8", "--ceiling-particles", "4",
               "--ceiling-moves", "1", "--threads", "1"])


def _competence_bound(shop: Workshop) -> None:
    shop.hmmtf(["evaluate", shop.checkpoint(), "--out", shop.path("competence-bound"), "--num-prompts", "4",
               "--hand-built-prompts", "0", "--fresh-tasks", "4", "--reference-tasks", "8", "--competence-prompts", "6",
               "--ceiling-backend", "collapsed", "--ceiling-particles", "8", "--ceiling-replicates", "2",
               "--ceiling-burn-in-steps", "2", "--threads", "1"])


def _analyze(shop: Workshop) -> None:
    shop.hmmtf(["analyze", shop.checkpoint(), "--out", shop.path("analyze"), "--sections", "shuffle", "probes",
               "offsets", "patching", "--probe-train-prompts", "24", "--probe-test-prompts", "12", "--shuffle-prompts",
               "8", "--hand-built-prompts", "4", "--max-distance", "2", "--max-offset", "3", "--centroid-prompts", "32",
               "--patching-prompts", "8", "--batch-size", "8", "--probe-tasks", "4", "--threads", "1"])


def _heads(shop: Workshop) -> None:
    shop.hmmtf(["heads", shop.checkpoint(), "--out", shop.path("heads"), "--prompts", "8", "--reference-prompts", "8",
               "--fresh-tasks", "4", "--random-draws", "2", "--top-heads", "1", "--ceiling-particles", "4",
               "--threads", "1"])


def _klmap(shop: Workshop) -> None:
    shop.hmmtf(["klmap", shop.checkpoint(), "--out", shop.path("klmap"), "--prompts", "4", "--fresh-tasks", "4",
               "--gd-steps", "2", "--ceiling-particles", "4", "--threads", "1"])


def _beliefs(shop: Workshop) -> None:
    shop.hmmtf(["beliefs", shop.checkpoint(), "--out", shop.path("beliefs"), "--prompts", "8", "--fresh-tasks", "4",
               "--batch-size", "4", "--ceiling-particles", "4", "--threads", "1"])


def _ngram_verdict(shop: Workshop) -> None:
    shop.hmmtf(["ngram-verdict", shop.checkpoint(), "--out", shop.path("ngram-verdict"), "--prompts", "16",
               "--fresh-tasks", "4", "--threads", "1"])


def _verification(shop: Workshop) -> None:
    shop.hmmtf(["main", "--gammas", "0.5", "0.9", "--ranks", "2", "--concentrations", "1.0", "--seeds", "2",
               "--t2-gammas", "0.8", "--t2-sequences", "50", "--states", "3", "--tokens", "4", "--max-memory", "6",
               "--sequences", "100", "--L", "2", "--T", "4", "--demos", "3", "--demo-length", "8", "--test-length",
               "5", "--prompts", "1", "--sweep-prompts", "2", "--threads", "1", "--workers", "1", "--no-progress",
               "--out", shop.path("verification")])


def _calibrate(shop: Workshop) -> None:
    shop.hmmtf(["calibrate", "--preset", "tiny", "--concentrations", "0.2", "1.0", "--num-prompts", "16",
               "--out", shop.path("calibrate")])


def _markov_sweep(shop: Workshop) -> None:
    shop.hmmtf(["markov-sweep", "--out", shop.path("markov-sweep"), "--p-values", "0.9", "--q-values", "0.8",
               "--seeds", "1", "--steps", "12", "--warmup-steps", "2", "--architectures", "1-layer-untied", "--inits",
               "lowrank-anti", "--init-rank", "2", "--workers", "1", "--no-progress"])


def _markov_incontext(shop: Workshop) -> None:
    shop.hmmtf(["markov-incontext", "--out", shop.path("markov-incontext"), "--runs", shop.path("markov-incontext-runs"),
               "--steps", "10", "--warmup-steps", "2", "--checkpoint-every", "10", "--eval-sequences", "16",
               "--sequence-length", "24", "--ablation-draws", "2", "--workers", "1"])


def _signal(shop: Workshop) -> None:
    shop.hmmtf(["signal", "--families", "S 4, T 0.1, O 0.1", "--num-prompts", "4", "--fresh-tasks", "4",
               "--particles", "4", "--moves", "1", "--threads", "1", "--out", shop.path("signal")])


def _family_calibration(shop: Workshop) -> None:
    shop.hmmtf(["family-calibration", "--concentrations", "0.01", "0.1", "--num-prompts", "4", "--fresh-tasks", "4",
               "--threads", "1", "--out", shop.path("family-calibration")])


def _curves(shop: Workshop) -> None:
    curve = shop.once("curve", ["curve", "--preset", "tiny", "--steps", "20", "--warmup-steps", "2", "--every", "10",
                                "--curve-prompts", "4", "--fresh-tasks", "4", "--ceiling-particles", "4",
                                "--run-dir", shop.path("curve"), "--threads", "1"])
    shop.hmmtf(["curves", curve, "--title", "canary", "--out", shop.path("curves")])


def _plateau(shop: Workshop) -> None:
    _curves(shop)
    shop.hmmtf(["plateau", "--arm", "plain", shop.path("curve"), "--baseline", "plain", "--out", shop.path("plateau")])


def _ladder(shop: Workshop) -> None:
    shop.hmmtf(["ladder", str(REPOSITORY / "figures/ladder"), "--out", shop.path("ladder")])


def _depth(shop: Workshop) -> None:
    shop.hmmtf(["depth", "--points", *(str(REPOSITORY / point) for point in DEPTH_POINTS), "--out", shop.path("depth")])


def _prior_predictive(shop: Workshop) -> None:
    shop.script("benchmarks/bench_prior_predictive.py", ["--preset", "tiny", "--prompts", "2", "--fresh-tasks", "4",
                                                         "--chains", "2", "--out", shop.path("prior_predictive.json")])


def _torch_smc(shop: Workshop) -> None:
    shop.script("benchmarks/bench_prior_predictive.py", ["--preset", "tiny", "--prompts", "2", "--fresh-tasks", "4",
                                                         "--chains", "0", "--backend", "torch", "--device", "cpu",
                                                         "--out", shop.path("torch_smc.json")])


def _ceiling_bounds(shop: Workshop) -> None:
    """Run from the workshop, with the network named by its path there: the output keys each network by
    the path it was given, and :func:`_canonical` rewrites values, not keys."""
    checkpoint = str(Path(shop.checkpoint()).relative_to(shop.folder))
    shop.script("benchmarks/ceiling_bounds.py", ["--preset", "tiny", "--prompts", "4", "--fresh-tasks", "8",
                                                 "--replicates", "2", "--particles", "8", "--burn-in-steps", "2",
                                                 "--work", shop.path("ceiling-bounds-work"), "--models", checkpoint,
                                                 "--out", shop.path("ceiling_bounds.json")], cwd=shop.folder)


TRAINED_ELSEWHERE = "the committed checkpoint the result measured (a tiny network trained here stands in for it)"
CANARIES: dict[str, Canary] = {canary.name: canary for canary in (
    Canary("evaluate", _evaluate, ("evaluate/evaluation.json", "evaluate/competence.json", "evaluate/hand_built.json"),
           "evaluate", TRAINED_ELSEWHERE),
    Canary("competence-bound", _competence_bound, ("competence-bound/competence.json",), "evaluate",
           TRAINED_ELSEWHERE + "; the 128-state sizes (it averages 2 runs of 8 particles on 6 prompts of the tiny "
           "preset)"),
    Canary("analyze", _analyze, ("analyze/analysis.json",), "analyze", TRAINED_ELSEWHERE),
    Canary("heads", _heads, ("heads/heads.json",), "heads", TRAINED_ELSEWHERE),
    Canary("klmap", _klmap, ("klmap/klmap.json",), "klmap", TRAINED_ELSEWHERE),
    Canary("beliefs", _beliefs, ("beliefs/beliefs.json",), "beliefs", TRAINED_ELSEWHERE),
    Canary("ngram-verdict", _ngram_verdict, ("ngram-verdict/ngram-verdict.json",), "ngram-verdict",
           TRAINED_ELSEWHERE),
    Canary("verification", _verification, ("verification/report.json",), "main",
           "the second worker process of --workers 2 (the canary runs one)"),
    Canary("calibrate", _calibrate, ("calibrate/tiny.json",), "calibrate", "mixtures other than tiny's sizes"),
    Canary("markov-sweep", _markov_sweep, ("markov-sweep/results.json",), "markov-sweep",
           "the architectures and initialisations the canary does not train (it trains one of each kind)"),
    Canary("markov-incontext", _markov_incontext, ("markov-incontext/results.json",), "markov-incontext",
           "the committed runs in models/markov-incontext (it trains its own)"),
    Canary("signal", _signal, ("signal/signal.json",), "signal", "the families the canary does not measure (it "
           "measures one; the others' definitions are compared as settings)"),
    Canary("family-calibration", _family_calibration, ("family-calibration/family_calibration.json",),
           "family-calibration", "the concentrations the canary does not measure (it measures a 2 x 2 grid)"),
    Canary("curves", _curves, ("curves/curves.json",), "curves", "the committed run folders the study summarises"),
    Canary("plateau", _plateau, ("plateau/plateau.json",), "plateau", "the committed run folders the study "
           "summarises"),
    Canary("ladder", _ladder, ("ladder/ladder.json",), "ladder", "nothing beyond the common blind spots (it runs on "
           "the committed points)", FLOAT64),
    Canary("depth", _depth, ("depth/depth.json",), "depth", "nothing beyond the common blind spots (it runs on the "
           "committed results of the networks)", FLOAT64),
    Canary("prior-predictive", _prior_predictive, ("prior_predictive.json",), None,
           "the rate of the SMC (a timing), and its convergence at the paper family's size", FLOAT64),
    Canary("ceiling-bounds", _ceiling_bounds, ("ceiling_bounds.json",), None,
           "the committed checkpoints the bound scores (a tiny network trained here stands in for them), and the "
           "128-state sizes (it runs 2 replicates of 8 particles on 4 prompts of the tiny preset)"),
    Canary("torch-smc", _torch_smc, ("torch_smc.json",), None,
           "the torch SMC on CUDA and in float32 (it runs on the CPU in float64), its rate and roofline (timings), "
           "and its convergence at the sizes of the committed runs", FLOAT64),
)}
"""Every canary, by the name a :class:`~ledger.results.Result` gives as its ``canary``."""

COMMON_BLIND_SPOTS = ("code paths a tiny run does not take (CUDA, bf16 on a GPU, torch.compile, several processes, "
                      "sizes past a blocking threshold); timings; figures; a change that moves the canary's numbers by "
                      "less than its tolerance; the fitted concentrations themselves (judged by the losses they give)")


def environment() -> dict[str, str]:
    """The software stack and the CPU kernel set torch dispatches to (``cpu``) a canary ran on: told,
    not compared (the tolerance covers another kernel set, thread count or library release)."""
    import numpy
    import torch
    return {"python": platform.python_version(), "numpy": numpy.__version__, "torch": torch.__version__,
            "cpu": torch.backends.cpu.get_cpu_capability()}


def _canonical(value, workshop: str):
    """``value`` (parsed JSON) without :data:`VOLATILE_KEY` keys, a float that is not finite as its
    name (``"nan"``, as the strict writers spell it), the workshop's and the repository's paths as
    ``<workshop>`` and ``<repository>``, and the project's module names as their last name
    (:data:`MODULE_PATH`)."""
    if isinstance(value, dict):
        return {key: _canonical(item, workshop) for key, item in value.items() if not VOLATILE_KEY.fullmatch(key)}
    if isinstance(value, list):
        return [_canonical(item, workshop) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return MODULE_PATH.sub(r"\1", value.replace(workshop, "<workshop>").replace(str(REPOSITORY), "<repository>"))
    return value


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _without_imports(source: str) -> str:
    """The :func:`~ledger.provenance.code_fingerprint` of ``source`` without its import statements."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            body[:] = [statement for statement in body if not isinstance(statement, (ast.Import, ast.ImportFrom))]
    return code_fingerprint(ast.unparse(tree))


def _canary_source(canary: Canary) -> str:
    """The canary's own code, what makes the numbers a baseline keeps: its function and the module's
    helpers and constants it names, without imports (a move rewrites them, and what they import is
    judged by its numbers), the workshop and the canonical form. Not how they are compared
    (:func:`_comparison_source`): a baseline's numbers are data, which a new comparison reads again."""
    module = sys.modules[__name__]
    source = textwrap.dedent(inspect.getsource(canary.run))
    named = {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    parts = [source]
    for name in sorted(named):
        value = getattr(module, name, None)
        if inspect.isfunction(value) or inspect.isclass(value):
            parts.append(inspect.getsource(value))
        elif isinstance(value, str):
            parts.append(f"{name} = {value!r}")
    parts += [f"VOLATILE_KEY = {VOLATILE_KEY.pattern!r}", f"MODULE_PATH = {MODULE_PATH.pattern!r}",
              inspect.getsource(Workshop), inspect.getsource(option_defaults), inspect.getsource(_canonical)]
    return _without_imports("\n".join(parts))


def _comparison_source(canary: Canary) -> str:
    """How the canary's numbers are compared with a baseline's: its tolerance, the places left to
    the losses they give (:data:`FITTED_KEY`) and :func:`disagreement`."""
    return _without_imports("\n".join([
        f"TOLERANCE = {(canary.tolerance.rtol, canary.tolerance.atol)!r}",
        f"FITTED_KEY = {FITTED_KEY.pattern!r}",
        f"NUMBER_IN_TEXT = {NUMBER_IN_TEXT.pattern!r}", inspect.getsource(Length), inspect.getsource(_leaves),
        inspect.getsource(_floats_compared), inspect.getsource(disagreement)]))


def canary_digest(canary: Canary) -> str:
    """A digest of the canary as a witness (:func:`_canary_source`): a baseline recorded by another
    version of it vouches for nothing."""
    return _digest(_canary_source(canary))


def comparison_digest(canary: Canary) -> str:
    """A digest of how the canary is compared (:func:`_comparison_source`): a verification made under
    another comparison is judged again."""
    return _digest(_comparison_source(canary))


def option_defaults(command_line: CommandLine, subcommand: str) -> dict[str, str]:
    """The default of every option of ``hmmtf SUBCOMMAND`` that can change a number (not
    :data:`VOLATILE_KEY`'s), as text."""
    parser = command_line.parser(subcommand)
    (action,) = [action for action in parser._actions if action.dest == "command"]
    return {sub.dest: repr(sub.default) for sub in action.choices[subcommand]._actions
            if sub.dest != "help" and not VOLATILE_KEY.fullmatch(sub.dest)}


def _field_default(field: dataclasses.Field):
    """The default of a dataclass ``field`` (its factory's value), or ``dataclasses.MISSING``."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _is_default(field: dataclasses.Field, value) -> bool:
    """Whether ``value`` is ``field``'s default: equal, of the same type (an array or tensor, whose
    ``==`` is not one truth value, never is)."""
    default = _field_default(field)
    same = type(default) is type(value) and default == value
    return same if isinstance(same, bool) else False


def _value_text(value, classes: set[type]) -> str:
    """``repr(value)``, except that a dataclass instance, at any depth of lists, tuples and dicts,
    is written ``Name(field=..., ...)`` with only the fields whose value differs from their default:
    a field added with a default that keeps the old behaviour leaves the text as it was. The
    dataclasses met are added to ``classes``, whose defaults :func:`settings` records apart."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        classes.add(type(value))
        changed = [f"{field.name}={_value_text(getattr(value, field.name), classes)}"
                   for field in dataclasses.fields(value) if not _is_default(field, getattr(value, field.name))]
        return f"{type(value).__name__}({', '.join(changed)})"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_value_text(item, classes) for item in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_value_text(key, classes)}: {_value_text(item, classes)}"
                               for key, item in value.items()) + "}"
    return repr(value)


def _constant_text(value, classes: set[type]) -> str | None:
    """A full-size setting's value as text (:func:`_value_text`), the repository's path as
    ``<repository>`` and the project's module names as their last name (None: not a setting: a
    function, class, module)."""
    if callable(value) or inspect.ismodule(value):
        return None
    if hasattr(value, "tobytes"):
        return hashlib.sha256(value.tobytes()).hexdigest()
    return MODULE_PATH.sub(r"\1", _value_text(value, classes).replace(str(REPOSITORY), "<repository>"))


def settings(modules: list[str], defaults: dict[str, str]) -> dict[str, str]:
    """The full-size settings: the option ``defaults`` of its command (``option:NAME``) and the
    module-level constants (upper-case names) of ``modules`` by name, a dict's entries one by one
    (``NAME[key]``), each as a digest of its values' texts (a constant that modules import from one
    another is one value); and the default of every field of the dataclasses those values hold
    (``default:Class.field``), which their texts leave out where a value equals it."""
    entries: dict[str, list[str]] = {}
    classes: set[type] = set()
    for name in modules:
        module = importlib.import_module(name)
        for constant, value in vars(module).items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", constant) or constant in ("VOLATILE_KEY", "MODULE_PATH"):
                continue
            if isinstance(value, dict) and all(isinstance(key, str) for key in value):
                for key, item in value.items():
                    text = _constant_text(item, classes)
                    if text is not None:
                        entries.setdefault(f"{constant}[{key}]", []).append(text)
            else:
                text = _constant_text(value, classes)
                if text is not None:
                    entries.setdefault(constant, []).append(text)
    for kind in classes:
        for field in dataclasses.fields(kind):
            default = _field_default(field)
            if default is not dataclasses.MISSING:
                entries[f"default:{kind.__qualname__}.{field.name}"] = [_value_text(default, set())]
    for option, default in defaults.items():
        entries[f"option:{option}"] = [default]
    return {key: _digest(sorted(set(values))) for key, values in entries.items()}


def results_of(canary: str, results: tuple[Result, ...] = RESULTS) -> tuple[Result, ...]:
    return tuple(result for result in results if result.canary == canary)


def producer_files(root: Path, canary: str, results: tuple[Result, ...] = RESULTS) -> list[str]:
    """The tracked files that are producers of a result of ``canary``, in the working tree."""
    listed = git(root, "ls-files").stdout.split("\n")
    producers = [result.producers for result in results_of(canary, results)]
    return sorted(path for path in listed if path and any(matches_producers(path, specs) for specs in producers))


def code_now(root: Path, canary: Canary, results: tuple[Result, ...] = RESULTS) -> str:
    """A digest of what the canary witnesses for: its producers' present code (syntax trees) and its own."""
    parts = [_canary_source(canary)]
    for path in producer_files(root, canary.name, results):
        text = (root / path).read_bytes()
        fingerprint = code_fingerprint(text.decode()) if path.endswith(".py") else None
        parts.append(f"{path}\n{fingerprint or hashlib.sha256(text).hexdigest()}")
    return _digest(parts)


class Song(NamedTuple):
    """What a canary gave: its canonical ``outputs`` and its command's option ``defaults``."""

    outputs: dict
    defaults: dict[str, str]

    def packed(self) -> str:
        """The song as the record keeps it: its JSON, deflated, in base64 (a canary's outputs run to
        tens of kB of numbers, which nobody reads in a diff)."""
        text = json.dumps({"outputs": self.outputs, "defaults": self.defaults}, sort_keys=True, allow_nan=False)
        return base64.b64encode(zlib.compress(text.encode(), 9)).decode()

    @classmethod
    def unpacked(cls, packed: str) -> Song:
        song = json.loads(zlib.decompress(base64.b64decode(packed)))
        return cls(song["outputs"], song["defaults"])


class Length(str):
    """Two lists' lengths where they differ, as :func:`_leaves` gives them: compared exactly, never
    read for numbers (:func:`_floats_compared`)."""


def _leaves(then, now, where: str) -> Iterator[tuple[str, object, object]]:
    """``(where, then's value, now's value)`` for every leaf of the parsed JSON ``then``, with the
    value at the same place in ``now`` (:data:`MISSING` where now has none): the keys ``then`` does
    not have are not visited (a field the code now writes besides). Two lists of other lengths are
    one leaf each, their lengths."""
    if isinstance(then, dict) and isinstance(now, dict):
        for key, item in then.items():
            yield from _leaves(item, now.get(key, MISSING), f"{where}.{key}" if where else key)
    elif isinstance(then, list) and isinstance(now, list):
        if len(then) != len(now):
            yield where, Length(f"{len(then)} items"), Length(f"{len(now)} items")
            return
        for index, (first, second) in enumerate(zip(then, now)):
            yield from _leaves(first, second, f"{where}[{index}]")
    else:
        yield where, then, now


MISSING = "(absent)"
"""What :func:`_leaves` reads where the present outputs lack a key of the baseline's."""


def _is_float(value) -> bool:
    return isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))


NUMBER_IN_TEXT = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
"""A number written in a string (``max |gamma_r - g^r| = 1.1e-16``, ``S = 4``), not a digit inside a
name (``gamma_1``, ``x2``)."""


def _floats_compared(where: str, first, second) -> Iterator[tuple[str, float, float]]:
    """The pairs of floats :func:`disagreement` compares at a leaf: the leaf itself when both are
    numbers and ``then``'s a float; a string's numbers, one by one, when both strings read the same
    once their numbers are set aside (:data:`NUMBER_IN_TEXT`: a verdict that quotes a measured
    number). Raises ``ValueError`` where the two must be equal and are not."""
    if isinstance(first, float) and _is_float(second):
        yield where, first, second
    elif type(first) is str and type(second) is str and first != second:
        numbers = [[float(number) for number in NUMBER_IN_TEXT.findall(text)] for text in (first, second)]
        if NUMBER_IN_TEXT.sub("#", first) != NUMBER_IN_TEXT.sub("#", second):
            raise ValueError(f"{where}: {_short(first)} -> {_short(second)}")
        for index, pair in enumerate(zip(*numbers)):
            yield f"{where} (its number {index + 1})", *pair
    elif first != second or type(first) is not type(second):
        raise ValueError(f"{where}: {_short(first)} -> {_short(second)}")


def disagreement(then: Song, now: Song, tolerance: Tolerance) -> str | None:
    """Where ``now`` does not agree with the baseline ``then``: the first value that differs (an
    integer, a string's words, a structure, compared exactly; an option default of ``then``'s) or
    the float furthest outside ``tolerance`` (a string's numbers too: :func:`_floats_compared`), as
    ``where: then -> now``, but at the places :data:`FITTED_KEY` names (a fit is judged by the losses
    it gives); None when they agree. A float is compared with a float (``|now - then| <= atol + rtol
    |then|``); JSON writes an integral float such as 2.0 as a float, so an integer stands for an
    integer only."""
    for option, default in then.defaults.items():
        if now.defaults.get(option, MISSING) != default:
            return f"option {option}: default {default} -> {now.defaults.get(option, MISSING)}"
    worst, worst_excess = None, 1.0
    for leaf, first_leaf, second_leaf in _leaves(then.outputs, now.outputs, ""):
        if FITTED_KEY.fullmatch(leaf) and _is_float(first_leaf) and _is_float(second_leaf):
            continue
        try:
            compared = list(_floats_compared(leaf, first_leaf, second_leaf))
        except ValueError as differs:
            return str(differs)
        for where, first, second in compared:
            difference, allowed = abs(second - first), tolerance.allowed(first)
            excess = difference / allowed if allowed else math.inf
            if difference > allowed and excess > worst_excess:
                worst, worst_excess = (f"{where}: {first!r} -> {second!r}, |difference| {difference:.3g} > "
                                       f"{allowed:.3g} allowed"), excess
    return worst


def _short(value) -> str:
    """``repr(value)``, cut to 60 characters (a whole dict where a number was expected)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."



def sing(canary: Canary, root: Path, command_line: CommandLine | None,
         results: tuple[Result, ...] = RESULTS) -> tuple[Song, dict]:
    """Run ``canary`` now: what it gave, and its record: its settings, the canary's digest
    (:func:`canary_digest`) and the software it ran on."""
    modules = [module_name(path) for path in producer_files(root, canary.name, results)
               if path.endswith(".py") and not path.startswith(("benchmarks/", "tests/"))]
    defaults = option_defaults(command_line, canary.subcommand) if canary.subcommand and command_line else {}
    with tempfile.TemporaryDirectory(prefix=f"canary-{canary.name}-") as folder:
        shop = Workshop(Path(folder), command_line)
        canary.run(shop)
        outputs = {output: _canonical(json.loads((shop.folder / output).read_text()), folder)
                   for output in canary.outputs}
    return Song(outputs, defaults), {"canary": canary_digest(canary), "settings": settings(modules, defaults),
                                     "environment": environment()}


def load_record(root: Path) -> dict:
    path = root / RECORD
    return json.loads(path.read_text()) if path.is_file() else {"baselines": {}, "songs": {}, "verified": {}}


def write_record(root: Path, record: dict) -> None:
    """Write the record, keeping only the songs a baseline names."""
    named = {baseline["song"] for baselines in record["baselines"].values() for baseline in baselines}
    record = {**record, "songs": {key: song for key, song in record["songs"].items() if key in named}}
    (root / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n")


def _agreement(record: dict, name: str, song: Song, tolerance: Tolerance) -> dict[str, str | None]:
    """``{baseline's commit: where the song disagrees with it (None: it agrees)}`` for every baseline of ``name``."""
    return {baseline["commit"]: disagreement(Song.unpacked(record["songs"][baseline["song"]]), song, tolerance)
            for baseline in record["baselines"].get(name, [])}


def _verification(code: str, sung: dict, canary: Canary, disagreements: dict[str, str | None]) -> dict:
    """A verification as the record keeps it: the producers' code it ran at, the canary's record
    (:func:`sing`), the comparison it was judged by (:func:`comparison_digest`) and where it disagrees
    with each baseline."""
    return {"code": code, **sung, "comparison": comparison_digest(canary), "disagreement": disagreements}


def record_baselines(root: Path, results: tuple[Result, ...] = RESULTS, canaries: dict[str, Canary] | None = None,
                     names: list[str] | None = None, command_line: CommandLine | None = None) -> list[str]:
    """Run each canary (or those ``names``) at HEAD and add its numbers as a baseline of HEAD's
    commit, writing the record after each. Refused unless the producers and the canaries have no
    uncommitted changes: a baseline stands for a commit's code. Returns the names recorded."""
    canaries = CANARIES if canaries is None else canaries
    unknown = sorted(set(names or ()) - set(canaries))
    if unknown:
        raise ValueError(f"--record-canaries: {unknown}; expected names of {sorted(canaries)}")
    head = git(root, "rev-parse", "HEAD").stdout.strip()
    record = load_record(root)
    for name, canary in canaries.items():
        if names and name not in names:
            continue
        dirty = git(root, "status", "--porcelain", "--", *producer_files(root, name, results),
                     "ledger/canaries.py").stdout.strip()
        if dirty:
            raise LedgerError(f"canary {name}: uncommitted changes ({dirty.splitlines()[0].strip()} ...); "
                              "expected a clean tree, since a baseline stands for a commit")
        song, sung = sing(canary, root, command_line, results)
        packed = song.packed()
        record["songs"][_digest(packed)] = packed
        baselines = [entry for entry in record["baselines"].get(name, []) if entry["commit"] != head]
        record["baselines"][name] = [*baselines, {"commit": head, "song": _digest(packed), **sung}]
        record["verified"][name] = _verification(code_now(root, canary, results), sung, canary,
                                                 _agreement(record, name, song, canary.tolerance))
        write_record(root, record)
    return names or list(canaries)


SING_AT_COMMIT = """\
import sys
from pathlib import Path
import hmmtf
from ledger.canaries import CommandLine, record_baselines
record_baselines(Path("."), names=sys.argv[1:], command_line=CommandLine(hmmtf.main, hmmtf.build_parser))
"""
"""What :func:`record_baselines_at` runs in the worktree: the present ledger's recorder with that
commit's command line (``hmmtf`` a module or a package: both have ``main`` and ``build_parser``)."""


def record_baselines_at(root: Path, commit: str, names: list[str]) -> list[str]:
    """Record the baselines of the canaries ``names`` at ``commit``'s producers on this machine, with
    the present ledger: what a baseline recorded on another processor needs when its numbers do not
    hold on this one (docs/ledger.md, "Processors, measured"). In a temporary worktree of ``commit``
    whose ``ledger/`` is HEAD's (committed there, so the recorder's clean-tree rule holds), each
    canary is sung with that commit's command line in a process of its own; then
    :func:`merge_baselines` puts the numbers into this record as the baseline of ``commit``."""
    unknown = sorted(set(names) - set(CANARIES))
    if not names or unknown:
        raise ValueError(f"--record-canaries: {unknown or names}; expected names of {sorted(CANARIES)} with --at")
    found = git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if found.returncode:
        raise ValueError(f"--at: {commit!r} is not a commit of this repository; expected the commit of the baseline "
                         f"to record again")
    full, head = found.stdout.strip(), _git_out(root, "rev-parse", "HEAD")
    with tempfile.TemporaryDirectory(prefix="canaries-at-") as folder:
        tree = Path(folder) / "tree"
        _git_out(root, "worktree", "add", "--detach", str(tree), full)
        try:
            _git_out(tree, "checkout", head, "--", "ledger")
            _git_out(tree, "-c", "user.name=hmmtf ledger", "-c", "user.email=ledger@localhost", "commit", "--quiet",
                     "--allow-empty", "-m", f"{full[:7]}'s producers with the ledger of {head[:7]}")
            temporary = _git_out(tree, "rev-parse", "HEAD")
            environment = {**os.environ, "PYTHONPATH": str(tree)}
            done = subprocess.run([sys.executable, "-c", SING_AT_COMMIT, *names], cwd=tree, capture_output=True,
                                  text=True, env=environment)
            if done.returncode:
                said = done.stderr.strip().splitlines()
                raise LedgerError(f"--at {commit}: the canaries {names} failed there" + (f": {said[-1]}" if said else ""))
            sung = load_record(tree)
        finally:
            _git_out(root, "worktree", "remove", "--force", str(tree))
    record = load_record(root)
    merge_baselines(record, sung, full, temporary, names)
    write_record(root, record)
    return names


def _git_out(root: Path, *arguments: str) -> str:
    """``git ARGUMENTS`` in ``root``: its output, or :class:`LedgerError` naming the command."""
    done = git(root, *arguments)
    if done.returncode:
        raise LedgerError(f"`git {' '.join(arguments)}` failed in {root}: {done.stderr.strip()}")
    return done.stdout.strip()


def merge_baselines(record: dict, sung: dict, commit: str, temporary: str, names: list[str]) -> None:
    """Make the baselines ``sung`` recorded at the temporary commit ``temporary`` the baselines of
    ``commit`` in ``record``: its numbers, canary digest and environment replace those of an existing
    baseline of ``commit`` (whose settings are kept: the present ledger reads fewer of an old
    commit's modules, and settings are compared only where both sides have them), or make a new
    one. The record's verification of each canary is dropped, since it was judged against the old
    numbers: the next ``hmmtf ledger`` sings the present code against the new ones."""
    for name in names:
        new = next(entry for entry in sung["baselines"][name] if entry["commit"] == temporary)
        record["songs"][new["song"]] = sung["songs"][new["song"]]
        entries = record["baselines"].setdefault(name, [])
        old = next((entry for entry in entries if entry["commit"] == commit), None)
        if old is None:
            entries.append({**new, "commit": commit})
        else:
            old.update(song=new["song"], canary=new["canary"], environment=new["environment"])
            old.pop("numbers", None)
        record["verified"].pop(name, None)


def _settings_that_differ(then: dict[str, str], now: dict[str, str], names: set[str]) -> list[str]:
    """The settings both ``then`` and ``now`` have whose values differ, among those a result naming
    ``names`` uses: every plain one, and a dict's entry when the result names its key. A constant
    that one side lacks was added or removed with the code that reads it, which the digest judges."""
    def used(entry: str) -> bool:
        keyed = re.fullmatch(r"[A-Z0-9_]+\[(.*)\]", entry)
        return keyed is None or keyed.group(1) in names
    return sorted(entry for entry in set(then) & set(now) if used(entry) and then[entry] != now[entry])


class CanaryBook:
    """The judge :func:`ledger.provenance.freshness` asks about a result whose producers changed:
    a canary vouches when its numbers now agree with a baseline's at a commit where the result was
    fresh, and the settings the result names are unchanged (module docstring). Each canary runs at
    most once (``rerun``: always, else only when its record's verification is not of the present
    code), through ``command_line`` (None: from the record only)."""

    def __init__(self, root: Path, results: tuple[Result, ...] = RESULTS, rerun: bool = False,
                 canaries: dict[str, Canary] | None = None, command_line: CommandLine | None = None) -> None:
        self.root, self.results, self.rerun, self.command_line = root, results, rerun, command_line
        self.canaries = CANARIES if canaries is None else canaries
        self.record = load_record(root)
        self.sung: dict[str, dict] = {}
        self.ran: set[str] = set()

    def now(self, name: str, baseline: dict) -> dict:
        """The canary's record for the present code, with whether it agrees with ``baseline``: from
        the record's verification when it is of this code and canary and judged that baseline, else
        by running it (judged against each of its baselines)."""
        canary = self.canaries[name]
        kept = self.sung.get(name) or self.record["verified"].get(name)
        code = code_now(self.root, canary, self.results) if name not in self.sung else self.sung[name]["code"]
        if (kept is None or kept["code"] != code or kept.get("canary") != canary_digest(canary)
                or kept.get("comparison") != comparison_digest(canary)
                or baseline["commit"] not in kept.get("disagreement", {}) or (self.rerun and name not in self.ran)):
            song, sung = sing(canary, self.root, self.command_line, self.results)
            kept = _verification(code, sung, canary, _agreement(self.record, name, song, canary.tolerance))
            self.ran.add(name)
        self.sung[name] = kept
        return kept

    def __call__(self, result: Result, recorded: Recorded, names: set[str]) -> Vouch | None:
        if result.canary is None:
            return None
        name = result.canary
        baseline = self._baseline(name, result, recorded, names)
        if baseline is None:
            return Vouch(name, False, f"canary {name} has no baseline at a commit where this result was fresh "
                                      f"(hmmtf ledger --record-canaries at the commit that made it)")
        where = f"canary {name} (baseline {baseline['commit'][:7]})"
        if baseline["canary"] != canary_digest(self.canaries[name]):
            return Vouch(name, False, f"{where} was recorded by another version of the canary (its run, outputs or "
                                      "tolerance): record a baseline again where the result is fresh")
        now = self.now(name, baseline)
        differs = now["disagreement"][baseline["commit"]]
        if differs is not None:
            return Vouch(name, False, f"{where} differs: the numbers moved ({differs})")
        differ = _settings_that_differ(baseline["settings"], now["settings"], names)
        if differ:
            return Vouch(name, False, f"{where}: full-size settings changed: {', '.join(differ[:6])}")
        return Vouch(name, True, f"verified by {where} within rtol {self.canaries[name].tolerance.rtol:g}, atol "
                                 f"{self.canaries[name].tolerance.atol:g}; blind to: {self.canaries[name].blind_to}; "
                                 f"{COMMON_BLIND_SPOTS}")

    def _baseline(self, name: str, result: Result, recorded: Recorded, names: set[str]) -> dict | None:
        """The newest baseline of ``name`` at a commit whose producers of ``result`` (a result naming
        ``names``) compute what they computed at the recorded commit."""
        for baseline in reversed(self.record["baselines"].get(name, [])):
            try:
                if not changed_producers(self.root, result.producers, recorded.commit, baseline["commit"], names):
                    return baseline
            except GitUnavailable:
                continue
        return None
