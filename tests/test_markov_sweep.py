"""The Markov sweep (:mod:`empirical.studies.markov`): the decision rule and the censoring of escape steps
on planted loss curves and planted predictors, the read-back kernel of a RoFormer set to output the
true kernel, Wilson intervals against SciPy, aggregation of planted runs, the verdict counts (Wilson
intervals in closed form) and tables of planted runs, docs/markov.md holding the tables of the
committed sweeps, attention scores, wiring of one short training run, and input validation."""
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import binomtest, norm

from empirical.studies.markov.aggregate import (
    WILSON_Z,
    aggregate_cells,
    aggregate_sides,
    count_record,
    hardest_cell,
    median_escape_step,
    plateau_survival,
    verdict_counts,
    wilson_interval,
)
from empirical.studies.markov.attention import attention_scores, induction_targets
from empirical.studies.markov.chains import (
    bigram_loss_variance,
    binary_kernel,
    is_memoryless,
    reference_losses,
    stationary_distribution,
)
from hmmtf.commands.markov import VERDICT_SWEEPS, verdict_markdown, write_sweep
from empirical.studies.markov.config import ARCHITECTURES, MarkovSweepConfig
from empirical.studies.markov.criterion import (
    TRAP_Z,
    escape_step,
    is_trapped,
    summarise_predictions,
    trap_tolerance,
    unigram_bigram_gap,
)
from empirical.studies.markov.runs import MarkovStream, evaluate_run, held_out_sequences, train_and_evaluate
from empirical.training.model import RoFormer, RoFormerConfig
from markov_oracles import (
    bigram_log_probs,
    constant_read_back_rounding,
    entropy_rate_rounding,
    memory_coordinate_rounding,
    planted_bigram_rounding,
    stationary_entropy_rounding,
)
from recorded_figures import figures_recorded_not_drawn
from rounding import gamma, least_squares_rounding, unit_roundoff
import hmmtf

ROOT = Path(__file__).resolve().parents[1]


def planted_run(init: str, architecture: str, p: float, q: float, seed: int, relative: float,
                escape: int | None) -> dict:
    """A run record whose final loss sits at ``relative`` of the way from the bigram to the
    unigram line, judged by the decision rule for 256 held-out sequences of 64 tokens."""
    gap = unigram_bigram_gap(p, q)
    pi_1 = p / (p + q)
    kernel = (1 - relative) * binary_kernel(p, q) + relative * np.array([[1 - pi_1, pi_1], [1 - pi_1, pi_1]])
    return {
        "init": init, "architecture": architecture, "p": p, "q": q, "seed": seed,
        "excess": relative * gap, "relative_excess": relative,
        "trapped": is_trapped(relative * gap, trap_tolerance(p, q, 256, 64)),
        "memory_coordinate": 1.0 - relative, "escape_step": escape,
        "read_back_kernel": kernel.tolist(), "read_back_spread": [[0.0, 0.0], [0.0, 0.0]],
        "loss_curve": {"step": [10, 20], "loss": [0.7, reference_losses(binary_kernel(p, q)).bigram + relative * gap]},
    }


PLANTED = {
    # (init, architecture, p, q): (relative excess, escape step) of seeds 0, 1, 2, 3
    ("gaussian", "1-layer-tied", 0.9, 0.8): [(1.0, None), (0.98, None), (0.0, 40), (0.002, 450)],
    ("gaussian", "1-layer-tied", 0.2, 0.3): [(0.01, 30), (0.0, 20), (0.0, 20), (0.0, 30)],
    ("lowrank", "1-layer-tied", 0.9, 0.8): [(1.0, None), (1.0, None), (1.0, None), (0.3, 490)],
}


def planted_runs() -> list[dict]:
    return [planted_run(*key, seed, relative, escape)
            for key, values in PLANTED.items() for seed, (relative, escape) in enumerate(values)]


