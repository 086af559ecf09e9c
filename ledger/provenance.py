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

**Moves.** A producer that git sees renamed (``git diff -M``: moved, possibly with its imports
edited) is compared with its old self, not reported as new: both trees are read with every import
made absolute and every module that moved named by its new name (:func:`code_fingerprint` with
``module`` and ``renamed``). So moving files between packages, and updating the imports that name
them, leaves the results they feed fresh; anything else a move touches (a string naming a module, an
attribute path through a moved package) still counts as a change. Producers are named by their
current paths in :mod:`ledger.results`; a file the recorded commit had under an old name counts
when its new name is a producer.

**Registries.** A module-level dict literal keyed by names (``MIXTURE_SPECS``, ``PRESETS``,
``CANDIDATES``) is compared only in the entries a result names (any string of its JSON): adding
a mixture, or changing the ``paper`` one, leaves a result on ``tasks-8192`` fresh. Every project
result records the names of what it was made from, so an entry it does not name is one it did not
read.

**Canaries.** A result whose producers did change can still be fresh when its canary (a small run
of the code that makes it, :mod:`ledger.canaries`) gives the same numbers now, within its
tolerance, as at a commit where the result was fresh; :func:`freshness` takes the judge of that as
``canaries``.

**Timings** (:attr:`ledger.results.Result.timing`) are measurements, not computations: a change of
their producers makes them older, not wrong, and is no problem (:data:`Status.MEASURED`, with the
commit, the machine the record names, :func:`measured_on`, and how many commits have changed the
producers since). ``hmmtf ledger --remeasure-timings`` measures them again on idle cores.
"""
from __future__ import annotations

import ast
import enum
import fnmatch
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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


def git(root: Path, *arguments: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *arguments], cwd=root, capture_output=True, text=True)
    except OSError as error:
        raise GitUnavailable(f"git cannot run here ({error})") from error


def require_git(root: Path) -> None:
    """Raise :class:`GitUnavailable` unless ``root`` is the top of a git checkout with history."""
    top = git(root, "rev-parse", "--show-toplevel")
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


class _AbsoluteImports(ast.NodeTransformer):
    """Makes every ``from . import`` absolute (``module``: the dotted name of the file the code is in)
    and names every module of ``renamed`` (old dotted name to new) by its new name, in ``import`` and
    ``from ... import`` statements alike. A ``from package import module`` whose module moved to
    another package becomes ``from new_package import module as old_name``, binding the same name."""

    def __init__(self, module: str | None, renamed: dict[str, str]) -> None:
        self.package = module.rsplit(".", 1)[0] if module and "." in module else ""
        self.renamed = renamed

    def visit_Import(self, node: ast.Import) -> ast.AST:
        for alias in node.names:
            alias.name = self.renamed.get(alias.name, alias.name)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.level:
            parts = self.package.split(".") if self.package else []
            base = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
            node.module, node.level = ".".join([*base, *([node.module] if node.module else [])]), 0
        module = node.module or ""
        if len(node.names) == 1 and f"{module}.{node.names[0].name}" in self.renamed:
            alias = node.names[0]
            new_package, _, new_name = self.renamed[f"{module}.{alias.name}"].rpartition(".")
            bound = alias.asname or alias.name
            node.module, alias.name = new_package, new_name
            alias.asname = None if bound == new_name else bound
        else:
            node.module = self.renamed.get(module, module)
        return node


def module_name(path: str) -> str:
    """The dotted module name of the Python file ``path`` (``a/b/__init__.py``: ``a.b``)."""
    parts = PurePosixPath(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _WithoutUnnamedEntries(ast.NodeTransformer):
    """Drops, from each dict literal assigned to a module-level name, the entries whose key is a
    string that ``names`` does not hold: a registry's other entries (``MIXTURE_SPECS["paper"]`` for a
    result on ``tasks-8192``), which a result reads only by a name it records."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_Module(self, node: ast.Module) -> ast.AST:
        for statement in node.body:
            value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Dict):
                kept = [(key, item) for key, item in zip(value.keys, value.values)
                        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value not in self.names)]
                value.keys, value.values = [key for key, _ in kept], [item for _, item in kept]
        return node


