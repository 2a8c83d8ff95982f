"""Multiple choice from SWAG-style files (tasks.ChoiceTask): choices encoded as run_swag pairs, [N, choices, S] batches
cut to their length bucket with the logits of fixed padding, a tiny model trained to pick the right ending, predict,
and label errors naming file and line."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from conftest import glue_config, tiny_init
from squeezebert_jax import batching, inference, tasks
from squeezebert_jax import finetune as ft

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "was", "shot", "in", "york", "##shire", "by",
         "john", "smith", "and", "mary", "jones", "new", "paris", "london", "rome", "at", ".", "then", "left", "for"]
PLACES = ["york", "paris", "london", "rome"]
HEADER = ["sent1", "sent2", "ending0", "ending1", "ending2", "ending3", "label"]


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    return tiny_init(tmp_path_factory.mktemp("mc") / "init", VOCAB)


def _rows(n, seed):
    """'john shot the film in <place> .' / 'then john left for' -> the ending that names <place> and is the only one
    in its form ('the film in <place> .'; the others: '<place> .')."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        person, place = ["john", "mary jones", "john smith"][rng.integers(3)], PLACES[rng.integers(4)]
        endings = [f"the film in {p} ." if p == place else f"{p} ." for p in rng.permutation(PLACES)]
        right = next(i for i, e in enumerate(endings) if place in e.split())
        rows.append([f"{person} shot the film in {place} .", f"then {person} left for", *endings, str(right)])
    return rows


def _write(path, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([HEADER, *rows])
    return path


def _config(init, train, dev, **kw):
    c = glue_config("rte", init, "", **{"learning_rate": 3e-3, "num_epochs": 4, "dropout": 0.0, "max_seq_length": 32,
                                        **kw})
    c.task, c.data.kind = "files", "multiple_choice"
    c.data.train_file, c.data.validation_file = str(train), str(dev)
    c.data.text_columns, c.data.choice_columns = "sent1,sent2", "ending0,ending1,ending2,ending3"
    return c


def test_choices_are_run_swags_pairs_and_buckets_keep_the_logits(init, tmp_path):
    import transformers

    path = _write(tmp_path / "a.csv", _rows(10, 0))
    task = tasks.ChoiceTask("a", {"train": str(path)}, ("sent1", "sent2"), tuple(HEADER[2:6]), "label")
    examples = task.load("train")
    ours = task.encode(examples, sj.Tokenizer.from_dir(init), 32)
    hf = transformers.BertTokenizerFast(str(init / "vocab.txt"), do_lower_case=True)
    first = [ex.context for ex in examples for _ in range(4)]
    second = [f"{ex.lead} {e}" for ex in examples for e in ex.endings]
    enc = hf(first, second, truncation=True, max_length=32, padding="max_length")
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        assert ours[k].reshape(40, 32).tolist() == enc[k]
    assert ours["labels"].tolist() == [int(r[-1]) for r in _rows(10, 0)]
    # [N, 4, S] cut to the bucket of its longest choice: the logits of fixed padding
    model = sj.SqueezeBertForMultipleChoice(sj.pretrained.read_model_config(init)[0], rngs=nnx.Rngs(1))
    width = int(batching.lengths(ours).max())
    assert width < 32 and batching.assemble(ours, np.arange(10), 10, width)["input_ids"].shape == (10, 4, width)
    fixed = inference.predict_logits(model, ours, buckets=(32,))
    bucketed = inference.predict_logits(model, ours, buckets=(8, 16, 24, 32))
    np.testing.assert_allclose(bucketed, fixed, rtol=1e-5, atol=1e-5)


def test_choices_cut_to_max_length_are_counted_in_a_warning(init, tmp_path, caplog):
    """A context and ending longer than max_length lose their end: never without a word (tokenizer.warn_truncated,
    the message classification and predict give), counted as choices (a row has four); rows whose endings were cut
    away, so that every choice reads the same, are counted too (predict reported one of them as the answer)."""
    import logging

    task = tasks.ChoiceTask("a", {"train": str(_write(tmp_path / "a.csv", _rows(10, 0)))}, ("sent1", "sent2"),
                            tuple(HEADER[2:6]), "label")
    examples = task.load("train")
    with caplog.at_level(logging.WARNING):
        task.encode(examples, sj.Tokenizer.from_dir(init), 32)
        assert not caplog.records
        task.encode(examples, sj.Tokenizer.from_dir(init), 6)
        assert [r.getMessage()[:103] for r in caplog.records] == [
            "40 of 40 choices (a context and an ending each; 4 a row) (100.0%) are longer than 6 tokens and were cut"]
        caplog.clear()
        task.encode(examples, sj.Tokenizer.from_dir(init), 5)  # the lead "then john left for" keeps, the ending goes
    assert caplog.records[-1].getMessage().startswith("10 of 10 rows read the same in every choice after the cut to 5 "
                                                      "tokens (the endings were cut away): the model cannot tell")


def test_a_tiny_model_learns_to_choose_and_predicts(init, tmp_path, run_cli):
    train, dev = _write(tmp_path / "train.csv", _rows(256, 0)), _write(tmp_path / "dev.csv", _rows(48, 1))
    res = ft.finetune(_config(init, train, dev, num_epochs=6), str(tmp_path / "run"))
    assert res["best"]["validation/accuracy"] > 0.8, [h["validation/accuracy"] for h in res["history"]]
    model_dir = tmp_path / "run" / "model"
    assert type(sj.load_pretrained(model_dir)) is sj.SqueezeBertForMultipleChoice
    rows = _rows(8, 2)
    _write(tmp_path / "new.csv", [r[:-1] + [""] for r in rows])
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "new.csv", "--out",
                           tmp_path / "out.jsonl", "--max_length", 32)
    assert rc == 0, err
    got = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(got) == 8 and all(len(g["probabilities"]) == 4 for g in got)
    assert np.mean([g["choice"] == int(r[-1]) for g, r in zip(got, rows)]) >= 0.75
    assert all(g["ending"] == r[2 + g["choice"]] for g, r in zip(got, rows))
    # a fifth ending beside the model's four would go unread (one more choice, silently not scored): refused, with the
    # columns that read it; a column numbered like none of them (sent9 is, label is not) is not the model's business
    with open(tmp_path / "five.csv", "w", newline="") as f:
        csv.writer(f).writerows([HEADER[:6] + ["ending4", "label"], *[r[:6] + ["the film .", ""] for r in rows]])
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "five.csv", "--out",
                           tmp_path / "five.jsonl")
    assert rc == 1 and err.count("\n") == 1 and not (tmp_path / "five.jsonl").exists(), err
    assert ("five.csv:1: column 'ending4' is numbered like ending0, ending1, ending2, ending3, which the model reads, "
            "but is not one of them, so it would go unread; give --text_columns sent1,sent2,ending0,ending1,ending2,"
            "ending3,ending4 to read it, or drop or rename the column") in err, err