def test_aggregation_counts_the_planted_traps():
    runs = planted_runs()
    runs.reverse()  # aggregation must not depend on the order of the runs
    cells = {(c["init"], c["architecture"], c["p"], c["q"]): c for c in aggregate_cells(runs)}
    assert set(cells) == set(PLANTED)
    # 0.002 x gap is below the tolerance (about 0.06 x gap here), 0.01 x gap of (0.2, 0.3) is not.
    expected = {("gaussian", "1-layer-tied", 0.9, 0.8): (2, 2), ("gaussian", "1-layer-tied", 0.2, 0.3): (0, 0),
                ("lowrank", "1-layer-tied", 0.9, 0.8): (4, 3)}
    assert trap_tolerance(0.9, 0.8, 256, 64) > 0.002 * unigram_bigram_gap(0.9, 0.8)
    assert trap_tolerance(0.2, 0.3, 256, 64) > 0.01 * unigram_bigram_gap(0.2, 0.3)
    for key, (trapped, censored) in expected.items():
        assert cells[key]["seeds"] == 4
        assert (cells[key]["trapped"], cells[key]["censored"]) == (trapped, censored)
        assert cells[key]["trapped_fraction"] == trapped / 4
        assert cells[key]["trapped_interval"] == list(wilson_interval(trapped, 4))
        assert cells[key]["relative_excess"] == [relative for relative, _ in PLANTED[key]]  # copied: exact
    assert cells[("gaussian", "1-layer-tied", 0.2, 0.3)]["escape_step"] == [30, 20, 20, 30]
    lowrank = cells[("lowrank", "1-layer-tied", 0.9, 0.8)]
    # Seed 0 is planted on the unigram line: its rows are pi exactly, pi_1 = p / (p + q) as planted_run forms it.
    assert lowrank["p_hat"][0] == 0.9 / (0.9 + 0.8) and lowrank["q_hat"][0] == 1 - 0.9 / (0.9 + 0.8)
    references = reference_losses(binary_kernel(0.9, 0.8))
    assert lowrank["bigram_loss"] == references.bigram and lowrank["unigram_loss"] == references.unigram
    sides = {(r["init"], r["side"]): r for r in aggregate_sides(runs)}
    assert (sides[("gaussian", "p + q > 1")]["trapped"], sides[("gaussian", "p + q < 1")]["trapped"]) == (2, 0)
    assert sides[("gaussian", "p + q > 1")]["trapped_relative_excess"] == [0.98, 1.0]
    assert sides[("gaussian", "p + q < 1")]["trapped_relative_excess"] is None
    assert sides[("lowrank", "p + q > 1")]["trapped_relative_excess"] == [0.3, 1.0]


VERDICT_PLANTED = {
    # (init, architecture, p, q): (relative excess, escape step) of seeds 0, 1, 2, 3
    ("gaussian", "1-layer-tied", 0.9, 0.8): [(1.0, None), (1.0, None), (0.0, 40), (0.0, 60)],
    ("gaussian", "1-layer-tied", 0.5, 0.9): [(1.0, None), (0.0, 100), (1.0, None), (0.0, 120)],
    ("gaussian", "1-layer-tied", 0.2, 0.3): [(0.0, 20), (0.0, 30), (0.0, 30), (0.0, 40)],
    ("lowrank", "1-layer-tied", 0.9, 0.8): [(1.0, None)] * 4,
    ("lowrank", "1-layer-tied", 0.5, 0.9): [(1.0, None)] * 4,
    ("lowrank", "1-layer-tied", 0.2, 0.3): [(0.0, 50)] * 4,
    ("gaussian", "1-layer-untied", 0.2, 0.3): [(0.0, 30)] * 4,
}


def verdict_planted_runs() -> list[dict]:
    return [planted_run(*key, seed, relative, escape)
            for key, values in VERDICT_PLANTED.items() for seed, (relative, escape) in enumerate(values)]


def test_verdict_counts_of_planted_runs_have_closed_form_wilson_intervals():
    """Per arm: 0/n, n/n and n/2-of-n trapped, whose 95% Wilson intervals are
    ``[0, z^2 / (n + z^2)]``, ``[n / (n + z^2), 1]`` and ``1/2 -+ z / (2 sqrt(n + z^2))``."""
    z2 = WILSON_Z**2
    records = {(r["init"], r["architecture"]): r for r in verdict_counts(verdict_planted_runs())}
    assert list(records) == [("gaussian", "1-layer-tied"), ("lowrank", "1-layer-tied"), ("gaussian", "1-layer-untied")]
    assert hardest_cell(verdict_planted_runs()) == (0.9, 0.8)  # p + q = 1.7 against 1.4 and 0.5

    def check(record, trapped, seeds, interval):
        """Both sides are within rounding of the exact interval of the float ``z``, whose ends lie in
        [0, 1]. :func:`wilson_interval`: the centre within ``gamma_5`` relative (``z^2``, two sums
        of nonnegative terms, the quotient; ``/2`` is exact), the half-width within ``gamma_6``
        (``z^2`` and ``k (n - k) / n``, their sum, the square root, the product with z, the quotient
        by ``n + z^2``; ``/4`` is exact), their sum or difference one more rounding, and the clamps
        only bring it nearer: ``gamma_7 (centre + half) <= gamma_7``. The closed forms: at most
        ``gamma_4`` (``z^2``, ``n + z^2``, a square root, a quotient, the sum with 1/2)."""
        assert (record["trapped"], record["seeds"]) == (trapped, seeds)
        assert record["trapped_interval"] == pytest.approx(interval, rel=0, abs=gamma(7) + gamma(4))

    gaussian, lowrank, untied = records.values()
    check(gaussian["p + q < 1"], 0, 4, [0.0, z2 / (4 + z2)])
    half = {n: WILSON_Z / (2 * math.sqrt(n + z2)) for n in (4, 8)}
    check(gaussian["p + q > 1"], 4, 8, [0.5 - half[8], 0.5 + half[8]])
    check(gaussian["at_hardest_cell"], 2, 4, [0.5 - half[4], 0.5 + half[4]])
    check(lowrank["p + q > 1"], 8, 8, [8 / (8 + z2), 1.0])
    check(lowrank["at_hardest_cell"], 4, 4, [4 / (4 + z2), 1.0])
    assert gaussian["hardest_cell"] == [0.9, 0.8]
    assert untied["p + q > 1"] is None and untied["at_hardest_cell"] is None and untied["escape"] == []
    # Kaplan-Meier medians: S(60) = 2/4 at (0.9, 0.8), S(120) = 2/4 at (0.5, 0.9); all censored: never.
    assert gaussian["escape"] == [
        {"p": 0.5, "q": 0.9, "median": 120, "first": 100, "last": 120, "censored": 2, "seeds": 4},
        {"p": 0.9, "q": 0.8, "median": 60, "first": 40, "last": 60, "censored": 2, "seeds": 4}]
    assert lowrank["escape"][1] == {"p": 0.9, "q": 0.8, "median": None, "first": None, "last": None, "censored": 4,
                                    "seeds": 4}


