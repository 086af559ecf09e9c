"""What every ``hmmtf`` subcommand's options share:

- value types (argparse ``type=``): counts, thread numbers and seeds are refused when they are out
  of range, never replaced by a default. A refused value ends the command before it starts with one
  line (:mod:`hmmtf`'s convention): ``hmmtf evaluate: error: argument --num-prompts: 0; expected an
  integer >= 1``;
- a config dataclass's fields as options (:func:`add_config_options`) and back
  (:func:`config_from_command_line`);
- the output policy: a default folder unique to its input (:func:`default_results_folder`); a
  folder is written only where every file the command would write there
  (:mod:`empirical.training.result_files`) is its own, the same input's or command line's, unless
  ``--overwrite`` (:func:`check_results_owner`, :func:`check_study_owner`); a committed result under
  ``figures/`` only by its registered command, whatever ``--overwrite`` says
  (:func:`check_committed_results`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import tempfile
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ledger.results import registered

if TYPE_CHECKING:
    from empirical.training.result_files import ResultFiles


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

    parse.minimum = minimum  # type: ignore[attr-defined]  # read by the tests of every checked option
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


def device(text: str) -> str:
    """The option type of ``--device``: ``text`` when it names a device this torch can use
    (``cpu``, or ``cuda``/``cuda:N`` where torch has CUDA and device ``N``); refused as argparse's
    ``argument --device: bogus; expected ...`` otherwise, before the command loads anything."""
    import torch  # only where a command that takes --device is parsed

    expected = "expected cpu, or cuda / cuda:N on a machine where torch has CUDA"
    try:
        chosen = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text}; {expected}") from None
    if chosen.type == "cpu":
        return text
    if chosen.type != "cuda":
        raise argparse.ArgumentTypeError(f"{text}; {expected}")
    if not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}; {expected} (this torch, {torch.__version__}, has no usable CUDA "
                                         f"device: use cpu)")
    if chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text}; {expected} (this machine has {torch.cuda.device_count()} CUDA "
                                         f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    return text


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


def result_text(value) -> str:
    """A result JSON's text as every command writes it: strict JSON (``allow_nan=False``) without
    indentation or spaces after its separators, and a final line break. Indentation was a third of
    the bytes of the committed results (issue 66, item 3); ``python -m json.tool FILE`` shows one
    indented, and what any reader parses is the same."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False) + "\n"


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


def _recorded(path: Path, owner: Callable[[dict], object]) -> object:
    """What ``owner`` reads from the JSON file ``path``: None when it is not a JSON object or
    ``owner`` finds nothing of the kind."""
    try:
        document = json.loads(path.read_text())
        return owner(document) if isinstance(document, dict) else None
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None


def _check_owner(out: Path, files: ResultFiles, owner: Callable[[dict], object], is_mine: Callable[[object], bool],
                 theirs: Callable[[object], str], mine: str, overwrite: bool, option: str) -> None:
    """The rule of :func:`check_results_owner` and :func:`check_study_owner`: every one of
    ``files`` that ``out`` holds must be this command's, unless ``overwrite``. A report is when
    ``is_mine`` of what ``owner`` reads from it; a companion is when a report of this command lies
    beside it (a companion alone is a file this command does not know). ``theirs`` describes a
    stranger's record and ``mine`` this command's input, in the refusal."""
    if overwrite:
        return
    expected = f"expected an empty folder or {mine}, or {OVERWRITE_OPTION} to replace them"
    present = [name for name in files.reports if (Path(out) / name).is_file()]
    for name in present:
        recorded = _recorded(Path(out) / name, owner)
        if not is_mine(recorded):
            raise ValueError(f"{option}: {str(out)!r} holds {name} with {theirs(recorded)}; {expected}")
    if present:
        return
    strangers = [name for name in files.companions if (Path(out) / name).exists()]
    if strangers:
        raise ValueError(f"{option}: {str(out)!r} holds {', '.join(strangers)}, which this command writes, beside none "
                         f"of its reports ({', '.join(files.reports)}) that would say whose it is; {expected}")


