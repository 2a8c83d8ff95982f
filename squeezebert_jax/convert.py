"""Exact weight conversion between transformers' PyTorch models of every family (SqueezeBERT, BERT, ALBERT, DistilBERT,
ELECTRA, MobileBERT) and our Flax NNX model.

The mapping is an explicit name table (``_table``, built from the family's file in ``squeezebert_jax/models``: its
``encoder_table`` and ``head_table``) plus a per-tensor reshape (``_to_flax`` / ``_to_torch``), dict to
dict: ``torch_to_flat`` (state_dict -> our parameter paths, with the torch names and shapes for messages) and
``flat_to_torch``. Each public function resolves the family record (``models.Family``) once, from the keys and the
config (``models.detect``) or from the style asked (``target_family``), and hands it to the helpers. No model is
built here: ``pretrained.build_model`` builds it and checks that every parameter is found, every tensor used and
every shape right, naming the tensor otherwise. Known non-parameter buffers
(``embeddings.position_ids``) and the tied MLM decoder (``cls.predictions.decoder.*`` or the family's ``tied`` keys,
which must equal the word embeddings / MLM bias) are recognised and skipped. Integer buffers keep their dtype when read;
``tensor_problem`` is the one check that a tensor can be a parameter (floating-point, every value finite), applied
where a model takes a checkpoint's tensors (``build_model``) and where ours are written out (``flat_to_torch``).

Layouts: torch Conv1d weight ``[Cout, Cin/G, 1]`` <-> our ``[G, Cin/G, Cout/G]``; torch Linear ``[out, in]``
(BERT's dense layers are the G=1 case) <-> ``[in, out]``; LayerNorm ``weight`` <-> ``scale``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from typing import Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import models
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import HEADS, SqueezeBertConfig
from squeezebert_jax.tokenizer import checkpoint_file

SKIPPED_BUFFERS = ("embeddings.position_ids",)
# the first key parts of head tensors, in every family's names
_HEAD_KEYS = ("cls", "classifier", "qa_outputs", "predictions", "sop_classifier", "pre_classifier", "vocab_transform",
              "vocab_layer_norm", "vocab_projector", "seq_relationship", "generator_predictions", "generator_lm_head",
              "discriminator_predictions", "sequence_summary")


def _table(config: SqueezeBertConfig, head: str, fam: models.Family) -> list[tuple[str, str, str]]:
    """Full (torch key, flax path, kind) table for ``head`` in ``fam``'s names (``models``); torch keys carry the
    head class's prefix, flax paths the head's ``transformer/``."""
    prefix = "" if head == "SqueezeBertModel" else fam.prefix
    fprefix = "" if head == "SqueezeBertModel" else "transformer/"
    rows = [(prefix + k, fprefix + p, kind) for k, p, kind in fam.encoder_table(config)]
    for part in fam.parts(head):
        rows += fam.head_rows(config, part)
    return rows


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


def infer_head(state_dict: Mapping[str, np.ndarray], architectures: list[str] | None = None) -> str:
    """Our head class for what the checkpoint holds (``architectures`` disambiguates classifier heads)."""
    arch = (architectures or [""])[0]
    # the head architectures names, where any of its tensors is there (one missing is then named as missing)
    for suffix in ("ForTokenClassification", "ForMultipleChoice", "ForQuestionAnswering", "ForSequenceClassification"):
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
    has_sop = any(k.startswith(("cls.seq_relationship.", "sop_classifier.")) for k in state_dict)  # a half: damage
    if has_mlm and has_sop:
        return "SqueezeBertForPreTraining"
    if has_mlm:
        return "SqueezeBertForMaskedLM"
    return "SqueezeBertModel"


def _strip_prefix(state_dict: Mapping[str, np.ndarray], fam: models.Family, head: str) -> dict[str, np.ndarray]:
    """Bring keys to the head class's layout: a bare base model's keys gain the prefix, and vice versa."""
    prefix = fam.prefix
    out = {}
    for k, v in state_dict.items():
        base = k[len(prefix):] if k.startswith(prefix) else k
        is_head_key = base.split(".")[0] in _HEAD_KEYS
        out[base if (head == "SqueezeBertModel" or is_head_key) else prefix + base] = v
    return out


# --------------------------------------------------------------------------------------------------
# What a parameter tensor may hold
# --------------------------------------------------------------------------------------------------

FLOAT_DTYPES = "float16, bfloat16, float32 or float64"


def tensor_problem(x) -> str | None:
    """Why ``x`` cannot be (or come from) a parameter of our floating-point model, or None: a dtype that is not
    floating (an integer, bool or complex tensor would be cast to float32 without a word) or values that are not
    finite numbers (NaN, inf, or a float64 value beyond float32's range). Checked wherever parameters
    cross the boundary: ``pretrained.build_model`` (every tensor a model takes from a checkpoint, named by the
    checkpoint) and ``flat_to_torch`` (every parameter written out)."""
    x = np.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):  # ml_dtypes' bfloat16 is floating here, not to numpy
        return f"has dtype {x.dtype}, not a floating-point one ({FLOAT_DTYPES})"
    wide = x
    if x.dtype.itemsize > 4:
        with np.errstate(over="ignore"):
            x = x.astype(np.float32)
    finite = np.isfinite(x)
    if finite.all():
        return None
    n_nan = int(np.count_nonzero(np.isnan(x)))
    n_inf = int(np.count_nonzero(np.isinf(wide)))
    n_big = x.size - int(np.count_nonzero(finite)) - n_nan - n_inf
    parts = [f"{n} {what}" for n, what in ((n_nan, "NaN"), (n_inf, "inf"), (n_big, "beyond float32's range")) if n]
    return f"holds {', '.join(parts)} of its {x.size:,} values (not finite numbers)"


def listed(items: list[str], limit: int = 5) -> str:
    """``items`` joined by "; ": the first ``limit`` and a count of the rest (one line, however many tensors)."""
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


# --------------------------------------------------------------------------------------------------
# torch state_dict -> our parameter names
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mapped:
    """A checkpoint's tensors under our parameter paths, and what ``pretrained.build_model`` needs to name them in the
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
                  architectures: list[str] | None = None, source: str = "state_dict", tied=True) -> Mapped:
    """A transformers state_dict (numpy arrays; SqueezeBERT or BERT keys) under our parameter paths.

    Names and reshapes only: no model is built and nothing is checked against one (``pretrained.build_model`` does that).
    The tensors of ``head`` (default: the head the checkpoint holds, inferred from its keys and ``architectures``)
    and of the checkpoint's own head are mapped through the name table; ``names`` gives the torch key of every path
    in those tables (so a missing tensor is reported by its torch name), and tensors the table does not name are
    passed through under their torch keys (reported as unexpected). Known buffers are skipped; a tied MLM
    decoder is checked equal to the embeddings and dropped. ``tied``: config.json's ``tie_word_embeddings``; false
    for a head with an MLM is refused (transformers gives such a model a decoder of its own, initialised anew when
    the file holds none; ours is the word embeddings).
    """
    head = check_head(head)
    sd = {k: np.asarray(v) for k, v in state_dict.items() if not any(k.endswith(b) for b in SKIPPED_BUFFERS)}
    fam = models.detect(sd, config)  # ELECTRA's encoder keys are BERT's: its config says which
    if fam.config_family != config.family:
        raise InputError(f"{source}: {fam.style}-layout weights but the config is {config.style}'s (its model_type)")
    if not fam.grouped and not config.is_bert:
        raise InputError(f"{source}: BERT-layout weights but the config has groups != 1")
    saved = infer_head(_strip_prefix(sd, fam, "SqueezeBertModel"), architectures)
    head = head or saved
    sd = _strip_prefix(sd, fam, head)
    if not tied and "mlm" in fam.parts(head):  # false, 0 or null: transformers unties the decoder
        raise InputError(f"{source}: its config.json says tie_word_embeddings {json.dumps(tied)}: a {head}'s MLM "
                         "decoder here is its word embeddings, and transformers gives this model a decoder of its own "
                         "(initialised anew where the file holds none); set it to true if the decoder is the "
                         "embeddings, or convert another --head")
    word_key = ("" if head == "SqueezeBertModel" else fam.prefix) + "embeddings.word_embeddings.weight"
    _check_tied(sd, word_key, source, fam)
    rows = _table(config, head, fam)
    named = {t for t, _, _ in rows}
    rows += [r for part in fam.parts(saved) for r in fam.head_rows(config, part) if r[0] not in named]  # saved head's
    params, names, shapes, layouts = {}, {}, {}, {}
    for tkey, fpath, kind in rows:
        if kind == "empty":  # a zero-size tensor we hold no parameter for
            if tkey in sd and sd[tkey].size:
                raise InputError(f"{source}: {tkey} has shape {tuple(sd[tkey].shape)}; the config implies [0, ...]")
            sd.pop(tkey, None)
            continue
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


