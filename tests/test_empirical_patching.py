"""Activation patching: a patch with the network's own activation changes nothing; the hand-built
network moves exactly as its formula ``W_T x'_test`` says; on a planted network whose residual
stream carries the hidden state linearly, state forcing reaches the exact counterfactual and the
four controls do not; bad input is refused with the argument named; ``hmmtf analyze --sections
patching`` end to end. (Parity of a patch with TransformerLens's hooks:
tests/test_empirical_transformer_lens.py.)"""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import construction
import hmm
import hmmtf
from empirical.analysis.networks import HAND_BUILT_STEPS
from empirical.analysis.patching import (
    CENTROID,
    CONTROLS,
    ForcingItems,
    capped_items,
    check_threshold,
    exact_history_changes,
    hand_built_history_changes,
    history_corruptions,
    kl_divergence,
    patched_next_token,
    recovered_fraction,
    state_forcing,
)
from empirical.analysis.patching_figures import plot_state_forcing
from empirical.analysis.report import AnalysisConfig
from empirical.training.model import ResidualPatch, RoFormer, RoFormerConfig, apply_patches, check_patches
from recorded_figures import figures_recorded_not_drawn
from rounding import (gamma, least_squares_rounding, reordered_forward_tolerance, row_sum_deviation,
                      sub_blocks_before, unit_roundoff)
from test_empirical_transformer_lens import random_roformer
import tiny_pipeline

CONFIG = RoFormerConfig(vocab_size=5, num_layers=3, num_heads=2, width=16)
FORMAT = hmm.PROMPT_FORMATS["tiny"]


