"""The options of ``hmmtf train`` and ``hmmtf curve``: one ``--field-name`` per value a run can
override (:data:`empirical.training.overrides.SECTIONS`), read back as the flags' layer of
:func:`empirical.training.overrides.resolve`."""
from __future__ import annotations

import argparse
import typing

import hmm
from empirical.training.overrides import DERIVED_MODEL_FIELD, FORMAT_FIELDS, SECTIONS, Overrides, flag, refuse_derived
from empirical.training.train import PRECISIONS

HELP = {
    "mixture": f"the mixture of HMMs, one of {sorted(hmm.MIXTURE_SPECS)}",
    "mixture_seed": "seed that generates the mixture",
    "data_seed": "seed of the prompt streams (training, held-out, unigram)",
    "prompt_format": f"the prompts' layout, one of {sorted(hmm.PROMPT_FORMATS)} (then --num-demos, --demo-length, "
                     f"--test-length change its fields)",
    **{name: f"PromptFormat.{name}" for name in FORMAT_FIELDS},
    "eval_prompts": "held-out prompts of `hmmtf evaluate` (recorded with the data)",
    "steps": "optimizer steps; unless --warmup-steps is set too, the warm-up becomes min(preset's, steps // 10)",
    "seed": "seed of the initial weights",
    "learning_rate": "peak learning rate, reached at the end of the warm-up",
    "min_lr_ratio": "floor of the decay, as a fraction of the peak",
    "decay_steps": "0: a cosine decay from the end of the warm-up; d > 0: the peak rate, then a linear decay over "
                   "the last d steps",
    "log_every": "steps averaged by each metrics.jsonl record",
    "checkpoint_every": "steps between periodic checkpoints, a multiple of --log-every (0: a checkpoint at the end "
                        "and at a stop only)",
    "precision": f"one of {PRECISIONS}",
    "attention_scale": "c in the attention scores c q.k / sqrt(d_head) (1: the standard scale)",
    "soft_targets": "train against each prompt's own HMM's next-token distribution (its forward filter), not the "
                    "sampled next token",
    "curriculum_mixture": "a mixture of the same tokens mixed into the first --curriculum-steps steps ('': none)",
    "curriculum_steps": "steps over which the curriculum's share of a batch falls linearly to none",
    "curriculum_share": "the curriculum's share of a batch at step 0",
    "context_curriculum_steps": "steps over which the prompts grow from --context-curriculum-demos demonstrations to "
                                "the prompt format's, in equal shares (0: no context curriculum)",
    "context_curriculum_demos": "demonstrations in the prompts of step 0 of a context curriculum",
}
"""Each flag's help where the field's owner and name do not say enough."""
METAVARS = {int: "INT", float: "FLOAT", str: "NAME"}
"""The placeholder of a flag's value in the help, by the field's type."""


def _dest(section: str, field: str) -> str:
    """Where the parsed arguments keep ``field`` of ``section``: ``section.field``."""
    return f"{section}.{field}"


def add_override_options(parser: argparse.ArgumentParser) -> None:
    """One ``--field-name`` option per value of :data:`SECTIONS`, in a group per section, each
    defaulting to None (not given); booleans as ``--field`` / ``--no-field``. Also a hidden
    ``--vocab-size``, so that giving it is refused with the reason (:func:`flag_overrides`)."""
    owners = {"data": "ExperimentPreset", "model": "RoFormerConfig", "train": "TrainConfig"}
    for section, fields in SECTIONS.items():
        group = parser.add_argument_group(f"{section} overrides ({owners[section]}; default: the preset's, "
                                          f"then --config's)")
        for field, field_type in fields.items():
            settings: dict[str, typing.Any] = {"dest": _dest(section, field), "default": None,
                                               "help": HELP.get(field, f"{owners[section]}.{field}")}
            if field_type is bool:
                settings["action"] = argparse.BooleanOptionalAction
            else:
                settings.update(type=field_type, metavar=METAVARS[field_type])
            group.add_argument(flag(field), **settings)
    parser.add_argument(flag(DERIVED_MODEL_FIELD), dest=_dest("model", DERIVED_MODEL_FIELD), default=None,
                        help=argparse.SUPPRESS)


def flag_overrides(args: argparse.Namespace) -> Overrides:
    """The values given as flags (:func:`add_override_options`), by section."""
    derived = getattr(args, _dest("model", DERIVED_MODEL_FIELD))
    if derived is not None:
        refuse_derived(derived, flag(DERIVED_MODEL_FIELD))
    return {section: {field: value for field in fields if (value := getattr(args, _dest(section, field))) is not None}
            for section, fields in SECTIONS.items()}
