"""Theorem 1 (and Theorem 2) measured term by term on prompts from one HMM, and each construction
stage checked.

Decomposition at the test position of a prompt ``demo_1, p, ..., demo_n, p, o_1..o_t`` (one HMM,
started in its stationary law), all distances in l1 over the ``q = p^m`` values of the next m
tokens (m = 1: the p next tokens, Theorem 1; m >= 2: Theorem 2's joint law)::

    P       = P(o_{t+1..t+m} | o_1..o_t)       exact filtering of the test segment
    P_L     = P_L(o_{t+1..t+m} | o_{t-L+1..t}) memory predictor, stationary prior (t >= L)
    W* x    population least squares of the joint one-hot of o_{t+1..t+m} on the one-hot history x
    W_hat x min-norm least squares from the prompt's N' samples (construction.reference)
    W_T x   T = gd_steps gradient-descent iterates, eta = 1/lambda_max (construction.parameters_for_prompt)
    TF      the hand-built network with m label layers (construction.build_network)

Both laws come from a belief through the m-step operator (:func:`ahead_law`):
``P(o_{t+1..t+m} = . | b_t) = b_t^T Q O_m`` with ``O_m`` of :func:`hmm.observability.multistep_emission`
(``O_1 = O``); ``P`` uses the filtered belief of the whole test segment, ``P_L`` that of its last L
tokens filtered from the stationary law.

    approximation |P - P_L|, linearization |P_L - W* x|, generalization |W* x - W_hat x|,
    optimization |W_hat x - W_T x|, construction |W_T x - TF|, total |P - TF|

and ``total <= sum of the five`` by the triangle inequality.

**Population regression** W*. At stationarity the windows ``o_{t-L+1..t}`` (t >= L) have the
law of the first L tokens, ``P(w) = exp(log_likelihood(w))``, and the expected joint one-hot of the
next m tokens given the window is ``P_L(w)`` (stationary prior). The least squares of that one-hot
on x is therefore the weighted least squares of ``P_L(w)`` on ``x(w)`` with weights ``P(w)``, computed **exactly** by enumerating the
``p^L`` windows (no sample needed): ``W* = least_squares(sqrt(P) x, sqrt(P) P_L)`` (min-norm; the
design is singular for L >= 2 but ``W* x`` is unique on the support). ``Sigma = E[x x^T]`` gives
the ``lambda`` of the generalization bound: its smallest nonzero eigenvalue.
"""
from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch

import hmm
from bounds import formulas
from construction import build_layout, build_network, layer_leak, parameters_for_prompt, reference
from construction.checks import check_prompt
from construction.weights import Stage
from hmm.memory import least_squares, one_hot_history, resolve_prior
from hmm.observability import multistep_emission

TERMS = ("approximation", "linearization", "generalization", "optimization", "construction")
"""The five measured terms of the decomposition (module docstring), fields of :class:`PromptTerms`."""

EIGENVALUE_TOLERANCE = 1e-10
"""Eigenvalues below this times the largest count as zero (the singular one-hot design)."""

STAGE_ROUNDING = 1e-15
"""float64 rounding allowed on top of ``r eps`` when a stage copies a 0/1 block."""

MAX_WINDOWS = 100_000
"""Largest ``p^L`` enumerated for the population regression."""


def spectrum(matrix: np.ndarray) -> tuple[float, float]:
    """``(lambda_max, lambda_min+)`` of a symmetric PSD matrix; lambda_min+ = smallest nonzero eigenvalue."""
    eigenvalues = np.linalg.eigvalsh(matrix)
    top = float(eigenvalues[-1])
    if not top > 0:
        raise ValueError(f"matrix: largest eigenvalue {top}; expected a nonzero PSD matrix")
    return top, float(eigenvalues[eigenvalues > EIGENVALUE_TOLERANCE * top][0])


def ahead_law(model: hmm.HMM, beliefs: torch.Tensor, m: int) -> torch.Tensor:
    """``(..., p^m)``: ``P(o_{t+1..t+m} = . | s_t ~ b) = b^T Q O_m`` for filtered beliefs ``b (..., S)``."""
    return beliefs @ model.transition @ multistep_emission(model, m)


def population_regression(model: hmm.HMM, L: int, m: int = 1) -> tuple[np.ndarray, float]:
    """``(W* (p^m, pL), lambda_min+ of E[x x^T])`` by enumerating the p^L windows (module docstring)."""
    p = model.num_tokens
    if p**L > MAX_WINDOWS:
        raise ValueError(f"L: {L}; expected p^L <= {MAX_WINDOWS} windows to enumerate (p = {p})")
    if not torch.allclose(model.initial, hmm.stationary_distribution(model.transition), atol=1e-12):
        raise ValueError("model: initial law is not stationary; expected initial='stationary'")
    windows = torch.tensor(list(itertools.product(range(p), repeat=L)))
    probability = hmm.log_likelihood(model, windows).exp()
    x = one_hot_history(windows, L, p)[:, -1]
    memory = ahead_law(model, hmm.filter_beliefs(model, windows).filtered[:, -1], m)
    root = probability.sqrt()[:, None]
    W_star = least_squares(root * x, root * memory).numpy()
    covariance = (x.T @ (probability[:, None] * x)).numpy()
    return W_star, spectrum(covariance)[1]


