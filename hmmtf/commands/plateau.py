"""``hmmtf plateau``: the plateau study's escapes per arm and family (:mod:`empirical.studies.plateau`)
in ``plateau.json`` and its figure ``plateau.png`` (:mod:`empirical.studies.plateau_figures`)."""
from __future__ import annotations

from pathlib import Path

from empirical.studies.plateau import plateau_study
from empirical.studies.plateau_figures import plot_plateau
from empirical.training.result_files import COMMAND_FILES
from empirical.training.run_control import run_folder_lock
from hmmtf.commands.studies import check_curve_run
from hmmtf.options import add_overwrite_option, check_study_owner, output_folder, result_text


def run_plateau(args) -> int:
    """Gather the arms' runs, write the study and its figure, print one line per arm and family."""
    arms = [(arm[0], [check_curve_run(run_dir, "--arm") for run_dir in arm[1:]]) for arm in args.arm]
    empty = [name for name, runs in arms if not runs]
    if empty:
        raise ValueError(f"--arm: {empty[0]!r} names no run folder; expected NAME RUN_DIR [RUN_DIR ...]")
    out, files = Path(args.out), COMMAND_FILES["plateau"]
    check_study_owner(out, args.command_line, files, args.overwrite)
    with run_folder_lock(out, "--out"):
        study = plateau_study(arms, args.baseline, [Path(folder) for folder in args.verdicts],
                              [Path(path) for path in args.ceilings])
        study = {"command": args.command_line, "git_commit": args.git_commit, **study}
        (out / files.reports[0]).write_text(result_text(study))
        plot_plateau(study, out / files.companions[0])
    for row in study["arms"]:
        escape = row["escape"]
        when = (f"escaped in ({escape['range'][0]:.3g}, {escape['range'][1]:.3g}]x the paper's budget"
                if escape["escaped"] else f"not escaped by {escape['after']:.3g}x")
        relation = row.get("against_baseline")
        against = ("" if relation is None else f"; not resolved against {study['baseline']}" if relation == "unresolved"
                   else f"; {relation} than {study['baseline']}")
        print(f"{row['family']} / {row['arm']}: {len(row['runs'])} run(s), {when}{against}")
    return 0


def register(subparsers) -> None:
    """Add ``plateau`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("plateau", help="the plateau study: when each training recipe's runs (of hmmtf "
                                                   "curve) escape the in-context unigram counter, against a baseline")
    parser.add_argument("--arm", nargs="+", action="append", required=True, metavar="NAME_THEN_RUN_DIRS",
                        help="an arm: its name, then its run folders (one per seed and family); repeat per arm")
    parser.add_argument("--baseline", required=True, help="the arm every other is compared with (the plain recipe)")
    parser.add_argument("--verdicts", nargs="+", default=[], metavar="FOLDER",
                        help="folders holding RUN/ngram-verdict.json of the runs that have one (the first that "
                             "holds a run's is read)")
    parser.add_argument("--ceilings", nargs="+", default=[], metavar="FILE",
                        help="bounds on families' ceilings on the runs' scoring prompts (the JSON of "
                             "benchmarks/ceiling_bounds.py; figures/competence/ceiling-FAMILY.json)")
    parser.add_argument("--out", type=output_folder, default="runs/plateau",
                        help="folder of plateau.json and plateau.png (default: %(default)s; the committed result is "
                             "written with --out figures/plateau)")
    add_overwrite_option(parser)
    parser.set_defaults(run=run_plateau)
