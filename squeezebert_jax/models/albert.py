"""ALBERT (Lan et al., 2020): family "albert". BERT's layer (every group count 1) whose one set of weights runs
``num_hidden_layers`` times (``SqueezeBertConfig.shared_layers``: the encoder holds one layer, and under the layer
scan it is the same weights at every step), embeddings of ``embedding_size`` projected to ``hidden_size``
(``factorized_embeddings``: ``embeddings/project``), an MLM transform to ``embedding_size``, and the SOP head;
transformers' ``AlbertModel`` with ``num_hidden_groups = inner_group_num = 1``, as every released ALBERT."""

from __future__ import annotations

from squeezebert_jax.errors import InputError
from squeezebert_jax.models.family import (
    BERT_GROUPS,
    HEAD_TABLE,
    HEADS_WITHOUT_POOLER,
    Family,
    absolute_positions_only,
    bert_like_to_transformers,
    dense_rows,
    embedding_rows,
    layer_rows,
    norm_rows,
    torch_classes,
)

NAMES = ("attention.query", "attention.key", "attention.value", "attention.dense", "ffn", "ffn_output")
NORMS = ("attention.LayerNorm", "full_layer_layer_norm")
# its heads under its names (AlbertForPreTraining: predictions.*, sop_classifier.classifier.*)
HEADS = {"mlm": [*dense_rows("predictions.dense", "cls/predictions/transform/dense"),
                 *norm_rows("predictions.LayerNorm", "cls/predictions/transform/LayerNorm"),
                 ("predictions.bias", "cls/predictions/bias", "copy")],
         "sop": dense_rows("sop_classifier.classifier", "cls/seq_relationship")}


def encoder_table(config):
    return (embedding_rows(config) + dense_rows("encoder.embedding_hidden_mapping_in", "embeddings/project")
            + layer_rows(config, "encoder.albert_layer_groups.0.albert_layers", NAMES, NORMS, "linear_as_conv")
            + dense_rows("pooler", "pooler/dense"))


def from_transformers(d: dict, kw: dict, source: str) -> dict:
    for name in ("num_hidden_groups", "inner_group_num"):
        if d.get(name, 1) != 1:
            raise InputError(f"{source}: {name} {d[name]!r} is not supported (ALBERT with one group of one shared "
                             "layer, as every released ALBERT)")
    absolute_positions_only(d, source)
    return {"embedding_size": 128, "hidden_act": "gelu_new"} | kw | BERT_GROUPS | {"family": "albert"}


def to_transformers(config, d: dict) -> dict:
    return bert_like_to_transformers(config, d) | dict(num_hidden_groups=1, inner_group_num=1,
                                                       classifier_dropout_prob=d["hidden_dropout_prob"])


FAMILY = Family(
    style="albert", prefix="albert.", encoder_table=encoder_table, detect=".albert_layer_groups.",
    config_keys=("classifier_dropout_prob", "inner_group_num", "num_hidden_groups", "position_embedding_type"),
    config_family="albert", tied=("predictions.decoder.weight", "predictions.decoder.bias", "predictions.bias"),
    head_table=HEAD_TABLE | HEADS, torch_classes=torch_classes("Albert"), heads_without_pooler=HEADS_WITHOUT_POOLER,
    from_transformers=from_transformers, to_transformers=to_transformers,
    # ALBERT-base: 12 shared layers of BERT-base's shape, embeddings 128, vocab 30000, gelu_new, no dropout
    presets={"albert-base-v2": dict(BERT_GROUPS, family="albert", vocab_size=30000, embedding_size=128,
                                    hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)},
)
