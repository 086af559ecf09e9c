"""In-context Markov chains (:mod:`empirical.studies.markov.incontext`) and ``hmmtf markov-incontext``.

Oracles: the Bayes predictor against two-dimensional quadrature of the posterior (K = 2, no use of
conjugacy) and against self-normalised importance sampling from the prior with its delta-method
standard error (K = 3); the sampler against each sequence's own kernel (transition frequencies
within binomial error); the unigram counter against a direct count.
"""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import integrate

import hmmtf
from empirical.training.checkpoint import load_checkpoint
from empirical.yardsticks.competence import per_prompt_loss
from empirical.yardsticks.evaluate import model_predictor
from empirical.studies.markov.incontext import (InContextConfig, bayes_predictive, held_out_chains, oracle_predictive,
                                        sample_chains, unigram_counter)
from ledger.claims import Verdict
from ledger.documents import Doc
from ledger.markov import induction_in_context

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "figures" / "markov" / "incontext" / "results.json"
FLOAT32_LOSS_BOUND = 1e-5
"""Relative, as for the shipped HMM models (tests/test_shipped_models.py): another machine's float32
kernels may order a logit's sums differently; averaged over 130,000 tokens the effect on a loss of
0.9 is far below 1e-5 of it."""

Z_TEST = 5.0
"""Standard errors a Monte-Carlo estimate may differ by: a false failure has probability ~6e-7 per
comparison, and every comparison is seeded, so the tests are deterministic."""


@pytest.mark.long_running  # a quadrature of the posterior per position: seconds of CPU
def test_the_bayes_predictor_is_the_posterior_mean_by_quadrature():
    """K = 2, P = [[1 - a, a], [b, 1 - b]] with a, b ~ Beta(alpha, alpha) (a Dirichlet(alpha) row):
    p(x_{t+1} = 1 | x_0..x_t) = E[P[x_t, 1] L] / E[L], L the likelihood of the prefix, integrated
    over (a, b) by adaptive quadrature (error ~1e-9)."""
    alpha, sequence = 1.5, [0, 0, 1, 0, 1, 1, 1, 0, 0]
    predicted = bayes_predictive(torch.tensor([sequence]), 2, alpha)[0]
    normaliser = math.exp(2 * math.lgamma(alpha) - math.lgamma(2 * alpha))

    def prior(x):
        return (x * (1 - x)) ** (alpha - 1) / normaliser

    for t in range(len(sequence)):
        prefix = sequence[:t + 1]

        def likelihood(a, b, prefix=prefix):
            kernel = ((1 - a, a), (b, 1 - b))
            return math.prod(kernel[i][j] for i, j in zip(prefix, prefix[1:])) * prior(a) * prior(b)

        evidence, _ = integrate.dblquad(likelihood, 0, 1, 0, 1, epsabs=1e-11)
        to_one, _ = integrate.dblquad(lambda a, b, last=prefix[-1]: likelihood(a, b) * (a if last == 0 else 1 - b),
                                      0, 1, 0, 1, epsabs=1e-11)
        assert predicted[t, 1].item() == pytest.approx(to_one / evidence, abs=1e-8)
        assert predicted[t].sum().item() == pytest.approx(1.0, abs=1e-12)


def test_the_bayes_predictor_agrees_with_importance_sampling_from_the_prior():
    """K = 3, alpha = 0.5: kernels drawn from the prior, weighted by the prefix's likelihood; the
    ratio estimate's standard error is sqrt(sum w^2 (f - r)^2) / sum w (delta method)."""
    alpha, sequence = 0.5, [2, 0, 0, 1, 2, 0, 2, 2]
    predicted = bayes_predictive(torch.tensor([sequence]), 3, alpha)[0].numpy()
    kernels = np.random.default_rng(7).dirichlet(np.full(3, alpha), size=(400_000, 3))
    for t in range(len(sequence)):
        weights = np.prod([kernels[:, i, j] for i, j in zip(sequence[:t + 1], sequence[1:t + 1])], axis=0) \
            if t else np.ones(len(kernels))
        following = kernels[:, sequence[t]]
        estimate = weights @ following / weights.sum()
        stderr = np.sqrt((weights[:, None] ** 2 * (following - estimate) ** 2).sum(0)) / weights.sum()
        assert np.all(np.abs(predicted[t] - estimate) <= Z_TEST * stderr), (t, predicted[t], estimate, stderr)


def test_the_unigram_counter_is_the_smoothed_count_of_the_tokens_so_far():
    alpha, sequence = 0.8, [1, 1, 0, 2, 1]
    predicted = unigram_counter(torch.tensor([sequence]), 3, alpha)[0]
    for t in range(len(sequence)):
        counts = np.bincount(sequence[:t + 1], minlength=3)
        np.testing.assert_allclose(predicted[t].numpy(), (counts + alpha) / (t + 1 + 3 * alpha), rtol=1e-12)


