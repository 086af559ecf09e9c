"""The project's packages, which project packages each may import, and the imports the code has:
the block of docs/ARCHITECTURE.md is generated from it (``hmmtf ledger``), and so are the contracts
of import-linter in pyproject.toml (``[tool.importlinter]``, :func:`import_linter_config`), which
``make lint`` runs as ``lint-imports``: the layers (derived below), each package's allowed imports
(a ``forbidden`` contract of the project packages it may not import) and the never rules of
:data:`NEVER_RULES`. tests/test_architecture.py checks that the contracts there are the ones these
declarations give, and fails on the rules import-linter cannot express, each message naming its rule:

- ``declared-packages``: a folder of Python modules under :data:`SOURCES` that is neither declared
  nor held by a declared package, or a Python module or package at the repository root that is not
  one of :data:`SOURCES`. import-linter checks the packages a contract names, and says nothing of a
  folder no contract names;
- ``allowed-imports`` and the never rules, for the imports import-linter does not see
  (:func:`unseen_by_import_linter`): the modules ``benchmarks/`` imports (a folder of scripts, not a
  package: import-linter reads packages only), and a module named by a string literal at run time
  (a call of :data:`NAMED_IMPORT_CALLS`, a registry of :data:`MODULE_REGISTRIES`: import-linter's
  graph, grimp's, holds import statements only);
- ``literal-imports``: an import at run time whose module the code does not name in a string
  literal (neither this map nor import-linter can read it);
- ``acyclic`` and the other checks of the declaration itself (:func:`declaration_errors`).

A listed exemption (:data:`EXEMPTIONS`) excuses one rule for one import of one file, with its
reason; an exemption that excuses nothing fails too, so the lists only shrink.

The layer of a package is derived, not declared: the longest path of allowed imports from it down
to a package that may import nothing (layer 0)."""
from __future__ import annotations

import ast
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ledger.provenance import module_name


@dataclass(frozen=True)
class Package:
    """A part of the project: its dotted ``name`` (a package, a module of one, or a top-level
    module), what it is for, the project packages it may import, and the subpackages it holds
    (folders of modules that belong to it without a declaration of their own)."""

    name: str
    purpose: str
    may_import: tuple[str, ...] = ()
    holds: tuple[str, ...] = ()


