"""SqueezeBERT (Iandola et al., 2020): the shared model of ``model.py`` with its grouped 1x1 convolutions (G = 4 for
Q, K, V, FFN expand and contract; 1 for the post-attention projection), under transformers' ``SqueezeBertModel`` names
(``transformer.encoder.layers.{i}.attention.query``, Conv1d weights ``[Cout, Cin/G, 1]``)."""

from __future__ import annotations

from squeezebert_jax.models.family import BERT_TIED, Family, dense_rows, embedding_rows, layer_rows, torch_classes

NAMES = ("attention.query", "attention.key", "attention.value", "post_attention.conv1d", "intermediate.conv1d",
         "output.conv1d")
NORMS = ("post_attention.layernorm", "output.layernorm")


def encoder_table(config):
    return (embedding_rows(config) + layer_rows(config, "encoder.layers", NAMES, NORMS, "conv")
            + dense_rows("pooler.dense", "pooler/dense"))


FAMILY = Family(
    style="squeezebert", prefix="transformer.", encoder_table=encoder_table, tied=BERT_TIED, detect="encoder.layers.",
    grouped=True,
    # the pretraining head is SqueezeBERT's MLM class with BERT's SOP head under BERT's names, as the released
    # squeezebert-uncased checkpoint holds it
    torch_classes=torch_classes("SqueezeBert", SqueezeBertForPreTraining="SqueezeBertForMaskedLM"),
    presets={"squeezebert-uncased": dict(vocab_size=30528)},  # as released: groups q/k/v 4, post-attention 1, FFN 4/4
)
