"""Canaries: a small run of the code that makes a kind of result, so that a change of its producers
that leaves every number as it was (a move, a merged twin, a faster kernel with the same bits) keeps
the result fresh, and a change that moves a number does not (docs/ledger.md, "Canaries").

A canary runs the result's own ``hmmtf`` command in-process at a tiny size, with fixed seeds, on a
tiny network trained for it (:class:`Workshop`), and hashes what the command wrote: every JSON
number bit for bit (``float.hex``), without what says where, when and how fast it ran
(:data:`VOLATILE_KEY`). Beside the outputs it records the **full-size settings** the tiny run
overrides or never reaches: the command's option defaults, and every module-level constant of the
result's producers (``CEILING_SETTINGS``, ``FIT_PROMPTS``, ...; a dict of named entries, such as
``MIXTURE_SPECS``, one entry per name, compared only where the result's JSON names it, so that a
change of the ``paper`` mixture leaves results on other mixtures fresh).

Why this is sound. Let a result be made at commit C. ``hmmtf ledger`` recorded the canary's digest
at a commit B, from a clean tree (:func:`record_baselines`). If the result's producers compute the
same at B as at C (:func:`ledger.provenance.changed_producers`: their syntax trees across moves),
the digest of B is the digest of the code that made the result. If the canary now gives that digest
(within the key names B's outputs used: a field the code now writes besides is not in the result),
and the full-size settings the result names are those of B, the code now computes, on everything
the canary exercises, bit for bit what it computed then. The result is then fresh, "verified by
canary"; otherwise stale. A canary whose own code changed is not the same witness: its source
(without its imports, which a move rewrites) is part of the digest.

What a canary cannot see (each canary says which apply, and the ledger prints it): code paths a
tiny run does not take (CUDA, bf16 on a GPU, ``torch.compile``, several processes, sizes past a
blocking or chunking threshold); inputs it does not read (the committed checkpoints and run
folders a result was measured on: the canary trains its own tiny network); timings; figures.
And it compares bits on one software stack: a digest recorded under other versions of Python,
numpy or torch does not vouch (:func:`environment`). Nor, in practice, on another processor: torch
picks its CPU kernels by instruction set (AVX2, AVX512), and the ``ngram-verdict`` canary's float
sums differ in their last bits between the two. A verification of the present code is kept across
processors (its record says which one ran it), but a canary run on a processor of another kernel
set than its baseline's cannot match it: the record notes the set (``cpu``), and the message says
when that is the cause, so that the baseline is recorded again at its commit on this processor.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import io
import json
import math
import platform
import re
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ledger.documents import LedgerError
from ledger.provenance import (GitUnavailable, Recorded, Vouch, changed_producers, code_fingerprint, git,
                               matches_producers, module_name)
from ledger.results import RESULTS, Result

RECORD = "ledger/canaries.json"
"""The committed record: each canary's baselines (digest and settings at a commit) and its last
verification (digest at the producers' present code)."""

VOLATILE_KEY = re.compile(r"command|git|git_commit|git_dirty|commit|torch|numpy|python|device|num_threads|threads|"
                          r"cpus|backend|verbose|debug|cached|host|hostname|platform|load.*|.*_seconds|seconds|.*_s|"
                          r".*_time|.*per_minute|.*per_second|.*per_s|smc_over_exact_filter")
"""JSON keys, and command options, that say where, when, on what, how chattily and how fast a
command ran (``smc_over_exact_filter``: a ratio of two timings), not what it computed: left out of
a canary's digest (matched whole)."""

REPOSITORY = Path(__file__).resolve().parents[1]
"""The checkout the canaries run in: its path in an output is read as ``<repository>``."""

MODULE_PATH = re.compile(r"\b(?:hmm|construction|bounds|empirical|ledger|benchmarks)(?:[./][A-Za-z_]\w*)*[./]([A-Za-z_]\w*)")
"""A dotted module name or file path of the project inside a JSON string (``empirical.yardsticks.
hand_built.served_rows``): read as its last name only, so that a description naming where the code
lives does not change the digest when the code moves."""


class Workshop:
    """The canaries' folder, and the tiny network and learning-curve run that several share (each
    made once, on first use, by ``hmmtf train`` and ``hmmtf curve`` at the ``tiny`` preset)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._made: set[str] = set()

    def path(self, name: str) -> str:
        return str(self.folder / name)

    def once(self, name: str, argv: list[str]) -> str:
        """``hmmtf ARGV``, run the first time ``name`` is asked for; the folder ``name``."""
        if name not in self._made:
            run_hmmtf(argv)
            self._made.add(name)
        return self.path(name)

    def checkpoint(self) -> str:
        """A tiny RoFormer's checkpoint: 6 steps of the ``tiny`` preset."""
        run = self.once("run", ["train", "--preset", "tiny", "--steps", "6", "--warmup-steps", "2",
                                "--run-dir", self.path("run"), "--threads", "1", "--no-progress"])
        return f"{run}/checkpoint"


def _quietly(command: str, call: Callable[[], int | None]) -> None:
    """``call()``, its printing held back; a nonzero exit raises :class:`LedgerError` naming ``command`` and
    the last line it printed on stderr."""
    errors = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
        code = call()
    if code:
        said = errors.getvalue().strip().splitlines()
        raise LedgerError(f"canary: `{command}` exited {code}" + (f": {said[-1]}" if said else ""))


def run_hmmtf(argv: list[str]) -> None:
    """``hmmtf ARGV`` in this process."""
    import hmmtf
    _quietly(f"hmmtf {' '.join(argv)}", lambda: hmmtf.main(argv))


def run_script(path: str, argv: list[str]) -> None:
    """The ``main(argv)`` of the script at ``path`` (from the repository root: a benchmark), in this process."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, REPOSITORY / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _quietly(f"python {path} {' '.join(argv)}", lambda: module.main(argv))


@dataclass(frozen=True)
class Canary:
    """``run`` makes, in the workshop, the files ``outputs`` (paths in it) at a tiny size;
    ``subcommand``: the command whose option defaults are full-size settings (None: no ``hmmtf``
    command); ``blind_to``: what it cannot see, beyond every canary's blind spots."""

    name: str
    run: Callable[[Workshop], None]
    outputs: tuple[str, ...]
    subcommand: str | None
    blind_to: str


def _evaluate(shop: Workshop) -> None:
    run_hmmtf(["evaluate", shop.checkpoint(), "--out", shop.path("evaluate"), "--num-prompts", "8",
               "--hand-built-prompts", "2", "--fresh-tasks", "4", "--reference-tasks", "8", "--ceiling-particles", "4",
               "--ceiling-moves", "1", "--threads", "1"])


def _competence_bound(shop: Workshop) -> None:
    run_hmmtf(["evaluate", shop.checkpoint(), "--out", shop.path("competence-bound"), "--num-prompts", "4",
               "--hand-built-prompts", "0", "--fresh-tasks", "4", "--reference-tasks", "8", "--competence-prompts", "6",
               "--ceiling-backend", "collapsed", "--ceiling-particles", "8", "--ceiling-replicates", "2",
               "--ceiling-burn-in-steps", "2", "--threads", "1"])


def _analyze(shop: Workshop) -> None:
    run_hmmtf(["analyze", shop.checkpoint(), "--out", shop.path("analyze"), "--sections", "shuffle", "probes",
               "offsets", "patching", "--probe-train-prompts", "24", "--probe-test-prompts", "12", "--shuffle-prompts",
               "8", "--hand-built-prompts", "4", "--max-distance", "2", "--max-offset", "3", "--centroid-prompts", "32",
               "--patching-prompts", "8", "--batch-size", "8", "--probe-tasks", "4", "--threads", "1"])


def _heads(shop: Workshop) -> None:
    run_hmmtf(["heads", shop.checkpoint(), "--out", shop.path("heads"), "--prompts", "8", "--reference-prompts", "8",
               "--fresh-tasks", "4", "--random-draws", "2", "--top-heads", "1", "--ceiling-particles", "4",
               "--threads", "1"])


def _klmap(shop: Workshop) -> None:
    run_hmmtf(["klmap", shop.checkpoint(), "--out", shop.path("klmap"), "--prompts", "4", "--fresh-tasks", "4",
               "--gd-steps", "2", "--ceiling-particles", "4", "--threads", "1"])


def _beliefs(shop: Workshop) -> None:
    run_hmmtf(["beliefs", shop.checkpoint(), "--out", shop.path("beliefs"), "--prompts", "8", "--fresh-tasks", "4",
               "--batch-size", "4", "--ceiling-particles", "4", "--threads", "1"])


def _ngram_verdict(shop: Workshop) -> None:
    run_hmmtf(["ngram-verdict", shop.checkpoint(), "--out", shop.path("ngram-verdict"), "--prompts", "16",
               "--fresh-tasks", "4", "--threads", "1"])


def _verification(shop: Workshop) -> None:
    run_hmmtf(["main", "--gammas", "0.5", "0.9", "--ranks", "2", "--concentrations", "1.0", "--seeds", "2",
               "--t2-gammas", "0.8", "--t2-sequences", "50", "--states", "3", "--tokens", "4", "--max-memory", "6",
               "--sequences", "100", "--L", "2", "--T", "4", "--demos", "3", "--demo-length", "8", "--test-length",
               "5", "--prompts", "1", "--sweep-prompts", "2", "--threads", "1", "--workers", "1", "--no-progress",
               "--out", shop.path("verification")])


def _calibrate(shop: Workshop) -> None:
    run_hmmtf(["calibrate", "--preset", "tiny", "--concentrations", "0.2", "1.0", "--num-prompts", "16",
               "--out", shop.path("calibrate")])


def _markov_sweep(shop: Workshop) -> None:
    run_hmmtf(["markov-sweep", "--out", shop.path("markov-sweep"), "--p-values", "0.9", "--q-values", "0.8",
               "--seeds", "1", "--steps", "12", "--warmup-steps", "2", "--architectures", "1-layer-untied", "--inits",
               "lowrank-anti", "--init-rank", "2", "--workers", "1", "--no-progress"])


def _markov_incontext(shop: Workshop) -> None:
    run_hmmtf(["markov-incontext", "--out", shop.path("markov-incontext"), "--runs", shop.path("markov-incontext-runs"),
               "--steps", "10", "--warmup-steps", "2", "--checkpoint-every", "10", "--eval-sequences", "16",
               "--sequence-length", "24", "--ablation-draws", "2", "--workers", "1"])


def _signal(shop: Workshop) -> None:
    run_hmmtf(["signal", "--families", "S 4, T 0.1, O 0.1", "--num-prompts", "4", "--fresh-tasks", "4",
               "--particles", "4", "--moves", "1", "--threads", "1", "--out", shop.path("signal")])


def _family_calibration(shop: Workshop) -> None:
    run_hmmtf(["family-calibration", "--concentrations", "0.01", "0.1", "--num-prompts", "4", "--fresh-tasks", "4",
               "--threads", "1", "--out", shop.path("family-calibration")])


def _curves(shop: Workshop) -> None:
    curve = shop.once("curve", ["curve", "--preset", "tiny", "--steps", "20", "--warmup-steps", "2", "--every", "10",
                                "--curve-prompts", "4", "--fresh-tasks", "4", "--ceiling-particles", "4",
                                "--run-dir", shop.path("curve"), "--threads", "1"])
    run_hmmtf(["curves", curve, "--title", "canary", "--out", shop.path("curves")])


def _plateau(shop: Workshop) -> None:
    _curves(shop)
    run_hmmtf(["plateau", "--arm", "plain", shop.path("curve"), "--baseline", "plain", "--out", shop.path("plateau")])


def _ladder(shop: Workshop) -> None:
    run_hmmtf(["ladder", str(REPOSITORY / "figures/ladder"), "--out", shop.path("ladder")])


def _prior_predictive(shop: Workshop) -> None:
    run_script("benchmarks/bench_prior_predictive.py", ["--preset", "tiny", "--prompts", "2", "--fresh-tasks", "4",
                                                        "--chains", "2", "--out", shop.path("prior_predictive.json")])


def _torch_smc(shop: Workshop) -> None:
    run_script("benchmarks/bench_prior_predictive.py", ["--preset", "tiny", "--prompts", "2", "--fresh-tasks", "4",
                                                        "--chains", "0", "--backend", "torch", "--device", "cpu",
                                                        "--out", shop.path("torch_smc.json")])
    _without_timing_ratios(shop.path("torch_smc.json"))


def _ceiling_bounds(shop: Workshop) -> None:
    """Run from the workshop, with the network named by its path there: the output keys each network by
    the path it was given, and :func:`_canonical` rewrites values, not keys."""
    checkpoint = str(Path(shop.checkpoint()).relative_to(shop.folder))
    with contextlib.chdir(shop.folder):
        run_script("benchmarks/ceiling_bounds.py", ["--preset", "tiny", "--prompts", "4", "--fresh-tasks", "8",
                                                    "--replicates", "2", "--particles", "8", "--burn-in-steps", "2",
                                                    "--work", shop.path("ceiling-bounds-work"), "--models",
                                                    checkpoint, "--out", shop.path("ceiling_bounds.json")])


def _without_timing_ratios(path: str) -> None:
    """Rewrite the bench's JSON at ``path`` without its roofline's ``fraction_of_peak`` and
    ``binding``: ratios of timings (the SMC's rates over the device's measured peaks, and the larger
    of the two), which :data:`VOLATILE_KEY`'s names do not catch and which moved the digest between
    two runs of the same code."""
    result = json.loads(Path(path).read_text())
    for key in ("fraction_of_peak", "binding"):
        del result["rate"]["roofline"][key]
    Path(path).write_text(json.dumps(result, allow_nan=False))


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
           "the committed points)"),
    Canary("prior-predictive", _prior_predictive, ("prior_predictive.json",), None,
           "the rate of the SMC (a timing), and its convergence at the paper family's size"),
    Canary("ceiling-bounds", _ceiling_bounds, ("ceiling_bounds.json",), None,
           "the committed checkpoints the bound scores (a tiny network trained here stands in for them), and the "
           "128-state sizes (it runs 2 replicates of 8 particles on 4 prompts of the tiny preset)"),
    Canary("torch-smc", _torch_smc, ("torch_smc.json",), None,
           "the torch SMC on CUDA and in float32 (it runs on the CPU in float64), its rate and roofline (timings), "
           "and its convergence at the sizes of the committed runs"),
)}
"""Every canary, by the name a :class:`~ledger.results.Result` gives as its ``canary``."""

