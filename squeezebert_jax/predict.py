"""Predictions of a fine-tuned classifier for new text: a Python call on a list of strings, or a file in, JSON lines out.

    predictor = Predictor("runs/reviews/model")
    predictor(["a gripping, funny film", "two hours I will not get back"])
    # [{"label": "positive", "probabilities": {"negative": 0.03, "positive": 0.97}}, ...]

Inputs: strings, or (text, text) pairs for a pair classifier; a tagger (token classifier) gives
``{"words": [...], "tags": [...]}`` for each text, its words split on whitespace. Files: ``.txt`` (a text per line; a pair as two
tab-separated texts), ``.csv`` / ``.tsv`` / ``.jsonl`` (the ``text_columns``; default the file's only column, or
``text``). A regression model (one output) gives ``{"score": x}``. Batches are cut to their length bucket
(``batching``) and run data parallel over every device.
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
    """A fine-tuned sequence classifier (MODEL_DIR) and its tokenizer, ready to label text."""

    def __init__(self, model_dir: str, max_length: int = 128, batch_size: int = 64):
        from squeezebert_jax.inference import NoClassifierError, model_tokenizer
        from squeezebert_jax.io import load_pretrained
        from squeezebert_jax.model import SqueezeBertForSequenceClassification, SqueezeBertForTokenClassification

        self.model = load_pretrained(model_dir)
        self.tagger = isinstance(self.model, SqueezeBertForTokenClassification)
        if not (self.tagger or isinstance(self.model, SqueezeBertForSequenceClassification)):
            raise NoClassifierError(f"{model_dir}: the model ({type(self.model).__name__}) has no sequence- or token-"
                                    f"classifier head: fine-tune it first (train/finetune.py)")
        self.tokenizer = model_tokenizer(model_dir, self.model.config.vocab_size)
        self.max_length = min(max_length, self.model.config.max_position_embeddings)
        self.batch_size = batch_size
        n = self.model.num_labels
        id2label = self.model.config.id2label or {}
        self.labels = None if n == 1 else [str(id2label.get(i, f"LABEL_{i}")) for i in range(n)]

    def logits(self, texts: Sequence[str | tuple[str, str]]) -> np.ndarray:
        from squeezebert_jax.inference import predict_logits

        pairs = [isinstance(t, (tuple, list)) for t in texts]
        if any(pairs) and not all(pairs):
            raise InputError("the inputs mix single texts and pairs")
        a = [t[0] if p else t for t, p in zip(texts, pairs)]
        b = [t[1] for t in texts] if texts and all(pairs) else None
        enc = self.tokenizer.encode_batch(a, b, max_length=self.max_length)
        arrays = {k: np.asarray(enc[k], np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
        logits = predict_logits(self.model, arrays, self.batch_size)
        if not np.isfinite(logits).all():
            raise FloatingPointError("the model's outputs are not finite numbers (damaged weights?)")
        return logits

    def tag(self, texts: Sequence[str]) -> list[dict]:
        """A tagger's tag per word (words split on whitespace; a word past ``max_length`` gets None)."""
        from squeezebert_jax.inference import predict_logits

        if any(not isinstance(t, str) for t in texts):
            raise InputError("a tagger labels single texts (its words split on whitespace), not pairs")
        examples = [tasks.TokenExample(i, tuple(t.split()), None) for i, t in enumerate(texts)]
        arrays = tasks.ConllTask("predict", {}, tuple(self.labels)).encode(examples, self.tokenizer, self.max_length)
        ids = predict_logits(self.model, arrays, self.batch_size).argmax(-1)
        out = []
        for ex, row, marks in zip(examples, ids, arrays["labels"]):
            tags = [self.labels[t] for t in row[marks != tasks.IGNORE]]
            out.append({"words": list(ex.words), "tags": tags + [None] * (len(ex.words) - len(tags))})
        return out

    def __call__(self, texts: Sequence[str | tuple[str, str]]) -> list[dict]:
        if not len(texts):
            return []
        if self.tagger:
            return self.tag(list(texts))
        logits = self.logits(list(texts)).astype(np.float64)
        if self.labels is None:
            return [{"score": float(x[0])} for x in logits]
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return [{"label": self.labels[int(row.argmax())],
                 "probabilities": {name: float(v) for name, v in zip(self.labels, row)}} for row in p]


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
        out.append(tuple(texts) if len(texts) == 2 else texts[0])
    if not out:
        raise tasks.DataFileError(f"{path}: no rows")
    return out


def predict_file(model_dir: str, input_path: str, out_path: str, text_columns: str = "", max_length: int = 128,
                 overwrite: bool = False) -> int:
    """One JSON line per input of ``input_path`` into ``out_path`` (refused when it exists, unless ``overwrite``;
    written whole or not at all). Returns the number of lines."""
    check_output_file(out_path, overwrite)
    texts = read_inputs(input_path, text_columns)
    results = Predictor(model_dir, max_length)(texts)
    atomic_write(out_path, "".join(json.dumps(r) + "\n" for r in results))
    return len(results)
