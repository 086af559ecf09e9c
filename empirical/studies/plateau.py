"""The plateau study (``hmmtf plateau``, issue 51; ``docs/empirical.md``, "The plateau study"): when
a network trained on a 128-state family leaves the in-context unigram counter, for each training
recipe (an *arm*: the plain recipe, soft targets, a curriculum, an attention scale, another
learning rate or batch at the same tokens) and family, from the learning curves that
``hmmtf curve`` recorded while the runs trained (``curve.jsonl``: 256 prompts of 1024 fresh HMMs
per point, paired per prompt against the in-context n-grams).

The rules, fixed before the study's runs were read, are :data:`RULES`.
"""
from __future__ import annotations

import json
from pathlib import Path

from empirical.training.presets import PRESETS
from empirical.training.result_files import NGRAM_VERDICT_FILE
from empirical.yardsticks.curves import run_summary

RULES = """\
- **Escape.** A run escapes at the first curve point at which its test-sequence loss is below the
  in-context bigram's with 95% confidence: the upper end of the paired interval of ``model -
  bigram`` (``test_sequence.model_minus["ngram 2"].interval_95``) is below 0. Its escape budget is
  that point's training tokens over the paper's budget (131,072
  prompts of 263 tokens), bracketed by the point before: the escape happened in ``(previous,
  escape]``. A run that has not escaped at its last point is *censored* there (it escapes later,
  if at all).
- **An arm over seeds.** Its escape range is the hull of its seeds' brackets, ``[lowest start,
  highest end]``: with two seeds a range, not a confidence interval. An arm with a censored seed
  has escaped, at the earliest, after that seed's last point.
- **Comparison.** Arm A escapes earlier than arm B when A's range ends at or before B's begins:
  every seed of A escaped before any seed of B. B escapes later likewise. A censored arm is later
  than an arm whose range ends at or before its censoring point. Otherwise the study does not
  resolve a difference.
- **Budget.** A run stops one curve point after its escape, or, censored, at 4x the paper's budget
  in screening; the best two arms and the plain recipe get a second seed, under the same stop,
  capped at 8x (``benchmarks/plateau_queue.py`` applies it).
- **Signal.** A family's in-context signal is the in-context unigram's mean test-sequence loss
  minus the bigram's, on the scoring prompts of its runs (``curve_baselines.json``), averaged over
  them; each arm's escape range is reported against it, per family. For an arm run on several
  families, each family is compared with the next by signal, by the comparison rule: the escape
  falls with the signal when every family with more signal escapes earlier than the one before.
"""
"""The escape, range and comparison rules, as ``plateau.json`` states them."""
ESCAPE_SCOPE = "test_sequence"
ESCAPE_BASELINE = "ngram 2"
"""The rule's scope and yardstick: the test sequence, the in-context bigram."""


def paper_budget_tokens() -> int:
    """The paper's training budget in tokens: the ``paper`` preset's steps x batch x prompt length
    (4096 x 32 x 263 = 34,471,936)."""
    paper = PRESETS["paper"]
    return paper.train.steps * paper.train.batch_size * paper.prompt_format.length


def escape(points: list[dict], budget_tokens: int) -> dict:
    """The escape rule (:data:`RULES`) on a run's curve ``points`` (in order of step):
    ``{"escaped": True, "step", "budget", "bracket": [previous budget, budget]}``, or
    ``{"escaped": False, "censored_at": last budget}``; budgets in units of ``budget_tokens``."""
    if not points:
        raise ValueError("points: none; expected a run with at least one curve point")
    previous = 0
    for point in points:
        if point[ESCAPE_SCOPE]["model_minus"][ESCAPE_BASELINE]["interval_95"][1] < 0:
            return {"escaped": True, "step": point["step"], "budget": point["tokens"] / budget_tokens,
                    "bracket": [previous / budget_tokens, point["tokens"] / budget_tokens]}
        previous = point["tokens"]
    return {"escaped": False, "censored_at": points[-1]["tokens"] / budget_tokens}


