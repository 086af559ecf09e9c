"""``hmmtf ledger [--check]`` (registered in :mod:`hmmtf`): writes docs/claims.md and the
generated blocks of README.md and docs/hmm.md from the result JSONs under figures/; with
``--check`` writes nothing and exits 1 when a result is missing, records no commit, is older than
its code, is not registered, or a generated text is out of date (docs/ledger.md)."""
from __future__ import annotations

from pathlib import Path

from ledger import generated
from ledger.check import check
from ledger.outcomes import judge_sections
from ledger.registry import SECTIONS
from ledger.render import counts_sentence

ROOT = Path(__file__).resolve().parents[1]


def run_ledger(args) -> int:
    """``hmmtf ledger [--check]``. A result or a marker block the ledger cannot read raises
    ``ValueError`` naming it, which :func:`hmmtf.main` prints as one line."""
    root = Path(args.root)
    if not (root / "figures").is_dir():
        raise ValueError(f"--root: {str(root)!r} has no figures/ folder; expected the repository root")
    return _check(root) if args.check else _write(root)


def _check(root: Path) -> int:
    problems = check(root)
    for problem in problems:
        print(f"{problem.path}: {problem.reason}\n    fix: {problem.fix}")
    print(f"ledger check: {len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else
          "ledger check: every result fresh and every generated text current")
    return 1 if problems else 0


def _write(root: Path) -> int:
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
    parser.add_argument("--root", default=str(ROOT), help="repository root (default: this checkout)")
    parser.set_defaults(run=run_ledger)
