"""A copy of the committed results in a temporary folder, for the tests that plant a change in a
result and read the pages the ledger generates from the copy (tests/test_ledger.py,
tests/test_findings.py)."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from ledger import generated
from ledger.registry import all_claims

ROOT = Path(__file__).resolve().parents[1]


def copy_results(folder: Path) -> Path:
    """The result JSONs, the figures the claims link and the files with generated text, copied under
    ``folder`` at their paths in the repository; ``folder``."""
    figures = [ROOT / claim.figure for claim in all_claims() if claim.figure and (ROOT / claim.figure).is_file()]
    for path in [*(ROOT / "figures").rglob("*.json"), *figures, *(ROOT / target.path for target in generated.TARGETS)]:
        target = folder / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return folder


def plant(root: Path, path: str, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to the parsed JSON at ``root / path`` and write it back."""
    document = json.loads((root / path).read_text())
    change(document)
    (root / path).write_text(json.dumps(document))
