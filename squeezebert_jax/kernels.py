"""Hand-written GPU kernels (Pallas, lowered through Triton): SqueezeBERT's grouped FFN in one kernel, and the
backward of each sublayer's dropout + residual + LayerNorm in one kernel (``dropout_residual_layernorm``, below).

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
from jax.ad_checkpoint import checkpoint_name
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


# --------------------------------------------------------------------------------------------------
# The dropout + residual + LayerNorm block's backward as one kernel
# --------------------------------------------------------------------------------------------------
# Each layer ends its two sublayers in LayerNorm(dropout(z + bias) + residual) (model.ConvDropoutLayerNorm). XLA
# compiles that block's backward to 14-17 kernels a layer on an H100 target: the row statistics, the two row sums of
# LayerNorm's gradient, the column sums of the gamma, beta and bias gradients (one over a float32 [N, C] product it
# writes out and reads back) and the dropout mask's gradient, each reading or writing [N, C] arrays again (1.16 GB a
# post-attention block at batch 256 x 128, of which its matmuls need 0.22). ``layernorm_backward`` reads the
# gradient, the saved sum and the mask once and writes the two gradients (the residual's and z's, z's in the
# group-major layout the grouped conv's backward reads) and per-program column sums: about 0.23 GB (0.28 with a
# second gradient to add: ``twice``). docs/results.md, "The LayerNorm backward as one kernel".


class NormTiles(NamedTuple):
    """How ``layernorm_backward`` splits its work: ``rows`` rows a step (all C channels of each, in power-of-2
    chunks), Triton's warps per program, and at most ``programs`` programs, each looping over an equal share of
    the rows and keeping its column sums in registers. ``SQUEEZEBERT_NORM_TILES="rows,warps,programs"`` picks
    another (``eval/bench_train.py --executions`` times the step with it)."""
    rows: int = 8
    num_warps: int = 8
    programs: int = 512


def norm_tiles() -> NormTiles:
    """``NormTiles()``, or ``SQUEEZEBERT_NORM_TILES``'s choice (read when a kernel is traced)."""
    text = os.environ.get("SQUEEZEBERT_NORM_TILES", "").strip()
    if not text:
        return NormTiles()
    try:
        tiles = NormTiles(*[int(v) for v in text.split(",")])
        if len(tiles) != len(NormTiles._fields) or text.count(",") != len(NormTiles._fields) - 1:
            raise ValueError
    except (ValueError, TypeError):
        raise InputError(f"SQUEEZEBERT_NORM_TILES={text!r}: three integers, rows,warps,programs (e.g. 8,8,512)"
                         ) from None
    if any(v < 1 or v & (v - 1) for v in tiles[:2]) or tiles.rows > 256 or tiles.num_warps > 32 or not (
            1 <= tiles.programs <= 65536):
        raise InputError(f"SQUEEZEBERT_NORM_TILES={text!r}: rows a power of 2 up to 256, warps a power of 2 up to "
                         "32, programs 1 to 65536")
    return tiles


def _norm_chunk(width: int) -> int | None:
    """The widest power-of-2 chunk (16 to 256 channels) that divides ``width``, or None."""
    return next((ch for ch in (256, 128, 64, 32, 16) if width % ch == 0), None)


