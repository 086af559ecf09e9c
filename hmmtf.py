"""Command-line entry point: ``hmmtf SUBCOMMAND [options]``.

Each package contributes its subcommands through ``register(subparsers)`` functions (in its
``commands`` modules); this file only assembles them. ``hmmtf main`` is the README's main job.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import bounds.commands
import construction.commands
import empirical.analysis.commands
import empirical.commands
import empirical.ladder
import empirical.markov.commands
import empirical.reproduce.commands
import empirical.transformer_lens_interop
import ledger.commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hmmtf",
        description=(
            "Check, by computation, the transformer construction of 'Transformers as Multi-task "
            "Learners: Decoupling Features in Hidden Markov Models' (arXiv 2506.01919), and compare "
            "it with trained networks. Every subcommand writes JSON/NPZ data next to its figures."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    empirical.commands.register(subparsers)
    empirical.markov.commands.register(subparsers)
    empirical.analysis.commands.register(subparsers)
    empirical.ladder.register(subparsers)
    empirical.reproduce.commands.register(subparsers)
    empirical.transformer_lens_interop.register(subparsers)
    construction.commands.register(subparsers)
    bounds.commands.register(subparsers)
    ledger.commands.register(subparsers)
    return parser


def source_commit() -> str | None:
    """The git commit of the checkout this file is in (``git rev-parse HEAD``), with ``+dirty``
    when tracked files outside ``figures/`` (the results, which commands rewrite) differ from it;
    None outside a git checkout or without git."""
    root = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        changes = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)figures"],
                                 cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit.stdout.strip() + ("+dirty" if changes.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the subcommand. ``args.command_line`` is
    the command as a shell line and ``args.git_commit`` the code's :func:`source_commit`, recorded
    by the subcommands next to the data they write."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["hmmtf", *argv])
    args.git_commit = source_commit()
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