def check_results_owner(out: Path, source: str | Path, files: ResultFiles, overwrite: bool, command_line: str,
                        option: str = "--out") -> None:
    """Refuse ``out`` unless every one of ``files`` it holds is this input's (unless
    ``overwrite``): a report that records another input under ``checkpoint`` (or
    ``source.checkpoint``, an export's) than ``source`` (compared as resolved paths), or none, or a
    companion without a report beside it (a file the command does not know: the user's), so that
    a second model's evaluation never silently replaces the first one's. A folder with none of
    them, or with this input's, is accepted (a rerun replaces its own results). Then
    :func:`check_committed_results`, which ``overwrite`` does not lift."""
    mine = Path(source).resolve()

    def recorded_input(document: dict) -> object:
        return document.get("checkpoint", (document.get("source") or {}).get("checkpoint"))

    _check_owner(out, files, recorded_input, lambda recorded: isinstance(recorded, str) and Path(recorded).resolve() == mine,
                 lambda recorded: (f"the results of {recorded!r}, not of {str(source)!r}" if isinstance(recorded, str)
                                   else f"no input it names, not of {str(source)!r}"),
                 "this input's", overwrite, option)
    check_committed_results(out, command_line, files, option)


OVERWRITE_OPTION = "--overwrite"
"""The option that lets a command replace results another input or command line wrote."""
SESSION_OPTIONS = (OVERWRITE_OPTION, "--debug", "-v", "--verbose")
"""Options that change how a command runs, not what it computes: left out when two command lines are compared."""


def add_overwrite_option(parser: argparse.ArgumentParser) -> None:
    """Add :data:`OVERWRITE_OPTION` to a study command's ``parser`` (see :func:`check_study_owner`)."""
    parser.add_argument(OVERWRITE_OPTION, action="store_true",
                        help="replace the results of another command line in --out (without it they are refused)")


def command_words(command_line: str) -> list[str]:
    """``command_line``'s words without :data:`SESSION_OPTIONS`: what two command lines are compared by."""
    return [word for word in shlex.split(command_line) if word not in SESSION_OPTIONS]


def check_study_owner(out: Path, command_line: str, files: ResultFiles, overwrite: bool) -> None:
    """Refuse ``out`` unless every one of ``files`` it holds is this command line's (unless
    ``overwrite``): a report that records another command line than ``command_line`` under
    ``command`` (the two read word by word, without :data:`SESSION_OPTIONS`), or none, or a
    companion without a report beside it: a study's input is its command line (the runs, arms and
    settings it names), so a study over other runs must not silently replace the one in ``out``;
    the same command again (a rerun) replaces its own results. Then
    :func:`check_committed_results`, which ``overwrite`` does not lift."""
    mine = command_words(command_line)
    _check_owner(out, files, lambda document: document.get("command"),
                 lambda recorded: isinstance(recorded, str) and command_words(recorded) == mine,
                 lambda recorded: (f"the results of {recorded!r}, not of this command line" if isinstance(recorded, str)
                                   else "no command it names, not of this command line"),
                 "this command's", overwrite, "--out")
    check_committed_results(out, command_line, files, "--out")


CHECKOUT = Path(__file__).resolve().parents[1]
"""The checkout (or installed tree) this package is in: its ``figures/`` holds the committed results."""
COMMITTED_RESULTS = CHECKOUT / "figures"


def recorded_command(path: Path) -> str | None:
    """The command line a result JSON records: ``command``, or ``provenance.command``."""
    def command(document: dict) -> object:
        return document.get("command", (document.get("provenance") or {}).get("command"))

    recorded = _recorded(path, command)
    return recorded if isinstance(recorded, str) else None


def check_committed_results(out: Path, command_line: str, files: ResultFiles, option: str = "--out") -> None:
    """Refuse to replace a committed result with other settings, whatever ``--overwrite`` says:
    when ``out`` lies under the checkout's ``figures/`` and holds one of the reports of ``files``
    that the ledger registers (:func:`ledger.results.registered`), ``command_line`` must be the
    command the report records or its registered command (:attr:`ledger.results.Result.command`,
    up to its remarks in parentheses), compared word by word without :data:`SESSION_OPTIONS`. A
    report not yet there is a new result, accepted."""
    try:
        folder = Path(out).resolve().relative_to(COMMITTED_RESULTS)
    except ValueError:
        return
    mine = command_words(command_line)
    for name in files.reports:
        path = COMMITTED_RESULTS / folder / name
        result = registered(path.relative_to(CHECKOUT).as_posix())
        if result is None or result.command is None or not path.is_file():
            continue
        made_by = recorded_command(path)
        if mine in ([command_words(made_by)] if made_by else []) + [command_words(result.command.split(" (")[0])]:
            continue
        raise ValueError(f"{option}: {str(out)!r} holds {name}, a committed result (ledger/results.py) made by "
                         f"{made_by!r}; expected that command or its registered one, `{result.command}`, not this "
                         f"command line ({OVERWRITE_OPTION} does not lift this: to change a committed result's settings, "
                         f"change its registered command, or remove the file first with git rm)")