COMMON_BLIND_SPOTS = ("code paths a tiny run does not take (CUDA, bf16 on a GPU, torch.compile, several processes, "
                      "sizes past a blocking threshold); timings; figures; digests made under other versions of "
                      "Python, numpy or torch")


def same_software(first: dict[str, str], second: dict[str, str]) -> bool:
    """Whether two :func:`environment` records are one stack for the bits: the same numpy and torch,
    and the same Python up to its patch release (which changes no arithmetic)."""
    def minor(version: str) -> str:
        return ".".join(version.split(".")[:2])
    return (first["numpy"] == second["numpy"] and first["torch"] == second["torch"]
            and minor(first["python"]) == minor(second["python"]))


def environment() -> dict[str, str]:
    """The software stack the bits depend on, and the CPU kernel set torch dispatches to (``cpu``)."""
    import numpy
    import torch
    return {"python": platform.python_version(), "numpy": numpy.__version__, "torch": torch.__version__,
            "cpu": torch.backends.cpu.get_cpu_capability()}


def _canonical(value, workshop: str):
    """``value`` (parsed JSON) without :data:`VOLATILE_KEY` keys, with floats as ``float.hex``, the
    workshop's and the repository's paths as ``<workshop>`` and ``<repository>``, and the project's
    module names as their last name (:data:`MODULE_PATH`)."""
    if isinstance(value, dict):
        return {key: _canonical(item, workshop) for key, item in value.items() if not VOLATILE_KEY.fullmatch(key)}
    if isinstance(value, list):
        return [_canonical(item, workshop) for item in value]
    if isinstance(value, float):
        return value.hex() if math.isfinite(value) else repr(value)
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
    """The canary's own code: its function and the module's helpers and constants it names, without
    imports (a move rewrites them, and what they import is judged by the digest)."""
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
              inspect.getsource(option_defaults),
              inspect.getsource(_canonical)]
    return _without_imports("\n".join(parts))


