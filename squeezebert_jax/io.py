"""MODEL_DIR: the project's own saved model, and export to a transformers (PyTorch) directory.

A MODEL_DIR holds ``config.json`` (transformers field names; ``architectures`` names our head class),
``params.safetensors`` (our parameter paths, e.g. ``transformer/encoder/layers/0/attention/query/kernel``,
float32) and the tokenizer file(s) of the source (``vocab.txt`` or a SentencePiece model).
``load_pretrained`` also accepts a transformers directory (``model.safetensors`` / ``pytorch_model.bin``)
and converts it on the fly.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import convert
from squeezebert_jax.model import HEADS, SqueezeBertConfig
from squeezebert_jax.errors import InputError

log = logging.getLogger(__name__)

PARAMS_FILE = "params.safetensors"
TOKENIZER_FILES = ("vocab.txt", "spiece.model", "sentencepiece.model", "tokenizer.model", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json")


def _atomic_write(path: str, write) -> None:
    """Write through a temp file in the same directory, then rename: never a half-written file."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _write_json(path: str, d: dict) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(d, f, indent=2, sort_keys=True)
            f.write("\n")
    _atomic_write(path, w)


def copy_tokenizer_files(src_dir: str | None, dst_dir: str) -> list[str]:
    """Copy whichever tokenizer files ``src_dir`` has; returns their names."""
    copied = []
    if src_dir and os.path.isdir(src_dir):
        for name in TOKENIZER_FILES:
            src = os.path.join(src_dir, name)
            if os.path.isfile(src) and os.path.abspath(src) != os.path.abspath(os.path.join(dst_dir, name)):
                shutil.copyfile(src, os.path.join(dst_dir, name))
                copied.append(name)
            elif os.path.isfile(src):
                copied.append(name)
    return copied