def norm_fits(n: int, channels: int, groups: int = 1, tiles: NormTiles | None = None) -> bool:
    """Whether ``dropout_residual_layernorm`` takes ``n`` rows of ``channels`` (z group-major over ``groups``): the
    rows a multiple of the tiles' and each group's channels a multiple of 16."""
    tiles = tiles or norm_tiles()
    return (n > 0 and n % tiles.rows == 0 and groups >= 1 and channels % groups == 0
            and _norm_chunk(channels // groups) is not None)


def _norm_kernel(*refs, c: int, ch: int, rows: int, blocks: int, eps: float, scale: float, masked: bool,
                 two: bool, groups: int):
    refs = list(refs)
    g_ref, g2_ref = refs.pop(0), refs.pop(0) if two else None
    s_ref, gamma_ref = refs.pop(0), refs.pop(0)
    keep_ref = refs.pop(0) if masked else None
    ds_ref, dz_ref, part_ref = refs
    i, width = pl.program_id(0), c // groups
    cols = [pl.ds(j * ch, ch) for j in range(c // ch)]
    gamma = [gamma_ref[col].astype(jnp.float32)[None, :] for col in cols]

    def step(b, sums):
        r = pl.ds(pl.multiple_of((i * blocks + b) * rows, rows), rows)
        s = [s_ref[r, col].astype(jnp.float32) for col in cols]
        mean = (sum(x.sum(axis=1) for x in s) / c)[:, None]
        centred = [x - mean for x in s]
        rstd = jax.lax.rsqrt((sum((x * x).sum(axis=1) for x in centred) / c)[:, None] + eps)
        xhat = [x * rstd for x in centred]
        g = [g_ref[r, col].astype(jnp.float32) + (g2_ref[r, col].astype(jnp.float32) if two else 0.0)
             for col in cols]
        gg = [a * w for a, w in zip(g, gamma)]
        m1 = (sum(x.sum(axis=1) for x in gg) / c)[:, None]
        m2 = (sum((x * h).sum(axis=1) for x, h in zip(gg, xhat)) / c)[:, None]
        out = []
        for j, col in enumerate(cols):
            ds = rstd * (gg[j] - m1 - xhat[j] * m2)
            ds_ref[r, col] = ds.astype(ds_ref.dtype)
            dz = jnp.where(keep_ref[r, col] != 0, ds * scale, 0.0) if masked else ds
            if groups > 1:  # group-major [G, N, C/G]: what the grouped conv's backward reads
                dz_ref[j * ch // width, r, pl.ds(j * ch % width, ch)] = dz.astype(dz_ref.dtype)
            else:
                dz_ref[r, col] = dz.astype(dz_ref.dtype)
            dgamma, dbeta, dbias = sums[j]
            out.append((dgamma + (g[j] * xhat[j]).sum(axis=0), dbeta + g[j].sum(axis=0), dbias + dz.sum(axis=0)))
        return tuple(out)

    zeros = tuple((jnp.zeros((ch,), jnp.float32),) * 3 for _ in cols)
    sums = jax.lax.fori_loop(0, blocks, step, zeros)
    for j, col in enumerate(cols):
        for k in range(3):
            part_ref[k, i, col] = sums[j][k]


def layernorm_backward(g, s, gamma, keep, *, eps: float, scale: float, groups: int = 1, g2=None,
                       interpret: bool = False, tiles: NormTiles | None = None):
    """The gradients of ``LayerNorm(s) * gamma + beta`` with ``s = dropout(z + bias) + residual``, from ``g`` (the
    output's, ``[N, C]``), the saved sum ``s`` and the dropout's ``keep`` mask (None: no dropout; the kept elements
    scaled by ``scale``), as one Pallas kernel: (the residual's, z's, gamma's, beta's, bias's). z's is group-major
    ``[G, N, C/G]`` for ``groups`` > 1. LayerNorm's statistics are recomputed from ``s`` in float32, as the forward
    computed them. ``g2``: a second gradient of the output, added to ``g`` as it is read (the output's two uses'
    gradients, which XLA would otherwise add in a kernel of their own). Sizes: ``norm_fits``."""
    tiles = tiles or norm_tiles()
    (n, c), total = s.shape, s.shape[0] // tiles.rows
    programs = max(p for p in range(1, min(total, tiles.programs) + 1) if total % p == 0)
    kernel = functools.partial(_norm_kernel, c=c, ch=_norm_chunk(c // groups), rows=tiles.rows,
                               blocks=total // programs, eps=float(eps), scale=float(scale), masked=keep is not None,
                               two=g2 is not None, groups=groups)
    dz_shape = (n, c) if groups == 1 else (groups, n, c // groups)
    out_shape = (jax.ShapeDtypeStruct((n, c), s.dtype), jax.ShapeDtypeStruct(dz_shape, s.dtype),
                 jax.ShapeDtypeStruct((3, programs, c), jnp.float32))
    args = ((g,) if g2 is None else (g, g2)) + (s, gamma) + (() if keep is None else (keep.astype(jnp.int8),))
    ds, dz, part = pl.pallas_call(
        kernel, out_shape=out_shape, grid=(programs,),
        compiler_params=_COMPILER_PARAMS(num_warps=tiles.num_warps, num_stages=1), interpret=interpret,
        name="squeezebert_layernorm_backward")(*args)
    dgamma, dbeta, dbias = part.sum(axis=1)
    return ds, dz, dgamma, dbeta, dbias


def _norm_sum(z, bias, residual, keep, scale):
    """``dropout(z + bias) + residual`` (z channels-last ``[N, C]`` or group-major ``[G, N, C/G]``), in z's dtype as
    the model's XLA path computes it (``layers.Dropout``: the kept elements times ``scale``)."""
    if z.ndim == 3:
        z = from_groups(z, residual.shape[:1])
    y = z + bias
    if keep is not None:
        y = jax.lax.select(keep, y * jnp.asarray(scale, y.dtype), jnp.zeros_like(y))
    return y + residual


def _norm(s, gamma, beta, eps):
    """``layers.LayerNorm``'s forward: float32 statistics (two-pass variance), the output in ``s``'s dtype."""
    x = s.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return ((x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta).astype(s.dtype)


def dropout_residual_layernorm(z, bias, residual, keep, gamma, beta, *, scale: float, eps: float,
                               name: str | None = None, interpret: bool = False, twice: bool = False):
    """``LayerNorm(dropout(z + bias) + residual)`` over ``[N, C]`` rows: the forward as XLA's ops (the model's XLA
    path, bit for bit with the same mask), the backward as one Pallas kernel (``layernorm_backward``). ``z`` is the
    conv's output without its bias, channels-last ``[N, C]`` or group-major ``[G, N, C/G]`` (its gradient in the same
    layout); ``z``, ``bias`` and ``residual`` in one dtype, ``gamma`` and ``beta`` float32; ``keep``: the dropout's
    mask (None: nothing dropped), the kept elements scaled by ``scale``. ``name``: the remat name of the sum, kept
    for the backward under the remat policies that keep it (``layers.SAVED_ACTIVATIONS``). ``twice``: the output
    twice, one array for each of two uses (the layer's FFN and its residual): the kernel reads their two gradients
    and adds them, where autodiff would add them in a kernel of its own. Sizes: ``norm_fits``."""
    groups = z.shape[0] if z.ndim == 3 else 1
    return _drl(z, bias, residual, keep, gamma, beta, float(scale), float(eps), name, interpret, groups, twice)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9, 10, 11))
def _drl(z, bias, residual, keep, gamma, beta, scale, eps, name, interpret, groups, twice):
    out = _norm(_norm_sum(z, bias, residual, keep, scale), gamma, beta, eps)
    return (out, out) if twice else out


def _drl_fwd(z, bias, residual, keep, gamma, beta, scale, eps, name, interpret, groups, twice):
    s = _norm_sum(z, bias, residual, keep, scale)
    if name is not None:
        s = checkpoint_name(s, name)
    out = _norm(s, gamma, beta, eps)
    return (out, out) if twice else out, (s, keep, gamma)


def _drl_bwd(scale, eps, name, interpret, groups, twice, residuals, g):
    s, keep, gamma = residuals
    g, g2 = g if twice else (g, None)
    scale = float(np.asarray(scale, s.dtype))  # what the forward multiplied by: the scale in z's dtype
    ds, dz, dgamma, dbeta, dbias = layernorm_backward(g, s, gamma, keep, eps=eps, scale=scale, groups=groups, g2=g2,
                                                      interpret=interpret)
    return dz, dbias.astype(s.dtype), ds, None, dgamma, dbeta


_drl.defvjp(_drl_fwd, _drl_bwd)
