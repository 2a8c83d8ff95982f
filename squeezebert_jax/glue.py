"""GLUE: task specs, loaders (GLUE TSV directory or TFDS), encoding, metrics, tables and server files.

Splits use the TFDS names everywhere: ``train``, ``validation``, ``test``; MNLI has ``validation_matched``,
``validation_mismatched``, ``test_matched``, ``test_mismatched``; AX only ``test``. (``dev``,
``dev_matched`` and ``dev_mismatched`` are accepted as aliases.)

Label ids follow the TFDS ``glue/<task>`` ClassLabel order, so both loaders give the same ints:
MNLI/AX 0 entailment, 1 neutral, 2 contradiction; QNLI/RTE 0 entailment, 1 not_entailment; the 0/1 tasks
keep their file value (WNLI 1 = entailment). transformers' old ``MnliProcessor`` used the order
contradiction, entailment, neutral: a classifier whose ``id2label`` names its labels in another order is
reordered on load (``label_permutation``, ``evaluation.align_to_task``). The released ``squeezebert-mnli``'s config
only says LABEL_0..2; ``convert/from_pytorch.py --label-names contradiction,entailment,neutral`` names them.

Metrics are returned as fractions (sklearn/scipy conventions); tables print percentages. A task's
``main_metric`` follows the paper's Listing 1 / the GLUE leaderboard: CoLA ``mcc``; STS-B ``corr`` =
(pearson + spearman) / 2; MRPC and QQP ``acc_and_f1`` = (accuracy + F1) / 2; the rest ``accuracy``; MNLI-m
and MNLI-mm count as one task, (m + mm) / 2, in the average; WNLI is left out of the dev average.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence

import numpy as np

from squeezebert_jax.errors import InputError, MissingExtraError
from squeezebert_jax.files import atomic_write, has_text, line_problem, number_value
from squeezebert_jax.tokenizer import warn_truncated

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Task specs
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TsvLayout:
    """Where the fields sit in one GLUE TSV file (0-based columns; negative counts from the end)."""
    filename: str
    header: bool
    text_a: int
    text_b: int | None
    label: int | None          # None: unlabeled (test) file
    index: int | None          # None: no index column, idx = 0-based data-row number
    ncols: int | None = None   # header-less files: fixed column count (else len(header))


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One GLUE task. ``labels`` are the strings used both in the data files and by the GLUE server."""
    name: str                          # TFDS config name
    glue_dir: str                      # directory under glue_data/
    text_columns: tuple[str, ...]      # TFDS feature names
    labels: tuple[str, ...] | None     # None: regression (STS-B)
    metrics: tuple[str, ...]           # keys of compute_metrics()
    main_metric: str                   # the one number per task (paper Listing 1)
    eval_splits: tuple[str, ...]
    test_splits: tuple[str, ...]
    submission: Mapping[str, str]      # test split -> GLUE-server file name
    layouts: Mapping[str, TsvLayout]   # split -> file layout

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.layouts)


def _pair_task(name: str, glue_dir: str, text_columns: tuple[str, ...], labels: tuple[str, ...]) -> TaskSpec:
    """QNLI / RTE / WNLI: index, text_a, text_b, label; test without the label."""
    lay = TsvLayout("train.tsv", True, 1, 2, 3, 0)
    return TaskSpec(name, glue_dir, text_columns, labels, ("accuracy",), "accuracy", ("validation",), ("test",),
                    {"test": f"{glue_dir}.tsv"},
                    {"train": lay, "validation": dataclasses.replace(lay, filename="dev.tsv"),
                     "test": TsvLayout("test.tsv", True, 1, 2, None, 0)})


def _std(train: TsvLayout, test: TsvLayout) -> dict[str, TsvLayout]:
    return {"train": train, "validation": dataclasses.replace(train, filename="dev.tsv"), "test": test}


_BIN = ("0", "1")
_NLI3 = ("entailment", "neutral", "contradiction")
_NLI2 = ("entailment", "not_entailment")

