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

``--backend torch --device cuda|cpu [--dtype float32]`` runs the rate, the convergence and the
cross-check by the torch SMC and bounds (:mod:`hmm.prior_predictive_torch`,
:mod:`hmm.bidirectional_torch`) on that device in that dtype instead, and adds a **roofline**: the
SMC's counted work over its seconds against the device's measured peaks
(:mod:`empirical.measurement.roofline`). Counted work (a model, element-wise extras below 10% at
S >= 16 left out):

* every token, every particle: one vector-matrix product through ``T`` (2 S^2 FLOP, reads S^2
  entries) and one through ``O`` (2 S p FLOP, reads S p);
* every Gibbs sweep and the final filter of a move: one filter step per moved particle-token
  (``PriorPredictive.moved_tokens``), 2 S^2 + 3 S FLOP and S^2 + 2 S entries read; every sweep's
  backward pass, S entries of ``T`` per particle-token read; every sweep, one LU solve of an S x S
  system per moved particle (2 S^3 / 3 FLOP).

The binding resource is the one with the larger fraction of its peak. The cross-check is skipped
with ``--chains 0``.

    python benchmarks/bench_prior_predictive.py --preset tasks-8192-deep --prompts 8 --backend torch \
        --device cuda --batch-prompts 8
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
from empirical.measurement import roofline  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.yardsticks.competence import CEILING_SETTINGS, ceiling_error, ceiling_estimates, per_prompt_loss, scope_rows  # noqa: E402
from empirical.yardsticks.regime import Z_95, fresh_prompts  # noqa: E402
from hmm.bidirectional import evidence_bounds  # noqa: E402
from hmm import bidirectional_torch, prior_predictive_torch  # noqa: E402
from hmm.prior_predictive import DirichletHMMPrior, PriorPredictive, SMCSettings, prior_predictive  # noqa: E402
from hmmtf import source_commit  # noqa: E402


def timed(function):
    """``(function(), seconds it took)``."""
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def mean_and_stderr(values: torch.Tensor) -> dict:
    return {"mean": values.mean().item(), "stderr": values.std().item() / math.sqrt(values.numel())}


def ceiling_losses(tokens, preset, settings: SMCSettings, backend: dict) -> dict:
    """The averaged ceiling's mean loss and Monte-Carlo error per scope, and the seconds it took;
    ``backend``: :func:`empirical.yardsticks.competence.ceiling_estimates`'s backend, device and dtype."""
    estimates = ceiling_estimates(tokens, preset.prompt_format, preset.mixture_spec, settings, **backend)
    averaged, replicates, seconds = estimates.probabilities, estimates.replicates, estimates.seconds
    p = preset.mixture_spec.num_tokens
    scopes = {}
    for scope, rows in scope_rows(preset.prompt_format).items():
        loss = per_prompt_loss(averaged, tokens, p, rows).mean().item()
        single = sum(per_prompt_loss(replicate, tokens, p, rows).mean().item() for replicate in replicates) / len(replicates)
        scopes[scope] = {"loss": loss, "monte_carlo_stderr": ceiling_error(replicates, tokens, p, rows),
                         "jensen_term": (single - loss) / (len(replicates) - 1)}
    return {"particles": settings.particles, "moves": settings.moves, "seconds": seconds, **scopes}


def counted_work(smc: PriorPredictive, prior: DirichletHMMPrior, settings: SMCSettings, prompts: int,
                 tokens_per_prompt: int, itemsize: int) -> dict:
    """``{"flop", "bytes"}`` of one SMC run by the module docstring's model."""
    S, p, P = prior.num_states, prior.num_tokens, settings.particles
    particle_tokens = prompts * P * tokens_per_prompt
    filter_steps = (settings.moves + 1) * smc.moved_tokens
    backward_steps = settings.moves * smc.moved_tokens
    solves = settings.moves * P * int(smc.rejuvenations.sum())
    flop = particle_tokens * (2 * S * S + 2 * S * p) + filter_steps * (2 * S * S + 3 * S) + solves * 2 * S**3 / 3
    entries = particle_tokens * (S * S + S * p) + filter_steps * (S * S + 2 * S) + backward_steps * S
    return {"flop": flop, "bytes": entries * itemsize, "moved_tokens": smc.moved_tokens}


