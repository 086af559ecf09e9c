"""What depth changes at 128 states (``hmmtf depth``, issue 65; ``docs/empirical.md``, "The depth
ladder at 128 states"): the networks of one family at 2, 4 and 8 layers, read from the results
their commands committed in one folder each (``figures/paper-scale/cpu/RUN``):

* the loss's distance to the ceiling's upper bound, ``model - ceiling`` on the test sequence of
  ``competence.json`` (``hmmtf evaluate --ceiling-backend collapsed``: 256 prompts of 1024 fresh
  HMMs), and to the variable-order predictor, ``model - variable order`` of ``ngram-verdict.json``
  (4096 prompts of 8192 fresh HMMs);
* the layer-wise linear probes of ``analysis.json`` (``hmmtf analyze``): the tokens 1 to 5 back,
  the hidden state and the task, at each layer's output;
* the history heads of ``heads.json`` (``hmmtf heads``): per layer, the best head's previous-token
  and induction score above chance.

The rules, fixed before the deeper networks' competence, probes and heads were read, are
:data:`RULES`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from empirical.training.result_files import ANALYSIS_FILE, COMMAND_FILES, COMPETENCE_FILE, NGRAM_VERDICT_FILE
from empirical.yardsticks.regime import Z_95

HEADS_FILE = COMMAND_FILES["heads"].reports[0]

HELD = 0.9
"""A probe holds a quantity at a layer when its test accuracy there is at least this."""
PROBE_TOKENS = tuple(f"token {back} back" for back in range(1, 6))
"""The previous-token probes of ``hmmtf analyze`` at the paper preset's ``--max-distance 5``."""
HEAD_KINDS = {"previous-token": ("previous-token 1", "previous-token 2"), "induction": ("induction 1", "induction 2")}
"""The score groups of ``heads.json`` each kind of history head takes its best from."""
SCOPE = "test_sequence"

RULES = f"""\
- **Distance to the ceiling.** A network's distance is ``model - ceiling`` on the test sequence of
  its ``competence.json``, where the ceiling is the collapsed SMC's upper bound (so the distance to
  the true ceiling is at least this). Depth changes it on a family when, between the shallowest
  network and the deepest competent one (``ngram-verdict.json``'s ``competent``: it beats every
  in-context n-gram and the variable-order predictor), the change ``deep - shallow`` has a 95%
  interval that excludes 0: "closer" below, "further" above, else "not resolved". The two results'
  standard errors are combined as if independent, ``se = hypot(se_deep, se_shallow)``. Both are
  drawn from the same fresh-HMM stream, so where their prompts coincide the paired error is
  smaller: the rule is conservative.
- **Distance to the variable-order predictor** (context-tree weighting of depth 6), the same rule
  on ``ngram-verdict.json``'s ``model - variable order`` (4096 prompts), reported beside it.
- **History held.** A probe holds a quantity at a layer when its accuracy there is at least
  {HELD}. A network's history is the tokens ``k`` back, from 1 up without a gap, held at some layer;
  its history layer is the first layer holding the token 1 back, also as a share of its depth.
  The hidden state is held when its best layer reaches {HELD} of the probe on the exact posterior.
- **History heads.** Per layer, the best head's score minus chance, over the previous-token (1 and
  2 back) and the induction (1 and 2) scores; a kind's layer is the one where that peaks.
- **What depth does not change** is read off the same summaries: a summary equal at every depth.
"""
"""The study's rules, as ``depth.json`` states them."""


def _load(folder: Path, name: str, required: bool) -> dict | None:
    path = folder / name
    if not path.is_file():
        if required:
            raise ValueError(f"--points: {folder} has no {name}; expected the folder of a network's results "
                             f"(figures/paper-scale/cpu/RUN)")
        return None
    return json.loads(path.read_text())


def _difference(deep: dict, shallow: dict) -> dict:
    """``deep - shallow`` of two estimates ``{"mean", "stderr"}`` taken as independent, with its 95%
    interval and the rule's reading: "closer" (below 0), "further" (above 0) or "not resolved"."""
    mean = deep["mean"] - shallow["mean"]
    stderr = math.hypot(deep["stderr"], shallow["stderr"])
    low, high = mean - Z_95 * stderr, mean + Z_95 * stderr
    reading = "closer" if high < 0 else "further" if low > 0 else "not resolved"
    return {"mean": mean, "stderr": stderr, "interval_95": [low, high], "reading": reading}


