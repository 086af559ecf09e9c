"""Theorem 2 (arXiv 2506.01919, Section 4.3) measured like Theorem 1, on HMMs with more hidden states
than tokens (docs/bounds.md section 11).

With ``S > p`` the one-step coefficient ``gamma_1 = gamma(O)`` is 0, so Lemma 1's bound
``d exp(-gamma^4 L / C)`` is the constant d: it says nothing. Theorem 2 assumes instead the m-step
observability of Assumption 4, ``gamma_m = gamma(O_m) > 0`` with ``O_m[s, (o_1..o_m)] =
P(o_t..o_{t+m-1} | s_t = s)``, and predicts the joint law of the next m tokens with a network of m
label layers and a ReLU MLP forming their joint one-hot (``construction``, ``future_length = m``).
Its Lemma 2 is Lemma 1's form for that law with ``gamma_m``, and its error splits into the same
five terms as Theorem 1's (:mod:`bounds.theorem1`, whose functions take m), in l1 over the
``q = p^m`` outcomes.

Steps:

1. Suite (:class:`UndercompleteSpec`): binary shift registers (:mod:`hmm.undercomplete`), ``S = p^r``
   states, whose ``gamma_m`` is 0 for m < r and ``g^r`` at m = r in closed form; every ``gamma_m``
   is measured exactly (:func:`hmm.observability.observability_exact` of ``O_m``) for every m.
2. Approximation vs L, every m (:func:`approximation_errors`): ``E|P^(m) - P_L^(m)|_1`` at
   stationarity, as Lemma 1's measurement (:mod:`bounds.lemma1`) with the m-step law
   ``b^T Q O_m`` of the exact and of the windowed belief. Per HMM and m with ``gamma_m > 0``: the
   smallest Lemma 2 constant and the decay rate; the universal ``C_m`` is fitted on the fit half
   and checked on the held-out half (:mod:`bounds.fitting`). For ``gamma_m = 0`` the bound is d.
3. The in-context predictor vs L, every m (:func:`predictor_errors`): ``|P^(m) - W_T x|_1`` and its
   next-token marginal ``|P - sum_{o_{t+2..}} W_T x|_1``, with ``W_T`` the reference GD iterates
   (the network equals them within its construction bound, measured in step 5).
4. Generalization vs N' for each m >= 2: ``C_g,m`` fitted as Theorem 1's, with the prediction's
   dimension ``q = p^m`` in its form.
5. The decomposition (:func:`bounds.theorem1.decompose_prompt` with m) on ``prompts`` prompts per
   HMM and m >= 2, through the hand-built network, with every stage against its reference.
6. Assumption 4 on the HMMs behind the trained networks (:func:`preset_observability`): the
   ``cpu-small`` mixture (S = 16 > p = 8), too large for the exact LP, gets certified bounds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

import hmm
from bounds import formulas, theorem1
from bounds.fitting import GeneralizationFit, decay_fit, fit_and_check, generalization_fit, smallest_lemma1_constant
from bounds.serialize import INLINE, json_key
from bounds.suites import MemberDescription, MemberResult
from bounds.theorem1 import PromptTerms, SweepPoint
from construction import reference
from hmm.memory import resolve_prior
from hmm.observability import (
    EXACT_MAX_STATES,
    multistep_emission,
    observability_exact,
    observability_lower_bound,
    observability_upper_bound,
)
from hmm.undercomplete import shift_register_gamma, shift_register_hmm

MAX_NETWORK_BYTES = 1 << 30
"""Largest hand-built network (its float64 value matrices, which dominate) a Theorem 2 run builds."""

PRESET = "cpu-small"
"""The mixture whose HMMs get certified ``gamma_m`` bounds (the networks of Figure 1 trained on it)."""

UPPER_DIRECTIONS = 512
"""Random directions of the sampled upper bound on a preset HMM's ``gamma_m``."""


def m_key(m: int) -> str:
    """JSON key of a number of labels: ``m=2``."""
    return f"m={m}"


