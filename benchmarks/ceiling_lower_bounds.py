"""The Bayes ceiling of a 128-state family bounded from below by reverse annealing from the HMM that
generated each prompt (bidirectional Monte Carlo, hmm/bidirectional.py), beside the upper bounds
(benchmarks/ceiling_bounds.py's averaged collapsed SMC, the in-context n-grams, the networks) on the
same prompts.

    OMP_NUM_THREADS=1 python benchmarks/ceiling_lower_bounds.py --preset paper --count 32 --chains 4 \
        --work runs/ceiling-lower/paper --shard 0/1           # resumable; --shard 1/2 on another core
    python benchmarks/ceiling_lower_bounds.py --preset paper --work runs/ceiling-lower/paper --gather \
        --upper figures/competence/ceiling-paper.json --models models/paper-scale-cpu/paper-2x4x64-4x \
        --out figures/competence/ceiling-lower-paper.json

**Why a lower bound.** A prompt of the competence result is simulated from the prior, so the HMM that
generated it is an exact draw from the posterior given the prompt. Reverse AIS from it along the
data (token J removed first, a Gibbs move after each annealing step) gives per chain ``v`` with
``E[v] = Z_{J'} / Z_J`` for every ``J' < J``, ``Z_j = P(o_{1:j})`` (the weights of the steps after
``J'``: the chain's start is exact for ``Z_J`` whatever comes after). So ``U = -log mean_c v_c``
over C chains has ``E[U] >= log (Z_J / Z_{J'})`` (Jensen), and the scope's loss ``L = -log (Z_J /
Z_{J'}) / (J - J')`` has the lower bound ``-U / (J - J')`` *in expectation*: over the chains' draws
and over prompts of the prior, the mean of the estimator lies at or below the mean loss of the
Bayes predictor. The scopes: ``test_sequence``, ``J'`` the demonstrations' tokens (the rows whose
target lies in the test sequence); ``all_positions``, ``J' = 1`` (every scored row; the first token
is never a target, and ``Z_1 = 1 / p`` exactly, the emission rows being exchangeable).

**Settings and cost.** Each folder ``--work/c{chains}-s{sweeps}-k{substeps}`` holds one file a
prompt (``prompt-I.npz``: the ``(C, J)`` log weights and the CPU seconds), so a run resumes from its
finished prompts, and ``--shard I/N`` computes the prompts ``i`` with ``i % N == I``. ``--gather``
reads every setting folder under ``--work``: per setting, the lower bound per scope (mean over the
prompts it has, standard error clustered by HMM), the CPU seconds a prompt, and the width against
the upper bounds; the networks (``--models``) and the n-grams and oracle on the prompts of the
setting with the most prompts. The figure (``--out`` with ``.png``) draws the lower bound of each
setting against its CPU cost, with the upper bounds and the oracle.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hmm  # noqa: E402

from benchmarks.ceiling_bounds import network_probabilities, prompts_digest, scope_losses, target_probabilities  # noqa: E402
from empirical.analysis.ngram_verdict import clustered_interval  # noqa: E402
from empirical.plotting import plt  # noqa: E402
from empirical.training.presets import PRESETS, get_preset  # noqa: E402
from empirical.yardsticks.competence import fitted_ngrams, scope_rows  # noqa: E402
from empirical.yardsticks.ngram import scored_rows  # noqa: E402
from empirical.yardsticks.regime import fresh_prompts, oracle_predictor  # noqa: E402
from hmm.bidirectional import AnnealingSchedule, log_mean_exp, reverse_log_weights  # noqa: E402
from hmm.markov import stationary_or_invalid  # noqa: E402
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, format_positions, prior_predictive  # noqa: E402
from hmmtf import source_commit  # noqa: E402

PROMPT_FILE = "prompt-{}.npz"
BASE = "c1-s1-k1"
"""The setting the others are paired with (one chain, one sweep, one step a token)."""
SETTING = re.compile(r"c(\d+)-s(\d+)-k(\d+)")


def setting_folder(work: Path, chains: int, schedule: AnnealingSchedule) -> Path:
    return work / f"c{chains}-s{schedule.sweeps}-k{schedule.substeps}"


def compute_prompt(path: Path, index: int, tokens: torch.Tensor, transition: torch.Tensor, emission: torch.Tensor,
                   prompt_format, prior: DirichletHMMPrior, chains: int, schedule: AnnealingSchedule,
                   digest: str) -> float:
    """Prompt ``index``'s reverse log weights ``(C, J)`` into ``path`` (written whole, then renamed),
    seeded by its index; returns the CPU seconds."""
    positions, starts = (values.numpy() for values in format_positions(prompt_format))
    observed = tokens[index: index + 1, positions].numpy()
    transition = transition[index: index + 1].double()
    stationary, valid = stationary_or_invalid(transition)
    if not bool(valid.all()):
        raise ValueError(f"prompt {index}: its HMM's chain has no unique stationary law; expected an irreducible chain")
    started = time.process_time()
    log_v = reverse_log_weights(observed, starts, prior, transition.numpy(), emission[index: index + 1].double().numpy(),
                                stationary.numpy(), chains, schedule, np.random.default_rng((index, 67)), stop=1)[0]
    seconds = time.process_time() - started
    partial = path.with_suffix(f".{os.getpid()}.partial.npz")
    np.savez(partial, log_weights=log_v, cpu_seconds=seconds, prompts=digest,
             settings=json.dumps({"chains": chains, **schedule._asdict()}, allow_nan=False))
    partial.replace(path)
    return seconds


def lower_bounds(log_v: np.ndarray, starts: np.ndarray) -> dict[str, float]:
    """Per scope, the module docstring's ``-U / (J - J')`` from one prompt's ``(C, J)`` log weights."""
    demonstrations = int(np.flatnonzero(starts)[-1])
    J = log_v.shape[1]
    return {"test_sequence": float(log_mean_exp(log_v[:, demonstrations:].sum(-1)) / (J - demonstrations)),
            "all_positions": float(log_mean_exp(log_v[:, 1:].sum(-1)) / (J - 1))}


