"""What a fine-tuning run trains on: a GLUE task, or the user's own labelled text in CSV, TSV or JSON Lines files.

Both are ``Task``s: a name, the label names (None for regression), the splits to evaluate and predict, the text
columns (one sentence or a pair), ``load(split)`` -> examples and ``metrics(predictions, labels)``. ``resolve(config)``
reads a fine-tuning config (train/configs/glue.py): ``task`` a GLUE name, or ``files`` with the ``data`` block:

    data.train_file / validation_file / test_file   CSV (.csv), TSV (.tsv) or JSON Lines (.jsonl, .json)
    data.text_columns   "sentence" or "premise,hypothesis" (a pair)
    data.label_column   "label"
    data.kind           classification (label names read from the training file, kept as the model's id2label),
                        regression (a float per row), multilabel (any number of labels per row: "a|b", or a JSON
                        list; sigmoid outputs), token_classification (CoNLL files: a word and its tag per
                        line, the tag last; a blank line between sentences; -DOCSTART- lines skipped),
                        question_answering (SQuAD v1.1 / v2.0 JSON or JSON Lines: ``squeezebert_jax.squad``; with
                        data.doc_stride, max_query_length, max_answer_length, n_best, null_threshold), or
                        multiple_choice (data.choice_columns the endings, SWAG-style: ``ChoiceTask``)
    data.labels         "neg,pos": the label names in id order (default: the training file's, sorted)

Files are read with the standard library's ``csv`` (quoted fields may hold the delimiter, quotes and newlines) and
``json`` readers. Every error names the file, the line and the column: a missing column, an empty split, a label outside
the declared set, a score that is not a finite number, a line that is not a JSON object.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
from typing import Any

import numpy as np

from squeezebert_jax import glue
from squeezebert_jax import sources, squad
from squeezebert_jax.errors import DataFileError, InputError
from squeezebert_jax.glue import GlueExample

KINDS = ("classification", "regression", "multilabel", "token_classification", "question_answering",
         "multiple_choice")
LABEL_SEPARATOR = "|"  # a multilabel row's labels in a CSV/TSV field: "comedy|drama" (JSON Lines: also a list)
TASK_CARD = "task.json"  # in an exported MODEL_DIR: how its task reads inputs and decodes outputs (predict)
IGNORE = -100  # the label of the pieces a token task does not score: specials, padding, a word's later pieces
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


# --------------------------------------------------------------------------------------------------
# GLUE tasks, as Tasks
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GlueTask:
    """A GLUE task read from a GLUE_DIR (``data_dir``) or TFDS."""

    spec: glue.TaskSpec
    data_dir: str | None = None
    skip_malformed: bool = False

    name = property(lambda self: self.spec.name)
    labels = property(lambda self: self.spec.labels)
    is_regression = property(lambda self: self.spec.is_regression)
    num_labels = property(lambda self: self.spec.num_labels)
    eval_splits = property(lambda self: self.spec.eval_splits)
    test_splits = property(lambda self: self.spec.test_splits)
    main_metric = property(lambda self: self.spec.main_metric)
    text_columns = property(lambda self: self.spec.text_columns)

    head = "SqueezeBertForSequenceClassification"

    def load(self, split: str) -> list[GlueExample]:
        return glue.load_examples(self.spec.name, split, data_dir=self.data_dir, skip_malformed=self.skip_malformed)

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        return glue.encode_examples(examples, tokenizer, max_length, regression=self.is_regression)

    def metrics(self, predictions, labels) -> dict[str, float]:
        return glue.compute_metrics(self.spec.name, predictions, labels)


# --------------------------------------------------------------------------------------------------
# The user's own files
# --------------------------------------------------------------------------------------------------

def read_rows(path: str):
    """(line, {column: value}) for every record of a CSV / TSV / JSON Lines file (the line where the record starts), or
    (row, {column: value}) for every row of a dataset split ``hf:...`` / ``tfds:...`` (``sources``)."""
    if sources.is_dataset(path):
        yield from sources.rows(path)
        return
    fmt = FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise DataFileError(f"{path}: unknown file type {os.path.splitext(path)[1]!r}; give a .csv, .tsv or .jsonl file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, encoding="utf-8", newline="") as f:
        try:
            if fmt == "jsonl":
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError as e:
                        raise DataFileError(f"{path}:{lineno}: not a JSON object ({e.msg})") from None
                    if not isinstance(row, dict):
                        raise DataFileError(f"{path}:{lineno}: a JSON {type(row).__name__}, not an object")
                    yield lineno, row
                return
            reader = csv.reader(f, delimiter="," if fmt == "csv" else "\t", strict=True)
            header, start = None, 1
            for record in reader:
                if header is None:
                    header = [c.strip() for c in record]
                    if len(set(header)) != len(header):
                        raise DataFileError(f"{path}:1: the header names a column twice: {header}")
                elif any(v.strip() for v in record):
                    if len(record) != len(header):
                        raise DataFileError(f"{path}:{start}: {len(record)} fields, the header has {len(header)} "
                                            f"({', '.join(header)})")
                    yield start, dict(zip(header, record))
                start = reader.line_num + 1
            if header is None:
                raise DataFileError(f"{path}: empty (no header line)")
        except UnicodeDecodeError as e:
            raise DataFileError(f"{path}: not UTF-8 text (byte {e.start} of a read block)") from None
        except csv.Error as e:
            raise DataFileError(f"{path}:{reader.line_num}: {e}") from None


def text_lines(path: str):
    """(line, [tab-separated fields]) for every non-blank line of a plain text file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield lineno, line.split("\t")


