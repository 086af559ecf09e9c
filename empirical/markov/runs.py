"""The unigram trap of "Attention with Markov" (Makkuva et al., arXiv 2402.04161), measured on the
project's RoFormer (:mod:`empirical.model`) trained by the project's loop (:mod:`empirical.train`).

A sweep trains, for every binary chain ``(p, q)`` of a grid, every architecture of
:data:`ARCHITECTURES` and every seed, a fresh model by next-token prediction on fresh stationary
sequences of that chain, then measures where the run ended on held-out sequences:

* ``excess`` = mean ``KL(P[x_t] || q_t)`` (:func:`empirical.markov.chains.excess_losses`), so the
  final loss is ``H_rate + excess`` and
  ``relative_excess = excess / (H_unigram - H_rate)``: 0 on the bigram (Markov-kernel) line, 1 on
  the unigram (stationary) line;
* **trapped at unigram** iff ``relative_excess >= TRAP_THRESHOLD = 1/2``, i.e. the final loss is
  closer to the unigram line than to the bigram line; otherwise it **reached bigram**;
* the transition probabilities read back from the predictions and their memory coordinate
  (:func:`empirical.markov.chains.memory_coordinate`: 0 unigram, 1 bigram);
* attention scores per layer and head (:func:`attention_scores`): previous-token and
  induction-style;
* the escape step (:func:`escape_step`): when the training loss first fell below the midpoint of
  the two lines. Runs that sit on the unigram plateau longer than the training budget count as
  trapped, so the trapped fraction of a budget is read off the survival curve of escape steps
  (:func:`plateau_survival`).

Cells with ``p + q = 1`` are skipped: there the chain is i.i.d., both lines coincide and no run can
be told apart from either solution.
"""
from __future__ import annotations

import json
import math
import tempfile
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from empirical.configs import JSONConfig  # noqa: E402
from empirical.data import EVAL_STREAM, TRAIN_STREAM, stream_seed  # noqa: E402
from empirical.markov.chains import (  # noqa: E402
    MEMORY_NORM_TOLERANCE,
    binary_kernel,
    excess_losses,
    memory_coordinate,
    memory_norm,
    read_back_kernel,
    reference_losses,
    sample_sequences,
    sequence_log_losses,
)
from empirical.model import RoFormer, RoFormerConfig  # noqa: E402
from empirical.train import METRICS_FILE, Batch, TrainConfig, train  # noqa: E402

ARCHITECTURES: dict[str, dict] = {
    "1-layer-tied": {"num_layers": 1, "tie_embeddings": True},
    "1-layer-untied": {"num_layers": 1, "tie_embeddings": False},
    "2-layer-tied": {"num_layers": 2, "tie_embeddings": True},
}
"""The RoFormer variants of the study: the paper's trap is claimed for the first (``p + q > 1``)
and denied for the other two."""

TRAP_THRESHOLD = 0.5
"""A run is trapped at unigram iff its ``relative_excess >= TRAP_THRESHOLD`` (midpoint rule)."""

VOCAB_SIZE = 2
"""Binary chains."""


