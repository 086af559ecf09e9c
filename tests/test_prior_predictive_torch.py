"""The SMC in torch (hmm/prior_predictive_torch.py) against the SMC in numpy (hmm/prior_predictive.py)
on the presets' 16-state prior, and its refusals of bad input. The brute-force and bidirectional
tests of both are in tests/test_prior_predictive.py."""
import dataclasses
import pytest
import torch

import hmm
from empirical.yardsticks.competence import CACHE_VARIABLE, ceiling_estimates
from hmm import prior_predictive_torch
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, prior_predictive

SIXTEEN_STATE_PRESETS = sorted(name for name, spec in hmm.MIXTURE_SPECS.items() if spec.num_states == 16)
PRIOR = DirichletHMMPrior.from_spec(hmm.MIXTURE_SPECS["cpu-small"])
FORMAT = hmm.PROMPT_FORMATS["paper-mini"]
PROMPTS = 8
REPLICATES = 3
SETTINGS = SMCSettings(particles=32, moves=2)
STANDARD_ERRORS = 4.0


def per_prompt_losses(probabilities: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(B,)``: each prompt's mean ``-log q(o_{t+1})`` over the rows whose target is an HMM token."""
    targets = tokens[:, 1:]
    scored = targets != PRIOR.num_tokens
    losses = -probabilities[:, :-1].gather(-1, targets.clamp_max(PRIOR.num_tokens - 1)[..., None]).squeeze(-1).log()
    return (losses * scored).sum(-1) / scored.sum(-1)


def paired_statistic(torch_values: torch.Tensor, numpy_values: torch.Tensor) -> float:
    """``mean_b d_b / s.e.`` for ``(R, B)`` replicates of a per-prompt statistic from each
    implementation: ``d_b = mean_r x^torch_r(b) - mean_r x^numpy_r(b)`` and
    ``s.e.^2 = sum_b (Var_r x^torch(b) + Var_r x^numpy(b)) / R / B^2``."""
    differences = torch_values.mean(0) - numpy_values.mean(0)
    variance = (torch_values.var(0) + numpy_values.var(0)).sum() / torch_values.shape[0] / differences.numel() ** 2
    return (differences.mean() / variance.sqrt()).item()


def test_every_sixteen_state_preset_draws_from_the_prior_under_test():
    assert len(SIXTEEN_STATE_PRESETS) >= 5
    for name in SIXTEEN_STATE_PRESETS:
        assert DirichletHMMPrior.from_spec(hmm.MIXTURE_SPECS[name]) == PRIOR, name


@pytest.mark.long_running
def test_torch_and_numpy_give_the_same_estimates_within_their_monte_carlo_errors():
    """Both implement one algorithm in float64 and differ only in their random streams, so under
    the hypothesis that both are right every statistic of a prompt has the same distribution in
    both. Per prompt b (a fresh HMM of the presets' 16-state prior, the paper-mini format), R = 3
    replicates of each (seeds 0..2) give ``d_b = mean_r x^torch_r(b) - mean_r x^numpy_r(b)``,
    paired per prompt so that the spread between prompts cancels; replicates are independent, so
    ``Var(d_b) = (Var x^torch(b) + Var x^numpy(b)) / R``, estimated by the replicates' sample
    variances, and prompts are independent, so ``Var(mean_b d_b) = sum_b Var(d_b) / B^2``.

    Rule: ``|mean_b d_b| <= 4 s.e.``, for x the mean loss over the prompt's scored rows and x the
    per-token ``-log Z_hat``. The statistic is close to a t variable with up to 2 B (R - 1) = 32
    degrees of freedom (fewer, by Satterthwaite, where prompts' variances differ); with 32 a right
    pair fails by chance with probability 4e-4 per statistic. Power: the s.e. is about 0.0054 nats
    (32 particles), so a bias of 0.02 nats is found half of the time; a torch move that accepts
    every transition proposal (a bias of 0.006 nats here) passes this test and fails the
    brute-force one of tests/test_prior_predictive.py, the sharp test of the moves."""
    spec = dataclasses.replace(hmm.MIXTURE_SPECS["cpu-small"], num_tasks=PROMPTS)
    mixture = spec.build(seed=7)
    prompts = hmm.sample_prompts(mixture, PROMPTS, FORMAT, seed=8)
    tokens = prompts.tokens
    tokens_per_prompt = int((~FORMAT.is_delimiter).sum())
    runs = {name: [implementation(tokens, FORMAT, PRIOR, dataclasses.replace(SETTINGS, seed=seed))
                   for seed in range(REPLICATES)]
            for name, implementation in (("numpy", prior_predictive), ("torch", prior_predictive_torch.prior_predictive))}
    for statistic in (lambda run: per_prompt_losses(run.next_token, tokens),
                      lambda run: -run.log_evidence / tokens_per_prompt):
        torch_values, numpy_values = (torch.stack([statistic(run) for run in runs[name]]) for name in ("torch", "numpy"))
        z = paired_statistic(torch_values, numpy_values)
        assert abs(z) <= STANDARD_ERRORS, (z, torch_values.mean(), numpy_values.mean())
    for run in runs["torch"]:
        assert run.next_token.dtype == torch.float64 and torch.all((run.next_token.nansum(-1) - 1).abs()[:, :-1] < 1e-12)


def test_the_paired_statistic_finds_a_shift_of_a_few_standard_errors():
    """The rule's arithmetic on made-up replicates: a constant shift of 0.1 against a spread of
    0.01 per replicate is far beyond 4 s.e.; none is within."""
    generator = torch.Generator().manual_seed(0)
    numpy_values = torch.randn((REPLICATES, PROMPTS), generator=generator, dtype=torch.float64) * 0.01
    torch_values = torch.randn((REPLICATES, PROMPTS), generator=generator, dtype=torch.float64) * 0.01
    assert abs(paired_statistic(torch_values, numpy_values)) <= STANDARD_ERRORS
    assert paired_statistic(torch_values + 0.1, numpy_values) > STANDARD_ERRORS


def test_the_same_seed_gives_the_same_bits_in_float32_too():
    tokens = hmm.sample_prompts(hmm.MIXTURE_SPECS["cpu-small"].build(seed=1), 2, FORMAT, seed=2).tokens
    settings = SMCSettings(particles=8, moves=1, seed=5)
    first, again = (prior_predictive_torch.prior_predictive(tokens, FORMAT, PRIOR, settings, dtype=torch.float32)
                    for _ in range(2))
    assert first.next_token.dtype == torch.float32 and torch.equal(first.next_token, again.next_token)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"device": "gpu"}, r"device: 'gpu'; expected a torch device such as 'cpu' or 'cuda'"),
    ({"device": "meta"}, r"device: 'meta'; expected 'cpu' or a CUDA device"),
    ({"dtype": torch.float16}, r"dtype: torch.float16; expected torch.float32 or torch.float64"),
    ({"dtype": "float64"}, r"dtype: 'float64'; expected torch.float32 or torch.float64"),
])
def test_a_bad_device_or_dtype_is_refused(keywords, message):
    tokens = torch.full((1, FORMAT.length), 0)
    tokens[:, FORMAT.is_delimiter] = PRIOR.num_tokens
    with pytest.raises(ValueError, match=message):
        prior_predictive_torch.prior_predictive(tokens, FORMAT, PRIOR, SMCSettings(particles=4), **keywords)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal is for machines without")
