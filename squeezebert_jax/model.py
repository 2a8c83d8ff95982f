"""SqueezeBERT (Iandola et al., 2020) in Flax NNX: config, modules and task heads.

Numerically this is transformers' PyTorch ``SqueezeBertModel`` family (max |diff| <= 1e-5 in float32, see
tests/test_parity.py). Activations are channels-last ``[batch, seq, channels]`` throughout; the paper's
grouped 1x1 convolutions are block-diagonal matmuls on a ``[G, Cin/G, Cout/G]`` kernel (``GroupedConv1x1``: a
batched ``dot_general`` over group-major activations on CPU and GPU, an einsum with the group axis in place on TPU),
never a conv op. With every group count = 1 the model *is* BERT, so BERT checkpoints load as the same architecture.

Parameter names mirror the PyTorch state_dict (``encoder.layers.{i}.attention.query`` ...), so the
converter in ``convert.py`` is a plain name table. Parameters are float32; ``dtype`` is the compute dtype
(float32 or bfloat16); softmax and LayerNorm statistics are always computed in float32.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import os
import re
import unicodedata
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jax.ad_checkpoint import checkpoint_name

from squeezebert_jax import kernels, models
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import has_text, is_int, is_number, json_repr as _json_repr, json_type as _json_type
from squeezebert_jax.files import json_value as _json_value
from squeezebert_jax.layers import (  # noqa: F401 (re-exported)
    _ACTIVATIONS,
    ATTENTION,
    FFN,
    LAYERNORM,
    PADDING,
    Dropout,
    REMAT_POLICIES,
    SAVED_ACTIVATIONS,
    Dense,
    GroupedConv1x1,
    LayerNorm,
    SelfAttention,
    _normal,
    from_groups,
    gelu,
    to_groups,
)
from squeezebert_jax.models.family import BERT_GROUPS, GROUP_FIELDS

# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------

_GROUP_FIELDS = GROUP_FIELDS
# how to run, not what: kept out of config.json
EXECUTION_FIELDS = ("scan_layers", "remat", "attention", "ffn", "layernorm", "padding")


# MobileBERT's own fields (family "mobilebert", transformers' MobileBertConfig names); written only for that family
MOBILEBERT_FIELDS = ("intra_bottleneck_size", "num_feedforward_networks", "key_query_shared_bottleneck",
                     "use_bottleneck_attention", "trigram_input", "classifier_activation")
_COUNT_FIELDS = ("vocab_size", "hidden_size", "embedding_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "intra_bottleneck_size", "num_feedforward_networks",
                 *_GROUP_FIELDS)
# What each SqueezeBertConfig field must hold (checked by __post_init__; config.json is written by hand sometimes).
_FIELD_KINDS = {**dict.fromkeys(_COUNT_FIELDS, "count"), "type_vocab_size": "int", "pad_token_id": "int",
                "hidden_act": "str", "family": "str",
                "hidden_dropout_prob": "prob", "attention_probs_dropout_prob": "prob", "initializer_range": "std",
                "layer_norm_eps": "eps", "id2label": "dict", "scan_layers": "bool", "remat": "str",
                "attention": "str", "ffn": "str", "layernorm": "str", "padding": "str",
                **dict.fromkeys(MOBILEBERT_FIELDS[2:], "bool")}
PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")  # transformers' names
_EXPECTED = {"int": "an integer", "count": "an integer >= 1", "prob": "a number in [0, 1)",
             "std": "a number >= 0 (e.g. 0.02)", "eps": "a number > 0 and < 1 (e.g. 1e-12)",
             "str": "a string", "bool": "true or false", "dict": "an object of label names"}




def _is_int_key(k) -> bool:
    try:
        int(k)
    except (TypeError, ValueError):
        return False
    return True


FAMILIES = ("", "albert", "distilbert", "electra", "mobilebert")


# transformers config.json fields (PretrainedConfig's) that turn an encoder's weights into a decoder's function
DECODER_FIELDS = {"is_decoder": "a decoder's causal attention (each token attends to those before it)",
                  "add_cross_attention": "cross-attention to an encoder's outputs"}


def _check_field_names(changes: dict, where: str) -> None:
    """Keyword arguments that name no SqueezeBertConfig field, as one line with the nearest field (a TypeError from
    the dataclass's __init__ named neither ``where`` nor the fields)."""
    known = [f.name for f in dataclasses.fields(SqueezeBertConfig)]
    for name in changes:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            raise InputError(f"{where}: {name!r} is no SqueezeBertConfig field"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))


def _near_miss(key: str, absent: list[str]) -> str | None:
    """The field of ``absent`` that ``key`` misspells: nearly the same letters, or one name the other's start (a
    dropped or added ending: hidden_dropout, layer_norm_epsilon), case and hyphens aside. None for a key of another
    meaning."""
    key = key.lower().replace("-", "_")
    near = difflib.get_close_matches(key, absent, n=1, cutoff=0.85)
    return near[0] if near else next((f for f in absent if len(key) >= 6 and (f.startswith(key) or
                                                                             key.startswith(f))), None)


# Other libraries' names for an architecture field (GPT-2's n_layer, T5's num_layers and d_ff, fairseq's
# ffn_embed_dim): in a config.json without the field, the file means it, and it would be left at its default
_SYNONYMS = {**dict.fromkeys(("num_layers", "n_layer", "n_layers", "encoder_layers"), "num_hidden_layers"),
             **dict.fromkeys(("num_heads", "n_head", "n_heads", "encoder_attention_heads"), "num_attention_heads"),
             **dict.fromkeys(("d_model", "n_embd", "dim", "embed_dim", "encoder_embed_dim"), "hidden_size"),
             **dict.fromkeys(("d_ff", "n_inner", "ffn_dim", "mlp_dim", "intermediate_dim", "encoder_ffn_dim",
                              "ffn_embed_dim", "encoder_ffn_embed_dim"), "intermediate_size"),
             **dict.fromkeys(("n_positions", "n_ctx", "max_seq_len", "max_sequence_length"),
                             "max_position_embeddings"),
             **dict.fromkeys(("n_vocab",), "vocab_size"),
             **dict.fromkeys(("dropout", "dropout_rate", "resid_pdrop", "hidden_dropout_rate"), "hidden_dropout_prob"),
             **dict.fromkeys(("attention_dropout", "attn_pdrop", "attention_dropout_rate"),
                             "attention_probs_dropout_prob"),
             **dict.fromkeys(("activation_function", "activation", "hidden_activation", "activation_fn"),
                             "hidden_act"),
             **dict.fromkeys(("embedding_dim", "embedding_dimension"), "embedding_size")}


def _check_near_misses(d: dict, source: str) -> None:
    """A config.json key that misspells an architecture field the file lacks (``num_hidden_layer``, ``hidden_dropout``)
    would leave that field at its default, without a word: refused, naming both; so is one misspelling a key of the
    family's own (``Family.config_keys``: DistilBERT's n_layers), and another library's name for a field the file
    lacks (``_SYNONYMS``: GPT-2's n_layer, T5's num_layers). Keys of another meaning (transformers' bookkeeping)
    are none of these: checked against every key of the default configs of
    transformers' BERT, SqueezeBERT, ALBERT, DistilBERT, ELECTRA and MobileBERT (``tests/test_cli_convert.py``)."""
    fields = [f.name for f in dataclasses.fields(SqueezeBertConfig)
              if f.name not in (*EXECUTION_FIELDS, "family", "id2label", "problem_type")]
    own = models.get(d.get("model_type", "squeezebert")).config_keys  # the family's own keys (model_type checked)
    absent = [f for f in (*fields, *own) if f not in d]
    for key in d:
        if not isinstance(key, str) or key in fields or key in own:
            continue
        other = _SYNONYMS.get(key.lower().replace("-", "_"))
        if near := _near_miss(key, absent) or (other if other in absent else None):
            default = (f"{_json_repr(getattr(SqueezeBertConfig, near))}, the default"
                       if near in fields and hasattr(SqueezeBertConfig, near) else "transformers' default")
            said = "another library's name for it?" if near == other else "misspelt?"
            raise InputError(f"{source}: {key!r} is no setting of a model config; {near!r}, {said} (without it "
                             f"{near} would be {default})")