@dataclass(frozen=True)
class MarkovSweepConfig(JSONConfig):
    """Everything a sweep depends on; validated on construction.

    The grid is ``p_values x q_values`` (``p = P(1|0)``, ``q = P(0|1)``) minus the i.i.d. cells
    ``p + q = 1``. ``init_std`` is the standard deviation of every weight matrix at initialisation
    (the RoFormer's default is 0.02); Makkuva et al. stress that the trap depends on it.
    Optimiser defaults follow Makkuva et al.'s code (AdamW, lr 2e-3, weight decay 1e-3,
    betas (0.9, 0.95), cosine schedule); sizes are scaled down to fit a CPU.
    """

    p_values: tuple[float, ...] = (0.1, 0.5, 0.9)
    q_values: tuple[float, ...] = (0.1, 0.5, 0.9)
    architectures: tuple[str, ...] = tuple(ARCHITECTURES)
    seeds: int = 4
    width: int = 8
    num_heads: int = 1
    sequence_length: int = 64
    batch_size: int = 32
    steps: int = 500
    learning_rate: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 1e-3
    init_std: float = 0.02
    eval_sequences: int = 256
    log_every: int = 10
    data_seed: int = 0
    workers: int = 2

    def __post_init__(self) -> None:
        for name in ("p_values", "q_values"):
            values = getattr(self, name)
            if len(values) == 0:
                raise ValueError(f"{name}: empty; expected at least one switching probability")
            for value in values:
                if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ValueError(f"{name}: contains {value!r}; expected switching probabilities in [0, 1]")
        unknown = [name for name in self.architectures if name not in ARCHITECTURES]
        if unknown or not self.architectures:
            raise ValueError(f"architectures: {list(self.architectures)!r}; expected a non-empty subset of {list(ARCHITECTURES)}")
        for name in ("seeds", "width", "num_heads", "sequence_length", "batch_size", "steps", "eval_sequences",
                     "log_every", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r}; expected an integer >= 1")
        if not (isinstance(self.init_std, (int, float)) and math.isfinite(self.init_std) and self.init_std > 0):
            raise ValueError(f"init_std: {self.init_std!r}; expected a finite number > 0")
        # The remaining fields are validated where they are used (RoFormerConfig, TrainConfig).
        self.model_config(self.architectures[0])
        self.train_config(0)

    def model_config(self, architecture: str) -> RoFormerConfig:
        """The RoFormer of ``architecture`` at this width and initialisation."""
        return RoFormerConfig(vocab_size=VOCAB_SIZE, num_heads=self.num_heads, width=self.width,
                              init_std=self.init_std, **ARCHITECTURES[architecture])

    def train_config(self, seed: int) -> TrainConfig:
        """Training hyper-parameters of one run; ``seed`` draws the initial weights."""
        return TrainConfig(steps=self.steps, batch_size=self.batch_size, learning_rate=self.learning_rate,
                           warmup_steps=self.warmup_steps, weight_decay=self.weight_decay, seed=seed,
                           log_every=self.log_every, precision="fp32")

    def cells(self) -> list[tuple[float, float]]:
        """The ``(p, q)`` cells that are trained: the grid without the i.i.d. cells."""
        return [(p, q) for p in self.p_values for q in self.q_values if not is_memoryless(p, q)]


def is_memoryless(p: float, q: float) -> bool:
    """True iff the binary chain is i.i.d. (``p + q = 1``): every kernel row equals ``pi``."""
    return memory_norm(binary_kernel(p, q)) <= MEMORY_NORM_TOLERANCE


class MarkovStream:
    """Batch function for :func:`empirical.train.train`: the batch of step ``s`` is ``batch_size``
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


def unigram_bigram_gap(p: float, q: float) -> float:
    """``H_unigram - H_rate`` of the binary chain ``(p, q)``: the loss a trapped run leaves on the table."""
    references = reference_losses(binary_kernel(p, q))
    return references.unigram - references.bigram


def relative_excess(excess: float, p: float, q: float) -> float:
    """``excess / (H_unigram - H_rate)``: 0 on the bigram line, 1 on the unigram line."""
    return excess / unigram_bigram_gap(p, q)


def is_trapped(relative: float) -> bool:
    """The trap criterion: the final loss is at least as close to the unigram line as to the
    bigram line, ``relative_excess >= TRAP_THRESHOLD``."""
    return relative >= TRAP_THRESHOLD


def induction_targets(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` int64: for position ``t``, the position ``s(t) + 1`` after the previous
    occurrence ``s(t) = max{s < t : x_s = x_t}`` of the current token, or -1 where there is none
    or where ``s(t) = t - 1`` (then the "token after" is ``t`` itself, which says nothing about an
    induction mechanism)."""
    batch, length = tokens.shape
    positions = torch.arange(length).expand(batch, length)
    num_values = int(tokens.max()) + 1
    # last[b, t, v] = the last position s <= t with x_s = v (-1 if none).
    occurrences = torch.where(tokens[..., None] == torch.arange(num_values), positions[..., None], -1)
    last = occurrences.cummax(dim=1).values
    previous = torch.full((batch, length), -1, dtype=torch.int64)
    previous[:, 1:] = last[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)
    valid = (previous >= 0) & (previous <= positions - 2)
    return torch.where(valid, previous + 1, -1)


