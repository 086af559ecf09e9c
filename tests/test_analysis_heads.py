"""Head scores and mean-ablation (empirical/analysis/heads.py): the scores of planted attention
patterns (one-hot at i - 1, uniform over the induction keys, uniform over the past = chance),
the induction keys against a brute-force reading of their definition, delimiters, the hand-built
network's history heads as previous-token heads at exactly their offsets; mean-ablation by our
hook equals ablation through TransformerLens's ``hook_z``, leaves the model bit-identical when it
replaces nothing, and its hooks leave with the ``with`` block; ``hmmtf heads`` end to end."""
import json

import pytest
import torch

import hmm
import hmmtf
from construction.leak import layer_leak
from empirical.analysis.heads import (
    HeadsSettings,
    ScoreSums,
    ablated_probabilities,
    ablation_effects,
    check_heads,
    head_scores,
    induction_keys,
    induction_sums,
    kl_per_prompt,
    mean_ablation,
    mean_head_outputs,
    previous_token_sums,
    random_head_sets,
    select_heads,
)
from empirical.analysis.networks import hand_built_composed_history, hand_built_network, hand_built_weights
from empirical.yardsticks.evaluate import model_predictor
from empirical.training.model import RoFormer, RoFormerConfig
from recorded_figures import figures_recorded_not_drawn
from tiny_checkpoints import assert_refused_in_one_line, command_report
from rounding import gamma, reordered_forward_tolerance, unit_roundoff, sub_blocks_before
from test_empirical_transformer_lens import random_roformer

FORMAT = hmm.PROMPT_FORMATS["tiny"]
MIXTURE = hmm.mixture_preset("tiny")
DELIMITER = MIXTURE.num_tokens
SMALL = RoFormerConfig(vocab_size=MIXTURE.num_tokens + 1, num_layers=3, num_heads=4, width=32, mlp_ratio=2,
                       rotary_base=500.0)


def tiny_prompts(count: int, seed: int) -> torch.Tensor:
    return hmm.sample_prompts(MIXTURE, count, FORMAT, seed=seed).tokens


def stacked(pattern: torch.Tensor, batch: int = 1, layers: int = 1, heads: int = 1) -> torch.Tensor:
    """One ``(N, N)`` pattern as ``(B, L, H, N, N)`` for every prompt, layer and head."""
    return pattern.expand(batch, layers, heads, *pattern.shape).clone()


def uniform_causal(length: int) -> torch.Tensor:
    """``A[i, j] = 1 / (i + 1)`` for ``j <= i``, float64."""
    return torch.ones(length, length, dtype=torch.float64).tril() / torch.arange(1, length + 1)[:, None]


def keys_by_definition(tokens: torch.Tensor, order: int) -> torch.Tensor:
    """The keys of the module docstring, read off one pair at a time."""
    batch, length = tokens.shape
    keys = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        row = tokens[b].tolist()
        for i in range(order - 1, length):
            context = row[i - order + 1:i + 1]
            if DELIMITER in context:
                continue
            for j in range(order, i + 1):
                keys[b, i, j] = row[j - order:j] == context and row[j] != DELIMITER
    return keys


def test_a_pattern_at_i_minus_1_scores_one_at_offset_1_and_zero_at_offset_2():
    length = FORMAT.length
    pattern = torch.zeros(length, length, dtype=torch.float64)
    pattern[0, 0] = 1.0
    pattern[torch.arange(1, length), torch.arange(length - 1)] = 1.0
    patterns = stacked(pattern, batch=3, layers=2, heads=2)
    first, second = previous_token_sums(patterns, 1), previous_token_sums(patterns, 2)
    assert torch.equal(first.score, torch.ones(2, 2, dtype=torch.float64))  # a mean of exact ones
    assert torch.equal(second.score, torch.zeros(2, 2, dtype=torch.float64))
    assert (first.queries, second.queries) == (3 * (length - 1), 3 * (length - 2))
    for sums, offset in ((first, 1), (second, 2)):
        chance = sum(1 / (i + 1) for i in range(offset, length)) / (length - offset)
        assert sums.chance_level == pytest.approx(chance, rel=gamma(length))