def l1(vector: np.ndarray) -> float:
    """``||v||_1``, the norm of every reported term."""
    return float(np.abs(vector).sum())


def final_segment(tokens: np.ndarray, p: int) -> np.ndarray:
    """The tokens after the last delimiter ``p``."""
    return tokens[np.flatnonzero(tokens == p)[-1] + 1 :]


@dataclass(frozen=True)
class RegressionTerms:
    """The terms of one prompt that need no network: approximation, linearization, generalization,
    with the exact predictive ``P``, ``W_hat x_test`` and the regression problem ``X, Y, x_test``."""

    exact: np.ndarray
    estimated: np.ndarray
    W_hat: np.ndarray
    X: np.ndarray
    Y: np.ndarray
    x_test: np.ndarray
    approximation: float
    linearization: float
    generalization: float
    n_samples: int


@dataclass(frozen=True)
class StageCheck:
    """Largest deviation of a construction stage from its reference and the deviation it may have."""

    deviation: float
    allowed: float


@dataclass(frozen=True)
class PromptTerms:
    """Every term (:data:`TERMS`), the total ``|P - TF|`` and the deterministic bounds of one prompt,
    with the construction's parameters and its stage checks."""

    num_columns: int
    n_samples: int
    approximation: float
    linearization: float
    generalization: float
    optimization: float
    construction: float
    total: float
    kappa: float
    weight_norm: float
    eta: float
    beta: float
    theta: float
    optimization_bound: float
    optimization_bound_paper: float
    construction_bound: float
    stages: dict[str, StageCheck]

    def sum_of_terms(self) -> float:
        """The sum of the five measured terms, which bounds ``total`` (triangle inequality)."""
        return sum(getattr(self, term) for term in TERMS)


def regression_terms(model: hmm.HMM, tokens: np.ndarray, L: int, W_star: np.ndarray, m: int = 1) -> RegressionTerms:
    """Approximation, linearization and generalization of one prompt (the law of the next m tokens),
    and its ``X, Y, x_test``."""
    p = model.num_tokens
    test = torch.as_tensor(final_segment(tokens, p))
    if test.numel() <= L:
        raise ValueError(f"tokens: test segment of {test.numel()} tokens; expected more than L = {L}")
    window = hmm.HMM(resolve_prior(model, "stationary"), model.transition, model.emission)
    exact = ahead_law(model, hmm.filter_beliefs(model, test).filtered[-1], m).numpy()
    memory = ahead_law(model, hmm.filter_beliefs(window, test[-L:]).filtered[-1], m).numpy()
    X, Y, x_test = reference.regression_problem(tokens, p, L, m)
    W_hat = reference.min_norm_solution(X, Y)
    return RegressionTerms(
        exact=exact,
        estimated=W_hat @ x_test,
        W_hat=W_hat,
        X=X,
        Y=Y,
        x_test=x_test,
        approximation=l1(exact - memory),
        linearization=l1(memory - W_star @ x_test),
        generalization=l1(W_star @ x_test - W_hat @ x_test),
        n_samples=X.shape[0],
    )


def decompose_prompt(
    model: hmm.HMM, tokens: np.ndarray, L: int, gd_steps: int, W_star: np.ndarray, m: int = 1
) -> PromptTerms:
    """Every term and the deterministic bounds of one prompt, with its stage checks; ``m`` labels
    (m >= 2: Theorem 2's network and the joint law of the next m tokens, dimension ``q = p^m``)."""
    q = model.num_tokens**m
    N = len(tokens) + 1
    terms = regression_terms(model, tokens, L, W_star, m)
    spec = parameters_for_prompt(tokens, model.num_tokens, L, gd_steps, future_length=m)
    iterates = reference.gd_iterates(terms.X, terms.Y, spec.eta, gd_steps, N)
    network = build_network(spec)
    trace = network.forward(tokens, record_attention=False)
    transformer = trace.prediction.numpy()
    gd_prediction = iterates[-1] @ terms.x_test
    lambda_max, lambda_min = spectrum(reference.hessian(terms.X, N))
    kappa = lambda_max / lambda_min
    weight_norm = float(np.linalg.norm(terms.W_hat))
    bound = spec.error_bound(N)
    return PromptTerms(
        num_columns=N,
        n_samples=terms.n_samples,
        approximation=terms.approximation,
        linearization=terms.linearization,
        generalization=terms.generalization,
        optimization=l1(terms.estimated - gd_prediction),
        construction=l1(gd_prediction - transformer),
        total=l1(terms.exact - transformer),
        kappa=kappa,
        weight_norm=weight_norm,
        eta=spec.eta,
        beta=spec.beta,
        theta=spec.theta,
        optimization_bound=formulas.optimization_bound(q, L, weight_norm, kappa, gd_steps),
        optimization_bound_paper=formulas.optimization_bound_paper(q, L, weight_norm, kappa, gd_steps),
        construction_bound=q * bound,
        stages=stage_checks(trace, network, tokens, iterates, gd_prediction, bound),
    )