@dataclasses.dataclass
class SqueezeBertConfig:
    """Architecture hyper-parameters, with transformers' ``SqueezeBertConfig`` field names and defaults.

    ``id2label`` is kept only so that classifier label names survive a round trip through config.json;
    ``scan_layers`` and ``remat`` (``REMAT_POLICIES``) choose how the encoder is executed and are not saved.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    embedding_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    # "" : SqueezeBERT (or BERT, every group count 1). "albert": ALBERT (Lan et al.): BERT's layer with every group
    # count 1, one set of layer weights run num_hidden_layers times, and the embeddings (embedding_size) projected to
    # hidden_size before the first layer (transformers' AlbertModel, num_hidden_groups = inner_group_num = 1).
    # "electra": ELECTRA (Clark et al.): BERT's layers with every group count 1, embeddings of embedding_size projected
    # to hidden_size when smaller, no pooler of its own (the classifiers' dense layer with a GELU plays its part), and
    # the replaced-token-detection head (SqueezeBertForReplacedTokenDetection; transformers' ElectraForPreTraining).
    # "distilbert": DistilBERT (Sanh et al.): BERT's layer with every group count 1, no token-type embeddings
    # (type_vocab_size 0: token_type_ids are ignored) and no pooler of its own: the classifiers' pre_classifier with
    # a ReLU plays its part (transformers' DistilBertModel).
    # "mobilebert": MobileBERT (Sun et al.; squeezebert_jax/models/mobilebert.py): layers of a hidden_size body with a
    # bottleneck of intra_bottleneck_size inside (attention at that width, num_feedforward_networks stacked FFNs),
    # NoNorm, the 3-gram embedding (embedding_size x 3 -> hidden_size) and a pooler only with classifier_activation.
    family: str = ""
    q_groups: int = 4
    k_groups: int = 4
    v_groups: int = 4
    post_attention_groups: int = 1
    intermediate_groups: int = 4
    output_groups: int = 4
    # MobileBERT only (MOBILEBERT_FIELDS): transformers' MobileBertConfig defaults (use_bottleneck and NoNorm always)
    intra_bottleneck_size: int = 128
    num_feedforward_networks: int = 4
    key_query_shared_bottleneck: bool = True
    use_bottleneck_attention: bool = False
    trigram_input: bool = True
    classifier_activation: bool = True
    id2label: dict[int, str] | None = None
    # A sequence classifier's task, as transformers names it (its loss, and a pipeline's sigmoid or softmax):
    # "single_label_classification", "regression" or "multi_label_classification"; None: not said (a softmax over
    # two or more outputs). Fine-tuning writes it; a multilabel model without it would score as single-label.
    problem_type: str | None = None
    # How the encoder runs, not what it computes (never written to config.json): the layers under one
    # jax.lax.scan (one compiled layer body instead of num_hidden_layers copies: compile time and code size),
    # and what each layer keeps for the backward pass ("none": everything; "dots_saveable": matmul outputs,
    # the rest recomputed; "full": only the layer's input). Outputs and gradients are the same either way.
    scan_layers: bool = True
    remat: str = "minimal"
    # "fused": the attention core as one fused kernel (cuDNN's flash attention on a GPU) with no dropout on the
    # attention probabilities, whatever attention_probs_dropout_prob says; "reference": the probabilities computed
    # explicitly with that dropout, as transformers trains. Equal outputs whenever dropout is off.
    attention: str = "fused"
    # "xla": the FFN as XLA's ops. "fused": on an NVIDIA GPU, SqueezeBERT's grouped FFN (expand, GELU, contract) as
    # one Pallas kernel that keeps the [tokens, intermediate_size] activation on chip (kernels.grouped_ffn; bf16 or
    # fp16, sizes kernels.fits), XLA's ops elsewhere. The same function either way (GELU's erf to 5e-7). Not the
    # default: on one H200 the kernel was slower than XLA's FFN (0.404 against 0.370 ms; the train step 0.96x).
    ffn: str = "xla"
    # "xla": each sublayer's end, LayerNorm(dropout(conv + bias) + residual), as XLA's ops. "fused": on an NVIDIA GPU
    # its backward as one Pallas kernel (kernels.dropout_residual_layernorm: the residual's, the conv's, gamma's,
    # beta's and the bias's gradients in one pass over the rows), XLA's ops elsewhere and for the forward. The same
    # function (gradients within bf16 rounding; the kernel sums in float32). Not the default: not yet timed on a GPU.
    layernorm: str = "xla"
    # "any": an attention mask may mask any keys. "right": every attention mask is right padding (ones, then zeros),
    # as this package's trainers build and check each batch (``parallel.check_right_padding``); cuDNN's attention then
    # takes each row's key count instead of reading a mask (the same outputs; the H200 step 1.04x faster).
    padding: str = "any"

    def __post_init__(self):
        self._check_types()
        if self.family not in FAMILIES:
            raise InputError(f"family {self.family!r} not supported; one of {sorted(FAMILIES)}")
        if self.family and not self.is_bert:
            raise InputError(f"family {self.family!r} has every group count 1 (its layers are BERT's)")
        if self.type_vocab_size < (0 if self.family in ("distilbert", "electra") else 1):
            # 0: no token-type embeddings (token_type_ids ignored): DistilBERT's, and the ELECTRA generator of a
            # DistilBERT discriminator
            raise InputError(f"type_vocab_size is {self.type_vocab_size}; expected an integer >= 1 (0: none, for "
                             "family 'distilbert' or 'electra')")
        if self.embedding_size != self.hidden_size and not self.factorized_embeddings and self.family != "mobilebert":
            raise InputError(f"embedding_size ({self.embedding_size}) must equal hidden_size ({self.hidden_size}),"
                             " as in the reference encoder (a smaller one is ALBERT's, ELECTRA's or MobileBERT's: "
                             "family 'albert', 'electra' or 'mobilebert')")
        if isinstance(self.pad_token_id, int) and not 0 <= self.pad_token_id < self.vocab_size:
            raise InputError(f"pad_token_id is {self.pad_token_id}; expected an id of the vocabulary, 0 to "
                             f"{self.vocab_size - 1} (transformers refuses a padding index outside the embeddings)")
        if self.family == "mobilebert":
            models.mobilebert.check_config(self)
        elif self.hidden_size % self.num_attention_heads:
            raise InputError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                             f"{self.num_attention_heads}")
        if self.hidden_act not in _ACTIVATIONS:
            raise InputError(f"hidden_act {self.hidden_act!r} not supported; one of {sorted(_ACTIVATIONS)}")
        for name, cin, cout in (("q_groups", self.hidden_size, self.hidden_size),
                                ("k_groups", self.hidden_size, self.hidden_size),
                                ("v_groups", self.hidden_size, self.hidden_size),
                                ("post_attention_groups", self.hidden_size, self.hidden_size),
                                ("intermediate_groups", self.hidden_size, self.intermediate_size),
                                ("output_groups", self.intermediate_size, self.hidden_size)):
            g = getattr(self, name)
            if g < 1 or cin % g or cout % g:
                raise InputError(f"{name}={g} must divide both {cin} input and {cout} output channels")
        if self.id2label is not None:
            for k, v in self.id2label.items():  # names, as transformers writes them: a number is "1", not 1
                if not isinstance(v, str) or not has_text(v):
                    raise InputError(f"id2label[{_json_repr(k)}] is {_json_value(v)}; each label is a "
                                     "name, a string with something visible in it (\"negative\", \"1\")")
            try:
                self.id2label = {int(k): v for k, v in self.id2label.items()}
            except (TypeError, ValueError):
                bad = next(k for k in self.id2label if not _is_int_key(k))
                raise InputError(f"id2label has the key {_json_repr(bad)}; expected integer keys (\"0\", \"1\", ...)"
                                 ) from None
            if sorted(self.id2label) != list(range(len(self.id2label))):
                raise InputError(f"id2label has the ids {sorted(self.id2label)}; expected 0 to "
                                 f"{len(self.id2label) - 1}, one name per output of the classifier")
            seen: dict[str, int] = {}
            for k, v in sorted(self.id2label.items()):
                # "pos", " pos" and "pos" with a zero-width space read as one in a report
                key = " ".join("".join(ch for ch in unicodedata.normalize("NFC", v)
                                       if unicodedata.category(ch) != "Cf").split())
                if key in seen:
                    raise InputError(f"id2label names {v!r} twice (ids {seen[key]} and {k}): a prediction of either "
                                     "output would read the same; give each output its own name")
                seen[key] = k
        if self.attention not in ATTENTION:
            raise InputError(f"attention {self.attention!r} not supported; one of {list(ATTENTION)}")
        if self.ffn not in FFN:
            raise InputError(f"ffn {self.ffn!r} not supported; one of {list(FFN)}")
        if self.layernorm not in LAYERNORM:
            raise InputError(f"layernorm {self.layernorm!r} not supported; one of {list(LAYERNORM)}")
        if self.padding not in PADDING:
            raise InputError(f"padding {self.padding!r} not supported; one of {list(PADDING)}")
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise InputError(f"problem_type is {_json_repr(self.problem_type)}; expected one of "
                             f"{', '.join(PROBLEM_TYPES)} (or none)")
        if self.remat not in REMAT_POLICIES:
            raise InputError(f"remat {self.remat!r} not supported; one of {list(REMAT_POLICIES)}")

    def _check_types(self) -> None:
        """Each field has its type and range (a config.json written by hand may say ``"hidden_size": "32"`` or
        ``"layer_norm_eps": -1e-12``): integers for sizes and counts (>= 1), finite numbers for dropout probabilities
        (in [0, 1): 1 would drop everything), initializer_range (>= 0) and layer_norm_eps (> 0, which keeps the
        normalisation from dividing by zero, and < 1), strings for names, booleans for switches."""
        in_range = {"count": lambda x: x >= 1, "prob": lambda x: 0 <= x < 1, "std": lambda x: x >= 0,
                    "eps": lambda x: 0 < x < 1}
        for name, kind in _FIELD_KINDS.items():
            v = getattr(self, name)
            ok = {"int": is_int, "count": is_int, "prob": is_number, "std": is_number, "eps": is_number,
                  "str": lambda x: isinstance(x, str), "bool": lambda x: isinstance(x, (bool, np.bool_)),
                  "dict": lambda x: x is None or isinstance(x, dict)}[kind](v)
            if not ok:
                what = "" if v is None else f" ({_json_type(v)})"
                raise InputError(f"{name} is {_json_repr(v)}{what}; expected {_EXPECTED[kind]}")
            if not in_range.get(kind, lambda x: True)(v):
                raise InputError(f"{name} is {_json_repr(v)}; expected {_EXPECTED[kind]}")
            if isinstance(v, np.generic):  # numpy's int64 or float32: the Python value (config.json holds JSON)
                object.__setattr__(self, name, v.item())

    @property
    def shared_layers(self) -> bool:
        """One set of layer weights run ``num_hidden_layers`` times (ALBERT's cross-layer sharing)."""
        return self.family == "albert"

    @property
    def factorized_embeddings(self) -> bool:
        """Embeddings of ``embedding_size`` projected to ``hidden_size`` by a dense layer before the encoder (ALBERT
        always; ELECTRA when they differ)."""
        return self.family == "albert" or (self.family == "electra" and self.embedding_size != self.hidden_size)

    @property
    def pooler_in_heads(self) -> bool:
        """The base model has no pooler of its own: the classifier heads' dense layer plays it (DistilBERT's
        pre_classifier, ELECTRA's classifier.dense), so the encoder's transformers checkpoint has none."""
        return self.family in ("distilbert", "electra")

    @property
    def has_pooler(self) -> bool:
        """The base model has a pooler dense layer (MobileBERT without classifier_activation pools the [CLS] state as it
        is, with no parameters)."""
        return self.family != "mobilebert" or self.classifier_activation

    @property
    def pooler_act(self) -> str:
        """The pooled output's activation: BERT's tanh pooler, or DistilBERT's ReLU pre_classifier."""
        return {"distilbert": "relu", "electra": "gelu"}.get(self.family, "tanh")

    @property
    def style(self) -> str:
        """The transformers family the weights convert to by default: the family's ("albert", "distilbert", "electra",
        "mobilebert"), "bert" (every group 1) or "squeezebert"."""
        return self.family or ("bert" if self.is_bert else "squeezebert")

    @property
    def is_bert(self) -> bool:
        """True when every group count is 1, i.e. the architecture is exactly BERT."""
        return all(getattr(self, f) == 1 for f in _GROUP_FIELDS)

    def replace(self, **changes) -> "SqueezeBertConfig":
        _check_field_names(changes, "replace")
        return dataclasses.replace(self, **changes)

    # ---- presets -------------------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides) -> "SqueezeBertConfig":
        """Named architectures.

        "squeezebert-uncased" (as released: vocab 30528, groups q/k/v 4, post-attention 1, FFN 4/4),
        "bert-base-uncased" (all groups 1) and the 24 BERT miniatures of Turc et al. (2019) as
        "bert-L{2,4,6,8,10,12}-H{128,256,512,768}" (heads H/64, intermediate 4H), with the aliases
        bert-tiny, bert-mini, bert-small, bert-medium; "tinybert-4-312" (TinyBERT's general-distillation student:
        BERT with 4 layers, hidden 312, 12 heads, intermediate 1200); "albert-base-v2" (ALBERT-base: vocab 30000,
        embeddings 128, 12 shared layers of hidden 768, gelu_new, no dropout); "distilbert-base-uncased"
        (DistilBERT: 6 layers of BERT-base's, no token types); "electra-small-discriminator" (ELECTRA-Small:
        12 layers of hidden 256, 4 heads, FFN 1024, embeddings 128); "mobilebert-uncased" (MobileBERT: 24 layers of
        a 512 body with a 128 bottleneck, 4 heads, 4 stacked FFNs of 512, NoNorm, ReLU, the 3-gram embedding of 128,
        no pooler dense).
        """
        if not isinstance(name, str):  # bytes or a path: "cannot use a string pattern on a bytes-like object"
            raise InputError(f"preset name {name!r} is {type(name).__name__}; give a preset's name as a str, e.g. "
                             "'squeezebert-uncased'")
        _check_field_names(overrides, f"preset({name!r})")
        key = models.ALIASES.get(name, name)
        if key not in models.PRESETS:
            if re.fullmatch(r"bert-L(\d+)-H(\d+)", key):
                raise InputError(f"unknown BERT miniature {name!r}: L in 2..12 (even), H in 128/256/512/768")
            raise InputError(f"unknown preset {name!r}; known: squeezebert-uncased, bert-base-uncased, "
                             f"bert-L{{2..12}}-H{{128..768}}, {', '.join(models.ALIASES)}, tinybert-4-312, "
                             "albert-base-v2, distilbert-base-uncased, electra-small-discriminator, "
                             "mobilebert-uncased")
        cfg = dict(models.PRESETS[key])
        cfg.update(overrides)
        return cls(**cfg)

    # ---- transformers config.json --------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> "SqueezeBertConfig":
        """From a transformers config dict: model_type "squeezebert", or "bert" (all groups = 1). Each field's type is
        checked; an error names ``source`` (the file), the field, its value and the type expected."""
        if not isinstance(d, dict):
            raise InputError(f"{source}: expected a JSON object ({{\"hidden_size\": 768, ...}}), got {_json_type(d)} "
                             f"{_json_repr(d)}")
        model_type = d.get("model_type", "squeezebert")
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in fields}
        if not isinstance(model_type, str) or model_type not in models.BY_STYLE:
            raise InputError(f"{source}: model_type {model_type!r} is not one of "
                             f"{', '.join(repr(s) for s in models.BY_STYLE)}")
        for name, what in DECODER_FIELDS.items():  # transformers' switches that make another function of the weights
            if d.get(name) not in (None, False):
                raise InputError(f"{source}: {name} is {_json_repr(d[name])}: {what}, which this encoder does not "
                                 "compute (it attends both ways, to its own input only); it converts encoders alone")
        _check_near_misses(d, source)
        family = models.get(model_type)
        if family.from_transformers is not None:
            kw = family.from_transformers(d, kw, source)
        if kw.get("pad_token_id") is None:
            kw.pop("pad_token_id", None)
        try:
            return cls(**kw)
        except (TypeError, ValueError) as e:
            # a field the file leaves out took its default (e.g. embedding_size 768): say so, not as if it were written
            absent = [n for n in re.findall(r"\b([a-z]+(?:_[a-z]+)+) \(", str(e)) if n in fields and n not in d]
            note = "".join(f" ({source} has no {n}: {getattr(cls, n)} is the default)" for n in absent
                           if hasattr(cls, n))
            raise InputError(f"{source}: {e}{note}") from e

    def to_dict(self, model_type: str = "squeezebert") -> dict[str, Any]:
        """transformers-style config dict: ``model_type`` "squeezebert" (our MODEL_DIR's: every field), or the
        family's own transformers config (``style``: "bert" when every group is 1, "albert", "distilbert", ...)."""
        d = {k: v for k, v in dataclasses.asdict(self).items()
             if k not in ("id2label", "problem_type", *EXECUTION_FIELDS)}
        if not d["family"]:
            d.pop("family")
        if self.family != "mobilebert":
            for f in MOBILEBERT_FIELDS:
                del d[f]
        if model_type != "squeezebert" and model_type != self.style:
            raise InputError(f"a {self.style} config cannot be written as model_type {model_type!r}")
        if model_type != "squeezebert":
            d = models.get(model_type).to_transformers(self, d)
        d["model_type"] = model_type
        if self.id2label is not None:
            d["id2label"] = {str(k): v for k, v in self.id2label.items()}
            d["label2id"] = {v: k for k, v in self.id2label.items()}
        if self.problem_type is not None:
            d["problem_type"] = self.problem_type
        return d

    def to_json(self, path: str | os.PathLike, **extra) -> None:
        d = self.to_dict(model_type=extra.pop("model_type", "squeezebert"))
        d.update(extra)
        with open(path, "w") as f:
            json.dump(d, f, indent=2, sort_keys=True)