def option_defaults(subcommand: str) -> dict[str, str]:
    """The default of every option of ``hmmtf SUBCOMMAND`` that can change a number (not
    :data:`VOLATILE_KEY`'s), as text."""
    import hmmtf
    parser = hmmtf.build_parser(subcommand)
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


def settings(canary: Canary, modules: list[str]) -> dict[str, str]:
    """The full-size settings: the option defaults of its command (``option:NAME``) and the
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
    if canary.subcommand:
        for option, default in option_defaults(canary.subcommand).items():
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


def _keys_of(value) -> set[str]:
    """Every key of the parsed JSON ``value``, at any depth."""
    if isinstance(value, dict):
        return set(value).union(*(_keys_of(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys_of(item) for item in value))
    return set()


def _pruned(value, keys: set[str]):
    """``value`` without the dict entries whose key is not in ``keys``, at any depth."""
    if isinstance(value, dict):
        return {key: _pruned(item, keys) for key, item in value.items() if key in keys}
    if isinstance(value, list):
        return [_pruned(item, keys) for item in value]
    return value


class Song(NamedTuple):
    """What a canary gave: its canonical ``outputs`` and its command's option ``defaults``."""

    canary: Canary
    outputs: dict
    defaults: dict[str, str]

    def keys(self) -> list[str]:
        """The key names the outputs use, and the options (``option:NAME``)."""
        return sorted(_keys_of(self.outputs) | {f"option:{name}" for name in self.defaults})

    def digest(self, keys: set[str] | None = None) -> str:
        """The digest of the outputs and defaults (only those under ``keys``, a baseline's: what a
        later version adds is not what the result holds), and the canary's own code."""
        outputs = self.outputs if keys is None else _pruned(self.outputs, keys)
        defaults = {name: value for name, value in self.defaults.items() if keys is None or f"option:{name}" in keys}
        return _digest({"outputs": outputs, "defaults": defaults, "code": _canary_source(self.canary)})


