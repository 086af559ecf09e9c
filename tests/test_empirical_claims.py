"""The decision rules of claims 1 and 3 (``empirical.analysis.claims``) on planted data: a
network built to satisfy a claim passes it, one built to violate it fails. Claim 2's rule is
tested in test_empirical_analysis.py."""
import pytest
import torch

import hmm
from empirical.analysis.claims import locality_order, peak_interval, previous_token_rules
from empirical.analysis.networks import hand_built_scores, roformer_scores
from empirical.analysis.shuffle import random_derangements, shuffle_change
from empirical.training.model import RoFormer, RoFormerConfig

FORMAT = hmm.PROMPT_FORMATS["tiny"]
MIXTURE = hmm.mixture_preset("tiny")
MAX_DISTANCE = 3


def noisy(level: float, count: int = 64, seed: int = 0) -> torch.Tensor:
    return level + 0.05 * torch.randn(count, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_locality_rule_on_planted_per_prompt_metrics():
    local_then_global = locality_order(lower=noisy(1.0), upper=noisy(0.1, seed=1), baseline_upper=noisy(0.8, seed=2))
    assert local_then_global["decision"] == "holds"
    assert local_then_global["lower_minus_upper"]["ci_low"] > 0.8
    assert locality_order(noisy(0.1), noisy(1.0, seed=1), noisy(0.8, seed=2))["decision"] == "reversed"
    assert locality_order(noisy(0.5), noisy(0.5, seed=1), noisy(0.8, seed=2))["decision"] == "not separated"
    # Lower more positional than upper, but the upper layers no more position-free than chance.
    assert locality_order(noisy(1.0), noisy(0.8, seed=1), noisy(0.5, seed=2))["decision"] == "not separated"


def test_locality_rule_leaves_out_nan_prompts_and_refuses_bad_shapes():
    lower = noisy(1.0)
    lower[3] = float("nan")
    assert locality_order(lower, noisy(0.1, seed=1), noisy(0.8, seed=2))["prompts"] == 63
    with pytest.raises(ValueError, match=r"shapes \(64,\), \(3,\), \(64,\); expected three equal \(B,\) shapes"):
        locality_order(noisy(1.0), noisy(0.1)[:3], noisy(0.8))


def per_prompt_means(changes: dict[str, torch.Tensor], layers: list[str]) -> torch.Tensor:
    return torch.stack([changes[name].nanmean(1) for name in layers]).mean(0)


def test_hand_built_network_satisfies_claim_1_and_a_random_roformer_does_not():
    """The hand-built history and label layers read positions only, its GD and read-out layers
    content only (exactly 0 on pairs with a full context window): the rule says "holds". A random
    RoFormer's layers are all about equally positional: it fails."""
    tokens = hmm.sample_prompts(MIXTURE, 12, FORMAT, seed=4).tokens
    orders = random_derangements(12, FORMAT.num_demos, torch.Generator().manual_seed(1))
    hand_built = shuffle_change(hand_built_scores(MIXTURE.num_tokens, MAX_DISTANCE), tokens, FORMAT, orders,
                                (MAX_DISTANCE,))[MAX_DISTANCE]
    lower = [name for name in hand_built if name.startswith(("history", "label"))]
    upper = [name for name in hand_built if name not in lower]
    assert upper == ["gd.1", "gd.2", "readout"]
    torch.manual_seed(0)
    random_network = RoFormer(RoFormerConfig(vocab_size=MIXTURE.num_tokens + 1, num_layers=4, num_heads=2, width=32))
    random_changes = shuffle_change(roformer_scores(random_network, torch.device("cpu")), tokens, FORMAT, orders,
                                    (MAX_DISTANCE,))[MAX_DISTANCE]
    random_lower, random_upper = per_prompt_means(random_changes, ["layer 1", "layer 2"]), \
        per_prompt_means(random_changes, ["layer 3", "layer 4"])
    assert locality_order(per_prompt_means(hand_built, lower), per_prompt_means(hand_built, upper),
                          random_upper)["decision"] == "holds"
    assert locality_order(random_lower, random_upper, random_upper)["decision"] != "holds"


def curve(accuracies: list[float], half_width: float = 0.01) -> list[dict]:
    return [{"accuracy": a, "ci_low": a - half_width, "ci_high": a + half_width} for a in accuracies]


CHANCE = {k: curve([0.2] * 6) for k in (1, 2, 3)}


def test_peak_interval_spans_the_layers_level_with_the_peak():
    assert peak_interval(curve([0.2, 0.5, 0.9, 0.895, 0.6, 0.3])) == \
        {"layer": 2, "accuracy": 0.9, "earliest": 2, "latest": 3}


def test_previous_token_rules_on_curves_built_to_satisfy_claim_3():
    """Rise then fall, lower for larger k, peaking later: every rule holds."""
    paper_like = {1: curve([0.2, 0.9, 0.8, 0.6, 0.5, 0.4]),
                  2: curve([0.2, 0.3, 0.7, 0.6, 0.5, 0.4]),
                  3: curve([0.2, 0.25, 0.3, 0.5, 0.4, 0.3])}
    rules = previous_token_rules(paper_like, CHANCE)
    assert rules["informative"] == [1, 2, 3]
    assert (rules["falls_with_k"], rules["peaks_later"], rules["rise_then_fall"], rules["decision"]) == \
        ("holds", "holds", "holds", "holds")


def test_previous_token_rules_on_curves_built_to_violate_claim_3():
    """Curves that rise monotonically to the last layer, all peaking there: they fall with k, but
    never fall after a peak and do not peak later."""
    monotone = {1: curve([0.2, 0.4, 0.6, 0.8, 0.85, 0.9]),
                2: curve([0.2, 0.3, 0.4, 0.5, 0.55, 0.6]),
                3: curve([0.2, 0.25, 0.3, 0.35, 0.38, 0.4])}
    rules = previous_token_rules(monotone, CHANCE)
    assert (rules["falls_with_k"], rules["peaks_later"], rules["rise_then_fall"], rules["decision"]) == \
        ("holds", "not separated", "not reproduced", "partly")
    # Larger k decoded better and earlier: reversed.
    inverted = {1: monotone[3], 2: monotone[2], 3: curve([0.2, 0.9, 0.8, 0.6, 0.5, 0.4])}
    rules = previous_token_rules(inverted, CHANCE)
    assert rules["falls_with_k"] == "reversed" and rules["peaks_later"] == "reversed"


def test_previous_token_rules_need_two_distances_above_chance():
    rules = previous_token_rules(CHANCE, CHANCE)
    assert rules["informative"] == [] and rules["decision"] == "untestable"
    with pytest.raises(ValueError, match=r"random_init: distances \[1, 2\]; expected the trained ones \[1, 2, 3\]"):
        previous_token_rules(CHANCE, {1: CHANCE[1], 2: CHANCE[2]})
