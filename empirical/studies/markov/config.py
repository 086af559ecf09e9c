"""What a Markov sweep trains: the grid of binary chains, the arms (initialisation x RoFormer
variant) and the optimiser settings, in one validated :class:`MarkovSweepConfig` (written to
``results.json``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from empirical.training.configs import JSONConfig, check_integers, option
from empirical.studies.markov.chains import is_memoryless
from empirical.studies.markov.inits import INITS, check_init
from empirical.training.model import RoFormerConfig
from empirical.training.train import TrainConfig

ARCHITECTURES: dict[str, dict] = {
    "1-layer-tied": {"num_layers": 1, "tie_embeddings": True},
    "1-layer-untied": {"num_layers": 1, "tie_embeddings": False},
    "2-layer-tied": {"num_layers": 2, "tie_embeddings": True},
}
"""The RoFormer variants of the study: the paper's trap is claimed for the first (``p + q > 1``)
and denied for the other two."""

VOCAB_SIZE = 2
"""Binary chains."""


@dataclass(frozen=True)
class MarkovSweepConfig(JSONConfig):
    """Everything a sweep depends on; validated on construction.

    The grid is ``p_values x q_values`` (``p = P(1|0)``, ``q = P(0|1)``) minus the i.i.d. cells
    ``p + q = 1``; an arm is an initialisation of :data:`empirical.studies.markov.inits.INITS` and an
    architecture of :data:`ARCHITECTURES`. ``init_std`` is the standard deviation of every weight
    matrix at initialisation (the RoFormer's default is 0.02; the low-rank initialisations keep
    the Frobenius norms it gives); ``init_rank`` is the rank of the low-rank ones.
    Optimiser defaults follow Makkuva et al.'s code (AdamW, lr 2e-3, weight decay 1e-3,
    betas (0.9, 0.95), cosine schedule); sizes are scaled down to fit a CPU.
    """

    p_values: tuple[float, ...] = option((0.1, 0.5, 0.9), "switching probabilities p = P(1|0) of the grid",
                                         metavar="P")
    q_values: tuple[float, ...] = option((0.1, 0.5, 0.9), "switching probabilities q = P(0|1) of the grid",
                                         metavar="Q")
    architectures: tuple[str, ...] = option(tuple(ARCHITECTURES), f"RoFormer variants, a subset of {list(ARCHITECTURES)}",
                                            choices=tuple(ARCHITECTURES), metavar="NAME")
    inits: tuple[str, ...] = option(INITS, f"initialisations, a subset of {list(INITS)} (docs/markov.md)",
                                    choices=INITS, metavar="NAME")
    init_rank: int = option(1, "rank of the low-rank initialisations, 1 .. width - 1")
    seeds: int = option(4, "runs per arm and cell (seed = initial weights and training data)")
    width: int = option(8, "residual-stream width of the RoFormer")
    num_heads: int = option(1, "attention heads per layer")
    sequence_length: int = option(64, "tokens per training and held-out sequence")
    batch_size: int = option(32, "sequences per training step")
    steps: int = option(500, "training steps per run")
    learning_rate: float = option(2e-3, "peak AdamW learning rate")
    warmup_steps: int = option(20, "linear warm-up steps before the cosine decay")
    weight_decay: float = option(1e-3, "AdamW weight decay of the weight matrices")
    init_std: float = option(0.02, "std of every weight matrix at initialisation")
    eval_sequences: int = option(2048, "held-out sequences per cell (the decision rule's tolerance scales as "
                                       "1/sqrt of it)")
    log_every: int = option(10, "steps averaged per logged training loss (the resolution of escape steps)")
    data_seed: int = option(0, "seed of the held-out sequences")
    workers: int = option(2, "parallel training processes")

    def __post_init__(self) -> None:
        for name in ("p_values", "q_values"):
            values = getattr(self, name)
            if len(values) == 0:
                raise ValueError(f"{name}: empty; expected at least one switching probability")
            for value in values:
                if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ValueError(f"{name}: contains {value!r}; expected switching probabilities in [0, 1]")
        unknown = [name for name in self.architectures if name not in ARCHITECTURES]
        if unknown or not self.architectures:
            raise ValueError(f"architectures: {list(self.architectures)!r}; expected a non-empty subset of {list(ARCHITECTURES)}")
        check_integers(self, ("seeds", "width", "num_heads", "sequence_length", "batch_size", "steps",
                              "eval_sequences", "log_every", "workers"), minimum=1)
        check_integers(self, ("data_seed",), minimum=0)
        if not self.inits or any(init not in INITS for init in self.inits):
            raise ValueError(f"inits: {list(self.inits)!r}; expected a non-empty subset of {list(INITS)}")
        check_init(self.inits[0], self.init_rank, self.width)
        if not (isinstance(self.init_std, (int, float)) and math.isfinite(self.init_std) and self.init_std > 0):
            raise ValueError(f"init_std: {self.init_std!r}; expected a finite number > 0")
        # The remaining fields are validated where they are used (RoFormerConfig, TrainConfig).
        self.model_config(self.architectures[0])
        self.train_config(0)

    def arms(self) -> list[tuple[str, str]]:
        """The ``(init, architecture)`` pairs that are trained, in config order."""
        return [(init, architecture) for init in self.inits for architecture in self.architectures]

    def model_config(self, architecture: str) -> RoFormerConfig:
        """The RoFormer of ``architecture`` at this width and initialisation."""
        return RoFormerConfig(vocab_size=VOCAB_SIZE, num_heads=self.num_heads, width=self.width,
                              init_std=self.init_std, **ARCHITECTURES[architecture])

    def train_config(self, seed: int) -> TrainConfig:
        """Training hyper-parameters of one run; ``seed`` draws the initial weights."""
        return TrainConfig(steps=self.steps, batch_size=self.batch_size, learning_rate=self.learning_rate,
                           warmup_steps=self.warmup_steps, weight_decay=self.weight_decay, seed=seed,
                           log_every=self.log_every, precision="fp32")

    def cells(self) -> list[tuple[float, float]]:
        """The ``(p, q)`` cells that are trained: the grid without the i.i.d. cells."""
        return [(p, q) for p in self.p_values for q in self.q_values if not is_memoryless(p, q)]

    def iid_cells(self) -> list[tuple[float, float]]:
        """The ``(p, q)`` cells of the grid that are skipped: ``p + q = 1``, where both lines coincide."""
        return [(p, q) for p in self.p_values for q in self.q_values if is_memoryless(p, q)]