# --------------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------------
class Embeddings(nnx.Module):
    def __init__(self, config: SqueezeBertConfig, *, dtype, rngs: nnx.Rngs):
        c, init = config, _normal(config.initializer_range)
        self.dtype = dtype
        word = init(rngs.params(), (c.vocab_size, c.embedding_size))
        word = word.at[c.pad_token_id].set(0.0)  # torch nn.Embedding(padding_idx=...) init
        self.word_embeddings = nnx.Embed(c.vocab_size, c.embedding_size, rngs=rngs)
        self.word_embeddings.embedding.set_value(word)
        self.position_embeddings = nnx.Embed(c.max_position_embeddings, c.embedding_size,
                                             embedding_init=init, rngs=rngs)
        if c.type_vocab_size:  # DistilBERT has none
            self.token_type_embeddings = nnx.Embed(c.type_vocab_size, c.embedding_size, embedding_init=init,
                                                   rngs=rngs)
        self.LayerNorm = LayerNorm(c.embedding_size, c.layer_norm_eps, dtype)  # config eps here (reference)
        self.dropout = Dropout(c.hidden_dropout_prob, rngs=rngs)
        if c.factorized_embeddings:  # ALBERT's encoder.embedding_hidden_mapping_in
            self.project = Dense(c.embedding_size, c.hidden_size, init_std=c.initializer_range, dtype=dtype,
                                 rngs=rngs)

    def __call__(self, input_ids, token_type_ids, position_ids):
        x = self.word_embeddings.embedding[...][input_ids] + self.position_embeddings.embedding[...][position_ids]
        if hasattr(self, "token_type_embeddings"):
            x = x + self.token_type_embeddings.embedding[...][token_type_ids]
        x = self.dropout(self.LayerNorm(x))
        return self.project(x) if hasattr(self, "project") else x


