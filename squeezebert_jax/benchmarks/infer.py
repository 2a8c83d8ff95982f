"""CPU inference: our jitted forward vs transformers' SqueezeBERT as frozen TorchScript, SqueezeBERT vs BERT-base,
bfloat16 vs float32; and a micro-benchmark of other formulations of the grouped 1x1 conv and of the layer.

model.py's grouped 1x1 conv (``GroupedConv1x1``) is, on CPU and GPU, a batched ``dot_general`` with the group as
the batch dimension between two transposes ([..., C] -> [G, N, C/G] -> [G, N, Cout/G] -> [..., Cout]); on TPU an
einsum with the group axis left in place. Its attention core is two ``dot_general``s on [B, heads, S, d] operands.
``FORMULATIONS`` holds the alternatives that compile to a different program on XLA:CPU.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from squeezebert_jax import mobile, model as M
from squeezebert_jax.errors import InputError
from squeezebert_jax.flops import flops
from squeezebert_jax.benchmarks.timing import (REFERENCE, LoadMonitor, blocking, build_classifier, format_table,
                                               preset_config, time_interleaved, torch_call, torch_tensor)


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
        raise InputError(f"unknown formulation {formulation!r}; one of {sorted(FORMULATIONS)}")
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
                fns[(name, batch, "torchscript")] = torch_call(frozen, *(torch_tensor(a) for a in (ids, mask, tt)))
    mon = LoadMonitor()
    t = {k: v.median for k, v in time_interleaved(fns, runs, warmup).items()}
    f32 = [v for v in variants if v.startswith("float32")]
    rows1 = [[b, v, f"{t[(sq, b, v)]:.1f}", f"{t[(sq, b, 'torchscript')]:.1f}",
              f"{t[(sq, b, 'torchscript')] / t[(sq, b, v)]:.2f}x", ">= 1.2x"] for b in batches for v in f32]
    fl_ratio = flops(preset_config(REFERENCE, tiny), seq_len) / flops(preset_config(sq, tiny), seq_len)
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
# Micro-benchmark: other formulations of the grouped 1x1 conv and of the layer on XLA:CPU
# --------------------------------------------------------------------------------------------------


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


# key -> (description, (GroupedConv1x1.__call__, SelfAttention.__call__, SqueezeBertLayer.__call__)); None keeps
# model.py's method. (Gone: "conv-bmm", "core-bhsd", the two together, and "group-major" (one Q/K/V dot, the FFN
# group-major from conv through GELU to conv): the forms model.py itself now takes.)
FORMULATIONS = {
    "model": ("model.py as is: Q/K/V one batched dot on the group-major input, the FFN group-major from conv through "
              "GELU to conv, the attention core fused (jax.nn.dot_product_attention)", (None, None, None)),
    "conv-lax": ("grouped conv: lax.conv_general_dilated(feature_group_count=G)", (_conv_lax, None, None)),
    "conv-loop": ("grouped conv: per-group matmul loop + concatenate", (_conv_loop, None, None)),
}


def _patched_forward(model, patches, ids, mask, tt):
    """Compile the forward with the given method replacements (restored afterwards); returns (call, outputs)."""

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
        raise InputError(f"unknown formulations {sorted(unknown)}; known: {sorted(FORMULATIONS)}")
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
