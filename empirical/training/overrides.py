"""What ``hmmtf train`` trains: a preset (named defaults, :mod:`empirical.training.presets`), overridden by a
config file (``--config FILE``, TOML or JSON), overridden in turn by command-line flags.

Every value belongs to one of three sections, those of a checkpoint's ``config.json``:

- ``data``: ``mixture`` (a name of :data:`hmm.MIXTURE_SPECS`), ``mixture_seed``, ``data_seed``,
  ``prompt_format`` (a name of :data:`hmm.PROMPT_FORMATS`), its fields ``num_demos``,
  ``demo_length``, ``test_length``, and ``eval_prompts`` (the held-out prompts of ``hmmtf evaluate``);
- ``model``: every field of :class:`~empirical.training.model.RoFormerConfig` but ``vocab_size``, which the
  mixture decides (its tokens plus the delimiter) and which is refused;
- ``train``: every field of :class:`~empirical.training.train.TrainConfig`.

A flag is ``--field-name`` (``--width 128``, ``--learning-rate 1e-3``; booleans ``--compile`` /
``--no-compile``); a file has one table (TOML) or object (JSON) per section, and may name the
preset (a top-level ``preset``, which ``--preset`` overrides)::

    preset = "tiny"
    [data]
    mixture = "paper-mini"
    prompt_format = "paper-mini"
    [model]
    width = 64
    [train]
    learning_rate = 1e-3

Resolution (:func:`resolve`), key by key, later layers winning: the preset, the file, the flags.
Every number is checked there, for flags and files alike: a value that is not finite is refused
whatever the field (a NaN or infinite rate, scale or standard deviation), then each config checks
its own ranges.
A named ``prompt_format`` replaces the preset's format, then ``num_demos``, ``demo_length`` and
``test_length`` replace its fields. When ``steps`` is set and ``warmup_steps`` is not, the warm-up
follows the shorter or longer run: ``min(preset's warm-up, steps // 10)``.

A run that differs from its preset gets its own folder by default (:meth:`TrainingRun.default_run_dir`):
``runs/PRESET-field=value-...``, one ``field=value`` per resolved value that differs from the
preset's, so that the same command resumes the same run and ``runs/PRESET`` stays the preset's.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import typing
from pathlib import Path

import hmm
from empirical.training.configs import check_integers
from empirical.training.model import RoFormerConfig
from empirical.training.presets import PRESETS, ExperimentPreset, get_preset
from empirical.training.train import TrainConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # the tomli backport, a dependency on Python 3.10 only (pyproject.toml)
    import tomli as tomllib

Overrides = dict[str, dict[str, typing.Any]]
"""Values by section and field: ``{"model": {"width": 64}, "train": {...}}``."""

FORMAT_FIELDS = tuple(field.name for field in dataclasses.fields(hmm.PromptFormat))
"""The prompt format's fields, each a ``data`` value of its own."""
DATA_FIELDS: dict[str, type] = {"mixture": str, "mixture_seed": int, "data_seed": int, "prompt_format": str,
                                **dict.fromkeys(FORMAT_FIELDS, int), "eval_prompts": int}
DERIVED_MODEL_FIELD = "vocab_size"
"""The model field that follows from the mixture and cannot be set."""


def _field_types(config_class: type, leave_out: tuple[str, ...] = ()) -> dict[str, type]:
    hints = typing.get_type_hints(config_class)
    return {field.name: hints[field.name] for field in dataclasses.fields(config_class) if field.name not in leave_out}


SECTIONS: dict[str, dict[str, type]] = {
    "data": DATA_FIELDS,
    "model": _field_types(RoFormerConfig, leave_out=(DERIVED_MODEL_FIELD,)),
    "train": _field_types(TrainConfig),
}
"""Every value a run can override, by section, with its type (int, float, bool or str)."""
PRESET_KEY = "preset"
"""The config file's top-level key naming the preset."""
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
MAX_RUN_NAME = 120
"""Longest folder name :meth:`TrainingRun.default_run_dir` derives; beyond it ``--run-dir`` is required."""