@pytest.mark.parametrize("label, msg", [("4", r"dev.csv:3: column 'label': '4' is not a choice: an index 0..3 or one "
                                               r"of \['ending0', 'ending1', 'ending2', 'ending3'\]"),
                                        ("ending9", r"dev.csv:3: column 'label': 'ending9' is not a choice"),
                                        ("\u00b2", r"dev.csv:3: column 'label': '\u00b2' is not a choice"),  # a digit
                                        # int() refuses
                                        ("\u2462", r"dev.csv:3: column 'label': '\u2462' is not a choice"),
                                        # digits of other scripts (str.isdecimal took them as choices 1 and 2)
                                        ("\uff11", r"dev.csv:3: column 'label': '\uff11' is not a choice"),
                                        ("-1", r"dev.csv:3: column 'label': '-1' is not a choice: .*; -1 is how SWAG"),
                                        ("\u0968", r"dev.csv:3: column 'label': '\u0968' is not a choice")])
def test_a_label_that_is_no_choice_is_named(init, tmp_path, label, msg):
    train = _write(tmp_path / "train.csv", _rows(8, 0))
    rows = _rows(2, 1)
    rows[1][-1] = label
    dev = _write(tmp_path / "dev.csv", rows)
    with pytest.raises(sj.errors.InputError, match=msg):
        ft.finetune(_config(init, train, dev), str(tmp_path / "run"))


def test_the_label_may_name_the_right_column(init, tmp_path):
    rows = _rows(4, 0)
    path = _write(tmp_path / "a.csv", [r[:-1] + [f"ending{r[-1]}"] for r in rows])
    task = tasks.ChoiceTask("a", {"train": str(path)}, ("sent1", "sent2"), tuple(HEADER[2:6]), "label")
    assert [ex.label for ex in task.load("train")] == [int(r[-1]) for r in rows]


def test_a_fifth_ending_beside_the_four_read_is_named_in_a_warning(tmp_path, caplog):
    """Training on endings chosen by name (config.data.choice_columns): a column numbered like them goes unread,
    which may be meant, so a warning, not a refusal (predict, reading the model's own columns, refuses)."""
    rows = _rows(4, 0)
    with open(tmp_path / "five.csv", "w", newline="") as f:
        csv.writer(f).writerows([HEADER[:6] + ["ending4", "label"], *[r[:6] + ["the film .", r[-1]] for r in rows]])
    task = tasks.ChoiceTask("a", {"train": str(tmp_path / "five.csv")}, ("sent1", "sent2"), tuple(HEADER[2:6]), "label")
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        assert len(task.load("train")) == 4
    assert "five.csv:1: column 'ending4' is numbered like ending0, ending1, ending2, ending3, which is read, but is " \
           "not read itself; config.data.text_columns or config.data.choice_columns names the columns read" \
           in caplog.text


