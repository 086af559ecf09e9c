"""Every JSON the project writes is strict JSON (issue 53): each ``json.dump`` / ``json.dumps`` call
of a module under the architecture map's ``SOURCES`` passes ``allow_nan=False``, so that a NaN or an
infinity raises ValueError at the writer instead of writing ``NaN`` / ``Infinity``, which strict
readers refuse. A value that is not finite by design goes through :func:`bounds.serialize.to_json`
and is written as the string ``float`` reads back: ``hmmtf main``'s infinite smallest C as "inf"
(its readers, the ledger and the figures, read that and the Infinity of reports written before
alike), the analysis report's undefined shuffle values as "nan". The committed result files themselves are checked by
``tests/test_ledger.py::test_every_committed_json_is_strict_json``."""
import ast
import json
import math
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from bounds import figures
from bounds.serialize import INFINITY, NOT_A_NUMBER, to_json
from bounds.verify import write_report
from empirical.analysis.report import summarise_shuffle
from ledger.architecture import _aliases, _dotted, python_files
from ledger.canaries import _canonical
from ledger.claims import Verdict
from ledger.numbers import sig
from ledger.outcomes import judge
from ledger.registry import all_claims
from ledger.theory import REPORT

ROOT = Path(__file__).resolve().parents[1]

JSON_WRITERS = frozenset({"json.dump", "json.dumps"})

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
    loose = [loose_writer_message(call) for call in project_json_calls() if not call.strict]
    assert loose == []


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


def test_a_value_that_is_not_finite_is_written_as_the_string_float_reads_back():
    written = to_json({"C": math.inf, "low": -math.inf, "undefined": [0.5, math.nan], "none": None})
    assert written == {"C": INFINITY, "low": "-inf", "undefined": [0.5, NOT_A_NUMBER], "none": None}
    read = json.loads(json.dumps(written, allow_nan=False))
    assert float(read["C"]) == math.inf and float(read["low"]) == -math.inf and math.isnan(float(read["undefined"][1]))


def test_an_undefined_shuffle_value_is_written_as_strict_json_that_the_canary_reads_as_before():
    """The analysis report's shuffle test is NaN on a prompt whose logits have no spread
    (``summarise_shuffle``). It is written as the string "nan", and the canary's canonical form of
    that report equals the canonical form of the report written before issue 53 (the token NaN), so
    the analyze canary's baselines still vouch."""
    changes = {"1": torch.tensor([[0.5, 0.25], [math.nan, math.nan], [0.75, math.nan]], dtype=torch.float64)}
    summary = summarise_shuffle(changes)
    assert math.isnan(summary["1"]["per_prompt"][1]) and summary["1"]["prompts"] == 2
    strict = json.dumps(to_json(summary), allow_nan=False)
    assert '"nan"' in strict and "NaN" not in strict
    before = json.dumps(summary)  # how the report was written before: the token NaN
    assert "NaN" in before
    assert _canonical(json.loads(strict), "<workshop>") == _canonical(json.loads(before), "<workshop>")


def test_an_infinite_smallest_C_is_written_as_the_string_inf_and_a_raw_nan_is_refused(tmp_path):
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
