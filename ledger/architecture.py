"""The project's packages, in layers, and which imports which, read from the code: the table of
docs/ARCHITECTURE.md is generated from it (``hmmtf ledger``), and tests/test_architecture.py fails
when a module imports a package of a higher layer, or another package of its own layer.

A layer may import every layer below it. Every import counts, a function's deferred ones too:
a deferred import is still a dependency."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ledger.provenance import module_name


@dataclass(frozen=True)
class Package:
    """A part of the project: its dotted ``name`` (a package, or a top-level module), its layer
    (0 is the lowest) and what it is for."""

    name: str
    layer: int
    purpose: str


PACKAGES: tuple[Package, ...] = (
    Package("hmm", 0, "the HMM engine: HMMs, exact filtering, sampling, prompts, mixtures and their presets, the "
                      "Bayes-optimal predictor, the prior-predictive SMC and its bounds"),
    Package("empirical.training.configs", 0, "config dataclasses and their command-line options (a utility: it "
                                             "imports nothing of the project)"),
    Package("hmmtf_options", 1, "option types of the command line (positive integers, a config from options), "
                                "shared by every command"),
    Package("construction", 2, "the hand-wired transformer of the paper, as weight tensors"),
    Package("bounds", 3, "Lemma 1, Theorem 1 and Theorem 2, measured on the construction (`hmmtf main`)"),
    Package("empirical.training", 4, "the RoFormer, its training loop, checkpoints, presets, prompt streams, run "
                                     "folders"),
    Package("empirical.measurement", 5, "the machine: matmul peaks, training throughput"),
    Package("empirical.interop", 5, "export of a checkpoint to TransformerLens"),
    Package("empirical.yardsticks", 6, "what a network is judged against: Bayes, the in-context n-grams, the oracle, "
                                       "the ceiling, the hand-built network, competence, regime, learning curves, "
                                       "family signal"),
    Package("empirical.analysis", 7, "inside one trained network: shuffle, probes, offsets, patching, heads, KL map, "
                                     "belief probes, the n-gram verdict"),
    Package("empirical.studies", 8, "studies over many networks: the regime ladder, the Markov-chain traps"),
    Package("empirical.cli", 9, "the commands of training and the yardsticks, and their figures"),
    Package("empirical.reproduce", 10, "`hmmtf reproduce`: the paper's experiment as resumable, planned stages"),
    Package("empirical", 11, "the package's own docstring (imports nothing)"),
    Package("hmmtf", 12, "the command line"),
    Package("ledger", 12, "the claims ledger, provenance and canaries, this map"),
    Package("benchmarks", 12, "timings against baselines and the machine's bound"),
)
"""Every package, lowest layer first."""

SOURCES = ("hmmtf_options.py", "hmmtf.py", "hmm", "construction", "bounds", "empirical", "ledger", "benchmarks")
"""The files and folders whose Python modules the map covers (not tests, not examples)."""


def package_of(module: str) -> Package | None:
    """The package ``module`` belongs to (the longest name that is it or its prefix); None: not the
    project's (a library)."""
    owners = [package for package in PACKAGES if module == package.name or module.startswith(package.name + ".")]
    return max(owners, key=lambda package: len(package.name)) if owners else None


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imports(root: Path) -> dict[str, set[str]]:
    """``{package: the packages its modules import}``, from every module under :data:`SOURCES`."""
    edges: dict[str, set[str]] = {package.name: set() for package in PACKAGES}
    for source in SOURCES:
        path = root / source
        for file in sorted([path] if path.is_file() else path.rglob("*.py")):
            relative = file.relative_to(root).as_posix()
            owner = package_of(module_name(relative))
            for name in _imported(ast.parse(file.read_text())):
                imported = package_of(name)
                if imported is not None and imported is not owner:
                    edges[owner.name].add(imported.name)
    return edges


def violations(root: Path) -> list[str]:
    """Every import against the layers: of a higher layer, or of another package of the same layer."""
    layer = {package.name: package.layer for package in PACKAGES}
    return [f"{owner} (layer {layer[owner]}) imports {imported} (layer {layer[imported]})"
            for owner, imported_names in imports(root).items() for imported in sorted(imported_names)
            if layer[imported] >= layer[owner] and layer[owner] != max(layer.values())]


def import_table(root: Path) -> str:
    """The generated table of docs/ARCHITECTURE.md: each package, its layer, purpose and imports."""
    edges = imports(root)
    lines = ["| layer | package | what it is | imports |", "|---|---|---|---|"]
    for package in PACKAGES:
        imported = ", ".join(f"`{name}`" for name in sorted(edges[package.name])) or "nothing of the project"
        lines.append(f"| {package.layer} | `{package.name}` | {package.purpose} | {imported} |")
    return "\n".join(lines)
