"""Which commit made a result, and whether the code that computes it has changed since.

The writers record the commit in three forms (one reader for all, :func:`recorded_commit`):

* ``"git_commit": "<sha>"`` or ``"<sha>+dirty"`` (:func:`hmmtf.source_commit`: ``hmmtf main``,
  ``evaluate``, ``analyze``, ``calibrate``, the benchmarks), optionally with ``"git_dirty": bool``
  beside it (``benchmarks/bench_hmm.py``);
* ``"git": {"commit": "<sha>", "dirty": bool}`` (``hmmtf markov-sweep``, older ``hmmtf analyze``),
  or ``{"commit": ..., "uncommitted_changes": bool}`` (``hmmtf reproduce``; on a machine without
  the repository its commit comes from an environment variable, may be null, and
  ``uncommitted_changes`` is null: unknown, read as clean);
* nothing, or null: no provenance.

**Stale.** A result is older than its code when one of its producers (git pathspecs,
:mod:`ledger.results`) differs between the recorded commit and the working tree:
``git diff --name-only COMMIT -- PRODUCERS``. Comparing trees rather than walking ``git log`` gives
the right answer across merges (a merge that brought the change in) and reverts (a change undone);
the reason names the changed files and the commits ``git log --no-merges COMMIT..HEAD -- PRODUCERS``. A result made
from a dirty tree is reported too: which code made it cannot be told.

**What counts as a change.** A Python file counts as changed only when what it computes can differ:
its syntax tree without docstrings and other bare string statements, and without the type hints of
functions and their local names (:func:`code_fingerprint`). Comments, docstrings, those type hints,
line breaks and spacing leave the tree as it is, so mending a docstring or a type hint does not
send hours of results back to be made again. What a module's ``__doc__`` holds is thereby
read as no change; the producers use it for command-line help only, never in a number. Any other
file (and a Python file that does not parse, or that exists on one side only) changes with its bytes.
"""
from __future__ import annotations

import ast
import enum
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ledger.documents import Doc, LedgerError
from ledger.results import Result

_SHA = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class Recorded:
    """The commit a result records and whether the tree it ran from differed from it."""

    commit: str
    dirty: bool

    def __str__(self) -> str:
        return self.commit[:7] + (" (with uncommitted changes)" if self.dirty else "")


def _sha(value, doc: Doc, key: str) -> str:
    if not isinstance(value, str) or not _SHA.fullmatch(value):
        raise LedgerError(f"{doc.path}: {key} = {value!r}; expected a git commit hash (7-40 hex digits)")
    return value


def recorded_commit(doc: Doc) -> Recorded | None:
    """The commit ``doc`` records, in any of the forms of the module docstring; None if it records none."""
    if "git_commit" in doc and doc["git_commit"] is not None:
        value = doc["git_commit"]
        dirty = isinstance(value, str) and value.endswith("+dirty")
        commit = _sha(value.removesuffix("+dirty") if dirty else value, doc, "git_commit")
        return Recorded(commit, dirty or bool(doc.data.get("git_dirty", False)))
    if "git" in doc and doc["git"] is not None:
        git = doc["git"]
        if not isinstance(git, dict) or "commit" not in git:
            raise LedgerError(f"{doc.path}: git = {git!r}; expected an object with 'commit'")
        if git["commit"] is None:
            return None
        return Recorded(_sha(git["commit"], doc, "git.commit"), bool(git.get("dirty", git.get("uncommitted_changes"))))
    return None


class GitUnavailable(RuntimeError):
    """No git, or the root is not a git checkout: freshness cannot be decided."""


def _git(root: Path, *arguments: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *arguments], cwd=root, capture_output=True, text=True)
    except OSError as error:
        raise GitUnavailable(f"git cannot run here ({error})") from error