PACKAGES: tuple[Package, ...] = (
    Package("hmm", "the HMM engine: HMMs, exact filtering, sampling, prompts, mixtures and their presets, the "
                   "Bayes-optimal predictor, the prior-predictive SMC and its bounds"),
    Package("empirical.training.configs", "config dataclasses: JSON, validation, the help of the fields that are "
                                          "options (a utility)"),
    Package("empirical.provenance", "the one reader of the checkout's commit, for every writer that records one (a "
                                    "utility)"),
    Package("empirical.plotting", "the figures' backend and house style (a utility)"),
    Package("empirical", "the package's own docstring"),
    Package("empirical.training", "the RoFormer, its training loop, checkpoints, presets, prompt streams, run "
                                  "folders", ("empirical.training.configs", "hmm")),
    Package("construction", "the hand-wired transformer of the paper, as weight tensors"),
    Package("empirical.measurement", "the machine: matmul peaks, training throughput", ("empirical.training",)),
    Package("bounds.serialize", "typed results to JSON at the writer (a utility: `hmmtf main`'s report, `hmmtf "
                                "evaluate`'s results)"),
    Package("bounds", "Lemma 1, Theorem 1 and Theorem 2, measured on the construction (`hmmtf main`)",
            ("bounds.serialize", "construction", "empirical.plotting", "hmm")),
    Package("empirical.interop", "export of a checkpoint to TransformerLens", ("construction", "empirical.training")),
    Package("empirical.yardsticks", "what a network is judged against: Bayes, the in-context n-grams, the oracle, "
                                    "the ceiling, the hand-built network, competence, regime, learning curves, "
                                    "family signal", ("bounds.serialize", "construction", "empirical.training", "hmm")),
    Package("empirical.analysis", "inside one trained network: shuffle, probes, offsets, patching, heads, KL map, "
                                  "belief probes, the n-gram verdict",
            ("construction", "empirical.plotting", "empirical.training", "empirical.training.configs",
             "empirical.yardsticks", "hmm")),
    Package("empirical.reports", "what the commands of training and the yardsticks write: typed reports and "
                                 "figures", ("bounds.serialize", "empirical.plotting", "empirical.training",
                                             "empirical.yardsticks", "hmm")),
    Package("empirical.studies", "studies over many networks: the regime ladder, the plateau, the Markov-chain "
                                 "traps (`empirical.studies.markov`)",
            ("empirical.analysis", "empirical.plotting", "empirical.training", "empirical.training.configs",
             "empirical.yardsticks", "hmm"), holds=("empirical.studies.markov",)),
    Package("empirical.reproduce", "`hmmtf reproduce`: the paper's experiment as resumable, planned stages",
            ("bounds.serialize", "empirical.analysis", "empirical.measurement", "empirical.provenance",
             "empirical.reports", "empirical.training", "empirical.yardsticks", "hmm")),
    Package("hmmtf", "the command line, its one layer: every parser, option type and command runner "
                     "(`hmmtf.commands`, one module per subcommand group, each with `register(subparsers)`), "
                     "assembled by `SUBCOMMAND_MODULES`",
            ("bounds", "bounds.serialize", "construction", "empirical.analysis", "empirical.interop",
             "empirical.measurement", "empirical.plotting", "empirical.provenance", "empirical.reports", "empirical.reproduce",
             "empirical.studies", "empirical.training", "empirical.training.configs", "empirical.yardsticks", "hmm",
             "ledger"),
            holds=("hmmtf.commands",)),
    Package("ledger", "the claims ledger, provenance and canaries (which run the command line `hmmtf ledger` hands "
                      "them, and the benchmarks as processes), this map"),
    Package("benchmarks", "timings against baselines and the machine's bound (scripts, each its own command line)",
            ("construction", "empirical.analysis", "empirical.measurement", "empirical.plotting", "empirical.provenance",
             "empirical.reproduce", "empirical.studies", "empirical.training", "empirical.yardsticks", "hmm", "hmmtf")),
)
"""Every package, with the project packages it may import."""

SOURCES = ("hmm", "construction", "bounds", "empirical", "hmmtf", "ledger", "benchmarks")
"""The files and folders whose Python modules the map covers (not tests, not examples)."""

ARCHITECTURE_MODULE = "ledger/architecture.py"
"""Where the declarations are, for the messages that say where to declare."""

COMPUTING_PACKAGES = frozenset(package.name for package in PACKAGES
                               if package.name.split(".")[0] in ("hmm", "construction", "bounds", "empirical"))
"""The packages that compute: the engine, the construction, its bounds, the trained networks."""

COMMAND_LINE_PACKAGES = frozenset(("hmmtf", "benchmarks"))
"""The packages whose job is a command line: the command line itself, the benchmark scripts."""


@dataclass(frozen=True)
class NeverRule:
    """No module of the packages ``importers`` imports any of ``forbidden`` (project packages, or
    libraries by their top-level name), whatever the allowed imports say; ``reason``: why."""

    name: str
    importers: frozenset[str]
    forbidden: frozenset[str]
    reason: str


ARGPARSE_RULE = "argparse-in-command-lines-only"

NEVER_RULES: tuple[NeverRule, ...] = (
    NeverRule("engine-imports-nothing", frozenset({"hmm"}),
              frozenset(package.name for package in PACKAGES) - {"hmm"},
              "the HMM engine is the oracle everything is checked against"),
    NeverRule("construction-not-from-engine", frozenset({"construction"}), frozenset({"hmm"}),
              "the hand-built network is checked against exact filtering, so it must not be built from it"),
    NeverRule("training-without-theory", frozenset({"empirical.training", "empirical.training.configs"}),
              frozenset({"construction", "bounds"}), "training knows nothing of the theory it is compared with"),
    NeverRule("computing-without-command-line", COMPUTING_PACKAGES, frozenset({"hmmtf"}),
              "the command line calls the computing packages, never the other way round"),
    NeverRule(ARGPARSE_RULE, frozenset(package.name for package in PACKAGES) - COMMAND_LINE_PACKAGES,
              frozenset({"argparse"}), "parsing a command line is the command-line packages' job"),
)
"""The rules checked on top of the allowed imports."""