def test_median_escape_step_is_never_when_more_than_half_are_censored():
    runs = [{"escape_step": step} for step in (None, None, None, 50)]
    assert median_escape_step(runs) is None
    assert median_escape_step(runs[1:] + [{"escape_step": 70}]) == 70  # S(50) = 3/4, S(70) = 2/4


def test_verdict_markdown_of_planted_sweeps():
    """Two planted sweeps (the second trains one arm for longer): columns per sweep labelled by
    budget, "not run" where an arm or side is missing, escape steps as median (first-last)."""
    long_runs = [run | {"escape_step": 300} for run in verdict_planted_runs()
                 if (run["init"], run["architecture"], run["p"], run["q"]) == ("lowrank", "1-layer-tied", 0.9, 0.8)]
    for run in long_runs:
        run["trapped"] = False
    text = verdict_markdown([{"config": {"steps": 500}, "runs": verdict_planted_runs()},
                             {"config": {"steps": 2000}, "runs": long_runs}])
    lines = text.splitlines()
    assert ("| arm | p + q < 1, 500 steps | p + q > 1, 500 steps | (0.9, 0.8), 500 steps | p + q > 1, 2000 steps "
            "| (0.9, 0.8), 2000 steps |") in lines
    assert ("| lowrank, 1-layer-tied | 0/4 [0.00, 0.49] | 8/8 [0.68, 1.00] | 4/4 [0.51, 1.00] | 0/4 [0.00, 0.49] "
            "| 0/4 [0.00, 0.49] |") in lines
    assert "| gaussian, 1-layer-untied | 0/4 [0.00, 0.49] | not run | not run | not run | not run |" in lines
    assert ("| arm | (0.5, 0.9), 500 steps | (0.9, 0.8), 500 steps | (0.9, 0.8), 2000 steps |") in lines
    assert ("| gaussian, 1-layer-tied | 120 (100-never, 2/4 censored) | 60 (40-never, 2/4 censored) | not run |") in lines
    assert "| lowrank, 1-layer-tied | never (4/4 censored) | never (4/4 censored) | 300 (300-300) |" in lines


def test_docs_hold_the_verdict_tables_of_the_committed_sweeps():
    """docs/markov.md quotes ``hmmtf markov-verdict`` on the committed results verbatim, and every
    ``k/n [low, high]`` it states anywhere is the 95% Wilson interval of ``k/n``."""
    doc = (ROOT / "docs" / "markov.md").read_text()
    generated = verdict_markdown([json.loads((ROOT / path).read_text()) for path in VERDICT_SWEEPS])
    assert generated in doc, "docs/markov.md is stale: paste the output of hmmtf markov-verdict"
    stated = re.findall(r"(\d+)/(\d+) \[(\d\.\d\d), (\d\.\d\d)\]", doc)
    assert len(stated) > 50
    for trapped, seeds, low, high in stated:
        assert [low, high] == [f"{bound:.2f}" for bound in wilson_interval(int(trapped), int(seeds))], (trapped, seeds)


def planted_curve(p: float, q: float, budget: int, escape: int | None, log_every: int = 10) -> dict:
    """A training-loss curve logged every ``log_every`` steps up to ``budget``: on the unigram line
    until ``escape`` (never if None or later than the budget), on the bigram line from then on."""
    references = reference_losses(binary_kernel(p, q))
    steps = list(range(log_every, budget + 1, log_every))
    on_plateau = [escape is None or step < escape for step in steps]
    return {"step": steps, "loss": [references.unigram if flat else references.bigram for flat in on_plateau]}


