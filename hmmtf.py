"""Command-line entry point: ``hmmtf SUBCOMMAND [options]``.

Each package contributes its subcommands through a ``register(subparsers)`` function in its
``commands`` module; this file only assembles them. ``hmmtf main`` is the README's main job.
"""
from __future__ import annotations

import argparse
import sys

import bounds.commands
import construction.commands
import empirical.commands
import empirical.markov_commands
import hmm.commands


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
    hmm.commands.register(subparsers)
    empirical.commands.register(subparsers)
    empirical.markov_commands.register(subparsers)
    construction.commands.register(subparsers)
    bounds.commands.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