def escape_range(escapes: list[dict]) -> dict:
    """An arm's escape over its seeds' :func:`escape` records: ``{"escaped": True, "range": [lowest
    bracket start, highest bracket end]}`` when every seed escaped, else ``{"escaped": False,
    "after": the earliest censoring point}`` (at least one seed escapes after it, if at all)."""
    censored = [record["censored_at"] for record in escapes if not record["escaped"]]
    if censored:
        return {"escaped": False, "after": min(censored)}
    return {"escaped": True, "range": [min(record["bracket"][0] for record in escapes),
                                       max(record["bracket"][1] for record in escapes)]}


def compare(arm: dict, baseline: dict) -> str:
    """``"earlier"``, ``"later"`` or ``"unresolved"``: ``arm``'s :func:`escape_range` against the
    ``baseline``'s, by the comparison rule of :data:`RULES`."""
    if arm["escaped"] and baseline["escaped"]:
        if arm["range"][1] <= baseline["range"][0]:
            return "earlier"
        if baseline["range"][1] <= arm["range"][0]:
            return "later"
        return "unresolved"
    if arm["escaped"] and arm["range"][1] <= baseline["after"]:
        return "earlier"
    if baseline["escaped"] and baseline["range"][1] <= arm["after"]:
        return "later"
    return "unresolved"


def run_record(run_dir: Path, verdicts: list[Path], budget_tokens: int) -> dict:
    """One run: its :func:`~empirical.yardsticks.curves.run_summary`, its seeds, its escape and,
    from the first folder of ``verdicts`` that holds ``RUN/ngram-verdict.json``, that verdict (step
    and words)."""
    summary = run_summary(run_dir)
    record = {**summary, "seed": summary["train"]["seed"], "escape": escape(summary["points"], budget_tokens)}
    found = [folder / summary["run"] / NGRAM_VERDICT_FILE for folder in verdicts
             if (folder / summary["run"] / NGRAM_VERDICT_FILE).is_file()]
    if found:
        verdict = json.loads(found[0].read_text())
        record["ngram_verdict"] = {"file": str(found[0]), "step": verdict["step"], "verdict": verdict["verdict"],
                                   "beats": verdict["beats"]}
    return record


def family_signals(rows: list[dict]) -> dict[str, dict]:
    """Per family of the study's ``rows``, its in-context signal (:data:`RULES`): ``{"signal_nats":
    mean over its runs of loss(unigram) - loss(bigram) on the test sequence, "runs": count}``."""
    gains: dict[str, list[float]] = {}
    for row in rows:
        for run in row["runs"]:
            losses = run["baselines"][ESCAPE_SCOPE]
            gains.setdefault(row["family"], []).append(losses["ngram 1"] - losses[ESCAPE_BASELINE])
    return {family: {"signal_nats": sum(values) / len(values), "runs": len(values)} for family, values in gains.items()}


def signal_order(rows: list[dict], signals: dict[str, dict]) -> list[dict]:
    """Per arm run on two or more families: its families in order of rising signal and, for each
    after the first, its :func:`compare` against the one before (``"earlier"``: more signal, an
    earlier escape)."""
    orders = []
    for arm in dict.fromkeys(row["arm"] for row in rows):
        ranked = sorted((row for row in rows if row["arm"] == arm), key=lambda row: signals[row["family"]]["signal_nats"])
        if len(ranked) > 1:
            orders.append({"arm": arm, "families": [row["family"] for row in ranked],
                           "against_less_signal": [compare(more["escape"], less["escape"])
                                                   for less, more in zip(ranked, ranked[1:])]})
    return orders


