"""The KL map (empirical/analysis/klmap.py): its cells against KL computed term by term in Python
floats, its diagonal exactly 0, names that land in their own rows and columns, rows a predictor
does not serve dropped from every cell (NaNs planted there change nothing; one planted in a common
row is refused), the model placed next to the predictor it equals; ``hmmtf klmap`` end to end on
a tiny checkpoint, with and without the ceiling, and its one-line errors."""
import json
import math

import pytest
import torch

import hmmtf
from empirical.analysis.klmap import MODEL, KLMapSettings, common_rows, kl_matrix, nearest, placement, scope_section
from empirical.yardsticks.competence import paired, scope_rows
from empirical.yardsticks.hand_built import served_rows
from empirical.yardsticks.ngram import scored_rows
from recorded_figures import figures_recorded_not_drawn
from rounding import gamma
from test_analysis_heads import FORMAT, MIXTURE, tiny_prompts
from tiny_checkpoints import assert_refused_in_one_line, command_report

P = MIXTURE.num_tokens
EVERY_ROW = torch.ones(FORMAT.length, dtype=torch.bool)


def random_distributions(count: int, seed: int, zeros: bool = False) -> torch.Tensor:
    """``(count, N, p)`` float64 rows drawn from a flat Dirichlet; with ``zeros``, the first token
    of every other row set to exactly 0 (and the row renormalised): ``0 log 0`` terms."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probs = torch.distributions.Dirichlet(torch.ones(P, dtype=torch.float64)).sample((count, FORMAT.length))
    if zeros:
        probs[:, ::2, 0] = 0.0
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def direct_kl(reference: torch.Tensor, other: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor) -> list[float]:
    """Per prompt, the mean over its scored rows within ``rows`` of ``sum_{o: r(o) > 0} r log(r / q)``,
    one Python float at a time."""
    scored, _ = scored_rows(tokens, P)
    result = []
    for b in range(tokens.shape[0]):
        kept = [t for t in range(FORMAT.length) if scored[b, t] and rows[t]]
        result.append(math.fsum(math.fsum(r * math.log(r / q) for r, q in zip(reference[b, t].tolist(),
                                                                                  other[b, t].tolist()) if r > 0)
                                for t in kept) / len(kept))
    return result


def test_the_map_is_zero_on_its_diagonal_and_kl_term_by_term_off_it():
    tokens = tiny_prompts(3, seed=1)
    first, second = random_distributions(3, seed=2, zeros=True), random_distributions(3, seed=3)
    rows = served_rows(FORMAT, 3)
    matrix = kl_matrix({"first": first, "second": second}, tokens, P, rows)
    assert matrix.shape == (2, 2, 3) and matrix.dtype == torch.float64
    assert torch.equal(matrix[0, 0], torch.zeros(3, dtype=torch.float64))
    assert torch.equal(matrix[1, 1], torch.zeros(3, dtype=torch.float64))
    # A sum of p terms per row, then of at most N rows: the rounding of each term is relative.
    tolerance = 4 * gamma(P + FORMAT.length)
    expected = torch.tensor(direct_kl(first, second, tokens, rows), dtype=torch.float64)
    torch.testing.assert_close(matrix[0, 1], expected, rtol=tolerance, atol=0)
    # The other direction puts mass where ``first`` has none: infinite, not dropped.
    assert torch.equal(matrix[1, 0], torch.full((3,), math.inf, dtype=torch.float64))
    third = random_distributions(3, seed=4)
    reverse = kl_matrix({"second": second, "third": third}, tokens, P, rows)[0, 1]
    torch.testing.assert_close(reverse, torch.tensor(direct_kl(second, third, tokens, rows), dtype=torch.float64),
                               rtol=tolerance, atol=0)


def test_every_name_lands_in_its_own_row_and_column_in_any_order():
    """A copy of a predictor under another name: its cells with the original are exactly 0, and its
    row and column are the original's; reordering the names permutes the cells and nothing else."""
    tokens = tiny_prompts(4, seed=4)
    a, b, c = (random_distributions(4, seed=s) for s in (5, 6, 7))
    probabilities = {"a": a, "b": b, "c": c, "a again": a.clone()}
    matrix = kl_matrix(probabilities, tokens, P, EVERY_ROW)
    zeros = torch.zeros(4, dtype=torch.float64)
    assert torch.equal(matrix[0, 3], zeros) and torch.equal(matrix[3, 0], zeros)
    assert torch.equal(matrix[3, :3], matrix[0, :3]) and torch.equal(matrix[:3, 3], matrix[:3, 0])
    order = ["c", "a again", "b", "a"]
    permuted = kl_matrix({name: probabilities[name] for name in order}, tokens, P, EVERY_ROW)
    index = [list(probabilities).index(name) for name in order]
    for i, row in enumerate(index):
        for j, column in enumerate(index):
            assert torch.equal(permuted[i, j], matrix[row, column]), (order[i], order[j])