@pytest.mark.parametrize("order", [1, 2])
def test_attention_spread_over_the_induction_keys_scores_one_and_uniform_attention_its_chance(order):
    """Planted: each query with keys spreads its mass evenly over them (the others attend to
    themselves): score 1 up to the rounding of a sum of at most N terms 1/k. Uniform over the
    past: score = chance, both the same sums of ``|M(i)| / (i + 1)`` up to rounding."""
    tokens = tiny_prompts(4, seed=5)
    keys = induction_keys(tokens, MIXTURE.num_tokens, order)
    counts = keys.sum(-1, keepdim=True).double()
    planted = torch.where(counts > 0, keys.double() / counts.clamp_min(1), torch.eye(FORMAT.length).double())
    scored = induction_sums(planted[:, None, None], keys)
    assert scored.queries == int(keys.any(-1).sum()) > 0
    assert float(scored.score) == pytest.approx(1.0, abs=2 * gamma(FORMAT.length))
    uniform = induction_sums(stacked(uniform_causal(FORMAT.length), batch=4), keys)
    assert float(uniform.score) == pytest.approx(uniform.chance_level, rel=2 * gamma(FORMAT.length * scored.queries))
    previous = previous_token_sums(stacked(uniform_causal(FORMAT.length), batch=4), order)
    assert float(previous.score) == pytest.approx(previous.chance_level, rel=2 * gamma(FORMAT.length * previous.queries))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_induction_keys_are_their_definition_on_prompts_with_delimiters(order):
    tokens = torch.cat([tiny_prompts(3, seed=1), torch.randint(0, DELIMITER + 1, (3, FORMAT.length),
                                                               generator=torch.Generator().manual_seed(2))])
    assert torch.equal(induction_keys(tokens, MIXTURE.num_tokens, order), keys_by_definition(tokens, order))


def test_a_context_holding_a_delimiter_never_matches_nor_does_a_delimiter_key():
    d = DELIMITER
    tokens = torch.tensor([[0, 1, 2, d, 0, 1, 2, 0, 1, d, 1]])
    first = induction_keys(tokens, MIXTURE.num_tokens, 1)[0]
    second = induction_keys(tokens, MIXTURE.num_tokens, 2)[0]
    assert not first[3].any() and not first[9].any()       # the query's token is a delimiter
    assert torch.nonzero(first[8]).flatten().tolist() == [2, 6]  # after each earlier 1
    assert torch.nonzero(first[10]).flatten().tolist() == [2, 6]  # not 9, the delimiter after the 1 at 8
    assert not first[:, 4].any()                                # key 4 follows the delimiter
    assert torch.nonzero(second[5]).flatten().tolist() == [2]   # (0, 1) at 0..1 followed by 2
    assert torch.nonzero(second[8]).flatten().tolist() == [2, 6]
    assert not second[4].any() and not second[10].any()         # (d, 0) and (d, 1)
    assert not second[:, 9].any()                               # a delimiter key


def test_hand_built_history_heads_score_as_previous_token_heads_at_exactly_their_offsets():
    """Each history layer leaves at most its leak ``eps`` (:mod:`construction.leak`) off offset -1,
    r of them composed at most ``r eps`` off -r, plus float64 rounding: per layer its softmax's
    normaliser and one matrix product, ``2 N u``, then the mean over the queries, ``gamma_Q``
    (tests/test_empirical_analysis.py derives the same bound)."""
    tokens = tiny_prompts(1, seed=3)[0]
    distance = 3
    network = hand_built_network(tokens, MIXTURE.num_tokens, max_distance=distance)
    trace = network.forward(tokens.numpy())
    columns = len(tokens) + 1
    per_layer = layer_leak(network.spec.beta, network.spec.theta, columns) + 2 * columns * unit_roundoff()
    names = [f"history.{r}" for r in range(1, distance + 1)]
    direct = torch.stack([hand_built_weights(trace)[name] for name in names], dim=1)[None]  # (1, R, 1, N, N)
    composed = torch.stack([hand_built_composed_history(trace)[name] for name in names])[None, :, None]
    for offset in range(1, distance + 1):
        own = previous_token_sums(direct, offset).score[:, 0]
        chained = previous_token_sums(composed, offset).score[:, 0]
        rounding = gamma(len(tokens))
        expected_own = torch.full((distance,), float(offset == 1), dtype=torch.float64)
        assert torch.allclose(own, expected_own, rtol=0, atol=per_layer + rounding)
        for r in range(1, distance + 1):
            assert float(chained[r - 1]) == pytest.approx(float(offset == r), abs=r * per_layer + rounding)


