"""Result JSON documents as the ledger reads them: parsed once per version of the file, looked up
by key with an error that names the file, the key path and what is there instead."""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any


class LedgerError(ValueError):
    """A result the ledger cannot read as expected (a missing key, a malformed field)."""


@functools.lru_cache(maxsize=64)
def _parse(file: str, path: str, mtime_ns: int, size: int) -> Any:
    """The JSON of ``file``; ``mtime_ns`` and ``size`` key the cache, so an edited file is read again."""
    try:
        return json.loads(Path(file).read_text())
    except json.JSONDecodeError as error:
        raise LedgerError(f"{path}: not valid JSON ({error}); expected the JSON its command writes") from error


class Doc:
    """One result JSON: ``doc["claims", "shuffle"]`` is ``data["claims"]["shuffle"]``, and a key
    that is not there raises :class:`LedgerError` naming ``path``, the keys read so far and the
    keys present. Judges only read ``data``: the claims that share a result share its parse."""

    def __init__(self, path: str, data: Any):
        self.path = path
        self.data = data

    @classmethod
    def load(cls, root: Path, path: str) -> Doc:
        """``root / path`` parsed (``path`` relative to the repository root, as the ledger names it)."""
        stat = (root / path).stat()
        return cls(path, _parse(str(root / path), path, stat.st_mtime_ns, stat.st_size))

    def __getitem__(self, keys: str | int | tuple) -> Any:
        keys = keys if isinstance(keys, tuple) else (keys,)
        node = self.data
        for depth, key in enumerate(keys):
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                where = "/".join(str(k) for k in keys[:depth]) or "the top level"
                present = sorted(map(str, node)) if isinstance(node, dict) else f"a {type(node).__name__}"
                raise LedgerError(f"{self.path}: no {key!r} under {where}; found {present}") from None
        return node

    def __contains__(self, key: str) -> bool:
        return isinstance(self.data, dict) and key in self.data