def sing(canary: Canary, root: Path, results: tuple[Result, ...] = RESULTS) -> tuple[Song, dict]:
    """Run ``canary`` now: what it gave, and its record: digest (outputs, option defaults, own
    code), the key names it used, its settings and the software it ran on."""
    modules = [module_name(path) for path in producer_files(root, canary.name, results)
               if path.endswith(".py") and not path.startswith(("benchmarks/", "tests/"))]
    with tempfile.TemporaryDirectory(prefix=f"canary-{canary.name}-") as folder:
        shop = Workshop(Path(folder))
        canary.run(shop)
        outputs = {output: _canonical(json.loads((shop.folder / output).read_text()), folder)
                   for output in canary.outputs}
    song = Song(canary, outputs, option_defaults(canary.subcommand) if canary.subcommand else {})
    return song, {"digest": song.digest(), "keys": song.keys(), "settings": settings(canary, modules),
                  "environment": environment()}


def load_record(root: Path) -> dict:
    path = root / RECORD
    return json.loads(path.read_text()) if path.is_file() else {"baselines": {}, "verified": {}}


def write_record(root: Path, record: dict) -> None:
    (root / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n")


def record_baselines(root: Path, results: tuple[Result, ...] = RESULTS, canaries: dict[str, Canary] | None = None,
                     names: list[str] | None = None) -> list[str]:
    """Run each canary (or those ``names``) at HEAD and add its digest as a baseline of HEAD's
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
        song, sung = sing(canary, root, results)
        baselines = [entry for entry in record["baselines"].get(name, []) if entry["commit"] != head]
        record["baselines"][name] = [*baselines, {"commit": head, **sung}]
        record["verified"][name] = {"code": code_now(root, canary, results), **sung,
                                    "within": {entry["commit"]: song.digest(set(entry["keys"]))
                                               for entry in record["baselines"][name]}}
        write_record(root, record)
    return names or list(canaries)


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
    a canary vouches when its digest now equals a baseline's at a commit where the result was
    fresh, and the settings the result names are unchanged (module docstring). Each canary runs at
    most once (``rerun``: always, else only when its record's verification is not of the
    present code)."""

    def __init__(self, root: Path, results: tuple[Result, ...] = RESULTS, rerun: bool = False,
                 canaries: dict[str, Canary] | None = None) -> None:
        self.root, self.results, self.rerun = root, results, rerun
        self.canaries = CANARIES if canaries is None else canaries
        self.record = load_record(root)
        self.sung: dict[str, dict] = {}
        self.ran: set[str] = set()

    def now(self, name: str, baseline: dict) -> dict:
        """The canary's record for the present code, with its digest ``within`` the key names of
        ``baseline``: from the record's verification when it is of this code and environment and
        has that digest, else by running it (the digest within each of its baselines' keys)."""
        canary = self.canaries[name]
        kept = self.sung.get(name) or self.record["verified"].get(name)
        code = code_now(self.root, canary, self.results) if name not in self.sung else self.sung[name]["code"]
        if (kept is None or kept["code"] != code or not same_software(kept["environment"], environment())
                or baseline["commit"] not in kept.get("within", {}) or (self.rerun and name not in self.ran)):
            song, sung = sing(canary, self.root, self.results)
            within = {entry["commit"]: song.digest(set(entry["keys"])) for entry in self.record["baselines"][name]}
            kept = {"code": code, **sung, "within": within}
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
        now = self.now(name, baseline)
        where = f"canary {name} (baseline {baseline['commit'][:7]})"
        if not same_software(baseline["environment"], now["environment"]):
            return Vouch(name, False, f"{where} was recorded under {baseline['environment']}, this is "
                                      f"{now['environment']}: its bits cannot be compared")
        if now["within"][baseline["commit"]] != baseline["digest"]:
            kernels = (baseline["environment"].get("cpu"), now["environment"].get("cpu"))
            if kernels[0] != kernels[1]:
                return Vouch(name, False, f"{where} differs, and it was recorded on a CPU of kernel set {kernels[0]} "
                                          f"(None: unrecorded), this one is {kernels[1]}: record the baseline again "
                                          f"here at its commit, else the numbers moved")
            return Vouch(name, False, f"{where} differs: the numbers moved")
        differ = _settings_that_differ(baseline["settings"], now["settings"], names)
        if differ:
            return Vouch(name, False, f"{where}: full-size settings changed: {', '.join(differ[:6])}")
        return Vouch(name, True, f"verified by {where}; blind to: {self.canaries[name].blind_to}; {COMMON_BLIND_SPOTS}")

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
