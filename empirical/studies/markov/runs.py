"""One run of a Markov sweep, and all of them: a RoFormer initialised by
:mod:`empirical.studies.markov.inits`, trained by the project's loop (:func:`empirical.training.train.train`) on
fresh stationary sequences of one binary chain, then evaluated on held-out sequences of that chain
(:mod:`empirical.studies.markov.criterion`, :mod:`empirical.studies.markov.attention`); the runs of a grid in
parallel worker processes.
"""
from __future__ import annotations

import json
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from empirical.training.checkpoint import save_checkpoint
from empirical.training.data import EVAL_STREAM, TRAIN_STREAM, stream_seed
from empirical.studies.markov.attention import attention_scores
from empirical.studies.markov.chains import binary_kernel, sample_sequences
from empirical.studies.markov.config import MarkovSweepConfig
from empirical.studies.markov.criterion import escape_step, summarise_predictions
from empirical.studies.markov.inits import initial_model
from empirical.training.model import RoFormer
from empirical.training.train import CHECKPOINT_DIR, METRICS_FILE, Batch, TrainConfig, build_optimizer, train


class MarkovStream:
    """Batch function for :func:`empirical.training.train.train`: the batch of step ``s`` is ``batch_size``
    stationary sequences of ``length + 1`` tokens drawn with ``stream_seed(seed, TRAIN_STREAM, s)``;
    inputs are tokens ``0..length-1`` and every position's target is the next token."""

    def __init__(self, kernel: np.ndarray, batch_size: int, length: int, seed: int) -> None:
        self.kernel = kernel
        self.batch_size = batch_size
        self.length = length
        self.seed = seed

    def __call__(self, step: int) -> Batch:
        tokens = sample_sequences(self.kernel, self.batch_size, self.length + 1, stream_seed(self.seed, TRAIN_STREAM, step))
        return Batch(tokens[:, :-1], tokens[:, 1:])


def held_out_sequences(kernel: np.ndarray, num_sequences: int, length: int, seed: int) -> torch.Tensor:
    """Evaluation sequences of one cell, drawn from :data:`EVAL_STREAM` (never a training stream)."""
    return sample_sequences(kernel, num_sequences, length, stream_seed(seed, EVAL_STREAM, 0))


def read_loss_curve(metrics_path: Path) -> dict:
    """``{"step": [...], "loss": [...]}`` from the training loop's JSON-lines log."""
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    return {"step": [r["step"] for r in records], "loss": [r["loss"] for r in records]}


@torch.no_grad()
def evaluate_run(model: RoFormer, p: float, q: float, tokens: torch.Tensor) -> dict:
    """:func:`summarise_predictions` of a trained model on ``tokens``, plus its attention scores,
    from one recording forward pass."""
    model.eval()
    logits, cache = model.run_with_cache(tokens)
    probabilities = logits.double().softmax(-1)
    return {**summarise_predictions(probabilities, tokens, p, q), "attention": attention_scores(cache, tokens)}


def write_initial_checkpoint(model: RoFormer, train_config: TrainConfig, run_dir: Path, task: dict) -> None:
    """Store ``model`` as a step-0 checkpoint in ``run_dir``, which :func:`empirical.training.train.train`
    resumes: the shared loop builds its own Gaussian model from the config, so an initial model
    chosen here enters it this way (fresh AdamW state, empty log window)."""
    config = {"train": train_config.to_dict(), "task": task, "step": 0, "command": "initial weights",
              "log_window": {"loss_sum": 0.0, "counted": 0}}
    save_checkpoint(Path(run_dir) / CHECKPOINT_DIR, model, build_optimizer(model, train_config), config)


def train_and_evaluate(config: MarkovSweepConfig, init: str, architecture: str, p: float, q: float, seed: int) -> dict:
    """One run of the sweep: train a model of ``architecture`` initialised by ``init`` on chain
    ``(p, q)`` and evaluate it.

    Initial weights use ``seed`` (:func:`empirical.studies.markov.inits.initial_model`); training data use
    ``stream_seed(seed, TRAIN_STREAM, step)``, so the arms of one seed see the same sequences
    (common random numbers); evaluation uses the cell's held-out sequences from ``config.data_seed``.
    """
    kernel = binary_kernel(p, q)
    stream = MarkovStream(kernel, config.batch_size, config.sequence_length, seed)
    model_config, train_config = config.model_config(architecture), config.train_config(seed)
    task = {"markov": {"p": p, "q": q}, "init": init, "init_rank": config.init_rank}
    with tempfile.TemporaryDirectory(prefix="markov-run-") as run_dir:
        write_initial_checkpoint(initial_model(model_config, init, config.init_rank, seed), train_config,
                                 Path(run_dir), task)
        result = train(model_config, train_config, stream, Path(run_dir), task=task, device="cpu", progress=False)
        curve = read_loss_curve(Path(run_dir) / METRICS_FILE)
    tokens = held_out_sequences(kernel, config.eval_sequences, config.sequence_length, config.data_seed)
    return {"init": init, "architecture": architecture, "p": p, "q": q, "seed": seed, "loss_curve": curve,
            "escape_step": escape_step(curve, p, q), **evaluate_run(result.model, p, q, tokens)}


def _single_threaded_worker() -> None:
    """Each worker process uses one thread: the sweep's parallelism is across runs."""
    torch.set_num_threads(1)


def run_sweep(config: MarkovSweepConfig, *, progress: bool = True) -> list[dict]:
    """Every run of the grid (``arms x cells x seeds``), in ``config.workers`` processes, sorted by
    arm (config order), ``p``, ``q``, seed."""
    jobs = [(init, architecture, p, q, seed) for init, architecture in config.arms() for p, q in config.cells()
            for seed in range(config.seeds)]
    with ProcessPoolExecutor(max_workers=config.workers, mp_context=get_context("spawn"),
                             initializer=_single_threaded_worker) as pool:
        futures = [pool.submit(train_and_evaluate, config, *job) for job in jobs]
        runs = [future.result() for future in tqdm(as_completed(futures), total=len(futures), desc="markov runs",
                                                   unit="run", disable=not progress)]
    order = {arm: index for index, arm in enumerate(config.arms())}
    return sorted(runs, key=lambda run: (order[run["init"], run["architecture"]], run["p"], run["q"], run["seed"]))
