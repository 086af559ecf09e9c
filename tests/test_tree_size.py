"""The tracked tree stays at most 50 MiB (issue 47): the GPU device tool sends the checkout's tracked
files and refuses more than 64 MiB, and the tree had grown to 119 MB by tens of MB a turn. What
keeps it small: finished runs leave their tensors in git history (``hmmtf restore-checkpoint``,
``models/README.md``) and figures are stored as 256-colour PNGs (README, "The tracked tree stays at most 50 MiB")."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 50 * 2**20
"""50 MiB = 52,428,800 bytes: the sum of the sizes of the files ``git ls-files`` lists."""
SHOWN = 10
"""How many of the largest files the failure names."""


def tracked_sizes(root: Path) -> dict[str, int] | None:
    """``{path: bytes}`` of every tracked file present in ``root``'s working tree; None when git
    cannot list them (no git, or ``root`` is not a git checkout: an unpacked release)."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    if listing.returncode != 0:
        return None
    return {path: (root / path).lstat().st_size for path in listing.stdout.split("\0")
            if path and (root / path).is_file()}


def test_the_tracked_tree_is_at_most_50_mib():
    sizes = tracked_sizes(ROOT)
    if sizes is None:
        pytest.skip(f"{ROOT} is not a git checkout (or git cannot run): there are no tracked files to add up")
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda item: item[1], reverse=True)[:SHOWN]
    named = ", ".join(f"{path} {size / 2**20:.2f} MiB" for path, size in largest)
    assert total <= LIMIT_BYTES, (f"the tracked files add up to {total:,} bytes ({total / 2**20:.1f} MiB), over the "
                                  f"limit of {LIMIT_BYTES:,} (50 MiB); the largest: {named}")
