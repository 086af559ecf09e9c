"""``hmmtf restore-checkpoint DIR``: write back, from git history, the tensors that a committed
checkpoint folder no longer holds.

The tracked tree stays at most 35 MiB (``tests/test_tree_size.py``), so the run folders of the
learning-curve studies keep their record but not their tensors: ``models/curves/RUN/checkpoint/``
keeps ``config.json`` only (``models/README.md``). Evaluating or analysing needs the weights;
resuming or branching a run (``hmmtf curve``, ``empirical.training.train.branch_run``) needs
``optimizer.safetensors`` too. Without the weights, :func:`empirical.training.checkpoint.load_checkpoint`
refuses in one line that names this command.

For each file the folder lacks (both, or with ``--weights-only`` the weights), the source is the
newest commit, among those ``git log`` lists for the file's path, whose tree holds the file and
whose ``config.json`` in the folder agrees with the present one on :data:`RUN_STATE_FIELDS` (the
network, the data, the training config and the step), so the tensors are those of the checkpoint
the folder describes (training is deterministic given these); records added to ``config.json``
later, such as ``branched_from``, do not matter. It is written back with ``git show COMMIT:PATH`` (to a temporary file, then renamed). A file that no such
commit holds (never committed, or the run has moved on since) is refused with one line naming
it, and then nothing is written; a file the folder holds is never touched.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from empirical.training.checkpoint import CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE

RUN_STATE_FIELDS = ("model", "task", "train", "step")
"""The fields of a checkpoint's ``config.json`` that determine its tensors."""


def _git(directory: Path, *arguments: str) -> subprocess.CompletedProcess:
    """``git ARGUMENTS`` run in ``directory``, its output as bytes (a blob is binary)."""
    try:
        return subprocess.run(["git", *arguments], cwd=directory, capture_output=True)
    except OSError as error:
        raise ValueError(f"checkpoint: git cannot run here ({error}); expected git, to read the history") from error


def path_in_repository(directory: Path) -> tuple[Path, str]:
    """``(top, path)``: the top of the git checkout that holds ``directory`` and the folder's path
    in it (``/``-separated); ``ValueError`` when it is in none."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise ValueError(f"checkpoint: {str(directory)!r} is not in a git checkout "
                         f"({top.stderr.decode().strip() or 'git rev-parse failed'}); expected a folder of a clone "
                         f"with history")
    root = Path(top.stdout.decode().strip()).resolve()
    return root, directory.resolve().relative_to(root).as_posix()


def run_state(config_text: bytes) -> dict | None:
    """The :data:`RUN_STATE_FIELDS` of a ``config.json``'s text; None when it is not a JSON object."""
    try:
        config = json.loads(config_text)
    except ValueError:
        return None
    return {field: config.get(field) for field in RUN_STATE_FIELDS} if isinstance(config, dict) else None


def commit_holding(root: Path, path: str, state: dict, config_path: str) -> str | None:
    """The newest of the commits ``git log`` lists for ``path`` whose tree holds ``path`` and whose
    ``config_path`` has the :func:`run_state` ``state``; None if there is none. The commit that deleted the file is
    listed but holds no blob; the one that last wrote it, next in the log, holds its last version."""
    log = _git(root, "log", "--format=%H", "--", path)
    for commit in log.stdout.decode().split():
        if _git(root, "cat-file", "-e", f"{commit}:{path}").returncode != 0:
            continue
        then = _git(root, "show", f"{commit}:{config_path}")
        if then.returncode == 0 and run_state(then.stdout) == state:
            return commit
    return None


def restore_checkpoint(directory: Path, weights_only: bool = False) -> dict[str, str]:
    """Write back the tensor files ``directory`` lacks (module docstring); ``{file: commit}`` of
    those written, empty when it lacks none. ``ValueError`` naming the first file that no commit
    with the folder's ``config.json`` holds, before anything is written."""
    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise ValueError(f"checkpoint: {str(directory)!r} has no {CONFIG_FILE}; expected a checkpoint folder "
                         f"whose tensors are missing (RUN/checkpoint of a committed run)")
    root, folder = path_in_repository(directory)
    state = run_state((directory / CONFIG_FILE).read_bytes())
    if state is None or state["step"] is None:
        raise ValueError(f"checkpoint: {str(directory / CONFIG_FILE)!r} is not a checkpoint's config (no step); "
                         f"expected the config.json save_checkpoint wrote")
    wanted = (MODEL_FILE,) if weights_only else (MODEL_FILE, OPTIMIZER_FILE)
    sources = {}
    for name in wanted:
        if (directory / name).exists():
            continue
        commit = commit_holding(root, f"{folder}/{name}", state, f"{folder}/{CONFIG_FILE}")
        if commit is None:
            raise ValueError(f"checkpoint: no commit holds {str(directory / name)!r} of this {CONFIG_FILE}'s run "
                             f"and step {state['step']} (never committed, or the run has moved on since); expected "
                             f"a file of git history for this step" + ("" if weights_only else " (--weights-only restores the weights alone)"))
        sources[name] = commit
    for name, commit in sources.items():
        blob = _git(root, "show", f"{commit}:{folder}/{name}")
        if blob.returncode != 0:
            raise ValueError(f"checkpoint: git show {commit[:12]}:{folder}/{name} failed "
                             f"({blob.stderr.decode().strip()}); expected the blob the log named")
        staging = directory / f".{name}.tmp"
        staging.write_bytes(blob.stdout)
        os.replace(staging, directory / name)
    return sources
