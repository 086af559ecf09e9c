"""The project as a user installs it (issue 52): the wheel built from the sources, installed into a
fresh environment outside the checkout, runs its command line and imports every module from
itself, not from the checkout (an editable install, as ``make`` makes, would hide a module the
wheel leaves out)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hmm", "construction", "bounds", "empirical", "hmmtf", "ledger")
"""The import packages of the project (its top-level folders with an ``__init__.py``; ``hmmtf`` is
the command line)."""

pytestmark = [pytest.mark.long_running, pytest.mark.xdist_group("wheel")]


def test_the_package_list_is_every_top_level_package_of_the_checkout():
    """A new top-level package is a decision (this list and the wheel's), not an accident."""
    found = sorted(path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name != "tests")
    assert found == sorted(PACKAGES)


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel built from a copy of the sources installed, and
    the dependencies of this one visible as a plain path (so that the checkout's editable install,
    a ``.pth`` file there, is not processed). Returns its ``python``."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(root / "dist"), str(source)], check=True, cwd=root)
    wheel, = (root / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "env")], check=True)
    python = root / "env" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, cwd=root)
    return python


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``command`` in ``cwd`` (outside the checkout), its output captured; fails the test on a non-zero exit."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_the_installed_command_line_runs_a_real_command(environment, tmp_path):
    hmmtf = environment.parent / "hmmtf"
    assert "calibrate" in run([str(hmmtf), "--help"], tmp_path).stdout
    assert "calibrate" in run([str(environment), "-m", "hmmtf", "--help"], tmp_path).stdout
    run([str(hmmtf), "calibrate", "--preset", "tiny", "--num-prompts", "8", "--concentrations", "0.5", "--out",
         str(tmp_path / "calibration")], tmp_path)
    report = json.loads((tmp_path / "calibration" / "tiny.json").read_text())
    assert [entry["concentration"] for entry in report["results"]] == [0.5]


IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
names = []
for package in sys.argv[1].split(","):
    names.append(package)
    names += [info.name for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + ".")
              if not info.name.endswith(".__main__")]
print(json.dumps({name: importlib.import_module(name).__file__ for name in names}))
"""


def test_every_module_imports_from_the_installed_wheel(environment, tmp_path):
    files = json.loads(run([str(environment), "-c", IMPORT_EVERY_MODULE, ",".join(PACKAGES)], tmp_path).stdout)
    in_checkout = {name: file for name, file in files.items() if Path(file).is_relative_to(ROOT)}
    assert not in_checkout
    source_modules = {".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                      for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    assert source_modules - {"hmmtf.__main__"} == set(files)