@dataclass(frozen=True)
class Exemption:
    """The one import of ``imported`` (a package, a library, or a call that imports at run time)
    by the ``file`` (from the repository root) that the rule named ``rule`` lets through, and why."""

    rule: str
    file: str
    imported: str
    reason: str


RUN_TIME_IMPORTS: tuple[Exemption, ...] = (
    Exemption("literal-imports", "hmmtf/__init__.py", "importlib.import_module",
              "loads the modules of SUBCOMMAND_MODULES, which the map reads as hmmtf's imports"),
    Exemption("literal-imports", "ledger/canaries.py", "importlib.import_module",
              "reads the full-size settings of the modules a canary names"),
)
"""The imports of modules named at run time."""

EXEMPTIONS = RUN_TIME_IMPORTS
"""Every listed exemption."""

NAMED_IMPORT_CALLS = frozenset(("importlib.import_module", "importlib.util.find_spec", "importlib.__import__",
                                "__import__", "runpy.run_module"))
"""Calls that import the module their first argument names: a string literal is read as an import."""

PATH_IMPORT_CALLS = frozenset(("importlib.util.spec_from_file_location", "runpy.run_path"))
"""Calls that import a file by its path, which the map cannot read."""

MODULE_REGISTRIES = {"hmmtf/__init__.py": "SUBCOMMAND_MODULES"}
"""Module-level dicts whose string values are modules their file imports by name."""


# The declaration.

def find_cycle(packages: tuple[Package, ...]) -> list[str]:
    """A cycle of allowed imports, as the names along it back to the first (``[a, b, a]``); empty
    when there is none (depth-first search: a cycle closes on a package still on the path)."""
    allowed = {package.name: package.may_import for package in packages}
    done: set[str] = set()

    def walk(path: list[str]) -> list[str]:
        for imported in allowed.get(path[-1], ()):
            if imported in path:
                return path[path.index(imported):] + [imported]
            if imported not in done:
                cycle = walk(path + [imported])
                if cycle:
                    return cycle
        done.add(path[-1])
        return []

    for package in packages:
        if package.name not in done:
            cycle = walk([package.name])
            if cycle:
                return cycle
    return []


def _cycle_error(packages: tuple[Package, ...]) -> str | None:
    """The message of a cycle of allowed imports; None: there is none."""
    cycle = find_cycle(packages)
    return f"the declared imports form a cycle: {' -> '.join(cycle)} [acyclic]" if cycle else None


def layers(packages: tuple[Package, ...] = PACKAGES) -> dict[str, int]:
    """The layer of each package: 0 when it may import nothing of the project, else one more than
    the highest layer it may import (the longest path of allowed imports down to layer 0). Raises
    ValueError when the allowed imports form a cycle."""
    error = _cycle_error(packages)
    if error:
        raise ValueError(error)
    allowed = {package.name: package.may_import for package in packages}

    @functools.cache
    def layer(name: str) -> int:
        return max((layer(imported) + 1 for imported in allowed.get(name, ())), default=0)

    return {package.name: layer(package.name) for package in packages}


def declaration_errors(packages: tuple[Package, ...] = PACKAGES,
                       rules: tuple[NeverRule, ...] = NEVER_RULES) -> list[str]:
    """What is wrong with a declaration: an allowed import of an undeclared package, a subpackage
    held outside its holder, an allowed import a never rule forbids, a cycle of allowed imports."""
    names = {package.name for package in packages}
    errors = [f"{package.name} may import {imported}, which is not a declared package [declared-packages]"
              for package in packages for imported in package.may_import if imported not in names]
    errors += [f"{package.name} holds {held}, which is not inside it [declared-packages]"
               for package in packages for held in package.holds if not held.startswith(package.name + ".")]
    errors += [f"{package.name} may import {imported}, which never rule {rule.name} forbids: {rule.reason}"
               for rule in rules for package in packages if package.name in rule.importers
               for imported in package.may_import if imported in rule.forbidden]
    cycle = _cycle_error(packages)
    return errors + [cycle] if cycle else errors


