"""Extractive question answering on SQuAD v1.1 / v2.0 files: questions about a context, each answered by a span of it
(in v2.0 possibly by none).

Files: the official SQuAD JSON (``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}``), or JSON Lines of one question per line as Hugging Face
``datasets`` writes SQuAD (``id``, ``question``, ``context``, ``answers``: ``{"text": [...], "answer_start": [...]}``,
or a list of ``{"text", "answer_start"}``). A file with an unanswerable question (no answers, or ``is_impossible``)
makes the task v2.0.

Features, as transformers' ``run_qa``: ``[CLS] question [SEP] window [SEP]``, the question cut to ``max_query_length``
pieces and the context cut into windows of the room left, consecutive windows overlapping by ``doc_stride`` pieces (the
windows of ``BertTokenizerFast(question, context, truncation="only_second", stride=doc_stride,
return_overflowing_tokens=True)``). A window's training target is the first answer's first and last piece, or [CLS]
(position 0) where the window does not hold the whole answer or the question has none. The span loss leaves out the
padding (a batch cut to its length bucket trains as one padded to ``max_seq_length``).

Decoding: in each window the ``n_best`` highest start and end logits over the context's pieces, spans of at most
``max_answer_length`` pieces scored by start + end logit, the best over the question's windows; its text is the
context's characters from the first piece's start to the last piece's end. In v2.0 the answer is "" (none) when the
lowest [CLS] score (start + end logit at position 0) over the windows is above the best span's + ``null_threshold``.

Scores: the official SQuAD evaluation scripts' exact match and F1 in percent (answers normalised: lowercased,
punctuation and the articles a/an/the removed, whitespace collapsed; the best over a question's gold answers); v2.0
also reports them over the answerable (``HasAns_``) and unanswerable (``NoAns_``) questions.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import string
import unicodedata

import numpy as np

from squeezebert_jax import files, sources
from squeezebert_jax.errors import DataFileError, InputError
from squeezebert_jax.tokenizer import warn_truncated

NO_CONTEXT = -1  # the offsets of a piece that is not the context's (specials, question, padding)


@dataclasses.dataclass(frozen=True)
class QAExample:
    idx: int
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character start); () for none, or for an unlabelled question
    where: str  # "file:line", for messages


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------

def read_squad(path: str, labelled: bool = True) -> list[QAExample]:
    """The questions of a SQuAD JSON or JSON Lines file (see the module docstring). ``labelled``: each question must
    carry answers or be marked unanswerable; else (a test file) the answers may be left out. Every error names the file
    and the line (of the question's id in a SQuAD JSON)."""
    if sources.is_dataset(path):  # datasets' SQuAD rows: id, question, context, answers {text, answer_start}
        return _examples(((f"{path}:{i}", {"id": str(i), **row}) for i, row in sources.rows(path)), path, labelled)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".jsonl"):
        raise DataFileError(f"{path}: unknown file type {ext!r}; give SQuAD .json or .jsonl")
    raw = files.read_text(path)
    doc = _squad_json(path, raw)
    rows = _squad_json_rows(path, raw, doc) if doc is not None else _jsonl_rows(path, raw)
    return _examples(rows, path, labelled)


def _examples(rows, path: str, labelled: bool) -> list[QAExample]:
    out, seen = [], {}
    for where, row in rows:
        ex = _example(len(out), where, row, labelled)
        if ex.id in seen:
            lined = ex.id in (where.rsplit(":", 1)[-1], seen[ex.id].rsplit(":", 1)[-1])  # a line without an "id"
            raise DataFileError(f"{where}: question id {ex.id!r} appears twice (also at {seen[ex.id]})"
                                + ("; a line without an \"id\" takes its line number as its id" if lined else ""))
        seen[ex.id] = where
        out.append(ex)
    if not out:
        raise DataFileError(f"{path}: no questions")
    return out