def named_in(data) -> set[str]:
    """Every string of the parsed JSON ``data``, keys and values: the names a result records (its
    preset, mixture, prompt format, families...)."""
    found: set[str] = set()
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            found.update(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            found.add(value)
    return found


def code_fingerprint(source: str, module: str | None = None, renamed: dict[str, str] | None = None,
                     names: set[str] | None = None) -> str | None:
    """The syntax tree of the Python ``source`` with every statement that is a bare string (a
    docstring, an attribute's docstring) removed and without the annotations of functions and their
    local names (:class:`_WithoutFunctionAnnotations`), as ``ast.dump`` text without line numbers:
    equal for two sources that differ only in comments, docstrings, type hints and layout. With
    ``module`` (the source's dotted name) its relative imports are made absolute, and with
    ``renamed`` (old dotted module name to new) the imports name moved modules by their new names
    (:class:`_AbsoluteImports`); with ``names``, a module-level dict literal keeps only the entries
    whose string key is one of them (:class:`_WithoutUnnamedEntries`). None when it does not parse."""
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
    tree = _AbsoluteImports(module, renamed or {}).visit(tree)
    if names is not None:
        tree = _WithoutUnnamedEntries(names).visit(tree)
    return ast.dump(_WithoutFunctionAnnotations().visit(tree), include_attributes=False)


def _source(root: Path, revision: str | None, path: str) -> str | None:
    """The text of ``path`` at ``revision`` (None: the working tree); None when it is not there."""
    if revision is None:
        file = root / path
        return file.read_text() if file.is_file() else None
    shown = git(root, "show", f"{revision}:{path}")
    return shown.stdout if shown.returncode == 0 else None


def matches_producers(path: str, producers: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of the pathspecs ``producers`` (a file, a folder ending in ``/``, or a
    pattern with ``*``, which matches across ``/`` as git's does; a leading ``!`` excludes), as
    :mod:`ledger.results` writes them."""
    def named(spec: str) -> bool:
        return (path == spec or (spec.endswith("/") and path.startswith(spec))
                or ("*" in spec and fnmatch.fnmatchcase(path, spec)))
    return (any(named(spec) for spec in producers if not spec.startswith("!"))
            and not any(named(spec[1:]) for spec in producers if spec.startswith("!")))


def _renames(root: Path, commit: str, target: str | None) -> dict[str, str]:
    """Every file renamed between ``commit`` and ``target`` (None: the working tree), old path to
    new, composed commit by commit (``git log -M``, then the uncommitted renames): a file that
    changed much after ``commit`` and then moved is still paired with its old self."""
    steps = git(root, "log", "--reverse", "--format=", "--name-status", "-M", "--diff-filter=R", "-z",
                f"{commit}..{target or 'HEAD'}").stdout.split("\0")
    if target is None:
        steps += git(root, "diff", "-M", "--name-status", "--diff-filter=R", "-z", "HEAD").stdout.split("\0")
    renamed: dict[str, str] = {}
    fields = [field.strip() for field in steps if field.strip()]
    while len(fields) >= 3:
        _, old, new = fields.pop(0), fields.pop(0), fields.pop(0)
        renamed = {first: (new if last == old else last) for first, last in renamed.items()}
        renamed.setdefault(old, new)
    return renamed


def changed_producers(root: Path, producers: tuple[str, ...], commit: str, target: str | None = None,
                      names: set[str] | None = None) -> list[str]:
    """The producers that compute something else at ``target`` (a commit; None: the working tree)
    than at ``commit``: a file added or removed, or one whose code differs (:func:`code_fingerprint`,
    across moves, and for a result that records ``names`` without the registry entries it does not
    name: module docstring). Names are ``target``'s, a removed file's ``commit``'s."""
    listing = git(root, "diff", "-M", "--name-status", "-z", commit, *([target] if target else []), "--",
                  *_pathspecs(producers), "*.py")
    if listing.returncode != 0:
        raise GitUnavailable(f"git diff {commit[:7]} failed: {listing.stderr.strip()}")
    fields = listing.stdout.split("\0")
    entries: list[tuple[str, str, str]] = []
    while len(fields) > 1:
        status = fields.pop(0)
        old = fields.pop(0)
        new = fields.pop(0) if status[0] in "RC" else old
        entries.append((status[0], old, new))
    moves = _renames(root, commit, target)
    added = {new for status, _, new in entries if status == "A"}
    paired = {old: moves[old] for status, old, _ in entries if status == "D" and moves.get(old) in added}
    entries = [entry for entry in entries if not (entry[0] == "D" and entry[1] in paired)
               and not (entry[0] == "A" and entry[2] in paired.values())]
    entries += [("R", old, new) for old, new in paired.items()]
    renamed = {module_name(old): module_name(new) for old, new in moves.items()
               if old.endswith(".py") and new.endswith(".py")}
    changed = []
    for status, old, new in entries:
        if not (matches_producers(new, producers) or matches_producers(old, producers)):
            continue
        if status in "AD" or not _same_code(root, commit, old, target, new, renamed, names):
            changed.append(old if status == "D" else new)
    return changed


def _same_code(root: Path, commit: str, old: str, target: str | None, new: str, renamed: dict[str, str],
               names: set[str] | None) -> bool:
    """Whether ``old`` at ``commit`` computes what ``new`` computes at ``target``: both Python, and the
    same :func:`code_fingerprint` once moved modules carry their new names."""
    if not (old.endswith(".py") and new.endswith(".py")):
        return False
    then, now = _source(root, commit, old), _source(root, target, new)
    if then is None or now is None:
        return False
    fingerprint = code_fingerprint(then, module_name(old), renamed, names)
    return fingerprint is not None and fingerprint == code_fingerprint(now, module_name(new), names=names)


class Status(enum.Enum):
    FRESH = "fresh"
    MEASURED = "a timing"
    STALE = "stale"
    DIRTY = "made from uncommitted changes"
    NO_PROVENANCE = "no provenance"
    UNKNOWN_COMMIT = "recorded commit unknown"
    MISSING = "missing"


@dataclass(frozen=True)
class Freshness:
    """The state of the file ``path`` of a registered result: ``status``, the ``recorded`` commit
    (None without one) and ``detail``, the reason in words; ``canary``: the canary that vouched for
    a fresh result whose producers changed (None: they did not change)."""

    result: Result
    path: str
    status: Status
    recorded: Recorded | None
    detail: str
    canary: str | None = None


@dataclass(frozen=True)
class Vouch:
    """A canary's answer for a result whose producers changed: ``fresh`` or not, and why."""

    canary: str
    fresh: bool
    detail: str


CanaryJudge = Callable[[Result, Recorded, set[str]], "Vouch | None"]
"""Asked about ``(result, recorded, names)`` (``names``: :func:`named_in` of the result's JSON) when
the producers changed since the recorded commit: the canary's :class:`Vouch`, or None when no canary
covers the result (:mod:`ledger.canaries`)."""


def measured_on(doc: Doc) -> str:
    """The machine a timing's record names: its ``host`` (CPU, cores, the kernel set torch
    dispatched to; :func:`empirical.measurement.roofline.host`), or "an unrecorded machine" for a
    record made before the benchmarks wrote one."""
    host = doc.data.get("host")
    if not isinstance(host, dict):
        return "an unrecorded machine"
    return f"{host.get('cpu', 'an unnamed CPU')} ({host.get('cores', '?')} cores, {host.get('kernels', '?')} kernels)"


def _pathspecs(producers: tuple[str, ...]) -> list[str]:
    return [f":(exclude){spec[1:]}" if spec.startswith("!") else spec for spec in producers]


def freshness(result: Result, root: Path, path: str | None = None, canaries: CanaryJudge | None = None) -> Freshness:
    """Whether ``path`` (default: ``result``'s path; one of its files for a pattern) exists,
    records a commit, and was made by the code ``result``'s producers now hold (module docstring),
    or, where they changed, whether ``canaries`` vouches for it. Needs git (:func:`require_git` first)."""
    path = result.path if path is None else path

    def state(status: Status, recorded: Recorded | None, detail: str, canary: str | None = None) -> Freshness:
        return Freshness(result, path, status, recorded, detail, canary)

    if not (root / path).is_file():
        return state(Status.MISSING, None, "the file does not exist")
    doc = Doc.load(root, path)
    recorded = recorded_commit(doc)
    if recorded is None:
        return state(Status.NO_PROVENANCE, None, "the JSON records no git commit")
    if git(root, "cat-file", "-e", f"{recorded.commit}^{{commit}}").returncode != 0:
        shallow = git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        hint = "; this is a shallow clone: git fetch --unshallow" if shallow else ""
        return state(Status.UNKNOWN_COMMIT, recorded, f"commit {recorded.commit[:7]} is not in this repository{hint}")
    names = named_in(doc.data)
    files = changed_producers(root, result.producers, recorded.commit, names=names)
    if not files and recorded.dirty:
        return state(Status.DIRTY, recorded, f"made at {recorded.commit[:7]} from a tree with uncommitted changes")
    if not files:
        return state(Status.FRESH, recorded, f"made at {recorded.commit[:7]}")
    commits = git(root, "log", "--no-merges", "--format=%h", f"{recorded.commit}..HEAD", "--", *files).stdout.split()
    uncommitted = git(root, "diff", "--quiet", "HEAD", "--", *files).returncode == 1
    if result.timing and not recorded.dirty:
        moved = f"{len(commits)} commit{'s' if len(commits) != 1 else ''}" + (" and uncommitted changes" if uncommitted
                                                                             else "")
        return state(Status.MEASURED, recorded, f"measured at {recorded.commit[:7]} on {measured_on(doc)}; its "
                                                f"producers changed in {moved} since ({', '.join(files)})")
    since = ", ".join(commits[:5]) + (f" and {len(commits) - 5} more" if len(commits) > 5 else "")
    by = " and ".join(part for part in (f"commits {since}" if commits else "", "uncommitted changes" if uncommitted else "")
                      if part)
    detail = f"made at {recorded.commit[:7]}; since then {by} changed {', '.join(files)}"
    vouch = canaries(result, recorded, names) if canaries and not recorded.dirty else None
    if vouch is None:
        return state(Status.STALE, recorded, detail)
    if vouch.fresh:
        return state(Status.FRESH, recorded, f"{detail}; {vouch.detail}", vouch.canary)
    return state(Status.STALE, recorded, f"{detail}; {vouch.detail}")
