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
import math
import os
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
    """Median-ready wall times of blocking zero-argument callables, interleaved in ``rounds`` rounds."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    rounds = min(rounds or 5, runs)
    out = {k: Timing([]) for k in fns}
    for r in range(rounds):
        for name, fn in fns.items():
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


def flax_component_times(model: nnx.Module, batch: int = 1, seq_len: int = 128, runs: int = 20,
                         warmup: int = 3) -> dict[str, float]:
    """Milliseconds per forward of each Table 1 component, from jitted sub-computations of the Flax model.

    Timed separately (each its own jit, median of interleaved runs): the embedding (lookups + LayerNorm),
    one encoder layer's Q/K/V layers, its whole self-attention (Q/K/V + core), its post-attention layer
    (FC + residual + LayerNorm), its FFN (FC + GELU + FC + residual + LayerNorm), and pooler + classifier.
    The attention core is self-attention minus Q/K/V; post-attention counts with the FFN (as Table 1);
    layer figures are multiplied by the layer count (all layers have one shape). ``total`` is the whole
    jitted forward, ``sum`` the components' sum: their
    gap is what XLA gains by fusing across the cuts.
    """
    model.eval()
    c, tr = model.config, model.transformer
    n_layers = c.num_hidden_layers
    ids, mask, tt = (np.asarray(a) for a in mobile.example_inputs(c, batch, seq_len, seed=3))
    pos = np.broadcast_to(np.arange(seq_len), ids.shape)
    mask_bias = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.finfo(np.float32).min).astype(np.float32)
    layer = tr.encoder.layers[0]
    emb = _pure_jit(lambda e, i, t, p: e(i, t, p), tr.embeddings)
    x = emb(ids, tt, pos)
    qkv = _pure_jit(lambda a, x: (a.query(x), a.key(x), a.value(x)), layer.attention)
    attn = _pure_jit(lambda a, x, m: a(x, m), layer.attention)
    post = _pure_jit(lambda l, a, x: l.post_attention(a, x), layer)
    ffn = _pure_jit(lambda l, a: l.output(l.act(l.intermediate["conv1d"](a)), a), layer)
    head = _pure_jit(lambda m, h: m.classifier(jnp.tanh(m.transformer.pooler["dense"](h[:, 0]))), model)
    full = mobile.make_flax_forward(model)
    fns = {"embedding": blocking(emb, ids, tt, pos), "qkv": blocking(qkv, x), "attention": blocking(attn, x, mask_bias),
           "post": blocking(post, x, x), "ffn": blocking(ffn, x), "classifier": blocking(head, x),
           "total": blocking(full, ids, mask, tt)}
    t = {k: v.median for k, v in time_interleaved(fns, runs, warmup).items()}
    out = {"embedding": t["embedding"], "attention_fc": n_layers * t["qkv"],
           "attention_softmax_qkv": n_layers * max(t["attention"] - t["qkv"], 0.0),
           "ffn_fc": n_layers * (t["post"] + t["ffn"]), "classifier": t["classifier"]}
    out["sum"] = sum(out.values())
    out["total"] = t["total"]
    return out


def _pure_jit(fn: Callable, module: nnx.Module) -> Callable:
    """``fn(module, *args)`` jitted as a pure function of the module's state (no per-call graph walk)."""
    graphdef, state = nnx.split(module)
    jitted = jax.jit(lambda st, *args: fn(nnx.merge(graphdef, st), *args))
    return lambda *args: jitted(state, *args)


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
                 f"{fx['sum']:.1f} ms (whole jit {fx['total']:.1f} ms)",
                 f"{th['sum']:.1f} ms (whole forward {th['total']:.1f} ms)", "100%" if paper else None])
    headers = ["component", "FLOPs", "paper FLOPs", "latency Flax (jitted parts)", "latency PyTorch eager (hooks)",
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
# What the matmul kernels allow: per-layer GFLOP/s and the ratio they cap
# --------------------------------------------------------------------------------------------------

def _layer_shapes(cfg: SqueezeBertConfig) -> dict[str, tuple[int, int, int, int]]:
    """Position-wise layers of one encoder layer: name -> (count, groups, cin, cout)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    return {"Q, K, V": (3, cfg.q_groups, h, h), "post-attention": (1, cfg.post_attention_groups, h, h),
            "FFN expand": (1, cfg.intermediate_groups, h, i), "FFN contract": (1, cfg.output_groups, i, h)}


def matmul_rates(tiny: bool = False, batch: int = 8, seq_len: int = 128, runs: int = 10, warmup: int = 2) -> str:
    """Each position-wise layer of SqueezeBERT and BERT-base as one group-major batched matmul
    ``[G, N, Cin/G] x [G, Cin/G, Cout/G]`` (N = batch * seq_len): XLA (jit ``dot_general``) and PyTorch
    (``torch.bmm``) milliseconds and GFLOP/s, then the encoder's matmul time per model and the
    BERT-base/SqueezeBERT ratio those kernels allow when nothing else (attention core, softmax, LayerNorm,
    GELU, transposes) cost anything. A whole-model ratio above that cap is impossible on this machine."""
    import torch

    n = batch * seq_len
    rng = np.random.default_rng(0)
    dot = jax.jit(lambda a, b: jax.lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))))
    fns, flops_of, shapes = {}, {}, {}
    for name in ("squeezebert-uncased", REFERENCE):
        cfg = model_config(name, tiny)
        shapes[name] = _layer_shapes(cfg)
        for layer, (_, g, cin, cout) in shapes[name].items():
            key = (g, cin, cout)
            if (key, "xla") in fns:
                continue
            x = rng.standard_normal((g, n, cin // g), np.float32)
            w = rng.standard_normal((g, cin // g, cout // g), np.float32)
            xj, wj, xt, wt = jnp.asarray(x), jnp.asarray(w), torch.from_numpy(x), torch.from_numpy(w)
            fns[(key, "xla")] = blocking(dot, xj, wj)
            fns[(key, "torch")] = _torch_call(torch.bmm, xt, wt)
            flops_of[key] = 2.0 * n * cin * cout / g
    mon = LoadMonitor()
    t = {k: v.median for k, v in time_interleaved(fns, runs, warmup).items()}
    rows, total = [], {}
    for name, layers in shapes.items():
        layers_n = model_config(name, tiny).num_hidden_layers
        for layer, (count, g, cin, cout) in layers.items():
            key = (g, cin, cout)
            rows.append([name, layer, f"G={g} {cin}->{cout}", f"{t[(key, 'xla')]:.2f}",
                         f"{flops_of[key] / t[(key, 'xla')] / 1e6:.0f}", f"{t[(key, 'torch')]:.2f}",
                         f"{flops_of[key] / t[(key, 'torch')] / 1e6:.0f}"])
            for fw in ("xla", "torch"):
                total[(name, fw)] = total.get((name, fw), 0.0) + layers_n * count * t[(key, fw)]
    sq = "squeezebert-uncased"
    fl = flops(model_config(REFERENCE, tiny), seq_len) / flops(model_config(sq, tiny), seq_len)
    cap = [f"encoder position-wise matmuls, batch {batch}: SqueezeBERT {total[(sq, fw)]:.0f} ms, BERT-base "
           f"{total[(REFERENCE, fw)]:.0f} ms -> at most {total[(REFERENCE, fw)] / total[(sq, fw)]:.2f}x "
           f"({'XLA' if fw == 'xla' else 'PyTorch'} kernels; FLOP ratio of the whole model {fl:.2f}x)"
           for fw in ("xla", "torch")]
    table = format_table(["model", "layer", "shape", "XLA ms", "XLA GFLOP/s", "torch ms", "torch GFLOP/s"], rows,
                         f"Position-wise layers as batched matmuls, N = {n} positions{', tiny' if tiny else ''}, "
                         f"median of {runs}, interleaved; {mon.note()}")
    return table + "\n" + "\n".join(cap)
