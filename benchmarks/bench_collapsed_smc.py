"""The collapsed-path SMC of the prior-predictive ceiling (hmm/collapsed_smc.py): its rate and its
Monte-Carlo error beside the parameter-space SMC's (hmm/prior_predictive.py), and its convergence
under doubled particles and burn-in, on the competence result's fresh-HMM prompts.

    OMP_NUM_THREADS=1 python benchmarks/bench_collapsed_smc.py --preset tasks-8192-deep --prompts 16 \
        --out runs/bench/collapsed_s16.json
    OMP_NUM_THREADS=1 python benchmarks/bench_collapsed_smc.py --preset paper --prompts 32 --replicates 2 \
        --particles 128 --burn-in-steps 32 --no-parameter-smc --doubling --out runs/bench/collapsed_s128.json

(``OMP_NUM_THREADS=1``: numpy's BLAS on one thread, as torch's, so that a run's CPU seconds are one
core's.)

* **rate and error**: ``--replicates`` R independent runs of each SMC (seeds ``0..R-1``), each timed.
  Per scope (test sequence, all positions; :func:`empirical.yardsticks.competence.scope_rows`), from
  the per-prompt losses ``L_r(b)``: the averaged predictive's mean loss, the replicates' mean loss,
  the Jensen term ``mean_r L_r - L(average)`` (how far averaging inside the log moves the loss),
  the standard error of the averaged ceiling's mean loss (:func:`~empirical.yardsticks.competence.ceiling_error`),
  and the per-prompt Monte-Carlo standard deviation of one run, ``sigma = sqrt(mean_b Var_r L_r(b))``.
  **Cost at equal error**: the seconds per prompt one run of the method would need for
  ``sigma = 0.01`` nats, ``t sigma^2 / 0.01^2`` (``t`` its CPU seconds per prompt: on a shared
  machine the wall seconds add the waits for a core; the variance of a Monte-Carlo estimate falls as
  1 / work).
* **doubling** (``--doubling``, the collapsed SMC only): R runs at twice the particles and twice the
  burn-in (seeds ``100..100+R-1``). Per scope, the change of the replicates' mean loss, its paired
  standard error ``sqrt(sum_b (Var_r L'_r(b) + Var_r L_r(b)) / R) / B`` (the prompts are the
  same on both sides, so only the Monte-Carlo error remains), its z, and the change of the averaged
  ceiling. Rule (that of ``bench_prior_predictive.py``): converged when the change is within one
  paired standard error.
* **start law**: :func:`hmm.collapsed_smc.start_law_error` at each burn-in used (400 prior draws).
* ``cost_ratio_parameter_over_collapsed``: per scope, the parameter-space SMC's cost at equal error
  over the collapsed SMC's (above 1: the collapsed SMC is cheaper).

The JSON (``--out``) records the command, the commit, the settings and every number.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_prior_predictive import timed  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.yardsticks.competence import ceiling_error, per_prompt_loss, scope_rows  # noqa: E402
from empirical.yardsticks.regime import fresh_prompts  # noqa: E402
from hmm.collapsed_smc import CollapsedSMCSettings, collapsed_prior_predictive, start_law_error  # noqa: E402
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, prior_predictive  # noqa: E402
from empirical.measurement.roofline import host  # noqa: E402
from hmmtf import source_commit  # noqa: E402

REFERENCE_STDERR = 0.01
"""nats: the per-prompt Monte-Carlo standard deviation at which the costs are compared."""
START_LAW_DRAWS = 400
DOUBLED_SEED_OFFSET = 100


def cpu_timed(function):
    """``(function(), wall seconds, CPU seconds of this process)``. On a shared machine the CPU
    seconds of a single-threaded run are its cost; its wall seconds add the waits for a core."""
    start = time.process_time()
    result, wall = timed(function)
    return result, wall, time.process_time() - start


def replicates(run, count: int, seed: int) -> dict:
    """``{"predictions", "wall_seconds", "cpu_seconds", "rejuvenations_per_prompt"}`` of ``count``
    runs ``run(seed + r)``."""
    results, wall, cpu = zip(*(cpu_timed(lambda r=r: run(seed + r)) for r in range(count)))
    rejuvenations = torch.stack([result.rejuvenations.double() for result in results]).mean().item()
    return {"predictions": [result.next_token for result in results], "wall_seconds": list(wall),
            "cpu_seconds": list(cpu), "rejuvenations_per_prompt": rejuvenations}


def replicate_losses(predictions: list[torch.Tensor], tokens: torch.Tensor, num_tokens: int,
                     rows: torch.Tensor) -> torch.Tensor:
    """``(R, B)``: ``L_r(b)``, each run's mean loss per prompt over ``rows``."""
    return torch.stack([per_prompt_loss(prediction, tokens, num_tokens, rows) for prediction in predictions])


