"""MODEL_DIR: the project's own saved model, and export to a transformers (PyTorch) directory.

A MODEL_DIR holds ``config.json`` (transformers field names; ``architectures`` names our head class),
``params.safetensors`` (our parameter paths, e.g. ``transformer/encoder/layers/0/attention/query/kernel``,
float32) and the tokenizer file(s) of the source (``vocab.txt`` or a SentencePiece model).
``load_pretrained`` also accepts a transformers directory (``model.safetensors`` / ``pytorch_model.bin``)
and converts it on the fly (``convert`` maps the names and layouts).

``build_model`` is the one place a model is built from weights (a MODEL_DIR, a transformers directory or state_dict)
and the one check for missing, unexpected and misshapen tensors; it draws no random weights for the checkpoint to
replace. Files are written whole or not at all (``files.atomic_write``). Every file of a checkpoint directory is found
through ``tokenizer.checkpoint_file`` (none read through a symlink out of it), and tokenizer files are read by the
tokenizer's own reader before they are copied on (``tokenizer_files``).
"""

from __future__ import annotations

import collections
import glob
import json
import logging
import numbers
import os
import shutil
from collections.abc import Callable, Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import convert, models, tasks
from squeezebert_jax.convert import flat_params
from squeezebert_jax.files import (atomic_write, holds_model, json_repr, json_type, json_value, no_such_file,
                                   overwrite_flag, path_argument, python_scalar, read_json, refuse_nested, run_of)
from squeezebert_jax.errors import CheckpointMismatchError, InputError
from squeezebert_jax.model import HEADS, SqueezeBertConfig, set_initial_values
from squeezebert_jax.tokenizer import (TOKENIZER_FILE_NAMES, check_added_tokens, check_tokenizer_config,
                                      checkpoint_file)
from squeezebert_jax.tokenizer import load as load_tokenizer
from squeezebert_jax.tokenizer import read_vocab

log = logging.getLogger(__name__)