def _squad_json(path: str, raw: str):
    """The parsed file when it is one JSON object with a "data" key (the official layout), else None (JSON Lines:
    its first line one object). A JSON file that is not valid JSON (a syntax error below its first line, a key given
    twice) is named by line and column (``files.parse_json``)."""
    if not raw.lstrip().startswith("{"):
        return None
    try:
        doc = files.parse_json(raw, path)
    except DataFileError as error:
        try:
            json.loads(raw)  # JSON, refused for what it holds (a key given twice), not for its layout: said so
        except (ValueError, RecursionError):
            pass
        else:
            raise error from None
        try:  # one object per line: JSON Lines, read (and checked) line by line
            first = json.loads(raw.lstrip().split("\n", 1)[0])
        except (ValueError, RecursionError):
            raise error from None
        if isinstance(first, dict) and "data" in first:  # the official layout on one line, then more
            lineno = raw.count("\n", 0, len(raw) - len(raw.lstrip())) + 2
            raise DataFileError(f"{path}:{lineno}: more text after the SQuAD JSON object of the line before (a SQuAD "
                                "JSON file is one object; JSON Lines holds one question per line)") from None
        return None
    if isinstance(doc, dict) and "data" not in doc and not {"question", "context", "id"} & set(doc):
        raise DataFileError(f"{path}: a JSON object with no \"data\" list of articles (it has "
                            f"{', '.join(map(str, doc)) or 'nothing'}): the official SQuAD layout is {{\"version\": "
                            "..., \"data\": [...]}, JSON Lines one question object per line")
    return doc if isinstance(doc, dict) and "data" in doc else None


def _squad_json_rows(path: str, raw: str, doc: dict):
    """("file:line", question row) for each question of the official layout; the line is the line of its ``"id"``."""
    if not isinstance(doc["data"], list):
        raise DataFileError(f"{path}: \"data\" is {files.json_type(doc['data'])}, not a list of articles")
    v1 = str(doc.get("version", "")).lstrip("v").startswith("1.")  # SQuAD v1.1 declares "1.1"; v2.0 "v2.0"
    lines: dict[str, list[int]] = {}  # each id's lines, in the file's order (an id given twice: both lines)
    for m in re.finditer(r'"id"\s*:\s*("(?:[^"\\]|\\.)*")', raw):
        lines.setdefault(json.loads(m.group(1)), []).append(raw.count("\n", 0, m.start()) + 1)
    for a, article in enumerate(doc["data"]):  # every level as the official layout has it, or refused by place
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            has = f"has {', '.join(map(str, article)) or 'nothing'}" if isinstance(article, dict) else \
                files.json_type(article)
            raise DataFileError(f"{path}: data[{a}]: no \"paragraphs\" list ({has}); an article is "
                                "{\"title\": ..., \"paragraphs\": [{\"context\": ..., \"qas\": [...]}]}")
        for p, para in enumerate(article["paragraphs"]):
            at = f"{path}: data[{a}].paragraphs[{p}]"
            if not isinstance(para, dict) or not isinstance(para.get("context"), str):
                raise DataFileError(f"{at}: no \"context\" text")
            if not isinstance(para.get("qas"), list):
                raise DataFileError(f"{at}: no \"qas\" list of questions (has {', '.join(map(str, para))})")
            for q, qa in enumerate(para["qas"]):
                if not isinstance(qa, dict):
                    raise DataFileError(f"{at}.qas[{q}]: {files.json_type(qa)}, not a question object")
                qid = qa.get("id")
                seen = lines.get(qid) if isinstance(qid, str) else None
                where = f"{path}:{seen.pop(0) if len(seen) > 1 else seen[0]}" if seen else f"{at}.qas[{q}]"
                if v1 and qa.get("is_impossible") is True and qa.get("answers"):  # the row's own contradiction first
                    raise DataFileError(f"{where}: question {qid!r} is marked is_impossible but has answers (and "
                                        f"\"version\" {json.dumps(doc['version'])} has no unanswerable question): "
                                        "drop the one that is wrong")
                if v1 and (qa.get("answers") == [] or qa.get("is_impossible") is True):
                    raise DataFileError(f"{where}: question {qid!r} has no answer, but the file says \"version\": "
                                        f"{json.dumps(doc['version'])}, where every question has one (an unanswerable "
                                        "question is SQuAD v2.0: set its \"version\" to \"v2.0\")")
                yield where, {**qa, "context": para["context"]}


