"""Your own data (squeezebert_jax.tasks): CSV / TSV / JSON Lines files as classification or regression tasks, trained
through finetune(); every loader error names the file, the line and the column."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import squeezebert_jax as sj
from conftest import ROOT, VOCAB, WORDS, glue_config, tiny_init
from squeezebert_jax import finetune as ft
from squeezebert_jax import files, losses, tasks
from squeezebert_jax.predict import numbered_inputs


def _init_dir(path):
    return tiny_init(path, VOCAB)


def _rows(n, seed):
    """Sentences whose label is which word set they hold, some with commas, quotes and newlines inside the field."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        y = int(rng.integers(0, 2))
        word = rng.choice(WORDS[:3] if y else WORDS[3:6])
        filler = " ".join(rng.choice(WORDS[6:], 3))
        text = f"{filler}, {word} {filler}" if i % 3 else f'{filler} "{word}"\n{filler}'
        out.append({"review": text, "sentiment": "positive" if y else "negative", "score": float(2 * y - 1)})
    return out


def _write_csv(path, rows, columns=("review", "sentiment")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            w.writerow([r[c] for c in columns])
    return path


def _files_config(init, train, dev, **kw):
    c = glue_config("rte", init, "", learning_rate=3e-3, num_epochs=3, dropout=0.0)
    c.task = "files"
    c.data.train_file, c.data.validation_file = str(train), str(dev)
    c.data.text_columns, c.data.label_column = "review", "sentiment"
    for k, v in kw.items():
        node, *path, last = [c, *k.split(".")]
        for p in path:
            node = node[p]
        node[last] = v
    return c


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    return _init_dir(tmp_path_factory.mktemp("tasks") / "init")


def test_a_csv_with_quoted_commas_and_newlines_trains_and_keeps_its_label_names(init, tmp_path):
    train, dev = _write_csv(tmp_path / "train.csv", _rows(384, 0)), _write_csv(tmp_path / "dev.csv", _rows(32, 1))
    task = tasks.resolve(_files_config(init, train, dev))
    examples = task.load("train")
    assert task.labels == ("negative", "positive") and len(examples) == 384
    assert examples[0].text_a.count("\n") == 1 and '"' in examples[0].text_a  # the quoted field, whole
    assert "," in examples[1].text_a
    test_rows = _rows(6, 2)
    test = _write_csv(tmp_path / "test.csv", test_rows, columns=("review",))  # a test file without labels
    res = ft.finetune(_files_config(init, train, dev, num_epochs=4, **{"data.test_file": str(test)}),
                      str(tmp_path / "run"))
    assert res["best"]["score"] == 1.0 and res["labels"] == ["negative", "positive"]
    assert {"validation/accuracy", "validation/f1", "validation/macro_f1"} <= set(res["best"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert model.config.id2label == {0: "negative", 1: "positive"}
    # the test file is predicted by the best model, a line per row in its order
    got = [json.loads(line) for line in open(res["predictions"]["test"])]
    assert [g["row"] for g in got] == [1, 2, 3, 4, 5, 6]
    assert [g["label"] for g in got] == [r["sentiment"] for r in test_rows]


def test_metrics_equal_sklearns():
    from sklearn.metrics import accuracy_score, f1_score

    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    t = tasks.FileTask("t", "classification", {"train": "x.csv"}, ("a",), "l", ("a", "b", "c"))
    m = t.metrics(p, y)
    assert m["accuracy"] == pytest.approx(accuracy_score(y, p))
    assert m["macro_f1"] == pytest.approx(f1_score(y, p, average="macro"))


def test_every_task_declares_its_kind_loss_head_card_and_score():
    """The run reads each part of a task off the task itself (``tasks.Task``), nothing off its batches."""
    from squeezebert_jax import glue, squad
    from squeezebert_jax.model import HEADS

    train = {"train": "x.csv"}
    declared = [  # (task, kind, loss, writes a card)
        (tasks.GlueTask(glue.get_task("sst2")), "classification", "cross_entropy", True),
        (tasks.GlueTask(glue.get_task("stsb")), "regression", "mse", True),
        (tasks.FileTask("t", "classification", train, ("a",), "l", ("x", "y")), "classification", "cross_entropy",
         True),
        (tasks.FileTask("t", "regression", train, ("a",), "l", None), "regression", "mse", True),
        (tasks.FileTask("t", "multilabel", train, ("a",), "l", ("x", "y")), "multilabel", "sigmoid_bce", True),
        (tasks.ConllTask("t", train, ("O", "B-PER")), "token_classification", "token_cross_entropy", False),
        (tasks.ChoiceTask("t", train, ("c",), ("e0", "e1"), "l"), "multiple_choice", "cross_entropy", True),
        (squad.SquadTask("t", train, False), "question_answering", "span_cross_entropy", True),
    ]
    assert {k for _, k, _, _ in declared} == set(tasks.KINDS) and {s for _, _, s, _ in declared} == set(losses.LOSSES)
    for task, kind, loss, card in declared:
        assert (task.kind, task.loss, task.head in HEADS) == (kind, loss, True), task
        assert (task.card() is not None) == card and (not card or task.card()["kind"] == kind), task
    rng = np.random.default_rng(0)
    for task in (declared[0][0], declared[2][0], declared[6][0]):  # score: the metrics of the labels
        logits, labels = rng.normal(size=(12, 2)), rng.integers(0, 2, 12)
        assert task.score(logits, {"labels": labels}) == task.metrics(logits, labels)


def test_a_jsonl_sentence_pair_regression(init, tmp_path):
    def write(path, n, seed):
        rng = np.random.default_rng(seed)
        with open(path, "w") as f:
            for _ in range(n):  # the score is the count of WORDS[0] (as the STS-B test's)
                k = int(rng.integers(0, 6))
                a = " ".join([WORDS[0]] * k + list(rng.choice(WORDS[6:], 5 - k)))
                f.write(json.dumps({"premise": a, "hypothesis": "the movie", "y": k}) + "\n")
        return path

    train, dev = write(tmp_path / "train.jsonl", 256, 0), write(tmp_path / "dev.jsonl", 32, 1)
    c = _files_config(init, train, dev, **{"data.text_columns": "premise,hypothesis", "data.label_column": "y",
                                           "data.kind": "regression", "learning_rate": 2e-3})
    task = tasks.resolve(c)
    assert task.num_labels == 1 and task.load("validation")[0].text_b is not None
    res = ft.finetune(c, str(tmp_path / "run"))
    first, last = res["history"][0], res["history"][-1]
    assert last["validation/mse"] < first["validation/mse"] and res["best"]["validation/pearson"] > 0.5


@pytest.mark.parametrize("name, text, kw, msg", [
    ("missing_column.csv", "text,sentiment\nfoo,positive\nbar,negative\n", {},
     r"missing_column.csv:1: the header has no column 'review' \(has text, sentiment\); name yours with "
     r"config.data.text_columns"),
    ("one_label.csv", "review,sentiment\nfoo,positive\n", {}, r"one_label.csv: column 'sentiment' has one label"),
    ("one_named.csv", "review,sentiment\nfoo,positive\n", {"data.labels": "positive"},
     r"config.data.labels='positive' names one label \('positive'\); a classifier needs two or more"),
    ("no_label.csv", "review,stars\nfoo,positive\n", {},
     r"no_label.csv:1: the header has no label column 'sentiment' \(has review, stars\); name yours with "
     r"config.data.label_column"),
    ("undeclared.csv", "review,sentiment\nfoo,positive\nbar,neutral\n", {"data.labels": "negative,positive"},
     r"undeclared.csv:3: column 'sentiment': label 'neutral' is not one of \['negative', 'positive'\]"),
    ("empty.csv", "review,sentiment\n", {"data.labels": "negative,positive"}, r"empty.csv: no rows"),
    ("fields.csv", "review,sentiment\nfoo,positive,extra\n", {"data.labels": "negative,positive"},
     r"fields.csv:2: 3 fields, the header has 2"),
    ("bad.jsonl", '{"review": "a", "sentiment": "positive"}\n{"review": oops}\n', {"data.labels": "negative,positive"},
     r"bad.jsonl:2: not a JSON object"),
    ("score.csv", "review,sentiment\nfoo,nan\n", {"data.kind": "regression"},
     r"score.csv:2: column 'sentiment': 'nan' is not a finite number"),
    # a number no float holds, written as text: a score or a label "0" the file does not hold (Decimal's own range
    # ended in its InvalidOperation traceback); a label nested past the parser, one line
    ("tinyscore2.csv", "review,sentiment\nfoo,1\nbar,\u22121e-400\n", {"data.kind": "regression"},  # U+2212
     r"tinyscore2.csv:3: column 'sentiment': '\u22121e-400' is below a float's range"),
    ("tinyscore.csv", "review,sentiment\nfoo,1\nbar,1e-400\n", {"data.kind": "regression"},
     r"tinyscore.csv:3: column 'sentiment': '1e-400' is below a float's range \(it reads as 0"),
    ("tinylabel.csv", "review,sentiment\nfoo,pos\nbar,1e-99999999999999999999\n", {},
     r"tinylabel.csv:3: column 'sentiment': the label '1e-99999999999999999999' is a number no label's value holds"),
    ("nested.csv", "review,sentiment\nfoo,pos\nbar," + "[" * 1000 + "]" * 1000 + "\n", {},
     r"nested.csv:3: column 'sentiment': the label '\[\[\[.*' reads as several labels"),
    ("score2.csv", "review,sentiment\nfoo,good\n", {"data.kind": "regression"},
     r"score2.csv:2: column 'sentiment': 'good' is not a number"),
    ("score3.csv", "review,sentiment\nfoo,1_000\n", {"data.kind": "regression"},
     r"score3.csv:2: column 'sentiment': '1_000' is not a number"),
    # what Python's float() reads and no data file means as a score: full-width and Devanagari digits, a decimal comma
    ("score3b.csv", "review,sentiment\nfoo,1.5\nbar,\uff11\n", {"data.kind": "regression"},
     r"score3b.csv:3: column 'sentiment': '\uff11' is not a number"),
    ("score3c.csv", "review,sentiment\nfoo,\u0967.\u096b\n", {"data.kind": "regression"},
     r"score3c.csv:2: column 'sentiment': '\u0967.\u096b' is not a number"),
    ("score3d.jsonl", '{"review": "a", "sentiment": "1,5"}\n', {"data.kind": "regression"},
     r"score3d.jsonl:1: column 'sentiment': '1,5' is not a number"),
    # a JSON value shown as the file writes it (JSON's true, not Python's True)
    ("score3e.jsonl", '{"review": "a", "sentiment": true}\n', {"data.kind": "regression"},
     r"score3e.jsonl:1: column 'sentiment': a boolean true is not a number"),
    ("score4.csv", "review,sentiment\nfoo,1\nbar,1e39\n", {"data.kind": "regression"},
     r"score4.csv:3: column 'sentiment': '1e39' is not a finite number a float32 holds"),
    ("score5.jsonl", '{"review": "a", "sentiment": 1' + "0" * 400 + '}\n', {"data.kind": "regression"},
     r"score5.jsonl:1: the number 1000000000000000000000000000000000000000\.\.\. is beyond a float's range"),
    # a score float32 holds whose squared error it does not: the first step's loss would be inf
    ("score6.csv", "review,sentiment\nfoo,1\nbar,-1e30\n", {"data.kind": "regression"},
     r"score6.csv:3: column 'sentiment': '-1e30' is too large a score to train on: a batch's squared errors overflow"),
    # ... nor whose batch's sum: 1.7e19 squared is within float32, a batch of them is not (it said "diverged")
    ("score7.csv", "review,sentiment\nfoo,1\nbar,1.7e19\n", {"data.kind": "regression"},
     r"score7.csv:3: column 'sentiment': '1.7e19' is too large a score to train on: .*\(\|x\| < 7.2e\+16\)"),
    # a missing value as a database dump or a spreadsheet writes one, in a score column or a label column
    ("score8.csv", "review,sentiment\nfoo,1\nbar,\\N\n", {"data.kind": "regression"},
     r"score8.csv:3: column 'sentiment': '\\\\N' is how a spreadsheet or a database dump writes a missing value"),
    ("excel.csv", "review,sentiment\nfoo,pos\nbar,#VALUE!\nbaz,neg\n", {},
     r"excel.csv:3: column 'sentiment': the label '#VALUE!' is how spreadsheets and pandas write a missing value"),
    ("data.txt", "foo\n", {}, r"data.txt: unknown file type '.txt'"),
    # a missing value as spreadsheets and pandas write one is no class (unless config.data.labels names it)
    ("marker.csv", "review,sentiment\nfoo,positive\nbar,#N/A\nbaz,negative\n", {},
     r"marker.csv:3: column 'sentiment': the label '#N/A' is how spreadsheets and pandas write a missing value"),
    ("marker2.jsonl", '{"review": "a", "sentiment": "pos"}\n{"review": "b", "sentiment": "NULL"}\n', {},
     r"marker2.jsonl:2: column 'sentiment': the label 'NULL' is how"),
    # ... in every locale and tool: an error cell's family, LibreOffice's, SAS's and ARFF's, a null in brackets
    *[(f"marker{i}.csv", f"review,sentiment\nfoo,positive\nbar,{m}\nbaz,negative\n", {},
       rf"marker{i}.csv:3: column 'sentiment': the label '{re.escape(m)}' is how spreadsheets and pandas write")
      for i, m in enumerate(("#NV", "#WERT!", "#¡VALOR!", "Err:502", ".", "?", "(null)", "<NULL>", "ＮＵＬＬ",
                             # a pivot table's empty cell, n.a. typed, a column too narrow, dashes, an empty string,
                             # object or tuple written out
                             "(blank)", "N.A.", "########", "--", "\u2014", "{}", "()",
                             # ... with spaces inside, other dashes, other brackets, an ellipsis
                             "( )", "n. a.", "\u2010\u2010", "\u2013 \u2013", "[blank]", "<empty>", "...", "\u2026"))],
    # pandas' NaN as a label, named as such; a stray quote left by CSV quoting (a TSV's last line: pos")
    ("nanlabel.csv", "review,sentiment\nfoo,pos\nbar,nan\n", {},
     r"nanlabel.csv:3: column 'sentiment': the label 'nan' is not a finite number \(NaN: how pandas writes a missing"),
    ("endquote.tsv", 'review\tsentiment\nfoo\tneg\nbar\tpos"\n', {},
     r"endquote.tsv:3: column 'sentiment': the label 'pos\"' holds a stray quote at its end"),
    # the header again under other names (two files joined): its label cell is a column's name
    ("renamed.csv", "review,sentiment\nfoo,pos\nreview text,sentiment\nbar,neg\n", {},
     r"renamed.csv:3: column 'sentiment': the label 'sentiment' is a column's name: the header line again"),
    # a file of another format than its name's: JSON Lines named .csv, a CSV named .jsonl
    ("jl.csv", '{"review": "a", "sentiment": "pos"}\n', {}, r"jl.csv:1: a JSON object per line \(JSON Lines\), read as "
                                                             r"CSV by the file's name: name it .jsonl"),
    ("c.jsonl", "review,sentiment\nfoo,pos\n", {}, r"c.jsonl:1: not a JSON object .*; the line reads as a CSV or TSV "
                                                    r"header: name the file .csv or .tsv"),
    # the separator hint for a pipe too
    ("pipes.csv", "review|sentiment\nfoo|pos\n", {}, r"pipes.csv:1: .*the header is pipe-separated"),
    # an integer no float holds: one line, not Python's digit limit (4,300) traceback nor a crash in the message
    ("bigint.jsonl", '{"review": "a", "sentiment": 1' + "0" * 5000 + '}\n', {},
     r"bigint.jsonl:1: the number 1000000000000000000000000000000000000000\.\.\. is beyond a float's range"),
    # a text no tokenizer encodes, in any split: named by file, line and column when read
    ("surrogate.jsonl", '{"review": "bad \\udc80 film", "sentiment": "pos"}\n', {"data.labels": "neg,pos"},
     r"surrogate.jsonl:1: column 'review' holds a lone surrogate '\\udc80' at character 5"),
    # a file whose separator is not its extension's: the header as one name, told as such
    ("tabs.csv", "review\tsentiment\nfoo\tpos\n", {},
     r"tabs.csv:1: the header has no label column 'sentiment' \(has 'review\\tsentiment'\); the header is "
     r"tab-separated, but a .csv file is read comma-separated: name the file .tsv$"),
    ("semi.csv", "review;sentiment\nfoo;pos\n", {}, r"semi.csv:1: .*semicolon-separated.*save it comma-separated"),
    ("commas.tsv", "review,sentiment\nfoo,pos\n", {}, r"commas.tsv:1: .*comma-separated.*name the file .csv"),
    # CSV's quoting in a TSV (pandas' to_csv(sep="\t")): a quoted line break or tab, refused where it starts
    ("quoted_break.tsv", 'review\tsentiment\n"first line\nsecond"\tpos\nok\tneg\n', {},
     r"quoted_break.tsv:2: a text in quotes runs on to line 3"),
    ("quoted_tab.tsv", 'review\tsentiment\n"a\tb"\tpos\n', {}, r"quoted_tab.tsv:2: a text in quotes holds a tab"),
    ("quoted_both.tsv", 'review\tsentiment\n"a\tb\nc"\tpos\nok\tneg\n', {},
     r"quoted_both.tsv:2: a text in quotes runs on to line 3"),
    ("quoted_long.tsv", 'review\tsentiment\n"' + "line\n" * 30 + 'end"\tpos\n', {},
     r"quoted_long.tsv:2: a text in quotes runs on to line 32"),
    # declared classes that differ only in what draws nothing: one class named twice
    ("zwsp.csv", "review,sentiment\nfoo,pos\nbar,neg\n", {"data.labels": "neg,pos,pos\u200b"},
     r"config.data.labels='neg,pos,pos\\u200b' names 'pos' and 'pos\\u200b', which differ only in invisible"),
])
def test_loader_errors_name_file_line_and_column(tmp_path, name, text, kw, msg):
    path = tmp_path / name
    path.write_text(text)
    good = _write_csv(tmp_path / "good.csv", _rows(8, 0))
    with pytest.raises(sj.errors.InputError, match=msg):
        _load_all(_files_config("unused", path, good, **kw))


def test_regression_scores_that_do_not_vary(tmp_path, caplog):
    """A validation file whose scores are all one value (or one row) has no Pearson or Spearman correlation: every
    epoch scored NaN and the first one exported as the best; refused by file. Training on one value: a warning."""
    train = tmp_path / "train.csv"
    train.write_text("review,sentiment\na,1\nb,2.5\nc,4\n")
    for body, what in (("review,sentiment\nx,3\ny,3.0\nz,3e0\n", "all 3 scores are 3"),
                       # scores that differ only below float32's range: all 0 as the model trains
                       ("review,sentiment\nx,1e-50\ny,2e-50\n", r"all 2 scores are 1e-50 \(0 in float32, as the model "
                                                                 r"trains\)"),
                       ("review,sentiment\nx,2\n", r"one row \(score 2\)")):
        (tmp_path / "dev.csv").write_text(body)
        with pytest.raises(sj.errors.DataFileError, match=rf"dev.csv: {what}: Pearson and Spearman correlation are "
                                                          "undefined on scores that do not vary"):
            _load_all(_files_config("unused", train, tmp_path / "dev.csv", **{"data.kind": "regression"}))
    with caplog.at_level("WARNING"):
        rows = _load_all(_files_config("unused", tmp_path / "dev.csv", train, **{"data.kind": "regression"}))
    assert len(rows["train"]) == 1
    assert "dev.csv: one row (score 2): the model can only learn that one value" in caplog.text
    # the training file as the validation file, by another name: the best epoch picked on trained rows (a warning)
    tasks.resolve(_files_config("unused", train, tmp_path / "." / "train.csv", **{"data.kind": "regression"}))
    assert f"config.data.validation_file is the training file ({train})" in caplog.text
    # ... and as the test file: its predictions are of trained rows (a warning, once per resolve)
    caplog.clear()
    c = _files_config("unused", train, tmp_path / "dev.csv", **{"data.kind": "regression"})
    c.data.test_file = str(tmp_path / "." / "train.csv")
    tasks.resolve(c)
    assert caplog.text.count(f"config.data.test_file is the training file ({train}): the best model's predictions "
                             "are of rows it trained on") == 1 and "validation_file is" not in caplog.text


def _load_all(config):
    """What fine-tuning reads before it trains: the task, then every split's rows."""
    task = tasks.resolve(config)
    return {s: task.load(s) for s in ("train", *task.eval_splits, *task.test_splits)}


def _labels_of(tmp_path, name, body, **kw):
    (tmp_path / name).write_bytes(body.encode() if isinstance(body, str) else body)
    c = _files_config("unused", tmp_path / name, tmp_path / name, **kw)
    task = tasks.resolve(c)
    return task, task.load("train")


# ---- labels are read as values, one label per row: tasks.label_key / label_keys / declared_labels -------------------

def test_a_label_is_its_value_in_every_spelling_and_format(tmp_path):
    csv_task, csv_rows = _labels_of(tmp_path, "a.csv", "review,sentiment\nw,1\nx,1.0\ny,+1\nz,0\nv,0.0\nu,1e0\n")
    jsonl = "".join(json.dumps({"review": t, "sentiment": y}) + "\n" for t, y in
                    (("w", 1), ("x", 1.0), ("y", "1"), ("z", 0), ("v", "0.00"), ("u", 1e0)))
    json_task, json_rows = _labels_of(tmp_path, "a.jsonl", jsonl)
    assert csv_task.labels == json_task.labels == ("0", "1")
    assert [e.label for e in csv_rows] == [e.label for e in json_rows] == [1, 1, 1, 0, 0, 1]
    b_task, _ = _labels_of(tmp_path, "b.jsonl", '{"review": "a", "sentiment": true}\n{"review": "b", "sentiment": '
                                                 'false}\n{"review": "c", "sentiment": "True"}\n')
    assert b_task.labels == ("false", "true")
    f_task, _ = _labels_of(tmp_path, "f.csv", "review,sentiment\na,0.5\nb,0.50\nc,2\n")
    assert f_task.labels == ("0.5", "2")  # numbers sort by value
    # the minus sign as typesetting writes it (U+2212) is a minus: one class with -1, and a score of -1.5
    m_task, m_rows = _labels_of(tmp_path, "m.csv", "review,sentiment\na,\u22121\nb,-1\nc,1\n")
    assert m_task.labels == ("-1", "1") and [e.label for e in m_rows] == [0, 0, 1]
    _, r_rows = _labels_of(tmp_path, "r.csv", "review,sentiment\na,\u22121.5\nb,2\n", **{"data.kind": "regression"})
    assert [e.label for e in r_rows] == [-1.5, 2.0]


def test_a_text_column_numbered_like_the_one_read_is_not_left_unread(tmp_path, caplog):
    """sentence2 beside the default text column sentence: a pair trained as single sentences, without a word.
    Refused for the default columns; columns chosen by name are taken as meant, with a warning."""
    body = "sentence,sentence2,sentiment\na,b,pos\nc,d,neg\n"
    with pytest.raises(sj.errors.DataFileError, match=r"p.csv:1: column 'sentence2' is numbered like sentence, which "
                                                      r"is read, but is not read itself: name every text column in "
                                                      r"config.data.text_columns \(sentence,sentence2 reads a pair\)"):
        _labels_of(tmp_path, "p.csv", body, **{"data.text_columns": "sentence"})
    for i, other in enumerate(("sentence_2", "Sentence2", "sentence.1",  # in any case, separator, pandas' form
                               "sentence_b", "Sentence-B")):  # ... or lettered: BERT's text_a / text_b
        with pytest.raises(sj.errors.DataFileError, match=rf"p{i}.csv:1: column '{re.escape(other)}' is numbered like "
                                                          r"sentence"):
            _labels_of(tmp_path, f"p{i}.csv", body.replace("sentence2", other), **{"data.text_columns": "sentence"})
    # the label column lettered like the text (sentence_y) is read: as the label
    _labels_of(tmp_path, "y.csv", "sentence,sentence_y\na,pos\nc,neg\n", **{"data.label_column": "sentence_y",
                                                                         "data.text_columns": "sentence"})
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        _labels_of(tmp_path, "q.csv", body.replace("sentence,", "text1,", 1).replace("sentence2", "text2"),
                   **{"data.text_columns": "text1"})
    assert "q.csv:1: column 'text2' is numbered like text1, which is read, but is not read itself; " \
           "config.data.text_columns names the columns read" in caplog.text


def test_texts_that_are_missing_value_markers_are_counted_in_a_warning(tmp_path, caplog):
    """pandas' astype(str) writes a missing text as "nan": trained on as the word, without a word. A warning counts
    the rows (a one-word text "None" may be meant); predict's inputs alike."""
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        _labels_of(tmp_path, "t.csv", "review,sentiment\na film,pos\nnan,neg\nNone,pos\nfine,neg\n")
        (tmp_path / "p.txt").write_text("good\n#N/A\n")
        assert len(numbered_inputs(str(tmp_path / "p.txt"))) == 2
    assert f"{tmp_path / 't.csv'}: 2 of 4 rows have a text that is how pandas or a spreadsheet writes a missing " \
           "value ('nan' at line 3): each is read as that word" in caplog.text
    assert f"{tmp_path / 'p.txt'}: 1 of 2 rows have a text that is how pandas" in caplog.text
    # an empty string written out is a marker; a lone dash may be a class (+ and -), two are no name
    assert all(map(files.is_missing_marker, ("''", '""', " ' ' ", "---"))) and not files.is_missing_marker("-")
    # a special token written out in a text ("question [SEP] answer": a pair joined by hand) is read as that token,
    # as BertTokenizerFast reads it: counted in a warning, for training, multiple choice and predict alike
    caplog.clear()
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        _labels_of(tmp_path, "s.csv", "review,sentiment\na film,pos\nwhy? [SEP] because,neg\n[MASK] it,pos\n"
                                      "[sep] in lower case is text,neg\n")
        (tmp_path / "q.txt").write_text("good\nthe [CLS] one\n")
        numbered_inputs(str(tmp_path / "q.txt"))
    assert f"{tmp_path / 's.csv'}: 2 of 4 rows have a text holding a special token written out ([SEP] at line 3): " \
           "the tokenizer reads it as that token, as transformers' does" in caplog.text
    assert f"{tmp_path / 'q.txt'}: 1 of 2 rows have a text holding a special token written out ([CLS] at line 2)" \
        in caplog.text
    from transformers import BertTokenizerFast  # the reference reads it so (what the warning says)
    vocab = [*files.SPECIAL_TEXTS, "why", "?", "because"]
    (tmp_path / "v.txt").write_text("\n".join(vocab) + "\n")
    assert BertTokenizerFast(str(tmp_path / "v.txt"))("why? [SEP] because")["input_ids"] == [0, 5, 6, 1, 7, 1]


@pytest.mark.parametrize("name, value", [("text_columns", ["text"]), ("text_columns", None), ("train_file", b"t.csv"),
                                         ("test_file", ["x"]), ("labels", ("neg", "pos"))])
def test_a_data_setting_of_another_type_is_one_line(tmp_path, name, value):
    """From a notebook: a list of columns, a Path or bytes for a file was an AttributeError or a TypeError."""
    c = _files_config("unused", tmp_path / "train.csv", tmp_path / "dev.csv")
    with c.data.ignore_type():  # as a notebook's ConfigDict of its own holds them
        c.data[name] = value
    with pytest.raises(sj.errors.InputError, match=rf"^config.data.{name} is {type(value).__name__} .*; give it as a "
                                                   r"str"):
        tasks.resolve(c)


def test_numbers_as_many_classes_are_named_in_a_warning(tmp_path, caplog):
    """Scores given to a classifier (data.kind's default): each value a class of its own, one row each."""
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        task, _ = _labels_of(tmp_path, "s.csv", "review,sentiment\na,0.2\nb,1.7\nc,3.4\nd,4.8\n")
        _labels_of(tmp_path, "c.csv", "review,sentiment\na,0\nb,1\nc,2\nd,1\ne,0\nf,2\nh,1\n")  # classes 0-2
        codes, _ = _labels_of(tmp_path, "z.csv", "review,sentiment\na,001\nb,002\nc,001\nd,002\n")  # codes?
        versions = tasks.declared_labels("1.10,1.2", "config.data.labels")  # a version's trailing zero, declared
    assert task.labels == ("0.2", "1.7", "3.4", "4.8")
    assert [r.getMessage() for r in caplog.records if "are numbers" in r.getMessage()] == [
        f"{tmp_path / 's.csv'}: the 4 classes of column 'sentiment' are numbers (0.2, 1.7, 3.4, 4.8): each becomes a "
        "class of its own; scores to predict as a number are config.data.kind=regression"]
    assert codes.labels == ("1", "2") and f"{tmp_path / 'z.csv'}: labels such as '001' (line 2) are read as numbers " \
        "(1), and the model names its classes so: class codes that only look like numbers are names: write them so " \
        "(c001)" in caplog.text
    assert versions == ("1.1", "1.2")
    assert "config.data.labels='1.10,1.2': '1.10' is read as the number 1.1" in caplog.text


@pytest.mark.parametrize("body, msg", [
    ("review,sentiment\na,pos\nb,\n", r"e.csv:3: column 'sentiment': the label is empty"),
    ("review,sentiment\na,pos\nb,   \n", r"e.csv:3: column 'sentiment': the label is empty"),
    ('{"review": "a", "sentiment": "pos"}\n{"review": "b", "sentiment": null}\n', r"e.jsonl:2: .*the label is null"),
    ('{"review": "a", "sentiment": ["pos"]}\n', r'e.jsonl:1: .*a list \["pos"\] is not one label .*multilabel'),
    ('{"review": "a", "sentiment": {"y": 1}}\n', r'e.jsonl:1: .*an object \{"y": 1\} is not one label'),
    ('{"review": "a", "sentiment": "pos"}\n{"review": true, "sentiment": "neg"}\n',
     r"e.jsonl:2: column 'review' holds a boolean true, not text"),
    ('{"review": "a", "sentiment": "pos"}\n{"review": null, "sentiment": "neg"}\n',
     r"e.jsonl:2: column 'review' holds null, not text"),
    ('{"review": "a", "sentiment": "pos"}\n[1, 2]\n', r"e.jsonl:2: a list \(\[1, 2\]\), not a JSON object$"),
    # a .json array of records on one line: named as such (JSON Lines holds an object per line)
    ('[{"review": "a", "sentiment": "pos"}, {"review": "b", "sentiment": "neg"}]\n',
     r"e.jsonl:1: a list .*, not a JSON object; the line is a JSON array of rows: JSON Lines holds one object per "
     r"line"),
    ('{"review": "a", "sentiment": "pos"}\n{"review": "b\\u0000c", "sentiment": "neg"}\n',
     r"e.jsonl:2: column 'review' holds a NUL character at character 2, which no text holds"),
    # quoted as the file writes it ('+1', not the value's '1')
    ("review,sentiment\na,pos\nb,+1\n", r"e.csv:3: column 'sentiment': the label '\+1' in a column of names \('pos' "
                                        r"at line 2\)"),
    # a full-width or Arabic-Indic digit is no number (it was merged into the class 1, with a warning only)
    ("review,sentiment\na,\uff11\nb,1\nc,0\n", r"e.csv:3: column 'sentiment': the label '1' in a column of names "
                                             "\\('\uff11' at line 2\\)"),
    ("review,sentiment\na,0\nb,\u0661\nc,2\n", r"e.csv:3: column 'sentiment': the label '\u0661' in a column of "
                                             "numbers"),
    ("review,sentiment\na,pos\nb,NaN\n", r"e.csv:3: column 'sentiment': the label 'NaN' is not a finite number"),
    ("review,sentiment\na,pos\nb,-inf\n", r"e.csv:3: column 'sentiment': the label '-inf' is not a finite number"),
    ("review,sentiment\na,pos\nb,\u200b\n", r"e.csv:3: .*the label is empty \(only white space or invisible marks\)"),
    ("review,sentiment\na,pos\nb,\u3164\n", r"e.csv:3: .*the label is empty \(only white space or invisible marks\)"),
    ('{"review": "a", "sentiment": "pos"}\n{"review": "b", "sentiment": "neg\\udc80"}\n',
     r"e.jsonl:2: .*the label 'neg\\udc80' holds a lone surrogate"),
    # a control character: "pos\x07" was a third class beside "pos", shown alike
    ("review,sentiment\na,pos\nb,pos\x07\n", r"e.csv:3: column 'sentiment': the label 'pos\\x07' holds the control "
                                          r"character U\+0007"),
    ('{"review": "a", "sentiment": "pos"}\n{"review": "b", "sentiment": "\\u0000neg"}\n',
     r"e.jsonl:2: .*the label '\\x00neg' holds the control character U\+0000"),
    ('{"review": "a", "sentiment": "pos"}\n{"review": "b", "sentiment": "ne\\u007fg"}\n', r"U\+007F"),
    # a space before the opening quote: CSV keeps the quotes, which made '"pos"' a class of its own
    ('review,sentiment\na,pos\nb, "pos"\n', r"e.csv:3: field 2 \('\"pos\"'\) opens its quote after a space"),
])
def test_a_row_without_one_label_is_refused(tmp_path, body, msg):
    name = "e.jsonl" if body.startswith(("{", "[{")) else "e.csv"
    with pytest.raises(sj.errors.DataFileError, match=msg):
        _labels_of(tmp_path, name, body)


def test_a_declared_label_no_training_row_has_is_named_in_a_warning(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.tasks"):
        task, _ = _labels_of(tmp_path, "d.csv", "review,sentiment\na,pos\nb,neg\n", **{"data.labels": "neg,pos,meh"})
        _labels_of(tmp_path, "e.csv", "review,sentiment\na,pos\nb,neg\n")
    assert task.labels == ("neg", "pos", "meh")
    assert [r.getMessage() for r in caplog.records if "is the training file" not in r.getMessage()] == [
        f"{tmp_path / 'd.csv'}: no training row has the label(s) 'meh' of config.data.labels: the classifier's output "
        "for them is never trained towards"]


def test_a_csv_field_longer_than_the_csv_modules_default_limit_is_read(tmp_path):
    long = "good " * 40_000  # 200,000 characters: a long document in one quoted field
    _, rows = _labels_of(tmp_path, "long.csv", f'review,sentiment\n"{long}",pos\nshort,neg\n')
    assert rows[0].text_a.split() == long.split() and rows[1].text_a == "short"


def test_labels_are_values_exactly_and_text_in_one_unicode_form(tmp_path):
    """Whole numbers past float precision stay apart (2**53 + 1 is not 2**53); a text label typed with a combining
    accent is the same class as its composed form; a compatibility form (full-width letters) is refused."""
    big = 2 ** 53
    task, rows = _labels_of(tmp_path, "n.csv", f"review,sentiment\na,{big}\nb,{big + 1}\nc,5\nd,{big}.0\n")
    assert task.labels == ("5", str(big), str(big + 1)) and [r.label for r in rows] == [1, 2, 0, 1]
    task, _ = _labels_of(tmp_path, "j.jsonl", f'{{"review": "a", "sentiment": {big + 1}}}\n'
                                               f'{{"review": "b", "sentiment": "{big}"}}\n')
    assert task.labels == (str(big), str(big + 1))
    task, rows = _labels_of(tmp_path, "u.csv", "review,sentiment\na,caf\u00e9\nb,cafe\u0301\nc,neg\n")
    assert task.labels == ("caf\u00e9", "neg") and [r.label for r in rows] == [0, 0, 1]
    with pytest.raises(sj.errors.DataFileError, match=r"w.csv:3: column 'sentiment': the label 'ｐｏｓ' differs from "
                                                      r"'pos' \(line 2\) only in case, form, invisible"):
        _labels_of(tmp_path, "w.csv", "review,sentiment\na,pos\nb,ｐｏｓ\n")
    with pytest.raises(sj.errors.DataFileError, match=r"c.csv:3: column 'sentiment': the label '\u0440os' differs "
                                                      r"from 'pos' \(line 2\) only in case, form, invisible characters "
                                                      r"or letters or punctuation drawn alike"):  # a Cyrillic er
        _labels_of(tmp_path, "c.csv", "review,sentiment\na,pos\nb,\u0440os\n")
    # dashes, apostrophes and quotes as autocorrect writes them: a hyphen (U+2010), an en dash, a minus sign, a right
    # single quotation mark, a modifier letter apostrophe, curly double quotes
    for odd, usual in (("non\u2010toxic", "non-toxic"), ("non\u2013toxic", "non-toxic"), ("\u22121 x", "-1 x"),
                       ("\u20101", "-1"),  # a number with such a dash: the same number, not a name beside numbers
                       ("don\u2019t", "don't"), ("don\u02bct", "don't"), ("\u201cok\u201d", '"ok"')):
        with pytest.raises(sj.errors.DataFileError, match=r"p.jsonl:2: .*differs from .* only in case, form, "
                                                          r"invisible characters or letters or punctuation drawn"):
            _labels_of(tmp_path, "p.jsonl", json.dumps({"review": "a", "sentiment": usual}) + "\n"
                       + json.dumps({"review": "b", "sentiment": odd}) + "\n")
    task, _ = _labels_of(tmp_path, "g.csv", "review,sentiment\na,\u03b1-helix\nb,a-helix\n")  # alpha: no look-alike
    assert task.labels == ("a-helix", "\u03b1-helix")
    # values no float holds stay apart (both were 0.0, a class apart from 0); 1_000 is 1000 or a name: refused
    task, _ = _labels_of(tmp_path, "t.csv", "review,sentiment\na,1e-400\nb,2E-400\nc,0\nd,0.0\n")
    assert task.labels == ("0", "1e-400", "2e-400")
    with pytest.raises(sj.errors.DataFileError, match=r"x.csv:3: column 'sentiment': the label '1_000' is a number "
                                                      r"written with '_'; write it without \(1000\)"):
        _labels_of(tmp_path, "x.csv", "review,sentiment\na,1000\nb,1_000\n")
    with pytest.raises(sj.errors.DataFileError, match=r"b.jsonl:3: column 'sentiment': the label 'true' in a column "
                                                      r"of numbers \('0' at line 1\)"):
        _labels_of(tmp_path, "b.jsonl", '{"review": "a", "sentiment": 0}\n{"review": "b", "sentiment": 1}\n'
                                        '{"review": "c", "sentiment": true}\n')
    # numbers beside names, either first: a name for a number ("1,000" is no number), or a third class?
    mixed = '{"review": "a", "sentiment": "neg"}\n{"review": "b", "sentiment": 1}\n'
    for name, body, msg in (("m.jsonl", mixed, r"m.jsonl:2: column 'sentiment': the label '1' in a column of names "
                                               r"\('neg' at line 1\)"),
                            ("m.csv", 'review,sentiment\na,1000\nb,"1,000"\n',
                             r"m.csv:3: column 'sentiment': the label '1,000' in a column of numbers \('1000' at line "
                             r"2\): write each class one way, all numbers or all names, or name every class in "
                             r"config.data.labels")):
        with pytest.raises(sj.errors.DataFileError, match=msg):
            _labels_of(tmp_path, name, body)
    task, rows = _labels_of(tmp_path, "m.jsonl", mixed, **{"data.labels": "neg,1"})  # named: two classes, as meant
    assert task.labels == ("neg", "1") and [r.label for r in rows] == [0, 1]


def test_two_spellings_of_one_number_are_one_class_and_said(tmp_path, caplog):
    """Labels are values (1 and 1.0 one class), so codes that only look like numbers (007 and 7, 1.1 and 1.10) merge:
    trained as one class, and the log says which spellings and lines."""
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        task, rows = _labels_of(tmp_path, "c.csv", "review,code\na,007\nb,7\nc,1.1\nd,1.10\ne,2\n",
                                **{"data.label_column": "code"})
    assert task.labels == ("1.1", "2", "7") and [r.label for r in rows] == [2, 2, 0, 0, 1]
    said = [r.getMessage() for r in caplog.records if "are one class" in r.getMessage()]
    assert len(said) == 2 and "'007' (line 2) and '7' (line 3) are one class, 7" in said[0], said
    assert "'1.1' (line 4) and '1.10' (line 5) are one class, 1.1" in said[1], said
    # a multilabel row's labels alike, each as the row writes it (they went unsaid)
    caplog.clear()
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        task, rows = _labels_of(tmp_path, "m.csv", "review,codes\na,007|12\nb,7\nc,[\"010\"]\n",
                                **{"data.label_column": "codes", "data.kind": "multilabel"})
    assert task.labels == ("7", "10", "12")
    assert "m.csv: the labels '007' (line 2) and '7' (line 3) are one class, 7" in caplog.text
    assert "m.csv: labels such as '007' (line 2) are read as numbers (7)" in caplog.text
    for mark in ("\u200b", "\u200d", "\ufeff", "\u00ad"):  # zero-width space and joiner, a BOM, a soft hyphen
        with pytest.raises(sj.errors.DataFileError, match=r"i.csv:3: column 'sentiment': the label 'p?o?s?\\(u|x)"
                                                          r".*' differs from 'pos' \(line 2\) only in case, form"):
            _labels_of(tmp_path, "i.csv", f"review,sentiment\na,pos\nb,{mark}pos\n" if mark == "\ufeff" else
                       f"review,sentiment\na,pos\nb,po{mark}s\n")


def test_labels_that_differ_only_in_case_are_refused_unless_declared(tmp_path):
    with pytest.raises(sj.errors.DataFileError, match=r"c.csv:4: column 'sentiment': the label 'Pos' differs from "
                                                      r"'pos' \(line 2\) only in case"):
        _labels_of(tmp_path, "c.csv", "review,sentiment\na,pos\nb,neg\nc,Pos\n")
    for body, twin in (("a,very good\nb,neg\nc,very  good\n", "'very  good' differs from 'very good'"),
                       ("a,POS\nb,neg\nc,P0S\n", "'P0S' differs from 'POS'"),  # white space inside; a zero for an O
                       ("a,label\nb,neg\nc,labe1\n", "'labe1' differs from 'label'"),  # a one for an l
                       ("a,NEG\nb,pos\nc,N\u0395G\n", "'N\u0395G' differs from 'NEG'"),  # a Greek capital Epsilon
                       ("a,BAD\nb,pos\nc,\u0412AD\n", "'\u0412AD' differs from 'BAD'"),  # a Cyrillic capital Ve
                       ("a,pos\nb,neg\nc,pos\u3164\n", "'pos\u3164' differs from 'pos'")):  # a Hangul filler
        with pytest.raises(sj.errors.DataFileError, match=rf"c.csv:4: column 'sentiment': the label {twin}"):
            _labels_of(tmp_path, "c.csv", "review,sentiment\n" + body)
    task, rows = _labels_of(tmp_path, "c.csv", "review,sentiment\na,pos\nb,neg\nc,Pos\n",
                            **{"data.labels": "neg,pos,Pos"})  # declared: three classes, as the user says
    assert task.labels == ("neg", "pos", "Pos") and [r.label for r in rows] == [1, 0, 2]


def test_multilabel_cells_are_lists_of_values(tmp_path):
    multilabel = {"data.kind": "multilabel", "data.label_column": "genres"}
    body = 'review,genres\na,"[""comedy"", ""drama""]"\nb,drama|comedy\nc,[]\nd,\n'
    task, rows = _labels_of(tmp_path, "m.csv", body, **multilabel)
    assert task.labels == ("comedy", "drama")
    assert [e.label for e in rows] == [(0, 1), (0, 1), (), ()]
    task, rows = _labels_of(tmp_path, "k.csv", 'review,genres\na,"[1.0]"\nb,2|1\n', **multilabel)
    assert task.labels == ("1", "2") and [e.label for e in rows] == [(0,), (0, 1)]
    for bad, msg in (('a,"[""comedy"", [""x""]]"', r'a list \["x"\] in the row\'s labels is not a label'),
                     ("a,[comedy", r"starts like a JSON list but is not one"),
                     # a 0/1 vector per class (every row had the labels 0 and 1 on), a full-width or broken bar, a
                     # list inside the list, another tool's list syntax: each was classes of its own
                     ('a,"[1, 0, 0]"', r"\[1, 0, 0\] reads as a 0/1 vector, one entry per class"),
                     ("a,true|false", r"every row's labels are 0 and 1 \('true\|false'\): a 0/1 vector"),
                     ("a,comedy\uff5cdrama", r"holds a full-width vertical bar; a row's labels are separated by "
                                              r"'\|' \(comedy\|drama\)"),
                     ("a,comedy\u00a6drama", r"holds a broken bar"),
                     ('a,"[""[\\""a\\""]"", ""b""]"', r"in the row's labels is not a label"),
                     ("a,(comedy|drama)", r"'\(comedy\|drama\)' is a list in another tool's syntax"),
                     ("a,{comedy;drama}", r"'\{comedy;drama\}' is a list in another tool's syntax"),
                     ("a,comedy\u2223drama", r"holds a divides sign"),
                     ("a,comedy\uff0cdrama", r"holds a full-width comma"),
                     # a number no float holds, read as every JSON reader here reads it (1e-400 was a label "0")
                     ('a,"[""comedy"", 1e-400]"', r"the number 1e-400 is below a float's range"),
                     ("a,[1e999]", r"the number 1e999 is beyond a float's range"),
                     # the separator mistaken: "comedy,drama" and "drama,comedy" became two classes of their own
                     ('a,"comedy,drama"', r"the label 'comedy,drama' holds a comma; a row's labels are separated by "
                                          r"'\|' \(comedy\|drama\)"),
                     ("a,comedy;drama|sad", r"the label 'comedy;drama' holds a semicolon; a row's labels are "
                                            r"separated by '\|' \(comedy\|drama\), and no multilabel label name"),
                     ('a,"[""sci; fi""]"', r"the label 'sci; fi' holds a semicolon"),
                     ('a,"[""comedy"", 7]"', r"the label '7' in a column of names \('comedy' at line 2\)"),
                     # a stray separator, or an empty item: not "the label is empty" (the row has one)
                     ("a,comedy|", r"'comedy\|' holds an empty label beside the others"),
                     ('a,"[""comedy"", "" ""]"', r'\["comedy", " "\] holds an empty label beside the others'),
                     # a label named twice in a row: a copy slip, or two spellings of one value
                     ("a,comedy|drama|comedy", r"'comedy\|drama\|comedy' names the label 'comedy' 2 times; name each"),
                     ('a,"[1, 1.0]"', r"\[1, 1.0\] names the label '1' 2 times"),
                     ('a,"[""x"", "" x"", ""x""]"', r"names the label 'x' 3 times")):
        with pytest.raises(sj.errors.DataFileError, match=rf"n.csv:2: column 'genres': .*{msg}"):
            _labels_of(tmp_path, "n.csv", f"review,genres\n{bad}\n", **multilabel)
    # class ids as names (GoEmotions), a row of 0 and 1 among them; a label in parentheses (MovieLens)
    task, rows = _labels_of(tmp_path, "g.csv", 'review,genres\na,0|1\nb,27\nc,"[2, 5]"\n', **multilabel)
    assert task.labels == ("0", "1", "2", "5", "27")
    task, rows = _labels_of(tmp_path, "l.csv", "review,genres\na,comedy|drama\nb,(no genres listed)\n", **multilabel)
    assert task.labels == ("(no genres listed)", "comedy", "drama")


@pytest.mark.parametrize("labels, msg", [
    ("pos,neg,pos", r"names the label 'pos' twice"),
    ("1,1.0", r"names the label '1' twice"),
    ("pos,,neg", r"has an empty name"),
    (" ,neg", r"has an empty name"),
])
def test_declared_labels_name_each_class_once(tmp_path, labels, msg):
    with pytest.raises(sj.errors.InputError, match=rf"config.data.labels={labels!r}.*{msg}"):
        _labels_of(tmp_path, "d.csv", "review,sentiment\na,pos\nb,neg\n", **{"data.labels": labels})


@pytest.mark.parametrize("labels, plain", [('["0","1"]', "0,1"), ("('neg', 'pos')", "neg,pos"),
                                           ('"neg","pos"', "neg,pos"), ("[neg,pos]", "neg,pos")])
def test_declared_labels_written_as_a_list_are_refused_naming_the_setting(tmp_path, labels, plain):
    """A JSON or Python list: its brackets and quotes were read as parts of the names, and the data file was blamed
    ("label '1' is not one of ['[\"0\"', '\"1\"]']")."""
    with pytest.raises(sj.errors.InputError, match=re.escape(
            f"config.data.labels={labels!r} is written as a list; give the names separated by commas, without "
            f"brackets or quotes ({plain})")):
        _labels_of(tmp_path, "d.csv", "review,sentiment\na,0\nb,1\n", **{"data.labels": labels})


@pytest.mark.parametrize("kind", ["regression", "multiple_choice", "question_answering"])
def test_labels_for_a_kind_without_classes_are_refused(tmp_path, kind):
    with pytest.raises(sj.errors.InputError, match=rf"config.data.labels='a,b' names classes, which data.kind={kind} "
                                                   r"has none of .*leave it empty"):
        _labels_of(tmp_path, "d.csv", "review,sentiment\na,1\nb,2\n", **{"data.kind": kind, "data.labels": "a,b"})


@pytest.mark.parametrize("kw, msg", [
    ({"data.text_columns": "review,sentiment"}, r"'sentiment' is named as both a text and a label column"),
    ({"data.text_columns": "review,review"}, r"'review' is named as a text column twice"),
    ({"data.kind": "multiple_choice", "data.text_columns": "review", "data.choice_columns": "a,b,a"},
     r"'a' is named as a choice column twice"),
    ({"data.kind": "multiple_choice", "data.text_columns": "review", "data.choice_columns": "a,sentiment"},
     r"'sentiment' is named as both a choice and a label column"),
    ({"data.kind": "token_classification", "data.text_columns": "w", "data.label_column": "w"},
     r"'w' is named as both a words and a tags column"),
])
def test_a_column_has_one_role(tmp_path, kw, msg):
    name = "c.conll" if kw.get("data.kind") == "token_classification" else "c.csv"  # a tagger reads CoNLL files
    with pytest.raises(sj.errors.InputError, match=rf"config.data: column {msg}"):
        _labels_of(tmp_path, name, "review,sentiment,a,b\nx,pos,p,q\ny,neg,p,q\n", **kw)


# ---- rows are read as written: tasks.read_rows over files.text_lines ----------------------------------------------

def test_a_tsv_is_a_row_per_line_whatever_its_quotes(tmp_path):
    lines = ['"quoted start\t1', 'plain\t0', 'say "hi" there\t1', '"whole ""field"" quoted"\t0', 'x"\t0', '"\t1',
             '"Hi," she said\t1']
    task, rows = _labels_of(tmp_path, "q.tsv", "review\tsentiment\n" + "\n".join(lines) + "\n")
    assert [e.text_a for e in rows] == ['"quoted start', "plain", 'say "hi" there', 'whole "field" quoted', 'x"', '"',
                                        '"Hi," she said']
    assert [e.label for e in rows] == [1, 0, 1, 0, 0, 1, 1]
    # ... but '"' then 'x"' on the next line reads as CSV's quoted text ("\t1\nx"), a record of the header's fields:
    # which is meant cannot be told, so it is refused where it starts, whatever other line is no CSV
    with pytest.raises(sj.errors.DataFileError, match=r"q2.tsv:3: a text in quotes runs on to line 4"):
        _labels_of(tmp_path, "q2.tsv", 'review\tsentiment\n"Great" movie\t1\n"\t1\nx"\t0\n')
    # a one-column file (a test file) opening a quote at a line's end that no later line closes: read as written
    (tmp_path / "one.tsv").write_text('review\n"unclosed\nnext\n')
    rows = list(tasks.read_rows(str(tmp_path / "one.tsv")))
    assert [r["review"] for _, r in rows] == ['"unclosed', "next"]


@pytest.mark.parametrize("body, msg", [
    ('review,sentiment\nfine,pos\n"never closed,neg\nmore,pos\n', r"u.csv:3: a quoted field opened in this record is "
                                                                     r"never closed"),
    ('review,sentiment\nfine,pos\n"quoted" then text,neg\n', r"u.csv:3: text follows a closing quote"),
])
def test_a_csv_quote_error_names_the_record(tmp_path, body, msg):
    with pytest.raises(sj.errors.DataFileError, match=msg):
        _labels_of(tmp_path, "u.csv", body)


@pytest.mark.parametrize("name, body, msg", [
    ("t.csv", "review,sentiment\nfine,pos\n,neg\n", r"t.csv:3: column 'review' is empty"),
    ("t.tsv", "review\tsentiment\nfine\tpos\n  \tneg\n", r"t.tsv:3: column 'review' is empty"),
    ("t.jsonl", '{"review": "a", "sentiment": "p"}\n{"review": "", "sentiment": "n"}\n', r"t.jsonl:2: column "
                                                                                          r"'review' is empty"),
])
def test_an_empty_text_is_refused(tmp_path, name, body, msg):
    with pytest.raises(sj.errors.DataFileError, match=msg):
        _labels_of(tmp_path, name, body)


@pytest.mark.parametrize("name, body, msg", [
    ("z.csv", "review,sentiment\nfine,pos\n\u200b\u200d,neg\n", r"z.csv:3: column 'review' is empty \(only white space "
                                                               r"or invisible marks\)"),
    ("m.csv", "review,sentiment\nfine,pos\n\u0301,neg\n", r"m.csv:3: column 'review' is empty"),  # an accent alone
    # the replacement character alone (a decoder's mark for bad bytes): BERT's normalizer drops it, leaving nothing
    ("r.csv", "review,sentiment\nfine,pos\n\ufffd \ufffd,neg\n", r"r.csv:3: column 'review' is empty"),
    ("hf.csv", "review,sentiment\nfine,pos\n\u3164\uffa0,neg\n", r"hf.csv:3: column 'review' is empty"),  # fillers
    # two columns that read alike, one with a zero-width space in its name
    ("zw.csv", "review,re\u200bview,sentiment\na,b,pos\n", r"zw.csv:1: the header names the column 'review' twice "
                                                          r"\(written two ways"),
    # one column in two Unicode forms (é composed, and e + a combining accent): which one is the text?
    ("f.csv", "r\u00e9view,re\u0301view,sentiment\na,b,pos\n", r"f.csv:1: the header names the column 'r\u00e9view' "
                                                                r"twice \(written two ways: in two Unicode forms"),
    ("k.jsonl", '{"review": "a", "sentiment": "p"}\n{"review": "b", "sentiment": "n", "sentiment": "p"}\n',
     r"k.jsonl:2: the key 'sentiment' appears twice in one object"),
    ("n.csv", "review,sentiment\nfine,pos\nba\x00d,neg\n", r"n.csv:3:3: a NUL byte, which text never holds"),
    # a blank line is no row (skipped), a quoted "" is one (refused)
    ("q.csv", 'review,sentiment\nfine,pos\n\n"",neg\n', r"q.csv:4: column 'review' is empty"),
    ("qq.csv", 'review,sentiment\nfine,pos\n""\nbad,neg\n',
     r"qq.csv:3: a line with no text in it \(1 field, the header has 2\); delete it"),
    ("qq.tsv", 'review\tsentiment\nfine\tpos\n""\nbad\tneg\n',
     r"qq.tsv:3: a line with no text in it \(1 field, the header has 2\); delete it"),
    # TSV alike: an empty line is skipped, a line of a tab (empty fields) or of spaces is a row, refused
    ("q.tsv", "review\tsentiment\nfine\tpos\n\n\t\nbad\tneg\n", r"q.tsv:4: column 'sentiment': the label is empty"),
    ("s.csv", "review,sentiment\nfine,pos\n   \nbad,neg\n", r"s.csv:3: a line with no text in it \(1 field, the "
                                                       r"header has 2\)"),
    # Excel's first line naming the separator: "the header has an empty column name" was said
    ("sep.csv", "sep=,\nreview,sentiment\nfine,pos\n", r"sep.csv:1: Excel's 'sep=' line \(sep=,\), which says the "
                                                     r"separator, not the header; delete the line"),
    ("s.tsv", "review\tsentiment\nfine\tpos\n   \nbad\tneg\n",
     r"s.tsv:3: a line with no text in it \(1 field, the header has 2\); delete it"),
    # blank lines before the header are skipped (as pandas does): the header is line 3, a row's line numbers kept
    ("lb.csv", "\n\nreview,sentiment\nfine,pos\n\"\",neg\n", r"lb.csv:5: column 'review' is empty"),
    ("lb.tsv", "\n\t\nreview\tsentiment\nfine\tpos\n\tneg\n", r"lb.tsv:5: column 'review' is empty"),
    # the header again mid-file (two files joined): no class named "sentiment"
    ("h.csv", "review,sentiment\nfine,pos\nreview , sentiment\nbad,neg\n", r"h.csv:3: the header line again \("
                                                                           r"review, sentiment\), read as a row"),
    ("h.tsv", "review\tsentiment\nfine\tpos\nreview\tsentiment\n", r"h.tsv:3: the header line again"),
    ("u16.tsv", "review\tsentiment\nfine\tpos\n".encode("utf-16-le"), r"u16.tsv:1:2: a NUL byte"),
    # old Mac line ends: one "line" of glued rows (CSV read it as an unclosed quote, TSV as no rows)
    ("cr.csv", "review,sentiment\rfine,pos\rbad,neg\r", r"cr.csv:1:17: a carriage return that ends no line"),
    ("cr.tsv", "review\tsentiment\r\nfine\tpos\rbad\tneg\r\n", r"cr.tsv:2:9: a carriage return that ends no line"),
    ("bom2.csv", "review,sentiment\nfine,pos\n\ufeffbad,neg\n", r"bom2.csv:3:1: a byte-order mark inside the file"),
    ("whole.jsonl", '[\n {"review": "a", "sentiment": "p"},\n {"review": "b", "sentiment": "n"}\n]\n',
     r"whole.jsonl:1: not a JSON object \(.*; the file is one JSON array or object across lines: JSON Lines holds one"),
    # pandas' df.to_json() (orient "columns") and orient "list" on one line: one object of whole columns
    ("cols.json", '{"review": {"0": "a", "1": "b"}, "sentiment": {"0": "p", "1": "n"}}\n',
     r"cols.json:1: one object of columns \('review', 'sentiment' each holding every row: pandas' to_json default\), "
     r"but a row per line is read \(JSON Lines: df.to_json\(path, orient='records', lines=True\)\)"),
    ("lists.jsonl", '{"review": ["a", "b"], "sentiment": ["p", "n"]}\n', r"lists.jsonl:1: one object of columns"),
    # a SQuAD file as rows (a classifier's data, predict's input): "no column 'review' (has version, data)" said nothing
    ("sq.json", '{"version": "v1.1", "data": [{"title": "t", "paragraphs": []}]}\n', r"sq.json:1: a SQuAD file "
     r"\(articles of paragraphs under \"data\"\), where one row per line is read: a question-answering run trains on "
     r"it \(config.data.kind=question_answering\); predict reads a JSON Lines file"),
    # a number no float holds (json reads it as inf: the message named an inf the file does not hold)
    ("big.jsonl", '{"review": "a", "sentiment": 1}\n{"review": "b", "sentiment": -1e400}\n',
     r"big.jsonl:2: the number -1e400 is beyond a float's range"),
    # ... and below it: json read 1e-400 as 0, a class "0" or a score the file does not hold (0e5 and 0.0 are 0)
    ("tiny.jsonl", '{"review": "a", "sentiment": 0e5}\n{"review": "b", "sentiment": 0.0}\n{"review": "c", '
                   '"sentiment": 1e-400}\n',
     r"tiny.jsonl:3: the number 1e-400 is below a float's range \(it reads as 0"),
])
def test_invisible_texts_doubled_keys_and_nul_bytes_are_refused(tmp_path, name, body, msg):
    with pytest.raises(sj.errors.DataFileError, match=msg):
        _labels_of(tmp_path, name, body)


def test_a_column_is_one_column_in_either_unicode_form(tmp_path):
    """A header written with a combining accent (NFD) and a setting typed composed (NFC), or the other way round:
    the same column (tasks.Row), in training as in predict."""
    for header, setting in (("re\u0301view", "r\u00e9view"), ("r\u00e9view", "re\u0301view")):
        task, rows = _labels_of(tmp_path, "c.csv", f"{header},sentiment\ngood,pos\nbad,neg\n",
                                **{"data.text_columns": setting})
        assert [r.text_a for r in rows] == ["good", "bad"] and task.labels == ("neg", "pos")


def test_windows_line_ends_read_as_line_ends(tmp_path):
    _, rows = _labels_of(tmp_path, "w.tsv", "review\tsentiment\r\nfine\tpos\r\nbad\tneg\r\n")
    assert [(r.text_a, r.text_b) for r in rows] == [("fine", None), ("bad", None)] and len({r.label for r in rows}) == 2


def test_an_empty_second_text_and_an_empty_test_text_are_refused(tmp_path):
    (tmp_path / "p.csv").write_text("a,b,y\nx,y,pos\nx,,neg\n")
    with pytest.raises(sj.errors.DataFileError, match=r"p.csv:3: column 'b' is empty"):
        _load_all(_files_config("unused", tmp_path / "p.csv", tmp_path / "p.csv",
                                **{"data.text_columns": "a,b", "data.label_column": "y"}))
    _write_csv(tmp_path / "train.csv", _rows(8, 0))
    (tmp_path / "test.csv").write_text("review,sentiment\ngood,\n,positive\n")
    c = _files_config("unused", tmp_path / "train.csv", tmp_path / "train.csv", **{"data.test_file":
                                                                                   str(tmp_path / "test.csv")})
    with pytest.raises(sj.errors.DataFileError, match=r"test.csv:3: column 'review' is empty"):
        _load_all(c)
    # a test file of one column: a quoted empty text is a row (refused), not a blank line (the rows after it were
    # renumbered: the prediction of line 4 went out as row 2)
    for name, body in (("one.csv", 'review\ngood\n""\nbad\n'), ("one.tsv", 'review\ngood\n""\nbad\n')):
        (tmp_path / name).write_text(body)
        c = _files_config("unused", tmp_path / "train.csv", tmp_path / "train.csv", **{"data.test_file":
                                                                                       str(tmp_path / name)})
        with pytest.raises(sj.errors.DataFileError, match=rf"{name}:3: column 'review' is empty"):
            _load_all(c)


def test_a_byte_order_mark_is_invisible_and_bad_bytes_are_named_by_line_and_column(tmp_path):
    for name, body in (("bom.csv", "review,sentiment\nfine,pos\nbad,neg\n"),
                       ("bom.tsv", "review\tsentiment\nfine\tpos\nbad\tneg\n"),
                       ("bom.jsonl", '{"review": "fine", "sentiment": "pos"}\n{"review": "bad", "sentiment": "neg"}\n')):
        task, rows = _labels_of(tmp_path, name, b"\xef\xbb\xbf" + body.encode())
        assert task.labels == ("neg", "pos") and [e.text_a for e in rows] == ["fine", "bad"]
    with pytest.raises(sj.errors.DataFileError, match=r"l1.csv:3:4: not UTF-8 text \(byte 0xe9\)"):
        _labels_of(tmp_path, "l1.csv", "review,sentiment\nfine,pos\ncaf\xe9,neg\n".encode("latin-1"))


@pytest.mark.parametrize("setting, make, msg", [
    ("data.test_file", lambda d: str(d / "missing.csv"), r"config.data.test_file='.*missing.csv': no such file"),
    ("data.test_file", lambda d: str(d), r"config.data.test_file='.*' is a directory"),
    # a link that loops or leads nowhere: said so (it said "no such file" of a name the user sees listed)
    ("data.train_file", lambda d: (os.symlink("b.csv", d / "a.csv"), os.symlink("a.csv", d / "b.csv"),
                                   str(d / "a.csv"))[-1],
     r"config.data.train_file='.*a.csv': a symbolic link that leads back to itself \(a loop of links\)"),
    ("data.train_file", lambda d: (os.symlink("gone.csv", d / "l.csv"), str(d / "l.csv"))[-1],
     r"config.data.train_file='.*l.csv': a symbolic link to gone.csv, which does not exist"),
    ("data.validation_file", lambda d: str(d / "dev.txt"), r"config.data.validation_file: .*dev.txt: unknown file "
                                                           r"type '.txt'"),
])
def test_every_named_file_is_checked_before_reading(tmp_path, setting, make, msg):
    _write_csv(tmp_path / "train.csv", _rows(8, 0))
    (tmp_path / "dev.txt").write_text("x\n")
    c = _files_config("unused", tmp_path / "train.csv", tmp_path / "train.csv", **{setting: make(tmp_path)})
    with pytest.raises(sj.errors.InputError, match=msg):
        tasks.resolve(c)


def test_a_test_file_is_read_and_may_leave_its_labels_out(tmp_path):
    _write_csv(tmp_path / "train.csv", _rows(8, 0))
    (tmp_path / "test.csv").write_text("review,sentiment\ngood,\nbad,positive\nfine,nan\nok,None\n")  # pandas' NaN
    c = _files_config("unused", tmp_path / "train.csv", tmp_path / "train.csv",
                      **{"data.test_file": str(tmp_path / "test.csv")})
    assert [e.label for e in _load_all(c)["test"]] == [None, 1, None, None]


def test_a_validation_label_the_training_file_lacks_is_named(init, tmp_path):
    train = _write_csv(tmp_path / "train.csv", _rows(16, 0))
    dev = tmp_path / "dev.csv"
    dev.write_text('review,sentiment\n"a, b",positive\n"multi\nline",mixed\n')
    with pytest.raises(sj.errors.InputError, match=r"dev.csv:3: column 'sentiment': label 'mixed' is not one of "
                                                   r"\['negative', 'positive'\]"):
        ft.finetune(_files_config(init, train, dev), str(tmp_path / "run"))


def test_the_cli_names_a_bad_row_in_one_line_and_writes_nothing(init, tmp_path):
    from test_cli_convert import one_error_line

    train = _write_csv(tmp_path / "train.csv", _rows(16, 0))
    dev = tmp_path / "dev.csv"
    dev.write_text("review,sentiment\nfine,positive\nfine,unknown\n")
    wd = tmp_path / "run"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train", "finetune.py"), "--config",
                        os.path.join(ROOT, "train", "configs", "glue.py") + ":files", f"--config.init_from={init}",
                        f"--config.data.train_file={train}", f"--config.data.validation_file={dev}",
                        "--config.data.text_columns=review", "--config.data.label_column=sentiment",
                        "--config.max_seq_length=16",
                        "--workdir", str(wd)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    native = r"^(WARNING: All log messages before absl::InitializeLog\(\) is called.*|[IWE]\d{4} [\d:.]+ +\d+ \S+\] .*)\n"
    import re

    line = one_error_line(re.sub(native, "", r.stderr, flags=re.M), "finetune.py")
    assert f"{dev}:3: column 'sentiment': label 'unknown' is not one of ['negative', 'positive']" in line
    assert not wd.exists()


def test_multilabel_rows_train_sigmoid_outputs_and_report_f1(init, tmp_path):
    """Labels 'a|b' per row (any number, also none), multi-hot targets, a sigmoid per label; micro-F1 equals
    sklearn's."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)

    def write(path, n):
        rows = [("review", "genres")]
        for _ in range(n):
            on = [g for g, w in (("comedy", WORDS[0]), ("drama", WORDS[3])) if rng.random() < 0.5]
            words = [*rng.choice(WORDS[6:], 3)] + [w for g, w in (("comedy", WORDS[0]), ("drama", WORDS[3]))
                                                   if g in on]
            rows.append((" ".join(rng.permutation(words)), "|".join(on)))
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(rows)
        return path

    train, dev = write(tmp_path / "train.csv", 384), write(tmp_path / "dev.csv", 32)
    c = _files_config(init, train, dev, **{"data.label_column": "genres", "data.kind": "multilabel",
                                           "num_epochs": 6, "learning_rate": 3e-3})
    task = tasks.resolve(c)
    assert task.labels == ("comedy", "drama") and task.main_metric == "micro_f1"
    res = ft.finetune(c, str(tmp_path / "run"))
    assert res["best"]["validation/micro_f1"] > 0.9
    # predict: the labels whose sigmoid is above 0.5 (the model's task.json says it is multilabel)
    from squeezebert_jax.predict import Predictor

    predictor = Predictor(str(tmp_path / "run" / "model"), max_length=16)
    with open(dev, newline="") as f:
        rows = list(csv.DictReader(f))
    got = predictor([r["review"] for r in rows])
    gold = np.array([[g in r["genres"].split("|") for g in ("comedy", "drama")] for r in rows])
    on = np.array([[g in p["labels"] for g in ("comedy", "drama")] for p in got])
    assert f1_score(gold, on, average="micro") == pytest.approx(res["best"]["validation/micro_f1"])
    assert all(0 < v < 1 for g in got for v in g["probabilities"].values())
    # config.json says so too (transformers' problem_type): without task.json, and exported to PyTorch
    model_dir = tmp_path / "run" / "model"
    assert json.loads((model_dir / "config.json").read_text())["problem_type"] == "multi_label_classification"
    shutil.copytree(model_dir, tmp_path / "bare")
    (tmp_path / "bare" / tasks.TASK_CARD).unlink()
    assert Predictor(str(tmp_path / "bare"), max_length=16)([r["review"] for r in rows]) == got
    from transformers import AutoConfig

    sj.export_torch(sj.load_pretrained(model_dir), tmp_path / "hf")
    assert AutoConfig.from_pretrained(tmp_path / "hf").problem_type == "multi_label_classification"
    y = (rng.random((50, 3)) < 0.4).astype(np.float32)
    logits = rng.normal(size=(50, 3))
    t = tasks.FileTask("t", "multilabel", {"train": "x.csv"}, ("a",), "l", ("a", "b", "c"))
    m = t.metrics(logits, y)
    assert m["micro_f1"] == pytest.approx(f1_score(y, logits > 0, average="micro"))
    assert m["macro_f1"] == pytest.approx(f1_score(y, logits > 0, average="macro"))


def test_scanned_and_unrolled_layers_train_to_the_same_numbers(init, tmp_path):
    """config.layers: scan (TPU's default) and unrolled (CPU's and GPU's) run the same computation, dropout included."""
    train, dev = _write_csv(tmp_path / "train.csv", _rows(64, 0)), _write_csv(tmp_path / "dev.csv", _rows(16, 1))
    runs = {}
    for layers in ("scan", "unrolled"):
        c = _files_config(init, train, dev, num_epochs=2, layers=layers, dropout=0.1)
        res = ft.finetune(c, str(tmp_path / layers))
        runs[layers] = [(h["train_loss"], h["validation/accuracy"]) for h in res["history"]]
    np.testing.assert_allclose(runs["scan"], runs["unrolled"], rtol=1e-5)
    assert ft.layer_execution("auto", "cpu") == (False, "none") and ft.layer_execution("auto", "tpu") == (True,
                                                                                                      "minimal")
    assert ft.layer_execution("auto", "gpu") == (False, "none") and ft.layer_execution("scan", "cpu")[0]
    with pytest.raises(sj.errors.InputError, match="config.layers='fast': auto, scan or unrolled"):
        ft.finetune(_files_config(init, train, dev, layers="fast"), str(tmp_path / "bad"))


def test_a_regression_score_is_a_number_not_a_boolean_or_list(tmp_path):
    for value in ("true", "[1.5]", '"1.5"'):
        body = f'{{"review": "a", "sentiment": 1.5}}\n{{"review": "b", "sentiment": {value}}}\n'
        if value == '"1.5"':  # a number in a string is a number
            _, rows = _labels_of(tmp_path, "r.jsonl", body, **{"data.kind": "regression"})
            assert [e.label for e in rows] == [1.5, 1.5]
            continue
        with pytest.raises(sj.errors.DataFileError, match=r"r.jsonl:2: column 'sentiment': .* is not a number"):
            _labels_of(tmp_path, "r.jsonl", body, **{"data.kind": "regression"})



def test_a_single_label_that_reads_as_several_is_refused_by_line(tmp_path):
    """Classes are read from the training file one per row: a cell holding a JSON list or names joined by '|' is a
    multilabel row, refused by its line (a class of that name is kept by naming the classes in config.data.labels).
    In multilabel rows a list item holding '|' is refused (a CSV's x|y is two labels), and a file whose rows all have
    no label says so rather than "no rows"."""
    path = tmp_path / "t.csv"
    for cell, shown in (('"[""comedy"", ""drama""]"', r"'\[\"comedy\", \"drama\"\]'"),
                        ("comedy|drama", "'comedy|drama'")):
        path.write_text(f"text,label\nb,comedy\na,{cell}\nc,drama\n")
        with pytest.raises(sj.errors.DataFileError, match=rf"^{path}:3: column 'label': the label {shown} reads as "
                                                          r"several labels \(data.kind=multilabel"):
            tasks.label_names_of(str(path), "label")
    assert tasks.label_names_of(str(path), "label", multilabel=True) == ("comedy", "drama")
    with pytest.raises(sj.errors.DataFileError, match=r"^w: the label 'x\|y' holds '\|', which separates a row's "
                                                      r"labels \(a CSV cell x\|y is 2 labels\)"):
        tasks.label_keys(["x|y", "z"], "w")
    path.write_text('text,label\na,\nb,""\n')
    with pytest.raises(sj.errors.DataFileError, match=rf"^{path}: no row has a label"):
        tasks.label_names_of(str(path), "label", multilabel=True)


def test_a_label_minus_1_is_told_as_a_datasets_unlabelled_row(tmp_path, caplog):
    """-1 is how datasets and GLUE's TFDS splits mark a row without its label: "not one of ['neg', 'pos']" said
    nothing of it."""
    (tmp_path / "dev.csv").write_text("review,sentiment\na,pos\nb,-1\n")
    task = tasks.FileTask("t", "classification", {"train": str(tmp_path / "dev.csv"),
                                                  "validation": str(tmp_path / "dev.csv")}, ("review",), "sentiment",
                          ("neg", "pos"))
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):  # in a training file: a class, and said
        _labels_of(tmp_path, "tr.csv", "review,sentiment\na,0\nb,1\nc,-1\n")
    assert "tr.csv: the label -1 (line 4) beside class ids 0, 1: -1 is how datasets" in caplog.text
    with pytest.raises(sj.errors.DataFileError, match=r"dev.csv:3: column 'sentiment': label '-1' is not one of "
                                                      r"\['neg', 'pos'\]; -1 is how datasets and GLUE's TFDS splits "
                                                      r"mark a row without its label"):
        task.load("validation")