def interval(values: np.ndarray, hmms: torch.Tensor) -> dict:
    """Mean, standard error clustered by HMM, and the 95% interval."""
    result = clustered_interval(torch.from_numpy(values), hmms)
    return {"mean": result["mean"], "stderr": result["stderr"],
            "interval_95": [result["mean"] - 1.96 * result["stderr"], result["mean"] + 1.96 * result["stderr"]]}


def gather(work: Path, tokens, task_ids, starts, digest: str) -> dict:
    """Every setting folder under ``work``: its finished prompts, per-prompt lower bounds per scope
    and CPU seconds."""
    settings = {}
    for folder in sorted(work.iterdir()):
        match = SETTING.fullmatch(folder.name)
        if not match:
            continue
        indices, bounds, seconds = [], [], []
        for path in sorted(folder.glob("prompt-*.npz"), key=lambda p: int(p.stem.split("-")[1])):
            with np.load(path) as stored:
                if str(stored["prompts"]) != digest:
                    raise ValueError(f"{path}: made for other prompts; expected prompts {digest[:12]}")
                indices.append(int(path.stem.split("-")[1]))
                bounds.append(lower_bounds(stored["log_weights"], starts))
                seconds.append(float(stored["cpu_seconds"]))
        if len(indices) < 2:
            continue
        chains, sweeps, substeps = (int(group) for group in match.groups())
        settings[folder.name] = {"chains": chains, "sweeps": sweeps, "substeps": substeps, "prompts": indices,
                                 "cpu_seconds_per_prompt": float(np.mean(seconds)),
                                 "per_prompt": {scope: [bound[scope] for bound in bounds] for scope in bounds[0]}}
    return settings


def smc_probabilities(tokens: torch.Tensor, prompt_format, prior: DirichletHMMPrior, settings: dict, particles: int,
                      replicates: int) -> np.ndarray:
    """``(B, N)`` target probabilities of the parameter-space SMC (``particles``, 2 sweeps), the mean
    of ``replicates`` runs (seeds 0..R-1), on the prompts of the setting with the most prompts (1
    elsewhere: those rows are not read)."""
    chosen = max((setting["prompts"] for setting in settings.values()), key=len)
    runs = [prior_predictive(tokens[chosen], prompt_format, prior, SMCSettings(particles=particles, seed=seed)).next_token
            for seed in range(replicates)]
    probabilities = np.ones(tuple(tokens.shape))
    probabilities[chosen] = target_probabilities(torch.stack(runs).mean(0), tokens[chosen], prior.num_tokens)
    return probabilities


