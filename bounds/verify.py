"""The main job: build the construction for a suite of HMMs, check every stage, measure every term.

Steps (docs/bounds.md states every formula):

1. Suite (:mod:`bounds.suites`), with fit / held-out halves.
2. Lemma 1 (:mod:`bounds.lemma1`): ``E|P - P_L|`` vs L for three priors; per HMM the smallest C,
   the decay rate, rate / gamma^4; universal C fitted on the fit half, checked on the held-out half.
3. Generalization vs N' (:func:`bounds.theorem1.generalization_sweep`): ``C_g`` fitted the same way.
4. Theorem 1 on ``prompts`` prompts per HMM (:func:`bounds.theorem1.decompose_prompt`): the five
   terms, the total, the deterministic bounds and the stage checks of the hand-built network.
5. GD convergence vs T (the number of GD steps, ``gd_steps``) and construction error vs beta on a
   few prompts.
6. The tables: one row per claim, with the unit it is checked on and its :class:`RowKind`: a
   ``DERIVED`` row holds by derivation (a failure is a bug, exit code 1), a ``RECONSTRUCTED`` one
   states a reconstructed claim of the paper (a failure is a finding).
7. Theorem 2 on under-complete HMMs (:mod:`bounds.theorem2`): gamma_m, the approximation and the
   in-context predictor vs L for m = 1, 2, 3, and the decomposition of step 4 for every m >= 2, with
   its own table (:func:`build_theorem2_table`).

Steps 1-5 and 7 give typed results (:class:`Measurements`), step 6 lists of :class:`TableRow`;
:func:`report_json` converts them to JSON once (:mod:`bounds.serialize`), and ``figures`` draws
the PNGs from that JSON alone. A row's *measured* and *bound* are those of the unit (prompt or
HMM) with the largest measured / bound ratio, so ``holds`` is decided by the numbers shown.
"""
from __future__ import annotations

import enum
import json
import multiprocessing
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from tqdm import tqdm

import hmm
from bounds import formulas, lemma1, theorem1, theorem2
from bounds.fitting import GeneralizationFit, generalization_fit
from bounds.lemma1 import Lemma1Config, PriorDecay, PriorFit
from bounds.serialize import INLINE, OMIT, json_key, to_json
from bounds.suites import MemberResult, SuiteMember, SuiteSpec, build_suite
from bounds.theorem1 import ConstructionCurve, OptimizationCurve, PromptTerms, SweepPoint

SUM_ROUNDING = 1e-12
"""Added to a sum of measured l1 terms: with all difference vectors of one sign pattern the l1
triangle inequality is an equality, and float64 rounding (~1e-16 per operation on numbers of
order 1) may then put the total a few ulps above the sum."""

LINEARIZATION_ZERO = 1e-12
"""The paper assumes ``P_L = W x`` exactly; a linearization error above this (rounding) breaks it."""


@dataclass(frozen=True)
class VerifyConfig:
    """Sizes of the verification run; the defaults are the main job's (about 1.5 minutes on 2 cores).

    ``gd_steps`` is the docs' T, the number of gradient-descent layers (written as ``T`` in report.json).
    """

    suite: SuiteSpec = field(default_factory=SuiteSpec)
    lemma1: Lemma1Config = field(default_factory=Lemma1Config)
    L: int = 3
    gd_steps: int = field(default=20, metadata=json_key("T"))
    num_demos: int = 8
    demo_length: int = 20
    test_length: int = 20
    prompts: int = 3
    sweep_demos: tuple[int, ...] = (2, 4, 8, 16, 32)
    sweep_prompts: int = 8
    curve_steps: int = 200
    curve_prompts: int = 8
    leaks: tuple[float, ...] = tuple(10.0**-k for k in range(1, 13))
    construction_prompts: int = 2
    seed: int = 2026
    theorem2: theorem2.Theorem2Config = field(default_factory=theorem2.Theorem2Config)

    def __post_init__(self) -> None:
        if self.test_length <= self.L:
            raise ValueError(f"test_length: {self.test_length}; expected > L = {self.L} (P_L must differ from P)")
        if self.demo_length < self.L + 1:
            raise ValueError(f"demo_length: {self.demo_length}; expected >= L + 1 = {self.L + 1}")


