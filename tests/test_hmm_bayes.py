"""The Bayes-optimal mixture predictor (and decoders) against direct per-task computations and
path enumeration."""
import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hmm
from rounding import enumeration_rounding, forward_rounding, gamma, mixture_rounding, predictive_rounding, \
    row_sum_deviation, unit_roundoff


def split_segments(tokens: list[int], delimiter: int) -> tuple[list[list[int]], list[int]]:
    """``(segments, current)``: the delimited segments of ``tokens`` that are closed, and the open one."""
    segments, current = [], []
    for token in tokens:
        if token == delimiter:
            segments.append(current)
            current = []
        else:
            current.append(token)
    return segments, current


def log_weight_range(mixture: hmm.Mixture, prompt: torch.Tensor) -> float:
    """Largest ``|log prior + log-likelihood of the prompt's segments|`` over the tasks: it bounds
    the same of every prefix (each token's log normaliser is <= 0), as :func:`mixture_rounding` needs."""
    segments, current = split_segments(prompt.tolist(), mixture.delimiter)
    magnitude = mixture.weights.log().abs()
    for segment in [*segments, current]:
        if segment:
            magnitude = magnitude + hmm.log_likelihood(mixture.hmm, torch.tensor(segment)).abs()
    assert torch.isfinite(magnitude).all(), "every task emits every token here, so every bound is finite"
    return magnitude.max().item()


def prompt_rounding(mixture: hmm.Mixture, prompt: torch.Tensor) -> float:
    """:func:`mixture_rounding` at the prompt's last position, which bounds every earlier one."""
    return mixture_rounding(mixture.hmm.num_states, mixture.num_tasks, len(prompt), log_weight_range(mixture, prompt))


