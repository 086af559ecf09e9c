"""Plain-dataclass configurations: written to and read from JSON (checkpoints, run logs),
validated on construction (:func:`check_integers`). A field that is a command-line option is
declared with :func:`option` (its default and help), so that a subcommand's options are its
config's fields: :func:`hmmtf.options.add_config_options` adds them to a parser and
:func:`hmmtf.options.config_from_options` builds the config back from the parsed values.
"""
from __future__ import annotations

import dataclasses


class JSONConfig:
    """Mixin for a dataclass: ``to_dict`` and its inverse ``from_dict``, which refuses unknown
    keys (a checkpoint written by another version fails loudly instead of losing settings)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown keys {unknown}; expected a subset of {sorted(known)}")
        return cls(**values)


def check_integers(config, names: tuple[str, ...], minimum: int) -> None:
    """``ValueError`` naming the first of the fields ``names`` of ``config`` that is not an
    integer ``>= minimum`` (a bool, an ``int`` to Python, is refused)."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}: {value!r}; expected an integer >= {minimum}")


def option(default, help: str, **argparse_settings) -> dataclasses.Field:
    """A dataclass field with ``default`` and the command-line ``help`` of its option; further
    ``add_argument`` settings (``choices``, ``metavar``) pass through unchanged."""
    return dataclasses.field(default=default, metadata={"help": help, **argparse_settings})