def test_head_scores_of_a_model_add_up_over_batches():
    """The sums of two batches are those of one batch of both (float64 sums of the same terms
    in another order: ``gamma_Q`` of the total)."""
    model = RoFormer(SMALL).eval()
    tokens = tiny_prompts(6, seed=4)
    whole = head_scores(model, tokens, MIXTURE.num_tokens, "cpu", batch_size=6)
    split = head_scores(model, tokens, MIXTURE.num_tokens, "cpu", batch_size=4)
    assert list(whole) == ["previous-token 1", "previous-token 2", "induction 1", "induction 2"]
    for name, sums in whole.items():
        assert sums.queries == split[name].queries
        torch.testing.assert_close(sums.mass, split[name].mass, rtol=gamma(sums.queries), atol=0)


def test_the_selected_heads_have_the_largest_excess_over_chance():
    """A head with the most mass but below another score's chance ranks below the planted one."""
    mass = torch.zeros(2, 3, dtype=torch.float64)
    mass[0, 1], mass[1, 2] = 0.9, 0.4
    scores = {"induction 1": ScoreSums(mass * 10, chance=8.0, queries=10),   # chance 0.8: excess 0.1
              "induction 2": ScoreSums(mass.flip(0).flip(1) * 10, chance=1.0, queries=10)}
    # induction 2 puts 0.9 on (1, 1) (excess 0.8) and 0.4 on (0, 0) (excess 0.3).
    assert select_heads(scores, "induction", 2) == [(1, 1), (0, 0)]
    with pytest.raises(ValueError, match="^group: 'previous-token'; expected"):
        select_heads(scores, "previous-token", 1)


def test_random_head_sets_avoid_the_group_and_repeat_with_the_seed():
    group = [(0, 1), (2, 3)]
    sets = random_head_sets(SMALL, 2, 20, group, seed=7)
    assert sets == random_head_sets(SMALL, 2, 20, group, seed=7)
    assert all(len(set(chosen)) == 2 and not set(chosen) & set(group) for chosen in sets)
    assert len({tuple(chosen) for chosen in sets}) > 1
    with pytest.raises(ValueError, match=r"^size: 11; expected an integer in 1\.\.10"):
        random_head_sets(SMALL, 11, 1, group, seed=0)


def test_kl_per_prompt_is_the_mean_over_scored_rows_of_the_sum():
    """Against ``sum_o r log(r / q)`` row by row (0 log 0 = 0), on the rows whose next token is an
    HMM token; unscored rows may hold anything."""
    tokens = tiny_prompts(2, seed=6)
    generator = torch.Generator().manual_seed(0)
    reference = torch.rand(2, FORMAT.length, MIXTURE.num_tokens, generator=generator, dtype=torch.float64)
    reference[..., 0] = 0.0
    reference /= reference.sum(-1, keepdim=True)
    model = torch.rand(2, FORMAT.length, MIXTURE.num_tokens, generator=generator, dtype=torch.float64).softmax(-1)
    scored = torch.cat([tokens[:, 1:] != DELIMITER, torch.zeros(2, 1, dtype=torch.bool)], dim=1)
    reference[~scored] = torch.nan
    rows = torch.ones(FORMAT.length, dtype=torch.bool)
    expected = [sum(sum(r * torch.log(r / q) for r, q in zip(reference[b, t], model[b, t]) if r > 0)
                    for t in range(FORMAT.length) if scored[b, t]) / int(scored[b].sum()) for b in range(2)]
    result = kl_per_prompt(reference, model, tokens, MIXTURE.num_tokens, rows)
    torch.testing.assert_close(result, torch.tensor(expected, dtype=torch.float64), rtol=4 * gamma(FORMAT.length),
                               atol=0)
    assert torch.equal(kl_per_prompt(model, model, tokens, MIXTURE.num_tokens, rows), torch.zeros(2, dtype=torch.float64))


def test_ablating_no_head_or_with_the_prompts_own_outputs_changes_nothing_bit_for_bit():
    """No head: no hook. Every head replaced by its mean over one prompt, the prompt itself: the
    float32 outputs go through a float64 sum of one term and back, unchanged, so every later
    operation sees the same numbers."""
    model = random_roformer(SMALL, torch.float32)
    tokens = tiny_prompts(3, seed=8)
    unablated = model_predictor(model, MIXTURE.num_tokens)(tokens)
    means = mean_head_outputs(model, tokens, "cpu", batch_size=2)
    assert torch.equal(ablated_probabilities(model, tokens, MIXTURE.num_tokens, [], means), unablated)
    own = mean_head_outputs(model, tokens[:1], "cpu", batch_size=1)
    every_head = [(layer, head) for layer in range(SMALL.num_layers) for head in range(SMALL.num_heads)]
    assert torch.equal(ablated_probabilities(model, tokens[:1], MIXTURE.num_tokens, every_head, own), unablated[:1])


