"""The building blocks every family shares: activations, the remat policies, the grouped 1x1 convolution (a
block-diagonal matmul), dense, LayerNorm and the attention core. ``model.py`` assembles them into SqueezeBERT's and
BERT's layers and the heads; ``models/`` holds what a family has of its own (MobileBERT's layer). Nothing here imports
the model: a family file builds on these without a cycle."""

from __future__ import annotations

import functools
import math

import jax
import jax.extend.random
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from squeezebert_jax.errors import InputError


def gelu(x: jax.Array) -> jax.Array:
    """Exact GELU in PyTorch's form, ``x/2 * (1 + erf(x/sqrt(2)))`` (torch.nn.functional.gelu, transformers "gelu").

    The same function as ``jax.nn.gelu(approximate=False)``, which XLA computes through ``erfc``: on XLA:CPU that
    costs 2.8x more (3.7 vs 1.3 ms on [4, 1024, 768]; ~8% of the SqueezeBERT forward at batch 8) for no accuracy
    that matters here; both are within 1.2e-6 of a float64 GELU, as torch's float32 one is.
    """
    return 0.5 * x * (1.0 + jax.lax.erf(x * np.asarray(math.sqrt(0.5), x.dtype)))


_ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
}


# What a layer keeps for the backward pass under ``remat`` (jax.checkpoint policies); the rest is recomputed.
# Under the layer scan every kept value is an output of the loop body, stacked over the layers: nothing XLA could
# fuse away stays unmaterialised, so "none" keeps float32 LayerNorm intermediates, float32 attention scores and
# probabilities, dropout masks and the grouped convs' transposed inputs of every layer -- 26.1 GiB per v5e chip for
# the paper step at 256 x 128, the same for BERT-base (26.6): the scan needs a policy (README, "Compiled for
# accelerators").
# "minimal" (the default) keeps per token and layer the layer's named bf16 matmul outputs (q, k, v, the attention
# context, the two pre-LayerNorm sums, the FFN expansion), and on a GPU cuDNN's attention output and statistics, and
# recomputes only element-wise work and (explicit attention) the attention scores (2.7% of the FLOPs): 11.3 GiB.
# "lean" also recomputes q, k and v (~6% more FLOPs): 9.6 GiB. "full"
# keeps only each layer's input and runs the layer twice (~33% more FLOPs): 3.3 GiB.
SAVED_ACTIVATIONS = ("q", "k", "v", "context", "attention_sum", "ffn_expand", "ffn_sum")


def _fused_attention_outputs(prim, *_, **__) -> bool:
    """cuDNN's fused attention forward (``jax.nn.dot_product_attention``): its output and softmax statistics are
    what its backward kernel reads. Kept, the backward does not run the forward kernel again (on one H100, 1.8 of
    the paper step's 63 ms); the statistics are [B, heads, S] float32, a 64th of the context's bytes at d=64."""
    return prim.name == "dot_product_attention_fwd_wrapper"


def _names_and_attention(*names):
    return jax.checkpoint_policies.save_from_both_policies(jax.checkpoint_policies.save_only_these_names(*names),
                                                          _fused_attention_outputs)


REMAT_POLICIES = {
    "none": None,  # no rematerialisation: every intermediate is kept
    "minimal": _names_and_attention(*SAVED_ACTIVATIONS),
    "lean": _names_and_attention(*SAVED_ACTIVATIONS[3:]),
    "dots_saveable": jax.checkpoint_policies.dots_saveable,  # matmul outputs kept; element-wise work recomputed
    "full": jax.checkpoint_policies.nothing_saveable,  # only each layer's input kept; the layer runs twice
}


