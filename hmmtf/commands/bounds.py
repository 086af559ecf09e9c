"""The subcommand of the ``bounds`` package.

``hmmtf main`` is the README's main job: the verification run of :mod:`bounds.verify` on built-in
defaults (about 1 minute on 2 cores); options enlarge the suites. Theorem 2's run (:mod:`bounds.theorem2`)
shares L, T and the prompt format with Theorem 1's. It prints the table, the
verdicts, and writes ``report.json`` and the figures into ``--out`` (default
``runs/verification``; the committed result: ``--out figures/verification``). Exit code 1 when a
table row of kind ``DERIVED`` fails (a stage against its reference, the triangle inequality, the
tight Lemma 5, the construction bound: checks that hold by derivation); a reconstructed bound that
fails is a finding, printed and recorded, exit code 0.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from bounds.figures import FIGURES, write_figures
from bounds.lemma1 import Lemma1Config
from bounds.suites import SuiteSpec
from bounds.theorem2 import Theorem2Config, UndercompleteSpec
from bounds.verify import (
    VerifyConfig,
    build_table,
    build_theorem2_table,
    derivations_hold,
    format_table,
    lemma1_lines,
    measure,
    report_json,
    verdict_lines,
    write_report,
)
from empirical.training.result_files import ResultFiles
from empirical.training.run_control import run_folder_lock
from hmmtf.options import OVERWRITE_OPTION, add_overwrite_option, check_study_owner, output_folder, positive_float, positive_int


def _rank(text: str) -> int | None:
    """``full`` -> None (full-rank transition), else a positive integer."""
    if text == "full":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--ranks: {text!r}; expected positive integers or 'full'")
    return int(text)


def config_from_args(args) -> VerifyConfig:
    """The :class:`VerifyConfig` named by the command line."""
    suite = SuiteSpec(
        gammas=tuple(args.gammas),
        ranks=tuple(_rank(text) for text in args.ranks),
        concentrations=tuple(args.concentrations),
        seeds=args.seeds,
        num_states=args.states,
        num_tokens=args.tokens,
    )
    lemma1 = Lemma1Config(
        lengths=tuple(range(1, args.max_memory + 1)),
        num_sequences=args.sequences,
        burn_in=max(40, args.max_memory),
    )
    theorem2 = Theorem2Config(
        suite=UndercompleteSpec(gammas=tuple(args.t2_gammas)),
        futures=tuple(args.futures),
        num_sequences=args.t2_sequences,
        L=args.L,
        gd_steps=args.T,
        num_demos=args.demos,
        demo_length=args.demo_length,
        test_length=args.test_length,
        prompts=args.t2_prompts,
        curve_lengths=tuple(range(1, args.L + 3)),
    )
    return VerifyConfig(
        suite=suite,
        lemma1=lemma1,
        L=args.L,
        gd_steps=args.T,
        num_demos=args.demos,
        demo_length=args.demo_length,
        test_length=args.test_length,
        prompts=args.prompts,
        sweep_prompts=args.sweep_prompts,
        theorem2=theorem2,
    )


REPORT_FILE = "report.json"
MAIN_FILES = ResultFiles((REPORT_FILE,), tuple(FIGURES))
"""What ``hmmtf main`` writes into ``--out``: the report and the figures of :data:`bounds.figures.FIGURES`
(named in :mod:`bounds`, which the home of the other commands' names, in the trained networks'
package, is not below)."""


def run_main(args) -> int:
    """The verification run (module docstring), into ``--out`` once it holds no files of another
    command line (:func:`hmmtf.options.check_study_owner`), locked while it is written."""
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    config = config_from_args(args)
    out = Path(args.out)
    check_study_owner(out, args.command_line, MAIN_FILES, args.overwrite)
    with run_folder_lock(out, "--out"):
        return _main_into(args, config, out, start)


def _main_into(args, config, out: Path, start: float) -> int:
    """:func:`run_main`'s run of ``config`` into ``out``."""
    measurements, members, undercomplete = measure(config, progress=not args.no_progress, workers=args.workers)
    table = build_table(measurements, members)
    theorem2_table = build_theorem2_table(measurements.theorem2, undercomplete)
    report = report_json(measurements, table, theorem2_table)
    report["figures"] = write_figures(report, out)
    report["verdicts"] = verdict_lines(measurements)
    report["command"] = args.command_line
    report["git_commit"] = args.git_commit
    report["options"] = {key: value for key, value in vars(args).items()
                         if key not in ("run", "command_line", "git_commit", OVERWRITE_OPTION[2:])}
    report["runtime_seconds"] = time.perf_counter() - start
    write_report(report, out / REPORT_FILE)
    print("\n".join(lemma1_lines(measurements)))
    print()
    print(format_table(table))
    print()
    print(format_table(theorem2_table))
    print()
    print("\n".join(report["verdicts"]))
    print(f"\nreport: {out / REPORT_FILE}; figures: {', '.join(report['figures'])}")
    print(f"runtime: {report['runtime_seconds']:.1f} s")
    return 0 if derivations_hold(table + theorem2_table) else 1


