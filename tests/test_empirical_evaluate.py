"""Evaluation: metric definitions against oracle predictors, Bayes-optimal beats a trained model,
presets, and the ``train`` / ``evaluate`` commands end to end on the tiny preset."""
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

import hmm
import hmmtf
from bounds.serialize import to_json
from empirical.reports.evaluation import EvaluationReport, Provenance
from empirical.training.data import PromptStream, held_out_prompts, unigram_distribution
from empirical.training.model import RoFormer
from empirical.yardsticks.evaluate import (bayes_predictor, evaluate_predictors, in_context_predictors, model_predictor,
                                           unigram_predictor)
from empirical.training.presets import get_preset, preset_from_task
from empirical.training.train import train
from empirical.yardsticks import regime as regime_diagnostic
from rounding import gamma, unit_roundoff
import tiny_pipeline

PRESET = get_preset("tiny")
MIXTURE = hmm.mixture_preset(PRESET.mixture, seed=PRESET.mixture_seed)
P = MIXTURE.num_tokens


def oracle_predictor(tokens: torch.Tensor) -> torch.Tensor:
    """Cheats: one-hot on the true next token (the delimiter row stays uniform)."""
    probs = torch.full((*tokens.shape, P), 1.0 / P, dtype=torch.float64)
    following = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], P)], dim=1)
    real = following < P
    probs[real] = torch.nn.functional.one_hot(following[real], P).double()
    return probs


def test_metrics_of_oracle_and_uniform_predictors():
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 32, seed=0)
    uniform = torch.full((P,), 1.0 / P, dtype=torch.float64)
    result = evaluate_predictors(
        {"oracle": oracle_predictor, "bayes": bayes_predictor(MIXTURE), "unigram": unigram_predictor(uniform)},
        prompts,
        P,
    )
    # The uniform predictor's loss is -log fl(1/P) at every position: within u (the reciprocal) and
    # 1 ulp, 2u |log P| (torch's log), of log P, as math.log(P) is within 1 ulp. A scope averages at most
    # `evaluated_rows` copies per prompt, then the prompts: gamma_{n + B} relative (Higham, Lemmas 3.1, 3.3).
    log_p, u = math.log(P), unit_roundoff()
    uniform_loss = u + 4 * u * log_p + gamma(result.evaluated_rows + len(prompts.tokens)) * log_p
    for scope in (result.test_sequence, result.all_positions):
        # Exact: every evaluated target has probability exactly 1, log 1 = 0, and a mean of zeros is 0.
        assert scope["oracle"].loss == 0.0
        assert scope["oracle"].accuracy == 1.0
        assert scope["unigram"].loss == pytest.approx(log_p, rel=0, abs=uniform_loss)
        assert scope["bayes"].agreement_with_bayes == 1.0
    assert result.by_demonstrations.predictors["oracle"].accuracy == [1.0] * (PRESET.prompt_format.num_demos + 1)
    assert result.by_test_position.predictors["unigram"].loss == pytest.approx(
        [log_p] * PRESET.prompt_format.test_length, rel=0, abs=uniform_loss)
    # The uniform predictor's argmax is token 0: its accuracy is the frequency of token 0. Exact: both
    # sides sum 0/1 values over the prompts (an exact integer) and divide it by their number once.
    tokens = prompts.tokens[:, -PRESET.prompt_format.test_length:]
    assert result.by_test_position.predictors["unigram"].accuracy == (tokens == 0).double().mean(0).tolist()
    gap = result.excess_test_sequence
    assert gap.excess["oracle"].excess_loss == -gap.reference_loss  # 0.0 - bayes_loss: exact
    # No pair asked for: no paired differences, and no "paired" key where it is written.
    assert result.paired is None and "paired" not in to_json(result)


def test_bayes_optimal_beats_a_trained_model_on_held_out_prompts():
    stream = PromptStream(MIXTURE, PRESET.prompt_format, PRESET.train.batch_size, PRESET.data_seed)
    model = train(PRESET.model_config(P), PRESET.train, stream, progress=False).model
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 256, seed=PRESET.data_seed)
    unigram = unigram_distribution(MIXTURE, PRESET.prompt_format, 256, PRESET.data_seed)
    result = evaluate_predictors(
        {"model": model_predictor(model, P), "bayes": bayes_predictor(MIXTURE), "unigram": unigram_predictor(unigram)},
        prompts,
        P,
    )
    for gap in (result.excess_test_sequence, result.excess_all_positions):
        assert gap.excess["model"].excess_loss > 0
        assert gap.gap > 0
    assert result.all_positions["bayes"].accuracy >= result.all_positions["unigram"].accuracy


