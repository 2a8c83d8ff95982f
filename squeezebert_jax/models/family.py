"""What a family file declares (``Family``), and the name-table rows the families build theirs from.

A family is the shared model of ``model.py`` (embeddings, attention core, the grouped 1x1 / dense projections, the
encoder under the layer scan, the heads) with its switches (``SqueezeBertConfig.family`` and its properties), plus
what this file's ``Family`` holds: the transformers names of every parameter (``encoder_table``, ``head_table``), the
transformers classes of our heads, its config's translation both ways and its presets. ``convert.py`` reads tables,
never family names.

A row is ``(transformers key, our parameter path, kind)``; kinds: "copy"; "linear" (torch ``[out, in]`` <-> our
``[in, out]``); "conv" (torch Conv1d ``[Cout, Cin/G, 1]`` <-> our ``[G, Cin/G, Cout/G]``); "linear_as_conv" (torch
Linear ``[Cout, Cin]`` <-> our ``[1, Cin, Cout]``, a BERT layer's projection as our grouped one with G = 1); "empty"
(a ``[0, vocab_size]`` tensor transformers holds and we have no parameter for: dropped on reading, written back empty).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from squeezebert_jax.errors import InputError

Row = tuple[str, str, str]
GROUP_FIELDS = ("q_groups", "k_groups", "v_groups", "post_attention_groups", "intermediate_groups", "output_groups")
BERT_GROUPS = dict.fromkeys(GROUP_FIELDS, 1)
# our layer's parts (SqueezeBertLayer) in the order of their torch names below
LAYER_PARTS = ("attention/query", "attention/key", "attention/value", "post_attention/conv1d", "intermediate/conv1d",
               "output/conv1d")
LAYER_NORMS = ("post_attention/layernorm", "output/layernorm")
# BERT's heads, under BERT's names (SqueezeBERT's, MobileBERT's, and ELECTRA's discriminator head)
HEAD_TABLE: dict[str, list[Row]] = {
    "mlm": [("cls.predictions.transform.dense.weight", "cls/predictions/transform/dense/kernel", "linear"),
            ("cls.predictions.transform.dense.bias", "cls/predictions/transform/dense/bias", "copy"),
            ("cls.predictions.transform.LayerNorm.weight", "cls/predictions/transform/LayerNorm/scale", "copy"),
            ("cls.predictions.transform.LayerNorm.bias", "cls/predictions/transform/LayerNorm/bias", "copy"),
            ("cls.predictions.bias", "cls/predictions/bias", "copy")],
    "sop": [("cls.seq_relationship.weight", "cls/seq_relationship/kernel", "linear"),
            ("cls.seq_relationship.bias", "cls/seq_relationship/bias", "copy")],
    "classifier": [("classifier.weight", "classifier/kernel", "linear"),
                   ("classifier.bias", "classifier/bias", "copy")],
    "qa": [("qa_outputs.weight", "qa_outputs/kernel", "linear"), ("qa_outputs.bias", "qa_outputs/bias", "copy")],
    "rtd": [("discriminator_predictions.dense.weight", "rtd/dense/kernel", "linear"),  # ELECTRA's names
            ("discriminator_predictions.dense.bias", "rtd/dense/bias", "copy"),
            ("discriminator_predictions.dense_prediction.weight", "rtd/prediction/kernel", "linear"),
            ("discriminator_predictions.dense_prediction.bias", "rtd/prediction/bias", "copy")],
}
# which parts of HEAD_TABLE (or a family's own) each of our head classes adds to the encoder
HEAD_PARTS = {
    "SqueezeBertModel": (),
    "SqueezeBertForMaskedLM": ("mlm",),
    "SqueezeBertForPreTraining": ("mlm", "sop"),
    "SqueezeBertForSequenceClassification": ("classifier",),
    "SqueezeBertForTokenClassification": ("classifier",),
    "SqueezeBertForMultipleChoice": ("classifier",),
    "SqueezeBertForQuestionAnswering": ("qa",),
    "SqueezeBertForReplacedTokenDetection": ("rtd",),
}
# BERT's tied MLM decoder: its weight (= the word embeddings) and bias (= cls.predictions.bias)
BERT_TIED = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.predictions.bias")
# transformers builds BERT's token-level heads and MLM with add_pooling_layer=False: their checkpoints have no pooler
HEADS_WITHOUT_POOLER = ("SqueezeBertForMaskedLM", "SqueezeBertForTokenClassification",
                        "SqueezeBertForQuestionAnswering")


def torch_classes(prefix: str, **overrides: str | None) -> dict[str, str]:
    """Our head classes -> transformers' (``SqueezeBertForX`` -> ``{prefix}ForX``); an override of None: transformers
    has no such class for the family. The replaced-token-detection head is ELECTRA's only."""
    out = {h: h.replace("SqueezeBert", prefix) for h in HEAD_PARTS if h != "SqueezeBertForReplacedTokenDetection"}
    for ours, theirs in overrides.items():
        if theirs is None:
            out.pop(ours, None)
        else:
            out[ours] = theirs
    return out


