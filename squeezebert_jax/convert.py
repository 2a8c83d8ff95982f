"""Exact weight conversion between transformers' PyTorch SqueezeBERT / BERT and our Flax NNX model.

The mapping is an explicit name table (``_table``) plus a per-tensor reshape (``_to_flax`` / ``_to_torch``), dict to
dict: ``torch_to_flat`` (state_dict -> our parameter paths, with the torch names and shapes for messages) and
``flat_to_torch``. No model is built here: ``io.build_model`` builds it and checks that every parameter is found,
every tensor used and every shape right, naming the tensor otherwise. Known non-parameter buffers
(``embeddings.position_ids``) and the tied MLM decoder (``cls.predictions.decoder.*``, which must equal the word
embeddings / MLM bias) are recognised and skipped.

Layouts: torch Conv1d weight ``[Cout, Cin/G, 1]`` <-> our ``[G, Cin/G, Cout/G]``; torch Linear ``[out, in]``
(BERT's dense layers are the G=1 case) <-> ``[in, out]``; LayerNorm ``weight`` <-> ``scale``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import numpy as np
from flax import nnx

from squeezebert_jax.model import HEADS, SqueezeBertConfig
from squeezebert_jax.errors import InputError

SKIPPED_BUFFERS = ("embeddings.position_ids",)

# What each head class adds on top of the encoder (+ pooler), as (torch key, flax path, kind).
_HEAD_TABLE = {
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
# ALBERT's heads under their transformers names (AlbertForPreTraining: predictions.*, sop_classifier.classifier.*)
_ALBERT_HEAD_TABLE = {
    "mlm": [("predictions.dense.weight", "cls/predictions/transform/dense/kernel", "linear"),
            ("predictions.dense.bias", "cls/predictions/transform/dense/bias", "copy"),
            ("predictions.LayerNorm.weight", "cls/predictions/transform/LayerNorm/scale", "copy"),
            ("predictions.LayerNorm.bias", "cls/predictions/transform/LayerNorm/bias", "copy"),
            ("predictions.bias", "cls/predictions/bias", "copy")],
    "sop": [("sop_classifier.classifier.weight", "cls/seq_relationship/kernel", "linear"),
            ("sop_classifier.classifier.bias", "cls/seq_relationship/bias", "copy")],
}
# DistilBERT's heads: its MLM (vocab_transform, vocab_layer_norm, vocab_projector tied to the word embeddings) and
# pre_classifier, which is our pooler (a ReLU where BERT's has tanh); DistilBERT has no SOP head in transformers: a
# pretraining model's is read under our own name and never written.
_DISTILBERT_HEAD_TABLE = {
    "mlm": [("vocab_transform.weight", "cls/predictions/transform/dense/kernel", "linear"),
            ("vocab_transform.bias", "cls/predictions/transform/dense/bias", "copy"),
            ("vocab_layer_norm.weight", "cls/predictions/transform/LayerNorm/scale", "copy"),
            ("vocab_layer_norm.bias", "cls/predictions/transform/LayerNorm/bias", "copy"),
            ("vocab_projector.bias", "cls/predictions/bias", "copy")],
    "sop": [("seq_relationship.weight", "cls/seq_relationship/kernel", "linear"),
            ("seq_relationship.bias", "cls/seq_relationship/bias", "copy")],
    "pre_classifier": [("pre_classifier.weight", "transformer/pooler/dense/kernel", "linear"),
                       ("pre_classifier.bias", "transformer/pooler/dense/bias", "copy")],
}
# ELECTRA's heads: the generator's MLM (generator_lm_head tied to the word embeddings), and the classifiers' dense
# layers, which are our pooler (a GELU where BERT's has tanh): classifier.dense (sequence classification) and
# sequence_summary.summary (multiple choice); no SOP head in transformers' ELECTRA (read under our name, never written)
_ELECTRA_HEAD_TABLE = {
    "mlm": [("generator_predictions.dense.weight", "cls/predictions/transform/dense/kernel", "linear"),
            ("generator_predictions.dense.bias", "cls/predictions/transform/dense/bias", "copy"),
            ("generator_predictions.LayerNorm.weight", "cls/predictions/transform/LayerNorm/scale", "copy"),
            ("generator_predictions.LayerNorm.bias", "cls/predictions/transform/LayerNorm/bias", "copy"),
            ("generator_lm_head.bias", "cls/predictions/bias", "copy")],
    "sop": _DISTILBERT_HEAD_TABLE["sop"],
    "classifier_dense": [("classifier.dense.weight", "transformer/pooler/dense/kernel", "linear"),
                         ("classifier.dense.bias", "transformer/pooler/dense/bias", "copy"),
                         ("classifier.out_proj.weight", "classifier/kernel", "linear"),
                         ("classifier.out_proj.bias", "classifier/bias", "copy")],
    "summary": [("sequence_summary.summary.weight", "transformer/pooler/dense/kernel", "linear"),
                ("sequence_summary.summary.bias", "transformer/pooler/dense/bias", "copy")],
}
# the base model's prefix in a head class's state_dict, and the first key parts of head tensors, per style
_PREFIX = {"squeezebert": "transformer.", "bert": "bert.", "albert": "albert.", "distilbert": "distilbert.",
           "electra": "electra.", "mobilebert": "mobilebert."}
_HEAD_KEYS = ("cls", "classifier", "qa_outputs", "predictions", "sop_classifier", "pre_classifier", "vocab_transform",
              "vocab_layer_norm", "vocab_projector", "seq_relationship", "generator_predictions", "generator_lm_head",
              "discriminator_predictions", "sequence_summary")
# a tied MLM decoder (dropped on reading, after checking it equals what it is tied to), per style
_TIED = {"squeezebert": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.predictions.bias"),
         "bert": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.predictions.bias"),
         "albert": ("predictions.decoder.weight", "predictions.decoder.bias", "predictions.bias"),
         "distilbert": ("vocab_projector.weight", None, None),
         "electra": ("generator_lm_head.weight", None, None),
         "mobilebert": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.predictions.bias")}
_HEAD_PARTS = {
    "SqueezeBertModel": (),
    "SqueezeBertForMaskedLM": ("mlm",),
    "SqueezeBertForPreTraining": ("mlm", "sop"),
    "SqueezeBertForSequenceClassification": ("classifier",),
    "SqueezeBertForTokenClassification": ("classifier",),
    "SqueezeBertForMultipleChoice": ("classifier",),
    "SqueezeBertForQuestionAnswering": ("qa",),
    "SqueezeBertForReplacedTokenDetection": ("rtd",),
}
# transformers class names (per model_type) for each of our heads; PreTraining is BERT's, or SqueezeBERT's MLM
# class carrying the SOP head under BERT's name (as the released squeezebert-uncased checkpoint does).
_TORCH_ARCH = {
    "squeezebert": {h: h for h in HEADS} | {"SqueezeBertForPreTraining": "SqueezeBertForMaskedLM"},
    "bert": {h: h.replace("SqueezeBert", "Bert") for h in HEADS},
    "albert": {h: h.replace("SqueezeBert", "Albert") for h in HEADS},
    "distilbert": {h: h.replace("SqueezeBert", "DistilBert") for h in HEADS}
    | {"SqueezeBertForPreTraining": "DistilBertForMaskedLM"},  # written without its SOP head
    "electra": {h: h.replace("SqueezeBert", "Electra") for h in HEADS}
    | {"SqueezeBertForPreTraining": "ElectraForMaskedLM",  # written without its SOP head
       "SqueezeBertForReplacedTokenDetection": "ElectraForPreTraining"},
    "mobilebert": {h: h.replace("SqueezeBert", "MobileBert") for h in HEADS
                   if h != "SqueezeBertForReplacedTokenDetection"},  # transformers has no MobileBERT discriminator
}


def _encoder_table(config: SqueezeBertConfig, style: str) -> list[tuple[str, str, str]]:
    """(torch key without the base-model prefix, flax path under ``transformer/``, kind)."""
    if style == "mobilebert":
        from squeezebert_jax.models import mobilebert

        return mobilebert.encoder_table(config)
    t = [("embeddings.word_embeddings.weight", "embeddings/word_embeddings/embedding", "copy"),
         ("embeddings.position_embeddings.weight", "embeddings/position_embeddings/embedding", "copy"),
         ("embeddings.token_type_embeddings.weight", "embeddings/token_type_embeddings/embedding", "copy"),
         ("embeddings.LayerNorm.weight", "embeddings/LayerNorm/scale", "copy"),
         ("embeddings.LayerNorm.bias", "embeddings/LayerNorm/bias", "copy")]
    if not config.type_vocab_size:
        del t[2]
    if style == "electra" and config.factorized_embeddings:
        t += [("embeddings_project.weight", "embeddings/project/kernel", "linear"),
              ("embeddings_project.bias", "embeddings/project/bias", "copy")]
    if style == "distilbert":  # no pooler in the base model: the classifiers' pre_classifier (a head part)
        names = {"attention/query": "attention.q_lin", "attention/key": "attention.k_lin",
                 "attention/value": "attention.v_lin", "post_attention/conv1d": "attention.out_lin",
                 "intermediate/conv1d": "ffn.lin1", "output/conv1d": "ffn.lin2"}
        norms = {"post_attention/layernorm": "sa_layer_norm", "output/layernorm": "output_layer_norm"}
        layer, kind = "transformer.layer", "linear_as_conv"
    elif style == "albert":  # one shared layer (group 0, layer 0), the embeddings' projection in the encoder
        t += [("encoder.embedding_hidden_mapping_in.weight", "embeddings/project/kernel", "linear"),
              ("encoder.embedding_hidden_mapping_in.bias", "embeddings/project/bias", "copy")]
        names = {"attention/query": "attention.query", "attention/key": "attention.key",
                 "attention/value": "attention.value", "post_attention/conv1d": "attention.dense",
                 "intermediate/conv1d": "ffn", "output/conv1d": "ffn_output"}
        norms = {"post_attention/layernorm": "attention.LayerNorm", "output/layernorm": "full_layer_layer_norm"}
        layer, kind = "encoder.albert_layer_groups.0.albert_layers", "linear_as_conv"
    elif style == "squeezebert":
        names = {"attention/query": "attention.query", "attention/key": "attention.key",
                 "attention/value": "attention.value", "post_attention/conv1d": "post_attention.conv1d",
                 "intermediate/conv1d": "intermediate.conv1d", "output/conv1d": "output.conv1d"}
        norms = {"post_attention/layernorm": "post_attention.layernorm", "output/layernorm": "output.layernorm"}
        layer, kind = "encoder.layers", "conv"
    else:  # BERT: the same layers as nn.Linear, G = 1
        names = {"attention/query": "attention.self.query", "attention/key": "attention.self.key",
                 "attention/value": "attention.self.value", "post_attention/conv1d": "attention.output.dense",
                 "intermediate/conv1d": "intermediate.dense", "output/conv1d": "output.dense"}
        norms = {"post_attention/layernorm": "attention.output.LayerNorm", "output/layernorm": "output.LayerNorm"}
        layer, kind = "encoder.layer", "linear_as_conv"
    for i in range(1 if config.shared_layers else config.num_hidden_layers):
        for ours, theirs in names.items():
            t.append((f"{layer}.{i}.{theirs}.weight", f"encoder/layers/{i}/{ours}/kernel", kind))
            t.append((f"{layer}.{i}.{theirs}.bias", f"encoder/layers/{i}/{ours}/bias", "copy"))
        for ours, theirs in norms.items():
            t.append((f"{layer}.{i}.{theirs}.weight", f"encoder/layers/{i}/{ours}/scale", "copy"))
            t.append((f"{layer}.{i}.{theirs}.bias", f"encoder/layers/{i}/{ours}/bias", "copy"))
    if not config.pooler_in_heads:
        pooler = "pooler" if style == "albert" else "pooler.dense"
        t.append((f"{pooler}.weight", "pooler/dense/kernel", "linear"))
        t.append((f"{pooler}.bias", "pooler/dense/bias", "copy"))
    return t


def _table(config: SqueezeBertConfig, head: str, style: str) -> list[tuple[str, str, str]]:
    """Full (torch key, flax path, kind) table for ``head``; torch keys carry the head-class prefix."""
    prefix = "" if head == "SqueezeBertModel" else _PREFIX[style]
    fprefix = "" if head == "SqueezeBertModel" else "transformer/"
    rows = [(prefix + k, fprefix + p, kind) for k, p, kind in _encoder_table(config, style)]
    for part in _head_parts(head, style):
        rows += _head_table(style)[part]
    return rows


def _head_table(style: str) -> dict[str, list[tuple[str, str, str]]]:
    if style == "mobilebert":  # BERT's heads, and the MLM decoder's dense for the channels past embedding_size
        from squeezebert_jax.models.mobilebert import MLM_DENSE_ROW

        return _HEAD_TABLE | {"mlm": _HEAD_TABLE["mlm"] + [MLM_DENSE_ROW]}
    return _HEAD_TABLE | {"albert": _ALBERT_HEAD_TABLE, "distilbert": _DISTILBERT_HEAD_TABLE,
                          "electra": _ELECTRA_HEAD_TABLE}.get(style, {})


def _head_parts(head: str, style: str) -> tuple[str, ...]:
    if style == "distilbert" and head in ("SqueezeBertForSequenceClassification", "SqueezeBertForMultipleChoice"):
        return ("pre_classifier", "classifier")  # its pooler is the head's own
    if style == "electra" and head == "SqueezeBertForSequenceClassification":
        return ("classifier_dense",)
    if style == "electra" and head == "SqueezeBertForMultipleChoice":
        return ("summary", "classifier")
    return _HEAD_PARTS[head]


def _groups_of(path: str, config: SqueezeBertConfig) -> int:
    for ours, field in (("attention/query", "q_groups"), ("attention/key", "k_groups"),
                        ("attention/value", "v_groups"), ("post_attention", "post_attention_groups"),
                        ("intermediate", "intermediate_groups"), ("output/conv1d", "output_groups")):
        if f"/{ours}" in "/" + path:
            return getattr(config, field)
    raise KeyError(path)


def _to_flax(x: np.ndarray, kind: str, groups: int) -> np.ndarray:
    if kind == "copy":
        return x
    if kind == "linear":
        return x.T
    if kind == "linear_as_conv":
        x = x[..., None]
    cout, cin_g, _ = x.shape  # [Cout, Cin/G, 1] -> [G, Cout/G, Cin/G] -> [G, Cin/G, Cout/G]
    return x[..., 0].reshape(groups, cout // groups, cin_g).transpose(0, 2, 1)


def _to_torch(x: np.ndarray, kind: str, groups: int) -> np.ndarray:
    if kind == "copy":
        return x
    if kind == "linear":
        return x.T
    g, cin_g, cout_g = x.shape
    w = x.transpose(0, 2, 1).reshape(g * cout_g, cin_g)
    return w if kind == "linear_as_conv" else w[..., None]


def _expected_torch_shape(flax_shape, kind, groups):
    if kind == "copy":
        return tuple(flax_shape)
    if kind == "linear":
        return tuple(flax_shape[::-1])
    g, cin_g, cout_g = flax_shape
    return (g * cout_g, cin_g) if kind == "linear_as_conv" else (g * cout_g, cin_g, 1)


# --------------------------------------------------------------------------------------------------
# Detect what a torch state_dict holds
# --------------------------------------------------------------------------------------------------

def check_head(head, what: str = "head") -> str | None:
    """``head`` (a class or class name of ``HEADS``, or None) as a name; an unknown one is an ``InputError`` that
    lists the valid names (and the closest, for a typo). ``what`` names it for the user, e.g. "--head"."""
    if head is None:
        return None
    if isinstance(head, type):
        head = head.__name__
    if not isinstance(head, str) or head not in HEADS:
        import difflib

        close = difflib.get_close_matches(str(head), list(HEADS), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"unknown {what} {head!r}{hint}; one of {', '.join(sorted(HEADS))}")
    return head


def detect_style(state_dict: Mapping[str, np.ndarray]) -> str:
    """"squeezebert", "bert", "albert", "distilbert" or "mobilebert" from the key names (ELECTRA's are BERT's)."""
    if any(".bottleneck.input.dense." in k for k in state_dict):
        return "mobilebert"
    if any(".albert_layer_groups." in k for k in state_dict):
        return "albert"
    if any(".attention.q_lin." in k for k in state_dict):
        return "distilbert"
    if any(".attention.self.query." in k for k in state_dict):
        return "bert"
    if any("encoder.layers." in k for k in state_dict):
        return "squeezebert"
    raise InputError("state_dict has neither SqueezeBERT (encoder.layers.*), BERT (encoder.layer.*), ALBERT "
                     "(encoder.albert_layer_groups.*), DistilBERT (transformer.layer.*.q_lin) nor MobileBERT "
                     "(encoder.layer.*.bottleneck.*) keys")


def infer_head(state_dict: Mapping[str, np.ndarray], architectures: list[str] | None = None) -> str:
    """Our head class for what the checkpoint holds (``architectures`` disambiguates classifier heads)."""
    arch = (architectures or [""])[0]
    for suffix in ("ForTokenClassification", "ForMultipleChoice", "ForQuestionAnswering"):
        if arch.endswith(suffix) and any(k.split(".")[0] in ("classifier", "qa_outputs") for k in state_dict):
            return "SqueezeBert" + suffix
    if "qa_outputs.weight" in state_dict:
        return "SqueezeBertForQuestionAnswering"
    if "discriminator_predictions.dense.weight" in state_dict:
        return "SqueezeBertForReplacedTokenDetection"
    if "classifier.weight" in state_dict or "classifier.out_proj.weight" in state_dict:
        return "SqueezeBertForSequenceClassification"
    has_mlm = any(k in state_dict for k in ("cls.predictions.transform.dense.weight", "predictions.dense.weight",
                                            "vocab_transform.weight", "generator_predictions.dense.weight"))
    has_sop = any(k in state_dict for k in ("cls.seq_relationship.weight", "sop_classifier.classifier.weight"))
    if has_mlm and has_sop:
        return "SqueezeBertForPreTraining"
    if has_mlm:
        return "SqueezeBertForMaskedLM"
    return "SqueezeBertModel"


def _strip_prefix(state_dict: Mapping[str, np.ndarray], style: str, head: str) -> dict[str, np.ndarray]:
    """Bring keys to the head class's layout: a bare base model's keys gain the prefix, and vice versa."""
    prefix = _PREFIX[style]
    out = {}
    for k, v in state_dict.items():
        base = k[len(prefix):] if k.startswith(prefix) else k
        is_head_key = base.split(".")[0] in _HEAD_KEYS
        out[base if (head == "SqueezeBertModel" or is_head_key) else prefix + base] = v
    return out


# --------------------------------------------------------------------------------------------------
# torch state_dict -> our parameter names
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mapped:
    """A checkpoint's tensors under our parameter paths, and what ``io.build_model`` needs to name them in the
    checkpoint's own terms. Paths are relative to the encoder's owner: the head classes' ``transformer/`` prefix
    is dropped (``encoder/layers/0/attention/query/kernel``, ``classifier/kernel``), so a bare
    ``SqueezeBertModel`` and a head class match the same keys."""

    head: str  # the head class the checkpoint was saved as
    params: dict[str, np.ndarray]  # our path -> array in our layout; a tensor the table does not name keeps its own
    names: dict[str, str] = dataclasses.field(default_factory=dict)  # our path -> the checkpoint's name for it
    shapes: dict[str, tuple] = dataclasses.field(default_factory=dict)  # our path -> the checkpoint tensor's shape
    layouts: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)  # our path -> (kind, groups)

    def name(self, path: str) -> str:
        return self.names.get(path, path)

    def source_shape(self, path: str) -> tuple:
        return tuple(self.shapes.get(path, self.params[path].shape))

    def implied_shape(self, path: str, ours) -> tuple:
        """The shape the checkpoint's tensor must have for our parameter of shape ``ours``."""
        kind, groups = self.layouts.get(path, ("copy", 1))
        return _expected_torch_shape(tuple(ours), kind, groups)


