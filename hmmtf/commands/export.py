"""``hmmtf export CHECKPOINT --to transformer-lens OUT``: a checkpoint's RoFormer as a TransformerLens
directory (:mod:`empirical.interop.transformer_lens_interop`)."""
from __future__ import annotations

import json
from pathlib import Path

from empirical.interop.transformer_lens_interop import DEFAULT_CONTEXT_LENGTH, export_hooked_transformer
from empirical.training.checkpoint import load_checkpoint
from empirical.training.result_files import COMMAND_FILES
from empirical.training.run_control import run_folder_lock
from empirical.training.runs import CHECKPOINT_EXPECTED, checkpoint_folder
from hmmtf.options import check_results_owner, output_folder, positive_int


def run_export(args) -> int:
    """``hmmtf export``: write the checkpoint's RoFormer as a TransformerLens directory."""
    folder = checkpoint_folder(args.checkpoint, "checkpoint")
    checkpoint = load_checkpoint(folder)
    source = {"command": args.command_line, "checkpoint": str(folder),
              "step": checkpoint.config["step"], "model": checkpoint.config["model"]}
    files = COMMAND_FILES["export"]
    check_results_owner(Path(args.out), folder, files, args.overwrite, args.command_line, option="out")
    with run_folder_lock(Path(args.out), "out"):
        out = export_hooked_transformer(checkpoint.model, args.out, args.context_length, source)
    print(json.dumps({"out": str(out), "files": list(files.names), "format": args.to}, indent=2, allow_nan=False))
    return 0


def register(subparsers) -> None:
    """Add ``export`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("export", help="write a checkpoint's RoFormer for another library (TransformerLens)")
    parser.add_argument("checkpoint", help=CHECKPOINT_EXPECTED)
    parser.add_argument("--to", required=True, choices=["transformer-lens"],
                        help="target format: a HookedTransformer config (JSON) and its parameters (safetensors)")
    parser.add_argument("out", type=output_folder, help="output folder (read it back with "
                                    "empirical.interop.transformer_lens_interop.load_hooked_transformer)")
    parser.add_argument("--context-length", type=positive_int, default=DEFAULT_CONTEXT_LENGTH,
                        help="longest prompt the exported model accepts (its n_ctx)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace another checkpoint's export that the output folder holds (refused otherwise)")
    parser.set_defaults(run=run_export)