@dataclasses.dataclass(frozen=True)
class FileTask:
    """Sequence classification or regression on the user's files (see the module docstring)."""

    name: str
    kind: str
    files: dict  # split -> path: train, validation, test
    text_columns: tuple[str, ...]
    label_column: str
    labels: tuple[str, ...] | None  # classification: names in id order; regression: None

    def __post_init__(self):
        if self.kind not in ("classification", "regression", "multilabel"):
            raise InputError(f"config.data.kind={self.kind!r}: one of {', '.join(KINDS)}")
        if len(self.text_columns) not in (1, 2) or not all(self.text_columns):
            raise InputError(f"config.data.text_columns={','.join(self.text_columns)!r}: one column, or two for "
                             f"sentence pairs")
        if "train" not in self.files:
            raise InputError("config.data.train_file is required")

    head = "SqueezeBertForSequenceClassification"
    is_regression = property(lambda self: self.kind == "regression")
    num_labels = property(lambda self: 1 if self.is_regression else len(self.labels))
    eval_splits = property(lambda self: ("validation",) if "validation" in self.files else ())
    test_splits = property(lambda self: ("test",) if "test" in self.files else ())
    main_metric = property(lambda self: {"regression": "pearson", "multilabel": "micro_f1"}.get(self.kind, "accuracy"))

    def load(self, split: str) -> list[GlueExample]:
        """The split's rows as examples (labels as ids, floats, or tuples of ids); test files may leave the label column
        out."""
        path = self.files[split]
        examples = []
        for lineno, row in read_rows(path):
            texts, label = row_fields(path, lineno, row, self.text_columns, self.label_column, self._label, split)
            examples.append(GlueExample(len(examples), texts[0], texts[1] if len(texts) == 2 else None, label))
        if not examples:
            raise DataFileError(f"{path}: no rows (the {split} split is empty)")
        return examples

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        if self.kind != "multilabel":
            return glue.encode_examples(examples, tokenizer, max_length, regression=self.is_regression)
        out = glue.encode_examples([dataclasses.replace(e, label=None) for e in examples], tokenizer, max_length)
        out["labels"] = np.zeros((len(examples), self.num_labels), np.float32)  # multi-hot; a test row: none
        for i, e in enumerate(examples):
            out["labels"][i, list(e.label or ())] = 1.0
        return out

    def card(self) -> dict:
        """What ``predict`` needs (``task.json``): the kind (a multilabel model's outputs are a sigmoid each) and the
        text columns (a file's default input columns)."""
        return {"kind": self.kind, "text_columns": list(self.text_columns)}

    def _label(self, raw, path: str, lineno: int) -> int | float | tuple[int, ...]:
        where = f"{path}:{lineno}: column {self.label_column!r}"
        if self.is_regression:
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise DataFileError(f"{where}: {raw!r} is not a number (a regression task)") from None
            if not math.isfinite(value):
                raise DataFileError(f"{where}: {raw!r} is not a finite number")
            return value
        if self.kind == "multilabel":
            names = _label_names(raw)
            if bad := [n for n in names if n not in self.labels]:
                raise DataFileError(f"{where}: label {bad[0]!r} is not one of {list(self.labels)}")
            return tuple(sorted({self.labels.index(n) for n in names}))
        name = _label_name(raw)
        if name not in self.labels:
            raise DataFileError(f"{where}: label {name!r} is not one of {list(self.labels)}")
        return self.labels.index(name)

    def metrics(self, predictions, labels) -> dict[str, float]:
        """From logits (or ids / scores): accuracy, F1 (two labels) and macro-F1; Pearson, Spearman and MSE; for
        multilabel (a label is on where its logit is > 0) micro- and macro-F1 and the exact-match share."""
        p, y = np.asarray(predictions), np.asarray(labels)
        if self.kind == "multilabel":
            on, gold = p > 0, y > 0.5
            tp, fp, fn = (on & gold).sum(0), (on & ~gold).sum(0), (~on & gold).sum(0)
            micro = 2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1)
            seen = (tp + fp + fn) > 0
            macro = float(np.mean(2 * tp[seen] / (2 * tp[seen] + fp[seen] + fn[seen]))) if seen.any() else 0.0
            return {"micro_f1": float(micro), "macro_f1": macro, "exact_match": float(np.mean((on == gold).all(1)))}
        if self.is_regression:
            p = p.reshape(len(p), -1)[:, 0] if p.ndim == 2 else p
            mse = float(np.mean((p.astype(np.float64) - y) ** 2))
            return {"pearson": glue.pearson(p, y), "spearman": glue.spearman(p, y), "mse": mse}
        p = p.argmax(-1) if p.ndim == 2 else p
        out = {"accuracy": glue.accuracy(p, y)}
        if self.num_labels == 2:
            out["f1"] = glue.f1_binary(p, y)
        out["macro_f1"] = macro_f1(p, y, self.num_labels)
        return out


