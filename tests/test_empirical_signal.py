"""The in-context signal of data families (empirical/yardsticks/signal.py, hmm/families.py): the observable
family's registration and assumptions, the measurement on a small family, the committed result's
ordering, and refused input."""
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

import hmm
import hmmtf
from empirical.yardsticks.signal import CANDIDATES, emission_gamma, family_signal
from hmm.observability import observability_exact
from hmm.prior_predictive import SMCSettings

ROOT = Path(__file__).resolve().parents[1]
SMALL_FORMAT = hmm.PromptFormat(num_demos=2, demo_length=6, test_length=6)


def test_the_observable_family_is_registered_with_no_more_states_than_tokens_and_positive_gamma():
    for name in ("observable-1024", "observable-8192"):
        spec = hmm.MIXTURE_SPECS[name]
        assert spec.num_states <= spec.num_tokens and spec.rank is None
        assert hmm.PROMPT_FORMATS[name] == hmm.PROMPT_FORMATS["tasks-8192"]
    emissions = hmm.mixture_preset("observable-1024").hmm.emission[:16]
    assert min(observability_exact(emission) for emission in emissions) > 0
    for emission in hmm.mixture_preset("tasks-1024").hmm.emission[:4]:  # S = 16 > p = 8
        # A belief difference O^T sends to 0 exists (gamma = 0): the null space of O^T, whose unit
        # vectors d sum to 0 since O's rows do: 1^T d = (O 1)^T d - (O 1 - 1)^T d, the first term
        # the SVD's residual (a few u ||O^T||_2 <= a few u sqrt(S)), the second at most the rows'
        # rounding S u times ||d||_1 <= sqrt(S); 4 (sqrt(S) + S sqrt(S)) u bounds both.
        kernel = scipy.linalg.null_space(emission.numpy().T)
        S, eps = emission.shape[0], np.finfo(np.float64).eps
        assert kernel.shape[1] >= 8 and emission_gamma(emission) == 0.0
        assert abs(kernel.sum(0)).max() <= 4 * (S**0.5 + S * S**0.5) * eps
    assert all(emission_gamma(emission) == observability_exact(emission) for emission in emissions[:4])


def test_a_family_signal_is_the_paired_gap_from_the_in_context_unigram_to_the_ceiling():
    spec = hmm.MixtureSpec(64, 2, 3, 0.2, 0.2)
    result = family_signal(spec, SMALL_FORMAT, 16, 64, SMCSettings(particles=32, moves=1, batch_prompts=16))
    for scope in result["scopes"].values():
        losses = scope["loss"]
        assert scope["signal"]["mean"] == pytest.approx(losses["ngram 1"]["mean"] - losses["ceiling"]["mean"],
                                                        rel=1e-12, abs=0)
        # No prompt-only predictor beats the oracle on average by more than the noise of 16 prompts.
        assert scope["ceiling - oracle"]["interval_95"][1] > 0
        assert scope["ceiling_monte_carlo_stderr"] > 0
    assert 0 < result["gamma_quartiles"][1] <= 1


def test_a_family_with_one_prompt_or_a_low_rank_transition_is_refused():
    with pytest.raises(ValueError, match="num_prompts: 1; expected an integer >= 2"):
        family_signal(hmm.MixtureSpec(8, 2, 3), SMALL_FORMAT, 1, 8, SMCSettings(particles=8, moves=1))
    with pytest.raises(ValueError, match="rank 1"):
        family_signal(hmm.MixtureSpec(8, 2, 3, rank=1), SMALL_FORMAT, 4, 8, SMCSettings(particles=8, moves=1))


def test_an_unknown_family_is_refused_naming_it(tmp_path, capsys):
    assert hmmtf.main(["signal", "--families", "nope", "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("hmmtf signal: error: --families: ['nope']; expected names of") and error.count("\n") == 1


def test_on_the_committed_result_the_ceiling_lies_between_the_oracle_and_every_n_gram():
    report = json.loads((ROOT / "figures/families/signal.json").read_text())
    assert set(report["families"]) == set(CANDIDATES)
    for family in report["families"].values():
        for scope in family["scopes"].values():
            assert scope["ceiling - oracle"]["interval_95"][0] > 0
            for n in (1, 2, 3):
                assert scope["loss"][f"ngram {n}"]["mean"] > scope["loss"]["ceiling"]["mean"]
