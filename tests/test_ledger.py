"""The claims ledger (ledger/, docs/ledger.md): the committed results pass its check, the pages are
what the results generate, a planted change in a result changes them, provenance in every form is
read, and a result older than its code, or without a commit, is reported."""
import collections
import dataclasses
import functools
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hmmtf
from copied_results import copy_results, plant
from ledger import generated
from ledger.blocks import block_body, replace_block
from ledger.check import generated_problems, result_problems, result_states, unregistered
from ledger.generated import first_difference
from ledger.ladder import (
    LADDER_MODEL,
    PAPER_SCALE_NETWORK,
    REGIME_MATRIX,
    REGIME_MODELS,
    RegimeModel,
    regime_claims,
    regime_matrix,
)
from ledger.claims import Claim, Outcome, Verdict
from ledger.documents import Doc, LedgerError
from ledger.outcomes import judge
from ledger.provenance import Recorded, Status, code_fingerprint, freshness, recorded_commit
from ledger.registry import SECTIONS, all_claims
from ledger.render import RESULTS_BLOCK, RESULTS_PAGE, anchor, claims_page, results_block
from ledger.results import RESULTS, Result, registered
from ledger.timings import POLL_SECONDS, remeasure, timing_argv, wait_for_idle

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def committed_results_block() -> str:
    """``results_block(ROOT)``, generated once per process: the committed results do not change
    while the suite runs (the tests that plant changes plant them in copies)."""
    return results_block(ROOT)


@functools.cache
def committed_claims_page() -> str:
    """``claims_page(ROOT)``, generated once per process (as :func:`committed_results_block`)."""
    return claims_page(ROOT)


@pytest.mark.long_running  # every result's producers across git history: about a minute of CPU
def test_check_passes_on_the_committed_results(capsys):
    code = hmmtf.main(["ledger", "--check"])
    assert code == 0, "hmmtf ledger --check failed:\n" + capsys.readouterr().out


def test_the_ledger_command_defaults_to_this_repository():
    """``hmmtf ledger`` without ``--root`` reads this checkout (its module lies two folders down)."""
    from hmmtf.commands import ledger as ledger_command
    assert ledger_command.ROOT == ROOT


def test_committed_pages_equal_what_the_committed_results_generate():
    assert generated.stale(ROOT) == [], "run hmmtf ledger"


def test_the_results_block_is_the_generated_one_and_round_trips():
    page = (ROOT / RESULTS_PAGE).read_text()
    assert block_body(page, RESULTS_BLOCK, RESULTS_PAGE) == committed_results_block()
    body = "a\n| b |"
    once = replace_block(page, RESULTS_BLOCK, body, RESULTS_PAGE)
    assert block_body(once, RESULTS_BLOCK, RESULTS_PAGE) == body
    assert replace_block(once, RESULTS_BLOCK, body, RESULTS_PAGE) == once
    assert replace_block(once, RESULTS_BLOCK, committed_results_block(), RESULTS_PAGE) == page


def _markdown_table(block: str, header_start: str) -> list[list[str]]:
    """The rows (header first, separator dropped) of the table in ``block`` whose header starts with ``header_start``."""
    lines = block.splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith(header_start))
    assert re.fullmatch(r"(\|---)+\|", lines[start + 1]), "a table's header is followed by its separator"
    table = [lines[start]] + list(itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:]))
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in table]


def _link(verdict: Verdict, claim_id: str) -> str:
    return f"[{verdict.value}](claims.md#{anchor(claim_id)})"


def test_the_results_matrix_has_a_row_per_regime_claim_and_a_column_per_network_then_the_paper_scale():
    models = (LADDER_MODEL, *REGIME_MODELS)
    header, *rows = _markdown_table(committed_results_block(), "| claim |")
    assert header[1:] == [model.name for model in models] + [PAPER_SCALE_NETWORK.name]
    claims = {model.name: {claim.id.removeprefix(f"{model.prefix}-"): claim for claim in regime_claims(model)}
              for model in models}
    templates = list(dict.fromkeys(template for by_template in claims.values() for template in by_template))
    assert [row[0].split(":", 1)[0] for row in rows] == [f"**{template}**" for template in templates]
    assert templates == list(REGIME_MATRIX.templates)
    outcomes = {claim.id: judge(claim, ROOT).outcome for claim in all_claims()}
    for template, row in zip(templates, rows):
        statements = {by_template[template].statement for by_template in claims.values() if template in by_template}
        assert row[0] == f"**{template}**: {statements.pop()}" and not statements, "one statement per row"
        *judged, paper_scale = row[1:]
        for model, cell in zip(models, judged):
            claim = claims[model.name].get(template)
            assert cell == ("—" if claim is None else _link(outcomes[claim.id].verdict, claim.id))
        measured = dict(PAPER_SCALE_NETWORK.measured).get(template)
        assert paper_scale == (_link(Verdict.UNTESTED, PAPER_SCALE_NETWORK.claim) if measured is None
                               else _link(outcomes[measured].verdict, measured))


