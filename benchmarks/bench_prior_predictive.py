"""The prior-predictive ceiling's SMC (hmm/prior_predictive.py): its rate, its convergence, and its
cross-check by bidirectional Monte Carlo (hmm/bidirectional.py), on the competence result's prompts.

    python benchmarks/bench_prior_predictive.py --preset tasks-8192-deep --prompts 32 \
        --out figures/competence/prior_predictive.json

* **rate**: prompts per minute of one SMC run at the competence result's settings
  (:data:`empirical.yardsticks.competence.CEILING_SETTINGS`), beside the exact filter of :mod:`hmm.filtering`
  run on the same prompts with the true HMMs (one filter pass per prompt, the floor of any method
  that filters): the ratio says what the particles and the moves cost.
* **convergence**: the ceiling as the competence result computes it (``CEILING_REPLICATES``
  replicates averaged) at those settings and with twice the particles and twice the moves. Rule:
  converged when the mean loss moves by less than the first setting's Monte-Carlo standard error.
  Beside it, each setting's ``jensen_term``: ``(mean_r L(replicate r) - L(average)) / (R - 1)``,
  the jackknife estimate of how far the average of R replicates still lies above the exact
  ceiling from averaging estimates inside a log (``-log`` of a mean of R unbiased estimates is
  high by about ``Var / (2 R p^2)``, so one replicate is high by R times the average's excess).
* **cross-check**: per-token ``-log Z`` of each prompt (every HMM token, the first included) from
  the SMC's evidence, and the bidirectional bounds averaged over the prompts (forward AIS: a
  stochastic upper bound on the loss; reverse AIS from each prompt's generating HMM: a stochastic
  lower bound, valid on average over prompts simulated from the prior). Rule: the SMC's mean lies
  within the bounds widened by 1.96 standard errors of the paired differences.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hmm  # noqa: E402
from empirical.yardsticks.competence import CEILING_SETTINGS, ceiling_error, ceiling_estimates, per_prompt_loss, scope_rows  # noqa: E402
from empirical.training.data import stream_seed  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.yardsticks.regime import FRESH_MIXTURE_STREAM, FRESH_PROMPT_STREAM, Z_95, unseen_mixture  # noqa: E402
from hmm.bidirectional import evidence_bounds  # noqa: E402
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, prior_predictive  # noqa: E402
from hmmtf import source_commit  # noqa: E402


def timed(function):
    """``(function(), seconds it took)``."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def mean_and_stderr(values: torch.Tensor) -> dict:
    return {"mean": values.mean().item(), "stderr": values.std().item() / math.sqrt(values.numel())}