def family_ceilings(ceilings: list[Path], rows: list[dict]) -> dict[str, dict]:
    """Per family with a bound on its ceiling (the JSON of ``benchmarks/ceiling_bounds.py``, whose
    prompts are the competence result's first ones, as a curve's): on the test sequence, the bound
    (the loss of the averaged collapsed-SMC replicates, at least the ceiling's), it and the oracle
    minus the in-context bigram, and what it was computed with. Refused when no run of the study is
    of its family, or when it was computed on other prompts than the family's runs were scored on
    (another count or number of fresh HMMs, or another bigram loss)."""
    found = {}
    for path in ceilings:
        bounds = json.loads(path.read_text())
        family = bounds["mixture"]
        runs = [run for row in rows if row["family"] == family for run in row["runs"]]
        if not runs:
            raise ValueError(f"--ceilings: {str(path)!r} bounds {family!r}; expected a family the study's runs train on")
        scope = bounds["scopes"][ESCAPE_SCOPE]
        bigram = scope["baselines"][ESCAPE_BASELINE]["mean"]
        probe, scored = runs[0]["probe"], runs[0]["baselines"][ESCAPE_SCOPE][ESCAPE_BASELINE]
        if (bounds["prompts"], bounds["fresh_tasks"]) != (probe["num_prompts"], probe["fresh_tasks"]) or \
                abs(bigram - scored) > 1e-9:
            raise ValueError(f"--ceilings: {str(path)!r} was computed on {bounds['prompts']} prompts of "
                             f"{bounds['fresh_tasks']} fresh HMMs (bigram {bigram:.6f}); expected the prompts the runs "
                             f"of {family!r} were scored on ({probe['num_prompts']} of {probe['fresh_tasks']}, bigram "
                             f"{scored:.6f})")
        bound = scope["bound"]["mean"]
        found[family] = {"file": str(path), "bound": bound, "bound_minus_bigram": bound - bigram,
                         "oracle_minus_bigram": scope["baselines"]["oracle"]["mean"] - bigram,
                         "replicates": bounds["replicates"], "settings": bounds["settings"]}
    return found


def window_share(run: dict, ceiling: dict) -> float:
    """The share of the window from the in-context unigram to the ceiling's bound that ``run`` has
    closed at its last point, on the test sequence: ``(L_1 - L_model) / (L_1 - L_bound)``, every loss
    on the run's scoring prompts (the ceiling lies at or below the bound, so the share of the
    window to the ceiling is at most this)."""
    unigram_minus_bigram = run["baselines"][ESCAPE_SCOPE]["ngram 1"] - run["baselines"][ESCAPE_SCOPE][ESCAPE_BASELINE]
    model_minus_bigram = run["points"][-1][ESCAPE_SCOPE]["model_minus"][ESCAPE_BASELINE]["mean"]
    return (unigram_minus_bigram - model_minus_bigram) / (unigram_minus_bigram - ceiling["bound_minus_bigram"])


def plateau_study(arms: list[tuple[str, list[Path]]], baseline: str, verdicts: list[Path],
                  ceilings: list[Path]) -> dict:
    """The study over ``arms`` (``(name, run folders)``; one family per run, read from its
    checkpoint): per arm and family its runs (:func:`run_record`, with the final verdicts found in
    the folders ``verdicts`` and, where ``ceilings`` bound the family's ceiling, its
    :func:`window_share`), their :func:`escape_range`, and its :func:`compare` against the
    ``baseline`` arm on the same family; per family its :func:`family_signals` (with its
    :func:`family_ceilings`); per arm on several families, its :func:`signal_order`."""
    names = [name for name, _ in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"--arm: names {names}; expected each arm named once")
    if baseline not in names:
        raise ValueError(f"--baseline: {baseline!r}; expected one of the arms {names}")
    budget_tokens = paper_budget_tokens()
    groups: dict[tuple[str, str], list[dict]] = {}
    for name, run_dirs in arms:
        for run_dir in run_dirs:
            record = run_record(Path(run_dir), verdicts, budget_tokens)
            groups.setdefault((name, record["mixture"]), []).append(record)
    rows = [{"arm": name, "family": family, "runs": runs, "escape": escape_range([run["escape"] for run in runs])}
            for (name, family), runs in groups.items()]
    reference = {row["family"]: row["escape"] for row in rows if row["arm"] == baseline}
    for row in rows:
        if row["arm"] != baseline and row["family"] in reference:
            row["against_baseline"] = compare(row["escape"], reference[row["family"]])
    signals = family_signals(rows)
    for family, ceiling in family_ceilings(ceilings, rows).items():
        signals[family]["ceiling"] = ceiling
        for row in (row for row in rows if row["family"] == family):
            for run in row["runs"]:
                run["window_share_at_last_point"] = window_share(run, ceiling)
    return {"rules": RULES, "paper_budget_tokens": budget_tokens, "baseline": baseline, "arms": rows,
            "families": signals, "signal_order": signal_order(rows, signals)}
