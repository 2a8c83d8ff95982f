"""The building blocks every family shares: activations, the remat policies, the grouped 1x1 convolution (a
block-diagonal matmul), dense, LayerNorm and the attention core. ``model.py`` assembles them into SqueezeBERT's and
BERT's layers and the heads; ``models/`` holds what a family has of its own (MobileBERT's layer). Nothing here imports
the model: a family file builds on these without a cycle."""

from __future__ import annotations

import math

import jax
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
# context, the two pre-LayerNorm sums, the FFN expansion) and recomputes only element-wise work and the attention
# scores (2.7% of the FLOPs): 11.3 GiB. "lean" also recomputes q, k and v (~6% more FLOPs): 9.6 GiB. "full"
# keeps only each layer's input and runs the layer twice (~33% more FLOPs): 3.3 GiB.
SAVED_ACTIVATIONS = ("q", "k", "v", "context", "attention_sum", "ffn_expand", "ffn_sum")
REMAT_POLICIES = {
    "none": None,  # no rematerialisation: every intermediate is kept
    "minimal": jax.checkpoint_policies.save_only_these_names(*SAVED_ACTIVATIONS),
    "lean": jax.checkpoint_policies.save_only_these_names(*SAVED_ACTIVATIONS[3:]),
    "dots_saveable": jax.checkpoint_policies.dots_saveable,  # matmul outputs kept; element-wise work recomputed
    "full": jax.checkpoint_policies.nothing_saveable,  # only each layer's input kept; the layer runs twice
}


def _normal(std: float):
    return jax.nn.initializers.normal(stddev=std)


class GroupedConv1x1(nnx.Module):
    """A grouped 1x1 Conv1d over channels-last input: a block-diagonal matmul, never a conv op (``_group_major`` on
    CPU and GPU, ``_in_place`` on TPU; one compiled program holds only the branch of its platform).

    kernel ``[G, Cin/G, Cout/G]``: group g maps input channels ``[g*Cin/G, (g+1)*Cin/G)`` to output channels
    ``[g*Cout/G, (g+1)*Cout/G)``, exactly torch.nn.Conv1d(Cin, Cout, kernel_size=1, groups=G).
    """

    def __init__(self, cin: int, cout: int, groups: int, *, init_std: float, dtype=jnp.float32,
                 rngs: nnx.Rngs):
        if cin % groups or cout % groups:
            raise InputError(f"groups={groups} must divide cin={cin} and cout={cout}")
        self.groups, self.cin, self.cout, self.dtype = groups, cin, cout, dtype
        self.kernel = nnx.Param(_normal(init_std)(rngs.params(), (groups, cin // groups, cout // groups)))
        self.bias = nnx.Param(jnp.zeros((cout,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        g = self.groups
        kernel = self.kernel[...].astype(self.dtype)
        x = x.astype(self.dtype)
        if g == 1:
            y = x @ kernel[0]
        else:  # the layout is chosen when the step is lowered, for the platform it is lowered for
            y = jax.lax.platform_dependent(x, kernel, tpu=self._in_place, default=self._group_major)
        return y + self.bias[...].astype(self.dtype)

    def _group_major(self, x, kernel):
        """CPU and GPU: a batched matmul [G, N, Cin/G] x [G, Cin/G, Cout/G] between two transposes; the fastest form on
        XLA:CPU (eval/bench_infer.py --sweep), and on an H100 target the paper step's peak is 33.4 GiB per GPU
        this way against 39.8 GiB with the in-place einsum (1024 sequences x 128 per GPU)."""
        g = self.groups
        xg = x.reshape(-1, g, self.cin // g).transpose(1, 0, 2)
        y = jax.lax.dot_general(xg, kernel, (((2,), (1,)), ((0,), (0,))))
        return y.transpose(1, 0, 2).reshape(*x.shape[:-1], self.cout)

    def _in_place(self, x, kernel):
        """TPU: the group axis as a batch dimension where it lies; XLA picks the layouts. The explicit transposes of
        the other form are real copies there: on a v5e, 17% more bytes accessed per training step, and without remat
        their transposed inputs are what autodiff keeps (the grouped model's 1.5x memory of BERT-base)."""
        g = self.groups
        xg = x.reshape(*x.shape[:-1], g, self.cin // g)
        return jnp.einsum("...gi,gio->...go", xg, kernel).reshape(*x.shape[:-1], self.cout)


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


class SelfAttention(nnx.Module):
    """softmax(q kᵀ / sqrt(d) + mask) v over contiguous 64-channel heads; q/k/v are grouped 1x1 convs of a
    ``SqueezeBertConfig``'s hidden size and group counts."""

    def __init__(self, config, *, dtype, rngs: nnx.Rngs):
        c, h, std = config, config.hidden_size, config.initializer_range
        self.num_heads, self.head_dim, self.dtype = c.num_attention_heads, h // c.num_attention_heads, dtype
        self.query = GroupedConv1x1(h, h, c.q_groups, init_std=std, dtype=dtype, rngs=rngs)
        self.key = GroupedConv1x1(h, h, c.k_groups, init_std=std, dtype=dtype, rngs=rngs)
        self.value = GroupedConv1x1(h, h, c.v_groups, init_std=std, dtype=dtype, rngs=rngs)
        self.dropout = nnx.Dropout(c.attention_probs_dropout_prob, rngs=rngs)

    def __call__(self, x, mask_bias, with_probs: bool = False):
        b, s, _ = x.shape  # heads to [B, h, S, d]: batched dot_generals beat the einsum on XLA:CPU
        split = lambda t: t.reshape(b, s, self.num_heads, self.head_dim).transpose(0, 2, 1, 3)  # noqa: E731
        with jax.named_scope("qkv"):
            q, k, v = (checkpoint_name(f(x), n) for f, n in ((self.query, "q"), (self.key, "k"), (self.value, "v")))
        with jax.named_scope("attention_core"):
            ctx, p = self.core(split(q), split(k), split(v), mask_bias)
            return (ctx, p) if with_probs else ctx

    def core(self, q, k, v, mask_bias):
        """``(context [B, S, heads * d], attention probabilities [B, heads, S, S] before dropout)`` of q, k, v as
        [B, heads, S, d]: dot_generals with (batch, head) batch dims."""
        b, _, s, _ = q.shape
        scores = jax.lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)
        p = jax.nn.softmax(scores / math.sqrt(self.head_dim) + mask_bias, axis=-1)
        probs = self.dropout(p).astype(self.dtype)
        ctx = jax.lax.dot_general(probs, v, (((3,), (2,)), ((0, 1), (0, 1))))
        return checkpoint_name(ctx.transpose(0, 2, 1, 3).reshape(b, s, self.num_heads * self.head_dim), "context"), p