def stage_checks(
    trace, network, tokens: np.ndarray, iterates: np.ndarray, gd_prediction: np.ndarray, bound: float
) -> dict[str, StageCheck]:
    """Max deviation of every stage from :mod:`construction.reference` and what it may be.

    ``gd_prediction`` is the reference read-out ``W_T x_test`` (``iterates[-1] @ x_test``) and
    ``bound`` the construction error bound B of this prompt (``network.spec.error_bound(N)``), both
    already computed by :func:`decompose_prompt`.

    * history block r (after the last label layer): ``r eps`` + rounding (construction.leak);
    * label r, ``future.r`` (named ``label`` when m = 1): ``r eps`` + rounding;
    * joint one-hot (m >= 2): the unit ``relu(sum_r future.r[u_r] - (m - 1))`` is 1-Lipschitz in
      each input, so it errs by at most the sum of the m label errors, ``m(m+1)/2 eps`` plus their
      rounding, plus its own: a sum of m + 1 terms of magnitude at most ``m - 1 + sum_r future.r``,
      within ``gamma_m (2m - 1)`` (Higham's ``gamma_n = n u / (1 - n u)``); the copy into ``joint``
      is exact;
    * GD iterates ``W_t`` (every t, every entry, copy held by the last column): the construction
      error bound B. Its amplification is at least ``T x forcing / eps``, and the row errors obey
      ``||Delta_t||_2 <= t x forcing`` (construction.leak), so every entry is within B;
    * read-out ``W_T x_test`` per coordinate: B.
    """
    spec = network.spec
    p, L, m = spec.num_tokens, spec.history_length, spec.future_length
    N = len(tokens) + 1
    eps = layer_leak(spec.beta, spec.theta, N)
    history = reference.history(tokens, p, L)
    labelled = trace.layers_of(Stage.LABEL)[-1]
    checks = {}
    for r in range(1, L):
        deviation = np.abs(trace.slot(f"history.{r}", labelled).numpy().T - history[:, r]).max()
        checks[f"history.{r}"] = StageCheck(deviation=float(deviation), allowed=r * eps + STAGE_ROUNDING)
    future = reference.future(tokens, p, m)
    for r in range(1, m + 1):
        label = float(np.abs(trace.slot(f"future.{r}", labelled).numpy().T - future[:, r - 1]).max())
        checks["label" if m == 1 else f"label.{r}"] = StageCheck(deviation=label, allowed=r * eps + STAGE_ROUNDING)
    if m >= 2:
        unit_roundoff = np.finfo(np.float64).eps / 2
        own = (2 * m - 1) * m * unit_roundoff / (1 - m * unit_roundoff)
        joint = float(np.abs(trace.slot("joint", "joint").numpy().T - reference.joint(future, p)).max())
        checks["joint"] = StageCheck(deviation=joint, allowed=m * (m + 1) / 2 * eps + m * STAGE_ROUNDING + own)
    worst = 0.0
    for t in range(1, spec.gd_steps + 1):
        weights = np.stack([trace.slot(f"weights.{k}", f"gd.{t}").numpy()[:, -1] for k in range(spec.layout.target_dim)])
        worst = max(worst, float(np.abs(weights - iterates[t]).max()))
    checks["gd"] = StageCheck(deviation=worst, allowed=bound)
    readout = np.abs(trace.prediction.numpy() - gd_prediction).max()
    checks["readout"] = StageCheck(deviation=float(readout), allowed=bound)
    return checks


def sample_prompt_tokens(model: hmm.HMM, count: int, fmt: hmm.PromptFormat, seed: int) -> list[np.ndarray]:
    """``count`` prompts of format ``fmt`` from the single HMM ``model``."""
    prompts = hmm.sample_prompts(hmm.Mixture.single(model), count, fmt, seed=seed)
    return [row.numpy() for row in prompts.tokens]