def flat_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """Parameters by path, float32, C-contiguous: safetensors.numpy writes a Fortran-ordered array's memory as if it
    were C-ordered (a transposed or column-indexed parameter would come back scrambled)."""
    return {"/".join(str(p) for p in path): np.ascontiguousarray(np.asarray(v.get_value(), np.float32))
            for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def save_pretrained(model: nnx.Module, model_dir: str | os.PathLike, tokenizer_dir: str | None = None) -> str:
    """Write ``model`` as a MODEL_DIR (config.json, params.safetensors, tokenizer files from ``tokenizer_dir``)."""
    from safetensors.numpy import save_file

    model_dir = os.fspath(model_dir)
    os.makedirs(model_dir, exist_ok=True)
    head = convert.head_name(model)
    d = model.config.to_dict()
    d["architectures"] = [head]
    if hasattr(model, "num_labels"):
        d["num_labels"] = model.num_labels
    d["library"] = "squeezebert_jax"
    _atomic_write(os.path.join(model_dir, PARAMS_FILE),
                  lambda tmp: save_file(flat_params(model), tmp, metadata={"head": head}))
    _write_json(os.path.join(model_dir, "config.json"), d)
    copy_tokenizer_files(tokenizer_dir, model_dir)
    return model_dir


def _read_config(model_dir: str) -> tuple[SqueezeBertConfig, dict]:
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{model_dir}: no config.json")
    with open(path) as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: not valid JSON ({e})") from e
    config = SqueezeBertConfig.from_dict(raw, source=path)
    arch = raw.get("architectures")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        raise InputError(f"{path}: architectures is {json.dumps(arch)[:60]}; expected a list of class names, "
                         'e.g. ["SqueezeBertForMaskedLM"]')
    return config, raw


def check_output_dir(out: str | os.PathLike, src: str | os.PathLike | None = None, overwrite: bool = False,
                     what: str = "--out", ignore: tuple[str, ...] = ()) -> str:
    """Refuse, before any work, an output directory that would lose something: ``src`` itself or a directory inside
    it (always: a conversion never writes into its source), an existing file, or a directory that already holds
    files other than ``ignore`` (unless ``overwrite``: then the files written replace those of the same name).
    Returns ``out``."""
    out = os.fspath(out)
    if src is not None:
        s, o = os.path.realpath(os.fspath(src)), os.path.realpath(out)
        if o == s or o.startswith(s.rstrip(os.sep) + os.sep):
            where = "is" if o == s else "is inside"
            raise InputError(f"{what} {out} {where} the source directory {os.fspath(src)}; a conversion never writes "
                             f"into its source: choose another {what} directory")
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{what} {out} is an existing file, not a directory; choose a directory to write into")
    if os.path.isdir(out) and not overwrite:
        present = sorted(set(os.listdir(out)) - set(ignore))
        if present:
            listed = ", ".join(present[:5]) + (f", ... ({len(present)} entries)" if len(present) > 5 else "")
            raise InputError(f"{what} {out} is not empty (it holds {listed}); pass --overwrite to replace the files "
                             "written there, or choose a new directory")
    _check_parent(out, what)
    return out


def _check_parent(out: str, what: str) -> None:
    """The nearest existing ancestor of ``out`` is a directory (so that makedirs / writing can succeed)."""
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {out}: {parent} is a file, not a directory")


def check_output_file(out: str | os.PathLike, overwrite: bool = False, what: str = "--out") -> str:
    """Refuse, before any work, an output file path that is a directory, or an existing file unless ``overwrite``."""
    out = os.fspath(out)
    if os.path.isdir(out):
        raise InputError(f"{what} {out} is a directory; give the path of the file to write, "
                         f"e.g. {os.path.join(out, 'model.ptl')}")
    if os.path.exists(out) and not overwrite:
        raise InputError(f"{what} {out} already exists; pass --overwrite to replace it, or choose another path")
    _check_parent(out, what)
    return out


def load_pretrained(model_dir: str | os.PathLike, head: str | type | None = None, *, num_labels: int | None = None,
                    dtype=jnp.float32, seed: int = 0, config_overrides: dict | None = None) -> nnx.Module:
    """Load a MODEL_DIR (or a transformers checkpoint directory) as our model.

    ``head``: a class or class name from ``squeezebert_jax.HEADS``; by default the class that was saved.
    When a different head is asked for (e.g. a classifier on a pretraining checkpoint), the encoder is
    loaded, the saved head is dropped and the new head's parameters keep their random initialisation;
    both are reported in the log and ``model.newly_initialized`` lists the new ones.
    """
    model_dir = os.fspath(model_dir)
    head = convert.check_head(head)
    config, raw = _read_config(model_dir)
    if config_overrides:
        config = config.replace(**config_overrides)
    native = os.path.isfile(os.path.join(model_dir, PARAMS_FILE))
    if native:
        from safetensors.numpy import load_file

        path = os.path.join(model_dir, PARAMS_FILE)
        try:
            flat = load_file(path)
        except Exception as e:
            raise InputError(f"{path}: cannot read ({e})") from e
        saved = (raw.get("architectures") or ["SqueezeBertModel"])[0]
        if saved not in HEADS:
            raise InputError(f"{model_dir}/config.json: unknown architecture {saved!r}")
        model = _from_flat(flat, config, saved, head or saved, num_labels, seed, path)
    else:
        sd = convert.read_torch_checkpoint(model_dir)
        arch = raw.get("architectures")
        saved = convert.infer_head(convert._strip_prefix(sd, convert.detect_style(sd), "SqueezeBertModel"), arch)
        model = convert.from_torch_state_dict(sd, config, saved, architectures=arch, num_labels=None, seed=seed,
                                              source=model_dir, allow_new_heads=True)
        relabel = num_labels is not None and getattr(model, "num_labels", num_labels) != num_labels
        if (head and head != saved) or relabel:  # another head, or a classifier with another label count
            model = _from_flat(flat_params(model), config, saved, head or saved, num_labels, seed, model_dir)
    if dtype != jnp.float32:
        model = cast_compute_dtype(model, dtype)
    return model


def _from_flat(flat: dict[str, np.ndarray], config, saved: str, head: str, num_labels, seed, source) -> nnx.Module:
    convert.check_head(head)
    kwargs = {}
    if "Classification" in head:
        n = num_labels
        if n is None and head == saved and "classifier/kernel" in flat:
            n = int(flat["classifier/kernel"].shape[-1])
        kwargs["num_labels"] = n
    model = HEADS[head](config, rngs=nnx.Rngs(seed), **kwargs)
    target = nnx.to_flat_state(nnx.state(model, nnx.Param))
    # Match on paths without the head classes' "transformer/" prefix (a bare SqueezeBertModel has none).
    src = {k.removeprefix("transformer/"): v for k, v in flat.items()}
    saved_labels = src["classifier/kernel"].shape[-1] if "classifier/kernel" in src else None
    if head == saved and num_labels and saved_labels not in (None, num_labels):
        # e.g. MNLI (3 labels) -> RTE (2): the encoder transfers, the classifier is new.
        src = {k: v for k, v in src.items() if not k.startswith("classifier/")}
        saved = f"{saved} with {saved_labels} labels"
    missing, used = [], set()
    for path, var in target:
        key = "/".join(str(p) for p in path).removeprefix("transformer/")
        if key not in src:
            missing.append(key)
            continue
        if tuple(src[key].shape) != tuple(var.get_value().shape):
            raise InputError(f"{source}: tensor {key} has shape {tuple(src[key].shape)}, the config implies "
                             f"{tuple(var.get_value().shape)} (does config.json match the weights?)")
        var.set_value(jnp.asarray(src[key], jnp.float32))
        used.add(key)
    unused = sorted(set(src) - used)
    if head == saved and (missing or unused):
        raise InputError(f"{source}: weights do not match {head}: missing {missing}, unexpected {unused}")
    if missing:
        log.warning("%s: %s parameters not in the checkpoint, randomly initialised: %s", source, head,
                    ", ".join(missing))
    if unused:
        log.info("%s: %s drops the saved %s parameters: %s", source, head, saved, ", ".join(unused))
    model.newly_initialized = tuple(missing)
    return model


def cast_compute_dtype(model: nnx.Module, dtype) -> nnx.Module:
    """Same parameters (float32), compute in ``dtype`` (e.g. jnp.bfloat16)."""
    for _, m in nnx.iter_graph(model):
        if isinstance(m, nnx.Module) and hasattr(m, "dtype"):
            m.dtype = dtype
    return model


# --------------------------------------------------------------------------------------------------
# transformers export
# --------------------------------------------------------------------------------------------------

def export_torch(model: nnx.Module, hf_dir: str | os.PathLike, style: str = "squeezebert",
                 tokenizer_dir: str | None = None) -> str:
    """Write a transformers checkpoint dir (config.json with ``architectures`` + model.safetensors)."""
    from safetensors.numpy import save_file

    hf_dir = os.fspath(hf_dir)
    os.makedirs(hf_dir, exist_ok=True)
    sd = convert.to_torch_state_dict(model, style=style)
    d = model.config.to_dict(model_type=style)
    d["architectures"] = [convert.torch_architecture(model, style)]
    d["tie_word_embeddings"] = True
    if hasattr(model, "num_labels"):
        d["num_labels"] = model.num_labels
        if model.config.id2label is None:
            d["id2label"] = {str(i): f"LABEL_{i}" for i in range(model.num_labels)}
            d["label2id"] = {f"LABEL_{i}": i for i in range(model.num_labels)}
    _atomic_write(os.path.join(hf_dir, "model.safetensors"), lambda tmp: save_file(sd, tmp, metadata={"format": "pt"}))
    _write_json(os.path.join(hf_dir, "config.json"), d)
    copy_tokenizer_files(tokenizer_dir, hf_dir)
    return hf_dir


def import_torch(hf_dir: str | os.PathLike, model_dir: str | os.PathLike, head: str | None = None,
                 label_names: list[str] | None = None) -> nnx.Module:
    """Convert a transformers checkpoint directory into a MODEL_DIR; returns the model.

    ``label_names`` names a classifier's outputs 0..n-1 (its ``id2label``) where the checkpoint's config does not
    (LABEL_0, LABEL_1, ...); GLUE evaluation then reorders them into the task's label order.
    """
    hf_dir = os.fspath(hf_dir)
    head = convert.check_head(head)
    config, raw = _read_config(hf_dir)
    sd = convert.read_torch_checkpoint(hf_dir)
    model = convert.from_torch_state_dict(sd, config, head, architectures=raw.get("architectures"),
                                          source=hf_dir, allow_new_heads=True)
    if label_names:
        n = getattr(model, "num_labels", None)
        if n != len(label_names) or len(set(label_names)) != len(label_names):
            raise InputError(f"{hf_dir}: {len(label_names)} label names {label_names} for a "
                             f"{convert.head_name(model)} with {n} outputs (they must be distinct, one per output)")
        model.config.id2label = dict(enumerate(label_names))
    if model.newly_initialized:
        log.warning("%s lacks %d tensors of %s (randomly initialised): %s", hf_dir, len(model.newly_initialized),
                    convert.head_name(model), ", ".join(model.newly_initialized))
    save_pretrained(model, model_dir, tokenizer_dir=hf_dir)
    return model