@pytest.mark.parametrize(
    "escape, trapped, escape_seen",
    [
        (None, True, None),   # on the unigram line throughout: trapped, censored at the budget
        (10, False, 10),      # on the bigram line from the first log on
        (480, False, 480),    # escapes late but within the budget: an event at 480, not censored
        (520, True, None),    # would escape after the budget: still on the plateau at 500, censored
    ],
)
def test_decision_rule_and_censoring_on_planted_loss_curves(escape, trapped, escape_seen):
    """The decision rule on the last logged loss of a planted curve (the tolerance of a log
    window: 32 x 10 sequences of 64 predicted tokens), and its escape step censored at the budget."""
    p, q, budget = 0.9, 0.8, 500
    curve = planted_curve(p, q, budget, escape)
    final_excess = curve["loss"][-1] - reference_losses(binary_kernel(p, q)).bigram
    assert is_trapped(final_excess, trap_tolerance(p, q, 320, 65)) is trapped
    assert escape_step(curve, p, q) == escape_seen
    runs = [{"escape_step": escape_step(curve, p, q), "trapped": trapped}]
    assert count_record(runs)["censored"] == (escape_seen is None)
    assert plateau_survival(runs, [budget]) == [1.0 if escape_seen is None else 0.0]


def test_tolerance_is_four_standard_deviations_of_a_held_out_loss():
    """``trap_tolerance = 4 sqrt(V_(T-1) / B)``; it halves when B quadruples, and a loss just above
    (below) it is (is not) trapped. With the default held-out set it is below 14% of the
    unigram-bigram gap in every default cell (38% at (0.1, 0.5) with 256 sequences)."""
    p, q = 0.5, 0.9
    tolerance = trap_tolerance(p, q, 256, 64)
    assert TRAP_Z == 4.0
    # The same operations on the same numbers: equal exactly.
    assert tolerance == 4 * math.sqrt(bigram_loss_variance(binary_kernel(p, q), 63) / 256)
    # Exact too: dividing by 1024 = 4 x 256 and halving scale by powers of 2, which a correctly
    # rounded square root commutes with.
    assert trap_tolerance(p, q, 1024, 64) == tolerance / 2
    assert is_trapped(1.001 * tolerance, tolerance) and not is_trapped(0.999 * tolerance, tolerance)
    config = MarkovSweepConfig()
    for cell in config.cells():
        assert trap_tolerance(*cell, config.eval_sequences, config.sequence_length) < 0.14 * unigram_bigram_gap(*cell)


def excess_rounding(kernel: np.ndarray, relative, logit_range=0.0) -> float:
    """Bound on ``|excess|`` (:func:`summarise_predictions`) of a float64 predictor that depends on the
    current token only, ``q_ij = P_ij exp(d_ij - c_i) (1 + r_ij)`` with ``|r_ij| <= relative_ij``,
    ``c_i = log sum_j P_ij exp(d_ij)`` (a normalised perturbation of the logits, as a softmax's) and
    ``max_j d_ij - min_j d_ij <= logit_range_i``: ``max_i sum_j P_ij (relative_ij + 10 u |log P_ij|) +
    logit_range_i^2 / 8``, first order in u.

    A term is ``P_ij (log P_ij - log q_ij)``: numpy's log of P is within 4 ulps (``8 u |log P|``),
    torch's log of q within 1 ulp (``2 u |log q|``) of ``log P_ij + d_ij - c_i + log(1 + r_ij)``.
    Weighted by ``P_ij`` the logit terms sum to ``c_i - sum_j P_ij d_ij``, between 0 (Jensen) and
    ``logit_range_i^2 / 8`` (Hoeffding's lemma). The subtraction, the product and the means over
    tokens, positions and sequences scale this O(u) sum by ``1 + O((m + T + B) u)``: second order.
    """
    terms = kernel * (relative + 10 * unit_roundoff() * np.abs(np.log(kernel)))
    return float((terms.sum(axis=1) + np.asarray(logit_range) ** 2 / 8).max())


