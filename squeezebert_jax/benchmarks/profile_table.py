"""The paper's Table 1 on this machine: where the FLOPs and the time of a forward go, per component.

Flax: one XLA profile (``jax.profiler``) of the whole jitted forward, no cuts, every op attributed to the named
scope of model.py it comes from (``hlo_ops``, ``op_profile``). PyTorch: forward hooks on the eager transformers
model holding the same weights. ``op_breakdown`` puts SqueezeBERT's and BERT-base's profiles side by side.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import tempfile
import time
from typing import Any, Callable

import jax
import numpy as np
from flax import nnx

from squeezebert_jax import mobile
from squeezebert_jax.benchmarks.timing import (REFERENCE, LoadMonitor, blocking, build_classifier, format_table,
                                               is_model_dir, load_model, preset_config, time_interleaved)
from squeezebert_jax.flops import flops_breakdown


# --------------------------------------------------------------------------------------------------
# Table 1: where the FLOPs and the time go
# --------------------------------------------------------------------------------------------------

# The paper's Table 1 rows. Its "FC in self-attention modules" is Q, K and V only: its FLOPs shares (24.3 /
# 2.70 / 73.0) are exactly BERT-base's Q/K/V, QKᵀ+PV, and post-attention FC + FFN. So the post-attention
# layer (FC + residual + LayerNorm) is counted with the feed-forward FC here, in FLOPs and in latency.
COMPONENTS = {"embedding": "Embedding", "attention_fc": "FC in self-attention (Q, K, V)",
              "attention_softmax_qkv": "softmax(QK^T/sqrt(d))V", "ffn_fc": "FC in FFN (+ post-attention FC)",
              "classifier": "Final classifier (pooler + FC)"}
# Paper Table 1 (BERT-base, Pixel 3, seq 128, batch 1): (FLOPs %, latency %), copied from
# shared/seeds/001_*.txt.
PAPER_TABLE1 = {"embedding": (0.00, 0.26), "attention_fc": (24.3, 18.9), "attention_softmax_qkv": (2.70, 11.3),
                "ffn_fc": (73.0, 69.4), "classifier": (0.00, 0.02)}


# Named scopes of model.py (one per Table 1 component; ops outside them -- the classifier head, the mask bias --
# count as "other"), the labels they print under, and the Table 1 row each belongs to.
SCOPES = {"embedding": "embedding", "qkv": "Q, K, V", "attention_core": "softmax(QK^T/sqrt(d))V",
          "post_attention": "post-attention FC + LayerNorm", "ffn_expand": "FFN expand", "ffn_act": "GELU",
          "ffn_contract": "FFN contract + LayerNorm", "pooler": "pooler", "other": "classifier, mask, rest"}
TABLE1_SCOPES = {"embedding": ("embedding",), "attention_fc": ("qkv",), "attention_softmax_qkv": ("attention_core",),
                 "ffn_fc": ("post_attention", "ffn_expand", "ffn_act", "ffn_contract"), "classifier": ("pooler", "other")}
POSITION_WISE = ("qkv", "post_attention", "ffn_expand", "ffn_contract")  # the 1x1 conv / FC layers


def hlo_ops(hlo_text: str) -> tuple[str, dict[str, tuple[str, bool]]]:
    """(module name, {entry instruction: (scope, contains a matmul)}) of an optimized HLO module's text.

    The scope is the first component of the instruction's ``op_name`` metadata that is a key of ``SCOPES``
    (a fusion carries its root op's metadata, so a fusion that crosses scopes counts where its root is; one
    without metadata counts where the ops inside it are, else where its first user is); a fusion is a matmul
    when its computation, or one it calls, holds a ``dot`` or ``convolution``.
    """
    m = re.match(r"HloModule ([^\s,]+)", hlo_text)
    if not m:
        raise ValueError("not the text of an HLO module (no 'HloModule' header)")
    comps, cur, entry = {}, None, None
    for line in hlo_text.splitlines():
        if line.endswith("{") and not line.startswith((" ", "HloModule")):  # a computation's header
            h = re.match(r"(ENTRY )?%?([^\s(]+)", line)
            cur = h.group(2)
            comps[cur] = []
            entry = cur if h.group(1) else entry
        elif line.strip() == "}":
            cur = None
        elif cur is not None:
            comps[cur].append(line)
    if entry is None:
        raise ValueError(f"HLO module {m.group(1)} has no ENTRY computation")

    def has_dot(comp: str, seen: set) -> bool:
        seen.add(comp)
        for line in comps.get(comp, ()):
            if re.search(r"\s(dot|convolution)\(", line):
                return True
            if any(c not in seen and has_dot(c, seen)
                   for c in re.findall(r"(?:calls|to_apply)=%?([^\s,}]+)", line)):
                return True
        return False

    scope_of, is_mm, users = {}, {}, {}
    for line in comps[entry]:
        i = re.match(r"\s*(?:ROOT )?%?([^\s=]+) = ", line)
        if not i or " parameter(" in line:
            continue
        name, called = i.group(1), re.findall(r"calls=%?([^\s,}]+)", line)
        # XLA sometimes drops a fusion's metadata: then the ops inside it (the root first) name the scope,
        # and failing those (an op with no metadata at all) the first op that uses its result
        inner = [ln for c in called for ln in sorted(comps.get(c, ()), key=lambda ln: "ROOT" not in ln)]
        names = [n for ln in (line, *inner) for n in re.findall(r'op_name="([^"]*)"', ln)]
        scope_of[name] = next((c for n in names for c in n.split("/") if c in SCOPES), "other" if names else None)
        is_mm[name] = bool(re.search(r"\s(dot|convolution)\(", line)) or any(has_dot(c, set()) for c in called)
        for operand in re.findall(r"%([^\s,)]+)", line.split(" = ", 1)[1].split("), ")[0]):
            users.setdefault(operand, []).append(name)

    def scope(name: str, depth: int = 0) -> str:
        if scope_of.get(name) is not None or depth > 8:
            return scope_of.get(name) or "other"
        return next((sc for u in users.get(name, ()) if (sc := scope(u, depth + 1)) != "other"), "other")

    return m.group(1), {n: (scope(n), is_mm[n]) for n in scope_of}


def trace_events(run: Callable[[], Any], runs: int) -> list[dict]:
    """The Perfetto trace events (``jax.profiler``) of ``runs`` calls of ``run`` (a blocking zero-argument callable)."""
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(runs):
                run()
        traces = glob.glob(os.path.join(d, "**", "perfetto_trace.json.gz"), recursive=True)
        if not traces:
            raise RuntimeError(f"jax.profiler.trace wrote no perfetto_trace.json.gz under {d}")
        with gzip.open(traces[0]) as f:
            events = json.load(f)
    return events["traceEvents"] if isinstance(events, dict) else events


def op_profile(model: nnx.Module, batch: int = 1, seq_len: int = 128, runs: int = 5,
               warmup: int = 2) -> dict[str, Any]:
    """Where the time of one jitted float32 forward goes, from an XLA profile (``jax.profiler``) of the whole
    forward -- no cuts, so XLA fuses as in real use.

    The compiled module's HLO names every op's scope (``hlo_ops``); the profiler's Perfetto trace times every
    op of ``runs`` forwards. Returns ``{"ms": {(scope, "matmul" | "other"): ms per forward}, "ops_ms": sum
    of op times, "wall_ms": median wall time of the forward, "hlo_module": name}``; ``wall_ms - ops_ms`` is
    the runtime's own time between ops.
    """
    ids, mask, tt = mobile.example_inputs(model.config, batch, seq_len, seed=3)
    compiled, state = mobile.make_flax_forward(model).compile(ids, mask, tt)
    module, ops = hlo_ops(compiled.as_text())
    run = blocking(compiled, state, ids, mask, tt)
    wall = time_interleaved({"fwd": run}, runs, warmup)["fwd"].median
    events = trace_events(run, runs)
    ms: dict[tuple[str, str], float] = {}
    seen = 0
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") != "X" or args.get("hlo_module") != module or args.get("hlo_op") not in ops:
            continue
        scope, is_mm = ops[args["hlo_op"]]
        key = (scope, "matmul" if is_mm else "other")
        ms[key] = ms.get(key, 0.0) + e["dur"] / 1e3 / runs  # trace times are in microseconds
        seen += 1
    if not seen:
        raise RuntimeError(f"the profiler trace has no op events of module {module}: has the trace format changed?")
    return {"ms": ms, "ops_ms": sum(ms.values()), "wall_ms": wall, "hlo_module": module}


def flax_component_times(model: nnx.Module, batch: int = 1, seq_len: int = 128, runs: int = 20,
                         warmup: int = 3) -> dict[str, float]:
    """Milliseconds per forward of each Table 1 component of the jitted Flax model, from ``op_profile``
    (an XLA profile of the whole forward, ops attributed by named scope). ``sum`` is the components' sum,
    ``total`` the forward's wall time."""
    prof = op_profile(model, batch, seq_len, runs, warmup)
    out = {key: sum(v for (scope, _), v in prof["ms"].items() if scope in scopes)
           for key, scopes in TABLE1_SCOPES.items()}
    out["sum"] = sum(out.values())
    out["total"] = prof["wall_ms"]
    return out


