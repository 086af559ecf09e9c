"""Every claim judged on the result JSONs under a repository root."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledger.claims import Claim, Outcome, Section, Verdict
from ledger.documents import Doc, LedgerError
from ledger.provenance import Recorded, recorded_commit
from ledger.results import Result, registered


@dataclass(frozen=True)
class Row:
    """A claim, its outcome, and the commit each of its sources records (None: none recorded)."""

    claim: Claim
    outcome: Outcome
    recorded: dict[str, Recorded | None]


def result_of(path: str) -> Result:
    """The registered result that names ``path``."""
    result = registered(path)
    if result is None:
        raise LedgerError(f"{path}: not a registered result; expected one of ledger.results.RESULTS")
    return result


def judge(claim: Claim, root: Path) -> Row:
    """``claim``'s outcome on the results under ``root``: its judge on its sources, its pending
    verdict when it has none, "not computed" naming the command when a source is missing."""
    if claim.pending is not None:
        return Row(claim, Outcome(claim.pending, "—", claim.pending_reason, "—"), {})
    missing = [path for path in claim.sources if not (root / path).is_file()]
    if missing:
        reason = "; ".join(f"{path} is missing ({result_of(path).remedy()})" for path in missing)
        return Row(claim, Outcome(Verdict.NOT_COMPUTED, "—", reason, "—"), {})
    documents = [Doc.load(root, path) for path in claim.sources]
    try:
        outcome = claim.judge(*documents)
    except LedgerError as error:
        raise LedgerError(f"claim {claim.id}: {error}") from error
    except (KeyError, IndexError, TypeError) as error:  # a field read below a Doc lookup
        raise LedgerError(f"claim {claim.id}: {', '.join(claim.sources)} lacks a field its judge reads ({error!r}); "
                          f"expected the layout its command writes") from error
    return Row(claim, outcome, {doc.path: recorded_commit(doc) for doc in documents})


def judge_sections(sections: tuple[Section, ...], root: Path) -> list[tuple[Section, list[Row]]]:
    """Every section with the rows of its claims."""
    return [(section, [judge(claim, root) for claim in section.claims]) for section in sections]


def verdict_counts(rows: list[Row]) -> dict[Verdict, int]:
    """How many claims carry each verdict, in the vocabulary's order."""
    return {verdict: sum(row.outcome.verdict is verdict for row in rows) for verdict in Verdict}
