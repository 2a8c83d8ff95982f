"""The paper's latency comparison (Table 2) on this machine: lite-interpreter and jitted-Flax latency of each
model, speedups vs BERT-base, beside the paper's Pixel 3 numbers. Each model is exported with
``mobile.export_lite`` (the path convert/to_torchscript.py takes, checked against Flax) and timed in this process.
"""

from __future__ import annotations

import os
import tempfile
from typing import Sequence

from squeezebert_jax.benchmarks.timing import (REFERENCE, LoadMonitor, blocking, format_table, is_model_dir,
                                               load_model, time_interleaved, torch_call, torch_tensor)
from squeezebert_jax.flops import PAPER_GFLOPS, flops
from squeezebert_jax.mobile import example_inputs, export_lite, load_lite, make_flax_forward
from squeezebert_jax.model import count_params


# Paper Table 2 (and Table 3): Google Pixel 3, batch 1, seq 128, TorchScript.
PAPER_LATENCY_MS = {"bert-base-uncased": 1690.0, "squeezebert-uncased": 390.0}


def latency_results(names: Sequence[str], runs: int = 20, warmup: int = 3, batch: int = 1, seq_len: int = 128,
                    tiny: bool = False, workdir: str | None = None) -> dict:
    """Lite-interpreter and jitted-Flax latency of each model, speedups vs BERT-base, beside the paper.

    Each model is a preset's random-weight sequence classifier or a MODEL_DIR's model, exported with
    ``mobile.export_lite`` (which checks the .ptl against Flax) and timed through ``_load_for_lite_interpreter``
    in this process, interleaved with the other models. Returns ``{"rows": [one dict per model], "notes": [...],
    "title": str}``; a row has model, params_m, gflops, paper_gflops, lite_ms, lite_speedup, flax_ms, flax_speedup,
    paper_ms, paper_speedup (None where the paper has no number, and for tiny configs and MODEL_DIRs).
    """
    names = list(dict.fromkeys(names))
    notes = []
    if REFERENCE not in names:
        names.insert(0, REFERENCE)
        notes.append(f"{REFERENCE} added: speedups are relative to it")
    fns, info = {}, {}
    with tempfile.TemporaryDirectory(prefix="sqb-latency-", dir=workdir) as d:
        for i, name in enumerate(names):
            model = load_model(name, tiny)
            fwd = make_flax_forward(model)
            res = export_lite(model, os.path.join(d, f"model{i}.ptl"), batch=batch, seq_len=seq_len, flax_forward=fwd)
            ids, mask, tt = example_inputs(model.config, batch, seq_len, seed=2)
            lite = load_lite(res.path)
            tids, tmask, ttt = (torch_tensor(a) for a in (ids, mask, tt))
            fns[("lite", name)] = torch_call(lite, tids, tmask, ttt)
            fns[("flax", name)] = blocking(fwd, ids, mask, tt)
            info[name] = (count_params(model) / 1e6, flops(model.config, seq_len, 2) / 1e9, res.worst_diff)
            notes.append(f"{name}: {res.note}; lite vs Flax max |diff| {res.worst_diff:.1e}")
        mon = LoadMonitor()
        t = time_interleaved(fns, runs, warmup)
    ref_lite, ref_flax = t[("lite", REFERENCE)].median, t[("flax", REFERENCE)].median
    rows = []
    for name in names:
        params, gflops, _ = info[name]
        lite_ms, flax_ms = t[("lite", name)].median, t[("flax", name)].median
        paper = PAPER_LATENCY_MS.get(name) if not tiny and not is_model_dir(name) else None
        rows.append(dict(model=name, params_m=params, gflops=gflops,
                         paper_gflops=None if tiny or is_model_dir(name) else PAPER_GFLOPS.get(name), lite_ms=lite_ms,
                         lite_speedup=ref_lite / lite_ms, flax_ms=flax_ms, flax_speedup=ref_flax / flax_ms,
                         paper_ms=paper, paper_speedup=PAPER_LATENCY_MS[REFERENCE] / paper if paper else None))
    title = (f"Latency, batch {batch}, seq {seq_len}{' (tiny configs)' if tiny else ''}: median of {runs} runs "
             f"after {warmup} warm-up, interleaved; {mon.note()}")
    return {"rows": rows, "notes": notes, "title": title}


def format_latency(results: dict, title: bool = True) -> str:
    """``latency_results`` as a Markdown table (under its title line unless ``title=False``)."""
    x = lambda v: None if v is None else f"{v:.2f}x"  # noqa: E731
    ms = lambda v: None if v is None else f"{v:.1f}"  # noqa: E731
    rows = [[r["model"], f"{r['params_m']:.1f}", f"{r['gflops']:.3g}", r["paper_gflops"], ms(r["lite_ms"]),
             x(r["lite_speedup"]), ms(r["flax_ms"]), x(r["flax_speedup"]),
             None if r["paper_ms"] is None else f"{r['paper_ms']:.0f}",
             None if r["paper_speedup"] is None else f"{r['paper_speedup']:.1f}x"] for r in results["rows"]]
    headers = ["model", "MParams", "GFLOPs", "paper GFLOPs", "lite ms", "lite speedup", "Flax ms", "Flax speedup",
               "paper Pixel 3 ms", "paper speedup"]
    return format_table(headers, rows, results["title"] if title else None)


def latency_table(names: Sequence[str], runs: int = 20, warmup: int = 3, batch: int = 1, seq_len: int = 128,
                  tiny: bool = False, workdir: str | None = None) -> tuple[str, list[str]]:
    """``latency_results`` formatted: (Markdown table, notes)."""
    res = latency_results(names, runs, warmup, batch, seq_len, tiny, workdir)
    return format_latency(res), res["notes"]
