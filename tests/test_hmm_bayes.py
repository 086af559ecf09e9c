"""The Bayes-optimal mixture predictor (and decoders) against direct per-task computations and
path enumeration."""
import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hmm


def direct_bayes_predictive(mixture: hmm.Mixture, prompt: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle: split prompt[:t+1] into segments, score each task with hmm.log_likelihood per
    segment, and mix the tasks' next-token predictive on the current segment."""
    delimiter = mixture.delimiter
    tokens = prompt[: t + 1].tolist()
    segments, current = [], []
    for token in tokens:
        if token == delimiter:
            segments.append(current)
            current = []
        else:
            current.append(token)
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


@given(mixtures_and_prompts())
def test_bayes_predictive_matches_direct_computation(case):
    mixture, prompts = case
    result = hmm.bayes_predictive(mixture, prompts.tokens)
    for b in range(prompts.tokens.shape[0]):
        for t in range(prompts.tokens.shape[1]):
            torch.testing.assert_close(result.next_token[b, t], direct_bayes_predictive(mixture, prompts.tokens[b], t), rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(result.next_token.sum(-1), torch.ones(prompts.tokens.shape, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(result.task_log_posterior.exp().sum(-1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)


@given(mixtures_and_prompts(), st.integers(1, 3000))
def test_chunked_equals_unchunked(case, chunk_bytes):
    mixture, prompts = case
    whole = hmm.bayes_predictive(mixture, prompts.tokens)
    chunked = hmm.bayes_predictive(mixture, prompts.tokens, chunk_bytes=chunk_bytes)
    torch.testing.assert_close(chunked.next_token, whole.next_token, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(chunked.task_log_posterior, whole.task_log_posterior, rtol=1e-12, atol=1e-12)


def test_single_task_reduces_to_filtering_of_the_current_segment():
    model = hmm.random_hmm(4, 3, seed=1)
    fmt = hmm.PromptFormat(2, 5, 6)
    prompts = hmm.sample_prompts(hmm.Mixture.single(model), 4, fmt, seed=2)
    result = hmm.bayes_predictive(hmm.Mixture.single(model), prompts.tokens)
    test = prompts.tokens[:, fmt.test_positions]
    torch.testing.assert_close(result.next_token[:, fmt.test_positions], hmm.next_token_probs(model, test), rtol=1e-12, atol=1e-14)


def test_sparse_tasks_that_cannot_emit_the_prompt_get_zero_posterior():
    emits_zero = hmm.HMM([1.0], [[1.0]], [[1.0, 0.0]])
    emits_one = hmm.HMM([1.0], [[1.0]], [[0.0, 1.0]])
    both = hmm.HMM(*(torch.stack([a, b]) for a, b in zip((emits_zero.initial, emits_zero.transition, emits_zero.emission), (emits_one.initial, emits_one.transition, emits_one.emission))))
    result = hmm.bayes_predictive(hmm.Mixture.uniform(both), torch.tensor([[1, 1, 2, 1]]))
    assert result.task_log_posterior[0, 0].item() == -float("inf")
    torch.testing.assert_close(result.next_token[0, -1], torch.tensor([0.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"tokens: prompt 0 up to position 1 has probability 0 under every task"):
        hmm.bayes_predictive(hmm.Mixture.uniform(both), torch.tensor([[0, 1]]))


def enumerated_task_state_joint(mixture: hmm.Mixture, prompt: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle by path enumeration: ``(K, S)`` joint ``P(task = k, s_t = s, prompt[:t+1])`` (t not a
    delimiter): every hidden path of every segment is summed, never filtered."""
    model, delimiter = mixture.hmm, mixture.delimiter
    segments, current = [], []
    for token in prompt[: t + 1].tolist():
        if token == delimiter:
            segments.append(current)
            current = []
        else:
            current.append(token)
    # Python floats (the same float64 values): scalar arithmetic on tensors would cost ~100x more.
    parameters = model.initial.double().tolist(), model.transition.double().tolist(), model.emission.double().tolist()
    weights = mixture.weights.double().tolist()
    joint = [[0.0] * model.num_states for _ in range(mixture.num_tasks)]
    for k in range(mixture.num_tasks):
        initial, transition, emission = (parameter[k] for parameter in parameters)

        def path_probability(path, tokens):
            probability = initial[path[0]] * emission[path[0]][tokens[0]]
            for previous, state, token in zip(path, path[1:], tokens[1:]):
                probability = probability * transition[previous][state] * emission[state][token]
            return probability

        earlier = weights[k]
        for segment in segments:
            earlier = earlier * sum(path_probability(path, segment)
                                    for path in itertools.product(range(model.num_states), repeat=len(segment)))
        for path in itertools.product(range(model.num_states), repeat=len(current)):
            joint[k][path[-1]] += earlier * path_probability(path, current)
    return torch.tensor(joint, dtype=torch.float64)


@given(mixtures_and_prompts())
def test_decoders_match_path_enumeration(case):
    """The Bayes-optimal task and state decoders (the probes' ceilings) against enumeration."""
    mixture, prompts = case
    result = hmm.bayes_predictive(mixture, prompts.tokens, decode=True)
    is_delimiter = prompts.tokens == mixture.delimiter
    assert torch.isnan(result.state_posterior[is_delimiter]).all()
    for b in range(prompts.tokens.shape[0]):
        for t in range(prompts.tokens.shape[1]):
            if is_delimiter[b, t]:
                continue
            joint = enumerated_task_state_joint(mixture, prompts.tokens[b], t)
            posterior = joint / joint.sum()
            torch.testing.assert_close(result.state_posterior[b, t], posterior.sum(0), rtol=1e-10, atol=1e-13)
            task_posterior = posterior.sum(1)
            assert result.task_map_probability[b, t].item() == pytest.approx(task_posterior.max().item(), rel=1e-10)
            # The MAP task is a maximiser (ties between tasks are left to the implementation).
            assert task_posterior[result.task_map[b, t]].item() == pytest.approx(task_posterior.max().item(), rel=1e-10)


def test_decoders_do_not_depend_on_the_chunking():
    mixture = hmm.mixture_preset("tiny", seed=3)
    prompts = hmm.sample_prompts(mixture, 4, hmm.PROMPT_FORMATS["tiny"], seed=4)
    whole = hmm.bayes_predictive(mixture, prompts.tokens, decode=True)
    chunked = hmm.bayes_predictive(mixture, prompts.tokens, decode=True, chunk_bytes=1)
    torch.testing.assert_close(chunked.state_posterior, whole.state_posterior, rtol=1e-12, atol=1e-14, equal_nan=True)
    torch.testing.assert_close(chunked.task_map_probability, whole.task_map_probability, rtol=1e-12, atol=1e-14)
    assert torch.equal(chunked.task_map, whole.task_map)