@dataclasses.dataclass(frozen=True)
class TrainingRun:
    """A preset with its overrides resolved.

    ``preset`` holds the run's data, training and model shape (its ``model_config`` leaves out
    the model fields a preset does not have: ``mlp_ratio``, ``rotary_base``, ``init_std``);
    ``model`` is the network trained. ``changes`` lists ``(field, value)`` for every resolved
    value that differs from the preset's, in section order (data, model, train).
    """

    preset: ExperimentPreset
    model: RoFormerConfig
    changes: tuple[tuple[str, typing.Any], ...]

    def default_run_dir(self) -> Path:
        """``runs/PRESET`` for the preset itself, else ``runs/PRESET-field=value-...`` (see the
        module docstring); ``ValueError`` asking for ``--run-dir`` when that name would be too long."""
        name = self.preset.name + "".join(f"-{field}={_as_text(value)}" for field, value in self.changes)
        if len(name) > MAX_RUN_NAME:
            raise ValueError(
                f"--run-dir: not given, and the folder name derived from the {len(self.changes)} values that differ "
                f"from preset {self.preset.name!r} ({name!r}) is longer than {MAX_RUN_NAME} characters; expected "
                f"--run-dir FOLDER")
        return Path("runs") / name


def _as_text(value) -> str:
    """A value in a folder name: booleans as TOML writes them, floats exactly (``repr``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def flag(field: str) -> str:
    """The command-line flag of ``field``: ``--field-name``."""
    return "--" + field.replace("_", "-")


def refuse_derived(value, where: str) -> typing.NoReturn:
    """``ValueError``: ``where`` (a flag or a config file's key) gave the vocabulary size, which the mixture decides."""
    raise ValueError(f"{where}: {value!r}; expected no value: the vocabulary is the mixture's tokens plus the "
                     f"delimiter (choose the mixture instead, --mixture or [data] mixture)")


def _checked(value, expected: type, where: str):
    """``value`` if it has the ``expected`` type (an integer for a float, converted; never a
    boolean for a number); ``ValueError`` naming ``where`` otherwise."""
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, expected) and not (expected is not bool and isinstance(value, bool)):
        return value
    raise ValueError(f"{where}: {value!r}; expected {TYPE_NAMES[expected]}")


def read_config_file(path: Path) -> tuple[str | None, Overrides]:
    """``(preset name or None, values by section)`` of a config file: TOML (``.toml``) or JSON
    (``.json``) with the sections of :data:`SECTIONS` and an optional top-level ``preset``.
    Unknown keys, values of the wrong type and ``vocab_size`` are refused, naming the key."""
    path = Path(path)
    if path.suffix not in (".toml", ".json"):
        raise ValueError(f"--config: {str(path)!r}; expected a .toml or .json file")
    if not path.is_file():
        raise FileNotFoundError(f"--config: {str(path)!r} does not exist; expected a TOML or JSON config file")
    text = path.read_text()
    try:
        content = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except ValueError as error:  # tomllib.TOMLDecodeError and json.JSONDecodeError
        raise ValueError(f"--config: {str(path)!r} is not valid {path.suffix[1:].upper()} ({error}); expected the "
                         f"format of docs/empirical.md, 'Commands'") from None
    if not isinstance(content, dict):
        raise ValueError(f"--config: {str(path)!r} holds a {type(content).__name__}; expected an object of sections")
    known = sorted([PRESET_KEY, *SECTIONS])
    for key in content:
        if key not in known:
            raise ValueError(f"--config: {str(path)!r} has unknown key {key!r}; expected some of {known}")
    preset = content.get(PRESET_KEY)
    if preset is not None:
        _checked(preset, str, f"{PRESET_KEY} in {str(path)!r}")
    overrides: Overrides = {}
    for section, fields in SECTIONS.items():
        values = content.get(section, {})
        if not isinstance(values, dict):
            raise ValueError(f"{section} in {str(path)!r}: {values!r}; expected a table of {section} values")
        overrides[section] = {}
        for key, value in values.items():
            where = f"{section}.{key} in {str(path)!r}"
            if section == "model" and key == DERIVED_MODEL_FIELD:
                refuse_derived(value, where)
            if key not in fields:
                raise ValueError(f"--config: {str(path)!r} [{section}] has unknown key {key!r}; expected some of "
                                 f"{sorted(fields)}")
            overrides[section][key] = _checked(value, fields[key], where)
    return preset, overrides