def test_an_ablated_head_reads_its_mean_in_its_own_columns_and_the_other_heads_are_untouched():
    model = random_roformer(SMALL, torch.float64)
    tokens, reference = tiny_prompts(3, seed=9), tiny_prompts(5, seed=10)
    means = mean_head_outputs(model, reference, "cpu", batch_size=5)
    seen = {}
    d = SMALL.head_dim

    def record(module, inputs):
        seen["mixed"] = inputs[0].clone()

    def recorded() -> torch.Tensor:
        handle = model.blocks[0].attn.out.register_forward_pre_hook(record)
        try:
            model(tokens)
        finally:
            handle.remove()
        return seen["mixed"]

    clean = recorded()
    with mean_ablation(model, [(0, 2)], means):
        ablated = recorded()  # registered after the ablating hook, so it runs after it
    assert torch.equal(ablated[..., 2 * d:3 * d], means[0, :, 2 * d:3 * d].expand(3, -1, -1))
    assert torch.equal(ablated[..., :2 * d], clean[..., :2 * d]) and torch.equal(ablated[..., 3 * d:], clean[..., 3 * d:])


def test_the_hooks_are_removed_after_the_block_also_on_an_exception():
    model = random_roformer(SMALL, torch.float32)
    tokens = tiny_prompts(2, seed=11)
    means = mean_head_outputs(model, tokens, "cpu", batch_size=2)
    with pytest.raises(RuntimeError, match="inside"):
        with mean_ablation(model, [(0, 0), (2, 1)], means):
            assert len(model.blocks[2].attn.out._forward_pre_hooks) == 1
            raise RuntimeError("inside")
    with pytest.raises(ValueError, match="^tokens: prompts of 10 positions; expected 35"):
        with mean_ablation(model, [(1, 3)], means):
            model(tokens[:, :10])
    assert all(not block.attn.out._forward_pre_hooks for block in model.blocks)


@pytest.mark.long_running
@pytest.mark.xdist_group("transformer-lens")
def test_mean_ablation_equals_the_same_ablation_through_transformer_lens_hook_z():
    """Float64 both. TransformerLens's ``hook_z`` (B, N, H, d_head) is the input of our
    ``attn.out`` split into heads; its means, taken in TransformerLens, differ from ours only by
    the reordered sums before them, and the ablated logits then by
    :func:`rounding.reordered_forward_tolerance` (every sub-block and the unembedding). The
    ablation itself moves the logits by far more."""
    from empirical.interop.transformer_lens_interop import to_hooked_transformer

    model = random_roformer(SMALL, torch.float64)
    hooked = to_hooked_transformer(model)
    tokens, reference = tiny_prompts(3, seed=12), tiny_prompts(6, seed=13)
    heads = [(0, 1), (2, 0), (2, 3)]
    means = mean_head_outputs(model, reference, "cpu", batch_size=6)
    with torch.no_grad():
        _, cache = hooked.run_with_cache(reference)

        def replacer(layer: int):
            def hook(z, hook):
                z = z.clone()
                for block, head in heads:
                    if block == layer:
                        z[:, :, head] = cache[f"blocks.{layer}.attn.hook_z"][:, :, head].mean(0)
                return z

            return hook

        theirs = hooked.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", replacer(layer))
                                                          for layer in {block for block, _ in heads}])
        with mean_ablation(model, heads, means):
            ours = model(tokens)
        unablated = model(tokens)
    bound = reordered_forward_tolerance(torch.float64, SMALL, FORMAT.length, sub_blocks_before("logits", SMALL),
                                        float(ours.abs().max()))
    assert float((ours - theirs).abs().max()) <= bound
    assert float((ours - unablated).abs().max()) > 1e6 * bound


