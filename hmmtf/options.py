"""What every ``hmmtf`` subcommand's options share:

- value types (argparse ``type=``): counts, thread numbers and seeds are refused when they are out
  of range, never replaced by a default. A refused value ends the command before it starts with one
  line (:mod:`hmmtf`'s convention): ``hmmtf evaluate: error: argument --num-prompts: 0; expected an
  integer >= 1``;
- a config dataclass's fields as options (:func:`add_config_options`) and back
  (:func:`config_from_command_line`);
- the output policy: a default folder unique to its input (:func:`default_results_folder`), and a
  folder holding another input's or command line's results refused unless ``--overwrite``
  (:func:`check_results_owner`, :func:`check_study_owner`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import tempfile
import typing
from pathlib import Path
from collections.abc import Iterator
from typing import Callable


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


def check_output_folder(path: str | Path, name: str = "--out") -> Path:
    """``path`` as a ``Path`` if this process can write its outputs there: the folder, or the
    nearest of its parents that exists (the command creates the rest), is a folder in which a file
    can be created (a temporary one, removed at once; the operating system decides, whatever the
    user, the mode bits, ACLs or a read-only mount). ``ValueError`` naming ``name``, the path and
    the reason otherwise. Commands call it before any computation, so that one that cannot write
    its results refuses at once instead of after the work."""
    path = Path(path)
    existing = next(folder for folder in (path, *path.parents) if folder.exists())
    expected = "expected a folder this user can write to"
    if not existing.is_dir():
        raise ValueError(f"{name}: {str(path)!r}: {str(existing)!r} is not a folder; {expected}")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        where = "it" if existing == path else f"{str(existing)!r}, the nearest of its folders that exists,"
        raise ValueError(f"{name}: {str(path)!r} cannot be written: {where} refuses a new file (the operating "
                         f"system says: {error.strerror}); {expected}") from None
    return path


def output_folder(text: str) -> str:
    """The option type of output folders (``--out``): ``text`` once :func:`check_output_folder`
    accepts it, refused as argparse's ``argument --out: 'x': ... is not a folder; expected ...``."""
    try:
        check_output_folder(text, name="")
        return text
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix(": ")) from None


def add_config_options(parser: argparse.ArgumentParser, config_class: type) -> None:
    """Add one ``--field-name`` option per field of the dataclass ``config_class``, in field order.

    The field's annotation gives the option's values: ``int``, ``float`` or ``str`` one value of
    that type, ``tuple[X, ...]`` one or more values of type ``X``. The default is the field's, the
    help that of :func:`empirical.training.configs.option` followed by the default. ``TypeError``
    names a field with any other annotation.
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


def config_from_command_line(config_class: type, options: dict):
    """:func:`config_from_options`, with the ``ValueError`` of a refused field
    (``batch_size: 0; expected ...``, the project's convention) naming the field's option instead:
    ``--batch-size: 0; expected ...``."""
    try:
        return config_from_options(config_class, options)
    except ValueError as error:
        field, separator, rest = str(error).partition(": ")
        if separator and field in {known.name for known in dataclasses.fields(config_class)}:
            raise ValueError(f"--{field.replace('_', '-')}: {rest}") from error
        raise


RESULTS_ROOT = Path("runs")
"""Where a command's results go by default: a folder outside the tracked tree (``.gitignore``)."""


def default_results_folder(command: str, source: str | Path) -> Path:
    """``runs/COMMAND/SOURCE``: a command's default output folder for the input ``source`` (a
    checkpoint or run folder), unique to it. ``SOURCE`` is the input's path relative to the working
    folder where it lies inside it, else its absolute path under ``_absolute/``; a checkpoint's own
    ``checkpoint`` folder stands for its run (``runs/R/checkpoint`` is ``runs/R``)."""
    path = Path(source).resolve()
    if path.name == "checkpoint":
        path = path.parent
    try:
        relative = path.relative_to(Path.cwd().resolve())
    except ValueError:
        relative = Path("_absolute", *path.parts[1:])
    return RESULTS_ROOT / command / relative


def _recorded_owners(out: Path, results: tuple[str, ...],
                     owner: Callable[[dict], object]) -> Iterator[tuple[str, object]]:
    """``(name, owner)`` for each of the ``results`` (JSON files) that ``out`` holds: what ``owner``
    reads from it, None when the file is not a JSON object or ``owner`` finds nothing of the kind."""
    for name in results:
        path = Path(out) / name
        if not path.is_file():
            continue
        try:
            document = json.loads(path.read_text())
            recorded = owner(document) if isinstance(document, dict) else None
        except (ValueError, AttributeError):
            recorded = None
        yield name, recorded


def check_results_owner(out: Path, source: str | Path, results: tuple[str, ...], overwrite: bool,
                        option: str = "--out") -> None:
    """Refuse ``out`` when one of its ``results`` (JSON files) records another input under
    ``checkpoint`` (or ``source.checkpoint``, an export's) than ``source`` (compared as resolved
    paths), or none, unless ``overwrite``: a second model's evaluation must not silently replace
    the first one's. A folder with none of them, or with this input's, is accepted (a rerun
    replaces its own results)."""
    if overwrite:
        return
    mine = Path(source).resolve()
    for name, recorded in _recorded_owners(out, results, lambda document: document.get(
            "checkpoint", (document.get("source") or {}).get("checkpoint"))):
        if recorded is None or Path(recorded).resolve() != mine:
            theirs = "no input it names" if recorded is None else f"the results of {recorded!r}"
            raise ValueError(f"{option}: {str(out)!r} holds {name} with {theirs}, not of {str(source)!r}; expected an "
                             f"empty folder or this input's, or {OVERWRITE_OPTION} to replace them")


OVERWRITE_OPTION = "--overwrite"
"""The option that lets a command replace results another input or command line wrote."""


def add_overwrite_option(parser: argparse.ArgumentParser) -> None:
    """Add :data:`OVERWRITE_OPTION` to a study command's ``parser`` (see :func:`check_study_owner`)."""
    parser.add_argument(OVERWRITE_OPTION, action="store_true",
                        help="replace the results of another command line in --out (without it they are refused)")


def check_study_owner(out: Path, command_line: str, results: tuple[str, ...], overwrite: bool) -> None:
    """Refuse ``out`` when one of its ``results`` (JSON files) records another command line than
    ``command_line`` under ``command`` (the two read word by word, without :data:`OVERWRITE_OPTION`),
    or none, unless ``overwrite``: a study's input is its command line (the runs, arms and settings
    it names), so a study over other runs must not silently replace the one in ``out``; the same
    command again (a rerun) replaces its own results."""
    if overwrite:
        return
    mine = [word for word in shlex.split(command_line) if word != OVERWRITE_OPTION]
    for name, recorded in _recorded_owners(out, results, lambda document: document.get("command")):
        if not isinstance(recorded, str) or [word for word in shlex.split(recorded) if word != OVERWRITE_OPTION] != mine:
            theirs = "no command it names" if not isinstance(recorded, str) else f"the results of {recorded!r}"
            raise ValueError(f"--out: {str(out)!r} holds {name} with {theirs}, not of this command line; expected an "
                             f"empty folder or this command's, or {OVERWRITE_OPTION} to replace them")
