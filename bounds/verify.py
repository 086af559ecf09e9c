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
6. The table: one row per claim, with the unit it is checked on and its :class:`RowKind`: a
   ``DERIVED`` row holds by derivation (a failure is a bug, exit code 1), a ``RECONSTRUCTED`` one
   states a reconstructed claim of the paper (a failure is a finding).

Steps 1-5 give typed results (:class:`Measurements`), step 6 a list of :class:`TableRow`;
:func:`report_json` converts both to JSON once (:mod:`bounds.serialize`), and ``figures`` draws
the PNGs from that JSON alone. A row's *measured* and *bound* are those of the unit (prompt or
HMM) with the largest measured / bound ratio, so ``holds`` is decided by the numbers shown.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

import hmm
from bounds import formulas, lemma1, theorem1
from bounds.fitting import fit_and_check, smallest_scale
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

    def __post_init__(self) -> None:
        if self.test_length <= self.L:
            raise ValueError(f"test_length: {self.test_length}; expected > L = {self.L} (P_L must differ from P)")
        if self.demo_length < self.L + 1:
            raise ValueError(f"demo_length: {self.demo_length}; expected >= L + 1 = {self.L + 1}")


@dataclass(frozen=True)
class GeneralizationFailure(MemberResult):
    """A held-out HMM whose own smallest C_g exceeds the fitted one."""

    smallest_C_g: float


@dataclass(frozen=True)
class GeneralizationFit:
    """``C_g`` of the fit half, every HMM's own smallest C_g, and the held-out failures."""

    C_g: float
    smallest_C_g: list[float]
    held_out_members: int
    held_out_failures: list[GeneralizationFailure]


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


def generalization_fit(
    members: list[SuiteMember], sweeps: list[list[SweepPoint]], p: int, L: int, lambdas: list[float]
) -> GeneralizationFit:
    """``C_g`` from the fit half of the N' sweeps (bounds.fitting), verdict on the held-out half."""
    constants = []
    for sweep, lam in zip(sweeps, lambdas):
        measured = [point.generalization for point in sweep]
        form = [formulas.generalization_bound(p, L, lam, point.n_samples, 1.0) for point in sweep]
        constants.append(smallest_scale(measured, form))
    verdict = fit_and_check(constants, [member.half for member in members])
    return GeneralizationFit(
        C_g=verdict.constant,
        smallest_C_g=constants,
        held_out_members=len(verdict.held_out_members),
        held_out_failures=[
            GeneralizationFailure(member=members[i].describe(), smallest_C_g=constants[i]) for i in verdict.held_out_failures
        ],
    )


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


def build_table(measurements: Measurements, members: list[SuiteMember]) -> list[TableRow]:
    """Every claim of Lemma 1 and Theorem 1 as a table row (module docstring)."""
    config, prompts = measurements.config, measurements.theorem1.prompts
    terms = [row.terms for row in prompts]
    p, L = config.suite.num_tokens, config.L
    held = [member.index for member in members if member.half == "held-out"]
    fits = measurements.lemma1.fits
    C, C_g = fits["stationary"].C, measurements.generalization.C_g
    lambdas = [entry.lambda_min for entry in measurements.suite]
    approximation_bound = [formulas.lemma1_bound(members[i].gamma, members[i].rank, L, C) for i in held]
    n_samples = mean_by_member(prompts, held, lambda row: row.n_samples)
    generalization_bound = [formulas.generalization_bound(p, L, lambdas[i], n, C_g) for i, n in zip(held, n_samples)]
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
    rows = []
    for prior, fit in fits.items():
        smallest = [measurements.suite[i].lemma1[prior].smallest_C for i in held]
        rows.append(
            table_row(f"Lemma 1 smallest C ({prior} prior) <= fitted C", smallest, [fit.C] * len(held), "held-out HMMs", claim)
        )
    rows += [
        table_row(
            "approximation |P - P_L| (Lemma 1)",
            mean_by_member(prompts, held, lambda row: row.approximation),
            approximation_bound,
            "held-out HMMs",
            claim,
        ),
        table_row(
            "linearization |P_L - W*x| (paper: 0)",
            [row.linearization for row in terms],
            [LINEARIZATION_ZERO] * len(terms),
            "prompts",
            claim,
        ),
        table_row(
            "generalization |W*x - W_hat x|",
            mean_by_member(prompts, held, lambda row: row.generalization),
            generalization_bound,
            "held-out HMMs",
            claim,
        ),
        table_row(
            "optimization |W_hat x - W_T x| (tight)",
            [row.optimization for row in terms],
            [row.optimization_bound for row in terms],
            "prompts",
            derived,
        ),
        table_row(
            "optimization (paper form)",
            [row.optimization for row in terms],
            [row.optimization_bound_paper for row in terms],
            "prompts",
            claim,
        ),
        table_row(
            "construction |W_T x - TF|",
            [row.construction for row in terms],
            [row.construction_bound for row in terms],
            "prompts",
            derived,
        ),
        table_row(
            "total |P - TF| <= sum of bounds",
            mean_by_member(prompts, held, lambda row: row.total),
            theorem_bound,
            "held-out HMMs",
            claim,
        ),
        table_row(
            "total <= sum of the 5 measured terms",
            [row.total for row in terms],
            [row.sum_of_terms() + SUM_ROUNDING for row in terms],
            "prompts",
            derived,
        ),
    ]
    for stage in terms[0].stages:
        rows.append(
            table_row(
                f"stage {stage} vs reference",
                [row.stages[stage].deviation for row in terms],
                [row.stages[stage].allowed for row in terms],
                "prompts",
                derived,
            )
        )
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


def measure(config: VerifyConfig, progress: bool = True) -> tuple[Measurements, list[SuiteMember]]:
    """Steps 1-5 of the module docstring: everything measured (without the table) and the suite."""
    members = build_suite(config.suite, base_seed=config.seed)
    p, L = config.suite.num_tokens, config.L
    lemma1_results = lemma1.measure_suite(members, config.lemma1, progress)
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
    suite = [
        SuiteEntry(member=member.describe(), lambda_min=lam, lemma1=result, generalization_sweep=sweep)
        for member, lam, result, sweep in zip(members, lambdas, lemma1_results, sweeps)
    ]
    measurements = Measurements(
        config=config,
        suite=suite,
        lemma1=Lemma1Results(lengths=list(config.lemma1.lengths), fits=lemma1.fit_constants(members, lemma1_results)),
        generalization=generalization_fit(members, sweeps, p, L, lambdas),
        theorem1=Theorem1Results(L=L, gd_steps=config.gd_steps, prompts=prompts),
        optimization_curves=optimization_curves,
        construction_curves=construction_curves,
        network_counts=formulas.network_counts(p, L, config.gd_steps),
        contraction_below_paper_rate=formulas.contraction_below_paper_rate(),
    )
    return measurements, members


def report_json(measurements: Measurements, table: list[TableRow]) -> dict:
    """The JSON form of the measurements and the table, the start of report.json (:mod:`bounds.serialize`)."""
    return {**to_json(measurements), "table": to_json(table)}


def write_report(report: dict, path: Path) -> None:
    """JSON with ``allow_nan`` (an infinite smallest C is written as Infinity)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=float))


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