def _check_tied(sd: dict, word_key: str, source: str, fam: models.Family) -> None:
    """Drop the tied decoder after checking it really equals the embeddings / MLM bias."""
    weight, bias, mlm_bias = fam.tied
    for key, ref in ((weight, word_key), (bias, mlm_bias))[:2 if bias else 1]:
        if key in sd:
            if ref in sd and not np.array_equal(sd[key], sd[ref], equal_nan=_is_float(sd[key], sd[ref])):
                raise InputError(f"{source}: {key} differs from {ref}; untied MLM decoders are not supported")
            del sd[key]


def _is_float(*xs) -> bool:
    return all(jnp.issubdtype(np.asarray(x).dtype, jnp.floating) for x in xs)


# --------------------------------------------------------------------------------------------------
# Flax model -> torch state_dict
# --------------------------------------------------------------------------------------------------

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


def target_family(config: SqueezeBertConfig, style: str | models.Family | None = None) -> models.Family:
    """The family record a model of ``config`` is written in: ``style``'s (a transformers model_type such as "bert",
    or the record itself), else its own family's (ALBERT, DistilBERT, ...), else SqueezeBERT's (a model with every
    group 1 may also be written as BERT). Each public writer resolves it once and passes the record on."""
    return models.get(style or config.family or "squeezebert")