def summary(settings: dict, baselines: dict[str, np.ndarray], networks: dict[str, np.ndarray], upper: dict | None,
            tokens: torch.Tensor, task_ids: torch.Tensor, prompt_format, num_tokens: int) -> dict:
    """Per scope: each setting's lower bound (clustered interval), its change from :data:`BASE` on
    the prompts both have (paired), and its width to the collapsed SMC's bound (``upper``, its own
    prompts) and to the best predictor on the setting's prompts; the
    baselines' and networks' losses on the prompts of the largest setting, paired with its bound."""
    scored, _ = scored_rows(tokens, num_tokens)
    largest = max(settings, key=lambda name: (len(settings[name]["prompts"]), -settings[name]["cpu_seconds_per_prompt"]))
    result: dict = {"largest_setting": largest}
    for scope, rows in scope_rows(prompt_format).items():
        losses = {name: scope_losses(values, rows, scored) for name, values in {**baselines, **networks}.items()}
        per_setting = {}
        for name, setting in settings.items():
            chosen = torch.tensor(setting["prompts"])
            lower = np.asarray(setting["per_prompt"][scope])
            best = min((name for name in losses if name != "oracle"), key=lambda n: losses[n][chosen].mean())
            entry = {"chains": setting["chains"], "sweeps": setting["sweeps"], "substeps": setting["substeps"],
                     "prompts": len(chosen), "cpu_seconds_per_prompt": setting["cpu_seconds_per_prompt"],
                     "lower": interval(lower, task_ids[chosen]),
                     "best_predictor": best, "width_to_best_predictor": interval(losses[best][chosen] - lower,
                                                                                 task_ids[chosen]),
                     "oracle_minus_lower": interval(losses["oracle"][chosen] - lower, task_ids[chosen])}
            if BASE in settings and name != BASE:  # paired on the prompts both have
                base = settings[BASE]
                common = sorted(set(setting["prompts"]) & set(base["prompts"]))
                mine = dict(zip(setting["prompts"], setting["per_prompt"][scope]))
                theirs = dict(zip(base["prompts"], base["per_prompt"][scope]))
                entry[f"minus_{BASE}"] = interval(np.array([mine[i] - theirs[i] for i in common]),
                                                  task_ids[torch.tensor(common)])
            if upper is not None:
                entry["width_to_collapsed_smc"] = upper["scopes"][scope]["bound"]["mean"] - float(lower.mean())
            per_setting[name] = entry
        chosen = torch.tensor(settings[largest]["prompts"])
        lower = np.asarray(settings[largest]["per_prompt"][scope])
        result[scope] = {
            "settings": per_setting,
            "on_the_largest_setting's_prompts": {
                name: {"loss": interval(values[chosen], task_ids[chosen]),
                       "minus_lower": interval(values[chosen] - lower, task_ids[chosen])}
                for name, values in losses.items()},
            "collapsed_smc_bound": None if upper is None else upper["scopes"][scope]["bound"],
        }
    return result


