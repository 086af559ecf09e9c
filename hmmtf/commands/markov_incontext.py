"""``hmmtf markov-incontext``: train RoFormers of several depths on in-context Markov chains (a
fresh kernel per sequence, :mod:`empirical.studies.markov.incontext`), measure each against the
Bayes-optimal predictor and find its induction heads; ``results.json`` and ``incontext.png``.

Each depth trains in its own process (one thread) in ``--runs DIR/<depth>-layer``, checkpointed
every ``--checkpoint-every`` steps: the same command resumes an interrupted run, and a finished one
is only measured again. The committed runs (``models/markov-incontext``) are the models, so that
nobody retrains to look inside them.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch

from empirical.training.checkpoint import load_checkpoint
from empirical.studies.markov.figures import plot_incontext
from empirical.studies.markov.incontext import InContextConfig, held_out_chains, measure_model, train_depth
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE
from empirical.training.result_files import COMMAND_FILES
from empirical.training.run_control import run_folder_lock
from hmmtf.options import (add_config_options, add_overwrite_option, check_study_owner, config_from_command_line,
                           output_folder, positive_int, result_text)


RESULTS_FILE, FIGURE_FILE = COMMAND_FILES["markov-incontext"].names


def run_dir(runs: Path, depth: int) -> Path:
    """Where the model with ``depth`` layers trains."""
    return Path(runs) / f"{depth}-layer"


def _train_in_worker(config: dict, depth: int, directory: str) -> int:
    """One depth's training in a worker process, on one thread; the step it ended at."""
    torch.set_num_threads(1)
    return train_depth(InContextConfig.from_dict(config), depth, Path(directory)).step


def train_all(config: InContextConfig, runs: Path, workers: int) -> None:
    """Train (or resume) every depth, ``workers`` at a time, in spawned processes."""
    with ProcessPoolExecutor(max_workers=min(workers, len(config.depths)), mp_context=get_context("spawn")) as pool:
        jobs = [pool.submit(_train_in_worker, config.to_dict(), depth, str(run_dir(runs, depth)))
                for depth in config.depths]
        for job in jobs:
            job.result()


def training_curve(directory: Path) -> dict:
    """``{"step": [...], "loss": [...]}`` of a run's metrics log."""
    records = [json.loads(line) for line in (Path(directory) / METRICS_FILE).read_text().splitlines() if line.strip()]
    return {"step": [record["step"] for record in records], "loss": [record["loss"] for record in records]}


def measure_all(config: InContextConfig, runs: Path) -> dict:
    """Per depth: :func:`measure_model` of the trained run's checkpoint on the held-out chains, and
    its curve."""
    tokens, kernels = held_out_chains(config)
    measured = {}
    for depth in config.depths:
        model = load_checkpoint(run_dir(runs, depth) / CHECKPOINT_DIR).model
        measured[f"{depth}-layer"] = {**measure_model(model, tokens, kernels, config),
                                      "training_curve": training_curve(run_dir(runs, depth))}
    return measured


def run_markov_incontext(args) -> int:
    config = config_from_command_line(InContextConfig, vars(args))
    out, runs = Path(args.out), Path(args.runs)
    check_study_owner(out, args.command_line, COMMAND_FILES["markov-incontext"], args.overwrite)
    with run_folder_lock(out, "--out"):
        started = time.monotonic()
        train_all(config, runs, args.workers)
        document = {"command": args.command_line, "git_commit": args.git_commit, "config": config.to_dict(),
                    "runs": str(runs), "models": measure_all(config, runs),
                    "wall_seconds": time.monotonic() - started}
        (out / RESULTS_FILE).write_text(result_text(document))
        plot_incontext(document, out / FIGURE_FILE)
    for name, measured in document["models"].items():
        excess = measured["largest_excess"]["induction"]
        change = measured["ablation"]["induction"]["bayes"]["minus_random"]
        print(f"{name}: gap closed {measured['gap_closed']['fraction']:.3f}, largest induction excess {excess:.3f}, "
              f"ablation minus random (KL to Bayes) {change['mean']:+.4f} {change['interval_95']}")
    print(f"wrote {out / RESULTS_FILE} and {out / FIGURE_FILE}")
    return 0


def register(subparsers) -> None:
    """Add ``markov-incontext`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "markov-incontext",
        help="RoFormers on in-context Markov chains (a fresh kernel per sequence): Bayes gap, induction heads, ablation",
        description="Train one RoFormer per depth on Markov chains whose kernel is drawn afresh for every sequence "
                    "(Dirichlet rows), then measure each against the closed-form Bayes-optimal predictor, score its "
                    "heads for previous-token and induction attention against a random-init control, and mean-ablate "
                    "its top induction heads against as many random heads (docs/markov.md, M7).",
    )
    parser.add_argument("--out", type=output_folder, default="runs/markov-incontext/results",
                        help="folder of results.json and the figure (default: %(default)s; the committed study is "
                             "written with --out figures/markov/incontext)")
    parser.add_argument("--runs", default="runs/markov-incontext",
                        help="folder of the training runs, one per depth, resumed if present (default: %(default)s; "
                             "the committed models are models/markov-incontext)")
    parser.add_argument("--workers", type=positive_int, default=2, help="depths trained at once (default: %(default)s)")
    add_config_options(parser, InContextConfig)
    add_overwrite_option(parser)
    parser.set_defaults(run=run_markov_incontext)