def test_planted_bigram_and_unigram_predictors_are_classified():
    """The kernel itself reaches the bigram line up to rounding (excess 0, memory 1, read-back =
    kernel); predicting ``pi`` everywhere sits on the unigram line (relative excess 1 up to the
    sampling error of the prefixes: the mean KL over 256 x 64 positions, a few per cent here) and is
    trapped."""
    p, q = 0.8, 0.7
    kernel = binary_kernel(p, q)
    tokens = held_out_sequences(kernel, 256, 64, seed=0)
    bigram = summarise_predictions(bigram_log_probs(kernel, tokens).exp(), tokens, p, q)
    excess = excess_rounding(kernel, planted_bigram_rounding(kernel))
    assert abs(bigram["excess"]) <= excess
    bigram_line = reference_losses(kernel).bigram  # final loss: the line plus the excess, rounded once
    assert bigram["final_loss"] == pytest.approx(bigram_line, rel=0, abs=excess + unit_roundoff() * bigram_line)
    assert not bigram["trapped"]
    # Every position with token i predicts exp(log P_i): the read-back averages copies of it.
    read_back_error = float((kernel * planted_bigram_rounding(kernel)).max()) + constant_read_back_rounding(tokens)
    assert bigram["memory_coordinate"] == pytest.approx(1.0, rel=0,
                                                        abs=memory_coordinate_rounding(kernel, read_back_error, 1.0))
    # The kernel's sampled loss passes the test the tolerance was derived for.
    assert abs(bigram["sampled_loss"] - reference_losses(kernel).bigram) < bigram["tolerance"]
    unigram = summarise_predictions(torch.from_numpy(stationary_distribution(kernel)).expand(256, 64, 2), tokens, p, q)
    assert unigram["relative_excess"] == pytest.approx(1.0, abs=0.05)  # sampling error, not rounding (docstring)
    assert unigram["trapped"]
    # The read-back averages copies of pi itself.
    read_back_error = constant_read_back_rounding(tokens)
    assert unigram["memory_coordinate"] == pytest.approx(0.0, rel=0,
                                                         abs=memory_coordinate_rounding(kernel, read_back_error, 0.0))
    np.testing.assert_allclose(unigram["read_back_kernel"], np.tile(stationary_distribution(kernel), (2, 1)),
                               rtol=0, atol=read_back_error)


def exact_bigram_roformer(kernel: np.ndarray) -> RoFormer:
    """A float64 one-layer untied RoFormer whose logits at every position are ``log kernel[x_t]``:
    the block writes nothing (output projections 0), the embeddings are ``+-u`` with ``u`` orthogonal
    to the all-ones vector, the final LayerNorm maps them to ``n_x = +-sqrt(d) u / |u| + e_3`` (its
    offset), and the unembedding solves ``U [n_0, n_1] = [log P_0, log P_1]``."""
    width = 8
    model = RoFormer(RoFormerConfig(vocab_size=2, num_layers=1, num_heads=1, width=width)).double()
    direction = torch.zeros(width, dtype=torch.float64)
    direction[:2] = torch.tensor([1.0, -1.0])
    with torch.no_grad():
        model.blocks[0].attn.out.weight.zero_()
        model.blocks[0].mlp[-1].weight.zero_()
        model.embed.weight.copy_(torch.stack([-direction, direction]))
        model.ln_final.bias.copy_(torch.eye(width, dtype=torch.float64)[2])
        normalised = model.ln_final(model.embed.weight)  # rows n_0, n_1
        model.unembed.weight.copy_(torch.from_numpy(np.log(kernel)).T @ torch.linalg.pinv(normalised.T))
    return model


def exact_bigram_logit_error(model: RoFormer, kernel: np.ndarray) -> np.ndarray:
    """Bound on ``|logit_j - log P_xj|`` of :func:`exact_bigram_roformer`'s forward pass at a position
    with current token x, as an ``(x, j)`` array: ``|n_x| lsq + gamma_D (|U| |n_x|)_j + 8 u |log P_xj|``.

    The block adds exact zeros (zero output weights and biases) to the embedding, and the final
    LayerNorm of a row is one float64 function of that row (a row-wise kernel), so the position
    reaches the unembedding with the very row ``n_x`` that U was solved for. The exact minimum-norm
    solution maps ``n_x`` to numpy's ``log P_x``, within 4 ulps (``8 u |log P|``) of the exact one;
    the computed U is within ``lsq =`` :func:`rounding.least_squares_rounding` of it in the Frobenius
    norm, which moves a logit by at most ``lsq |n_x|``; the product over the width D rounds by
    ``gamma_D (|U| |n_x|)_j``.
    """
    with torch.no_grad():
        rows = model.ln_final(model.embed.weight).numpy()
    weights, targets = model.unembed.weight.detach().numpy(), np.log(kernel)
    solver = least_squares_rounding(rows, targets, weights) * np.linalg.norm(rows, axis=1, keepdims=True)
    return solver + gamma(rows.shape[1]) * (np.abs(rows) @ np.abs(weights).T) + 8 * unit_roundoff() * np.abs(targets)


def softmax_rounding(log_probs: np.ndarray) -> np.ndarray:
    """Relative rounding of torch's float64 softmax of each row of logits near ``log_probs`` beyond
    the exact softmax of its computed input: ``u (max_j |log_probs_j| + m + 3)``. The difference
    from the largest logit rounds by u times it, which exp makes relative; exp is within 1 ulp (2u),
    the sum of m positive terms within ``gamma_{m-1}``, the reciprocal and the product within 2u."""
    return unit_roundoff() * (np.abs(log_probs).max(axis=1, keepdims=True) + log_probs.shape[1] + 3)


