"""Command-line entry point: ``hmmtf SUBCOMMAND [options]``.

The command line is this package, one layer above everything it calls (docs/ARCHITECTURE.md):
each module of :mod:`hmmtf.commands` adds its subcommands through ``register(subparsers)``, with
the option types and output policy of :mod:`hmmtf.options`; this file assembles them
(:data:`SUBCOMMAND_MODULES`) and reports their errors. ``hmmtf main`` is the README's main job;
``python -m hmmtf`` runs it from a checkout without the installed script.

**Errors.** A user error ends the command with one line on stderr and exit code 2::

    hmmtf evaluate: error: argument --num-prompts: 0; expected an integer >= 1
    hmmtf evaluate: error: checkpoint: 'runs/x/checkpoint' does not exist; expected a checkpoint folder ...

A user error is what the person at the keyboard can fix: an option argparse refuses (the option
types of :mod:`hmmtf.options` refuse out-of-range counts), a ``ValueError`` (the project's
validation raises it as ``name: value; expected ...``, naming the argument, field or file, the
value and what was expected) and an ``OSError`` (a file that is missing, exists, cannot be read or
written, a lock another process holds, a full disk: the environment, not the code). Everything
else (``TypeError``, ``KeyError``, ``RuntimeError``, ``AssertionError``, ...) is a bug and keeps its
traceback. ``--debug`` (before or after the subcommand) shows the traceback of a user error too.
A dedicated error class was not introduced: the library functions validate their arguments with
``ValueError`` whoever calls them, and the command line reports those as they are.

**Outputs.** No command loses a file: before it computes, a command refuses, in one such line, an
output folder holding a file it would write that is not its own (another input's or command line's
results, or a file with no report of its own beside it), unless ``--overwrite``, and a committed
result under ``figures/`` to any command line but the one it records or its registered one,
whatever ``--overwrite`` says (:mod:`hmmtf.options`, "the output policy").
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import sys
from typing import NoReturn

from empirical.provenance import checkout

SUBCOMMAND_MODULES = {
    "train": "hmmtf.commands.training",
    "evaluate": "hmmtf.commands.training",
    "calibrate": "hmmtf.commands.training",
    "markov-sweep": "hmmtf.commands.markov",
    "markov-verdict": "hmmtf.commands.markov",
    "markov-incontext": "hmmtf.commands.markov_incontext",
    "analyze": "hmmtf.commands.analyze",
    "heads": "hmmtf.commands.heads",
    "klmap": "hmmtf.commands.klmap",
    "beliefs": "hmmtf.commands.beliefs",
    "ngram-verdict": "hmmtf.commands.ngram_verdict",
    "ladder": "hmmtf.commands.ladder",
    "plateau": "hmmtf.commands.plateau",
    "depth": "hmmtf.commands.depth",
    "signal": "hmmtf.commands.studies",
    "family-calibration": "hmmtf.commands.studies",
    "curve": "hmmtf.commands.studies",
    "curves": "hmmtf.commands.studies",
    "reproduce": "hmmtf.commands.reproduce",
    "export": "hmmtf.commands.export",
    "restore-checkpoint": "hmmtf.commands.restore_checkpoint",
    "draw": "hmmtf.commands.draw",
    "construction-info": "hmmtf.commands.construction_info",
    "main": "hmmtf.commands.bounds",
    "ledger": "hmmtf.commands.ledger",
}
"""The module whose ``register(subparsers)`` adds each subcommand, in ``hmmtf --help``'s order. A
command line that names a subcommand imports only its module: the others import sympy, scipy's
optimizers and matplotlib, and ``hmmtf reproduce --wait``, which a GPU session repeats to follow a
detached run, started in 5.3 s with all of them and starts in 3.7 s with its own (2 cores)."""

USER_ERRORS = (ValueError, OSError)
"""The exceptions a command reports as one line (module docstring)."""
USER_ERROR_EXIT_CODE = 2
"""Exit code of a user error, as argparse's own."""

VERBOSE_OPTIONS = ("-v", "--verbose")
"""The option that has ``hmmtf`` say when it restarts itself (before or after the subcommand). It is
read from the words of the command line before they are parsed: the restart comes first."""