def flat_to_torch(flat: Mapping[str, np.ndarray], config: SqueezeBertConfig, head: str,
                  style: str | models.Family | None = None) -> dict[str, np.ndarray]:
    """Our parameters of ``head`` (by path) as a transformers state_dict in the keys of ``style`` (``target_family``).
    A parameter that is not floating-point or holds NaN / inf (``tensor_problem``) is an ``InputError`` naming it.
    A family's model (ALBERT, DistilBERT, ELECTRA, MobileBERT) is written only as that family, and back."""
    fam = target_family(config, style)
    if fam.config_family != config.family:
        raise InputError(f"a {config.style} model cannot be written as {fam.style}")
    if not fam.grouped and not config.is_bert:
        raise InputError("only a model with every group count = 1 can be written as BERT")
    if config.type_vocab_size == 0 and fam.config_family != "distilbert":  # transformers' other classes always
        raise InputError(f"type_vocab_size is 0 (no token-type embeddings: a DistilBERT's, or the ELECTRA generator "
                         f"of a DistilBERT discriminator), which transformers' {fam.style} model cannot hold (it "
                         f"always has them: written so, it fails on its first forward); is config.json's family "
                         f"{config.family!r} right for these weights?")
    flat = dict(flat)
    out, bad = {}, []
    for tkey, fpath, kind in _table(config, head, fam):
        if kind == "empty":
            out[tkey] = np.zeros((0, config.vocab_size), np.float32)
            continue
        groups = _groups_of(fpath, config) if kind in ("conv", "linear_as_conv") else 1
        x = np.asarray(flat.pop(fpath))
        problem = tensor_problem(x)
        if problem:
            bad.append(f"{fpath} (to be {tkey}) {problem}")
        out[tkey] = np.ascontiguousarray(_to_torch(x, kind, groups))
    if bad:
        raise InputError(f"the model's parameter {listed(bad)}; refusing to write it out (a diverged training run? "
                         "export an earlier checkpoint)")
    if config.pooler_in_heads:  # no pooler outside the classifiers; no SOP head in transformers' own
        for path in [p for p in flat if "pooler/" in p or p.startswith("cls/seq_relationship/")]:
            del flat[path]
    if flat:
        raise AssertionError(f"parameters with no torch name: {sorted(flat)}")
    if head in fam.heads_without_pooler:
        out = {k: v for k, v in out.items() if not k.startswith(f"{fam.prefix}pooler.")}
    return out


def to_torch_state_dict(model: nnx.Module, style: str | models.Family | None = None) -> dict[str, np.ndarray]:
    """transformers state_dict (numpy float32) of ``model`` in ``style``'s keys (``target_family``: by default its
    family's, else SqueezeBERT's; BERT's may be asked when every group count is 1)."""
    return flat_to_torch(flat_params(model), model.config, head_name(model), target_family(model.config, style))


def torch_architecture(model: nnx.Module, style: str | models.Family | None = None) -> str:
    """The transformers class ``model`` is written as in ``style``'s layout (``target_family``)."""
    fam, head = target_family(model.config, style), head_name(model)
    if head not in fam.torch_classes:
        raise InputError(f"transformers has no {fam.style} class for {head}: such a model is kept in our MODEL_DIR "
                         "format only")
    return fam.torch_classes[head]