# Column layouts of the files the GLUE download script writes (train.tsv; dev.tsv alike; test.tsv):
#   CoLA   no header: source, label, original mark, sentence    test: index, sentence
#   SST-2  sentence, label                                       test: index, sentence
#   MRPC   Quality, #1 ID, #2 ID, #1 String, #2 String           test: index, #1 ID, #2 ID, #1 String, #2 String
#   STS-B  index genre filename year old_index source1 source2 sentence1 sentence2 score   test: no score
#   QQP    id qid1 qid2 question1 question2 is_duplicate         test: id question1 question2
#   MNLI   index promptID pairID genre sentence{1,2}_binary_parse sentence{1,2}_parse sentence1 sentence2
#          label1 [label2..label5 in dev] gold_label            test: up to sentence2
#   QNLI   index question sentence label; RTE, WNLI: index sentence1 sentence2 label; test: no label
#   AX     diagnostic/diagnostic.tsv: index sentence1 sentence2
TASKS: dict[str, TaskSpec] = {t.name: t for t in [
    TaskSpec("cola", "CoLA", ("sentence",), _BIN, ("mcc",), "mcc", ("validation",), ("test",), {"test": "CoLA.tsv"},
             _std(TsvLayout("train.tsv", False, 3, None, 1, None, ncols=4),
                  TsvLayout("test.tsv", True, 1, None, None, 0))),
    TaskSpec("sst2", "SST-2", ("sentence",), _BIN, ("accuracy",), "accuracy", ("validation",), ("test",),
             {"test": "SST-2.tsv"},
             _std(TsvLayout("train.tsv", True, 0, None, 1, None), TsvLayout("test.tsv", True, 1, None, None, 0))),
    TaskSpec("mrpc", "MRPC", ("sentence1", "sentence2"), _BIN, ("accuracy", "f1", "acc_and_f1"), "acc_and_f1",
             ("validation",), ("test",), {"test": "MRPC.tsv"},
             _std(TsvLayout("train.tsv", True, 3, 4, 0, None), TsvLayout("test.tsv", True, 3, 4, None, 0))),
    TaskSpec("stsb", "STS-B", ("sentence1", "sentence2"), None, ("pearson", "spearman", "corr"), "corr",
             ("validation",), ("test",), {"test": "STS-B.tsv"},
             _std(TsvLayout("train.tsv", True, 7, 8, 9, 0), TsvLayout("test.tsv", True, 7, 8, None, 0))),
    TaskSpec("qqp", "QQP", ("question1", "question2"), _BIN, ("accuracy", "f1", "acc_and_f1"), "acc_and_f1",
             ("validation",), ("test",), {"test": "QQP.tsv"},
             _std(TsvLayout("train.tsv", True, 3, 4, 5, 0), TsvLayout("test.tsv", True, 1, 2, None, 0))),
    TaskSpec("mnli", "MNLI", ("premise", "hypothesis"), _NLI3, ("accuracy",), "accuracy",
             ("validation_matched", "validation_mismatched"), ("test_matched", "test_mismatched"),
             {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
             {"train": TsvLayout("train.tsv", True, 8, 9, -1, 0),
              "validation_matched": TsvLayout("dev_matched.tsv", True, 8, 9, -1, 0),
              "validation_mismatched": TsvLayout("dev_mismatched.tsv", True, 8, 9, -1, 0),
              "test_matched": TsvLayout("test_matched.tsv", True, 8, 9, None, 0),
              "test_mismatched": TsvLayout("test_mismatched.tsv", True, 8, 9, None, 0)}),
    _pair_task("qnli", "QNLI", ("question", "sentence"), _NLI2),
    _pair_task("rte", "RTE", ("sentence1", "sentence2"), _NLI2),
    _pair_task("wnli", "WNLI", ("sentence1", "sentence2"), _BIN),
    TaskSpec("ax", "diagnostic", ("premise", "hypothesis"), _NLI3, ("mcc",), "mcc", (), ("test",),
             {"test": "AX.tsv"}, {"test": TsvLayout("diagnostic.tsv", True, 1, 2, None, 0)}),
]}

# The one list of tasks, in two orders: GLUE's (the registry above; AX is a test-only diagnostic) and the recipe's,
# which is the paper's table order with MNLI first (the other tasks may start from its fine-tuned model).
FINETUNE_TASKS = tuple(n for n in TASKS if n != "ax")
RECIPE_ORDER = ("mnli", "qqp", "qnli", "sst2", "cola", "stsb", "mrpc", "rte", "wnli")
assert sorted(RECIPE_ORDER) == sorted(FINETUNE_TASKS)

SPLIT_ALIASES = {"dev": "validation", "dev_matched": "validation_matched", "dev_mismatched": "validation_mismatched"}


def get_task(task: str) -> TaskSpec:
    """The spec of ``task`` (TFDS name, or GLUE directory name such as ``SST-2``)."""
    key = task.lower().replace("-", "")
    if key in TASKS:
        return TASKS[key]
    for spec in TASKS.values():
        if spec.glue_dir.lower() == task.lower():
            return spec
    raise UnknownTaskError(f"unknown GLUE task {task!r}; known: {', '.join(sorted(TASKS))}")


def _split(spec: TaskSpec, split: str) -> str:
    split = SPLIT_ALIASES.get(split, split)
    if split not in spec.layouts:
        raise InputError(f"task {spec.name!r} has no split {split!r}; it has {list(spec.layouts)}")
    return split


# --------------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GlueExample:
    idx: int
    text_a: str
    text_b: str | None
    label: int | float | None   # None on test splits


class UnknownTaskError(InputError, KeyError):
    """A task name that is not a GLUE task (a KeyError too, for callers that look tasks up). Its text is the message
    itself, not KeyError's quoted repr of it."""

    __str__ = Exception.__str__


class GlueFormatError(InputError):
    """A row of a GLUE file that does not fit its task's layout."""


def parse_label(spec: TaskSpec, raw: str) -> int | float:
    """File/server label string -> int id (classification) or float score in [0, 5] (STS-B)."""
    if spec.labels is None:
        value = number_value(raw)   # ValueError for unparsable scores ("0_5", "1,5")
        if not (math.isfinite(value) and 0.0 <= value <= 5.0):
            raise InputError(f"score {raw!r} outside [0, 5]")
        return value
    if raw not in spec.labels:
        raise InputError(f"unknown label {raw!r} (expected one of {list(spec.labels)})")
    return spec.labels.index(raw)


def read_glue_tsv(path: str, task: str, split: str, *,
                  skip_malformed: bool = False) -> tuple[list[GlueExample], int]:
    """Read one GLUE TSV file in ``task``'s layout for ``split``; returns (examples, rows skipped).

    Fields are split on tabs only — quote characters are ordinary text (``csv.QUOTE_NONE``), and lines
    end at ``\\n`` only. Every data row must have exactly the header's column count (4 for the
    header-less CoLA train/dev files), a known label or a parsable score, and an integer index where the
    file has one; otherwise ``GlueFormatError`` names ``path:line``, or with ``skip_malformed`` the row is
    dropped and counted. Empty lines carry nothing and are ignored. The header row must name the columns read
    (index, texts, label) as GLUE's file does (other columns may differ), so that a file without one is refused
    rather than losing its first example to it. A test file's rows (no label) are never skipped: the GLUE server
    wants a prediction for each index.
    """
    spec = get_task(task)
    split = _split(spec, split)
    lay = spec.layouts[split]
    every_row = lay.label is None  # a test file
    skip_malformed = skip_malformed and not every_row
    hint = (" (a test file's rows are never skipped: the GLUE server wants a prediction for each)" if every_row else
            " (skip_malformed=True drops and counts such rows)")
    examples: list[GlueExample] = []
    skipped, ncols, row_no, seen_index = 0, lay.ncols, 0, {}
    with open(path, "rb") as f:  # bytes, so that a line that is not UTF-8 is named like any other bad row
        for lineno, raw in enumerate(f, 1):
            raw = raw.rstrip(b"\n").rstrip(b"\r").removeprefix(b"\xef\xbb\xbf" if lineno == 1 else b"")
            if not raw:
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                if (lay.header and ncols is None) or not skip_malformed:
                    raise GlueFormatError(f"{path}:{lineno}: not UTF-8 text ({e})"
                                          + ("" if lay.header and ncols is None else hint)) from None
                skipped += 1
                row_no += 1
                continue
            cols = line.split("\t")
            if lay.header and ncols is None:
                ncols = len(cols)
                if ncols <= max(c for c in (lay.text_a, lay.text_b or 0, lay.label or 0, lay.index or 0)):
                    raise GlueFormatError(f"{path}:{lineno}: header has {ncols} columns, too few for {spec.name} "
                                          f"{split}: {cols!r}")
                _check_header(path, lineno, spec, split, cols)
                continue
            try:
                if len(cols) != ncols:
                    raise InputError(f"{len(cols)} columns, expected {ncols}")
                _check_texts(line, [cols[c] for c in (lay.text_a, lay.text_b) if c is not None], lineno)
                idx = row_no if lay.index is None else _int(cols[lay.index], "index")
                label = None if lay.label is None else parse_label(spec, cols[lay.label])
                examples.append(GlueExample(idx, cols[lay.text_a], None if lay.text_b is None else cols[lay.text_b],
                                            label))
            except ValueError as e:
                if not skip_malformed:
                    raise GlueFormatError(f"{path}:{lineno}: malformed {spec.name} row: {e}{hint}") from None
                skipped += 1
                log.debug("%s:%d: skipped: %s", path, lineno, e)
            else:
                if lay.index is not None:  # the server file has a row per index: a duplicate is never skipped
                    if idx in seen_index:
                        raise GlueFormatError(f"{path}:{lineno}: index {idx} appears twice (also at line "
                                              f"{seen_index[idx]})")
                    seen_index[idx] = lineno
            row_no += 1
    if ncols is None and lay.header:
        raise GlueFormatError(f"{path}: empty file (no header)")
    return examples, skipped


def _check_texts(line: str, texts: list[str], lineno: int) -> None:
    """A GLUE row's line and texts hold what ``files.text_lines`` and ``files.has_text`` allow in any text file: no
    NUL byte, no carriage return inside the line, no byte-order mark after the first line, and something to read in
    each text."""
    if problem := line_problem(line, lineno):
        raise InputError(f"{problem[1]} at column {problem[0]}")
    for t in texts:
        if not has_text(t):
            raise InputError("an empty text" + (" (only white space or invisible marks)" if t else ""))


def _check_header(path: str, lineno: int, spec: TaskSpec, split: str, cols: list[str]) -> None:
    """The header row must name the columns the reader takes (index, texts, label) as GLUE's file does; other
    columns are not looked at. A file without its header row would otherwise lose its first example to it."""
    head = _header(spec, split)
    if head is None:
        return
    lay = spec.layouts[split]
    used = [c for c in (lay.index, lay.text_a, lay.text_b, lay.label) if c is not None]  # MNLI's label -1: last
    want, found = [head[c] for c in used], [cols[c].strip() for c in used]
    if [f.lower() for f in found] != [w.lower() for w in want]:
        found = [f if len(f) <= 30 else f[:27] + "..." for f in found]
        raise GlueFormatError(f"{path}:{lineno}: not a {spec.name} {split} header row: expected columns "
                              f"{', '.join(map(repr, want))}, found {', '.join(map(repr, found))} -- is the header "
                              f"row missing? GLUE's {lay.filename} starts with one: {'<TAB>'.join(head)}")


def _header(spec: TaskSpec, split: str) -> tuple[str, ...] | None:
    """The header GLUE's file for ``split`` has (None: header-less, CoLA train/dev)."""
    kind = "test" if split.startswith("test") else "train"
    return _HEADERS[spec.name].get(split, _HEADERS[spec.name].get(kind))


def label_permutation(id2label: Mapping[int, str] | None, task: str | Sequence[str] | None) -> np.ndarray | None:
    """Columns that bring a classifier's logits into ``task``'s label order (``logits[:, perm]``), read from the
    label names in its config's ``id2label``; None when they are already in that order, or are not the task's
    label names in some order (e.g. LABEL_0, LABEL_1, ...: nothing to go by).

    Checkpoints trained with transformers' old ``MnliProcessor`` name their labels contradiction, entailment,
    neutral (where the names were kept); ours are TFDS's entailment, neutral, contradiction.
    """
    labels = get_task(task).labels if isinstance(task, str) else task  # a GLUE task, or the label names
    if not id2label or labels is None or len(id2label) != len(labels):
        return None
    names = [str(id2label[i]).lower() for i in range(len(id2label))]
    want = [lab.lower() for lab in labels]
    if sorted(names) != sorted(want) or names == want:
        return None
    return np.asarray([names.index(lab) for lab in want])


def _int(s: str, what: str) -> int:
    try:
        return int(s)
    except ValueError:
        raise InputError(f"{what} {s!r} is not an integer") from None


def glue_tsv_path(task: str, data_dir: str, split: str) -> str:
    """``data_dir/<GLUE dir>/<file>`` (``data_dir`` is the glue_data root or the task's own directory)."""
    spec = get_task(task)
    name = spec.layouts[_split(spec, split)].filename
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"{data_dir}: no such directory (the GLUE data: glue_data/ as the download script "
                                "writes it, or a task's own directory)")
    for d in (os.path.join(data_dir, spec.glue_dir), data_dir):
        if os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    raise FileNotFoundError(f"no {name} for {spec.name} {split} under {data_dir} (looked in "
                            f"{os.path.join(data_dir, spec.glue_dir)} and {data_dir})")


