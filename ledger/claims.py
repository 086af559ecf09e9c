"""What a claim is: the verdict vocabulary, a claim's fields, and the outcome its rule returns.

A claim is one statement of the paper (or of the companion "Attention with Markov") in our words,
with what the project measures for it, the result JSON(s) the measurement lives in, and a
``judge``: a function of those documents that returns the number (with its interval or worst
case) and the verdict, decided by the rule stated in ``rule``. The verdict is computed, never
typed; a claim with nothing to compute yet carries a ``pending`` verdict and says why.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Callable


class Verdict(enum.Enum):
    """The fixed vocabulary (docs/ledger.md says when each applies)."""

    HOLDS = "holds"
    HOLDS_WITH_CAVEAT = "holds with caveat"
    FAILS = "fails"
    NOT_REPRODUCED = "not reproduced"
    UNTESTED = "untested at this scale"
    NOT_COMPUTED = "not computed"
    NOT_JUDGED = "not judged"


PENDING = (Verdict.UNTESTED, Verdict.NOT_COMPUTED)
"""Verdicts a claim can carry without a result: code exists but not at the claim's scale, or no code."""


@dataclass(frozen=True)
class Outcome:
    """What a judge returns. ``number``: the measurement with its interval or worst case; ``reason``:
    how the rule reached ``verdict``, in the numbers; ``scale``: what was measured on."""

    verdict: Verdict
    number: str
    reason: str
    scale: str


Judge = Callable[..., Outcome]
"""Called with one :class:`ledger.documents.Doc` per entry of ``Claim.sources``, in that order."""

_ID = re.compile(r"[A-Za-z][A-Za-z0-9-]*")


@dataclass(frozen=True)
class Claim:
    """One row of the ledger.

    ``id``: short, stable, used as the anchor of its row. ``statement``: the claim in our words.
    ``measured``: what the project measures for it. ``rule``: how ``judge`` decides the verdict.
    ``sources``: result JSONs (paths from the repository root) passed to ``judge``. ``figure``: the
    figure (path from the repository root) or None. ``pending``/``pending_reason``: for a claim with
    no result, its verdict (one of :data:`PENDING`) and why.
    """

    id: str
    statement: str
    measured: str
    rule: str = ""
    sources: tuple[str, ...] = ()
    judge: Judge | None = None
    figure: str | None = None
    pending: Verdict | None = None
    pending_reason: str = ""

    def __post_init__(self):
        if not _ID.fullmatch(self.id):
            raise ValueError(f"id: {self.id!r}; expected a letter then letters, digits or '-'")
        if self.pending is None:
            if self.judge is None or not self.sources or not self.rule:
                raise ValueError(f"claim {self.id}: judge={self.judge!r}, sources={self.sources!r}, rule={self.rule!r}; "
                                 f"expected a judge, its sources and its rule, or a pending verdict")
        elif self.pending not in PENDING or not self.pending_reason or self.judge is not None:
            raise ValueError(f"claim {self.id}: pending={self.pending!r}, judge={self.judge!r}; expected one of "
                             f"{[v.value for v in PENDING]} with a pending_reason and no judge")


@dataclass(frozen=True)
class Section:
    """The claims of one part of the paper. ``title``: its heading; ``short``: its name in the
    README's summary table (e.g. ``Fig. 2``)."""

    title: str
    short: str
    claims: tuple[Claim, ...]
