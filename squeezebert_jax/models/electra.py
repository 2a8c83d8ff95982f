"""ELECTRA (Clark et al., 2020): family "electra". BERT's layers (every group count 1), embeddings of
``embedding_size`` projected to ``hidden_size`` when smaller (``embeddings/project``), no pooler of its own (the
classifiers' dense layer with a GELU plays its part: ``classifier.dense`` for sequence classification,
``sequence_summary.summary`` for multiple choice), and the replaced-token-detection head
(``SqueezeBertForReplacedTokenDetection``, transformers' ``ElectraForPreTraining``). Replaced-token-detection
pretraining (``model.ElectraPreTraining``: a generator of ``generator_config``'s size sharing the embeddings, any
family as the discriminator) is ``train/pretrain.py --config.objective=rtd``."""

from __future__ import annotations

from squeezebert_jax.models import bert
from squeezebert_jax.models.family import (
    BERT_GROUPS,
    HEAD_TABLE,
    Family,
    absolute_positions_only,
    bert_like_to_transformers,
    dense_rows,
    embedding_rows,
    layer_rows,
    norm_rows,
    torch_classes,
)

# the generator's MLM (generator_lm_head tied to the word embeddings) and the classifiers' dense layers, which are
# our pooler; no SOP head in transformers' ELECTRA (read under our name, never written)
HEADS = {"mlm": [*dense_rows("generator_predictions.dense", "cls/predictions/transform/dense"),
                 *norm_rows("generator_predictions.LayerNorm", "cls/predictions/transform/LayerNorm"),
                 ("generator_lm_head.bias", "cls/predictions/bias", "copy")],
         "sop": dense_rows("seq_relationship", "cls/seq_relationship"),
         "classifier_dense": [*dense_rows("classifier.dense", "transformer/pooler/dense"),
                              *dense_rows("classifier.out_proj", "classifier")],
         "summary": dense_rows("sequence_summary.summary", "transformer/pooler/dense")}


def encoder_table(config):
    t = embedding_rows(config)
    if config.factorized_embeddings:
        t += dense_rows("embeddings_project", "embeddings/project")
    return t + layer_rows(config, "encoder.layer", bert.NAMES, bert.NORMS, "linear_as_conv")


def from_transformers(d: dict, kw: dict, source: str) -> dict:
    absolute_positions_only(d, source)
    return {"embedding_size": 128} | kw | BERT_GROUPS | {"family": "electra"}


FAMILY = Family(
    style="electra", prefix="electra.", encoder_table=encoder_table, config_family="electra",
    detect=None, keys_of="bert",  # BERT's keys: the config decides
    config_keys=("classifier_dropout", "position_embedding_type", "summary_activation", "summary_last_dropout",
                 "summary_type", "summary_use_proj", "use_cache"),
    tied=("generator_lm_head.weight", None, None), head_table=HEAD_TABLE | HEADS,
    head_parts={"SqueezeBertForSequenceClassification": ("classifier_dense",),
                "SqueezeBertForMultipleChoice": ("summary", "classifier")},
    torch_classes=torch_classes("Electra", SqueezeBertForPreTraining="ElectraForMaskedLM",  # without SOP
                                SqueezeBertForReplacedTokenDetection="ElectraForPreTraining"),
    from_transformers=from_transformers, to_transformers=bert_like_to_transformers,
    # ELECTRA-Small's discriminator: 12 x 256, 4 heads, FFN 1024, embeddings 128
    presets={"electra-small-discriminator": dict(BERT_GROUPS, family="electra", embedding_size=128, hidden_size=256,
                                                 num_attention_heads=4, intermediate_size=1024)},
)