def load_glue_dir(task: str, data_dir: str, split: str, *, skip_malformed: bool = False) -> list[GlueExample]:
    """Loader (a): the directory written by the GLUE download script; logs how many rows were skipped."""
    path = glue_tsv_path(task, data_dir, split)
    examples, skipped = read_glue_tsv(path, task, split, skip_malformed=skip_malformed)
    if not examples:
        spec = get_task(task)
        what = f"all {skipped} rows are malformed and were skipped" if skipped else \
            "only a header row" if spec.layouts[_split(spec, split)].header else "no rows"
        raise GlueFormatError(f"{path}: no examples for {spec.name} {_split(spec, split)} ({what}); "
                              f"give it at least one row")
    if skipped:
        log.warning("%s: skipped %d malformed row(s), kept %d", path, skipped, len(examples))
    return examples


# The header of each file the GLUE download script writes (None: CoLA's header-less train/dev files); MNLI's
# dev files have label1..label5 before gold_label, here label1 only (the reader takes gold_label, the last).
_MNLI_HEAD = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
_PAIR_HEAD = ("index", "sentence1", "sentence2")
_HEADERS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "cola": {"train": None, "validation": None, "test": ("index", "sentence")},
    "sst2": {"train": ("sentence", "label"), "test": ("index", "sentence")},
    "mrpc": {"train": ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
             "test": ("index", "#1 ID", "#2 ID", "#1 String", "#2 String")},
    "stsb": {"train": ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                       "sentence2", "score"),
             "test": ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                      "sentence2")},
    "qqp": {"train": ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            "test": ("id", "question1", "question2")},
    "mnli": {"train": _MNLI_HEAD + ("label1", "gold_label"), "test": _MNLI_HEAD},
    "qnli": {"train": ("index", "question", "sentence", "label"), "test": ("index", "question", "sentence")},
    "rte": {"train": _PAIR_HEAD + ("label",), "test": _PAIR_HEAD},
    "wnli": {"train": _PAIR_HEAD + ("label",), "test": _PAIR_HEAD},
    "ax": {"test": _PAIR_HEAD},
}


