"""Calibration of the mixture's Dirichlet concentrations: does the in-context signal exist?

For each concentration c (used for both transition and emission rows), build the preset's mixture
with Dirichlet(c) rows, and measure the Bayes-optimal predictor and the unigram baseline on
held-out prompts with :func:`empirical.yardsticks.evaluate.evaluate_predictors`. The in-context signal is the
rise of the Bayes-optimal accuracy (and fall of its loss) with the number of demonstrations; a
trained model cannot show more than that.

``hmmtf calibrate --preset cpu-small`` (:mod:`hmmtf.commands.training`) writes
``figures/calibration/PRESET.json`` and ``PRESET.png`` (Bayes accuracy and loss vs number of
demonstrations, one curve per c, :func:`empirical.reports.plots.plot_calibration`).
"""
from __future__ import annotations

import dataclasses

from tqdm import tqdm

from empirical.training.data import held_out_prompts, unigram_distribution
from empirical.yardsticks.evaluate import bayes_predictor, evaluate_predictors, unigram_predictor
from empirical.training.presets import get_preset

DEFAULT_CONCENTRATIONS = (1.0, 0.3, 0.2, 0.1)
"""Dirichlet concentrations of ``hmmtf calibrate``: nearly uniform rows down to the presets' 0.1."""


def calibrate(preset: str, concentrations, num_prompts: int, seed: int) -> dict:
    """Per concentration: the Bayes-optimal and unigram curves vs number of demonstrations."""
    experiment = get_preset(preset)
    spec, fmt = experiment.mixture_spec, experiment.prompt_format
    results = []
    for concentration in tqdm(concentrations, desc=f"calibrating {preset}"):
        if not concentration > 0:
            raise ValueError(f"concentrations: {concentration!r}; expected numbers > 0")
        mixture = dataclasses.replace(spec, transition_concentration=concentration, emission_concentration=concentration).build(seed)
        prompts = held_out_prompts(mixture, fmt, num_prompts, seed)
        unigram = unigram_distribution(mixture, fmt, num_prompts, seed)
        evaluation = evaluate_predictors(
            {"bayes": bayes_predictor(mixture), "unigram": unigram_predictor(unigram)}, prompts, mixture.num_tokens
        )
        curve = evaluation.by_demonstrations
        bayes = curve.predictors["bayes"]
        results.append({
            "concentration": concentration,
            "num_demonstrations": curve.num_demonstrations,
            "bayes_accuracy": bayes.accuracy,
            "bayes_accuracy_stderr": bayes.accuracy_stderr,
            "bayes_loss": bayes.loss,
            "unigram_loss": curve.predictors["unigram"].loss,
        })
    return {"preset": preset, "num_prompts": num_prompts, "seed": seed, "results": results}