def _jsonl_rows(path: str, raw: str):
    hint = "; SQuAD JSON needs a top-level \"data\" list, JSON Lines one question per line"
    # lines end at "\n" alone (as text_lines reads them): U+2028 or U+0085 inside a JSON string is text, no line end
    for lineno, row in files.json_lines(path, enumerate(raw.split("\n"), 1), hint):
        yield f"{path}:{lineno}", {"id": str(lineno), **row}


def _example(idx: int, where: str, row: dict, labelled: bool) -> QAExample:
    for key in ("question", "context"):
        if not isinstance(row.get(key), str) or not files.has_text(row[key]):
            raise DataFileError(f"{where}: no {key!r} text (has {', '.join(map(str, row))})")
        if problem := files.text_problem(row[key]):
            raise DataFileError(f"{where}: the {key} {problem}")
    if isinstance(row.get("id"), bool) or not isinstance(row.get("id"), (str, int)) or (
            isinstance(row["id"], str) and not files.has_text(row["id"])):
        raise DataFileError(f"{where}: the question's \"id\" is {json.dumps(row.get('id'))[:60]}; an id is a string "
                            "or an integer (a string with something visible in it)")
    qid, context = str(row["id"]), row["context"]
    # a key that reads as the answers' or is_impossible's, misspelt ("Answers", "answer", "isImpossible"): read as
    # none, the question was silently unanswerable
    if odd := next((k for k in row if isinstance(k, str) and k not in ("answers", "is_impossible", "plausible_answers")
                    and re.sub(r"[\W_]", "", k).casefold() in ("answers", "answer", "isimpossible", "answerstext",
                                                                "answertext", "answerstart", "impossible")), None):
        raise DataFileError(f"{where}: question {qid!r}: the key {odd!r} reads as \"answers\" or \"is_impossible\" "
                            "misspelt, which no SQuAD layout has (read as none, the question would be unanswerable); "
                            "use the layout's keys")
    answers = row.get("answers")
    if isinstance(answers, dict):  # datasets' layout: {"text": [...], "answer_start": [...]}
        if other := sorted(set(answers) - {"text", "answer_start"}, key=str):  # "texts", "Text": read as no answer
            raise DataFileError(f"{where}: question {qid!r}: \"answers\" holds {', '.join(map(repr, other))}, which "
                                "no SQuAD layout has (its keys: \"text\", \"answer_start\"; an unanswerable question "
                                "is \"answers\": [] or empty lists)")
        texts, starts = answers.get("text", []), answers.get("answer_start", [])
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise DataFileError(f"{where}: question {qid!r}: answers needs lists \"text\" and \"answer_start\" of "
                                f"one length")
        answers = [{"text": t, "answer_start": s} for t, s in zip(texts, starts)]
    if "is_impossible" in row and not isinstance(row["is_impossible"], bool):
        raise DataFileError(f"{where}: question {qid!r}: \"is_impossible\" is {json.dumps(row['is_impossible'])}; "
                            "it is true or false")
    if answers is None:
        if labelled and not row.get("is_impossible"):
            raise DataFileError(f"{where}: question {qid!r} has no \"answers\" (an unanswerable question: "
                                f"\"answers\": [] or \"is_impossible\": true)")
        answers = []
    if not isinstance(answers, list):
        raise DataFileError(f"{where}: question {qid!r}: \"answers\" is {files.json_type(answers)}, not a list")
    if row.get("is_impossible") and answers:
        raise DataFileError(f"{where}: question {qid!r} is marked is_impossible but has answers (SQuAD v2.0 keeps "
                            f"those as \"plausible_answers\")")
    if labelled and row.get("is_impossible") is False and not answers:  # which of the two does the file mean?
        raise DataFileError(f"{where}: question {qid!r} is marked \"is_impossible\": false but has no answers (an "
                            f"unanswerable question is \"is_impossible\": true; an answerable one needs its answers)")
    spans = []
    for a in answers:
        text, start = (a.get("text"), a.get("answer_start")) if isinstance(a, dict) else (None, None)
        if (not isinstance(text, str) or not files.has_text(text) or isinstance(start, bool)
                or not isinstance(start, int)):
            none = ("; an unanswerable question is \"answers\": [] (a converter's empty text at -1 means none)"
                    if isinstance(text, str) and not text.strip() and start == -1 else "")
            raise DataFileError(f"{where}: question {qid!r}: an answer needs a \"text\" and an integer "
                                f"\"answer_start\", got {files.json_value(a, 80)}{none}")
        if other := sorted(set(a) - {"text", "answer_start", "answer_end"}, key=str):  # "Answer_start" beside them
            raise DataFileError(f"{where}: question {qid!r}: an answer holds {', '.join(map(repr, other))}, which no "
                                "SQuAD layout has (its keys: \"text\", \"answer_start\")")
        if not 0 <= start <= len(context) - len(text):  # -8 read from the end, or past it: no place in the context
            raise DataFileError(f"{where}: question {qid!r}: answer_start {start} of answer {text!r} is outside its "
                                f"context (0 to {max(len(context) - len(text), 0)}: a character offset into it)")
        if context[start:start + len(text)] != text:
            nfc, composed = unicodedata.normalize("NFC", text), unicodedata.normalize("NFC", context)
            form = ("; the answer and the context write a character in two Unicode forms (one composed, é, the other "
                    "a letter and a combining accent): write both in one form (NFC)"
                    if (nfc != text or composed != context) and nfc in composed else "")
            raise DataFileError(f"{where}: question {qid!r}: answer {text!r} is not at answer_start {start} of its "
                                f"context (there: {context[max(start, 0):max(start, 0) + len(text)]!r}){form}")
        spans.append((text, start))
    return QAExample(idx, qid, row["question"], context, tuple(spans), where)


