"""The depth study (empirical/studies/depth.py, ``hmmtf depth``): its comparison rule, its probe and
head summaries and its refusals, on copies of committed results with planted changes."""
import json
import shutil
from pathlib import Path

import pytest

from empirical.studies.depth import HELD, PROBE_TOKENS, depth_effect, depth_study, head_summary, probe_summary
from empirical.yardsticks.regime import Z_95

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "figures/paper-scale/cpu"
SHALLOW, DEEP = "sparse-2x4x64-2x", "sparse-4x4x64-2x"


def copied(tmp_path: Path, run: str, names=("ngram-verdict.json", "analysis.json", "heads.json")) -> Path:
    folder = tmp_path / run
    folder.mkdir()
    for name in names:
        shutil.copy(FOLDER / run / name, folder / name)
    return folder


def row(layers: int, competent: bool, mean: float | None, stderr: float = 0.01) -> dict:
    value = None if mean is None else {"mean": mean, "stderr": stderr}
    return {"run": f"r{layers}", "layers": layers, "competent": competent, "minus_ceiling_bound": value,
            "minus_variable_order": value}


@pytest.mark.parametrize(("deep_mean", "reading"), [(0.02, "closer"), (0.08, "further"), (0.05, "not resolved")])
def test_the_change_is_read_by_its_95_interval_with_independent_errors(deep_mean, reading):
    effect = depth_effect([row(2, False, 0.05), row(4, True, deep_mean)])
    change = effect["minus_ceiling_bound"]
    assert change["mean"] == pytest.approx(deep_mean - 0.05)
    assert change["stderr"] == pytest.approx(0.01 * 2 ** 0.5)
    assert change["interval_95"][1] - change["mean"] == pytest.approx(Z_95 * change["stderr"])
    assert change["reading"] == reading


def test_the_deepest_competent_network_is_compared_and_a_missing_distance_is_none():
    effect = depth_effect([row(2, False, 0.05), row(4, True, 0.01), row(8, False, 0.0)])
    assert effect["deep"] == "r4"
    effect = depth_effect([row(2, False, None), row(4, True, 0.01)])
    assert effect["minus_ceiling_bound"] is None
    assert depth_effect([row(2, False, 0.05), row(4, False, 0.01)])["deep"] is None


def test_history_held_counts_from_one_back_without_a_gap_and_the_state_against_its_ceiling():
    analysis = json.loads((FOLDER / DEEP / "analysis.json").read_text())
    summary = probe_summary(analysis, 4)
    best = [max(summary["curves"][name][1:]) for name in PROBE_TOKENS]
    expected = next((index for index, value in enumerate(best) if value < HELD), len(best))
    assert summary["tokens_held"] == expected
    trained = analysis["probes"]["trained"]
    trained[PROBE_TOKENS[0]]["layer 2"]["accuracy"] = trained[PROBE_TOKENS[0]]["layer 3"]["accuracy"] = 0.0
    trained[PROBE_TOKENS[0]]["layer 4"]["accuracy"] = 0.0
    for layer in ("layer 1", "layer 2", "layer 3", "layer 4"):
        trained[PROBE_TOKENS[2]][layer]["accuracy"] = 1.0
    gapped = probe_summary(analysis, 4)
    assert gapped["tokens_held"] == 0 and gapped["history_layer"] is None
    ceiling = analysis["probes"]["ceiling"]["state"]["accuracy"]
    trained["state"]["layer 3"]["accuracy"] = HELD * ceiling
    assert probe_summary(analysis, 4)["state_held"]


def test_a_heads_peak_layer_is_the_best_heads_layer():
    heads = json.loads((FOLDER / DEEP / "heads.json").read_text())
    summary = head_summary(heads)
    assert len(summary["induction"]["excess_per_layer"]) == 4
    group = heads["scores"]["trained"]["induction 2"]
    group["score"][0][1] = group["chance"] + 2.0
    planted = head_summary(heads)["induction"]
    assert planted["peak_layer"] == 1 and planted["excess_per_layer"][0] == pytest.approx(2.0)


def test_the_study_groups_by_family_and_sorts_by_depth(tmp_path):
    study = depth_study([copied(tmp_path, DEEP), copied(tmp_path, SHALLOW)])
    (family,) = study["families"]
    networks = study["families"][family]["networks"]
    assert [network["layers"] for network in networks] == [2, 4]
    effect = study["families"][family]["effect"]
    assert effect["deep"].endswith(DEEP) and effect["minus_ceiling_bound"] is None
    assert effect["minus_variable_order"]["reading"] in ("closer", "further", "not resolved")


def test_a_folder_without_a_verdict_or_two_networks_of_one_depth_are_refused(tmp_path):
    with pytest.raises(ValueError, match="has no ngram-verdict.json"):
        depth_study([copied(tmp_path, SHALLOW, names=("analysis.json",))])
    twin = tmp_path / "twin"
    shutil.copytree(copied(tmp_path, DEEP), twin)
    with pytest.raises(ValueError, match="one network a depth"):
        depth_study([tmp_path / DEEP, twin])


def test_a_competence_result_not_made_with_the_upper_bound_is_refused(tmp_path):
    folder = copied(tmp_path, SHALLOW, names=("ngram-verdict.json", "competence.json"))
    competence = json.loads((folder / "competence.json").read_text())
    competence["ceiling"]["upper_bound"] = False
    (folder / "competence.json").write_text(json.dumps(competence))
    with pytest.raises(ValueError, match="not the collapsed SMC's upper bound"):
        depth_study([folder])
