"""Figures of an evaluation (the paper's Figure 1 beside the Bayes-optimal and unigram
predictors), of a training run's loss curve, and of a calibration of the Dirichlet concentration.

Each is drawn from the JSON its result is written as (read back from a file or just written): an
evaluation is :class:`empirical.yardsticks.evaluate.Evaluation` as :func:`bounds.serialize.to_json`
writes it, alone or inline in a report of :mod:`empirical.reports.evaluation`; those classes
name the keys the evaluation figures read."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import matplotlib.patches
import matplotlib.ticker
from matplotlib.ticker import MaxNLocator

from empirical.plotting import plt

STYLES = {
    "model": {"color": "tab:blue", "marker": "o", "label": "RoFormer"},
    "bayes": {"color": "black", "marker": "s", "label": "Bayes-optimal"},
    "unigram": {"color": "tab:gray", "marker": "^", "label": "unigram"},
    "oracle": {"color": "tab:green", "marker": "v", "linestyle": "--", "label": "oracle (the prompt's own HMM)"},
}
FRESH_STYLES = {
    **STYLES,
    "bayes_training": {"color": "black", "marker": "s", "label": "Bayes of the training mixture"},
    "bayes_reference": {"color": "tab:purple", "marker": "D", "label": "Bayes of the reference mixture"},
}


def _draw_curves(axis, curve: dict, x_key: str, metric: str, styles: dict[str, dict] = STYLES) -> None:
    """One error-bar curve per predictor of ``styles`` found in ``curve`` (mean +- s.e.) against
    ``curve[x_key]``, a count (demonstrations, positions): integer ticks. A style's ``x_offset``
    shifts its curve sideways (curves that would lie on each other)."""
    for name, style in styles.items():
        if name not in curve:
            continue
        mean = curve[name][metric]
        stderr = curve[name][f"{metric}_stderr"]
        options = {"linestyle": "-", "markersize": 4, **style}
        offset = options.pop("x_offset", 0.0)
        x = [value + offset for value in curve[x_key]]
        axis.errorbar(x, mean, yerr=stderr, capsize=2, elinewidth=1.0, **options)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))


def _legend_below(figure, axes) -> None:
    """One legend for all ``axes``, below them, outside every panel (so it covers no curve); a
    label drawn in several panels appears once."""
    handles: dict[str, object] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=3, fontsize=8)


def plot_in_context(evaluation: dict, path: Path) -> None:
    """2 x 2 panels: top-1 accuracy and loss vs number of demonstrations and vs position in the
    test sequence, for every predictor of ``evaluation`` (a written :class:`Evaluation`)."""
    figure, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    panels = [
        ("by_demonstrations", "num_demonstrations", "number of demonstrations"),
        ("by_test_position", "position", "position in the test sequence"),
    ]
    for column, (key, x_key, x_label) in enumerate(panels):
        for row, (metric, y_label) in enumerate((("accuracy", "top-1 accuracy"), ("loss", "loss (nats/token)"))):
            axis = axes[row, column]
            _draw_curves(axis, evaluation[key], x_key, metric)
            axis.set_xlabel(x_label)
            axis.set_ylabel(y_label)
            axis.grid(alpha=0.3)
    _legend_below(figure, axes.flat)
    fmt = evaluation["prompt_format"]
    figure.suptitle(
        f"{evaluation['num_prompts']} held-out prompts, {fmt['num_demos']} demonstrations of "
        f"{fmt['demo_length']} tokens, test sequence of {fmt['test_length']} (mean +- s.e.)"
    )
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_regime(evaluation: dict, path: Path) -> None:
    """Loss vs number of demonstrations on the training HMMs (left) and on fresh HMMs (right,
    ``evaluation["regime"]``, a written :class:`empirical.yardsticks.regime.RegimeSection`), with the
    oracle, the Bayes predictors and the unigram; the title gives the memorisation statistic (all
    positions) and its verdict. ``evaluation``: ``evaluation.json`` (:class:`EvaluationReport`)."""
    regime = evaluation["regime"]
    figure, axes = plt.subplots(1, 2, figsize=(11, 5.2), sharey=True, constrained_layout=True)
    panels = [(evaluation, f"training HMMs ({regime['training_tasks']})"),
              (regime["fresh_hmms"], f"fresh HMMs ({regime['fresh_tasks']} never seen; reference mixture of "
                                     f"{regime['reference_tasks']})")]
    # On the training HMMs "bayes" is the training mixture's Bayes predictor: one legend entry with the fresh panel's.
    styles = {**FRESH_STYLES, "bayes": FRESH_STYLES["bayes_training"]}
    for axis, (source, title) in zip(axes, panels):
        _draw_curves(axis, source["by_demonstrations"], "num_demonstrations", "loss", styles)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("number of demonstrations")
        axis.grid(alpha=0.3)
    _legend_below(figure, axes)
    axes[0].set_ylabel("loss (nats/token, mean +- s.e.)")
    result = regime["memorisation"]["all_positions"]
    low, high = result["interval_95"]
    figure.suptitle(f"memorisation = fresh minus training excess over the oracle: {result['memorisation']:.3f} "
                    f"[{low:.3f}, {high:.3f}] nats = {result['fraction_of_gap']:.0%} of the training gap: "
                    f"{result['verdict']}", fontsize=10)
    figure.savefig(path, dpi=130)
    plt.close(figure)


NGRAM_OFFSET = 0.15
"""Sideways shift of the in-context unigram (left) and trigram (right) curves from the bigram's
x: the three n-grams' losses often lie within their error bars of each other, and the bigram was
hidden under the trigram; each also has its own marker, dashes and drawing order."""
LADDER_STYLES = {
    "unigram": STYLES["unigram"],
    "ngram 1": {"color": "tab:olive", "marker": "1", "linestyle": ":", "label": "in-context unigram",
                "x_offset": -NGRAM_OFFSET},
    "ngram 2": {"color": "tab:orange", "marker": "D", "markersize": 3, "linestyle": "--", "zorder": 3.2,
                "label": "in-context bigram"},
    "ngram 3": {"color": "tab:red", "marker": "^", "fillstyle": "none", "linestyle": ":", "zorder": 3.1,
                "label": "in-context trigram", "x_offset": NGRAM_OFFSET},
    "variable order": {"color": "tab:purple", "marker": "v", "markersize": 3, "linestyle": "-.",
                       "label": "variable order (CTW, depth 6)"},
    "model": STYLES["model"],
    "ceiling": {"color": "black", "marker": "s", "label": "prior-predictive ceiling (SMC)"},
    "oracle": STYLES["oracle"],
}
"""The ladder of predictors of :mod:`empirical.yardsticks.competence`, weakest first."""
CEILING_BOUND_STYLE = {**LADDER_STYLES["ceiling"], "fillstyle": "none",
                       "label": "upper bound on the ceiling (collapsed SMC)"}
"""The ceiling's curve where it is the collapsed SMC's upper bound (``ceiling.upper_bound``)."""


def gap_closed_phrase(competence: dict) -> str:
    """The fraction of the in-context-unigram-to-ceiling gap (all positions) the model closes, with
    its 95% interval, in words that match its sign: ``closes 77% [75%, 80%] of the ... gap``;
    ``closes -1% [-4%, 2%] ...: not resolved from none``; for a model whose loss is above the
    in-context unigram's, ``closes none of the ... gap: its loss is above the in-context unigram's
    by 133% [118%, 149%] of it`` (not "closes -133%")."""
    closed = competence["gap_closed"]["all_positions"]
    fraction, (low, high) = closed["fraction"], closed["interval_95"]
    gap = f"the in-context-unigram-to-ceiling gap ({closed['gap_nats']:.3f} nats)"
    if competence["ceiling"].get("upper_bound"):
        gap = (f"the gap from the in-context unigram to the ceiling's upper bound ({closed['gap_nats']:.3f} nats; "
               f"of the gap to the ceiling, at most that)")
    if high < 0:
        return (f"closes none of {gap}: its loss is above the in-context unigram's by {-fraction:.0%} "
                f"[{-high:.0%}, {-low:.0%}] of it")
    phrase = f"closes {fraction:.0%} [{low:.0%}, {high:.0%}] of {gap}"
    return phrase + (": not resolved from none" if low <= 0 else "")


def plot_competence(competence: dict, path: Path) -> None:
    """The competence result: top-1 accuracy and loss vs number of demonstrations and vs position
    in the test sequence for the ladder of predictors on fresh HMMs (top two rows), and the
    hand-built network beside the same ladder on the rows it serves (bottom row, loss); the title
    gives the verdict, in the ledger's words whether the model is competent (it beats the in-context
    bigram: ``holds``, else ``not reproduced``, as ``ledger/ladder.py``'s ``competent`` judges it), and
    the fraction of the in-context-unigram-to-ceiling gap the model closes (:func:`gap_closed_phrase`).
    ``competence``: ``competence.json`` (a written :class:`CompetenceReport`)."""
    figure, axes = plt.subplots(3, 2, figsize=(11, 11), constrained_layout=True)
    panels = [("by_demonstrations", "num_demonstrations", "number of demonstrations"),
              ("by_test_position", "position", "position in the test sequence")]
    ceiling = competence["ceiling"]
    ladder_styles = {**LADDER_STYLES, **({"ceiling": CEILING_BOUND_STYLE} if ceiling.get("upper_bound") else {})}
    hand_built_styles = {**ladder_styles, "hand-built": {
        "color": "tab:brown", "marker": "x", "linestyle": "-.",
        "label": "hand-built (L = {history_length}, T = {gd_steps})".format(**competence["hand_built_network"])}}
    rows = [(competence["ladder"], "accuracy", "top-1 accuracy", ladder_styles),
            (competence["ladder"], "loss", "loss (nats/token)", ladder_styles),
            (competence["hand_built"], "loss", "loss on the hand-built rows", hand_built_styles)]
    for row, (evaluation, metric, y_label, styles) in enumerate(rows):
        for column, (key, x_key, x_label) in enumerate(panels):
            axis = axes[row, column]
            _draw_curves(axis, evaluation[key], x_key, metric, styles)
            axis.set_xlabel(x_label)
            axis.set_ylabel(y_label)
            axis.grid(alpha=0.3)
        axes[row, 1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    competent = "holds" if competence["competent"] else "not reproduced"
    method = (f"ceiling's upper bound: collapsed SMC, {ceiling['replicates']} runs x {ceiling['particles']} particles, "
              f"K = {ceiling['burn_in_steps']}" if ceiling.get("upper_bound") else
              f"ceiling: SMC, {ceiling['replicates']} x {ceiling['particles']} particles")
    figure.suptitle(
        f"{competence['num_prompts']} prompts of {competence['fresh_tasks']} fresh HMMs: {competence['verdict']} "
        f"(competent, beats the in-context bigram: {competent})\n{gap_closed_phrase(competence)}\n{method}, "
        f"Monte-Carlo s.e. "
        f"{ceiling['monte_carlo_stderr']['all_positions']:.4f} nats\n(mean +- s.e. over prompts; in-context uni- and "
        f"trigram drawn {NGRAM_OFFSET:g} left and right)", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_training_loss(metrics_path: Path, evaluation: dict, path: Path) -> None:
    """Training loss (JSON-lines log) vs step, with the held-out Bayes-optimal and unigram losses
    over all predicted positions (``evaluation["excess_all_positions"]``, a written :class:`Evaluation`)
    as horizontal lines."""
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    figure, axis = plt.subplots(figsize=(6, 4), constrained_layout=True)
    axis.plot([r["step"] for r in records], [r["loss"] for r in records], color=STYLES["model"]["color"],
              label="RoFormer (training batches)")
    scope = evaluation["excess_all_positions"]
    axis.axhline(scope["bayes_loss"], color=STYLES["bayes"]["color"], linestyle="--", label="Bayes-optimal (held out)")
    axis.axhline(scope["unigram_loss"], color=STYLES["unigram"]["color"], linestyle=":", label="unigram (held out)")
    axis.set_xlabel("step")
    axis.set_ylabel("loss (nats/token)")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.grid(alpha=0.3)
    _legend_below(figure, [axis])
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_calibration(report: dict, path: Path) -> None:
    """Bayes-optimal top-1 accuracy (left) and Bayes-optimal and unigram losses (right) vs number of
    demonstrations, one curve per concentration of ``report`` (from :func:`empirical.yardsticks.calibrate.calibrate`)."""
    figure, (accuracy_axis, loss_axis) = plt.subplots(1, 2, figsize=(10, 4.8), constrained_layout=True)
    for index, entry in enumerate(report["results"]):
        label, color = f"Dirichlet({entry['concentration']:g})", f"C{index}"
        accuracy_axis.errorbar(entry["num_demonstrations"], entry["bayes_accuracy"], yerr=entry["bayes_accuracy_stderr"],
                               marker="o", capsize=2, color=color, label=f"{label} Bayes")
        loss_axis.plot(entry["num_demonstrations"], entry["bayes_loss"], marker="o", color=color, label=f"{label} Bayes")
        loss_axis.plot(entry["num_demonstrations"], entry["unigram_loss"], linestyle=":", color=color,
                       label=f"{label} unigram")
    accuracy_axis.set(xlabel="number of demonstrations", ylabel="Bayes-optimal top-1 accuracy")
    loss_axis.set(xlabel="number of demonstrations", ylabel="loss (nats/token)")
    for axis in (accuracy_axis, loss_axis):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    _legend_below(figure, [accuracy_axis, loss_axis])
    figure.suptitle(f"In-context signal of the '{report['preset']}' mixture vs Dirichlet concentration ({report['num_prompts']} prompts, mean +- s.e.)")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def side_by_side_styles(history_length: int, gd_steps: list[int]) -> dict[str, dict]:
    """Styles of the predictors of one L in :func:`plot_side_by_side` (names of
    :func:`empirical.yardsticks.hand_built.side_by_side_predictors`)."""
    reds = plt.get_cmap("Reds")
    styles = {
        **STYLES,
        f"P_L L={history_length}": {"color": "tab:green", "marker": "D", "linestyle": "--",
                                    "label": "P_L (exact L-memory, own HMM)"},
        f"least squares L={history_length}": {"color": "tab:purple", "marker": "v", "linestyle": ":",
                                              "label": "least squares W+ x (in-context)"},
    }
    for index, steps in enumerate(gd_steps):
        # Fewer steps: a wider, lighter line, so that curves that coincide stay visible.
        share = index / max(len(gd_steps) - 1, 1)
        styles[f"hand-built L={history_length} T={steps}"] = {
            "color": reds(0.4 + 0.55 * share), "marker": "x", "linewidth": 4.0 - 2.5 * share, "alpha": 0.9 - 0.3 * (1 - share),
            "label": f"hand-built W_T x, T = {steps}"}
    return styles


def plot_side_by_side(evaluation: dict, history_lengths: list[int], gd_steps: list[int], path: Path) -> None:
    """The paper's Figure 1 for both networks: one row per history length L, columns top-1
    accuracy and loss vs number of demonstrations and vs position in the test sequence; in every
    panel the RoFormer, Bayes-optimal, unigram, P_L, least squares and the hand-built network
    for each T (all on the same rows, ``evaluation`` from ``evaluate_predictors(..., rows=...)``:
    ``hand_built.json``, a written :class:`SideBySideReport`)."""
    panels = [("by_demonstrations", "num_demonstrations", "number of demonstrations k"),
              ("by_test_position", "position", "position in the test sequence")]
    metrics = (("accuracy", "top-1 accuracy"), ("loss", "loss (nats/token)"))
    figure, axes = plt.subplots(len(history_lengths), 4, figsize=(18, 3.6 * len(history_lengths) + 1),
                                constrained_layout=True, squeeze=False)
    for row, history_length in enumerate(history_lengths):
        styles = side_by_side_styles(history_length, gd_steps)
        for column, ((key, x_key, x_label), (metric, y_label)) in enumerate(
                [(panel, metric) for panel in panels for metric in metrics]):
            axis = axes[row, column]
            _draw_curves(axis, evaluation[key], x_key, metric, styles)
            axis.set_xlabel(x_label)
            axis.set_ylabel(f"{y_label}, L = {history_length}")
            axis.grid(alpha=0.3)
    figure.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=4, fontsize=9)
    fmt = evaluation["prompt_format"]
    figure.suptitle(
        f"Hand-built (W_T x) and trained networks side by side: {evaluation['num_prompts']} held-out prompts, "
        f"{fmt['num_demos']} demonstrations of {fmt['demo_length']} tokens, test sequence of {fmt['test_length']}; "
        f"rows predicting tokens at offset >= {max(history_lengths)} of segments 1..{fmt['num_demos']} (mean +- s.e.)"
    )
    figure.savefig(path, dpi=110)
    plt.close(figure)


SIGNAL_BARS = ("ngram 2", "ngram 3", "ceiling", "oracle")
"""The predictors of :func:`plot_signal`, each drawn as its gain over the in-context unigram."""


def plot_signal(report: dict, path: Path) -> None:
    """``hmmtf signal``: per family, the loss each predictor gains over the in-context unigram
    (nats/token, mean +- s.e. over prompts), in the test sequence and over all positions; the
    ceiling's bar is the family's in-context signal."""
    names = list(report["families"])
    figure, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.9 * len(names)), sharey=True, constrained_layout=True)
    height = 0.8 / len(SIGNAL_BARS)
    for axis, scope in zip(axes, ("test_sequence", "all_positions")):
        for index, predictor in enumerate(SIGNAL_BARS):
            gains, errors = [], []
            for name in names:
                losses = report["families"][name]["scopes"][scope]["loss"]
                gains.append(losses["ngram 1"]["mean"] - losses[predictor]["mean"])
                errors.append(losses[predictor]["stderr"])
            rows = [row - 0.4 + height * (index + 0.5) for row in range(len(names))]
            axis.barh(rows, gains, height=height, xerr=errors, color=LADDER_STYLES[predictor]["color"],
                      label=LADDER_STYLES[predictor]["label"], capsize=2)
        axis.set_yticks(range(len(names)), names)
        axis.invert_yaxis()
        axis.set_xlabel("gain over the in-context unigram (nats/token)")
        axis.set_title(scope.replace("_", " "))
        axis.grid(axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=8, loc="outside lower center", ncol=len(SIGNAL_BARS))
    figure.suptitle(f"In-context signal of each family: {report['families'][names[0]]['num_prompts']} prompts of "
                    f"{report['families'][names[0]]['fresh_tasks']} fresh HMMs per family", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


FAMILY_PANELS = (
    ("oracle top-1 accuracy", lambda test: test["accuracy"]["oracle"], "min_oracle_accuracy"),
    ("in-context unigram - bigram (nats)", lambda test: test["differences"]["ngram 1 - ngram 2"], "min_bigram_gain"),
    ("best in-context n-gram - oracle (nats)", lambda test: test["differences"]["best ngram - oracle"],
     "min_oracle_margin"),
)
"""The panels of :func:`plot_family_calibration`: title, the test-sequence quantity, its threshold."""


def plot_family_calibration(report: dict, path: Path) -> None:
    """``hmmtf family-calibration``: per rule condition a map over the grid (transition
    concentration down, emission across) of the test-sequence quantity's mean with its 95%
    interval's lower end; cells that meet the condition in bold, the families that meet all three
    framed, the rule's choice framed thick."""
    families = report["families"]
    transitions = sorted({family["spec"]["transition_concentration"] for family in families.values()})
    emissions = sorted({family["spec"]["emission_concentration"] for family in families.values()})
    cell = {(family["spec"]["transition_concentration"], family["spec"]["emission_concentration"]): name
            for name, family in families.items()}
    figure, axes = plt.subplots(1, len(FAMILY_PANELS), figsize=(5.2 * len(FAMILY_PANELS), 5.2), constrained_layout=True)
    for axis, (title, quantity, threshold_key) in zip(axes, FAMILY_PANELS):
        threshold = report["thresholds"][threshold_key]
        means = [[float("nan")] * len(emissions) for _ in transitions]
        for (t, o), name in cell.items():
            means[transitions.index(t)][emissions.index(o)] = quantity(families[name]["scopes"]["test_sequence"])["mean"]
        image = axis.imshow(means, cmap="viridis", aspect="equal")
        figure.colorbar(image, ax=axis, shrink=0.8)
        for (t, o), name in cell.items():
            row, column = transitions.index(t), emissions.index(o)
            value = quantity(families[name]["scopes"]["test_sequence"])
            met = value["interval_95"][0] >= threshold
            axis.text(column, row, f"{value['mean']:.3f}\n>={value['interval_95'][0]:.3f}", ha="center", va="center",
                      fontsize=7.5, color="white" if value["mean"] < (max(map(max, means)) + min(map(min, means))) / 2
                      else "black", fontweight="bold" if met else "normal")
            if all(families[name]["rule_checks"].values()):
                width = 3.5 if name == report["choice"] else 1.2
                axis.add_patch(matplotlib.patches.Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False,
                                                            edgecolor="red", linewidth=width))
        axis.set_xticks(range(len(emissions)), [f"{o:g}" for o in emissions])
        axis.set_yticks(range(len(transitions)), [f"{t:g}" for t in transitions])
        axis.set_xlabel("emission concentration")
        axis.set_ylabel("transition concentration")
        axis.set_title(f"{title}\ncondition: lower end >= {threshold:g} (bold)", fontsize=9)
    first = next(iter(families.values()))
    choice = report["choice"] or "none qualifies"
    figure.suptitle(f"Paper-scale families ({first['spec']['num_states']} states, {first['spec']['num_tokens']} tokens): "
                    f"test sequence, {first['num_prompts']} prompts of {first['fresh_tasks']} fresh HMMs per cell, mean "
                    f"and 95% lower end\nred frames: all three conditions met; thick: the rule's choice ({choice})",
                    fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_curve(points: list[dict], baselines: dict[str, dict[str, float]], path: Path) -> None:
    """A learning curve of :mod:`empirical.yardsticks.curves`: the model's loss on fresh HMMs against the
    tokens it has seen, in the test sequence and over all positions, beside the in-context
    n-grams, the prior-predictive ceiling and the oracle on the same prompts (horizontal lines)."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    tokens = [point["tokens"] for point in points]
    for axis, scope in zip(axes, ("test_sequence", "all_positions")):
        axis.plot(tokens, [point[scope]["model_loss"] for point in points], **{**STYLES["model"], "markersize": 3})
        for name in ("ngram 1", "ngram 2", "ngram 3", "ceiling", "oracle"):
            if name not in baselines[scope]:
                continue
            style = LADDER_STYLES[name]
            axis.axhline(baselines[scope][name], color=style["color"], linestyle=style.get("linestyle", "--"),
                         label=style["label"])
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.set_xlabel("training tokens seen")
        axis.set_ylabel("loss on fresh HMMs (nats/token)")
        axis.set_title(scope.replace("_", " "))
        axis.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_curves(study: dict, path: Path) -> None:
    """A study of :mod:`empirical.yardsticks.curves`: every run's gain over the in-context unigram on fresh
    HMMs against the tokens it has seen (test sequence and all positions), beside the bigram's,
    the trigram's and the ceiling's gains on the same prompts (dotted: each run's own probe). A run
    branched from another is drawn dashed from its branch point on (before it, it is its source)."""
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for axis, scope in zip(axes, ("test_sequence", "all_positions")):
        for index, run in enumerate(study["runs"]):
            baselines = run["baselines"][scope]
            branch_step = run["branched_from"]["step"] if run.get("branched_from") else 0
            points = [point for point in run["points"] if point["step"] >= branch_step]
            gains = [baselines["ngram 1"] - point[scope]["model_loss"] for point in points]
            axis.plot([point["tokens"] for point in points], gains, marker="o", markersize=3,
                      color=colors[index % len(colors)], linestyle="--" if branch_step else "-", label=run["run"])
        reference = study["runs"][0]["baselines"][scope]
        for name in ("ngram 2", "ngram 3", "ceiling"):
            if name not in reference:
                continue
            style = LADDER_STYLES[name]
            axis.axhline(reference["ngram 1"] - reference[name], color=style["color"], linestyle=":",
                         label=style["label"])
        axis.axhline(0, color=LADDER_STYLES["ngram 1"]["color"], linestyle=":", label=LADDER_STYLES["ngram 1"]["label"])
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # minor labels collide on a log axis
        axis.set_xlabel("training tokens seen")
        axis.set_ylabel("gain over the in-context unigram (nats/token)")
        axis.set_title(scope.replace("_", " "))
        axis.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.suptitle(study["title"], fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)
