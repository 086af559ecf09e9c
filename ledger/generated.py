"""Every text the ledger generates, and where it goes: docs/claims.md as a whole file, and marked
blocks (:mod:`ledger.blocks`) inside README.md (the findings, :mod:`ledger.findings`; the HMM
engine's benchmark), docs/results.md (every claim's verdict), docs/hmm.md and docs/ARCHITECTURE.md
(the package map, :mod:`ledger.architecture`). ``hmmtf ledger`` writes them;
``hmmtf ledger --check`` fails when a committed one differs from what the results generate."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ledger import architecture, bench_text, findings, render
from ledger.blocks import replace_block
from ledger.documents import Doc


@dataclass(frozen=True)
class Target:
    """A generated text: the file (from the repository root), the block inside it (None: the whole
    file), the file it needs (a result; for the package map, its module, which copies of the results
    alone lack; None: several results, handled by ``render``) and the function of the root that
    writes it."""

    path: str
    block: str | None
    needs: str | None
    render: Callable[[Path], str]


def _bench(render_results: Callable[[dict], str]) -> Callable[[Path], str]:
    return lambda root: render_results(Doc.load(root, bench_text.RESULTS).data)


TARGETS: tuple[Target, ...] = (
    Target(render.PAGE, None, None, render.claims_page),
    Target("README.md", findings.BLOCK, None, findings.findings_block),
    Target(render.RESULTS_PAGE, render.RESULTS_BLOCK, None, render.results_block),
    Target("README.md", "bench:hmm", bench_text.RESULTS, _bench(bench_text.readme_paragraph)),
    Target("docs/hmm.md", "bench:hmm-table", bench_text.RESULTS, _bench(bench_text.docs_table)),
    Target("docs/ARCHITECTURE.md", "architecture:packages", "ledger/architecture.py", architecture.import_table),
)


def expected(root: Path, targets: tuple[Target, ...] = TARGETS) -> dict[str, str]:
    """Each file with a target, as it should read; a target whose result is missing keeps its text
    (``hmmtf ledger --check`` reports the missing result)."""
    texts: dict[str, str] = {}
    for target in targets:
        if target.needs is not None and not (root / target.needs).is_file():
            continue
        current = texts.get(target.path)
        if current is None:
            current = (root / target.path).read_text() if (root / target.path).is_file() else ""
        body = target.render(root)
        texts[target.path] = body if target.block is None else replace_block(current, target.block, body, target.path)
    return texts


def _differing(root: Path, texts: dict[str, str]) -> list[str]:
    return [path for path, text in texts.items() if not (root / path).is_file() or (root / path).read_text() != text]


def stale(root: Path, targets: tuple[Target, ...] = TARGETS) -> list[str]:
    """The generated files whose committed text differs from what the results generate."""
    return _differing(root, expected(root, targets))


EXCERPT = 40
"""Characters of context on each side of the first difference in :func:`first_difference`."""


def first_difference(committed: str, generated: str) -> str:
    """Where the text ``committed`` first differs from ``generated``: the line number, the start of
    that line (in a table, the row's claim) and both versions around the first character that
    differs. Empty when the texts are equal."""
    committed_lines, generated_lines = committed.splitlines(), generated.splitlines()
    for number, (old, new) in enumerate(itertools.zip_longest(committed_lines, generated_lines), start=1):
        if old != new:
            break
    else:
        return ""
    if old is None:
        return f"line {number}: the committed text ends, the generated one goes on with {new[:2 * EXCERPT]!r}"
    if new is None:
        return f"line {number}: the generated text ends, the committed one goes on with {old[:2 * EXCERPT]!r}"
    column = len(os.path.commonprefix([old, new]))
    start = max(column - EXCERPT, 0)
    return (f"line {number} ({old[:EXCERPT]!r}...), column {column + 1}: committed {old[start:column + EXCERPT]!r}, "
            f"generated {new[start:column + EXCERPT]!r}")


def differences(root: Path, targets: tuple[Target, ...] = TARGETS) -> dict[str, str]:
    """``{file: its first difference}`` for every generated file whose committed text differs from
    what the results generate (:func:`first_difference`, or that the file is missing)."""
    texts = expected(root, targets)
    return {path: first_difference((root / path).read_text(), texts[path]) if (root / path).is_file()
            else "the file is missing" for path in _differing(root, texts)}


def write(root: Path, targets: tuple[Target, ...] = TARGETS) -> list[str]:
    """Write every generated text; return the files that changed."""
    texts = expected(root, targets)
    changed = _differing(root, texts)
    for path in changed:
        (root / path).write_text(texts[path])
    return changed
