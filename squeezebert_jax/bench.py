"""Timing on this machine: the paper's Table 1 profile, CPU inference, and a micro-benchmark of formulations.

(The paper's Table 2 latency comparison through the lite interpreter is ``mobile.latency_table``.)

Every measurement runs in one process, in interleaved rounds (model A, model B, ..., A, B, ...) so that a
burst of load from another process on a shared machine hits every column alike, and reports the median.

Threads. ``set_threads(n)`` pins the process to ``n`` CPUs (``os.sched_setaffinity``) and sets
``torch.set_num_threads(n)``. XLA:CPU sizes its intra-op thread pool from the CPUs the process may use
when its backend starts, and ``--xla_cpu_multi_thread_eigen=false`` / ``intra_op_parallelism_threads``
no longer limit the dot kernels (measured with jax 0.10: CPU time stays 2x wall time with them), so the
affinity mask is what makes "1 thread" true for both frameworks. Call it before the first JAX computation
(importing jax is fine; its backend starts lazily).
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json
import math
import os
import re
import time
import warnings
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import mobile
from squeezebert_jax.flops import flops, flops_breakdown
from squeezebert_jax.model import HEADS, SqueezeBertConfig

REFERENCE = "bert-base-uncased"  # speedups and ratios are relative to it

# --------------------------------------------------------------------------------------------------
# Threads and timers
# --------------------------------------------------------------------------------------------------


def set_threads(n: int | None = None) -> int:
    """Restrict this process to ``n`` CPUs (default: all it may use) for XLA and PyTorch; returns n."""
    import torch

    allowed = sorted(os.sched_getaffinity(0))
    n = len(allowed) if n is None else n
    if not 1 <= n <= len(allowed):
        raise ValueError(f"--threads {n}: this process may use {len(allowed)} CPUs ({allowed})")
    os.sched_setaffinity(0, allowed[:n])
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            warnings.warn("set_threads: the JAX backend has already started; its thread pool keeps its size")
    except (ImportError, AttributeError):
        pass
    return n


def _cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (vals[7] if len(vals) > 7 else 0), sum(vals[:8])


class LoadMonitor:
    """Notes the load average before timing and the hypervisor steal time during it (other tenants of a
    shared VM host do not show in the load average, but take CPU time away as steal)."""

    def __init__(self):
        self.load = os.getloadavg()[0]
        self.start = _cpu_ticks()

    def note(self) -> str:
        end, steal = _cpu_ticks(), ""
        if self.start and end and end[1] > self.start[1]:
            steal = f", steal {100 * (end[0] - self.start[0]) / (end[1] - self.start[1]):.1f}% during"
        return (f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs; load average {self.load:.2f} before"
                f"{steal}")


@dataclasses.dataclass
class Timing:
    times_ms: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.times_ms))

    @property
    def min(self) -> float:
        return float(np.min(self.times_ms))


def time_interleaved(fns: dict[str, Callable[[], Any]], runs: int = 20, warmup: int = 3,
                     rounds: int | None = None) -> dict[str, Timing]:
    """Median-ready wall times of blocking zero-argument callables, interleaved in ``rounds`` rounds.

    In each round every callable first runs once untimed: the first call after another model's (page faults on
    freed buffers, cold caches) was measured up to 25% slower at batch 1 after a batch-8 forward, and with two
    timed calls a round it would pull the median."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    rounds = min(rounds or 5, runs)
    out = {k: Timing([]) for k in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            if len(fns) > 1:
                fn()  # settle after the previous callable
            for _ in range(runs // rounds + (r < runs % rounds)):  # exactly ``runs`` in all
                t0 = time.perf_counter()
                fn()
                out[name].times_ms.append((time.perf_counter() - t0) * 1e3)
    return out


def blocking(f: Callable, *args) -> Callable[[], Any]:
    """A zero-argument callable that runs ``f(*args)`` and waits for JAX results."""
    return lambda: jax.block_until_ready(f(*args))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """A Markdown table (every line starts and ends with ``|``, as many cells as headers)."""
    cells = [[str(h).replace("|", "/") for h in headers]] + [[_fmt(c).replace("|", "/") for c in r] for r in rows]
    for r in cells:
        if len(r) != len(headers):
            raise ValueError(f"row {r} has {len(r)} cells, headers {len(headers)}")
    width = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |"  # noqa: E731
    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in width) + "|"] + [line(r) for r in cells[1:]]
    return (f"{title}\n" if title else "") + "\n".join(out)


