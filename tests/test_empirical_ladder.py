"""``hmmtf ladder``: a point's statistics are the numbers of its evaluation and analysis JSONs, the
points are ordered by model and task count, mismatched JSONs and empty roots are refused, and the
figures are written."""
import json
import shutil
from pathlib import Path

import pytest

import hmmtf
from empirical.studies.ladder import collect_points, point_statistics
import tiny_pipeline


@pytest.fixture(scope="module")
def tiny_point(tiny_evaluation, tiny_analysis, tmp_path_factory):
    """One ladder point of the tiny preset in one folder, as ``hmmtf ladder`` reads it: its
    evaluation (with the regime section) and the training log ``hmmtf evaluate`` copies beside it,
    and its analysis (with the shuffle and probe sections)."""
    point = tmp_path_factory.mktemp("ladder") / "tiny"
    point.mkdir()
    for folder, name in ((tiny_evaluation[0], "evaluation.json"), (tiny_evaluation[0], "metrics.jsonl"),
                         (tiny_analysis[0], "analysis.json")):
        shutil.copy(folder / name, point / name)
    return point


def read(point, name: str) -> dict:
    return json.loads((point / name).read_text())


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_point_statistics_are_the_numbers_of_its_json(tiny_point):
    evaluation, analysis = read(tiny_point, "evaluation.json"), read(tiny_point, "analysis.json")
    stats = point_statistics(evaluation, analysis)
    memorisation = evaluation["regime"]["memorisation"]["all_positions"]
    assert stats["tasks"] == 8 and stats["model"] == {"num_layers": 2, "num_heads": 2, "width": 32}
    assert stats["prompts_per_task"] == tiny_pipeline.STEPS * 16 / 8  # steps x batch / tasks
    assert stats["memorisation_fraction_of_gap"] == memorisation["fraction_of_gap"]
    assert stats["memorisation_verdict"] == memorisation["verdict"]
    assert stats["claim1"]["decision"] == analysis["claims"]["shuffle"]["rule"]["decision"]
    assert stats["claim2"]["decision"] == analysis["claims"]["task_vs_state"]["decision"]
    assert stats["claim3"]["decision"] == analysis["claims"]["previous_tokens"]["rules"]["decision"]
    assert stats["fresh_loss"]["oracle"] <= stats["fresh_loss"]["bayes_reference"]
    analysis["step"] += 1
    with pytest.raises(ValueError, match=f"expected the evaluated .* at step {tiny_pipeline.STEPS}"):
        point_statistics(evaluation, analysis)


@pytest.mark.long_running
@pytest.mark.xdist_group(tiny_pipeline.GROUP)
def test_ladder_command_orders_points_and_draws_every_figure(tiny_point, tmp_path):
    root = tmp_path / "ladder"
    shutil.copytree(tiny_point, root / "b-fewer-tasks")
    shutil.copytree(tiny_point, root / "a-more-tasks")
    planted = read(root / "a-more-tasks", "evaluation.json")
    planted["task"]["mixture_spec"]["num_tasks"] = 64
    (root / "a-more-tasks" / "evaluation.json").write_text(json.dumps(planted))
    (root / "no-analysis").mkdir()
    assert hmmtf.main(["ladder", str(root), "--out", str(root)]) == 0
    report = read(root, "ladder.json")
    assert [point["folder"] for point in report["points"]] == ["b-fewer-tasks", "a-more-tasks"]
    assert [point["tasks"] for point in report["points"]] == [8, 64]
    table = (root / "ladder.md").read_text().splitlines()
    assert len(table) == 4 and table[2].startswith("| 8 | 2x2x32 | 80 |") and table[3].startswith("| 64 | 2x2x32 | 10 |")
    for name in ("regime", "claim1", "claim2", "claim3", "learning_curves"):
        assert (root / f"ladder_{name}.png").stat().st_size > 10_000


def test_ladder_refuses_a_root_without_points(tmp_path):
    with pytest.raises(ValueError, match="has no folder with both evaluation.json and analysis.json"):
        collect_points(tmp_path)


def test_committed_ladder_is_what_its_committed_points_give():
    """figures/ladder/ladder.json holds what ``hmmtf ladder`` computes from the committed points
    (the claims ledger reads it; this stands in for listing the points among its producers)."""
    root = Path(__file__).resolve().parents[1] / "figures" / "ladder"
    committed = json.loads((root / "ladder.json").read_text())
    assert json.loads(json.dumps(collect_points(root))) == committed["points"]


def test_docs_quote_the_committed_ladder_table():
    """docs/analysis.md and docs/empirical.md quote figures/ladder/ladder.md verbatim (numbers are
    generated, not typed)."""
    root = Path(__file__).resolve().parents[1]
    table = (root / "figures" / "ladder" / "ladder.md").read_text().strip()
    for page in ("analysis.md", "empirical.md"):
        assert table in (root / "docs" / page).read_text()
