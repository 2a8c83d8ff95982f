"""MobileBERT (Sun et al., 2020, "MobileBERT: a Compact Task-Agnostic BERT for Resource-Limited Devices"): the
family "mobilebert" of ``SqueezeBertConfig``, numerically transformers' PyTorch ``MobileBertModel`` family (max |diff|
<= 1e-5 in float32, tests/test_mobilebert.py).

Everything MobileBERT has of its own is in this file: its layer, its embeddings, NoNorm, its config fields' checks and
transformers names, the converter's name table and the FLOP count. The rest (the heads, the attention core, the encoder
under the layer scan, pretraining, fine-tuning, distillation, export) is the shared code of ``model.py``.

A layer keeps a ``hidden_size`` (512) body and works inside a bottleneck of ``intra_bottleneck_size`` (128):

    x [H] -> bottleneck/input (dense H->b + NoNorm)                  = the attention's residual
          -> bottleneck/attention (dense H->b + NoNorm)              = the query and key input (shared)
    attention: q, k from that (b->b), v from x itself (H->b), heads of b / num_attention_heads
    attention_output: dense b->b + NoNorm(. + residual)
    ffn/0 .. ffn/F-1: dense b->i, act, dense i->b, NoNorm(. + input)  (F = num_feedforward_networks stacked FFNs)
    output_bottleneck: dense b->H, dropout, NoNorm(. + x)            = the layer's output [H]

NoNorm is ``x * scale + bias`` (no statistics). The embeddings are a 3-gram convolution of 128-wide word vectors: each
position sees [next, this, previous] concatenated (zeros past the ends), projected 384 -> 512, plus position and
token-type embeddings of 512. The MLM decoder is the word embeddings [V, E] for the first E channels of the transformed
state and a dense [H - E, V] for the rest. ``use_bottleneck`` is always on (every released MobileBERT), NoNorm always
(``normalization_type`` "no_norm"). An ``intra_bottleneck_size`` above ``hidden_size`` is the inverted bottleneck of
IB-BERT, the teacher MobileBERT is distilled from.

Parameter paths (ours -> transformers', under ``encoder/layers/{i}`` and ``encoder.layer.{i}``): ``bottleneck/input``
-> ``bottleneck.input``, ``attention/query`` -> ``attention.self.query``, ``attention_output`` -> ``attention.output``,
``ffn/{j}`` -> ``ffn.{j}.intermediate.dense`` / ``ffn.{j}.output`` for j < F-1 and the layer's own
``intermediate.dense`` / ``output`` for j = F-1, ``output_bottleneck`` -> ``output.bottleneck``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from squeezebert_jax.errors import InputError
from squeezebert_jax.layers import _ACTIVATIONS, Dense, Dropout, SelfAttention, _normal
from squeezebert_jax.models.family import (
    BERT_GROUPS,
    BERT_TIED,
    HEADS_WITHOUT_POOLER,
    Family,
    bert_like_to_transformers,
    dense_rows,
    norm_rows,
    torch_classes,
)

# transformers' MobileBertConfig defaults: its save_pretrained writes only the fields that differ from them
TRANSFORMERS_DEFAULTS = dict(vocab_size=30522, hidden_size=512, num_hidden_layers=24, num_attention_heads=4,
                             intermediate_size=512, hidden_act="relu", hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                             initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0, embedding_size=128,
                             trigram_input=True, intra_bottleneck_size=128, use_bottleneck_attention=False,
                             key_query_shared_bottleneck=True, num_feedforward_networks=4, classifier_activation=True)


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------

def check_config(c) -> None:
    """A MobileBERT ``SqueezeBertConfig``'s own constraints (called from its ``__post_init__``)."""
    b = c.intra_bottleneck_size
    if b % c.num_attention_heads:
        raise InputError(f"intra_bottleneck_size {b} is not a multiple of num_attention_heads "
                         f"{c.num_attention_heads} (MobileBERT's attention runs at the bottleneck's width)")
    if c.embedding_size > c.hidden_size:
        raise InputError(f"embedding_size {c.embedding_size} > hidden_size {c.hidden_size}: MobileBERT's MLM decoder "
                         "reads the word embeddings from the first embedding_size channels")
    if not (c.use_bottleneck_attention or c.key_query_shared_bottleneck) and b != c.hidden_size:
        raise InputError("with use_bottleneck_attention and key_query_shared_bottleneck both false the query and key "
                         f"read the layer input of hidden_size {c.hidden_size} directly: intra_bottleneck_size must "
                         f"equal it (it is {b})")