def test_every_claim_is_in_the_results_once_linked_to_an_anchor_of_the_page_and_counted():
    block, page = committed_results_block(), committed_claims_page()
    linked = collections.Counter(re.findall(r"\]\(claims\.md#([a-z0-9-]+)\)", block))
    assert set(linked) <= set(re.findall(r'<a id="([a-z0-9-]+)"></a>', page))
    # the placeholder's claim: its own line among the other claims and every cell of the paper-scale column
    # but those a claim measured otherwise (which then appears there only)
    assert linked.pop(anchor(PAPER_SCALE_NETWORK.claim)) == (1 + len(REGIME_MATRIX.templates)
                                                            - len(PAPER_SCALE_NETWORK.measured))
    others = [claim for claim in all_claims() if claim.id != PAPER_SCALE_NETWORK.claim]
    assert linked == collections.Counter(anchor(claim.id) for claim in others)
    counts = re.search(r"(\d+) claims: ((?:\d+ [a-z ]+(?:, )?)+)\.", block)
    assert int(counts[1]) == len(all_claims()) == sum(int(part.split()[0]) for part in counts[2].split(", "))


def _paper_scale_model(name: str, prefix: str, covers: str | None) -> RegimeModel:
    return RegimeModel(name, prefix, "on a network of the paper's family, ", f"figures/paper-scale/{name}",
                       f"figures/paper-scale/{name}/analysis.json", f"figures/paper-scale/{name}/analysis.json",
                       dict.fromkeys(("competence", "regime", "shuffle", "state-first", "state-used", "distance",
                                      "nearby", "heads"), "figures/paper-scale/figure.png"), covers=covers)


def test_a_regime_model_that_covers_the_paper_network_takes_the_placeholder_column_and_a_smaller_one_does_not():
    paper_scale = _paper_scale_model("paper-scale", "PS", PAPER_SCALE_NETWORK.name)
    smaller = _paper_scale_model("cpu/2x4x64", "C", None)
    assert [column.name for column in regime_matrix((LADDER_MODEL,), (PAPER_SCALE_NETWORK,)).columns] == [
        LADDER_MODEL.name, PAPER_SCALE_NETWORK.name]
    matrix = regime_matrix((LADDER_MODEL, smaller), (PAPER_SCALE_NETWORK,))
    assert [(column.name, column.untested) for column in matrix.columns] == [
        (LADDER_MODEL.name, None), ("cpu/2x4x64", None), (PAPER_SCALE_NETWORK.name, PAPER_SCALE_NETWORK.claim)]
    matrix = regime_matrix((LADDER_MODEL, smaller, paper_scale), (PAPER_SCALE_NETWORK,))
    assert [(column.name, column.untested) for column in matrix.columns] == [
        (LADDER_MODEL.name, None), ("cpu/2x4x64", None), ("paper-scale", None)]
    assert matrix.columns[2].claims["F2-shuffle"] == "PS-F2-shuffle"


def test_a_model_without_a_ceiling_is_gated_by_its_ngram_verdict():
    model = dataclasses.replace(_paper_scale_model("cpu/2x4x64", "C", None), ceiling=False,
                                ngram_verdict="figures/paper-scale/cpu/2x4x64/ngram-verdict.json")
    claims = {claim.id: claim for claim in regime_claims(model)}
    assert claims["C-competence"].sources == (model.ngram_verdict,)
    assert claims["C-F1-in-context"].sources == (model.evaluation,)
    assert all(claim.sources[0] == model.ngram_verdict for claim in claims.values() if claim.id != "C-F1-in-context")
    with pytest.raises(ValueError, match="ngram_verdict: None"):
        dataclasses.replace(model, ngram_verdict=None)


def test_replacing_a_block_keeps_the_text_around_it():
    text = "before\n<!-- bench:hmm:start -->\nold\n<!-- bench:hmm:end -->\nafter\n"
    assert replace_block(text, "bench:hmm", "new", "README.md") == (
        "before\n<!-- bench:hmm:start -->\nnew\n<!-- bench:hmm:end -->\nafter\n")


