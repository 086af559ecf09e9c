"""Subcommand of the Markov-chain study (registered in :mod:`hmmtf`):

``hmmtf markov-sweep`` trains single-layer (tied / untied embeddings) and two-layer RoFormers on a
grid of binary Markov chains and writes ``results.json``, ``phase_diagram.png``,
``loss_curves.png`` and ``plateau_survival.png`` (see :mod:`empirical.markov.runs` and ``docs/markov.md``).
"""
from __future__ import annotations

import time
from pathlib import Path

from empirical.markov.runs import ARCHITECTURES, MarkovSweepConfig, run_sweep, write_sweep

DEFAULTS = MarkovSweepConfig()


def run_markov_sweep(args) -> int:
    config = MarkovSweepConfig(
        p_values=tuple(args.p_values),
        q_values=tuple(args.q_values),
        architectures=tuple(args.architectures),
        seeds=args.seeds,
        width=args.width,
        sequence_length=args.sequence_length,
        batch_size=args.batch_size,
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        learning_rate=args.learning_rate,
        init_std=args.init_std,
        data_seed=args.data_seed,
        workers=args.workers,
    )
    started = time.perf_counter()
    runs = run_sweep(config, progress=not args.no_progress)
    document = write_sweep(runs, config, Path(args.out), command=args.command_line,
                           wall_seconds=time.perf_counter() - started)
    for cell in document["cells"]:
        print(f"{cell['architecture']:>15}  p={cell['p']:<5} q={cell['q']:<5} trapped {cell['trapped']}/{cell['seeds']}")
    print(f"wrote results.json and figures to {args.out} in {document['wall_seconds']:.0f} s")
    return 0


def register(subparsers) -> None:
    """Add ``markov-sweep`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "markov-sweep",
        help="unigram traps of small RoFormers on binary Markov chains (Makkuva et al.)",
        description="Train RoFormers on a (p, q) grid of binary Markov chains; report the fraction of seeds "
                    "whose final loss is closer to the unigram line than to the bigram line.",
    )
    parser.add_argument("--out", default="figures/markov", help="output directory (default: %(default)s)")
    parser.add_argument("--p-values", type=float, nargs="+", default=list(DEFAULTS.p_values), metavar="P")
    parser.add_argument("--q-values", type=float, nargs="+", default=list(DEFAULTS.q_values), metavar="Q")
    parser.add_argument("--architectures", nargs="+", default=list(DEFAULTS.architectures), choices=list(ARCHITECTURES),
                        metavar="NAME", help=f"subset of {list(ARCHITECTURES)}")
    parser.add_argument("--seeds", type=int, default=DEFAULTS.seeds)
    parser.add_argument("--width", type=int, default=DEFAULTS.width)
    parser.add_argument("--sequence-length", type=int, default=DEFAULTS.sequence_length)
    parser.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size)
    parser.add_argument("--steps", type=int, default=DEFAULTS.steps)
    parser.add_argument("--warmup-steps", type=int, default=DEFAULTS.warmup_steps)
    parser.add_argument("--learning-rate", type=float, default=DEFAULTS.learning_rate)
    parser.add_argument("--init-std", type=float, default=DEFAULTS.init_std,
                        help="std of every weight matrix at initialisation (default: %(default)s)")
    parser.add_argument("--data-seed", type=int, default=DEFAULTS.data_seed)
    parser.add_argument("--workers", type=int, default=DEFAULTS.workers, help="parallel training processes")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(run=run_markov_sweep)
