"""Plain-dataclass configurations: written to and read from JSON (checkpoints, run logs),
validated on construction (:func:`check_integers`), and turned into command-line options, so that
a subcommand's options are its config's fields.

A field that is a command-line option is declared with :func:`option` (its default and help);
:func:`add_config_options` adds one ``--field-name`` option per field to a parser and
:func:`config_from_options` builds the config back from the parsed values.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing


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


def add_config_options(parser: argparse.ArgumentParser, config_class: type) -> None:
    """Add one ``--field-name`` option per field of the dataclass ``config_class``, in field order.

    The field's annotation gives the option's values: ``int``, ``float`` or ``str`` one value of
    that type, ``tuple[X, ...]`` one or more values of type ``X``. The default is the field's,
    the help that of :func:`option` followed by the default. ``TypeError`` names a field with any
    other annotation.
    """
    annotations = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        annotation = annotations[field.name]
        settings = dict(field.metadata)
        settings["help"] = f"{settings.get('help', '')} (default: %(default)s)".lstrip()
        if typing.get_origin(annotation) is tuple and typing.get_args(annotation)[1:] == (Ellipsis,):
            settings.update(nargs="+", type=typing.get_args(annotation)[0])
        elif annotation in (int, float, str):
            settings["type"] = annotation
        else:
            raise TypeError(
                f"{config_class.__name__}.{field.name}: annotation {annotation!r}; expected int, float, str or "
                f"tuple[X, ...] (a command-line option)"
            )
        parser.add_argument("--" + field.name.replace("_", "-"), default=field.default, **settings)


def config_from_options(config_class: type, options: dict):
    """The ``config_class`` whose fields are the values of ``options`` (``vars`` of the parsed
    arguments, which may hold other keys) under the field names; lists become tuples."""
    values = {field.name: options[field.name] for field in dataclasses.fields(config_class)}
    return config_class(**{name: tuple(value) if isinstance(value, list) else value for name, value in values.items()})