def attention_scores(cache: dict[str, torch.Tensor], tokens: torch.Tensor) -> dict:
    """Per layer and head, from the attention weights ``A[t, s]`` recorded in ``cache`` (from
    :meth:`RoFormer.run_with_cache` on ``tokens (B, N)``)::

        previous_token[l][h] = mean over (b, t >= 1) of A[t, t - 1]
        induction[l][h]      = mean over (b, t) with a target of A[t, s(t) + 1]
        uniform_induction    = mean over the same (b, t) of 1 / (t + 1)

    with ``s(t) + 1`` from :func:`induction_targets`. ``uniform_induction`` is what a head that
    spreads its weight evenly over the causal window scores; an induction head scores near 1.
    """
    targets = induction_targets(tokens)
    has_target = targets >= 0
    length = tokens.shape[1]
    uniform = (1.0 / torch.arange(1, length + 1, dtype=torch.float64)).expand_as(targets)
    result = {"previous_token": [], "induction": [], "uniform_induction": float(uniform[has_target].mean())}
    num_layers = sum(name.endswith("attn.hook_pattern") for name in cache)
    for layer in range(num_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"].double()
        previous = pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))
        gathered = pattern.gather(-1, targets.clamp_min(0)[:, None, :, None].expand(-1, pattern.shape[1], -1, 1))
        induction = gathered.squeeze(-1).permute(1, 0, 2)[:, has_target].mean(-1)
        result["previous_token"].append(previous.tolist())
        result["induction"].append(induction.tolist())
    return result


def summarise_predictions(probabilities: torch.Tensor, tokens: torch.Tensor, p: float, q: float) -> dict:
    """Where a predictor ended on held-out ``tokens (B, T)`` of chain ``(p, q)``, from its
    next-token ``probabilities (B, T, 2)``: sampled loss, excess, final loss, relative excess, trap
    verdict, read-back kernel and memory coordinate (see the module docstring)."""
    kernel = binary_kernel(p, q)
    log_probs = probabilities.log()
    excess = float(excess_losses(kernel, tokens, log_probs).mean())
    relative = relative_excess(excess, p, q)
    estimated_kernel = read_back_kernel(tokens, probabilities)
    return {
        "sampled_loss": float(sequence_log_losses(log_probs, tokens).mean()),
        "excess": excess,
        "final_loss": reference_losses(kernel).bigram + excess,
        "relative_excess": relative,
        "trapped": is_trapped(relative),
        "read_back_kernel": estimated_kernel.tolist(),
        "memory_coordinate": memory_coordinate(estimated_kernel, kernel),
    }


@torch.no_grad()
def evaluate_run(model: RoFormer, p: float, q: float, tokens: torch.Tensor) -> dict:
    """:func:`summarise_predictions` of a trained model on ``tokens``, plus its attention scores,
    from one recording forward pass."""
    model.eval()
    logits, cache = model.run_with_cache(tokens)
    probabilities = logits.double().softmax(-1)
    return {**summarise_predictions(probabilities, tokens, p, q), "attention": attention_scores(cache, tokens)}


def escape_step(curve: dict, p: float, q: float) -> int | None:
    """The first logged step whose training loss is below the midpoint
    ``(H_unigram + H_rate) / 2`` of the two lines, i.e. where the run left the unigram plateau;
    None if it never did. (Each logged loss averages ``log_every`` steps of fresh batches.)"""
    references = reference_losses(binary_kernel(p, q))
    midpoint = (references.unigram + references.bigram) / 2
    return next((step for step, loss in zip(curve["step"], curve["loss"]) if loss < midpoint), None)


def read_loss_curve(metrics_path: Path) -> dict:
    """``{"step": [...], "loss": [...]}`` from the training loop's JSON-lines log."""
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    return {"step": [r["step"] for r in records], "loss": [r["loss"] for r in records]}


