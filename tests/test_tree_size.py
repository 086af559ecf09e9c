"""The tracked tree stays at most 35 MiB (issue 47; issue 66, item 3): the GPU device tool sends the
checkout's tracked files and refuses more than 64 MiB, the tree had grown to 119 MB by tens of MB a
turn, and at 51.6 MB it left no room for an audit folder (up to 1 MB each). What keeps it small
(README, "The tracked tree stays at most 35 MiB"): tensors in git history (``hmmtf
restore-checkpoint``, ``models/README.md``), the figures no page links drawn on demand (``hmmtf
draw``), result JSON without indentation (``hmmtf.options.result_text``) and 256-colour PNGs.
At 29.2 MB after issue 66, the limit leaves about 7 MB for new audits."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 35 * 2**20
"""35 MiB = 36,700,160 bytes: the sum of the sizes of the files ``git ls-files`` lists."""
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


def test_the_tracked_tree_is_at_most_35_mib():
    sizes = tracked_sizes(ROOT)
    if sizes is None:
        pytest.skip(f"{ROOT} is not a git checkout (or git cannot run): there are no tracked files to add up")
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda item: item[1], reverse=True)[:SHOWN]
    named = ", ".join(f"{path} {size / 2**20:.2f} MiB" for path, size in largest)
    assert total <= LIMIT_BYTES, (f"the tracked files add up to {total:,} bytes ({total / 2**20:.1f} MiB), over the "
                                  f"limit of {LIMIT_BYTES:,} (35 MiB); the largest: {named}")
