"""benchmarks/ceiling_bounds.py: the evidence-weighted average of collapsed-SMC replicates against
the exact predictive of enumerated paths, its weights against a direct product, the averages of
groups of replicates, and the resumable, sharded replicates of a run."""
import itertools
import json
import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from test_collapsed_smc import GIBBS_FORMAT, GIBBS_PRIOR, labelled_log_joint

from benchmarks import ceiling_bounds
from benchmarks.ceiling_bounds import evidence_weighted, target_probabilities
from empirical.training.checkpoint import load_checkpoint
from empirical.training.presets import get_preset
from empirical.yardsticks.competence import per_prompt_loss, scope_rows
from empirical.yardsticks.evaluate import model_predictor
from empirical.yardsticks.regime import fresh_prompts
from hmm.collapsed_smc import CollapsedSMCSettings, _layout, _segments, collapsed_prior_predictive
from hmm.prior_predictive import format_positions

ISLAND_PROMPT = [0, 1, 2, 1, 1]
"""``GIBBS_FORMAT``'s prompt: the demonstration 0 1, the delimiter, the test tokens 1 1."""
ISLAND_BURN_IN = 2
ISLANDS = 100_000
GROUPS = 100


def exact_last_prediction() -> float:
    """``P(x = 1 | 0 1 | 1)`` under the augmented model of ``GIBBS_PRIOR`` (K = 2): the evidence of
    the prompt ending in 1 over the evidences of both endings, each a sum over all 3^8 labelled
    paths of their closed-form joint (:func:`test_collapsed_smc.labelled_log_joint`)."""
    _, starts = (values.numpy() for values in format_positions(GIBBS_FORMAT))
    layout = _layout(_segments(starts), ISLAND_BURN_IN)
    every = np.array(list(itertools.product(range(GIBBS_PRIOR.num_states), repeat=len(layout.starts))))
    evidences = [logsumexp(labelled_log_joint(every, layout.starts, layout.token_index, np.array([0, 1, 1, last])))
                 for last in (0, 1)]
    return math.exp(evidences[1] - logsumexp(evidences))


def test_the_evidence_weighted_islands_converge_where_their_plain_average_stays_biased():
    """100,000 replicates of two particles each (one batch): their evidence-weighted prediction of
    the last token lies within 5 standard errors of the enumerated exact one (the standard error
    from 100 groups of 1,000), while the plain average keeps the bias of two particles, more than
    5 of its standard errors away (measured: weighted -0.1 to 1.2 standard errors off over
    400,000 replicates of one and of two particles, plain 36 to 45 off)."""
    exact = exact_last_prediction()
    prompts = torch.tensor([ISLAND_PROMPT] * ISLANDS)
    settings = CollapsedSMCSettings(particles=2, burn_in_steps=ISLAND_BURN_IN, batch_prompts=ISLANDS)
    prediction = collapsed_prior_predictive(prompts, GIBBS_FORMAT, GIBBS_PRIOR, settings).next_token
    targets = target_probabilities(prediction, prompts, GIBBS_PRIOR.num_tokens)[:, None, :]  # (R, 1, N)
    last = len(ISLAND_PROMPT) - 2  # the row that predicts the last token
    weighted = evidence_weighted(targets)[0, last]
    groups = [evidence_weighted(group)[0, last] for group in np.split(targets, GROUPS)]
    weighted_stderr = np.std(groups, ddof=1) / math.sqrt(GROUPS)
    plain = targets[:, 0, last]
    plain_stderr = plain.std(ddof=1) / math.sqrt(ISLANDS)
    assert abs(weighted - exact) < 5 * weighted_stderr
    assert abs(plain.mean() - exact) > 5 * plain_stderr
    assert weighted_stderr < 5e-4  # the comparison is sharp: the plain average's bias is about 0.004


def test_the_weights_are_each_replicates_product_of_its_earlier_predictions():
    """A second computation of the weighted mean, by products rather than sums of logs."""
    rng = np.random.default_rng(0)
    targets = rng.uniform(0.05, 1.0, size=(3, 2, 6))
    direct = np.empty((2, 6))
    for b, t in itertools.product(range(2), range(6)):
        weights = np.prod(targets[:, b, :t], axis=-1)
        direct[b, t] = (weights * targets[:, b, t]).sum() / weights.sum()
    assert np.allclose(evidence_weighted(targets), direct, rtol=1e-12, atol=0)


