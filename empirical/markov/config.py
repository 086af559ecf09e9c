"""What a Markov sweep trains: the grid of binary chains, the RoFormer variants and the optimiser
settings, in one validated :class:`MarkovSweepConfig` (written to ``results.json``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from empirical.configs import JSONConfig
from empirical.markov.chains import is_memoryless
from empirical.model import RoFormerConfig
from empirical.train import TrainConfig

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
    ``p + q = 1``. ``init_std`` is the standard deviation of every weight matrix at initialisation
    (the RoFormer's default is 0.02); Makkuva et al. stress that the trap depends on it.
    Optimiser defaults follow Makkuva et al.'s code (AdamW, lr 2e-3, weight decay 1e-3,
    betas (0.9, 0.95), cosine schedule); sizes are scaled down to fit a CPU.
    """

    p_values: tuple[float, ...] = (0.1, 0.5, 0.9)
    q_values: tuple[float, ...] = (0.1, 0.5, 0.9)
    architectures: tuple[str, ...] = tuple(ARCHITECTURES)
    seeds: int = 4
    width: int = 8
    num_heads: int = 1
    sequence_length: int = 64
    batch_size: int = 32
    steps: int = 500
    learning_rate: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 1e-3
    init_std: float = 0.02
    eval_sequences: int = 256
    log_every: int = 10
    data_seed: int = 0
    workers: int = 2

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
        for name in ("seeds", "width", "num_heads", "sequence_length", "batch_size", "steps", "eval_sequences",
                     "log_every", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r}; expected an integer >= 1")
        if not (isinstance(self.init_std, (int, float)) and math.isfinite(self.init_std) and self.init_std > 0):
            raise ValueError(f"init_std: {self.init_std!r}; expected a finite number > 0")
        # The remaining fields are validated where they are used (RoFormerConfig, TrainConfig).
        self.model_config(self.architectures[0])
        self.train_config(0)

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
