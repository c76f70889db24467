"""Every notebook in notebooks/ runs top to bottom and passes its own checks.

Each notebook asserts its computed-vs-expected checks, so an error or a failed assertion in
any cell fails the test. The kernel is `python3` pointed at this interpreter (ipykernel is
in the `test` extra), so the notebooks import the llmsim under test. The committed notebooks
must also equal what notebooks/make_notebooks.py writes (sources only, outputs stripped).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
TIMEOUT_S = 300  # per cell; each notebook takes well under a minute on 2 cores


def test_notebooks_exist():
    assert {"prefill_vs_decode.ipynb", "find_the_knee.ipynb", "capacity_planning.ipynb",
            "kv_quantization_whatif.ipynb", "validation.ipynb"} <= set(NAMES)


def test_notebooks_match_generator():
    r = subprocess.run([sys.executable, str(NOTEBOOKS / "make_notebooks.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name: str, tmp_path: Path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    from jupyter_client.manager import KernelManager

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{name}: outputs not stripped"
    # a kernel on this interpreter, whatever python3 kernel the machine has (or has not)
    spec_dir = tmp_path / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (llmsim tests)", "language": "python"}))
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    try:
        assert ksm.get_kernel_spec("python3").argv[0] == sys.executable
    except NoSuchKernel:  # pragma: no cover
        pytest.fail("could not register a python3 kernel spec")
    km = KernelManager(kernel_name="python3", kernel_spec_manager=ksm)
    client = nbclient.NotebookClient(nb, km=km, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    print(f"{name}: {elapsed:.1f} s")
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "FAIL " not in text
    assert "PASS " in text, f"{name}: no self-checks ran"
