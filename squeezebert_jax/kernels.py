"""Hand-written GPU kernels (Pallas, lowered through Triton): SqueezeBERT's grouped FFN in one kernel.

The grouped FFN -- expand (a grouped 1x1 conv, G=4), GELU, contract (grouped, G=4) -- is SqueezeBERT's largest
memory traffic on a GPU: as XLA compiles it, the [N, 3072] intermediate is written by the expansion's matmul, read
and written again by GELU's kernel and read by the contraction (0.8 GB a layer at batch 256 x 128 in bf16), with
transposes between channels-last and the group-major layout around both matmuls. ``grouped_ffn`` computes
``gelu(x_g @ w1_g + b1_g) @ w2_g`` for every group ``g`` in one kernel that keeps the intermediate on chip, reads
the channels-last input and writes the channels-last output directly: per layer it moves the input and the output
(2 x 50 MB) and the weights.

Its backward is XLA's (``jax.custom_vjp``): the expansion is recomputed from the input (as remat "minimal" recomputes
the activation today), so training keeps only what the layer kept before, less the expansion.

Opt-in (``SqueezeBertConfig.ffn = "fused"``): timed on one H200 it is slower than XLA's FFN (0.404 against 0.370 ms
at 32,768 tokens; the train step 0.96x), since its Triton matmuls run below XLA's rate (docs/results.md, "A fused
FFN kernel and XLA's GPU options on one H200").
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from squeezebert_jax.errors import InputError
from squeezebert_jax.layers import from_groups, gelu, grouped_dot, to_groups


class Tiles(NamedTuple):
    """How ``grouped_ffn`` splits its work: ``rows`` tokens per program (its [rows, 192] float32 accumulators live in
    registers), ``inner`` intermediate channels per step of its loop (the [rows, inner] GELU tile), Triton's warps
    per program and software-pipelining stages. The default is the fastest of 24 choices on one H200 (0.404 ms for
    SqueezeBERT's FFN at 32768 tokens; 64 rows: 0.744 ms); ``eval/bench_train.py --kernels`` times them all."""
    rows: int = 32
    inner: int = 64
    num_warps: int = 4
    num_stages: int = 2


def default_tiles() -> Tiles:
    """``Tiles()``, or the choice ``SQUEEZEBERT_FFN_TILES="rows,inner,warps,stages"`` names (a GPU's own best from
    ``eval/bench_train.py --kernels``). Read when a kernel is traced, not at import: a bad value is one error line of
    the run that would use it, never a traceback of every script."""
    text = os.environ.get("SQUEEZEBERT_FFN_TILES", "").strip()
    if not text:
        return Tiles()
    try:
        values = [int(v) for v in text.split(",")]
        if len(values) != len(Tiles._fields):
            raise ValueError
        tiles = Tiles(*values)
    except ValueError:
        raise InputError(f"SQUEEZEBERT_FFN_TILES={text!r}: four integers, rows,inner,warps,stages (e.g. "
                         "64,64,4,2)") from None
    if (any(v < 1 or v & (v - 1) for v in tiles[:3]) or not 16 <= tiles.rows <= 1024 or not 16 <= tiles.inner <= 1024
            or tiles.num_warps > 32 or not 1 <= tiles.num_stages <= 8):
        raise InputError(f"SQUEEZEBERT_FFN_TILES={text!r}: rows and inner powers of 2 from 16 to 1024, warps a power "
                         "of 2 up to 32, stages 1 to 8")
    return tiles

CHUNK = 64  # a group's input and output channels are loaded and accumulated 64 at a time (Triton's power-of-2 tiles)
MAX_GROUP_OUT = 256  # the most output channels per group the accumulators hold in registers (BERT's 768 do not)

# erf(x) for float32 as a rational function of x on [-4, 4] (Eigen's and XLA's float32 erf before 2023; within 5e-7
# of XLA's own float32 erf): Pallas lowers no erf to Triton.
_ERF_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
              -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
             -1.42647390514189e-02)


def _polynomial(x, coefficients):
    y = jnp.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        y = y * x + c
    return y


def erf_f32(x: jax.Array) -> jax.Array:
    """erf of float32 ``x`` from multiplications, additions and one division (what a Triton kernel can compute)."""
    x = jnp.clip(x, -4.0, 4.0)
    x2 = x * x
    return x * _polynomial(x2, _ERF_ALPHA) / _polynomial(x2, _ERF_BETA)


def gelu_f32(x: jax.Array) -> jax.Array:
    """Exact GELU, ``x/2 * (1 + erf(x/sqrt(2)))``, through ``erf_f32``."""
    return 0.5 * x * (1.0 + erf_f32(x * np.float32(math.sqrt(0.5))))


_LOWERING_FOR: list[tuple[str, bool]] = []


@contextlib.contextmanager
def lowering_for(platform: str, interpret: bool = False):
    """Trace the model for ``platform`` ("gpu", "tpu", "cpu": a compile target's, ``aot``) rather than for this
    process's backend: whether a layer calls a GPU kernel is decided when it is traced (so jax's cached trace of a
    function traced before, for another platform, is reused as it was). ``interpret``: the kernels run in Pallas'
    interpreter (tests of the GPU path on a CPU)."""
    _LOWERING_FOR.append((platform, interpret))
    try:
        yield
    finally:
        _LOWERING_FOR.pop()


