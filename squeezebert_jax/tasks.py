"""What a fine-tuning run trains on: a GLUE task, or the user's own labelled text in CSV, TSV or JSON Lines files.

Each is a ``Task`` (the protocol below): a declared record of its reader, encoder, metrics, head and loss.
``resolve(config)`` reads a fine-tuning config (train/configs/glue.py): ``task`` a GLUE name, or ``files`` with the
``data`` block:

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

Every file is read through ``files.text_lines`` (UTF-8, a byte-order mark dropped); CSV by the standard library's ``csv``
(quoted fields may hold the delimiter, quotes and newlines), TSV a row per line (``read_rows``; a file that reads
otherwise as CSV-quoted, as pandas writes a text with a tab or a line break, is refused where the readings part), JSON
Lines by ``json``. Labels are values (``label_key``: ``1``, ``1.0``, ``−1`` typeset and JSON ``1`` are one class; a
missing value as spreadsheets, pandas and database dumps write one, ``#N/A``, ``NULL``, ``\\N``, is no class unless
``data.labels`` names it), texts are never empty (a text that is a missing-value marker, pandas' ``nan``, is counted
in a warning), and each column has one role (``check_columns``); a column numbered like a text column (``sentence2``
beside ``sentence``) is not left unread without a word (``unread_numbered``). Every error names the file, the line
and the column: a missing column, an empty split, label or text, a label outside the declared set, a score that is not
a finite number, a line that is not a JSON object.
"""

from __future__ import annotations

import csv
import dataclasses
import decimal
import json
import logging
import math
import os
import re
import unicodedata
from typing import Protocol

import numpy as np

from squeezebert_jax import glue
from squeezebert_jax import files, sources, squad
from squeezebert_jax.errors import DataFileError, InputError, MissingExtraError
from squeezebert_jax.files import is_missing_marker, warn_texts
from squeezebert_jax.glue import GlueExample
from squeezebert_jax.tokenizer import warn_truncated

KINDS = ("classification", "regression", "multilabel", "token_classification", "question_answering",
         "multiple_choice")
# config.data: the settings of your own files (task "files") and their defaults, from which train/configs/glue.py
# builds its data section. A GLUE task reads its own files: fine-tuning's validator refuses any of these changed
# beside one (finetune_settings.check_settings), where they would be ignored.
DATA_SETTINGS = {"train_file": "", "validation_file": "", "test_file": "", "text_columns": "sentence",
                 "label_column": "label", "kind": "classification", "labels": "", "name": "", "choice_columns": "",
                 "max_query_length": 64, "doc_stride": 32, "max_answer_length": 30, "n_best": 20,
                 "null_threshold": 0.0}
QA_SETTINGS = ("max_query_length", "doc_stride", "max_answer_length", "n_best", "null_threshold")  # SQuAD windows
# the fewest tokens an input may be cut to (config.max_seq_length, predict's max_length): [CLS], [SEP] and a piece of
# each text; at 2 or 3 a model would train or predict on the special tokens alone
MIN_SEQ_LENGTH = 4


def input_length(value, positions: int | None = None, name: str = "max_length", model: str = "the model") -> int | None:
    """Tokens per input for a model that reads at most ``positions`` (its max_position_embeddings): None is 128, or
    ``positions`` where fewer; else an integer in [MIN_SEQ_LENGTH, positions]. ``positions`` None: the form alone,
    checked before a model is loaded. Predict and GLUE evaluation alike."""
    if value is None:
        return None if positions is None else min(128, positions)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < MIN_SEQ_LENGTH:
        raise InputError(f"{name}={value!r}: an integer >= {MIN_SEQ_LENGTH} (the special tokens and a word of each "
                         "text)")
    if positions is not None and value > positions:
        raise InputError(f"{name}={value}: {model} reads at most {positions} tokens (its config.json "
                         f"max_position_embeddings); give {positions} or less")
    return int(value)


LABEL_SEPARATOR = "|"  # a multilabel row's labels in a CSV/TSV field: "comedy|drama" (JSON Lines: also a list)
# separators mistaken for it, refused inside a multilabel row's label names (config.data.labels could not name one with
# a comma; "comedy;drama" is a spreadsheet's list)
MISTAKEN_SEPARATORS = {",": "comma", ";": "semicolon", "\uff5c": "full-width vertical bar", "\u00a6": "broken bar",
                       "\u2223": "divides sign", "\u2502": "box-drawing bar",
                       "\u01c0": "dental click (a bar look-alike)",
                       "\u23ae": "integral extension (a bar look-alike)", "\uff0c": "full-width comma",
                       "\u3001": "ideographic comma"}
TASK_CARD = "task.json"  # in an exported MODEL_DIR: how its task reads inputs and decodes outputs (predict)
IGNORE = -100  # the label of the pieces a token task does not score: specials, padding, a word's later pieces
log = logging.getLogger(__name__)
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}


# A sequence classifier's kind as transformers' config.json names it (SqueezeBertConfig.problem_type): what the
# exported model's loss and a pipeline's sigmoid or softmax follow
PROBLEM_TYPE = {"classification": "single_label_classification", "regression": "regression",
                "multilabel": "multi_label_classification"}


class Task(Protocol):
    """What a fine-tuning run trains on, every part declared by the task (none read off its data or guessed from the
    attributes it happens to have): ``GlueTask``, ``FileTask``, ``ConllTask``, ``ChoiceTask``, ``squad.SquadTask``.

    name          the run's task name
    kind          one of ``KINDS`` (a GLUE task: classification or regression)
    loss          the training loss's name, a key of ``losses.LOSSES``: cross_entropy (a softmax over labels or
                  choices), mse, sigmoid_bce (multilabel), token_cross_entropy, span_cross_entropy (extractive QA)
    head          the model class trained (a key of ``model.HEADS``)
    labels        the label names in id order (None: regression, QA, multiple choice); ``num_labels`` the head's outputs
    text_columns  the input columns; ``eval_splits``, ``test_splits``; ``main_metric`` picks the best epoch
    load(split) -> examples; encode(examples, tokenizer, max_length) -> arrays; metrics(predictions, labels)
    score(logits, arrays)  a split's scores from the model's outputs on its encoded arrays: ``metrics(logits,
                  arrays["labels"])``, or more where decoding needs more (QA's windows, a tagger's cut words)
    card()        what ``predict`` needs to read inputs and decode outputs as the run did (``TASK_CARD``), or None
                  (no file: the model's head says it all)
    """

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def loss(self) -> str: ...
    @property
    def head(self) -> str: ...
    @property
    def labels(self) -> tuple[str, ...] | None: ...
    @property
    def num_labels(self) -> int: ...
    @property
    def is_regression(self) -> bool: ...
    @property
    def text_columns(self) -> tuple[str, ...]: ...
    @property
    def eval_splits(self) -> tuple[str, ...]: ...
    @property
    def test_splits(self) -> tuple[str, ...]: ...
    @property
    def main_metric(self) -> str: ...

    def load(self, split: str) -> list: ...
    def encode(self, examples, tokenizer, max_length: int) -> dict: ...
    def metrics(self, predictions, labels) -> dict[str, float]: ...
    def score(self, logits, arrays) -> dict[str, float]: ...
    def card(self) -> dict | None: ...


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
    kind = property(lambda self: "regression" if self.spec.is_regression else "classification")
    loss = property(lambda self: "mse" if self.spec.is_regression else "cross_entropy")

    head = "SqueezeBertForSequenceClassification"

    def load(self, split: str) -> list[GlueExample]:
        return glue.load_examples(self.spec.name, split, data_dir=self.data_dir, skip_malformed=self.skip_malformed)

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        return glue.encode_examples(examples, tokenizer, max_length, regression=self.is_regression)

    def metrics(self, predictions, labels) -> dict[str, float]:
        return glue.compute_metrics(self.spec.name, predictions, labels)

    def score(self, logits, arrays) -> dict[str, float]:
        return self.metrics(logits, arrays["labels"])

    def card(self) -> dict:
        """What ``predict`` and evaluation need (``task.json``): the kind, the task's text columns (TFDS's names: one
        text or a pair) and the GLUE task itself, so that the model is scored on no other task (an SST-2 model on
        CoLA's 0/1 labels, or on MRPC's pairs, was scored without a word)."""
        return {"kind": self.kind, "text_columns": list(self.spec.text_columns), "glue_task": self.spec.name}


def glue_name(name) -> str | None:
    """The GLUE task ``name`` names (``sst2``, ``SST-2``, ``STS-B``), or None (no name, or another task's)."""
    try:
        return glue.get_task(name).name if isinstance(name, str) and name else None
    except InputError:
        return None


def glue_card(name) -> dict | None:
    """The card (``task.json``) of a classifier fine-tuned on the GLUE task ``name`` (``GlueTask.card``), or
    None where ``name`` names none (AX is no fine-tuning task)."""
    task = glue_name(name)
    return GlueTask(glue.get_task(task)).card() if task in glue.FINETUNE_TASKS else None


# The heads a task.json describes, by the name a card's kind gives them (``CARD_HEADS``), with their model class
HEAD_KINDS = {"classifier": "SqueezeBertForSequenceClassification", "tagger": "SqueezeBertForTokenClassification",
              "qa": "SqueezeBertForQuestionAnswering", "choice": "SqueezeBertForMultipleChoice"}


# task.json (``TASK_CARD``), as fine-tuning writes it (``FileTask.card``, ``ChoiceTask.card``, ``SquadTask.card``):
# the keys each kind may have beside "kind", with their checks (a check returns what is wrong, or "").
def _columns(low: int, high: int | None):
    def check(v) -> str:
        if (not isinstance(v, list) or not v or not all(isinstance(c, str) and Row._key(c) for c in v)
                or len({Row._key(c) for c in v}) != len(v)):  # as a file's reader keys its columns
            return "a non-empty list of distinct non-empty column names"
        if len(v) < low or (high is not None and len(v) > high):
            return f"{low}{'' if high == low else ' or more' if high is None else f' to {high}'} column names"
        return ""
    return check


def _int(low: int):
    return lambda v: "" if isinstance(v, int) and not isinstance(v, bool) and v >= low else f"an integer >= {low}"


_FINITE = lambda v: ("" if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
                     else "a finite number")
_BOOL = lambda v: "" if isinstance(v, bool) else "true or false"  # noqa: E731
_GLUE_TASK = lambda v: ("" if isinstance(v, str) and v in glue.FINETUNE_TASKS  # noqa: E731
                        else f"one of GLUE's tasks ({', '.join(glue.FINETUNE_TASKS)})")
_CLASSIFIER_CARD = {"text_columns": _columns(1, 2), "glue_task": _GLUE_TASK}
CARD_KEYS = {
    "classification": _CLASSIFIER_CARD, "regression": _CLASSIFIER_CARD, "multilabel": _CLASSIFIER_CARD,
    "token_classification": {"text_columns": _columns(1, 1)},
    "question_answering": {"version_2": _BOOL, "max_query_length": _int(1), "doc_stride": _int(0),
                           "max_answer_length": _int(1), "n_best": _int(1), "null_threshold": _FINITE},
    "multiple_choice": {"text_columns": _columns(1, 2), "choice_columns": _columns(2, None)},
}
CARD_HEADS = {"classification": "classifier", "regression": "classifier", "multilabel": "classifier",
              "token_classification": "tagger", "question_answering": "qa", "multiple_choice": "choice"}