@dataclass(frozen=True)
class SuiteEntry(MemberResult):
    """One HMM of the suite with its Lemma 1 results per prior and its N' sweep."""

    lambda_min: float
    lemma1: dict[str, PriorDecay]
    generalization_sweep: list[SweepPoint]


@dataclass(frozen=True)
class Lemma1Results:
    """The L grid and, per prior, the fitted constant and its verdict."""

    lengths: list[int]
    fits: dict[str, PriorFit]


@dataclass(frozen=True)
class PromptResult:
    """The Theorem 1 terms of one prompt drawn from suite member ``member`` (an index)."""

    member: int
    terms: PromptTerms = field(metadata=INLINE)


@dataclass(frozen=True)
class Theorem1Results:
    """Every Theorem 1 prompt, for history length L and T = ``gd_steps`` GD layers."""

    L: int
    gd_steps: int = field(metadata=json_key("T"))
    prompts: list[PromptResult]


@dataclass(frozen=True)
class Measurements:
    """Steps 1-5 of the module docstring: everything measured, before the table."""

    config: VerifyConfig
    suite: list[SuiteEntry]
    lemma1: Lemma1Results
    generalization: GeneralizationFit
    theorem1: Theorem1Results
    optimization_curves: list[OptimizationCurve]
    construction_curves: list[ConstructionCurve]
    network_counts: formulas.NetworkCounts
    contraction_below_paper_rate: bool
    theorem2: theorem2.Theorem2Results


class RowKind(enum.Enum):
    """What a failing table row means."""

    DERIVED = "holds by derivation: a failure is a bug (exit code 1)"
    RECONSTRUCTED = "a reconstructed claim: a failure is a finding (printed, recorded, exit code 0)"


@dataclass(frozen=True)
class TableRow:
    """One claim ``measured <= bound`` over its units: mean, the worst ratio's pair, units passing."""

    term: str
    mean_measured: float
    measured: float
    bound: float
    holds: int
    units: int
    over: str
    kind: RowKind = field(metadata=OMIT)


def table_row(term: str, measured: list[float], bounds: list[float], units: str, kind: RowKind) -> TableRow:
    """One claim ``measured <= bound`` over its units; the shown pair is the worst ratio's."""
    measured_array, bound_array = np.asarray(measured, dtype=float), np.asarray(bounds, dtype=float)
    holds = measured_array <= bound_array
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound_array > 0, measured_array / bound_array, np.where(measured_array > 0, np.inf, 0.0))
    worst = int(np.argmax(ratio))
    return TableRow(
        term=term,
        mean_measured=float(measured_array.mean()),
        measured=float(measured_array[worst]),
        bound=float(bound_array[worst]),
        holds=int(holds.sum()),
        units=int(holds.size),
        over=units,
        kind=kind,
    )


def mean_by_member(prompts: list[PromptResult], members: list[int], value) -> list[float]:
    """Mean of ``value(terms)`` over the prompts of each member index in ``members``."""
    return [float(np.mean([value(row.terms) for row in prompts if row.member == index])) for index in members]