@pytest.mark.parametrize("text", ["no markers", "<!-- bench:hmm:end --> <!-- bench:hmm:start -->",
                                  "<!-- bench:hmm:start --> <!-- bench:hmm:start --> <!-- bench:hmm:end -->"])
def test_a_block_without_one_start_then_one_end_marker_is_refused(text):
    with pytest.raises(ValueError, match="README.md: .*bench:hmm:start"):
        replace_block(text, "bench:hmm", "body", "README.md")


def test_a_planted_change_in_a_copied_json_changes_the_pages_and_the_verdict(tmp_path):
    root = copy_results(tmp_path)
    assert claims_page(root) == committed_claims_page()

    def worse_model(document):
        document["excess_test_sequence"]["model"]["excess_over_gap"] = 0.25

    plant(root, "figures/cpu-small/evaluation.json", worse_model)
    page = claims_page(root)
    assert page != committed_claims_page() and results_block(root) != committed_results_block()
    row = next(line for line in page.splitlines() if line.startswith('| <a id="f1-accuracy"'))
    assert "25.0% of the unigram-to-Bayes gap" in row and "**not reproduced**" in row


def test_a_planted_pass_turns_a_failing_assumption_into_a_holding_one(tmp_path):
    root = copy_results(tmp_path)

    def linear(document):
        row = next(row for row in document["table"] if row["term"].startswith("linearization"))
        row["holds"] = row["units"]

    plant(root, "figures/verification/report.json", linear)
    claim = next(claim for claim in all_claims() if claim.id == "A-linear")
    assert judge(claim, ROOT).outcome.verdict is Verdict.FAILS
    assert judge(claim, root).outcome.verdict is Verdict.HOLDS


