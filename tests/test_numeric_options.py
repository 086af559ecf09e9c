"""Every numeric option of the commands whose options are a config dataclass (``hmmtf analyze``,
``hmmtf markov-sweep``, ``hmmtf markov-incontext``; ``hmmtf train``'s are tested in
tests/test_empirical_train_command.py) fed NaN, infinities, zero, negatives and huge values: a value
is accepted only when it is finite and not negative (a huge count or rate is a long or a wild run,
which is what it says), and otherwise refused with one line that names the option as its flag
(issue 53: one validation layer for every numeric value)."""
import dataclasses
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hmmtf
from empirical.analysis.report import AnalysisConfig
from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.incontext import InContextConfig
from empirical.training.overrides import SECTIONS
from hmmtf.options import config_from_command_line

COMMANDS = {"analyze": (AnalysisConfig, ["analyze", "CHECKPOINT"]), "markov-sweep": (MarkovSweepConfig, ["markov-sweep"]),
            "markov-incontext": (InContextConfig, ["markov-incontext"])}
"""Each command, its config dataclass and the words that parse (the options' defaults)."""

NUMERIC_OPTIONS = [(command, field.name, field.type) for command, (config_class, _) in COMMANDS.items()
                   for field in dataclasses.fields(config_class) if field.type in ("int", "float")]


@pytest.mark.parametrize("command, expected", [("analyze", 13), ("markov-sweep", 15), ("markov-incontext", 16)])
def test_the_numeric_options_are_found(command, expected):
    assert sum(option[0] == command for option in NUMERIC_OPTIONS) == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(option=st.sampled_from(NUMERIC_OPTIONS), data=st.data())
def test_every_numeric_option_is_finite_and_not_negative_or_refused_in_one_line_naming_its_flag(option, data):
    command, field, kind = option
    special = [0, -1, 10**18] if kind == "int" else [math.nan, math.inf, -math.inf, 0.0, -1.0, 1e300, 5e-324]
    drawn = st.integers(-10**20, 10**20) if kind == "int" else st.floats(allow_nan=True, allow_infinity=True)
    value = data.draw(st.one_of(st.sampled_from(special), drawn))
    config_class, words = COMMANDS[command]
    defaults = vars(hmmtf.build_parser(command).parse_args(words))
    try:
        config = config_from_command_line(config_class, {**defaults, field: value})
    except ValueError as error:
        message = str(error)
        assert "\n" not in message and message.startswith("--"), message
        flags = {f"--{name.replace('_', '-')}" for other, name, _ in NUMERIC_OPTIONS if other == command}
        named = re.search(rf"--{field.replace('_', '-')}\b|\b{field}\b", message)
        assert named or message.split(":")[0] in flags, message  # a relation of two options: the other's flag first
        return
    assert math.isfinite(value) and value >= 0, (command, field, value)
    assert getattr(config, field) == value


VALIDATED_OPTIONS = ({f"{section}.{field}" for section, fields in SECTIONS.items() for field in fields}
                     | {field.name for config_class, _ in COMMANDS.values() for field in dataclasses.fields(config_class)})
"""The destinations of the options a config validates: train's and curve's ``SECTION.FIELD``
(``resolve``, tested in tests/test_empirical_train_command.py) and the config dataclasses above."""


def test_no_command_has_a_plain_numeric_option_that_no_config_validates():
    """An option of type ``int`` or ``float`` takes NaN, infinities and negatives as given: it is
    either a field of a config that validates it, or it uses an option type of hmmtf.options that
    refuses what is out of range (``positive_int``, ``positive_float``, ...)."""
    unvalidated = []
    for command in hmmtf.SUBCOMMAND_MODULES:
        (subcommands,) = [action for action in hmmtf.build_parser(command)._actions if action.dest == "command"]
        unvalidated += [f"{command} {action.option_strings[0]}" for action in subcommands.choices[command]._actions
                        if action.type in (int, float) and action.dest not in VALIDATED_OPTIONS]
    assert unvalidated == []
