"""``hmmtf ledger --record-canaries NAME --at COMMIT`` (ledger/canaries.py, :func:`record_baselines_at`):
a baseline recorded on another processor, recorded again here at its commit's producers with the
present ledger, replaces the old numbers and drops the verification judged against them."""
import copy
import json
import subprocess
from pathlib import Path

import pytest

from ledger.canaries import load_record, merge_baselines, record_baselines_at

ROOT = Path(__file__).resolve().parents[1]
COMMIT, TEMPORARY = "a" * 40, "b" * 40


def sung_record(name: str, song: str) -> dict:
    return {"baselines": {name: [{"commit": TEMPORARY, "song": song, "canary": "new canary", "settings": {"X": "1"},
                                  "environment": {"cpu": "AVX512"}}]}, "songs": {song: "packed numbers"}, "verified": {}}


def test_new_numbers_replace_the_commit_s_baseline_keep_its_settings_and_drop_the_verification():
    record = {"baselines": {"analyze": [{"commit": COMMIT, "song": "old", "canary": "old canary",
                                         "settings": {"X": "1", "Y": "2"}, "environment": {"cpu": "AVX2"},
                                         "numbers": "computed elsewhere"}]},
              "songs": {"old": "old numbers"}, "verified": {"analyze": {"disagreement": {COMMIT: "moved"}}}}
    merge_baselines(record, sung_record("analyze", "new"), COMMIT, TEMPORARY, ["analyze"])
    [entry] = record["baselines"]["analyze"]
    assert entry == {"commit": COMMIT, "song": "new", "canary": "new canary", "settings": {"X": "1", "Y": "2"},
                     "environment": {"cpu": "AVX512"}}
    assert record["songs"]["new"] == "packed numbers" and "analyze" not in record["verified"]


def test_a_commit_without_a_baseline_gets_one():
    record = {"baselines": {}, "songs": {}, "verified": {}}
    merge_baselines(record, sung_record("heads", "new"), COMMIT, TEMPORARY, ["heads"])
    assert record["baselines"]["heads"][0]["commit"] == COMMIT
    assert record["baselines"]["heads"][0]["settings"] == {"X": "1"}


def test_unknown_names_and_commits_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"--record-canaries: \['nope'\]"):
        record_baselines_at(ROOT, "HEAD", ["nope"])
    with pytest.raises(ValueError, match="--at: 'not-a-commit' is not a commit"):
        record_baselines_at(ROOT, "not-a-commit", ["ladder"])


@pytest.mark.long_running
def test_a_baseline_is_recorded_again_at_its_commit_in_a_clone(tmp_path):
    """End to end, in a clone: the ladder canary (seconds) recorded again at its baseline's commit,
    with this machine's environment, and the clone's worktrees left as they were."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(clone)], check=True)
    record = load_record(clone)
    [baseline] = record["baselines"]["ladder"][:1]
    before = copy.deepcopy(record)
    record_baselines_at(clone, baseline["commit"], ["ladder"])
    after = load_record(clone)
    entry = next(item for item in after["baselines"]["ladder"] if item["commit"] == baseline["commit"])
    assert entry["settings"] == baseline["settings"] and "numbers" not in entry
    assert entry["song"] in after["songs"] and "ladder" not in after["verified"]
    assert {name: value for name, value in after["baselines"].items() if name != "ladder"} == \
        {name: value for name, value in before["baselines"].items() if name != "ladder"}
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=clone, capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1
    json.dumps(after, allow_nan=False)