def plot(result: dict, path: Path) -> None:
    """Per scope, each setting's lower bound (95% interval) against its CPU seconds a prompt, with
    the upper bounds (the collapsed SMC's, the best n-gram's, the networks') and the oracle."""
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.4), constrained_layout=True)
    for axis, scope in zip(axes, ("test_sequence", "all_positions")):
        scored = result["scopes"][scope]
        for name, entry in scored["settings"].items():
            lower = entry["lower"]
            axis.errorbar(entry["cpu_seconds_per_prompt"], lower["mean"], yerr=1.96 * lower["stderr"], fmt="o",
                          capsize=3, color="tab:green")
            axis.annotate(f"C={entry['chains']} sw={entry['sweeps']} k={entry['substeps']} (n={entry['prompts']})",
                          (entry["cpu_seconds_per_prompt"], lower["mean"]), fontsize=6, xytext=(4, -9),
                          textcoords="offset points")
        others = scored["on_the_largest_setting's_prompts"]
        styles = {"oracle": ("black", ":"), "ngram 3": ("tab:orange", "--"), "ngram 1": ("tab:gray", "--"),
                  "parameter-space SMC": ("tab:red", "-")}
        for name, (color, style) in styles.items():
            if name in others:  # the SMC where --smc-particles ran it
                axis.axhline(others[name]["loss"]["mean"], color=color, linestyle=style, label=f"{name} (same prompts)")
        for name, values in others.items():
            if name.startswith("models/"):
                axis.axhline(values["loss"]["mean"], color="tab:purple", linewidth=0.8,
                             label=f"{name.removeprefix('models/paper-scale-cpu/')} (same prompts)")
        if scored["collapsed_smc_bound"] is not None:
            axis.axhline(scored["collapsed_smc_bound"]["mean"], color="tab:blue",
                         label=f"ceiling <= collapsed SMC ({result['upper_prompts']} prompts)")
        axis.set_xscale("log")
        axis.set_xlabel("CPU seconds a prompt (one thread)")
        axis.set_ylabel("loss (nats/token)")
        axis.set_title(f"{scope.replace('_', ' ')}: ceiling >= reverse-AIS bound (green, 95% interval)", fontsize=9)
        axis.legend(fontsize=6, loc="center right")
    figure.suptitle(f"{result['mixture']}: the Bayes ceiling bracketed; reverse annealing from the generating HMM "
                    f"(C chains, sw Gibbs sweeps a step, k steps a token)", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    parser.add_argument("--mixture", choices=sorted(hmm.MIXTURE_SPECS), help="the family (default: the preset's)")
    parser.add_argument("--prompts", type=int, default=256, help="the competence result's prompts drawn (as ceiling_bounds)")
    parser.add_argument("--fresh-tasks", type=int, default=1024)
    parser.add_argument("--count", type=int, default=32, help="bound the first COUNT of them")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--sweeps", type=int, default=1, help="Gibbs sweeps after each annealing step")
    parser.add_argument("--substeps", type=int, default=1, help="annealing steps a token (tempered likelihood)")
    parser.add_argument("--work", required=True)
    parser.add_argument("--shard", default="0/1", help="I/N: only the prompts i with i %% N == I")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gather", action="store_true", help="write the result from every setting under --work")
    parser.add_argument("--upper", help="benchmarks/ceiling_bounds.py's JSON on the same prompts (the upper bound)")
    parser.add_argument("--models", nargs="+", default=[], metavar="CHECKPOINT")
    parser.add_argument("--smc-particles", type=int, default=0,
                        help="with --gather: also the parameter-space SMC at this many particles (2 sweeps) on the "
                             "largest setting's prompts, averaged over --smc-replicates runs (where it converges, S = 16)")
    parser.add_argument("--smc-replicates", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    try:
        shard, shards = (int(part) for part in args.shard.split("/"))
        schedule = AnnealingSchedule(args.sweeps, args.substeps).check()
    except ValueError as error:
        parser.error(f"--shard {args.shard!r} / schedule: {error}")
    if not 0 <= shard < shards or not 1 <= args.count <= args.prompts or args.chains < 1:
        parser.error(f"--shard {args.shard}, --count {args.count}, --chains {args.chains}: expected 0 <= I < N, "
                     f"1 <= count <= --prompts and chains >= 1")
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    if args.mixture:
        preset = replace(preset, mixture=args.mixture)
    prompt_format = preset.prompt_format
    mixture, prompts = fresh_prompts(preset, args.prompts, args.fresh_tasks)
    tokens, prior = prompts.tokens, DirichletHMMPrior.from_spec(preset.mixture_spec)
    own = mixture.hmm[prompts.task_ids]
    digest = prompts_digest(tokens)
    work = Path(args.work)
    if not args.gather:
        folder = setting_folder(work, args.chains, schedule)
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(args.count):
            path = folder / PROMPT_FILE.format(index)
            if index % shards == shard and not path.is_file():
                seconds = compute_prompt(path, index, tokens, own.transition, own.emission, prompt_format, prior,
                                         args.chains, schedule, digest)
                print(f"prompt {index}: {seconds:.1f} CPU s", flush=True)
        return 0
    _, starts = format_positions(prompt_format)
    settings = gather(work, tokens, prompts.task_ids, starts.numpy(), digest)
    if not settings:
        parser.error(f"--work {args.work}: no setting with 2 finished prompts")
    p = prior.num_tokens
    baselines = {name: target_probabilities(predictor(tokens), tokens, p)
                 for name, predictor in fitted_ngrams(preset, args.fresh_tasks).items()}
    baselines["oracle"] = target_probabilities(oracle_predictor(mixture, prompts)(tokens), tokens, p)
    if args.smc_particles:
        baselines["parameter-space SMC"] = smc_probabilities(tokens, prompt_format, prior, settings, args.smc_particles,
                                                             args.smc_replicates)
    try:
        networks = network_probabilities(args.models, preset, tokens)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    upper = json.loads(Path(args.upper).read_text()) if args.upper else None
    if upper is not None and upper["prompts_sha256"] != digest:
        parser.error(f"--upper {args.upper}: made on other prompts; expected prompts {digest[:12]}")
    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "git_commit": source_commit(), "preset": args.preset, "mixture": preset.mixture,
              "fresh_tasks": args.fresh_tasks, "prompts_drawn": args.prompts, "prompts_sha256": digest,
              "prior": asdict(prior), "upper": args.upper, "upper_prompts": None if upper is None else upper["prompts"],
              "rule": "the lower bound of a scope is the mean over prompts of log mean_c v_c / (J - J'), v_c a reverse "
                      "chain's product of 1 / P(o_j | o_<j, theta_j) over the scope's tokens; in expectation it lies at "
                      "or below the Bayes predictor's loss",
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                          "torch": torch.__version__},
              "scopes": summary(settings, baselines, networks, upper, tokens, prompts.task_ids, prompt_format, p),
              "per_prompt_lower": {name: setting["per_prompt"] for name, setting in settings.items()}}
    text = json.dumps(result, indent=1, allow_nan=False)
    print(json.dumps(result["scopes"], indent=1, allow_nan=False)[:4000])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        plot(result, Path(args.out).with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
