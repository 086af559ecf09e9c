"""Subcommands of the ``hmm`` package (registered in :mod:`hmmtf`)."""
from __future__ import annotations


def register(subparsers) -> None:
    """Add the ``hmm`` subcommands to the ``hmmtf`` parser."""
