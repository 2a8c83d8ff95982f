"""Predictions of a fine-tuned model for new text: a Python call on a list of inputs, or a file in, JSON lines out.

    predictor = Predictor("runs/reviews/model")
    predictor(["a gripping, funny film", "two hours I will not get back"])
    # [{"label": "positive", "probabilities": {"negative": 0.03, "positive": 0.97}}, ...]

Inputs: strings, or (text, text) pairs for a pair classifier; a tagger (token classifier) gives
``{"words": [...], "tags": [...]}`` for each text, its words split on whitespace; an extractive QA model takes
(question, context) pairs and gives ``{"answer", "start", "end", "score", "probability"}`` ("" for "no answer" from a
SQuAD v2.0 model); a multiple-choice model takes (context[, start], ending, ending, ...) rows and gives ``{"choice",
"ending", "probabilities"}``; a multilabel classifier gives ``{"labels": [...], "probabilities"}`` (a sigmoid per
label). Files: ``.txt`` (a text per line; a pair as two tab-separated texts), ``.csv`` / ``.tsv``
/ ``.jsonl`` (the ``text_columns``; default the file's only column, or ``text``; QA: ``question,context``; multiple
choice: the run's text and choice columns). A regression model (one output) gives ``{"score": x}``. Batches are cut to
their length bucket (``batching``) and run data parallel over every device.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np

from squeezebert_jax import tasks
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import atomic_write, check_output_file


class Predictor:
    """A fine-tuned MODEL_DIR (sequence or token classifier, extractive QA, multiple choice) and its tokenizer, ready
    to label text."""

    def __init__(self, model_dir: str, max_length: int = 128, batch_size: int = 64):
        from squeezebert_jax.inference import NoClassifierError, model_tokenizer
        from squeezebert_jax.pretrained import load_pretrained
        from squeezebert_jax.model import HEADS

        self.model, self.model_dir = load_pretrained(model_dir), model_dir
        self.kind = next((k for k, head in KINDS.items() if isinstance(self.model, HEADS[head])), None)
        if self.kind is None:
            raise NoClassifierError(f"{model_dir}: the model ({type(self.model).__name__}) has no classifier, tagger, "
                                    f"question-answering or multiple-choice head: fine-tune it first "
                                    f"(train/finetune.py)")
        self.card = _read_card(model_dir)
        self.tokenizer = model_tokenizer(model_dir, self.model.config.vocab_size)
        self.max_length = min(max_length, self.model.config.max_position_embeddings)
        self.batch_size = batch_size
        n = getattr(self.model, "num_labels", 1)
        id2label = self.model.config.id2label or {}
        self.labels = None if n == 1 or self.kind in ("qa", "choice") else [str(id2label.get(i, f"LABEL_{i}"))
                                                                             for i in range(n)]

    @property
    def columns(self) -> str:
        """The input columns a file needs by default: QA's question and context, the choice columns, else none."""
        if self.kind == "qa":
            return "question,context"
        if self.kind == "choice":
            return ",".join(self.card.get("text_columns", ["context"]) + self.card.get("choice_columns", []))
        return ",".join(self.card.get("text_columns", []))

    def _logits(self, arrays) -> np.ndarray:
        from squeezebert_jax.inference import check_finite, predict_logits

        return check_finite(predict_logits(self.model, arrays, self.batch_size), self.model_dir)

    def logits(self, texts: Sequence[str | tuple[str, str]]) -> np.ndarray:
        pairs = [isinstance(t, (tuple, list)) for t in texts]
        if any(pairs) and not all(pairs):
            raise InputError("the inputs mix single texts and pairs")
        a = [t[0] if p else t for t, p in zip(texts, pairs)]
        b = [t[1] for t in texts] if texts and all(pairs) else None
        enc = self.tokenizer.encode_batch(a, b, max_length=self.max_length)
        return self._logits({k: np.asarray(enc[k], np.int32) for k in ("input_ids", "attention_mask",
                                                                        "token_type_ids")})

    def tag(self, texts: Sequence[str]) -> list[dict]:
        """A tagger's tag per word (words split on whitespace; a word past ``max_length`` gets None)."""
        if any(not isinstance(t, str) for t in texts):
            raise InputError("a tagger labels single texts (its words split on whitespace), not pairs")
        examples = [tasks.TokenExample(i, tuple(t.split()), None) for i, t in enumerate(texts)]
        arrays = tasks.ConllTask("predict", {}, tuple(self.labels)).encode(examples, self.tokenizer, self.max_length)
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
        from squeezebert_jax import squad

        if any(not isinstance(p, (tuple, list)) or len(p) != 2 for p in pairs):
            raise InputError("a question-answering model takes (question, context) pairs")
        settings = {"version_2": False, "doc_stride": min(128, self.max_length // 4),  # a model without task.json
                    "max_query_length": min(64, self.max_length // 4)}
        task = squad.SquadTask("predict", {}, **(settings | {k: v for k, v in self.card.items() if k != "kind"}))
        examples = [squad.QAExample(i, str(i), q, c, (), f"input {i + 1}") for i, (q, c) in enumerate(pairs)]
        features = task.encode(examples, self.tokenizer, self.max_length)
        return [{k: a[k] for k in ("answer", "start", "end", "score", "probability")}
                for a in task.answers(self._logits(features), features)]

    def choose(self, rows: Sequence[tuple[str, ...]]) -> list[dict]:
        """Multiple choice: for each ``(context[, start], ending, ending, ...)`` (the run's text and choice columns),
        the chosen ending's index and text and every choice's probability."""
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

    def __call__(self, texts: Sequence) -> list[dict]:
        if not len(texts):
            return []
        if self.kind != "classifier":
            return {"tagger": self.tag, "qa": self.answer, "choice": self.choose}[self.kind](list(texts))
        logits = self.logits(list(texts))
        if self.labels is None:
            return [{"score": float(x[0])} for x in logits]
        if self.card.get("kind") == "multilabel":  # a sigmoid per label; on where it is above 0.5
            p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            return [{"labels": [name for name, v in zip(self.labels, row) if v > 0.5],
                     "probabilities": {name: float(v) for name, v in zip(self.labels, row)}} for row in p]
        return [{"label": self.labels[int(row.argmax())],
                 "probabilities": {name: float(v) for name, v in zip(self.labels, row)}} for row in _softmax(logits)]


KINDS = {"classifier": "SqueezeBertForSequenceClassification", "tagger": "SqueezeBertForTokenClassification",
         "qa": "SqueezeBertForQuestionAnswering", "choice": "SqueezeBertForMultipleChoice"}


def _softmax(logits) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    p = np.exp(x - x.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def _read_card(model_dir: str) -> dict:
    """The model's ``task.json`` (written by fine-tuning for QA and multiple choice), or {}."""
    path = os.path.join(model_dir, tasks.TASK_CARD)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            card = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a JSON task description ({e})") from None
    if not isinstance(card, dict):
        raise InputError(f"{path}: not a JSON object")
    return card


def read_inputs(path: str, text_columns: str = "") -> list[str | tuple[str, str]]:
    """The texts of ``path`` (see the module docstring), each error naming the file and line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    if path.lower().endswith(".txt"):
        out = []
        for lineno, cols in tasks.text_lines(path):
            if len(cols) > 2:
                raise tasks.DataFileError(f"{path}:{lineno}: {len(cols)} tab-separated fields; a text, or two for a "
                                          f"pair")
            out.append(tuple(cols) if len(cols) == 2 else cols[0])
        if not out:
            raise tasks.DataFileError(f"{path}: no lines")
        return out
    columns = [c.strip() for c in text_columns.split(",") if c.strip()]
    out = []
    for lineno, row in tasks.read_rows(path):
        if not columns:
            columns = list(row) if len(row) == 1 else ["text"]
        texts = []
        for col in columns:
            if col not in row:
                raise tasks.DataFileError(f"{path}:{lineno}: no column {col!r} (has {', '.join(map(str, row))}); "
                                          f"name the text column(s) with --text_columns")
            texts.append(tasks.text_value(row[col], path, lineno, col))
        out.append(tuple(texts) if len(texts) > 1 else texts[0])
    if not out:
        raise tasks.DataFileError(f"{path}: no rows")
    return out


def predict_file(model_dir: str, input_path: str, out_path: str, text_columns: str = "", max_length: int = 128,
                 overwrite: bool = False) -> int:
    """One JSON line per input of ``input_path`` into ``out_path`` (refused when it exists, unless ``overwrite``;
    written whole or not at all). Returns the number of lines."""
    check_output_file(out_path, overwrite)
    predictor = Predictor(model_dir, max_length)
    texts = read_inputs(input_path, text_columns or predictor.columns)
    results = predictor(texts)
    atomic_write(out_path, "".join(json.dumps(r) + "\n" for r in results))
    return len(results)