def _fmt(c) -> str:
    if c is None:
        return "-"
    if isinstance(c, float):
        return f"{c:.3g}" if abs(c) < 10 else f"{c:.1f}"
    return str(c)


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


def model_config(name: str, tiny: bool = False) -> SqueezeBertConfig:
    """A preset (squeezebert-uncased, bert-base-uncased, BERT miniatures); ``tiny`` keeps only its groups."""
    return mobile.tiny_config(name) if tiny else SqueezeBertConfig.preset(name)


def build_classifier(name: str, tiny: bool = False, num_labels: int = 2, seed: int = 0) -> nnx.Module:
    """Randomly initialised sequence classifier of preset ``name`` (nothing downloads)."""
    return HEADS["SqueezeBertForSequenceClassification"](model_config(name, tiny), num_labels=num_labels,
                                                         rngs=nnx.Rngs(seed))


def _tensor(a):
    import torch

    return torch.from_numpy(np.asarray(a))


def _torch_call(module, *args) -> Callable[[], Any]:
    import torch

    def call():
        with torch.no_grad():
            return module(*args)

    return call


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


def op_profile(model: nnx.Module, batch: int = 1, seq_len: int = 128, runs: int = 5,
               warmup: int = 2) -> dict[str, Any]:
    """Where the time of one jitted float32 forward goes, from an XLA profile (``jax.profiler``) of the whole
    forward -- no cuts, so XLA fuses as in real use.

    The compiled module's HLO names every op's scope (``hlo_ops``); the profiler's Perfetto trace times every
    op of ``runs`` forwards. Returns ``{"ms": {(scope, "matmul" | "other"): ms per forward}, "ops_ms": sum
    of op times, "wall_ms": median wall time of the forward, "hlo_module": name}``; ``wall_ms - ops_ms`` is
    the runtime's own time between ops.
    """
    import tempfile

    ids, mask, tt = mobile.example_inputs(model.config, batch, seq_len, seed=3)
    compiled, state = mobile.make_flax_forward(model).compile(ids, mask, tt)
    module, ops = hlo_ops(compiled.as_text())
    run = blocking(compiled, state, ids, mask, tt)
    wall = time_interleaved({"fwd": run}, runs, warmup)["fwd"].median
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(runs):
                run()
        traces = glob.glob(os.path.join(d, "**", "perfetto_trace.json.gz"), recursive=True)
        if not traces:
            raise RuntimeError(f"jax.profiler.trace wrote no perfetto_trace.json.gz under {d}")
        with gzip.open(traces[0]) as f:
            events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
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
    """Modules of a transformers SqueezeBERT / BERT classifier, by Table 1 component."""
    if hasattr(tm, "transformer"):  # SqueezeBERT
        base, layers = tm.transformer, tm.transformer.encoder.layers
        attn = [l.attention for l in layers]
        post = [l.post_attention for l in layers]
    else:
        base, layers = tm.bert, tm.bert.encoder.layer
        attn = [l.attention.self for l in layers]
        post = [l.attention.output for l in layers]
    return {"embedding": [base.embeddings], "attention": attn,
            "qkv": [m for a in attn for m in (a.query, a.key, a.value)], "post": post,
            "ffn": [m for l in layers for m in (l.intermediate, l.output)],
            "classifier": [base.pooler, tm.classifier]}


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
    """Table 1 for one model: FLOPs share, Flax and PyTorch latency shares, paper (BERT-base only)."""
    import torch

    model = build_classifier(name, tiny)
    fl = flops_breakdown(model.config, seq_len, num_labels=2)
    total_fl = sum(fl.values())
    mon = LoadMonitor()
    fx = flax_component_times(model, batch, seq_len, runs, warmup)
    tm = mobile.to_transformers(model)
    ids, mask, tt = mobile.example_inputs(model.config, batch, seq_len, seed=3)
    with torch.no_grad():
        th = torch_component_times(tm, ids, mask, tt, runs, warmup)
    paper = PAPER_TABLE1 if name == REFERENCE and not tiny else {}
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
# CPU inference: our jitted forward vs frozen TorchScript, SqueezeBERT vs BERT-base, bf16
# --------------------------------------------------------------------------------------------------


