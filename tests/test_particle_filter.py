"""The SMC's filter (hmm/particle_filter.py) against the engine's (hmm.filtering), a second
implementation of the same recursion: distinct HMMs, one sequence each, with segment restarts."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hmm
from hmm import particle_filter

TOLERANCE = 1e-12
"""Both filters normalise at every step in float64; over at most 12 steps their rounding differs
by a few ulps per step, far below this."""


def random_particles(count: int, num_states: int, num_tokens: int, length: int, seed: int):
    model = hmm.random_hmm(num_states, num_tokens, batch=(count,), transition_concentration=0.5,
                           emission_concentration=0.5, initial="dirichlet", seed=seed)
    tokens = torch.randint(0, num_tokens, (count, length), generator=torch.Generator().manual_seed(seed))
    return model, tokens


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num_states=st.integers(1, 5), length=st.integers(1, 12),
       restarts=st.lists(st.booleans(), min_size=12, max_size=12))
def test_beliefs_and_normalizers_match_the_engine_segment_by_segment(seed, num_states, length, restarts):
    model, tokens = random_particles(6, num_states, 3, length, seed)
    segment_starts = np.array([True, *restarts[1:length]])
    likelihoods = particle_filter.emission_likelihoods(model.emission.numpy(), tokens.numpy())
    filtered, log_normalizers = particle_filter.forward_filter(model.transition.numpy(), model.initial.numpy(),
                                                               likelihoods, segment_starts)
    # Oracle: every segment is a fresh run from the start law, so the engine filters it alone.
    bounds = [*np.flatnonzero(segment_starts), length]
    for first, end in zip(bounds, bounds[1:]):
        reference = hmm.filter_beliefs(model, tokens[:, first:end])
        np.testing.assert_allclose(filtered[first:end], reference.filtered.numpy().transpose(1, 0, 2), rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(log_normalizers[first:end], reference.log_normalizers.numpy().T, rtol=0, atol=TOLERANCE)


def test_the_log_likelihood_is_the_engines_in_any_block_and_thread_layout(monkeypatch):
    model, tokens = random_particles(50, 7, 4, 30, seed=3)
    arrays = [value.numpy() for value in (model.transition, model.emission, model.initial, tokens)]
    expected = hmm.log_likelihood(model, tokens).numpy()
    whole = particle_filter.log_likelihood(*arrays)
    np.testing.assert_allclose(whole, expected, rtol=0, atol=1e-11)
    monkeypatch.setattr(particle_filter, "BLOCK_BYTES", 8 * 7 * 7 * 3)  # blocks of 3 HMMs, the last one of 2
    for threads in (1, 2):
        # Each HMM's arithmetic is the same in any block, so the results are identical, not close.
        assert np.array_equal(particle_filter.log_likelihood(*arrays, threads=threads), whole)


@pytest.mark.parametrize(("threads", "shape", "message"), [
    (0, (4, 5), r"threads: 0; expected an integer >= 1"),
    (1, (3, 5), r"tokens: shape \(3, 5\); expected \(4, J\), one sequence per HMM"),
])
def test_bad_input_is_refused(threads, shape, message):
    model, _ = random_particles(4, 2, 2, 5, seed=0)
    arrays = [value.numpy() for value in (model.transition, model.emission, model.initial)]
    with pytest.raises(ValueError, match=message):
        particle_filter.log_likelihood(*arrays, np.zeros(shape, dtype=np.int64), threads=threads)