def write_glue_tsv(task: str, split: str, examples: Sequence[GlueExample], data_dir: str) -> str:
    """Write ``examples`` as ``data_dir/<GLUE dir>/<file>`` in the layout of the file the GLUE download script
    writes for ``task``/``split`` (the inverse of ``read_glue_tsv``; columns the reader ignores, such as
    MNLI's parses or STS-B's genre, get placeholders). Use it to put other data in GLUE form. Labels are
    ids (or STS-B scores), written as the task's label strings; a test split writes none. Atomic; a text
    with a tab or a line break is a ValueError naming the example."""
    spec = get_task(task)
    split = _split(spec, split)
    lay = spec.layouts[split]
    head = _header(spec, split)
    ncols = len(head) if head is not None else lay.ncols
    lines = [] if head is None else ["\t".join(head)]
    for n, e in enumerate(examples):
        texts = [e.text_a] + ([] if lay.text_b is None else [e.text_b])
        if any(t is None or "\t" in t or "\n" in t or "\r" in t for t in texts):
            raise InputError(f"example {n} (idx {e.idx}): {spec.name} needs {len(texts)} text(s) without tabs or "
                             f"line breaks, got {texts!r}")
        cols = ["-"] * ncols
        cols[lay.text_a] = e.text_a
        if lay.text_b is not None:
            cols[lay.text_b] = e.text_b
        if lay.index is not None:
            cols[lay.index] = str(e.idx)
        if lay.label is not None:
            if e.label is None:
                raise InputError(f"example {n} (idx {e.idx}): {spec.name} {split} needs a label")
            cols[lay.label] = (f"{float(e.label):.3f}" if spec.is_regression else spec.labels[int(e.label)])
            if spec.name == "mnli":
                cols[-2] = cols[-1]  # label1 = gold_label
            if spec.name == "cola":
                cols[2] = "" if int(e.label) else "*"  # the original acceptability mark
        lines.append("\t".join(cols))
    out_dir = os.path.join(data_dir, spec.glue_dir)
    os.makedirs(out_dir, exist_ok=True)
    return atomic_write(os.path.join(out_dir, lay.filename), "\n".join(lines) + "\n")