@pytest.mark.parametrize("p, q", [(0.9, 0.6), (0.1, 0.3)])
def test_read_back_of_an_exact_bigram_roformer_is_the_true_kernel(p, q):
    """Logits within :func:`exact_bigram_logit_error` of ``log P[x_t]`` (``d``, normalised away by
    the softmax), softmax rounding r: probabilities ``P exp(d - c) (1 + r)``, within ``P (range(d) +
    r)`` of P, and the read-back averages copies of them (:func:`constant_read_back_rounding`)."""
    kernel = binary_kernel(p, q)
    tokens = held_out_sequences(kernel, 64, 32, seed=1)
    model = exact_bigram_roformer(kernel)
    run = evaluate_run(model, p, q, tokens)
    logit_range = 2 * exact_bigram_logit_error(model, kernel).max(axis=1)
    relative = softmax_rounding(np.log(kernel))
    read_back_error = float((kernel * (logit_range[:, None] + relative)).max()) + constant_read_back_rounding(tokens)
    np.testing.assert_allclose(run["read_back_kernel"], kernel, rtol=0, atol=read_back_error)
    # The block writes 0 + its biases at every position: one prediction per current token.
    np.testing.assert_allclose(run["read_back_spread"], 0.0, rtol=0, atol=constant_read_back_rounding(tokens))
    assert abs(run["excess"]) <= excess_rounding(kernel, relative, logit_range) and not run["trapped"]


@pytest.mark.parametrize("successes, trials", [(0, 4), (2, 4), (4, 4), (1, 12), (7, 24), (23, 24)])
def test_wilson_interval_matches_scipy(successes, trials):
    """At scipy's quantile z = Phi^-1(0.975) the two are one closed form, each a dozen float64
    operations on numbers <= n + z^2 divided by n + z^2: equal within 2 x 12 u. The default z is
    that quantile to the 2 decimals the literature uses; by symmetry k successes give the
    mirror image of n - k (the same operations, mirrored: within 2 x 12 u too)."""
    quantile = float(norm.ppf(0.975))
    assert WILSON_Z == round(quantile, 2)
    expected = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    rounding = 24 * unit_roundoff()
    assert wilson_interval(successes, trials, quantile) == pytest.approx((expected.low, expected.high), abs=rounding)
    low, high = wilson_interval(successes, trials)
    assert (1 - high, 1 - low) == pytest.approx(wilson_interval(trials - successes, trials), abs=rounding)


@pytest.mark.parametrize(
    "arguments, message",
    [((5, 4), r"successes: 5; expected an integer in \[0, trials = 4\]"), ((0, 0), r"trials: 0; expected an integer >= 1"),
     ((1.0, 4), r"successes: 1.0; expected an integer")],
)
def test_wilson_interval_rejects_bad_counts(arguments, message):
    with pytest.raises(ValueError, match=message):
        wilson_interval(*arguments)


def test_induction_targets_point_after_the_previous_occurrence():
    tokens = torch.tensor([[0, 1, 1, 0, 1, 0, 0]])
    # t=3 (x=0): previous 0 at s=0 -> target 1; t=4 (x=1): previous 1 at s=2 -> 3; t=5 (x=0): s=3 -> 4;
    # t=2 and t=6 repeat the token before them (s = t-1): no target; t=0, 1: no previous occurrence.
    assert induction_targets(tokens).tolist() == [[-1, -1, -1, 1, 3, 4, -1]]


def test_uniform_attention_scores_the_uniform_baseline():
    """Zero query weights make every attention row uniform over the causal window, so the
    previous-token score is ``mean 1/(t+1)`` and the induction score equals its baseline."""
    model = RoFormer(RoFormerConfig(vocab_size=2, num_layers=2, num_heads=2, width=8))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[:8].zero_()
            block.attn.qkv.bias[:8].zero_()
    tokens = held_out_sequences(binary_kernel(0.3, 0.6), 16, 20, seed=1)
    _, cache = model.run_with_cache(tokens)
    scores = attention_scores(cache, tokens)
    uniform_previous = float(np.mean([1 / (t + 1) for t in range(1, 20)]))
    # Zero scores: each softmax row is exp(0) = 1 over the row's exact count t + 1, at most two
    # float32 roundings (a reciprocal, a product) of a weight <= 1/2 for t >= 1, within u32; the
    # float64 means of such weights add n u64.
    rounding = unit_roundoff(torch.float32) + tokens.numel() * unit_roundoff()
    np.testing.assert_allclose(scores["previous_token"], uniform_previous, rtol=0, atol=rounding)
    np.testing.assert_allclose(scores["induction"], scores["uniform_induction"], rtol=0, atol=rounding)
    assert np.array(scores["induction"]).shape == (2, 2)


def test_markov_stream_targets_are_the_next_tokens_and_depend_only_on_the_step():
    stream = MarkovStream(binary_kernel(0.2, 0.9), batch_size=4, length=10, seed=3)
    batch = stream(7)
    assert batch.inputs.shape == batch.targets.shape == (4, 10)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert torch.equal(stream(7).inputs, batch.inputs)
    assert not torch.equal(stream(8).inputs, batch.inputs)