def probe_summary(analysis: dict, layers: int) -> dict:
    """The layer-wise probes of ``analysis.json`` (accuracy per layer, ``embedding`` first) and the
    rule's summaries: the history held, the history layer, the best state probe against its ceiling."""
    trained, ceiling = analysis["probes"]["trained"], analysis["probes"]["ceiling"]
    names = ("embedding", *(f"layer {layer}" for layer in range(1, layers + 1)))
    curves = {name: [trained[name][layer]["accuracy"] for layer in names]
              for name in (*PROBE_TOKENS, "state", "task")}
    held = 0
    for name in PROBE_TOKENS:
        if max(curves[name][1:]) < HELD:
            break
        held += 1
    first = next((layer for layer in range(1, layers + 1) if curves[PROBE_TOKENS[0]][layer] >= HELD), None)
    state_best = max(curves["state"][1:])
    state_ceiling = ceiling["state"]["accuracy"]
    return {"curves": curves, "tokens_held": held, "history_layer": first,
            "history_layer_share": None if first is None else first / layers,
            "state_best": state_best, "state_ceiling": state_ceiling, "state_held": state_best >= HELD * state_ceiling}


def head_summary(heads: dict) -> dict:
    """Per kind of history head, the best head's score minus chance at each layer (from 1), and the
    layer where it peaks."""
    scores = heads["scores"]["trained"]
    summary = {}
    for kind, groups in HEAD_KINDS.items():
        per_layer = [max(max(score - scores[group]["chance"] for score in scores[group]["score"][layer])
                         for group in groups) for layer in range(len(scores[groups[0]]["score"]))]
        peak = max(range(len(per_layer)), key=per_layer.__getitem__) + 1
        summary[kind] = {"excess_per_layer": per_layer, "peak_layer": peak, "peak_share": peak / len(per_layer)}
    return summary


def network_row(folder: Path) -> dict:
    """One network's row: what it is, its verdict, its distances, probes and heads (None where its
    folder lacks the result)."""
    verdict = _load(folder, NGRAM_VERDICT_FILE, required=True)
    competence = _load(folder, COMPETENCE_FILE, required=False)
    analysis = _load(folder, ANALYSIS_FILE, required=False)
    heads = _load(folder, HEADS_FILE, required=False)
    if competence is not None and not competence["ceiling"].get("upper_bound"):
        raise ValueError(f"--points: {folder / COMPETENCE_FILE}'s ceiling is not the collapsed SMC's upper bound; "
                         f"expected the competence result of hmmtf evaluate --ceiling-backend collapsed")
    layers = verdict["model"]["num_layers"]
    return {
        "folder": str(folder), "run": verdict["checkpoint"].removesuffix("/checkpoint"),
        "family": verdict["task"]["mixture"], "layers": layers, "step": verdict["step"],
        "verdict": verdict["verdict"], "competent": verdict["competent"],
        "minus_variable_order": verdict["comparisons"][SCOPE]["model - variable order"],
        "minus_ceiling_bound": None if competence is None else competence["comparisons"][SCOPE]["model - ceiling"],
        "probes": None if analysis is None else probe_summary(analysis, layers),
        "heads": None if heads is None else head_summary(heads),
    }


def depth_effect(rows: list[dict]) -> dict:
    """The rule's comparison on one family's rows (sorted by depth): the shallowest network against
    the deepest competent one, for each distance both have."""
    shallow = rows[0]
    competent = [row for row in rows[1:] if row["competent"]]
    if not competent:
        return {"shallow": shallow["run"], "deep": None, "reason": "no deeper competent network"}
    deep = competent[-1]
    effect = {"shallow": shallow["run"], "deep": deep["run"]}
    for key in ("minus_ceiling_bound", "minus_variable_order"):
        both = deep[key] is not None and shallow[key] is not None
        effect[key] = _difference(deep[key], shallow[key]) if both else None
    return effect


def depth_study(folders: list[Path]) -> dict:
    """Every network's row, grouped by family and sorted by depth, with each family's depth effect."""
    rows = [network_row(folder) for folder in folders]
    families: dict[str, list[dict]] = {}
    for row in rows:
        families.setdefault(row["family"], []).append(row)
    out = {}
    for family, members in sorted(families.items()):
        members.sort(key=lambda row: row["layers"])
        depths = [row["layers"] for row in members]
        if len(set(depths)) != len(depths):
            raise ValueError(f"--points: two networks of {family} have {depths} layers; expected one network a depth "
                             f"and family")
        out[family] = {"networks": members, "effect": depth_effect(members) if len(members) > 1 else None}
    return {"rules": RULES, "held": HELD, "scope": SCOPE, "families": out}