def ceiling_losses(tokens, preset, settings: SMCSettings) -> dict:
    """The averaged ceiling's mean loss and Monte-Carlo error per scope, and the seconds it took."""
    estimates = ceiling_estimates(tokens, preset.prompt_format, preset.mixture_spec, settings)
    averaged, replicates, seconds = estimates.probabilities, estimates.replicates, estimates.seconds
    p = preset.mixture_spec.num_tokens
    scopes = {}
    for scope, rows in scope_rows(preset.prompt_format).items():
        loss = per_prompt_loss(averaged, tokens, p, rows).mean().item()
        single = sum(per_prompt_loss(replicate, tokens, p, rows).mean().item() for replicate in replicates) / len(replicates)
        scopes[scope] = {"loss": loss, "monte_carlo_stderr": ceiling_error(replicates, tokens, p, rows),
                         "jensen_term": (single - loss) / (len(replicates) - 1)}
    return {"particles": settings.particles, "moves": settings.moves, "seconds": seconds, **scopes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tasks-8192-deep", choices=sorted(PRESETS))
    parser.add_argument("--prompts", type=int, default=32, help="the first prompts of the competence result's fresh HMMs")
    parser.add_argument("--fresh-tasks", type=int, default=1024, help="as hmmtf evaluate's --fresh-tasks")
    parser.add_argument("--chains", type=int, default=32, help="AIS chains per prompt, each way")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.prompts < 2 or args.chains < 1:
        parser.error(f"--prompts {args.prompts}, --chains {args.chains}: expected at least 2 prompts and 1 chain")

    commit = source_commit()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    preset = get_preset(args.preset)
    fresh = unseen_mixture(preset, args.fresh_tasks, FRESH_MIXTURE_STREAM)
    prompts = hmm.sample_prompts(fresh, args.prompts, preset.prompt_format,
                                 seed=stream_seed(preset.data_seed, FRESH_PROMPT_STREAM, 0))
    tokens, prior = prompts.tokens, DirichletHMMPrior.from_spec(preset.mixture_spec)
    own = fresh.hmm[prompts.task_ids]
    segments = preset.prompt_format.is_delimiter

    smc, smc_seconds = timed(lambda: prior_predictive(tokens, preset.prompt_format, prior, CEILING_SETTINGS))
    _, filter_seconds = timed(lambda: [hmm.log_likelihood(own, tokens[:, ~segments])])
    rate = {"prompts": args.prompts, "particles": CEILING_SETTINGS.particles, "moves": CEILING_SETTINGS.moves,
            "smc_seconds": smc_seconds, "smc_prompts_per_minute": args.prompts * 60 / smc_seconds,
            "rejuvenations_per_prompt": smc.rejuvenations.double().mean().item(), "acceptance": smc.acceptance,
            "exact_filter_seconds": filter_seconds, "smc_over_exact_filter": smc_seconds / filter_seconds}

    doubled = SMCSettings(2 * CEILING_SETTINGS.particles, 2 * CEILING_SETTINGS.moves, CEILING_SETTINGS.ess_threshold,
                          CEILING_SETTINGS.seed + 100, CEILING_SETTINGS.batch_prompts)
    base, twice = ceiling_losses(tokens, preset, CEILING_SETTINGS), ceiling_losses(tokens, preset, doubled)
    convergence = {"base": base, "doubled": twice, "rule": "converged when |loss(doubled) - loss(base)| < the base's "
                   "Monte-Carlo standard error"}
    for scope in scope_rows(preset.prompt_format):
        change = twice[scope]["loss"] - base[scope]["loss"]
        convergence[scope] = {"change": change, "converged": abs(change) < base[scope]["monte_carlo_stderr"]}

    tokens_per_prompt = int((~segments).sum())
    bounds, bounds_seconds = timed(lambda: evidence_bounds(tokens, preset.prompt_format, prior, own.transition,
                                                           own.emission, args.chains))
    smc_loss = -smc.log_evidence / tokens_per_prompt
    upper_loss, lower_loss = -bounds.lower / tokens_per_prompt, -bounds.upper / tokens_per_prompt
    above, below = upper_loss - smc_loss, smc_loss - lower_loss
    within = (above.mean() + Z_95 * above.std() / math.sqrt(args.prompts) >= 0
              and below.mean() + Z_95 * below.std() / math.sqrt(args.prompts) >= 0)
    cross_check = {"chains": args.chains, "seconds": bounds_seconds, "tokens_per_prompt": tokens_per_prompt,
                   "smc_loss": mean_and_stderr(smc_loss), "forward_ais_loss_upper_bound": mean_and_stderr(upper_loss),
                   "reverse_ais_loss_lower_bound": mean_and_stderr(lower_loss),
                   "upper_minus_smc": mean_and_stderr(above), "smc_minus_lower": mean_and_stderr(below),
                   "within_bounds": bool(within),
                   "rule": "the SMC's mean per-token -log Z lies within the bounds' means widened by 1.96 s.e. of the "
                           "paired differences"}

    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "git_commit": commit, "preset": args.preset, "fresh_tasks": args.fresh_tasks,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                          "load_average_at_start": load, "torch": torch.__version__},
              "rate": rate, "convergence": convergence, "cross_check": cross_check}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