class Dropout(nnx.Dropout):
    """``nnx.Dropout`` with cheaper masks: with a threefry key and a last axis a multiple of 4, one threefry2x32 hash
    gives 64 bits, four 16-bit draws, so a mask costs a quarter of the hashes of ``jax.random.bernoulli`` (one per
    element). On a GPU the hashes, not the memory traffic, bound the fused dropout kernels (regenerated in the
    backward under remat): on one H200 the paper step went from 42.6 to 41.5 ms (keeping the masks for the backward
    instead: 41.3 ms and 0.57 GiB more, so they are not kept; docs/results.md). An element is dropped with
    probability ``round(rate * 65536) / 65536`` (0.1 -> 0.1000061) and the kept ones are scaled by the inverse of
    the exact keep probability. The bits depend only on the key and the element's index: a resumed run and any mesh
    draw the same mask. Other keys ("rbg") and shapes draw as ``nnx.Dropout`` does."""

    def __call__(self, inputs, *, deterministic: bool | None = None, rngs=None):
        det = self.deterministic if deterministic is None else deterministic
        stream = self.rngs if rngs is None else rngs
        if det or det is None or not 0.0 < self.rate < 1.0 or self.broadcast_dims or stream is None \
                or not _draws_16(inputs.shape):
            return super().__call__(inputs, deterministic=deterministic, rngs=rngs)
        key = self._key(stream)
        if str(jax.random.key_impl(key)) != "threefry2x32":
            return super().__call__(inputs, deterministic=deterministic, rngs=key)
        keep, scale = keep_mask_16(key, inputs.shape, self.rate)
        return jax.lax.select(keep, inputs * jnp.asarray(scale, inputs.dtype), jnp.zeros_like(inputs))

    def _key(self, stream):
        return (stream[self.rng_collection]() if isinstance(stream, nnx.Rngs)
                else stream() if isinstance(stream, nnx.RngStream) else stream)

    def drops(self) -> bool:
        """Whether a call now drops anything: training (not deterministic), 0 < rate < 1, no broadcast dimensions
        (what ``keep_mask`` draws for)."""
        return self.deterministic is False and 0.0 < self.rate < 1.0 and not self.broadcast_dims

    def keep_mask(self, shape: tuple[int, ...]) -> tuple[jax.Array, float]:
        """(keep mask, the kept elements' scale) that a call on inputs of ``shape`` would apply, drawn from the
        same key (the stream advances as a call's would), for a kernel that applies the mask itself
        (``kernels.dropout_residual_layernorm``); only where ``drops()``. With an "rbg" key the mask is
        ``nnx.Dropout``'s, scaled by ``1 / (1 - rate)`` where ``nnx.Dropout`` divides by ``1 - rate``."""
        if self.rngs is None:
            raise ValueError("Dropout in training mode has no rngs to draw its mask from")
        key = self._key(self.rngs)
        if str(jax.random.key_impl(key)) == "threefry2x32" and _draws_16(shape):
            return keep_mask_16(key, shape, self.rate)
        return jax.random.bernoulli(key, 1.0 - self.rate, shape), 1.0 / (1.0 - self.rate)


def _draws_16(shape: tuple[int, ...]) -> bool:
    """Whether ``keep_mask_16`` draws a mask of ``shape``: a last axis of a multiple of 4, rows countable in 32 bits."""
    return bool(shape) and not shape[-1] % 4 and math.prod(shape[:-1]) < 2 ** 32


