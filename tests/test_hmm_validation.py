"""Every bad input named in the API gets a ValueError naming the argument, value and expectation."""
import re

import numpy as np
import pytest
import torch

import hmm
from hmm.memory import memory_predictor, one_hot_history

GOOD_INITIAL = [0.5, 0.5]
GOOD_TRANSITION = [[0.9, 0.1], [0.2, 0.8]]
GOOD_EMISSION = [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]


@pytest.mark.parametrize(
    ("initial", "transition", "emission", "pattern"),
    [
        (GOOD_INITIAL, [[0.9, 0.2], [0.2, 0.8]], GOOD_EMISSION, r"transition: row \(0,\) sums to 1\.1.*expected rows summing to 1 \(tolerance 1e-06\)"),
        (GOOD_INITIAL, GOOD_TRANSITION, [[1.2, -0.2, 0.0], [0.1, 0.1, 0.8]], r"emission: entry \(0, 1\) is -0\.2 < 0; expected probabilities >= 0"),
        ([float("nan"), 0.5], GOOD_TRANSITION, GOOD_EMISSION, r"initial: entry \(0,\) is nan; expected finite"),
        ([0.3, 0.3, 0.4], GOOD_TRANSITION, GOOD_EMISSION, r"state counts 3, 2, 2 differ"),
        (GOOD_INITIAL, [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], GOOD_EMISSION, r"transition: shape \(2, 3\); expected \(\.\.\., S, S\)"),
        (GOOD_INITIAL, np.stack([GOOD_TRANSITION] * 3), np.stack([GOOD_EMISSION] * 2), r"batch shapes .* do not broadcast"),
    ],
)
def test_bad_parameters_are_refused(initial, transition, emission, pattern):
    with pytest.raises(ValueError, match=pattern):
        hmm.HMM(initial, transition, emission)


def test_row_sum_tolerance_accepts_rounding_but_not_a_real_error():
    slightly_off = [[0.9 + 1e-9, 0.1], [0.2, 0.8]]
    hmm.HMM(GOOD_INITIAL, slightly_off, GOOD_EMISSION)
    with pytest.raises(ValueError, match="sums to"):
        hmm.HMM(GOOD_INITIAL, [[0.9 + 1e-4, 0.1], [0.2, 0.8]], GOOD_EMISSION)


@pytest.fixture
def model():
    return hmm.HMM(GOOD_INITIAL, GOOD_TRANSITION, GOOD_EMISSION)


@pytest.mark.parametrize(
    ("obs", "pattern"),
    [
        ([0, 3, 1], r"obs: token 3 at \(1,\) is out of range; expected 0\.\.2"),
        ([0, -1], r"obs: token -1 at \(1,\) is out of range"),
        ([], r"obs: shape \(0,\); expected \(\.\.\., T\) with T >= 1"),
        ([0.0, 1.0], r"obs: dtype torch\.float64; expected integer tokens"),
    ],
)
@pytest.mark.parametrize("function", [hmm.next_token_probs, hmm.log_likelihood, hmm.filter_beliefs])
def test_bad_sequences_are_refused(model, function, obs, pattern):
    with pytest.raises(ValueError, match=pattern):
        function(model, np.asarray(obs))


def test_impossible_sequence_is_refused_not_nan():
    deterministic = hmm.HMM([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match=r"obs: the token at batch/position \(1,\) has probability 0"):
        hmm.next_token_probs(deterministic, torch.tensor([0, 1]))


def test_shape_mismatch_between_model_and_sequence_batches(model):
    batched = hmm.HMM(torch.tensor([GOOD_INITIAL] * 3), torch.tensor([GOOD_TRANSITION] * 3), torch.tensor([GOOD_EMISSION] * 3))
    with pytest.raises(ValueError, match=re.escape("obs: batch shape (2,) does not broadcast with the model batch shape (3,)")):
        hmm.log_likelihood(batched, torch.zeros(2, 4, dtype=torch.long))


def test_L_longer_than_the_sequence_is_refused(model):
    with pytest.raises(ValueError, match=r"L: 5 is longer than the sequence \(length 3\)"):
        memory_predictor(model, torch.tensor([0, 1, 2]), 5)
    with pytest.raises(ValueError, match=r"L: 0; expected an integer >= 1"):
        one_hot_history(torch.tensor([0, 1, 2]), 0, 3)


def test_bad_generator_and_prompt_arguments():
    with pytest.raises(ValueError, match=r"concentration: -1.0; expected a finite number > 0"):
        hmm.dirichlet_rows((3, 3), -1.0)
    with pytest.raises(ValueError, match=r"rank: 5; expected 1 <= rank <= num_states = 4"):
        hmm.low_rank_transition((), 4, 5)
    with pytest.raises(ValueError, match=r"demo_length: 0; expected an integer >= 1"):
        hmm.PromptFormat(2, 0, 3)
    with pytest.raises(ValueError, match=r"name: 'huge'; expected one of"):
        hmm.mixture_preset("huge")
    with pytest.raises(ValueError, match=r"weights: row \(\) sums to 2"):
        hmm.Mixture(hmm.random_hmm(2, 2, batch=(2,), seed=0), torch.tensor([1.0, 1.0], dtype=torch.float64))


def test_random_hmm_uses_a_given_transition_and_refuses_a_rank_beside_it():
    factors = hmm.low_rank_transition((), 5, 2, seed=0)
    model = hmm.random_hmm(5, 3, transition=factors.transition, seed=1)
    assert torch.equal(model.transition, factors.transition)
    with pytest.raises(ValueError, match=r"rank: 2; expected None when a transition is given"):
        hmm.random_hmm(5, 3, transition=factors.transition, rank=2)


def test_views_of_a_valid_hmm_are_not_validated_again(monkeypatch):
    model = hmm.random_hmm(3, 2, batch=(4,), seed=0)
    calls = []
    monkeypatch.setattr(hmm.model, "check_stochastic", lambda *args, **kwargs: calls.append(args[1]))
    model.expand()
    picked = model[1:3]
    assert calls == [] and picked.batch_shape == (2,)
    hmm.HMM(picked.initial, picked.transition, picked.emission)  # a new HMM from raw tensors is checked
    assert calls == ["initial", "transition", "emission"]
