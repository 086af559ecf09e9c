"""The pages: docs/claims.md (every claim, its rule, number, verdict, figure and command, then the
commit of every result) and the results block of docs/results.md (the regime claims as a matrix of
verdicts, a row per claim and a column per network, then one line per other claim; each links to
its row on docs/claims.md). The README's findings block is :mod:`ledger.findings`."""
from __future__ import annotations

from pathlib import Path

from ledger.canaries import CANARIES, COMMON_BLIND_SPOTS, results_of
from ledger.claims import Outcome, Section, Verdict
from ledger.documents import Doc
from ledger.ladder import REGIME_MATRIX, RegimeColumn, RegimeMatrix
from ledger.outcomes import Row, judge_sections, result_of, verdict_counts
from ledger.provenance import recorded_commit
from ledger.registry import SECTIONS
from ledger.results import RESULTS

PAGE = "docs/claims.md"
RESULTS_PAGE = "docs/results.md"
RESULTS_BLOCK = "ledger:results"
CLAIMS_FROM_RESULTS = "claims.md"
"""docs/claims.md as docs/results.md links it (both in docs/)."""


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def anchor(claim_id: str) -> str:
    return claim_id.lower()


def counts_sentence(rows: list[Row]) -> str:
    """``36 claims: 12 holds, 4 holds with caveat, ...`` (every verdict, zeros included)."""
    counts = verdict_counts(rows)
    return f"{len(rows)} claims: " + ", ".join(f"{count} {verdict.value}" for verdict, count in counts.items())


def _commands(row: Row) -> str:
    commands = dict.fromkeys(result_of(path).command or "none" for path in row.claim.sources)
    return "<br>".join(f"`{command}`" for command in commands) or "—"


def _figure(figure: str | None, root: Path) -> str:
    """A link to ``figure`` from docs/; "not drawn yet" when the command has not made it."""
    if figure is None:
        return "—"
    return f"[{figure.rsplit('/', 1)[-1]}](../{figure})" if (root / figure).is_file() else "not drawn yet"


