"""``hmmtf restore-checkpoint DIR``: the tensors a committed checkpoint folder no longer holds, written
back from git history (:mod:`empirical.training.checkpoint_history`)."""
from __future__ import annotations

from pathlib import Path

from empirical.training.checkpoint_history import restore_checkpoint


def run_restore_checkpoint(args) -> int:
    """``hmmtf restore-checkpoint``: restore the folder's missing tensors and say from which commits."""
    restored = restore_checkpoint(Path(args.checkpoint), args.weights_only)
    for name, commit in restored.items():
        print(f"{Path(args.checkpoint) / name}: restored from commit {commit[:12]}")
    if not restored:
        print(f"{args.checkpoint}: holds every file asked for; nothing restored")
    return 0


def register(subparsers) -> None:
    """Add ``restore-checkpoint`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "restore-checkpoint", help="write back, from git history, the weights and AdamW state a committed "
                                   "checkpoint folder no longer holds (to resume or branch a committed run)")
    parser.add_argument("checkpoint", help="the checkpoint folder (models/curves/RUN/checkpoint)")
    parser.add_argument("--weights-only", action="store_true",
                        help="restore model.safetensors alone (enough to evaluate or analyse, not to resume)")
    parser.set_defaults(run=run_restore_checkpoint)