def test_one_short_run_is_wired_through_the_training_loop(tmp_path, capsys):
    config = MarkovSweepConfig(p_values=(0.9,), q_values=(0.8,), architectures=("2-layer-tied",),
                               inits=("lowrank",), seeds=1, steps=30, warmup_steps=2, log_every=10, eval_sequences=8,
                               sequence_length=16, batch_size=8, init_std=0.05, workers=1)
    run = train_and_evaluate(config, "lowrank", "2-layer-tied", 0.9, 0.8, seed=0)
    assert (run["init"], run["architecture"]) == ("lowrank", "2-layer-tied")
    assert run["loss_curve"]["step"] == [10, 20, 30]
    assert len(run["attention"]["induction"]) == 2
    assert run["excess"] >= 0
    # The same operations on the same numbers as summarise_predictions: equal exactly.
    assert run["final_loss"] == reference_losses(binary_kernel(0.9, 0.8)).bigram + run["excess"]
    document = write_sweep([run], config, tmp_path, command="hmmtf markov-sweep", wall_seconds=1.0)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["cells"] == document["cells"] and saved["cells"][0]["seeds"] == 1
    assert saved["config"]["init_std"] == 0.05
    assert saved["command"] == "hmmtf markov-sweep"
    assert set(saved["git"]) == {"commit", "dirty"} and len(saved["git"]["commit"]) == 40
    assert saved["sides"] == document["sides"] and saved["sides"][0]["side"] == "p + q > 1"
    figures = [tmp_path / f"{name}.png" for name in ("phase_diagram", "read_back", "plateau_survival", "loss_curves_lowrank")]
    for path in figures:
        assert path.stat().st_size > 0
        path.unlink()
    # --redraw trains nothing and draws the same figures from results.json; markov-verdict reads it too.
    assert hmmtf.main(["markov-sweep", "--out", str(tmp_path), "--redraw"]) == 0
    assert all(path.stat().st_size > 0 for path in figures)
    capsys.readouterr()
    assert hmmtf.main(["markov-verdict", str(tmp_path / "results.json")]) == 0
    assert "| lowrank, 2-layer-tied | " in capsys.readouterr().out


@pytest.mark.long_running
def test_command_line_runs_a_tiny_sweep(tmp_path):
    """``hmmtf markov-sweep`` end to end (one worker process, one cell, 20 steps). Its figures are
    recorded, not drawn (:mod:`recorded_figures`): the short run above draws every one of them."""
    argv = ["markov-sweep", "--out", str(tmp_path), "--p-values", "0.9", "--q-values", "0.8", "--seeds", "1",
            "--steps", "20", "--warmup-steps", "2", "--architectures", "1-layer-untied", "--inits", "lowrank-anti",
            "--init-rank", "2", "--workers", "1", "--no-progress"]
    with figures_recorded_not_drawn() as figures:
        assert hmmtf.main(argv) == 0
    assert figures == [tmp_path / f"{name}.png" for name in ("phase_diagram", "read_back", "plateau_survival",
                                                             "loss_curves_lowrank-anti")]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"] == "hmmtf " + " ".join(argv)
    assert saved["config"]["init_rank"] == 2
    assert [(c["init"], c["architecture"], c["p"], c["q"], c["seeds"]) for c in saved["cells"]] == [
        ("lowrank-anti", "1-layer-untied", 0.9, 0.8, 1)]


def test_plateau_survival_counts_runs_not_yet_escaped():
    runs = [{"escape_step": 10}, {"escape_step": 30}, {"escape_step": None}, {"escape_step": 20}]
    assert plateau_survival(runs, [0, 10, 20, 30, 100]) == [1.0, 0.75, 0.5, 0.25, 0.25]


def test_init_std_reaches_the_model():
    config = MarkovSweepConfig(width=64, init_std=0.5)
    model = RoFormer(config.model_config("1-layer-tied"))
    # 128 entries ~ N(0, 0.5^2): the sample std has standard error 0.5 / sqrt(256) ~ 0.03.
    assert abs(model.embed.weight.std().item() - 0.5) < 0.15
    assert model.unembed.weight is model.embed.weight
    assert RoFormer(config.model_config("1-layer-untied")).unembed.weight is not model.embed.weight


def test_iid_cells_are_not_trained():
    config = MarkovSweepConfig(p_values=(0.3, 0.5), q_values=(0.5, 0.7))
    assert is_memoryless(0.3, 0.7) and is_memoryless(0.5, 0.5)
    assert config.cells() == [(0.3, 0.5), (0.5, 0.7)]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"p_values": (0.2, 1.5)}, r"p_values: contains 1.5; expected switching probabilities in \[0, 1\]"),
        ({"q_values": (-0.1,)}, r"q_values: contains -0.1"),
        ({"q_values": ()}, r"q_values: empty"),
        ({"architectures": ("3-layer",)}, r"architectures: \['3-layer'\]; expected a non-empty subset"),
        ({"seeds": 0}, r"seeds: 0; expected an integer >= 1"),
        ({"init_std": -0.1}, r"init_std: -0.1; expected a finite number > 0"),
        ({"learning_rate": 0.0}, r"learning_rate: 0.0; expected a finite number > 0"),
    ],
)
def test_sweep_config_rejects_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        MarkovSweepConfig(**overrides)