def package_of(module: str) -> Package | None:
    """The package ``module`` belongs to (the longest declared name that is it or its prefix);
    None: not the project's (a library)."""
    owners = [package for package in PACKAGES if module == package.name or module.startswith(package.name + ".")]
    return max(owners, key=lambda package: len(package.name)) if owners else None


def _target(name: str) -> str:
    """What an import of the dotted ``name`` reaches: its project package, or its library's top-level name."""
    package = package_of(name)
    return package.name if package is not None else name.split(".")[0]


# Reading the code.

@dataclass(frozen=True)
class Import:
    """One import in the ``file`` (from the repository root) at ``line``: the dotted ``name`` it
    imports (``from a.b import c`` imports ``a.b.c``; None: a module named at run time) and ``how``
    (``import``, the call, or the registry)."""

    file: str
    line: int
    name: str | None
    how: str

    @property
    def importer(self) -> str:
        """The package of the importing file."""
        package = package_of(module_name(self.file))
        return package.name if package is not None else module_name(self.file)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """The dotted name each name bound by an import stands for (``import importlib.util`` binds
    ``importlib``; ``from importlib import import_module as load`` binds ``load``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            aliases.update((alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names)
    return aliases


def _dotted(expression: ast.expr, aliases: dict[str, str]) -> str | None:
    """The dotted name of ``expression`` (``importlib.import_module``), its first name read
    through ``aliases``; None: not a name."""
    if isinstance(expression, ast.Name):
        return aliases.get(expression.id, expression.id)
    if isinstance(expression, ast.Attribute):
        base = _dotted(expression.value, aliases)
        return f"{base}.{expression.attr}" if base else None
    return None


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module ``node`` imports from, in the module of ``package``: ``from ..b import c`` in
    ``a.x`` is ``a.b`` (each dot past the first goes up one package)."""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
    return ".".join(part for part in (base, node.module or "") if part)


def _statement_imports(tree: ast.AST, file: str, package: str) -> Iterator[Import]:
    """The ``import`` statements of ``file``, whose modules are in ``package``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (Import(file, node.lineno, alias.name, "import") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            yield from (Import(file, node.lineno, f"{module}.{alias.name}", "import") for alias in node.names)


def _call_imports(tree: ast.AST, file: str) -> Iterator[Import]:
    """The calls of ``file`` that import at run time: a call of :data:`NAMED_IMPORT_CALLS` whose
    first argument is a string literal imports that name; one whose argument is not, and a call of
    :data:`PATH_IMPORT_CALLS`, import a module the map cannot read (name None)."""
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        call = _dotted(node.func, aliases)
        if call in NAMED_IMPORT_CALLS:
            literal = node.args[0] if node.args and isinstance(node.args[0], ast.Constant) else None
            name = literal.value if literal is not None and isinstance(literal.value, str) else None
            yield Import(file, node.lineno, name, call)
        elif call in PATH_IMPORT_CALLS:
            yield Import(file, node.lineno, None, call)


def registry_values(tree: ast.Module, registry: str) -> list[ast.Constant] | None:
    """The string values of the module-level dict ``registry``; None: the module assigns no dict to it."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if isinstance(value, ast.Dict) and any(isinstance(target, ast.Name) and target.id == registry
                                               for target in targets):
            return [item for item in value.values if isinstance(item, ast.Constant) and isinstance(item.value, str)]
    return None


def _registry_imports(tree: ast.Module, file: str) -> Iterator[Import]:
    """The modules ``file``'s registry (:data:`MODULE_REGISTRIES`) names, as its imports."""
    registry = MODULE_REGISTRIES.get(file)
    values = registry_values(tree, registry) if registry else None
    for value in values or []:
        yield Import(file, value.lineno, value.value, registry)


def python_files(root: Path) -> list[Path]:
    """Every Python module under :data:`SOURCES`."""
    files: list[Path] = []
    for source in SOURCES:
        path = root / source
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return files


def module_imports(root: Path) -> list[Import]:
    """Every import of every module under :data:`SOURCES`."""
    found: list[Import] = []
    for path in python_files(root):
        file = path.relative_to(root).as_posix()
        module = module_name(file)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        found += [*_statement_imports(tree, file, package), *_call_imports(tree, file), *_registry_imports(tree, file)]
    return found


