"""The theory's data family, beside the paper's: HMMs that satisfy Theorem 1's assumptions.

The paper's family (``hmm.presets``: 16 states, 8 tokens, Dirichlet(0.1) rows) has more states
than tokens, so its emissions are not gamma-observable (gamma = 0, Assumption 2 fails) and
Theorem 1 says nothing about how well the hand-built network predicts it. The **observable**
family keeps the vocabulary, the prompt format and the transitions' Dirichlet(0.1) rows and changes
two things:

* ``S = 4 <= p = 8`` states: a generic 4 x 8 emission matrix has full row rank, so gamma > 0
  (Assumption 2); the transition's rank is at most S = 4 (Assumption 1 with d = 4);
* Dirichlet(0.05) emission rows: sparser, so a token names its state more often.

Why this one: of the candidates ``hmmtf signal`` measures (``figures/families/signal.json``,
``docs/empirical.md``, "A second data family"), it is where an in-context learner has the most to
gain over counting tokens, measured as the in-context unigram's loss minus the prior-predictive
ceiling's. Low-rank transitions with Dirichlet factors (``rank = 2``) were also tried: they leave
almost no sequential structure (the in-context bigram gains 0.02 nats over the unigram, against
0.14 here), and the ceiling's SMC has no prior for them.

Registered in :data:`hmm.MIXTURE_SPECS` and :data:`hmm.PROMPT_FORMATS` under
``observable-1024`` and ``observable-8192`` (the paper regime's task counts). This module, not
``hmm.presets``, holds them so that adding a family leaves the paper family's registry, which
every committed result was computed from, as it is.
"""
from __future__ import annotations

from hmm.presets import MIXTURE_SPECS, PROMPT_FORMATS, MixtureSpec
from hmm.prompts import PromptFormat

OBSERVABLE_STATES = 4
OBSERVABLE_TOKENS = 8
OBSERVABLE_TRANSITION_CONCENTRATION = 0.1
OBSERVABLE_EMISSION_CONCENTRATION = 0.05
OBSERVABLE_TASK_COUNTS = (1024, 8192)
"""Task counts of the observable family: the paper regime's (in context by the memorisation rule)."""


def observable_spec(num_tasks: int) -> MixtureSpec:
    """``num_tasks`` HMMs of the observable family (module docstring)."""
    return MixtureSpec(num_tasks=num_tasks, num_states=OBSERVABLE_STATES, num_tokens=OBSERVABLE_TOKENS,
                       transition_concentration=OBSERVABLE_TRANSITION_CONCENTRATION,
                       emission_concentration=OBSERVABLE_EMISSION_CONCENTRATION)


OBSERVABLE_SPECS: dict[str, MixtureSpec] = {f"observable-{count}": observable_spec(count)
                                            for count in OBSERVABLE_TASK_COUNTS}
OBSERVABLE_FORMAT = PromptFormat(num_demos=6, demo_length=16, test_length=16)
"""The regime ladder's format (``tasks-N``), so that the two families' numbers compare."""

MIXTURE_SPECS.update(OBSERVABLE_SPECS)
PROMPT_FORMATS.update({name: OBSERVABLE_FORMAT for name in OBSERVABLE_SPECS})  # noqa: C420 (the line figures/families/signal.json was made from)
