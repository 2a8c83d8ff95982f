"""notebooks/quickstart.ipynb executes top to bottom on CPU (QUICK mode) and its numbers are sane."""

from __future__ import annotations

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks", "quickstart.ipynb")


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    # The kernel inherits this environment: tiny configs, CPU, outputs under tmp_path; and the tests' XLA flags and
    # matmul precision (tests/conftest.py): 8 CPU devices, as the 8 cores of a Colab TPU, on which the notebook's smoke
    # pretraining is the tests' reference run, compiled once for both (jax's compilation-cache key holds the process's
    # devices: a 1-device kernel would share no program with the tests)
    monkeypatch.setenv("SQB_QUICK", "1")
    monkeypatch.setenv("SQB_WORKDIR", str(tmp_path))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend makes the PNGs
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook unexecuted"
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
    nbformat.write(nb, tmp_path / "quickstart.executed.ipynb")  # to look at when this test fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the pretraining curves and the latency plot

    s = json.loads((tmp_path / "quickstart_summary.json").read_text())
    assert s["quick"] is True and s["backend"] == "cpu"
    assert s["convert_max_abs_diff"] < 1e-5  # Flax vs transformers logits, float32
    assert s["ptl_max_abs_diff"] <= 1e-4  # the exported .ptl vs Flax (export_lite also checks this)
    assert os.path.getsize(tmp_path / "rte.ptl") > 0
    assert (tmp_path / "rte" / "model" / "params.safetensors").is_file()
    assert s["finetune_best"]["score"] > 0.8  # story order from a smoke-pretrained model (measured: 0.99)
    assert [r["model"] for r in s["latency"]] == ["squeezebert-uncased", "bert-base-uncased"]
    assert all(r["lite_ms"] > 0 and r["flax_ms"] > 0 for r in s["latency"])
