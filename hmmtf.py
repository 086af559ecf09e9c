"""Command-line entry point: ``hmmtf SUBCOMMAND [options]``.

Each package contributes its subcommands through ``register(subparsers)`` functions (in its
``commands`` modules); this file only assembles them. ``hmmtf main`` is the README's main job.
"""
from __future__ import annotations

import argparse
import shlex
import sys

import bounds.commands
import construction.commands
import empirical.analysis.commands
import empirical.commands
import empirical.markov.commands
import empirical.reproduce.commands
import empirical.transformer_lens_interop


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
    empirical.reproduce.commands.register(subparsers)
    empirical.transformer_lens_interop.register(subparsers)
    construction.commands.register(subparsers)
    bounds.commands.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the subcommand. ``args.command_line`` is
    the command as a shell line, recorded by every subcommand next to the data it writes."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command_line = shlex.join(["hmmtf", *argv])
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