# --------------------------------------------------------------------------------------------------
# Reading a transformers checkpoint directory
# --------------------------------------------------------------------------------------------------

def torch_checkpoint_file(path: str | os.PathLike) -> str:
    """The weights file of a transformers checkpoint: ``path`` itself, or a directory's ``model.safetensors`` or
    ``pytorch_model.bin`` (found through ``tokenizer.checkpoint_file``: never a symlink out of the directory)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    for name in ("model.safetensors", "pytorch_model.bin"):
        found = checkpoint_file(path, name)
        if found is not None:
            if name == "model.safetensors" and checkpoint_file(path, "pytorch_model.bin") is not None:
                logging.getLogger(__name__).warning(
                    "%s holds both model.safetensors and pytorch_model.bin: reading model.safetensors (as "
                    "transformers does); the other is not read", path)
            return found
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if checkpoint_file(path, index) is not None:
            raise InputError(f"{path}: a checkpoint sharded over several files ({index}); this converter reads one "
                             "weights file: save it again unsharded (transformers' save_pretrained with a "
                             "max_shard_size larger than the model) and convert that")
    raise FileNotFoundError(f"{path}: no model.safetensors or pytorch_model.bin")


def read_torch_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Tensors of a transformers checkpoint (dir, .safetensors or .bin) as numpy: floating ones as float32, the others
    (integer buffers such as ``position_ids``; an integer or bool tensor where a weight belongs, which
    ``pretrained.build_model`` refuses by name) in their own dtype.

    ``.bin`` files are read with ``torch.load(weights_only=True)``, never as arbitrary pickles.
    """
    path = torch_checkpoint_file(path)
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

            return _torch_to_numpy(load_file(path), path)
        return {k: _as_float32(v) if jnp.issubdtype(v.dtype, jnp.floating) else v for k, v in out.items()}
    import torch

    with open(path, "rb") as f:
        head = f.read(2)
    if head != b"PK" and not head.startswith(b"\x80"):  # torch.save's zip archive, or an older protocol-2+ pickle
        raise InputError(f"{path}: not a PyTorch checkpoint (neither torch.save's zip archive nor a pickle); "
                         "convert a transformers checkpoint directory (model.safetensors or pytorch_model.bin)")
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        # torch's own text advises loading the file unsafely: only what it found is passed on
        found = re.search(r"Unsupported (?:global|operand): (?:GLOBAL )?\S+|unsupported GLOBAL \S+", str(e))
        if found is None:
            text = " ".join(str(e).split())
            detail = f"{type(e).__name__}{': ' + text.split('. ')[0][:120] if text else ''}"
            raise InputError(f"{path}: cannot be read as a PyTorch checkpoint, damaged or cut short? ({detail})") from e
        raise InputError(f"{path}: not a PyTorch checkpoint of tensors alone ({found[0]}); this converter loads "
                         "weights only, never a pickle's objects: save the model's state_dict (or safetensors) and "
                         "convert that") from e
    if not isinstance(sd, dict):
        raise InputError(f"{path}: expected a state_dict, got {type(sd).__name__}")
    return _torch_to_numpy(sd, path)


def _as_float32(x: np.ndarray) -> np.ndarray:
    """A floating tensor as float32, unless float64 values beyond float32's range would become an inf the file does not
    hold: then as it is, for ``tensor_problem`` to name them as what they are."""
    with np.errstate(over="ignore"):
        out = x.astype(np.float32)
    return x if x.dtype.itemsize > 4 and np.isinf(out).sum() != np.isinf(x).sum() else out


def _torch_to_numpy(sd: dict, path: str) -> dict[str, np.ndarray]:
    """torch tensors as numpy: floating ones (bfloat16 too) as float32, the others in their own dtype."""
    import torch

    out = {}
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor):
            raise InputError(f"{path}: entry {k!r} is a {type(v).__name__}, not a tensor; expected a flat state_dict "
                             "of tensors (as transformers' save_pretrained writes)")
        try:
            out[k] = _as_float32(v.numpy()) if v.dtype == torch.float64 else (
                v.float() if v.is_floating_point() else v).numpy()
        except (TypeError, RuntimeError) as e:  # a dtype numpy lacks (e.g. a quantized one)
            raise InputError(f"{path}: tensor {k} has dtype {str(v.dtype).removeprefix('torch.')}, which cannot be "
                             f"read as numpy ({e}); expected {FLOAT_DTYPES} weights") from None
    return out