def roofline_section(work: dict, seconds: float, device: torch.device, dtype: torch.dtype, matrix_bytes: int) -> dict:
    """The counted work's rates against the device's matmul peak in ``dtype`` and its read rate
    for an array of ``matrix_bytes`` (the particles' transitions a filter step streams)."""
    peak = roofline.matmul_peak(device, dtype, 4096 if device.type == "cuda" else 1024)
    bandwidth = roofline.read_bandwidth(device, matrix_bytes)
    flop_rate, byte_rate = work["flop"] / seconds, work["bytes"] / seconds
    fractions = {"matmul_peak": flop_rate / peak, "read_bandwidth": byte_rate / bandwidth}
    return {**work, "seconds": seconds, "flop_per_second": flop_rate, "bytes_per_second": byte_rate,
            "matmul_peak_flop_per_second": peak, "read_bandwidth_bytes_per_second": bandwidth,
            "read_bandwidth_array_bytes": matrix_bytes, "fraction_of_peak": fractions,
            "binding": max(fractions, key=fractions.get)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tasks-8192-deep", choices=sorted(PRESETS))
    parser.add_argument("--prompts", type=int, default=32, help="the first prompts of the competence result's fresh HMMs")
    parser.add_argument("--fresh-tasks", type=int, default=1024, help="as hmmtf evaluate's --fresh-tasks")
    parser.add_argument("--chains", type=int, default=32, help="AIS chains per prompt, each way")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--backend", default="numpy", choices=("numpy", "torch"), help="the SMC that runs")
    parser.add_argument("--device", default="cpu", help="the torch SMC's and bounds' device (cpu, cuda)")
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"), help="the torch SMC's and bounds' dtype")
    parser.add_argument("--particles", type=int, default=CEILING_SETTINGS.particles)
    parser.add_argument("--moves", type=int, default=CEILING_SETTINGS.moves)
    parser.add_argument("--batch-prompts", type=int, default=CEILING_SETTINGS.batch_prompts,
                        help="prompts filtered together (on a GPU: as many as its memory holds)")
    parser.add_argument("--convergence", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the doubled setting (four times the base's cost); --no-convergence for the "
                        "base ceiling alone, as an agreement check between backends needs")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.prompts < 2 or args.chains < 0:
        parser.error(f"--prompts {args.prompts}, --chains {args.chains}: expected at least 2 prompts and 0 chains")
    dtype = getattr(torch, args.dtype)
    if args.backend == "numpy" and (args.device != "cpu" or dtype != torch.float64):
        parser.error(f"--device {args.device}, --dtype {args.dtype}: expected cpu and float64 for --backend numpy")
    try:
        settings = SMCSettings(args.particles, args.moves, CEILING_SETTINGS.ess_threshold, CEILING_SETTINGS.seed,
                               args.batch_prompts)
        device = prior_predictive_torch.check_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    backend = {} if args.backend == "numpy" else {"backend": "torch", "device": device, "dtype": dtype}

    commit = source_commit()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    preset = get_preset(args.preset)
    fresh, prompts = fresh_prompts(preset, args.prompts, args.fresh_tasks)
    tokens, prior = prompts.tokens, DirichletHMMPrior.from_spec(preset.mixture_spec)
    own = fresh.hmm[prompts.task_ids]
    segments = preset.prompt_format.is_delimiter

    if args.backend == "numpy":
        smc, smc_seconds = timed(lambda: prior_predictive(tokens, preset.prompt_format, prior, settings))
    else:
        smc, smc_seconds = roofline.timed(lambda: prior_predictive_torch.prior_predictive(
            tokens, preset.prompt_format, prior, settings, device, dtype), 1, device)
    _, filter_seconds = timed(lambda: [hmm.log_likelihood(own, tokens[:, ~segments])])
    rate = {"prompts": args.prompts, "particles": settings.particles, "moves": settings.moves,
            "batch_prompts": settings.batch_prompts,
            "smc_seconds": smc_seconds, "smc_prompts_per_minute": args.prompts * 60 / smc_seconds,
            "rejuvenations_per_prompt": smc.rejuvenations.double().mean().item(), "acceptance": smc.acceptance,
            "exact_filter_seconds": filter_seconds, "smc_over_exact_filter": smc_seconds / filter_seconds}

    tokens_per_prompt = int((~segments).sum())
    if args.backend == "torch":
        S = prior.num_states
        work = counted_work(smc, prior, settings, args.prompts, tokens_per_prompt, dtype.itemsize)
        matrix_bytes = min(args.prompts, settings.batch_prompts) * settings.particles * S * S * dtype.itemsize
        rate["roofline"] = roofline_section(work, smc_seconds, device, dtype, matrix_bytes)

    doubled = SMCSettings(2 * settings.particles, 2 * settings.moves, settings.ess_threshold, settings.seed + 100,
                          settings.batch_prompts)
    base = ceiling_losses(tokens, preset, settings, backend)
    convergence: dict = {"base": base}
    if args.convergence:
        twice = ceiling_losses(tokens, preset, doubled, backend)
        convergence.update(doubled=twice, rule="converged when |loss(doubled) - loss(base)| < the base's Monte-Carlo "
                           "standard error")
        for scope in scope_rows(preset.prompt_format):
            change = twice[scope]["loss"] - base[scope]["loss"]
            convergence[scope] = {"change": change, "converged": abs(change) < base[scope]["monte_carlo_stderr"]}

    cross_check = None if args.chains == 0 else bounds_check(args, preset, tokens, prior, own, smc, tokens_per_prompt,
                                                             device, dtype)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "git_commit": commit, "preset": args.preset, "fresh_tasks": args.fresh_tasks,
              "backend": {"name": args.backend, "device": str(device), "device_name": device_name,
                          "dtype": args.dtype, "tf32_matmul": torch.backends.cuda.matmul.allow_tf32},
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                          "load_average_at_start": load, "torch": torch.__version__},
              "rate": rate, "convergence": convergence, "cross_check": cross_check}
    text = json.dumps(result, indent=2, allow_nan=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


def bounds_check(args, preset, tokens, prior, own, smc: PriorPredictive, tokens_per_prompt: int,
                 device: torch.device, dtype: torch.dtype) -> dict:
    """The module docstring's cross-check of the SMC's evidence by the bidirectional bounds of
    ``args.backend``, the torch ones on ``device`` in ``dtype``."""
    inputs = (tokens, preset.prompt_format, prior, own.transition, own.emission, args.chains)
    if args.backend == "numpy":
        bounds, bounds_seconds = timed(lambda: evidence_bounds(*inputs))
    else:
        bounds, bounds_seconds = roofline.timed(lambda: bidirectional_torch.evidence_bounds(
            *inputs, device=device, dtype=dtype), 1, device)
    smc_loss = -smc.log_evidence.to("cpu", torch.float64) / tokens_per_prompt
    lower, upper = (bound.to("cpu", torch.float64) for bound in bounds)
    upper_loss, lower_loss = -lower / tokens_per_prompt, -upper / tokens_per_prompt
    above, below = upper_loss - smc_loss, smc_loss - lower_loss
    within = (above.mean() + Z_95 * above.std() / math.sqrt(args.prompts) >= 0
              and below.mean() + Z_95 * below.std() / math.sqrt(args.prompts) >= 0)
    return {"chains": args.chains, "seconds": bounds_seconds, "tokens_per_prompt": tokens_per_prompt,
                   "smc_loss": mean_and_stderr(smc_loss), "forward_ais_loss_upper_bound": mean_and_stderr(upper_loss),
                   "reverse_ais_loss_lower_bound": mean_and_stderr(lower_loss),
                   "upper_minus_smc": mean_and_stderr(above), "smc_minus_lower": mean_and_stderr(below),
                   "within_bounds": bool(within),
                   "rule": "the SMC's mean per-token -log Z lies within the bounds' means widened by 1.96 s.e. of the "
                           "paired differences"}


if __name__ == "__main__":
    raise SystemExit(main())
