"""The Bayes ceiling of a family, bracketed on the CPU where no SMC converges: an upper bound by
replicates of the collapsed-path SMC (hmm/collapsed_smc.py), the oracle below, the in-context
n-grams beside them, all on the same prompts.

    OMP_NUM_THREADS=1 python benchmarks/ceiling_bounds.py --preset paper --prompts 256 --replicates 32 \
        --particles 128 --burn-in-steps 8 --work runs/ceiling-bounds/paper --shard 0/2   # and 1/2 on the other core
    python benchmarks/ceiling_bounds.py ... --models models/paper-scale-cpu/paper-2x4x64-4x \
        --out figures/competence/ceiling-paper.json      # gathers the runs, scores the networks

(The particles, burn-in and run count were chosen on a pilot of 32 other prompts, docs/hmm.md.)

**Why these are bounds.** The ceiling is the prior predictive's expected loss: the Bayes predictor
of the next token given the prompt minimises the expected log loss over prompts of the prior, so
any predictor computed from the prompt alone has an expected loss at least the ceiling's. Every
replicate of the SMC is such a predictor, whatever its particles and burn-in (its augmented
model is only a worse predictor, not a wrong bound), and so is any average of replicates. The
oracle (each prompt's own HMM) knows more than the prompt, so its expected loss is at most the
ceiling's. On B prompts, per prompt b and scope (test sequence, all positions; the competence
result's :func:`~empirical.yardsticks.competence.scope_rows`) with the losses ``L(b)`` the mean over
the scope's rows::

    ceiling - ngram_n  <=  mean_b(L_U(b) - L_n(b)) + 1.645 s.e.      (one-sided 95%)
    ceiling - oracle   >=  0

``U`` is the bounding predictor, the standard error clustered by HMM as ``hmmtf ngram-verdict``'s
(prompts of one HMM are not independent). Decision rule, stated before the results: the ceiling
lies **below the in-context n-gram of order n** in a scope when that one-sided 95% bound is below 0.

**The bounding predictors** (rows ``t``, the replicates' probabilities ``p_r(t)`` of the token that
follows):

* ``average of R``: ``mean_r p_r(t)`` (the competence result's convention); ``average of R'`` for
  R' = 1, 2, 4, ... below R is the mean over the R / R' disjoint groups, which shows how the bound
  moves with the replicates (the loss of one replicate is each replicate's, averaged). Each
  doubling's change of the loss is reported with its standard error over prompts (paired: the
  same prompts on both sides);
* ``evidence-weighted``: ``sum_r w_r(t) p_r(t) / sum_r w_r(t)`` with ``w_r(t) = prod_{s < t} p_r(s)``
  over the scored rows before t: each replicate's estimate of the evidence of the tokens so far
  (the product of its own predictions of them). ``w_r p_r`` is unbiased for the joint probability
  of the tokens so far and the next, so the weighted mean is consistent as R grows at any particle
  count, where the plain average keeps each replicate's finite-particle bias.

The bound reported is the ``average of R`` (fixed before the results); the weighted one is
reported beside it.

**Networks** (``--models``): trained networks of the same family scored on the same prompts. A
network is a predictor of the prompt too, so its loss is another upper bound; beside it, ``model -
bound`` (paired) and the share of the window from the in-context unigram to the bound that the
network closes, ``(L_1 - L_model) / (L_1 - L_U)``: as the ceiling lies at or below the bound, the
share of the window to the ceiling is at most that.

**Resuming.** A replicate's probabilities of the targets are kept in ``--work`` as it finishes
(``replicate-R.npz``), so an interrupted run resumes from its finished replicates, and
``--shard I/N`` computes only the replicates ``r`` with ``r % N == I`` (two processes on two cores);
the JSON (``--out``) and its figure (the same name, ``.png``: :func:`plot_bounds`) are written
when every replicate is there.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hmm  # noqa: E402

from empirical.analysis.ngram_verdict import clustered_interval  # noqa: E402
from empirical.plotting import plt  # noqa: E402
from empirical.training.checkpoint import load_checkpoint  # noqa: E402
from empirical.training.presets import PRESETS, get_preset, preset_from_task  # noqa: E402
from empirical.training.runs import checkpoint_folder  # noqa: E402
from empirical.yardsticks.competence import fitted_ngrams, scope_rows  # noqa: E402
from empirical.yardsticks.evaluate import model_predictor  # noqa: E402
from empirical.yardsticks.ngram import scored_rows  # noqa: E402
from empirical.yardsticks.regime import fresh_prompts, oracle_predictor  # noqa: E402
from hmm.collapsed_smc import CollapsedSMCSettings, collapsed_prior_predictive  # noqa: E402
from hmm.prior_predictive import DirichletHMMPrior  # noqa: E402
from hmmtf import source_commit  # noqa: E402

Z_ONE_SIDED_95 = 1.645
REPLICATE_FILE = "replicate-{}.npz"


def target_probabilities(probabilities: torch.Tensor, tokens: torch.Tensor, num_tokens: int) -> np.ndarray:
    """``(B, N)``: each row's probability of its target, 1 at the rows that are not scored (their
    loss is 0 and they carry no evidence)."""
    mask, targets = scored_rows(tokens, num_tokens)
    chosen = probabilities.gather(-1, targets[..., None]).squeeze(-1)
    return torch.where(mask, chosen, torch.ones_like(chosen)).numpy()


def prompts_digest(tokens: torch.Tensor) -> str:
    return hashlib.sha256(tokens.numpy().astype("int64").tobytes()).hexdigest()


def compute_replicate(path: Path, tokens, prompt_format, prior, settings: CollapsedSMCSettings, digest: str) -> None:
    """One replicate's target probabilities and CPU seconds into ``path`` (written whole, then renamed)."""
    started = time.process_time()
    prediction = collapsed_prior_predictive(tokens, prompt_format, prior, settings).next_token
    seconds = time.process_time() - started
    partial = path.with_suffix(f".{os.getpid()}.partial.npz")
    np.savez(partial, targets=target_probabilities(prediction, tokens, prior.num_tokens), cpu_seconds=seconds,
             settings=json.dumps(asdict(settings), allow_nan=False), prompts=digest)
    partial.replace(path)