def train_and_evaluate(config: MarkovSweepConfig, architecture: str, p: float, q: float, seed: int) -> dict:
    """One run of the sweep: train a fresh model on chain ``(p, q)`` and evaluate it.

    Model initialisation uses ``seed``; training data use ``stream_seed(seed, TRAIN_STREAM, step)``,
    so the architectures of one seed see the same sequences (common random numbers); evaluation
    uses the cell's held-out sequences from ``config.data_seed``.
    """
    kernel = binary_kernel(p, q)
    stream = MarkovStream(kernel, config.batch_size, config.sequence_length, seed)
    with tempfile.TemporaryDirectory(prefix="markov-run-") as run_dir:
        result = train(config.model_config(architecture), config.train_config(seed), stream, Path(run_dir),
                       task={"markov": {"p": p, "q": q}}, device="cpu", progress=False)
        curve = read_loss_curve(Path(run_dir) / METRICS_FILE)
    tokens = held_out_sequences(kernel, config.eval_sequences, config.sequence_length, config.data_seed)
    return {"architecture": architecture, "p": p, "q": q, "seed": seed, "loss_curve": curve,
            "escape_step": escape_step(curve, p, q), **evaluate_run(result.model, p, q, tokens)}


def _single_threaded_worker() -> None:
    """Each worker process uses one thread: the sweep's parallelism is across runs."""
    torch.set_num_threads(1)


def run_sweep(config: MarkovSweepConfig, *, progress: bool = True) -> list[dict]:
    """Every run of the grid (``architectures x cells x seeds``), in ``config.workers`` processes,
    sorted by architecture, ``p``, ``q``, seed."""
    jobs = [(architecture, p, q, seed) for architecture in config.architectures for p, q in config.cells()
            for seed in range(config.seeds)]
    with ProcessPoolExecutor(max_workers=config.workers, mp_context=get_context("spawn"),
                             initializer=_single_threaded_worker) as pool:
        futures = [pool.submit(train_and_evaluate, config, *job) for job in jobs]
        runs = [future.result() for future in tqdm(as_completed(futures), total=len(futures), desc="markov runs",
                                                   unit="run", disable=not progress)]
    order = {name: index for index, name in enumerate(config.architectures)}
    return sorted(runs, key=lambda run: (order[run["architecture"]], run["p"], run["q"], run["seed"]))


