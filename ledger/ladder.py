"""The regime ladder (issue 15): claims 1-3 of Section 2 (Figures 2, 3a, 3b) and the regime
diagnostic measured on mixtures of 8, 64, 1024 and 8192 HMMs (presets ``tasks-N-small`` and
``tasks-N-deep``); ``hmmtf ladder`` gathers the points under ``figures/ladder/POINT/`` into
``figures/ladder/ladder.json``.

THE PLACE FOR THE LADDER'S CLAIMS. Until its results are committed, :data:`LADDER` holds one
pending claim, so the gap shows on the page. The points' ``evaluation.json`` and ``analysis.json``
are registered already (patterns in :data:`ledger.results.RESULTS`). To add the claims:

1. register ``figures/ladder/ladder.json`` in :data:`ledger.results.RESULTS` (command
   ``hmmtf ladder figures/ladder``, producers ``empirical/ladder.py`` and those of the points);
2. write one judge per claim here, a function of the loaded documents returning
   :class:`ledger.claims.Outcome`: ``ladder["points"]`` holds, per point, ``tasks``, ``model``,
   ``memorisation_verdict`` and ``claim1/2/3["decision"]``; map decisions with
   :data:`ledger.observations.DECISIONS` (or call :func:`ledger.observations.shuffle`,
   :func:`~ledger.observations.state_before_task`, :func:`~ledger.observations.in_context` and the
   previous-token judges on one point's own JSONs);
3. replace the pending claim of :data:`LADDER` by ``Claim`` entries naming their ``sources`` and
   ``rule``; then run ``hmmtf ledger`` and commit docs/claims.md and README.md.
"""
from __future__ import annotations

from ledger.claims import Claim, Section, Verdict

LADDER = Section("Regime ladder: claims 1-3 from 8 to 8192 tasks", "Ladder", (
    Claim("R-ladder", "The observations of Figures 2, 3a and 3b hold, or appear, as the number of tasks grows "
          "from 8 to 8192 and the model moves from memorising its tasks to inferring them in context.",
          "the regime diagnostic and the Figure 2 and 3 decisions on every rung of the ladder",
          pending=Verdict.UNTESTED,
          pending_reason="the ladder's results (figures/ladder/, hmmtf ladder, issue 15) are not committed yet"),
))
