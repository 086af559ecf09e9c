"""What ``hmmtf evaluate`` writes, as typed results: ``evaluation.json`` (:class:`EvaluationReport`),
``hand_built.json`` (:class:`SideBySideReport`) and ``competence.json`` (:class:`CompetenceReport`).
Each is what made it (:class:`Provenance`) followed by what it measured, and becomes its JSON once,
where it is written (:func:`bounds.serialize.to_json`: fields in declaration order, an ``INLINE``
field's own keys in its place)."""
from __future__ import annotations

from dataclasses import dataclass, field

from bounds.serialize import INLINE, OMIT_IF_NONE
from empirical.yardsticks.competence import Competence
from empirical.yardsticks.evaluate import Evaluation
from empirical.yardsticks.regime import RegimeSection


@dataclass(frozen=True)
class Provenance:
    """What made a result: the command line, the source commit (None outside a git checkout), the
    checkpoint folder read and the training step it holds."""

    command: str
    git_commit: str | None
    checkpoint: str
    step: int


@dataclass(frozen=True)
class EvaluationReport:
    """``evaluation.json``: its provenance; the checkpoint's task, model and training configs; the
    training summary beside it (``train_summary.json`` of ``hmmtf train``; None without one); the
    seconds the evaluations took; the evaluation on the held-out prompts of the training mixture
    (with the oracle and the paired ``model - oracle`` loss); the regime section (not written
    without fresh HMMs, ``--fresh-tasks 0``)."""

    provenance: Provenance = field(metadata=INLINE)
    task: dict
    model: dict
    train: dict
    train_summary: dict | None
    evaluation_time_s: float
    evaluation: Evaluation = field(metadata=INLINE)
    regime: RegimeSection | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class SideBySideReport:
    """``hand_built.json``: its provenance; the history lengths L and gradient-descent layers T of
    the hand-built networks; the rows evaluated and the rule that makes the raw outputs
    distributions, in words; the seconds the evaluation took; the evaluation of every predictor on
    those rows."""

    provenance: Provenance = field(metadata=INLINE)
    history_lengths: list[int]
    gd_steps: list[int]
    rows: str
    distribution_rule: str
    evaluation_time_s: float
    evaluation: Evaluation = field(metadata=INLINE)


@dataclass(frozen=True)
class CompetenceReport:
    """``competence.json``: its provenance; the checkpoint's task and model configs; the seconds the
    competence result took; the result itself."""

    provenance: Provenance = field(metadata=INLINE)
    task: dict
    model: dict
    evaluation_time_s: float
    competence: Competence = field(metadata=INLINE)
