"""Analysis of networks: probes find a planted linear feature and not a shuffled one; the shuffle
metric is exactly 0 for a position-free network and large for a positional one; the hand-built
network's offset profiles; refusals; ``hmmtf analyze`` end to end on a tiny trained model."""
import json

import pytest
import torch

import hmm
import hmmtf
from construction.leak import layer_leak
from empirical.analysis.networks import centered_logits, hand_built_network, hand_built_weights
from empirical.analysis.offsets import (
    best_matching_heads,
    composed_history_attention,
    offset_profile,
    offset_sums,
    profile_similarity,
)
from empirical.analysis.probes import (
    bootstrap_interval,
    bootstrap_ratio_interval,
    check_distance,
    decoding_ceilings,
    probe_accuracy,
    probe_positions,
    probe_targets,
)
from empirical.analysis.claims import decoding_order, first_layer_at_ceiling
from empirical.analysis.shuffle import random_derangements, shuffle_change, shuffle_demonstrations, shuffle_pairs
from rounding import filtering_rounding, gamma, unit_roundoff
import tiny_pipeline

FORMAT = hmm.PROMPT_FORMATS["tiny"]
MIXTURE = hmm.mixture_preset("tiny")


def layer_attention(weights: dict[str, torch.Tensor], layer: str) -> torch.Tensor:
    """``weights[layer]``; ``ValueError`` naming the layer and the known names otherwise."""
    if layer not in weights:
        raise ValueError(f"layer: {layer!r}; expected one of {sorted(weights)}")
    return weights[layer]