def _section_table(section: Section, rows: list[Row], root: Path) -> list[str]:
    lines = [f"## {section.title}", "",
             "| id | claim | measured | number | verdict | figure | command |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        claim, outcome = row.claim, row.outcome
        lines.append(f'| <a id="{anchor(claim.id)}"></a>{claim.id} | {_cell(claim.statement)} | {_cell(claim.measured)} | '
                     f"{_cell(outcome.number)} | **{outcome.verdict.value}** | {_figure(claim.figure, root)} | "
                     f"{_cell(_commands(row))} |")
    lines.append("")
    for row in rows:
        claim, outcome = row.claim, row.outcome
        if claim.pending is not None or not row.recorded:
            lines.append(f"- **{claim.id}** ({outcome.verdict.value}): {outcome.reason}.")
            continue
        sources = ", ".join(f"`{path}` (commit {recorded or 'not recorded'})" for path, recorded in row.recorded.items())
        lines.append(f"- **{claim.id}** ({outcome.verdict.value}). Rule: {claim.rule}. Here: {outcome.reason}. "
                     f"Measured on {outcome.scale}. Source: {sources}.")
    return [*lines, ""]


def _provenance_table(root: Path) -> list[str]:
    lines = ["## Results and the commits that made them", "",
             "The commit each result records (`hmmtf ledger --check` compares it with the code that makes the result "
             "now; docs/ledger.md), and the canary that keeps it fresh across a change of its code that moves no "
             "number (the next table).", "",
             "| result | made at commit | canary | command |", "|---|---|---|---|"]
    for result in RESULTS:
        command = f"`{result.command}`" if result.command else f"none: {result.needs}"
        canary = f"`{result.canary}`" if result.canary else "none (a timing)"
        files = result.files(root)
        if not files:
            lines.append(f"| `{result.path}` | none yet | {canary} | {_cell(command)} |")
        for path in files:
            if (root / path).is_file():
                commit = recorded_commit(Doc.load(root, path))
                made = str(commit) if commit else "not recorded"
            else:
                made = "missing"
            lines.append(f"| `{path}` | {made} | {canary} | {_cell(command)} |")
    return lines


def _canary_table() -> list[str]:
    lines = ["", "## Canaries and what they cannot see", "",
             "A result whose producers changed stays fresh when its canary, its own command at a tiny size, gives every "
             "number, within its tolerance, as at a commit where the result was fresh, and the full-size settings the "
             "result "
             "names are unchanged (docs/ledger.md, \"Canaries\"). `hmmtf ledger --check` names each result a canary "
             f"kept fresh. Every canary is blind to {COMMON_BLIND_SPOTS}; and each to:", "",
             "| canary | results | blind to |", "|---|---|---|"]
    for name, canary in CANARIES.items():
        count = len(results_of(name))
        lines.append(f"| `{name}` | {count} registered | {_cell(canary.blind_to)} |")
    return lines


def claims_page(root: Path, sections: tuple[Section, ...] = SECTIONS) -> str:
    """docs/claims.md for the results under ``root``."""
    judged = judge_sections(sections, root)
    rows = [row for _, section_rows in judged for row in section_rows]
    lines = [
        "# Claims ledger",
        "",
        "<!-- Generated by `hmmtf ledger` from the result JSONs under figures/; edit ledger/, not this file. -->",
        "",
        'Every claim of "Transformers as Multi-task Learners: Decoupling Features in Hidden Markov Models" '
        '(arXiv 2506.01919) and of the companion "Attention with Markov" (arXiv 2402.04161), in our words, with what '
        "this project measures for it, the number (read from the committed result JSON, with its interval or worst "
        "case), the verdict (computed by the rule listed under each table), the figure and the command that "
        "reproduces it. The verdict vocabulary, where each rule lives and how to add a claim: "
        "[docs/ledger.md](ledger.md).",
        "",
        f"**{counts_sentence(rows)}.**",
        "",
    ]
    for section, section_rows in judged:
        lines += _section_table(section, section_rows, root)
    lines += _provenance_table(root)
    lines += _canary_table()
    return "\n".join(lines) + "\n"


def _verdict_link(verdict: Verdict, claim_id: str, page: str) -> str:
    """``verdict`` linked to the row of ``claim_id`` in docs/claims.md, which the linking file names ``page``."""
    return f"[{verdict.value}]({page}#{anchor(claim_id)})"


def _matrix_cell(column: RegimeColumn, template: str, outcomes: dict[str, Outcome], page: str) -> str:
    """The verdict of ``template`` on ``column``'s network; without a claim, untested at this scale
    where no regime model covers the network, else "—" (the claim is not made on it)."""
    claim_id = column.claims.get(template)
    if claim_id is not None:
        return _verdict_link(outcomes[claim_id].verdict, claim_id, page)
    return "—" if column.untested is None else _verdict_link(Verdict.UNTESTED, column.untested, page)


def _regime_table(matrix: RegimeMatrix, outcomes: dict[str, Outcome], page: str) -> list[str]:
    """The regime claims as a table: a row per claim template, a column per network."""
    lines = ["| claim | " + " | ".join(column.name for column in matrix.columns) + " |",
             "|---|" + "---|" * len(matrix.columns)]
    for template, statement in matrix.templates.items():
        cells = [_matrix_cell(column, template, outcomes, page) for column in matrix.columns]
        lines.append(f"| **{template}**: {_cell(statement)} | " + " | ".join(cells) + " |")
    return lines


def results_block(root: Path, sections: tuple[Section, ...] = SECTIONS, matrix: RegimeMatrix = REGIME_MATRIX,
                  page: str = CLAIMS_FROM_RESULTS) -> str:
    """The results block of docs/results.md: the regime claims as ``matrix`` (a verdict per claim and
    network), then every other claim with its number and verdict; each linked to its row in
    docs/claims.md, which the block's file names ``page``."""
    judged = judge_sections(sections, root)
    rows = [row for _, section_rows in judged for row in section_rows]
    in_matrix = matrix.claim_ids
    lines = [
        f"Generated by `hmmtf ledger` from the result JSONs under `figures/`. {counts_sentence(rows)}. What each "
        f"claim measures, its rule, number, figure and command: [{PAGE}]({page}).",
        "",
        "**The regime claims, network by network**: each claim judged on every network trained in the paper's "
        "regime, a row per claim and a column per network (`models/README.md`). A cell is the "
        f"verdict, linked to the claim's row in {PAGE} (its number and rule); \"—\": the claim is not made on that "
        "network; a network no regime model covers is untested at this scale, but where a claim measured it otherwise "
        "(the paper-scale network's n-gram bar, by the GPU recipe sweep).",
        "",
        *_regime_table(matrix, {row.claim.id: row.outcome for row in rows}, page),
        "",
        "**Every other claim:**",
        "",
        "| part | claim | number | verdict |",
        "|---|---|---|---|",
    ]
    for section, section_rows in judged:
        for row in section_rows:
            claim = row.claim
            if claim.id in in_matrix:
                continue
            lines.append(f"| {section.short} | [{_cell(claim.statement)}]({page}#{anchor(claim.id)}) | "
                         f"{_cell(row.outcome.number)} | {row.outcome.verdict.value} |")
    return "\n".join(lines)