# --------------------------------------------------------------------------------------------------
# Token classification: CoNLL files
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TokenExample:
    idx: int
    words: tuple[str, ...]
    tags: tuple[str, ...] | None  # None: unlabelled (a test file of words only)


def read_conll(path: str, columns: tuple[str, str] = ("tokens", "ner_tags")
               ) -> list[tuple[int, list[str], list[str] | None]]:
    """(first line, words, tags) per sentence: a word per line, its tag the last whitespace-separated field (CoNLL-2003's
    "word POS chunk NER" reads as word and NER), a blank line between sentences, -DOCSTART- lines skipped. A file of one
    field per line is words without tags. A dataset split (``hf:...`` / ``tfds:...``): a sentence per row, its words in
    ``columns[0]`` and their tags (names, or class labels) in ``columns[1]``."""
    if sources.is_dataset(path):
        return _dataset_sentences(path, columns)
    sentences, words, tags, start, fields = [], [], [], None, None
    for lineno, line in enumerate(_lines(path), 1):
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            if words:
                sentences.append((start, words, tags if fields > 1 else None))
            words, tags, start = [], [], None
            continue
        if fields is None:
            fields = len(parts)
        if (len(parts) > 1) != (fields > 1):
            raise DataFileError(f"{path}:{lineno}: {len(parts)} field(s), the file's first line has {fields} (a word "
                                f"and its tag per line)")
        start = start or lineno
        words.append(parts[0])
        tags.append(parts[-1])
    if words:
        sentences.append((start, words, tags if fields > 1 else None))
    if not sentences:
        raise DataFileError(f"{path}: no sentences")
    return sentences