def test_every_architecture_builds():
    config = MarkovSweepConfig()
    for name, shape in ARCHITECTURES.items():
        model_config = config.model_config(name)
        assert (model_config.num_layers, model_config.tie_embeddings) == (shape["num_layers"], shape["tie_embeddings"])


def test_config_is_a_json_config_with_the_results_keys():
    import dataclasses

    from empirical.training.configs import JSONConfig

    config = MarkovSweepConfig(p_values=(0.2, 0.7), seeds=2)
    assert isinstance(config, JSONConfig)
    # The results JSON's "config": every field, in declaration order, as dataclasses.asdict writes it.
    assert config.to_dict() == dataclasses.asdict(config)
    assert list(config.to_dict()) == [field.name for field in dataclasses.fields(MarkovSweepConfig)]
    assert MarkovSweepConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"unknown keys \['depth'\]"):
        MarkovSweepConfig.from_dict(config.to_dict() | {"depth": 3})


MARKOV_FIGURES = Path(__file__).resolve().parents[1] / "figures" / "markov"
COMMITTED_SWEEPS = sorted(path for path in MARKOV_FIGURES.glob("**/results.json")
                          if path.parent != MARKOV_FIGURES / "incontext")
"""The results of ``hmmtf markov-sweep``; ``incontext/`` is ``hmmtf markov-incontext``'s (tests/test_markov_incontext.py)."""


@pytest.mark.parametrize("path", COMMITTED_SWEEPS, ids=lambda path: path.parent.name)
def test_committed_cells_and_sides_are_what_the_current_aggregation_computes(path):
    """The claims ledger reads a sweep's stored cells and sides; this test stands in for listing
    ``aggregate.py`` among their producers (ledger/results.py): the current code, applied to the
    stored runs, gives the stored summaries."""
    document = json.loads(path.read_text())
    assert_same_summaries(aggregate_cells(document["runs"]), document["cells"])
    if "sides" in document:
        assert_same_summaries(aggregate_sides(document["runs"]), document["sides"])


REFERENCE_LOSS_ROUNDING = {"bigram_loss": entropy_rate_rounding, "unigram_loss": stationary_entropy_rounding}
"""The rounding bound of each reference loss a cell records, as a function of its kernel."""


def assert_same_summaries(computed: list[dict], stored: list[dict]) -> None:
    """Equal records: every count, label and float exactly equal (copied from the runs, or the same
    operations on the same numbers: fractions, Wilson intervals; JSON round-trips a float exactly),
    except a cell's reference losses. Those the stored file's machine computed with its own
    logarithm and LAPACK solve: each computation is within its rounding bound
    (:data:`REFERENCE_LOSS_ROUNDING`) of the exact loss, so the two are within twice it."""
    assert len(computed) == len(stored)
    for mine, theirs in zip(computed, stored):
        assert mine.keys() == theirs.keys()
        for key in theirs.keys() - REFERENCE_LOSS_ROUNDING.keys():
            assert mine[key] == theirs[key], key
        for key in theirs.keys() & REFERENCE_LOSS_ROUNDING.keys():
            rounding = 2 * REFERENCE_LOSS_ROUNDING[key](binary_kernel(theirs["p"], theirs["q"]))
            assert mine[key] == pytest.approx(theirs[key], rel=0, abs=rounding), key


@pytest.mark.long_running
def test_a_committed_trapped_run_replays_with_the_same_outcome():
    """One trapped run of the committed default sweep, trained again by the current code (the
    RoFormer, the training loop and the run, which ledger/results.py leaves out of the sweeps'
    producers because they are shared with every other study): the same escape (none) and
    decision, and a final loss within 1% of the run's decision tolerance (float32 reductions
    may be summed in another order than in the sweep's worker processes; a verdict moves only when
    the excess crosses the tolerance, and no committed run is within 1% of it)."""
    document = json.loads((MARKOV_FIGURES / "results.json").read_text())
    config = MarkovSweepConfig(**document["config"])
    stored = next(run for run in document["runs"] if run["trapped"] and run["architecture"] == "1-layer-tied")
    replayed = train_and_evaluate(config, stored["init"], stored["architecture"], stored["p"], stored["q"],
                                  stored["seed"])
    assert (replayed["trapped"], replayed["escape_step"]) == (stored["trapped"], stored["escape_step"])
    assert abs(replayed["final_loss"] - stored["final_loss"]) < 0.01 * stored["tolerance"]
    for run in document["runs"]:
        assert abs(run["excess"] - run["tolerance"]) > 0.01 * run["tolerance"]
