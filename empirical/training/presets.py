"""Named experiments: which mixture and prompt format, which RoFormer, how long to train. The one
registry of presets: ``hmmtf train``, ``evaluate``, ``analyze`` and ``calibrate`` (and the training
benchmark) look a name up here, with :func:`get_preset`, or rebuild the preset a checkpoint was
trained on, with :func:`preset_from_task`.

``tiny`` is for tests (seconds), ``cpu-small`` trains in minutes on 2 CPU cores, ``paper`` is the
paper's scale (arXiv 2506.01919, Section 2.1 and Appendix B): 8192 HMMs x 128 states x 16 tokens,
a RoFormer of 16 layers, 16 heads and width 1024, 131,072 prompts = 64 epochs x 64 steps x
batch 32, each prompt fresh; ``paper-mini`` runs the paper's pipeline (``hmmtf reproduce``) at a
size that 2 CPU cores finish in seconds; ``paper-cpu`` trains the competent 4 x 4 x 64 recipe on
the 128-state ``paper-sparse`` mixture on the CPU and ``paper-cpu-mini`` is its rehearsal.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import hmm
from empirical.training.model import INIT_STD, RoFormerConfig
from empirical.training.train import TrainConfig


@dataclass(frozen=True)
class ExperimentPreset:
    """One experiment.

    Args:
        name: the preset's name.
        mixture: name of an :func:`hmm.mixture_preset`; ``mixture_seed`` generates it.
        prompt_format: the prompts' layout (:class:`hmm.PromptFormat`).
        num_layers, num_heads, width, tie_embeddings: the RoFormer (its vocabulary is the
            mixture's p tokens plus the delimiter).
        init_std: standard deviation of the RoFormer's initial weight matrices (default the
            model's :data:`~empirical.training.model.INIT_STD`).
        train: optimiser, schedule and length of training.
        data_seed: seed of the prompt streams (training, held-out, unigram).
        eval_prompts: held-out prompts used by ``hmmtf evaluate``.
    """

    name: str
    mixture: str
    prompt_format: hmm.PromptFormat
    num_layers: int
    num_heads: int
    width: int
    train: TrainConfig
    mixture_seed: int = 0
    data_seed: int = 0
    eval_prompts: int = 512
    tie_embeddings: bool = False
    init_std: float = INIT_STD

    def __post_init__(self) -> None:
        if self.mixture not in hmm.MIXTURE_SPECS:
            raise ValueError(f"mixture: {self.mixture!r}; expected one of {sorted(hmm.MIXTURE_SPECS)}")

    def model_config(self, num_tokens: int) -> RoFormerConfig:
        """The RoFormer for a mixture of ``num_tokens`` tokens (vocabulary = tokens + delimiter)."""
        return RoFormerConfig(
            vocab_size=num_tokens + 1,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            width=self.width,
            tie_embeddings=self.tie_embeddings,
            init_std=self.init_std,
        )

    @property
    def mixture_spec(self) -> hmm.MixtureSpec:
        """The current spec of the mixture named ``mixture`` (:data:`hmm.MIXTURE_SPECS`)."""
        return hmm.MIXTURE_SPECS[self.mixture]

    def build_mixture(self) -> hmm.Mixture:
        """The preset's mixture (float64, CPU), generated from ``mixture_seed``."""
        return self.mixture_spec.build(self.mixture_seed)

    def task(self) -> dict:
        """JSON description of the data, stored in checkpoints so that evaluation can rebuild it."""
        return {
            "kind": "hmm-mixture",
            "preset": self.name,
            "mixture": self.mixture,
            "mixture_spec": dataclasses.asdict(self.mixture_spec),
            "mixture_seed": self.mixture_seed,
            "prompt_format": dataclasses.asdict(self.prompt_format),
            "data_seed": self.data_seed,
            "eval_prompts": self.eval_prompts,
        }


PRESETS: dict[str, ExperimentPreset] = {
    "tiny": ExperimentPreset(
        name="tiny",
        mixture="tiny",
        prompt_format=hmm.PROMPT_FORMATS["tiny"],
        num_layers=2,
        num_heads=2,
        width=32,
        train=TrainConfig(steps=60, batch_size=16, learning_rate=3e-3, warmup_steps=5, log_every=10),
        eval_prompts=128,
    ),
    "cpu-small": ExperimentPreset(
        name="cpu-small",
        mixture="cpu-small",
        prompt_format=hmm.PROMPT_FORMATS["cpu-small"],
        num_layers=4,
        num_heads=4,
        width=64,
        train=TrainConfig(steps=3000, batch_size=32, learning_rate=3e-3, warmup_steps=150, log_every=25,
                          checkpoint_every=500),
        eval_prompts=1024,
    ),
    "paper": ExperimentPreset(
        name="paper",
        mixture="paper",
        prompt_format=hmm.PROMPT_FORMATS["paper"],
        num_layers=16,
        num_heads=16,
        width=1024,
        train=TrainConfig(steps=64 * 64, batch_size=32, learning_rate=3e-4, warmup_steps=200, log_every=16,
                          checkpoint_every=512, precision="bf16", compile=True),
        eval_prompts=2048,
    ),
    # The paper preset's pipeline (`hmmtf reproduce`) in miniature, for a rehearsal on 2 CPU
    # cores: same precision setting (bf16 on CUDA) and the same stages, a 128-HMM mixture.
    "paper-mini": ExperimentPreset(
        name="paper-mini",
        mixture="paper-mini",
        prompt_format=hmm.PROMPT_FORMATS["paper-mini"],
        num_layers=2,
        num_heads=2,
        width=32,
        train=TrainConfig(steps=64, batch_size=32, learning_rate=3e-3, warmup_steps=8, log_every=8,
                          checkpoint_every=32, precision="bf16"),
        eval_prompts=128,
    ),
    # The competent 128-state network on the CPU (`hmmtf reproduce --preset paper-cpu`): the recipe
    # of models/paper-scale-cpu/sparse-4x4x64-2x (models/README.md), the cheapest network at 128
    # states that beats every in-context predictor, the variable-order one included (69 M tokens,
    # against 138 M for paper-4x4x64-4x-curriculum; no 2-layer network passes that gate) -- 4 x 4 x
    # 64, init std 0.1, AdamW 3e-3 held after 200 warm-up steps and decayed to 0 over the last 20%
    # of twice the paper's 4096 steps, fp32, no compile -- on paper-sparse (the paper's 128 states
    # and 16 tokens, Dirichlet 0.005 rows); 64 evaluation prompts, as the committed 128-state
    # evaluations (the Bayes predictor over 8192 HMMs of 128 states costs 3-10 s a prompt on a core).
    "paper-cpu": ExperimentPreset(
        name="paper-cpu",
        mixture="paper-sparse",
        prompt_format=hmm.PROMPT_FORMATS["paper-sparse"],
        num_layers=4,
        num_heads=4,
        width=64,
        init_std=0.1,
        train=TrainConfig(steps=2 * 64 * 64, batch_size=32, learning_rate=3e-3, warmup_steps=200, min_lr_ratio=0.0,
                          decay_steps=1640, log_every=64, checkpoint_every=512, precision="fp32"),
        eval_prompts=64,
    ),
    # paper-cpu's pipeline in miniature, for its rehearsal in the tests: paper-mini's mixture,
    # format and network with paper-cpu's recipe (init std 0.1, fp32, decay to 0 over the last 20%).
    "paper-cpu-mini": ExperimentPreset(
        name="paper-cpu-mini",
        mixture="paper-mini",
        prompt_format=hmm.PROMPT_FORMATS["paper-mini"],
        num_layers=2,
        num_heads=2,
        width=32,
        init_std=0.1,
        train=TrainConfig(steps=64, batch_size=32, learning_rate=3e-3, warmup_steps=8, min_lr_ratio=0.0,
                          decay_steps=13, log_every=8, checkpoint_every=32, precision="fp32"),
        eval_prompts=64,
    ),
}

LADDER_TASK_COUNTS = (8, 64, 1024, 8192)
"""Task counts of the regime ladder (docs/empirical.md, "Regimes"): cpu-small's 8 HMMs, which a
small RoFormer memorises, up to the paper's 8192, each seen about 12 times in 3000 steps of 32."""
LADDER_MODELS = {"small": (4, 4, 64), "deep": (8, 4, 64)}
"""The ladder's two RoFormers, ``(num_layers, num_heads, width)``: cpu-small's, and twice as deep
(claims 1 and 3 are about where in depth things happen; four layers leave little room)."""


def ladder_preset_name(num_tasks: int, model: str) -> str:
    """The preset of the ladder point (``num_tasks``, ``model``); cpu-small is (8, small)."""
    return "cpu-small" if (num_tasks, model) == (8, "small") else f"tasks-{num_tasks}-{model}"


def _ladder_presets() -> dict[str, ExperimentPreset]:
    """Every ladder point but cpu-small: cpu-small's data format and training, other task counts
    (mixtures ``tasks-N``, or cpu-small's 8 HMMs) and models."""
    base = PRESETS["cpu-small"]
    presets = {}
    for num_tasks in LADDER_TASK_COUNTS:
        for model, (num_layers, num_heads, width) in LADDER_MODELS.items():
            name = ladder_preset_name(num_tasks, model)
            if name in PRESETS:
                continue
            presets[name] = dataclasses.replace(
                base, name=name, mixture="cpu-small" if num_tasks == 8 else f"tasks-{num_tasks}",
                num_layers=num_layers, num_heads=num_heads, width=width)
    return presets


PRESETS.update(_ladder_presets())


def get_preset(name: str) -> ExperimentPreset:
    """The preset called ``name``; ``ValueError`` listing the known names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"preset: {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[name]


def preset_from_task(task: dict) -> ExperimentPreset:
    """The preset a checkpoint's ``task`` was trained on, with the seeds and format it stored.

    The checkpoint names its mixture preset and also stores that preset's full spec; if the named
    preset has changed since (other sizes or concentrations), rebuilding it would silently give
    the model a different mixture, so that is refused.
    """
    if task.get("kind") != "hmm-mixture":
        raise ValueError(f"task: kind {task.get('kind')!r}; expected 'hmm-mixture' (a checkpoint of `hmmtf train`)")
    preset = dataclasses.replace(
        get_preset(task["preset"]),
        mixture=task["mixture"],
        mixture_seed=task["mixture_seed"],
        prompt_format=hmm.PromptFormat(**task["prompt_format"]),
        data_seed=task["data_seed"],
        eval_prompts=task["eval_prompts"],
    )
    current = dataclasses.asdict(preset.mixture_spec)
    if task.get("mixture_spec") != current:
        raise ValueError(
            f"task: trained on mixture {task['mixture']!r} with spec {task.get('mixture_spec')}, but that preset is now "
            f"{current}; expected the spec the checkpoint was trained on (retrain, or use the code version that trained it)"
        )
    return preset