class SqueezeBertLayer(nnx.Module):
    """attention -> post-attention conv + dropout + residual + LN -> conv + GELU -> conv + dropout + residual + LN."""

    def __init__(self, config: SqueezeBertConfig, *, dtype, rngs: nnx.Rngs):
        c, std = config, config.initializer_range
        h, i = c.hidden_size, c.intermediate_size
        self.act, self.gelu = _ACTIVATIONS[c.hidden_act], c.hidden_act == "gelu"
        self.ffn_kernel = c.ffn == "fused"
        self.attention = SelfAttention(c, dtype=dtype, rngs=rngs)
        self.post_attention = ConvDropoutLayerNorm(h, h, c.post_attention_groups, c, dtype=dtype, rngs=rngs)
        self.intermediate = nnx.Dict(conv1d=GroupedConv1x1(h, i, c.intermediate_groups, init_std=std,
                                                           dtype=dtype, rngs=rngs))
        # ALBERT's layer drops nothing out of its FFN before the residual (its dropout module is never called)
        self.output = ConvDropoutLayerNorm(i, h, c.output_groups, c, dtype=dtype, rngs=rngs,
                                           dropout_prob=0.0 if c.family == "albert" else None)

    def __call__(self, x, mask_bias, with_probs: bool = False, twice: bool = False):
        """The layer's output, or (output, attention probabilities [B, heads, S, S] before dropout) ``with_probs``.
        ``x`` may be a pair, one array for the attention and one for the residual (the previous layer's output
        ``twice``: with the LayerNorm kernel, that layer's backward adds their gradients as it reads them)."""
        # Named scopes (one per Table 1 component) label the HLO, so an XLA profile reads by component
        # (benchmarks.profile_table.op_profile, eval/profile_table1.py); they cost nothing at run time.
        x, x_residual = x if isinstance(x, tuple) else (x, x)
        y = self.attention(x, mask_bias, with_probs)
        if with_probs:
            y, probs = y
            return self._after_attention(x_residual, y, twice), probs
        return self._after_attention(x_residual, y, twice)

    def passes_twice(self, x) -> bool:
        """Whether a chain of these layers should pass each output on twice (``twice``): where the output block's
        backward is the LayerNorm kernel, which then adds the next layer's two gradients as it reads them."""
        return self.output.kernel_takes(x)

    def _after_attention(self, x, y, twice: bool = False):
        with jax.named_scope("post_attention"):
            # one array for the FFN, one for the residual: with the LayerNorm kernel its backward adds their gradients
            a, residual = self.post_attention(y, x, name="attention_sum", twice=True)
        c1, c2 = self.intermediate["conv1d"], self.output.conv1d
        if self._kernel_takes(a, c1, c2):  # on a GPU: one kernel, the activation kept on chip
            with jax.named_scope("ffn_kernel"):
                dt, flat = c1.dtype, a.reshape(-1, a.shape[-1])
                y = kernels.grouped_ffn(flat.astype(dt), c1.kernel[...].astype(dt),
                                        c1.bias[...].astype(dt).reshape(c1.groups, -1), c2.kernel[...].astype(dt),
                                        kernels.interpreted())
                y = y.reshape(*a.shape[:-1], -1) + c2.bias[...].astype(dt)
        elif c1.groups == c2.groups and self.output.kernel_takes(a):  # on a GPU: the block's backward as a kernel
            grouped = c1.groups > 1
            contract = (lambda h: c2.group_major(h, False)) if grouped else c2.ungrouped
            expand = (lambda a: c1.group_major(to_groups(a, c1.groups), bias=False)) if grouped else (
                lambda a: c1.ungrouped(a.reshape(-1, c1.cin)))
            bias = c1.group_bias() if grouped else c1.bias[...].astype(c1.dtype)
            z = self._ffn(a, expand, bias, contract)
            with jax.named_scope("ffn_contract"):
                return self.output.fused_finish(z, residual, name="ffn_sum", twice=twice)
        elif c1.groups == c2.groups > 1:  # SqueezeBERT's 4/4: group-major [G, N, I/G] from expand to contract
            lead = a.shape[:-1]
            expand = lambda a: jax.lax.platform_dependent(  # noqa: E731
                a, tpu=lambda a: c1.in_place_to_groups(a, bias=False),
                default=lambda a: c1.group_major(to_groups(a, c1.groups), bias=False))
            contract = lambda h: jax.lax.platform_dependent(  # noqa: E731
                h, tpu=lambda h: c2.in_place_from_groups(h, lead),
                default=lambda h: from_groups(c2.group_major(h), lead))
            y = self._ffn(a, expand, c1.group_bias(), contract)
        elif c1.groups == 1:
            y = self._ffn(a, c1.ungrouped, c1.bias[...].astype(c1.dtype), c2)
        else:
            y = self._ffn(a, c1, None, c2)
        with jax.named_scope("ffn_contract"):
            out = self.output.finish(y, residual, name="ffn_sum")
        return (out, out) if twice else out

    def _kernel_takes(self, a, c1, c2) -> bool:
        """Whether this layer's FFN runs as ``kernels.grouped_ffn``: ``ffn`` "fused", exact GELU, the program traced
        for an NVIDIA GPU, and sizes and dtype the kernel takes (``kernels.fits``). Decided when traced, so that a
        remat name never sits inside a platform branch (``_ffn``)."""
        n = math.prod(a.shape[:-1])
        return (self.ffn_kernel and self.gelu and c1.groups == c2.groups and kernels.on_gpu()
                and kernels.fits(n, c1.cin, c1.cout, c2.cout, c1.groups, jnp.dtype(c1.dtype)))

    def _ffn(self, a, expand, bias, contract):
        """The FFN's contracting conv output (before dropout and the residual). The named value remat keeps is
        outside any platform branch: a name inside one would make the step keep a zero-filled copy for the other
        platform's branch (on a v5e, 19 GB more bytes per step). It is the expansion's matmul output before its
        ``bias`` (None: ``expand`` adds it), the very buffer the matmul writes, so that the activation's kernel
        writes only the activation: with the bias added in ``expand`` it wrote the sum too, as the saved value (2.4
        GB more per paper step compiled for an H100). Keeping the activation as well saves its recomputation in the
        backward but not its bytes (110.2 GB read and written per step either way), for 2.3 GiB more memory."""
        with jax.named_scope("ffn_expand"):
            y = checkpoint_name(expand(a), "ffn_expand")
        with jax.named_scope("ffn_act"):
            y = self.act(y if bias is None else y + bias)
        with jax.named_scope("ffn_contract"):
            return contract(y)


