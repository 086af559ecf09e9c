"""Which commit a working tree declares it is: a utility of every writer that records the commit
its results were made at (the command line's :func:`hmmtf.source_commit`, ``hmmtf reproduce``'s
record)."""
from __future__ import annotations

import os

GIT_COMMIT_VARIABLE = "HMMTF_GIT_COMMIT"
"""Environment variable that names the commit of the working tree, for a tree whose ``.git`` is
absent or not its own: the device machine receives a copy of the tree, and the copy's ``.git``
(where one travels) can be older than the files (seen on 2026-11-28: a ``.git`` at the previous
commit, the files at the next)."""


def declared_commit() -> str | None:
    """The commit :data:`GIT_COMMIT_VARIABLE` declares, or None where it is unset or empty. Where
    set it wins over ``git rev-parse HEAD``: it is set only where git would answer for another tree."""
    return os.environ.get(GIT_COMMIT_VARIABLE) or None