@dataclass(frozen=True)
class UndercompleteSpec:
    """Axes of the shift-register suite: ``gammas x concentrations x seeds``, ``S = p^r``."""

    gammas: tuple[float, ...] = (0.6, 0.8, 0.95)
    concentrations: tuple[float, ...] = (1.0, 0.5)
    seeds: int = 2
    num_tokens: int = 2
    register_length: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.register_length, int) or self.register_length < 2:
            raise ValueError(f"register_length: {self.register_length!r}; expected an integer >= 2 (S = p^r > p)")
        states = self.num_tokens**self.register_length
        if states > EXACT_MAX_STATES:
            raise ValueError(f"num_tokens, register_length: {self.num_tokens}, {self.register_length} give S = {states} "
                             f"states; expected S <= {EXACT_MAX_STATES} (gamma_m exactly)")
        if not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(f"seeds: {self.seeds!r}; expected an integer >= 2 (one fit and one held-out HMM per cell)")


@dataclass(frozen=True)
class UndercompleteDescription(MemberDescription):
    """A shift-register member: ``gamma`` is its exact ``gamma_r`` (r = register length), ``gamma_m``
    the exact ``gamma(O_m)`` for m = 1, 2, ..., and ``gamma_closed_form`` the closed form ``g^r``
    (binary registers; None otherwise)."""

    register_length: int
    gamma_closed_form: float | None
    gamma_m: list[float]


@dataclass(frozen=True)
class UndercompleteMember:
    """One HMM of the suite, its knobs and its exact ``gamma_m`` (index m - 1)."""

    index: int
    model: hmm.HMM
    knob: float
    gammas: list[float]
    register_length: int
    concentration: float
    seed: int
    half: str

    @property
    def name(self) -> str:
        """``r{register length}-g{knob}-c{concentration}-s{seed}``, e.g. ``r2-g0.8-c0.1-s2031``."""
        return f"r{self.register_length}-g{self.knob:g}-c{self.concentration:g}-s{self.seed}"

    @property
    def rank(self) -> int:
        """The ``d`` of Lemma 2's bound: S (the register's transition has full rank)."""
        return self.model.num_states

    def describe(self) -> UndercompleteDescription:
        """The member's parameters and gammas without its tensors."""
        p, r = self.model.num_tokens, self.register_length
        return UndercompleteDescription(
            name=self.name, gamma_knob=self.knob, gamma=self.gammas[r - 1], rank=self.rank,
            num_states=self.model.num_states, num_tokens=p, transition_concentration=self.concentration,
            seed=self.seed, half=self.half, register_length=r,
            gamma_closed_form=shift_register_gamma(r, self.knob, r) if p == 2 else None, gamma_m=self.gammas,
        )


def build_undercomplete_suite(spec: UndercompleteSpec, max_m: int, base_seed: int) -> list[UndercompleteMember]:
    """Every member of ``spec`` with its exact ``gamma_1..gamma_{max_m}``; seed of the j-th
    ``base_seed + j``; seeds alternate between the fit and the held-out half within a cell."""
    members = []
    for knob in spec.gammas:
        for concentration in spec.concentrations:
            for replicate in range(spec.seeds):
                index = len(members)
                model = shift_register_hmm(spec.num_tokens, spec.register_length, knob, concentration, base_seed + index)
                gammas = [observability_exact(multistep_emission(model, m)) for m in range(1, max_m + 1)]
                members.append(UndercompleteMember(
                    index=index, model=model, knob=knob, gammas=gammas, register_length=spec.register_length,
                    concentration=concentration, seed=base_seed + index, half="fit" if replicate % 2 == 0 else "held-out",
                ))
    return members


def network_bytes(p: int, L: int, m: int, gd_steps: int) -> int:
    """float64 bytes of the value matrices ``(D, D)`` of the network with m labels: one per head
    (``2 p^m`` per GD and read-out layer, one per shift layer), the bulk of what its builders allocate."""
    counts = formulas.network_counts(p, L, gd_steps, m)
    heads = counts.heads_per_gd_layer * (gd_steps + 1) + (L - 1) + m
    return heads * counts.width**2 * 8


