"""Generated blocks inside hand-written files: the lines between ``<!-- NAME:start -->`` and
``<!-- NAME:end -->`` belong to a generator, the rest of the file to its authors.

Names in use: ``ledger:findings`` (README.md, :mod:`ledger.findings`), ``ledger:results``
(docs/results.md, :mod:`ledger.render`), ``bench:hmm`` (README.md) and
``bench:hmm-table`` (docs/hmm.md, :mod:`ledger.bench_text`); :mod:`ledger.generated` lists them.
"""
from __future__ import annotations


def markers(name: str) -> tuple[str, str]:
    """The start and end marker lines of block ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def _split(text: str, name: str, where: str) -> tuple[str, str, str]:
    """``text`` as (before the start marker, between the markers, after the end marker)."""
    start, end = markers(name)
    counts = (text.count(start), text.count(end))
    if counts != (1, 1) or text.index(start) > text.index(end):
        raise ValueError(f"{where}: {counts[0]} '{start}' and {counts[1]} '{end}' markers; expected one of each, start first")
    head, rest = text.split(start)
    body, tail = rest.split(end)
    return head, body, tail


def replace_block(text: str, name: str, body: str, where: str) -> str:
    """``text`` with the lines between its ``name`` start and end markers replaced by ``body``;
    ``where`` (the file's name) goes into the error when the markers are not one start then one end."""
    start, end = markers(name)
    head, _, tail = _split(text, name, where)
    return f"{head}{start}\n{body}\n{end}{tail}"


def block_body(text: str, name: str, where: str) -> str:
    """The lines between the ``name`` markers of ``text`` (what :func:`replace_block` wrote)."""
    return _split(text, name, where)[1].removeprefix("\n").removesuffix("\n")