def from_transformers(d: dict[str, Any], kw: dict[str, Any], source: str) -> dict[str, Any]:
    """Our fields ``kw`` (those of ``d`` with our names) completed from a transformers MobileBertConfig dict ``d``,
    whose missing fields are transformers' defaults."""
    if d.get("normalization_type", "no_norm") != "no_norm":
        raise InputError(f"{source}: normalization_type {d['normalization_type']!r} is not supported (only "
                         "'no_norm', as every released MobileBERT)")
    if not d.get("use_bottleneck", True):
        raise InputError(f"{source}: use_bottleneck false is not supported (MobileBERT without its bottleneck is "
                         "BERT with NoNorm)")
    return TRANSFORMERS_DEFAULTS | kw | BERT_GROUPS | {"family": "mobilebert"}


def to_transformers(config, d: dict[str, Any]) -> dict[str, Any]:
    return bert_like_to_transformers(config, d) | dict(normalization_type="no_norm", use_bottleneck=True,
                                                       true_hidden_size=config.intra_bottleneck_size)


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------

def _dense(din, dout, c, dtype, rngs):
    return Dense(din, dout, init_std=c.initializer_range, dtype=dtype, rngs=rngs)


class NoNorm(nnx.Module):
    """MobileBERT's normalisation: ``x * scale + bias`` per channel, no statistics (float32, cast to ``dtype``)."""

    def __init__(self, features: int, dtype=jnp.float32):
        self.dtype = dtype
        self.scale = nnx.Param(jnp.ones((features,)))
        self.bias = nnx.Param(jnp.zeros((features,)))

    def __call__(self, x):
        return (x.astype(jnp.float32) * self.scale[...] + self.bias[...]).astype(self.dtype)


class DenseNoNorm(nnx.Module):
    """dense -> (dropout) -> NoNorm(. + residual); without a residual NoNorm(dense(x)) (the bottlenecks' input)."""

    def __init__(self, din: int, dout: int, config, *, dtype, rngs: nnx.Rngs, dropout: float = 0.0):
        self.dense = _dense(din, dout, config, dtype, rngs)
        self.LayerNorm = NoNorm(dout, dtype)
        if dropout:
            self.dropout = Dropout(dropout, rngs=rngs)

    def __call__(self, x, residual=None, name: str | None = None):
        y = self.dense(x)
        if hasattr(self, "dropout"):
            y = self.dropout(y)
        if residual is not None:
            y = y + residual
        return self.LayerNorm(y if name is None else checkpoint_name(y, name))


class FFN(nnx.Module):
    """One of the stacked FFNs at the bottleneck's width: NoNorm(dense(act(dense(x))) + x)."""

    def __init__(self, config, *, dtype, rngs: nnx.Rngs):
        b, i = config.intra_bottleneck_size, config.intermediate_size
        self.act = _ACTIVATIONS[config.hidden_act]
        self.intermediate = _dense(b, i, config, dtype, rngs)
        self.output = _dense(i, b, config, dtype, rngs)
        self.LayerNorm = NoNorm(b, dtype)

    def __call__(self, x):
        y = self.act(checkpoint_name(self.intermediate(x), "ffn_expand"))
        return self.LayerNorm(checkpoint_name(self.output(y) + x, "ffn_sum"))