def bench_infer(tiny: bool = False, batches: Sequence[int] = (1, 8), seq_len: int = 128, runs: int = 10,
                warmup: int = 2, bf16: bool = True, formulation: str | None = None) -> list[str]:
    """Tables: (1) our SqueezeBERT (jitted Flax, float32) vs transformers' SqueezeBERT as frozen TorchScript
    per batch size; (2) our SqueezeBERT vs our BERT-base, float32 (and bfloat16), beside the FLOP ratio;
    (3) bfloat16 vs float32 for ours. ``formulation`` (a key of ``FORMULATIONS``) adds rows for our forward
    compiled with that formulation. Random-weight sequence classifiers, one process, the CPUs
    ``set_threads`` gave both frameworks."""
    import torch

    if formulation is not None and formulation not in FORMULATIONS:
        raise ValueError(f"unknown formulation {formulation!r}; one of {sorted(FORMULATIONS)}")
    sq, names = "squeezebert-uncased", ["squeezebert-uncased", REFERENCE]
    variants = ["float32"] + ([f"float32, {formulation}"] if formulation else []) + (["bfloat16"] if bf16 else [])
    fns = {}
    for name in names:
        for batch in batches:
            model = build_classifier(name, tiny)
            ids, mask, tt = mobile.example_inputs(model.config, batch, seq_len, seed=4)
            for v in variants:
                if v.startswith("float32, "):
                    fwd = _patched_forward(build_classifier(name, tiny), FORMULATIONS[formulation][1], ids, mask, tt)[0]
                else:
                    dtype = jnp.bfloat16 if v == "bfloat16" else None
                    fwd = mobile.make_flax_forward(build_classifier(name, tiny), dtype)
                fns[(name, batch, v)] = blocking(fwd, ids, mask, tt)
            if name == sq:
                frozen, _, _ = mobile.trace_frozen(mobile.to_transformers(model), (ids, mask, tt), 1, optimize=False)
                fns[(name, batch, "torchscript")] = _torch_call(frozen, *(_tensor(a) for a in (ids, mask, tt)))
    mon = LoadMonitor()
    t = {k: v.median for k, v in time_interleaved(fns, runs, warmup).items()}
    f32 = [v for v in variants if v.startswith("float32")]
    rows1 = [[b, v, f"{t[(sq, b, v)]:.1f}", f"{t[(sq, b, 'torchscript')]:.1f}",
              f"{t[(sq, b, 'torchscript')] / t[(sq, b, v)]:.2f}x", ">= 1.2x"] for b in batches for v in f32]
    fl_ratio = flops(model_config(REFERENCE, tiny), seq_len) / flops(model_config(sq, tiny), seq_len)
    rows2 = [[b, v, f"{t[(sq, b, v)]:.1f}", f"{t[(REFERENCE, b, v)]:.1f}",
              f"{t[(REFERENCE, b, v)] / t[(sq, b, v)]:.2f}x", f"{fl_ratio:.2f}x",
              ">= 3x" if b == 8 and v.startswith("float32") else None]
             for b in batches for v in variants]
    rows3 = [[n, b, f"{t[(n, b, 'float32')]:.1f}", f"{t[(n, b, 'bfloat16')]:.1f}",
              f"{t[(n, b, 'float32')] / t[(n, b, 'bfloat16')]:.2f}x"] for n in names for b in batches] if bf16 else []
    tag = (f"seq {seq_len}{', tiny configs' if tiny else ''}, median of {runs}, interleaved; {mon.note()}; torch "
           f"threads {torch.get_num_threads()}")
    out = [format_table(["batch", "ours", "ours (Flax jit) ms", "TorchScript (frozen) ms", "ours faster by", "target"],
                        rows1, f"SqueezeBERT, ours vs transformers as frozen TorchScript, float32 ({tag})"),
           format_table(["batch", "ours", "SqueezeBERT ms", "BERT-base ms", "SqueezeBERT faster by", "FLOP ratio",
                         "target"], rows2, f"Ours: SqueezeBERT vs BERT-base ({tag})")]
    if rows3:
        out.append(format_table(["model", "batch", "float32 ms", "bfloat16 ms", "bf16 speedup"], rows3,
                                f"Ours, bfloat16 compute and weights vs float32 on CPU ({tag})"))
    return out


