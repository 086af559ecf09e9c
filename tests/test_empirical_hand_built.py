"""The hand-built network as an in-context predictor beside P_L and least squares: the distribution
rule, the rows served, every predictor against an independent oracle (plain-numpy reference, exact
Bayes), the GD-to-least-squares rate, the restricted evaluation, and refusals."""
import math

import numpy as np
import pytest
import torch

import construction
import hmm
from bounds.theorem1 import EIGENVALUE_TOLERANCE
from construction import reference
from empirical.training.data import held_out_prompts
from empirical.yardsticks.evaluate import bayes_predictor, evaluate_predictors, unigram_predictor
from empirical.yardsticks.hand_built import (
    check_format,
    hand_built_outputs,
    hand_built_predictor,
    least_squares_outputs,
    least_squares_predictor,
    segments,
    served_rows,
    task_memory_predictor,
    to_distribution,
)
from empirical.training.presets import get_preset
from rounding import gamma, least_squares_rounding, predictive_rounding

PRESET = get_preset("tiny")
MIXTURE = PRESET.build_mixture()
FMT = PRESET.prompt_format
P = MIXTURE.num_tokens
PROMPTS = held_out_prompts(MIXTURE, FMT, 4, seed=0)


def reference_rows(tokens: np.ndarray, history_length: int, k: int, weights) -> tuple[np.ndarray, np.ndarray]:
    """``(rows t, W x_t)`` of segment k by the plain-numpy reference, for ``weights(X, Y, num_columns)``
    fitted on the prefix "first k demonstrations, segment k"."""
    start, stop = segments(FMT)[k]
    prefix = tokens[:stop]
    X, Y, _ = reference.regression_problem(prefix, P, history_length)
    W = weights(X, Y, stop + 1)
    features = reference.history(prefix, P, history_length)[:, :, :P].reshape(stop + 1, -1)
    rows = np.arange(start + history_length - 1, stop)
    return rows, features[rows + 1] @ W.T


