"""Rows of a dataset where a data file is asked for: ``hf:DATASET[:SPLIT]`` and ``tfds:NAME[:SPLIT]``.

    hf:/data/reviews:train        a Hugging Face ``datasets`` dataset written by ``save_to_disk`` (a DatasetDict's
                                  split, or a Dataset), read with ``datasets.load_from_disk``
    hf:imdb:test                  a dataset by name through ``datasets.load_dataset`` (from the local cache: this
                                  machine downloads nothing at run time)
    tfds:imdb_reviews:train       a TFDS dataset prepared under ``$TFDS_DATA_DIR`` (``tfds.load(download=False)``)
    tfds:glue/sst2:2.0.0:test     ... of a config and a version, as ``tfds.load`` names them

The split defaults to ``train``. Each row is a ``{column: value}`` dict as a CSV or JSON Lines row would be: bytes are
decoded as UTF-8, a ``ClassLabel`` value is its name (a negative one, TFDS' and datasets' mark of an unlabelled row,
is None, as JSON's null: a test row's missing label, refused by row in a training split), a sequence of
``ClassLabel`` values (a tagged sentence's ``ner_tags``) is the list of names.
Messages name a row as ``SPEC:ROW`` (1-based), as a file's line is named.
"""

from __future__ import annotations

import inspect
import os
import re

import numpy as np

from squeezebert_jax.errors import DataFileError, MissingExtraError
from squeezebert_jax.files import env_switch

PREFIXES = ("hf:", "tfds:")


def is_dataset(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIXES)


# a TFDS version, as tfds.load takes it after the name (glue/sst2:2.0.0; 2.*.* the newest prepared of 2)
_TFDS_VERSION = re.compile(r"\d+\.(\d+|\*)\.(\d+|\*)")


def tfds_version(name: str) -> tuple[str, str]:
    """A TFDS dataset's name as (its name and config, its version or ""): ``glue/sst2:2.0.0`` is
    ``("glue/sst2", "2.0.0")``; a version is no split and no community namespace."""
    base, sep, version = name.rpartition(":")
    return (base, version) if sep and _TFDS_VERSION.fullmatch(version) else (name, "")


def parse(spec: str) -> tuple[str, str, str]:
    """(``hf`` or ``tfds``, the dataset, the split): the part after the last ':' is the split when it holds no '/'
    (and, for TFDS, is no version: ``tfds:glue/sst2:2.0.0`` is that version's train split, not a split "2.0.0")."""
    kind, _, rest = spec.partition(":")
    name, sep, split = rest.rpartition(":")
    if sep and name and not split:  # "hf:DIR:": which split?
        raise DataFileError(f"{spec}: ends in ':' with no split after it (hf:PATH_OR_NAME[:SPLIT], e.g. {kind}:{name}"
                            ":train)")
    if re.search(r"\[[^\]/]*[:%][^\]/]*\]$", rest):  # train[:10%]: read as a namespace or a builder
        raise DataFileError(f"{spec}: a slice of a split ([...]) is not read here: give the whole split (a part of it: "
                            "config.max_train_examples)")
    if not sep or "/" in split or (kind == "tfds" and _TFDS_VERSION.fullmatch(split)):
        name, split = rest, "train"
    if not name:
        raise DataFileError(f"{spec}: no dataset named (hf:PATH_OR_NAME[:SPLIT] or tfds:NAME[:SPLIT])")
    return kind, name, split


def rows(spec: str):
    """(row number, {column: value}) for every row of the dataset split ``spec`` names (see the module docstring)."""
    kind, name, split = parse(spec)
    yield from (_hf_rows if kind == "hf" else _tfds_rows)(spec, name, split)


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def _hf_rows(spec: str, name: str, split: str):
    # by name: the local cache only (this machine reaches no hub), unless the user turned offline mode off by name
    # (HF_HUB_OFFLINE=0); an empty or unset variable is no such choice (huggingface_hub reads an empty one as online:
    # an hf: name went to the hub)
    offline = not any(os.environ.get(v, "").strip() and env_switch(v) is False for v in _OFFLINE_VARS)
    if offline:
        os.environ.update(dict.fromkeys(_OFFLINE_VARS, "1"))
    try:
        import datasets
    except ImportError as e:
        raise MissingExtraError(f"{spec}: reading a Hugging Face dataset needs `pip install datasets` (the "
                                f"squeezebert_jax[datasets] extra)") from e
    if offline:  # the libraries read the variables once, when first imported (transformers imports huggingface_hub)
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True
        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    _refuse_code(spec, name)
    try:
        if os.path.isdir(name):
            ds = datasets.load_from_disk(name)
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise DataFileError(f"{spec}: no split {split!r} in {name} (has {', '.join(ds)})")
                ds = ds[split]
            elif spec.rpartition(":")[2] == split:  # one Dataset: its rows are every split a name could ask for
                raise DataFileError(f"{spec}: {name} is one dataset without splits, so ':{split}' would read the same "
                                    f"rows as any other split; give hf:{name} for these rows, and save the "
                                    "splits apart (a DatasetDict) to name one")
        else:  # a prepared dataset of the cache; never a loading script (datasets < 3 runs one unless told not to)
            refuse = {"trust_remote_code": False} if "trust_remote_code" in inspect.signature(
                datasets.load_dataset).parameters else {}  # datasets >= 4 runs no script at all
            ds = datasets.load_dataset(name, split=split, **refuse)
    except DataFileError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds (a script refused is a RuntimeError in 3.x)
        reason = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        raise DataFileError(f"{spec}: cannot load the dataset ({reason}); give a directory written by save_to_disk, "
                            f"or the name of a prepared dataset in the local datasets cache") from None
    features = ds.features
    for i, row in enumerate(ds, 1):
        yield i, _row(spec, i, row, features)


