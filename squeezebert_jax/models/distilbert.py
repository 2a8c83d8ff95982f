"""DistilBERT (Sanh et al., 2019): family "distilbert". BERT's layer (every group count 1) with no token-type
embeddings (``type_vocab_size`` 0: token_type_ids are ignored) and no pooler of its own: the classifiers'
``pre_classifier`` with a ReLU plays its part (``SqueezeBertConfig.pooler_in_heads``); transformers'
``DistilBertModel``, with its own config and parameter names."""

from __future__ import annotations

from squeezebert_jax.errors import InputError
from squeezebert_jax.models.family import (
    BERT_GROUPS,
    HEAD_TABLE,
    Family,
    dense_rows,
    embedding_rows,
    layer_rows,
    norm_rows,
    torch_classes,
)

NAMES = ("attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", "ffn.lin1", "ffn.lin2")
NORMS = ("sa_layer_norm", "output_layer_norm")
# transformers' DistilBertConfig names for our fields
FIELDS = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
          "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
          "attention_dropout": "attention_probs_dropout_prob"}
SHARED_FIELDS = ("vocab_size", "max_position_embeddings", "initializer_range", "pad_token_id")
# its MLM (vocab_transform, vocab_layer_norm, vocab_projector tied to the word embeddings) and pre_classifier, which is
# our pooler; transformers' DistilBERT has no SOP head: a pretraining model's is read under our name, never written
HEADS = {"mlm": [*dense_rows("vocab_transform", "cls/predictions/transform/dense"),
                 *norm_rows("vocab_layer_norm", "cls/predictions/transform/LayerNorm"),
                 ("vocab_projector.bias", "cls/predictions/bias", "copy")],
         "sop": dense_rows("seq_relationship", "cls/seq_relationship"),
         "pre_classifier": dense_rows("pre_classifier", "transformer/pooler/dense")}


def encoder_table(config):  # no pooler in the base model: the classifiers' pre_classifier (a head part)
    return embedding_rows(config) + layer_rows(config, "transformer.layer", NAMES, NORMS, "linear_as_conv")


def from_transformers(d: dict, kw: dict, source: str) -> dict:
    if d.get("sinusoidal_pos_embds"):
        raise InputError(f"{source}: sinusoidal_pos_embds is not supported (learned positions only, as the released "
                         "DistilBERTs)")
    kw = {k: v for k, v in kw.items() if k in (*SHARED_FIELDS, "id2label")}
    kw |= {ours: d[theirs] for theirs, ours in FIELDS.items() if theirs in d}
    return kw | BERT_GROUPS | dict(family="distilbert", type_vocab_size=0, layer_norm_eps=1e-12,
                                   embedding_size=kw.get("hidden_size", 768))


def to_transformers(config, d: dict) -> dict:
    return ({theirs: d[ours] for theirs, ours in FIELDS.items()} | {k: d[k] for k in SHARED_FIELDS}
            | {"sinusoidal_pos_embds": False})


FAMILY = Family(
    style="distilbert", prefix="distilbert.", encoder_table=encoder_table, detect=".attention.q_lin.",
    config_family="distilbert", config_keys=(*FIELDS, "qa_dropout", "seq_classif_dropout", "sinusoidal_pos_embds"),
    tied=("vocab_projector.weight", None, None), head_table=HEAD_TABLE | HEADS,
    head_parts={"SqueezeBertForSequenceClassification": ("pre_classifier", "classifier"),
                "SqueezeBertForMultipleChoice": ("pre_classifier", "classifier")},  # its pooler is the head's own
    torch_classes=torch_classes("DistilBert", SqueezeBertForPreTraining="DistilBertForMaskedLM"),  # without SOP
    from_transformers=from_transformers, to_transformers=to_transformers,
    # DistilBERT: BERT-base's first 6 layers' shape, no token types
    presets={"distilbert-base-uncased": dict(BERT_GROUPS, family="distilbert", num_hidden_layers=6,
                                             type_vocab_size=0)},
)
