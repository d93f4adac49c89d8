"""Execute every notebook in notebooks/ in its reduced mode (PPL_SPARSEGP_NOTEBOOK_QUICK=1); any cell error fails.

Each notebook runs in a fresh temporary working directory, in a ``python3`` kernel that must be this interpreter
(ipykernel installed in the same environment as pytest, see the dev extras), so the notebook sees the package under
test. The saved outputs in the repository are not touched.
"""

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
TIMEOUT_PER_CELL = 600  # seconds; the reduced mode is meant to take well under that for a whole notebook

_PREFIX_MARK = "PPL_SPARSEGP_KERNEL_PREFIX="


def test_notebooks_found() -> None:
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(path, as_version=4)
    # a last cell reporting the kernel's environment (sys.prefix: a venv's python is a symlink to the base one)
    nb.cells.append(nbformat.v4.new_code_cell(f"import sys\nprint({_PREFIX_MARK!r} + sys.prefix)"))
    # the kernel inherits this process's environment
    monkeypatch.setenv("PPL_SPARSEGP_NOTEBOOK_QUICK", "1")
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=TIMEOUT_PER_CELL,
        allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    printed = "".join(
        output.get("text", "") for output in nb.cells[-1].outputs if output.get("output_type") == "stream"
    )
    assert _PREFIX_MARK in printed, f"no environment reported by the kernel: {printed!r}"
    kernel_prefix = printed.split(_PREFIX_MARK, 1)[1].strip()
    assert os.path.realpath(kernel_prefix) == os.path.realpath(sys.prefix), (
        f"the python3 kernel ran in {kernel_prefix}, not in the test's environment {sys.prefix}"
    )