# --------------------------------------------------------------------------------------------------
# Micro-benchmark: formulations of the grouped 1x1 conv and the attention core on XLA:CPU
# --------------------------------------------------------------------------------------------------


def _gm(x, g):
    """[..., C] -> group-major [G, N, C/G] (N = all leading positions)."""
    return x.reshape(-1, g, x.shape[-1] // g).transpose(1, 0, 2)


def _bdot(x, w):
    """[G, N, Ci] x [G, Ci, Co] -> [G, N, Co]: dot_general with the group as an explicit batch dimension."""
    if x.shape[0] == 1:  # G = 1 (BERT): a plain matmul; a size-1 batch dimension takes a slower XLA:CPU path
        return (x[0] @ w[0])[None]
    return jax.lax.dot_general(x, w, (((2,), (1,)), ((0,), (0,))))


def _conv_bmm(self, x):
    k, x = self.kernel[...].astype(self.dtype), x.astype(self.dtype)
    y = x @ k[0] if self.groups == 1 else _bdot(_gm(x, self.groups), k).transpose(1, 0, 2).reshape(*x.shape[:-1], -1)
    return y + self.bias[...].astype(self.dtype)


def _conv_lax(self, x):
    g, k, x = self.groups, self.kernel[...].astype(self.dtype), x.astype(self.dtype)
    w = jnp.moveaxis(k, 0, 1).reshape(1, self.cin // g, self.cout)  # WIO, O ordered group-major
    y = jax.lax.conv_general_dilated(x.reshape(1, -1, self.cin), w, (1,), "VALID", feature_group_count=g,
                                     dimension_numbers=("NWC", "WIO", "NWC")).reshape(*x.shape[:-1], self.cout)
    return y + self.bias[...].astype(self.dtype)


def _conv_loop(self, x):
    ci, k, x = self.cin // self.groups, self.kernel[...].astype(self.dtype), x.astype(self.dtype)
    y = jnp.concatenate([x[..., i * ci:(i + 1) * ci] @ k[i] for i in range(self.groups)], -1)
    return y + self.bias[...].astype(self.dtype)


def _core_bhsd(att, q, k, v, mask_bias):
    """softmax(q kᵀ/√d + mask) v on [B, heads, S, d] operands: dot_generals with (batch, head) batch dims."""
    scores = jax.lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
    probs = att.dropout(jax.nn.softmax(scores / math.sqrt(att.head_dim) + mask_bias, axis=-1)).astype(att.dtype)
    ctx = jax.lax.dot_general(probs, v, (((3,), (2,)), ((0, 1), (0, 1))))  # [B, h, S, d]
    return ctx.transpose(0, 2, 1, 3).reshape(*ctx.shape[:1], ctx.shape[2], -1)


def _attn_bhsd(self, x, mask_bias):
    heads = lambda t: t.reshape(*t.shape[:-1], self.num_heads, self.head_dim).transpose(0, 2, 1, 3)  # noqa: E731
    return _core_bhsd(self, heads(self.query(x)), heads(self.key(x)), heads(self.value(x)), mask_bias)


def _layer_group_major(self, x, mask_bias):
    """Q/K/V as one batched dot on a group-major input, heads taken straight from it; the FFN stays group-major
    from the first grouped conv through GELU into the second (when their groups line up), so the 3072-wide
    activation is never transposed."""
    att, (b, s, h) = self.attention, x.shape
    dt, d, convs = att.dtype, att.head_dim, (att.query, att.key, att.value)

    def heads(t, g):  # [G, N, H/G] -> [B, heads, S, d]
        if (h // g) % d:  # heads straddle groups: back to channels-last first
            return t.transpose(1, 0, 2).reshape(b, s, att.num_heads, d).transpose(0, 2, 1, 3)
        return t.reshape(g, b, s, -1, d).transpose(1, 0, 3, 2, 4).reshape(b, att.num_heads, s, d)

    g = att.query.groups
    if all(m.groups == g for m in convs):
        w = jnp.concatenate([m.kernel[...] for m in convs], -1).astype(dt)  # [G, H/G, 3H/G]
        bias = jnp.concatenate([m.bias[...].reshape(g, 1, -1) for m in convs], -1).astype(dt)
        q, k, v = (heads(t, g) for t in jnp.split(_bdot(_gm(x.astype(dt), g), w) + bias, 3, -1))
    else:
        q, k, v = (heads(_bdot(_gm(x.astype(dt), m.groups), m.kernel[...].astype(dt))
                         + m.bias[...].astype(dt).reshape(m.groups, 1, -1), m.groups) for m in convs)
    a = self.post_attention(_core_bhsd(att, q, k, v, mask_bias), x)
    c1, c2 = self.intermediate["conv1d"], self.output.conv1d
    if c1.groups != c2.groups:
        return self.output(self.act(c1(a)), a)
    gi = c1.groups
    hid = self.act(_bdot(_gm(a.astype(dt), gi), c1.kernel[...].astype(dt)) + c1.bias[...].astype(dt).reshape(gi, 1, -1))
    y = _bdot(hid, c2.kernel[...].astype(dt)).transpose(1, 0, 2).reshape(b, s, -1) + c2.bias[...].astype(dt)
    return self.output.layernorm(self.output.dropout(y) + a)


# key -> (description, (GroupedConv1x1.__call__, SelfAttention.__call__, SqueezeBertLayer.__call__)); None keeps
# model.py's method.
FORMULATIONS = {
    "model": ("model.py as is: einsum '...gi,gio->...go', einsum attention core", (None, None, None)),
    "conv-bmm": ("grouped conv: transpose to [G, N, C/G] + dot_general(batch=G)", (_conv_bmm, None, None)),
    "conv-lax": ("grouped conv: lax.conv_general_dilated(feature_group_count=G)", (_conv_lax, None, None)),
    "conv-loop": ("grouped conv: per-group matmul loop + concatenate", (_conv_loop, None, None)),
    "core-bhsd": ("attention core: q/k/v as [B, h, S, d], dot_general(batch=B,h)", (None, _attn_bhsd, None)),
    "conv-bmm+core-bhsd": ("conv-bmm and core-bhsd together", (_conv_bmm, _attn_bhsd, None)),
    "group-major": ("layer kept group-major: one fused Q/K/V dot, FFN conv-GELU-conv without transposes, "
                    "core-bhsd", (None, None, _layer_group_major)),
}


def _patched_forward(model, patches, ids, mask, tt):
    """Compile the forward with the given method replacements (restored afterwards); returns (call, outputs)."""
    from squeezebert_jax import model as M

    targets = (M.GroupedConv1x1, M.SelfAttention, M.SqueezeBertLayer)
    saved = [cls.__call__ for cls in targets]
    try:
        for cls, fn in zip(targets, patches):
            if fn is not None:
                cls.__call__ = fn
        fwd = mobile.make_flax_forward(model)
        out = jax.block_until_ready(fwd(ids, mask, tt))  # traced and compiled while patched
    finally:
        for cls, fn in zip(targets, saved):
            cls.__call__ = fn
    return fwd, out


def formulation_sweep(tiny: bool = False, batches: Sequence[int] = (1, 8), seq_len: int = 128, runs: int = 6,
                      warmup: int = 1, formulations: Sequence[str] | None = None) -> str:
    """Whole-model forward time of SqueezeBERT and BERT-base under each formulation in ``FORMULATIONS``,
    with every variant's max |diff| from model.py's outputs (they must stay exact), and the BERT/SqueezeBERT
    ratio under the same formulation (the fair comparison: a faster attention core helps both)."""
    names = ["squeezebert-uncased", REFERENCE]
    unknown = set(formulations or ()) - set(FORMULATIONS)
    if unknown:
        raise ValueError(f"unknown formulations {sorted(unknown)}; known: {sorted(FORMULATIONS)}")
    chosen = ["model"] + [f for f in (formulations or FORMULATIONS) if f != "model"]  # model.py is the reference
    fns, diffs = {}, {}
    for name in names:
        model = build_classifier(name, tiny)
        for batch in batches:
            ids, mask, tt = mobile.example_inputs(model.config, batch, seq_len, seed=5)
            ref = None
            for f in chosen:
                fwd, out = _patched_forward(model, FORMULATIONS[f][1], ids, mask, tt)
                ref = out if ref is None else ref
                diffs[(name, batch, f)] = float(jnp.max(jnp.abs(out[0] - ref[0])))
                fns[(name, batch, f)] = blocking(fwd, ids, mask, tt)
    mon = LoadMonitor()
    timings = time_interleaved(fns, runs, warmup)
    t = {k: v.median for k, v in timings.items()}
    rows = []
    for batch in batches:
        base = t[(names[0], batch, chosen[0])]
        for f in chosen:
            sq, bert = t[(names[0], batch, f)], t[(REFERENCE, batch, f)]
            rows.append([batch, f, f"{sq:.1f} ({timings[(names[0], batch, f)].min:.1f})", f"{base / sq:.2f}x",
                         f"{bert:.1f} ({timings[(REFERENCE, batch, f)].min:.1f})", f"{bert / sq:.2f}x",
                         f"{max(diffs[(n, batch, f)] for n in names):.1e}"])
    table = format_table(["batch", "formulation", "SqueezeBERT ms (min)", "vs model.py", "BERT-base ms (min)",
                          "BERT/SqueezeBERT", "max abs diff vs model.py"], rows,
                         f"Formulation sweep, float32, seq {seq_len}{', tiny' if tiny else ''}, median of {runs}, "
                         f"interleaved; {mon.note()}")
    return table + "\n" + "\n".join(f"  {f}: {FORMULATIONS[f][0]}" for f in chosen)


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
    fl = {n: flops_breakdown(model_config(n, tiny), seq_len) for n in names}
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


# --------------------------------------------------------------------------------------------------
# Is the device fed? The pretraining step with the real input pipeline vs a fixed batch
# --------------------------------------------------------------------------------------------------

def feeding_benchmark(config, workdir: str, steps_per_run: int = 10, runs: int = 6,
                      depth: int | None = None) -> dict[str, float]:
    """Steps/s of ``config``'s first-phase pretraining step (``pretrain.build_phase_step``, the step pretrain.py runs)
    fed three ways, interleaved in one run: one fixed batch already on the devices ("synthetic", the ceiling), the
    real loader with batches made and put on the devices inline before each step ("inline", ``data.prefetch=0``),
    and the real loader behind ``trainer.DevicePrefetcher`` ("prefetched", depth ``data.prefetch``). Each timed
    call runs ``steps_per_run`` steps without waiting between them (as the training loop does) and then blocks.
    ``workdir`` receives the demo data when ``config.data.source`` is "demo"."""
    from squeezebert_jax import aot, pretrain, pretrain_data, trainer
    from squeezebert_jax.tokenizer import Tokenizer

    data_dir = pretrain.prepare_demo_data(config, workdir) if config.data.source == "demo" else config.data.path
    phase = pretrain.get_phases(config)[0]
    mesh = trainer.make_mesh(config.num_devices or None)
    model = aot.build_model(config, Tokenizer.from_dir(data_dir).vocab_size)
    graphdef, params, rest = pretrain.split_model(model)
    ps = pretrain.build_phase_step(config, phase, params, graphdef, rest, mesh, config.fsdp)
    state = [jax.device_put(ps.init(params), ps.shardings)]
    key = jax.random.key(config.seed)

    def loader():
        return iter(pretrain_data.make_pretrain_loader(
            data_dir, seq_len=phase.seq_len, global_batch_size=config.global_batch_size, seed=config.seed,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            whole_word_masking=config.data.whole_word_masking, num_workers=config.data.num_workers))

    inline = loader()
    prefetched = trainer.DevicePrefetcher(loader(), mesh, depth=depth or config.data.prefetch or 2)
    fixed = trainer.global_batch(next(loader()), mesh)
    feeds = {"synthetic": lambda: fixed, "inline": lambda: trainer.global_batch(next(inline), mesh),
             "prefetched": lambda: next(prefetched)}

    def run(feed):
        def f():
            m = None
            for _ in range(steps_per_run):
                state[0], m = ps.step_fn(state[0], feed(), key)
            jax.block_until_ready(m)
        return f

    try:
        t = time_interleaved({k: run(f) for k, f in feeds.items()}, runs=runs, warmup=1)
    finally:
        prefetched.close()
    return {k: steps_per_run / (v.median / 1e3) for k, v in t.items()}