def test_the_oracle_reads_the_row_of_the_current_token():
    tokens, kernels = sample_chains(2, 5, 3, 1.0, seed=3)
    predicted = oracle_predictive(tokens, kernels)
    for b in range(2):
        for t in range(5):
            assert torch.equal(predicted[b, t], kernels[b, tokens[b, t]])


def test_each_sequence_follows_its_own_kernel_from_a_uniform_start():
    tokens, kernels = sample_chains(3, 30_000, 3, 1.0, seed=11)
    for sequence, kernel in zip(tokens.numpy(), kernels.numpy()):
        counts = np.zeros((3, 3))
        np.add.at(counts, (sequence[:-1], sequence[1:]), 1)
        visits = counts.sum(1, keepdims=True)
        stderr = np.sqrt(kernel * (1 - kernel) / np.maximum(visits, 1))
        seen = visits[:, 0] > 100  # a row visited too rarely has no usable frequency
        assert np.all(np.abs(counts / np.maximum(visits, 1) - kernel)[seen] <= Z_TEST * stderr[seen] + 1e-12)
    first, _ = sample_chains(60_000, 1, 3, 1.0, seed=12)
    frequencies = np.bincount(first[:, 0].numpy(), minlength=3) / 60_000
    assert np.all(np.abs(frequencies - 1 / 3) <= Z_TEST * math.sqrt(2 / 9 / 60_000))
    again, _ = sample_chains(3, 30_000, 3, 1.0, seed=11)
    assert torch.equal(tokens, again)


@pytest.mark.parametrize("field, value, message", [
    ("concentration", 0.0, "concentration: 0.0; expected a finite number > 0"),
    ("num_tokens", 1, "num_tokens: 1; expected an integer >= 2"),
    ("depths", (2, 2), "depths: [2, 2]; expected distinct numbers of layers"),
    ("depths", (), "depths: []; expected one or more integers >= 1"),
    ("top_heads", 4, "top_heads: 4; expected fewer than the 4 heads of the shallowest model"),
])
def test_a_bad_setting_is_named(field, value, message):
    with pytest.raises(ValueError) as refused:
        InContextConfig(**{"depths": (1, 2), field: value})
    assert str(refused.value).startswith(message)


def test_a_bad_option_is_one_line(capsys):
    assert hmmtf.main(["markov-incontext", "--concentration", "0"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--concentration: 0.0; expected a finite number > 0" in line


@pytest.mark.long_running
def test_the_command_trains_measures_resumes_and_is_judged(tmp_path, capsys):
    """Two tiny models end to end: results.json, the figure, a second call that only measures (the
    runs are finished), and the M7 judge on the result (an untrained model fails the rule)."""
    out, runs = tmp_path / "out", tmp_path / "runs"
    argv = ["markov-incontext", "--out", str(out), "--runs", str(runs), "--steps", "20", "--warmup-steps", "2",
            "--checkpoint-every", "10", "--eval-sequences", "48", "--sequence-length", "40", "--ablation-draws", "2",
            "--workers", "1"]
    assert hmmtf.main(argv) == 0
    document = json.loads((out / "results.json").read_text())
    assert (out / "incontext.png").stat().st_size > 0
    assert set(document["models"]) == {"1-layer", "2-layer"}
    for depth in (1, 2):
        measured = document["models"][f"{depth}-layer"]
        losses = measured["losses"]
        assert losses["oracle"] < losses["bayes"] < losses["unigram counter"]
        assert np.array(measured["scores"]["induction 1"]["score"]).shape == (depth, 4)
        assert measured["training_curve"]["step"][-1] == 20
    logged = (runs / "2-layer" / "metrics.jsonl").read_text()
    assert hmmtf.main(argv) == 0
    assert (runs / "2-layer" / "metrics.jsonl").read_text() == logged
    outcome = induction_in_context(Doc(str(out / "results.json"), document))
    assert outcome.verdict is Verdict.NOT_REPRODUCED
    assert outcome.number.startswith("2-layer: gap closed")


@pytest.mark.long_running
def test_the_shipped_models_reproduce_their_recorded_held_out_loss():
    """The committed runs (models/markov-incontext) are the models the committed study measured."""
    document = json.loads(STUDY.read_text())
    config = InContextConfig.from_dict(document["config"])
    tokens, _ = held_out_chains(config)
    rows = torch.ones(tokens.shape[1], dtype=torch.bool)
    for depth in config.depths:
        saved = load_checkpoint(ROOT / document["runs"] / f"{depth}-layer" / "checkpoint")
        assert saved.config["step"] == config.steps
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            probabilities = model_predictor(saved.model, config.num_tokens)(tokens)
        finally:
            torch.set_num_threads(threads)
        loss = per_prompt_loss(probabilities, tokens, config.num_tokens, rows).mean().item()
        assert loss == pytest.approx(document["models"][f"{depth}-layer"]["losses"]["model"], rel=FLOAT32_LOSS_BOUND,
                                     abs=0)