def register(subparsers) -> None:
    """Add ``main`` to the ``hmmtf`` parser."""
    defaults = VerifyConfig()
    parser = subparsers.add_parser(
        "main", help="verification run: Lemma 1 and Theorem 1 measured term by term beside their bounds"
    )
    parser.add_argument("--gammas", type=positive_float, nargs="+", default=list(defaults.suite.gammas), help="observability knobs g")
    parser.add_argument("--ranks", nargs="+", default=["2", "full"], help="transition ranks d ('full' = S)")
    parser.add_argument(
        "--concentrations", type=positive_float, nargs="+", default=list(defaults.suite.concentrations), help="transition Dirichlet concentrations"
    )
    parser.add_argument("--seeds", type=positive_int, default=defaults.suite.seeds, help="HMMs per cell (alternately fit / held-out)")
    parser.add_argument("--states", type=positive_int, default=defaults.suite.num_states, help="hidden states S (<= tokens)")
    parser.add_argument("--tokens", type=positive_int, default=defaults.suite.num_tokens, help="tokens p")
    parser.add_argument("--max-memory", type=positive_int, default=max(defaults.lemma1.lengths), help="Lemma 1: largest L measured")
    parser.add_argument("--sequences", type=positive_int, default=defaults.lemma1.num_sequences, help="Lemma 1: sequences per HMM")
    parser.add_argument("--L", type=positive_int, default=defaults.L, help="Theorem 1: history length of the network")
    parser.add_argument("--T", type=positive_int, default=defaults.gd_steps, help="Theorem 1: gradient-descent layers")
    parser.add_argument("--demos", type=positive_int, default=defaults.num_demos, help="Theorem 1: demonstrations per prompt")
    parser.add_argument("--demo-length", type=positive_int, default=defaults.demo_length, help="tokens per demonstration")
    parser.add_argument("--test-length", type=positive_int, default=defaults.test_length, help="tokens of the test sequence")
    parser.add_argument("--prompts", type=positive_int, default=defaults.prompts, help="Theorem 1: prompts per HMM run through the network")
    parser.add_argument("--sweep-prompts", type=positive_int, default=defaults.sweep_prompts, help="prompts per HMM and N' in the N' sweep")
    theorem2 = defaults.theorem2
    parser.add_argument("--futures", type=positive_int, nargs="+", default=list(theorem2.futures),
                        help="Theorem 2: numbers m of future tokens (decay curves; the table for m >= 2)")
    parser.add_argument("--t2-gammas", type=positive_float, nargs="+", default=list(theorem2.suite.gammas),
                        help="Theorem 2: channel knobs g of the shift registers (gamma_2 = g^2)")
    parser.add_argument("--t2-sequences", type=positive_int, default=theorem2.num_sequences,
                        help="Theorem 2: sequences per HMM of the approximation curves")
    parser.add_argument("--t2-prompts", type=positive_int, default=theorem2.prompts,
                        help="Theorem 2: prompts per HMM and m >= 2 run through the network")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (1: the tensors are small, threads only add overhead)")
    parser.add_argument("--workers", type=positive_int, default=2,
                        help="processes: 2 measures Lemma 1 and Theorem 2 in a second one, beside Theorem 1 (the same "
                             "numbers as 1, in about 0.6 of the time on 2 cores)")
    parser.add_argument("--out", type=output_folder, default="runs/verification",
                        help="directory of report.json and the figures (default: %(default)s; the committed result "
                             "is written with --out figures/verification)")
    add_overwrite_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(run=run_main)