class ConvDropoutLayerNorm(nnx.Module):
    def __init__(self, cin, cout, groups, config: SqueezeBertConfig, *, dtype, rngs: nnx.Rngs,
                 dropout_prob: float | None = None):
        self.conv1d = GroupedConv1x1(cin, cout, groups, init_std=config.initializer_range, dtype=dtype,
                                     rngs=rngs)
        # SqueezeBERT's reference: eps 1e-12 whatever the config says; the other families' layers take the config's
        self.layernorm = LayerNorm(cout, config.layer_norm_eps if config.family else 1e-12, dtype)
        self.dropout = Dropout(config.hidden_dropout_prob if dropout_prob is None else dropout_prob, rngs=rngs)
        self.fused = config.layernorm == "fused"

    def __call__(self, x, residual, name: str | None = None, twice: bool = False):
        """LayerNorm(dropout(conv(x)) + residual); ``twice``: that output twice (``fused_finish``)."""
        if self.kernel_takes(residual):  # on a GPU: the backward as one kernel
            c = self.conv1d
            z = c.ungrouped(x.reshape(-1, c.cin)) if c.groups == 1 else c.group_major(to_groups(x, c.groups), False)
            return self.fused_finish(z, residual, name, twice)
        out = self.finish(self.conv1d(x), residual, name)
        return (out, out) if twice else out

    def finish(self, y, residual, name: str | None = None):
        """LayerNorm(dropout(y) + residual) of the conv's output ``y``."""
        y = self.dropout(y) + residual
        return self.layernorm(y if name is None else checkpoint_name(y, name))

    def kernel_takes(self, residual) -> bool:
        """Whether this block runs as ``kernels.dropout_residual_layernorm``: ``layernorm`` "fused", the program
        traced for an NVIDIA GPU, and sizes the kernel takes (``kernels.norm_fits``). Decided when traced."""
        c, n = self.conv1d, math.prod(residual.shape[:-1])
        return (self.fused and kernels.on_gpu() and self.dropout.rate < 1.0 and not self.dropout.broadcast_dims
                and kernels.norm_fits(n, c.cout, c.groups))

    def fused_finish(self, z, residual, name: str | None = None, twice: bool = False):
        """``finish`` of the conv's output without its bias, ``z`` (``[N, C]``, or group-major ``[G, N, C/G]`` for a
        grouped conv), through ``kernels.dropout_residual_layernorm``. The same mask as ``finish`` draws. ``twice``:
        the output twice, for two uses whose gradients the kernel adds as it reads them."""
        c, dt, ln = self.conv1d, self.conv1d.dtype, self.layernorm
        keep, scale = self.dropout.keep_mask(residual.shape) if self.dropout.drops() else (None, 1.0)
        out = kernels.dropout_residual_layernorm(
            z.astype(dt), c.bias[...].astype(dt), residual.reshape(-1, c.cout).astype(dt),
            None if keep is None else keep.reshape(-1, c.cout), ln.scale[...], ln.bias[...], scale=scale,
            eps=ln.eps, name=name, interpret=kernels.interpreted(), twice=twice)
        if twice:
            return tuple(o.reshape(residual.shape).astype(ln.dtype) for o in out)
        return out.reshape(residual.shape).astype(ln.dtype)


def _draws_dropout(module: nnx.Module) -> bool:
    """Whether calling ``module`` draws dropout keys (some Dropout with rate > 0 in train mode)."""
    return any(isinstance(m, nnx.Dropout) and m.rate > 0 and not m.deterministic
               for _, m in nnx.iter_graph(module))