def check_card(card, path: str, kind: str | None = None, num_labels: int | None = None,
               finetuning_task: str | None = None, holder: str = "the model is") -> dict:
    """The one check of a task description ``card`` (``path``: what a message names it by; ``kind`` (a
    ``HEAD_KINDS`` name), ``num_labels``: the model's it describes; ``finetuning_task``: its config.json's), read from
    task.json (``predict.read_card``) or given as a value (``pretrained.export_torch(card=...)``, ``import_torch``).
    Returns ``card``."""
    if not isinstance(card, dict):
        raise InputError(f"{path}: {files.json_type(card)}, not an object of the task's settings")
    if "kind" not in card:
        raise InputError(f"{path}: no key 'kind' (one of {', '.join(KINDS)})")
    if not isinstance(card["kind"], str) or card["kind"] not in CARD_KEYS:
        raise InputError(f"{path}: 'kind' is {files.json_repr(card['kind'])}, not one of {', '.join(KINDS)}")
    allowed = CARD_KEYS[card["kind"]]
    for key, value in card.items():
        if key == "kind":
            continue
        if key not in allowed:
            raise InputError(f"{path}: unknown key {key!r} for a {card['kind']} model (its keys: kind, "
                             f"{', '.join(allowed)}); remove it")
        if why := allowed[key](value):
            raise InputError(f"{path}: {key!r} is {files.json_repr(value, 60)}; it must be {why}")
    if "glue_task" in card and len(card.get("text_columns", ())) != len(glue.get_task(card["glue_task"]).text_columns):
        want = glue.get_task(card["glue_task"]).text_columns
        raise InputError(f"{path}: 'text_columns' names {len(card.get('text_columns', ()))} but {card['glue_task']} "
                         f"reads {len(want)} ({', '.join(want)}); put back the task.json its fine-tuning wrote")
    if "glue_task" in card:  # the task's kind and outputs: an MNLI card on 2 outputs, STS-B's as a classifier's
        glue_task = GlueTask(glue.get_task(card["glue_task"]))
        if card["kind"] != glue_task.kind:
            raise InputError(f"{path}: 'kind' is {card['kind']!r}, but {card['glue_task']} is a {glue_task.kind} task; "
                             "put back the task.json its fine-tuning wrote")
        if num_labels is not None and num_labels != glue_task.num_labels:
            raise InputError(f"{path}: 'glue_task' is {card['glue_task']!r}, which has {glue_task.num_labels} "
                             f"output{'s' * (glue_task.num_labels != 1)}, but the model's classifier has {num_labels}; "
                             "the task.json of another model? put back the one its fine-tuning wrote")
    task = finetuning_task if "glue_task" in card else None
    if task is not None and (glue_name(task) or task) != card["glue_task"]:  # to_pytorch writes both; sst-2 is sst2
        raise InputError(f"{path}: 'glue_task' is {card['glue_task']!r}, but config.json's finetuning_task is "
                         f"{task!r}: which task the model was fine-tuned on is not for us to pick; make them agree")
    if overlap := ({Row._key(c) for c in card.get("text_columns", ())}
                   & {Row._key(c) for c in card.get("choice_columns", ())}):
        raise InputError(f"{path}: 'choice_columns' repeats the text column {sorted(overlap)[0]!r}; a column is a "
                         "text or an ending, not both")
    if kind is not None and CARD_HEADS[card["kind"]] != kind:
        raise InputError(f"{path}: 'kind' is {card['kind']!r}, but {holder} a {kind} model; the task.json "
                         "of another model? put back the one its fine-tuning wrote")
    if kind == "classifier" and num_labels is not None and (card["kind"] == "regression") != (num_labels == 1):
        raise InputError(f"{path}: 'kind' is {card['kind']!r}, but the model's classifier has {num_labels} "
                         f"output{'s' * (num_labels != 1)}; the task.json of another model? put back the one its "
                         "fine-tuning wrote")
    return card


# --------------------------------------------------------------------------------------------------
# The user's own files
# --------------------------------------------------------------------------------------------------

def read_rows(path: str):
    """(line, {column: value}) for every record of a CSV / TSV / JSON Lines file (the line where the record starts), or
    (row, {column: value}) for every row of a dataset split ``hf:...`` / ``tfds:...`` (``sources``).

    Every file is read through ``files.text_lines`` (UTF-8; a byte-order mark dropped; a bad byte named by line and
    column). CSV is RFC 4180 (a quoted field may hold commas, quotes written twice, and line breaks). TSV is a record
    per line, fields split on tabs (IANA's TSV: no quoting, so a text that starts with a quote stays one field of its
    own line); a field quoted whole, as pandas writes one, is unquoted (its doubled quotes read as one). Blank lines
    before the header are skipped; after it, an empty line is no row; any other line is a row of the header's fields,
    or refused by line (a line of a tab or of spaces too, and the header line again, as two files joined would have
    it)."""
    if sources.is_dataset(path):
        for at, row in sources.rows(path):
            yield at, Row.of(row, f"{path}:{at}")
        return
    fmt = file_format(path)
    lines = files.text_lines(path)
    if fmt == "jsonl":
        for at, row in files.json_lines(path, lines):
            yield at, Row.of(row, f"{path}:{at}")
        return
    first = next((text for _, text in files.text_lines(path) if text.strip()), "")
    if first.lstrip().startswith("{") and _is_json_object(first):  # JSON Lines named .csv ("opens its quote after
        raise DataFileError(f"{path}:1: a JSON object per line (JSON Lines), read as {fmt.upper()} by the file's "
                            "name: name it .jsonl")  # a space" was said)
    records = _tsv_records(path, lines) if fmt == "tsv" else _csv_records(path, lines)
    header = None
    for start, record in records:
        if header is None and not any(files.has_text(c) for c in record):
            continue  # blank lines before the header (pandas skips them too); the header is the first line of text
        if header is None:
            header, header_at = [Row._key(c) for c in record], start
            if len(set(header)) != len(header):
                twice = next(c for c in header if header.count(c) > 1)
                forms = "" if [c.strip() for c in record].count(twice) > 1 else (
                    " (written two ways: in two Unicode forms, or with an invisible character)")
                raise DataFileError(f"{path}:{start}: the header names the column {twice!r} twice{forms}: {header}")
            if start == 1 and len(record) <= 2 and re.fullmatch(r"sep=.?", ",".join(record).strip()):
                raise DataFileError(f"{path}:1: Excel's 'sep=' line ({','.join(record).strip()}), which says the "
                                    "separator, not the header; delete the line (the header follows it)")
            if not all(header):
                raise DataFileError(f"{path}:{start}: the header has an empty column name (column "
                                    f"{header.index('') + 1}): {header}")
        elif record:  # an empty line is no row; `""` (CSV, TSV) or a tab (TSV) is a row of empty fields
            if len(record) != len(header) and not any(files.has_text(c) for c in record):  # blank, not short
                raise DataFileError(f"{path}:{start}: a line with no text in it ({len(record)} field"
                                    f"{'s' * (len(record) > 1)}, the header has {len(header)}); delete it, or leave "
                                    "the line empty (an empty line is skipped)")
            if len(record) != len(header):
                raise DataFileError(f"{path}:{start}: {len(record)} fields, the header has {len(header)} "
                                    f"({', '.join(header)})")
            if [Row._key(c).casefold() for c in record] == [c.casefold() for c in header]:  # Text,Label too
                raise DataFileError(f"{path}:{start}: the header line again ({', '.join(map(Row._key, record))}), read "
                                    "as a row: files joined together? Remove it")
            row = Row(zip(header, record))
            row.header_at = header_at  # a column it lacks is the header's to name
            yield start, row
    if header is None:
        raise DataFileError(f"{path}: empty (no header line)")


class Row(dict):
    """A record of a user's file, its column names as they read (``_key``: Unicode's composed form, NFC, without
    invisible characters or white space around them), looked up so too: a column named ``réview`` in the file and in
    a setting is one column whichever way each writes the accent, or if one holds a zero-width space."""

    @classmethod
    def of(cls, row: dict, where: str) -> "Row":
        out = cls()
        for k, v in row.items():
            key = cls._key(k)
            if key in out:
                raise DataFileError(f"{where}: the column {key!r} is named twice (written two ways: in two Unicode "
                                    "forms, or with an invisible character)")
            out[key] = v
        return out

    @staticmethod
    def _key(k):
        if not isinstance(k, str):
            return k
        return files.drop_invisible(unicodedata.normalize("NFC", k)).strip()

    def __getitem__(self, k):
        return super().__getitem__(self._key(k))

    def __contains__(self, k) -> bool:
        return super().__contains__(self._key(k))

    def get(self, k, default=None):
        return super().get(self._key(k), default)


def file_format(path: str) -> str:
    """``csv``, ``tsv`` or ``jsonl``, by the file's extension (a data file of any other kind is refused)."""
    fmt = FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise DataFileError(f"{path}: unknown file type {os.path.splitext(path)[1]!r}; give a .csv, .tsv or .jsonl file")
    return fmt


_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
QUOTE_SPAN = 1000  # lines a quoted text may run over, read as CSV (a TSV line with a quote is checked so)


def _tsv_records(path: str, lines):
    """(line, fields) per line: IANA's TSV, a record per line split on tabs, a field quoted whole unquoted. A file
    that reads otherwise as CSV with tabs (pandas' ``to_csv(sep="\\t")`` quotes a text holding a tab or a line
    break), and reads so as a table (every record the header's fields), is refused at the first record the two
    readings part: read as TSV, its text would be cut into fields or rows that the header's count may not catch (a
    one-column test file). A text merely starting with a quote, unclosed, is no CSV and stays as it is."""
    lines = list(lines)
    records = [(n, [m[1].replace('""', '"') if (m := _QUOTED.fullmatch(f)) else f for f in text.split("\t")]
                if (text := line.rstrip("\r\n")) else []) for n, line in lines]  # an empty line: no fields
    if any('"' in line for _, line in lines):
        _check_tsv_quoting(path, lines, records)
    yield from records


def _check_tsv_quoting(path: str, lines, records) -> None:
    """Each line with a quote, read as the start of one CSV record (over at most ``QUOTE_SPAN`` lines): one that
    reads so as a record of the header's fields, and otherwise than as TSV, is refused (a line elsewhere that is no
    CSV, ``"Great" movie``, leaves the others checked)."""
    width = next((len(r) for _, r in records if r), 0)  # the header's
    for i, (at, line) in enumerate(lines):
        if '"' not in line or i == 0:
            continue
        reader = csv.reader((lines[j][1] for j in range(i, min(i + QUOTE_SPAN, len(lines)))), delimiter="\t",
                            strict=True)
        try:
            record = next(reader)
        except (csv.Error, StopIteration):
            continue  # no CSV from here: read as TSV
        spans = reader.line_num
        if len(record) == width and record != records[i][1] and (spans > 1 or len(records[i][1]) != width):
            break
    else:
        return
    how = f"runs on to line {at + spans - 1} (a line break inside it" if spans > 1 else "holds a tab (a tab inside it"
    raise DataFileError(f"{path}:{at}: a text in quotes {how}, as CSV quotes one; pandas' to_csv(sep='\\t') writes "
                        "so): a .tsv here is one record per line with no quoting; replace the text's tabs and line "
                        "breaks, or save the file as .csv or .jsonl")


