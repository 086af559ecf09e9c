"""``hmmtf ledger --check``: every result present, recording the commit that made it, made by the
code its producers hold now, and every generated text equal to what the results generate."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledger import generated
from ledger.documents import LedgerError
from ledger.canaries import CanaryBook
from ledger.provenance import CanaryJudge, Freshness, GitUnavailable, Status, freshness, require_git
from ledger.results import RESULTS, Result, registered


@dataclass(frozen=True)
class Problem:
    """Why ``path`` fails the check, and what fixes it."""

    path: str
    reason: str
    fix: str


def result_states(root: Path, results: tuple[Result, ...] = RESULTS,
                  canaries: CanaryJudge | None = None) -> tuple[list[Problem], list[Freshness]]:
    """A problem per registered result that is not fresh (:mod:`ledger.provenance`; one problem
    naming git when freshness cannot be decided), and the states worth telling that are not
    problems: the fresh results a canary vouched for, and the timings whose producers moved since
    they were measured (:data:`~ledger.provenance.Status.MEASURED`)."""
    try:
        require_git(root)
    except GitUnavailable as error:
        return [Problem("(the repository)", f"git unavailable: {error}; cannot tell whether any result is older than "
                        "its code", "run hmmtf ledger --check in a git clone with its history")], []
    problems, vouched = [], []
    for result in results:
        for path in result.files(root):
            try:
                state = freshness(result, root, path, canaries)
            except LedgerError as error:
                problems.append(Problem(path, str(error), result.remedy()))
                continue
            if state.status is Status.MEASURED or (state.status is Status.FRESH and state.canary):
                vouched.append(state)
            elif state.status is not Status.FRESH:
                problems.append(Problem(path, f"{state.status.value}: {state.detail}", result.remedy()))
    return problems, vouched


def result_problems(root: Path, results: tuple[Result, ...] = RESULTS,
                    canaries: CanaryJudge | None = None) -> list[Problem]:
    """The problems of :func:`result_states`."""
    return result_states(root, results, canaries)[0]


def unregistered(root: Path, results: tuple[Result, ...] = RESULTS) -> list[Problem]:
    """JSON files under figures/ that no :class:`~ledger.results.Result` names."""
    found = sorted(path.relative_to(root).as_posix() for path in (root / "figures").rglob("*.json"))
    return [Problem(path, "unregistered result: the ledger does not know which command and code make it",
                    "add it to ledger/results.py (docs/ledger.md)") for path in found if registered(path, results) is None]


def generated_problems(root: Path, targets: tuple[generated.Target, ...] = generated.TARGETS) -> list[Problem]:
    """A problem per generated file that differs from what the results generate, saying where it
    first differs (:func:`ledger.generated.first_difference`), or one problem when a result cannot
    be read to generate them."""
    try:
        differing = generated.differences(root, targets)
    except LedgerError as error:
        return [Problem("the generated pages", f"cannot be generated: {error}",
                        "run the command of the result it names again, or update its claim's judge")]
    return [Problem(path, f"differs from what the results generate: {where}", "run `hmmtf ledger`")
            for path, where in differing.items()]


def check(root: Path, canaries: CanaryBook | None = None) -> tuple[list[Problem], list[Freshness]]:
    """Every problem of the repository at ``root``, and the states told beside them (the results its
    canaries kept fresh, the timings measured before their producers' last change; default judge:
    the committed canary record, :class:`~ledger.canaries.CanaryBook`, which runs no canary)."""
    problems, vouched = result_states(root, RESULTS, CanaryBook(root) if canaries is None else canaries)
    return [*problems, *unregistered(root), *generated_problems(root)], vouched