def load_replicate(path: Path, settings: CollapsedSMCSettings, digest: str) -> tuple[np.ndarray, float]:
    """``(targets (B, N), CPU seconds)`` of a finished replicate, refused when it was made for other
    prompts or settings."""
    with np.load(path) as stored:
        if str(stored["prompts"]) != digest or json.loads(str(stored["settings"])) != asdict(settings):
            raise ValueError(f"{path}: made for other prompts or settings; expected {asdict(settings)} "
                             f"on prompts {digest[:12]} (another --work folder, or remove it)")
        return stored["targets"], float(stored["cpu_seconds"])


def scope_losses(targets: np.ndarray, rows: torch.Tensor, scored: torch.Tensor) -> np.ndarray:
    """``(..., B)``: the mean ``-log`` target probability over each prompt's scored rows in ``rows``."""
    mask = (scored & rows).numpy()
    return -(np.log(targets) * mask).sum(-1) / mask.sum(-1)


def evidence_weighted(targets: np.ndarray) -> np.ndarray:
    """``(B, N)`` from ``targets (R, B, N)``: ``sum_r w_r p_r / sum_r w_r`` with ``log w_r(t) =
    sum_{s < t} log p_r(s)`` (module docstring), computed stably in logs."""
    log_p = np.log(targets)
    log_w = np.cumsum(log_p, axis=-1) - log_p
    log_w -= log_w.max(0, keepdims=True)
    weights = np.exp(log_w)
    return (weights * targets).sum(0) / weights.sum(0)


