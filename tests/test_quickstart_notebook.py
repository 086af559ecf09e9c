"""examples/quickstart.ipynb runs from top to bottom in a fresh kernel of this interpreter (the
project's venv under ``make test``), so it cannot rot: every cell runs and the assertions in its
cells hold. The committed file carries no outputs, so its diffs show only what was edited.

Executed with nbclient and ipykernel rather than nbmake: the test chooses the kernel itself (the
interpreter running pytest, whatever kernels the machine has registered), reads the kernel's own
interpreter back, and is one ordinary test in the suite's schedule (``long_running``, handed out
first), where nbmake would collect the notebook through a plugin with the kernel its metadata names.
"""
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
CELL_TIMEOUT_S = 150
"""Per cell; below pytest-timeout's 180 s for the whole test (pyproject.toml), so a hung cell is
reported by nbclient with the cell's source."""


def test_the_committed_notebook_has_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)


@pytest.mark.long_running
def test_the_quickstart_notebook_runs_in_a_kernel_of_this_interpreter():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable, end='')"))
    # No kernel folder searched: ipykernel's own spec, which starts sys.executable, never a
    # "python3" kernel registered on the machine for another interpreter.
    kernel = KernelManager(kernel_name=NATIVE_KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))
    client = NotebookClient(notebook, km=kernel, timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    assert notebook.cells[-1].outputs[0]["text"] == sys.executable
