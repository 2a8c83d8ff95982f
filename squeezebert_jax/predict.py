"""Predictions of a fine-tuned model for new text: a Python call on a list of inputs, or a file in, JSON lines out.

    predictor = Predictor("runs/reviews/model")
    predictor(["a gripping, funny film", "two hours I will not get back"])
    # [{"label": "positive", "probabilities": {"negative": 0.03, "positive": 0.97}}, ...]
    predictor("a gripping, funny film")  # one input: {"label": "positive", ...}

Inputs: strings, or (text, text) pairs for a pair classifier; a tagger (token classifier) gives
``{"words": [...], "tags": [...]}`` for each text, its words split on whitespace; an extractive QA model takes
(question, context) pairs and gives ``{"answer", "start", "end", "score", "probability"}`` ("" for "no answer" from a
SQuAD v2.0 model); a multiple-choice model takes (context[, start], ending, ending, ...) rows and gives ``{"choice",
"ending", "probabilities"}``; a multilabel classifier gives ``{"labels": [...], "probabilities"}`` (a sigmoid per
label). The number of texts in an input is the model's (``Predictor.arity``): its ``task.json`` text columns (a GLUE
model's are its task's), one for a tagger, two for QA; a classifier without ``task.json`` (a converted checkpoint)
takes a text or a pair. Files: ``.txt`` (a text per line; a pair as two tab-separated texts), ``.csv`` / ``.tsv`` /
``.jsonl`` (the ``text_columns``; default the file's only column, or ``text``; QA: ``question,context``; multiple
choice: the run's text and choice columns). A regression
model (one output) gives ``{"score": x}``. Batches are cut to their length bucket (``batching``) and run data parallel
over every device.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import UserString
from collections.abc import Sequence

import numpy as np

from squeezebert_jax import squad, tasks
from squeezebert_jax.errors import DataFileError, InputError
from squeezebert_jax.files import (atomic_write, check_input_file, claim_output_file, has_text, json_text,
                                   path_argument, read_json, text_problem, warn_texts)
from squeezebert_jax.inference import check_finite, model_tokenizer, NoClassifierError, predict_logits
from squeezebert_jax.pretrained import load_pretrained, model_kind, read_model_config
from squeezebert_jax.tokenizer import checkpoint_file, warn_truncated

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Arity:
    """How many texts one input holds: ``low`` to ``high`` (None: no limit), said as ``what`` in messages (``why``:
    where the number comes from); every input of one call or file holds the same number."""

    low: int
    high: int | None
    what: str
    why: str = ""

    def __str__(self) -> str:
        return f"{self.what} per input" + (f" ({self.why})" if self.why else "")

    def __contains__(self, n: int) -> bool:
        return self.low <= n and (self.high is None or n <= self.high)


TEXT_OR_PAIR = Arity(1, 2, "a text, or a pair of texts", "a classifier without task.json")


BATCH_SIZE = 64  # Predictor's default batch


class Predictor:
    """A fine-tuned MODEL_DIR (sequence or token classifier, extractive QA, multiple choice) and its tokenizer, ready
    to label text."""

    def __init__(self, model_dir: str, max_length: int | None = None, batch_size: int = BATCH_SIZE,
                 length_setting: str = "max_length"):
        """``max_length``: tokens per input, at most the model's ``max_position_embeddings``; None: 128, or the
        model's maximum where that is less. ``length_setting``: what the warnings about cut inputs name as setting it
        (fine-tuning's predictions of its test file: ``config.max_seq_length``)."""
        self.length_setting = length_setting
        tasks.input_length(max_length, name=length_setting)  # its form, before the model loads
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InputError(f"batch_size={batch_size!r}: an integer >= 1")
        model_dir = path_argument("model_dir", model_dir)
        self.model, self.model_dir = load_pretrained(model_dir), model_dir
        self.kind = model_kind(self.model)
        if self.kind is None:
            raise NoClassifierError(f"{model_dir}: the model ({type(self.model).__name__}) has no classifier, tagger, "
                                    f"question-answering or multiple-choice head: fine-tune it first "
                                    f"(train/finetune.py)")
        self.card = read_card(model_dir, self.kind, getattr(self.model, "num_labels", 1))
        said = self.model.config.problem_type
        kind = self.card.get("kind")
        if kind in tasks.PROBLEM_TYPE and said is not None and said != tasks.PROBLEM_TYPE[kind]:
            raise InputError(f"{os.path.join(model_dir, tasks.TASK_CARD)} says a {kind} model, but "
                             f"{os.path.join(model_dir, 'config.json')} says problem_type {said!r}: one of them is "
                             "another model's")
        self.multilabel = kind == "multilabel" or said == "multi_label_classification"
        self.tokenizer = model_tokenizer(model_dir, self.model.config.vocab_size)
        self.max_length = tasks.input_length(max_length, self.model.config.max_position_embeddings, length_setting,
                                             model=f"the model at {model_dir}")
        self.batch_size = batch_size
        n = getattr(self.model, "num_labels", 1)
        id2label = self.model.config.id2label or {}
        self.labels = None if n == 1 or self.kind in ("qa", "choice") else [str(id2label.get(i, f"LABEL_{i}"))
                                                                             for i in range(n)]

    @property
    def columns(self) -> str:
        """The input columns a file needs by default: QA's question and context, the choice columns, a classifier's
        text columns, else none (the file's only column, or ``text``). A GLUE model's are TFDS's names for its task
        (``sentence``), which no file of the user's need hold: it reads as a model without a card does."""
        if self.kind == "qa":
            return "question,context"
        if self.kind == "choice":
            return ",".join(self.card.get("text_columns", ["context"]) + self.card.get("choice_columns", []))
        return "" if "glue_task" in self.card else ",".join(self.card.get("text_columns", []))

    @property
    def arity(self) -> Arity:
        """How many texts an input of this model holds."""
        cols = self.card.get("text_columns")
        if self.kind == "tagger":
            return Arity(1, 1, "one text", "a tagger labels its words")
        if self.kind == "qa":
            return Arity(2, 2, "a (question, context) pair")
        if self.kind == "choice":
            n = len(cols or ["context"])
            return Arity(n + 2, None, f"{'a context' if n == 1 else 'a context and a start'} and 2 or more endings")
        if cols:
            return Arity(len(cols), len(cols), "one text" if len(cols) == 1 else "a pair of texts",
                         f"its task.json text_columns: {', '.join(cols)}")
        return TEXT_OR_PAIR

    def inputs(self, inputs) -> tuple[list[str | tuple[str, ...]], bool]:
        """``(inputs as a list, whether it was one input)``, each a str (one text) or a tuple of texts, by the call
        contract (``__call__``); refused, naming the input, when it is no text, or holds another number of texts
        than the model's ``arity``."""
        if isinstance(inputs, np.ndarray):
            inputs = inputs.tolist()
        if isinstance(inputs, UserString):  # a text, not a sequence of one-character texts
            inputs = str(inputs)
        # a tuple is one input, an empty one too (an input of no text: refused below, not read as no inputs)
        if isinstance(inputs, str) or (isinstance(inputs, tuple) and all(isinstance(t, str) for t in inputs)):
            batch, one = [inputs], True
        elif isinstance(inputs, Sequence) and not isinstance(inputs, (bytes, bytearray, memoryview)):
            batch, one = list(inputs), False
        else:
            raise InputError(f"the inputs are {_kind_of(inputs)}: give a text (str), a tuple of texts (one pair or "
                             f"row), or a list of these")
        arity, out, first = self.arity, [], None
        for i, x in enumerate(batch):
            name = "the input" if one else f"input {i + 1}"
            x = str(x) if isinstance(x, UserString) else x
            if isinstance(x, (tuple, list)) and all(isinstance(t, str) for t in x):
                x = tuple(x)
            elif not isinstance(x, str):
                raise InputError(f"{name} is {_kind_of(x)}, not a text (str) or a tuple of texts")
            n = 1 if isinstance(x, str) else len(x)
            if problem := next(filter(None, map(text_problem, (x,) if isinstance(x, str) else x)), ""):
                raise InputError(f"{name} {problem}")  # as a text file's or a JSON cell's NUL is refused
            if n not in arity:
                raise InputError(f"{name} holds {n} text{'s' * (n != 1)}; this model reads {arity}")
            if first is not None and n != first:
                raise InputError(f"{name} holds {n} text{'s' * (n != 1)} but input 1 holds {first}: every input "
                                 "holds the same number")
            first = n
            if empty := [j + 1 for j, t in enumerate((x,) if isinstance(x, str) else x) if not has_text(t)]:
                raise InputError(f"{name}{'' if n == 1 else f', text {empty[0]},'} is empty (or only white space); "
                                 "every input needs its text")
            out.append(x[0] if n == 1 and not isinstance(x, str) else x)
        return out, one

    def _logits(self, arrays) -> np.ndarray:
        # a batch_size far past the inputs (10**9 allocated that many rows) is cut to the inputs, but never below the
        # default's 64: the batch is a compiled shape, and a shape per input count would compile each call anew
        n = len(next(iter(arrays.values())))
        return check_finite(predict_logits(self.model, arrays, min(self.batch_size, max(n, BATCH_SIZE))),
                            self.model_dir)

    def _need(self, kind: str, method: str) -> None:
        """The public methods read one kind of model's outputs: another kind is one line, not an IndexError."""
        if self.kind != kind:
            raise InputError(f"{method}() is for {_KIND_WORDS[kind]}; {self.model_dir} is {_KIND_WORDS[self.kind]} "
                             f"(call the Predictor itself: it picks the method of its kind)")

    def logits(self, texts: Sequence[str | tuple[str, str]]) -> np.ndarray:
        """A classifier's logits [N, labels] for a list of texts or pairs (a str: one text, [1, labels])."""
        self._need("classifier", "logits")
        texts = self.inputs(texts)[0]
        pairs = [isinstance(t, (tuple, list)) for t in texts]
        if any(pairs) and not all(pairs):
            raise InputError("the inputs mix single texts and pairs")
        a = [t[0] if p else t for t, p in zip(texts, pairs)]
        b = [t[1] for t in texts] if texts and all(pairs) else None
        enc = self.tokenizer.encode_batch(a, b, max_length=self.max_length)
        warn_truncated(self.tokenizer.last_truncated, len(a), self.max_length, self.length_setting,
                       limit=self.model.config.max_position_embeddings)
        return self._logits({k: np.asarray(enc[k], np.int32) for k in ("input_ids", "attention_mask",
                                                                        "token_type_ids")})

    def tag(self, texts: Sequence[str], where: Sequence[tuple[str, int]] | None = None) -> list[dict]:
        """A tagger's tag per word (words split on whitespace; a word past ``max_length`` gets None). ``where``: each
        text's file and line, for the errors to name (else "input N")."""
        self._need("tagger", "tag")
        if any(not isinstance(t, str) for t in texts):
            raise InputError("a tagger labels single texts (its words split on whitespace), not pairs")
        examples = [tasks.TokenExample(i, tuple(t.split()), None, (*where[i], False) if where else None)
                    for i, t in enumerate(texts)]
        arrays = tasks.ConllTask("predict", {}, tuple(self.labels), length_setting=self.length_setting,
                                 positions=self.model.config.max_position_embeddings).encode(
            examples, self.tokenizer, self.max_length)
        ids = self._logits(arrays).argmax(-1)
        out = []
        for ex, row, marks in zip(examples, ids, arrays["labels"]):
            tags = [self.labels[t] for t in row[marks != tasks.IGNORE]]
            out.append({"words": list(ex.words), "tags": tags + [None] * (len(ex.words) - len(tags))})
        return out

    def answer(self, pairs: Sequence[tuple[str, str]]) -> list[dict]:
        """Extractive QA: for each ``(question, context)``, the answer's text, its characters in the context
        (``start``, ``end``), ``score`` and ``probability`` (decoded as the model's run evaluated, by its
        ``task.json``)."""
        self._need("qa", "answer")
        if any(not isinstance(p, (tuple, list)) or len(p) != 2 for p in pairs):
            raise InputError("a question-answering model takes (question, context) pairs")
        settings = {"version_2": False, "doc_stride": min(128, self.max_length // 4),  # a model without task.json
                    "max_query_length": min(64, self.max_length // 4)}
        trained = "the model's task.json" if "max_query_length" in self.card else "this model's default"
        task = squad.SquadTask("predict", {}, **(settings | {k: v for k, v in self.card.items() if k != "kind"}),
                               query_setting=f"data.max_query_length when fine-tuning (predict reads questions as "
                                             f"{trained} says)")
        room = task.context_room(self.max_length)
        if task.doc_stride >= room:  # the run's windows do not fit this length: named before any input is read
            source = (f"the model was trained with ({self.model_dir}/task.json)" if "doc_stride" in self.card else
                      "of its default")
            raise InputError(f"max_length={self.max_length} leaves {max(room, 0)} pieces of context in a window (after "
                             f"3 special tokens and max_query_length {task.max_query_length}), not more than the "
                             f"doc_stride {task.doc_stride} {source}: give a larger --max_length")
        examples = [squad.QAExample(i, str(i), q, c, (), f"input {i + 1}") for i, (q, c) in enumerate(pairs)]
        features = task.encode(examples, self.tokenizer, self.max_length)
        return [{k: a[k] for k in ("answer", "start", "end", "score", "probability")}
                for a in task.answers(self._logits(features), features)]

    def choose(self, rows: Sequence[tuple[str, ...]]) -> list[dict]:
        """Multiple choice: for each ``(context[, start], ending, ending, ...)`` (the run's text and choice columns),
        the chosen ending's index and text and every choice's probability."""
        self._need("choice", "choose")
        n_text = len(self.card.get("text_columns", ["context"]))
        if any(not isinstance(r, (tuple, list)) or len(r) < n_text + 2 for r in rows):
            raise InputError(f"a multiple-choice model takes rows of {n_text} text(s) and 2 or more endings")
        if len({len(r) for r in rows}) != 1:
            raise InputError("every row needs the same number of endings")
        examples = [tasks.ChoiceExample(i, r[0], r[1] if n_text == 2 else None, tuple(r[n_text:]), None)
                    for i, r in enumerate(rows)]
        choices = tuple(f"choice{i}" for i in range(len(rows[0]) - n_text))
        task = tasks.ChoiceTask("predict", {}, ("context", "lead")[:n_text], choices, "label")
        p = _softmax(self._logits(task.encode(examples, self.tokenizer, self.max_length)))
        return [{"choice": int(row.argmax()), "ending": ex.endings[int(row.argmax())],
                 "probabilities": [float(x) for x in row]} for ex, row in zip(examples, p)]

    def __call__(self, inputs):
        """Predictions. The call contract: a ``str`` is one input (one text) and gives one result dict; a tuple of
        ``str`` is one input too (a pair for a pair classifier, ``(question, context)`` for QA, a row for multiple
        choice) and gives one result; a list (or any other sequence) of such inputs gives a list of results, in
        order (``[]`` for none). Anything else (bytes, a dict, a number, a list holding no texts) is refused with
        an ``InputError`` naming it, as is an input whose number of texts is not the model's (``arity``)."""
        texts, one = self.inputs(inputs)
        results = self._predict(texts) if texts else []
        return results[0] if one else results

    def _predict(self, texts: list, where: list[tuple[str, int]] | None = None) -> list[dict]:
        if self.kind == "tagger":
            return self.tag(texts, where)
        if self.kind != "classifier":
            return {"qa": self.answer, "choice": self.choose}[self.kind](texts)
        logits = self.logits(texts)
        if self.labels is None:
            return [{"score": float(x[0])} for x in logits]
        if self.multilabel:  # a sigmoid per label; on where it is above 0.5
            p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            return [{"labels": [name for name, v in zip(self.labels, row) if v > 0.5],
                     "probabilities": {name: float(v) for name, v in zip(self.labels, row)}} for row in p]
        return [{"label": self.labels[int(row.argmax())],
                 "probabilities": {name: float(v) for name, v in zip(self.labels, row)}} for row in _softmax(logits)]


def _kind_of(x) -> str:
    """``x`` named for a message: its type and the start of its value."""
    text = repr(x)
    return f"{type(x).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


_KIND_WORDS = {"classifier": "a sequence classifier", "tagger": "a tagger (token classification)",
               "qa": "a question-answering model", "choice": "a multiple-choice model"}


def _softmax(logits) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def read_card(model_dir: str, kind: str | None = None, num_labels: int | None = None) -> dict:
    """The model's ``task.json`` (written by fine-tuning on the user's files, QA and multiple choice), or {} when
    there is none; the one place it is checked. Refused, naming the file and the key: text that is not a JSON
    object, a key twice, no ``kind`` or one not in ``tasks.KINDS``, a key that kind's card does not have, a value of
    the wrong type or range (text columns: a list of distinct non-empty names; integers >= 1, ``doc_stride`` >= 0;
    numbers finite), and, given the model's head ``kind`` (``Predictor.kind``) and ``num_labels``, a card of another
    kind of model (a regression card on a classifier with 2 outputs, say). A classifier without one whose config.json
    names the GLUE task it was fine-tuned on (transformers' ``finetuning_task``, as run_glue writes it) has that
    task's card (``tasks.glue_card``)."""
    path = os.path.join(model_dir, tasks.TASK_CARD)
    if not os.path.exists(path):
        return (tasks.glue_card(read_model_config(model_dir)[1].get("finetuning_task"))
                if kind == "classifier" and os.path.isfile(os.path.join(model_dir, "config.json")) else None) or {}
    checkpoint_file(model_dir, tasks.TASK_CARD)  # one linked from outside the MODEL_DIR is refused, as vocab.txt is

    try:
        card = read_json(path)
    except InputError as e:
        raise type(e)(f"{e} (a task description: train/finetune.py writes it)") from None
    glue_task = card.get("glue_task") if isinstance(card, dict) else None
    task = (read_model_config(model_dir)[1].get("finetuning_task") if glue_task is not None
            and os.path.isfile(os.path.join(model_dir, "config.json")) else None)
    return tasks.check_card(card, path, kind, num_labels, task, f"{model_dir} holds")


def read_inputs(path: str, text_columns: str = "", arity: Arity | None = None) -> list[str | tuple[str, ...]]:
    """The inputs of ``path`` (see the module docstring), each a text or a tuple of texts (``numbered_inputs``
    without the line numbers)."""
    return [x for _, x in numbered_inputs(path, text_columns, arity)]


def numbered_inputs(path: str, text_columns: str = "", arity: Arity | None = None, chosen: bool = True
                    ) -> list[tuple[int, str | tuple[str, ...]]]:
    """(line, input) for each input of ``path`` (see the module docstring), the input a text or a tuple of texts, the
    line where its row starts; every error names the file and line: a byte that is not UTF-8 (and its column), a
    missing column, an empty text, and a line or row whose number of texts is not the model's ``arity``
    (``Predictor.arity``; without it, a ``.txt`` line holds a text or a pair), or differs from the first one's.
    ``chosen=False``: ``text_columns`` are the model's own (no --text_columns), and a column numbered like them that
    is not one of them (``ending3`` beside ``ending0..2``: one more choice) is refused, as it would go unread."""
    txt = path.lower().endswith(".txt")
    arity = arity or (TEXT_OR_PAIR if txt else Arity(1, None, "any number of texts"))
    check_input_file(path, "", " of inputs (.txt, .csv, .tsv or .jsonl)")
    ext = os.path.splitext(path)[1].lower()
    if not txt and ext not in tasks.FORMATS:  # the training files' own formats, and .txt
        conll = "; predict reads no CoNLL file: write each sentence's words on a line of a .txt" \
            if ext in (".conll", ".conllu", ".iob", ".bio") else ""
        raise DataFileError(f"{path}: unknown file type {os.path.splitext(path)[1]!r}; give a .txt (a text per line; a "
                            f"tagger: a sentence per line), .csv, .tsv or .jsonl file{conll}")
    out, first = [], None

    def add(texts: list[str], lineno: int, what: str, hint: str = ""):
        nonlocal first
        n = len(texts)
        if n not in arity:
            raise DataFileError(f"{path}:{lineno}: {n} {what}; this model reads {arity}"
                                + (hint if arity.high is not None and n > arity.high else ""))
        if first is not None and n != first[0]:
            raise DataFileError(f"{path}:{lineno}: {n} {what}, but line {first[1]} has {first[0]}: every input holds "
                                f"the same number of texts")
        first = first or (n, lineno)
        out.append((lineno, tuple(texts) if n > 1 else texts[0]))

    if txt:
        blank = []  # a line of white space or invisible marks alone is blank: skipped, and said so
        for lineno, cols in tasks.text_lines(path, blank=blank):
            if (empty := next((i for i, c in enumerate(cols) if not has_text(c)), None)) is not None:
                raise DataFileError(f"{path}:{lineno}: text {empty + 1} of the line is empty (or only white "
                                    "space or invisible marks)")
            add(cols, lineno, f"tab-separated text{'s' * (len(cols) != 1)}",
                "; a text holding a tab goes in a .csv or .jsonl file")
        if not out:
            raise DataFileError(f"{path}: no lines")
        if blank:
            shown = ", ".join(map(str, blank[:5])) + (", ..." if len(blank) > 5 else "")
            log.warning("%s: %d blank line%s skipped (line %s): %d inputs, each output naming its line", path,
                        len(blank), "s" * (len(blank) > 1), shown, len(out))
        return _said_missing(path, out)
    columns = [tasks.Row._key(c.strip()) for c in text_columns.split(",")] if text_columns.strip() else []
    if not all(columns) or len(set(columns)) != len(columns):
        why = "an empty column name" if not all(columns) else "a column named twice"
        raise InputError(f"--text_columns {text_columns!r}: {why}; give each text column once, separated by commas "
                         "(e.g. premise,hypothesis)")
    for lineno, row in tasks.read_rows(path):
        if not columns:
            columns = list(row) if len(row) == 1 else ["text"]
            header_at = getattr(row, "header_at", None)  # a CSV's or TSV's
            if header_at and (hint := tasks.separator_hint(path, row)):  # 'a fine film|1' read as one text
                raise DataFileError(f"{path}:{header_at}: one column, {columns[0][:60]!r}{hint}")
            if header_at and len(row) == 1 and len(columns[0].split()) >= 3:  # "a gripping film": no column's name
                raise DataFileError(f"{path}:{header_at}: the header {columns[0][:60]!r} reads as a text, not as "
                                    "a column's name: a file of texts without a header is a .txt file (a text per "
                                    "line); or give the file a header line")
        if (not chosen or not text_columns.strip()) and not out:  # the model's columns, or the default: none left
            _check_numbered_columns(path, getattr(row, "header_at", None) or lineno, row, columns, arity)
        texts = []
        for col in columns:
            if col not in row:
                raise tasks.missing_column(path, lineno, row, col, setting="--text_columns")
            texts.append(tasks.text_value(row[col], path, lineno, col))
        add(texts, lineno, f"text column{'s' * (len(texts) != 1)} ({', '.join(columns)}; name others with "
                           "--text_columns)")
    if not out:
        raise DataFileError(f"{path}: no rows")
    return _said_missing(path, out)


def _said_missing(path: str, inputs: list) -> list:
    """``inputs`` (line, text or texts), after ``files.warn_texts``' warnings."""
    warn_texts(path, [(n, (x,) if isinstance(x, str) else x) for n, x in inputs])
    return inputs


def _check_numbered_columns(path: str, lineno: int, row, columns: list[str], arity: Arity) -> None:
    """A column numbered or lettered like one the model reads (``tasks.unread_numbered``: ending4 beside ending0,
    q3a beside q1a, question2 beside question, text_b beside text) would go unread: refused."""
    if extra := tasks.unread_numbered(row, columns):
        same = [c for c in columns if tasks.column_stem(c) == tasks.column_stem(extra[0])]
        fix = (f"give --text_columns {','.join(columns + extra)} to read {'them' if len(extra) > 1 else 'it'}, or "
               if arity.high is None else "")
        raise DataFileError(f"{path}:{lineno}: column {extra[0]!r} is numbered like {', '.join(same)}, which the model "
                            f"reads, but is not one of them, so it would go unread; {fix}drop or rename the column")


def predict_file(model_dir: str, input_path: str, out_path: str, text_columns: str = "",
                 max_length: int | None = None, overwrite: bool = False) -> int:
    """One JSON line per input of ``input_path`` into ``out_path``, in order, each with the ``line`` of the input
    where its row starts (``{"line": 3, "label": ...}``), written whole or not at all. ``out_path`` is
    checked and claimed before any work (``files.claim_output_file``): refused when it exists (unless ``overwrite``),
    when its directory does not exist (not created), when it is the input or inside ``model_dir`` (always), and
    while another command writes it. ``text_columns`` name a table's columns: a ``.txt`` input (a text per line) with
    them is refused. Returns the number of lines."""
    model_dir, input_path, out_path = (path_argument(name, path) for name, path in (
        ("model_dir", model_dir), ("input_path", input_path), ("out_path", out_path)))
    if not isinstance(text_columns, str):  # a list of names: "'list' object has no attribute 'strip'"
        raise InputError(f"text_columns is {type(text_columns).__name__} {text_columns!r}; give the column names as "
                         "one str separated by commas (\"premise,hypothesis\")")
    if text_columns and input_path.lower().endswith(".txt"):
        raise InputError(f"--text_columns {text_columns}: {input_path} is a .txt file, a text per line (a pair: two "
                         "tab-separated texts), with no columns; give a .csv, .tsv or .jsonl file to choose columns")
    with claim_output_file(out_path, overwrite, inputs=(input_path, model_dir)):  # never inside the model either
        predictor = Predictor(model_dir, max_length, length_setting="--max_length")
        numbered = numbered_inputs(input_path, text_columns or predictor.columns, predictor.arity,
                                   chosen=bool(text_columns))
        texts = predictor.inputs([x for _, x in numbered])[0]
        results = predictor._predict(texts, [(input_path, n) for n, _ in numbered]) if texts else []
        atomic_write(out_path, "".join(json_text({"line": n} | r) + "\n" for (n, _), r in zip(numbered, results)))
    return len(results)


def example_input(example) -> str | tuple[str, ...]:
    """A task's example (``tasks.load``) as the input a ``Predictor`` takes: a text or a pair; a tagged sentence's
    words joined by spaces; a question and its context; a context (and start) and the endings."""
    if isinstance(example, tasks.GlueExample):
        return (example.text_a, example.text_b) if example.text_b is not None else example.text_a
    if isinstance(example, tasks.TokenExample):
        return " ".join(example.words)
    if isinstance(example, squad.QAExample):
        return example.question, example.context
    if isinstance(example, tasks.ChoiceExample):
        return (example.context, *(() if example.lead is None else (example.lead,)), *example.endings)
    raise TypeError(f"no predictor input for a {type(example).__name__}")


def write_predictions(model_dir: str, examples, out_path: str, max_length: int = 128) -> int:
    """One JSON line per example (a test split fine-tuning read) into ``out_path``, in order, each with its ``row``
    (1-based, in the split's order) and a question's ``id``. Returns the number of lines."""
    results = Predictor(model_dir, max_length, length_setting="config.max_seq_length")(
        [example_input(ex) for ex in examples])
    rows = [{"row": i + 1} | ({"id": ex.id} if isinstance(ex, squad.QAExample) else {}) | r
            for i, (ex, r) in enumerate(zip(examples, results))]
    atomic_write(out_path, "".join(json_text(r) + "\n" for r in rows))
    return len(rows)