def load_tfds(task: str, split: str, *, data_dir: str | None = None, download: bool = False,
              data_source: bool = False) -> list[GlueExample]:
    """Loader (b): TFDS ``glue/<task>`` (``tfds.load``, or ``tfds.data_source`` for array_record data).

    TFDS marks unlabeled rows with label -1; those, and every label of a test split, become None.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise MissingExtraError("loading GLUE from TFDS needs `pip install tensorflow-datasets tensorflow-cpu`; "
                          "or pass data_dir= a glue_data directory") from e
    spec = get_task(task)
    split = _split(spec, split)
    name = f"glue/{spec.name}"
    try:
        if data_source:
            rows = tfds.data_source(name, split=split, data_dir=data_dir, download=download)
        else:
            rows = tfds.as_numpy(tfds.load(name, split=split, data_dir=data_dir, download=download))
    except AssertionError as e:  # tfds' answer for data never prepared: "Dataset glue: could not find data in DIR"
        if "could not find data" not in str(e):
            raise
        where = re.search(r"could not find data in (\S+?)\.? Please", str(e))
        raise InputError(f"no GLUE data_dir given, and TFDS holds no prepared {name}"
                         + (f" in {where[1]}" if where else "") + ": set data_dir (config.data_dir, --data_dir) to a "
                         "glue_data directory of GLUE's TSV files, or prepare the TFDS copy once with "
                         f"`tfds build {name}` (it downloads)") from e
    is_test = split.startswith("test")
    out = []
    for ex in rows:
        texts = [_text(ex[c]) for c in spec.text_columns]
        label = np.asarray(ex["label"]).item()
        if is_test or label == -1:
            label = None
        elif spec.is_regression:
            label = float(label)
        else:
            label = int(label)
        out.append(GlueExample(int(np.asarray(ex["idx"]).item()), texts[0], texts[1] if len(texts) > 1 else None,
                               label))
    return out


def _text(v) -> str:
    v = np.asarray(v).item() if not isinstance(v, (str, bytes)) else v
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def load_examples(task: str, split: str, *, data_dir: str | None = None, skip_malformed: bool = False,
                  tfds_data_dir: str | None = None) -> list[GlueExample]:
    """GLUE TSV directory when ``data_dir`` is given, else TFDS (prepared under ``tfds_data_dir``)."""
    if data_dir:
        return load_glue_dir(task, data_dir, split, skip_malformed=skip_malformed)
    return load_tfds(task, split, data_dir=tfds_data_dir)


# --------------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------------

def encode_examples(examples: Sequence[GlueExample], tokenizer, max_length: int, *,
                    task: str | None = None, regression: bool | None = None) -> dict[str, np.ndarray]:
    """Tokenize with ``tokenizer.encode_batch`` -> int32 ``input_ids``/``token_type_ids``/``attention_mask``
    [N, max_length], ``labels`` [N] and ``idx`` [N] (int32).

    Labels are float32 (NaN where missing) for regression — ``regression``, or ``task`` is STS-B, or any label is a
    float — else int32 (-1 where missing).
    """
    has_b = {e.text_b is not None for e in examples}
    if len(has_b) > 1:
        raise InputError("examples mix single sentences and sentence pairs")
    if examples:
        pairs = [e.text_b for e in examples] if has_b == {True} else None
        enc = tokenizer.encode_batch([e.text_a for e in examples], pairs, max_length=max_length)
        out = {k: np.asarray(enc[k], np.int32) for k in ("input_ids", "token_type_ids", "attention_mask")}
        warn_truncated(getattr(tokenizer, "last_truncated", 0), len(examples), max_length, "max_seq_length")
    else:
        out = {k: np.zeros((0, max_length), np.int32) for k in ("input_ids", "token_type_ids", "attention_mask")}
    if regression is None:
        regression = get_task(task).is_regression if task else any(isinstance(e.label, float) for e in examples)
    if regression:
        out["labels"] = np.array([np.nan if e.label is None else e.label for e in examples], np.float32)
    else:
        out["labels"] = np.array([-1 if e.label is None else e.label for e in examples], np.int32)
    out["idx"] = np.array([e.idx for e in examples], np.int32)
    return out


# --------------------------------------------------------------------------------------------------
# Metrics (numpy; equal to sklearn / scipy)
# --------------------------------------------------------------------------------------------------

def accuracy(predictions, labels) -> float:
    p, y = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(p == y)) if len(y) else float("nan")


def f1_binary(predictions, labels) -> float:
    """F1 of the positive class 1 (sklearn ``f1_score``; 0.0 when there is no positive at all)."""
    p, y = np.asarray(predictions) == 1, np.asarray(labels) == 1
    tp, fp, fn = np.sum(p & y), np.sum(p & ~y), np.sum(~p & y)
    denom = 2 * tp + fp + fn
    return float(2 * tp / denom) if denom else 0.0


def matthews_corrcoef(predictions, labels) -> float:
    """Matthews correlation, multiclass (Gorodkin's R_K) as sklearn; 0.0 when either side is constant."""
    p, y = np.asarray(predictions), np.asarray(labels)
    classes, inv = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(classes)
    cm = np.zeros((k, k), np.float64)
    np.add.at(cm, (inv[:len(y)], inv[len(y):]), 1.0)
    t, q, c, s = cm.sum(1), cm.sum(0), np.trace(cm), cm.sum()
    cov_yp, cov_pp, cov_yy = c * s - t @ q, s * s - q @ q, s * s - t @ t
    return float(cov_yp / np.sqrt(cov_yy * cov_pp)) if cov_yy * cov_pp else 0.0


def pearson(x, y) -> float:
    """Pearson r (scipy ``pearsonr``); NaN when an input is constant."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xm, ym = x - x.mean(), y - y.mean()
    nx, ny = np.linalg.norm(xm), np.linalg.norm(ym)
    if nx == 0 or ny == 0:
        return float("nan")
    return float(np.clip(np.dot(xm / nx, ym / ny), -1.0, 1.0))


def _rank(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank (scipy ``rankdata(method='average')``)."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(x)]
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(x, y) -> float:
    """Spearman rho (scipy ``spearmanr``): Pearson of average ranks."""
    return pearson(_rank(np.asarray(x, np.float64)), _rank(np.asarray(y, np.float64)))


def _as_predictions(spec: TaskSpec, predictions) -> np.ndarray:
    """Class ids or logits [N, C] (argmax) for classification; scores [N] or [N, 1] for regression."""
    p = np.asarray(predictions)
    if spec.is_regression:
        return p.reshape(len(p), -1)[:, 0].astype(np.float64) if p.ndim == 2 else p.astype(np.float64)
    return p.argmax(-1) if p.ndim == 2 else p.astype(np.int64)


def compute_metrics(task: str, predictions, labels) -> dict[str, float]:
    """The task's GLUE metrics as fractions, plus its combined main metric (``TaskSpec.main_metric``).

    cola/ax: ``mcc``; stsb: ``pearson``, ``spearman``, ``corr``; mrpc/qqp: ``accuracy``, ``f1``,
    ``acc_and_f1``; others: ``accuracy``.
    """
    spec = get_task(task)
    p, y = _as_predictions(spec, predictions), np.asarray(labels)
    if p.shape[0] != y.shape[0]:
        raise InputError(f"{len(p)} predictions for {len(y)} labels")
    if spec.is_regression:
        r, rho = pearson(p, y), spearman(p, y)
        return {"pearson": r, "spearman": rho, "corr": (r + rho) / 2}
    if spec.main_metric == "mcc":
        return {"mcc": matthews_corrcoef(p, y)}
    if spec.main_metric == "acc_and_f1":
        acc, f1 = accuracy(p, y), f1_binary(p, y)
        return {"accuracy": acc, "f1": f1, "acc_and_f1": (acc + f1) / 2}
    return {"accuracy": accuracy(p, y)}


# --------------------------------------------------------------------------------------------------
# The paper's Table 2
# --------------------------------------------------------------------------------------------------

COLUMNS = ("MNLI-m", "MNLI-mm", "QQP", "QNLI", "SST-2", "CoLA", "STS-B", "MRPC", "RTE")
_COLUMN_KEYS = {"MNLI-m": ("mnli_matched", "mnli-m", "mnli"), "MNLI-mm": ("mnli_mismatched", "mnli-mm"),
                "QQP": ("qqp",), "QNLI": ("qnli",), "SST-2": ("sst2",), "CoLA": ("cola",), "STS-B": ("stsb",),
                "MRPC": ("mrpc",), "RTE": ("rte",)}
# Table 2, SqueezeBERT without bells and whistles (GLUE dev set, percent).
PAPER_DEV_ROW = dict(zip(COLUMNS + ("Average",), (82.3, 82.9, 89.4, 90.5, 92.0, 53.7, 89.4, 89.8, 71.8, 82.4)))
# Per task, the number this repo's fine-tuning should approach (percent; MNLI = (m + mm) / 2).
PAPER_DEV = {"mnli": 82.6, "qqp": 89.4, "qnli": 90.5, "sst2": 92.0, "cola": 53.7, "stsb": 89.4, "mrpc": 89.8,
             "rte": 71.8}


def _score(task_key: str, metrics) -> float:
    """Percent score from a compute_metrics dict (or a bare fraction)."""
    if isinstance(metrics, Mapping):
        return 100.0 * float(metrics[get_task(task_key.split("_")[0].split("-")[0]).main_metric])
    return 100.0 * float(metrics)


def table_row(results: Mapping[str, Mapping[str, float] | float]) -> dict[str, float]:
    """Column -> percent for the columns present in ``results`` (task -> compute_metrics dict)."""
    row = {}
    for col in COLUMNS:
        key = next((k for k in _COLUMN_KEYS[col] if k in results), None)
        if key is not None:
            row[col] = _score(key, results[key])
    return row


def glue_average(row: Mapping[str, float]) -> float:
    """Paper Listing 1: mean over the 8 dev tasks, MNLI as (m + mm) / 2; only the tasks present count."""
    tasks = []
    mnli = [row[c] for c in ("MNLI-m", "MNLI-mm") if c in row]
    if mnli:
        tasks.append(sum(mnli) / len(mnli))
    tasks += [row[c] for c in COLUMNS[2:] if c in row]
    return float(np.mean(tasks)) if tasks else float("nan")


def table(results: Mapping[str, Mapping[str, float] | float], name: str = "this run") -> str:
    """Table 2 layout (dev set, percent) for ``results``, with the paper's SqueezeBERT row below it.

    ``results`` maps task keys (``mnli_matched``, ``mnli_mismatched``, ``qqp``, ...) to compute_metrics
    dicts (or bare main-metric fractions). Each column shows the main metric: MRPC/QQP (acc + F1) / 2,
    STS-B (pearson + spearman) / 2, CoLA MCC. An average over fewer than all 9 columns is marked ``*``.
    """
    row = table_row(results)
    header = ["model"] + list(COLUMNS) + ["Average"]
    avg = glue_average(row)
    cells = [f"{row[c]:.1f}" if c in row else "-" for c in COLUMNS]
    cells.append("-" if not row else f"{avg:.1f}" + ("" if len(row) == len(COLUMNS) else "*"))
    lines = [header, [name] + cells,
             ["SqueezeBERT (paper)"] + [f"{PAPER_DEV_ROW[c]:.1f}" for c in header[1:]]]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    out = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in lines]
    if row and len(row) != len(COLUMNS):
        out.append(f"* average over the {len(row)} column(s) present")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# GLUE-server prediction files
# --------------------------------------------------------------------------------------------------

HEADER = "index\tprediction"


def submission_name(task: str, split: str = "test") -> str:
    """GLUE-server file name for a test split (``MNLI-m.tsv``); other splits get ``<stem>.<split>.tsv``."""
    spec = get_task(task)
    split = _split(spec, split)
    if split in spec.submission:
        return spec.submission[split]
    stem = (spec.submission["test_mismatched" if split.endswith("_mismatched") else "test_matched"]
            if spec.name == "mnli" else spec.submission["test"])
    return f"{stem[:-len('.tsv')]}.{split}.tsv"


def submission_files(task: str) -> list[str]:
    """The GLUE-server file names that predicting ``task``'s test splits writes (MNLI: ``MNLI-m.tsv``,
    ``MNLI-mm.tsv``; AX, predicted by the MNLI model, is the task ``ax``): the files a ``--predict test --out DIR``
    claims in DIR, and the only ones there it refuses to replace without ``--overwrite``."""
    spec = get_task(task)
    return [submission_name(spec.name, s) for s in spec.test_splits]


def format_prediction(spec: TaskSpec, value) -> str:
    """A class id as the server's label string; an STS-B score clipped to [0, 5] with 3 decimals."""
    if spec.is_regression:
        return f"{min(max(float(value), 0.0), 5.0):.3f}"
    return spec.labels[int(value)]