def test_ablation_effects_are_paired_differences_of_the_kls():
    model = random_roformer(SMALL, torch.float64)
    tokens, reference = tiny_prompts(4, seed=14), tiny_prompts(4, seed=15)
    means = mean_head_outputs(model, reference, "cpu", batch_size=4)
    uniform = torch.full((4, FORMAT.length, MIXTURE.num_tokens), 1 / MIXTURE.num_tokens, dtype=torch.float64)
    result = ablation_effects(model, tokens, FORMAT, MIXTURE.num_tokens, {"uniform": uniform}, {"g": [(1, 2)]}, means,
                              draws=3, seed=0)
    assert result["references"] == ["uniform", "unablated model"]
    rows = torch.ones(FORMAT.length, dtype=torch.bool)
    before = model_predictor(model, MIXTURE.num_tokens)(tokens)
    after = ablated_probabilities(model, tokens, MIXTURE.num_tokens, [(1, 2)], means)
    change = kl_per_prompt(uniform, after, tokens, MIXTURE.num_tokens, rows) - kl_per_prompt(
        uniform, before, tokens, MIXTURE.num_tokens, rows)
    entry = result["groups"]["g"]
    assert entry["all_positions"]["uniform"]["change"]["mean"] == float(change.mean())
    assert result["before"]["all_positions"]["unablated model"]["mean"] == 0.0
    assert entry["heads"] == [{"layer": 2, "head": 2}] and len(entry["random_heads"]) == 3
    assert len(entry["test_sequence"]["uniform"]["random_change_by_draw"]) == 3


def test_bad_arguments_are_refused_naming_them():
    patterns = stacked(uniform_causal(6), batch=1)
    tokens = torch.zeros(1, 6, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^offset: 6; expected an integer in 1\.\.5"):
        previous_token_sums(patterns, 6)
    with pytest.raises(ValueError, match=r"^patterns: shape \(1, 6, 6\); expected \(B, L, H, N, N\)"):
        previous_token_sums(patterns[0, 0], 1)
    with pytest.raises(ValueError, match="^order: 0; expected an integer >= 1"):
        induction_keys(tokens, MIXTURE.num_tokens, 0)
    with pytest.raises(ValueError, match=r"^keys: shape \(1, 5, 5\); expected \(1, 6, 6\)"):
        induction_sums(patterns, torch.zeros(1, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^heads\[1\]: \(3, 0\); expected \(layer, head\) with layer in 0\.\.2"):
        check_heads([(0, 0), (3, 0)], SMALL)
    model = RoFormer(SMALL)
    with pytest.raises(ValueError, match=r"^means: shape \(3, 6, 16\); expected \(3, N, 32\)"):
        with mean_ablation(model, [(0, 0)], torch.zeros(3, 6, 16)):
            pass
    with pytest.raises(ValueError, match="^batch_size: 0; expected an integer >= 1"):
        mean_head_outputs(model, tokens, "cpu", 0)
    with pytest.raises(ValueError, match="^random_draws: 0; expected an integer >= 1"):
        HeadsSettings(random_draws=0)


HEADS_ARGV = ["--prompts", "8", "--reference-prompts", "8", "--fresh-tasks", "4", "--random-draws", "2",
              "--top-heads", "1", "--ceiling-particles", "4"]


@pytest.mark.long_running
def test_heads_command_writes_every_number_and_the_figure(tmp_path, capsys):
    printed, report = command_report("heads", tmp_path, capsys, HEADS_ARGV)
    assert set(report["scores"]) == {"trained", "random-init"}
    assert len(report["scores"]["trained"]["induction 1"]["score"]) == 2  # layers
    assert report["ceiling"]["particles"] == 4
    assert report["ablation"]["references"] == ["ngram 1", "ngram 2", "ngram 3", "ceiling", "unablated model"]
    assert set(report["ablation"]["groups"]) == {"previous-token", "induction"} == set(printed["selection"])
    assert (tmp_path / "heads" / "heads.png").stat().st_size > 0
    with figures_recorded_not_drawn():  # drawn above
        assert hmmtf.main(["heads", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "none"), *HEADS_ARGV[:-1],
                           "0"]) == 0
    assert json.loads((tmp_path / "none" / "heads.json").read_text())["ceiling"] is None


def test_heads_command_refuses_bad_options_in_one_line(tmp_path, capsys):
    assert_refused_in_one_line("heads", tmp_path, capsys, [
        (["--top-heads", "3"], "top_heads: 3; expected at most half of the model's 4 heads"),
        (["--random-draws", "0"], "argument --random-draws: 0; expected an integer >= 1"),
        (["--ceiling-particles", "-1"], "argument --ceiling-particles: -1; expected an integer >= 0")])