def test_a_result_the_ledger_cannot_read_is_named_by_check_and_by_the_command(tmp_path, capsys):
    root = copy_results(tmp_path)
    plant(root, "figures/analysis/analysis.json", lambda document: document.pop("claims"))
    [problem] = generated_problems(root)
    assert "claim F2-shuffle: figures/analysis/analysis.json: no 'claims' under the top level" in problem.reason
    assert hmmtf.main(["ledger", "--root", str(root)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("hmmtf ledger: error: claim F2-shuffle: figures/analysis/analysis.json: no 'claims'")


def test_writing_the_pages_of_changed_results_makes_them_current(tmp_path):
    root = copy_results(tmp_path)
    plant(root, "figures/cpu-small/evaluation.json", lambda document: document["by_demonstrations"]["model"]
           ["accuracy"].__setitem__(0, 0.5))
    # the README's findings count the verdicts, and the planted accuracy turns one
    assert sorted(generated.stale(root)) == ["README.md", "docs/claims.md", RESULTS_PAGE]
    assert sorted(generated.write(root)) == ["README.md", "docs/claims.md", RESULTS_PAGE]
    assert generated.stale(root) == [] and "0.500 ± 0.005 (k = 0)" in (root / RESULTS_PAGE).read_text()


def test_check_says_where_a_generated_page_differs(tmp_path):
    root = copy_results(tmp_path)
    plant(root, "figures/cpu-small/evaluation.json", lambda document: document["by_demonstrations"]["model"]
           ["accuracy"].__setitem__(0, 0.298))  # a number on the row, the verdict as it was
    reasons = {problem.path: problem.reason for problem in generated_problems(root)}
    assert sorted(reasons) == ["docs/claims.md", RESULTS_PAGE]
    committed = (root / RESULTS_PAGE).read_text().splitlines()
    number = next(index for index, line in enumerate(committed, start=1) if "(claims.md#f1-demonstrations)" in line)
    assert committed[number - 1].startswith("| Fig. 1 | [Accuracy improves as more demonstrations are given.]")
    assert reasons[RESULTS_PAGE].startswith(f"differs from what the results generate: line {number} "
                                            f"({committed[number - 1][:40]!r}...), column ")
    assert re.search(r"committed '[^']*0\.297 ± 0\.005 \(k = 0\)[^']*', generated '[^']*0\.298 ± 0\.005 \(k = 0\)",
                     reasons[RESULTS_PAGE])


def test_first_difference_names_the_line_and_both_versions_or_nothing():
    assert first_difference("a\nb\n", "a\nb\n") == ""
    assert first_difference("a\nb = 1 here\n", "a\nb = 2 here\n") == (
        "line 2 ('b = 1 here'...), column 5: committed 'b = 1 here', generated 'b = 2 here'")
    assert first_difference("a\n", "a\nmore\n") == "line 2: the committed text ends, the generated one goes on with 'more'"
    assert first_difference("a\nmore\n", "a\n") == "line 2: the generated text ends, the committed one goes on with 'more'"


def test_state_forcing_that_found_nothing_to_force_is_untested_at_this_scale(tmp_path):
    root = copy_results(tmp_path)

    def nothing_to_force(document):
        forcing = document["patching"]["state_forcing"]
        for key in ("before", "own_state_floor", "by_layer"):
            forcing.pop(key)
        forcing["not_run"] = "no test position of the 256 patched prompts has a state posterior >= 0.8"

    plant(root, "figures/patching/analysis.json", nothing_to_force)
    claim = next(claim for claim in all_claims() if claim.id == "F3a-state-used")
    outcome = judge(claim, root).outcome
    assert outcome.verdict is Verdict.UNTESTED and "state posterior >= 0.8" in outcome.reason


def test_a_missing_result_makes_its_claims_not_computed_and_names_the_command(tmp_path):
    root = copy_results(tmp_path)
    (root / "figures/markov/results.json").unlink()
    claim = next(claim for claim in all_claims() if claim.id == "M1-unigram-trap")
    outcome = judge(claim, root).outcome
    assert outcome.verdict is Verdict.NOT_COMPUTED and "`hmmtf markov-sweep --out figures/markov --no-progress`" in outcome.reason


def test_every_claim_reads_registered_results_and_a_computed_one_links_its_figure():
    claims = all_claims()
    assert len({claim.id for claim in claims}) == len(claims)
    for claim in claims:
        assert all(registered(path) is not None and "*" not in path for path in claim.sources), claim.id
        computed = judge(claim, ROOT).outcome.verdict is not Verdict.NOT_COMPUTED
        assert claim.figure is None or not computed or (ROOT / claim.figure).is_file(), claim.figure
    assert all(result.path.startswith("figures/") and result.path.endswith(".json") for result in RESULTS)
    for claim in claims:  # a gap stays visible: a claim with nothing to compute shows its verdict and why
        if claim.pending is not None:
            assert judge(claim, ROOT).outcome == Outcome(claim.pending, "—", claim.pending_reason, "—"), claim.id


def test_a_decision_recorded_by_the_rule_is_the_verdict_and_a_result_without_it_is_not_computed(tmp_path):
    root = copy_results(tmp_path)
    claim = next(claim for claim in all_claims() if claim.id == "F2-shuffle")
    interval = {"mean": -0.07, "ci_low": -0.08, "ci_high": -0.06}

    def reversed_rule(document):
        document["claims"]["shuffle"]["rule"] = {"variant": "min_context=5", "lower_minus_upper": interval,
                                                 "upper_minus_random_init": interval, "prompts": 256,
                                                 "decision": "reversed"}

    document = json.loads((root / "figures/analysis/analysis.json").read_text())
    document["claims"]["shuffle"].pop("rule", None)
    (root / "figures/analysis/analysis.json").write_text(json.dumps(document))
    outcome = judge(claim, root).outcome
    assert outcome.verdict is Verdict.NOT_COMPUTED and "predates the rule" in outcome.reason
    assert "`hmmtf analyze runs/cpu-small/checkpoint --out figures/analysis`" in outcome.reason
    plant(root, "figures/analysis/analysis.json", reversed_rule)
    outcome = judge(claim, root).outcome
    assert outcome.verdict is Verdict.NOT_REPRODUCED and "lower - upper -0.070 [-0.080, -0.060]" in outcome.number


def test_a_claim_needs_a_judge_with_sources_and_rule_or_a_pending_verdict():
    with pytest.raises(ValueError, match="claim X1: judge=None"):
        Claim("X1", "a claim", "nothing")
    with pytest.raises(ValueError, match="claim X2: pending=<Verdict.HOLDS"):
        Claim("X2", "a claim", "nothing", pending=Verdict.HOLDS, pending_reason="why")
    with pytest.raises(ValueError, match="id: '1x'"):
        Claim("1x", "a claim", "nothing", pending=Verdict.NOT_COMPUTED, pending_reason="why")
    with pytest.raises(ValueError, match="claim id 'A' appears twice"):
        claim = Claim("A", "a claim", "nothing", pending=Verdict.NOT_COMPUTED, pending_reason="why")
        all_claims((SECTIONS[0].__class__("s", "s", (claim, claim)),))


def test_a_missing_key_names_the_file_the_path_and_what_is_there():
    doc = Doc("figures/x.json", {"claims": {"shuffle": {}}})
    with pytest.raises(LedgerError, match=r"figures/x.json: no 'probes' under claims; found \['shuffle'\]"):
        doc["claims", "probes"]


@pytest.mark.parametrize(("fields", "expected"), [
    ({"git_commit": "a" * 40}, Recorded("a" * 40, False)),
    ({"git_commit": "a" * 40 + "+dirty"}, Recorded("a" * 40, True)),
    ({"git_commit": "abcdef1", "git_dirty": True}, Recorded("abcdef1", True)),
    ({"git": {"commit": "b" * 40, "dirty": False}}, Recorded("b" * 40, False)),
    ({"git": {"commit": "b" * 40, "uncommitted_changes": True, "source": "git"}}, Recorded("b" * 40, True)),
    ({"git": {"commit": "c" * 40, "uncommitted_changes": None, "source": "$HMMTF_GIT_COMMIT"}}, Recorded("c" * 40, False)),
    ({"git": {"commit": None, "uncommitted_changes": None, "source": "$HMMTF_GIT_COMMIT"}}, None),
    ({"git_commit": None}, None),
    ({"git": None}, None),
    ({}, None),
])
def test_every_form_of_recorded_commit_is_read(fields, expected):
    assert recorded_commit(Doc("figures/x.json", {"command": "c", **fields})) == expected


@pytest.mark.parametrize(("fields", "message"), [
    ({"git_commit": "HEAD"}, "git_commit = 'HEAD'; expected a git commit hash"),
    ({"git_commit": "abcdef1+modified"}, "git_commit = 'abcdef1\\+modified'"),
    ({"git": "abcdef1"}, "git = 'abcdef1'; expected an object with 'commit'"),
])
def test_a_malformed_commit_is_refused_with_the_key_and_value(fields, message):
    with pytest.raises(LedgerError, match=f"figures/x.json: {message}"):
        recorded_commit(Doc("figures/x.json", fields))


def _git(root: Path, *arguments: str) -> str:
    environment = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                   "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *arguments], cwd=root, env=environment, capture_output=True, text=True,
                          check=True).stdout.strip()


def _commit(root: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD")


def _result(root: Path, **provenance) -> None:
    (root / "figures").mkdir(exist_ok=True)
    (root / "figures/r.json").write_text(json.dumps({"command": "make r", **provenance}))


RESULT = Result("figures/r.json", "make r", ("code/", "!code/plot.py"))


@pytest.fixture
def repository(tmp_path):
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, {"code/make.py": "x = 1\n", "code/plot.py": "draw\n"}, "first")
    return tmp_path, first


def test_a_result_older_than_its_code_is_stale_and_a_new_one_fresh(repository):
    root, first = repository
    _result(root, git_commit=first)
    assert freshness(RESULT, root).status is Status.FRESH
    _commit(root, {"code/plot.py": "draw better\n"}, "plotting only")
    assert freshness(RESULT, root).status is Status.FRESH
    second = _commit(root, {"code/make.py": "x = 2\n"}, "new numbers")
    state = freshness(RESULT, root)
    assert state.status is Status.STALE and f"commits {second[:7]}" in state.detail and "code/make.py" in state.detail
    _result(root, git={"commit": second, "dirty": False})
    assert freshness(RESULT, root).status is Status.FRESH
    (root / "code/make.py").write_text("x = 3\n")
    state = freshness(RESULT, root)
    assert state.status is Status.STALE and "uncommitted changes changed code/make.py" in state.detail
    (root / "code/make.py").write_text("x = 2\n")
    problems = result_problems(root, (RESULT,))
    assert problems == []


def test_a_change_undone_or_merged_in_is_judged_by_the_tree(repository):
    root, first = repository
    _result(root, git_commit=first)
    _commit(root, {"code/make.py": "x = 2\n"}, "change")
    _commit(root, {"code/make.py": "x = 1\n"}, "revert")
    assert freshness(RESULT, root).status is Status.FRESH


def test_comments_docstrings_and_layout_leave_a_result_fresh_and_code_does_not(repository):
    root, _ = repository
    made = _commit(root, {"code/model.py": '"""Model."""\ndef f(x):\n    return x + 1\n'}, "model")
    _result(root, git_commit=made)
    reworded = ('"""The model, documented."""\n# a comment\ndef f(x):\n    """One more than x."""\n'
                '    return (x\n            + 1)\n\n\nRATE = 2\n"""The rate (an attribute docstring)."""\n')
    _commit(root, {"code/model.py": reworded.replace("RATE = 2\n", "")}, "docs only")
    assert freshness(RESULT, root).status is Status.FRESH
    (root / "code/model.py").write_text(reworded)
    state = freshness(RESULT, root)
    assert state.status is Status.STALE and state.detail.endswith("uncommitted changes changed code/model.py")
    (root / "code/model.py").write_text(reworded.replace("+ 1", "+ 2").replace("RATE = 2\n", ""))
    assert freshness(RESULT, root).status is Status.STALE
    (root / "code/model.py").write_text("def f(x):\n    return x + 1\n")
    (root / "code/make.py").write_text("x = 1  # unchanged\n")
    assert freshness(RESULT, root).status is Status.FRESH


@pytest.mark.parametrize("before, after, same", [
    ("x = 1\n", "x = 1  # one\n", True),
    ('def f():\n    """Doc."""\n    return 1\n', "def f():\n    return 1\n", True),
    ('class A:\n    """Doc."""\n', 'class A:\n    """Other doc."""\n', True),
    ("x = 'a'\n", "x = 'b'\n", False),
    ("f(1, 2)\n", "f(2, 1)\n", False),
    ("x = 1\n", "x = (\n", False),
    ("def f(x, *a, y=1, **k):\n    return x\n",
     "def f(x: int, *a: str, y: float = 1, **k: bool) -> 'int':\n    return x\n", True),
    ("async def f(x):\n    y = x\n    return y\n", "async def f(x):\n    z: int\n    y: float = x\n    return y\n",
     True),
    ("def f(x):\n    y = x\n    return y\n", "def f(x):\n    y: float = 2 * x\n    return y\n", False),
    ("def f(x: int = 1):\n    return x\n", "def f(x: int = 2):\n    return x\n", False),
    ("class A:\n    x: int = 1\n", "class A:\n    x: float = 1\n", False),
    ("def f():\n    class A:\n        x: int\n    return A\n", "def f():\n    class A:\n        pass\n    return A\n",
     False),
    ("x: int = 1\n", "x = 1\n", False),
    ("class A:\n    x: int\n", "class A:\n    y: int\n", False),
    ("class A:\n    x: int = 1\n", "class A:\n    x: int = 2\n", False),
])
def test_the_fingerprint_ignores_what_cannot_compute(before, after, same):
    assert (code_fingerprint(before) == code_fingerprint(after) and code_fingerprint(after) is not None) is same


def test_no_provenance_a_dirty_tree_an_unknown_commit_and_a_missing_file_are_reported(repository):
    root, first = repository
    assert freshness(RESULT, root).status is Status.MISSING
    _result(root)
    problems = result_problems(root, (RESULT,))
    assert [(p.path, p.reason, p.fix) for p in problems] == [
        ("figures/r.json", "no provenance: the JSON records no git commit", "run `make r`")]
    _result(root, git_commit=first + "+dirty")
    assert freshness(RESULT, root).status is Status.DIRTY
    _result(root, git_commit="0123456789abcdef0123456789abcdef01234567")
    state = freshness(RESULT, root)
    assert state.status is Status.UNKNOWN_COMMIT and "0123456 is not in this repository" in state.detail


def test_without_git_the_check_says_so_instead_of_passing(tmp_path):
    _result(tmp_path, git_commit="abcdef1")
    problems = result_problems(tmp_path, (RESULT,))
    assert len(problems) == 1 and problems[0].reason.startswith("git unavailable: ")


def test_an_unregistered_json_under_figures_is_reported_and_a_pattern_registers_a_family(tmp_path):
    (tmp_path / "figures/ladder/tasks-8-small").mkdir(parents=True)
    (tmp_path / "figures/ladder/results.json").write_text("{}")
    (tmp_path / "figures/ladder/tasks-8-small/analysis.json").write_text("{}")
    assert [problem.path for problem in unregistered(tmp_path, RESULTS)] == ["figures/ladder/results.json"]


def test_every_file_of_a_pattern_result_is_checked(repository):
    root, first = repository
    family = Result("figures/*/r.json", "make r", ("code/",))
    for point, provenance in (("a", {"git_commit": first}), ("b", {})):
        (root / "figures" / point).mkdir(parents=True)
        (root / "figures" / point / "r.json").write_text(json.dumps(provenance))
    assert family.files(root) == ["figures/a/r.json", "figures/b/r.json"]
    assert [(p.path, p.reason.split(":")[0]) for p in result_problems(root, (family,))] == [
        ("figures/b/r.json", "no provenance")]


def test_the_command_refuses_a_root_without_figures(tmp_path, capsys):
    assert hmmtf.main(["ledger", "--check", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"hmmtf ledger: error: --root: {str(tmp_path)!r} has no figures/ folder; "
                                       f"expected the repository root\n")


def _competence(competent: bool) -> dict:
    """A competence.json (empirical/yardsticks/competence.py's layout) whose model beats the in-context bigram or not."""
    losses = {"ngram 1": 1.95, "ngram 2": 1.93 if competent else 1.90, "ngram 3": 1.92, "model": 1.91, "ceiling": 1.88,
              "oracle": 1.66}
    beaten = {"ngram 1": True, "ngram 2": competent, "ngram 3": False}
    evaluation = json.loads((ROOT / "figures/ladder/tasks-8192-deep/evaluation.json").read_text())
    return {"verdict": "beats the in-context bigram" if competent else "beats the in-context unigram",
            "competent": competent, "num_prompts": 512, "fresh_tasks": 1024,
            **{key: evaluation[key] for key in ("task", "model", "step")},
            "ladder": {"all_positions": {name: {"loss": loss} for name, loss in losses.items()}},
            "beats": {"test_sequence": beaten, "all_positions": beaten},
            "gap_closed": {"all_positions": {"fraction": 0.57, "interval_95": [0.4, 0.7]}}}


@pytest.mark.parametrize("competent", [False, True])
def test_a_mechanism_claim_on_a_network_below_the_bigram_is_not_judged(tmp_path, competent):
    from ledger.ladder import REGIME_COMPETENCE, gated
    from ledger.observations import shuffle

    root = copy_results(tmp_path)
    (root / REGIME_COMPETENCE).write_text(json.dumps(_competence(competent)))
    claim = next(claim for claim in all_claims() if claim.id == "R-F2-shuffle")
    assert claim.judge.__name__ == gated(shuffle).__name__ == "gated_shuffle"
    ungated = shuffle(Doc.load(root, claim.sources[1]))
    outcome = judge(claim, root).outcome
    assert outcome.number == ungated.number
    if competent:
        assert outcome == ungated
    else:
        assert outcome.verdict is Verdict.NOT_JUDGED
        assert "the network is not competent (beats the in-context unigram" in outcome.reason
        assert f"the rule alone would say '{ungated.verdict.value}'" in outcome.reason
    gate = judge(next(claim for claim in all_claims() if claim.id == "R-competence"), root).outcome
    assert gate.verdict is (Verdict.HOLDS if competent else Verdict.NOT_REPRODUCED)
    assert ("ngram 2" in gate.reason) is competent and "model 1.910" in gate.number


@pytest.mark.parametrize("verdict, beats_variable_order, phrase", [
    ("beats the in-context unigram", False, "beats the in-context unigram"),
    ("beats the in-context bigram", True, "beats the in-context bigram"),
    ("beats every in-context n-gram", True, "beats every in-context n-gram"),
    ("beats every in-context n-gram", False, "beats every in-context n-gram, not the variable-order predictor")])
def test_a_mechanism_claim_at_128_states_is_gated_by_the_ngram_verdict(tmp_path, verdict, beats_variable_order, phrase):
    """Competent: the verdict beats the in-context bigram and, where the result scores the
    variable-order predictor, the model beats that in both scopes too; otherwise the claim waits."""
    from ledger.ladder import REGIME_MODELS, VARIABLE_ORDER

    model = next(model for model in REGIME_MODELS if not model.ceiling)
    root = copy_results(tmp_path)
    result = json.loads((root / model.competence).read_text())
    assert all(VARIABLE_ORDER in scope for scope in result["beats"].values())
    beats = {name: {**scope, VARIABLE_ORDER: beats_variable_order} for name, scope in result["beats"].items()}
    (root / model.competence).write_text(json.dumps({**result, "verdict": verdict, "beats": beats}))
    claims = {claim.id: claim for claim in all_claims()}
    shuffle_claim = claims[f"{model.prefix}-F2-shuffle"]
    assert shuffle_claim.sources == (model.ngram_verdict, model.analysis)
    competent = verdict != "beats the in-context unigram" and beats_variable_order
    outcome = judge(shuffle_claim, root).outcome
    assert (outcome.verdict is Verdict.NOT_JUDGED) is not competent
    if not competent:
        assert f"the network is not competent ({phrase}, {model.ngram_verdict})" in outcome.reason
    gate = judge(claims[f"{model.prefix}-competence"], root).outcome
    assert gate.verdict is (Verdict.HOLDS if competent else Verdict.NOT_REPRODUCED)
    assert f"verdict: {phrase}" in gate.reason


def test_every_committed_json_is_strict_json():
    """No result holds NaN or Infinity, which Python's json writes and strict readers refuse (issue 53)."""
    def refuse(constant: str):
        raise ValueError(f"the non-JSON constant {constant}")

    loose = []
    for path in sorted((ROOT / "figures").rglob("*.json")) + sorted((ROOT / "models").rglob("*.json")):
        try:
            json.loads(path.read_text(), parse_constant=refuse)
        except ValueError as error:
            loose.append(f"{path.relative_to(ROOT)}: {error}")
    assert loose == []


def _timing(path: str = "figures/r.json", command: str = "python benchmarks/bench_r.py --out figures/r.json") -> Result:
    return Result(path, command, ("code/",), timing=True)


def test_a_timing_whose_producers_changed_is_told_with_its_commit_and_machine_and_is_no_problem(repository):
    """A measurement is older after a change of its code, not wrong: told, with the machine its
    record names, and how far its producers moved; a timing made from a dirty tree stays a problem."""
    root, first = repository
    _result(root, git_commit=first, host={"cpu": "Test CPU", "cores": 2, "kernels": "AVX2"})
    assert freshness(_timing(), root).status is Status.FRESH
    _commit(root, {"code/make.py": "x = 2\n"}, "new code")
    _commit(root, {"code/make.py": "x = 3\n"}, "newer code")
    state = freshness(_timing(), root)
    assert (state.status, state.detail) == (Status.MEASURED, f"measured at {first[:7]} on Test CPU (2 cores, AVX2 "
                                                             "kernels); its producers changed in 2 commits since "
                                                             "(code/make.py)")
    assert result_states(root, (_timing(),)) == ([], [state])
    _result(root, git_commit=first)
    assert "on an unrecorded machine" in freshness(_timing(), root).detail
    _result(root, git_commit=first + "+dirty")
    assert [problem.reason.split(":")[0] for problem in result_problems(root, (_timing(),))] == ["stale"]


def test_remeasuring_runs_every_timing_after_waiting_for_idle_cores_from_a_clean_tree(repository):
    root, _ = repository
    results = (_timing("figures/a.json", "python benchmarks/bench_a.py --out figures/a.json"), RESULT,
               _timing("figures/b.json", "python benchmarks/bench_b.py --rounds 2 --out figures/b.json"))
    calls: list = []
    measured = remeasure(root, results, 0.25, run=lambda argv, cwd: calls.append((argv[0], argv[1:], cwd)) or 0,
                         wait=lambda load: calls.append(("wait", load)))
    assert measured == ["figures/a.json", "figures/b.json"]
    assert calls == [("wait", 0.25), (sys.executable, ["benchmarks/bench_a.py", "--out", "figures/a.json"], root),
                     ("wait", 0.25), (sys.executable, ["benchmarks/bench_b.py", "--rounds", "2", "--out",
                                                       "figures/b.json"], root)]
    with pytest.raises(LedgerError, match="exited 3"):
        remeasure(root, results, run=lambda argv, cwd: 3, wait=lambda load: None)
    (root / "code/make.py").write_text("x = 5\n")
    with pytest.raises(LedgerError, match="uncommitted changes .*code/make.py"):
        remeasure(root, results, run=lambda argv, cwd: 0, wait=lambda load: None)


def test_waiting_for_idle_cores_polls_the_load_until_it_falls_below_the_bound(capsys):
    loads, slept = iter([2.0, 2.0, 0.6, 0.4]), []
    wait_for_idle(0.5, load=lambda: next(loads), sleep=slept.append)
    assert slept == [POLL_SECONDS, POLL_SECONDS]
    assert capsys.readouterr().out == "waiting for idle cores (1-minute load 2.00, at most 0.5 wanted)\n"


def test_every_registered_timing_is_a_benchmark_command_writing_its_path():
    timings = [result for result in RESULTS if result.timing]
    assert timings and all(result.canary is None for result in timings)
    for result in timings:
        argv = timing_argv(result)
        assert argv[0] == sys.executable and (ROOT / argv[1]).is_file() and result.path in argv, result.command
    with pytest.raises(ValueError, match="expected `python benchmarks/SCRIPT"):
        timing_argv(_timing(command="bash benchmarks/run.sh"))