# datasets' packaged builders: each reads raw files (of the current directory, or a glob) by its own rules
_BUILDERS = ("arrow", "audiofolder", "cache", "csv", "eval", "generator", "hdf5", "imagefolder", "json", "lance",
             "niftifolder", "pandas", "parquet", "pdffolder", "spark", "sql", "text", "videofolder", "webdataset",
             "xml")


def _refuse_code(spec: str, name: str) -> None:
    """A data file is data: ``hf:`` never names a path that ``datasets.load_dataset`` would run as code or read as
    raw files (a ``.py`` loading script, any file, a glob, or a packaged builder such as ``csv`` that reads raw files
    past this project's readers), only a ``save_to_disk`` directory or a cached dataset's name."""
    if name.lower().endswith(".py") or os.path.isfile(name):
        raise DataFileError(f"{spec}: {name} is a file; hf: reads a directory written by save_to_disk or a dataset "
                            f"name in the local cache, and never runs a loading script (a data file is not code): give "
                            f"a CSV, TSV or JSON Lines file without the hf: prefix")
    builders = set(_BUILDERS)
    try:  # and whatever this version of the library has added
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

        builders |= set(_PACKAGED_DATASETS_MODULES)
    except ImportError:
        pass
    if name.lower() in builders or any(c in name for c in "*?["):
        raise DataFileError(f"{spec}: {name!r} is a datasets builder or a glob, which reads raw files by its own "
                            "rules; hf: reads a directory written by save_to_disk or a dataset name in the local "
                            "cache: give the CSV, TSV or JSON Lines file itself without the hf: prefix")


def _tfds_rows(spec: str, name: str, split: str):
    if ":" in tfds_version(name)[0]:  # huggingface:NAME, kaggle:NAME: TFDS fetches a community dataset
        raise DataFileError(f"{spec}: {name!r} names a TFDS community namespace ({name.partition(':')[0]}:), whose "
                            "datasets TFDS fetches from elsewhere (the Hugging Face hub, Kaggle), running their "
                            "builders; tfds: reads a dataset prepared under $TFDS_DATA_DIR by its name alone (hf:DIR "
                            "reads one saved with save_to_disk)")
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise MissingExtraError(f"{spec}: reading a TFDS dataset needs `pip install tensorflow-datasets "
                                f"tensorflow-cpu` (the squeezebert_jax[tfds] extra)") from e
    try:
        ds, info = tfds.load(name, split=split, with_info=True, download=False,
                             data_dir=os.environ.get("TFDS_DATA_DIR") or None)
    except Exception as e:  # noqa: BLE001 - TFDS raises many kinds for a dataset that is not prepared or known
        raise DataFileError(f"{spec}: cannot load the dataset ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                            f"prepare it under $TFDS_DATA_DIR first (tfds build)") from None
    features = {k: info.features[k] for k in info.features.keys()}
    for i, row in enumerate(tfds.as_numpy(ds), 1):
        yield i, _row(spec, i, row, features)


def _names(feature):
    """The label names of a ``ClassLabel`` feature (datasets' or TFDS'), those of the ClassLabel inside a sequence
    feature as a 1-tuple, or None."""
    if feature is None:
        return None
    names = getattr(feature, "names", None)
    if names is not None and hasattr(feature, "int2str"):
        return list(names)
    inner = getattr(feature, "feature", None)
    if inner is not None and getattr(inner, "names", None) is not None:
        return (list(inner.names),)
    return None


def _unlabelled(value, feature) -> bool:
    names = _names(feature)
    return isinstance(names, list) and np.ndim(value) == 0 and int(value) < 0


def _row(spec: str, i: int, row: dict, features: dict) -> dict:
    """One row's columns as plain values (class labels as their names); a row labelled -1 (unlabelled) holds None
    (its column left out, a training split's refusal said the dataset had no label column). A value that cannot be
    read is one line naming the split, the row and the column."""
    out = {}
    for k, v in row.items():
        try:
            out[k] = None if _unlabelled(v, features.get(k)) else _value(v, features.get(k))
        except ValueError as e:
            raise DataFileError(f"{spec}:{i}: column {k!r}: {e}") from None
    return out


def _value(value, feature):
    names = _names(feature)
    if isinstance(names, tuple):  # a sequence of class labels
        return [_class_name(names[0], v) for v in np.asarray(value).reshape(-1)]
    if names is not None:
        return _class_name(names, value)
    return _plain(value)


def _class_name(names: list, index) -> str:
    i = int(index)
    if not 0 <= i < len(names):  # -1 (unlabelled) inside a sequence would read as the last name
        raise ValueError(f"class label {i} is none of the {len(names)} names (0 to {len(names) - 1}; -1 marks an "
                         f"unlabelled value, which a sequence of labels cannot hold)")
    return names[i]


def _plain(value):
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"bytes that are not UTF-8 (byte {e.start}: {value[e.start:e.start + 1]!r})") from None
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.ndim else _plain(value.item())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