def has_unanswerable(path: str) -> bool:
    """Whether a labelled file holds a question without an answer (SQuAD v2.0)."""
    return any(not ex.answers for ex in read_squad(path))


# --------------------------------------------------------------------------------------------------
# Features: windows of the context
# --------------------------------------------------------------------------------------------------

def window_starts(n: int, room: int, stride: int) -> list[int]:
    """The first piece of each window of ``room`` pieces over ``n``, consecutive ones sharing ``stride``."""
    starts = [0]
    while starts[-1] + room < n:
        starts.append(starts[-1] + room - stride)
    return starts


def _piece_span(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """The pieces holding characters [start, end): the last piece that starts at or before ``start`` and the first that
    ends at or after ``end`` (run_qa's rule)."""
    first = max([j for j, (s, _) in enumerate(offsets) if s <= start], default=0)
    last = next((j for j, (_, e) in enumerate(offsets) if e >= end), len(offsets) - 1)
    return first, max(first, last)


def encode_features(examples, tokenizer, max_length: int, max_query_length: int, doc_stride: int,
                    query_setting: str = "config.data.max_query_length"):
    """Model inputs of every window of every question (see the module docstring): ``input_ids``, ``attention_mask``,
    ``token_type_ids`` [F, max_length]; ``start_positions``, ``end_positions`` [F] (the first answer's pieces, or 0);
    ``example_index`` [F] (the question of each window) and ``offsets`` [F, max_length, 2] (each context piece's
    characters, ``NO_CONTEXT`` elsewhere). A question cut to ``max_query_length`` is counted in a warning that names
    ``query_setting``, what keeps more."""
    pieces = tokenizer.tokenize_batch([ex.question for ex in examples])
    warn_truncated(sum(len(q) > max_query_length for q in pieces), len(pieces), max_query_length, query_setting,
                   "questions")
    questions = [q[:max_query_length] for q in pieces]
    contexts = tokenizer.pieces_with_offsets([ex.context for ex in examples])
    rows = []
    for i, (ex, q, (ids, offs)) in enumerate(zip(examples, questions, contexts)):
        room = max_length - len(q) - 3
        if room <= doc_stride:
            raise InputError(f"{ex.where}: question {ex.id!r} leaves {room} pieces for the context, not more than "
                             f"doc_stride {doc_stride}: raise max_seq_length or lower doc_stride / max_query_length")
        span = _piece_span(offs, ex.answers[0][1], ex.answers[0][1] + len(ex.answers[0][0])) if ex.answers else None
        for w in window_starts(len(ids), room, doc_stride):
            piece_ids = ids[w:w + room]
            first = len(q) + 2  # where the window's first piece sits
            start = end = 0
            if span and w <= span[0] and span[1] < w + len(piece_ids):
                start, end = first + span[0] - w, first + span[1] - w
            rows.append((i, [tokenizer.cls_id, *q, tokenizer.sep_id, *piece_ids, tokenizer.sep_id], first,
                         offs[w:w + room], start, end))
    n = len(rows)
    out = {k: np.zeros((n, max_length), np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    out["input_ids"][:] = tokenizer.pad_id
    out["offsets"] = np.full((n, max_length, 2), NO_CONTEXT, np.int32)
    out["start_positions"], out["end_positions"], out["example_index"] = (np.zeros(n, np.int32) for _ in range(3))
    for f, (i, ids, first, offs, start, end) in enumerate(rows):
        out["input_ids"][f, :len(ids)], out["attention_mask"][f, :len(ids)] = ids, 1
        out["token_type_ids"][f, first:len(ids)] = 1
        if offs:
            out["offsets"][f, first:first + len(offs)] = offs
        out["start_positions"][f], out["end_positions"][f], out["example_index"][f] = start, end, i
    return out


# --------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------

def decode(logits: np.ndarray, features: dict, examples, version_2: bool, n_best: int = 20,
           max_answer_length: int = 30, null_threshold: float = 0.0) -> list[dict]:
    """Each question's answer from its windows' start/end ``logits`` [F, S, 2] (see the module docstring): one dict per
    example, in order: ``answer`` (the text; "" for none), ``start``/``end`` (its characters in the context; None for
    none), ``score`` (its start + end logit), ``probability`` (softmax over the question's ``n_best`` best spans, and
    "no answer" in v2.0) and ``no_answer_score`` (the lowest [CLS] score over its windows)."""
    logits = np.asarray(logits, np.float64)
    by_example = collections.defaultdict(list)
    for f, i in enumerate(features["example_index"]):
        by_example[int(i)].append(f)
    out = []
    for i, ex in enumerate(examples):
        candidates, null = [], np.inf  # (score, char start, char end)
        for f in by_example[i]:
            st, en, off = logits[f, :, 0], logits[f, :, 1], features["offsets"][f]
            null = min(null, st[0] + en[0])
            ctx = off[:, 0] != NO_CONTEXT
            if not ctx.any():
                continue
            k = min(n_best, int(ctx.sum()))
            s_idx = np.argsort(np.where(ctx, -st, np.inf), kind="stable")[:k]
            e_idx = np.argsort(np.where(ctx, -en, np.inf), kind="stable")[:k]
            score = st[s_idx][:, None] + en[e_idx][None, :]
            length = e_idx[None, :] - s_idx[:, None]
            ok = (length >= 0) & (length < max_answer_length)
            for a, b in zip(*np.nonzero(ok)):
                candidates.append((score[a, b], int(off[s_idx[a], 0]), int(off[e_idx[b], 1])))
        best = {}  # one score per span: overlapping windows propose the same characters
        for c in candidates:
            if c[0] > best.get(c[1:], (-np.inf,))[0]:
                best[c[1:]] = c
        candidates = sorted(best.values(), key=lambda c: -c[0])[:n_best]
        scores = np.array([c[0] for c in candidates] + ([null] if version_2 and np.isfinite(null) else []))
        probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum() if len(scores) else scores
        no_answer = not candidates or (version_2 and null > candidates[0][0] + null_threshold)
        if no_answer:
            out.append({"answer": "", "start": None, "end": None, "score": float(null) if version_2 else None,
                        "probability": float(probs[-1]) if len(probs) else 1.0, "no_answer_score": float(null)})
        else:
            score, s, e = candidates[0]
            out.append({"answer": ex.context[s:e], "start": s, "end": e, "score": float(score),
                        "probability": float(probs[0]), "no_answer_score": float(null)})
    return out


# --------------------------------------------------------------------------------------------------
# The official scores
# --------------------------------------------------------------------------------------------------

def normalize_answer(s: str) -> str:
    """The SQuAD scripts' normalisation: lowercase, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_score(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of the normalised answers (v2.0's script: an empty answer scores 1 against an empty gold, else 0)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    same = sum((collections.Counter(pred) & collections.Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: list[str], examples) -> dict[str, float]:
    """Exact match and F1 (percent) of ``predictions`` against each example's gold answers (the best over them; a
    question with none has the gold answer "")."""
    exact, f1, has = [], [], []
    for pred, ex in zip(predictions, examples, strict=True):
        golds = [t for t, _ in ex.answers if normalize_answer(t)] or [""]
        exact.append(max(exact_score(pred, g) for g in golds))
        f1.append(max(f1_score(pred, g) for g in golds))
        has.append(bool(ex.answers))
    exact, f1, has = np.array(exact, np.float64), np.array(f1), np.array(has)
    out = {"exact_match": 100.0 * exact.mean(), "f1": 100.0 * f1.mean()}
    if not has.all():
        for name, sel in (("HasAns", has), ("NoAns", ~has)):
            if sel.any():
                out[f"{name}_exact"], out[f"{name}_f1"] = 100.0 * exact[sel].mean(), 100.0 * f1[sel].mean()
    return {k: float(v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------------
# The task
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SquadTask:
    """Extractive QA on SQuAD files (``config.data.kind = "question_answering"``): a ``tasks.Task``, scored by
    decoding each question's windows (``score``)."""

    name: str
    files: dict
    version_2: bool  # questions may have no answer
    max_query_length: int = 64
    doc_stride: int = 128
    max_answer_length: int = 30
    n_best: int = 20
    null_threshold: float = 0.0
    # what a question longer than max_query_length is told to change: fine-tuning's setting, or (predict) the run's
    query_setting: str = "config.data.max_query_length"

    kind, head, loss = "question_answering", "SqueezeBertForQuestionAnswering", "span_cross_entropy"
    is_regression, labels, num_labels = False, None, 2
    text_columns = ("question", "context")
    main_metric = "f1"
    eval_splits = property(lambda self: ("validation",) if "validation" in self.files else ())
    test_splits = property(lambda self: ("test",) if "test" in self.files else ())

    def check(self, max_length: int) -> None:
        """The window settings against ``max_length``, before anything is read."""
        for name in ("max_query_length", "max_answer_length", "n_best"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"config.data.{name}={getattr(self, name)!r}: an integer >= 1")
        if self.doc_stride < 0:
            raise InputError(f"config.data.doc_stride={self.doc_stride!r}: an integer >= 0")
        room = self.context_room(max_length)
        if self.doc_stride >= room:
            raise InputError(f"config.data.doc_stride={self.doc_stride} must be below the context's room in a window, "
                             f"{room} pieces (max_seq_length {max_length} - 3 - max_query_length "
                             f"{self.max_query_length}): lower doc_stride or raise max_seq_length")

    def context_room(self, max_length: int) -> int:
        """The context's pieces in a window of ``max_length`` tokens: after [CLS], [SEP] x2 and the question's
        ``max_query_length``; ``doc_stride`` must stay below it."""
        return max_length - 3 - self.max_query_length

    def load(self, split: str) -> list[QAExample]:
        examples = read_squad(self.files[split], labelled=split != "test")
        files.warn_texts(self.files[split], [(e.where.rpartition(":")[2], (e.question, e.context)) for e in examples])
        if not self.version_2 and split != "test" and (none := next((e for e in examples if not e.answers), None)):
            raise DataFileError(f"{none.where}: question {none.id!r} has no answer, but the training file has none "
                                f"such (SQuAD v1.1): put unanswerable questions in the training file too (v2.0)")
        return examples

    def encode(self, examples, tokenizer, max_length: int) -> dict:
        out = encode_features(examples, tokenizer, max_length, self.max_query_length, self.doc_stride,
                              self.query_setting)
        out["examples"] = list(examples)  # decoding maps the windows back to their question's context
        return out

    def answers(self, logits, features) -> list[dict]:
        return decode(logits, features, features["examples"], self.version_2, self.n_best, self.max_answer_length,
                      self.null_threshold)

    def score(self, logits, features) -> dict[str, float]:
        return squad_scores([a["answer"] for a in self.answers(logits, features)], features["examples"])

    def card(self) -> dict:
        """What ``predict`` needs to answer new questions as this run's evaluation did (``task.json``)."""
        return {"kind": self.kind, "version_2": self.version_2, "max_query_length": self.max_query_length,
                "doc_stride": self.doc_stride, "max_answer_length": self.max_answer_length, "n_best": self.n_best,
                "null_threshold": self.null_threshold}
