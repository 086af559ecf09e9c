"""Every claim the ledger lists, by part of the paper, in the order of docs/claims.md.

A claim belongs to the module of its part of the paper: :mod:`ledger.observations` (Section 2,
Appendix B), :mod:`ledger.theory` (Sections 4 and 5), :mod:`ledger.markov` (the companion result),
:mod:`ledger.ladder` (the regime ladder), :mod:`ledger.gpu` (the lent GPU's runs). docs/ledger.md says how to add one.
"""
from __future__ import annotations

from ledger.claims import Claim, Section
from ledger.gpu import GPU
from ledger.ladder import LADDER, REGIME_MODEL_SECTION
from ledger.markov import MARKOV
from ledger.observations import FIGURE1, FIGURE2, FIGURE3, FIGURE7, PAPER_SCALE
from ledger.theory import ASSUMPTIONS, CONSTRUCTION, LAYERWISE, LEMMA1, THEOREM1, THEOREM2

SECTIONS: tuple[Section, ...] = (
    FIGURE1, FIGURE2, FIGURE3, FIGURE7, PAPER_SCALE, GPU,
    ASSUMPTIONS, LEMMA1, THEOREM1, CONSTRUCTION, LAYERWISE, THEOREM2,
    MARKOV,
    LADDER,
    REGIME_MODEL_SECTION,
)


def all_claims(sections: tuple[Section, ...] = SECTIONS) -> list[Claim]:
    """The claims of ``sections`` in page order; raises if two share an id."""
    claims = [claim for section in sections for claim in section.claims]
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise ValueError(f"claim id {claim.id!r} appears twice; expected unique ids (they are the page's anchors)")
        seen.add(claim.id)
    return claims