COMMITTED_EVALUATION = Path(__file__).resolve().parents[1] / "figures" / "cpu-small" / "evaluation.json"
"""A committed ``hmmtf evaluate`` result, with every section :class:`EvaluationReport` writes."""
CHECKPOINT_RECORDS = ("task", "model", "train", "train_summary")
"""The report's copies of the checkpoint's and the training run's own records (``dict`` fields)."""


def key_structure(value, opaque: tuple[str, ...] = ()):
    """Every key of ``value``'s dicts, nested, in order; a list, a number or a string as ``"value"``,
    and so is a key of ``opaque``'s value."""
    if isinstance(value, dict):
        return [(key, "value" if key in opaque else key_structure(item)) for key, item in value.items()]
    return "value"


def test_the_typed_report_writes_the_keys_of_the_committed_evaluation():
    """evaluate_into's report, assembled as it assembles it (an untrained network of the tiny preset,
    a few prompts and HMMs), writes the committed evaluation.json's keys in its order, down to every
    predictor's metrics and the regime section's fresh-HMM evaluation: the types describe the files."""
    device = torch.device("cpu")
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 8, seed=PRESET.data_seed)
    predictors = in_context_predictors(RoFormer(PRESET.model_config(P)), MIXTURE, PRESET, 8, device)
    evaluation = evaluate_predictors({**predictors, "oracle": regime_diagnostic.oracle_predictor(MIXTURE, prompts)},
                                     prompts, P, pairs=(("model", "oracle"),))
    regime = regime_diagnostic.regime_section(predictors, MIXTURE, PRESET, evaluation, 8, fresh_tasks=4,
                                              reference_tasks=4, device=device)
    report = EvaluationReport(provenance=Provenance("hmmtf evaluate", None, "checkpoint", 0), task={}, model={},
                              train={}, train_summary=None, evaluation_time_s=0.0, evaluation=evaluation,
                              regime=regime)
    committed = json.loads(COMMITTED_EVALUATION.read_text())
    assert key_structure(to_json(report), CHECKPOINT_RECORDS) == key_structure(committed, CHECKPOINT_RECORDS)
    without_regime = dataclasses.replace(report, regime=None)
    assert list(to_json(without_regime)) == [key for key in committed if key != "regime"]


def test_unknown_reference_is_rejected():
    prompts = held_out_prompts(MIXTURE, PRESET.prompt_format, 4, seed=0)
    with pytest.raises(ValueError, match="reference: 'bayes' is not among the predictors"):
        evaluate_predictors({"unigram": unigram_predictor(torch.full((P,), 1.0 / P))}, prompts, P)


def test_unknown_preset_is_rejected():
    with pytest.raises(ValueError, match=r"preset: 'huge'; expected one of \['cpu-small', 'paper', 'paper-cpu', 'paper-cpu-mini', 'paper-mini', "
                                         r"'tasks-1024-deep', .*'tiny'\]"):
        get_preset("huge")