def test_cuda_without_a_cuda_device_is_refused():
    with pytest.raises(ValueError, match=r"device: 'cuda'; expected an available device \(torch sees no CUDA device"):
        prior_predictive_torch.check_device("cuda")


@pytest.mark.parametrize(("tokens", "message"), [
    (torch.zeros((0, FORMAT.length), dtype=torch.int64), r"tokens: shape \(0, 67\); expected at least one prompt"),
    (torch.zeros((1, 5), dtype=torch.int64), r"tokens: shape \(1, 5\); expected \(B, 67\) prompts of the format"),
    (torch.full((1, FORMAT.length), 9), r"tokens: token 9 at \(0, 0\) is out of range; expected 0..8"),
])
def test_prompts_of_another_size_or_alphabet_are_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        prior_predictive_torch.prior_predictive(tokens, FORMAT, PRIOR, SMCSettings(particles=4))


def test_the_ceiling_chooses_its_smc_and_caches_each_under_its_own_key(tmp_path, monkeypatch):
    spec = hmm.MixtureSpec(num_tasks=4, num_states=2, num_tokens=2, transition_concentration=0.5,
                           emission_concentration=0.5)
    prompt_format = hmm.PromptFormat(num_demos=1, demo_length=3, test_length=2)
    tokens = hmm.sample_prompts(spec.build(seed=0), 3, prompt_format, seed=1).tokens
    settings = SMCSettings(particles=16, moves=1)
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    by_numpy = ceiling_estimates(tokens, prompt_format, spec, settings)
    by_torch, again = (ceiling_estimates(tokens, prompt_format, spec, settings, backend="torch") for _ in range(2))
    assert (by_torch.cached, again.cached, by_torch.backend) == (False, True, "torch cpu float64")
    assert len(list(tmp_path.glob("*.npz"))) == 2
    direct = prior_predictive_torch.prior_predictive(tokens, prompt_format, DirichletHMMPrior.from_spec(spec), settings)
    assert torch.equal(by_torch.replicates[0], direct.next_token) and torch.equal(again.replicates[0], direct.next_token)
    assert not torch.equal(by_torch.replicates[0], by_numpy.replicates[0])
    assert "backend" not in by_numpy.record() and by_torch.record()["backend"] == "torch cpu float64"


@pytest.mark.parametrize(("keywords", "message"), [
    ({"backend": "jax"}, r"backend: 'jax'; expected one of \('numpy', 'torch', 'collapsed'\)"),
    ({"device": "cuda"}, r"device, dtype: 'cuda', torch.float64; expected 'cpu' and torch.float64 for the numpy backend"),
    ({"backend": "torch", "dtype": torch.int64}, r"dtype: torch.int64; expected torch.float32 or torch.float64"),
])
def test_the_ceiling_refuses_an_unknown_backend_or_a_setting_it_cannot_honour(keywords, message):
    spec = hmm.MixtureSpec(num_tasks=1, num_states=2, num_tokens=2)
    prompt_format = hmm.PromptFormat(num_demos=1, demo_length=3, test_length=2)
    tokens = hmm.sample_prompts(spec.build(seed=0), 1, prompt_format, seed=1).tokens
    with pytest.raises(ValueError, match=message):
        ceiling_estimates(tokens, prompt_format, spec, SMCSettings(particles=4), **keywords)
