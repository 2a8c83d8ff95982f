"""notebooks/quickstart.ipynb executes top to bottom on CPU (QUICK mode) and its numbers are sane."""

from __future__ import annotations

import json
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import COMPILE_FLAGS

NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks", "quickstart.ipynb")


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    # The kernel inherits this environment: tiny configs, CPU, outputs under tmp_path; the tests' matmul precision and
    # compile flags (tests/conftest.py), on one CPU device, as a Colab CPU runtime has. With the tests' 8 simulated
    # devices its fine-tuning cell hung three times in ~10 suite runs (clean clones, 2 cores busy), each time in an
    # XLA:CPU all-reduce that some device threads never joined (rendezvous.cc: 6, 7 and 2 of 8 arrived; 600 s): not
    # seen outside the kernel (the same fine-tuning ran 22 times alone on 8 devices), cause unknown
    # (tests/README.md). The 8-device fine-tuning and pretraining paths are tested elsewhere (test_finetune_trainer.py,
    # test_pretrain.py).
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count=1 {COMPILE_FLAGS}")
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