@dataclass(frozen=True)
class SweepPoint:
    """Mean N' and mean generalization term over the prompts with ``num_demos`` demonstrations."""

    num_demos: int
    n_samples: float
    generalization: float


@dataclass(frozen=True)
class OptimizationCurve:
    """GD convergence of one prompt at t = 0..T: relative distance ``||W_t - W_hat||_F / ||W_hat||_F``,
    prediction gap ``|(W_hat - W_t) x_test|_1`` and the two Lemma 5 bounds of :mod:`bounds.formulas`."""

    kappa: float
    relative_distance: list[float]
    prediction_gap: list[float]
    bound: list[float]
    bound_paper: list[float]


@dataclass(frozen=True)
class ConstructionPoint:
    """Construction error of one prompt at one beta, beside the leak formula and the bound ``p A eps``."""

    beta: float
    leak: float
    measured_l1: float
    measured_max: float
    bound: float


@dataclass(frozen=True)
class ConstructionCurve:
    """Construction error vs beta of one N-column prompt at its angle theta."""

    num_columns: int
    theta: float
    rows: list[ConstructionPoint]


def generalization_sweep(
    model: hmm.HMM, L: int, W_star: np.ndarray, demo_counts, demo_length: int, test_length: int, prompts: int, seed: int,
    m: int = 1,
) -> list[SweepPoint]:
    """Mean generalization term ``|W* x - W_hat x|_1`` and mean N' for each number of demonstrations
    (m labels: ``W*`` is the m-step population regression)."""
    points = []
    for offset, num_demos in enumerate(demo_counts):
        fmt = hmm.PromptFormat(num_demos, demo_length, test_length)
        terms = [regression_terms(model, tokens, L, W_star, m)
                 for tokens in sample_prompt_tokens(model, prompts, fmt, seed + offset)]
        points.append(
            SweepPoint(
                num_demos=num_demos,
                n_samples=float(np.mean([term.n_samples for term in terms])),
                generalization=float(np.mean([term.generalization for term in terms])),
            )
        )
    return points


def optimization_curve(tokens: np.ndarray, p: int, L: int, gd_steps: int) -> OptimizationCurve:
    """GD convergence of one prompt for t = 0..T (``T = gd_steps``) beside Lemma 5 (tight and paper forms).

    The step is ``eta = 1 / lambda_max`` of the prompt's Hessian, as in
    :func:`construction.parameters_for_prompt` (read off the same spectrum: no beta is needed here).
    """
    tokens = check_prompt(tokens, build_layout(p, L))
    N = len(tokens) + 1
    X, Y, x_test = reference.regression_problem(tokens, p, L)
    lambda_max, lambda_min = spectrum(reference.hessian(X, N))
    eta = 1.0 / lambda_max
    iterates = reference.gd_iterates(X, Y, eta, gd_steps, N)
    W_hat = reference.min_norm_solution(X, Y)
    kappa = lambda_max / lambda_min
    weight_norm = float(np.linalg.norm(W_hat))
    ts = range(gd_steps + 1)
    return OptimizationCurve(
        kappa=kappa,
        relative_distance=[float(np.linalg.norm(iterates[t] - W_hat) / weight_norm) for t in ts],
        prediction_gap=[l1((W_hat - iterates[t]) @ x_test) for t in ts],
        bound=[formulas.optimization_bound(p, L, weight_norm, kappa, t) for t in ts],
        bound_paper=[formulas.optimization_bound_paper(p, L, weight_norm, kappa, t) for t in ts],
    )


def construction_curve(tokens: np.ndarray, p: int, L: int, gd_steps: int, leaks) -> ConstructionCurve:
    """Construction error ``|W_T x - TF|`` of one prompt at the betas where the leading leak term
    ``2 exp(-beta (1 - cos theta))`` equals each value of ``leaks``, beside the leak formula and
    the bound ``p eps A``; eta, theta and the penalty from :func:`construction.parameters_for_prompt`."""
    N = len(tokens) + 1
    spec = parameters_for_prompt(tokens, p, L, gd_steps)
    expected = reference.prediction(tokens, p, L, spec.eta, gd_steps)
    rows = []
    for leak in leaks:
        leaky = replace(spec, beta=math.log(2.0 / leak) / (1.0 - math.cos(spec.theta)))
        network = build_network(leaky, allow_leak=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the leak is what is being measured
            prediction = network.forward(tokens).prediction.numpy()
        rows.append(
            ConstructionPoint(
                beta=leaky.beta,
                leak=layer_leak(leaky.beta, spec.theta, N),
                measured_l1=l1(prediction - expected),
                measured_max=float(np.abs(prediction - expected).max()),
                bound=formulas.construction_bound(leaky, N),
            )
        )
    return ConstructionCurve(num_columns=N, theta=spec.theta, rows=rows)
