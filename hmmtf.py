"""Command-line entry point: ``hmmtf SUBCOMMAND [options]``.

Each package contributes its subcommands through ``register(subparsers)`` functions (in its
``commands`` modules); this file only assembles them. ``hmmtf main`` is the README's main job.
"""
from __future__ import annotations

import argparse
import importlib
import shlex
import subprocess
import sys
from pathlib import Path

SUBCOMMAND_MODULES = {
    "train": "empirical.commands",
    "evaluate": "empirical.commands",
    "calibrate": "empirical.commands",
    "markov-sweep": "empirical.markov.commands",
    "markov-verdict": "empirical.markov.commands",
    "analyze": "empirical.analysis.commands",
    "ladder": "empirical.ladder",
    "signal": "empirical.signal",
    "curve": "empirical.curves",
    "curves": "empirical.curves",
    "reproduce": "empirical.reproduce.commands",
    "export": "empirical.transformer_lens_interop",
    "construction-info": "construction.commands",
    "main": "bounds.commands",
    "ledger": "ledger.commands",
}
"""The module whose ``register(subparsers)`` adds each subcommand, in ``hmmtf --help``'s order. A
command line that names a subcommand imports only its module: the others import sympy, scipy's
optimizers and matplotlib, and ``hmmtf reproduce --wait``, which a GPU session repeats to follow a
detached run, started in 5.3 s with all of them and starts in 3.7 s with its own (2 cores)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command``'s module's subcommands, or of every subcommand when ``command``
    is None or not one of :data:`SUBCOMMAND_MODULES` (then argparse lists them all or names the
    unknown one)."""
    parser = argparse.ArgumentParser(
        prog="hmmtf",
        description=(
            "Check, by computation, the transformer construction of 'Transformers as Multi-task "
            "Learners: Decoupling Features in Hidden Markov Models' (arXiv 2506.01919), and compare "
            "it with trained networks. Every subcommand writes JSON/NPZ data next to its figures."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    modules = [SUBCOMMAND_MODULES[command]] if command in SUBCOMMAND_MODULES else SUBCOMMAND_MODULES.values()
    for name in dict.fromkeys(modules):
        importlib.import_module(name).register(subparsers)
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
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    args.command_line = shlex.join(["hmmtf", *argv])
    args.git_commit = source_commit()
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
