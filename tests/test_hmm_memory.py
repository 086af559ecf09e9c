"""The L-memory predictor, one-hot history features, least squares and the G-optimal design."""
import numpy as np
import pytest
import torch
from hmmlearn_oracle import hmmlearn_model, on_the_hmmlearn_worker
from hypothesis import given
from hypothesis import strategies as st

import hmm
from hmm.memory import g_optimal_design, g_optimal_prior, joint_one_hot_history, least_squares, memory_predictor, one_hot_history
from rounding import forward_rounding, gamma, least_squares_rounding, predictive_rounding, ridge_residual_rounding, row_sum_deviation, unit_roundoff


def window_predictive_with_hmmlearn(model: hmm.HMM, prior: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, float]:
    """Oracle for P_L: hmmlearn scores the window and window + o with start probabilities b0.
    Returns the p probabilities and the largest |score| they came from."""
    reference = hmmlearn_model(model, initial=prior)
    base = reference.score(window[:, None])
    extended = np.array([reference.score(np.append(window, o)[:, None]) for o in range(model.num_tokens)])
    return np.exp(extended - base), float(np.abs(extended).max())


@on_the_hmmlearn_worker
@pytest.mark.parametrize("prior", ["stationary", "uniform"])
def test_memory_predictor_matches_hmmlearn_windows(prior):
    model = hmm.random_hmm(5, 4, initial="dirichlet", seed=0)
    tokens, _ = hmm.sample_sequences(model, [0], 30, seed=1)
    L = 4
    ours = memory_predictor(model, tokens[0], L, prior=prior)
    b0 = hmm.stationary_distribution(model.transition).numpy() if prior == "stationary" else np.full(5, 0.2)
    sequence = tokens[0].numpy()
    for t in range(L, 30):
        expected, largest_score = window_predictive_with_hmmlearn(model, b0, sequence[t - L + 1 : t + 1])
        # hmmlearn: two scores of at most L + 1 tokens, whose difference exp turns into a relative
        # error; ours: a forward pass of L + 1 steps, its belief normalised (twice the path's error).
        rounding = forward_rounding(model.num_states, L + 1, largest_score)
        np.testing.assert_allclose(ours[t].numpy(), expected, rtol=4 * rounding + unit_roundoff(), atol=0)
    exact = hmm.next_token_probs(model, tokens[0])
    # Windows that reach the start are the exact filter over L tokens, on both sides: each within
    # rounding.predictive_rounding of the exact value.
    filtered = predictive_rounding(model.num_states, L)
    torch.testing.assert_close(ours[:L], exact[:L], rtol=2 * filtered, atol=0)


@given(st.integers(0, 2**31 - 1), st.sampled_from([0.5, 0.8]))
def test_memory_predictor_converges_to_exact_on_observable_hmms(seed, observability):
    """Over-complete, gamma = observability > 0: the error of P_L falls with L and is below 1e-10
    by L = 64 (Lemma 1 predicts exponential decay in L)."""
    model = hmm.random_hmm(4, 5, observability=observability, emission_concentration=None, transition_concentration=0.5, seed=seed)
    tokens, _ = hmm.sample_sequences(model, torch.zeros(4, dtype=torch.long), 72, seed=seed + 1)
    exact = hmm.next_token_probs(model, tokens)
    errors = [(memory_predictor(model, tokens, L, prior="uniform") - exact)[:, 64:].abs().sum(-1).mean().item() for L in (1, 8, 64)]
    assert errors[2] <= errors[1] <= errors[0]
    assert errors[2] < 1e-10


def test_memory_predictor_broadcasts_like_filtering():
    model = hmm.random_hmm(3, 3, batch=(2,), seed=3)
    tokens, _ = hmm.sample_sequences(model[0], [0, 0, 0], 12, seed=4)
    batched = memory_predictor(model, tokens[:, None, :], 3)
    assert batched.shape == (3, 2, 12, 3)
    # Every row is a filter over at most L = 3 tokens; the batch may sum in another order.
    filtered = predictive_rounding(model.num_states, 3)
    torch.testing.assert_close(batched[2, 1], memory_predictor(model[1], tokens[2], 3), rtol=2 * filtered, atol=0)