def torch_to_flat(state_dict: Mapping[str, np.ndarray], config: SqueezeBertConfig, head: str | None = None, *,
                  architectures: list[str] | None = None, source: str = "state_dict") -> Mapped:
    """A transformers state_dict (numpy arrays; SqueezeBERT or BERT keys) under our parameter paths.

    Names and reshapes only: no model is built and nothing is checked against one (``io.build_model`` does that).
    The tensors of ``head`` (default: the head the checkpoint holds, inferred from its keys and ``architectures``)
    and of the checkpoint's own head are mapped through the name table; ``names`` gives the torch key of every path
    in those tables (so a missing tensor is reported by its torch name), and tensors the table does not name are
    passed through under their torch keys (reported as unexpected). Known buffers are skipped; a tied MLM
    decoder is checked equal to the embeddings and dropped.
    """
    head = check_head(head)
    sd = {k: np.asarray(v) for k, v in state_dict.items() if not any(k.endswith(b) for b in SKIPPED_BUFFERS)}
    style = detect_style(sd)
    if style == "bert" and config.family == "electra":  # ELECTRA's encoder keys are BERT's: its config says which
        style = "electra"
    if style == "bert" and not config.is_bert:
        raise InputError(f"{source}: BERT-layout weights but the config has groups != 1")
    if _family_mismatch(style, config):
        raise InputError(f"{source}: {style}-layout weights but the config is {config.style}'s (its model_type)")
    saved = infer_head(_strip_prefix(sd, style, "SqueezeBertModel"), architectures)
    head = head or saved
    sd = _strip_prefix(sd, style, head)
    word_key = ("" if head == "SqueezeBertModel" else _PREFIX[style]) + "embeddings.word_embeddings.weight"
    _check_tied(sd, word_key, source, style)
    rows = _table(config, head, style)
    named = {t for t, _, _ in rows}
    rows += [r for part in _head_parts(saved, style) for r in _head_table(style)[part] if r[0] not in named]  # saved
    params, names, shapes, layouts = {}, {}, {}, {}
    for tkey, fpath, kind in rows:
        path = fpath.removeprefix("transformer/")
        names[path] = tkey
        if tkey not in sd:
            continue
        x = sd.pop(tkey)
        groups = _groups_of(fpath, config) if kind in ("conv", "linear_as_conv") else 1
        shapes[path], layouts[path] = tuple(x.shape), (kind, groups)
        try:
            params[path] = _to_flax(x, kind, groups)
        except (ValueError, IndexError):  # a shape no reshape fits: kept as is, build_model reports it
            params[path] = x
    return Mapped(saved, params | sd, names, shapes, layouts)