class Encoder(nnx.Module):
    """The layers, kept per layer (``layers.{i}``, the PyTorch names) and run under one ``jax.lax.scan``.

    With ``scan_layers`` the per-layer states are stacked at the call, the scan body runs one layer (XLA compiles it
    once instead of ``num_hidden_layers`` times), and the gradient arrives per layer through the stack's transpose,
    so parameters, optimizer state, checkpoints and converters see the same per-layer tree either way. Each layer
    keeps its own dropout stream (stacked like its weights), so the masks, outputs and gradients equal the
    unrolled loop's. ``remat`` wraps the layer in ``jax.checkpoint`` with that policy (``REMAT_POLICIES``).
    """

    def __init__(self, config: SqueezeBertConfig, *, dtype, rngs: nnx.Rngs):
        self.scan_layers, self.remat = config.scan_layers, config.remat
        self.num_layers = config.num_hidden_layers
        layer = models.mobilebert.Layer if config.family == "mobilebert" else SqueezeBertLayer
        self.layers = nnx.List([layer(config, dtype=dtype, rngs=rngs)
                                for _ in range(1 if config.shared_layers else config.num_hidden_layers)])

    def __call__(self, x, mask_bias, collect: bool = False):
        """The last layer's output; with ``collect``, ``(output, EncoderStates)``: every layer's hidden states and
        attention probabilities, for layer-wise distillation (the default path computes and keeps neither)."""
        policy = REMAT_POLICIES[self.remat]
        # with the LayerNorm kernel each layer passes its output on twice (SqueezeBertLayer.passes_twice)
        pairs = isinstance(self.layers[0], SqueezeBertLayer) and self.layers[0].passes_twice(x)
        first = (x, x) if pairs else x
        if not self.scan_layers or len(self.layers) < 2:
            # unrolled; a shared layer (ALBERT) runs num_layers times, its gradient the sum over the calls
            def layer_call(twice: bool):
                extra = (True,) if twice else ()  # (MobileBERT's layers take no twice)
                return lambda layer, h: layer(h, mask_bias, collect, *extra)

            calls = {twice: layer_call(twice) for twice in (False, True)}
            run = {t: c if self.remat == "none" else nnx.remat(c, policy=policy) for t, c in calls.items()}
            hidden, probs = [x], []
            layers = self.layers if len(self.layers) == self.num_layers else [self.layers[0]] * self.num_layers
            x = first
            for i, layer in enumerate(layers):
                x = run[pairs and i < len(layers) - 1](layer, x)  # the last layer's output has one use
                if collect:
                    x, p = x
                    hidden.append(x[0] if isinstance(x, tuple) else x)
                    probs.append(p)
            return (x, EncoderStates(jnp.stack(hidden), jnp.stack(probs))) if collect else x
        splits = [nnx.split(layer, nnx.Param, ...) for layer in self.layers]
        graphdef = splits[0][0]
        if any(g != graphdef for g, _, _ in splits[1:]):
            raise InputError("scan_layers needs identical layers (same structure and train/eval mode); "
                             "set config.scan_layers=False for mixed layers")
        stack = lambda *a: jnp.stack(a)  # noqa: E731
        params = jax.tree.map(stack, *[p for _, p, _ in splits])
        rest = jax.tree.map(stack, *[r for _, _, r in splits])

        def body(h, layer_state):
            layer = nnx.merge(graphdef, *layer_state)
            twice = (True,) if pairs else ()  # (MobileBERT's layers take no twice)
            if not collect:
                h = layer(h, mask_bias, False, *twice)
                return h, nnx.state(layer, nnx.Not(nnx.Param))
            h, p = layer(h, mask_bias, True, *twice)
            return h, (nnx.state(layer, nnx.Not(nnx.Param)), h[0] if pairs else h, p)

        if policy is not None:
            body = jax.checkpoint(body, policy=policy, prevent_cse=False)
        x0 = x
        x, ys = jax.lax.scan(body, first, (params, rest))
        x = x[0] if pairs else x  # the last layer's second output unused: a zero gradient for its kernel to add
        new_rest = ys[0] if collect else ys
        if _draws_dropout(self.layers[0]):  # the dropout streams advance as in the unrolled loop
            for i, layer in enumerate(self.layers):
                nnx.update(layer, jax.tree.map(lambda a: a[i], new_rest))
        if collect:
            return x, EncoderStates(jnp.concatenate([x0[None], ys[1]]), ys[2])
        return x


# --------------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------------

@struct.dataclass
class EncoderStates:
    """Per-layer states (``collect=True``): hidden_states [L+1, B, S, H], index 0 the embeddings' output and i the
    output of layer i; attentions [L, B, heads, S, S], layer i+1's softmax probabilities before dropout."""
    hidden_states: jax.Array
    attentions: jax.Array


@struct.dataclass
class ModelOutput:
    last_hidden_state: jax.Array
    pooler_output: jax.Array
    states: EncoderStates | None = None


@struct.dataclass
class LogitsOutput:
    logits: jax.Array
    last_hidden_state: jax.Array
    pooler_output: jax.Array
    states: EncoderStates | None = None


@struct.dataclass
class PreTrainingOutput:
    mlm_logits: jax.Array  # [B, S, V], or [B, P, V] at masked_positions
    sop_logits: jax.Array  # [B, 2]; 0 = in order, 1 = swapped
    last_hidden_state: jax.Array
    pooler_output: jax.Array


@struct.dataclass
class QuestionAnsweringOutput:
    start_logits: jax.Array
    end_logits: jax.Array
    last_hidden_state: jax.Array
    pooler_output: jax.Array

    @property
    def logits(self) -> jax.Array:
        """[B, S, 2]: the start and end logits of every position (what fine-tuning and evaluation read)."""
        return jnp.stack([self.start_logits, self.end_logits], -1)


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------

def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


class SqueezeBertModel(nnx.Module):
    """Embeddings -> encoder -> pooler. ``model(input_ids, attention_mask, token_type_ids, position_ids)``."""

    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.config, self.dtype = config, dtype
        if config.family == "mobilebert":
            self.embeddings = models.mobilebert.Embeddings(config, dtype=dtype, rngs=rngs)
        else:
            self.embeddings = Embeddings(config, dtype=dtype, rngs=rngs)
        self.encoder = Encoder(config, dtype=dtype, rngs=rngs)
        if config.has_pooler:
            self.pooler = nnx.Dict(dense=Dense(config.hidden_size, config.hidden_size,
                                               init_std=config.initializer_range, dtype=dtype, rngs=rngs))

    def _check_inputs(self, input_ids, attention_mask, token_type_ids, position_ids):
        c = self.config
        if input_ids.ndim != 2:
            raise InputError(f"input_ids must be [batch, seq], got shape {tuple(input_ids.shape)}")
        if not jnp.issubdtype(input_ids.dtype, jnp.integer):
            raise TypeError(f"input_ids must be integers, got {input_ids.dtype}")
        seq = input_ids.shape[1]
        if seq > c.max_position_embeddings:
            raise InputError(f"sequence length {seq} > max_position_embeddings {c.max_position_embeddings}")
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids),
                        ("position_ids", position_ids)):
            if t is not None and tuple(t.shape) != tuple(input_ids.shape):
                raise InputError(f"{name} has shape {tuple(t.shape)}, input_ids {tuple(input_ids.shape)}")
        # Value checks need concrete inputs (eager calls); under jit they are the caller's contract.
        for name, t, hi in (("input_ids", input_ids, c.vocab_size),
                            ("token_type_ids", token_type_ids if c.type_vocab_size else None, c.type_vocab_size),
                            ("position_ids", position_ids, c.max_position_embeddings)):
            if t is not None and _is_concrete(t) and t.size:
                a = np.asarray(t)  # host copy: jnp reductions would be traced inside jit
                lo_v, hi_v = int(a.min()), int(a.max())
                if lo_v < 0 or hi_v >= hi:
                    raise InputError(f"{name} values must be in [0, {hi}); got min {lo_v}, max {hi_v}")

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                 collect: bool = False) -> ModelOutput:
        """``collect``: also return every layer's states (``ModelOutput.states``, see ``EncoderStates``)."""
        self._check_inputs(input_ids, attention_mask, token_type_ids, position_ids)
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
        if attention_mask is None:
            mask_bias = jnp.zeros((), jnp.float32)
        else:  # [B, 1, 1, S] additive bias, as the reference: (1 - mask) * finfo.min
            m = jnp.asarray(attention_mask, jnp.float32)[:, None, None, :]
            mask_bias = (1.0 - m) * jnp.finfo(jnp.float32).min
        with jax.named_scope("embedding"):
            x = self.embeddings(input_ids, token_type_ids, position_ids)
        x, states = self.encoder(x, mask_bias, True) if collect else (self.encoder(x, mask_bias), None)
        with jax.named_scope("pooler"):
            pooled = (_ACTIVATIONS[self.config.pooler_act](self.pooler["dense"](x[:, 0])) if self.config.has_pooler
                      else x[:, 0])  # MobileBERT without classifier_activation: the [CLS] state as it is
        return ModelOutput(last_hidden_state=x, pooler_output=pooled, states=states)


class MLMHead(nnx.Module):
    """transform (dense + act + LayerNorm) -> decoder tied to the word embeddings + own bias. MobileBERT's transform
    keeps hidden_size: its first embedding_size channels meet the word embeddings and the rest a ``dense``
    ``[hidden_size - embedding_size, vocab_size]`` of its own."""

    def __init__(self, config: SqueezeBertConfig, *, dtype, rngs: nnx.Rngs):
        c = config
        # ELECTRA's generator head applies GELU whatever hidden_act says
        self.act, self.dtype = _ACTIVATIONS["gelu" if c.family == "electra" else c.hidden_act], dtype
        width = c.hidden_size if c.family == "mobilebert" else c.embedding_size
        self.transform = nnx.Dict(dense=Dense(c.hidden_size, width, init_std=c.initializer_range,
                                              dtype=dtype, rngs=rngs),
                                  LayerNorm=LayerNorm(width, c.layer_norm_eps, dtype))
        if width > c.embedding_size:  # MobileBERT's (transformers' is [0, vocab_size] when they are equal: no parameter)
            self.dense = nnx.Param(_normal(c.initializer_range)(rngs.params(),
                                                                (width - c.embedding_size, c.vocab_size)))
        self.bias = nnx.Param(jnp.zeros((c.vocab_size,)))

    def __call__(self, h, word_embeddings):
        h = self.transform["LayerNorm"](self.act(self.transform["dense"](h)))
        if hasattr(self, "dense"):  # MobileBERT: one [H, V] decoder, the embeddings' rows over its own (a matmul on
            # slices of h instead is what XLA:GPU fails to tile at the paper's shapes)
            w = jnp.concatenate([word_embeddings.astype(self.dtype).T, self.dense[...].astype(self.dtype)], 0)
            logits = jnp.einsum("...h,hv->...v", h, w, preferred_element_type=jnp.float32)
        else:
            logits = jnp.einsum("...h,vh->...v", h, word_embeddings.astype(self.dtype),
                                preferred_element_type=jnp.float32)
        return logits + self.bias[...]