# The checks.

@dataclass(frozen=True)
class Violation:
    """A rule broken by the ``file`` (from the repository root) through ``imported`` (what an
    :class:`Exemption` names), told in one line."""

    rule: str
    file: str
    imported: str
    message: str


DECLARE = f"declare it in PACKAGES of {ARCHITECTURE_MODULE}"
"""Where an undeclared package goes, as its message says."""


def undeclared_folders(root: Path) -> list[Violation]:
    """Each folder of Python modules under :data:`SOURCES` that no package declares or holds."""
    declared = {package.name for package in PACKAGES} | {held for package in PACKAGES for held in package.holds}
    folders = sorted({path.parent.relative_to(root).as_posix() for path in python_files(root)} - {"."})
    return [Violation("declared-packages", folder, "", f"{folder}/: package {folder.replace('/', '.')} is not "
                      f"declared; {DECLARE}, or in the holds of its parent {_parent(folder)} [declared-packages]")
            for folder in folders if folder.replace("/", ".") not in declared]


def _parent(folder: str) -> str:
    """The declared package that owns ``folder`` by prefix, where its subpackages are held."""
    owner = package_of(folder.replace("/", "."))
    return owner.name if owner is not None else "(none: declare it)"


def undeclared_modules(root: Path) -> list[Violation]:
    """Each Python file of :data:`SOURCES` that is not a declared package."""
    declared = {package.name for package in PACKAGES}
    return [Violation("declared-packages", source, "", f"{source}: module {module_name(source)} is not declared; "
                      f"{DECLARE} [declared-packages]")
            for source in SOURCES if (root / source).is_file() and module_name(source) not in declared]


def modules_outside_the_map(root: Path) -> list[Violation]:
    """Each Python module or package at the repository root that is not one of :data:`SOURCES`."""
    outside = sorted(path.relative_to(root).as_posix() for path in [*root.glob("*.py"), *root.glob("*/__init__.py")]
                     if path.relative_to(root).parts[0] not in SOURCES)
    return [Violation("declared-packages", file, "", f"{file}: a Python module at the repository root outside the "
                      f"map; add it to SOURCES of {ARCHITECTURE_MODULE} and declare its package [declared-packages]")
            for file in outside]


def _where(found: Import) -> str:
    """Where an import is and what it imports, as a message starts."""
    return f"{found.file}:{found.line}: {found.importer} imports {found.name} ({found.how})"


def _other_package(found: Import) -> str | None:
    """The project package, not the importer's own, that ``found`` imports; None: its own, a
    library, or a module named at run time."""
    if found.name is None or package_of(found.name) is None or _target(found.name) == found.importer:
        return None
    return _target(found.name)


def disallowed_imports(found: list[Import]) -> list[Violation]:
    """Each import of a project package that the importer may not import."""
    allowed = {package.name: package.may_import for package in PACKAGES}
    return [Violation("allowed-imports", item.file, imported, f"{_where(item)}: {imported} is not among "
                      f"{item.importer}'s allowed imports ({', '.join(allowed.get(item.importer, ())) or 'none'}); "
                      f"declare the edge in {ARCHITECTURE_MODULE} if the design wants it [allowed-imports]")
            for item in found for imported in [_other_package(item)]
            if imported is not None and imported not in allowed.get(item.importer, ())]


def never_rule_breaches(found: list[Import]) -> list[Violation]:
    """Each import that a never rule forbids."""
    return [Violation(rule.name, item.file, _target(item.name),
                      f"{_where(item)}: never rule {rule.name} forbids it: {rule.reason}")
            for rule in NEVER_RULES for item in found
            if item.name is not None and item.importer in rule.importers and _target(item.name) in rule.forbidden]


def unread_imports(found: list[Import]) -> list[Violation]:
    """Each import of a module named at run time, not in a string literal."""
    return [Violation("literal-imports", item.file, item.how,
                      f"{item.file}:{item.line}: {item.importer} imports a module named at run time ({item.how}), which "
                      f"the map cannot read; name it in a string literal, or list an exemption with its reason [literal-imports]")
            for item in found if item.name is None]


