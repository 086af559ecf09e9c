"""Exact hidden-Markov-model engine: parameters, filtering, sampling, mixtures, memory predictors.

Public API (other packages rely on these names):

- :class:`HMM` (``initial (..., S)``, ``transition (..., S, S)``, ``emission (..., S, p)``),
  :class:`Mixture`, :class:`PromptFormat`, :class:`Prompts`;
- filtering: :func:`filter_beliefs`, :func:`next_token_probs`, :func:`log_likelihood`;
- sampling: :func:`sample_sequences`, :func:`sample_prompts`;
- mixtures: :func:`bayes_predictive`, :func:`own_task_predictive` (each prompt's own HMM: the
  oracle); presets: :func:`mixture_preset`, :data:`PROMPT_FORMATS` (the paper's family, and the
  observable family of :mod:`hmm.families`);
- generators: :func:`random_hmm`, :func:`dirichlet_rows`, :func:`low_rank_transition`,
  :func:`observable_emission`;
- chains: :func:`stationary_distribution`, :func:`spectral_gap`, :func:`dobrushin_coefficient`.
"""
from hmm import families  # noqa: F401  (registers the observable family's mixtures and formats)
from hmm.bayes import BayesPrediction, bayes_predictive
from hmm.filtering import FilterResult, filter_beliefs, log_likelihood, next_token_probs
from hmm.generators import LowRankTransition, dirichlet_rows, low_rank_transition, observable_emission, random_hmm
from hmm.markov import dobrushin_coefficient, spectral_gap, stationary_distribution
from hmm.memory import own_task_predictive
from hmm.model import HMM, check_stochastic, check_tokens
from hmm.presets import MIXTURE_SPECS, PROMPT_FORMATS, MixtureSpec, mixture_preset
from hmm.prompts import Mixture, PromptFormat, Prompts, sample_prompts, sample_sequences

__all__ = [
    "HMM",
    "MIXTURE_SPECS",
    "PROMPT_FORMATS",
    "MixtureSpec",
    "mixture_preset",
    "BayesPrediction",
    "FilterResult",
    "LowRankTransition",
    "Mixture",
    "PromptFormat",
    "Prompts",
    "bayes_predictive",
    "check_stochastic",
    "check_tokens",
    "dirichlet_rows",
    "dobrushin_coefficient",
    "filter_beliefs",
    "log_likelihood",
    "low_rank_transition",
    "next_token_probs",
    "observable_emission",
    "own_task_predictive",
    "random_hmm",
    "sample_prompts",
    "sample_sequences",
    "spectral_gap",
    "stationary_distribution",
]