def _csv_records(path: str, lines):
    """(first line, fields) per CSV record; a quoting error named by the line where its record starts. A field may be
    as long as a line may (the csv module's own limit, 128 KiB, would refuse a long document)."""
    csv.field_size_limit(2 ** 31 - 1)
    reader = csv.reader((line for _, line in lines), strict=True)
    start = 1
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            if "unexpected end of data" in str(e) or "new-line character seen in unquoted field" in str(e):
                why = "a quoted field opened in this record is never closed"
            elif "expected after" in str(e):
                why = "text follows a closing quote"
            else:
                why = str(e)
            raise DataFileError(f"{path}:{start}: {why} (a CSV field holding a quote is quoted whole, its quotes "
                                f"written twice: \"say \"\"hi\"\"\")") from None
        for col, field in enumerate(record, 1):
            if field[:1].isspace() and field.lstrip().startswith('"'):  # `a, "b"`: CSV reads ` "b"`, quotes and all
                raise DataFileError(f"{path}:{start}: field {col} ({field.strip()[:30]!r}) opens its quote after a "
                                    "space, so CSV reads the quotes as text (and any comma inside them as a new "
                                    "field); "
                                    "remove the space after the comma before it")
        yield start, record
        start = reader.line_num + 1


# the column names a table's header holds (a CSV or TSV file named .txt: its header was read as a text)
_HEADER_WORDS = frozenset({"text", "texts", "sentence", "sentence1", "sentence2", "label", "labels", "review",
                           "question", "context", "premise", "hypothesis", "id", "idx", "tokens", "words", "ner_tags",
                           "tags", "text_a", "text_b", "answer", "answers", "score", "sentiment"})
_CONLL_LINE = re.compile(r"(?i:-docstart-.*)|\S+(\s+\S+\s+\S+)?\s+[BIESLU]-[A-Z][A-Z0-9_]+")  # john B-PER


def text_lines(path: str, what: str = "", blank: list[int] | None = None):
    """(line, [tab-separated fields]) for every line of a plain text file (``files.text_lines``) that holds text
    (a line of white space or invisible marks alone is blank: its number goes into ``blank``); the one reader of a
    .txt of inputs (predict's, a distillation's transfer text). A first line that is another format's is refused by
    line, naming the format: a JSON object (JSON Lines), a table's header (a CSV or TSV file: its header and labels
    would be read as texts), a CoNLL line (a word and its tag)."""
    first = True
    for lineno, line in files.text_lines(path, what):
        line = line.rstrip("\r\n")
        if not files.has_text(line):
            if blank is not None:
                blank.append(lineno)
            continue
        if first:
            first = False
            if line.lstrip().startswith("{") and _is_json_object(line):
                raise DataFileError(f"{path}:{lineno}: a JSON object, where a text per line is read: a JSON Lines file "
                                    "(name it .jsonl)")
            fields = [f.strip() for f in re.split(r"[,\t]", line)]
            if all(re.fullmatch(r"[A-Za-z_][\w.-]{0,40}", f) for f in fields) and sum(
                    f.casefold() in _HEADER_WORDS for f in fields) > 1:  # "Text, please" is a text
                raise DataFileError(f"{path}:{lineno}: {line.strip()[:60]!r} reads as a table's header, where a text "
                                    "per line is read: its rows and labels would be read as texts; name a CSV file "
                                    ".csv, a TSV file .tsv")
            if _CONLL_LINE.fullmatch(line.strip()):
                raise DataFileError(f"{path}:{lineno}: {line.strip()[:60]!r} reads as a CoNLL line (a word and its "
                                    "tag), where a text per line is read: the tags would be read as words; give the "
                                    "sentences, a sentence per line")
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
        check_columns("config.data", text=self.text_columns, label=(self.label_column,))
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise InputError(f"config.data.labels: a label is named twice in {list(self.labels)}")

    head = "SqueezeBertForSequenceClassification"
    loss = property(lambda self: {"classification": "cross_entropy", "regression": "mse",
                                  "multilabel": "sigmoid_bce"}[self.kind])
    is_regression = property(lambda self: self.kind == "regression")
    num_labels = property(lambda self: 1 if self.is_regression else len(self.labels))
    eval_splits = property(lambda self: ("validation",) if "validation" in self.files else ())
    test_splits = property(lambda self: ("test",) if "test" in self.files else ())
    main_metric = property(lambda self: {"regression": "pearson", "multilabel": "micro_f1"}.get(self.kind, "accuracy"))

    def load(self, split: str) -> list[GlueExample]:
        """The split's rows as examples (labels as ids, floats, or tuples of ids); test files may leave the label column
        out. A class no training row has (one config.data.labels declares) is named in a warning: its output is never
        trained towards."""
        path = self.files[split]
        examples, rows = [], []
        for lineno, row in read_rows(path):
            if not examples:
                check_unread_columns(path, lineno, row, self.text_columns, "config.data.text_columns",
                                     label=self.label_column,
                                     refuse=self.text_columns == (DATA_SETTINGS["text_columns"],))
            texts, label = row_fields(path, lineno, row, self.text_columns, self.label_column, self._label, split)
            examples.append(GlueExample(len(examples), texts[0], texts[1] if len(texts) == 2 else None, label))
            rows.append((lineno, texts))
        if not examples:
            raise DataFileError(f"{path}: no rows (the {split} split is empty)")
        warn_texts(path, rows)
        # as the model trains on them: float32 (1e-50 and 2e-50 are both 0 there)
        if self.is_regression and split != "test" and len({np.float32(e.label) for e in examples}) == 1:
            held = (f" ({np.float32(examples[0].label):g} in float32, as the model trains)"
                    if any(float(np.float32(e.label)) != e.label for e in examples) else "")
            what = (f"all {len(examples)} scores are {examples[0].label:g}{held}" if len(examples) > 1
                    else f"one row (score {examples[0].label:g})")
            if split != "train":  # Pearson and Spearman divide by the scores' spread: no epoch could be scored
                raise DataFileError(f"{path}: {what}: Pearson and Spearman correlation are undefined on scores that "
                                    "do not vary; a validation file needs different scores")
            log.warning("%s: %s: the model can only learn that one value", path, what)
        if split == "train" and not self.is_regression:
            seen = {i for e in examples for i in (e.label if isinstance(e.label, tuple) else (e.label,))}
            if unseen := [name for i, name in enumerate(self.labels) if i not in seen]:
                log.warning("%s: no training row has the label(s) %s of config.data.labels: the classifier's "
                            "output for them is never trained towards", path, ", ".join(map(repr, unseen)))
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

    def score(self, logits, arrays) -> dict[str, float]:
        return self.metrics(logits, arrays["labels"])

    def _label(self, raw, path: str, lineno: int) -> int | float | tuple[int, ...]:
        where = f"{path}:{lineno}: column {self.label_column!r}"
        if self.is_regression:
            if isinstance(raw, str) and is_missing_marker(raw):  # "\N", "#VALUE!": said so
                raise DataFileError(f"{where}: {raw.strip()!r} is how a spreadsheet or a database dump writes a "
                                    "missing value, not a score: give the row its score, or remove it")
            try:
                value = files.number_value(raw)
            except ValueError:
                shown = repr(raw) if isinstance(raw, str) else files.json_value(raw)  # JSON's true, not Python's
                raise DataFileError(f"{where}: {shown} is not a number (a regression task)") from None
            if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
                shown = raw if len(str(raw)) < 40 else f"{str(raw)[:20]}... ({len(str(raw))} characters)"
                raise DataFileError(f"{where}: {shown!r} is not a finite number a float32 holds (|x| < 3.4e38; the "
                                    "model trains in float32)")
            if value == 0 and isinstance(raw, str) and files.reads_as_zero(raw):  # as JSON's 1e-400 is refused
                raise DataFileError(f"{where}: {raw!r} is below a float's range (it reads as 0; |x| >= 4.9e-324 or "
                                    "0); write it as 0")
            if abs(value) > _SQUARE_MAX:  # the squared errors of the very first batch would sum to inf
                raise DataFileError(f"{where}: {raw!r} is too large a score to train on: a batch's squared errors "
                                    f"overflow float32 (|x| < {_SQUARE_MAX:.1e}); rescale the column")
            return value
        if self.kind == "multilabel":
            names = label_keys(raw, where)
            if bad := [n for n in names if n not in self.labels]:
                raise DataFileError(f"{where}: label {bad[0]!r} is not one of {list(self.labels)}")
            return tuple(sorted({self.labels.index(n) for n in names}))
        name = label_key(raw, where)
        if name not in self.labels:
            unlabelled = ("; -1 is how datasets and GLUE's TFDS splits mark a row without its label: a test file's "
                          "rows may leave the label empty or out" if name == "-1" else "")
            raise DataFileError(f"{where}: label {name!r} is not one of {list(self.labels)}{unlabelled}")
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
    where: tuple[str, int, bool] | None = None  # (file, first line, a line per word) or (dataset, row, False)


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
        parts = line.split() if files.has_text(line) else []  # a line of invisible marks alone is blank
        if parts and parts[0].upper() == "-DOCSTART-" and words:
            raise DataFileError(f"{path}:{lineno}: -DOCSTART- inside a sentence (from line {start}); a document "
                                "marker stands between sentences: put a blank line before it")
        if parts and re.match(r"#\s*((sent_id|text|doc_id|global\.columns)\s*[=:]|(newdoc|newpar)\b(?!\s+[BIESLUO]))",
                              line.strip()):  # CoNLL-U's: # sent_id = 1, # newdoc; not a tweet's #text O
            raise DataFileError(f"{path}:{lineno}: a comment line ({line.strip()[:40]!r}: CoNLL-U's), which a CoNLL "
                                "file here does not hold: remove the comment lines")
        if len(parts) == 2 and parts[0] == "#" and not re.fullmatch(r"O|[BIESLU]-.+", parts[1]):  # "# note"
            raise DataFileError(f"{path}:{lineno}: a comment line ({line.strip()[:40]!r}; the word '#' tagged "
                                f"{parts[1]!r}?), which a CoNLL file here does not hold: remove the comment lines")
        if parts and parts[0].upper() != "-DOCSTART-" and re.fullmatch(r"\W*DOCSTART\W*", parts[0], re.I):
            raise DataFileError(f"{path}:{lineno}: {parts[0]!r} reads as CoNLL's document marker written otherwise "
                                "(it would train as a word of a sentence): write -DOCSTART-, or remove the line")
        if not parts or parts[0].upper() == "-DOCSTART-":
            if words:
                sentences.append((start, words, tags if fields > 1 else None))
            words, tags, start = [], [], None
            continue
        if fields is None:
            fields, first, first_word = len(parts), lineno, parts[0]
        if len(parts) != fields:
            which = (f"; or line {first} lacks a column (an empty tag)" if len(parts) > fields else "")
            if comment := first if first_word.startswith("#") else lineno if parts[0].startswith("#") else None:
                which = (f"; line {comment} is a comment line (# ...), which a CoNLL file here does not hold "
                         "(CoNLL-U's sent_id and text lines): remove the comments")  # "# sent_id = 1": 4 fields
            raise DataFileError(f"{path}:{lineno}: {len(parts)} fields, the file's first word line ({first}) has "
                                f"{fields}; every line holds one word and its columns (a word cannot hold a space)"
                                f"{which}")
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
            raise missing_column(path, row_no, row, words_col, "column of words", "config.data.text_columns")
        words, tags = row[words_col], row.get(tags_col)
        for name, seq, ok in ((words_col, words, (str,)), (tags_col, tags, (str, int))):  # tags: names, or ids
            if seq is not None and (not isinstance(seq, list)
                                    or any(not isinstance(x, ok) or isinstance(x, bool) for x in seq)):
                raise DataFileError(f"{path}:{row_no}: column {name!r} holds {files.json_value(seq)}; expected a list "
                                    f"of {'words (strings)' if name == words_col else 'tags (names or ids)'}")
        tags = None if tags is None else [str(t) for t in tags]
        if (spaced := next((w for w in words if not w or w != w.strip() or len(w.split()) != 1), None)) is not None:
            raise DataFileError(f"{path}:{row_no}: column {words_col!r} holds the word {spaced!r}; a word is text "
                                "without spaces (a tag per word: predictions split words on whitespace)")
        if tags is not None and len(tags) != len(words):
            raise DataFileError(f"{path}:{row_no}: {len(words)} words but {len(tags)} tags in {tags_col!r}")
        if words:
            out.append((row_no, words, tags))
    if not out:
        raise DataFileError(f"{path}: no sentences")
    return out


