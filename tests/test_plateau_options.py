"""The plateau study's training options (issue 51), each off by default and tested against an
oracle: Rao-Blackwellised (filtered) targets against the mean of sampled-target gradients and the
oracle predictor; the curriculum's share and streams; the context curriculum's schedule, streams
and token counts; the attention scale against scaled query weights."""
import dataclasses
import json
import math

import pytest
import torch

import hmm
from empirical.training.data import TRAIN_STREAM, PromptStream, prompt_batch, stream_seed
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.prefetch import PrefetchedBatches
from empirical.training.presets import get_preset
from empirical.training.streams import (CURRICULUM_STREAM, ContextCurriculum, Curriculum, StudyStream, filtered_targets,
                                        step_lengths, training_stream)
from empirical.training.train import CHECKPOINT_DIR, IGNORE_INDEX, METRICS_FILE, TOKENS_READ, Batch, TrainConfig, loss_sum_and_count, train
from empirical.yardsticks.hand_built import task_memory_predictor
from rounding import gamma

PRESET = get_preset("cpu-small")
MIXTURE = PRESET.build_mixture()
EASY = "paper-mini"
"""A mixture of cpu-small's 8 tokens but other HMMs (128 of them), the curriculum of these tests."""


def with_train(**changes) -> object:
    return dataclasses.replace(PRESET, train=dataclasses.replace(PRESET.train, **changes))


def test_the_own_task_predictive_is_the_oracle_predictor():
    prompts = hmm.sample_prompts(MIXTURE, 12, PRESET.prompt_format, seed=5)
    ours = hmm.own_task_predictive(MIXTURE, prompts)
    oracle = task_memory_predictor(MIXTURE, prompts.task_ids, prompts.format, history_length=None)(prompts.tokens)
    assert ours.dtype == torch.float64
    # Two implementations of the same recursion, segment by segment: equal up to float64 rounding
    # of a few normalised matrix-vector products (gamma_n of one product of length S, per step).
    longest = max(PRESET.prompt_format.demo_length, PRESET.prompt_format.test_length)
    assert float((ours - oracle).abs().max()) <= longest * gamma(MIXTURE.hmm.num_states + 2)
    first = (MIXTURE.hmm.initial[prompts.task_ids, None, :] @ MIXTURE.hmm.emission[prompts.task_ids]).squeeze(1)
    delimiters = PRESET.prompt_format.is_delimiter
    assert torch.allclose(ours[:, delimiters], first[:, None, :].expand(-1, int(delimiters.sum()), -1), atol=0, rtol=0)


def test_a_run_without_the_options_trains_on_the_plain_stream():
    assert type(training_stream(MIXTURE, PRESET)) is PromptStream
    assert isinstance(training_stream(MIXTURE, with_train(soft_targets=True)), StudyStream)


def test_filtered_targets_are_distributions_over_the_tokens_and_zero_on_the_delimiter():
    batch = training_stream(MIXTURE, with_train(soft_targets=True))(3)
    counted = batch.targets != IGNORE_INDEX
    assert batch.target_probs.dtype == torch.float32 and batch.target_probs.shape == (*batch.inputs.shape, MIXTURE.num_tokens + 1)
    assert (batch.target_probs[..., MIXTURE.delimiter] == 0).all()
    sums = batch.target_probs[counted].sum(-1).double()
    assert float((sums - 1).abs().max()) <= gamma(MIXTURE.num_tokens + MIXTURE.hmm.num_states, torch.float32) * 4
    # the float32 filter against float64: each of at most `longest` steps normalises a product of
    # S terms (gamma_{S+p} relative each), so the error grows at most linearly in the steps.
    prompts = PromptStream(MIXTURE, PRESET.prompt_format, PRESET.train.batch_size, PRESET.data_seed).prompts(3)
    exact = filtered_targets(MIXTURE, prompts).double()
    longest = max(PRESET.prompt_format.demo_length, PRESET.prompt_format.test_length)
    bound = 2 * longest * gamma(MIXTURE.hmm.num_states + MIXTURE.num_tokens, torch.float32)
    assert float((batch.target_probs.double() - exact).abs().max()) <= bound
    assert torch.equal(batch.inputs, training_stream(MIXTURE, PRESET)(3).inputs)


