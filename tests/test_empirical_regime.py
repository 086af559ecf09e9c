"""The regime diagnostic: fresh HMMs are disjoint from the training HMMs, the oracle is each
prompt's own filter, the paired loss difference, the decision rule on planted numbers, and on
planted predictors (a memoriser of the training mixture fails, an in-context predictor passes)."""
import math

import pytest
import torch

import hmm
from empirical.training.data import held_out_prompts
from empirical.yardsticks.evaluate import bayes_predictor, evaluate_predictors, unigram_predictor
from empirical.training.presets import get_preset
from empirical.yardsticks.regime import (
    FRESH_MIXTURE_STREAM,
    MEMORISATION_TOLERANCE,
    REFERENCE_MIXTURE_STREAM,
    Z_95,
    RegimeSection,
    memorisation_verdict,
    oracle_predictor,
    regime_section,
    shared_hmms,
    unseen_mixture,
)
from rounding import gamma, predictive_rounding, unit_roundoff

PRESET = get_preset("tiny")
MIXTURE = PRESET.build_mixture()
P = MIXTURE.num_tokens


def test_fresh_and_reference_hmms_are_new_and_disjoint():
    fresh = unseen_mixture(PRESET, 64, FRESH_MIXTURE_STREAM)
    reference = unseen_mixture(PRESET, 64, REFERENCE_MIXTURE_STREAM)
    assert fresh.num_tasks == 64 and fresh.hmm.num_states == MIXTURE.hmm.num_states and fresh.num_tokens == P
    assert shared_hmms(fresh, MIXTURE) == 0 and shared_hmms(reference, fresh) == 0
    assert shared_hmms(MIXTURE, MIXTURE) == MIXTURE.num_tasks
    # A mixture that contains two training HMMs is caught.
    planted = hmm.Mixture.uniform(hmm.HMM(
        torch.cat([fresh.hmm.initial[:3], MIXTURE.hmm.initial[[1, 5]]]),
        torch.cat([fresh.hmm.transition[:3], MIXTURE.hmm.transition[[1, 5]]]),
        torch.cat([fresh.hmm.emission[:3], MIXTURE.hmm.emission[[1, 5]]])))
    assert shared_hmms(planted, MIXTURE) == 2


def test_unseen_mixture_rejects_a_bad_task_count():
    with pytest.raises(ValueError, match="num_tasks: 0; expected an integer >= 1"):
        unseen_mixture(PRESET, 0, FRESH_MIXTURE_STREAM)


def test_oracle_is_each_prompts_own_filter_on_its_current_segment():
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 16, seed=3)
    result = oracle_predictor(MIXTURE, prompts)(prompts.tokens)
    fmt = prompts.format
    own = MIXTURE.hmm[prompts.task_ids]
    test = prompts.tokens[:, fmt.test_positions]
    # Each side filters one segment (a task's weight in a mixture of one is e^0 = 1 exactly): within
    # rounding.predictive_rounding of the exact predictive.
    filtered = predictive_rounding(MIXTURE.hmm.num_states, max(fmt.demo_length, fmt.test_length))
    torch.testing.assert_close(result[:, fmt.test_positions], hmm.next_token_probs(own, test), rtol=2 * filtered, atol=0)
    # Every row, delimiters included, against a second implementation: the Bayes predictive of a
    # mixture of one task (its posterior over tasks is 1), prompt by prompt.
    for row, task in enumerate(prompts.task_ids.tolist()):
        single = hmm.bayes_predictive(hmm.Mixture.single(MIXTURE.hmm[task]), prompts.tokens[row : row + 1])
        torch.testing.assert_close(result[row], single.next_token[0], rtol=2 * filtered, atol=0)
    with pytest.raises(ValueError, match="expected the 16 prompts the oracle was built for"):
        oracle_predictor(MIXTURE, prompts)(prompts.tokens[:4])


def paired_mean_rounding(first: torch.Tensor, second: torch.Tensor, positions: int) -> float:
    """Bound on the difference of two float64 computations of the mean loss difference
    ``mean_b mean_t (a_bt - b_bt)``, averaging the differences or differencing the averages (per
    prompt or overall), for per-prompt mean losses ``first``, ``second (B,)`` over ``positions = n``:
    ``2 (gamma_{n+3} + gamma_B) (mean first + mean second)``, first order in u.

    Either way a prompt's value errs by at most ``gamma_{n+3}`` times its ``mean_t (a_bt + b_bt)``
    (each loss a logarithm within 1 ulp, 2u; n - 1 additions, the subtraction and the division by
    n), relative to the nonnegative losses, not to their difference, which cancels; the mean over
    the B prompts adds ``gamma_B`` of the mean of their magnitudes (Higham, Lemma 3.1). Each
    computation is so within half the bound of the exact value."""
    return 2 * (gamma(positions + 3) + gamma(len(first))) * float(first.mean() + second.mean())


def paired_stderr_rounding(first: torch.Tensor, second: torch.Tensor, positions: int) -> float:
    """Bound on the difference of the two computations of :func:`paired_mean_rounding`'s standard
    error ``std_b(d_b) / sqrt(B)``: ``(||e||_2 / sqrt(B - 1) + 2 (gamma_{B+3} + 2u) std(d)) / sqrt(B)``
    with ``e_b = 2 gamma_{n+3} (first_b + second_b)``, first order in u.

    The per-prompt values differ by at most e (as there), and a sample std moves by at most
    ``||e||_2 / sqrt(B - 1)`` (it is the norm of the centred vector over sqrt(B - 1), and centring
    is a projection). Each side's two-pass std (torch's full reduction on the CPU: mean, then sum of
    squared deviations) errs relatively by ``gamma_{B+3}``: the mean's error enters the squares at
    second order; a square rounds 3u, the B - 1 additions and the division by B - 1 add theirs,
    and the square root halves the sum and rounds once; dividing by a rounded sqrt(B) adds 2u."""
    count = len(first)
    per_prompt = 2 * gamma(positions + 3) * (first + second)
    spread = float((first - second).std())
    return (float(per_prompt.norm()) / (count - 1) ** 0.5
            + 2 * (gamma(count + 3) + 2 * unit_roundoff()) * spread) / count**0.5