def _gather_positions(x, positions):
    """x [B, S, H], positions [B, P] -> [B, P, H]."""
    return jnp.take_along_axis(x, positions[..., None].astype(jnp.int32), axis=1)


class _Head(nnx.Module):
    """Shared constructor: ``self.transformer`` is the encoder, named as the PyTorch prefix."""

    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.config, self.dtype = config, dtype
        self.transformer = SqueezeBertModel(config, dtype=dtype, rngs=rngs)

    def _dense(self, dout, rngs):
        c = self.config
        return Dense(c.hidden_size, dout, init_std=c.initializer_range, dtype=self.dtype, rngs=rngs)


class SqueezeBertForMaskedLM(_Head):
    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.cls = nnx.Dict(predictions=MLMHead(config, dtype=dtype, rngs=rngs))

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                 masked_positions=None) -> LogitsOutput:
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids)
        h = out.last_hidden_state if masked_positions is None else _gather_positions(out.last_hidden_state,
                                                                                     masked_positions)
        logits = self.cls["predictions"](h, self.transformer.embeddings.word_embeddings.embedding[...])
        return LogitsOutput(logits, out.last_hidden_state, out.pooler_output)


class SqueezeBertForPreTraining(_Head):
    """MLM logits + 2-way sentence-order (SOP) logits from the pooled output (``cls.seq_relationship``)."""

    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.cls = nnx.Dict(predictions=MLMHead(config, dtype=dtype, rngs=rngs),
                            seq_relationship=self._dense(2, rngs))

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                 masked_positions=None) -> PreTrainingOutput:
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids)
        h = out.last_hidden_state if masked_positions is None else _gather_positions(out.last_hidden_state,
                                                                                     masked_positions)
        with jax.named_scope("pretraining_heads"):
            mlm = self.cls["predictions"](h, self.transformer.embeddings.word_embeddings.embedding[...])
            sop = self.cls["seq_relationship"](out.pooler_output).astype(jnp.float32)
        return PreTrainingOutput(mlm, sop, out.last_hidden_state, out.pooler_output)


class SqueezeBertForReplacedTokenDetection(_Head):
    """ELECTRA's discriminator: a logit per token that it was replaced (dense + act + dense to 1), ``[B, S]``;
    transformers' ``ElectraForPreTraining``."""

    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.act = _ACTIVATIONS[config.hidden_act]
        self.rtd = nnx.Dict(dense=self._dense(config.hidden_size, rngs), prediction=self._dense(1, rngs))

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None) -> LogitsOutput:
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids)
        h = self.act(self.rtd["dense"](out.last_hidden_state))
        return LogitsOutput(self.rtd["prediction"](h)[..., 0].astype(jnp.float32), out.last_hidden_state,
                            out.pooler_output)


class SqueezeBertForSequenceClassification(_Head):
    """Classifier on the pooled output; num_labels = 1 is regression."""

    def __init__(self, config: SqueezeBertConfig, num_labels: int | None = None, *, dtype=jnp.float32,
                 rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.num_labels = num_labels or (len(config.id2label) if config.id2label else 2)
        self.dropout = Dropout(config.hidden_dropout_prob, rngs=rngs)
        self.classifier = self._dense(self.num_labels, rngs)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                 collect: bool = False) -> LogitsOutput:
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids, collect)
        logits = self.classifier(self.dropout(out.pooler_output)).astype(jnp.float32)
        return LogitsOutput(logits, out.last_hidden_state, out.pooler_output, out.states)


class SqueezeBertForTokenClassification(_Head):
    def __init__(self, config: SqueezeBertConfig, num_labels: int | None = None, *, dtype=jnp.float32,
                 rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.num_labels = num_labels or (len(config.id2label) if config.id2label else 2)
        self.dropout = Dropout(config.hidden_dropout_prob, rngs=rngs)
        self.classifier = self._dense(self.num_labels, rngs)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None) -> LogitsOutput:
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids)
        logits = self.classifier(self.dropout(out.last_hidden_state)).astype(jnp.float32)
        return LogitsOutput(logits, out.last_hidden_state, out.pooler_output)


class SqueezeBertForQuestionAnswering(_Head):
    """Span start/end logits from ``qa_outputs`` ([H, 2]) on every token."""

    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.qa_outputs = self._dense(2, rngs)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None,
                 position_ids=None) -> QuestionAnsweringOutput:
        out = self.transformer(input_ids, attention_mask, token_type_ids, position_ids)
        logits = self.qa_outputs(out.last_hidden_state).astype(jnp.float32)
        return QuestionAnsweringOutput(logits[..., 0], logits[..., 1], out.last_hidden_state, out.pooler_output)


class SqueezeBertForMultipleChoice(_Head):
    """Inputs ``[B, C, S]`` -> one score per choice ``[B, C]`` (classifier [H, 1] on the pooled output)."""

    def __init__(self, config: SqueezeBertConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        super().__init__(config, dtype=dtype, rngs=rngs)
        self.dropout = Dropout(config.hidden_dropout_prob, rngs=rngs)
        self.classifier = self._dense(1, rngs)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None) -> LogitsOutput:
        if input_ids.ndim != 3:
            raise InputError(f"multiple choice input_ids must be [batch, choices, seq], got {input_ids.shape}")
        b, n, s = input_ids.shape
        flat = lambda t: None if t is None else t.reshape(b * n, s)  # noqa: E731
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids),
                        ("position_ids", position_ids)):
            if t is not None and tuple(t.shape) != (b, n, s):
                raise InputError(f"{name} has shape {tuple(t.shape)}, input_ids {(b, n, s)}")
        out = self.transformer(flat(input_ids), flat(attention_mask), flat(token_type_ids), flat(position_ids))
        logits = self.classifier(self.dropout(out.pooler_output)).astype(jnp.float32).reshape(b, n)
        return LogitsOutput(logits, out.last_hidden_state, out.pooler_output)


class ElectraPreTraining(nnx.Module):
    """ELECTRA's replaced-token-detection pretraining pair (Clark et al.): a small MLM ``generator`` whose samples
    replace the masked tokens, and the ``discriminator`` (any family's encoder with the replaced-token-detection
    head) that tells every token replaced or original. They share the word, position and token-type embeddings
    (one set of arrays, trained by both losses), as in ELECTRA (a MobileBERT discriminator shares its word embeddings
    only: its position and type embeddings have its body's width); the generator, ``generator_fraction`` of the
    discriminator's hidden size, attention heads and FFN (the paper's 1/4), projects them to its own width."""

    def __init__(self, config: SqueezeBertConfig, generator_fraction: float = 0.25, *, dtype=jnp.float32,
                 rngs: nnx.Rngs):
        self.config, self.dtype = config, dtype
        self.discriminator = SqueezeBertForReplacedTokenDetection(config, dtype=dtype, rngs=rngs)
        self.generator = SqueezeBertForMaskedLM(generator_config(config, generator_fraction), dtype=dtype, rngs=rngs)
        ge, de = self.generator.transformer.embeddings, self.discriminator.transformer.embeddings
        ge.word_embeddings = de.word_embeddings
        if config.family != "mobilebert":  # MobileBERT's position and type embeddings are of its body's width
            ge.position_embeddings = de.position_embeddings
            if hasattr(de, "token_type_embeddings"):
                ge.token_type_embeddings = de.token_type_embeddings