def direct_bayes_predictive(mixture: hmm.Mixture, prompt: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle: split prompt[:t+1] into segments, score each task with hmm.log_likelihood per
    segment, and mix the tasks' next-token predictive on the current segment."""
    segments, current = split_segments(prompt[: t + 1].tolist(), mixture.delimiter)
    log_weight = mixture.weights.log().clone()
    for segment in segments + ([current] if current else []):
        log_weight += hmm.log_likelihood(mixture.hmm, torch.tensor(segment))
    posterior = torch.softmax(log_weight, 0)
    if current:
        per_task = hmm.next_token_probs(mixture.hmm, torch.tensor(current))[:, -1]
    else:
        per_task = torch.einsum("ks,ksp->kp", mixture.hmm.initial, mixture.hmm.emission)  # restart after a delimiter
    return posterior @ per_task


@st.composite
def mixtures_and_prompts(draw):
    K = draw(st.integers(1, 5))
    S = draw(st.integers(1, 4))
    p = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    model = hmm.random_hmm(S, p, batch=(K,), transition_concentration=0.5, emission_concentration=0.5, seed=seed)
    weights = hmm.dirichlet_rows((K,), 1.0, seed + 1)
    mixture = hmm.Mixture(model, weights)
    fmt = hmm.PromptFormat(draw(st.integers(0, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    prompts = hmm.sample_prompts(mixture, 3, fmt, seed=seed + 2)
    return mixture, prompts


def log_posterior_rounding(mixture: hmm.Mixture, prompt: torch.Tensor) -> float:
    """Absolute rounding bound on a task's log posterior ``lw_k - logsumexp(lw)`` at the prompt's
    end: the log-weight's bound (:func:`mixture_rounding`'s docstring), the log-sum-exp's
    (``gamma_{K+1} + 3 u range``: the shifted exponentials and their sum, the log, the shift back)
    and the difference's rounding (``2 u range``)."""
    K, S, tokens, magnitude = mixture.num_tasks, mixture.hmm.num_states, len(prompt), log_weight_range(mixture, prompt)
    log_weight = forward_rounding(S, tokens, magnitude) + gamma(tokens + 1) * magnitude
    return log_weight + gamma(K + 1) + 5 * unit_roundoff() * magnitude


@given(mixtures_and_prompts())
def test_bayes_predictive_matches_direct_computation(case):
    """Both sides within :func:`mixture_rounding` of the exact predictive, entrywise and relatively."""
    mixture, prompts = case
    result = hmm.bayes_predictive(mixture, prompts.tokens)
    for b in range(prompts.tokens.shape[0]):
        tolerance = 2 * prompt_rounding(mixture, prompts.tokens[b])
        for t in range(prompts.tokens.shape[1]):
            torch.testing.assert_close(result.next_token[b, t], direct_bayes_predictive(mixture, prompts.tokens[b], t),
                                       rtol=tolerance, atol=0)
    # The weights cancel from a sum over tokens: what is left is how far a task's predictive sums
    # from 1 (a belief's eta and the stored rows', as in test_hmm_filtering) and the sums' rounding.
    S, p, K, model = mixture.hmm.num_states, mixture.hmm.num_tokens, mixture.num_tasks, mixture.hmm
    sums = (gamma(S) + max(row_sum_deviation(model.initial), row_sum_deviation(model.transition))
            + row_sum_deviation(model.emission) + 2 * gamma(S) + gamma(p) + 2 * gamma(4 * K) + unit_roundoff())
    torch.testing.assert_close(result.next_token.sum(-1), torch.ones(prompts.tokens.shape, dtype=torch.float64), rtol=0,
                               atol=sums)
    for b in range(prompts.tokens.shape[0]):
        # K posteriors, each within e^(its log's bound) - 1 relative and the exponential's ulp (2u),
        # then summed (gamma_K).
        posterior_sum = math.expm1(log_posterior_rounding(mixture, prompts.tokens[b])) + gamma(K + 2)
        assert result.task_log_posterior[b].exp().sum().item() == pytest.approx(1.0, rel=0, abs=posterior_sum)


@given(mixtures_and_prompts(), st.integers(1, 3000))
def test_chunked_equals_unchunked(case, chunk_bytes):
    mixture, prompts = case
    whole = hmm.bayes_predictive(mixture, prompts.tokens)
    chunked = hmm.bayes_predictive(mixture, prompts.tokens, chunk_bytes=chunk_bytes)
    for b in range(prompts.tokens.shape[0]):
        torch.testing.assert_close(chunked.next_token[b], whole.next_token[b],
                                   rtol=2 * prompt_rounding(mixture, prompts.tokens[b]), atol=0)
        torch.testing.assert_close(chunked.task_log_posterior[b], whole.task_log_posterior[b], rtol=0,
                                   atol=2 * log_posterior_rounding(mixture, prompts.tokens[b]))


def test_single_task_reduces_to_filtering_of_the_current_segment():
    model = hmm.random_hmm(4, 3, seed=1)
    fmt = hmm.PromptFormat(2, 5, 6)
    prompts = hmm.sample_prompts(hmm.Mixture.single(model), 4, fmt, seed=2)
    result = hmm.bayes_predictive(hmm.Mixture.single(model), prompts.tokens)
    test = prompts.tokens[:, fmt.test_positions]
    # One task: its weight is e^0 = 1 exactly, so both sides are the filter of the test segment,
    # each within rounding.predictive_rounding of the exact predictive.
    filtered = predictive_rounding(model.num_states, test.shape[1])
    torch.testing.assert_close(result.next_token[:, fmt.test_positions], hmm.next_token_probs(model, test),
                               rtol=2 * filtered, atol=0)


def test_sparse_tasks_that_cannot_emit_the_prompt_get_zero_posterior():
    emits_zero = hmm.HMM([1.0], [[1.0]], [[1.0, 0.0]])
    emits_one = hmm.HMM([1.0], [[1.0]], [[0.0, 1.0]])
    both = hmm.HMM(*(torch.stack([a, b]) for a, b in zip((emits_zero.initial, emits_zero.transition, emits_zero.emission), (emits_one.initial, emits_one.transition, emits_one.emission))))
    result = hmm.bayes_predictive(hmm.Mixture.uniform(both), torch.tensor([[1, 1, 2, 1]]))
    assert result.task_log_posterior[0, 0].item() == -float("inf")
    # The other task's weight is exp(-inf) = 0 and this one's emissions are 0 and 1: exact.
    assert torch.equal(result.next_token[0, -1], torch.tensor([0.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"tokens: prompt 0 up to position 1 has probability 0 under every task"):
        hmm.bayes_predictive(hmm.Mixture.uniform(both), torch.tensor([[0, 1]]))


def enumerated_task_state_joint(mixture: hmm.Mixture, prompt: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle by path enumeration: ``(K, S)`` joint ``P(task = k, s_t = s, prompt[:t+1])`` (t not a
    delimiter): every hidden path of every segment is summed, never filtered."""
    model = mixture.hmm
    segments, current = split_segments(prompt[: t + 1].tolist(), mixture.delimiter)
    # Python floats (the same float64 values): scalar arithmetic on tensors would cost ~100x more.
    parameters = model.initial.double().tolist(), model.transition.double().tolist(), model.emission.double().tolist()
    weights = mixture.weights.double().tolist()
    joint = [[0.0] * model.num_states for _ in range(mixture.num_tasks)]
    for k in range(mixture.num_tasks):
        task = [parameter[k] for parameter in parameters]
        earlier = weights[k]
        for segment in segments:
            earlier = earlier * sum(path_probability(*task, path, segment)
                                    for path in itertools.product(range(model.num_states), repeat=len(segment)))
        for path in itertools.product(range(model.num_states), repeat=len(current)):
            joint[k][path[-1]] += earlier * path_probability(*task, path, current)
    return torch.tensor(joint, dtype=torch.float64)


def path_probability(initial: list, transition: list, emission: list, path, tokens) -> float:
    """``P(s_0..s_n = path, o_0..o_n = tokens)`` of one HMM given as nested lists of floats."""
    probability = initial[path[0]] * emission[path[0]][tokens[0]]
    for previous, state, token in zip(path, path[1:], tokens[1:]):
        probability = probability * transition[previous][state] * emission[state][token]
    return probability


@given(mixtures_and_prompts())
def test_decoders_match_path_enumeration(case):
    """The Bayes-optimal task and state decoders (the probes' ceilings) against enumeration."""
    mixture, prompts = case
    result = hmm.bayes_predictive(mixture, prompts.tokens, decode=True)
    is_delimiter = prompts.tokens == mixture.delimiter
    assert torch.isnan(result.state_posterior[is_delimiter]).all()
    K, S = mixture.num_tasks, mixture.hmm.num_states
    for b in range(prompts.tokens.shape[0]):
        ours = prompt_rounding(mixture, prompts.tokens[b])
        for t in range(prompts.tokens.shape[1]):
            if is_delimiter[b, t]:
                continue
            joint = enumerated_task_state_joint(mixture, prompts.tokens[b], t)
            posterior = joint / joint.sum()
            # The enumeration: each segment's sum of paths (enumeration_rounding), their product
            # with the prior; then the joint's sum over K S entries and the division.
            segments, current = split_segments(prompts.tokens[b, : t + 1].tolist(), mixture.delimiter)
            enumerated = sum(enumeration_rounding(S, len(segment)) for segment in [*segments, current]) \
                + gamma(len(segments) + 2)
            oracle = 2 * enumerated + gamma(K * S) + unit_roundoff()
            torch.testing.assert_close(result.state_posterior[b, t], posterior.sum(0), rtol=ours + oracle + gamma(K),
                                       atol=0)
            task_posterior = posterior.sum(1)
            task_tolerance = ours + oracle + gamma(S)
            assert result.task_map_probability[b, t].item() == pytest.approx(task_posterior.max().item(),
                                                                              rel=task_tolerance, abs=0)
            # The MAP task is a maximiser (ties between tasks are left to the implementation): the
            # oracle's two entries each within its bound, our choice within ours.
            assert task_posterior[result.task_map[b, t]].item() == pytest.approx(task_posterior.max().item(),
                                                                                  rel=ours + 2 * task_tolerance, abs=0)


def test_decoders_do_not_depend_on_the_chunking():
    mixture = hmm.mixture_preset("tiny", seed=3)
    prompts = hmm.sample_prompts(mixture, 4, hmm.PROMPT_FORMATS["tiny"], seed=4)
    whole = hmm.bayes_predictive(mixture, prompts.tokens, decode=True)
    chunked = hmm.bayes_predictive(mixture, prompts.tokens, decode=True, chunk_bytes=1)
    for b in range(prompts.tokens.shape[0]):
        tolerance = 2 * prompt_rounding(mixture, prompts.tokens[b])
        torch.testing.assert_close(chunked.state_posterior[b], whole.state_posterior[b], rtol=tolerance, atol=0,
                                   equal_nan=True)
        torch.testing.assert_close(chunked.task_map_probability[b], whole.task_map_probability[b], rtol=tolerance,
                                   atol=0)
    assert torch.equal(chunked.task_map, whole.task_map)