def aggregate_cells(runs: list[dict]) -> list[dict]:
    """One record per ``(architecture, p, q)``: reference losses, the number of seeds, how many
    were trapped (:func:`is_trapped` of their ``relative_excess``), the trapped fraction, and the
    per-seed relative excesses, memory coordinates and escape steps, in seed order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        groups[(run["architecture"], run["p"], run["q"])].append(run)
    cells = []
    for (architecture, p, q), members in groups.items():
        members = sorted(members, key=lambda run: run["seed"])
        references = reference_losses(binary_kernel(p, q))
        trapped = sum(is_trapped(run["relative_excess"]) for run in members)
        cells.append({
            "architecture": architecture,
            "p": p,
            "q": q,
            "bigram_loss": references.bigram,
            "unigram_loss": references.unigram,
            "seeds": len(members),
            "trapped": trapped,
            "trapped_fraction": trapped / len(members),
            "relative_excess": [run["relative_excess"] for run in members],
            "memory_coordinate": [run["memory_coordinate"] for run in members],
            "escape_step": [run["escape_step"] for run in members],
        })
    return cells


def _grid_edges(values: list[float]) -> np.ndarray:
    """Cell boundaries for ``pcolormesh``: midpoints between sorted values, half a gap beyond the ends."""
    values = np.array(sorted(values), dtype=float)
    if len(values) == 1:
        return np.array([values[0] - 0.05, values[0] + 0.05])
    middles = (values[1:] + values[:-1]) / 2
    return np.concatenate([[2 * values[0] - middles[0]], middles, [2 * values[-1] - middles[-1]]])


def median_escape_step(cell: dict, steps: int) -> float:
    """Median over seeds of the escape step, a run that never escaped counting as ``steps``."""
    return float(np.median([steps if step is None else step for step in cell["escape_step"]]))


def _draw_grid(axis, values: dict, labels: dict, config: MarkovSweepConfig, colour_map: str, limits: tuple):
    """``values[(p, q)]`` as coloured cells on the ``(p, q)`` grid with ``labels[(p, q)]`` written
    in them, i.i.d. cells marked, and the line ``p + q = 1``; returns the colour mesh."""
    p_values, q_values = sorted(config.p_values), sorted(config.q_values)
    p_edges, q_edges = _grid_edges(p_values), _grid_edges(q_values)
    grid = np.full((len(q_values), len(p_values)), np.nan)
    for (p, q), value in values.items():
        grid[q_values.index(q), p_values.index(p)] = value
        axis.text(p, q, labels[(p, q)], ha="center", va="center", fontsize=9)
    for p in p_values:
        for q in q_values:
            if is_memoryless(p, q):
                axis.text(p, q, "i.i.d.", ha="center", va="center", fontsize=8, color="gray")
    mesh = axis.pcolormesh(p_edges, q_edges, np.ma.masked_invalid(grid), cmap=colour_map, vmin=limits[0],
                           vmax=limits[1])
    line = np.array([min(p_edges[0], 1 - q_edges[-1]), max(p_edges[-1], 1 - q_edges[0])])
    axis.plot(line, 1 - line, color="black", linewidth=1.5, label="p + q = 1")
    axis.set_xlim(p_edges[0], p_edges[-1])
    axis.set_ylim(q_edges[0], q_edges[-1])
    axis.set_xlabel("p = P(1 | 0)")
    axis.set_ylabel("q = P(0 | 1)")
    axis.legend(loc="upper right", fontsize=8)
    return mesh


def plot_phase_diagram(cells: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """One column per architecture. Top: the ``(p, q)`` grid coloured by the trapped fraction,
    each cell annotated ``trapped/seeds``. Bottom: the median step at which training left the
    unigram plateau (:func:`escape_step`). i.i.d. cells are marked, the line ``p + q = 1`` drawn."""
    columns = len(config.architectures)
    figure, axes = plt.subplots(2, columns, figsize=(4.2 * columns, 8.2), constrained_layout=True, squeeze=False)
    for column, architecture in enumerate(config.architectures):
        members = [cell for cell in cells if cell["architecture"] == architecture]
        fractions = {(c["p"], c["q"]): c["trapped_fraction"] for c in members}
        counts = {(c["p"], c["q"]): f"{c['trapped']}/{c['seeds']}" for c in members}
        trapped_mesh = _draw_grid(axes[0, column], fractions, counts, config, "coolwarm", (0, 1))
        axes[0, column].set_title(f"{architecture}: trapped at unigram")
        escapes = {(c["p"], c["q"]): median_escape_step(c, config.steps) for c in members}
        labels = {cell: f"{value:.0f}" for cell, value in escapes.items()}
        escape_mesh = _draw_grid(axes[1, column], escapes, labels, config, "viridis", (0, config.steps))
        axes[1, column].set_title(f"{architecture}: median escape step")
    figure.colorbar(trapped_mesh, ax=axes[0, -1], label="fraction of seeds trapped at unigram")
    figure.colorbar(escape_mesh, ax=axes[1, -1], label=f"first step below the midpoint ({config.steps} = never)")
    figure.suptitle(f"Trapped: final relative excess >= {TRAP_THRESHOLD}; {config.steps} steps, "
                    f"init std {config.init_std}, width {config.width}")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plot_loss_curves(runs: list[dict], cells: list[tuple[float, float]], architectures: tuple[str, ...],
                     path: Path) -> None:
    """Training loss vs step of every seed, one panel per (architecture, cell), beside the bigram
    (entropy rate) and unigram (stationary entropy) lines; trapped seeds are drawn in red."""
    figure, axes = plt.subplots(len(architectures), len(cells), figsize=(4.5 * len(cells), 3.2 * len(architectures)),
                                constrained_layout=True, squeeze=False)
    for row, architecture in enumerate(architectures):
        for column, (p, q) in enumerate(cells):
            axis = axes[row, column]
            references = reference_losses(binary_kernel(p, q))
            for run in runs:
                if (run["architecture"], run["p"], run["q"]) == (architecture, p, q):
                    colour = "tab:red" if run["trapped"] else "tab:blue"
                    axis.plot(run["loss_curve"]["step"], run["loss_curve"]["loss"], color=colour, alpha=0.7,
                              linewidth=1)
            axis.axhline(references.unigram, color="gray", linestyle="--", label="unigram H(pi)")
            axis.axhline(references.bigram, color="black", linestyle=":", label="bigram H(x'|x)")
            gap = references.unigram - references.bigram
            axis.set_ylim(references.bigram - 0.5 * gap, references.unigram + 1.5 * gap)
            axis.set_title(f"{architecture}, p = {p}, q = {q}", fontsize=10)
            axis.set_xlabel("step")
            axis.set_ylabel("training loss (nats/token)")
            axis.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    figure.savefig(path, dpi=130)
    plt.close(figure)


def plateau_survival(runs: list[dict], steps: list[int]) -> list[float]:
    """Fraction of ``runs`` still on the unigram plateau after each of ``steps``: those whose
    :func:`escape_step` is later than the step, or None."""
    return [sum(run["escape_step"] is None or run["escape_step"] > step for run in runs) / len(runs)
            for step in steps]


def plot_plateau_survival(runs: list[dict], config: MarkovSweepConfig, path: Path) -> None:
    """One panel per architecture: fraction of runs still on the unigram plateau vs training
    step, pooled over the cells with ``p + q < 1`` and, separately, ``p + q > 1``. The trapped
    fraction of a budget of ``s`` steps is read off at ``s``: a plateau that lasts longer than
    the budget looks like a trap."""
    steps = list(range(0, config.steps + 1, config.log_every))
    figure, axes = plt.subplots(1, len(config.architectures), figsize=(4.2 * len(config.architectures), 3.4),
                                constrained_layout=True, squeeze=False, sharey=True)
    for axis, architecture in zip(axes[0], config.architectures):
        for label, side, colour in (("p + q < 1", lambda run: run["p"] + run["q"] < 1, "tab:blue"),
                                    ("p + q > 1", lambda run: run["p"] + run["q"] > 1, "tab:red")):
            members = [run for run in runs if run["architecture"] == architecture and side(run)]
            if members:
                axis.step(steps, plateau_survival(members, steps), where="post", color=colour,
                          label=f"{label} ({len(members)} runs)")
        axis.set_title(architecture)
        axis.set_xlabel("training step")
        axis.set_ylim(-0.03, 1.03)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    axes[0, 0].set_ylabel("fraction still on the unigram plateau")
    figure.savefig(path, dpi=130)
    plt.close(figure)


def loss_curve_cells(config: MarkovSweepConfig) -> list[tuple[float, float]]:
    """Two cells to draw: the trained cell with the largest unigram-bigram gap on each side of
    ``p + q = 1`` (where one exists)."""
    chosen = []
    for side in (lambda p, q: p + q < 1, lambda p, q: p + q > 1):
        candidates = [(p, q) for p, q in config.cells() if side(p, q)]
        if candidates:
            chosen.append(max(candidates, key=lambda cell: unigram_bigram_gap(*cell)))
    return chosen


def write_sweep(runs: list[dict], config: MarkovSweepConfig, directory: Path, *, command: str,
                wall_seconds: float) -> dict:
    """Write ``results.json`` (config, ``command`` = the command line that ran the sweep,
    criterion, cells, runs), ``phase_diagram.png``, ``loss_curves.png`` and
    ``plateau_survival.png`` to ``directory``; return the JSON document."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cells = aggregate_cells(runs)
    document = {
        "command": command,
        "wall_seconds": wall_seconds,
        "config": config.to_dict(),
        "criterion": (f"trapped at unigram iff relative_excess = excess / (H_unigram - H_rate) >= {TRAP_THRESHOLD}, "
                      f"excess = mean KL(P[x_t] || q_t) on held-out sequences"),
        "skipped_iid_cells": [[p, q] for p in config.p_values for q in config.q_values if is_memoryless(p, q)],
        "cells": cells,
        "runs": runs,
    }
    (directory / "results.json").write_text(json.dumps(document, indent=1) + "\n")
    plot_phase_diagram(cells, config, directory / "phase_diagram.png")
    plot_loss_curves(runs, loss_curve_cells(config), config.architectures, directory / "loss_curves.png")
    plot_plateau_survival(runs, config, directory / "plateau_survival.png")
    return document
