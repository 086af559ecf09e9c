"""The regime ladder (issue 15): claims 1-3 of Section 2 (Figures 2, 3a, 3b) measured on mixtures
of 8, 64, 1024 and 8192 HMMs (presets ``tasks-N-small`` and ``tasks-N-deep``), results under
``figures/ladder/``.

THE PLACE FOR THE LADDER'S CLAIMS. Until its results are committed, :data:`LADDER` holds one
pending claim, so the gap shows on the page. To add the real claims:

1. register each result JSON in :data:`ledger.results.RESULTS` (path, command, producers, needs);
2. write one judge per claim here, a function of the loaded documents returning
   :class:`ledger.claims.Outcome` (reuse :func:`ledger.observations.shuffle`,
   :func:`~ledger.observations.state_before_task`, :func:`~ledger.observations.rise_then_fall`
   and the other Figure 2/3 judges: they read one ``analysis.json`` each, so a rung is a call);
3. replace the pending claim of :data:`LADDER` by ``Claim`` entries naming their ``sources`` and
   ``rule``; then run ``hmmtf ledger`` and commit docs/claims.md and README.md.
"""
from __future__ import annotations

from ledger.claims import Claim, Section, Verdict

LADDER = Section("Regime ladder: claims 1-3 from 8 to 8192 tasks", "Ladder", (
    Claim("R-ladder", "The observations of Figures 2, 3a and 3b hold, or appear, as the number of tasks grows "
          "from 8 to 8192.",
          "the Figure 2 and 3 measurements on every rung of the ladder", pending=Verdict.UNTESTED,
          pending_reason="the ladder's results (figures/ladder/, issue 15) are not committed yet"),
))