def _lines(path: str):
    for _, line in files.text_lines(path):
        yield line.rstrip("\r\n")


def tag_names_of(path: str, columns: tuple[str, str] = ("tokens", "ner_tags")) -> tuple[str, ...]:
    """The tags of a CoNLL training file: "O" first, then the others sorted (B-LOC, B-PER, I-LOC, ...); two that
    differ only in case or form (``B-PER`` and ``b-per``) are refused (``check_one_form``)."""
    names, sentences = {}, read_conll(path, columns)
    for start, _, tags in sentences:
        for t in tags or ():
            if t in names:
                continue
            if re.fullmatch(r"[BIESLU]-", t, re.I):
                raise DataFileError(f"{path}:{start}: the sentence's tag {t!r} names no entity type (B-PER, I-LOC, "
                                    "...): seqeval would score it as an entity of an empty type")
            if _NUMBER.fullmatch(t):
                raise DataFileError(f"{path}:{start}: the sentence's tag {t!r} is a number, not a tag name (O, B-PER, "
                                    "...)" + ("; the letter O?" if t.strip("0") == "" else ""))
            names[t] = (f"{path}:{start}: the sentence's tags", start)
    check_one_form(names)
    if not names:
        raise DataFileError(f"{path}: no tags (a word and its tag per line)")
    if lower := next((t for t in names if re.match(r"[biesl]-.", t)), None):  # (twins of B-PER: named above)
        raise DataFileError(f"{names[lower][0]}: the tag {lower!r} has a lowercase prefix, which seqeval reads as "
                            f"no entity's; write {lower[0].upper() + lower[1:]!r}")
    if not any(t == "O" or re.match(r"[BIESLU]-.", t) for t in names):  # entity F1 reads IOB tags: none here
        shown = sorted(names, key=lambda t: names[t][1])[:4]
        raise DataFileError(f"{path}: no tag is O or an entity's (B-PER, I-LOC, ...): the tags read are "
                            f"{', '.join(map(repr, shown))}{', ...' if len(names) > 4 else ''}; a line is a word, "
                            "then its tag last (\"john B-PER\"): are the columns the other way round?")
    scheme = tag_scheme({t: where for t, (where, _) in names.items()})
    for start, _, tags in sentences:
        check_tag_sequence(tags or (), scheme, path, start)
    return tuple(sorted(names, key=lambda t: (t != "O", t)))


def check_tag_sequence(tags, scheme: str | None, path: str, lineno: int) -> None:
    """Refuse, by file and line, a sentence's entity that ``scheme`` (``tag_scheme``: "IOBES" or "BILOU") cannot
    read: seqeval's strict mode drops it from the entity scores without a word (a gold ``B-LOC I-LOC`` without its
    ``E-LOC``: a model that missed it lost no recall). IOB tags (``scheme`` None) read every sequence."""
    if not scheme:
        return
    end, single = ("E", "S") if scheme == "IOBES" else ("L", "U")
    how = (f"in {scheme} (the tags' scheme: an entity is B-, I-... and {end}-, or {single}- alone; a file's tags are "
           "of one scheme)")
    for i, tag in enumerate(tags):
        prefix, kind = (tag[0], tag[2:]) if tag != "O" else ("O", "")
        before = tags[i - 1] if i else "O"
        after = tags[i + 1] if i + 1 < len(tags) else "O"
        if prefix in ("I", end) and before not in (f"B-{kind}", f"I-{kind}"):
            problem = f"continues no B-{kind} or I-{kind} (the tag before it is {before!r})"
        elif prefix in ("B", "I") and after not in (f"I-{kind}", f"{end}-{kind}"):
            problem = f"is not followed by I-{kind} or {end}-{kind} (the next tag is {after!r})"
        else:
            continue
        raise DataFileError(f"{word_at(path, lineno, i)}: tag {tag!r} {problem} {how}, so entity F1 would not count "
                            "this entity")


def word_at(path: str, lineno: int, i: int) -> str:
    """Where the ``i``-th word of the sentence at ``lineno`` is: a CoNLL file's line, a dataset's row and word."""
    return f"{path}:{lineno}, word {i + 1}" if sources.is_dataset(path) else f"{path}:{lineno + i}"


def tag_scheme(names) -> str | None:
    """How entity F1 reads the tags ``names`` (a tag -> where it is first seen, for the message): ``None`` for B-/I-
    tags (IOB1 or IOB2: seqeval's default, conlleval's chunk rules), ``"IOBES"`` with S-/E- tags, ``"BILOU"`` with
    U-/L- tags (seqeval's strict mode of that scheme: by the default rules ``U-X U-X`` is one entity, not two). A tag
    that is neither O nor a prefix and a type (``MISC``: seqeval would read an entity of type ``ISC``; ``OTHER``: an O)
    and S-/E- tags beside U-/L- ones are refused, as is O alone (nothing to learn or score)."""
    if set(names) == {"O"}:
        raise DataFileError(f"{names['O']}: O, and no entity's tag (B-PER, I-LOC, ...) anywhere: a tagger would learn "
                            "nothing and entity F1 would have nothing to score")
    for tag, where in names.items():
        dashed = tag.translate(_PUNCTUATION_LOOKALIKES)
        if tag != "O" and dashed != tag and re.fullmatch(r"[BIESLU]-.+", dashed):
            raise DataFileError(f"{where}: the tag {tag!r} joins its prefix with {tag[1]!r} (U+{ord(tag[1]):04X}), "
                                f"not the hyphen '-' entity F1 reads: write it as {dashed!r}")
        if tag != "O" and not re.fullmatch(r"[BIESLU]-.+", tag):
            raise DataFileError(f"{where}: the tag {tag!r} is neither O nor an entity's tag (B-PER, I-LOC, ...: a "
                                f"prefix B, I, E, S, L or U, a '-' and the type), which entity F1 cannot read; write "
                                f"it as B-{tag} and I-{tag}, or O")
    ends = {kind: next((t for t in names if t[0] in prefixes and t != "O"), None)
            for kind, prefixes in (("IOBES", "ES"), ("BILOU", "LU"))}
    if ends["IOBES"] and ends["BILOU"]:
        raise DataFileError(f"{names[ends['BILOU']]}: the tag {ends['BILOU']!r} is BILOU's, beside {ends['IOBES']!r} "
                            "of IOBES: write the tags in one scheme")
    return next((kind for kind, tag in ends.items() if tag), None)


