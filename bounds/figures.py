"""The six figures of the verification run, drawn from the report dict alone (the JSON).

1. ``lemma1_decay.png``: ``E|P - P_L|_1`` vs L (log scale), one panel per gamma, fitted lines and
   the Lemma 1 bound ``d exp(-gamma^4 L / C)`` with the fitted C.
2. ``decay_rate_vs_gamma4.png``: fitted decay rate vs gamma^4 per prior, beside the rate
   ``gamma^4 / C`` the bound guarantees.
3. ``theorem1_terms.png``: approximation vs L, generalization vs N', optimization vs T,
   construction vs beta, each beside its bound.
4. ``gd_convergence.png``: ``||W_t - W_hat||_F / ||W_hat||_F`` vs t / kappa beside Lemma 5.
5. ``construction_vs_beta.png``: construction error vs beta beside the leak formula and the bound.
6. ``theorem2_decay.png``: under-complete HMMs, m = 1, 2, 3: ``E|P^(m) - P_L^(m)|_1`` vs L beside
   Lemma 2's bound with ``gamma_m``; the in-context predictor's error vs L (joint law and next
   token); ``gamma_m`` of the suite and the certified bounds of the preset's HMMs.

A fitted C may be the string "inf" (:data:`bounds.serialize.INFINITY`), or the number Infinity in
reports written before it: each is read with ``float``, which reads both as ``inf``.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker
import numpy as np

from bounds import fitting, formulas
from empirical.plotting import plt

GAMMA_COLORS = plt.get_cmap("viridis")
CONCENTRATION_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def _gamma_color(gamma: float, gammas: list[float]):
    return GAMMA_COLORS(np.searchsorted(sorted(gammas), gamma) / max(len(gammas) - 1, 1) * 0.85)


def lemma1_decay(report: dict, path: Path) -> None:
    """Figure 1 (module docstring), stationary prior."""
    lengths = np.array(report["lemma1"]["lengths"], dtype=float)
    C = float(report["lemma1"]["fits"]["stationary"]["C"])
    knobs = sorted({entry["gamma_knob"] for entry in report["suite"]})
    fig, axes = plt.subplots(1, len(knobs), figsize=(4.2 * len(knobs), 4.2), sharey=True, squeeze=False)
    for ax, knob in zip(axes[0], knobs):
        members = [entry for entry in report["suite"] if entry["gamma_knob"] == knob]
        cells = sorted({(entry["rank"], entry["transition_concentration"]) for entry in members})
        for entry in members:
            result = entry["lemma1"]["stationary"]
            color = CONCENTRATION_COLORS[cells.index((entry["rank"], entry["transition_concentration"])) % 4]
            style = "-" if entry["half"] == "fit" else "--"
            rate = result["decay_rate"]
            label = f"d={entry['rank']}, c={entry['transition_concentration']:g}, {entry['half']}: " + (
                "r too fast" if rate is None else f"r={rate:.2g}"
            )
            ax.semilogy(lengths, np.maximum(result["errors"], 1e-18), style, marker="o", ms=3, color=color, label=label)
            if rate is not None:
                ax.semilogy(lengths, np.exp(result["decay_intercept"] - rate * lengths), ":", color=color, lw=1)
        gamma = members[0]["gamma"]
        for rank in sorted({entry["rank"] for entry in members}):
            bound = [formulas.lemma1_bound(gamma, rank, length, C) for length in lengths]
            ax.semilogy(lengths, bound, "k-" if rank == min(e["rank"] for e in members) else "k-.", lw=1.5,
                        label=f"Lemma 1 bound d={rank}, C={C:.2g}")
        ax.axhline(fitting.ROUNDING_FLOOR, color="grey", lw=0.8)  # errors the fits leave out as rounding
        ax.set_title(f"gamma = {gamma:.2g} (gamma^4 = {gamma**4:.2g})")
        ax.set_xlabel("memory length L (tokens)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.legend(fontsize=6, loc="lower left")
    axes[0][0].set_ylabel("E ||P - P_L||_1  (stationary prior)")
    axes[0][0].set_ylim(1e-17, 10)
    fig.suptitle("Lemma 1: error of the L-memory predictor vs L (dotted: fitted exp(a - rL); grey: rounding floor)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def decay_rate_vs_gamma4(report: dict, path: Path) -> None:
    """Figure 2 (module docstring)."""
    fits = report["lemma1"]["fits"]
    fig, axes = plt.subplots(1, len(fits), figsize=(4.6 * len(fits), 4.4), sharey=True, squeeze=False)
    concentrations = sorted({entry["transition_concentration"] for entry in report["suite"]})
    for ax, (prior, fit) in zip(axes[0], fits.items()):
        for entry in report["suite"]:
            rate = entry["lemma1"][prior]["decay_rate"]
            if rate is None:
                continue
            color = CONCENTRATION_COLORS[concentrations.index(entry["transition_concentration"]) % 4]
            marker = "o" if entry["rank"] < entry["num_states"] else "s"
            face = color if entry["half"] == "fit" else "none"
            ax.loglog(entry["gamma"] ** 4, rate, marker, color=color, mfc=face, ms=6)
        grid = np.logspace(np.log10(min(e["gamma"] for e in report["suite"]) ** 4 / 1.5), 0, 50)
        C = float(fit["C"])
        ax.loglog(grid, grid / C, "k-", label=f"bound's rate gamma^4 / C, C = {C:.2g}")
        for c, color in zip(concentrations, CONCENTRATION_COLORS):
            ax.plot([], [], "o", color=color, label=f"transition concentration {c:g}")
        ax.plot([], [], "o", color="grey", label="rank d < S (circle), full rank (square)")
        ax.plot([], [], "o", color="grey", mfc="none", label="held-out (open), fit (filled)")
        holds = fit["held_out_members"] - len(fit["held_out_failures"])
        ax.set_title(
            f"prior b0 = {prior}: rate/gamma^4 in [{fit['min_rate_over_gamma4']:.2g}, {fit['max_rate_over_gamma4']:.2g}]\n"
            f"fitted C holds on {holds}/{fit['held_out_members']} held-out HMMs",
            fontsize=9,
        )
        ax.set_xlabel("gamma^4")
        ax.legend(fontsize=7, loc="lower right")
    axes[0][0].set_ylabel("fitted decay rate r of E||P - P_L||_1 (per token of L)")
    fig.suptitle("Lemma 1: measured decay rate vs gamma^4 (the bound needs r >= gamma^4 / C: points above the line)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


BOUND_DASHES = ((0, (6, 3)), (3, (2, 7)), (0, (1, 2)), (0, (6, 2, 1, 2)))
"""Dash patterns of the construction panel's bound lines, one per prompt, so that bounds that
coincide stay told apart: the second's short dashes fall in the first's gaps."""


COINCIDENT_BOUNDS = 0.05
"""Relative difference below which two bound lines of the construction panel, 16 decades tall,
lie within a line width of each other (0.02 decade): the legend says so."""


def _label_log_axis(axis) -> None:
    """Ticks at 1, 2 and 5 times each power of ten, labelled in plain numbers: a log axis spanning
    less than a decade gets several labelled ticks instead of one."""
    axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def theorem1_terms(report: dict, path: Path) -> None:
    """Figure 3 (module docstring)."""
    config = report["config"]
    p, L = config["suite"]["num_tokens"], config["L"]
    C = float(report["lemma1"]["fits"]["stationary"]["C"])
    C_g = report["generalization"]["C_g"]
    knobs = sorted({entry["gamma_knob"] for entry in report["suite"]})
    lengths = np.array(report["lemma1"]["lengths"], dtype=float)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    ax = axes[0, 0]
    for knob in knobs:
        members = [e for e in report["suite"] if e["gamma_knob"] == knob]
        color = _gamma_color(knob, knobs)
        measured = np.mean([e["lemma1"]["stationary"]["errors"] for e in members], axis=0)
        bound = np.mean([[formulas.lemma1_bound(e["gamma"], e["rank"], n, C) for n in lengths] for e in members], axis=0)
        ax.semilogy(lengths, measured, "o-", color=color, ms=3, label=f"gamma={knob:g} measured")
        ax.semilogy(lengths, bound, "--", color=color, label=f"gamma={knob:g} bound")
    ax.set(xlabel="memory length L (tokens)", ylabel="l1 error (mean over HMMs)", title="approximation |P - P_L| vs L")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.legend(fontsize=7, ncol=2)
    ax = axes[0, 1]
    for knob in knobs:
        members = [e for e in report["suite"] if e["gamma_knob"] == knob]
        color = _gamma_color(knob, knobs)
        n = np.array([row["n_samples"] for row in members[0]["generalization_sweep"]])
        measured = np.mean([[row["generalization"] for row in e["generalization_sweep"]] for e in members], axis=0)
        bound = np.mean([[formulas.generalization_bound(p, L, e["lambda_min"], k, C_g) for k in n] for e in members], axis=0)
        ax.loglog(n, measured, "o-", color=color, ms=3, label=f"gamma={knob:g} measured")
        ax.loglog(n, bound, "--", color=color, label=f"gamma={knob:g} C_g sqrt(pL/(lambda N'))")
    ax.set(xlabel="in-context samples N'", ylabel="l1 error (mean over HMMs and prompts)",
           title=f"generalization |W*x - W_hat x| vs N' (C_g = {C_g:.2g}, fit half)")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks(n, [f"{value:g}" for value in n])
    _label_log_axis(ax.yaxis)
    # Below the panel: inside it would cover a curve (the gamma = 0.9 one at N' = 272).
    ax.legend(fontsize=6, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax = axes[1, 0]
    for index, curve in enumerate(report["optimization_curves"][:4]):
        color = f"C{index}"
        t = np.arange(len(curve["prediction_gap"]))
        ax.semilogy(t, np.maximum(curve["prediction_gap"], 1e-18), "-", color=color, label=f"measured, kappa={curve['kappa']:.3g}")
        ax.semilogy(t, curve["bound"], "--", color=color, label="tight bound (1-1/kappa)^T")
        ax.semilogy(t, curve["bound_paper"], ":", color=color, label="paper exp(-T/(2 kappa))")
    ax.set(xlabel="gradient-descent steps T", ylabel="l1 error", title="optimization |W_hat x - W_T x| vs T")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylim(1e-16, None)
    ax.legend(fontsize=6, ncol=2)
    ax = axes[1, 1]
    bounds: list[list[float]] = []
    for index, curve in enumerate(report["construction_curves"]):
        rows = curve["rows"]
        beta = [row["beta"] for row in rows]
        bound = [row["bound"] for row in rows]
        ax.semilogy(beta, [row["measured_l1"] for row in rows], "o-", color=f"C{index}", ms=3, label=f"prompt {index} measured, N={curve['num_columns']}")
        # Prompts of one N have nearly the same bound; each prompt's own dash keeps the line under
        # it visible, and the legend says which lines lie on each other.
        spread = [float(np.max(np.abs(np.array(bound) / np.array(other) - 1))) for other in bounds]
        on_top = [earlier for earlier, gap in enumerate(spread) if gap < COINCIDENT_BOUNDS]
        label = "bound p A eps(beta)"
        if on_top:
            label += f"\n(within {spread[on_top[0]]:.0%} of prompt {on_top[0]}'s: drawn on it)"
        ax.semilogy(beta, bound, linestyle=BOUND_DASHES[index % len(BOUND_DASHES)], color=f"C{index}", lw=1.5,
                    label=label)
        bounds.append(bound)
    ax.set(xlabel="softmax scale beta", ylabel="l1 error", title="construction |W_T x - TF| vs beta")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.legend(fontsize=7)
    fig.suptitle(f"Theorem 1 terms beside their bounds (p={p}, L={L}, T={config['T']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def gd_convergence(report: dict, path: Path) -> None:
    """Figure 4 (module docstring)."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for index, curve in enumerate(report["optimization_curves"]):
        kappa = curve["kappa"]
        t = np.arange(len(curve["relative_distance"]))
        ax.semilogy(t / kappa, curve["relative_distance"], "-", color=f"C{index % 10}", label=f"prompt {index}, kappa={kappa:.3g}")
        ax.semilogy(t / kappa, (1 - 1 / kappa) ** t, "--", color=f"C{index % 10}", lw=0.8)
    grid = np.linspace(0, max(len(c["relative_distance"]) / c["kappa"] for c in report["optimization_curves"]), 100)
    ax.semilogy(grid, np.exp(-grid / 2), "k:", lw=2, label="paper rate exp(-T/(2 kappa))")
    ax.set(xlabel="T / kappa (steps per condition number)", ylabel="||W_T - W_hat||_F / ||W_hat||_F",
           title="GD convergence (solid) beside the tight Lemma 5 rate (1 - 1/kappa)^T (dashed)")
    ax.set_ylim(1e-16, 2)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def construction_vs_beta(report: dict, path: Path) -> None:
    """Figure 5 (module docstring)."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    p = report["config"]["suite"]["num_tokens"]
    for index, curve in enumerate(report["construction_curves"]):
        rows = curve["rows"]
        beta = [row["beta"] for row in rows]
        color = f"C{index}"
        ax.semilogy(beta, [row["measured_max"] for row in rows], "o-", color=color, ms=4,
                    label=f"prompt {index}: measured max_k |(TF - W_T x)_k|, N={curve['num_columns']}")
        ax.semilogy(beta, [row["leak"] for row in rows], "s:", color=color, ms=3, label="leak formula eps(beta) (one layer)")
        ax.semilogy(beta, [row["bound"] / p for row in rows], "--", color=color, label="bound A eps(beta) per coordinate")
    ax.axhline(1e-16, color="grey", lw=0.8)
    ax.set(xlabel="softmax scale beta", ylabel="error per output coordinate",
           title="Construction error vs beta: measured, leak formula, end-to-end bound")
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def theorem2_decay(report: dict, path: Path) -> None:
    """Figure 6 (module docstring)."""
    result = report["theorem2"]
    suite, futures = result["suite"], result["config"]["futures"]
    lengths = np.array(result["config"]["lengths"], dtype=float)
    knobs = sorted({entry["gamma_knob"] for entry in suite})
    fig, axes = plt.subplots(2, max(len(knobs), 3), figsize=(4.4 * max(len(knobs), 3), 8.6), squeeze=False)
    for ax, knob in zip(axes[0], knobs):
        members = [entry for entry in suite if entry["gamma_knob"] == knob]
        for index, m in enumerate(futures):
            key, color = f"m={m}", f"C{index}"
            gamma = float(np.mean([entry["gamma_m"][m - 1] for entry in members]))
            errors = np.mean([entry["approximation"][key]["errors"] for entry in members], axis=0)
            ax.semilogy(lengths, np.maximum(errors, 1e-18), "o-", color=color, ms=3,
                        label=f"m={m}: measured (gamma_{m} = {gamma:.2g})")
            d = members[0]["num_states"]
            if key in result["lemma2"]:
                C = float(result["lemma2"][key]["C"])
                ax.semilogy(lengths, [formulas.lemma1_bound(gamma, d, n, C) for n in lengths], "--", color=color,
                            label=f"m={m}: Lemma 2 bound, C = {C:.2g}")
            elif gamma == 0:
                ax.axhline(d, color=color, ls=":", label=f"m={m}: bound d = {d} (gamma_{m} = 0)")
        lowest = min(min(entry["approximation"][f"m={m}"]["errors"]) for entry in members for m in futures)
        ax.set(xlabel="memory length L (tokens)", ylabel="E ||P^(m) - P_L^(m)||_1 (mean over HMMs)",
               title=f"g = {knob:g} ({len(members)} HMMs)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylim(max(lowest / 10, fitting.ROUNDING_FLOOR), 20)
        ax.legend(fontsize=6, loc="lower left")
    ax = axes[1, 0]
    for index, m in enumerate(futures):
        points = [entry["predictor"][f"m={m}"] for entry in suite]
        curve_lengths = [point["L"] for point in points[0]]
        ax.plot(curve_lengths, np.mean([[point["joint"] for point in row] for row in points], axis=0), "o-",
                color=f"C{index}", ms=3, label=f"m={m}: joint law of the next {m} tokens")
        ax.plot(curve_lengths, np.mean([[point["next_token"] for point in row] for row in points], axis=0), "s--",
                color=f"C{index}", ms=3, label=f"m={m}: its next-token marginal")
    ax.set(xlabel="history length L", ylabel="l1 error (mean over HMMs and prompts)",
           title=f"in-context predictor |P - W_T x| (T = {result['config']['T']})")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    for offset, entry in enumerate(suite):
        shift = (offset / len(suite) - 0.5) * 0.3
        ax.plot(np.arange(1, len(entry["gamma_m"]) + 1) + shift, entry["gamma_m"], "o",
                color=_gamma_color(entry["gamma_knob"], knobs), ms=4)
    for knob in knobs:
        closed = [entry["gamma_closed_form"] for entry in suite if entry["gamma_knob"] == knob][0]
        ax.plot([], [], "o", color=_gamma_color(knob, knobs), label=f"g = {knob:g} (closed form gamma_r = {closed:.3g})")
    ax.set(xlabel="m (tokens ahead)", ylabel="gamma_m (exact LP)", title="Assumption 4 on the suite: gamma_m vs m",
           xticks=range(1, len(suite[0]["gamma_m"]) + 1))
    ax.legend(fontsize=7)
    ax = axes[1, 2]
    preset = result["preset"]
    for task, (lower, upper) in enumerate(zip(preset["lower"], preset["upper"])):
        m = np.arange(1, len(lower) + 1) + (task / len(preset["lower"]) - 0.5) * 0.3
        ax.vlines(m, lower, upper, color=f"C{task % 10}")
        ax.plot(m, lower, "_", color=f"C{task % 10}")
    ax.set(xlabel="m (tokens ahead)", ylabel="gamma_m: certified lower to sampled upper bound",
           title=f"{preset['preset']}: {len(preset['lower'])} HMMs, S = {preset['num_states']}, p = {preset['num_tokens']}",
           xticks=range(1, len(preset["lower"][0]) + 1))
    for ax in axes[0, len(knobs):]:
        ax.axis("off")
    fig.suptitle("Theorem 2: under-complete HMMs (S > p), errors vs L for m = 1, 2, 3 beside gamma_m")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


FIGURES = {
    "lemma1_decay.png": lemma1_decay,
    "decay_rate_vs_gamma4.png": decay_rate_vs_gamma4,
    "theorem1_terms.png": theorem1_terms,
    "gd_convergence.png": gd_convergence,
    "construction_vs_beta.png": construction_vs_beta,
    "theorem2_decay.png": theorem2_decay,
}


def write_figures(report: dict, directory: Path) -> list[str]:
    """Draw every figure of :data:`FIGURES` into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, draw in FIGURES.items():
        draw(report, directory / name)
        paths.append(str(directory / name))
    return paths
