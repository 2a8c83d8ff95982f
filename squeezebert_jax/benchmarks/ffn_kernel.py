"""The fused grouped FFN kernel (``kernels.grouped_ffn``) against XLA's FFN, for ``eval/bench_train.py --kernels``:
each tile choice timed on the device with its error against a float32 reference, and the bf16 inference forward of
SqueezeBERT with either FFN beside BERT-base's."""

from __future__ import annotations

import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np

from squeezebert_jax import kernels, mobile
from squeezebert_jax.benchmarks.timing import time_steps
from squeezebert_jax.model import SqueezeBertConfig, SqueezeBertForSequenceClassification, set_execution

# the tile choices timed: tokens per program, intermediate channels per loop step, warps, pipeline stages
TILE_CHOICES = [kernels.Tiles(*t) for t in itertools.product((32, 64, 128), (64, 128), (4, 8), (2, 3))]


def ffn_inputs(n: int, hidden: int, inner: int, groups: int, dtype, copies: int = 3, seed: int = 0):
    """``copies`` random (x [n, hidden], w1, b1, w2) sets with a trained model's scales (weights std 0.02, unit
    activations), on the default device: timed in turn, so that no run reads the last one's input from the cache."""
    rng = np.random.default_rng(seed)
    g = groups
    w1 = jnp.asarray(rng.normal(0, 0.02, (g, hidden // g, inner // g)), dtype)
    b1 = jnp.asarray(rng.normal(0, 0.02, (g, inner // g)), dtype)
    w2 = jnp.asarray(rng.normal(0, 0.02, (g, inner // g, hidden // g)), dtype)
    return [(jnp.asarray(rng.normal(0, 1, (n, hidden)), dtype), w1, b1, w2) for _ in range(copies)]


def _time_ms(f, inputs, steps: int) -> float:
    out = [None]
    i = itertools.cycle(inputs)

    def step():
        out[0] = f(*next(i))

    return 1e3 * time_steps(step, lambda: jax.block_until_ready(out[0]), steps, warmup=2)


def _rel(a, ref) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


def kernel_rows(n: int = 32768, hidden: int = 768, inner: int = 3072, groups: int = 4, dtype=jnp.bfloat16,
                steps: int = 50, choices=None, interpret: bool = False) -> list[list]:
    """One row per tile choice (and XLA's FFN first): ms per call, the bytes it must move (input, output, weights)
    per second, TFLOP/s, and the relative error against a float32 FFN of the same bf16 inputs. A choice that does
    not compile or does not fit is reported, not raised."""
    inputs = ffn_inputs(n, hidden, inner, groups, dtype)
    x, w1, b1, w2 = inputs[0]
    with jax.default_matmul_precision("highest"):
        ref = jax.jit(kernels.reference_ffn)(*(a.astype(jnp.float32) for a in (x, w1, b1, w2)))
    bytes_moved = sum(a.size * a.dtype.itemsize for a in (x, w1, b1, w2)) + x.size * x.dtype.itemsize
    flops = 2 * n * (hidden * inner + inner * hidden) / groups
    rows = []

    def row(name, f):
        try:
            err = _rel(f(x, w1, b1, w2), ref)
            ms = _time_ms(f, inputs, steps)
        except Exception as e:  # noqa: BLE001 -- a tile choice Triton refuses is a row, not the end of the table
            return rows.append([name, "-", "-", "-", f"failed: {str(e).splitlines()[0][:70]}"])
        rows.append([name, f"{ms:.3f}", f"{bytes_moved / ms / 1e6:.0f}", f"{flops / ms / 1e9:.0f}", f"{err:.1e}"])

    row("XLA (the model's ops: two grouped matmuls, GELU)", jax.jit(kernels.reference_ffn))
    for t in choices or TILE_CHOICES:
        if not kernels.fits(n, hidden, inner, hidden, groups, dtype, t):
            rows.append([f"kernel {tuple(t)}", "-", "-", "-", "sizes do not fit these tiles"])
            continue
        row(f"kernel rows={t.rows} inner={t.inner} warps={t.num_warps} stages={t.num_stages}"
            + (" (default)" if t == kernels.default_tiles() else ""),
            jax.jit(lambda *a, t=t: kernels.pallas_ffn(*a, interpret=interpret, tiles=t)))
    return rows


def inference_rows(configs: dict[str, SqueezeBertConfig], seq_len: int, batch: int, steps: int = 20) -> list[list]:
    """The bf16 classifier forward (``mobile.make_flax_forward``) of each named config with the FFN kernel ("fused")
    and without ("xla") where its FFN takes the kernel, else once: sequences/s and, for "fused", its logits' largest
    difference from "xla"'s on the same weights and inputs. Where the kernel would not run (not an NVIDIA GPU, or
    sizes ``kernels.fits`` refuses), its row says so instead of timing XLA's FFN under its name."""
    from flax import nnx

    rows = []
    for name, cfg in configs.items():
        ids, mask, tt = mobile.example_inputs(cfg, batch, seq_len, seed=0)
        model = SqueezeBertForSequenceClassification(cfg, num_labels=2, rngs=nnx.Rngs(0))
        grouped = cfg.intermediate_groups == cfg.output_groups > 1
        runs = grouped and kernels.on_gpu() and kernels.fits(batch * seq_len, cfg.hidden_size, cfg.intermediate_size,
                                                             cfg.hidden_size, cfg.intermediate_groups)
        logits = {}
        if grouped and not runs:
            rows.append([name, "fused: not run (bf16 on an NVIDIA GPU, at sizes kernels.fits takes)", "-", "-", "-"])
        for ffn in ("xla", "fused") if runs else ("xla",):
            fwd, out = mobile.make_flax_forward(set_execution(model, ffn=ffn), jnp.bfloat16), [None]

            def step(fwd=fwd, out=out):
                out[0] = fwd(ids, mask, tt)

            t0 = time.perf_counter()
            step()
            jax.block_until_ready(out[0])
            logits[ffn] = np.asarray(out[0][0], np.float32)
            seq_s = batch / time_steps(step, lambda out=out: jax.block_until_ready(out[0]), steps, warmup=2)
            diff = "-" if ffn == "xla" else f"{np.abs(logits['fused'] - logits['xla']).max():.2e}"
            rows.append([name, ffn if grouped else "(no grouped FFN)", f"{seq_s:.0f}", diff,
                         f"{time.perf_counter() - t0:.0f}"])
    return rows