def keep_mask_16(key: jax.Array, shape: tuple[int, ...], rate: float) -> tuple[jax.Array, float]:
    """(keep mask of ``shape``, the kept elements' scale) from 16-bit draws of one threefry ``key``: element
    ``(..., 4j + i)`` takes the i-th 16 bits of the hash of (its row's index, j); the last axis a multiple of 4."""
    threshold = min(max(round(rate * 65536), 1), 65535)
    quads = (*shape[:-1], shape[-1] // 4)
    row = jnp.zeros(quads, jnp.uint32)
    for d in range(len(shape) - 1):  # the row's index over the leading axes, one iota per axis (partitions cleanly)
        row = row * jnp.uint32(shape[d]) + jax.lax.broadcasted_iota(jnp.uint32, quads, d)
    col = jax.lax.broadcasted_iota(jnp.uint32, quads, len(quads) - 1)
    k = jax.random.key_data(key)
    b1, b2 = jax.extend.random.threefry2x32_p.bind(k[0], k[1], row, col)
    low = jnp.uint32(0xFFFF)
    draws = jnp.stack([b1 & low, b1 >> 16, b2 & low, b2 >> 16], axis=-1).reshape(shape)
    return draws >= threshold, 65536 / (65536 - threshold)


def _normal(std: float):
    return jax.nn.initializers.normal(stddev=std)


def to_groups(x: jax.Array, groups: int) -> jax.Array:
    """Channels-last ``[..., C]`` to group-major ``[G, N, C/G]`` (N: the leading dims' product): one transpose."""
    return x.reshape(-1, groups, x.shape[-1] // groups).transpose(1, 0, 2)


def from_groups(y: jax.Array, lead: tuple[int, ...]) -> jax.Array:
    """Group-major ``[G, N, C/G]`` back to channels-last ``[*lead, C]``: one transpose."""
    return y.transpose(1, 0, 2).reshape(*lead, -1)


def grouped_dot(xg: jax.Array, kernel: jax.Array) -> jax.Array:
    """``[G, N, Cin/G] x [G, Cin/G, Cout/G] -> [G, N, Cout/G]``: one batched matmul, the group as its batch."""
    return jax.lax.dot_general(xg, kernel, (((2,), (1,)), ((0,), (0,))))


class GroupedConv1x1(nnx.Module):
    """A grouped 1x1 Conv1d over channels-last input: a block-diagonal matmul, never a conv op (``group_major`` on
    CPU and GPU, ``in_place`` on TPU; one compiled program holds only the branch of its platform).

    kernel ``[G, Cin/G, Cout/G]``: group g maps input channels ``[g*Cin/G, (g+1)*Cin/G)`` to output channels
    ``[g*Cout/G, (g+1)*Cout/G)``, exactly torch.nn.Conv1d(Cin, Cout, kernel_size=1, groups=G). A layer that chains
    grouped convs (the FFN; Q/K/V) keeps the group-major form between them (``SqueezeBertLayer``, ``SelfAttention``).
    """

    def __init__(self, cin: int, cout: int, groups: int, *, init_std: float, dtype=jnp.float32,
                 rngs: nnx.Rngs):
        if cin % groups or cout % groups:
            raise InputError(f"groups={groups} must divide cin={cin} and cout={cout}")
        self.groups, self.cin, self.cout, self.dtype = groups, cin, cout, dtype
        self.kernel = nnx.Param(_normal(init_std)(rngs.params(), (groups, cin // groups, cout // groups)))
        self.bias = nnx.Param(jnp.zeros((cout,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.groups == 1:
            return self.ungrouped(x) + self.bias[...].astype(self.dtype)
        # the layout is chosen when the step is lowered, for the platform it is lowered for
        return jax.lax.platform_dependent(x, tpu=self.in_place, default=self._channels_last)

    def ungrouped(self, x: jax.Array) -> jax.Array:
        """G=1: ``x @ kernel`` over channels-last ``[..., Cin]``, without the bias."""
        return x.astype(self.dtype) @ self.kernel[...].astype(self.dtype)[0]

    def _channels_last(self, x):
        return from_groups(self.group_major(to_groups(x, self.groups)), x.shape[:-1])

    def group_major(self, xg: jax.Array, bias: bool = True) -> jax.Array:
        """CPU and GPU: ``[G, N, Cin/G] -> [G, N, Cout/G]``, one batched matmul, its bias added unless not ``bias``
        (``group_bias``). Between two transposes (``__call__``) it is the fastest form on XLA:CPU
        (eval/bench_infer.py --sweep), and on an H100 target the paper step's peak is 33.4 GiB per GPU this way
        against 39.8 GiB with the in-place einsum (1024 sequences x 128 per GPU)."""
        y = grouped_dot(xg.astype(self.dtype), self.kernel[...].astype(self.dtype))
        return y + self.group_bias() if bias else y

    def group_bias(self) -> jax.Array:
        """The bias in the group-major layout, ``[G, 1, Cout/G]``."""
        return self.bias[...].astype(self.dtype).reshape(self.groups, 1, -1)

    def in_place_to_groups(self, x: jax.Array, bias: bool = True) -> jax.Array:
        """TPU: ``[..., Cin]`` to the group-major ``[G, N, Cout/G]`` in one einsum, its layouts XLA's to pick."""
        g, x = self.groups, x.astype(self.dtype)
        y = jnp.einsum("ngi,gio->gno", x.reshape(-1, g, self.cin // g), self.kernel[...].astype(self.dtype))
        return y + self.group_bias() if bias else y

    def in_place_from_groups(self, xg: jax.Array, lead: tuple[int, ...]) -> jax.Array:
        """TPU: the group-major ``[G, N, Cin/G]`` to ``[*lead, Cout]`` in one einsum, its layouts XLA's to pick."""
        y = jnp.einsum("gni,gio->ngo", xg.astype(self.dtype), self.kernel[...].astype(self.dtype))
        return y.reshape(*lead, self.cout) + self.bias[...].astype(self.dtype)

    def in_place(self, x: jax.Array) -> jax.Array:
        """TPU: the group axis as a batch dimension where it lies; XLA picks the layouts. The explicit transposes of
        the group-major form are real copies there: on a v5e, 17% more bytes accessed per training step, and without
        remat their transposed inputs are what autodiff keeps (the grouped model's 1.5x memory of BERT-base)."""
        g, x = self.groups, x.astype(self.dtype)
        xg = x.reshape(*x.shape[:-1], g, self.cin // g)
        y = jnp.einsum("...gi,gio->...go", xg, self.kernel[...].astype(self.dtype)).reshape(*x.shape[:-1], self.cout)
        return y + self.bias[...].astype(self.dtype)


class Dense(nnx.Module):
    """y = x @ kernel + bias, kernel ``[in, out]`` (torch Linear weight transposed)."""

    def __init__(self, din: int, dout: int, *, init_std: float, dtype=jnp.float32, rngs: nnx.Rngs):
        self.dtype = dtype
        self.kernel = nnx.Param(_normal(init_std)(rngs.params(), (din, dout)))
        self.bias = nnx.Param(jnp.zeros((dout,)))

    def __call__(self, x):
        return x.astype(self.dtype) @ self.kernel[...].astype(self.dtype) + self.bias[...].astype(self.dtype)


class LayerNorm(nnx.Module):
    """LayerNorm over the last axis with float32 statistics (exact two-pass variance)."""

    def __init__(self, features: int, eps: float, dtype=jnp.float32):
        self.eps, self.dtype = eps, dtype
        self.scale = nnx.Param(jnp.ones((features,)))
        self.bias = nnx.Param(jnp.zeros((features,)))

    def __call__(self, x):
        x = x.astype(jnp.float32)
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps) * self.scale[...] + self.bias[...]
        return y.astype(self.dtype)


ATTENTION = ("fused", "reference")  # SqueezeBertConfig.attention
FFN = ("fused", "xla")  # SqueezeBertConfig.ffn
LAYERNORM = ("fused", "xla")  # SqueezeBertConfig.layernorm
PADDING = ("any", "right")  # SqueezeBertConfig.padding


def cudnn_version() -> int | None:
    """The cuDNN version jax's fused attention would use, or None where there is none (a host without CUDA)."""
    try:
        from jax._src.cudnn import fused_attention_stablehlo as fa

        return int(fa.check_cudnn_version())
    except Exception:  # noqa: BLE001 -- no CUDA plugin, no cuDNN library, or a jax without this module
        return None


def fused_attention(q, k, v, mask_bias, implementation: str = "cudnn", right_padded: bool = False):
    """softmax(q kᵀ / sqrt(d) + mask) v as one fused kernel, ``jax.nn.dot_product_attention`` (``implementation``
    "cudnn": cuDNN's flash attention, bf16 / fp16 with a head size a multiple of 8 up to 128; "xla": XLA's): no score
    or probability tensor is kept for the backward pass. q, k, v ``[B, S, heads, d]``; ``mask_bias`` the model's
    additive padding bias ``[B, 1, 1, S]`` (0 where a key is attended) or a scalar 0 (nothing masked). No dropout.
    ``right_padded``: every row of the mask attends to a prefix of the keys (padding at the end), so the kernel takes
    the mask as each row's key count (cuDNN's padding mask) rather than as a [B, 1, S, S] bias to read: the same
    outputs, and on one H200 the paper step 1.04x faster (44.4 -> 42.6 ms)."""
    b, s = q.shape[:2]
    if mask_bias.ndim == 0:
        return jax.nn.dot_product_attention(q, k, v, implementation=implementation)
    if right_padded:
        lengths = jnp.sum(jnp.broadcast_to(mask_bias, (b, 1, 1, s)).reshape(b, s) == 0, axis=-1, dtype=jnp.int32)
        return jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths, implementation=implementation)
    mask = jnp.broadcast_to(mask_bias == 0, (b, 1, s, s))  # cuDNN: [B, 1, T, S]
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=implementation)


def cudnn_attention_fits(q) -> bool:
    """cuDNN's fused attention takes ``q`` (dtype, head size) and this host can build it (a CUDA plugin with cuDNN;
    ``aot`` declares one when compiling for a GPU target on a host without)."""
    d = q.shape[-1]
    return q.dtype in (jnp.bfloat16, jnp.float16) and d % 8 == 0 and d <= 128 and (cudnn_version() or 0) >= 8904


class SelfAttention(nnx.Module):
    """softmax(q kᵀ / sqrt(d) + mask) v over contiguous 64-channel heads; q/k/v are grouped 1x1 convs of a
    ``SqueezeBertConfig``'s hidden size and group counts. ``config.attention`` "fused" runs the core as one fused
    kernel where the platform has one (``fused_core``) and drops nothing out of the attention probabilities;
    "reference" computes them explicitly, as transformers does, with ``attention_probs_dropout_prob`` dropout. Both
    give the same outputs whenever dropout is off (evaluation, inference, conversion)."""

    def __init__(self, config, *, dtype, rngs: nnx.Rngs):
        c, h, std = config, config.hidden_size, config.initializer_range
        self.num_heads, self.head_dim, self.dtype = c.num_attention_heads, h // c.num_attention_heads, dtype
        self.fused = c.attention == "fused"
        self.right_padded = c.padding == "right"
        self.query = GroupedConv1x1(h, h, c.q_groups, init_std=std, dtype=dtype, rngs=rngs)
        self.key = GroupedConv1x1(h, h, c.k_groups, init_std=std, dtype=dtype, rngs=rngs)
        self.value = GroupedConv1x1(h, h, c.v_groups, init_std=std, dtype=dtype, rngs=rngs)
        self.dropout = Dropout(c.attention_probs_dropout_prob, rngs=rngs)

    def __call__(self, x, mask_bias, with_probs: bool = False):
        with jax.named_scope("qkv"):
            q, k, v = self.project(x)
        return self.attend(q, k, v, mask_bias, with_probs)

    def project(self, x):
        """q, k, v ``[B, S, heads, d]``. Grouped alike (SqueezeBERT's 4/4/4) on CPU and GPU:
        - in training, one batched matmul of the concatenated kernels on the group-major input, and one transpose
          takes all three to heads (``_qkv_group_major``): its backward is one matmul per gradient;
        - in evaluation (the model's ``eval()``: inference, evaluation, export), three grouped matmuls, each written
          channels-last by the matmul itself (``_qkv_each_group_major``): no transpose. Compiled for one H100
          (bf16 forward, batch 256 x 128), the transposes go (12 -> 0) and the bytes read and written fall from
          25.7 to 23.3 GB; in the training step the three matmuls moved 1.2 GB more than the one (their backward
          adds three input gradients), so training keeps the one.

        On TPU, one einsum in place. Otherwise (groups that differ, or 1) three convs."""
        b, s, _ = x.shape
        convs, g = (self.query, self.key, self.value), self.query.groups
        if g == 1 or any(m.groups != g for m in convs):
            return tuple(m(x).reshape(b, s, self.num_heads, self.head_dim) for m in convs)
        default = self._qkv_each_group_major if self.dropout.deterministic else self._qkv_group_major
        return jax.lax.platform_dependent(x, tpu=self._qkv_in_place, default=default)

    def _qkv_weights(self):
        convs, g, dt = (self.query, self.key, self.value), self.query.groups, self.dtype
        kernel = jnp.concatenate([m.kernel[...] for m in convs], -1).astype(dt)  # [G, H/G, 3H/G]: q_g | k_g | v_g
        bias = jnp.concatenate([m.bias[...].reshape(g, -1) for m in convs], -1).astype(dt)  # [G, 3H/G]
        return kernel, bias

    def _to_heads(self, y, b, s):
        """``[3, B, S, G, H/G]`` to q, k, v ``[B, S, heads, d]``: heads are contiguous channels, so channel
        g*H/G + i lands where the channels-last layout has it."""
        return tuple(y[i].reshape(b, s, self.num_heads, self.head_dim) for i in range(3))

    def _qkv_group_major(self, x):
        (b, s, h), g = x.shape, self.query.groups
        kernel, bias = self._qkv_weights()
        y = grouped_dot(to_groups(x.astype(self.dtype), g), kernel) + bias[:, None]  # [G, N, 3H/G]
        return self._to_heads(y.reshape(g, b, s, 3, h // g).transpose(3, 1, 2, 0, 4), b, s)

    def _qkv_each_group_major(self, x):
        (b, s, _), g = x.shape, self.query.groups
        xg = to_groups(x.astype(self.dtype), g)
        return tuple(m.group_major(xg).transpose(1, 0, 2).reshape(b, s, self.num_heads, self.head_dim)
                     for m in (self.query, self.key, self.value))

    def _qkv_in_place(self, x):
        (b, s, h), g = x.shape, self.query.groups
        kernel, bias = self._qkv_weights()
        y = jnp.einsum("bsgi,gio->bsgo", x.astype(self.dtype).reshape(b, s, g, h // g), kernel) + bias
        return self._to_heads(y.reshape(b, s, g, 3, h // g).transpose(3, 0, 1, 2, 4), b, s)

    def attend(self, q, k, v, mask_bias, with_probs: bool = False):
        """The context ``[B, S, heads * d]`` of q, k, v ``[B, S, heads, d]`` (and with ``with_probs`` the attention
        probabilities ``[B, heads, S, S]`` before dropout, computed explicitly)."""
        b, s = q.shape[:2]
        q, k, v = (checkpoint_name(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        with jax.named_scope("attention_core"):
            if self.fused and not with_probs:
                ctx, p = self.fused_core(q, k, v, mask_bias), None
            else:
                ctx, p = self.core(q, k, v, mask_bias)
            ctx = checkpoint_name(ctx.reshape(b, s, -1), "context")
            return (ctx, p) if with_probs else ctx

    def fused_core(self, q, k, v, mask_bias):
        """The context ``[B, S, heads, d]`` with nothing dropped: cuDNN's fused kernel on an NVIDIA GPU
        (``fused_attention``) where it takes these inputs; elsewhere ``core``'s explicit form, which XLA fuses. On
        XLA:CPU it runs faster than jax's own XLA attention (319 vs 353 ms: SqueezeBERT forward, float32, batch 8 x
        128, 2-core Intel Xeon). On a TPU, Pallas' flash attention kernel was tried and raised XLA's byte count of the
        paper step for a v5e (889 against 786 GB per chip; docs/results.md)."""
        explicit = lambda q, k, v, mask_bias: self.core(q, k, v, mask_bias)[0]  # noqa: E731
        if not cudnn_attention_fits(q):
            return explicit(q, k, v, mask_bias)
        cudnn = functools.partial(fused_attention, right_padded=self.right_padded)
        return jax.lax.platform_dependent(q, k, v, mask_bias, cuda=cudnn, default=explicit)

    def core(self, q, k, v, mask_bias):
        """``(context [B, S, heads, d], attention probabilities [B, heads, S, S] before dropout)`` of q, k, v as
        ``[B, S, heads, d]``, computed explicitly: dot_generals with (batch, head) batch dims on [B, heads, S, d]
        (faster than the einsum on XLA:CPU), float32 scores and softmax, dropout unless ``fused``."""
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = jax.lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
        p = jax.nn.softmax(scores / math.sqrt(self.head_dim) + mask_bias, axis=-1)
        probs = (p if self.fused else self.dropout(p)).astype(self.dtype)
        ctx = jax.lax.dot_general(probs, v, (((3,), (2,)), ((0, 1), (0, 1))))
        return ctx.transpose(0, 2, 1, 3), p
