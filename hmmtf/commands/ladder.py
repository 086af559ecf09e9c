"""``hmmtf ladder ROOT --out DIR``: the scale ladder of :mod:`empirical.studies.ladder`, gathered from
the points' results into ``ladder.json``, ``ladder.md`` and one figure per claim."""
from __future__ import annotations

from pathlib import Path

from empirical.studies.ladder import collect_points, ladder_table
from empirical.studies.ladder_figures import (
    plot_claim1_ladder,
    plot_claim2_ladder,
    plot_claim3_ladder,
    plot_learning_curves,
    plot_regime_ladder,
)
from empirical.training.result_files import COMMAND_FILES
from empirical.training.run_control import run_folder_lock
from hmmtf.options import add_overwrite_option, check_study_owner, output_folder, result_text


def run_ladder(args) -> int:
    root, out = Path(args.root), Path(args.out)
    if not root.is_dir():
        raise FileNotFoundError(f"root: {str(root)!r} is not a folder; expected a folder with one subfolder per "
                                f"ladder point")
    files = COMMAND_FILES["ladder"]
    check_study_owner(out, args.command_line, files, args.overwrite)
    with run_folder_lock(out, "--out"):
        points = collect_points(root)
        report = {"command": args.command_line, "git_commit": args.git_commit, "root": str(root), "points": points}
        ladder_file, table_file, regime, claim1, claim2, claim3, curves = files.names
        (out / ladder_file).write_text(result_text(report))
        table = ladder_table(points)
        (out / table_file).write_text(table)
        plot_regime_ladder(points, out / regime)
        plot_claim1_ladder(points, out / claim1)
        plot_claim2_ladder(points, out / claim2)
        plot_claim3_ladder(points, out / claim3)
        plot_learning_curves(points, root, out / curves)
    print(table)
    return 0


def register(subparsers) -> None:
    """Add ``ladder`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("ladder", help="regime and claim statistics across the trained ladder points")
    parser.add_argument("root", nargs="?", default="figures/ladder",
                        help="folder with one subfolder per point (evaluation.json, analysis.json, metrics.jsonl)")
    parser.add_argument("--out", type=output_folder, default="runs/ladder",
                        help="folder for ladder.json and the figures (default: %(default)s; the committed result is "
                             "written with --out figures/ladder)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_ladder)
