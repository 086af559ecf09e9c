"""The package map of docs/ARCHITECTURE.md comes from the declarations of ledger/architecture.py:
the real tree breaks none of its rules and needs every exemption it lists; and each rule is
checked on planted trees and declarations too, so that the check can fail."""
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ledger import architecture
from ledger.architecture import Package

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tree_violations() -> list[architecture.Violation]:
    """The rules this repository's code breaks, exempted or not (its imports read once: a few
    seconds; the two tests that read them share a worker)."""
    return architecture.all_violations(ROOT)


@pytest.mark.xdist_group("architecture-tree")
def test_the_tree_breaks_no_rule_of_the_map(tree_violations):
    assert architecture.violations(tree_violations) == []


@pytest.mark.xdist_group("architecture-tree")
def test_every_listed_exemption_still_excuses_an_import(tree_violations):
    assert architecture.unneeded_exemptions(tree_violations) == []


def test_the_layer_is_the_longest_path_of_allowed_imports_down():
    planted = (Package("engine", ""), Package("net", "", ("engine",)), Package("study", "", ("engine", "net")))
    assert architecture.layers(planted) == {"engine": 0, "net": 1, "study": 2}


def test_a_cycle_in_a_declared_graph_is_refused():
    planted = (Package("a", "", ("b",)), Package("b", "", ("c",)), Package("c", "", ("a",)))
    assert architecture.declaration_errors(planted) == ["the declared imports form a cycle: a -> b -> c -> a [acyclic]"]


def test_a_declared_edge_that_a_never_rule_forbids_is_refused():
    planted = (Package("hmm", ""), Package("construction", "", ("hmm",)))
    assert architecture.declaration_errors(planted) == [
        "construction may import hmm, which never rule construction-not-from-engine forbids: the hand-built network "
        "is checked against exact filtering, so it must not be built from it"]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_a_downward_allowed_import_is_not_a_violation(tmp_path):
    root = _tree(tmp_path, {
        "hmm/model.py": "import numpy\n",
        "empirical/training/model.py": "from hmm.model import x\n",
        "empirical/studies/markov/sweep.py": "from ..ladder import rungs\nfrom empirical.analysis import probes\n",
        "hmmtf/__init__.py": "import importlib\n\nSUBCOMMAND_MODULES = {'main': 'hmmtf.commands.bounds', 'ledger': 'hmmtf.commands.ledger'}\n"
                    "\n\ndef load(name):\n    return importlib.import_module(name)\n",
        "hmmtf/commands/ledger.py": "from ledger.canaries import CanaryBook\n"})
    assert architecture.violations(architecture.all_violations(root)) == []


def _allowed(where: str, imported: str, importer: str) -> str:
    return f"{where}: {imported} is not among {importer}'s allowed imports"