def on_gpu() -> bool:
    """Whether the program being traced is for an NVIDIA GPU (``lowering_for``, else this process's backend)."""
    return (_LOWERING_FOR[-1][0] if _LOWERING_FOR else jax.default_backend()) in ("gpu", "cuda")


def interpreted() -> bool:
    """Whether kernels traced now run in Pallas' interpreter (``lowering_for(..., interpret=True)``)."""
    return bool(_LOWERING_FOR) and _LOWERING_FOR[-1][1]


def fits(n: int, cin: int, inner: int, cout: int, groups: int, dtype=jnp.bfloat16,
         tiles: Tiles | None = None) -> bool:
    """Whether ``grouped_ffn`` takes an FFN of these sizes: grouped (G > 1), bf16 or fp16 (float32 would run
    Triton's tf32 matmuls), the tokens a multiple of ``tiles.rows``, each group's channels multiples of the kernel's
    tiles and its outputs few enough to accumulate in registers."""
    if groups < 2 or cin % groups or inner % groups or cout % groups or dtype not in (jnp.bfloat16, jnp.float16):
        return False
    cin_g, inner_g, cout_g = cin // groups, inner // groups, cout // groups
    tiles = tiles or default_tiles()
    return (n % tiles.rows == 0 and cin_g % CHUNK == 0 and cout_g % CHUNK == 0 and inner_g % tiles.inner == 0
            and cout_g <= MAX_GROUP_OUT)


def _ffn_kernel(x_ref, w1_ref, b1_ref, w2_ref, o_ref, *, cin_g: int, inner_g: int, cout_g: int, tiles: Tiles):
    i, g = pl.program_id(0), pl.program_id(1)
    rows = pl.ds(pl.multiple_of(i * tiles.rows, tiles.rows), tiles.rows)
    xs = [x_ref[rows, pl.ds(pl.multiple_of(g * cin_g + j * CHUNK, CHUNK), CHUNK)] for j in range(cin_g // CHUNK)]

    def step(k, accs):
        inner = pl.ds(pl.multiple_of(k * tiles.inner, tiles.inner), tiles.inner)
        pre = b1_ref[g, inner].astype(jnp.float32)[None, :]
        for j, xj in enumerate(xs):
            pre += jnp.dot(xj, w1_ref[g, pl.ds(j * CHUNK, CHUNK), inner], preferred_element_type=jnp.float32)
        h = gelu_f32(pre).astype(w2_ref.dtype)
        return tuple(acc + jnp.dot(h, w2_ref[g, inner, pl.ds(j * CHUNK, CHUNK)], preferred_element_type=jnp.float32)
                     for j, acc in enumerate(accs))

    zeros = tuple(jnp.zeros((tiles.rows, CHUNK), jnp.float32) for _ in range(cout_g // CHUNK))
    accs = jax.lax.fori_loop(0, inner_g // tiles.inner, step, zeros)
    for j, acc in enumerate(accs):
        o_ref[rows, pl.ds(pl.multiple_of(g * cout_g + j * CHUNK, CHUNK), CHUNK)] = acc.astype(o_ref.dtype)


_COMPILER_PARAMS = getattr(plgpu, "CompilerParams", None) or getattr(plgpu, "TritonCompilerParams")


def pallas_ffn(x, w1, b1, w2, interpret: bool = False, tiles: Tiles | None = None):
    """``grouped_ffn``'s forward alone (no gradient): the Pallas kernel (``tiles``: ``default_tiles()``)."""
    tiles = tiles or default_tiles()
    (n, cin), (groups, _, inner_g), cout_g = x.shape, w1.shape, w2.shape[-1]
    kernel = functools.partial(_ffn_kernel, cin_g=cin // groups, inner_g=inner_g, cout_g=cout_g, tiles=tiles)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((n, groups * cout_g), x.dtype), grid=(n // tiles.rows, groups),
        compiler_params=_COMPILER_PARAMS(num_warps=tiles.num_warps, num_stages=tiles.num_stages),
        interpret=interpret, name="squeezebert_grouped_ffn")(x, w1, b1, w2)


def reference_ffn(x, w1, b1, w2):
    """What ``grouped_ffn`` computes, in XLA's ops as the model's XLA path runs them: ``[N, Cin]`` channels-last, ``w1
    [G, Cin/G, I/G]``, ``b1 [G, I/G]``, ``w2 [G, I/G, Cout/G]`` -> ``[N, Cout]`` (no output bias)."""
    pre = grouped_dot(to_groups(x, w1.shape[0]), w1) + b1[:, None, :]  # group-major [G, N, I/G], as model.py's
    return from_groups(grouped_dot(gelu(pre), w2), x.shape[:1])


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def grouped_ffn(x, w1, b1, w2, interpret: bool = False, tiles: Tiles | None = None):
    """``gelu(x_g @ w1_g + b1_g) @ w2_g`` per group, channels-last in and out, as one Pallas kernel (``interpret``:
    Pallas' interpreter, any platform). Its gradient is ``reference_ffn``'s, through XLA. Sizes: ``fits``."""
    return pallas_ffn(x, w1, b1, w2, interpret, tiles)


def _grouped_ffn_fwd(x, w1, b1, w2, interpret, tiles):
    return pallas_ffn(x, w1, b1, w2, interpret, tiles), (x, w1, b1, w2)


def _grouped_ffn_bwd(interpret, tiles, residuals, dy):
    return jax.vjp(reference_ffn, *residuals)[1](dy)


grouped_ffn.defvjp(_grouped_ffn_fwd, _grouped_ffn_bwd)