def bound_against(upper: np.ndarray, other: np.ndarray, hmms: torch.Tensor) -> dict:
    """``mean_b(upper - other)``, its standard error clustered by the prompts' ``hmms`` (prompts of one
    HMM are not independent; :func:`empirical.analysis.ngram_verdict.clustered_interval`) and the
    one-sided 95% upper bound."""
    interval = clustered_interval(torch.from_numpy(upper - other), hmms)
    return {"mean": interval["mean"], "stderr": interval["stderr"],
            "upper_95": interval["mean"] + Z_ONE_SIDED_95 * interval["stderr"]}


def mean_and_stderr(values: np.ndarray) -> dict:
    return {"mean": float(values.mean()), "stderr": float(values.std(ddof=1) / math.sqrt(len(values)))}


def summary(targets: np.ndarray, baselines: dict[str, np.ndarray], networks: dict[str, np.ndarray],
            tokens: torch.Tensor, hmms: torch.Tensor, prompt_format, num_tokens: int) -> dict:
    """Per scope: the losses of the averages of 1, 2, 4, ... replicates, of the evidence-weighted
    average and of the baselines, the bounds of the module docstring against each baseline, and
    each network's :func:`network_window`."""
    scored, _ = scored_rows(tokens, num_tokens)
    replicates = len(targets)
    sizes = [2**k for k in range(int(math.log2(replicates)) + 1) if replicates % 2**k == 0]
    result = {}
    for scope, rows in scope_rows(prompt_format).items():
        per_prompt = {size: scope_losses(targets.reshape(replicates // size, size, *targets.shape[1:]).mean(1), rows,
                                         scored).mean(0) for size in sizes}
        averages = {str(size): float(losses.mean()) for size, losses in per_prompt.items()}
        doublings = [{"from": size, "to": 2 * size, **mean_and_stderr(per_prompt[2 * size] - per_prompt[size])}
                     for size in sizes[:-1]]
        bound = scope_losses(targets.mean(0), rows, scored)
        weighted = scope_losses(evidence_weighted(targets), rows, scored)
        others = {name: scope_losses(values, rows, scored) for name, values in baselines.items()}
        bound_minus = {name: bound_against(bound, values, hmms) for name, values in others.items()}
        result[scope] = {
            "loss_of_average_of": averages,
            "doubling_the_replicates": doublings,
            "bound": mean_and_stderr(bound),
            "evidence_weighted": mean_and_stderr(weighted),
            "baselines": {name: mean_and_stderr(values) for name, values in others.items()},
            "bound_minus": bound_minus,
            "evidence_weighted_minus": {name: bound_against(weighted, values, hmms) for name, values in others.items()},
            "below": {name: against["upper_95"] < 0 for name, against in bound_minus.items() if name != "oracle"},
            "networks": {name: network_window(bound, others["ngram 1"], scope_losses(values, rows, scored), hmms)
                         for name, values in networks.items()},
        }
    return result


def network_probabilities(checkpoints: list[str], preset, tokens: torch.Tensor) -> dict[str, np.ndarray]:
    """``{checkpoint: target probabilities (B, N)}`` of each network on ``tokens``; a network
    trained on another family than ``preset``'s is refused."""
    scored = {}
    for path in checkpoints:
        checkpoint = load_checkpoint(checkpoint_folder(path, "--models"))
        family = preset_from_task(checkpoint.config["task"]).mixture
        if family != preset.mixture:
            raise ValueError(f"--models: {path!r} was trained on {family!r}; expected a network of {preset.mixture!r}")
        predict = model_predictor(checkpoint.model, preset.mixture_spec.num_tokens)
        scored[path] = target_probabilities(predict(tokens), tokens, preset.mixture_spec.num_tokens)
    return scored


def network_window(bound: np.ndarray, unigram: np.ndarray, model: np.ndarray, hmms: torch.Tensor) -> dict:
    """Per-prompt losses ``(B,)`` of the bound, the in-context unigram and a network: its mean loss,
    ``model - bound`` (:func:`bound_against`) and the share of the unigram-to-bound window it closes."""
    return {"loss": mean_and_stderr(model), "model_minus_bound": bound_against(model, bound, hmms),
            "share_of_window": float((unigram - model).mean() / (unigram - bound).mean())}


def plot_bounds(result: dict, path: Path) -> None:
    """Left: the loss of the average of R replicates against R, per scope, beside the in-context
    trigram (the bound tightens as it falls). Right: the window on the test sequence and over all
    positions, each predictor's mean loss minus the trigram's with its paired standard error (the
    bound's and the networks'; the n-grams' and the oracle's means), the oracle written, as it lies
    far below."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), constrained_layout=True)
    for scope, color in zip(result["scopes"], ("tab:blue", "tab:orange")):
        scored = result["scopes"][scope]
        sizes = [int(size) for size in scored["loss_of_average_of"]]
        left.plot(sizes, list(scored["loss_of_average_of"].values()), marker="o", color=color,
                  label=f"{scope.replace('_', ' ')}: average of R runs")
        left.axhline(scored["baselines"]["ngram 3"]["mean"], color=color, linestyle="--",
                     label=f"{scope.replace('_', ' ')}: in-context trigram")
    left.set_xscale("log", base=2)
    left.set_xlabel("replicates averaged, R")
    left.set_ylabel("loss (nats/token)")
    left.set_title("the bound tightens with the replicates averaged", fontsize=9)
    left.legend(fontsize=7)
    rows, oracles = [], []
    for offset, scope in zip((0.15, -0.15), result["scopes"]):
        scored = result["scopes"][scope]
        trigram = scored["baselines"]["ngram 3"]["mean"]
        entries = [(name, scored["baselines"][name]["mean"] - trigram, 0.0) for name in ("ngram 1", "ngram 2")]
        entries += [(name.removeprefix("models/"), values["loss"]["mean"] - trigram, 0.0)
                    for name, values in scored["networks"].items()]
        entries.append(("ceiling <= (averaged SMC)", scored["bound_minus"]["ngram 3"]["mean"],
                        scored["bound_minus"]["ngram 3"]["stderr"]))
        rows = [name for name, _, _ in entries]
        for index, (name, value, error) in enumerate(entries):
            right.errorbar(value, index + offset, xerr=1.96 * error, fmt="o", capsize=3,
                           color="tab:blue" if offset > 0 else "tab:orange",
                           label=scope.replace("_", " ") if index == 0 else None)
        oracles.append(f"{scored['baselines']['oracle']['mean'] - trigram:+.2f} ({scope.replace('_', ' ')})")
    right.set_yticks(range(len(rows)), rows, fontsize=7)
    right.axvline(0, color="black", linewidth=0.8)
    right.set_xlabel("mean loss - in-context trigram's (nats/token); bound: 95% interval")
    right.set_title(f"the window on the same prompts\n(the oracle, off the scale: {', '.join(oracles)})", fontsize=9)
    right.legend(fontsize=7)
    figure.suptitle(f"{result['mixture']}: the Bayes ceiling bounded by {result['replicates']} collapsed-SMC runs of "
                    f"{result['settings']['particles']} particles averaged ({result['prompts']} prompts of "
                    f"{result['distinct_hmms']} fresh HMMs)", fontsize=10)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="paper", choices=sorted(PRESETS))
    parser.add_argument("--mixture", choices=sorted(hmm.MIXTURE_SPECS),
                        help="the family (default: the preset's; e.g. paper-dirichlet-0.1, the paper's 0.1 control)")
    parser.add_argument("--prompts", type=int, default=256, help="the first prompts of the competence result's fresh HMMs")
    parser.add_argument("--fresh-tasks", type=int, default=1024, help="as hmmtf evaluate's --fresh-tasks")
    parser.add_argument("--replicates", type=int, default=8, help="independent runs of the collapsed SMC (seeds 0..R-1)")
    parser.add_argument("--particles", type=int, default=512)
    parser.add_argument("--burn-in-steps", type=int, default=16)
    parser.add_argument("--batch-prompts", type=int, default=CollapsedSMCSettings.batch_prompts)
    parser.add_argument("--work", required=True, help="folder of the finished replicates (resumed from)")
    parser.add_argument("--shard", default="0/1", help="I/N: compute only the replicates r with r %% N == I")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--models", nargs="+", default=[], metavar="CHECKPOINT",
                        help="networks of the family scored on the same prompts (checkpoint or run folders)")
    parser.add_argument("--out", help="the JSON result, written once every replicate is in --work")
    args = parser.parse_args(argv)
    try:
        shard, shards = (int(part) for part in args.shard.split("/"))
    except ValueError:
        parser.error(f"--shard: {args.shard!r}; expected I/N with integers 0 <= I < N")
    if not 0 <= shard < shards:
        parser.error(f"--shard: {args.shard!r}; expected I/N with integers 0 <= I < N")
    if args.prompts < 2 or args.replicates < 1:
        parser.error(f"--prompts {args.prompts}, --replicates {args.replicates}: expected at least 2 prompts and 1 "
                     f"replicate")
    try:
        settings = CollapsedSMCSettings(args.particles, args.burn_in_steps, batch_prompts=args.batch_prompts)
    except ValueError as error:
        parser.error(str(error))

    commit = source_commit()
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    if args.mixture:
        preset = replace(preset, mixture=args.mixture)
    prompt_format = preset.prompt_format
    mixture, prompts = fresh_prompts(preset, args.prompts, args.fresh_tasks)
    tokens, prior = prompts.tokens, DirichletHMMPrior.from_spec(preset.mixture_spec)
    digest = prompts_digest(tokens)
    try:
        networks = network_probabilities(args.models, preset, tokens)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    paths = [work / REPLICATE_FILE.format(r) for r in range(args.replicates)]
    for r, path in enumerate(paths):
        if r % shards == shard and not path.is_file():
            compute_replicate(path, tokens, prompt_format, prior, replace(settings, seed=r), digest)
            print(f"replicate {r}: done", flush=True)
    missing = [r for r, path in enumerate(paths) if not path.is_file()]
    if missing:
        print(f"replicates {missing} are not in {work} yet; the result is written once they are")
        return 0
    try:
        loaded = [load_replicate(path, replace(settings, seed=r), digest) for r, path in enumerate(paths)]
    except ValueError as error:
        parser.error(str(error))
    targets = np.stack([values for values, _ in loaded])
    cpu = [seconds for _, seconds in loaded]
    p = prior.num_tokens
    baselines = {name: target_probabilities(predictor(tokens), tokens, p)
                 for name, predictor in fitted_ngrams(preset, args.fresh_tasks).items()}
    baselines["oracle"] = target_probabilities(oracle_predictor(mixture, prompts)(tokens), tokens, p)

    result = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
              "git_commit": commit, "preset": args.preset, "mixture": preset.mixture, "fresh_tasks": args.fresh_tasks, "prompts": args.prompts,
              "prompts_sha256": digest, "replicates": args.replicates, "prior": asdict(prior),
              "settings": asdict(settings),
              "rule": "the ceiling lies below the in-context n-gram of order n in a scope when mean_b(L_bound(b) - "
                      "L_n(b)) + 1.645 s.e. < 0; the bound is the loss of the average of all replicates; the oracle "
                      "is a lower bound",
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": args.threads,
                          "torch": torch.__version__},
              "cpu_seconds": cpu, "cpu_prompts_per_minute": 60 * args.prompts * len(cpu) / sum(cpu),
              "distinct_hmms": int(torch.unique(prompts.task_ids).numel()),
              "scopes": summary(targets, baselines, networks, tokens, prompts.task_ids, prompt_format, p)}
    text = json.dumps(result, indent=1, allow_nan=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        plot_bounds(result, Path(args.out).with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