PARAMS_FILE = "params.safetensors"
TOKENIZER_FILES = ("vocab.txt", "spiece.model", "sentencepiece.model", "tokenizer.model", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json")


def _write_json(path: str, d: dict) -> None:
    atomic_write(path, json.dumps(d, indent=2, sort_keys=True) + "\n")


def tokenizer_files(src_dir: str | None, vocab_size: int | None = None) -> list[tuple[str, str]]:
    """(name, path) of each tokenizer file ``src_dir`` has (none for None), each found through ``checkpoint_file`` (a
    symlink out of ``src_dir`` is refused) and a vocabulary (``vocab.txt``, a SentencePiece ``*.model``) read by its
    one reader, so that one lacking a special token, repeating a line or not UTF-8 is refused by name before anything
    is written; with ``vocab_size`` (a conversion's model), one of more tokens than the model has embeddings too. A
    ``tokenizer.json`` beside a ``vocab.txt`` must hold the same WordPiece vocabulary: transformers reads the one,
    this library the other (``_check_tokenizer_json``)."""
    found, loaded = [], {}
    if src_dir and os.path.isdir(src_dir):
        for name in TOKENIZER_FILES:
            path = checkpoint_file(src_dir, name)
            if path is not None:
                if name in TOKENIZER_FILE_NAMES:
                    n = (loaded.setdefault(name, load_tokenizer(path))).vocab_size
                    if vocab_size is not None and n > vocab_size:
                        blank = [i + 1 for i, t in enumerate(read_vocab(path)) if t == ""] if name == "vocab.txt" \
                            else []
                        why = (f"line {blank[0]} is blank, a token of its own: a line added by mistake?" if blank
                               else "a vocabulary of another model?")
                        raise InputError(f"{path}: {n} tokens, but the model's vocab_size is {vocab_size}: ids past "
                                         f"{vocab_size - 1} would have no embedding ({why})")
                found.append((name, path))
    paths = dict(found)
    if vocabulary := next((n for n in TOKENIZER_FILE_NAMES if n in paths), None):  # as Tokenizer.from_dir reads one
        check_added_tokens(src_dir, vocabulary, lambda: loaded[vocabulary].tokens)
    if "vocab.txt" in paths:  # the checks Tokenizer.from_dir makes of a MODEL_DIR of these files, and transformers'
        lines = read_vocab(paths["vocab.txt"])
        check_tokenizer_config(src_dir)
        if "tokenizer.json" in paths:
            _check_tokenizer_json(paths["tokenizer.json"], paths["vocab.txt"], lines)
        if "special_tokens_map.json" in paths:
            _check_special_tokens(paths["special_tokens_map.json"], paths["vocab.txt"], lines)
    return found


def _check_special_tokens(path: str, vocab_path: str, lines: list[str]) -> None:
    """Every token ``path`` (transformers' ``special_tokens_map.json``) names is a line of ``vocab_path``:
    transformers would otherwise add it as a new token, of an id the model has no embedding for."""
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise InputError(f"{path}: {json_type(doc)}, not a JSON object of special tokens")
    vocab = set(lines)  # vocab_path's tokens
    for key, value in doc.items():
        for item in value if isinstance(value, list) else [value]:
            token = item.get("content") if isinstance(item, dict) else item
            if not isinstance(token, str):
                raise InputError(f"{path}: {key} is {json_value(item)}, not a token")
            if token not in vocab:
                raise InputError(f"{path}: {key} {token!r} is not a token of {vocab_path}; transformers would add it "
                                 "as a new token the model has no embedding for")


def _check_tokenizer_json(path: str, vocab_path: str, lines: list[str]) -> None:
    """``path`` (a tokenizers ``tokenizer.json``) is a WordPiece whose token -> id map is ``vocab_path``'s
    ``lines``."""
    doc = read_json(path)
    model = doc.get("model") if isinstance(doc, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise InputError(f"{path}: a {kind or 'tokenizer'} model beside {vocab_path} (WordPiece): the two tokenizers "
                         "differ; keep the one the model was trained with")
    norm = doc.get("normalizer")
    if isinstance(norm, dict) and norm.get("type") == "BertNormalizer" and (
            norm.get("lowercase") is not True or norm.get("strip_accents") not in (None, True)):
        raise InputError(f"{path}: its normalizer keeps case or accents (lowercase {json_value(norm.get('lowercase'))}"
                         f", strip_accents {json_value(norm.get('strip_accents'))}), but this library's WordPiece of "
                         f"{vocab_path} is uncased BERT's: transformers would encode \"The\" otherwise than it; keep "
                         "the tokenizer the model was trained with")
    ids = {tok: i for i, tok in enumerate(lines)}
    ours = model["vocab"]
    if ours != ids:
        diff = next(((t, ours.get(t), ids.get(t)) for t in sorted(set(ours) | set(ids), key=str)
                     if ours.get(t) != ids.get(t)), None)
        tok, a, b = (*diff[:1], *("absent" if i is None else f"id {i}" for i in diff[1:]))
        raise InputError(f"{path}: its vocabulary differs from {vocab_path} (token {tok!r}: {a} there, {b} in "
                         "vocab.txt); transformers reads tokenizer.json and this library vocab.txt, so they would "
                         "encode text differently: keep the one the model was trained with")


# The files that make a directory a model (ours, transformers', a fine-tuned model's card): one left from another model
# beside a new one is read with it (transformers reads model.safetensors before params.safetensors means anything to
# it; predict reads a task.json of another task)
MODEL_FILES = ("config.json", PARAMS_FILE, "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
               "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack", "task.json")
# a tokenizer's file this library never writes, but transformers reads beside any vocabulary: another model's added
# tokens (ids past this model's embeddings) must not stay beside a new one
FOREIGN_TOKENIZER_FILES = ("added_tokens.json",)


def check_model_dir(dst_dir: str, writes: tuple[str, ...], files: list[tuple[str, str]],
                    overwrite: bool | str = False) -> None:
    """Writing a model (its files ``writes`` and the tokenizer ``files``) into ``dst_dir`` loses nothing and leaves
    nothing of another model to be read with it: a directory that holds a model already is refused unless
    ``overwrite``, and even then where a model file (``MODEL_FILES``) or, with a tokenizer of its own, a tokenizer
    file of another model would stay beside this one's (a stale vocab.txt beside a new spiece.model is read instead;
    a fine-tuned model's task.json beside a pretraining model is read as its card). Before anything is written,
    naming the file. ``overwrite="replace"``: a training run's own MODEL_DIR (WORKDIR/model, written again at each
    export, and after the run's --overwrite): the other model's files are removed instead, with a warning naming them,
    so that an export never fails after the training."""
    own = overwrite == "replace"  # a run's export into its own directories
    if not own:  # 'yes' replaced a model
        overwrite = overwrite_flag(overwrite)
    # never inside another model, nor in a run's checkpoints; but a run's own export, nor in its tb/, model/, ...
    refuse_nested(dst_dir, "the model directory", None if own else "")
    if not own and (owner := run_of(dst_dir)):  # its config.json is the run's settings: replaced by a model's
        raise InputError(f"the model directory {dst_dir} is the directory of a {owner} run: its config.json holds the "
                         "run's settings and its checkpoints lie beside, --overwrite or not; choose another directory "
                         f"(the run writes its model to {os.path.join(dst_dir, 'model')})")
    if os.path.lexists(dst_dir) and not os.path.isdir(dst_dir):
        raise InputError(f"{dst_dir} is {'a link to nothing' if not os.path.exists(dst_dir) else 'a file'}, not a "
                         "directory: choose a directory for the model")
    if not os.path.isdir(dst_dir):
        return
    ours = set(writes) | {name for name, _ in files}
    tokenizer = TOKENIZER_FILES + FOREIGN_TOKENIZER_FILES if files else FOREIGN_TOKENIZER_FILES
    held = [n for n in MODEL_FILES + tokenizer if os.path.lexists(os.path.join(dst_dir, n))]
    stale = [n for n in held if n not in ours]
    # what the writes would replace: a tokenizer file copied onto itself (tokenizer_dir is dst_dir) is none
    replaced = [n for n in held if n in ours and not any(
        name == n and os.path.abspath(src) == os.path.abspath(os.path.join(dst_dir, n)) for name, src in files)]
    if stale and overwrite == "replace":
        log.warning("%s: removing %s, of the model written there before, not of this one", dst_dir, ", ".join(stale))
        for name in stale:
            os.remove(os.path.join(dst_dir, name))
    elif stale:
        tok = stale[0] not in MODEL_FILES
        what = "a tokenizer file" if tok else "a model file"
        mine = ", ".join(sorted(ours & set(TOKENIZER_FILES if tok else MODEL_FILES))) or "none"
        raise InputError(f"{dst_dir} holds {stale[0]}, {what} this model does not have (it has {mine}): it would be "
                         "read with this model's; remove it, or choose another directory")
    if replaced and not overwrite:
        what = "a model already" if set(replaced) & set(MODEL_FILES) else "tokenizer files already"
        raise InputError(f"{dst_dir} holds {what} ({', '.join(replaced)}); pass overwrite=True to replace it, or "
                         "choose another directory")


def copy_tokenizer_files(src_dir: str | None, dst_dir: str, files: list[tuple[str, str]] | None = None) -> list[str]:
    """Copy whichever tokenizer files ``src_dir`` has (``files``: ``tokenizer_files(src_dir)``, if already checked);
    returns their names."""
    files = tokenizer_files(src_dir) if files is None else files
    for name, src in files:
        if os.path.abspath(src) != os.path.abspath(os.path.join(dst_dir, name)):
            shutil.copyfile(src, os.path.join(dst_dir, name))
    return [name for name, _ in files]


def _given_tokenizer(model, tokenizer_dir, needed: bool = True) -> list[tuple[str, str]]:
    """The tokenizer files of a writer's ``tokenizer_dir`` argument (``save_pretrained``, ``export_torch``), checked
    with ``model`` before anything is written: a model that is none, a tokenizer_dir that is not there (the model was
    written without a vocabulary) or that holds no tokenizer this library reads, a bad vocabulary, or one of more
    tokens than the model has embeddings (``tokenizer_files``) is refused by name. ``needed`` False: a directory with
    no tokenizer file gives none (an export's checkpoint may go without)."""
    if not isinstance(model, nnx.Module) or not isinstance(getattr(model, "config", None), SqueezeBertConfig):
        raise InputError(f"model is {type(model).__name__} {str(model)[:40]!r}, not a model of this library (e.g. "
                         "load_pretrained's); to copy a MODEL_DIR, load it first")
    if tokenizer_dir is None:
        return []
    tokenizer_dir = path_argument("tokenizer_dir", tokenizer_dir)
    if not os.path.isdir(tokenizer_dir):
        raise InputError(f"tokenizer_dir={tokenizer_dir!r}: "
                         f"{'not a directory' if os.path.exists(tokenizer_dir) else 'no such directory'}; give the "
                         "directory that holds the model's vocab.txt (or its SentencePiece model), or leave it out")
    found = tokenizer_files(tokenizer_dir, model.config.vocab_size)
    if needed and not any(name in TOKENIZER_FILE_NAMES for name, _ in found):
        raise InputError(f"tokenizer_dir={tokenizer_dir!r}: no tokenizer file this library reads "
                         f"({', '.join(TOKENIZER_FILE_NAMES)}; transformers 5 saves a WordPiece tokenizer as "
                         "tokenizer.json alone): the MODEL_DIR could read no text; give the directory of its vocab.txt")
    return found


def save_pretrained(model: nnx.Module, model_dir: str | os.PathLike, tokenizer_dir: str | None = None, *,
                    overwrite: bool | str = False, beside: tuple[str, ...] = ()) -> str:
    """Write ``model`` as a MODEL_DIR (config.json, params.safetensors, tokenizer files from ``tokenizer_dir``).
    A directory that holds a model already is replaced only with ``overwrite``, and never where a file of the other
    model would stay (``check_model_dir``; ``beside``: files the caller writes next, such as a task's task.json;
    ``overwrite="replace"``: a training run's own model directory, whose other files go)."""
    from safetensors.numpy import save_file

    model_dir = path_argument("model_dir", model_dir)
    tok_files = _given_tokenizer(model, tokenizer_dir)
    check_model_dir(model_dir, ("config.json", PARAMS_FILE) + tuple(beside), tok_files, overwrite)
    if tokenizer_dir is None:  # the tokenizer already there (if any) is read as this model's: one that cannot be is
        tokenizer_files(model_dir, model.config.vocab_size)  # refused (a vocabulary of more tokens than embeddings)
    os.makedirs(model_dir, exist_ok=True)
    head = convert.head_name(model)
    d = model.config.to_dict()
    d["architectures"] = [head]
    if hasattr(model, "num_labels"):
        d["num_labels"] = int(model.num_labels)
    d["library"] = "squeezebert_jax"
    config_text = json.dumps(d, indent=2, sort_keys=True) + "\n"  # a value JSON cannot hold fails before any write
    atomic_write(os.path.join(model_dir, PARAMS_FILE),
                  lambda tmp: save_file(flat_params(model), tmp, metadata={"head": head}))
    atomic_write(os.path.join(model_dir, "config.json"), config_text)
    copy_tokenizer_files(tokenizer_dir, model_dir, tok_files)
    return model_dir


def _is_model_file(path: str) -> bool:
    """``path`` is one of a MODEL_DIR's own files (its config.json, its weights): its directory was meant."""
    parent = os.path.dirname(path) or "."
    return os.path.basename(path) in MODEL_FILES and os.path.isfile(os.path.join(parent, "config.json"))


def not_a_model_dir(model_dir: str, lacks: str, role: str = "") -> FileNotFoundError:
    """The error for a directory given as a MODEL_DIR that lacks ``lacks`` (its config.json, its tokenizer), naming the
    MODEL_DIR inside when it is a training run's workdir (WORKDIR/model: what --config.init_from and --model take)."""
    if not os.path.lexists(model_dir):  # a text given for the directory, or a typo: not "no config.json"
        return FileNotFoundError(f"{role}{model_dir}: no such directory (a MODEL_DIR: config.json and the weights)")
    if os.path.islink(model_dir) and not os.path.exists(model_dir):  # a loop or a link to nothing: not "a file"
        return FileNotFoundError(f"{role}{model_dir}: {no_such_file(model_dir)} (a MODEL_DIR: config.json and the "
                                 "weights)")
    if not os.path.isdir(model_dir):  # its config.json, a data file: "config.json: no config.json" was said
        hint = f"; give {os.path.dirname(model_dir)}" if _is_model_file(model_dir) else ""
        return FileNotFoundError(f"{role}{model_dir}: a file, not a MODEL_DIR (a directory: config.json and the "
                                 f"weights){hint}")
    inner = os.path.join(model_dir, "model")
    if os.path.isfile(os.path.join(inner, "config.json")):
        return FileNotFoundError(f"{role}{model_dir}: no {lacks}; {model_dir} is a training run's workdir: its model "
                                 f"is {inner}")
    found = sorted(d for pattern in ("*/", "*/model/", "*/*/model/")  # a GLUE run's or a sweep's root: its models
                   for d in map(os.path.dirname, glob.glob(os.path.join(glob.escape(model_dir), pattern)))
                   if holds_model(d))  # config.json beside weights: a run's own config.json is none
    shown = ", ".join(found[:3]) + ", ..." * (len(found) > 3)
    hint = f"; it holds {len(found)} model{'s' * (len(found) > 1)} ({shown}): give one of them" if found else ""
    return FileNotFoundError(f"{role}{model_dir}: no {lacks}{hint}")


def read_model_config(model_dir: str | os.PathLike) -> tuple[SqueezeBertConfig, dict]:
    """The one reader of a checkpoint directory's ``config.json`` (a MODEL_DIR or a transformers directory, found
    through ``checkpoint_file``): our config and the file's own dict. Invalid JSON, a field of the wrong type or range
    and ``architectures`` that are not a list of class names are an ``InputError`` naming the file."""
    model_dir = os.fspath(model_dir)
    path = checkpoint_file(model_dir, "config.json")
    if path is None:
        raise not_a_model_dir(model_dir, "config.json")
    if (job := run_of(model_dir)) and not holds_model(model_dir):  # its config.json is the run's settings
        inner = os.path.join(model_dir, "model")
        where = f"its model is {inner}" if holds_model(inner) else f"it writes its model to {inner} (none there yet)"
        raise InputError(f"{model_dir} is a {job} run's directory, not a MODEL_DIR (its config.json holds the run's "
                         f"settings): {where}")
    raw = read_json(path)
    arch = raw.get("architectures") if isinstance(raw, dict) else None
    if (isinstance(raw, dict) and "model_type" not in raw and isinstance(arch, list) and arch
            and isinstance(arch[0], str) and not arch[0].startswith("SqueezeBert")):  # else read as SqueezeBERT's
        raise InputError(f"{path}: no model_type, and architectures names a {arch[0]}: a config.json without "
                         "model_type is read as SqueezeBERT's; add the model's own (e.g. \"model_type\": \"bert\"; "
                         f"one of {', '.join(models.BY_STYLE)})")
    config = SqueezeBertConfig.from_dict(raw, source=path)
    tie = raw.get("tie_word_embeddings", True) if isinstance(raw, dict) else True  # "false" was read as tied
    if not isinstance(tie, bool) and not (isinstance(tie, int) and tie in (0, 1)):  # (0 and 1: Python reads so too)
        raise InputError(f"{path}: tie_word_embeddings is {json_value(raw['tie_word_embeddings'])}; expected true or "
                         "false")
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        raise InputError(f"{path}: architectures is {json.dumps(arch)[:60]}; expected a list of class names, "
                         'e.g. ["SqueezeBertForMaskedLM"]')
    n = raw.get("num_labels")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):  # 2.0, "2", true: which is meant?
        raise InputError(f"{path}: num_labels is {json.dumps(n)}; expected an integer >= 1 (the classifier's outputs)")
    outputs = n if n is not None else len(config.id2label) if config.id2label is not None else None
    if config.problem_type == "regression" and outputs not in (None, 1):  # transformers: a multi-output regression
        raise InputError(f"{path}: problem_type is \"regression\" with {outputs} outputs; a regression model here has "
                         "one output (its score), and a classifier's problem_type is single_label_classification or "
                         "multi_label_classification")
    if config.id2label is not None and n is not None and n != len(config.id2label):
        raise InputError(f"{path}: num_labels is {json.dumps(n)} but id2label names {len(config.id2label)} labels; "
                         "one name per output of the classifier")
    label2id = raw.get("label2id")
    if config.id2label is not None and isinstance(label2id, dict) and label2id and \
            {str(k): str(v) for k, v in label2id.items()} != {v: str(k) for k, v in config.id2label.items()}:
        raise InputError(f"{path}: label2id {json.dumps(label2id)[:80]} disagrees with id2label "
                         f"{json.dumps(config.id2label)[:80]}; each label's id is the same in both")
    return config, raw




def load_pretrained(model_dir: str | os.PathLike, head: str | type | None = None, *, num_labels: int | None = None,
                    dtype=jnp.float32, seed: int = 0, config_overrides: dict | None = None,
                    resuming: bool = False) -> nnx.Module:
    """Load a MODEL_DIR (or a transformers checkpoint directory) as our model.

    ``head``: a class or class name from ``squeezebert_jax.HEADS``; by default the class that was saved.
    When a different head is asked for (e.g. a classifier on a pretraining checkpoint), the encoder is
    loaded, the saved head is dropped and the new head's parameters keep their random initialisation;
    both are reported in the log and ``model.newly_initialized`` lists the new ones. So is a classifier whose
    ``num_labels`` differs from the saved one (e.g. MNLI's 3 -> RTE's 2). The model is built once.
    ``resuming``: a run's checkpoint replaces every value next, so a new head is not news (logged at INFO).
    """
    model_dir = path_argument("model_dir", model_dir)
    head = convert.check_head(head)
    check_compute_dtype(dtype)  # before the model is read
    if num_labels is not None:  # 0 was ignored; -1, "3" and 3.0 were tracebacks from jax
        if isinstance(num_labels, (bool, np.bool_)) or not isinstance(num_labels, numbers.Integral) or num_labels < 1:
            raise InputError(f"num_labels={num_labels!r}: an integer >= 1 (the classifier's outputs)")
        num_labels = int(num_labels)
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or not (
            0 <= seed < 2 ** 32):  # jax: "Invalid rng value"; an OverflowError past 64 bits
        raise InputError(f"seed={seed!r}: an integer in [0, 2**32) (the random initialisation of what the checkpoint "
                         "lacks)")
    if config_overrides is not None and not isinstance(config_overrides, Mapping):
        raise InputError(f"config_overrides={config_overrides!r}: a dict of config fields (e.g. {{'remat': 'full'}})")
    config, raw = read_model_config(model_dir)
    if config_overrides:
        config = config.replace(**config_overrides)
    path = os.path.join(model_dir, PARAMS_FILE)
    if checkpoint_file(model_dir, PARAMS_FILE) is not None:
        from safetensors import safe_open

        try:
            with safe_open(path, "numpy") as f:  # the tensors, and the head save_pretrained wrote them for
                flat, written = {k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {}).get("head")
        except Exception as e:
            raise InputError(f"{path}: cannot read ({e})") from e
        saved = (raw.get("architectures") or ["SqueezeBertModel"])[0]
        if saved not in HEADS:
            raise InputError(f"{model_dir}/config.json: unknown architecture {saved!r}")
        if written in HEADS and written != saved:  # a tagger's classifier has a 2-label sentence classifier's shape
            raise InputError(f"{model_dir}/config.json: architectures says {saved}, but {PARAMS_FILE} holds the "
                             f"weights of a {written} (its metadata): the config is another model's; restore it")
        ours = {k.removeprefix("transformer/"): k for k in flat}  # our path -> the file's own name for it
        mapped = convert.Mapped(saved, {p: flat[k] for p, k in ours.items()}, names=ours)
        allow_new = head not in (None, saved) or num_labels is not None
    elif raw.get("library") == "squeezebert_jax":  # our MODEL_DIR, its weights file gone
        raise FileNotFoundError(f"{path}: no such file; {model_dir} is a squeezebert_jax MODEL_DIR (its config.json "
                                "says so) whose weights are missing: copy the whole directory again")
    else:  # a transformers directory: its pooler may be missing (BertForMaskedLM has none)
        if os.path.isdir(model_dir) and not any(checkpoint_file(model_dir, n) for n in (
                "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")):  # (a run's workdir: its own config.json is the run's)
            raise not_a_model_dir(model_dir, f"{PARAMS_FILE}, model.safetensors or pytorch_model.bin")
        path = convert.torch_checkpoint_file(model_dir)
        mapped = convert.torch_to_flat(convert.read_torch_checkpoint(path), config,
                                       architectures=raw.get("architectures"), source=path,
                                       tied=raw.get("tie_word_embeddings", True))
        allow_new = True
    if num_labels is not None and head is None and "Classification" not in mapped.head:  # dropped without a word
        raise InputError(f"num_labels={num_labels}: {model_dir} holds a {mapped.head}, which has no classifier; give "
                         "head= a classifier (e.g. SqueezeBertForSequenceClassification) too")
    model = build_model(mapped, config, head, num_labels=num_labels, seed=seed, allow_new_heads=allow_new,
                        source=path, resuming=resuming, declared_labels=raw.get("num_labels"))
    if dtype != jnp.float32:
        model = cast_compute_dtype(model, dtype)
    return model


def from_torch_state_dict(state_dict, config: SqueezeBertConfig, head: str | None = None, *,
                          architectures: list[str] | None = None, num_labels: int | None = None, seed: int = 0,
                          allow_new_heads: bool = False, source: str = "state_dict", tied=True) -> nnx.Module:
    """Build our ``head`` model from a transformers state_dict (numpy arrays; SqueezeBERT or BERT keys).

    ``head`` defaults to what the checkpoint holds; a different one drops the checkpoint's own head tensors
    (logged). Head or pooler parameters the checkpoint lacks (e.g. a classifier on a headless checkpoint, or the
    pooler of a BertForMaskedLM) are an error unless ``allow_new_heads``, in which case they keep their random
    initialisation and are *reported* (logged, and listed in ``model.newly_initialized`` by their torch names).
    A missing encoder tensor is always an error.
    """
    mapped = convert.torch_to_flat(state_dict, config, head, architectures=architectures, source=source, tied=tied)
    return build_model(mapped, config, head, num_labels=num_labels, seed=seed, allow_new_heads=allow_new_heads,
                       source=source)


TASK_HEAD_SCOPES = ("classifier", "qa_outputs")  # a fine-tuning task's output layer: its meaning is its head class's


def _is_head_param(path: str) -> bool:
    """A task head's parameter or the pooler's: the only ones a checkpoint may lack (``allow_new_heads``)."""
    return path.split("/")[0] in ("cls", "classifier", "qa_outputs", "pooler", "rtd")


def build_model(mapped: convert.Mapped, config: SqueezeBertConfig, head: str | None = None, *,
                num_labels: int | None = None, seed: int = 0, allow_new_heads: bool = False,
                source: str = "", resuming: bool = False, declared_labels: int | None = None) -> nnx.Module:
    """The one place a model is built from weights: ``head`` (default: the saved one) from ``mapped``'s tensors.

    Every parameter must be in the checkpoint, every tensor used, every shape right, every tensor taken floating-point
    and finite (``convert.tensor_problem``: no integer or bool tensor cast without a word, no NaN or inf); otherwise a
    ``CheckpointMismatchError`` names ``source`` and the tensors (in the checkpoint's names). Exceptions:
    the saved head's tensors that ``head`` has no use for are dropped (logged); with ``allow_new_heads``, task-head
    and pooler parameters the checkpoint lacks keep their random initialisation (logged, and listed in
    ``model.newly_initialized``), as does a classifier when ``num_labels`` differs from the saved one. A missing
    encoder tensor is always an error. A classifier's size is ``num_labels``, else the saved classifier's; the labels
    config.json declares (its ``id2label``, else its ``num_labels``: ``declared_labels``) are as many.
    """
    saved = mapped.head
    head = convert.check_head(head) or saved
    src, names = dict(mapped.params), dict(mapped.names)
    kernel = src.get("classifier/kernel")
    saved_labels = int(kernel.shape[-1]) if kernel is not None and kernel.ndim == 2 else None
    kwargs = {"num_labels": num_labels or saved_labels} if "Classification" in head else {}
    names_given = len(config.id2label or {}) or declared_labels
    if ("Classification" in head and head == saved and saved_labels and names_given and not num_labels
            and names_given != saved_labels):
        field = "id2label" if config.id2label else "num_labels"
        raise InputError(f"{source}: the saved classifier has {saved_labels} outputs, but config.json names "
                         f"{names_given} labels ({field}): a prediction would read another label's name, or none; "
                         "give each output its name")
    if "Classification" in head and allow_new_heads and num_labels and saved_labels not in (None, num_labels):
        # e.g. MNLI (3 labels) -> RTE (2): the encoder transfers, the classifier is new.
        log.info("%s: a new %d-label classifier replaces the saved %d-label one", source, num_labels, saved_labels)
        src = {k: v for k, v in src.items() if not k.startswith("classifier/")}
        names = {k: v for k, v in names.items() if not k.startswith("classifier/")}
    # A task's head means its own class's outputs: a tagger's per-token classifier has the shape of a 2-label sentence
    # classifier (and a choice scorer that of a regression), so it is never taken for another head; it is dropped
    # (logged below) and the new head starts fresh, reported. The pretraining heads (cls/) carry over (ForPreTraining
    # -> ForMaskedLM), as the pooler does.
    foreign = sorted(k for k in src if head != saved and k.split("/")[0] in TASK_HEAD_SCOPES)
    src = {k: v for k, v in src.items() if k not in foreign}

    def construct():
        return HEADS[head](config, rngs=nnx.Rngs(seed), **kwargs)

    model = nnx.eval_shape(construct)  # shapes only: no random weights drawn for the checkpoint to replace
    state = nnx.to_flat_state(nnx.state(model))
    missing, misshapen, unusable, used, fresh = [], [], [], set(), []
    for path, var in state:
        key = "/".join(str(p) for p in path).removeprefix("transformer/")
        if not isinstance(var, nnx.Param):  # the dropout streams' keys
            fresh.append((path, var))
            continue
        if key not in src:
            missing.append(key)
            fresh.append((path, var))
            continue
        have, want = mapped.source_shape(key), mapped.implied_shape(key, var.get_value().shape)
        if have != want:
            misshapen.append(f"tensor {names.get(key, key)} has shape {have}, but the config implies {want}")
            continue
        problem = convert.tensor_problem(src[key])
        if problem:
            unusable.append(f"tensor {names.get(key, key)} {problem}")
            continue
        var.set_value(jnp.asarray(src[key], jnp.float32))
        used.add(key)
    if misshapen:
        raise CheckpointMismatchError(f"{source}: {convert.listed(misshapen, 3)} (does config.json match the weights? "
                                      "its model_type, groups and sizes decide each tensor's shape)")
    if unusable:
        raise CheckpointMismatchError(f"{source}: {convert.listed(unusable)}; a weight must be floating-point "
                                      "numbers: is the file a damaged, quantized or diverged checkpoint?")
    order = {k: i for i, k in enumerate(names)}  # the checkpoint's order where it names them (weight, then bias)
    missing.sort(key=lambda k: order.get(k, len(order)))
    unused = sorted(set(src) - used)
    dropped = foreign + [k for k in unused if head != saved and _is_head_param(k)]
    unexpected = [k for k in unused if k not in dropped]
    # a new head starts whole: a layer of it half in the checkpoint (its bias without its weight, the MLM head
    # without its output bias) is damage
    refused = [k for k in missing if not (allow_new_heads and _is_head_param(k))
               or any(s.startswith(k.rsplit("/", 1)[0] + "/") for s in src)]
    if unexpected or refused:
        parts = [f"{what} {', '.join(names.get(k, k) for k in keys)}"
                 for what, keys in (("missing", refused), ("unexpected", unexpected)) if keys]
        raise CheckpointMismatchError(f"{source}: the weights do not match {head}: {'; '.join(parts)}")
    if dropped:
        log.info("%s: %s drops the saved %s tensors: %s", source, head, saved, ", ".join(names.get(k, k) for k in dropped))
    model.newly_initialized = tuple(names.get(k, k) for k in missing)
    if missing and resuming:  # the run's checkpoint holds them: the random values are never used
        log.info("%s: %s parameters not in the checkpoint, taken from the run's checkpoint: %s", source, head,
                 ", ".join(model.newly_initialized))
    elif missing:
        log.warning("%s: %s parameters not in the checkpoint, randomly initialised: %s", source, head,
                    ", ".join(model.newly_initialized))
    _set_initial_values(construct, fresh, (head, repr(config), tuple(sorted(kwargs.items())), seed))
    nnx.update(model, nnx.from_flat_state(state))
    return model


_INITIAL: collections.OrderedDict = collections.OrderedDict()
_INITIAL_KEEP = 8


def _set_initial_values(construct, fresh: list, architecture: tuple) -> None:
    """``model.set_initial_values`` of the variables a checkpoint left to the model (the dropout streams' keys, a new
    head's weights), remembered for the last ``_INITIAL_KEEP`` architectures of this process: a process that loads a
    model again (each best epoch's export read back, a Predictor, an evaluation, a sweep's runs) copies them instead
    of tracing the construction and running the initialiser again (150 ms at hidden 32 with 2 layers, against 1 ms).
    ``architecture`` is what ``construct`` depends on: the head, the config, its keyword arguments and the seed."""
    key = (architecture, tuple(path for path, _ in fresh))
    if key in _INITIAL:
        _INITIAL.move_to_end(key)
    else:
        set_initial_values(construct, fresh)
        _INITIAL[key] = [var.get_value().copy() for _, var in fresh]  # not the model's own: it may be donated
        while len(_INITIAL) > _INITIAL_KEEP:
            _INITIAL.popitem(last=False)
        return
    for (_, var), value in zip(fresh, _INITIAL[key], strict=True):
        var.set_value(value.copy())  # a buffer of its own, as above


def check_compute_dtype(dtype) -> None:
    """A compute dtype is a floating type: an integer one was taken, and failed at the first forward (in erf)."""
    try:
        ok = jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
    except TypeError:
        ok = False
    if not ok:
        raise InputError(f"dtype={dtype!r}: the compute dtype is a floating type (jnp.float32, jnp.bfloat16 or "
                         "jnp.float16)")


def cast_compute_dtype(model: nnx.Module, dtype) -> nnx.Module:
    """Same parameters (float32), compute in ``dtype`` (e.g. jnp.bfloat16)."""
    check_compute_dtype(dtype)
    for _, m in nnx.iter_graph(model):
        if isinstance(m, nnx.Module) and hasattr(m, "dtype"):
            m.dtype = dtype
    return model


# --------------------------------------------------------------------------------------------------
# transformers export
# --------------------------------------------------------------------------------------------------

def export_torch(model: nnx.Module, hf_dir: str | os.PathLike, style: str | models.Family | None = None,
                 tokenizer_dir: str | None = None, *, overwrite: bool = False,
                 finetuning_task: str | None = None, card: dict | None = None) -> str:
    """Write a transformers checkpoint dir (config.json with ``architectures`` + model.safetensors); ``style``: a
    family's transformers layout, "squeezebert", "bert", "albert", ... or its record (default:
    ``convert.target_family``). A directory holding a model is replaced only with ``overwrite`` (True), and never
    where a file of the other model would stay (``check_model_dir``). ``card``: the MODEL_DIR's task.json (checked:
    ``predict.read_card``), written beside, which transformers ignores and ``import_torch`` takes back (how predict
    reads a multiple-choice model's columns went missing in a round trip)."""
    from safetensors.numpy import save_file

    overwrite = overwrite_flag(overwrite)  # "replace" is for a training run's own model directory, not an export
    hf_dir = path_argument("hf_dir", hf_dir)
    tok_files = _given_tokenizer(model, tokenizer_dir, needed=False)  # a checkpoint may go without one
    fam = convert.target_family(model.config, style)
    sd = convert.to_torch_state_dict(model, fam)  # everything that can be refused, before the directory
    card = _check_card(card, model, finetuning_task)
    d = model.config.to_dict(model_type=fam.style)
    d["architectures"] = [convert.torch_architecture(model, fam)]
    check_model_dir(hf_dir, ("config.json", "model.safetensors") + ((tasks.TASK_CARD,) if card else ()), tok_files,
                    overwrite)
    os.makedirs(hf_dir, exist_ok=True)
    d["tie_word_embeddings"] = True
    if finetuning_task:  # the GLUE task a classifier was fine-tuned on, where transformers' run_glue writes it
        d["finetuning_task"] = finetuning_task
    if hasattr(model, "num_labels"):
        d["num_labels"] = model.num_labels
        if model.config.id2label is None:
            d["id2label"] = {str(i): f"LABEL_{i}" for i in range(model.num_labels)}
            d["label2id"] = {f"LABEL_{i}": i for i in range(model.num_labels)}
    atomic_write(os.path.join(hf_dir, "model.safetensors"), lambda tmp: save_file(sd, tmp, metadata={"format": "pt"}))
    _write_json(os.path.join(hf_dir, "config.json"), d)
    if card:
        _write_json(os.path.join(hf_dir, tasks.TASK_CARD), card)
    copy_tokenizer_files(tokenizer_dir, hf_dir, tok_files)
    return hf_dir


def model_kind(model) -> str | None:
    """The ``tasks.HEAD_KINDS`` name of ``model``'s head (what its task.json describes: ``tasks.check_card``'s
    ``kind``), or None for a head predict has no method of (a pretraining or bare encoder model)."""
    return next((k for k, head in tasks.HEAD_KINDS.items() if isinstance(model, HEADS[head])), None)


def _numpy_scalar(o):
    if (n := python_scalar(o)) is o:
        raise TypeError(f"{type(o).__name__} {o!r:.40} is not JSON")
    return n


def _check_card(card, model: nnx.Module, finetuning_task: str | None) -> dict | None:
    """A task description given as a value (``card=``) as it will be written (JSON: a tuple is a list), checked as
    task.json is read (``tasks.check_card``) against the model it is written beside: it was written as given (a card
    of another kind of model, or of no kind, made predict refuse the model later). None or {}: no card."""
    if card is None or card == {}:
        return None
    try:
        card = json.loads(json.dumps(card, allow_nan=False, default=_numpy_scalar))  # np.int64(64) is 64
    except (TypeError, ValueError) as e:
        raise InputError(f"card={card!r:.80}: not a JSON object of the task's settings ({e})") from None
    if (kind := model_kind(model)) is None:
        raise InputError(f"card={json_repr(card, 60)}: a task description is of a fine-tuned head (a classifier, "
                         f"a tagger, ...), and this {convert.head_name(model)} has none; leave card out")
    return tasks.check_card(card, "card", kind, getattr(model, "num_labels", None), finetuning_task)


def import_torch(hf_dir: str | os.PathLike, model_dir: str | os.PathLike, head: str | None = None,
                 label_names: list[str] | None = None, *, overwrite: bool | str = False,
                 card: dict | None = None, check: Callable[[nnx.Module], None] | None = None) -> nnx.Module:
    """Convert a transformers checkpoint directory into a MODEL_DIR; returns the model. ``card``: the task.json
    ``export_torch`` wrote beside the checkpoint (checked: ``tasks.check_card``), the MODEL_DIR's again; ``check``:
    called with the model built, before anything is written (the card against the model it describes).

    ``label_names`` names a classifier's outputs 0..n-1 (its ``id2label``) where the checkpoint's config does not
    (LABEL_0, LABEL_1, ...); GLUE evaluation then reorders them into the task's label order.
    """
    hf_dir, model_dir = path_argument("hf_dir", hf_dir), path_argument("model_dir", model_dir)
    head = convert.check_head(head)
    if label_names is not None:  # as config.json's id2label is read ("neg,pos" was 7 one-letter outputs)
        if isinstance(label_names, str) or not all(isinstance(n, str) for n in label_names):
            raise InputError(f"label_names={label_names!r}; give a list of names (str), one per output")
        SqueezeBertConfig(id2label=dict(enumerate(label_names)))  # none empty, none twice, in any spelling
    config, raw = read_model_config(hf_dir)
    tok_files = tokenizer_files(hf_dir, config.vocab_size)  # each read and checked once, before the work
    check_model_dir(os.fspath(model_dir), ("config.json", PARAMS_FILE), tok_files, overwrite)
    named = {k: v for k, v in (config.id2label or {}).items() if v != f"LABEL_{k}"}
    if label_names and named and [named.get(i) for i in range(len(label_names))] != list(label_names):
        raise InputError(f"--label-names {','.join(label_names)}: {hf_dir}/config.json names the outputs already "
                         f"({', '.join(f'{k}: {v}' for k, v in sorted(named.items()))}); --label-names is for a "
                         "checkpoint whose config does not (LABEL_0, LABEL_1, ...)")
    path = convert.torch_checkpoint_file(hf_dir)
    state = convert.read_torch_checkpoint(path)
    # a new classifier (the checkpoint holds none) has as many outputs as --label-names names; a saved one its own
    new_classifier = head is not None and "Classification" in head and not any(
        "classifier" in k.split(".") for k in state)
    model = from_torch_state_dict(state, config, head, architectures=raw.get("architectures"), source=path,
                                  tied=raw.get("tie_word_embeddings", True), allow_new_heads=True,
                                  num_labels=len(label_names) if label_names and new_classifier else None)
    if label_names:
        n = getattr(model, "num_labels", None)
        if n is None:
            raise InputError(f"{hf_dir}: label names {label_names} for a {convert.head_name(model)}, which has no "
                             "classifier to name the outputs of; --label-names is for a sequence classifier")
        if n != len(label_names) or len(set(label_names)) != len(label_names):
            raise InputError(f"{hf_dir}: {len(label_names)} label names {label_names} for a "
                             f"{convert.head_name(model)} with {n} outputs (they must be distinct, one per output)")
        model.config.id2label = dict(enumerate(label_names))
    readable = any(name in TOKENIZER_FILE_NAMES for name, _ in tok_files)  # else the weights alone
    # a classifier run_glue fine-tuned names its GLUE task (finetuning_task): kept as the MODEL_DIR's card, so that it
    # is scored on no other task and predict gives it its task's number of texts
    card = card or (tasks.glue_card(raw.get("finetuning_task")) if isinstance(
        model, HEADS["SqueezeBertForSequenceClassification"]) else None)
    if check is not None:
        check(model)
    card = _check_card(card, model, raw.get("finetuning_task"))
    save_pretrained(model, model_dir, tokenizer_dir=hf_dir if readable else None, overwrite=overwrite,
                    beside=(tasks.TASK_CARD,) if card else ())
    if card:
        _write_json(os.path.join(os.fspath(model_dir), tasks.TASK_CARD), card)
    return model