def planted_stream(num_prompts: int, positions: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gaussian features (16 dims) whose label is the argmax of a fixed linear map of them (4 classes)."""
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(num_prompts * positions, 16, generator=generator)
    planted = torch.randn(16, 4, generator=torch.Generator().manual_seed(99))
    labels = (features @ planted).argmax(1)
    groups = torch.arange(num_prompts).repeat_interleave(positions)
    return features, labels, groups


def test_probe_finds_a_planted_linear_feature():
    train_x, train_y, _ = planted_stream(100, 20, seed=0)
    test_x, test_y, groups = planted_stream(50, 20, seed=1)
    result = probe_accuracy(train_x, train_y, test_x, test_y, groups)
    assert result.accuracy > 0.95
    assert result.ci_low <= result.accuracy <= result.ci_high
    assert result.ci_high - result.ci_low < 0.05


def test_probe_on_shuffled_labels_stays_at_chance():
    train_x, train_y, _ = planted_stream(100, 20, seed=0)
    test_x, test_y, groups = planted_stream(50, 20, seed=1)
    shuffled = train_y[torch.randperm(len(train_y), generator=torch.Generator().manual_seed(3))]
    result = probe_accuracy(train_x, shuffled, test_x, test_y, groups)
    chance = float(torch.bincount(test_y).max()) / len(test_y)
    assert result.ci_low < chance + 0.02
    assert result.accuracy < chance + 0.05


def test_bootstrap_interval_of_grouped_outcomes():
    # Half the prompts all right, half all wrong: accuracy 0.5, and the interval reflects 20
    # independent prompts (width about 2 * 1.96 * sqrt(0.25 / 20) = 0.44), not 400 positions.
    correct = torch.tensor([True] * 200 + [False] * 200)
    groups = torch.arange(20).repeat_interleave(20)
    low, high = bootstrap_interval(correct, groups)
    assert 0.2 < low < 0.35 and 0.65 < high < 0.8


def test_bootstrap_ratio_interval_is_a_ratio_of_sums_over_resampled_prompts():
    denominators = torch.rand(400, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    groups = torch.arange(20).repeat_interleave(20)
    low, high = bootstrap_ratio_interval(0.3 * denominators, denominators, groups)
    # Every resampled ratio: two sums of 20 groups of 20 positive terms (gamma_38 each, and u for
    # 0.3 d), one division; the quantile interpolates between two of them (2u more).
    ratio_rounding = gamma(80) + 2 * unit_roundoff()
    assert low == pytest.approx(0.3, rel=ratio_rounding, abs=0)
    assert high == pytest.approx(0.3, rel=ratio_rounding, abs=0)
    # The ratio of sums weighs prompts by their denominators: one heavy prompt at ratio 1 among
    # light ones at 0 gives about 100 / (100 + 19 * 1) = 0.84 when all are drawn.
    numerators = torch.zeros(20, dtype=torch.float64)
    numerators[0] = 100.0
    weights = torch.ones(20, dtype=torch.float64)
    weights[0] = 100.0
    low, high = bootstrap_ratio_interval(numerators, weights, torch.arange(20))
    assert 0.0 <= low < 0.84 < high <= 1.0


def test_probe_targets_are_read_at_the_right_positions():
    prompts = hmm.sample_prompts(MIXTURE, 3, FORMAT, seed=0)
    targets = probe_targets(prompts, 2)
    positions = torch.nonzero(FORMAT.position_in_segment >= 2).squeeze(1)
    assert torch.equal(targets["token 2 back"].view(3, -1), prompts.tokens[:, positions - 2])
    assert torch.equal(targets["state"].view(3, -1), prompts.states[:, positions])
    assert torch.equal(targets["task"].view(3, -1)[:, 0], prompts.task_ids)
    assert bool((targets["token 1 back"] < MIXTURE.delimiter).all())


def test_shuffled_prompt_moves_whole_demonstrations():
    prompts = hmm.sample_prompts(MIXTURE, 5, FORMAT, seed=1)
    orders = random_derangements(5, FORMAT.num_demos, torch.Generator().manual_seed(0))
    assert bool((orders != torch.arange(FORMAT.num_demos)).all())
    shuffled, move = shuffle_demonstrations(prompts.tokens, FORMAT, orders)
    assert torch.equal(shuffled.gather(1, move), prompts.tokens)
    stride = FORMAT.demo_length + 1
    for b in range(5):
        for slot, old in enumerate(orders[b].tolist()):
            assert torch.equal(shuffled[b, slot * stride:(slot + 1) * stride], prompts.tokens[b, old * stride:(old + 1) * stride])
    test = FORMAT.test_positions
    assert torch.equal(shuffled[:, test], prompts.tokens[:, test])


def content_scores(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """A position-free network: logit = table[token_i, token_j] (2 heads)."""
    table = torch.randn(2, MIXTURE.delimiter + 1, MIXTURE.delimiter + 1, generator=torch.Generator().manual_seed(5))
    return {"content": table[:, tokens[:, :, None], tokens[:, None, :]].permute(1, 0, 2, 3)}


def positional_scores(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """A purely positional network: logit = -(i - j) / 4 (1 head)."""
    index = torch.arange(tokens.shape[1], dtype=torch.float64)
    offsets = -(index[:, None] - index[None, :]) / 4
    return {"position": offsets.expand(tokens.shape[0], 1, -1, -1)}


def uniform_prompts(num_prompts: int, seed: int) -> torch.Tensor:
    """Prompts of the tiny format with uniformly random tokens (so no prompt has constant logits)."""
    tokens = torch.randint(MIXTURE.num_tokens, (num_prompts, FORMAT.length), generator=torch.Generator().manual_seed(seed))
    return tokens.masked_fill(FORMAT.is_delimiter, MIXTURE.delimiter)


def test_shuffle_metric_is_zero_without_positions_and_large_with_them():
    tokens = uniform_prompts(16, seed=2)
    orders = random_derangements(16, FORMAT.num_demos, torch.Generator().manual_seed(1))
    for min_context in (0, 3):
        content = shuffle_change(content_scores, tokens, FORMAT, orders, (min_context,))[min_context]["content"]
        assert content.shape == (16, 2)
        assert bool((content == 0).all())
        position = shuffle_change(positional_scores, tokens, FORMAT, orders, (min_context,))[min_context]["position"]
        # Every demonstration moves by a multiple of 9 positions, so every key's logit changes by
        # at least 9/4, about 1.5 times the logits' spread over the pairs (1.49 with all pairs).
        assert bool((position > 1.2).all())


def test_hand_built_history_layers_put_all_mass_at_offset_minus_r():
    """Each history layer's softmax leaves at most its leak ``eps`` (:mod:`construction.leak`) off
    offset -1, so the composition of r of them at most ``r eps`` off offset -r. float64 rounding
    adds, per layer, the softmax's normaliser (a sum of N terms) and one matrix product (N more),
    each within ``N u`` of the mass; then the profile's average over Q queries and its sum over
    5 offsets, within ``(Q + 5) u``."""
    tokens = hmm.sample_prompts(MIXTURE, 1, FORMAT, seed=3).tokens[0]
    network = hand_built_network(tokens, MIXTURE.num_tokens, max_distance=3)
    trace = network.forward(tokens.numpy())
    num_columns = len(tokens) + 1
    names = ["history.1", "history.2", "history.3"]
    queries = ~FORMAT.is_delimiter & (torch.arange(FORMAT.length) >= 4)
    per_layer = layer_leak(network.spec.beta, network.spec.theta, num_columns) + 2 * num_columns * unit_roundoff()

    def off_target_bound(layers: int) -> float:
        return layers * per_layer + (int(queries.sum()) + 5) * unit_roundoff()

    weights = hand_built_weights(trace)
    composed = composed_history_attention([trace.attn_weights[name][0] for name in names])
    for r, (name, matrix) in enumerate(zip(names, composed), start=1):
        direct = offset_profile(layer_attention(weights, name), queries, 4)[0]
        assert direct[1] == pytest.approx(1.0, abs=off_target_bound(1))
        chained = offset_profile(matrix[None, 1:, 1:], queries, 4)[0]
        assert chained[r] == pytest.approx(1.0, abs=off_target_bound(r))
        assert float(chained.sum()) == pytest.approx(1.0, abs=off_target_bound(r))


def test_best_matching_head_is_the_planted_one():
    trained = torch.full((2, 3, 5), 0.2, dtype=torch.float64)
    trained[1, 2] = torch.tensor([0.0, 0.0, 0.9, 0.0, 0.1], dtype=torch.float64)
    reference = {"history.3": torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0], dtype=torch.float64)}
    match = best_matching_heads(reference, trained)["history.3"]
    assert (match["layer"], match["head"]) == (2, 2)
    assert match["similarity"] == 0.9  # min(0.9, 1.0) plus exact zeros: no rounding
    assert float(profile_similarity(reference["history.3"], reference["history.3"])) == 1.0


def test_offset_means_of_planted_logits_and_attention():
    """Causal logits ``-(i - j)/4 + c_i`` (a per-query constant c_i): centred, their mean at offset -d
    is ``-d/4`` minus the mean of ``-(i - j)/4`` over the query's keys, averaged over the queries;
    attention one-hot at ``i - 2`` has mean 1 at offset -2 and 0 elsewhere."""
    length, max_offset = 12, 5
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    constants = torch.linspace(-3.0, 7.0, length, dtype=torch.float64)[:, None]
    scores = (-(i - j) / 4 + constants).masked_fill(j > i, float("-inf")).expand(2, 3, length, length)
    queries = torch.arange(length) >= max_offset
    sums, counts = offset_sums(centered_logits(scores), queries, max_offset)
    expected = [float(torch.stack([-(d - torch.arange(q + 1.0).mean()) / 4 for q in range(max_offset, length)]).mean())
                for d in range(max_offset + 1)]
    assert counts.tolist() == [2 * (length - max_offset)] * (max_offset + 1)
    # A centred logit: the score (u), minus the mean of at most `length` scores of either sign
    # (gamma_length times the largest), minus once more (u); summed over `count` of them and
    # divided; the expected side: a mean of at most `length` integers, a difference and a mean of
    # length - max_offset values. Everything below the largest score M in magnitude.
    largest = float(scores[torch.isfinite(scores)].abs().max())
    count = int(counts[0])
    offsets_rounding = (gamma(length + 3) + gamma(count + 1) + gamma(length + 2)
                        + gamma(length - max_offset + 1)) * largest
    torch.testing.assert_close(sums / counts, torch.tensor([expected] * 3, dtype=torch.float64), rtol=0,
                               atol=offsets_rounding)
    shifted = torch.diag(torch.ones(length - 2), -2)[None, None]
    mass, count = offset_sums(shifted, queries, max_offset)
    assert (mass / count).tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0, 0.0]]


def test_bad_inputs_are_refused_with_the_argument_named():
    with pytest.raises(ValueError, match=r"layer: 'history.9'; expected one of \['history.1'\]"):
        layer_attention({"history.1": torch.zeros(1, 2, 2)}, "history.9")
    with pytest.raises(ValueError, match=r"max_distance: 0; expected an integer in 1..7"):
        check_distance(0, FORMAT)
    with pytest.raises(ValueError, match=r"max_distance: 8; expected an integer in 1..7"):
        probe_targets(hmm.sample_prompts(MIXTURE, 1, FORMAT, seed=0), 8)
    with pytest.raises(ValueError, match=r"max_offset: 9; expected an integer in 1..8"):
        offset_profile(torch.eye(9)[None], torch.ones(9, dtype=torch.bool), 9)
    with pytest.raises(ValueError, match=r"min_context: 8; expected an integer in 0..7"):
        shuffle_pairs(FORMAT, 8)
    with pytest.raises(ValueError, match=r"num_demos: 1; expected at least 2"):
        random_derangements(3, 1, torch.Generator())


def test_decoding_ceilings_of_one_task_are_its_filter():
    """With one task the task is known (ceiling 1) and the state decoder is the argmax of the
    HMM's filtered belief on the current segment (hmm.filter_beliefs, a second implementation)."""
    single = hmm.Mixture.single(MIXTURE.hmm[0])
    prompts = hmm.sample_prompts(single, 6, FORMAT, seed=5)
    ceilings = decoding_ceilings(single, prompts, 2)
    assert ceilings["task"]["accuracy"] == ceilings["task"]["expected"] == 1.0
    assert all(ceilings[f"token {k} back"]["accuracy"] == 1.0 for k in (1, 2))
    positions = torch.nonzero(probe_positions(FORMAT, 2)).squeeze(1)
    starts = positions - FORMAT.position_in_segment[positions]  # first position of each one's segment
    hits, confidence = [], []
    for b in range(6):
        for position, start in zip(positions.tolist(), starts.tolist()):
            belief = hmm.filter_beliefs(single.hmm, prompts.tokens[b, start : position + 1]).filtered[..., -1, :].flatten()
            hits.append(int(belief.argmax()) == int(prompts.states[b, position]))
            confidence.append(float(belief.max()))
    # The same hits (an integer count over the same n, each division correctly rounded); the
    # confidences: two filters of one segment, each within its bound (rounding.filtering_rounding),
    # then a mean of n positive terms on each side.
    assert ceilings["state"]["accuracy"] == sum(hits) / len(hits)
    S, n = single.hmm.num_states, len(confidence)
    filtered = filtering_rounding(S, max(FORMAT.demo_length, FORMAT.test_length))
    assert ceilings["state"]["expected"] == pytest.approx(sum(confidence) / n, rel=2 * (filtered + gamma(n)),
                                                          abs=0)
    assert ceilings["state"]["ci_low"] <= ceilings["state"]["accuracy"] <= ceilings["state"]["ci_high"]


def planted_probe_curve(accuracies: list[float], half_width: float) -> list[dict]:
    return [{"accuracy": a, "ci_low": a - half_width, "ci_high": a + half_width} for a in accuracies]


def test_the_decoding_order_rule_on_planted_probe_curves():
    """A network whose state probe crosses 95% of its ceiling clearly before the task probe passes
    "state first"; the mirror network passes "task first"; overlapping intervals decide nothing."""
    early = planted_probe_curve([0.2, 0.945, 0.97, 0.98], 0.01)
    late = planted_probe_curve([0.1, 0.2, 0.5, 0.97], 0.01)
    ceiling = 1.0
    assert first_layer_at_ceiling(early, ceiling) == {"bar": 0.95, "estimate": 2, "earliest": 1, "latest": 2}
    assert first_layer_at_ceiling(late, ceiling)["estimate"] == 3
    assert decoding_order(task=first_layer_at_ceiling(late, ceiling), state=first_layer_at_ceiling(early, ceiling)) \
        == "state first"
    assert decoding_order(task=first_layer_at_ceiling(early, ceiling), state=first_layer_at_ceiling(late, ceiling)) \
        == "task first"
    wide = planted_probe_curve([0.2, 0.945, 0.97, 0.98], 0.2)
    assert decoding_order(task=first_layer_at_ceiling(wide, ceiling), state=first_layer_at_ceiling(early, ceiling)) \
        == "not separated"
    never = planted_probe_curve([0.1, 0.2, 0.3, 0.4], 0.01)
    assert first_layer_at_ceiling(never, ceiling)["latest"] is None
    assert decoding_order(task=first_layer_at_ceiling(never, ceiling), state=first_layer_at_ceiling(early, ceiling)) \
        == "state first"


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_analyze_command_end_to_end(tiny_analysis):
    out, argv, figures = tiny_analysis
    report = json.loads((out / "analysis.json").read_text())
    assert report["command"] == "hmmtf " + " ".join(argv)
    assert report["git_commit"] == hmmtf.source_commit()
    assert figures == [out / f"{name}.png" for name in ("shuffle", "probes_task_state", "probes_previous_tokens",
                                                        "attention_trained", "attention_hand_built_vs_trained",
                                                        "offset_profiles", "offset_summary")]
    # Hand-built: o_{t-k} is exact from history layer k on and not before it.
    hand = report["probes"]["hand-built"]
    for k in (1, 2, 3):
        assert hand[f"token {k} back"][f"history.{k}"]["accuracy"] == 1.0
        assert hand[f"token {k} back"]["embedding"]["accuracy"] < 0.9
    # Hand-built shuffle: history layers are positional; with in-segment pairs (min_context = 3 =
    # its window) the GD and read-out logits see only content and do not change.
    shuffle = report["shuffle"]["hand-built"]["min_context=3"]
    assert shuffle["history.1"]["mean"] > 0.5
    for layer in ("gd.1", "gd.2", "readout"):
        assert shuffle[layer]["mean"] < 1e-9
    assert set(report["probes"]["trained"]) == {"task", "state", "token 1 back", "token 2 back", "token 3 back"}
    assert len(report["offsets"]["trained"]) == 2 and len(report["offsets"]["trained"][0][0]) == 6
    summary = report["offsets"]["summary"]  # two segments back: 2 * (8 + 1) = 18 offsets
    assert summary["offsets"] == [-d for d in range(19)] and len(summary["logit"][1][0]) == 19
    assert set(report["offsets"]["best_match_composed_random_init"]) == {"history.1", "history.2", "history.3"}
    assert report["claims"]["shuffle"]["min_context=0"]["lower_layers"] == ["layer 1"]
    assert report["claims"]["task_vs_state"]["decision"] in ("state first", "task first", "not separated")
    for target in ("task", "state"):
        ceiling = report["probes"]["ceiling"][target]
        assert 0 < ceiling["ci_low"] <= ceiling["accuracy"] <= ceiling["ci_high"] <= 1