class Embeddings(nnx.Module):
    """Word vectors of ``embedding_size``, as a 3-gram ([next, this, previous] concatenated, zeros past the ends)
    projected to ``hidden_size`` (``embedding_transformation``), plus position and token-type embeddings of
    ``hidden_size``, NoNorm, dropout."""

    def __init__(self, config, *, dtype, rngs: nnx.Rngs):
        c, init = config, _normal(config.initializer_range)
        self.dtype, self.trigram = dtype, c.trigram_input
        word = init(rngs.params(), (c.vocab_size, c.embedding_size))
        if 0 <= c.pad_token_id < c.vocab_size:
            word = word.at[c.pad_token_id].set(0.0)  # torch nn.Embedding(padding_idx=...) init
        self.word_embeddings = nnx.Embed(c.vocab_size, c.embedding_size, rngs=rngs)
        self.word_embeddings.embedding.set_value(word)
        self.position_embeddings = nnx.Embed(c.max_position_embeddings, c.hidden_size, embedding_init=init, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(c.type_vocab_size, c.hidden_size, embedding_init=init, rngs=rngs)
        if c.trigram_input or c.embedding_size != c.hidden_size:
            width = c.embedding_size * (3 if c.trigram_input else 1)
            self.embedding_transformation = _dense(width, c.hidden_size, c, dtype, rngs)
        self.LayerNorm = NoNorm(c.hidden_size, dtype)
        self.dropout = Dropout(c.hidden_dropout_prob, rngs=rngs)

    def __call__(self, input_ids, token_type_ids, position_ids):
        x = self.word_embeddings.embedding[...][input_ids]
        if self.trigram:
            zero = jnp.zeros_like(x[:, :1])
            x = jnp.concatenate([jnp.concatenate([x[:, 1:], zero], 1), x, jnp.concatenate([zero, x[:, :-1]], 1)], -1)
        if hasattr(self, "embedding_transformation"):
            x = self.embedding_transformation(x).astype(jnp.float32)
        x = (x + self.position_embeddings.embedding[...][position_ids]
             + self.token_type_embeddings.embedding[...][token_type_ids])
        return self.dropout(self.LayerNorm(x))


class MobileBertSelfAttention(SelfAttention):
    """Attention at the bottleneck's width: query and key from the shared bottleneck (b -> b), value from the layer
    input (hidden_size -> b, or b with ``use_bottleneck_attention``); ``SelfAttention.attend`` computes it."""

    def __init__(self, config, *, dtype, rngs: nnx.Rngs):
        c, b = config, config.intra_bottleneck_size
        self.num_heads, self.head_dim, self.dtype = c.num_attention_heads, b // c.num_attention_heads, dtype
        value_in = b if c.use_bottleneck_attention else c.hidden_size
        self.query = _dense(b, b, c, dtype, rngs)
        self.key = _dense(b, b, c, dtype, rngs)
        self.value = _dense(value_in, b, c, dtype, rngs)
        self.dropout = Dropout(c.attention_probs_dropout_prob, rngs=rngs)
        self.fused, self.right_padded = c.attention == "fused", c.padding == "right"

    def __call__(self, q_in, k_in, v_in, mask_bias, with_probs: bool = False):
        b, s, _ = q_in.shape
        with jax.named_scope("qkv"):
            q, k, v = (f(x).reshape(b, s, self.num_heads, self.head_dim)
                       for f, x in ((self.query, q_in), (self.key, k_in), (self.value, v_in)))
        return self.attend(q, k, v, mask_bias, with_probs)


class Layer(nnx.Module):
    """One MobileBERT layer (the module docstring's diagram); called as ``SqueezeBertLayer``:
    ``layer(x, mask_bias, with_probs)``."""

    def __init__(self, config, *, dtype, rngs: nnx.Rngs):
        c = config
        h, b = c.hidden_size, c.intra_bottleneck_size
        self.use_bottleneck_attention = c.use_bottleneck_attention
        self.shared_qk = c.key_query_shared_bottleneck and not c.use_bottleneck_attention
        bottleneck = dict(input=DenseNoNorm(h, b, c, dtype=dtype, rngs=rngs))
        if c.key_query_shared_bottleneck:  # transformers builds it whether or not it is used
            bottleneck["attention"] = DenseNoNorm(h, b, c, dtype=dtype, rngs=rngs)
        self.bottleneck = nnx.Dict(bottleneck)
        self.attention = MobileBertSelfAttention(c, dtype=dtype, rngs=rngs)
        self.attention_output = DenseNoNorm(b, b, c, dtype=dtype, rngs=rngs)
        self.ffn = nnx.List([FFN(c, dtype=dtype, rngs=rngs) for _ in range(c.num_feedforward_networks)])
        self.output_bottleneck = DenseNoNorm(b, h, c, dtype=dtype, rngs=rngs, dropout=c.hidden_dropout_prob)

    def __call__(self, x, mask_bias, with_probs: bool = False):
        with jax.named_scope("bottleneck"):
            layer_input = self.bottleneck["input"](x)
            if self.use_bottleneck_attention:
                q_in = k_in = v_in = layer_input
            elif self.shared_qk:
                q_in = k_in = self.bottleneck["attention"](x)
                v_in = x
            else:
                q_in = k_in = v_in = x
        ctx = self.attention(q_in, k_in, v_in, mask_bias, with_probs)
        ctx, probs = ctx if with_probs else (ctx, None)
        with jax.named_scope("post_attention"):
            a = self.attention_output(ctx, layer_input, name="attention_sum")
        with jax.named_scope("ffn"):
            for ffn in self.ffn:
                a = ffn(a)
        with jax.named_scope("output_bottleneck"):
            y = self.output_bottleneck(a, x)
        return (y, probs) if with_probs else y


# --------------------------------------------------------------------------------------------------
# transformers' names (convert.py)
# --------------------------------------------------------------------------------------------------

def encoder_table(c) -> list[tuple[str, str, str]]:
    """(transformers key without ``mobilebert.``, our path under ``transformer/``, kind) for the base model."""
    t = [("embeddings.word_embeddings.weight", "embeddings/word_embeddings/embedding", "copy"),
         ("embeddings.position_embeddings.weight", "embeddings/position_embeddings/embedding", "copy"),
         ("embeddings.token_type_embeddings.weight", "embeddings/token_type_embeddings/embedding", "copy")]
    if c.trigram_input or c.embedding_size != c.hidden_size:
        t += dense_rows("embeddings.embedding_transformation", "embeddings/embedding_transformation")
    t += norm_rows("embeddings.LayerNorm", "embeddings/LayerNorm")
    last = c.num_feedforward_networks - 1
    for i in range(c.num_hidden_layers):
        theirs, ours = f"encoder.layer.{i}.", f"encoder/layers/{i}/"
        parts = [("bottleneck.input", "bottleneck/input")]
        if c.key_query_shared_bottleneck:
            parts.append(("bottleneck.attention", "bottleneck/attention"))
        for name in ("query", "key", "value"):
            t += dense_rows(f"{theirs}attention.self.{name}", f"{ours}attention/{name}")
        parts.append(("attention.output", "attention_output"))
        for tp, op in parts:
            t += dense_rows(f"{theirs}{tp}.dense", f"{ours}{op}/dense")
            t += norm_rows(f"{theirs}{tp}.LayerNorm", f"{ours}{op}/LayerNorm")
        for j in range(c.num_feedforward_networks):
            ffn = f"{theirs}ffn.{j}." if j < last else theirs
            t += dense_rows(f"{ffn}intermediate.dense", f"{ours}ffn/{j}/intermediate")
            t += dense_rows(f"{ffn}output.dense", f"{ours}ffn/{j}/output")
            t += norm_rows(f"{ffn}output.LayerNorm", f"{ours}ffn/{j}/LayerNorm")
        t += dense_rows(f"{theirs}output.bottleneck.dense", f"{ours}output_bottleneck/dense")
        t += norm_rows(f"{theirs}output.bottleneck.LayerNorm", f"{ours}output_bottleneck/LayerNorm")
    if c.classifier_activation:
        t += dense_rows("pooler.dense", "pooler/dense")
    return t


def head_rows(c, part: str) -> list[tuple[str, str, str]]:
    """The MLM decoder's second part: [H - E, V], the same layout in both (nn.Linear(V, H - E).weight); transformers'
    is [0, V] when the embeddings are as wide as the body, and ours absent (orbax saves no zero-size array)."""
    if part != "mlm":
        return []
    return [("cls.predictions.dense.weight", "cls/predictions/dense",
             "copy" if c.hidden_size > c.embedding_size else "empty")]


# --------------------------------------------------------------------------------------------------
# FLOPs (flops.py's count: matmuls only, a multiply-add 2 FLOPs)
# --------------------------------------------------------------------------------------------------

def flops_breakdown(c, s: int, num_labels: int = 0, pooler_every_token: bool = False) -> dict[str, float]:
    """FLOPs of one sequence of ``s`` tokens by the paper's Table 1 components: "embedding" the 3-gram projection,
    "attention_fc" the query/key/value matmuls and the shared query-key bottleneck, "attention_softmax_qkv" QKᵀ and
    probs·V at the bottleneck's width, "ffn_fc" the input and output bottlenecks, the attention's output dense and the
    stacked FFNs, "classifier" the pooler (with classifier_activation) and ``num_labels`` outputs."""
    h, b, i, n, e = c.hidden_size, c.intra_bottleneck_size, c.intermediate_size, c.num_hidden_layers, c.embedding_size
    qk_in = b
    v_in = b if c.use_bottleneck_attention else h
    shared = 2 * s * h * b if (c.key_query_shared_bottleneck and not c.use_bottleneck_attention) else 0
    attention_fc = 2 * s * b * (2 * qk_in + v_in) + shared
    ffn_fc = 2 * s * h * b * 2 + 2 * s * b * b + c.num_feedforward_networks * 2 * s * b * i * 2
    width = e * (3 if c.trigram_input else 1)
    projection = 2 * s * width * h if (c.trigram_input or e != h) else 0
    pooler = 2.0 * h * h * (s if pooler_every_token else 1) if c.classifier_activation else 0.0
    return {"embedding": float(projection), "attention_fc": float(n * attention_fc),
            "attention_softmax_qkv": float(n * 2 * 2 * s * s * b), "ffn_fc": float(n * ffn_fc),
            "classifier": pooler + 2.0 * h * num_labels}


FAMILY = Family(
    style="mobilebert", prefix="mobilebert.", encoder_table=encoder_table, tied=BERT_TIED, config_family="mobilebert",
    config_keys=("classifier_dropout", "normalization_type", "true_hidden_size", "use_bottleneck"),
    detect=".bottleneck.input.dense.", config_head_rows=head_rows, torch_classes=torch_classes("MobileBert"),
    heads_without_pooler=HEADS_WITHOUT_POOLER, from_transformers=from_transformers, to_transformers=to_transformers,
    # transformers' released mobilebert-uncased: 24 layers of a 512 body around a 128 bottleneck, 4 heads, 4 stacked
    # FFNs of 512, ReLU, no dropout but the attention's, the 3-gram embedding of 128, no pooler dense
    presets={"mobilebert-uncased": dict(BERT_GROUPS, family="mobilebert", hidden_size=512, embedding_size=128,
                                        num_hidden_layers=24, num_attention_heads=4, intermediate_size=512,
                                        hidden_act="relu", hidden_dropout_prob=0.0, intra_bottleneck_size=128,
                                        num_feedforward_networks=4, classifier_activation=False)},
)