def test_one_hot_history_blocks_are_shifted_tokens():
    tokens = torch.tensor([2, 0, 1, 1])
    features = one_hot_history(tokens, 3, 3)
    assert features.shape == (4, 9)
    for t in range(4):
        for r in range(3):
            block = features[t, 3 * r : 3 * r + 3]
            expected = torch.nn.functional.one_hot(tokens[t - r], 3).double() if t - r >= 0 else torch.zeros(3, dtype=torch.float64)
            assert torch.equal(block, expected)


def consistent_residual_rounding(features: torch.Tensor, targets: torch.Tensor, solution: torch.Tensor) -> float:
    """Largest entry of the computed ``X W_hat^T - Y`` that rounding alone explains when the system
    is consistent (some W has ``X W^T = Y`` exactly): ``||X||_2`` times
    :func:`rounding.least_squares_rounding`, plus ``gamma_{D+1}`` of ``|X||W_hat|^T + |Y|`` for
    evaluating the residual. A larger residual proves the targets are not linear in the features."""
    evaluation = gamma(features.shape[-1] + 1) * (features.abs() @ solution.abs().T + targets.abs()).max().item()
    return torch.linalg.matrix_norm(features, 2).item() * least_squares_rounding(features, targets, solution) + evaluation


def test_joint_one_hot_index_and_exactness_of_the_joint_linear_model():
    """On z_t (joint one-hot) least squares reproduces P_L exactly (it is a function of the
    window); on the concatenated x_t it does not for L = 2, but does for L = 1."""
    model = hmm.random_hmm(4, 3, seed=5)
    tokens, _ = hmm.sample_sequences(model, torch.zeros(50, dtype=torch.long), 20, seed=6)
    for L, joint_exact, concatenated_exact in ((1, True, True), (2, True, False)):
        targets = memory_predictor(model, tokens, L)[:, L:].reshape(-1, 3)
        for history, exact in ((joint_one_hot_history(tokens, L, 3)[:, L:].reshape(-1, 3**L), joint_exact),
                               (one_hot_history(tokens, L, 3)[:, L:].reshape(-1, 3 * L), concatenated_exact)):
            solution = least_squares(history, targets)
            residual = (history @ solution.T - targets).abs().max().item()
            assert (residual <= consistent_residual_rounding(history, targets, solution)) == exact, (L, residual)
    assert joint_one_hot_history(torch.tensor([2, 1]), 2, 3)[1].argmax().item() == 2 * 3 + 1


def test_concatenated_one_hot_covariance_has_rank_pL_minus_L_plus_1():
    """Each block sums to 1, so the L blocks share L-1 linear relations (docs/construction.md, section 0.2)."""
    p, L = 3, 3
    tokens = torch.randint(0, p, (2000,), generator=torch.Generator().manual_seed(0))
    features = one_hot_history(tokens, L, p)[L - 1 :]
    assert torch.linalg.matrix_rank(features.T @ features).item() == p * L - (L - 1)