def tokens(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (3, 20), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_patching_the_networks_own_activation_changes_nothing():
    model, prompts = random_roformer(CONFIG, torch.float32), tokens()
    logits, cache = model.run_with_cache(prompts)
    for layer in range(CONFIG.num_layers):
        for position in (0, 7, 19):
            own = cache[f"blocks.{layer}.hook_resid_post"][:, position]
            patched, patched_cache = model.run_with_cache(prompts, [ResidualPatch(layer, position, own)])
            assert torch.equal(patched, logits)
            assert all(torch.equal(patched_cache[name], value) for name, value in cache.items())
            zero = torch.zeros(CONFIG.width)
            assert torch.equal(model(prompts, [ResidualPatch(layer, position, zero, "add")]), model(prompts))


@torch.no_grad()
def test_a_patch_acts_from_its_position_on_and_add_is_replace_by_the_sum():
    model, prompts = random_roformer(CONFIG, torch.float32), tokens()
    _, cache = model.run_with_cache(prompts)
    stream = cache["blocks.1.hook_resid_post"][:, 7]
    shift = torch.randn(3, CONFIG.width, generator=torch.Generator().manual_seed(2))
    added, added_cache = model.run_with_cache(prompts, [ResidualPatch(1, 7, shift, "add")])
    replaced, _ = model.run_with_cache(prompts, [ResidualPatch(1, 7, stream + shift)])
    assert torch.equal(added, replaced)
    assert torch.equal(added_cache["blocks.1.hook_resid_post"][:, 7], stream + shift)  # the cache records the patch
    unpatched = model(prompts)
    fast = model(prompts, [ResidualPatch(1, 7, shift, "add")])
    assert torch.equal(fast[:, :7], unpatched[:, :7])  # causal: earlier positions are untouched
    change = (fast[:, 7:] - unpatched[:, 7:]).abs().amax(-1)
    assert change[:, 0].min() > 0.1 and change.min() > 1e-5  # ... and every later one moves
    # The fused and recording paths agree: one function, summed in two orders.
    bound = reordered_forward_tolerance(torch.float32, CONFIG, prompts.shape[1], sub_blocks_before("logits", CONFIG),
                                        float(fast.abs().max()))
    torch.testing.assert_close(fast, added, rtol=0, atol=bound)


def test_bad_patches_are_refused_with_the_argument_named():
    model, prompts = random_roformer(CONFIG, torch.float32), tokens()
    vector = torch.zeros(CONFIG.width)
    cases = [
        (ResidualPatch(3, 0, vector), r"patches\[0\]\.layer: 3; expected an integer in 0\.\.2"),
        (ResidualPatch(-1, 0, vector), r"patches\[0\]\.layer: -1; expected an integer in 0\.\.2"),
        (ResidualPatch(0, 20, vector), r"patches\[0\]\.position: 20; expected an integer in 0\.\.19"),
        (ResidualPatch(0, 0, torch.zeros(15)), r"patches\[0\]\.vector: shape \(15,\); expected \(16,\) or \(3, 16\)"),
        (ResidualPatch(0, 0, torch.zeros(2, 16)), r"patches\[0\]\.vector: shape \(2, 16\); expected \(16,\) or \(3, 16\)"),
    ]
    for patch, message in cases:
        with pytest.raises(ValueError, match=message):
            model(prompts, [patch])
        with pytest.raises(ValueError, match=message):
            model.run_with_cache(prompts, [patch])
    with pytest.raises(ValueError, match=r"mode: 'swap'; expected one of \('replace', 'add'\)"):
        ResidualPatch(0, 0, vector, "swap")
    with pytest.raises(ValueError, match="vector: list; expected a floating-point tensor"):
        ResidualPatch(0, 0, [0.0] * 16)
    tiny = RoFormer(RoFormerConfig(vocab_size=5, num_layers=2, num_heads=2, width=16))
    prompts = hmm.sample_prompts(hmm.mixture_preset("tiny"), 2, FORMAT, seed=0).tokens
    delimiter = FORMAT.demo_length  # the first delimiter
    with pytest.raises(ValueError, match=rf"position: {delimiter} is a delimiter of the prompt format"):
        patched_next_token(tiny, prompts, FORMAT, delimiter, 4, 8, torch.device("cpu"), 0, torch.zeros(2, 16))
    with pytest.raises(ValueError, match=rf"position: {FORMAT.length}; expected an integer in 0\.\.{FORMAT.length - 1}"):
        patched_next_token(tiny, prompts, FORMAT, FORMAT.length, 4, 8, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"patches\[0\]\.layer: 2; expected an integer in 0\.\.1"):
        patched_next_token(tiny, prompts, FORMAT, 3, 4, 8, torch.device("cpu"), 2, torch.zeros(2, 16))
    with pytest.raises(ValueError, match=r"state_threshold: 0\.5; expected a number in \(0\.5, 1\]"):
        check_threshold(0.5)
    with pytest.raises(ValueError, match=r"state_threshold: 1\.5"):
        AnalysisConfig(state_threshold=1.5)
    with pytest.raises(ValueError, match=r"sections: \('probes', 'patch'\); expected distinct names among"):
        AnalysisConfig(sections=("probes", "patch"))


def hand_built_case(seed: int):
    """A tiny-mixture prompt (p = 4), the replacement tokens for r = 1..3, and the hand-built
    network's history patching of it (L = 4, HAND_BUILT_STEPS GD steps)."""
    mixture = hmm.mixture_preset("tiny")
    prompts = hmm.sample_prompts(mixture, 1, FORMAT, seed=seed)
    replacements = history_corruptions(prompts, mixture, 3, torch.Generator().manual_seed(seed))[0]
    return prompts.tokens[0], replacements, hand_built_history_changes(prompts.tokens[0], replacements, 4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hand_built_history_patch_moves_exactly_as_its_formula(seed):
    """The slot patch changes the prediction by ``W_T (x' - x)``, x' = x with block r set to
    ``e(o')``, computed here from the reference's GD iterates; the whole-column swap changes
    nothing before ``history.r`` and the same from ``history.r`` on.

    Tolerance: clean and patched predictions are each within the construction-error bound
    ``eps A`` of their formula (the patched slot is exact, so the patched network leaks no more
    than the clean one), hence the change within ``2 eps A``, plus float64 rounding of the GD
    and read-out sums: ``T + 1`` layers, each a sum over N columns of products of pL entries of
    size <= ``M = max(1, L max|W_T| + 1)``, i.e. ``(T + 1) N pL u M`` (Higham, section 3.1)."""
    prompt, replacements, changes = hand_built_case(seed)
    p, L = 4, 4
    spec = construction.parameters_for_prompt(prompt.numpy(), p, L, HAND_BUILT_STEPS)
    X, Y, x = construction.reference.regression_problem(prompt.numpy(), p, L)
    N = len(prompt) + 1
    W = construction.reference.gd_iterates(X, Y, spec.eta, HAND_BUILT_STEPS, N)[-1]
    rounding = (HAND_BUILT_STEPS + 1) * N * p * L * unit_roundoff() * max(1.0, L * np.abs(W).max() + 1)
    tolerance = 2 * spec.error_bound(N) + rounding
    assert changes.error_bound == spec.error_bound(N)
    for r in range(1, L):
        modified = x.copy()
        modified[r * p : (r + 1) * p] = np.eye(p)[int(replacements[r - 1])]
        expected = torch.as_tensor(W @ (modified - x))
        assert float(changes.slot_error[r - 1]) <= spec.error_bound(N) + rounding
        assert float((changes.slot[r - 1] - expected).abs().max()) <= tolerance
        written = changes.layers.index(f"history.{r}")
        for index, layer in enumerate(changes.layers):
            swap = changes.column_swap[r - 1, index]
            reference = expected if index >= written else torch.zeros_like(expected)
            assert float((swap - reference).abs().max()) <= tolerance, (r, layer)
        assert float(expected.abs().max()) > 1e3 * tolerance  # the change itself is not below the tolerance


def recovered_fraction_rounding(network_change: torch.Tensor, exact_change: torch.Tensor) -> float:
    """Bound on the float64 rounding of :func:`recovered_fraction`'s ``f = sum d.D / sum D^2`` over the
    ``n`` entries of the changes: ``gamma_n sum |d D| / sum D^2 + (gamma_n + u) |f|``, first order in u.

    Each sum rounds its n products once and adds them in some order: ``gamma_n`` of the sum of their
    magnitudes (Higham, Lemma 3.1), which for ``D^2`` is the sum itself; the division rounds once."""
    n = exact_change.numel()
    products = network_change * exact_change
    fraction = float(products.sum() / exact_change.pow(2).sum())
    magnitudes = float(products.abs().sum() / exact_change.pow(2).sum())
    return gamma(n) * magnitudes + (gamma(n) + unit_roundoff()) * abs(fraction)


def test_recovered_fraction_is_the_least_squares_slope():
    generator = torch.Generator().manual_seed(0)
    exact = torch.randn(40, 5, generator=generator, dtype=torch.float64)
    network = 0.3 * exact + 0.05 * torch.randn(40, 5, generator=generator, dtype=torch.float64)
    result = recovered_fraction(network, exact, torch.arange(40))
    features, targets = exact.reshape(-1, 1).numpy(), network.reshape(-1, 1).numpy()
    slope = np.linalg.lstsq(features, targets[:, 0], rcond=None)[0][0]
    # Both are the slope x.y / x.x: the ratio of sums within its rounding, lstsq (an SVD) within least_squares_rounding.
    tolerance = recovered_fraction_rounding(network, exact) + least_squares_rounding(features, targets, [[slope]])
    assert abs(result["fraction"] - slope) <= tolerance
    assert result["ci_low"] < result["fraction"] < result["ci_high"] and result["ci_high"] - result["ci_low"] < 0.1
    # Exact: d * d and d.pow(2) are the same rounded squares, summed alike, so the ratio is x / x.
    assert recovered_fraction(exact, exact, torch.arange(40))["fraction"] == 1.0


def test_memory_change_is_zero_beyond_its_window_and_exact_with_the_whole_sequence():
    """``P_L`` reads the last L tokens: a change r >= L steps back leaves it unchanged (exactly),
    and with L = the test sequence's length it is the exact predictive."""
    mixture = hmm.mixture_preset("tiny")
    prompts = hmm.sample_prompts(mixture, 12, FORMAT, seed=5)
    replacements = history_corruptions(prompts, mixture, 3, torch.Generator().manual_seed(2))
    memory = exact_history_changes(prompts, mixture, replacements, history_length=2)
    assert float(memory[0].abs().max()) > 1e-3 and bool((memory[1:] == 0).all())
    # Exact: with the whole sequence as its window, memory_predictor is next_token_probs on the same tokens.
    assert torch.equal(exact_history_changes(prompts, mixture, replacements, FORMAT.test_length),
                       exact_history_changes(prompts, mixture, replacements))


PLANTED_FORMAT = hmm.PromptFormat(num_demos=3, demo_length=8, test_length=8)


def planted_mixture() -> hmm.Mixture:
    """Two tasks of 3 states with disjoint tokens (task k emits 3k..3k+2), so the task is read off
    any token: state s of task k emits token 3k+s with probability 0.92; sticky transitions 0.8."""
    S, p = 3, 6
    transition = torch.full((S, S), 0.1, dtype=torch.float64) + 0.7 * torch.eye(S, dtype=torch.float64)
    emissions = []
    for task in range(2):
        emission = torch.zeros(S, p, dtype=torch.float64)
        emission[:, 3 * task : 3 * task + 3] = 0.04 + 0.88 * torch.eye(S, dtype=torch.float64)
        emissions.append(emission)
    initial = torch.full((S,), 1.0 / S, dtype=torch.float64)
    return hmm.Mixture.uniform(hmm.HMM(initial.expand(2, S), transition.expand(2, S, S), torch.stack(emissions)))


class PlantedStateNetwork(torch.nn.Module):
    """A network whose residual stream carries the hidden state linearly, with the RoFormer's
    patching interface. After every (identity) block the stream at a token position is the basis
    vector ``e_{3k + s_hat}``, with k the prompt's task and ``s_hat`` the most likely state under the
    exact filter of the current segment; logits ``= U x`` with ``U[o, 3k + s] = log (T_k O_k)[s, o]``
    (delimiter row 0; a probability 0, another task's token, enters as ``log 1e-30``, so that a
    zero weight times it is 0, not NaN). So a stream equal to ``e_{3k+s}`` predicts ``(T_k O_k)[s]``
    to within 1e-29."""

    def __init__(self, mixture: hmm.Mixture, num_layers: int = 2) -> None:
        super().__init__()
        self.mixture = mixture
        K, S, p = mixture.num_tasks, mixture.hmm.num_states, mixture.num_tokens
        self.config = SimpleNamespace(num_layers=num_layers, width=K * S + 2, vocab_size=p + 1)
        readout = torch.zeros(p + 1, self.config.width, dtype=torch.float64)
        next_token = mixture.hmm.transition @ mixture.hmm.emission  # (K, S, p)
        readout[:p, : K * S] = next_token.clamp_min(1e-30).log().reshape(K * S, p).T
        self.readout = readout

    def stream(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        tasks = tokens[:, 0] // self.mixture.hmm.num_states
        x = torch.zeros(*tokens.shape, self.config.width, dtype=torch.float64)
        segment, in_segment = PLANTED_FORMAT.segment_index[:length], PLANTED_FORMAT.position_in_segment[:length]
        for index in torch.unique(segment).tolist():
            columns = torch.nonzero((segment == index) & (in_segment >= 0)).squeeze(1)
            beliefs = hmm.filter_beliefs(self.mixture.hmm[tasks], tokens[:, columns]).filtered
            code = tasks[:, None] * self.mixture.hmm.num_states + beliefs.argmax(-1)
            x[:, columns] = torch.nn.functional.one_hot(code, self.config.width).double()
        return x

    def run_with_cache(self, tokens: torch.Tensor, patches=()):
        check_patches(patches, self.config.num_layers, self.config.width, tokens.shape)
        x = self.stream(tokens)
        cache = {"hook_embed": x}
        for layer in range(self.config.num_layers):
            x = apply_patches(x, layer, patches)
            cache[f"blocks.{layer}.hook_resid_post"] = x
        return x @ self.readout.T, cache

    def forward(self, tokens: torch.Tensor, patches=()) -> torch.Tensor:
        return self.run_with_cache(tokens, patches)[0]


def planted_kl_rounding(mixture: hmm.Mixture) -> float:
    """Bound on the computed ``KL((T O)[s] || q)`` (float64) when the planted network predicts q
    from the code of the same state s, first order in u: ``3 gamma_S + 10 u Lambda + 6 u +
    gamma_{p-1} + e_T + e_O + 2 p^2 1e-30``, with ``Lambda`` the largest ``|log (T O)[s, o]|`` over
    the nonzero entries and ``e_T``, ``e_O`` the row-sum deviations of T and O
    (:func:`rounding.row_sum_deviation`).

    The counterfactual and the read-out are sums of S nonnegative products, ``pi (1 + gamma_S)``
    entrywise for the exact ``pi = (T O)[s]``; a logarithm (within 1 ulp) adds ``2 u Lambda``: both
    logs are within ``delta = gamma_S + 2 u Lambda`` of ``log pi``. The exact log-softmax of the
    logits is ``log pi_o + delta_o - log Z``, ``Z = sum_o pi_o e^delta_o`` plus the clamped tokens'
    weights (at most ``p^2 1e-30`` together, since ``max pi >= 1/p``; they enter Z and the computed
    sum: twice that), and ``sum_o pi_o`` is within ``e_T + e_O`` of 1. The computed softmax rounds
    the shift by the maximum (``u Lambda``: logs of probabilities lie in ``[-Lambda, 0]``), the
    exponential (2u), the sum of p terms, the largest of them 1 (``gamma_{p-1}``, and each term's
    own ``u Lambda + 2u``), the normalisation (2u), and the KL takes its log (``2 u Lambda``). So every ``|log p_o - log q_o|`` is at most the bound; the KL's
    subtraction, products and sum round relative to these O(u) terms (second order), and the
    counterfactual sums to 1 + O(u)."""
    u = unit_roundoff()
    next_token = mixture.hmm.transition @ mixture.hmm.emission
    largest_log = float(-next_token[next_token > 0].log().min())
    clamped = 2 * mixture.num_tokens**2 * 1e-30
    return (3 * gamma(mixture.hmm.num_states) + 10 * u * largest_log + 6 * u + gamma(mixture.num_tokens - 1)
            + row_sum_deviation(mixture.hmm.transition) + row_sum_deviation(mixture.hmm.emission) + clamped)


def smallest_state_kl(mixture: hmm.Mixture) -> float:
    """``min KL((T O)[s] || (T O)[s0])`` over the tasks and the pairs of states ``s != s0``: the
    least KL an unpatched item can have."""
    next_token = mixture.hmm.transition @ mixture.hmm.emission  # (K, S, p)
    pairs = kl_divergence(next_token[:, :, None], next_token[:, None, :])  # (K, S, S0)
    return float(pairs[:, ~torch.eye(mixture.hmm.num_states, dtype=torch.bool)].min())


def planted_forcing(network: PlantedStateNetwork | None = None, threshold: float = 0.9,
                    max_items: int | None = None) -> dict:
    """:func:`state_forcing` of ``network`` (default: the planted network) on 64 centroid and 24
    patched prompts of the planted mixture, items at a state posterior >= ``threshold``, at most
    ``max_items`` of them (None: every item found)."""
    mixture = planted_mixture()
    centroid_prompts = hmm.sample_prompts(mixture, 64, PLANTED_FORMAT, seed=0)
    patched_prompts = hmm.sample_prompts(mixture, 24, PLANTED_FORMAT, seed=1)
    return state_forcing(PlantedStateNetwork(mixture) if network is None else network, mixture, centroid_prompts,
                         patched_prompts, threshold, 0, 16, torch.device("cpu"), max_items)


@pytest.fixture(scope="module")
def uncapped_forcing() -> dict:
    """:func:`planted_forcing` with every item: computed once for the tests that read it, which
    share a worker (a second or two of bootstraps)."""
    return planted_forcing()


@pytest.mark.xdist_group("planted-forcing")
def test_state_forcing_reaches_the_counterfactual_on_a_planted_network_and_the_controls_do_not(uncapped_forcing):
    mixture = planted_mixture()
    forcing = uncapped_forcing
    assert forcing["items"] >= 30 and forcing["prompts_with_items"] >= 15
    # Unpatched, the planted network predicts (T O)[s0] of the state it is in: the floor is 0 up to
    # rounding, every item's KL within planted_kl_rounding, and so their mean.
    rounding = planted_kl_rounding(mixture)
    assert abs(forcing["own_state_floor"]["mean"]) <= rounding
    assert forcing["before"]["ci_low"] > 0.3
    for layer, result in forcing["by_layer"].items():
        kl = result["kl"]
        # The centroid of identical one-hot codes is exact (sums of ones over their count): the patch
        # writes the target state's code, and the KL is 0 up to the same rounding.
        assert abs(kl[CENTROID]["mean"]) <= rounding, layer
        for control in CONTROLS:
            assert kl[control]["ci_low"] > 0.05, (layer, control)
            assert result["control_minus_patched"][control]["ci_low"] > 0.05, (layer, control)
        # A resampled ratio of sums is at most the largest |patched KL| over the least KL before.
        assert result["patched_over_before"]["ci_high"] <= rounding / smallest_state_kl(mixture)
        assert result["uses_state"], layer


def test_capped_items_draw_a_uniform_subset_in_order_and_below_the_cap_draw_nothing():
    items = ForcingItems(*(torch.arange(20) + 100 * column for column in range(6)))
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    assert capped_items(items, 20, generator) is items and capped_items(items, None, generator) is items
    assert torch.equal(generator.get_state(), state)
    capped = capped_items(items, 7, generator)
    kept = capped.prompt
    assert len(kept) == 7 and torch.equal(kept, torch.unique(kept)) and int(kept.max()) < 20
    assert all(torch.equal(column, kept + 100 * index) for index, column in enumerate(capped))
    for value in (0, True, 2.5):
        with pytest.raises(ValueError, match=rf"^max_items: {value!r}; expected an integer >= 1, or None for no cap$"):
            capped_items(items, value, generator)


@pytest.mark.xdist_group("planted-forcing")
def test_state_forcing_under_a_cap_it_reaches_patches_that_many_items_and_above_it_changes_nothing(uncapped_forcing):
    uncapped = uncapped_forcing
    found = uncapped["items"]
    assert uncapped["items_found"] == found and uncapped["max_items"] is None
    assert planted_forcing(max_items=found) == {**uncapped, "max_items": found}
    capped = planted_forcing(max_items=10)
    assert (capped["max_items"], capped["items_found"], capped["items"]) == (10, found, 10)
    assert sum(capped["items_by_test_position"]) == 10 and capped["prompts_with_items"] <= 10
    assert all(result["uses_state"] for result in capped["by_layer"].values())


def test_state_forcing_verdict_is_no_for_a_network_that_ignores_its_stream():
    """Control of the decision rule: with a read-out that ignores the state code, no patch moves
    the output, no difference is above 0, and no layer is said to use the state."""
    network = PlantedStateNetwork(planted_mixture())
    network.readout = torch.zeros_like(network.readout)
    forcing = planted_forcing(network)
    for result in forcing["by_layer"].values():
        assert not result["uses_state"]
        # Exact: with a zero read-out every logit is 0, so every prediction is the same uniform vector,
        # patched or not, every patched KL is its item's KL before, and the ratio is a sum over itself.
        assert result["patched_over_before"]["ratio"] == 1.0


def test_state_forcing_without_items_records_why_runs_no_pass_and_draws_the_reason(tmp_path):
    """No posterior of the planted HMMs reaches 1 (every token has probability 0.04 in the other
    states), so there is no item: the section says why, and the network is never run."""
    network = PlantedStateNetwork(planted_mixture())
    network.run_with_cache = network.forward = None  # a call would fail
    forcing = planted_forcing(network, threshold=1.0)
    assert forcing["items"] == 0 and forcing["items_by_test_position"] == [0] * PLANTED_FORMAT.test_length
    assert {"before", "own_state_floor", "by_layer"}.isdisjoint(forcing)
    assert forcing["not_run"] == ("no test position of the 24 patched prompts has a state posterior >= 1.0 and two "
                                  "other states with at least 5 such centroid positions (0 of 512 centroid test "
                                  "positions have a state posterior >= 1.0)")
    plot_state_forcing(forcing, tmp_path / "forcing.png")
    assert (tmp_path / "forcing.png").stat().st_size > 5_000


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_analyze_patching_section_end_to_end(tiny_run, tmp_path):
    argv = ["analyze", str(tiny_run / "checkpoint"), "--out", str(tmp_path), "--sections", "patching",
            "--centroid-prompts", "96", "--patching-prompts", "32", "--hand-built-prompts", "8",
            "--max-distance", "3", "--batch-size", "16", "--state-threshold", "0.8"]
    with figures_recorded_not_drawn() as figures:  # the paper-mini pipeline draws them
        assert hmmtf.main(argv) == 0
    report = json.loads((tmp_path / "analysis.json").read_text())
    assert report["command"] == "hmmtf " + " ".join(argv)
    assert report["git_commit"] == hmmtf.source_commit()
    assert {"shuffle", "probes", "offsets", "claims"}.isdisjoint(report)
    assert figures == [tmp_path / "patching_state_forcing.png", tmp_path / "patching_history.png"]
    forcing = report["patching"]["state_forcing"]
    assert list(forcing["by_layer"]) == ["layer 1", "layer 2"]
    assert set(forcing["by_layer"]["layer 1"]["kl"]) == {CENTROID, *CONTROLS}
    history = report["patching"]["history"]
    assert history["distances"] == [1, 2, 3] and history["hand-built"]["prompts"] == 4
    hand = history["hand-built"]
    assert hand["slot_patch_max_error"] <= 2 * hand["max_error_bound"]
    assert set(hand["slot_patch_vs_memory"]) == {"r=1", "r=2", "r=3"} and len(hand["memory_change_rms"]) == 3
    for r in (1, 2, 3):
        own = hand["by_distance"][f"r={r}"]["own"]
        # Hand-built: the response to o_{q-r} sits in the last column from history.r on, not before.
        assert own[f"history.{r}"]["fraction"] == pytest.approx(1.0, abs=1e-6)
        assert own["embedding"]["fraction"] == pytest.approx(0.0, abs=1e-6)
        trained = history["trained"]["by_distance"][f"r={r}"]["own"]
        # The last layer is the whole run: its fraction against itself is exactly 1 (recovered_fraction(x, x)).
        assert trained["layer 2"]["fraction"] == 1.0