def error_and_cost(runs: dict, tokens: torch.Tensor, prompt_format, num_tokens: int) -> dict:
    """The module docstring's rate and error of one method's :func:`replicates`, per scope; rates
    and costs by CPU seconds."""
    predictions, cpu, wall = runs["predictions"], runs["cpu_seconds"], runs["wall_seconds"]
    prompts = tokens.shape[0]
    per_prompt = sum(cpu) / len(cpu) / prompts
    averaged = torch.stack(predictions).mean(0)
    result: dict = {"cpu_seconds": cpu, "wall_seconds": wall, "prompts_per_cpu_minute": 60 / per_prompt,
                    "prompts_per_wall_minute": 60 * len(wall) * prompts / sum(wall),
                    "rejuvenations_per_prompt": runs["rejuvenations_per_prompt"]}
    for scope, rows in scope_rows(prompt_format).items():
        losses = replicate_losses(predictions, tokens, num_tokens, rows)
        sigma = losses.var(0).mean().sqrt().item()
        average_loss = per_prompt_loss(averaged, tokens, num_tokens, rows).mean().item()
        result[scope] = {"loss_of_average": average_loss, "mean_replicate_loss": losses.mean().item(),
                         "jensen_term": losses.mean().item() - average_loss,
                         "monte_carlo_stderr": ceiling_error(predictions, tokens, num_tokens, rows),
                         "per_prompt_sigma": sigma,
                         "cpu_seconds_per_prompt_at_reference_sigma": per_prompt * sigma**2 / REFERENCE_STDERR**2}
    return result


