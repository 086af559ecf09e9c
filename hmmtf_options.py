"""Value types of the ``hmmtf`` subcommands' options (argparse ``type=``): counts, thread numbers
and seeds are refused when they are out of range, never replaced by a default.

A refused value ends the command before it starts with one line (:mod:`hmmtf`'s convention):
``hmmtf evaluate: error: argument --num-prompts: 0; expected an integer >= 1``.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Callable

from empirical.training.configs import config_from_options


def integer_at_least(minimum: int) -> Callable[[str], int]:
    """The option type of integers ``>= minimum``: ``ArgumentTypeError`` names the value and the
    range (argparse prefixes the option's name)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text}; expected an integer >= {minimum}")
        return value

    return parse


positive_int = integer_at_least(1)
"""Counts that must be at least one: prompts, tasks, threads, steps, layers."""
non_negative_int = integer_at_least(0)
"""Seeds, and the counts whose 0 the option's help gives a meaning ("0 skips the section")."""


def positive_float(text: str) -> float:
    """The option type of finite numbers ``> 0`` (durations, rates, tolerances)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}; expected a finite number > 0")
    return value


def config_from_command_line(config_class: type, options: dict):
    """:func:`empirical.training.configs.config_from_options`, with the ``ValueError`` of a refused field
    (``batch_size: 0; expected ...``, the project's convention) naming the field's option instead:
    ``--batch-size: 0; expected ...``."""
    try:
        return config_from_options(config_class, options)
    except ValueError as error:
        field, separator, rest = str(error).partition(": ")
        if separator and field in {known.name for known in dataclasses.fields(config_class)}:
            raise ValueError(f"--{field.replace('_', '-')}: {rest}") from error
        raise