def require_git(root: Path) -> None:
    """Raise :class:`GitUnavailable` unless ``root`` is the top of a git checkout with history."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise GitUnavailable(f"{root} is not a git checkout ({top.stderr.strip() or 'git rev-parse failed'})")
    if Path(top.stdout.strip()).resolve() != root.resolve():
        raise GitUnavailable(f"{root} is inside the git checkout {top.stdout.strip()}, not its top")


class _WithoutFunctionAnnotations(ast.NodeTransformer):
    """Drops the annotations of function signatures and of names assigned inside a function body
    (``x: T = v`` becomes ``x = v``; a bare ``x: T`` goes). Python evaluates neither kind into
    anything the function computes: signature annotations only fill ``__annotations__``, which no
    producer reads (``typing.get_type_hints`` reads config classes), and local ones are never
    evaluated. Annotations in a class body stay: a dataclass's or NamedTuple's fields are made from them."""

    def __init__(self) -> None:
        self.in_function = False

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        arguments = node.args
        for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg,
                         arguments.kwarg):
            if argument is not None:
                argument.annotation = None
        node.returns = None
        outer, self.in_function = self.in_function, True
        self.generic_visit(node)
        self.in_function = outer
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        outer, self.in_function = self.in_function, False
        self.generic_visit(node)
        self.in_function = outer
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if not self.in_function:
            return node
        return None if node.value is None else ast.Assign(targets=[node.target], value=node.value)


def code_fingerprint(source: str) -> str | None:
    """The syntax tree of the Python ``source`` with every statement that is a bare string (a
    docstring, an attribute's docstring) removed and without the annotations of functions and their
    local names (:class:`_WithoutFunctionAnnotations`), as ``ast.dump`` text without line numbers:
    equal for two sources that differ only in comments, docstrings, type hints and layout. None when
    it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list):
                statements[:] = [statement for statement in statements
                                 if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                                         and isinstance(statement.value.value, str))]
    return ast.dump(_WithoutFunctionAnnotations().visit(tree), include_attributes=False)


def _computes_the_same(root: Path, commit: str, path: str) -> bool:
    """Whether the file ``path`` computes at ``commit`` what it computes in the working tree: both
    exist, are Python, and have the same :func:`code_fingerprint`."""
    working = root / path
    if not path.endswith(".py") or not working.is_file():
        return False
    then = _git(root, "show", f"{commit}:{path}")
    if then.returncode != 0:
        return False
    fingerprint = code_fingerprint(then.stdout)
    return fingerprint is not None and fingerprint == code_fingerprint(working.read_text())


class Status(enum.Enum):
    FRESH = "fresh"
    STALE = "stale"
    DIRTY = "made from uncommitted changes"
    NO_PROVENANCE = "no provenance"
    UNKNOWN_COMMIT = "recorded commit unknown"
    MISSING = "missing"


@dataclass(frozen=True)
class Freshness:
    """The state of the file ``path`` of a registered result: ``status``, the ``recorded`` commit
    (None without one) and ``detail``, the reason in words."""

    result: Result
    path: str
    status: Status
    recorded: Recorded | None
    detail: str


def _pathspecs(producers: tuple[str, ...]) -> list[str]:
    return [f":(exclude){spec[1:]}" if spec.startswith("!") else spec for spec in producers]


def freshness(result: Result, root: Path, path: str | None = None) -> Freshness:
    """Whether ``path`` (default: ``result``'s path; one of its files for a pattern) exists,
    records a commit, and was made by the code ``result``'s producers now hold (module docstring).
    Needs git (:func:`require_git` first)."""
    path = result.path if path is None else path

    def state(status: Status, recorded: Recorded | None, detail: str) -> Freshness:
        return Freshness(result, path, status, recorded, detail)

    if not (root / path).is_file():
        return state(Status.MISSING, None, "the file does not exist")
    recorded = recorded_commit(Doc.load(root, path))
    if recorded is None:
        return state(Status.NO_PROVENANCE, None, "the JSON records no git commit")
    specs = _pathspecs(result.producers)
    changed = _git(root, "diff", "--name-only", recorded.commit, "--", *specs)
    if changed.returncode != 0:
        if _git(root, "cat-file", "-e", f"{recorded.commit}^{{commit}}").returncode == 0:
            raise GitUnavailable(f"git diff {recorded.commit[:7]} failed: {changed.stderr.strip()}")
        shallow = _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        hint = "; this is a shallow clone: git fetch --unshallow" if shallow else ""
        return state(Status.UNKNOWN_COMMIT, recorded, f"commit {recorded.commit[:7]} is not in this repository{hint}")
    files = [name for name in changed.stdout.split() if not _computes_the_same(root, recorded.commit, name)]
    if files:
        commits = _git(root, "log", "--no-merges", "--format=%h", f"{recorded.commit}..HEAD", "--", *files).stdout.split()
        uncommitted = _git(root, "diff", "--quiet", "HEAD", "--", *files).returncode == 1
        since = ", ".join(commits[:5]) + (f" and {len(commits) - 5} more" if len(commits) > 5 else "")
        by = " and ".join(part for part in (f"commits {since}" if commits else "", "uncommitted changes" if uncommitted else "")
                          if part)
        return state(Status.STALE, recorded, f"made at {recorded.commit[:7]}; since then {by} changed {', '.join(files)}")
    if recorded.dirty:
        return state(Status.DIRTY, recorded, f"made at {recorded.commit[:7]} from a tree with uncommitted changes")
    return state(Status.FRESH, recorded, f"made at {recorded.commit[:7]}")