@dataclass(frozen=True)
class Theorem2Config:
    """Sizes of the Theorem 2 run. ``futures``: the m of the decay curves (and of the table when
    m >= 2); ``lengths``: the L of the approximation curves; ``curve_lengths``: the L of the
    predictor curves; ``L``, ``gd_steps`` (T), the prompt format and ``prompts``: the table's
    decomposition, through the network; the N' sweep as Theorem 1's."""

    suite: UndercompleteSpec = field(default_factory=UndercompleteSpec)
    futures: tuple[int, ...] = (1, 2, 3)
    lengths: tuple[int, ...] = tuple(range(1, 11))
    num_sequences: int = 500
    positions: int = 8
    burn_in: int = 40
    L: int = 3
    gd_steps: int = field(default=20, metadata=json_key("T"))
    num_demos: int = 8
    demo_length: int = 20
    test_length: int = 20
    prompts: int = 1
    curve_lengths: tuple[int, ...] = (1, 2, 3, 4, 5)
    curve_prompts: int = 1
    sweep_demos: tuple[int, ...] = (2, 4, 8, 16)
    sweep_prompts: int = 3
    seed: int = 2027

    def __post_init__(self) -> None:
        for m in self.futures:
            if not isinstance(m, int) or m < 1:
                raise ValueError(f"futures: {m!r}; expected integers m >= 1")
        if max(self.futures) < 2:
            raise ValueError(f"futures: {self.futures}; expected at least one m >= 2 (Theorem 2)")
        longest = max(self.L, *self.curve_lengths)
        if self.demo_length < longest + max(self.futures):
            raise ValueError(f"demo_length: {self.demo_length}; expected >= L + m = {longest + max(self.futures)} "
                             f"(a sample needs L tokens of history and m labels)")
        if self.test_length <= longest or self.burn_in < max(self.lengths):
            raise ValueError(f"test_length, burn_in: {self.test_length}, {self.burn_in}; expected test_length > L = "
                             f"{longest} and burn_in >= {max(self.lengths)} (the windows must not reach the start)")
        p = self.suite.num_tokens
        for m in self.table_futures:
            size = network_bytes(p, self.L, m, self.gd_steps)
            if size > MAX_NETWORK_BYTES:
                raise ValueError(
                    f"futures: m = {m} with p = {p}, L = {self.L}, T = {self.gd_steps} needs a network of "
                    f"{formulas.network_counts(p, self.L, self.gd_steps, m).heads_per_gd_layer} heads per GD layer "
                    f"and width {formulas.network_counts(p, self.L, self.gd_steps, m).width}: {size / 2**30:.3g} GiB "
                    f"of value matrices; expected at most {MAX_NETWORK_BYTES / 2**30:.3g} GiB (a smaller m: p^m = {p**m})")

    @property
    def table_futures(self) -> tuple[int, ...]:
        """The m >= 2 of ``futures``: Theorem 2's networks, measured term by term."""
        return tuple(m for m in self.futures if m >= 2)

    @property
    def prompt_format(self) -> hmm.PromptFormat:
        return hmm.PromptFormat(self.num_demos, self.demo_length, self.test_length)


def approximation_errors(member: UndercompleteMember, config: Theorem2Config) -> np.ndarray:
    """``(len(futures), len(lengths))``: mean ``|P^(m) - P_L^(m)|_1`` over sequences and the last
    ``positions`` positions (module docstring, step 2). The difference of the two laws is
    ``(b_t - b_L)^T Q O_m``, linear in the belief difference, so one filtering per L serves every m."""
    model = member.model
    task_ids = np.zeros(config.num_sequences, dtype=int)
    tokens, _ = hmm.sample_sequences(model, task_ids, config.burn_in + config.positions, seed=config.seed + member.index)
    exact = hmm.filter_beliefs(model, tokens).filtered[:, -config.positions:]
    window = hmm.HMM(resolve_prior(model, "stationary"), model.transition, model.emission)
    errors = np.empty((len(config.futures), len(config.lengths)))
    for column, L in enumerate(config.lengths):
        windows = tokens[:, -(config.positions + L - 1):].unfold(-1, L, 1)  # (n, positions, L)
        difference = exact - hmm.filter_beliefs(window, windows).filtered[..., -1, :]
        for row, m in enumerate(config.futures):
            errors[row, column] = float(theorem1.ahead_law(model, difference, m).abs().sum(-1).mean())
    return errors


@dataclass(frozen=True)
class ApproximationCurve:
    """Lemma 2 on one HMM and one m: ``E|P^(m) - P_L^(m)|_1`` per L, the smallest constant (None when
    ``gamma_m = 0``: the bound is d whatever C) and the decay line ``log err = intercept - rate L``
    (None when too fast to measure)."""

    errors: list[float]
    smallest_C: float | None
    decay_rate: float | None
    decay_intercept: float | None


