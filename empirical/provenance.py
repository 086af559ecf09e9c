"""Which commit a working tree is, and whether it differs from it: the one reader of the checkout's
commit for every writer that records one (the command line's :func:`hmmtf.source_commit`, ``hmmtf
markov-sweep``, ``hmmtf reproduce``'s record, the HMM-engine benchmark) (a utility)."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

GIT_COMMIT_VARIABLE = "HMMTF_GIT_COMMIT"
"""Environment variable that names the commit of the working tree, for a tree whose ``.git`` is
absent or not its own: the device machine receives a copy of the tree, and the copy's ``.git``
(where one travels) can be older than the files (seen on 2026-11-28: a ``.git`` at the previous
commit, the files at the next)."""

REPOSITORY = Path(__file__).resolve().parents[1]
"""The checkout this file is in."""

OUTPUTS = "figures"
"""The folder of the committed results, which the commands rewrite: a change there is an output,
not a change of the code that made it."""


def declared_commit() -> str | None:
    """The commit :data:`GIT_COMMIT_VARIABLE` declares, or None where it is unset or empty. Where
    set it wins over ``git rev-parse HEAD``: it is set only where git would answer for another tree."""
    return os.environ.get(GIT_COMMIT_VARIABLE) or None


@dataclass(frozen=True)
class Checkout:
    """The commit of the working tree (None: no git checkout here, or no git), whether a tracked
    file outside :data:`OUTPUTS` differs from it (``dirty``; None: unknown, for a declared commit),
    and who said so (``source``: ``git``, ``$HMMTF_GIT_COMMIT`` or why neither could)."""

    commit: str | None
    dirty: bool | None
    source: str


def checkout() -> Checkout:
    """The commit :func:`declared_commit` declares where one is, else git's for :data:`REPOSITORY`
    (``git rev-parse HEAD``), dirty when ``git status`` lists a tracked file outside :data:`OUTPUTS`
    (untracked files do not count: a run folder, a scratch script)."""
    declared = declared_commit()
    if declared:
        return Checkout(declared, None, f"${GIT_COMMIT_VARIABLE}")
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True,
                                check=True).stdout.strip()
        changes = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  f":(exclude){OUTPUTS}"], cwd=REPOSITORY, capture_output=True, text=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return Checkout(None, None, "no git repository here")
    return Checkout(commit, bool(changes.strip()), "git")
