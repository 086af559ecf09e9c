"""Named mixtures and prompt formats: ``tiny`` (tests), ``cpu-small`` (minutes on 2 cores),
``paper`` (8192 HMMs x 128 states x 16 tokens, as in arXiv 2506.01919, Appendix B; Dirichlet(0.01)
transitions and Dirichlet(0.02) emissions, chosen by ``hmmtf family-calibration``; its Dirichlet(0.1)
control is ``paper-dirichlet-0.1``, its sparser sibling ``paper-sparse``) and
``paper-mini`` (the paper pipeline's rehearsal on a CPU: 128 HMMs, so that the Bayes-optimal
predictor and the task-id probe are many-way).

Why Dirichlet(0.1) rows (every preset but ``paper``): with concentration 1 the tasks of ``cpu-small`` are nearly
indistinguishable in context (Bayes-optimal top-1 accuracy 0.149 with no demonstration, 0.162 with
six); with 0.1 rows are sparse, tasks differ and the in-context signal is large (0.354 -> 0.405,
loss 1.757 -> 1.625 nats). Measured by ``hmmtf calibrate --preset cpu-small``
(``figures/calibration/cpu-small.json``; table in ``docs/hmm.md``). Why 8 tasks in ``cpu-small``:
a RoFormer trained for 15 CPU minutes memorises 8 HMMs well enough to come within 8.8% of the
unigram-to-Bayes gap, 64 only within 36% (``docs/hmm.md``). Each chain starts in its
stationary distribution, so every demonstration is a stationary segment.
"""
from __future__ import annotations

from dataclasses import dataclass

from hmm.generators import random_hmm
from hmm.prompts import Mixture, PromptFormat


@dataclass(frozen=True)
class MixtureSpec:
    """Parameters of a random mixture (uniform task weights)."""

    num_tasks: int
    num_states: int
    num_tokens: int
    transition_concentration: float = 0.1
    emission_concentration: float = 0.1
    rank: int | None = None

    def build(self, seed: int = 0) -> Mixture:
        model = random_hmm(
            self.num_states,
            self.num_tokens,
            batch=(self.num_tasks,),
            transition_concentration=self.transition_concentration,
            emission_concentration=self.emission_concentration,
            rank=self.rank,
            initial="stationary",
            seed=seed,
        )
        return Mixture.uniform(model)


MIXTURE_SPECS: dict[str, MixtureSpec] = {
    "tiny": MixtureSpec(num_tasks=8, num_states=4, num_tokens=4),
    "cpu-small": MixtureSpec(num_tasks=8, num_states=16, num_tokens=8),
    # The paper's scale. Its Dirichlet(0.01) transitions and Dirichlet(0.02) emissions are the family
    # the rule of empirical/yardsticks/family_calibration.py chose (figures/families/paper-scale/): with 0.1 rows
    # the true HMM is right 10% of the time (chance 6.25%), and the in-context bigram gains nothing.
    "paper": MixtureSpec(num_tasks=8192, num_states=128, num_tokens=16, transition_concentration=0.01,
                         emission_concentration=0.02),
    # The paper-scale family first used, kept as a recorded control (figures/families/paper-scale/,
    # cell "T 0.1, O 0.1": oracle test accuracy 0.100, oracle 2.732 nats against 2.773 uniform).
    "paper-dirichlet-0.1": MixtureSpec(num_tasks=8192, num_states=128, num_tokens=16),
    # The sparsest cell of the paper-scale calibration grid (Dirichlet 0.005 / 0.005), the paper's
    # sizes otherwise. It exists because its in-context signal beyond counting is large enough for a
    # CPU network to learn it well inside the paper's budget: its bigram gains 0.43 nats over the
    # in-context unigram where `paper`'s gains 0.115 (figures/families/paper-scale/). It is where the
    # mechanism claims at 128 states are judged on a network that clearly beats the n-grams, beside
    # `paper`, where the margins are a few hundredths of a nat (docs/empirical.md, "128 states").
    "paper-sparse": MixtureSpec(num_tasks=8192, num_states=128, num_tokens=16, transition_concentration=0.005,
                                emission_concentration=0.005),
    # The calibration grid's cell between the two above (Dirichlet 0.01 / 0.01: `paper`'s transitions,
    # sparser emissions), the paper's sizes otherwise: its bigram gains 0.178 nats over the in-context
    # unigram (figures/families/paper-scale/). With `paper` (0.115) and `paper-sparse` (0.428) it is
    # the third point of the plateau study's escape budget against the family's signal (issue 51).
    "paper-dirichlet-0.01": MixtureSpec(num_tasks=8192, num_states=128, num_tokens=16, transition_concentration=0.01,
                                        emission_concentration=0.01),
    "paper-mini": MixtureSpec(num_tasks=128, num_states=16, num_tokens=8),
    # The task-count ladder of the regime study (docs/empirical.md, "Regimes"): cpu-small's HMMs
    # (16 states, 8 tokens), more of them; 8192 is the paper's count.
    **{f"tasks-{count}": MixtureSpec(num_tasks=count, num_states=16, num_tokens=8) for count in (64, 1024, 8192)},
}

PROMPT_FORMATS: dict[str, PromptFormat] = {
    "tiny": PromptFormat(num_demos=3, demo_length=8, test_length=8),
    "cpu-small": PromptFormat(num_demos=6, demo_length=16, test_length=16),
    "paper": PromptFormat(num_demos=7, demo_length=32, test_length=32),
    "paper-dirichlet-0.1": PromptFormat(num_demos=7, demo_length=32, test_length=32),
    "paper-sparse": PromptFormat(num_demos=7, demo_length=32, test_length=32),
    "paper-dirichlet-0.01": PromptFormat(num_demos=7, demo_length=32, test_length=32),
    "paper-mini": PromptFormat(num_demos=3, demo_length=16, test_length=16),
    **{f"tasks-{count}": PromptFormat(num_demos=6, demo_length=16, test_length=16) for count in (64, 1024, 8192)},
}


def mixture_preset(name: str, seed: int = 0) -> Mixture:
    """The mixture named ``name`` (see :data:`MIXTURE_SPECS`), generated from ``seed``."""
    if name not in MIXTURE_SPECS:
        raise ValueError(f"name: {name!r}; expected one of {sorted(MIXTURE_SPECS)}")
    return MIXTURE_SPECS[name].build(seed)