def approximation_curves(member: UndercompleteMember, config: Theorem2Config) -> dict[str, ApproximationCurve]:
    """Per m: :class:`ApproximationCurve` of one member."""
    curves = {}
    for m, row in zip(config.futures, approximation_errors(member, config)):
        gamma = member.gammas[m - 1]
        line = decay_fit(config.lengths, row)
        curves[m_key(m)] = ApproximationCurve(
            errors=row.tolist(),
            smallest_C=smallest_lemma1_constant(gamma, member.rank, config.lengths, row) if gamma > 0 else None,
            decay_rate=None if line is None else line[0],
            decay_intercept=None if line is None else line[1],
        )
    return curves


@dataclass(frozen=True)
class PredictorPoint:
    """The in-context predictor at one L: mean ``|P^(m) - W_T x|_1`` (the joint law of the next m
    tokens) and mean ``|P - marginal of W_T x|_1`` (the next token) over the prompts."""

    L: int
    joint: float
    next_token: float


def predictor_errors(member: UndercompleteMember, config: Theorem2Config, m: int,
                     prompts: list[np.ndarray]) -> list[PredictorPoint]:
    """:class:`PredictorPoint` per L of ``curve_lengths`` (module docstring, step 3); ``W_T`` from
    ``eta = 1/lambda_max`` of the prompt's Hessian, as :func:`construction.parameters_for_prompt`."""
    model, p = member.model, member.model.num_tokens
    points = []
    for L in config.curve_lengths:
        W_star, _ = theorem1.population_regression(model, L, m)
        joint, next_token = [], []
        for tokens in prompts:
            terms = theorem1.regression_terms(model, tokens, L, W_star, m)
            N = len(tokens) + 1
            lambda_max, _ = theorem1.spectrum(reference.hessian(terms.X, N))
            prediction = reference.gd_iterates(terms.X, terms.Y, 1.0 / lambda_max, config.gd_steps, N)[-1] @ terms.x_test
            joint.append(theorem1.l1(terms.exact - prediction))
            next_token.append(theorem1.l1((terms.exact - prediction).reshape(p, -1).sum(1)))
        points.append(PredictorPoint(L=L, joint=float(np.mean(joint)), next_token=float(np.mean(next_token))))
    return points


@dataclass(frozen=True)
class UndercompleteEntry(MemberResult):
    """One HMM of the suite: ``lambda_min`` of ``E[x x^T]`` at the table's L, and per m its
    approximation curve, its predictor curve and (m >= 2) its N' sweep."""

    lambda_min: float
    approximation: dict[str, ApproximationCurve]
    predictor: dict[str, list[PredictorPoint]]
    generalization_sweep: dict[str, list[SweepPoint]]


@dataclass(frozen=True)
class Lemma2Failure(MemberResult):
    """A held-out HMM whose own smallest Lemma 2 constant exceeds the fitted one."""

    smallest_C: float


@dataclass(frozen=True)
class Lemma2Fit:
    """One m >= 2 over the suite: the universal ``C_m`` of the fit half and its held-out failures."""

    C: float
    fit_members: int
    held_out_members: int
    held_out_failures: list[Lemma2Failure]


@dataclass(frozen=True)
class Theorem2Prompt:
    """The decomposition of one prompt of suite member ``member`` (an index) with ``m`` labels."""

    member: int
    m: int
    terms: PromptTerms = field(metadata=INLINE)


@dataclass(frozen=True)
class PresetObservability:
    """Certified bounds on ``gamma_m`` (m = 1, 2, ...) of every HMM of a preset mixture, per task:
    ``lower[k][m-1]`` is the largest of the left-inverse bounds of ``O_1..O_m`` (``gamma_m`` is
    nondecreasing in m, :mod:`hmm.undercomplete`), ``upper[k][m-1]`` the sampled upper bound, or 0
    where ``O_m^T`` has a sum-zero kernel (then ``gamma_m = 0`` exactly: ``m = 1`` when ``S > p``)."""

    preset: str
    num_states: int
    num_tokens: int
    lower: list[list[float]]
    upper: list[list[float]]


@dataclass(frozen=True)
class Theorem2Results:
    """Everything the Theorem 2 run measured (module docstring), before its table."""

    config: Theorem2Config
    suite: list[UndercompleteEntry]
    lemma2: dict[str, Lemma2Fit]
    generalization: dict[str, GeneralizationFit]
    prompts: list[Theorem2Prompt]
    network_counts: dict[str, formulas.NetworkCounts]
    preset: PresetObservability