def test_paper_preset_has_the_paper_scale():
    paper = get_preset("paper")
    model = paper.model_config(16)
    assert (model.num_layers, model.num_heads, model.width) == (16, 16, 1024)
    assert paper.train.steps * paper.train.batch_size == 131_072


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_evaluate_prints_one_json_document_with_every_section(tiny_evaluation):
    summary = json.loads(tiny_evaluation.stdout)
    assert summary["out"] == str(tiny_evaluation.out)
    assert summary["hand_built"]["out"] == str(tiny_evaluation.out / "hand_built.json")
    assert summary["competence"]["out"] == str(tiny_evaluation.out / "competence.json")
    assert set(summary["regime"]) == set(json.loads((tiny_evaluation.out / "evaluation.json").read_text())["regime"]
                                         ["memorisation"])


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_train_and_evaluate_commands(tiny_run, tiny_evaluation):
    out, argv, _ = tiny_evaluation
    report = json.loads((out / "evaluation.json").read_text())
    assert report["step"] == tiny_pipeline.STEPS and report["num_prompts"] == tiny_pipeline.EVALUATE_PROMPTS
    assert report["command"] == "hmmtf " + " ".join(argv) and report["git_commit"] == hmmtf.source_commit()
    assert report["train_summary"]["command"] == "hmmtf " + " ".join(tiny_pipeline.train_argv(tiny_run))
    assert report["train_summary"]["steps"] == tiny_pipeline.STEPS
    assert len(report["by_demonstrations"]["model"]["accuracy"]) == PRESET.prompt_format.num_demos + 1
    assert (out / "in_context.png").stat().st_size > 0 and (out / "training_loss.png").stat().st_size > 0
    assert report["paired"]["model - oracle"]["all_positions"]["loss_difference"] > 0
    regime = report["regime"]
    assert (regime["training_tasks"], regime["fresh_tasks"], regime["reference_tasks"]) == (
        8, tiny_pipeline.FRESH_TASKS, tiny_pipeline.REFERENCE_TASKS)
    assert regime["fresh_hmms"]["num_prompts"] == tiny_pipeline.EVALUATE_PROMPTS
    assert regime["fresh_shared_with_training"] == 0
    assert regime["memorisation"]["all_positions"]["verdict"] in ("in context", "memorising", "undetermined")
    assert (out / "regime.png").stat().st_size > 0
    both = json.loads((out / "hand_built.json").read_text())
    assert both["num_prompts"] == tiny_pipeline.HAND_BUILT_PROMPTS
    assert both["history_lengths"] == sorted(tiny_pipeline.HAND_BUILT_L)
    assert both["gd_steps"] == sorted(tiny_pipeline.HAND_BUILT_T)
    assert both["git_commit"] == report["git_commit"]
    names = {"model", "bayes", "unigram", "P_L L=1", "least squares L=2", "hand-built L=1 T=2", "hand-built L=2 T=3"}
    assert names <= set(both["test_sequence"])
    assert both["by_demonstrations"]["num_demonstrations"] == list(range(1, PRESET.prompt_format.num_demos + 1))
    assert (out / "hand_built_in_context.png").stat().st_size > 0


def test_a_checkpoint_of_a_since_changed_mixture_preset_is_refused(monkeypatch):
    task = get_preset("tiny").task()
    assert preset_from_task(task).mixture == "tiny"
    changed = dataclasses.replace(hmm.MIXTURE_SPECS["tiny"], num_tasks=3)
    monkeypatch.setitem(hmm.MIXTURE_SPECS, "tiny", changed)
    with pytest.raises(ValueError, match=r"task: trained on mixture 'tiny' with spec .*'num_tasks': 8.*but that preset is now .*'num_tasks': 3"):
        preset_from_task(task)


@pytest.mark.parametrize(
    "prompt_format, scope",
    [
        (hmm.PromptFormat(num_demos=2, demo_length=1, test_length=4), "by_demonstrations point k=0"),
        (hmm.PromptFormat(num_demos=0, demo_length=3, test_length=4), "by_test_position point i=0"),
    ],
)
def test_a_curve_point_without_positions_is_refused_not_nan(prompt_format, scope):
    prompts = held_out_prompts(MIXTURE, prompt_format, 4, seed=0)
    uniform = unigram_predictor(torch.full((P,), 1.0 / P))
    described = (f"prompts (format num_demos={prompt_format.num_demos}, demo_length={prompt_format.demo_length}, "
                 f"test_length={prompt_format.test_length}), {scope}: selects no position; expected at least one")
    with pytest.raises(ValueError, match=described.replace("(", r"\(").replace(")", r"\)")):
        evaluate_predictors({"bayes": uniform, "unigram": uniform}, prompts, P)


def test_mean_and_stderr_refuses_an_empty_mask():
    from empirical.yardsticks.evaluate import _mean_and_stderr

    values = torch.ones(3, 5)
    assert _mean_and_stderr(values, torch.tensor([True, False, True, False, False]), "here") == (1.0, 0.0)
    with pytest.raises(ValueError, match="by_test_position point i=0: selects no position"):
        _mean_and_stderr(values, torch.zeros(5, dtype=torch.bool), "by_test_position point i=0")