def _torch_parts(tm) -> dict[str, list]:
    """Modules of a transformers SqueezeBERT / BERT model (any head), by Table 1 component."""
    base = next((m for m in (getattr(tm, "transformer", None), getattr(tm, "bert", None)) if m is not None), tm)
    if hasattr(base.encoder, "layers"):  # SqueezeBERT
        layers = base.encoder.layers
        attn = [l.attention for l in layers]
        post = [l.post_attention for l in layers]
    else:
        layers = base.encoder.layer
        attn = [l.attention.self for l in layers]
        post = [l.attention.output for l in layers]
    head = [getattr(m, a, None) for m, a in ((base, "pooler"), (tm, "classifier"), (tm, "cls"), (tm, "qa_outputs"))]
    return {"embedding": [base.embeddings], "attention": attn,
            "qkv": [m for a in attn for m in (a.query, a.key, a.value)], "post": post,
            "ffn": [m for l in layers for m in (l.intermediate, l.output)],
            "classifier": [m for m in head if m is not None and m is not tm]}


def torch_component_times(tm, ids, mask, tt, runs: int = 20, warmup: int = 3) -> dict[str, float]:
    """Milliseconds per forward of each Table 1 component in the eager transformers model (timing hooks).

    Forward pre/post hooks accumulate wall time per module (the attention core is the self-attention
    module minus its Q/K/V layers); medians over ``runs`` forwards. ``total`` is the whole hooked forward,
    ``sum`` the components' (the rest is mask preparation and layout permutes).
    """
    import torch

    parts = _torch_parts(tm)
    acc = {k: 0.0 for k in parts}
    start = {}
    handles = []
    for key, mods in parts.items():
        for m in mods:
            handles.append(m.register_forward_pre_hook(lambda mod, a: start.__setitem__(id(mod), time.perf_counter())))
            handles.append(m.register_forward_hook(
                lambda mod, a, o, key=key: acc.__setitem__(key, acc[key] + time.perf_counter() - start[id(mod)])))
    args = tuple(torch.from_numpy(np.asarray(a)) for a in (ids, mask, tt))
    per_run = {k: [] for k in (*parts, "total")}
    try:
        with torch.no_grad():
            for i in range(warmup + runs):
                for k in acc:
                    acc[k] = 0.0
                t0 = time.perf_counter()
                tm(input_ids=args[0], attention_mask=args[1], token_type_ids=args[2])
                total = time.perf_counter() - t0
                if i >= warmup:
                    for k in acc:
                        per_run[k].append(acc[k] * 1e3)
                    per_run["total"].append(total * 1e3)
    finally:
        for h in handles:
            h.remove()
    t = {k: float(np.median(v)) for k, v in per_run.items()}
    out = {"embedding": t["embedding"], "attention_fc": t["qkv"],
           "attention_softmax_qkv": max(t["attention"] - t["qkv"], 0.0), "ffn_fc": t["post"] + t["ffn"],
           "classifier": t["classifier"]}
    out["sum"] = sum(out.values())
    out["total"] = t["total"]
    return out


