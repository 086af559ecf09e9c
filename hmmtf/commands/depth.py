"""``hmmtf depth``: what depth changes at 128 states (:mod:`empirical.studies.depth`) in
``depth.json`` and its figure ``depth.png`` (:mod:`empirical.studies.depth_figures`)."""
from __future__ import annotations

from pathlib import Path

from empirical.studies.depth import depth_study
from empirical.studies.depth_figures import plot_depth
from empirical.training.result_files import COMMAND_FILES
from empirical.training.run_control import run_folder_lock
from hmmtf.options import add_overwrite_option, check_study_owner, output_folder, result_text


def _reading(value: dict | None) -> str:
    if value is None:
        return "not measured on both"
    low, high = value["interval_95"]
    return f"{value['mean']:+.4f} [{low:+.4f}, {high:+.4f}], {value['reading']}"


def run_depth(args) -> int:
    """Read the networks' results, write the study and its figure, print one line per family."""
    out, files = Path(args.out), COMMAND_FILES["depth"]
    check_study_owner(out, args.command_line, files, args.overwrite)
    with run_folder_lock(out, "--out"):
        study = {"command": args.command_line, "git_commit": args.git_commit,
                 **depth_study([Path(folder) for folder in args.points])}
        (out / files.reports[0]).write_text(result_text(study))
        plot_depth(study, out / files.companions[0])
    for family, entry in study["families"].items():
        depths = ", ".join(str(row["layers"]) for row in entry["networks"])
        effect = entry["effect"]
        if effect is None or effect["deep"] is None:
            print(f"{family} ({depths} layers): no deeper competent network to compare")
            continue
        print(f"{family} ({depths} layers): {effect['deep']} - {effect['shallow']}: distance to the ceiling's bound "
              f"{_reading(effect['minus_ceiling_bound'])}; to the variable-order predictor "
              f"{_reading(effect['minus_variable_order'])}")
    return 0


def register(subparsers) -> None:
    """Add ``depth`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("depth", help="what depth changes at 128 states: the networks' distance to the "
                                                 "ceiling's bound, probes and history heads against their layers")
    parser.add_argument("--points", nargs="+", required=True, metavar="FOLDER",
                        help="each network's results folder (figures/paper-scale/cpu/RUN): ngram-verdict.json, and "
                             "competence.json, analysis.json and heads.json where made")
    parser.add_argument("--out", type=output_folder, default="runs/depth",
                        help="folder of depth.json and depth.png (default: %(default)s; the committed result is "
                             "written with --out figures/depth)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_depth)
