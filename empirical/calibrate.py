"""Calibration of the mixture's Dirichlet concentrations: does the in-context signal exist?

For each concentration c (used for both transition and emission rows), build the preset's mixture
with Dirichlet(c) rows, and measure the Bayes-optimal predictor and the unigram baseline on
held-out prompts with :func:`empirical.evaluate.evaluate_predictors`. The in-context signal is the
rise of the Bayes-optimal accuracy (and fall of its loss) with the number of demonstrations; a
trained model cannot show more than that.

``hmmtf calibrate --preset cpu-small`` writes ``figures/calibration/PRESET.json`` and
``PRESET.png`` (Bayes accuracy and loss vs number of demonstrations, one curve per c).
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm import tqdm  # noqa: E402

import hmm  # noqa: E402
from empirical.data import held_out_prompts, unigram_distribution  # noqa: E402
from empirical.evaluate import bayes_predictor, evaluate_predictors, unigram_predictor  # noqa: E402

DEFAULT_CONCENTRATIONS = (1.0, 0.3, 0.2, 0.1)


def calibrate(preset: str, concentrations, num_prompts: int, seed: int) -> dict:
    """Per concentration: the Bayes-optimal and unigram curves vs number of demonstrations."""
    if preset not in hmm.MIXTURE_SPECS:
        raise ValueError(f"preset: {preset!r}; expected one of {sorted(hmm.MIXTURE_SPECS)}")
    spec, fmt = hmm.MIXTURE_SPECS[preset], hmm.PROMPT_FORMATS[preset]
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
        curve = evaluation["by_demonstrations"]
        results.append({
            "concentration": concentration,
            "num_demonstrations": curve["num_demonstrations"],
            "bayes_accuracy": curve["bayes"]["accuracy"],
            "bayes_accuracy_stderr": curve["bayes"]["accuracy_stderr"],
            "bayes_loss": curve["bayes"]["loss"],
            "unigram_loss": curve["unigram"]["loss"],
        })
    return {"preset": preset, "num_prompts": num_prompts, "seed": seed, "results": results}


def plot_calibration(report: dict, path: Path) -> None:
    figure, (accuracy_axis, loss_axis) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for entry in report["results"]:
        label = f"Dirichlet({entry['concentration']:g})"
        accuracy_axis.errorbar(entry["num_demonstrations"], entry["bayes_accuracy"], yerr=entry["bayes_accuracy_stderr"], marker="o", capsize=2, label=label)
        line = loss_axis.plot(entry["num_demonstrations"], entry["bayes_loss"], marker="o", label=f"{label} Bayes")[0]
        loss_axis.plot(entry["num_demonstrations"], entry["unigram_loss"], linestyle=":", color=line.get_color(), label=f"{label} unigram")
    accuracy_axis.set(xlabel="number of demonstrations", ylabel="Bayes-optimal top-1 accuracy")
    loss_axis.set(xlabel="number of demonstrations", ylabel="loss (nats/token)")
    for axis in (accuracy_axis, loss_axis):
        axis.grid(alpha=0.3)
    accuracy_axis.legend()
    loss_axis.legend(fontsize=7, ncol=2)
    figure.suptitle(f"In-context signal of the '{report['preset']}' mixture vs Dirichlet concentration ({report['num_prompts']} prompts, mean +- s.e.)")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def run_calibrate(args) -> int:
    start = time.perf_counter()
    report = calibrate(args.preset, args.concentrations, args.num_prompts, args.seed)
    report["command"] = args.command_line
    report["seconds"] = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.preset}.json").write_text(json.dumps(report, indent=2))
    plot_calibration(report, out / f"{args.preset}.png")
    print(f"{'concentration':>13} | Bayes accuracy after 0 .. n demonstrations")
    for entry in report["results"]:
        print(f"{entry['concentration']:>13g} | " + " ".join(f"{value:.3f}" for value in entry["bayes_accuracy"]))
    print(f"wrote {out / (args.preset + '.json')} and .png in {report['seconds']:.1f} s")
    return 0


def register(subparsers) -> None:
    """Add ``calibrate`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("calibrate", help="Bayes-optimal in-context signal of a mixture preset vs Dirichlet concentration")
    parser.add_argument("--preset", default="cpu-small", choices=sorted(hmm.MIXTURE_SPECS))
    parser.add_argument("--concentrations", type=float, nargs="+", default=list(DEFAULT_CONCENTRATIONS))
    parser.add_argument("--num-prompts", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="figures/calibration")
    parser.set_defaults(run=run_calibrate)
