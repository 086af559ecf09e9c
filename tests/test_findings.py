"""The README's findings block (ledger/findings.py): at most twelve one-sentence findings, each linked
to claims of docs/claims.md; its numbers are the result JSONs' (read here again, by hand, from the
JSON), a planted change in a result changes its line and makes ``hmmtf ledger --check`` fail, and
a verdict that turns changes the words that depend on it."""
import functools
import json
import math
import re
from pathlib import Path

from copied_results import copy_results, plant
from ledger.blocks import block_body
from ledger.check import generated_problems
from ledger.findings import BLOCK, FINDINGS, MOST, findings_block
from ledger.numbers import fixed, sig
from ledger.registry import all_claims
from ledger.render import anchor

ROOT = Path(__file__).resolve().parents[1]
REPORT = "figures/verification/report.json"
PAPER_128 = "figures/paper-scale/cpu/paper-2x4x64-4x/competence.json"
DEEP_128 = "figures/paper-scale/cpu/sparse-4x4x64-2x/competence.json"
LONG_BUDGET = "figures/markov/long-budget/results.json"


@functools.cache
def committed_block() -> str:
    """``findings_block(ROOT)``, once per process (the committed results do not change during the suite)."""
    return findings_block(ROOT)


def _lines(block: str) -> dict[str, str]:
    """``{topic: the finding's text}`` of a block."""
    return {match[1]: match[2] for match in re.finditer(r"^- \*\*(.+?)\.\*\* (.*)$", block, flags=re.MULTILINE)}


def test_the_readme_holds_the_generated_block_in_its_first_screen():
    readme = (ROOT / "README.md").read_text()
    assert block_body(readme, BLOCK, "README.md") == committed_block()
    first_screen = readme.splitlines()[:60]
    assert f"<!-- {BLOCK}:end -->" in first_screen, "the findings end within the README's first 60 lines"
    for workflow in ("pytest -q tests/test_construction_", "hmmtf main --out", "lemma1_decay.png", "hmmtf analyze",
                     "attention_hand_built_vs_trained.png"):
        assert any(workflow in line for line in first_screen), workflow


def test_at_most_twelve_findings_each_one_sentence_linked_to_claims_of_the_page():
    lines = _lines(committed_block())
    assert list(lines) == [finding.topic for finding in FINDINGS] and len(lines) <= MOST
    anchors = {anchor(claim.id) for claim in all_claims()}
    for topic, text in lines.items():
        linked = re.findall(r"\]\(docs/claims\.md#([a-z0-9-]+)\)", text)
        assert linked and set(linked) <= anchors, topic
        sentence = re.sub(r" \(\[.*$", "", text)
        assert not re.search(r"\. [A-Z]", sentence) and "not computed" not in sentence, topic


def test_the_counts_beside_the_findings_count_every_claim():
    counts = re.search(r"\((\d+) claims: ((?:\d+ [a-z ]+(?:, )?)+);", committed_block())
    assert int(counts[1]) == len(all_claims()) == sum(int(part.split()[0]) for part in counts[2].split(", "))
    assert {"holds", "not reproduced", "fails"} <= {part.split(" ", 1)[1] for part in counts[2].split(", ")}


def test_the_numbers_are_those_of_the_results():
    """Read again from the JSON here, not through the ledger's lookups."""
    lines = _lines(committed_block())
    table = {row["term"]: row for row in json.loads((ROOT / REPORT).read_text())["table"]}
    stages = [row for term, row in table.items() if term.startswith("stage ")]
    assert (f"each of its {len(stages)} stages within {sig(max(row['measured'] for row in stages))} of its plain-numpy "
            f"reference and its output within {sig(table['construction |W_T x - TF|']['measured'])}") in lines["The construction"]
    total = table["total |P - TF| <= sum of bounds"]
    assert f"at most {sig(total['measured'])} against the bounds' sum {sig(total['bound'])}" in lines["The bounds"]
    closed = json.loads((ROOT / DEEP_128).read_text())["gap_closed"]["test_sequence"]
    assert f"sparse-4x4x64-2x closes {closed['fraction']:.2f} [{closed['interval_95'][0]:.2f}, " in lines["Depth at 128 states"]
    competence = json.loads((ROOT / PAPER_128).read_text())
    hand_built = competence["hand_built"]["test_sequence"]["hand-built"]["loss"]
    assert (f"{fixed(hand_built)} nats beside paper-2x4x64-4x's" in lines["The hand-built network at 128 states"]
            and f"uniform predictor's {fixed(math.log(16))}" in lines["The hand-built network at 128 states"])


def test_a_planted_number_changes_its_finding_and_fails_the_check(tmp_path):
    root = copy_results(tmp_path)
    assert "README.md" not in {problem.path for problem in generated_problems(root)}

    def worse_construction(document):
        next(row for row in document["table"] if row["term"] == "construction |W_T x - TF|")["measured"] = 2.5e-11

    def less_closed(document):
        document["gap_closed"]["test_sequence"].update(fraction=0.5, interval_95=[0.4, 0.6])

    plant(root, REPORT, worse_construction)
    plant(root, DEEP_128, less_closed)
    changed, committed = _lines(findings_block(root)), _lines(committed_block())
    assert "its output within 2.5e-11 of T explicit" in changed["The construction"]
    assert "sparse-4x4x64-2x closes 0.50 [0.40, 0.60]" in changed["Depth at 128 states"]
    assert [topic for topic in committed if changed[topic] != committed[topic]] == ["The construction",
                                                                                     "Depth at 128 states"]
    [problem] = [problem for problem in generated_problems(root) if problem.path == "README.md"]
    assert "2.5e-11" in problem.reason


def test_a_turned_verdict_turns_its_words(tmp_path):
    """Runs still trapped after the long budget: the unigram solution is then a bad local minimum."""
    root = copy_results(tmp_path)

    def still_trapped(document):
        for side in document["sides"]:
            if (side["init"], side["architecture"], side["side"]) == ("gaussian", "1-layer-tied", "p + q > 1"):
                side.update(trapped=12, trapped_interval=[0.7, 0.95])

    assert "but is not a bad local minimum (0/24" in _lines(committed_block())["Attention with Markov"]
    plant(root, LONG_BUDGET, still_trapped)
    assert "but is a bad local minimum (12/24 trapped" in _lines(findings_block(root))["Attention with Markov"]


def test_a_missing_result_is_named_in_its_finding(tmp_path):
    root = copy_results(tmp_path)
    (root / "figures/competence/ceiling-paper.json").unlink()
    assert _lines(findings_block(root))["The ceiling"].startswith(
        "not computed: figures/competence/ceiling-paper.json is missing ([G-ceiling-paper]")


def test_the_ceiling_finding_places_the_lower_bound_against_the_oracle_by_its_interval(tmp_path):
    """The committed bound is level with the oracle (its interval holds 0); planted above the oracle,
    the finding says by how much instead."""
    lower = "figures/competence/ceiling-lower-paper.json"
    assert ", level with the oracle, so the bracket" in _lines(committed_block())["The ceiling"]
    root = copy_results(tmp_path)

    def above_the_oracle(document):
        setting = document["scopes"]["test_sequence"]["settings"][document["scopes"]["largest_setting"]]
        setting["oracle_minus_lower"].update(mean=-0.25, interval_95=[-0.3, -0.2])

    plant(root, lower, above_the_oracle)
    assert ", 0.250 above the oracle, so the bracket" in _lines(findings_block(root))["The ceiling"]