def _family_mismatch(style: str, config: SqueezeBertConfig) -> bool:
    """A family's weights (ALBERT, DistilBERT, ELECTRA, MobileBERT) convert only with that family's config, and
    back."""
    return bool(style in ("albert", "distilbert", "electra", "mobilebert") or config.family) and style != config.style


def _check_tied(sd: dict, word_key: str, source: str, style: str = "squeezebert") -> None:
    """Drop the tied decoder after checking it really equals the embeddings / MLM bias."""
    weight, bias, mlm_bias = _TIED[style]
    for key, ref in ((weight, word_key), (bias, mlm_bias))[:2 if bias else 1]:
        if key in sd:
            if ref in sd and not np.array_equal(sd[key], sd[ref]):
                raise InputError(f"{source}: {key} differs from {ref}; untied MLM decoders are not supported")
            del sd[key]


# --------------------------------------------------------------------------------------------------
# Flax model -> torch state_dict
# --------------------------------------------------------------------------------------------------

# transformers builds these BERT heads with BertModel(add_pooling_layer=False): their checkpoints have no pooler
_BERT_HEADS_WITHOUT_POOLER = ("SqueezeBertForMaskedLM", "SqueezeBertForTokenClassification",
                              "SqueezeBertForQuestionAnswering")


def head_name(model: nnx.Module) -> str:
    for name, cls in HEADS.items():
        if type(model) is cls:
            return name
    raise TypeError(f"not a SqueezeBERT model: {type(model).__name__}")