def test_distribution_rule_sums_to_one_respects_the_floor_and_keeps_the_argmax():
    raw = 2 * torch.randn(200, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    raw[0], raw[1], raw[2] = -1.0, 0.0, float("nan")
    smoothing = 0.1
    q = to_distribution(raw, smoothing)
    finite = q[3:]
    # Dividing by the computed total makes the shares sum to 1 within gamma_p (the total's p - 1
    # roundings and the division); scaling, adding eps / p and summing the row add p + 2 more.
    assert torch.allclose(finite.sum(-1), torch.ones(197, dtype=torch.float64), rtol=0, atol=gamma(2 * 5 + 2))
    # Adding a nonnegative share to the stored eps / p rounds to no less than it (rounding is monotone).
    assert float(finite.min()) >= smoothing / 5
    positive = raw[3:].max(-1).values > 0
    assert positive.sum() > 150 and torch.equal(finite.argmax(-1)[positive], raw[3:].argmax(-1)[positive])
    assert torch.equal(q[0], torch.full((5,), 0.2, dtype=torch.float64)) and torch.equal(q[1], q[0])
    assert bool(q[2].isnan().all())
    # A raw row that already is a distribution loses at most -log(1 - eps) nats on any token.
    distribution = torch.softmax(raw[3:], -1)
    assert bool((to_distribution(distribution, smoothing).log() >= distribution.log() + math.log(1 - smoothing)).all())


def test_served_rows_have_an_L_history_inside_a_segment_after_a_demonstration():
    history_length = 3
    rows = served_rows(FMT, history_length)
    segment, offset = FMT.segment_index, FMT.position_in_segment
    for t in range(FMT.length):
        window = range(t - history_length + 1, t + 1)
        inside = window.start >= 0 and all(segment[s] == segment[t] and offset[s] >= 0 for s in window)
        assert bool(rows[t]) == (inside and int(segment[t]) >= 1), t


def test_memory_predictor_covering_the_segment_is_bayes_for_a_single_hmm():
    """For one HMM the Bayes predictive restarts at every delimiter (segments are independent runs),
    so it equals P_L wherever the window reaches back to the segment's start."""
    single = hmm.Mixture.single(MIXTURE.hmm[2])
    prompts = hmm.sample_prompts(single, 5, FMT, seed=1)
    history_length = max(FMT.demo_length, FMT.test_length)
    memory = task_memory_predictor(single, prompts.task_ids, FMT, history_length)(prompts.tokens)
    bayes = bayes_predictor(single)(prompts.tokens)
    following = torch.cat([prompts.tokens[0, 1:], torch.tensor([P])])
    predicted = following < P
    # Both filter at most one segment: each within rounding.predictive_rounding of the exact value.
    filtered = predictive_rounding(single.hmm.num_states, history_length)
    torch.testing.assert_close(memory[:, predicted], bayes[:, predicted], rtol=2 * filtered, atol=0)


@pytest.mark.parametrize("history_length", [1, 2, 3])
def test_least_squares_rows_are_the_reference_minimum_norm_predictions(history_length):
    outputs = least_squares_outputs(PROMPTS.tokens, FMT, P, history_length)
    solutions = []  # the reference's W+ of each (prompt, k), kept for the rounding bound

    def min_norm_solution(X, Y, num_columns):
        solutions.append((X, Y, reference.min_norm_solution(X, Y)))
        return solutions[-1][2]

    for b, tokens in enumerate(PROMPTS.tokens.numpy()):
        for k in range(1, FMT.num_demos + 1):
            rows, expected = reference_rows(tokens, history_length, k, min_norm_solution)
            X, Y, solution = solutions[-1]
            # Both W+ (SVDs in torch and numpy) are within least_squares_rounding of the exact one; a
            # row W x_t, ||x_t||_2 = sqrt(L), moves by that times sqrt(L), and each product rounds by
            # gamma_pL of |W| x_t (x_t is 0/1).
            rounding = (2 * least_squares_rounding(X, Y, solution) * math.sqrt(history_length)
                        + 2 * gamma(P * history_length) * np.abs(solution).sum(1).max())
            assert np.abs(outputs[b, rows].numpy() - expected).max() <= rounding, (b, k)
    assert bool(outputs[:, ~served_rows(FMT, history_length)].isnan().all())


def test_hand_built_rows_are_gd_on_the_first_k_demonstrations_within_the_construction_bound():
    history_length, steps = 2, 5
    outputs = hand_built_outputs(PROMPTS.tokens, FMT, P, history_length, steps, batch_size=3)
    for b, tokens in enumerate(PROMPTS.tokens.numpy()):
        for k in range(1, FMT.num_demos + 1):
            stop = segments(FMT)[k][1]
            spec = construction.parameters_for_prompt(tokens[:stop], P, history_length, steps)
            rows, expected = reference_rows(tokens, history_length, k,
                                            lambda X, Y, N, eta=spec.eta: reference.gd_iterates(X, Y, eta, steps, N)[-1])
            assert np.abs(outputs[b, rows].numpy() - expected).max() <= spec.error_bound(stop + 1), (b, k)
    assert bool(outputs[:, ~served_rows(FMT, history_length)].isnan().all())


def test_a_column_of_the_segment_pass_is_the_network_on_the_prompt_cut_after_it():
    history_length, steps = 2, 3
    tokens = PROMPTS.tokens[:1]
    outputs = hand_built_outputs(tokens, FMT, P, history_length, steps)
    start, stop = segments(FMT)[2]
    for t in range(start + history_length - 1, stop):
        cut = tokens[0, : t + 1].numpy()
        spec = construction.parameters_for_prompt(cut, P, history_length, steps)
        own = construction.build_network(spec).forward(cut, record_attention=False).prediction
        bound = spec.error_bound(t + 2) + construction.parameters_for_prompt(
            tokens[0, :stop].numpy(), P, history_length, steps).error_bound(stop + 1)
        assert float((outputs[0, t] - own).abs().max()) <= bound, t


def test_hand_built_approaches_least_squares_at_the_gd_rate():
    """``||W_T x - W+ x||_2 <= (1 - lambda_min+/lambda_max)^T ||W+||_F ||x||_2`` (GD from 0 on the
    one-hot design, docs/construction.md section 5), plus the construction error; ``||x||_2 = sqrt(L)``."""
    history_length = 2
    least = least_squares_outputs(PROMPTS.tokens, FMT, P, history_length)
    gaps = {}
    for steps in (2, 200):
        outputs = hand_built_outputs(PROMPTS.tokens, FMT, P, history_length, steps)
        for b, tokens in enumerate(PROMPTS.tokens.numpy()):
            for k in range(1, FMT.num_demos + 1):
                start, stop = segments(FMT)[k]
                X, Y, _ = reference.regression_problem(tokens[:stop], P, history_length)
                eigenvalues = np.linalg.eigvalsh(X.T @ X)
                nonzero = eigenvalues[eigenvalues > EIGENVALUE_TOLERANCE * eigenvalues[-1]]
                rate = (1 - nonzero[0] / nonzero[-1]) ** steps
                bound = rate * np.linalg.norm(reference.min_norm_solution(X, Y)) * math.sqrt(history_length)
                bound += construction.parameters_for_prompt(tokens[:stop], P, history_length, steps).error_bound(stop + 1)
                rows = slice(start + history_length - 1, stop)
                gap = float((outputs[b, rows] - least[b, rows]).norm(dim=-1).max())
                assert gap <= bound, (steps, b, k)
                gaps[steps] = max(gaps.get(steps, 0.0), gap)
    assert gaps[200] < 0.1 * gaps[2]


def test_evaluation_restricted_to_the_served_rows():
    history_length = 2
    uniform = unigram_predictor(torch.full((P,), 1.0 / P, dtype=torch.float64))
    predictors = {
        "bayes": bayes_predictor(MIXTURE),
        "unigram": uniform,
        "P_L": task_memory_predictor(MIXTURE, PROMPTS.task_ids, FMT, history_length),
        "least squares": least_squares_predictor(FMT, P, history_length),
        "hand-built": hand_built_predictor(FMT, P, history_length, 3),
    }
    rows = served_rows(FMT, history_length)
    result = evaluate_predictors(predictors, PROMPTS, P, rows=rows)
    assert result.by_demonstrations.num_demonstrations == list(range(1, FMT.num_demos + 1))
    assert result.by_test_position.position == list(range(history_length, FMT.test_length))
    # k = 1 averages the rows predicting tokens L..l-1 of demonstration 2 (segment 1).
    start, stop = segments(FMT)[1]
    targets = PROMPTS.tokens[:, start + history_length : stop]
    picked = bayes_predictor(MIXTURE)(PROMPTS.tokens)[:, start + history_length - 1 : stop - 1]
    manual = -picked.gather(-1, targets[..., None]).log().mean()
    # The same log-probabilities (one predictor, one log), averaged in another order: n terms of
    # one sign, each average within gamma_n of the exact one.
    averaged = 2 * gamma(targets.numel())
    assert result.by_demonstrations.predictors["bayes"].loss[0] == pytest.approx(float(manual), rel=averaged, abs=0)
    # Served rows predicting a delimiter (the last token of demonstrations 2..n) or nothing are not evaluated.
    assert result.evaluated_rows == int(rows[:-1].sum()) - (FMT.num_demos - 1)
    with pytest.raises(ValueError, match=r"predictor 'least squares': \d+ evaluated rows are not distributions"):
        evaluate_predictors(predictors, PROMPTS, P)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_format(hmm.PromptFormat(3, 2, 8), 2), r"demo_length=2, test_length=8 for L=2; expected .*demo_length >= L \+ 1"),
        (lambda: check_format(hmm.PromptFormat(0, 8, 8), 1), r"num_demos=0, .* expected num_demos >= 1"),
        (lambda: served_rows(FMT, 0), r"history_length L: 0; expected an integer >= 1"),
        (lambda: to_distribution(torch.zeros(2, 3), 0.0), r"smoothing: 0.0; expected a mass in \(0, 1\]"),
        (lambda: least_squares_outputs(PROMPTS.tokens[:, :-1], FMT, P, 1), r"tokens: shape \(4, 34\); expected \(B, 35\)"),
        (lambda: hand_built_outputs(PROMPTS.tokens, FMT, P, 1, 2, batch_size=0), r"batch_size: 0; expected an integer >= 1"),
        (lambda: task_memory_predictor(MIXTURE, PROMPTS.task_ids[:2], FMT, 1)(PROMPTS.tokens),
         r"tokens: 4 prompts; expected one per task id \(2\)"),
        (lambda: evaluate_predictors({"bayes": bayes_predictor(MIXTURE), "unigram": bayes_predictor(MIXTURE)},
                                     PROMPTS, P, rows=torch.ones(3, dtype=torch.bool)),
         r"rows: shape \(3,\), dtype torch.bool; expected \(35,\) bool"),
    ],
)
def test_bad_inputs_are_refused_with_the_argument_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
