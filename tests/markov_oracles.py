"""Oracles shared by the Markov-chain tests: the bigram predictor (the chain's own kernel) and its
rounding, the rounding of a read-back of predictions that depend on the current token only and of
its memory coordinate, of a stationary distribution, and how far an entropy moves when its
probabilities do."""
import numpy as np
import torch

from empirical.studies.markov.chains import (
    check_kernel,
    entropy_rate,
    memory_norm,
    stationary_distribution,
    stationary_entropy,
    surprise,
)
from hmm import check_tokens
from rounding import gamma, gepp_backward_error, unit_roundoff


def bigram_log_probs(kernel, tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T, m)`` log-predictions of the bigram predictor: row ``t`` is ``log kernel[x_t]``."""
    kernel = check_kernel(kernel)
    tokens = check_tokens(tokens, kernel.shape[0], "tokens")
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(kernel))[tokens]


def planted_bigram_rounding(kernel: np.ndarray) -> np.ndarray:
    """Entrywise relative error of the planted bigram predictor ``exp(log P)`` (torch's exp of numpy's
    log) against P: ``8 u |log P| + 2 u``. numpy's vectorised log is within 4 ulps (numpy/numpy#23399),
    ``8 u |log P|`` absolute, which exp turns relative; torch's float64 exp (SLEEF's u10) within 1 ulp, 2u."""
    return unit_roundoff() * (8 * np.abs(np.log(kernel)) + 2)


def constant_read_back_rounding(tokens: torch.Tensor) -> float:
    """Bound on the float64 rounding of ``read_back_kernel(tokens, probs)``'s mean and spread when
    ``probs`` gives every position with the same current token one vector q (entries <= 1).

    The mean of ``n <= B (T - 1)`` copies of ``q_j`` (summed in any order, then divided by n) is
    within ``gamma_n q_j`` of it (Higham, Lemma 3.1), so is every deviation ``q_j - mean`` (computed
    exactly: the two are within a factor 2), and so is their root mean square, up to its own
    rounding, less than another factor 2: ``2 gamma_n``.
    """
    return 2 * gamma(tokens[:, :-1].numel())


def memory_coordinate_rounding(kernel: np.ndarray, read_back_error: float, expected: float) -> float:
    """Bound on ``|memory_coordinate(K_hat, P) - expected|`` for a read-back ``K_hat`` within
    ``read_back_error = e`` entrywise of P (``expected = 1``) or of ``U = 1 pi^T`` (``expected = 0``),
    pi the computed stationary distribution: ``e S_1 / S_2 + expected gamma_{4m+3}``, first order in
    u, with ``S_1 = sum_i pi_i sum_j |P_ij - pi_j|`` and ``S_2 = |P - U|_pi^2`` (:func:`memory_norm`).

    Numerator ``<K_hat - U, M>_pi`` and denominator ``<M, M>_pi`` (M = P - U, rounded once) are
    evaluated by the same operations: a product, a sum over m, the product with ``pi_i``, a sum over
    m, ``gamma_{2m}`` of their sums of magnitudes. ``K_hat - pi`` is ``expected M`` plus the read-back
    error (``e S_1`` in the numerator) and its own and M's rounding (``2 u S_2 expected``); the
    numerator's and the denominator's evaluations add ``2 gamma_{2m} S_2 expected``, the quotient u
    times ``expected``; the rest is second order.
    """
    pi = stationary_distribution(kernel)
    spread = float(pi @ np.abs(kernel - pi[None, :]).sum(axis=1))
    return read_back_error * spread / memory_norm(kernel) + expected * gamma(4 * kernel.shape[0] + 3)


def stationary_rounding(kernel: np.ndarray) -> float:
    """Bound on ``max_i |pi_hat_i - pi_i|`` of :func:`empirical.studies.markov.chains.stationary_distribution`
    (float64) for an ``m``-state ``kernel``: ``(m + 1) F / (1 - m F) + gamma_m + u`` with
    ``F = kappa e / (1 - kappa e)``.

    The solve is Gaussian elimination with partial pivoting on ``A = kernel^T - I`` with its last
    row replaced by ones: it solves ``(A + dA) x = b`` exactly with ``|dA| <= gamma_{3m} |L||U|``
    and ``|| |L||U| || <= (1 + 2 (m^2 - m) rho) ||A||`` for a growth factor ``rho <= 2^(m-1)``
    (Higham, Theorem 9.4 and Lemma 9.6), plus u for forming ``A``: ``e``. Its forward error is
    then ``kappa_inf(A) e / (1 - kappa_inf(A) e)`` relative (Theorem 7.2), ``F`` absolute since
    ``||pi||_inf <= 1``. Clamping at 0 only brings ``x`` nearer; dividing by its sum ``1 + s``,
    ``|s| <= m F``, moves an entry by at most ``(F + m F) / (1 - m F)``, and rounds it
    (``gamma_m`` for the sum, u for the division).
    """
    m = kernel.shape[0]
    system = kernel.T - np.eye(m)
    system[-1] = 1.0
    backward = gepp_backward_error(m) + unit_roundoff()
    condition = np.linalg.cond(system, np.inf)
    if not condition * backward < 1:
        raise ValueError(f"kernel: its system's condition number is {condition:.3g}; expected one below "
                         f"1 / {backward:.3g}, where the solve's error bound is finite")
    solve = condition * backward / (1 - condition * backward)
    return (m + 1) * solve / (1 - m * solve) + gamma(m) + unit_roundoff()


def entropy_perturbation(probabilities: np.ndarray, radius: float) -> float:
    """Largest change of ``sum_i -x_i log x_i`` when every ``x_i`` moves by at most ``radius``
    inside ``[0, 1]``: per entry, the largest ``|f(xi) - f(x_i)|`` over its interval, reached at an
    end or at ``1/e``, where the concave ``f(x) = -x log x`` peaks."""
    def entropy_term(x):
        return -x * np.log(x) if x > 0 else 0.0

    total = 0.0
    for x in np.asarray(probabilities, dtype=np.float64).ravel():
        low, high = max(x - radius, 0.0), min(x + radius, 1.0)
        candidates = [low, high] + ([1 / np.e] if low < 1 / np.e < high else [])
        total += max(abs(entropy_term(xi) - entropy_term(x)) for xi in candidates)
    return total


def entropy_rate_rounding(kernel: np.ndarray) -> float:
    """Bound on ``|entropy_rate(kernel) - H_rate|``: ``m F max_i h_i + gamma_{2m+2} H_rate``.

    :func:`empirical.studies.markov.chains.entropy_rate` is ``pi_hat . h`` with ``h_i = sum_j -P_ij log P_ij``.
    ``pi_hat`` is within ``F`` (:func:`stationary_rounding`) of ``pi`` in every entry; a term
    ``-P log P`` rounds 3 times (the log within 1 ulp, the product), and the two sums of m
    nonnegative terms and the products with ``pi_hat`` add ``gamma_{m-1} + u + gamma_{m-1}``.
    """
    m = kernel.shape[0]
    rows = (kernel * surprise(kernel)).sum(axis=1)
    return m * stationary_rounding(kernel) * rows.max() + gamma(2 * m + 2) * entropy_rate(kernel)


def stationary_entropy_rounding(kernel: np.ndarray) -> float:
    """Bound on ``|stationary_entropy(kernel) - H(pi)|``: ``sum -x log x`` moved by ``pi_hat``'s
    error (:func:`entropy_perturbation` around ``pi_hat``, radius :func:`stationary_rounding`),
    plus 3 roundings a term and a sum of m nonnegative terms (``gamma_{m+2}``)."""
    perturbation = entropy_perturbation(stationary_distribution(kernel), stationary_rounding(kernel))
    return perturbation + gamma(kernel.shape[0] + 2) * stationary_entropy(kernel)