def missing_registries(root: Path) -> list[Violation]:
    """Each registry of :data:`MODULE_REGISTRIES` whose file exists but assigns no dict to it."""
    return [Violation("literal-imports", file, registry, f"{file}: no module-level dict {registry}, which "
                      f"{ARCHITECTURE_MODULE} reads as its imports; update MODULE_REGISTRIES [literal-imports]")
            for file, registry in MODULE_REGISTRIES.items()
            if (root / file).is_file() and registry_values(ast.parse((root / file).read_text()), registry) is None]


def unseen_by_import_linter(found: list[Import]) -> list[Import]:
    """The imports import-linter's contracts do not judge: those of ``benchmarks/`` (scripts, not a
    package) and those of a module named at run time (not an import statement)."""
    return [item for item in found if item.how != "import" or item.importer == "benchmarks"]


def all_violations(root: Path) -> list[Violation]:
    """Every rule broken by the code under ``root`` that import-linter cannot check, exempted or not."""
    found = module_imports(root)
    unseen = unseen_by_import_linter(found)
    return [*undeclared_folders(root), *undeclared_modules(root), *modules_outside_the_map(root),
            *missing_registries(root), *disallowed_imports(unseen),
            *never_rule_breaches(unseen), *unread_imports(found)]


# The contracts of import-linter.

IMPORT_LINTER_ROOTS = tuple(source for source in SOURCES if source != "benchmarks")
"""The root packages import-linter reads: every source but ``benchmarks/``, a folder of scripts."""


def _parents(name: str) -> set[str]:
    """The packages that hold the dotted ``name`` (``a.b.c``: ``a``, ``a.b``)."""
    parts = name.split(".")
    return {".".join(parts[:index]) for index in range(1, len(parts))}


def import_linter_config(packages: tuple[Package, ...] = PACKAGES,
                         rules: tuple[NeverRule, ...] = NEVER_RULES) -> dict:
    """``[tool.importlinter]`` of pyproject.toml, from the declarations, for the packages under
    :data:`IMPORT_LINTER_ROOTS`: a ``layers`` contract (siblings of a layer independent) of the
    packages inside no other declared one but the ``empirical`` namespace (import-linter refuses a
    layer inside another: ``bounds.serialize`` and ``empirical.training.configs`` are judged by
    their forbidden contracts alone); for each package, a ``forbidden`` contract of the project
    packages it may not import (less its parents, which hold it, and the ``empirical`` package's own
    module, which holds the rest; an allowed package inside a forbidden one, ``bounds.serialize`` in
    ``bounds``, is let through by ``ignore_imports``, which need not all be used); and each never
    rule. Every contract judges direct imports only, as the map does."""
    checked = [package.name for package in packages if package.name.split(".")[0] in IMPORT_LINTER_ROOTS]
    layer = layers(packages)
    layered = [name for name in checked if name != "empirical" and not _parents(name) & (set(checked) - {"empirical"})]
    rows = [" | ".join(sorted(name for name in layered if layer[name] == level))
            for level in sorted({layer[name] for name in layered}, reverse=True)]
    contracts: list[dict] = [{"id": "layers", "name": "the layers derived from the allowed imports (ledger/architecture.py)",
                              "type": "layers", "layers": rows}]
    for package in packages:
        if package.name not in checked or package.name == "empirical":
            continue
        forbidden = sorted(name for name in checked if name not in (*package.may_import, package.name, "empirical")
                           and name not in _parents(package.name))
        held = sorted(name for name in package.may_import if _parents(name) & set(forbidden))
        if forbidden:
            contracts.append({"id": f"allowed-imports-{package.name}", "name": f"{package.name} imports only its "
                              "allowed imports", "type": "forbidden", "source_modules": [package.name],
                              "forbidden_modules": forbidden, "allow_indirect_imports": True,
                              **({"ignore_imports": [f"{package.name}.** -> {name}" for name in held],
                                  "unmatched_ignore_imports_alerting": "none"} if held else {})})
    for rule in rules:
        contracts.append({"id": rule.name, "name": rule.reason, "type": "forbidden",
                          "source_modules": sorted(name for name in rule.importers if name in checked),
                          "forbidden_modules": sorted(name for name in rule.forbidden
                                                      if name in checked or name not in {p.name for p in packages}),
                          "allow_indirect_imports": True})
    return {"root_packages": list(IMPORT_LINTER_ROOTS), "include_external_packages": True, "contracts": contracts}


