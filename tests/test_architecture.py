"""The package map of docs/ARCHITECTURE.md comes from the code (ledger/architecture.py): no module
imports against the layers (the map's table, which ``hmmtf ledger --check`` keeps current, lists
what the imports are). The rule is checked on planted trees too, so that it can fail."""
from pathlib import Path

from ledger import architecture

ROOT = Path(__file__).resolve().parents[1]


def test_no_package_imports_against_the_layers():
    assert architecture.violations(ROOT) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_an_import_upward_or_sideways_is_a_violation_and_downward_is_not(tmp_path):
    root = _tree(tmp_path, {"hmm/model.py": "import numpy\n",
                            "empirical/training/model.py": "from hmm.model import x\n",
                            "empirical/measurement/roofline.py": "def f():\n    from empirical.interop import tl\n",
                            "empirical/interop/tl.py": "",
                            "hmmtf.py": "import ledger.check\n", "ledger/check.py": "import hmmtf\n"})
    assert architecture.violations(root) == [
        "empirical.measurement (layer 5) imports empirical.interop (layer 5)"]
    (root / "hmm/model.py").write_text("from empirical.training import model\n")
    assert "hmm (layer 0) imports empirical.training (layer 4)" in architecture.violations(root)