def _train_values(base: TrainConfig, overrides: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """The preset's training values with ``overrides``; the warm-up follows an overridden
    ``steps`` unless it is overridden too: ``min(preset's warm-up, steps // 10)``."""
    values = {**base.to_dict(), **overrides}
    if "steps" in overrides and "warmup_steps" not in overrides:
        values["warmup_steps"] = min(base.warmup_steps, overrides["steps"] // 10)
    return values


def _resolved_values(preset: ExperimentPreset, model: RoFormerConfig) -> dict[str, typing.Any]:
    """Every value a run can override, by field name, in section order."""
    return {"mixture": preset.mixture, "mixture_seed": preset.mixture_seed, "data_seed": preset.data_seed,
            **dataclasses.asdict(preset.prompt_format), "eval_prompts": preset.eval_prompts,
            **{field: value for field, value in model.to_dict().items() if field != DERIVED_MODEL_FIELD},
            **preset.train.to_dict()}


def check_curricula(train: TrainConfig, given: dict[str, typing.Any]) -> None:
    """``ValueError`` for a curriculum the run cannot follow: one longer than the run (``steps``),
    whose end the run would never reach, or ``context_curriculum_demos`` among the ``given`` values
    without ``context_curriculum_steps``, which would be ignored (there is no context curriculum)."""
    for field in ("curriculum_steps", "context_curriculum_steps"):
        if getattr(train, field) > train.steps:
            raise ValueError(f"{field}: {getattr(train, field)}; expected at most steps = {train.steps} (a curriculum "
                             f"longer than the run never reaches its end)")
    if "context_curriculum_demos" in given and not train.context_curriculum_steps:
        raise ValueError(f"context_curriculum_demos: {train.context_curriculum_demos}; expected it only with "
                         f"context_curriculum_steps > 0 (without them there is no context curriculum to start from "
                         f"that many demonstrations)")


def resolve(preset_name: str, *layers: Overrides) -> TrainingRun:
    """The preset ``preset_name`` overridden by ``layers`` in order (the file's, then the flags'),
    key by key, as the module docstring says; ``ValueError`` naming the first invalid value."""
    base = get_preset(preset_name)
    merged = {section: {field: value for layer in layers for field, value in layer.get(section, {}).items()}
              for section in SECTIONS}
    for values in merged.values():
        for field, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{field}: {value!r}; expected a finite number")
    data = merged["data"]
    prompt_format = base.prompt_format
    if "prompt_format" in data:
        if data["prompt_format"] not in hmm.PROMPT_FORMATS:
            raise ValueError(f"prompt_format: {data['prompt_format']!r}; expected one of {sorted(hmm.PROMPT_FORMATS)}")
        prompt_format = hmm.PROMPT_FORMATS[data["prompt_format"]]
    prompt_format = dataclasses.replace(prompt_format,
                                        **{field: data[field] for field in FORMAT_FIELDS if field in data})
    preset = dataclasses.replace(base, prompt_format=prompt_format, **{
        field: data[field] for field in ("mixture", "mixture_seed", "data_seed", "eval_prompts") if field in data})
    check_integers(preset, ("mixture_seed", "data_seed"), minimum=0)
    check_integers(preset, ("eval_prompts",), minimum=1)
    model = dataclasses.replace(base.model_config(preset.mixture_spec.num_tokens), **merged["model"])
    preset = dataclasses.replace(preset, train=TrainConfig(**_train_values(base.train, merged["train"])),
                                 num_layers=model.num_layers, num_heads=model.num_heads, width=model.width,
                                 tie_embeddings=model.tie_embeddings)
    check_curricula(preset.train, merged["train"])
    before = _resolved_values(base, base.model_config(base.mixture_spec.num_tokens))
    changes = tuple((field, value) for field, value in _resolved_values(preset, model).items()
                    if value != before[field])
    return TrainingRun(preset, model, changes)


def training_run(preset_flag: str | None, config_file: str | None, flags: Overrides) -> TrainingRun:
    """The run of ``hmmtf train``: the preset of ``--preset`` (else the file's ``preset``), the
    file's values, then the flags'."""
    file_preset, file_values = read_config_file(Path(config_file)) if config_file else (None, {})
    name = preset_flag or file_preset
    if name is None:
        raise ValueError(f"--preset: not given; expected one of {sorted(PRESETS)} (or a top-level "
                         f"{PRESET_KEY!r} in --config)")
    try:
        return resolve(name, file_values, flags)
    except ValueError as error:
        raise ValueError(_named_where_given(str(error), flags, file_values, config_file)) from error


def _named_where_given(message: str, flags: Overrides, file_values: Overrides, config_file: str | None) -> str:
    """``message`` (``field: value; expected ...``, the configs' convention) with the field named as
    the user gave it: ``--field-name`` for a flag, ``section.field in 'FILE'`` for a config file's
    value; unchanged for a value neither gave (the preset's, or one derived from another)."""
    field, separator, rest = message.partition(": ")
    for section in SECTIONS:
        if separator and field in flags.get(section, {}):
            return f"{flag(field)}: {rest}"
    for section in SECTIONS:
        if separator and field in file_values.get(section, {}):
            return f"{section}.{field} in {str(config_file)!r}: {rest}"
    return message