def profile_table(name: str, tiny: bool = False, batch: int = 1, seq_len: int = 128, runs: int = 20,
                  warmup: int = 3) -> str:
    """Table 1 for one model (a preset's random-weight classifier, or a MODEL_DIR's model): FLOPs share, Flax and
    PyTorch latency shares, paper (BERT-base only)."""
    import torch

    model = load_model(name, tiny)
    fl = flops_breakdown(model.config, seq_len, num_labels=getattr(model, "num_labels", 0))
    total_fl = sum(fl.values())
    mon = LoadMonitor()
    fx = flax_component_times(model, batch, seq_len, runs, warmup)
    tm = mobile.to_transformers(model)
    ids, mask, tt = mobile.example_inputs(model.config, batch, seq_len, seed=3)
    with torch.no_grad():
        th = torch_component_times(tm, ids, mask, tt, runs, warmup)
    paper = PAPER_TABLE1 if name == REFERENCE and not tiny else {}
    tiny = tiny and not is_model_dir(name)
    pct = lambda v, tot: f"{100 * v / tot:.2f}%"  # noqa: E731
    rows = []
    for key, label in COMPONENTS.items():
        p = paper.get(key)
        rows.append([label, pct(fl[key], total_fl), f"{p[0]:.2f}%" if p else None,
                     f"{pct(fx[key], fx['sum'])} ({fx[key]:.2f} ms)", f"{pct(th[key], th['sum'])} ({th[key]:.2f} ms)",
                     f"{p[1]:.2f}%" if p else None])
    rows.append(["Total (sum of components)", f"100% ({total_fl / 1e9:.3g} GFLOPs)", "100%" if paper else None,
                 f"{fx['sum']:.1f} ms (forward wall time {fx['total']:.1f} ms)",
                 f"{th['sum']:.1f} ms (whole forward {th['total']:.1f} ms)", "100%" if paper else None])
    headers = ["component", "FLOPs", "paper FLOPs", "latency Flax (XLA profile)", "latency PyTorch eager (hooks)",
               "paper latency (Pixel 3)"]
    title = (f"Table 1, {name}{' (tiny config)' if tiny else ''}: batch {batch}, seq {seq_len}, median of {runs}; "
             f"{mon.note()}")
    return format_table(headers, rows, title)


