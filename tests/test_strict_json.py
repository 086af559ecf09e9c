"""Every JSON the project writes is strict JSON (issue 53): each ``json.dump`` / ``json.dumps`` call
of a module under the architecture map's ``SOURCES`` passes ``allow_nan=False``, so that a NaN or an
infinity raises ValueError at the writer instead of writing ``NaN`` / ``Infinity``, which strict
readers refuse. The calls not yet changed are listed, each with its reason, and each entry must
still excuse a call (the list only shrinks). ``hmmtf main``'s report writes an infinite smallest C
as the string "inf", and its readers (the ledger, the figures) read that and the Infinity of reports
written before alike. The committed result files themselves are checked by
``tests/test_ledger.py::test_every_committed_json_is_strict_json``."""
import ast
import json
import math
from pathlib import Path
from typing import NamedTuple

import pytest

from bounds import figures
from bounds.serialize import to_json
from bounds.verify import write_report
from ledger.architecture import _aliases, _dotted, python_files
from ledger.claims import Verdict
from ledger.numbers import sig
from ledger.outcomes import judge
from ledger.registry import all_claims
from ledger.theory import REPORT

ROOT = Path(__file__).resolve().parents[1]

JSON_WRITERS = frozenset({"json.dump", "json.dumps"})

TIMING_PRODUCER = "timing-benchmark producer: changed when the timings are re-measured on idle cores"
UNDEFINED_SHUFFLE = ("the analysis report: the shuffle test's per-prompt and per-head values are NaN where a prompt's "
                     "logits have no spread (empirical/analysis/report.summarise_shuffle; at the canaries' tiny "
                     "sizes, not in the committed reports); to be written as null with new baselines of the analyze "
                     "canary")
CANARY_WITNESS = ("the torch SMC canary's own code, part of its digest (ledger/canaries.py, _canary_source): "
                  "changed with a new baseline of that canary; it rewrites the canary's scratch file only")

KNOWN_LOOSE_WRITERS = {
    ("benchmarks/bench_collapsed_smc.py", "main"): TIMING_PRODUCER,
    ("benchmarks/bench_hand_built.py", "main"): TIMING_PRODUCER,
    ("benchmarks/bench_hmm.py", "main"): TIMING_PRODUCER,
    ("benchmarks/bench_prior_predictive.py", "main"): TIMING_PRODUCER,
    ("ledger/canaries.py", "_without_timing_ratios"): CANARY_WITNESS,
    ("hmmtf/commands/analyze.py", "_analyze_into"): UNDEFINED_SHUFFLE,
    ("empirical/reproduce/record.py", "write_json"): UNDEFINED_SHUFFLE,
}
"""(file, enclosing function) of the writers still without ``allow_nan=False``, and why: a code
change to a producer of a committed timing makes that timing stale, and it can only be measured
again on idle cores (ledger/results.py names each timing's producers)."""


class JsonCall(NamedTuple):
    """One ``json.dump`` / ``json.dumps`` call: where it is, in which function (dotted through the
    enclosing classes and functions, ``<module>`` at the top level), and whether it refuses NaN."""

    file: str
    line: int
    function: str
    strict: bool


def _refuses_nan(call: ast.Call) -> bool:
    return any(keyword.arg == "allow_nan" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False
               for keyword in call.keywords)


def json_calls(source: str, file: str) -> list[JsonCall]:
    """Every ``json.dump`` / ``json.dumps`` call of the Python ``source`` (however ``json`` or the
    function was imported), in the order of the file."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    calls: list[JsonCall] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, child.name if function == "<module>" else f"{function}.{child.name}")
                continue
            if isinstance(child, ast.Call) and _dotted(child.func, aliases) in JSON_WRITERS:
                calls.append(JsonCall(file, child.lineno, function, _refuses_nan(child)))
            visit(child, function)

    visit(tree, "<module>")
    return sorted(calls, key=lambda call: call.line)


def project_json_calls() -> list[JsonCall]:
    """:func:`json_calls` of every module under the architecture map's ``SOURCES``."""
    return [call for path in python_files(ROOT)
            for call in json_calls(path.read_text(), path.relative_to(ROOT).as_posix())]


def loose_writer_message(call: JsonCall) -> str:
    return (f"{call.file}:{call.line} ({call.function}): a json.dump/json.dumps without allow_nan=False writes NaN "
            f"and Infinity, which are not JSON; pass allow_nan=False")


