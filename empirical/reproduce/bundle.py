"""The results bundle: one gzip archive of every JSON, JSON-lines log and figure of a
reproduction, small enough to come back from the device machine (a returned file may hold at
most :data:`BUNDLE_LIMIT_BYTES`). Checkpoints (400 MB at paper scale) stay where they were made.

Paths inside the archive are relative to the run folder (``record.json``,
``evaluate/evaluation.json``, ``analyze/shuffle.png``, ...); ``make unpack-paper BUNDLE=FILE``
unpacks one into ``figures/paper-scale/`` (``figures/paper/`` holds the 16-state paper stand-in).
"""
from __future__ import annotations

import tarfile
from pathlib import Path

BUNDLE_LIMIT_BYTES = 16 << 20
"""Largest file the device machine returns (16 MiB)."""
BUNDLED_SUFFIXES = (".json", ".jsonl", ".png")


def bundled_files(out: Path) -> list[Path]:
    """Every file under ``out`` with a suffix of :data:`BUNDLED_SUFFIXES`, sorted, except those
    in the staging or previous folders of a checkpoint save (``*.tmp``, ``*.old``)."""
    return sorted(path for path in out.rglob("*")
                  if path.is_file() and path.suffix in BUNDLED_SUFFIXES
                  and not any(part.endswith((".tmp", ".old")) for part in path.relative_to(out).parts))


def write_bundle(out: Path, archive: Path, limit: int = BUNDLE_LIMIT_BYTES) -> dict:
    """Archive :func:`bundled_files` of ``out`` into ``archive`` (``.tar.gz``) and return its
    size and members. ``ValueError`` naming the size, the limit and the largest members when the
    archive is larger than ``limit`` bytes (the archive is removed)."""
    files = bundled_files(out)
    if not files:
        raise ValueError(f"out: {str(out)!r} holds no {', '.join(BUNDLED_SUFFIXES)} file; expected a run's outputs")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=str(path.relative_to(out)))
    size = archive.stat().st_size
    if size > limit:
        archive.unlink()
        largest = sorted(files, key=lambda path: path.stat().st_size, reverse=True)[:5]
        listed = ", ".join(f"{path.relative_to(out)} {path.stat().st_size / 2**20:.1f} MiB" for path in largest)
        raise ValueError(
            f"bundle: {archive.name} is {size / 2**20:.1f} MiB; expected at most {limit / 2**20:.1f} MiB (the largest "
            f"file the device machine returns). Largest members: {listed}")
    return {"archive": str(archive), "bytes": size, "members": [str(path.relative_to(out)) for path in files]}