# pretraining's config.rtd with its defaults (ELECTRA's: a generator a quarter of the discriminator's width, the
# discriminator's loss weighted 50); train/configs/pretrain.py builds its section from these, and pretraining's
# validator refuses them changed with another objective
RTD_SETTINGS = {"generator_fraction": 0.25, "weight": 50.0}


def generator_config(config: SqueezeBertConfig, fraction: float) -> SqueezeBertConfig:
    """ELECTRA's generator for a discriminator of ``config``: ``fraction`` of its hidden size, heads and FFN (at least
    one head of the discriminator's head size), BERT's layers, and the discriminator's embeddings (``embedding_size``)
    projected to its hidden size."""
    head_dim = config.hidden_size // config.num_attention_heads
    heads = max(1, round(config.num_attention_heads * fraction))
    return SqueezeBertConfig(
        vocab_size=config.vocab_size, embedding_size=config.embedding_size, hidden_size=heads * head_dim,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=heads,
        intermediate_size=max(1, round(config.intermediate_size * fraction)), hidden_act=config.hidden_act,
        hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
        initializer_range=config.initializer_range, layer_norm_eps=config.layer_norm_eps,
        pad_token_id=config.pad_token_id, family="electra", scan_layers=config.scan_layers, remat=config.remat,
        attention=config.attention, ffn=config.ffn, layernorm=config.layernorm, padding=config.padding,
        **BERT_GROUPS)


HEADS = {
    "SqueezeBertModel": SqueezeBertModel,
    "SqueezeBertForMaskedLM": SqueezeBertForMaskedLM,
    "SqueezeBertForPreTraining": SqueezeBertForPreTraining,
    "SqueezeBertForSequenceClassification": SqueezeBertForSequenceClassification,
    "SqueezeBertForTokenClassification": SqueezeBertForTokenClassification,
    "SqueezeBertForQuestionAnswering": SqueezeBertForQuestionAnswering,
    "SqueezeBertForMultipleChoice": SqueezeBertForMultipleChoice,
    "SqueezeBertForReplacedTokenDetection": SqueezeBertForReplacedTokenDetection,
}


# config.layers (fine-tuning) and config.model.layers (pretraining): how the encoder's layers run, the same numbers
# either way. "auto" is each platform's measured choice (docs/results.md): unrolled on CPU and GPU -- on one H100 the
# paper's pretraining step (seq 128, batch 256, bf16) took 52.6 ms unrolled against 62.8 ms scanned, the scan writing
# every layer's saved activations into stacked buffers and reading them back (11 ms of its kernels) -- and the scan on
# TPU (one compiled layer body: compile time and code size).
LAYERS = ("auto", "scan", "unrolled")
AUTO_LAYERS = {"cpu": "unrolled", "gpu": "unrolled", "cuda": "unrolled", "rocm": "unrolled", "tpu": "scan"}


def scan_layers_on(layers: str, platform: str) -> bool:
    """Whether the layers run under ``lax.scan`` for a ``layers`` setting (``LAYERS``) on ``platform`` (a jax
    backend name: ``jax.default_backend()``, or a compile target's)."""
    if layers not in LAYERS:
        raise InputError(f"layers={layers!r}: auto, scan or unrolled")
    return (AUTO_LAYERS.get(platform, "scan") if layers == "auto" else layers) == "scan"


def set_execution(model: nnx.Module, scan_layers: bool | None = None, remat: str | None = None,
                  attention: str | None = None, ffn: str | None = None, padding: str | None = None,
                  layernorm: str | None = None) -> nnx.Module:
    """Choose how every encoder in ``model`` runs (``SqueezeBertConfig.scan_layers`` / ``remat`` / ``attention`` /
    ``ffn`` / ``padding`` / ``layernorm``) after it was built, e.g. for a model loaded from disk; the weights are
    unchanged, and so are the outputs (with dropout off: "fused" attention drops nothing out of the attention
    probabilities). Returns ``model``."""
    if remat is not None and remat not in REMAT_POLICIES:
        raise InputError(f"remat {remat!r} not supported; one of {list(REMAT_POLICIES)}")
    if attention is not None and attention not in ATTENTION:
        raise InputError(f"attention {attention!r} not supported; one of {list(ATTENTION)}")
    if ffn is not None and ffn not in FFN:
        raise InputError(f"ffn {ffn!r} not supported; one of {list(FFN)}")
    if padding is not None and padding not in PADDING:
        raise InputError(f"padding {padding!r} not supported; one of {list(PADDING)}")
    if layernorm is not None and layernorm not in LAYERNORM:
        raise InputError(f"layernorm {layernorm!r} not supported; one of {list(LAYERNORM)}")
    changes = {k: v for k, v in (("scan_layers", scan_layers), ("remat", remat), ("attention", attention),
                                 ("ffn", ffn), ("padding", padding), ("layernorm", layernorm)) if v is not None}
    for _, m in nnx.iter_graph(model):
        if isinstance(m, Encoder):
            m.scan_layers = m.scan_layers if scan_layers is None else bool(scan_layers)
            m.remat = m.remat if remat is None else remat
        if isinstance(m, SelfAttention) and attention is not None:
            m.fused = attention == "fused"
        if isinstance(m, SelfAttention) and padding is not None:
            m.right_padded = padding == "right"
        if isinstance(m, SqueezeBertLayer) and ffn is not None:
            m.ffn_kernel = ffn == "fused"
        if isinstance(m, ConvDropoutLayerNorm) and layernorm is not None:
            m.fused = layernorm == "fused"
        if isinstance(m, (SqueezeBertModel, _Head)) and changes:
            m.config = m.config.replace(**changes)
    return model


def set_initial_values(construct: Callable[[], nnx.Module], variables: list[tuple[tuple, nnx.Variable]]) -> None:
    """Give each of ``variables`` (``(path, variable)`` pairs of ``nnx.to_flat_state`` of an abstract ``construct()``,
    e.g. new heads' parameters and the dropout streams' keys) ``construct()``'s initial value, computed in one jitted
    program in which XLA drops the initialisers of every other variable. An eager construction's values: the same keys
    and random bits (XLA may fuse a normal's float transform, so a parameter can differ from an eager one by an ulp).
    The caller puts the state back into its model (``nnx.update``)."""
    paths = [path for path, _ in variables]

    def init():
        values = dict(nnx.to_flat_state(nnx.state(construct())))
        return [values[p].get_value() for p in paths]

    for (_, var), value in zip(variables, jax.jit(init)(), strict=True):
        var.set_value(value)


def abstract_model(construct: Callable[[], nnx.Module]) -> nnx.Module:
    """``construct()``'s model with its parameters as ``jax.ShapeDtypeStruct``s (no random weights drawn) and its
    other variables (the dropout streams' keys) with their values: what lowering a train step needs, e.g. ahead of
    time for a TPU/GPU topology (``aot``), where only the parameters' shapes matter. The full-size model's eager
    initialisation takes 3.5 s on a 2-core host."""
    model = nnx.eval_shape(construct)
    state = nnx.to_flat_state(nnx.state(model))
    set_initial_values(construct, [(path, var) for path, var in state if not isinstance(var, nnx.Param)])
    nnx.update(model, nnx.from_flat_state(state))
    return model


class Structure:
    """A model's graphdef (``nnx.split(model)[0]``) as a hashable key: for a static ``jax.jit`` argument and for caches
    of jitted functions. The graphdef holds ``SqueezeBertConfig``, a mutable (so unhashable) dataclass: the graphdef's
    repr, config values included, is the key. The graphdef is copied, so that a config changed in place later can
    neither change what a cached program was traced for nor make a stale entry match."""

    def __init__(self, graphdef):
        self.graphdef = copy.deepcopy(graphdef)
        self._key = repr(self.graphdef)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Structure) and self._key == other._key


def count_params(model: nnx.Module) -> int:
    """Number of parameters (tied decoder counted once, as the reference's ``num_parameters()``)."""
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