def decomposition_rows(prompts: list, held: list[int], approximation_bound: list[float],
                       generalization_bound: list[float], lemma: str, prefix: str = "") -> list[TableRow]:
    """The rows of one decomposition (Theorem 1's, or Theorem 2's for one m): every term beside its
    bound, the totals and the stages, over ``prompts`` (each with ``member`` and ``terms``); the
    rows over held-out HMMs take the bounds of the members ``held``, in that order. ``lemma`` names
    the approximation's bound, ``prefix`` starts every title."""
    terms = [row.terms for row in prompts]
    theorem_bound = [
        a + g + o + c
        for a, g, o, c in zip(
            approximation_bound,
            generalization_bound,
            mean_by_member(prompts, held, lambda row: row.optimization_bound),
            mean_by_member(prompts, held, lambda row: row.construction_bound),
        )
    ]
    claim, derived = RowKind.RECONSTRUCTED, RowKind.DERIVED

    def over_prompts(title: str, measured, bound, kind: RowKind) -> TableRow:
        return table_row(f"{prefix}{title}", [measured(row) for row in terms], [bound(row) for row in terms], "prompts", kind)

    def over_held_out(title: str, measured, bound: list[float]) -> TableRow:
        return table_row(f"{prefix}{title}", mean_by_member(prompts, held, measured), bound, "held-out HMMs", claim)

    return [
        over_held_out(f"approximation |P - P_L| ({lemma})", lambda row: row.approximation, approximation_bound),
        over_prompts("linearization |P_L - W*x| (paper: 0)", lambda row: row.linearization,
                     lambda row: LINEARIZATION_ZERO, claim),
        over_held_out("generalization |W*x - W_hat x|", lambda row: row.generalization, generalization_bound),
        over_prompts("optimization |W_hat x - W_T x| (tight)", lambda row: row.optimization,
                     lambda row: row.optimization_bound, derived),
        over_prompts("optimization (paper form)", lambda row: row.optimization, lambda row: row.optimization_bound_paper,
                     claim),
        over_prompts("construction |W_T x - TF|", lambda row: row.construction, lambda row: row.construction_bound,
                     derived),
        over_held_out("total |P - TF| <= sum of bounds", lambda row: row.total, theorem_bound),
        over_prompts("total <= sum of the 5 measured terms", lambda row: row.total,
                     lambda row: row.sum_of_terms() + SUM_ROUNDING, derived),
        *(over_prompts(f"stage {stage} vs reference", lambda row, stage=stage: row.stages[stage].deviation,
                       lambda row, stage=stage: row.stages[stage].allowed, derived) for stage in terms[0].stages),
    ]


def build_table(measurements: Measurements, members: list[SuiteMember]) -> list[TableRow]:
    """Every claim of Lemma 1 and Theorem 1 as a table row (module docstring)."""
    config, prompts = measurements.config, measurements.theorem1.prompts
    p, L = config.suite.num_tokens, config.L
    held = [member.index for member in members if member.half == "held-out"]
    fits = measurements.lemma1.fits
    C, C_g = fits["stationary"].C, measurements.generalization.C_g
    lambdas = [entry.lambda_min for entry in measurements.suite]
    approximation_bound = [formulas.lemma1_bound(members[i].gamma, members[i].rank, L, C) for i in held]
    n_samples = mean_by_member(prompts, held, lambda row: row.n_samples)
    generalization_bound = [formulas.generalization_bound(p, L, lambdas[i], n, C_g) for i, n in zip(held, n_samples)]
    rows = []
    for prior, fit in fits.items():
        smallest = [measurements.suite[i].lemma1[prior].smallest_C for i in held]
        rows.append(table_row(f"Lemma 1 smallest C ({prior} prior) <= fitted C", smallest, [fit.C] * len(held),
                              "held-out HMMs", RowKind.RECONSTRUCTED))
    return rows + decomposition_rows(prompts, held, approximation_bound, generalization_bound, "Lemma 1")


def build_theorem2_table(results: theorem2.Theorem2Results, members: list[theorem2.UndercompleteMember]) -> list[TableRow]:
    """Theorem 2's rows for every m >= 2 of the run, titles starting ``m=2: ``: Lemma 2's held-out
    constants, then the decomposition of :func:`decomposition_rows` in ``q = p^m`` outcomes."""
    config = results.config
    p, L = config.suite.num_tokens, config.L
    held = [member.index for member in members if member.half == "held-out"]
    rows = []
    for m in config.table_futures:
        key = theorem2.m_key(m)
        prompts = [row for row in results.prompts if row.m == m]
        fit = results.lemma2[key]
        smallest = [results.suite[i].approximation[key].smallest_C for i in held]
        rows.append(table_row(f"{key}: Lemma 2 smallest C <= fitted C", smallest, [fit.C] * len(held), "held-out HMMs",
                              RowKind.RECONSTRUCTED))
        n_samples = mean_by_member(prompts, held, lambda row: row.n_samples)
        generalization_bound = [
            formulas.generalization_bound(p**m, L, results.suite[i].lambda_min, n, results.generalization[key].C_g)
            for i, n in zip(held, n_samples)
        ]
        rows += decomposition_rows(prompts, held, theorem2.approximation_bounds(results, members, m, held),
                                   generalization_bound, "Lemma 2", f"{key}: ")
    return rows