def write_predictions(task: str, idx, predictions, out_dir: str, split_name: str = "test") -> str:
    """Write ``index\\tprediction`` rows sorted by index; returns the file's path.

    ``predictions`` are class ids or logits [N, C] (classification) or scores (STS-B).
    """
    spec = get_task(task)
    idx = np.asarray(idx).astype(np.int64).reshape(-1)
    p = _as_predictions(spec, predictions)
    if len(idx) != len(p):
        raise InputError(f"{len(idx)} indices for {len(p)} predictions")
    if len(np.unique(idx)) != len(idx):
        raise InputError(f"{task}: duplicate indices in predictions")
    if not spec.is_regression and len(p) and (p.min() < 0 or p.max() >= spec.num_labels):
        raise InputError(f"{task}: class ids must lie in [0, {spec.num_labels})")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, submission_name(task, split_name))
    order = np.argsort(idx, kind="stable")
    return atomic_write(path, HEADER + "\n" + "".join(f"{idx[i]}\t{format_prediction(spec, p[i])}\n" for i in order))


@dataclasses.dataclass(frozen=True)
class Predictions:
    task: str
    idx: np.ndarray          # int64 [N]
    labels: list[str]        # as written
    values: np.ndarray       # class ids (int64) or scores (float64) [N]


def task_from_filename(path: str) -> str:
    """``.../MNLI-mm.tsv`` or ``RTE.validation.tsv`` -> TFDS task name."""
    stem = os.path.basename(path).split(".")[0]
    for spec in TASKS.values():
        if any(name.split(".")[0] == stem for name in spec.submission.values()):
            return spec.name
    names = sorted(n for s in TASKS.values() for n in s.submission.values())
    raise InputError(f"{path}: not a GLUE prediction file name (expected one of {names})")


