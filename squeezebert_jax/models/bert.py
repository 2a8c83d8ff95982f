"""BERT (Devlin et al., 2019): the shared model of ``model.py`` with every group count 1, under transformers'
``BertModel`` names (``bert.encoder.layer.{i}.attention.self.query``, Linear weights). Its presets: BERT-base, the 24
BERT miniatures of Turc et al. (2019) and TinyBERT's 4/312 student (Jiao et al., 2019)."""

from __future__ import annotations

from squeezebert_jax.models.family import (
    BERT_GROUPS,
    BERT_TIED,
    HEADS_WITHOUT_POOLER,
    Family,
    absolute_positions_only,
    bert_like_to_transformers,
    dense_rows,
    embedding_rows,
    layer_rows,
    torch_classes,
)

NAMES = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
         "intermediate.dense", "output.dense")
NORMS = ("attention.output.LayerNorm", "output.LayerNorm")
ALIASES = {"bert-tiny": "bert-L2-H128", "bert-mini": "bert-L4-H256", "bert-small": "bert-L4-H512",
           "bert-medium": "bert-L8-H512", "bert-base": "bert-base-uncased"}


def encoder_table(config):
    return (embedding_rows(config) + layer_rows(config, "encoder.layer", NAMES, NORMS, "linear_as_conv")
            + dense_rows("pooler.dense", "pooler/dense"))


def from_transformers(d: dict, kw: dict, source: str) -> dict:
    absolute_positions_only(d, source)
    return kw | BERT_GROUPS | {"embedding_size": kw.get("hidden_size", 768)}


def _miniatures() -> dict[str, dict]:
    """bert-L{2..12}-H{128..768}: heads H/64, FFN 4H (Turc et al.)."""
    return {f"bert-L{n}-H{h}": dict(BERT_GROUPS, num_hidden_layers=n, hidden_size=h, embedding_size=h,
                                    num_attention_heads=h // 64, intermediate_size=4 * h)
            for n in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)}


FAMILY = Family(
    style="bert", prefix="bert.", encoder_table=encoder_table, tied=BERT_TIED, detect=".attention.self.query.",
    config_keys=("classifier_dropout", "position_embedding_type", "use_cache"),
    torch_classes=torch_classes("Bert"), heads_without_pooler=HEADS_WITHOUT_POOLER,
    from_transformers=from_transformers,
    to_transformers=lambda config, d: bert_like_to_transformers(config, d, keep_embedding_size=False),
    presets={"bert-base-uncased": dict(BERT_GROUPS),
             # TinyBERT General 4L-312D: BERT, 12 heads of 26, FFN 1200
             "tinybert-4-312": dict(BERT_GROUPS, num_hidden_layers=4, hidden_size=312, embedding_size=312,
                                    num_attention_heads=12, intermediate_size=1200),
             **_miniatures()},
)