def import_linter_toml(config: dict) -> str:
    """``config`` (:func:`import_linter_config`) as the TOML of pyproject.toml."""
    def text(value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return "[" + ", ".join(text(item) for item in value) + "]"
        return json.dumps(value, allow_nan=False)
    lines = ["[tool.importlinter]", f"root_packages = {text(config['root_packages'])}",
             f"include_external_packages = {text(config['include_external_packages'])}"]
    for contract in config["contracts"]:
        lines += ["", "[[tool.importlinter.contracts]]", *(f"{key} = {text(value)}" for key, value in contract.items())]
    return "\n".join(lines) + "\n"


def _exempted(violation: Violation) -> bool:
    return any((exemption.rule, exemption.file, exemption.imported) == (violation.rule, violation.file,
                                                                         violation.imported)
               for exemption in EXEMPTIONS)


def violations(found: list[Violation]) -> list[str]:
    """Every error of the declaration and every rule broken in ``found`` (:func:`all_violations` of
    a tree) that no exemption excuses, one line each."""
    return declaration_errors() + [violation.message for violation in found if not _exempted(violation)]


def unneeded_exemptions(found: list[Violation]) -> list[str]:
    """Each exemption that excuses nothing in ``found`` (:func:`all_violations` of a tree)."""
    excused = {(violation.rule, violation.file, violation.imported) for violation in found}
    return [f"{exemption.file}: the exemption from {exemption.rule} for {exemption.imported} excuses nothing; remove "
            f"it from {ARCHITECTURE_MODULE}" for exemption in EXEMPTIONS
            if (exemption.rule, exemption.file, exemption.imported) not in excused]


# The generated block.

def imports(root: Path) -> dict[str, set[str]]:
    """``{package: the project packages its modules import}``, every import counted."""
    edges: dict[str, set[str]] = {package.name: set() for package in PACKAGES}
    for item in module_imports(root):
        imported = _other_package(item)
        if imported is not None:
            edges.setdefault(item.importer, set()).add(imported)
    return edges


def _imports_cell(package: Package, imported: set[str]) -> str:
    """The allowed and actual imports of ``package``: unused allowed ones and exempted others marked."""
    names = sorted(set(package.may_import) | imported)
    marks = {name: "" if name in imported and name in package.may_import
             else " (unused)" if name in package.may_import else " (outside the graph, exempted)" for name in names}
    return ", ".join(f"`{name}`{marks[name]}" for name in names) or "nothing of the project"


def _names(names: frozenset[str]) -> str:
    """``names`` as code, or as every package but the others when those are fewer."""
    others = {package.name for package in PACKAGES} - names
    if len(others) < len(names) and names <= {package.name for package in PACKAGES}:
        return "every package but " + ", ".join(f"`{name}`" for name in sorted(others))
    return ", ".join(f"`{name}`" for name in sorted(names))


def import_table(root: Path) -> str:
    """The generated block of docs/ARCHITECTURE.md: each package by its derived layer, with its
    purpose and imports; then the never rules and the listed exemptions."""
    layer, edges = layers(), imports(root)
    rows = sorted(PACKAGES, key=lambda package: layer[package.name])
    lines = ["| layer | package | what it is | may import (and does, unless marked) |", "|---|---|---|---|"]
    lines += [f"| {layer[package.name]} | `{package.name}` | {package.purpose} | "
              f"{_imports_cell(package, edges[package.name])} |" for package in rows]
    lines += ["", "Never rules, checked on top of the allowed imports:", "",
              "| never rule | no module of | imports | why |", "|---|---|---|---|"]
    lines += [f"| `{rule.name}` | {_names(rule.importers)} | {_names(rule.forbidden)} | {rule.reason} |"
              for rule in NEVER_RULES]
    lines += ["", "Listed exemptions (each excuses one rule for one import of one file):", ""]
    lines += [f"- `{exemption.file}`, `{exemption.imported}`, from `{exemption.rule}`: {exemption.reason}."
              for exemption in EXEMPTIONS]
    return "\n".join(lines)