def format_table(rows: list[TableRow]) -> str:
    """The printed table; every number is the JSON row's, formatted ``.3g``."""
    header = f"{'term':<48} {'mean':>10} {'measured':>10} {'bound':>10}  {'holds':>9}  over"
    lines = [header, "-" * len(header)]
    for row in rows:
        verdict = f"{row.holds}/{row.units}"
        lines.append(
            f"{row.term:<48} {row.mean_measured:>10.3g} {row.measured:>10.3g} {row.bound:>10.3g}  "
            f"{verdict:>9}  {row.over}"
        )
    return "\n".join(lines)


class _InProcess(Executor):
    """An executor that runs each submitted call at once, in this process."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:
            future.set_exception(error)
        return future


def _side_executor(workers: int) -> Executor:
    """Where :func:`measure` runs Lemma 1 and Theorem 2: this process (``workers=1``) or a second
    one, spawned with one torch thread (``workers=2``)."""
    if workers == 1:
        return _InProcess()
    if workers == 2:
        return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=torch.set_num_threads, initargs=(1,))
    raise ValueError(f"workers: {workers!r}; expected 1 (one process) or 2 (Lemma 1 and Theorem 2 in a second one)")


def measure(
    config: VerifyConfig, progress: bool = True, workers: int = 1
) -> tuple[Measurements, list[SuiteMember], list[theorem2.UndercompleteMember]]:
    """Steps 1-5 and 7 of the module docstring: everything measured (without the tables) and the
    two suites (Theorem 1's, Theorem 2's).

    ``workers=2`` measures Lemma 1 (step 2) and Theorem 2 (step 7) in a second process while this
    one measures steps 3-5; every step draws from its own seeds, so the results are those of
    ``workers=1``. The second process shows no progress bars."""
    members = build_suite(config.suite, base_seed=config.seed)
    with _side_executor(workers) as side:
        side_progress = progress and workers == 1
        lemma1_future = side.submit(lemma1.measure_suite, members, config.lemma1, side_progress)
        theorem2_future = side.submit(theorem2.measure, config.theorem2, side_progress)
        parts = _measure_theorem1(config, members, progress)
        lemma1_results = lemma1_future.result()
        undercomplete, undercomplete_members = theorem2_future.result()
    p, L = config.suite.num_tokens, config.L
    measurements = Measurements(
        config=config,
        suite=[SuiteEntry(member=member.describe(), lambda_min=lam, lemma1=result, generalization_sweep=sweep)
               for member, lam, result, sweep in zip(members, parts.lambdas, lemma1_results, parts.sweeps)],
        lemma1=Lemma1Results(lengths=list(config.lemma1.lengths), fits=lemma1.fit_constants(members, lemma1_results)),
        generalization=parts.generalization,
        theorem1=parts.theorem1,
        optimization_curves=parts.optimization_curves,
        construction_curves=parts.construction_curves,
        network_counts=formulas.network_counts(p, L, config.gd_steps),
        contraction_below_paper_rate=formulas.contraction_below_paper_rate(),
        theorem2=undercomplete,
    )
    return measurements, members, undercomplete_members


class _Theorem1Parts(NamedTuple):
    """What steps 3-5 of the module docstring measure (:func:`_measure_theorem1`)."""

    lambdas: list[float]
    sweeps: list[list[SweepPoint]]
    generalization: GeneralizationFit
    theorem1: Theorem1Results
    optimization_curves: list[OptimizationCurve]
    construction_curves: list[ConstructionCurve]


def _measure_theorem1(config: VerifyConfig, members: list[SuiteMember], progress: bool) -> _Theorem1Parts:
    """Steps 3-5 of the module docstring."""
    p, L = config.suite.num_tokens, config.L
    populations = [theorem1.population_regression(member.model, L) for member in members]
    fmt = hmm.PromptFormat(config.num_demos, config.demo_length, config.test_length)
    sweeps, prompts = [], []
    for member, (W_star, _) in tqdm(list(zip(members, populations)), desc="Theorem 1: terms per prompt", disable=not progress):
        seed = config.seed + 1000 * (member.index + 1)
        sweeps.append(
            theorem1.generalization_sweep(
                member.model, L, W_star, config.sweep_demos, config.demo_length, config.test_length, config.sweep_prompts, seed
            )
        )
        for tokens in theorem1.sample_prompt_tokens(member.model, config.prompts, fmt, seed + 999):
            terms = theorem1.decompose_prompt(member.model, tokens, L, config.gd_steps, W_star)
            prompts.append(PromptResult(member=member.index, terms=terms))
    curve_tokens = [
        theorem1.sample_prompt_tokens(members[i].model, 1, fmt, config.seed + 7 * i)[0]
        for i in np.linspace(0, len(members) - 1, config.curve_prompts).round().astype(int)
    ]
    optimization_curves = [theorem1.optimization_curve(tokens, p, L, config.curve_steps) for tokens in curve_tokens]
    construction_curves = [
        theorem1.construction_curve(tokens, p, L, config.gd_steps, config.leaks)
        for tokens in tqdm(curve_tokens[: config.construction_prompts], desc="construction error vs beta", disable=not progress)
    ]
    lambdas = [lam for _, lam in populations]
    return _Theorem1Parts(lambdas, sweeps, generalization_fit(members, sweeps, p, L, lambdas),
                          Theorem1Results(L=L, gd_steps=config.gd_steps, prompts=prompts), optimization_curves,
                          construction_curves)


def report_json(measurements: Measurements, table: list[TableRow], theorem2_table: list[TableRow]) -> dict:
    """The JSON form of the measurements and the tables, the start of report.json
    (:mod:`bounds.serialize`); Theorem 2's table is ``theorem2.table``."""
    report = {**to_json(measurements), "table": to_json(table)}
    report["theorem2"]["table"] = to_json(theorem2_table)
    return report