@dataclasses.dataclass(frozen=True)
class ConllTask:
    """Token classification (NER-style tagging) on CoNLL files; scored by entity precision/recall/F1."""

    name: str
    files: dict
    labels: tuple[str, ...]
    columns: tuple[str, str] = ("tokens", "ner_tags")  # a dataset split's words and tags (CoNLL files: unused)
    length_setting: str = "--max_length"  # what sets the length, for predict's warning (fine-tuning's own setting)
    positions: int | None = None  # predict's model's positions: no setting tags past them

    kind, head, loss = "token_classification", "SqueezeBertForTokenClassification", "token_cross_entropy"
    is_regression = False
    text_columns = ("words",)
    num_labels = property(lambda self: len(self.labels))
    eval_splits = property(lambda self: ("validation",) if "validation" in self.files else ())
    test_splits = property(lambda self: ("test",) if "test" in self.files else ())
    main_metric = "f1"

    def load(self, split: str) -> list[TokenExample]:
        path, out = self.files[split], []
        scheme = tag_scheme(dict.fromkeys(self.labels, self.name))
        for lineno, words, tags in read_conll(path, self.columns):
            if tags is None and split != "test":
                raise DataFileError(f"{path}:{lineno}: words without tags (a word and its tag per line)")
            for i, t in enumerate(tags or ()):
                if t not in self.labels:
                    raise DataFileError(f"{word_at(path, lineno, i)}: tag {t!r} is not one of {list(self.labels)}")
            check_tag_sequence(tags or (), scheme, path, lineno)
            out.append(TokenExample(len(out), tuple(words), tuple(tags) if tags else None,
                                    (path, lineno, not sources.is_dataset(path))))
        warn_texts(path, [(ex.where[1], (" ".join(ex.words),)) for ex in out])  # a word [SEP]: that token
        return out

    @staticmethod
    def word_pieces(examples, tokenizer) -> list[list[int]]:
        """Each word's pieces, in order over the sentences; a word the tokenizer reads as nothing (an invisible mark, a
        control character) is refused by its file and line: its tag would silently drop out of training, the scores
        and the predictions. Fine-tuning calls it on a test split before training."""
        pieces = tokenizer.word_pieces([w for ex in examples for w in ex.words])
        at = 0
        for ex in examples:
            if (empty := next((w for w in range(len(ex.words)) if not pieces[at + w]), None)) is not None:
                path, line, per_word = ex.where or (f"input {ex.idx + 1}", None, False)
                at_line = f"{path}:{line + empty if per_word else line}" if line else path
                raise DataFileError(f"{at_line}: word {empty + 1} of the sentence ({ex.words[empty]!r}) holds nothing "
                                    "the tokenizer reads (no letter, digit or sign), so its tag would be lost; remove "
                                    "it or give it its text")
            at += len(ex.words)
        return pieces

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        """``[CLS] pieces [SEP]`` per sentence, the words tokenized one by one; ``labels`` [N, max_length]: each
        word's tag id on its first piece, ``IGNORE`` on its other pieces, the specials and the padding (transformers'
        ``run_ner`` with ``label_all_tokens=False``); 0 on first pieces of an unlabelled sentence. Words past
        ``max_length`` are cut (a word may keep only its first pieces): ``cut_labels`` [N, most cut] holds the tag ids
        of a sentence's cut words (``IGNORE`` after them), so that its entities still count, as missed, in the scores;
        the number cut is logged. A word the tokenizer reads as nothing (an invisible mark, a control character) is
        refused, naming its sentence: its tag would silently drop out of training and the scores."""
        n = len(examples)
        out = {k: np.zeros((n, max_length), np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
        out["input_ids"][:] = tokenizer.pad_id
        labels = np.full((n, max_length), IGNORE, np.int32)
        pieces = self.word_pieces(examples, tokenizer)
        at, cut = 0, []
        for i, ex in enumerate(examples):
            row, lab, kept = [tokenizer.cls_id], [IGNORE], 0
            for w in range(len(ex.words)):
                p = pieces[at + w][:max_length - 1 - len(row)]
                if p:
                    row += p
                    lab += [self.labels.index(ex.tags[w]) if ex.tags else 0] + [IGNORE] * (len(p) - 1)
                    kept = w + 1
            cut.append([self.labels.index(t) for t in ex.tags[kept:]] if ex.tags else [0] * (len(ex.words) - kept))
            at += len(ex.words)
            row.append(tokenizer.sep_id)
            lab.append(IGNORE)
            out["input_ids"][i, :len(row)], out["attention_mask"][i, :len(row)] = row, 1
            labels[i, :len(lab)] = lab
        out["labels"] = labels
        out["cut_labels"] = np.full((n, max(map(len, cut), default=0)), IGNORE, np.int32)
        for i, c in enumerate(cut):
            out["cut_labels"][i, :len(c)] = c
        out["idx"] = np.array([ex.idx for ex in examples], np.int32)
        if (lost := sum(map(len, cut))) and self.files:  # a training's splits: scored, so their entities are missed
            where = next((ex.where for ex, c in zip(examples, cut) if c and ex.where), None)  # the file, not the task
            at = f"{where[0]}: " if where else f"{self.name}: "
            first = f" (the first at line {where[1]})" if where and where[1] else ""
            log.warning("%s%d words of %d sentences%s lie past max_seq_length=%d and are not seen by the model (their "
                        "entities count as missed); raise max_seq_length to see them", at, lost,
                        sum(1 for c in cut if c), first, max_length)
        elif lost:  # predict's sentences (no files): those words get no tag
            fix = (f"the model reads at most {self.positions} tokens (its positions): split longer sentences to tag "
                   "all their words" if self.positions is not None and max_length >= self.positions else
                   f"a larger {self.length_setting}, up to the model's positions, tags them")
            log.warning("%d words of %d sentences lie past %s=%d and get no tag (null); %s", lost,
                        sum(1 for c in cut if c), self.length_setting, max_length, fix)
        return out

    def tag_sequences(self, predictions, labels, cut_labels=None) -> tuple[list[list[str]], list[list[str]]]:
        """(predicted, gold) tag names per sentence, at the scored pieces (``labels`` != IGNORE); with
        ``cut_labels``, each sentence's words past the model's length follow, gold as tagged and predicted "O"."""
        p, y = np.asarray(predictions), np.asarray(labels)
        p = p.argmax(-1) if p.ndim == 3 else p
        keep = y != IGNORE
        pred = [[self.labels[t] for t in row[k]] for row, k in zip(p, keep)]
        gold = [[self.labels[t] for t in row[k]] for row, k in zip(y, keep)]
        for i, row in enumerate(np.asarray(cut_labels) if cut_labels is not None else ()):
            tail = [self.labels[t] for t in row[row != IGNORE]]
            gold[i] += tail
            pred[i] += ["O"] * len(tail)
        return pred, gold

    def score(self, logits, arrays) -> dict[str, float]:
        """The split's scores, counting the entities of words cut by ``max_seq_length`` (``encode``) as missed."""
        return self.metrics(logits, arrays["labels"], arrays.get("cut_labels"))

    def metrics(self, predictions, labels, cut_labels=None) -> dict[str, float]:
        """Entity precision, recall and F1 (seqeval's micro average, conlleval's chunking) and tag accuracy."""
        pred, gold = self.tag_sequences(predictions, labels, cut_labels)
        return entity_scores(gold, pred, tag_scheme(dict.fromkeys(self.labels, self.name))) | {
            "accuracy": float(np.mean([a == b for ps, gs in zip(pred, gold) for a, b in zip(ps, gs)] or [0.0]))}

    def card(self) -> None:
        """None: a tagger needs no ``task.json`` (``predict`` splits a text into words on whitespace)."""
        return None


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

    kind, head, loss = "multiple_choice", "SqueezeBertForMultipleChoice", "cross_entropy"
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
        check_columns("config.data", text=self.text_columns, choice=self.choice_columns, label=(self.label_column,))

    def load(self, split: str) -> list[ChoiceExample]:
        """The split's rows; rows holding two endings of one text (white space aside: no label can pick one of them)
        are kept and counted in a warning naming the first."""
        path, out, same, rows = self.files[split], [], [], []
        for lineno, row in read_rows(path):
            if missing := next((c for c in self.choice_columns if c not in row), None):
                raise missing_column(path, lineno, row, missing, "ending column", "config.data.choice_columns")
            if not out:
                check_unread_columns(path, lineno, row, (*self.text_columns, *self.choice_columns),
                                     "config.data.text_columns or config.data.choice_columns", refuse=False,
                                     label=self.label_column)
            texts, label = row_fields(path, lineno, row, (*self.text_columns, *self.choice_columns), self.label_column,
                                      self._label, split)
            lead, endings = texts[1] if len(self.text_columns) == 2 else None, texts[len(self.text_columns):]
            seen = {}
            for column, text in zip(self.choice_columns, endings):  # two choices the model cannot tell apart (case,
                words = " ".join(text.split())  # a compatibility form, invisible marks: an uncased vocabulary's ids)
                key = " ".join(files.drop_invisible(unicodedata.normalize("NFKC", text)).casefold().split())
                if (first := seen.setdefault(key, column)) != column:
                    same.append((lineno, first, column, words))
                    break
            out.append(ChoiceExample(len(out), texts[0], lead, tuple(endings), label))
            rows.append((lineno, texts))
        if not out:
            raise DataFileError(f"{path}: no rows (the {split} split is empty)")
        warn_texts(path, rows)
        if same:
            lineno, first, column, words = same[0]
            log.warning("%s: %d of %d rows hold two endings of the same text (in case, form or invisible marks "
                        "aside), which no label can pick apart (the first: line %d, %s and %s, %r)", path, len(same),
                        len(out), lineno, first, column, words[:40])
        labels = [ex.label for ex in out if ex.label is not None]
        if split == "train" and len(labels) >= 2 * len(self.choice_columns) and min(labels) >= 1:  # counted from 1?
            log.warning("%s: no row's answer is choice 0 (the first ending column, %s): labels count from 0 here; "
                        "a file counting from 1 trains every answer one ending late", path, self.choice_columns[0])
        return out

    def _label(self, raw, path: str, lineno: int) -> int:
        name = label_key(raw, f"{path}:{lineno}: column {self.label_column!r}")
        if name in self.choice_columns:
            at = self.choice_columns.index(name)
            if _INDEX.fullmatch(name) and int(name) < len(self.choice_columns) and int(name) != at:  # which one?
                raise DataFileError(f"{path}:{lineno}: column {self.label_column!r}: {name!r} names the ending column "
                                    f"{name!r} (choice {at}) and is the index of choice {int(name)}: rename the "
                                    "ending columns (e.g. ending0,ending1,...) so that a label means one choice")
            return at
        if _INDEX.fullmatch(name) and int(name) < len(self.choice_columns):  # ASCII: '１' and '२' are no index
            return int(name)
        hint = ("; -1 is how SWAG and datasets mark a row without its label: a test file's rows may leave it empty"
                if name == "-1" else "; labels count from 0 here (a file counting from 1?)"
                if _INDEX.fullmatch(name) and int(name) == len(self.choice_columns) else "")
        raise DataFileError(f"{path}:{lineno}: column {self.label_column!r}: {name!r} is not a choice: an index "
                            f"0..{len(self.choice_columns) - 1} or one of {list(self.choice_columns)}{hint}")

    def encode(self, examples, tokenizer, max_length: int) -> dict[str, np.ndarray]:
        """``[N, choices, max_length]`` inputs, each choice ``[CLS] context [SEP] (start ending) [SEP]``; ``labels``
        [N] (0 for an unlabelled row)."""
        n, c = len(examples), self.num_labels
        first = [ex.context for ex in examples for _ in range(c)]
        second = [f"{ex.lead} {e}" if ex.lead is not None else e for ex in examples for e in ex.endings]
        enc = tokenizer.encode_batch(first, second, max_length=max_length)
        setting = "max_seq_length (predict: --max_length)"
        warn_truncated(getattr(tokenizer, "last_truncated", 0), len(first), max_length, setting,
                       what=f"choices (a context and an ending each; {c} a row)")
        out = {k: np.asarray(enc[k], np.int32).reshape(n, c, max_length)
               for k in ("input_ids", "attention_mask", "token_type_ids")}
        ids = out["input_ids"]
        if n and c > 1 and (same := int(np.all(ids == ids[:, :1], axis=(1, 2)).sum())):
            # every choice of a row read the same after the cut (the endings cut away): its answer is a coin's
            log.warning("%d of %d rows read the same in every choice after the cut to %d tokens (the endings were cut "
                        "away): the model cannot tell their choices apart; a larger %s keeps them", same, n,
                        max_length, setting)
        out["labels"] = np.array([ex.label or 0 for ex in examples], np.int32)
        return out

    def metrics(self, predictions, labels) -> dict[str, float]:
        p = np.asarray(predictions)
        return {"accuracy": glue.accuracy(p.argmax(-1) if p.ndim == 2 else p, np.asarray(labels))}

    def score(self, logits, arrays) -> dict[str, float]:
        return self.metrics(logits, arrays["labels"])

    def card(self) -> dict:
        return {"kind": self.kind, "text_columns": list(self.text_columns),
                "choice_columns": list(self.choice_columns)}


def entity_scores(gold: list[list[str]], pred: list[list[str]], scheme: str | None = None) -> dict[str, float]:
    """Micro precision, recall and F1 over the entities of every sentence: seqeval's (0 where undefined); by
    conlleval's chunk rules, or with ``scheme`` (``tag_scheme``: "IOBES", "BILOU") in seqeval's strict mode of it."""
    try:
        from seqeval import metrics as seqeval
        from seqeval import scheme as schemes
    except ImportError as e:
        raise MissingExtraError("entity scores need seqeval: pip install -e \".[tagging]\" (see the README for the "
                                "one setting its source package needs)") from e
    how = {"mode": "strict", "scheme": getattr(schemes, scheme)} if scheme else {}
    return {name: float(score(gold, pred, zero_division=0, **how)) for name, score in (
        ("precision", seqeval.precision_score), ("recall", seqeval.recall_score), ("f1", seqeval.f1_score))}


def unread_numbered(row, columns) -> list[str]:
    """The columns of ``row`` numbered or lettered like one of ``columns`` (the same name but for its digits or its
    last letter: ending4 beside ending0, q3a beside q1a, sentence2 and sentence_b beside sentence) that are not among
    them: texts that would go unread."""
    stems = {column_stem(c) for c in columns}
    return [c for c in row if isinstance(c, str) and c not in columns and column_stem(c) != c.casefold()
            and column_stem(c) in stems]


def column_stem(name: str) -> str:
    """A column's name without its digits, or the letter that ends it after a separator, in any case (``ending`` of
    ``ending3``; ``sentence`` of ``Sentence_2``, of pandas' ``sentence.1``, a second column of the name, and of
    ``sentence_b``, BERT's ``text_a``/``text_b`` pairs)."""
    return re.sub(r"[\W_]+[a-z]$", "", re.sub(r"[\W_]*\d+", "", name), flags=re.IGNORECASE).casefold()


def check_unread_columns(path: str, lineno, row, columns, setting: str, refuse: bool, label: str = "") -> None:
    """Training's check of a split's first row (``unread_numbered``): refused when the columns read are the default
    (``sentence`` beside ``sentence2``: a pair read as one text), else a warning (chosen, perhaps deliberately). The
    ``label`` column is read too (``sentence_y`` may be the label)."""
    if all(c in row for c in columns) and (extra := [c for c in unread_numbered(row, columns) if c != label]):
        at = getattr(row, "header_at", None) or lineno
        same = ", ".join(c for c in columns if column_stem(c) == column_stem(extra[0]))
        what = f"{path}:{at}: column {extra[0]!r} is numbered like {same}, which is read, but is not read itself"
        if refuse:
            raise DataFileError(f"{what}: name every text column in {setting} ({','.join((*columns, *extra))} reads "
                                "a pair), or drop or rename the column")
        log.warning("%s; %s names the columns read", what, setting)


def _shown_name(name) -> str:
    """A column's name as a message shows it: quoted where it holds a tab or a line end (shown as a space, a tab
    between two names reads as two names)."""
    return repr(name) if isinstance(name, str) and any(ch.isspace() and ch != " " for ch in name) else str(name)


def missing_column(path: str, lineno, row: dict, column: str, what: str = "column", setting: str = "") -> DataFileError:
    """The refusal of a record without ``column``, for every reader of a user's rows: a CSV / TSV row's columns are
    its header's, so the header's line is named (the rows after it were blamed); a JSON Lines record or a dataset
    row is named by its own line or row. ``setting`` is what names another column."""
    header_at = getattr(row, "header_at", None)
    where = f"{path}:{header_at}: the header has" if header_at else f"{path}:{lineno}:"
    hint = separator_hint(path, row) if header_at else ""
    return DataFileError(f"{where} no {what} {column!r} (has {', '.join(map(_shown_name, row)) or 'no fields'})"
                         + (hint or (f"; name yours with {setting}" if setting else "")))


def separator_hint(path: str, header) -> str:
    """"; the header is tab-separated, ...": where a CSV's or TSV's whole header read as one name that holds another
    separator (a tab, a comma, a semicolon or a pipe), else ""."""
    names, ext = [c for c in header if isinstance(c, str)], os.path.splitext(path)[1].lower()
    own = {".csv": ",", ".tsv": "\t"}.get(ext)
    separated = next((name for sep, name in (("\t", "tab"), (",", "comma"), (";", "semicolon"), ("|", "pipe"))
                      if own and sep != own and len(names) == 1 and sep in names[0]), None)
    if not separated:
        return ""
    fix = {"tab": "name the file .tsv", "comma": "name the file .csv"}.get(separated, "save it comma-separated")
    return (f"; the header is {separated}-separated, but a {ext} file is read "
            f"{'comma' if ext == '.csv' else 'tab'}-separated: {fix}")


def row_fields(path: str, lineno: int, row: dict, columns, label_column: str, parse_label, split: str):
    """(the texts of ``columns``, the parsed label or None) of one row; a test row may leave the label out (no column,
    an empty cell, JSON null, or a missing-value marker: pandas writes "nan")."""
    texts = []
    for col in columns:
        if col not in row:
            raise missing_column(path, lineno, row, col, setting="config.data.text_columns")
        texts.append(text_value(row[col], path, lineno, col))
    raw = row.get(label_column)
    unlabelled = raw is None or isinstance(raw, str) and (not raw.strip() or is_missing_marker(raw, texts=True))
    if label_column in row and not (split == "test" and unlabelled):  # a test row's "nan" (pandas) is no label too
        return texts, parse_label(raw, path, lineno)
    if split != "test":
        raise missing_column(path, lineno, row, label_column, "label column", "config.data.label_column")
    return texts, None


def text_value(value, path: str, lineno: int, col: str) -> str:
    """A text cell: a string with something besides white space in it, and no NUL (``files.text_problem``)."""
    if not isinstance(value, str):
        raise DataFileError(f"{path}:{lineno}: column {col!r} holds {files.json_value(value)}, not "
                            f"text")
    if not files.has_text(value):
        held = " (only white space or invisible marks)" if value else ""
        raise DataFileError(f"{path}:{lineno}: column {col!r} is empty{held}; every row needs its text (fill it, or "
                            f"remove the row)")
    if problem := files.text_problem(value):
        raise DataFileError(f"{path}:{lineno}: column {col!r} {problem}")
    return value


_FLOAT32_MAX = float(np.finfo(np.float32).max)
# a regression score above it: the squared errors of a batch (up to 2**16 rows) sum past float32's range
_SQUARE_MAX = math.sqrt(_FLOAT32_MAX / 2 ** 16)
# ASCII digits only: a full-width １ or an Arabic-Indic ١ is no number a data file means (files.number_value)
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def label_key(raw, where: str) -> str:
    """One class label as the name it is known by, read as a value, so that a file and its JSON Lines twin, or a
    hand-typed list, give the same classes: a number by its value (``1``, ``1.0``, ``"1.0"``, ``"+1"`` and ``1e0`` are
    all ``"1"``; ``0.50`` is ``"0.5"``; a whole number exactly, however many digits), a boolean as ``"true"`` /
    ``"false"`` (JSON ``true`` and a CSV's ``True`` alike), any other text stripped and in Unicode's composed form
    (NFC: ``café`` typed with a combining accent is the same class). Refused, naming ``where``: an empty cell, JSON
    null, NaN or infinity (in any spelling or format), and a list or object (one label per row: a row of several
    labels is ``data.kind=multilabel``), a label of nothing visible, a lone surrogate and a control character."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        value = decimal.Decimal(repr(raw)) if math.isfinite(raw) else None
    elif isinstance(raw, str):
        text = unicodedata.normalize("NFC", raw.strip())
        if not files.has_text(text):
            held = " (only white space or invisible marks)" if text else ""
            raise DataFileError(f"{where}: the label is empty{held}; every training and validation row needs its "
                                "label")
        if any("\ud800" <= ch <= "\udfff" for ch in text):  # JSON's "\udc80": no character, not valid Unicode
            raise DataFileError(f"{where}: the label {raw!r} holds a lone surrogate, which is not a character; "
                                "write the label in valid Unicode")
        if control := next((ch for ch in text if unicodedata.category(ch) == "Cc"), None):  # "pos\x07": a class
            raise DataFileError(f"{where}: the label {raw!r} holds the control character U+{ord(control):04X}, "
                                "which no label name holds; remove it")  # of its own beside "pos", shown alike
        if text.lower() in ("true", "false"):
            return text.lower()
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):  # JSON's NaN is refused: so is a CSV's
            nan = (" (NaN: how pandas writes a missing value; every row needs its label)" if "nan" in text.lower()
                   else "")
            raise DataFileError(f"{where}: the label {raw!r} is not a finite number{nan}")
        if text.startswith('"') != text.endswith('"'):  # pos" : CSV quoting's leftover (a TSV's last line)
            end = "start" if text.startswith('"') else "end"
            raise DataFileError(f"{where}: the label {raw!r} holds a stray quote at its {end} (a quoting "
                                "leftover?); write the label without it")
        if _NUMBER.fullmatch(minus := text.replace("\u2212", "-")):  # U+2212, the minus sign: -1 typeset
            text = minus
        if not _NUMBER.fullmatch(text):
            if "_" in text and _NUMBER.fullmatch(text.replace("_", "")):  # Python's 1_000: a number, or a name?
                raise DataFileError(f"{where}: the label {raw!r} is a number written with '_'; write it without "
                                    f"({text.replace('_', '')}), as the other rows write numbers")
            return text
        if (number := float(text)) == 0 and not files.reads_as_zero(text):  # 0e99999999999999999999 is 0
            return "0"
        # 1e-400 no float holds: a value of its own, by its decimal (1e400: not a finite number)
        try:
            value = decimal.Decimal(text) if math.isfinite(number) else None
            if value is not None and not -999_999 < value.adjusted() < 999_999:  # past Decimal's context
                raise decimal.InvalidOperation
        except decimal.InvalidOperation:  # its traceback named no line
            raise DataFileError(f"{where}: the label {raw!r} is a number no label's value holds (its exponent is "
                                "past a million); write it as the name it is") from None
    elif raw is None:
        raise DataFileError(f"{where}: the label is null (a dataset's class label -1: unlabelled); every training "
                            "and validation row needs its label")
    else:
        raise DataFileError(f"{where}: {files.json_value(raw)} is not one label (a row of "
                            f"several labels is data.kind=multilabel)")
    if value is None:
        raise DataFileError(f"{where}: the label {raw!r} is not a finite number")
    if value == value.to_integral_value():
        return str(int(value))
    shortest = repr(float(value))  # 0.5, 0.1: the float's shortest form, unless no float holds the value (1e-400)
    return shortest if decimal.Decimal(shortest) == value else f"{value.normalize():e}"


# Cyrillic and Greek letters drawn like Latin ones (Unicode's confusables), and the digits 0 and 1 beside the letters O
# and l: a label typed with one of them is the Latin label's twin, not a class of its own. Capitals are folded
# before case is (Greek Α is A, though its lowercase α is no a: α-helix and a-helix are two names), the small
# letters after.
_CAPITAL_LOOKALIKES = str.maketrans("АВЕКМНОРСТУХІЈЅΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEKMHOPCTYXIJSABEZHIKMNOPTYX")
_LOOKALIKES = str.maketrans("асеіјорѕхуԁһӏԛԝορ01", "aceijopsxydhlqwopol")
# dashes, apostrophes and quotes as word processors and spreadsheets autocorrect them: non-toxic and non‐toxic,
# don't and don’t (NFKC folds none of them)
_PUNCTUATION_LOOKALIKES = {**dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63"), "-"),
                           **dict.fromkeys(map(ord, "\u2018\u2019\u201b\u2032\u02bc"), "'"),
                           **dict.fromkeys(map(ord, "\u201c\u201d\u201f\u2033"), '"')}


def check_one_form(names, shown: dict[str, str] | None = None) -> None:
    """Class or tag names (``name -> (where, line)``: the file's place and the line number where each is first
    seen) that differ only in case, in a Unicode compatibility form, in invisible characters, in the white space
    between their words or in letters or punctuation drawn alike, the digits 0 and 1 for the letters O and l too,
    dashes, apostrophes and quotes as autocorrect writes them (``non‐toxic``, ``don’t``) too (``Pos`` and
    ``pos``; ``B-PER`` and ``b-per``; a full-width ``ｐｏｓ``; ``pos`` with a zero-width space, a byte-order mark, a
    soft hyphen or a Hangul filler in it; ``pos`` with a Cyrillic ``р``; ``NEG`` with a Greek ``Ε``; ``labe1``) are
    refused: one class written two ways would train as two. So are numbers beside names (``0``, ``1`` and ``pos``;
    ``1000`` and ``1,000``; JSON ``true`` beside ``0``). Naming them in config.data.labels keeps them apart.
    ``shown``: a name's first spelling in the file, where it differs (``+1`` for ``1``), quoted in the refusals."""
    shown = shown or {}
    # a number written with a dash autocorrect makes (U+2010 -1) is one: told apart from -1 below, by its dash
    numbers = [n for n in names if _NUMBER.fullmatch(n.translate(_PUNCTUATION_LOOKALIKES))]
    others = [n for n in names if n not in numbers]
    if numbers and others:  # is true the class 1? "1,000" the class 1000? "pos" beside 0 and 1 a third class?
        first = {kind: min(group, key=lambda x: names[x][1]) for kind, group in (("numbers", numbers),
                                                                                   ("names", others))}
        kind, odd = max(first.items(), key=lambda kv: names[kv[1]][1])  # the later form is the odd one
        usual = first["names" if kind == "numbers" else "numbers"]
        raise DataFileError(f"{names[odd][0]}: the label {shown.get(odd, odd)!r} in a column of "
                            f"{'names' if kind == 'numbers' else 'numbers'} ({shown.get(usual, usual)!r} at line "
                            f"{names[usual][1]}): "
                            "write each class one way, all numbers or all names, or name every class in "
                            "config.data.labels")
    folded: dict[str, tuple[str, int]] = {}
    for name, (where, line) in sorted(names.items(), key=lambda kv: kv[1][1]):
        # "very  good" is "very good": white space inside a name, in any run or kind
        key = " ".join(files.drop_invisible(unicodedata.normalize("NFKC", name)).split())
        key = key.translate(_CAPITAL_LOOKALIKES).casefold().translate(_LOOKALIKES).translate(_PUNCTUATION_LOOKALIKES)
        first, at = folded.setdefault(key, (name, line))
        if first != name:
            raise DataFileError(f"{where}: the label {shown.get(name, name)!r} differs from "
                                f"{shown.get(first, first)!r} (line {at}) only in case, "
                                "form, invisible characters or letters or punctuation drawn alike: write each class "
                                "one way, or name both in config.data.labels to keep them apart")


_INDEX = re.compile(r"[0-9]+")  # a choice's index, in ASCII digits (str.isdecimal takes '１' and '२')
_BITS = {"0": 0, "0.0": 0, "false": 0, "1": 1, "1.0": 1, "true": 1}  # an indicator vector's entries


def label_keys(raw, where: str, spellings: bool = False) -> tuple:
    """A multilabel row's labels, each read by ``label_key``: a JSON list, a cell holding a JSON list
    (``["comedy", "drama"]``), or a cell of names split on ``LABEL_SEPARATOR`` (``comedy|drama``); an empty cell or
    an empty list is a row with no label on. A label named twice in a row (``comedy|comedy``; ``[1, 1.0]``: one
    value) and a label holding a comma (``comedy,drama``: the separator mistaken) are refused. ``spellings``: each
    label as (its key, as the row writes it), as ``label_names_of`` names number codes (``007|010``)."""
    if isinstance(raw, str) and raw.strip().startswith("["):
        try:
            raw = files.json_cell(raw)
        except json.JSONDecodeError as e:
            raise DataFileError(f"{where}: {raw.strip()[:60]!r} starts like a JSON list but is not one ({e})") from None
        except ValueError as e:  # a number no float holds (1e-400 read as 0: a label "0")
            raise DataFileError(f"{where}: {e}") from None
    if isinstance(raw, str):
        if not raw.strip():
            return ()
        items = raw.split(LABEL_SEPARATOR)
    elif isinstance(raw, list):
        items = raw
    else:
        raise DataFileError(f"{where}: {files.json_value(raw)} is not a list of labels (a JSON "
                            f"list, or names separated by {LABEL_SEPARATOR!r})")
    if bad := [x for x in items if isinstance(x, (list, dict)) or x is None
               or (isinstance(x, str) and _looks_like_list(x.strip()))]:  # ["[\"a\"]", "b"]: a list in a list
        raise DataFileError(f"{where}: {files.json_value(bad[0])} in the row's labels is not "
                            f"a label")
    if isinstance(raw, str) and re.fullmatch(r"\s*(\(.*[|,;].*\)|\{.*[|,;].*\}|<.*[|,;].*>)\s*", raw, re.S):  # (a|b)
        raise DataFileError(f"{where}: {raw.strip()[:60]!r} is a list in another tool's syntax (a tuple, a database "
                            f"array); a row's labels are a JSON list or names separated by {LABEL_SEPARATOR!r}")
    bits = {_BITS.get(str(x).strip().casefold()) for x in items}
    if len(items) > 2 and bits == {0, 1}:  # [1, 0, 0]: both values, in no other form ([0, 1]: label_names_of)
        raise DataFileError(f"{where}: {files.json_value(raw) if not isinstance(raw, str) else repr(raw.strip())} "
                            "reads as a 0/1 vector, one entry per class (each entry would be a label of its own, every "
                            "row holding both); a row's labels are the names of those on: comedy|drama or "
                            "[\"comedy\", \"drama\"]")
    if len(items) > 1 and any(isinstance(x, str) and not files.has_text(x) for x in items):
        shown = repr(raw.strip()) if isinstance(raw, str) else files.json_value(raw)
        raise DataFileError(f"{where}: {shown} holds an empty label beside the others (a separator {LABEL_SEPARATOR!r} "
                            "or a list item with no name); a row's labels are names, as comedy|drama or "
                            "[\"comedy\", \"drama\"]")
    named = [label_key(x, where) for x in items]
    keys = tuple(dict.fromkeys(named))
    if len(keys) < len(named):  # a copy slip, or two spellings of one value: which was meant is not for us to guess
        twice = next(k for k in keys if named.count(k) > 1)
        shown = repr(raw.strip()) if isinstance(raw, str) else files.json_value(raw)
        raise DataFileError(f"{where}: {shown} names the label {twice!r} {named.count(twice)} times; name each of a "
                            "row's labels once")
    # "comedy,drama", "comedy;drama": two labels with the separator mistaken, or a class of its own? Refused either way
    if mistaken := next(((k, c) for k in keys for c in MISTAKEN_SEPARATORS if c in k), None):
        (name, char), word = mistaken, MISTAKEN_SEPARATORS[mistaken[1]]
        raise DataFileError(f"{where}: the label {name!r} holds a {word}; a row's labels are separated by "
                            f"{LABEL_SEPARATOR!r} ({name.replace(char, LABEL_SEPARATOR)}), and no multilabel label "
                            f"name holds a {word}")
    if sep := next((k for k in keys if LABEL_SEPARATOR in k), None):  # ["x|y"]: a CSV's x|y is two labels
        raise DataFileError(f"{where}: the label {sep!r} holds {LABEL_SEPARATOR!r}, which separates a row's labels "
                            f"(a CSV cell {sep} is {len(sep.split(LABEL_SEPARATOR))} labels): give them as list items")
    return tuple(zip(keys, (str(x).strip() for x in items))) if spellings else keys  # (key, as written)


def declared_labels(text: str, setting: str) -> tuple[str, ...]:
    """Label names a setting gives in id order (``"neg,pos"``), each read by ``label_key``; an empty name or a name
    given twice (``pos,neg,pos``; ``1,1.0``) is refused, naming the setting; so is a JSON or Python list
    (``["0","1"]``: its brackets and quotes would be read as parts of the names)."""
    stripped = text.strip()
    bracketed = len(stripped) > 1 and stripped[0] in "[(" and stripped[-1] in "])"
    quoted = [x.strip() for x in stripped.strip("[]()").split(",")]
    if bracketed or any(len(x) > 1 and x[0] in "\"'" and x[-1] == x[0] for x in quoted):
        plain = ",".join(x.strip("\"'") for x in quoted)
        raise InputError(f"{setting}={text!r} is written as a list; give the names separated by commas, without "
                         f"brackets or quotes ({plain})")
    if any(not files.has_text(x) for x in text.split(",")):
        raise InputError(f"{setting}={text!r} has an empty name; give each class a name, in id order, separated by "
                         "commas")
    names = tuple(label_key(x, f"{setting}={text!r}") for x in text.split(","))
    if code := next((x.strip() for x in text.split(",") if looks_like_code(x.strip())), None):
        log.warning("%s=%r: %r is read as the number %s, and the model names its class so: class codes that only "
                    "look like numbers are names: write them so (c%s)", setting, text, code,
                    label_key(code, setting), code.lstrip("+-"))
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise InputError(f"{setting}={text!r} names the label {twice[0]!r} twice; each class is named once, in id order")
    seen: dict[str, str] = {}  # case tells two declared classes apart (Pos, pos); what draws nothing does not
    for n in names:
        if (first := seen.setdefault(" ".join(files.drop_invisible(unicodedata.normalize("NFKC", n)).split()), n)) != n:
            raise InputError(f"{setting}={text!r} names {first!r} and {n!r}, which differ only in invisible characters "
                             "or white space: one class named twice; each class is named once, in id order")
    return names


def sorted_labels(names) -> tuple[str, ...]:
    """Label names in their default id order: by value when every one is a number, else as text."""
    names = set(names)
    numeric = all(_NUMBER.fullmatch(n) for n in names)
    return tuple(sorted(names, key=decimal.Decimal if numeric else str))


def check_columns(path_or_setting: str, **groups) -> None:
    """A task's columns, named by the config: every one named once, and none in two roles (a label column that is
    also a text column gives the model its own answer). ``groups``: role -> column names."""
    seen: dict[str, str] = {}
    for role, cols in groups.items():
        for col in map(Row._key, cols):  # as a row looks it up: one name in either Unicode form
            if col in seen:
                both = f"both a {seen[col]} and a {role} column" if seen[col] != role else f"a {role} column twice"
                raise InputError(f"{path_or_setting}: column {col!r} is named as {both}; each column has one role")
            seen[col] = role


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


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except RecursionError:  # "{" nested thousands deep: JSON all the same (its reader names the depth)
        return True
    except ValueError:
        return False


def _looks_like_list(text: str) -> bool:
    """A cell holding a JSON list (``["comedy", "drama"]``)."""
    try:
        return text.startswith("[") and isinstance(json.loads(text), list)
    except RecursionError:  # nested thousands deep: no list of labels, but one all the same
        return True
    except ValueError:
        return False


def looks_like_code(spelling: str) -> bool:
    """A number written as a code is: zero-padded (``007``) or with a trailing zero after its decimals (``1.10``, a
    version); read as a value it loses that spelling (``7``, ``1.1``). ``1.0`` is a float column's whole number."""
    return bool(re.match(r"[+-]?0\d", spelling) or re.fullmatch(r"[+-]?\d*\.\d*[1-9]0+", spelling))


def label_names_of(path: str, column: str, multilabel: bool = False) -> tuple[str, ...]:
    """The distinct labels of a training file (``label_key``), in ``sorted_labels`` order. Two that differ only in
    case (``Pos`` and ``pos``) are refused: one class written two ways would train as two; ``config.data.labels``
    naming both keeps them apart."""
    names, spellings, shown, lines = {}, {}, {}, 0
    pairs, vectors = [], True  # multilabel rows of [0, 1] or [1, 0] alone: a 0/1 vector of two classes each?
    for lineno, row in read_rows(path):
        lines += 1
        if column not in row:
            raise missing_column(path, lineno, row, column, "label column", "config.data.label_column")
        where = f"{path}:{lineno}: column {column!r}"
        read = (label_keys(row[column], where, spellings=True) if multilabel
                else [(label_key(row[column], where), str(row[column]).strip())])
        if multilabel and read:
            bits = {_BITS.get(w.casefold()) for _, w in read}
            vectors = vectors and bits <= {0, 1} and len(read) == 2
            pairs.append((lineno, row[column]))
        for name, written in read:
            if not multilabel and (LABEL_SEPARATOR in name or _looks_like_list(name)):  # a multilabel row?
                raise DataFileError(f"{where}: the label {name[:60]!r} reads as several labels (data.kind=multilabel "
                                    f"takes a row's labels as a JSON list or names separated by {LABEL_SEPARATOR!r}); "
                                    "one class of that name is kept by naming every class in config.data.labels")
            if name.casefold() in {c.casefold() for c in row if isinstance(c, str)}:  # "sentiment": a header again?
                raise DataFileError(f"{where}: the label {name!r} is a column's name: the header line again (files "
                                    "joined, their columns named otherwise)? Remove it")
            names.setdefault(name, (where, lineno))
            if not multilabel and isinstance(row[column], str):  # as the file writes it: +1, not 1
                shown.setdefault(name, row[column].strip())
            if _NUMBER.fullmatch(name):  # the number as the file writes it (each of a multilabel row's)
                spellings.setdefault(name, {}).setdefault(written, lineno)
    if multilabel and pairs and vectors:  # every row both labels 0 and 1: one entry per class, read as names
        lineno, cell = pairs[0]
        raise DataFileError(f"{path}:{lineno}: column {column!r}: every row's labels are 0 and 1 "
                            f"({files.json_value(cell) if not isinstance(cell, str) else repr(cell.strip())}): a 0/1 "
                            "vector, one entry per class, read as names (every row would hold both); a row's labels "
                            "are the names of those on: comedy|drama or [\"comedy\", \"drama\"]")
    check_one_form(names, shown)
    if marker := next((n for n in names if is_missing_marker(shown.get(n, n))), None):
        raise DataFileError(f"{names[marker][0]}: the label {shown.get(marker, marker)!r} is how spreadsheets and "
                            "pandas write a missing value, not a class: give the row its label, or remove it; a class "
                            "of that name is kept by naming every class in config.data.labels")
    if not multilabel and len(names) > 2 and all(_NUMBER.fullmatch(n) for n in names) and (
            len(names) > lines / 2 or any("." in n or "e" in n for n in names)):  # 0.2, 1.7, 3.4: scores?
        log.warning("%s: the %d classes of column %r are numbers (%s): each becomes a class of its own; scores to "
                    "predict as a number are config.data.kind=regression", path, len(names), column,
                    ", ".join(sorted_labels(names)[:5]) + (", ..." if len(names) > 5 else ""))
    if "-1" in names and len(names) > 1 and all(_INDEX.fullmatch(n) for n in names if n != "-1"):  # 0, 1 and -1
        log.warning("%s: the label -1 (line %d) beside class ids %s: -1 is how datasets and GLUE's TFDS splits mark "
                    "a row without its label, trained here as a class of its own; remove those rows, or name every "
                    "class in config.data.labels", path, names["-1"][1], ", ".join(sorted_labels(set(names) - {"-1"})))
    for name, forms in spellings.items():
        if len(forms) > 1:  # 007 and 7, 1.1 and 1.10: one value, so one class; codes would be two
            (a, at), (b, bt) = sorted(forms.items(), key=lambda kv: kv[1])[:2]
            log.warning("%s: the labels %r (line %d) and %r (line %d) are one class, %s: labels are read as values; "
                        "class codes that only look like numbers (007, 1.10) are names: write them so (c007)",
                        path, a, at, b, bt, name)
    if padded := min(((sp, at, name) for name, forms in spellings.items() for sp, at in forms.items()
                      if looks_like_code(sp)), key=lambda x: x[1], default=None):  # 001, 010, 1.10: codes?
        log.warning("%s: labels such as %r (line %d) are read as numbers (%s), and the model names its classes so: "
                    "class codes that only look like numbers are names: write them so (c%s)", path, *padded,
                    padded[0].lstrip("+-"))
    if not names:
        raise DataFileError(f"{path}: no row has a label (every row's labels are empty)" if multilabel and lines
                            else f"{path}: no rows (the train split is empty)")
    return sorted_labels(names)


# --------------------------------------------------------------------------------------------------
# From a config
# --------------------------------------------------------------------------------------------------

def _same_file(a: str, b: str) -> bool:
    """Two names of one local file (a dataset split, ``hf:``/``tfds:``, compares by name)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


def resolve(config) -> Task:
    """The ``Task`` a fine-tuning config describes: ``task`` a GLUE name, or ``files`` (the ``data`` block)."""
    if config.task != "files":
        return GlueTask(glue.get_task(config.task), config.data_dir or None, config.skip_malformed)
    d = config.data
    for name in ("train_file", "validation_file", "test_file", "text_columns", "label_column", "kind", "labels",
                 "choice_columns"):  # a list, a Path or bytes from a notebook: one line, not an AttributeError
        if name in d and not isinstance(d[name], str):
            raise InputError(f"config.data.{name} is {type(d[name]).__name__} {d[name]!r}; give it as a str "
                             + ("(names separated by commas)" if name.endswith(("columns", "labels")) else "(a path)"
                                if name.endswith("file") else ""))
    files = {s: d[f"{s}_file"] for s in ("train", "validation", "test") if d[f"{s}_file"]}
    if "train" not in files:
        raise InputError("config.task=files needs config.data.train_file (CSV, TSV or JSON Lines; CoNLL for "
                         "token_classification)")
    if d.kind not in KINDS:
        raise InputError(f"config.data.kind={d.kind!r}: one of {', '.join(KINDS)}")
    if d.labels and d.kind in ("regression", "question_answering", "multiple_choice"):
        raise InputError(f"config.data.labels={d.labels!r} names classes, which data.kind={d.kind} has none of (its "
                         "targets are " + {"regression": "scores", "question_answering": "answer spans",
                                           "multiple_choice": "the right ending's index"}[d.kind]
                         + "); leave it empty")
    name = d.name or re.sub(r"[^\w.-]+", "_", os.path.splitext(os.path.basename(files["train"].rstrip("/")))[0])
    for split, what in (("validation", "each epoch is scored, and the best one picked, on the rows it trained on"),
                        ("test", "the best model's predictions are of rows it trained on")):
        if split in files and _same_file(files["train"], files[split]):
            log.warning("config.data.%s_file is the training file (%s): %s", split, files["train"], what)
    if d.kind != "question_answering":  # (QA's settings are checked first: they need no file)
        _check_data_files(files, d.kind)
    if d.kind == "token_classification":
        columns = (d.text_columns if d.text_columns != "sentence" else "tokens",
                   d.label_column if d.label_column != "label" else "ner_tags")
        check_columns("config.data", words=columns[:1], tags=columns[1:])
        if d.labels:
            tags = declared_labels(d.labels, "config.data.labels")
            tag_scheme(dict.fromkeys(tags, "config.data.labels"))
        else:
            tags = tag_names_of(files["train"], columns)
        return ConllTask(name, files, tags, columns)
    columns = tuple(c.strip() for c in d.text_columns.split(","))
    if d.kind == "question_answering":
        settings = {k: d[k] for k in ("max_query_length", "doc_stride", "max_answer_length", "n_best",
                                      "null_threshold")}
        squad.SquadTask(name, files, False, **settings).check(config.max_seq_length)
        _check_data_files(files, d.kind)
        version_2 = any(squad.has_unanswerable(files[s]) for s in ("train", "validation") if s in files)
        return squad.SquadTask(name, files, version_2, **settings)
    if d.kind == "multiple_choice":
        return ChoiceTask(name, files, columns, tuple(c.strip() for c in d.choice_columns.split(",")), d.label_column)
    labels = None
    if d.kind in ("classification", "multilabel"):
        labels = (declared_labels(d.labels, "config.data.labels") if d.labels
                  else label_names_of(files["train"], d.label_column, d.kind == "multilabel"))
        if len(labels) < 2:
            where = (f"config.data.labels={d.labels!r} names" if d.labels else
                     f"{files['train']}: column {d.label_column!r} has")
            raise InputError(f"{where} one label ({labels[0]!r}); a classifier needs two or more")
    return FileTask(name, d.kind, files, columns, d.label_column, labels)


def _check_data_files(paths: dict[str, str], kind: str) -> None:
    """Every data file the config names (train, validation and test) exists and is of a kind the task reads, before
    anything is read or trained (a dataset split ``hf:``/``tfds:`` is checked when it is read)."""
    for split, path in paths.items():
        if not sources.is_dataset(path):
            _check_data_file(path, f"config.data.{split}_file", kind)


def _check_data_file(path: str, setting: str, kind: str) -> None:
    if not os.path.exists(path):
        raise InputError(f"{setting}={path!r}: {files.no_such_file(path)}")
    if not os.path.isfile(path):  # a directory, or /dev/null
        raise InputError(f"{setting}={path!r} is {files.special_kind(path)}, not a data file")
    ext = os.path.splitext(path)[1].lower()
    if kind == "token_classification" and ext in FORMATS and ext != ".tsv":
        raise InputError(f"{setting}={path!r}: token_classification reads CoNLL files (a word and its tag per line, "
                         f"a blank line between sentences), not {ext} rows; a dataset split of word and tag columns is "
                         "given as hf:NAME:SPLIT or tfds:NAME:SPLIT")
    if kind in ("classification", "regression", "multilabel", "multiple_choice"):
        try:
            file_format(path)
        except DataFileError as e:
            raise InputError(f"{setting}: {e}") from None


def task_by_name(task: str | Task) -> Task:
    """A ``Task`` given as itself or as a GLUE name."""
    return GlueTask(glue.get_task(task)) if isinstance(task, str) else task