@pytest.mark.long_running  # 400 backward passes of sampled targets: seconds of CPU
def test_the_soft_target_gradient_is_the_mean_of_sampled_target_gradients():
    """``E[one_hot(x_{t+1}) | x_{<=t}] = q_t`` and the loss is linear in the target, so over
    targets drawn from ``q`` at every counted position (inputs fixed) the mean gradient is the
    soft-target gradient. Checked along fixed random directions, each within 4 standard errors of
    the mean of 400 draws; the uniform distribution as the soft target (a wrong one) is not."""
    torch.manual_seed(0)
    config = RoFormerConfig(vocab_size=MIXTURE.num_tokens + 1, num_layers=1, num_heads=2, width=16)
    model = RoFormer(config).double()
    soft = training_stream(MIXTURE, with_train(soft_targets=True, batch_size=4))(0)
    soft = Batch(soft.inputs, soft.targets, soft.target_probs.double())
    counted = soft.targets != IGNORE_INDEX

    def gradient(batch: Batch) -> torch.Tensor:
        model.zero_grad()
        total, count = loss_sum_and_count(model, batch)
        (total / count).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    directions = torch.randn(8, sum(p.numel() for p in model.parameters()), dtype=torch.float64,
                             generator=torch.Generator().manual_seed(1))
    expected = directions @ gradient(soft)
    generator = torch.Generator().manual_seed(2)
    draws = []
    for _ in range(400):
        sampled = soft.targets.clone()
        sampled[counted] = torch.multinomial(soft.target_probs[counted], 1, generator=generator).squeeze(-1)
        draws.append(directions @ gradient(Batch(soft.inputs, sampled)))
    draws = torch.stack(draws)
    mean, stderr = draws.mean(0), draws.std(0) / math.sqrt(len(draws))
    assert ((mean - expected).abs() <= 4 * stderr).all(), ((mean - expected) / stderr)
    uniform = torch.zeros_like(soft.target_probs)
    uniform[..., : MIXTURE.num_tokens] = 1 / MIXTURE.num_tokens
    wrong = directions @ gradient(Batch(soft.inputs, soft.targets, uniform))
    assert ((mean - wrong).abs() > 4 * stderr).any()


def test_the_curriculum_share_falls_linearly_to_none():
    curriculum = Curriculum(MIXTURE, steps=10, share=0.5)
    assert [curriculum.prompts_at(step, 16) for step in (0, 5, 9, 10, 50)] == [8, 4, 1, 0, 0]


def test_a_curriculum_batch_is_the_training_prompts_then_the_easy_ones_and_the_plain_batch_after_it():
    easy = hmm.MIXTURE_SPECS[EASY].build(PRESET.mixture_seed)
    preset = with_train(curriculum_mixture=EASY, curriculum_steps=8, curriculum_share=0.5)
    stream = training_stream(MIXTURE, preset)
    assert stream.curriculum.mixture.num_tokens == MIXTURE.num_tokens
    batch = stream(2)
    size, share = preset.train.batch_size, stream.curriculum_prompts(2)
    own = hmm.sample_prompts(MIXTURE, size - share, PRESET.prompt_format, seed=stream_seed(PRESET.data_seed, TRAIN_STREAM, 2))
    theirs = hmm.sample_prompts(easy, share, PRESET.prompt_format, seed=stream_seed(PRESET.data_seed, CURRICULUM_STREAM, 2))
    assert torch.equal(batch.inputs, torch.cat([own.tokens, theirs.tokens]))
    assert torch.equal(batch.targets, torch.cat([prompt_batch(own, MIXTURE.delimiter).targets,
                                                 prompt_batch(theirs, MIXTURE.delimiter).targets]))
    plain = training_stream(MIXTURE, PRESET)
    assert torch.equal(stream(8).inputs, plain(8).inputs) and torch.equal(stream(8).targets, plain(8).targets)


def test_prefetched_batches_carry_the_filtered_targets():
    stream = training_stream(MIXTURE, with_train(soft_targets=True))
    with PrefetchedBatches(stream, depth=2) as prefetched:
        got = prefetched(4)
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(got, stream(4)))