def write_report(report: dict, path: Path) -> None:
    """Strict JSON: an infinite smallest C is already the string "inf" (:data:`bounds.serialize.INFINITY`),
    and any other NaN or infinity raises ValueError here instead of writing a file that is not JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=float, allow_nan=False))


def verdict_lines(measurements: Measurements) -> list[str]:
    """One sentence per claim, with numbers, for the console and docs/bounds.md."""
    lines = []
    for prior, fit in measurements.lemma1.fits.items():
        failures = ", ".join(
            f"{f.member.name} (gamma={f.member.gamma:.2g}, d={f.member.rank}, c={f.member.transition_concentration:g}, "
            f"seed={f.member.seed}: C_i={f.smallest_C:.3g})"
            for f in fit.held_out_failures
        )
        lines.append(
            f"Lemma 1 [{prior}]: C = {fit.C:.3g} (fit half, {fit.fit_members} HMMs); held-out: "
            f"{fit.held_out_members - len(fit.held_out_failures)}/{fit.held_out_members} hold"
            + (f"; fails on {failures}" if failures else "")
            + f". rate/gamma^4 in [{fit.min_rate_over_gamma4:.3g}, {fit.max_rate_over_gamma4:.3g}]"
            f" (slowest {fit.slowest_member.member.name}, rate {fit.slowest_member.decay_rate:.3g})"
        )
    gen = measurements.generalization
    failures = ", ".join(f"{f.member.name} (C_g,i={f.smallest_C_g:.3g})" for f in gen.held_out_failures)
    lines.append(
        f"Generalization: C_g = {gen.C_g:.3g} (fit half); held-out: "
        f"{gen.held_out_members - len(gen.held_out_failures)}/{gen.held_out_members} hold"
        + (f"; fails on {failures}" if failures else "")
    )
    lines.append(
        "Lemma 5: (1 - 1/kappa)^T <= exp(-T/(2 kappa)) proved by sympy: "
        + ("yes" if measurements.contraction_below_paper_rate else "NO")
    )
    counts, config = measurements.network_counts, measurements.config
    lines.append(
        f"Theorem 1 network (p={config.suite.num_tokens}, L={config.L}, "
        f"T={config.gd_steps}): {counts.layers} layers = (L-1)+1+T+1, "
        f"{counts.heads_per_gd_layer} heads per GD layer = 2p, width {counts.width}"
    )
    return lines + theorem2_lines(measurements.theorem2)


def theorem2_lines(results: theorem2.Theorem2Results) -> list[str]:
    """Theorem 2's verdict sentences: gamma_m of the suite and of the preset, Lemma 2 and C_g per m,
    the network's size per m."""
    config, suite = results.config, results.suite
    futures = range(1, max(config.futures) + 1)
    gammas = ", ".join(
        f"gamma_{m} in [{min(e.member.gamma_m[m - 1] for e in suite):.3g}, {max(e.member.gamma_m[m - 1] for e in suite):.3g}]"
        for m in futures)
    closed = max(abs(e.member.gamma - e.member.gamma_closed_form) for e in suite if e.member.gamma_closed_form is not None)
    preset = results.preset
    bounds = ", ".join(f"gamma_{m} in [{min(row[m - 1] for row in preset.lower):.3g}, "
                       f"{max(row[m - 1] for row in preset.upper):.3g}]" for m in futures)
    lines = [f"Theorem 2 suite ({len(suite)} shift registers, S = {suite[0].member.num_states} > p = "
             f"{suite[0].member.num_tokens}): {gammas}; max |gamma_r - g^r| = {closed:.2g}",
             f"Assumption 4 on {preset.preset} ({len(preset.lower)} HMMs, S = {preset.num_states}, p = "
             f"{preset.num_tokens}), certified lower to sampled upper bounds: {bounds}"]
    for m in config.table_futures:
        key = theorem2.m_key(m)
        fit, gen, counts = results.lemma2[key], results.generalization[key], results.network_counts[key]
        failures = ", ".join(f"{f.member.name} (C_i={f.smallest_C:.3g})" for f in fit.held_out_failures)
        lines.append(
            f"Theorem 2 [{key}]: Lemma 2 C = {fit.C:.3g} (fit half); held-out: "
            f"{fit.held_out_members - len(fit.held_out_failures)}/{fit.held_out_members} hold"
            + (f"; fails on {failures}" if failures else "")
            + f". C_g = {gen.C_g:.3g}; held-out: {gen.held_out_members - len(gen.held_out_failures)}/"
            f"{gen.held_out_members} hold. Network (p={config.suite.num_tokens}, L={config.L}, T={config.gd_steps}): "
            f"{counts.layers} layers = (L-1)+m+1+T+1, {counts.heads_per_gd_layer} heads per GD layer = 2p^m, "
            f"width {counts.width}"
        )
    return lines


def lemma1_lines(measurements: Measurements) -> list[str]:
    """Per HMM and prior: gamma^4, decay rate r, r / gamma^4 and the smallest C (Lemma 1)."""
    priors = list(measurements.lemma1.fits)
    header = f"{'HMM':<22}{'half':>9}{'gamma^4':>9}" + "".join(f"{f'r, r/g^4, C_i [{prior}]':>36}" for prior in priors)
    lines = [header]
    for entry in measurements.suite:
        cells = []
        for prior in priors:
            result = entry.lemma1[prior]
            rate = "too fast" if result.decay_rate is None else f"{result.decay_rate:.3g}, {result.rate_over_gamma4:.3g}"
            cells.append(f"{rate + ', ' + format(result.smallest_C, '.3g'):>36}")
        lines.append(f"{entry.member.name:<22}{entry.member.half:>9}{entry.member.gamma ** 4:>9.3g}" + "".join(cells))
    return lines


def derivations_hold(rows: list[TableRow]) -> bool:
    """Whether every :attr:`RowKind.DERIVED` row holds on every unit (a failure there is a bug)."""
    return all(row.holds == row.units for row in rows if row.kind is RowKind.DERIVED)