def _dataset_sentences(path: str, columns: tuple[str, str]):
    words_col, tags_col = columns
    out = []
    for row_no, row in sources.rows(path):
        if words_col not in row:
            raise DataFileError(f"{path}:{row_no}: no column {words_col!r} of words (has {', '.join(map(str, row))}); "
                                f"name it with config.data.text_columns")
        words = [str(w) for w in row[words_col]]
        tags = [str(t) for t in row[tags_col]] if tags_col in row else None
        if tags is not None and len(tags) != len(words):
            raise DataFileError(f"{path}:{row_no}: {len(words)} words but {len(tags)} tags in {tags_col!r}")
        if words:
            out.append((row_no, words, tags))
    if not out:
        raise DataFileError(f"{path}: no sentences")
    return out


def _lines(path: str):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, encoding="utf-8") as f:
        try:
            for line in f:
                yield line.rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise DataFileError(f"{path}: not UTF-8 text (byte {e.start} of a read block)") from None


def tag_names_of(path: str, columns: tuple[str, str] = ("tokens", "ner_tags")) -> tuple[str, ...]:
    """The tags of a CoNLL training file: "O" first, then the others sorted (B-LOC, B-PER, I-LOC, ...)."""
    names = {t for _, _, tags in read_conll(path, columns) for t in (tags or ())}
    if not names:
        raise DataFileError(f"{path}: no tags (a word and its tag per line)")
    return tuple(sorted(names, key=lambda t: (t != "O", t)))


