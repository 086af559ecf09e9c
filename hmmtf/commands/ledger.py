"""``hmmtf ledger [--check]``: writes docs/claims.md and the
generated blocks of README.md and docs/hmm.md from the result JSONs under figures/, and records
what the canaries give at the present code (ledger/canaries.json); with ``--check`` writes nothing
and exits 1 when a result is missing, records no commit, is older than its code (and no canary
vouches for it), is not registered, or a generated text is out of date, and tells each timing
measured before its producers' last change (no problem); ``--record-canaries`` records each
canary's baseline at HEAD (with ``--at COMMIT``: at that commit's producers, on this machine);
``--remeasure-timings`` measures every timing again on idle cores
(docs/ledger.md)."""
from __future__ import annotations

from pathlib import Path

from hmmtf.options import positive_float
from ledger import generated
from ledger.canaries import CanaryBook, CommandLine, load_record, record_baselines, record_baselines_at, \
    write_record
from ledger.check import check, result_states
from ledger.provenance import Status
from ledger.outcomes import judge_sections
from ledger.registry import SECTIONS
from ledger.render import counts_sentence
from ledger.timings import IDLE_LOAD, remeasure

ROOT = Path(__file__).resolve().parents[2]


def run_ledger(args) -> int:
    """``hmmtf ledger [--check]``. A result or a marker block the ledger cannot read raises
    ``ValueError`` naming it, which :func:`hmmtf.main` prints as one line."""
    root = Path(args.root)
    if not (root / "figures").is_dir():
        raise ValueError(f"--root: {str(root)!r} has no figures/ folder; expected the repository root")
    if args.at is not None and args.record_canaries is None:
        raise ValueError(f"--at: {args.at!r} without --record-canaries; expected --record-canaries NAME ... --at COMMIT")
    if args.at is not None:
        names = record_baselines_at(root, args.at, args.record_canaries)
        print(f"recorded the baselines of {', '.join(names)} at {args.at} on this machine in ledger/canaries.json; "
              f"run `hmmtf ledger` to judge the present code against them")
        return 0
    if args.record_canaries is not None:
        names = record_baselines(root, names=args.record_canaries, command_line=command_line())
        print(f"recorded the baselines of {len(names)} canaries at HEAD in ledger/canaries.json")
        return 0
    if args.remeasure_timings:
        measured = remeasure(root, max_load=args.max_load)
        print(f"measured {len(measured)} timings again; run `hmmtf ledger` and commit them with the pages")
        return 0
    return _check(root, args.rerun_canaries) if args.check else _write(root)


def command_line() -> CommandLine:
    """This command line, as the canaries run it (the ledger imports nothing of ``hmmtf``)."""
    import hmmtf
    return CommandLine(hmmtf.main, hmmtf.build_parser)


def _vouched_sentence(told) -> str:
    """How many fresh results a canary kept fresh, by canary, and how many timings are older than
    their producers."""
    vouched = [state for state in told if state.canary]
    by_canary: dict[str, int] = {}
    for state in vouched:
        by_canary[state.canary] = by_canary.get(state.canary, 0) + 1
    named = ", ".join(f"{name} {count}" for name, count in sorted(by_canary.items()))
    timings = sum(state.status is Status.MEASURED for state in told)
    sentence = f"{len(vouched)} kept fresh by their canary ({named})" if vouched else "none needed a canary"
    return sentence + (f"; {timings} timings measured before their producers' last change (hmmtf ledger "
                       "--remeasure-timings)" if timings else "")


def _tell(told) -> None:
    """One line per state worth telling that is not a problem."""
    for state in told:
        print(f"{state.path}: {'fresh' if state.status is Status.FRESH else state.status.value}, {state.detail}")


def _check(root: Path, rerun: bool) -> int:
    book = CanaryBook(root, rerun=rerun, command_line=command_line())
    problems, vouched = check(root, book)
    for problem in problems:
        print(f"{problem.path}: {problem.reason}\n    fix: {problem.fix}")
    _tell(vouched)
    ran = f"; ran the canaries {', '.join(sorted(book.ran))}" if book.ran else ""
    print(f"ledger check: {len(problems)} problem{'s' if len(problems) != 1 else ''}; {_vouched_sentence(vouched)}{ran}"
          if problems else f"ledger check: every result fresh ({_vouched_sentence(vouched)}{ran}) and every generated "
                           "text current")
    return 1 if problems else 0


def _write(root: Path) -> int:
    book = CanaryBook(root, command_line=command_line())
    _tell(result_states(root, canaries=book)[1])
    if book.ran:
        record = load_record(root)
        record["verified"].update({name: book.sung[name] for name in book.ran})
        write_record(root, record)
        print(f"recorded what the canaries {', '.join(sorted(book.ran))} give at the present code in ledger/canaries.json")
    changed = generated.write(root)
    rows = [row for _, section_rows in judge_sections(SECTIONS, root) for row in section_rows]
    print(f"{counts_sentence(rows)}.")
    print(f"rewrote {', '.join(changed)}" if changed else "every generated text was already current")
    print("hmmtf ledger --check says whether every result is fresh")
    return 0


def register(subparsers) -> None:
    """Add ``ledger`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "ledger", help="the claims ledger: docs/claims.md and the README's results from the result JSONs")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a result is missing, unrecorded or older than its code, or a "
                             "generated text is out of date")
    parser.add_argument("--rerun-canaries", action="store_true",
                        help="with --check: run every canary that is asked, not only those whose record is of other code")
    parser.add_argument("--record-canaries", nargs="*", metavar="CANARY",
                        help="run every canary (or those named) at HEAD, from a clean tree, and record its digest as a "
                             "baseline of HEAD: do it where the results are fresh, so that a later refactor can be "
                             "verified against it")
    parser.add_argument("--at", metavar="COMMIT",
                        help="with --record-canaries NAME ...: record those baselines again at COMMIT's producers, "
                             "on this machine, with the present ledger (for a baseline whose numbers do not hold on "
                             "this processor); then `hmmtf ledger` judges the present code against them")
    parser.add_argument("--remeasure-timings", action="store_true",
                        help="run the registered command of every timing (figures/benchmarks/, the training "
                             "benchmarks), each once the cores are idle, from a clean tree: for whoever wants them "
                             "measured at the present code (a changed producer never fails --check)")
    parser.add_argument("--max-load", type=positive_float, default=IDLE_LOAD,
                        help="with --remeasure-timings: the 1-minute load average below which a benchmark starts "
                             "(default: %(default)s)")
    parser.add_argument("--root", default=str(ROOT), help="repository root (default: this checkout)")
    parser.set_defaults(run=run_ledger)