def test_every_json_writer_refuses_nan_and_infinity():
    loose = [loose_writer_message(call) for call in project_json_calls()
             if not call.strict and (call.file, call.function) not in KNOWN_LOOSE_WRITERS]
    assert loose == []


def test_every_known_loose_writer_is_still_there():
    """A writer given ``allow_nan=False`` (or gone) leaves the list: it only shrinks."""
    loose = {(call.file, call.function) for call in project_json_calls() if not call.strict}
    excusing_nothing = [f"{file} ({function}): no json.dump/json.dumps without allow_nan=False there any more; "
                        f"remove it from KNOWN_LOOSE_WRITERS" for file, function in KNOWN_LOOSE_WRITERS
                        if (file, function) not in loose]
    assert excusing_nothing == []


def test_the_scanner_finds_a_writer_without_the_keyword_however_json_is_imported():
    planted = (
        "import json\n"
        "from json import dumps as text_of\n"
        "def save(path, value):\n"
        "    path.write_text(json.dumps(value, indent=1))\n"
        "class Store:\n"
        "    def put(self, handle, value):\n"
        "        json.dump(value, handle, allow_nan=False)\n"
        "        handle.write(text_of(value, allow_nan=True))\n"
        "print(json.loads('{}'), json.dumps({}, allow_nan=False))\n"
    )
    assert json_calls(planted, "planted.py") == [
        JsonCall("planted.py", 4, "save", strict=False),
        JsonCall("planted.py", 7, "Store.put", strict=True),
        JsonCall("planted.py", 8, "Store.put", strict=False),
        JsonCall("planted.py", 9, "<module>", strict=True),
    ]
    assert loose_writer_message(json_calls(planted, "planted.py")[0]) == (
        "planted.py:4 (save): a json.dump/json.dumps without allow_nan=False writes NaN and Infinity, which are "
        "not JSON; pass allow_nan=False")


def test_an_infinite_smallest_C_is_written_as_the_string_inf_and_a_nan_is_refused(tmp_path):
    report = to_json({"C": math.inf, "smallest_C": [0.2, math.inf], "decay_rate": None})
    assert report == {"C": "inf", "smallest_C": [0.2, "inf"], "decay_rate": None}
    write_report(report, tmp_path / "report.json")
    assert json.loads((tmp_path / "report.json").read_text()) == report
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_report({"C": math.nan}, tmp_path / "nan.json")
    assert not (tmp_path / "nan.json").exists()


@pytest.mark.parametrize("written", ["inf", math.inf], ids=["strict", "Infinity-before-issue-53"])
def test_the_ledger_reads_an_infinite_smallest_C_in_either_form(tmp_path, written):
    report = json.loads((ROOT / REPORT).read_text())
    row = next(row for row in report["table"] if row["term"] == "Lemma 1 smallest C (stationary prior) <= fitted C")
    row["measured"], row["holds"] = written, row["units"] - 1
    (tmp_path / REPORT).parent.mkdir(parents=True)
    (tmp_path / REPORT).write_text(json.dumps(report))  # math.inf as the token Infinity, as reports were written
    outcome = judge(next(claim for claim in all_claims() if claim.id == "L1-bound"), tmp_path).outcome
    assert outcome.verdict is Verdict.FAILS
    assert f"worst C_i inf vs C {sig(row['bound'])} (stationary prior)" in outcome.number


@pytest.mark.parametrize("written", ["inf", math.inf], ids=["strict", "Infinity-before-issue-53"])
def test_the_figures_draw_an_infinite_fitted_C_in_either_form(tmp_path, written):
    entry = {
        "gamma_knob": 0.5, "gamma": 0.5, "rank": 2, "transition_concentration": 1.0, "half": "fit",
        "lemma1": {"stationary": {"errors": [1e-2, 1e-4, 1e-6], "decay_rate": 4.6, "decay_intercept": 0.0}},
    }
    report = {"lemma1": {"lengths": [1, 2, 3], "fits": {"stationary": {"C": written}}}, "suite": [entry]}
    figures.lemma1_decay(report, tmp_path / "lemma1_decay.png")
    assert (tmp_path / "lemma1_decay.png").stat().st_size > 0
