"""The notebooks of examples/notebooks run top to bottom in a fresh python3 kernel and draw.

Each notebook is executed with nbclient in its own directory (relative paths work as in
Jupyter), every cell bounded by CELL_TIMEOUT_S; a cell that raises fails the test. A notebook
must produce at least one image/png output (matplotlib's inline figures), and the committed
file must carry no outputs. The kernel is the python3 kernelspec (Debian's /usr/bin/python3
with python3-ipykernel) and gets pyepp from PYTHONPATH: the directories this process imported
pyepp and its native module from are put first.

Needs nbclient, nbformat, ipykernel and matplotlib (Debian: python3-nbclient python3-nbformat
python3-ipykernel python3-matplotlib, installed by scripts/setup); skipped without them.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import pyepp
from pyepp import _native

SOURCE_DIR = Path(os.environ.get("EPP_SOURCE_DIR", Path(__file__).resolve().parents[2]))
NOTEBOOK_DIR = SOURCE_DIR / "examples" / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 120
NOTEBOOK_BUDGET_S = 60  # each notebook; all three take about 15 s here

REQUIRED = ("nbclient", "nbformat", "ipykernel", "matplotlib")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules as None: hidden, as good as absent
        return False


MISSING = [m for m in REQUIRED if not _installed(m)]
needs_jupyter = pytest.mark.skipif(
    bool(MISSING), reason=f"notebook tests need {', '.join(MISSING)} (Debian: apt-get install "
    f"{' '.join('python3-' + m for m in MISSING)}, or bash scripts/setup)")


def _kernel_env() -> Dict[str, str]:
    """This process's environment, with pyepp's directories first on PYTHONPATH."""
    package_parent = str(Path(pyepp.__file__).resolve().parent.parent)
    native_dir = str(Path(_native.lib.__file__).resolve().parent)
    paths = [package_parent] + ([native_dir] if native_dir != str(Path(pyepp.__file__).resolve().parent) else [])
    env = dict(os.environ)
    old = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in paths]
    env["PYTHONPATH"] = os.pathsep.join(paths + old)
    env.pop("MPLBACKEND", None)  # the kernel chooses its inline backend
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # quiets ipykernel's debugger warning on Python 3.11
    return env


def _outputs(nb: Any) -> List[Dict[str, Any]]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def test_the_notebooks_are_there() -> None:
    assert [p.name for p in NOTEBOOKS] == ["01-compare-routing-policies.ipynb", "02-explain-picks.ipynb",
                                           "03-live-loop-python-scorer.ipynb"]


@needs_jupyter
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_draws(path: Path) -> None:
    import nbclient
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: commit it with outputs cleared"

    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    started = time.monotonic()
    client.execute(env=_kernel_env())  # raises CellExecutionError naming the cell that failed
    elapsed = time.monotonic() - started

    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name} drew nothing (no image/png output)"
    assert elapsed < NOTEBOOK_BUDGET_S, f"{path.name} took {elapsed:.1f} s"