@pytest.mark.parametrize("changes, message", [
    ({"curriculum_share": 1.5}, "curriculum_share: 1.5; expected a number in [0, 1]"),
    ({"curriculum_mixture": "paper-sparse"}, "curriculum_steps: 0 with curriculum_mixture 'paper-sparse'"),
    ({"curriculum_steps": 10}, "curriculum_steps: 10 with curriculum_mixture ''"),
])
def test_a_curriculum_set_by_half_or_out_of_range_is_refused_naming_it(changes, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TrainConfig(steps=10, batch_size=4, **changes)


def test_a_curriculum_of_an_unknown_mixture_or_of_other_tokens_is_refused_naming_it():
    with pytest.raises(ValueError, match="curriculum_mixture: 'nope'; expected one of"):
        training_stream(MIXTURE, with_train(curriculum_mixture="nope", curriculum_steps=4))
    with pytest.raises(ValueError, match="curriculum_mixture: 4 tokens; expected the training mixture's 8"):
        training_stream(MIXTURE, with_train(curriculum_mixture="tiny", curriculum_steps=4))


def test_the_context_curriculum_gives_each_count_of_demonstrations_an_equal_share_of_its_steps():
    """From 2 demonstrations to the format's 6 over 15 steps: 5 counts, 3 steps each, then 6."""
    full = PRESET.prompt_format
    schedule = [ContextCurriculum(steps=15, demos=2).format_at(full, step) for step in range(20)]
    assert [format.num_demos for format in schedule] == [2] * 3 + [3] * 3 + [4] * 3 + [5] * 3 + [6] * 8
    assert all(dataclasses.replace(format, num_demos=full.num_demos) == full for format in schedule)
    uneven = [ContextCurriculum(steps=4, demos=0).format_at(full, step).num_demos for step in range(4)]
    assert uneven == [0, 1, 3, 5]  # floor(7 s / 4): 7 counts over 4 steps, the last one the format's


def test_a_context_curriculum_batch_is_the_plain_streams_draw_at_the_steps_format_and_the_plain_batch_after():
    preset = with_train(context_curriculum_steps=10, context_curriculum_demos=1)
    stream, plain = training_stream(MIXTURE, preset), training_stream(MIXTURE, PRESET)
    for step in (0, 4, 9):
        format = dataclasses.replace(PRESET.prompt_format, num_demos=1 + 6 * step // 10)
        drawn = hmm.sample_prompts(MIXTURE, PRESET.train.batch_size, format,
                                   seed=stream_seed(PRESET.data_seed, TRAIN_STREAM, step))
        expected = prompt_batch(drawn, MIXTURE.delimiter)
        assert torch.equal(stream(step).inputs, expected.inputs) and torch.equal(stream(step).targets, expected.targets)
    assert torch.equal(stream(10).inputs, plain(10).inputs) and torch.equal(stream(10).targets, plain(10).targets)
    # 1 + floor(6 s / 10) demonstrations at s = 0..9: 1 1 2 2 3 4 4 5 5 6, then the format's 6; d of them hold 17 d + 16 tokens
    demos = {1: 2, 2: 2, 3: 1, 4: 2, 5: 2, 6: 1 + 2}
    assert step_lengths(preset, 0, 12) == {17 * count + 16: steps for count, steps in demos.items()}
    assert step_lengths(PRESET, 3, 12) == {PRESET.prompt_format.length: 9}


def test_a_context_curriculum_of_a_too_long_start_or_a_negative_count_is_refused_naming_it():
    with pytest.raises(ValueError, match="context_curriculum_demos: 6; expected fewer than the prompt format's 6"):
        training_stream(MIXTURE, with_train(context_curriculum_steps=4, context_curriculum_demos=6))
    for name in ("context_curriculum_steps", "context_curriculum_demos"):
        with pytest.raises(ValueError, match=f"{name}: -1; expected an integer >= 0"):
            TrainConfig(steps=10, batch_size=4, **{name: -1})


def test_the_logs_tokens_are_the_tokens_read_and_a_checkpoint_without_them_resumes_as_before(tmp_path):
    """``metrics.jsonl``'s ``tokens`` count every batch's tokens, so in a context curriculum they
    are the sum of :func:`step_lengths`, through a resumption; a checkpoint saved before that count
    existed resumes with ``step x`` the batch's tokens, which a run of one shape logged."""
    preset = with_train(steps=8, batch_size=4, warmup_steps=1, log_every=2, precision="fp32",
                        context_curriculum_steps=6, context_curriculum_demos=2)
    model = RoFormerConfig(vocab_size=MIXTURE.num_tokens + 1, num_layers=1, num_heads=2, width=16)
    stream = training_stream(MIXTURE, preset)
    train(model, preset.train, stream, tmp_path / "straight", progress=False)
    train(model, preset.train, stream, tmp_path / "resumed", stop_at=3, progress=False)
    train(model, preset.train, stream, tmp_path / "resumed", progress=False)
    expected = [4 * sum(length * steps for length, steps in step_lengths(preset, 0, stop).items()) for stop in (2, 4, 6, 8)]
    for run in ("straight", "resumed"):
        records = [json.loads(line) for line in (tmp_path / run / METRICS_FILE).read_text().splitlines()]
        assert [record["tokens"] for record in records if record["step"] % 2 == 0] == expected, run
    plain = with_train(steps=8, batch_size=4, warmup_steps=1, log_every=2, precision="fp32")
    stream = training_stream(MIXTURE, plain)
    train(model, plain.train, stream, tmp_path / "old", stop_at=4, progress=False)
    config_path = tmp_path / "old" / CHECKPOINT_DIR / "config.json"
    config = json.loads(config_path.read_text())
    assert config.pop(TOKENS_READ) == 4 * 4 * PRESET.prompt_format.length
    config_path.write_text(json.dumps(config))
    train(model, plain.train, stream, tmp_path / "old", progress=False)
    records = [json.loads(line) for line in (tmp_path / "old" / METRICS_FILE).read_text().splitlines()]
    assert [record["tokens"] for record in records] == [step * 4 * PRESET.prompt_format.length for step in (2, 4, 6, 8)]


@pytest.mark.parametrize("scale", [0.5, 2.5])
def test_the_attention_scale_multiplies_the_scores_as_scaled_queries_do(scale):
    """``c q.k`` is ``(c q).k``: a model with ``attention_scale = c`` computes the standard model
    whose query weights and biases are multiplied by c, on the fused and the recording path."""
    torch.manual_seed(0)
    scaled = RoFormer(RoFormerConfig(vocab_size=6, num_layers=2, num_heads=2, width=16, attention_scale=scale)).double()
    plain = RoFormer(dataclasses.replace(scaled.config, attention_scale=1.0)).double()
    plain.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        for block in plain.blocks:
            block.attn.qkv.weight[:16] *= scale
            block.attn.qkv.bias[:16] *= scale
    tokens = torch.randint(0, 6, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = plain(tokens)
        assert torch.allclose(scaled(tokens), expected, rtol=0, atol=1e-12)
        assert torch.allclose(scaled.run_with_cache(tokens)[0], expected, rtol=0, atol=1e-12)
    assert not torch.allclose(RoFormer(plain.config).double()(tokens), expected)


def test_a_non_finite_or_non_positive_attention_scale_is_refused_naming_it():
    for value in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=f"attention_scale: {value!r}; expected a finite number > 0"):
            RoFormerConfig(vocab_size=6, num_layers=1, num_heads=2, width=8, attention_scale=value)


def test_a_run_with_every_option_learns_its_soft_targets_and_resumes_bit_for_bit(tmp_path):
    """Soft targets, both curricula and an attention scale together: the loss against the filtered
    targets falls, and a run stopped in the curricula and resumed is the uninterrupted run."""
    preset = with_train(steps=12, batch_size=8, learning_rate=3e-3, warmup_steps=2, log_every=1, precision="fp32",
                        soft_targets=True, curriculum_mixture=EASY, curriculum_steps=8, context_curriculum_steps=6)
    model = RoFormerConfig(vocab_size=MIXTURE.num_tokens + 1, num_layers=1, num_heads=2, width=16, attention_scale=2.0)
    stream = training_stream(MIXTURE, preset)
    straight = train(model, preset.train, stream, tmp_path / "straight", progress=False)
    train(model, preset.train, stream, tmp_path / "resumed", stop_at=5, progress=False)
    resumed = train(model, preset.train, stream, tmp_path / "resumed", progress=False)
    for (name, mine), (_, theirs) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(mine, theirs), name
    torch.manual_seed(preset.train.seed)
    with torch.no_grad():
        before = loss_sum_and_count(RoFormer(model), stream(100))
        after = loss_sum_and_count(straight.model, stream(100))
    assert float(after[0] / after[1]) < float(before[0] / before[1])