PLANTED = [
    pytest.param({"benchmarks/bench_new.py": "from bounds.serialize import to_json\n"},
                 [_allowed("benchmarks/bench_new.py:1: benchmarks imports bounds.serialize.to_json (import)",
                           "bounds.serialize", "benchmarks")],
                 id="benchmark-script-outside-its-allowed-imports"),
    pytest.param({"benchmarks/bench_new.py": "import argparse\n\n\ndef f():\n    import hmm.model\n"},
                 [],
                 id="benchmark-script-within-its-allowed-imports"),
    pytest.param({"empirical/newthing/__init__.py": ""},
                 ["empirical/newthing/: package empirical.newthing is not declared; declare it in PACKAGES of "
                  "ledger/architecture.py, or in the holds of its parent empirical [declared-packages]"],
                 id="undeclared-subpackage"),
    pytest.param({"newtool.py": ""},
                 ["newtool.py: a Python module at the repository root outside the map; add it to SOURCES of "
                  "ledger/architecture.py and declare its package [declared-packages]"],
                 id="module-at-the-root-outside-the-map"),
    pytest.param({"hmm/model.py": "import importlib\n\nimportlib.import_module('bounds.x')\n"},
                 [_allowed("hmm/model.py:3: hmm imports bounds.x (importlib.import_module)", "bounds", "hmm"),
                  "hmm/model.py:3: hmm imports bounds.x (importlib.import_module): never rule engine-imports-nothing "
                  "forbids it"],
                 id="import-module-literal-from-hmm"),
    pytest.param({"construction/network.py": "from importlib.util import find_spec as spec\n\nspec('bounds.x')\n"},
                 [_allowed("construction/network.py:3: construction imports bounds.x (importlib.util.find_spec)",
                           "bounds", "construction")],
                 id="find-spec-literal-through-an-alias"),
    pytest.param({"construction/network.py": "__import__('bounds')\n"},
                 [_allowed("construction/network.py:1: construction imports bounds (__import__)", "bounds",
                           "construction")],
                 id="dunder-import-literal"),
    pytest.param({"hmm/model.py": "import importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n"},
                 ["hmm/model.py:5: hmm imports a module named at run time (importlib.import_module), which the map "
                  "cannot read"],
                 id="import-module-non-literal"),
    pytest.param({"hmmtf/__init__.py": "SUBCOMMAND_MODULES = {'time': 'benchmarks.bench_hmm'}\n"},
                 [_allowed("hmmtf/__init__.py:1: hmmtf imports benchmarks.bench_hmm (SUBCOMMAND_MODULES)", "benchmarks",
                           "hmmtf")],
                 id="subcommand-module-outside-the-allowed-imports"),
    pytest.param({"hmmtf/__init__.py": "COMMANDS = {'main': 'hmmtf.commands.bounds'}\n"},
                 ["hmmtf/__init__.py: no module-level dict SUBCOMMAND_MODULES, which ledger/architecture.py reads as its "
                  "imports; update MODULE_REGISTRIES [literal-imports]"],
                 id="subcommand-registry-renamed"),
    pytest.param({"hmm/model.py": "import argparse\nfrom bounds import lemma1\n"}, [],
                 id="import-statements-are-import-linters"),
]


@pytest.mark.parametrize("files, beginnings", PLANTED)
def test_a_planted_violation_is_caught_by_its_rule(tmp_path, files, beginnings):
    found = architecture.violations(architecture.all_violations(_tree(tmp_path, files)))
    assert len(found) == len(beginnings), found
    assert all(message.startswith(beginning) for message, beginning in zip(found, beginnings)), found


def test_the_import_linter_contracts_of_pyproject_are_the_declarations():
    configured = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert configured == architecture.import_linter_config(), (
        "write into pyproject.toml:\n" + architecture.import_linter_toml(architecture.import_linter_config()))


STATIC_BREACHES = {
    "construction/network.py": ("from hmm.filtering import forward\n",
                                {"allowed-imports-construction", "construction-not-from-engine"}),
    "empirical/training/train.py": ("def f():\n    import bounds.lemma1\n    from ..analysis import probes\n",
                                    {"allowed-imports-empirical.training", "training-without-theory", "layers"}),
    "bounds/verify.py": ("from hmmtf.options import positive_int\n",
                         {"allowed-imports-bounds", "computing-without-command-line"}),
    "hmm/model.py": ("import argparse\n", {"argparse-in-command-lines-only"}),
    "ledger/results.py": ("import hmmtf\n", {"allowed-imports-ledger"}),
    "empirical/reports/evaluation.py": ("import construction\n", {"allowed-imports-empirical.reports"}),
}
"""Import statements planted into a copy of the tree, each with the contracts it breaks: upward (the
layers), sideways or down outside the allowed imports, and against each never rule; in a function,
relative, of a standard library module."""


@pytest.mark.xdist_group("architecture-tree")
def test_import_linter_catches_each_planted_import_statement(tmp_path):
    """One lint-imports run (a few seconds) on a copy of the packages with every planted import."""
    for source in architecture.IMPORT_LINTER_ROOTS:
        for path in (ROOT / source).rglob("*.py"):
            target = tmp_path / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    for file, (planted, _) in STATIC_BREACHES.items():
        (tmp_path / file).write_text((tmp_path / file).read_text() + planted)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    ids = {contract["name"]: contract["id"] for contract in architecture.import_linter_config()["contracts"]}
    linted = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=tmp_path,
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert linted.returncode == 1, linted.stdout + linted.stderr
    broken = {ids[name] for name in ids if f"{name} BROKEN" in " ".join(linted.stdout.split())}
    assert broken == set().union(*(expected for _, expected in STATIC_BREACHES.values())), linted.stdout