def test_least_squares_is_minimum_norm_and_ridge_matches_normal_equations():
    features = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 2.0, 1.0]], dtype=torch.float64)  # rank 2
    targets = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    W = least_squares(features, targets)
    consistent = consistent_residual_rounding(features, targets, W)
    torch.testing.assert_close(features @ W.T, targets, rtol=0, atol=consistent)
    null_direction = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)  # features @ null = 0
    # No component in the null space: W+ has none, W_hat is within least_squares_rounding of W+.
    null_rounding = (least_squares_rounding(features, targets, W) * null_direction.norm().item()
                     + gamma(3) * (W.abs() @ null_direction.abs()).item())
    assert abs((W @ null_direction).item()) <= null_rounding
    ridge = least_squares(features, targets, ridge=0.5)
    gradient = (features @ ridge.T - targets).T @ features + 0.5 * ridge
    # The exact gradient at the computed solution, plus evaluating it: n + D + 3 roundings of
    # (|X||W|^T + |Y|)^T |X| + ridge |W| (the residual, the product with X, the ridge term).
    evaluation = gamma(sum(features.shape) + 3) * ((features.abs() @ ridge.abs().T + targets.abs()).T @ features.abs() + 0.5 * ridge.abs())
    assert bool((gradient.abs() <= ridge_residual_rounding(features, targets, 0.5, ridge) + evaluation).all())
    # The bound is no formality: the solution for another ridge lies far outside it.
    other = least_squares(features, targets, ridge=0.4)
    assert bool(((other @ (features.T @ features) + 0.5 * other - targets.T @ features).abs() > 1e3 * (
        ridge_residual_rounding(features, targets, 0.5, other) + evaluation)).any())


@pytest.mark.parametrize("ridge", [0.0, 0.5])
def test_least_squares_of_a_batch_solves_each_problem(ridge):
    generator = torch.Generator().manual_seed(0)
    features = torch.randint(0, 2, (3, 4, 12, 5), generator=generator).double()  # rank-deficient 0/1 designs
    targets = torch.randn(3, 4, 12, 2, generator=generator, dtype=torch.float64)
    batched = least_squares(features, targets, ridge)
    assert batched.shape == (3, 4, 2, 5)
    for index in np.ndindex(3, 4):
        single = least_squares(features[index], targets[index], ridge)
        # Both are computed solutions of one problem, each within its rounding bound of the exact one.
        if ridge == 0:
            rounding = sum(least_squares_rounding(features[index], targets[index], W) for W in (batched[index], single))
        else:
            gram = features[index].T @ features[index] + ridge * torch.eye(5, dtype=torch.float64)
            inverse_norm = torch.linalg.matrix_norm(torch.linalg.inv(gram), float("inf")).item()
            rounding = inverse_norm * sum(ridge_residual_rounding(features[index], targets[index], ridge, W)
                                          for W in (batched[index], single))
        assert (batched[index] - single).abs().max().item() <= rounding, index
    with pytest.raises(ValueError, match=r"features/targets: shapes \(3, 4, 12, 5\), \(4, 12, 2\); expected \(\.\.\., n, D\)"):
        least_squares(features, targets[0], ridge)


def test_g_optimal_design_meets_kiefer_wolfowitz():
    """At the G-optimal design the largest leverage equals the rank d; any other design has >= d."""
    factors = hmm.low_rank_transition((), 12, 4, seed=7)
    rho = g_optimal_design(factors.left)
    def max_leverage(weights):
        design = factors.left.T @ (weights[:, None] * factors.left)
        return ((factors.left @ torch.linalg.inv(design)) * factors.left).sum(-1).max().item()
    assert 4.0 <= max_leverage(rho) <= 4.0 * (1 + 1e-3)
    assert max_leverage(torch.full((12,), 1 / 12, dtype=torch.float64)) >= 4.0
    prior = g_optimal_prior(factors.left, factors.right)
    # The same product of the same design and transition (left @ right, as the generator forms it).
    assert torch.equal(prior, rho @ factors.transition)
    # Mass is kept up to rounding: sum(prior) = sum_s rho_s (row sum of T)_s exactly, so it is off 1
    # by at most rho's own deviation (measured within gamma_S) plus T's rows'; the product and the
    # sum round by gamma_{2S}.
    states = factors.transition.shape[0]
    allowed = (abs(rho.sum().item() - 1) + gamma(states) + row_sum_deviation(factors.transition)
               + gamma(2 * states))
    assert abs(prior.sum().item() - 1) <= allowed