def lemma2_fit(members: list[UndercompleteMember], curves: list[dict[str, ApproximationCurve]], m: int) -> Lemma2Fit:
    """``C_m`` from the fit half, verdict on the held-out half (:func:`bounds.fitting.fit_and_check`)."""
    constants = [curve[m_key(m)].smallest_C for curve in curves]
    if any(constant is None for constant in constants):
        raise ValueError(f"m: {m}; expected gamma_m > 0 on every HMM (Lemma 2 needs Assumption 4)")
    verdict = fit_and_check(constants, [member.half for member in members])
    return Lemma2Fit(
        C=verdict.constant, fit_members=len(verdict.fit_members), held_out_members=len(verdict.held_out_members),
        held_out_failures=[Lemma2Failure(member=members[i].describe(), smallest_C=constants[i])
                           for i in verdict.held_out_failures],
    )


def preset_observability(name: str = PRESET, max_m: int = 3) -> PresetObservability:
    """Certified lower and sampled upper bounds on ``gamma_1..gamma_{max_m}`` of every HMM of the
    preset ``name`` (:mod:`hmm.observability`; S above the exact LP's reach)."""
    mixture = hmm.mixture_preset(name)
    lower, upper = [], []
    for task in range(mixture.hmm.batch_shape[0]):
        model = mixture.hmm[task]
        operators = [multistep_emission(model, m) for m in range(1, max_m + 1)]
        own = [observability_lower_bound(O) for O in operators]  # 0 exactly when O_m^T has a sum-zero kernel
        lower.append(np.maximum.accumulate(own).tolist())
        upper.append([observability_upper_bound(O, UPPER_DIRECTIONS) if bound > 0 else 0.0
                      for O, bound in zip(operators, own)])
    return PresetObservability(preset=name, num_states=mixture.hmm.num_states, num_tokens=mixture.hmm.num_tokens,
                               lower=lower, upper=upper)


def measure(config: Theorem2Config, progress: bool = True) -> tuple[Theorem2Results, list[UndercompleteMember]]:
    """Steps 1-6 of the module docstring."""
    members = build_undercomplete_suite(config.suite, max(config.futures), config.seed)
    p, L = config.suite.num_tokens, config.L
    fmt = config.prompt_format
    entries, prompts, sweeps = [], [], {m: [] for m in config.table_futures}
    for member in tqdm(members, desc="Theorem 2: under-complete HMMs", disable=not progress):
        seed = config.seed + 1000 * (member.index + 1)
        curve_prompts = theorem1.sample_prompt_tokens(member.model, config.curve_prompts, fmt, seed)
        member_sweeps = {}
        for m in config.table_futures:
            W_star, lambda_min = theorem1.population_regression(member.model, L, m)
            member_sweeps[m_key(m)] = theorem1.generalization_sweep(
                member.model, L, W_star, config.sweep_demos, config.demo_length, config.test_length,
                config.sweep_prompts, seed + 100 * m, m)
            sweeps[m].append(member_sweeps[m_key(m)])
            for tokens in theorem1.sample_prompt_tokens(member.model, config.prompts, fmt, seed + 999 + m):
                terms = theorem1.decompose_prompt(member.model, tokens, L, config.gd_steps, W_star, m)
                prompts.append(Theorem2Prompt(member=member.index, m=m, terms=terms))
        entries.append(UndercompleteEntry(
            member=member.describe(), lambda_min=lambda_min, approximation=approximation_curves(member, config),
            predictor={m_key(m): predictor_errors(member, config, m, curve_prompts) for m in config.futures},
            generalization_sweep=member_sweeps,
        ))
    lambdas = [entry.lambda_min for entry in entries]
    curves = [entry.approximation for entry in entries]
    results = Theorem2Results(
        config=config,
        suite=entries,
        lemma2={m_key(m): lemma2_fit(members, curves, m) for m in config.table_futures},
        generalization={m_key(m): generalization_fit(members, sweeps[m], p**m, L, lambdas) for m in config.table_futures},
        prompts=prompts,
        network_counts={m_key(m): formulas.network_counts(p, L, config.gd_steps, m) for m in config.table_futures},
        preset=preset_observability(max_m=max(config.futures)),
    )
    return results, members


def approximation_bounds(results: Theorem2Results, members: list[UndercompleteMember], m: int,
                         indices: list[int]) -> list[float]:
    """Lemma 2's ``d exp(-gamma_m^4 L / C_m)`` at the table's L for the members ``indices``."""
    C = results.lemma2[m_key(m)].C
    return [formulas.lemma1_bound(members[i].gammas[m - 1], members[i].rank, results.config.L, C) for i in indices]