# --------------------------------------------------------------------------------------------------
# Why SqueezeBERT is not 3x faster than BERT-base on this CPU: the forward's time, op by op
# --------------------------------------------------------------------------------------------------

def op_breakdown(tiny: bool = False, batch: int = 8, seq_len: int = 128, runs: int = 5, warmup: int = 2) -> str:
    """SqueezeBERT's and BERT-base's jitted float32 forwards, each op timed in an XLA profile of the whole
    forward (``op_profile``) and summed by named scope, matmuls (fusions holding a dot) apart from the rest;
    then the bound this puts on the speedup: with the position-wise matmuls taking M_sq and M_bert, a ratio of
    3 needs everything else to take at most (M_bert - 3 M_sq) / 2 ms in each model."""
    sq, names = "squeezebert-uncased", ["squeezebert-uncased", REFERENCE]
    mon = LoadMonitor()
    prof = {n: op_profile(build_classifier(n, tiny), batch, seq_len, runs, warmup) for n in names}
    get = lambda n, scope, kind: prof[n]["ms"].get((scope, kind), 0.0)  # noqa: E731
    rows = []
    for scope, label in SCOPES.items():
        cells = [get(n, scope, k) for n in names for k in ("matmul", "other")]
        tot = (cells[0] + cells[1], cells[2] + cells[3])
        rows.append([label, *(f"{c:.1f}" for c in cells), f"{tot[1] / tot[0]:.2f}x" if tot[0] > 0.05 else None])
    rows.append(["sum of ops", *(f"{sum(v for (_, k), v in prof[n]['ms'].items() if k == kind):.1f}" for n in names
                                 for kind in ("matmul", "other")),
                 f"{prof[REFERENCE]['ops_ms'] / prof[sq]['ops_ms']:.2f}x"])
    mm = {n: sum(get(n, sc, "matmul") for sc in POSITION_WISE) for n in names}
    rest = {n: prof[n]["ops_ms"] - mm[n] for n in names}
    fl = {n: flops_breakdown(preset_config(n, tiny), seq_len) for n in names}
    fl_ratio = (fl[REFERENCE]["attention_fc"] + fl[REFERENCE]["ffn_fc"]) / (fl[sq]["attention_fc"] + fl[sq]["ffn_fc"])
    budget = (mm[REFERENCE] - 3 * mm[sq]) / 2
    lines = [f"forward wall time (median of {runs}, not profiled): SqueezeBERT {prof[sq]['wall_ms']:.1f} ms, BERT-base "
             f"{prof[REFERENCE]['wall_ms']:.1f} ms -> {prof[REFERENCE]['wall_ms'] / prof[sq]['wall_ms']:.2f}x",
             f"position-wise matmuls (Q/K/V, post-attention, FFN): SqueezeBERT {mm[sq]:.1f} ms, BERT-base "
             f"{mm[REFERENCE]:.1f} ms -> {mm[REFERENCE] / mm[sq]:.2f}x (their FLOP ratio {fl_ratio:.2f}x)",
             f"everything else (attention core, softmax, GELU, LayerNorm, transposes, embedding): SqueezeBERT "
             f"{rest[sq]:.1f} ms, BERT-base {rest[REFERENCE]:.1f} ms",
             f"SqueezeBERT >= 3x BERT-base would need everything else <= {budget:.1f} ms per model"
             if budget > 0 else "SqueezeBERT >= 3x BERT-base is out of reach: the position-wise matmuls alone "
             "are less than 3x apart"]
    table = format_table(["component (named scope)", "SqueezeBERT matmul ms", "SqueezeBERT other ms",
                          "BERT-base matmul ms", "BERT-base other ms", "BERT/SqueezeBERT"], rows,
                         f"Forward time by component from an XLA profile, float32, batch {batch}, seq {seq_len}"
                         f"{', tiny configs' if tiny else ''}, {runs} profiled forwards; {mon.note()}")
    return table + "\n" + "\n".join(lines)