def run_bounds(tmp_path, *extra):
    return ceiling_bounds.main(["--preset", "tiny", "--prompts", "4", "--fresh-tasks", "8", "--particles", "8",
                                "--burn-in-steps", "2", "--work", str(tmp_path / "work"), "--out",
                                str(tmp_path / "bounds.json"), *extra])


def test_shards_resume_into_one_result_and_other_settings_are_refused(tmp_path, capsys):
    """Two shards of four replicates: the first computes 0 and 2 and writes no result yet, the
    second the others and the result, whose average of 4 is the mean over groups of the stored
    replicates; a run with other particles in the same folder is refused in one line."""
    assert run_bounds(tmp_path, "--replicates", "4", "--shard", "0/2") == 0
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == ["replicate-0.npz", "replicate-2.npz"]
    assert not (tmp_path / "bounds.json").exists()
    assert "replicates [1, 3] are not in" in capsys.readouterr().out
    assert run_bounds(tmp_path, "--replicates", "4", "--shard", "1/2") == 0
    result = json.loads((tmp_path / "bounds.json").read_text())
    assert (tmp_path / "bounds.png").stat().st_size > 0
    test_sequence = result["scopes"]["test_sequence"]
    assert set(test_sequence["loss_of_average_of"]) == {"1", "2", "4"}
    assert test_sequence["loss_of_average_of"]["4"] == pytest.approx(test_sequence["bound"]["mean"], rel=1e-12)
    assert result["settings"]["particles"] == 8 and len(result["cpu_seconds"]) == 4
    with pytest.raises(SystemExit):
        run_bounds(tmp_path, "--replicates", "4", "--particles", "16")
    assert "made for other prompts or settings" in capsys.readouterr().err


@pytest.mark.parametrize("shard", ["2/2", "a/b", "1"])
def test_a_bad_shard_is_refused(tmp_path, capsys, shard):
    with pytest.raises(SystemExit):
        run_bounds(tmp_path, "--replicates", "2", "--shard", shard)
    assert f"--shard: {shard!r}; expected I/N" in capsys.readouterr().err


def test_a_network_is_scored_on_the_same_prompts_against_the_bound(tmp_path, tiny_run):
    """The network's loss, by the competence result's per-prompt loss on the same fresh prompts (a
    second computation), its difference with the bound and its share of the unigram-to-bound window."""
    assert run_bounds(tmp_path, "--replicates", "2", "--models", str(tiny_run)) == 0
    result = json.loads((tmp_path / "bounds.json").read_text())
    preset = get_preset("tiny")
    _, prompts = fresh_prompts(preset, 4, 8)
    model = load_checkpoint(tiny_run / "checkpoint").model
    probabilities = model_predictor(model, preset.mixture_spec.num_tokens)(prompts.tokens)
    for scope, rows in scope_rows(preset.prompt_format).items():
        scored = result["scopes"][scope]
        network = scored["networks"][str(tiny_run)]
        expected = per_prompt_loss(probabilities, prompts.tokens, preset.mixture_spec.num_tokens, rows).mean().item()
        assert network["loss"]["mean"] == pytest.approx(expected, rel=1e-6)
        assert network["model_minus_bound"]["mean"] == pytest.approx(expected - scored["bound"]["mean"], abs=1e-6)
        unigram = scored["baselines"]["ngram 1"]["mean"]
        assert network["share_of_window"] == pytest.approx((unigram - expected) / (unigram - scored["bound"]["mean"]),
                                                           rel=1e-5)


def test_a_network_of_another_family_is_refused_before_any_replicate(tmp_path, capsys, tiny_run):
    with pytest.raises(SystemExit):
        run_bounds(tmp_path, "--replicates", "2", "--mixture", "cpu-small", "--models", str(tiny_run))
    error = capsys.readouterr().err
    assert f"--models: {str(tiny_run)!r} was trained on 'tiny'; expected a network of 'cpu-small'" in error
    assert not (tmp_path / "work").exists()