def test_rows_a_predictor_does_not_serve_are_dropped_from_every_cell():
    """NaN outside ``served_rows(format, 3)`` in a hand-built-like predictor (and in the model):
    every loss, cell and placement equals the one with any other distribution there; a NaN in a
    common row is refused, naming the predictor, the prompt and the row."""
    tokens = tiny_prompts(3, seed=8)
    served = served_rows(FORMAT, 3)
    model, hand_built, other = (random_distributions(3, seed=s) for s in (9, 10, 11))

    def planted(probs: torch.Tensor, fill: float | torch.Tensor) -> torch.Tensor:
        return torch.where(served[None, :, None], probs, fill)

    sections = [scope_section({MODEL: planted(model, first), "hand-built L=3": planted(hand_built, second),
                               "other": other}, tokens, P, rows & served)
                for rows in scope_rows(FORMAT).values()
                for first, second in ((math.nan, math.nan), (other, model))]
    assert sections[0] == sections[1] and sections[2] == sections[3]
    common = (scored_rows(tokens, P)[0] & served).sum(-1)
    assert sections[2]["rows_per_prompt"] == {"mean": common.double().mean().item(), "min": int(common.min()),
                                              "max": int(common.max())}
    assert all(math.isfinite(entry["mean"]) for entry in sections[0]["loss"].values())
    broken = hand_built.clone()
    t = int(served.nonzero()[0])
    broken[1, t, 2] = math.nan
    with pytest.raises(ValueError, match=rf"^probabilities\['hand-built L=3'\]: not finite at prompt 1, row {t}; "):
        common_rows({MODEL: model, "hand-built L=3": broken}, tokens, P, served)


def test_the_model_set_equal_to_a_predictor_is_placed_next_to_it_at_kl_zero():
    tokens = tiny_prompts(5, seed=12)
    a, b, c = (random_distributions(5, seed=s) for s in (13, 14, 15))
    names = [MODEL, "a", "b", "c"]
    matrix = kl_matrix(dict(zip(names, (b.clone(), a, b, c))), tokens, P, EVERY_ROW)
    placed = placement(names, matrix)
    for direction, toward in (("as_row", lambda j: matrix[0, j]), ("as_column", lambda j: matrix[j, 0])):
        entry = placed[direction]
        assert entry["nearest"] == "b" and entry["kl"]["mean"] == 0.0 and entry["kl"]["stderr"] == 0.0
        second = names.index(entry["second"])
        assert entry["second"] != "b" and entry["second_kl"] == paired(toward(second))
        assert entry["second_minus_nearest"] == paired(toward(second))
        assert entry["second_minus_nearest"]["interval_95"][0] > 0
    with pytest.raises(ValueError, match=r"^divergences: \['a'\]; expected at least two candidates"):
        nearest({"a": matrix[0, 1]})
    with pytest.raises(ValueError, match=r"^subject: 'nobody'; expected one of the map's predictors"):
        placement(names, matrix, "nobody")


KLMAP_ARGV = ["--prompts", "4", "--fresh-tasks", "4", "--gd-steps", "2", "--ceiling-particles", "4"]


@pytest.mark.long_running
def test_klmap_command_writes_every_number_and_the_figure(tmp_path, capsys):
    printed, report = command_report("klmap", tmp_path, capsys, KLMAP_ARGV)
    names = [MODEL, "hand-built L=1", "hand-built L=2", "hand-built L=3", "P_L L=1", "P_L L=2", "P_L L=3",
             "ngram 1", "ngram 2", "ngram 3", "ceiling", "oracle"]
    assert report["predictors"] == names
    assert report["settings"] == {"prompts": 4, "fresh_tasks": 4, "gd_steps": 2, "ceiling_particles": 4}
    assert report["ceiling"]["particles"] == 4 and report["hand_built"]["gd_steps"] == 2
    assert set(report["scopes"]) == {"test_sequence", "all_positions"} == set(printed) - {"out", "runtime_s"}
    for section in report["scopes"].values():
        assert list(section["kl"]) == names and all(list(row) == names for row in section["kl"].values())
        assert all(section["kl"][name][name]["mean"] == 0.0 for name in names)
        assert list(section["loss"]) == names
        assert section["placement"]["as_row"]["nearest"] in names[1:]
    assert (tmp_path / "klmap" / "klmap.png").stat().st_size > 0
    with figures_recorded_not_drawn():  # drawn above
        assert hmmtf.main(["klmap", str(tmp_path / "checkpoint"), "--out", str(tmp_path / "none"), *KLMAP_ARGV[:-1],
                           "0"]) == 0
    without = json.loads((tmp_path / "none" / "klmap.json").read_text())
    assert without["ceiling"] is None and without["predictors"] == [name for name in names if name != "ceiling"]


def test_klmap_command_refuses_bad_options_in_one_line(tmp_path, capsys):
    assert_refused_in_one_line("klmap", tmp_path, capsys, [
        (["--prompts", "0"], "argument --prompts: 0; expected an integer >= 1"),
        (["--gd-steps", "x"], "argument --gd-steps: x; expected an integer >= 1"),
        (["--ceiling-particles", "-1"], "argument --ceiling-particles: -1; expected an integer >= 0")])
    with pytest.raises(ValueError, match="^gd_steps: 0; expected an integer >= 1"):
        KLMapSettings(gd_steps=0)