class UsageError(Exception):
    """A command line argparse refuses: ``prog`` (``hmmtf evaluate``) and argparse's message."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


NEGATIVE_NUMBER = re.compile(r"-\.?\d")
"""A word that is a negative number, not an option, for argparse: ``-1e-3`` and ``-.5`` as well as
``-1`` (Python 3.13's argparse rule; 3.11's takes ``-1e-3`` for an option, and ``--learning-rate
-1e-3`` then fails as "expected one argument" before the range check can name the value)."""


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors raise :class:`UsageError` (reported as one line by
    :func:`main`) instead of printing the usage and exiting, and which reads a negative number
    after an option as its value (:data:`NEGATIVE_NUMBER`). The subparsers are of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message)


def error_line(prog: str, error: BaseException | str) -> str:
    """``PROG: error: MESSAGE`` on one line. An ``OSError`` raised by the system (``errno`` set)
    reads ``'FILE': REASON``; any other error its message, its line breaks joined."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        message = f"{str(error.filename)!r}: {error.strerror}"
        if error.filename2 is not None:
            message += f" (and {str(error.filename2)!r})"
    else:
        message = str(error) or type(error).__name__
    return f"{prog}: error: {' '.join(message.split())}"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command``'s module's subcommands, or of every subcommand when ``command``
    is None or not one of :data:`SUBCOMMAND_MODULES` (then argparse lists them all or names the
    unknown one). ``--debug`` is an option of the parser and of every subcommand."""
    parser = Parser(
        prog="hmmtf",
        description=(
            "Check, by computation, the transformer construction of 'Transformers as Multi-task "
            "Learners: Decoupling Features in Hidden Markov Models' (arXiv 2506.01919), and compare "
            "it with trained networks. Every subcommand writes JSON/NPZ data next to its figures."
        ),
    )
    debug_help = "show the traceback of a user error (a bad value, a missing file), not one line"
    verbose_help = ("say so on stderr when a training command restarts itself with glibc's malloc tuned for "
                    "training (empirical/training/allocator.py)")
    parser.add_argument("--debug", action="store_true", help=debug_help)
    parser.add_argument(*VERBOSE_OPTIONS, action="store_true", help=verbose_help)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    modules = [SUBCOMMAND_MODULES[command]] if command in SUBCOMMAND_MODULES else SUBCOMMAND_MODULES.values()
    for name in dict.fromkeys(modules):
        importlib.import_module(name).register(subparsers)
    for subparser in subparsers.choices.values():
        # SUPPRESS: without the flag the subcommand leaves the value the main parser set.
        subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
        subparser.add_argument(*VERBOSE_OPTIONS, action="store_true", default=argparse.SUPPRESS, help=verbose_help)
    return parser


def subcommand_of(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the main parser's
    options take no values)."""
    return next((word for word in argv if not word.startswith("-")), None)


def source_commit() -> str | None:
    """The commit of the checkout this file is in (:func:`empirical.provenance.checkout`: the one the
    device machine's copy of the tree declares, else git's), with ``+dirty`` when a tracked file
    outside ``figures/`` (the results, which commands rewrite) differs from it; None outside a git
    checkout or without git."""
    state = checkout()
    return None if state.commit is None else state.commit + ("+dirty" if state.dirty else "")


def restart_for_training(process_argv: list[str], command_line: list[str]) -> None:
    """Restart this process with glibc's malloc tuned for training when ``process_argv`` (its
    ``sys.argv``) names a subcommand that trains: :func:`empirical.training.allocator.restart_with_training_tunables`
    of ``command_line`` (its ``sys.orig_argv``, interpreter options included), saying so only
    under :data:`VERBOSE_OPTIONS`. ``ValueError`` for an ``HMMTF_MALLOC`` it does not know, whatever
    the subcommand (:func:`empirical.training.allocator.malloc_choice`)."""
    from empirical.training.allocator import TRAINING_SUBCOMMANDS, malloc_choice, restart_with_training_tunables
    malloc_choice(os.environ)
    if subcommand_of(process_argv[1:]) in TRAINING_SUBCOMMANDS:
        verbose = any(word in VERBOSE_OPTIONS for word in process_argv[1:])
        restart_with_training_tunables(command_line, verbose=verbose)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the subcommand; its exit code. A user
    error prints one line and returns 2 (module docstring). ``args.command_line`` is the command
    as a shell line and ``args.git_commit`` the code's :func:`source_commit`, recorded by the
    subcommands next to the data they write. Called without ``argv``, as a process's entry point,
    a training subcommand first restarts the process with glibc's malloc tuned for training
    (:func:`restart_for_training`); a call with ``argv`` (a test, a script) never restarts."""
    if argv is None:
        try:
            restart_for_training(sys.argv, sys.orig_argv)
        except ValueError as error:  # a GLIBC_TUNABLES the restart cannot extend, an unknown HMMTF_MALLOC
            print(error_line("hmmtf", error), file=sys.stderr)
            return USER_ERROR_EXIT_CODE
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(subcommand_of(argv)).parse_args(argv)
    except UsageError as error:
        # The main parser refuses the words no parser took; they follow the subcommand, so say its name.
        unrecognized = error.prog == "hmmtf" and str(error).startswith("unrecognized arguments")
        prog = f"hmmtf {subcommand_of(argv)}" if unrecognized and subcommand_of(argv) else error.prog
        print(error_line(prog, str(error)), file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    args.command_line = shlex.join(["hmmtf", *argv])
    args.git_commit = source_commit()
    try:
        return int(args.run(args) or 0)
    except USER_ERRORS as error:
        if args.debug:
            raise
        print(error_line(f"hmmtf {args.command}", error), file=sys.stderr)
        return USER_ERROR_EXIT_CODE