def test_a_label_that_is_both_a_column_name_and_another_index_is_refused(tmp_path):
    """Endings in columns named 1..4: is the label 2 the column "2" (choice 1) or choice 2? Named by row; a label
    whose column and index agree (columns 0..3) is read."""
    rows = _rows(4, 0)
    path = _write(tmp_path / "d.csv", rows)
    header = ["sent1", "sent2", "1", "2", "3", "4", "label"]
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(r[:-1] + ["2"]) for r in rows) + "\n")
    task = tasks.ChoiceTask("d", {"train": str(path)}, ("sent1", "sent2"), ("1", "2", "3", "4"), "label")
    with pytest.raises(sj.errors.DataFileError, match=r"d.csv:2: column 'label': '2' names the ending column '2' "
                                                      r"\(choice 1\) and is the index of choice 2"):
        task.load("train")
    path.write_text(path.read_text().replace(",1,2,3,4,", ",0,1,2,3,"))
    task = tasks.ChoiceTask("d", {"train": str(path)}, ("sent1", "sent2"), ("0", "1", "2", "3"), "label")
    assert {ex.label for ex in task.load("train")} == {2}


@pytest.mark.parametrize("columns", ["ending0,,ending1", "ending0,ending1,", "ending0"])
def test_choice_columns_with_an_empty_name_or_one_ending_are_refused(tmp_path, columns):
    train = _write(tmp_path / "train.csv", _rows(4, 0))
    c = _config("unused", train, train)
    c.data.choice_columns = columns
    with pytest.raises(sj.errors.InputError, match=rf"config.data.choice_columns={columns!r}: two or more columns"):
        tasks.resolve(c)


def test_an_ending_column_the_header_lacks_names_choice_columns(tmp_path):
    """An ending the header lacks is the header's to name, and choice_columns is the setting that names endings (it
    pointed at text_columns)."""
    from squeezebert_jax import tasks

    (tmp_path / "mc.csv").write_text("sent1,sent2,ending0,ending1,label\nA man,He,runs,sits,0\n")
    task = tasks.ChoiceTask("mc", {"train": str(tmp_path / "mc.csv")}, ("sent1", "sent2"),
                            ("ending0", "ending1", "ending2"), "label")
    with pytest.raises(sj.errors.DataFileError, match=r"mc.csv:1: the header has no ending column 'ending2' \(has "
                                                      r"sent1, sent2, ending0, ending1, label\); name yours with "
                                                      r"config.data.choice_columns$"):
        task.load("train")


@pytest.mark.parametrize("same, at", [(("the sea .", "the sea ."), "ending1 and ending3"),
                                      (("the sea .", " the  sea . "), "ending1 and ending3"),
                                      # in case, a compatibility form or an invisible mark aside (one uncased id list)
                                      (("the sea .", "The Sea ."), "ending1 and ending3"),
                                      (("the sea .", "the s\u200bea ."), "ending1 and ending3")])
def test_two_endings_of_one_text_are_counted_by_line(tmp_path, caplog, same, at):
    """Two choices of the same text (white space aside): no label can pick one of them. Real data holds such rows
    (a distractor drawn equal to the answer), so they are kept and counted in a warning naming the first, in any
    split."""
    rows = _rows(4, 0)
    rows[1][3], rows[1][5] = same
    rows[3][2], rows[3][3] = "the sky .", "the sky ."
    path = _write(tmp_path / "s.csv", rows)
    task = tasks.ChoiceTask("s", {"train": str(path)}, ("sent1", "sent2"), tuple(HEADER[2:6]), "label")
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        assert len(task.load("train")) == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: 2 of 4 rows hold two endings of the same text (in case, form or invisible marks aside), which no "
        f"label can pick apart (the first: line 3, {at}, {' '.join(same[1].split())!r})"]


def test_a_file_whose_answers_never_name_choice_0_is_said_to_count_from_1(tmp_path, caplog):
    """Labels 1..4 over four endings: read from 0, the last ones were refused, but 1..3 trained every answer one
    ending late without a word. A training split with no answer 0 among enough rows is named in a warning."""
    rows = _rows(8, 0)
    for r in rows:
        r[-1] = str(1 + int(r[-1]) % 3)  # 1..3: no row's answer is choice 0
    path = _write(tmp_path / "one.csv", rows)
    task = tasks.ChoiceTask("s", {"train": str(path)}, ("sent1", "sent2"), tuple(HEADER[2:6]), "label")
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        task.load("train")
    assert f"{path}: no row's answer is choice 0 (the first ending column, ending0): labels count from 0" in caplog.text
