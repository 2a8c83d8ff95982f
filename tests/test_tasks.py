"""Your own data (squeezebert_jax.tasks): CSV / TSV / JSON Lines files as classification or regression tasks, trained
through finetune(); every loader error names the file, the line and the column."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import squeezebert_jax as sj
from conftest import ROOT, VOCAB, WORDS, glue_config, tiny_init
from squeezebert_jax import finetune as ft
from squeezebert_jax import tasks


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
    res = ft.finetune(_files_config(init, train, dev, num_epochs=4), str(tmp_path / "run"))
    assert res["best"]["score"] == 1.0 and res["labels"] == ["negative", "positive"]
    assert {"validation/accuracy", "validation/f1", "validation/macro_f1"} <= set(res["best"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert model.config.id2label == {0: "negative", 1: "positive"}


def test_metrics_equal_sklearns():
    from sklearn.metrics import accuracy_score, f1_score

    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    t = tasks.FileTask("t", "classification", {"train": "x.csv"}, ("a",), "l", ("a", "b", "c"))
    m = t.metrics(p, y)
    assert m["accuracy"] == pytest.approx(accuracy_score(y, p))
    assert m["macro_f1"] == pytest.approx(f1_score(y, p, average="macro"))


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
     r"missing_column.csv:2: no column 'review'"),
    ("one_label.csv", "review,sentiment\nfoo,positive\n", {}, r"one_label.csv: column 'sentiment' has one label"),
    ("no_label.csv", "review,stars\nfoo,positive\n", {}, r"no_label.csv:2: no label column 'sentiment'"),
    ("undeclared.csv", "review,sentiment\nfoo,positive\nbar,neutral\n", {"data.labels": "negative,positive"},
     r"undeclared.csv:3: column 'sentiment': label 'neutral' is not one of \['negative', 'positive'\]"),
    ("empty.csv", "review,sentiment\n", {"data.labels": "negative,positive"}, r"empty.csv: no rows"),
    ("fields.csv", "review,sentiment\nfoo,positive,extra\n", {"data.labels": "negative,positive"},
     r"fields.csv:2: 3 fields, the header has 2"),
    ("bad.jsonl", '{"review": "a", "sentiment": "positive"}\n{"review": oops}\n', {"data.labels": "negative,positive"},
     r"bad.jsonl:2: not a JSON object"),
    ("score.csv", "review,sentiment\nfoo,nan\n", {"data.kind": "regression"},
     r"score.csv:2: column 'sentiment': 'nan' is not a finite number"),
    ("score2.csv", "review,sentiment\nfoo,good\n", {"data.kind": "regression"},
     r"score2.csv:2: column 'sentiment': 'good' is not a number"),
    ("data.txt", "foo\n", {}, r"data.txt: unknown file type '.txt'"),
])
def test_loader_errors_name_file_line_and_column(init, tmp_path, name, text, kw, msg):
    path = tmp_path / name
    path.write_text(text)
    good = _write_csv(tmp_path / "good.csv", _rows(8, 0))
    with pytest.raises(sj.errors.InputError, match=msg):
        ft.finetune(_files_config(init, path, good, **kw), str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


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
    assert os.listdir(wd) == ["log.txt"]


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
    y = (rng.random((50, 3)) < 0.4).astype(np.float32)
    logits = rng.normal(size=(50, 3))
    t = tasks.FileTask("t", "multilabel", {"train": "x.csv"}, ("a",), "l", ("a", "b", "c"))
    m = t.metrics(logits, y)
    assert m["micro_f1"] == pytest.approx(f1_score(y, logits > 0, average="micro"))
    assert m["macro_f1"] == pytest.approx(f1_score(y, logits > 0, average="macro"))


def test_scanned_and_unrolled_layers_train_to_the_same_numbers(init, tmp_path):
    """config.layers: scan (accelerators' default) and unrolled (CPU's) run the same computation, dropout included."""
    train, dev = _write_csv(tmp_path / "train.csv", _rows(64, 0)), _write_csv(tmp_path / "dev.csv", _rows(16, 1))
    runs = {}
    for layers in ("scan", "unrolled"):
        c = _files_config(init, train, dev, num_epochs=2, layers=layers, dropout=0.1)
        res = ft.finetune(c, str(tmp_path / layers))
        runs[layers] = [(h["train_loss"], h["validation/accuracy"]) for h in res["history"]]
    np.testing.assert_allclose(runs["scan"], runs["unrolled"], rtol=1e-5)
    assert ft.layer_execution("auto", "cpu") == (False, "none") and ft.layer_execution("auto", "tpu") == (True,
                                                                                                      "minimal")
    with pytest.raises(sj.errors.InputError, match="config.layers='fast': auto, scan or unrolled"):
        ft.finetune(_files_config(init, train, dev, layers="fast"), str(tmp_path / "bad"))