def doubling_change(base: list[torch.Tensor], doubled: list[torch.Tensor], tokens: torch.Tensor, prompt_format,
                    num_tokens: int) -> dict:
    """The module docstring's doubling statistics, per scope."""
    result = {}
    for scope, rows in scope_rows(prompt_format).items():
        before, after = (replicate_losses(runs, tokens, num_tokens, rows) for runs in (base, doubled))
        change = (after.mean(0) - before.mean(0)).mean().item()
        stderr = math.sqrt((after.var(0) + before.var(0)).sum().item() / len(base)) / tokens.shape[0]
        averaged = [per_prompt_loss(torch.stack(runs).mean(0), tokens, num_tokens, rows).mean().item()
                    for runs in (base, doubled)]
        result[scope] = {"change": change, "paired_stderr": stderr, "z": change / stderr,
                         "change_of_average": averaged[1] - averaged[0], "converged": abs(change) < stderr}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tasks-8192-deep", choices=sorted(PRESETS))
    parser.add_argument("--prompts", type=int, default=16, help="the first prompts of the competence result's fresh HMMs")
    parser.add_argument("--fresh-tasks", type=int, default=1024, help="as hmmtf evaluate's --fresh-tasks")
    parser.add_argument("--replicates", type=int, default=3, help="independent runs of each SMC (at least 2)")
    parser.add_argument("--particles", type=int, default=CollapsedSMCSettings.particles, help="the collapsed SMC's")
    parser.add_argument("--burn-in-steps", type=int, default=CollapsedSMCSettings.burn_in_steps)
    parser.add_argument("--sweeps", type=int, default=CollapsedSMCSettings.sweeps,
                        help="the collapsed SMC's Gibbs sweeps at the end of each segment")
    parser.add_argument("--batch-prompts", type=int, default=CollapsedSMCSettings.batch_prompts)
    parser.add_argument("--parameter-smc", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the parameter-space SMC (minutes per prompt on a core at S = 128)")
    parser.add_argument("--parameter-particles", type=int, default=SMCSettings.particles)
    parser.add_argument("--moves", type=int, default=SMCSettings.moves, help="the parameter-space SMC's sweeps")
    parser.add_argument("--doubling", action=argparse.BooleanOptionalAction, default=False,
                        help="also run the collapsed SMC at twice the particles and burn-in (about 4x the base's cost)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.prompts < 2 or args.replicates < 2:
        parser.error(f"--prompts {args.prompts}, --replicates {args.replicates}: expected at least 2 of each")
    try:
        settings = CollapsedSMCSettings(args.particles, args.burn_in_steps, args.sweeps,
                                        batch_prompts=args.batch_prompts)
        doubled = replace(settings, particles=2 * args.particles, burn_in_steps=2 * args.burn_in_steps)
        parameter_settings = SMCSettings(args.parameter_particles, args.moves, batch_prompts=args.batch_prompts)
    except ValueError as error:
        parser.error(str(error))

    commit = source_commit()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    preset = get_preset(args.preset)
    prompt_format = preset.prompt_format
    _, prompts = fresh_prompts(preset, args.prompts, args.fresh_tasks)
    tokens, prior = prompts.tokens, DirichletHMMPrior.from_spec(preset.mixture_spec)
    p = prior.num_tokens

    runs = {"collapsed": replicates(lambda seed: collapsed_prior_predictive(
        tokens, prompt_format, prior, replace(settings, seed=seed)), args.replicates, 0)}
    if args.parameter_smc:
        runs["parameter_smc"] = replicates(lambda seed: prior_predictive(
            tokens, prompt_format, prior, replace(parameter_settings, seed=seed)), args.replicates, 0)
    methods = {name: error_and_cost(method, tokens, prompt_format, p) for name, method in runs.items()}
    burn_ins = [settings.burn_in_steps]
    doubling = None
    if args.doubling:
        twice = replicates(lambda seed: collapsed_prior_predictive(
            tokens, prompt_format, prior, replace(doubled, seed=seed)), args.replicates, DOUBLED_SEED_OFFSET)
        methods["collapsed_doubled"] = error_and_cost(twice, tokens, prompt_format, p)
        doubling = {**doubling_change(runs["collapsed"]["predictions"], twice["predictions"], tokens, prompt_format, p),
                    "rule": "converged when |change| < its paired standard error"}
        burn_ins.append(doubled.burn_in_steps)
    cost_ratio = None if "parameter_smc" not in methods else {
        scope: methods["parameter_smc"][scope]["cpu_seconds_per_prompt_at_reference_sigma"]
        / methods["collapsed"][scope]["cpu_seconds_per_prompt_at_reference_sigma"] for scope in scope_rows(prompt_format)}
    start_law = [start_law_error(prior, steps, START_LAW_DRAWS, 0)._asdict() for steps in burn_ins]

    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "git_commit": commit, "host": host(), "preset": args.preset, "fresh_tasks": args.fresh_tasks, "prompts": args.prompts,
              "replicates": args.replicates, "prior": asdict(prior),
              "settings": {"collapsed": asdict(settings), "collapsed_doubled": asdict(doubled) if args.doubling else None,
                           "parameter_smc": asdict(parameter_settings) if args.parameter_smc else None},
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                          "load_average_at_start": load, "torch": torch.__version__},
              "reference_sigma": REFERENCE_STDERR, "start_law_error": start_law, "methods": methods,
              "cost_ratio_parameter_over_collapsed": cost_ratio, "doubling": doubling}
    text = json.dumps(result, indent=2, allow_nan=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
