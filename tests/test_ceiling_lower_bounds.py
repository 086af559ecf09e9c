"""benchmarks/ceiling_lower_bounds.py: its scopes' lower bounds read the reverse chain's weights of
exactly the tokens the competence result's scopes score, and its prompts resume per setting."""
import numpy as np
import torch

from benchmarks import ceiling_lower_bounds
from benchmarks.ceiling_bounds import scope_losses, target_probabilities
from empirical.training.presets import get_preset
from empirical.yardsticks.competence import scope_rows
from empirical.yardsticks.ngram import scored_rows
from empirical.yardsticks.regime import fresh_prompts, oracle_predictor
from hmm.particle_filter import emission_likelihoods, forward_filter
from hmm.prior_predictive import format_positions


def test_a_chain_held_at_the_generating_hmm_bounds_each_scope_by_the_oracles_loss():
    """One chain whose weights are ``-log P(o_j | o_<j, theta*)`` (a reverse chain that never
    leaves the generating HMM, here from :mod:`hmm.particle_filter`'s filter): its bound of each
    scope is the oracle's mean loss over that scope's rows, as the competence result scores it
    (:func:`empirical.yardsticks.regime.oracle_predictor`, another implementation), to float64's rounding. An
    index off by one token in either scope would differ by a token's loss (about 1 nat)."""
    preset = get_preset("tiny")
    mixture, prompts = fresh_prompts(preset, 4, 16)
    positions, starts = (values.numpy() for values in format_positions(preset.prompt_format))
    own = mixture.hmm[prompts.task_ids]
    observed = prompts.tokens[:, positions].numpy()
    likelihoods = emission_likelihoods(own.emission.double().numpy(), observed)
    _, log_normalizers = forward_filter(own.transition.double().numpy(), own.initial.double().numpy(), likelihoods,
                                        starts, keep_beliefs=False)
    p = mixture.num_tokens
    oracle = target_probabilities(oracle_predictor(mixture, prompts)(prompts.tokens), prompts.tokens, p)
    scored, _ = scored_rows(prompts.tokens, p)
    for b in range(len(observed)):
        bounds = ceiling_lower_bounds.lower_bounds(-log_normalizers[:, b][None, :], starts)
        for scope, rows in scope_rows(preset.prompt_format).items():
            expected = scope_losses(oracle[b: b + 1], rows, scored[b: b + 1])[0]
            assert abs(bounds[scope] - expected) < 1e-9, (scope, bounds[scope], expected)


def test_prompts_resume_per_setting_and_gather_reads_every_setting(tmp_path, capsys):
    """Two shards of two prompts at the tiny preset fill one setting folder; a second setting
    beside it; gather finds both, each with its own prompts and CPU seconds, and pairs the second
    with the base setting on the prompts both have."""
    arguments = ["--preset", "tiny", "--prompts", "8", "--fresh-tasks", "16", "--count", "4", "--work", str(tmp_path)]
    for shard in ("0/2", "1/2"):
        assert ceiling_lower_bounds.main([*arguments, "--chains", "1", "--shard", shard]) == 0
    assert ceiling_lower_bounds.main([*arguments, "--count", "2", "--chains", "2", "--sweeps", "2"]) == 0
    assert sorted(path.name for path in (tmp_path / "c1-s1-k1").iterdir()) == [f"prompt-{i}.npz" for i in range(4)]
    preset = get_preset("tiny")
    _, prompts = fresh_prompts(preset, 8, 16)
    _, starts = format_positions(preset.prompt_format)
    settings = ceiling_lower_bounds.gather(tmp_path, prompts.tokens, prompts.task_ids, starts.numpy(),
                                           ceiling_lower_bounds.prompts_digest(prompts.tokens))
    assert {name: setting["prompts"] for name, setting in settings.items()} == {"c1-s1-k1": [0, 1, 2, 3],
                                                                                 "c2-s2-k1": [0, 1]}
    with np.load(tmp_path / "c2-s2-k1" / "prompt-0.npz") as stored:
        assert stored["log_weights"].shape == (2, int((~preset.prompt_format.is_delimiter).sum()))
        assert np.all(stored["log_weights"][:, 0] == 0) and torch.isfinite(torch.from_numpy(stored["log_weights"])).all()
