"""The bidirectional bounds in torch (hmm/bidirectional_torch.py): the validity test of the numpy
bounds (tests/test_prior_predictive.py) run on them, their agreement with the numpy bounds
(hmm/bidirectional.py) on the presets' 16-state prior, and their refusals of bad input."""
import dataclasses

import pytest
import torch
from test_prior_predictive import FORMAT as TWO_STATE_FORMAT
from test_prior_predictive import PRIOR as TWO_STATE_PRIOR
from test_prior_predictive import assert_between_the_bounds, prompts_from_the_prior
from test_prior_predictive_torch import FORMAT, PRIOR, STANDARD_ERRORS, paired_statistic

import hmm
from hmm import bidirectional, bidirectional_torch
from hmm.prior_predictive import SMCSettings, prior_predictive

PROMPTS = 4
REPLICATES = 6
CHAINS = 8


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_smc_evidence_lies_between_the_torch_bounds_on_average_over_simulated_prompts(dtype):
    """As the numpy bounds' test: 96 prompts of two-state HMMs drawn from the prior, 64 chains each
    way, the numpy SMC's ``log Z_hat`` at 1024 particles between the bounds within 3 standard
    errors of the paired differences, in either dtype."""
    tokens, transition, emission = prompts_from_the_prior(96)
    bounds = bidirectional_torch.evidence_bounds(tokens, TWO_STATE_FORMAT, TWO_STATE_PRIOR, transition, emission,
                                                 chains=64, seed=0, dtype=dtype)
    assert bounds.lower.dtype == bounds.upper.dtype == dtype
    smc = prior_predictive(tokens, TWO_STATE_FORMAT, TWO_STATE_PRIOR, SMCSettings(particles=1024)).log_evidence
    assert_between_the_bounds(smc, bidirectional.EvidenceBounds(*(bound.double() for bound in bounds)))


@pytest.mark.long_running
def test_torch_and_numpy_bounds_agree_within_their_monte_carlo_errors():
    """Both implement one estimator in float64 and differ only in their random streams, so under
    the hypothesis that both are right each bound of a prompt has the same distribution in both.
    B = 4 prompts of fresh HMMs of the presets' 16-state prior (the paper-mini format, 64 HMM
    tokens), each repeated R = 6 times in one call of each implementation with C = 8 chains: the
    copies of a prompt have chains of their own, so they are R independent replicates of its
    bounds. Per prompt b, ``d_b = mean_r x^torch_r(b) - mean_r x^numpy_r(b)`` for x the per-token
    ``-lower / J`` and ``-upper / J``; the rule, its standard error (the replicates' spread, so the
    chains' spread as it reaches a bound of C chains) and its error rate are those of the SMC's
    agreement test (tests/test_prior_predictive_torch.py): ``|mean_b d_b| <= 4 s.e.``, a t variable
    with up to 2 B (R - 1) = 40 degrees of freedom, failing by chance with probability about 3e-4
    per bound. Power: the s.e. is about 0.02 nats per token (the bounds lie 0.35 apart), so a bias
    of 0.08 nats per token is found half of the time; torch chains that never move (importance
    sampling from the prior forward, the generating HMM held fixed in reverse: both still valid
    bounds, which the test above cannot tell) give z = 6.9 and -15.8."""
    spec = dataclasses.replace(hmm.MIXTURE_SPECS["cpu-small"], num_tasks=PROMPTS)
    mixture = spec.build(seed=7)
    prompts = hmm.sample_prompts(mixture, PROMPTS, FORMAT, seed=8)
    own = mixture.hmm[prompts.task_ids]
    tokens_per_prompt = int((~FORMAT.is_delimiter).sum())
    replicated = (prompts.tokens.repeat(REPLICATES, 1), FORMAT, PRIOR, own.transition.repeat(REPLICATES, 1, 1),
                  own.emission.repeat(REPLICATES, 1, 1), CHAINS)
    runs = {name: implementation(*replicated, seed=1) for name, implementation in
            (("numpy", bidirectional.evidence_bounds), ("torch", bidirectional_torch.evidence_bounds))}
    for bound in ("lower", "upper"):
        torch_values, numpy_values = (-getattr(runs[name], bound).reshape(REPLICATES, PROMPTS) / tokens_per_prompt
                                      for name in ("torch", "numpy"))
        z = paired_statistic(torch_values, numpy_values)
        assert abs(z) <= STANDARD_ERRORS, (bound, z, torch_values.mean(), numpy_values.mean())
    assert bool((runs["torch"].upper > runs["torch"].lower).all())


def test_the_same_seed_gives_the_same_bits_and_another_seed_others():
    tokens, transition, emission = prompts_from_the_prior(3)
    first, again, other = (bidirectional_torch.evidence_bounds(tokens, TWO_STATE_FORMAT, TWO_STATE_PRIOR, transition,
                                                               emission, chains=4, seed=seed, dtype=torch.float32)
                           for seed in (2, 2, 3))
    assert torch.equal(first.lower, again.lower) and torch.equal(first.upper, again.upper)
    assert not torch.equal(first.lower, other.lower)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"device": "gpu"}, r"device: 'gpu'; expected a torch device such as 'cpu' or 'cuda'"),
    ({"device": "meta"}, r"device: 'meta'; expected 'cpu' or a CUDA device"),
    ({"dtype": torch.float16}, r"dtype: torch.float16; expected torch.float32 or torch.float64"),
    ({"dtype": "float64"}, r"dtype: 'float64'; expected torch.float32 or torch.float64"),
    ({"chains": 0}, r"chains: 0; expected an integer >= 1"),
    ({"chains": True}, r"chains: True; expected an integer >= 1"),
    ({"chains": 2.0}, r"chains: 2.0; expected an integer >= 1"),
    ({"transition": torch.full((1, 3, 3), 1 / 3)},
     r"transition, emission: shapes \(1, 3, 3\), \(1, 2, 2\); expected \(1, 2, 2\) and \(1, 2, 2\)"),
    ({"transition": torch.eye(2, dtype=torch.float64)[None]},
     r"transition: a generating chain has no unique stationary law; expected irreducible chains"),
])
def test_bad_bounds_input_is_refused(keywords, message):
    tokens, transition, emission = prompts_from_the_prior(1)
    arguments = {"transition": transition, "emission": emission, "chains": 4, **keywords}
    with pytest.raises(ValueError, match=message):
        bidirectional_torch.evidence_bounds(tokens, TWO_STATE_FORMAT, TWO_STATE_PRIOR, **arguments)
