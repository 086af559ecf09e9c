"""The commit a result records: the one ``HMMTF_GIT_COMMIT`` declares wins over git's, in both
places that read it (``hmmtf.source_commit`` and the reproduce record's ``git_state``), because the
device machine's copy of the tree can carry a ``.git`` older than its files."""
import subprocess

import hmmtf
from empirical.reproduce.record import git_state
from empirical.provenance import GIT_COMMIT_VARIABLE

DECLARED = "f" * 40


def git_head() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def test_a_declared_commit_wins_over_git_in_both_readers(monkeypatch):
    monkeypatch.setenv(GIT_COMMIT_VARIABLE, DECLARED)
    assert DECLARED != git_head()
    assert hmmtf.source_commit() == DECLARED
    assert git_state() == {"commit": DECLARED, "uncommitted_changes": None, "source": "$HMMTF_GIT_COMMIT"}


def test_unset_or_empty_leaves_gits_answer(monkeypatch):
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv(GIT_COMMIT_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(GIT_COMMIT_VARIABLE, value)
        assert hmmtf.source_commit().removesuffix("+dirty") == git_head()
        assert git_state()["commit"] == git_head() and git_state()["source"] == "git"