def flat_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """Parameters by path, float32, C-contiguous: safetensors.numpy writes a Fortran-ordered array's memory as if it
    were C-ordered (a transposed or column-indexed parameter would come back scrambled)."""
    return {"/".join(str(p) for p in path): np.ascontiguousarray(np.asarray(v.get_value(), np.float32))
            for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def default_style(config: SqueezeBertConfig) -> str:
    """The transformers layout a model is written in unless another is asked: its family's (ALBERT, DistilBERT),
    else SqueezeBERT's (a model with every group 1 may also be written as BERT)."""
    return config.family or "squeezebert"


def flat_to_torch(flat: Mapping[str, np.ndarray], config: SqueezeBertConfig, head: str,
                  style: str | None = None) -> dict[str, np.ndarray]:
    """Our parameters of ``head`` (by path) as a transformers state_dict in SqueezeBERT, BERT or ALBERT keys."""
    style = style or default_style(config)
    if style == "bert" and not config.is_bert:
        raise InputError("only a model with every group count = 1 can be written as BERT")
    if _family_mismatch(style, config):
        raise InputError(f"a {config.style} model cannot be written as {style}")
    flat = dict(flat)
    out = {}
    for tkey, fpath, kind in _table(config, head, style):
        groups = _groups_of(fpath, config) if kind in ("conv", "linear_as_conv") else 1
        out[tkey] = np.ascontiguousarray(_to_torch(np.asarray(flat.pop(fpath)), kind, groups))
    if config.pooler_in_heads:  # no pooler outside the classifiers; no SOP head in transformers' own
        for path in [p for p in flat if "pooler/" in p or p.startswith("cls/seq_relationship/")]:
            del flat[path]
    if flat:
        raise AssertionError(f"parameters with no torch name: {sorted(flat)}")
    if style in ("bert", "albert", "mobilebert") and head in _BERT_HEADS_WITHOUT_POOLER:
        out = {k: v for k, v in out.items() if not k.startswith(f"{_PREFIX[style]}pooler.")}
    return out


def to_torch_state_dict(model: nnx.Module, style: str | None = None) -> dict[str, np.ndarray]:
    """transformers state_dict (numpy float32) of ``model`` in SqueezeBERT or (if all groups are 1) BERT keys."""
    return flat_to_torch(flat_params(model), model.config, head_name(model), style)


def torch_architecture(model: nnx.Module, style: str | None = None) -> str:
    style, head = style or default_style(model.config), head_name(model)
    if head not in _TORCH_ARCH[style]:
        raise InputError(f"transformers has no {style} class for {head}: such a model is kept in our MODEL_DIR "
                         "format only")
    return _TORCH_ARCH[style][head]


# --------------------------------------------------------------------------------------------------
# Reading a transformers checkpoint directory
# --------------------------------------------------------------------------------------------------

def read_torch_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Tensors of a transformers checkpoint (dir, .safetensors or .bin) as float32 numpy.

    ``.bin`` files are read with ``torch.load(weights_only=True)``, never as arbitrary pickles.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        for name in ("model.safetensors", "pytorch_model.bin"):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise FileNotFoundError(f"{path}: no model.safetensors or pytorch_model.bin")
    if path.endswith(".safetensors"):
        from safetensors import safe_open

        out = {}
        try:
            with safe_open(path, framework="np") as f:
                for k in f.keys():
                    out[k] = f.get_tensor(k)
        except Exception as e:  # bfloat16 has no numpy dtype: fall back to torch
            if "bf16" not in str(e).lower() and "bfloat16" not in str(e).lower():
                raise InputError(f"{path}: cannot read safetensors file ({e})") from e
            from safetensors.torch import load_file

            out = {k: v.float().numpy() for k, v in load_file(path).items()}
        return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in out.items()}
    import torch

    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise InputError(f"{path}: not a weights-only PyTorch checkpoint ({e})") from e
    if not isinstance(sd, dict):
        raise InputError(f"{path}: expected a state_dict, got {type(sd).__name__}")
    return {k: (v.float() if v.is_floating_point() else v).numpy() for k, v in sd.items()}