def read_predictions(path: str, task: str | None = None, expected_rows: int | None = None) -> Predictions:
    """Parse and validate a prediction file: header, 2 fields a row, unique integer indices, labels valid
    for the task (inferred from the file name when ``task`` is None), optionally the row count."""
    spec = get_task(task or task_from_filename(path))
    idx, labels, values = [], [], []
    with open(path, encoding="utf-8", newline="\n") as f:
        first = f.readline().rstrip("\n")
        if first != HEADER:
            raise GlueFormatError(f"{path}:1: header {first!r}, expected {HEADER!r}")
        for lineno, line in enumerate(f, 2):
            cols = line.rstrip("\n").split("\t")
            try:
                if len(cols) != 2:
                    raise InputError(f"{len(cols)} fields, expected 2")
                idx.append(_int(cols[0], "index"))
                values.append(parse_label(spec, cols[1]))
                labels.append(cols[1])
            except ValueError as e:
                raise GlueFormatError(f"{path}:{lineno}: {e}") from None
    if len(set(idx)) != len(idx):
        raise GlueFormatError(f"{path}: duplicate indices")
    if expected_rows is not None and len(idx) != expected_rows:
        raise GlueFormatError(f"{path}: {len(idx)} rows, expected {expected_rows}")
    return Predictions(spec.name, np.array(idx, np.int64), labels,
                       np.array(values, np.float64 if spec.is_regression else np.int64))


def table_results(per_task: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """{task: {split: metrics}} -> the keys glue.table expects (mnli_matched, mnli_mismatched, qqp, ...)."""
    flat = {}
    for task, splits in per_task.items():
        for split, metrics in splits.items():
            key = task if task != "mnli" else ("mnli_matched" if split.endswith("_matched") else "mnli_mismatched")
            flat[key] = metrics
    return flat


# The training splits' sizes (GLUE's own files; TFDS glue/* has the same), for run lengths before the data is read
# (train/compile.py's hours).
TRAIN_EXAMPLES = {"cola": 8551, "sst2": 67349, "mrpc": 3668, "stsb": 5749, "qqp": 363846, "mnli": 392702,
                  "qnli": 104743, "rte": 2490, "wnli": 635}