@dataclasses.dataclass(frozen=True)
class Family:
    """One transformers layout of our model: its names, classes, config translation and presets."""

    style: str  # transformers' model_type, and the name convert.py and export use for the layout
    prefix: str  # the base model's attribute in transformers' head classes ("bert.")
    encoder_table: Callable[[Any], list[Row]]  # config -> the base model's rows (keys without the prefix)
    torch_classes: dict[str, str]  # our head class -> transformers'
    tied: tuple[str, str | None, str | None]  # the tied MLM decoder's weight and bias keys, and the bias it ties to
    detect: str | None = None  # a key substring only this layout's state_dicts hold (None: the config decides)
    keys_of: str | None = None  # the family whose state_dict keys are this one's too (ELECTRA's are BERT's)
    config_family: str = ""  # its configs' SqueezeBertConfig.family ("": SqueezeBERT's and BERT's: groups tell them)
    grouped: bool = False  # its layers may be grouped (SqueezeBERT's); any other layout's have every group count 1
    head_table: dict[str, list[Row]] = dataclasses.field(default_factory=lambda: HEAD_TABLE)
    head_parts: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # HEAD_PARTS overrides
    heads_without_pooler: tuple[str, ...] = ()  # heads transformers builds with no pooler
    from_transformers: Callable[[dict, dict, str], dict] | None = None  # (their dict, our fields of it, source)
    to_transformers: Callable[[Any, dict], dict] | None = None  # (config, our dict) -> their dict
    presets: dict[str, dict] = dataclasses.field(default_factory=dict)  # name -> SqueezeBertConfig fields
    config_head_rows: Callable[[Any, str], list[Row]] | None = None  # (config, part) -> rows that depend on the config
    # transformers' config keys of its own (not SqueezeBertConfig fields): none is a misspelling of a field, and each
    # misspelt is refused as a field's is (model._check_near_misses)
    config_keys: tuple[str, ...] = ()

    def parts(self, head: str) -> tuple[str, ...]:
        return self.head_parts.get(head, HEAD_PARTS[head])

    def head_rows(self, config, part: str) -> list[Row]:
        """The rows of head part ``part`` for ``config``."""
        return self.head_table[part] + (self.config_head_rows(config, part) if self.config_head_rows else [])


# --------------------------------------------------------------------------------------------------
# Rows the families share
# --------------------------------------------------------------------------------------------------

def dense_rows(theirs: str, ours: str, kind: str = "linear") -> list[Row]:
    """A dense layer's weight and bias (``theirs.weight`` -> ``ours/kernel``)."""
    return [(f"{theirs}.weight", f"{ours}/kernel", kind), (f"{theirs}.bias", f"{ours}/bias", "copy")]


def norm_rows(theirs: str, ours: str) -> list[Row]:
    """A LayerNorm's (or NoNorm's) weight and bias (``theirs.weight`` -> ``ours/scale``)."""
    return [(f"{theirs}.weight", f"{ours}/scale", "copy"), (f"{theirs}.bias", f"{ours}/bias", "copy")]


def embedding_rows(config) -> list[Row]:
    """BERT's embeddings: word, position, token type (none for DistilBERT), LayerNorm."""
    t = [("embeddings.word_embeddings.weight", "embeddings/word_embeddings/embedding", "copy"),
         ("embeddings.position_embeddings.weight", "embeddings/position_embeddings/embedding", "copy")]
    if config.type_vocab_size:
        t.append(("embeddings.token_type_embeddings.weight", "embeddings/token_type_embeddings/embedding", "copy"))
    return t + norm_rows("embeddings.LayerNorm", "embeddings/LayerNorm")


def layer_rows(config, layer: str, names: tuple[str, ...], norms: tuple[str, str], kind: str) -> list[Row]:
    """Our ``SqueezeBertLayer``s (one for a shared-layer family) under transformers' ``{layer}.{i}.{name}``: ``names``
    of ``LAYER_PARTS`` in order, ``norms`` of ``LAYER_NORMS``."""
    t = []
    for i in range(1 if config.shared_layers else config.num_hidden_layers):
        for ours, theirs in zip(LAYER_PARTS, names, strict=True):
            t += dense_rows(f"{layer}.{i}.{theirs}", f"encoder/layers/{i}/{ours}", kind)
        for ours, theirs in zip(LAYER_NORMS, norms, strict=True):
            t += norm_rows(f"{layer}.{i}.{theirs}", f"encoder/layers/{i}/{ours}")
    return t


def absolute_positions_only(d: dict, source: str) -> None:
    if d.get("position_embedding_type", "absolute") != "absolute":
        raise InputError(f"{source}: position_embedding_type {d['position_embedding_type']!r} is not supported (only "
                         "absolute)")


def bert_like_to_transformers(config, d: dict, keep_embedding_size: bool = True) -> dict:
    """Our config dict ``d`` as a BERT-layout transformers config (BERT, ALBERT, ELECTRA, MobileBERT): no group
    counts or family, absolute positions (a grouped config never gets here: its style is "squeezebert")."""
    drop = (*GROUP_FIELDS, "family", *(() if keep_embedding_size else ("embedding_size",)))
    return {k: v for k, v in d.items() if k not in drop} | {"position_embedding_type": "absolute"}