@dataclasses.dataclass(frozen=True)
class ConllTask:
    """Token classification (NER-style tagging) on CoNLL files; scored by entity precision/recall/F1."""

    name: str
    files: dict
    labels: tuple[str, ...]
    columns: tuple[str, str] = ("tokens", "ner_tags")  # a dataset split's words and tags (CoNLL files: unused)

    kind, head = "token_classification", "SqueezeBertForTokenClassification"
    is_regression = False
    text_columns = ("words",)
    num_labels = property(lambda self: len(self.labels))
    eval_splits = property(lambda self: ("validation",) if "validation" in self.files else ())
    test_splits = property(lambda self: ("test",) if "test" in self.files else ())
    main_metric = "f1"

    def load(self, split: str) -> list[TokenExample]:
        path, out = self.files[split], []
        for lineno, words, tags in read_conll(path, self.columns):
            if tags is None and split != "test":
                raise DataFileError(f"{path}:{lineno}: words without tags (a word and its tag per line)")
            for i, t in enumerate(tags or ()):
                if t not in self.labels:
                    raise DataFileError(f"{path}:{lineno + i}: tag {t!r} is not one of {list(self.labels)}")
            out.append(TokenExample(len(out), tuple(words), tuple(tags) if tags else None))
        return out

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        """``[CLS] pieces [SEP]`` per sentence, the words tokenized one by one; ``labels`` [N, max_length]: each
        word's tag id on its first piece, ``IGNORE`` on its other pieces, the specials and the padding (transformers'
        ``run_ner`` with ``label_all_tokens=False``); 0 on first pieces of an unlabelled sentence. Words past
        ``max_length`` are cut (a word may keep only its first pieces)."""
        n = len(examples)
        out = {k: np.zeros((n, max_length), np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
        out["input_ids"][:] = tokenizer.pad_id
        labels = np.full((n, max_length), IGNORE, np.int32)
        pieces = tokenizer.word_pieces([w for ex in examples for w in ex.words])
        at = 0
        for i, ex in enumerate(examples):
            row, lab = [tokenizer.cls_id], [IGNORE]
            for w in range(len(ex.words)):
                p = pieces[at + w][:max_length - 1 - len(row)]
                if p:
                    row += p
                    lab += [self.labels.index(ex.tags[w]) if ex.tags else 0] + [IGNORE] * (len(p) - 1)
            at += len(ex.words)
            row.append(tokenizer.sep_id)
            lab.append(IGNORE)
            out["input_ids"][i, :len(row)], out["attention_mask"][i, :len(row)] = row, 1
            labels[i, :len(lab)] = lab
        out["labels"] = labels
        out["idx"] = np.array([ex.idx for ex in examples], np.int32)
        return out

    def tag_sequences(self, predictions, labels) -> tuple[list[list[str]], list[list[str]]]:
        """(predicted, gold) tag names per sentence, at the scored pieces (``labels`` != IGNORE)."""
        p, y = np.asarray(predictions), np.asarray(labels)
        p = p.argmax(-1) if p.ndim == 3 else p
        keep = y != IGNORE
        return ([[self.labels[t] for t in row[k]] for row, k in zip(p, keep)],
                [[self.labels[t] for t in row[k]] for row, k in zip(y, keep)])

    def metrics(self, predictions, labels) -> dict[str, float]:
        pred, gold = self.tag_sequences(predictions, labels)
        return entity_scores(gold, pred) | {
            "accuracy": float(np.mean([a == b for ps, gs in zip(pred, gold) for a, b in zip(ps, gs)] or [0.0]))}


# --------------------------------------------------------------------------------------------------
# Multiple choice: a context and N endings (SWAG)
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    idx: int
    context: str
    lead: str | None  # the start every ending continues (SWAG's sent2), or None
    endings: tuple[str, ...]
    label: int | None  # the right ending's index; None: unlabelled


@dataclasses.dataclass(frozen=True)
class ChoiceTask:
    """Multiple choice on CSV/TSV/JSON Lines rows (SWAG's layout: ``sent1``, ``sent2``, ``ending0`` .. ``ending3``,
    ``label``): ``text_columns`` the context (and the start every ending continues), ``choice_columns`` the endings,
    ``label_column`` the right one's index (0-based) or its column name. Each choice is encoded as the pair
    ``(context, start + " " + ending)``, as transformers' ``run_swag``; the model scores every choice, the loss is the
    cross-entropy over them, the metric accuracy."""

    name: str
    files: dict
    text_columns: tuple[str, ...]
    choice_columns: tuple[str, ...]
    label_column: str

    kind, head = "multiple_choice", "SqueezeBertForMultipleChoice"
    is_regression, labels = False, None
    main_metric = "accuracy"
    num_labels = property(lambda self: len(self.choice_columns))
    eval_splits = property(lambda self: ("validation",) if "validation" in self.files else ())
    test_splits = property(lambda self: ("test",) if "test" in self.files else ())

    def __post_init__(self):
        if len(self.text_columns) not in (1, 2) or not all(self.text_columns):
            raise InputError(f"config.data.text_columns={','.join(self.text_columns)!r}: the context column, and "
                             f"optionally the column each ending continues (SWAG: sent1,sent2)")
        if len(self.choice_columns) < 2 or not all(self.choice_columns):
            raise InputError(f"config.data.choice_columns={','.join(self.choice_columns)!r}: two or more columns "
                             f"holding the endings (SWAG: ending0,ending1,ending2,ending3)")

    def load(self, split: str) -> list[ChoiceExample]:
        path, out = self.files[split], []
        for lineno, row in read_rows(path):
            texts, label = row_fields(path, lineno, row, (*self.text_columns, *self.choice_columns), self.label_column,
                                      self._label, split)
            lead = texts[1] if len(self.text_columns) == 2 else None
            out.append(ChoiceExample(len(out), texts[0], lead, tuple(texts[len(self.text_columns):]), label))
        if not out:
            raise DataFileError(f"{path}: no rows (the {split} split is empty)")
        return out

    def _label(self, raw, path: str, lineno: int) -> int:
        name = _label_name(raw)
        if name in self.choice_columns:
            return self.choice_columns.index(name)
        if name.isdigit() and int(name) < len(self.choice_columns):
            return int(name)
        raise DataFileError(f"{path}:{lineno}: column {self.label_column!r}: {name!r} is not a choice: an index "
                            f"0..{len(self.choice_columns) - 1} or one of {list(self.choice_columns)}")

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        """``[N, choices, max_length]`` inputs, each choice ``[CLS] context [SEP] (start ending) [SEP]``; ``labels``
        [N] (0 for an unlabelled row)."""
        n, c = len(examples), self.num_labels
        first = [ex.context for ex in examples for _ in range(c)]
        second = [f"{ex.lead} {e}" if ex.lead is not None else e for ex in examples for e in ex.endings]
        enc = tokenizer.encode_batch(first, second, max_length=max_length)
        out = {k: np.asarray(enc[k], np.int32).reshape(n, c, max_length)
               for k in ("input_ids", "attention_mask", "token_type_ids")}
        out["labels"] = np.array([ex.label or 0 for ex in examples], np.int32)
        return out

    def metrics(self, predictions, labels) -> dict[str, float]:
        p = np.asarray(predictions)
        return {"accuracy": glue.accuracy(p.argmax(-1) if p.ndim == 2 else p, np.asarray(labels))}

    def card(self) -> dict:
        return {"kind": self.kind, "text_columns": list(self.text_columns),
                "choice_columns": list(self.choice_columns)}


def split_metrics(task, logits, arrays) -> dict[str, float]:
    """A split's scores from the model's outputs on its encoded ``arrays``: ``task.score`` where the task decodes
    outputs with more than the labels (QA's windows), else ``task.metrics(logits, labels)``."""
    return task.score(logits, arrays) if hasattr(task, "score") else task.metrics(logits, arrays["labels"])


def _split_tag(tag: str) -> tuple[str, str]:
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    return (prefix, kind) if sep and prefix in "BIES" and len(prefix) == 1 else ("I", tag)


def entities(tags) -> set[tuple[str, int, int]]:
    """(type, first, last) of each entity in a tag sequence, by conlleval's chunk rules (B/I/E/S prefixes, IOB1 and
    IOB2 alike: an I- after O or after another type starts an entity), as seqeval's default mode reads them."""
    out, start, prev_prefix, prev_kind = set(), None, "O", ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, kind = _split_tag(tag)
        end = (prev_prefix in ("E", "S") or (prev_prefix in ("B", "I") and prefix in ("B", "S", "O"))
               or (prev_prefix != "O" and prev_kind != kind))
        if start is not None and end:
            out.add((prev_kind, start, i - 1))
            start = None
        begin = (prefix in ("B", "S") or (prev_prefix in ("E", "S", "O") and prefix in ("E", "I"))
                 or (prefix != "O" and prev_kind != kind))
        if begin and prefix != "O":
            start = i
        prev_prefix, prev_kind = prefix, kind
    return out


def entity_scores(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 over the entities of every sentence (seqeval's default ``classification_report``
    micro average; 0 where undefined)."""
    g = {(s, *e) for s, tags in enumerate(gold) for e in entities(tags)}
    p = {(s, *e) for s, tags in enumerate(pred) for e in entities(tags)}
    hit = len(g & p)
    precision, recall = hit / len(p) if p else 0.0, hit / len(g) if g else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def row_fields(path: str, lineno: int, row: dict, columns, label_column: str, parse_label, split: str):
    """(the texts of ``columns``, the parsed label or None) of one row; a test row may leave the label out."""
    texts = []
    for col in columns:
        if col not in row:
            raise DataFileError(f"{path}:{lineno}: no column {col!r} (has {', '.join(map(str, row))})")
        texts.append(text_value(row[col], path, lineno, col))
    if label_column in row:
        return texts, parse_label(row[label_column], path, lineno)
    if split != "test":
        raise DataFileError(f"{path}:{lineno}: no label column {label_column!r} (has {', '.join(map(str, row))})")
    return texts, None


def text_value(value, path: str, lineno: int, col: str) -> str:
    if not isinstance(value, str):
        raise DataFileError(f"{path}:{lineno}: column {col!r} holds {type(value).__name__} {value!r}, not text")
    return value


def _label_name(raw) -> str:
    """A label as its name: JSON numbers and strings read alike (1 and "1" are the label "1")."""
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    return str(raw).strip()


def macro_f1(predictions, labels, num_labels: int) -> float:
    """The unweighted mean of the classes' F1 (a class with no prediction and no example counts 0, as sklearn's
    ``zero_division=0``), over the classes that occur in ``labels`` or ``predictions``."""
    p, y = np.asarray(predictions), np.asarray(labels)
    scores = []
    for c in range(num_labels):
        tp, fp, fn = np.sum((p == c) & (y == c)), np.sum((p == c) & (y != c)), np.sum((p != c) & (y == c))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def _label_names(raw) -> list[str]:
    """A multilabel field's names: a JSON list, or a string split on ``LABEL_SEPARATOR`` (empty: no label)."""
    items = raw if isinstance(raw, list) else str(raw).split(LABEL_SEPARATOR)
    return [n for n in (_label_name(x) for x in items) if n]


def label_names_of(path: str, column: str, multilabel: bool = False) -> tuple[str, ...]:
    """The distinct labels of a training file, sorted (numerically when every one is an integer)."""
    names = set()
    for lineno, row in read_rows(path):
        if column not in row:
            raise DataFileError(f"{path}:{lineno}: no label column {column!r} (has {', '.join(map(str, row))})")
        names.update(_label_names(row[column]) if multilabel else [_label_name(row[column])])
    if not names:
        raise DataFileError(f"{path}: no rows (the train split is empty)")
    numeric = all(n.lstrip("-").isdigit() for n in names)
    return tuple(sorted(names, key=int if numeric else str))


# --------------------------------------------------------------------------------------------------
# From a config
# --------------------------------------------------------------------------------------------------

def resolve(config) -> Any:
    """The ``Task`` a fine-tuning config describes: ``task`` a GLUE name, or ``files`` (the ``data`` block)."""
    if config.task != "files":
        return GlueTask(glue.get_task(config.task), config.data_dir or None, config.skip_malformed)
    d = config.data
    files = {s: d[f"{s}_file"] for s in ("train", "validation", "test") if d[f"{s}_file"]}
    if "train" not in files:
        raise InputError("config.task=files needs config.data.train_file (CSV, TSV or JSON Lines; CoNLL for "
                         "token_classification)")
    if d.kind not in KINDS:
        raise InputError(f"config.data.kind={d.kind!r}: one of {', '.join(KINDS)}")
    name = d.name or re.sub(r"[^\w.-]+", "_", os.path.splitext(os.path.basename(files["train"].rstrip("/")))[0])
    if d.kind == "token_classification":
        columns = (d.text_columns if d.text_columns != "sentence" else "tokens",
                   d.label_column if d.label_column != "label" else "ner_tags")
        tags = tuple(x.strip() for x in d.labels.split(",")) if d.labels else tag_names_of(files["train"], columns)
        return ConllTask(name, files, tags, columns)
    columns = tuple(c.strip() for c in d.text_columns.split(","))
    if d.kind == "question_answering":
        settings = {k: d[k] for k in ("max_query_length", "doc_stride", "max_answer_length", "n_best",
                                      "null_threshold")}
        squad.SquadTask(name, files, False, **settings).check(config.max_seq_length)
        version_2 = any(squad.has_unanswerable(files[s]) for s in ("train", "validation") if s in files)
        return squad.SquadTask(name, files, version_2, **settings)
    if d.kind == "multiple_choice":
        return ChoiceTask(name, files, columns, tuple(c.strip() for c in d.choice_columns.split(",") if c.strip()),
                          d.label_column)
    labels = None
    if d.kind in ("classification", "multilabel"):
        labels = (tuple(x.strip() for x in d.labels.split(",")) if d.labels
                  else label_names_of(files["train"], d.label_column, d.kind == "multilabel"))
        if len(labels) < 2:
            raise InputError(f"{files['train']}: column {d.label_column!r} has one label ({labels[0]!r}); "
                             f"a classifier needs two or more")
    return FileTask(name, d.kind, files, columns, d.label_column, labels)


def task_by_name(task) -> Any:
    """A ``Task`` given as itself or as a GLUE name."""
    return GlueTask(glue.get_task(task)) if isinstance(task, str) else task