def test_paired_difference_is_the_mean_and_standard_error_of_per_prompt_differences():
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 40, seed=1)
    uniform = torch.full((P,), 1.0 / P, dtype=torch.float64)
    bayes, oracle = bayes_predictor(MIXTURE), oracle_predictor(MIXTURE, prompts)
    result = evaluate_predictors({"bayes": bayes, "unigram": unigram_predictor(uniform), "oracle": oracle}, prompts,
                                 P, pairs=(("bayes", "oracle"),))
    fmt = prompts.format
    rows = fmt.test_positions[1:]  # row t predicts token t + 1: rows whose target is a test token
    targets = prompts.tokens[:, 1:][:, rows]

    def per_prompt_loss(probs):
        return -probs[:, :-1][:, rows].gather(-1, targets[..., None]).squeeze(-1).log().mean(-1)

    bayes_loss, oracle_loss = per_prompt_loss(bayes(prompts.tokens)), per_prompt_loss(oracle(prompts.tokens))
    difference = bayes_loss - oracle_loss
    paired = result.paired["bayes - oracle"]["test_sequence"]
    positions = int(rows.sum())
    mean_rounding = paired_mean_rounding(bayes_loss, oracle_loss, positions)
    assert abs(paired.loss_difference - float(difference.mean())) <= mean_rounding
    assert (abs(paired.loss_difference_stderr - float(difference.std() / 40**0.5))
            <= paired_stderr_rounding(bayes_loss, oracle_loss, positions))
    losses = result.test_sequence
    assert abs(paired.loss_difference - (losses["bayes"].loss - losses["oracle"].loss)) <= mean_rounding
    with pytest.raises(ValueError, match="pairs: 'model' is not among the predictors"):
        evaluate_predictors({"bayes": bayes, "unigram": unigram_predictor(uniform)}, prompts, P,
                            pairs=(("model", "bayes"),))


@pytest.mark.parametrize("value, verdict", [
    (0.0, "in context"),
    (MEMORISATION_TOLERANCE * 0.5 - Z_95 * 0.01 + 1e-3, "undetermined"),  # interval reaches the bar
    (MEMORISATION_TOLERANCE * 0.5 + Z_95 * 0.01 + 1e-3, "memorising"),
    (-0.2, "in context"),
])
def test_memorisation_rule_on_planted_numbers(value, verdict):
    # gap 0.5 nats: the bar is 0.05; stderr 0.01.
    assert memorisation_verdict(value, 0.01, 0.5) == verdict


def test_memorisation_rule_rejects_a_useless_standard_error():
    with pytest.raises(ValueError, match="stderr: nan; expected a positive finite number"):
        memorisation_verdict(0.0, math.nan, 0.5)


def regime_of(predictor, num_prompts: int = 256) -> RegimeSection:
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, num_prompts, seed=PRESET.data_seed)
    predictors = {"model": predictor, "unigram": unigram_predictor(torch.full((P,), 1.0 / P, dtype=torch.float64))}
    training = evaluate_predictors(
        {**predictors, "bayes": bayes_predictor(MIXTURE), "oracle": oracle_predictor(MIXTURE, prompts)},
        prompts, P, pairs=(("model", "oracle"),))
    return regime_section(predictors, MIXTURE, PRESET, training, num_prompts, fresh_tasks=256, reference_tasks=64,
                          device=torch.device("cpu"))


def test_a_training_evaluation_without_the_paired_model_minus_oracle_is_refused():
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 8, seed=PRESET.data_seed)
    predictors = {"model": bayes_predictor(MIXTURE), "unigram": unigram_predictor(torch.full((P,), 1.0 / P))}
    training = evaluate_predictors({**predictors, "bayes": bayes_predictor(MIXTURE)}, prompts, P)
    with pytest.raises(ValueError, match=r"training: no paired 'model - oracle' loss difference; expected the "
                                         r"evaluation with pairs=\(\('model', 'oracle'\),\)"):
        regime_section(predictors, MIXTURE, PRESET, training, 8, fresh_tasks=4, reference_tasks=4,
                       device=torch.device("cpu"))


def test_a_memoriser_of_the_training_mixture_is_found_memorising():
    regime = regime_of(bayes_predictor(MIXTURE))
    for scope in ("test_sequence", "all_positions"):
        assert regime.memorisation[scope].verdict == "memorising"
    assert regime.fresh_shared_with_training == 0 and regime.reference_shared_with_fresh == 0
    # The memoriser is the training mixture's Bayes predictor on both sets.
    fresh = regime.fresh_hmms.all_positions
    # Exact: two Bayes predictors of the same mixture on the same prompts are one computation.
    assert fresh["model"].loss == fresh["bayes_training"].loss


@pytest.mark.long_running
def test_an_in_context_predictor_is_found_in_context():
    """The Bayes predictor of 1024 other HMMs from the same prior approximates the prior
    predictive: it knows no training HMM, so it does as well on fresh HMMs as on training ones."""
    in_context = bayes_predictor(unseen_mixture(PRESET, 1024, stream=99))
    regime = regime_of(in_context)
    assert regime.memorisation["all_positions"].verdict == "in context"
