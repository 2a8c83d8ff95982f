"""eval/predict.py and squeezebert_jax.predict: labels and probabilities for new text from .txt, .csv and .jsonl, equal to
the classifier's own softmax; an existing --out is refused and kept. No result is lost or mangled: an --out is claimed
while a command works (a second command refuses), is never an input, and must be in an existing directory; a file that
is not UTF-8 is named by line and column; a str is one input, and an input holds the model's number of texts; task.json
is checked key by key."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from conftest import VOCAB
from squeezebert_jax import files, predict, tasks
from squeezebert_jax.errors import DataFileError, InputError
from squeezebert_jax.predict import Arity, Predictor, numbered_inputs, predict_file, read_inputs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("predict") / "model"
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                               id2label={0: "negative", 1: "positive"})
    sj.save_pretrained(sj.SqueezeBertForSequenceClassification(cfg, num_labels=2, rngs=nnx.Rngs(3)), path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


TEXTS = ["the movie was good", "a very bad plot", "truly awful", "great"]


def test_a_python_call_labels_text_with_the_models_own_probabilities(model_dir):
    out = Predictor(str(model_dir))(TEXTS)
    model = sj.load_pretrained(model_dir)
    model.eval()
    tok = sj.Tokenizer.from_dir(model_dir)
    for text, row in zip(TEXTS, out):
        enc = tok.encode_batch([text], None, max_length=16)
        logits = model(*(jnp.asarray(enc[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))).logits
        want = np.asarray(jax.nn.softmax(logits[0]))
        assert row["label"] == ("negative", "positive")[int(want.argmax())]
        np.testing.assert_allclose([row["probabilities"]["negative"], row["probabilities"]["positive"]], want,
                                   atol=1e-5)


def test_the_script_reads_txt_csv_and_jsonl_and_never_replaces_its_out(model_dir, tmp_path, run_cli, digest):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n\n")
    (tmp_path / "in.csv").write_text('id,review\n1,the movie was good\n2,"a very bad\nplot"\n')
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    want = Predictor(str(model_dir))(TEXTS)
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.txt", "--out",
                           tmp_path / "txt.jsonl")
    assert rc == 0, err
    got = [json.loads(line) for line in open(tmp_path / "txt.jsonl")]
    assert [g["label"] for g in got] == [w["label"] for w in want] and [g["line"] for g in got] == [1, 2, 3, 4]
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.csv", "--text_columns",
                           "review", "--out", tmp_path / "csv.jsonl")
    assert rc == 0, err
    assert [json.loads(x)["line"] for x in open(tmp_path / "csv.jsonl")] == [2, 3]  # where each input's row starts
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.jsonl", "--out",
                           tmp_path / "jsonl.jsonl")
    assert rc == 0 and [json.loads(x)["label"] for x in open(tmp_path / "jsonl.jsonl")] == [w["label"] for w in want]
    before = digest(tmp_path / "txt.jsonl")
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.csv", "--out",
                           tmp_path / "txt.jsonl")
    assert rc == 1 and "already exists; pass --overwrite" in err and err.count("\n") == 1
    assert digest(tmp_path / "txt.jsonl") == before
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.csv", "--out",
                           tmp_path / "x.jsonl")
    assert rc == 1 and "in.csv:1: the header has no column 'text' (has id, review); name yours with " \
                       "--text_columns" in err
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.txt", "--text_columns",
                           "review", "--out", tmp_path / "x.jsonl")
    assert rc == 1 and err.count("\n") == 1 and "--text_columns review: " in err and "is a .txt file" in err, err
    assert not (tmp_path / "x.jsonl").exists()


def test_a_model_without_a_classifier_is_one_line(tmp_path, run_cli):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0)), tmp_path / "m")
    (tmp_path / "m" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (tmp_path / "in.txt").write_text("good\n")
    rc, out, err = run_cli("eval/predict.py", "--model", tmp_path / "m", "--input", tmp_path / "in.txt", "--out",
                           tmp_path / "o.jsonl")
    assert rc == 1 and "has no classifier, tagger, question-answering or multiple-choice head" in err and not (tmp_path / "o.jsonl").exists()


def test_a_tagger_gives_a_tag_per_word_from_its_first_piece(tmp_path, caplog):
    """Tags per word: the argmax at each word's first piece, as the model scores it; words past max_length get None,
    with a warning naming predict's --max_length (it named training's max_seq_length and entities "missed")."""
    from squeezebert_jax import tasks

    vocab = VOCAB + ["##s"]
    cfg = sj.SqueezeBertConfig(vocab_size=len(vocab), hidden_size=32, embedding_size=32, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                               id2label={0: "O", 1: "B-X", 2: "I-X"})
    sj.save_pretrained(sj.SqueezeBertForTokenClassification(cfg, num_labels=3, rngs=nnx.Rngs(1)), tmp_path / "tagger")
    (tmp_path / "tagger" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    texts = ["the movies was good", "plots truly awful"]
    out = Predictor(str(tmp_path / "tagger"))(texts)
    model = sj.load_pretrained(tmp_path / "tagger")
    model.eval()
    tok = sj.Tokenizer.from_dir(tmp_path / "tagger")
    for text, row in zip(texts, out):
        arrays = tasks.ConllTask("t", {}, ("O", "B-X", "I-X")).encode(
            [tasks.TokenExample(0, tuple(text.split()), None)], tok, 16)
        logits = model(*(jnp.asarray(arrays[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))).logits
        first = arrays["labels"][0] != tasks.IGNORE
        assert row["words"] == text.split() and sum(first) == len(text.split())
        assert row["tags"] == [("O", "B-X", "I-X")[i] for i in np.asarray(logits[0]).argmax(-1)[first]]
    with caplog.at_level("WARNING"):
        short = Predictor(str(tmp_path / "tagger"), max_length=4)(["the movie was good"])[0]
    assert short["tags"][2:] == [None, None] and None not in short["tags"][:2]  # [CLS] the movie [SEP]
    assert "2 words of 1 sentences lie past max_length=4 and get no tag (null)" in caplog.text  # Predictor's argument
    assert "max_seq_length" not in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        Predictor(str(tmp_path / "tagger"), max_length=4,
                  length_setting="config.max_seq_length")(["the movie was good"])
    assert "lie past config.max_seq_length=4 and get no tag (null); a larger config.max_seq_length" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):  # at the model's positions no setting tags more: it says so
        Predictor(str(tmp_path / "tagger"))([" ".join(["the movie was good"] * 20)])
    assert ("lie past max_length=64 and get no tag (null); the model reads at most 64 tokens (its positions): split "
            "longer sentences") in caplog.text
    # a word the tokenizer reads as nothing: named by the file's line (a blank line before it), not "input 2"
    (tmp_path / "in.txt").write_text("the movie was good\n\nthe \x07 movie\n")
    with pytest.raises(sj.errors.DataFileError, match=r"in.txt:3: word 2 of the sentence \('\\x07'\) holds nothing"):
        predict.predict_file(str(tmp_path / "tagger"), str(tmp_path / "in.txt"), str(tmp_path / "o.jsonl"))
    with pytest.raises(sj.errors.DataFileError, match=r"^input 2: word 2 of the sentence"):  # in Python: the input
        Predictor(str(tmp_path / "tagger"))(["the movie", "the \x07 movie"])
    assert not (tmp_path / "o.jsonl").exists()


# -- predict loses or mangles no result ----------------------------------------------------------------------------

CARD = tasks.TASK_CARD


def with_card(model_dir, tmp_path, card, name="m"):
    """A copy of the classifier with ``card`` as its task.json (a dict, or the file's raw text)."""
    path = tmp_path / name
    shutil.copytree(model_dir, path)
    (path / CARD).write_text(card if isinstance(card, str) else json.dumps(card))
    return path


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def never_built(monkeypatch):
    """Refusals come before the work: building the Predictor fails the test."""
    def boom(*a, **k):
        raise AssertionError("the model was loaded before the refusal")
    monkeypatch.setattr(predict, "Predictor", boom)


# 1. one --out, two commands: never both succeed with a result lost

def test_an_out_claimed_by_another_command_is_refused_before_any_work(model_dir, tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("good\n")
    out = tmp_path / "o.jsonl"
    with files.claim_output_file(out) as claimed:
        assert claimed == str(out) and os.path.exists(files.claim_path(out))
        info = json.loads(open(files.claim_path(out)).read())
        assert info["pid"] == os.getpid()
        never_built(monkeypatch)
        with pytest.raises(InputError, match=rf"^--out {out} is being written by another run \(pid {os.getpid()}.*"
                                             r"wait for it to end, or choose another --out$"):
            predict_file(str(model_dir), str(tmp_path / "in.txt"), str(out))
        with pytest.raises(InputError, match="is being written by another run"):  # --overwrite does not take it
            predict_file(str(model_dir), str(tmp_path / "in.txt"), str(out), overwrite=True)
    assert not out.exists() and not os.path.exists(files.claim_path(out))  # released, and nothing was written
    with pytest.raises(InputError, match=r"^input_path is bytes b'in.txt'; give a path as a str"):  # not a TypeError
        predict_file(str(model_dir), b"in.txt", str(out))
    # the API's other arguments: overwrite="no" replaced a file the user had (any truthy value was taken as True);
    # a list of text columns was an AttributeError
    out.write_text("keep")
    for flag in ("no", 1, None):
        with pytest.raises(InputError, match=rf"^overwrite={flag!r}: expected True or False$"):
            predict_file(str(model_dir), str(tmp_path / "in.txt"), str(out), overwrite=flag)
    with pytest.raises(InputError, match=r"^text_columns is list \['text'\]; give the column names as one str"):
        predict_file(str(model_dir), str(tmp_path / "in.txt"), str(out), text_columns=["text"])
    assert out.read_text() == "keep"
    out.unlink()
    # the Python API's other paths alike (os's "Can't mix strings and bytes in path components" named none of them)
    for call, name in ((lambda: Predictor(os.fsencode(model_dir)), "model_dir"), (lambda: Predictor([model_dir]),
                                                                                   "model_dir"),
                       (lambda: sj.load_pretrained(os.fsencode(model_dir)), "model_dir"),
                       (lambda: sj.save_pretrained(sj.load_pretrained(model_dir), 7), "model_dir"),
                       (lambda: sj.save_pretrained(sj.load_pretrained(model_dir), str(tmp_path / "c"), b"t"),
                        "tokenizer_dir")):
        with pytest.raises(InputError, match=rf"^{name} is \w+ .*; give a path as a str \(or a pathlib.Path\)$"):
            call()
    assert not (tmp_path / "c").exists()
    saved = sj.save_pretrained(sj.load_pretrained(np.str_(str(model_dir))), np.str_(str(tmp_path / "c")))
    assert type(saved) is str and "config.json" in os.listdir(saved)  # numpy's str_ (listdir gave bytes names)


def test_a_claim_is_released_on_failure_and_taken_over_from_a_dead_run(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("good\n")
    out = tmp_path / "o.jsonl"
    with pytest.raises(RuntimeError):
        with files.claim_output_file(out):
            raise RuntimeError("the work failed")
    assert not os.path.exists(files.claim_path(out))
    for stale in (json.dumps({"pid": dead_pid(), "host": os.uname().nodename}), str(dead_pid()), ""):
        with open(files.claim_path(out), "w") as f:  # a run killed with -9 left its lock
            f.write(stale)
        assert predict_file(str(model_dir), str(tmp_path / "in.txt"), str(out), overwrite=True) == 1
        assert not os.path.exists(files.claim_path(out)) and len(out.read_text().splitlines()) == 1


def test_a_live_holder_is_refused_and_a_killed_one_taken_over(tmp_path):
    """Across processes: a command holding the claim (its flock) is named; once it is killed -9, its lock is stale."""
    out = tmp_path / "o.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom squeezebert_jax import files\n"
                               f"with files.claim_output_file({str(out)!r}):\n    print('held', flush=True)\n"
                               "    time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match=rf"is being written by another run \(pid {holder.pid}"):
            with files.claim_output_file(out):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert os.path.exists(files.claim_path(out))  # left by the killed run
    with files.claim_output_file(out):
        assert json.loads(open(files.claim_path(out)).read())["pid"] == os.getpid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # a lock naming a live process whose flock is free (a file system without flock): refused, not taken
        with open(files.claim_path(out), "w") as f:
            f.write(json.dumps({"pid": live.pid, "host": os.uname().nodename}))
        with pytest.raises(InputError, match=rf"pid {live.pid}"):
            with files.claim_output_file(out):
                pass
    finally:
        live.kill()
        live.wait()
    with open(files.claim_path(out), "w") as f:  # a file of that name that is no lock is never deleted
        f.write("my notes\n")
    with pytest.raises(InputError, match=r"o.jsonl.lock exists and is no lock of this program; move it away"):
        with files.claim_output_file(out):
            pass
    assert open(files.claim_path(out)).read() == "my notes\n"


def test_two_predicts_to_one_out_at_once_keep_one_whole_result(model_dir, tmp_path):
    (tmp_path / "a.txt").write_text("good\nbad\n")
    (tmp_path / "b.txt").write_text("good\nbad\ngreat\n")
    out = tmp_path / "o.jsonl"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = {name: subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.dirname(__file__)), "eval",
                                                                  "predict.py"), "--model", str(model_dir), "--input",
                                     str(tmp_path / name), "--out", str(out)], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name in ("a.txt", "b.txt")}
    done = {name: (p.wait(timeout=300), p.stderr.read()) for name, p in procs.items()}
    ok = [name for name, (rc, _) in done.items() if rc == 0]
    assert len(ok) == 1, done
    (loser_rc, err), = [v for name, v in done.items() if name not in ok]
    assert loser_rc == 1 and ("is being written by another run" in err or "already exists" in err), err
    assert len(out.read_text().splitlines()) == {"a.txt": 2, "b.txt": 3}[ok[0]]
    assert not os.path.exists(files.claim_path(out))


# 2. an output is never one of the command's inputs

def test_out_is_never_the_input_even_with_overwrite(model_dir, tmp_path, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("good\n")
    before = os.listdir(model_dir)
    os.symlink(src, tmp_path / "link.txt")
    os.link(src, tmp_path / "hard.txt")
    never_built(monkeypatch)
    for out in (src, tmp_path / "link.txt", tmp_path / "hard.txt", tmp_path / "sub" / ".." / "in.txt"):
        if "sub" in str(out):
            (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(InputError, match=rf"^--out {out} is {src}, an input of this command; an output never "
                                             r"replaces an input \(not even with --overwrite\)"):
            predict_file(str(model_dir), str(src), str(out), overwrite=True)
    assert src.read_text() == "good\n"
    # nor anywhere in the MODEL_DIR: its files, and the names it would read (tokenizer.json, task.json) or not
    for name in ("config.json", "vocab.txt", "tokenizer_config.json", "tokenizer.json", "task.json", "preds.jsonl"):
        with pytest.raises(InputError, match=r"is inside .*, an input directory of this command"):
            predict_file(str(model_dir), str(src), str(model_dir / name), overwrite=True)
    assert sorted(os.listdir(model_dir)) == sorted(before)
    with pytest.raises(InputError, match="an input of this command"):  # the one check, for every command
        files.check_output_file(tmp_path / "link.txt", True, "--json", inputs=(src,))


# 3. an --out whose directory is missing: refused before the work, for every command

def test_an_out_in_a_missing_directory_is_refused_before_any_work(model_dir, tmp_path, monkeypatch):
    (tmp_path / "in.txt").write_text("good\n")
    never_built(monkeypatch)
    out = tmp_path / "no_such_dir" / "o.jsonl"
    with pytest.raises(InputError, match=rf"^--out {out}: no directory {tmp_path / 'no_such_dir'}; create it first"):
        predict_file(str(model_dir), str(tmp_path / "in.txt"), str(out))
    assert not (tmp_path / "no_such_dir").exists()
    with pytest.raises(InputError, match=r"^--json .*a/b/c.json: no directory .*a/b; create it first"):
        files.check_output_file(tmp_path / "a" / "b" / "c.json", what="--json")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match=r"is a file, not a directory"):
        files.check_output_file(tmp_path / "f" / "o.jsonl")
    with pytest.raises(InputError, match=r"^--out is empty"):
        files.check_output_file("")
    # "missing/../o.jsonl": the normalised path's directory exists, but the system walks through "missing" (this was
    # the system's error naming the lock file)
    via = os.path.join(str(tmp_path), "missing", "..", "o.jsonl")
    with pytest.raises(InputError, match=rf"^--out {re.escape(via)}: the path goes through {tmp_path / 'missing'}, "
                                         r"which is not a directory"):
        predict_file(str(model_dir), str(tmp_path / "in.txt"), via)
    assert files.check_output_file(os.path.join(str(tmp_path), ".", "o.jsonl"))  # a path that walks through dirs


# 4. a text file that is not UTF-8: named by line and column

@pytest.mark.parametrize("name, data, where", [
    ("in.txt", b"good\ncaf\xe9 film\n", "in.txt:2:4: not UTF-8 text (byte 0xe9)"),
    ("in.csv", b"text\ngood\n\xff bad\n", "in.csv:3:1: not UTF-8 text (byte 0xff)"),
    ("in.jsonl", b'{"text": "good"}\n{"text": "na\xefve"}\n', "in.jsonl:2:13: not UTF-8 text (byte 0xef)"),
])
def test_a_latin1_input_is_named_by_line_and_column(tmp_path, name, data, where):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(DataFileError, match=rf"^{tmp_path / where}; save the file as UTF-8$".replace("(", r"\(")
                       .replace(")", r"\)")):
        read_inputs(str(tmp_path / name))


def test_a_txt_input_drops_its_bom_and_the_script_names_a_bad_byte(model_dir, tmp_path, run_cli):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfthe movie was good\r\ngreat\r\n")
    assert read_inputs(str(tmp_path / "bom.txt")) == ["the movie was good", "great"]
    (tmp_path / "latin.txt").write_bytes("good\nthe café\n".encode("latin-1"))
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "latin.txt", "--out",
                           tmp_path / "o.jsonl")
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{tmp_path / 'latin.txt'}:2:8: not UTF-8 text (byte 0xe9)" in err and not (tmp_path / "o.jsonl").exists()


def test_a_txt_of_another_format_is_named_by_its_first_line(tmp_path, caplog):
    """tasks.text_lines, the one reader of a .txt of texts (predict's inputs, a distillation's transfer text): a CSV,
    JSON Lines or CoNLL file named .txt had its header, its JSON or its tags read as texts. Refused at the first line,
    naming the format; text with commas in it is text."""
    from squeezebert_jax import distill

    for body, msg in (("text,label\nhello world,1\n", r"'text,label' reads as a table's header"),
                      ("Sentence\tLabel\ngood\t1\n", r"'Sentence\\tLabel' reads as a table's header"),
                      ('{"text": "a"}\n', r"a JSON object, where a text per line is read: a JSON Lines file"),
                      ("-DOCSTART- -X- O\n\njohn B-PER\n", r"'-DOCSTART- -X- O' reads as a CoNLL line"),
                      ("john B-PER\nshot O\n", r"'john B-PER' reads as a CoNLL line \(a word and its tag\)"),
                      ("{" + '"a":{' * 3000 + "}" * 3001 + "\n", r"a JSON object, where a text per line is read")):
        (tmp_path / "in.txt").write_text(body)
        with pytest.raises(DataFileError, match=rf"^{tmp_path / 'in.txt'}:1: {msg}"):
            numbered_inputs(str(tmp_path / "in.txt"))
        with pytest.raises(DataFileError, match=rf"^{tmp_path / 'in.txt'}:1: {msg}"):
            distill.read_transfer_text(str(tmp_path / "in.txt"), "sst2")
    for first in ("Text, please", "I love B-movies", "type B-positive", "my E-mail", "{not json}"):
        (tmp_path / "ok.txt").write_text(f"{first}\nlabel, text and more\n")
        assert [x for _, x in numbered_inputs(str(tmp_path / "ok.txt"))] == [first, "label, text and more"]
    # the default column "text" beside a lettered one (BERT's text_b): the pair's second text went unread
    (tmp_path / "pair.csv").write_text("text,text_b\na,b\n")
    with pytest.raises(DataFileError, match=r"pair.csv:1: column 'text_b' is numbered like text, which the model "
                                            r"reads"):
        read_inputs(str(tmp_path / "pair.csv"))
    assert read_inputs(str(tmp_path / "pair.csv"), "text") == ["a"]  # named: as asked
    # a transfer text's special tokens and markers are counted as a file's rows are (files.warn_texts)
    (tmp_path / "t.txt").write_text("a [SEP] b\nnan\nfine\n")
    with caplog.at_level("WARNING"):
        assert len(distill.read_transfer_text(str(tmp_path / "t.txt"), "sst2")) == 3
    assert f"{tmp_path / 't.txt'}: 1 of 3 rows have a text holding a special token written out ([SEP] at line 1)" \
        in caplog.text and f"{tmp_path / 't.txt'}: 1 of 3 rows have a text that is how pandas" in caplog.text


def test_a_txt_line_of_invisible_marks_is_blank_and_an_empty_text_of_a_pair_is_named(tmp_path, caplog):
    """A line of white space or invisible marks alone is skipped like a blank one, and the skipped lines are counted
    in a warning naming them (the "line" field keeps the alignment); an empty text beside another is refused by file
    and line; a directory is named as one."""
    (tmp_path / "z.txt").write_text("good\n\u200b\u200d\n \t \nbad\n\n")
    with caplog.at_level("WARNING", logger="squeezebert_jax.predict"):
        assert numbered_inputs(str(tmp_path / "z.txt")) == [(1, "good"), (4, "bad")]
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'z.txt'}: 3 blank lines skipped (line 2, 3, 5): 2 inputs, each output naming its line"]
    caplog.clear()
    (tmp_path / "y.txt").write_text("good\nbad\n")  # a last line's newline is no blank line
    assert numbered_inputs(str(tmp_path / "y.txt")) == [(1, "good"), (2, "bad")] and not caplog.records
    (tmp_path / "sq.json").write_text('{"version": "v1.1", "data": [{"title": "t", "paragraphs": []}]}\n')
    with pytest.raises(sj.errors.DataFileError, match=r"sq.json:1: a SQuAD file .*predict reads a JSON Lines file of "
                                                      r"\{\"question\": ..., \"context\": ...\} objects"):
        numbered_inputs(str(tmp_path / "sq.json"), "question,context")
    # a column numbered like one the model reads (the model's own columns: no --text_columns) would go unread:
    # digits in the middle, or after a name without any
    for name, header, columns, msg in (("m.csv", "q1a,q2a,q3a", "q1a,q2a", r"column 'q3a' is numbered like q1a, q2a"),
                                       ("t.csv", "text,text2", "text", r"column 'text2' is numbered like text, which "
                                                                       r"the model reads.*; drop or rename the column"),
                                       ("a.csv", "question,question2,context", "question,context",
                                        r"column 'question2' is numbered like question")):
        (tmp_path / name).write_text(f"{header}\n{','.join(['good'] * len(header.split(',')))}\n")
        arity = Arity(len(columns.split(",")), len(columns.split(",")), "texts")
        with pytest.raises(sj.errors.DataFileError, match=rf"{name}:1: {msg}"):
            numbered_inputs(str(tmp_path / name), columns, arity, chosen=False)
        assert len(numbered_inputs(str(tmp_path / name), columns, arity)) == 1  # columns chosen: the others unread
    (tmp_path / "q.csv").write_text('text\n\n""\ngood\n')  # a quoted empty text is a row, not a blank line
    with pytest.raises(sj.errors.DataFileError, match=r"q.csv:3: column 'text' is empty"):
        numbered_inputs(str(tmp_path / "q.csv"))
    (tmp_path / "p.txt").write_text("good\tfine\nbad\t\u200b\n")
    with pytest.raises(sj.errors.DataFileError, match=r"p.txt:2: text 2 of the line is empty \(or only white space "
                                                      r"or invisible marks\)"):
        numbered_inputs(str(tmp_path / "p.txt"))
    with pytest.raises(sj.errors.InputError, match=r"is a directory, not a file of inputs"):
        numbered_inputs(str(tmp_path))
    # a tagger's CoNLL file: the list names .txt (it used to give the training files' list alone)
    (tmp_path / "dev.conll").write_text("john B-PER\n")
    with pytest.raises(sj.errors.DataFileError, match=r"dev.conll: unknown file type '.conll'; give a .txt \(a "
                                                      r"text per line; a tagger: a sentence per line\), .csv, .tsv "
                                                      r"or .jsonl file; predict reads no CoNLL file"):
        numbered_inputs(str(tmp_path / "dev.conll"))


# 5. the call contract: a str is one input; a text count that is not the model's is refused

def test_a_str_is_one_input_and_a_list_a_list(model_dir):
    p = Predictor(str(model_dir))
    one = p("the movie was good")
    assert isinstance(one, dict) and one == p(["the movie was good"])[0]
    pair = p(("the movie was good", "great"))  # a classifier without task.json: a text or a pair
    assert isinstance(pair, dict) and pair == p([("the movie was good", "great")])[0] == p([["the movie was good",
                                                                                              "great"]])[0]
    assert len(p(["good", "bad", "great"])) == 3 and p([]) == [] and p(("good", "bad")) != p("good")
    assert p(np.array(["good", "bad"])) == p(["good", "bad"])
    from collections import UserString  # a str-like text is one text, not a sequence of characters

    assert p(UserString("the movie was good")) == one and p([UserString("good"), "bad"]) == p(["good", "bad"])
    # a batch_size far past the inputs: batches of the inputs there are (it allocated 10**9 rows: a MemoryError)
    assert Predictor(str(model_dir), batch_size=10 ** 9)(["good", "bad"]) == p(["good", "bad"])
    # another kind's method: one line naming both kinds (an IndexError deep inside)
    for call, msg in ((lambda: p.tag(["good"]), r"tag\(\) is for a tagger \(token classification\); .* is a sequence "
                                                r"classifier \(call the Predictor itself"),
                      (lambda: p.answer([("q", "c")]), r"answer\(\) is for a question-answering model"),
                      (lambda: p.choose([("a", "b", "c")]), r"choose\(\) is for a multiple-choice model")):
        with pytest.raises(sj.errors.InputError, match=msg):
            call()


@pytest.mark.parametrize("bad, msg", [
    (b"good film", r"^the inputs are bytes b'good film': give a text \(str\)"),
    (memoryview(b"ab"), r"^the inputs are memoryview .*: give a text \(str\)"),  # "input 1 is int 97" was said
    ({"text": "good"}, r"^the inputs are dict \{'text': 'good'\}: give a text"),
    (3, r"^the inputs are int 3: give a text"),
    (None, r"^the inputs are NoneType None"),
    ([1, 2], r"^input 1 is int 1, not a text \(str\) or a tuple of texts$"),
    (["good", b"bad"], r"^input 2 is bytes b'bad', not a text"),
    (["good", ("a", 2)], r"^input 2 is tuple \('a', 2\), not a text"),
    ([("a", "b", "c")], r"^input 1 holds 3 texts; this model reads a text, or a pair of texts"),
    ((("a", "b", "c"),), r"^input 1 holds 3 texts"),
    (["good", ("a", "b")], r"^input 2 holds 2 texts but input 1 holds 1: every input holds the same number$"),
    ([[]], r"^input 1 holds 0 texts; this model reads a text, or a pair of texts per input"),
    ((), r"^the input holds 0 texts; this model reads"),  # a tuple is one input, an empty one too (it gave [])
])
def test_anything_else_is_one_clear_input_error(model_dir, bad, msg):
    with pytest.raises(InputError, match=msg):
        Predictor(str(model_dir))(bad)


def test_the_texts_per_input_are_the_models_text_columns(model_dir, tmp_path):
    single = with_card(model_dir, tmp_path, {"kind": "classification", "text_columns": ["review"]}, "single")
    p = Predictor(str(single))
    assert p("good")["label"] in ("negative", "positive")
    with pytest.raises(InputError, match=r"^the input holds 2 texts; this model reads one text per input \(its "
                                         r"task.json text_columns: review\)"):
        p(("good", "bad"))
    (tmp_path / "tabs.txt").write_text("good\nthe movie\twas good\n")
    with pytest.raises(DataFileError, match=rf"^{tmp_path / 'tabs.txt'}:2: 2 tab-separated texts; this model reads "
                                            r"one text per input"):
        read_inputs(str(tmp_path / "tabs.txt"), p.columns, p.arity)
    (tmp_path / "two.csv").write_text("a,b\ngood,bad\n")
    with pytest.raises(DataFileError, match=r"two.csv:2: 2 text columns \(a, b; name others with --text_columns\); "
                                            r"this model reads one text"):
        read_inputs(str(tmp_path / "two.csv"), "a,b", p.arity)
    for columns, why in (("a,", "an empty column name"), (",a", "an empty column name"),
                         ("a, a", "a column named twice")):
        with pytest.raises(InputError, match=rf"^--text_columns '{columns}': {why}; give each text column once"):
            read_inputs(str(tmp_path / "two.csv"), columns, p.arity)
    pair = Predictor(str(with_card(model_dir, tmp_path, {"kind": "classification",
                                                         "text_columns": ["premise", "hypothesis"]}, "pair")))
    assert isinstance(pair(("good", "bad")), dict)
    with pytest.raises(InputError, match=r"^the input holds 1 text; this model reads a pair of texts"):
        pair("good")
    (tmp_path / "mixed.txt").write_text("good\tbad\ngreat\n")
    with pytest.raises(DataFileError, match=r"mixed.txt:2: 1 tab-separated text; this model reads a pair"):
        read_inputs(str(tmp_path / "mixed.txt"), pair.columns, pair.arity)
    with pytest.raises(DataFileError, match=r"mixed.txt:2: 1 tab-separated text, but line 1 has 2: every input "
                                            r"holds the same number of texts"):  # a model without task.json
        read_inputs(str(tmp_path / "mixed.txt"))
    # a one-column file without a header: its first text would be the column's name, and go unpredicted
    (tmp_path / "texts.csv").write_text("a gripping film\na dull film\nfun\n")
    with pytest.raises(DataFileError, match=r"texts.csv:1: the header 'a gripping film' reads as a text, not as a "
                                            r"column's name: a file of texts without a header is a .txt file"):
        read_inputs(str(tmp_path / "texts.csv"))
    (tmp_path / "named.csv").write_text("review text\na dull film\n")  # a name of two words is a name
    assert len(read_inputs(str(tmp_path / "named.csv"))) == 1
    # another separator than the extension's: 'a fine film|1' was read as the text (a model without task.json)
    (tmp_path / "pipes.csv").write_text("text|label\na fine film|1\n")
    with pytest.raises(DataFileError, match=r"pipes.csv:1: one column, 'text\|label'; the header is pipe-separated, "
                                            r"but a .csv file is read comma-separated: save it comma-separated$"):
        read_inputs(str(tmp_path / "pipes.csv"))


def test_a_single_text_model_refuses_a_tab_separated_pair_through_the_script(model_dir, tmp_path, run_cli):
    single = with_card(model_dir, tmp_path, {"kind": "classification", "text_columns": ["text"]})
    (tmp_path / "in.txt").write_text("good\nbad\tplot\n")
    rc, out, err = run_cli("eval/predict.py", "--model", single, "--input", tmp_path / "in.txt", "--out",
                           tmp_path / "o.jsonl")
    assert rc == 1 and err.count("\n") == 1 and f"{tmp_path / 'in.txt'}:2: 2 tab-separated texts" in err, err
    assert not (tmp_path / "o.jsonl").exists()


def test_a_qa_model_takes_one_question_context_pair(tmp_path, caplog):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    sj.save_pretrained(sj.SqueezeBertForQuestionAnswering(cfg, rngs=nnx.Rngs(0)), tmp_path / "qa")
    (tmp_path / "qa" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    p = Predictor(str(tmp_path / "qa"), max_length=32)
    one = p(("what was good", "the movie was good"))
    assert isinstance(one, dict) and set(one) == {"answer", "start", "end", "score", "probability"}
    with pytest.raises(InputError, match=r"^the input holds 1 text; this model reads a \(question, context\) pair"):
        p("the movie was good")
    # the run's windows (task.json) do not fit a shorter --max_length: named as predict's setting, not training's
    from squeezebert_jax import squad

    card = squad.SquadTask("t", {}, version_2=False, max_query_length=16).card()  # doc_stride 128
    (tmp_path / "qa" / "task.json").write_text(json.dumps(card))
    with pytest.raises(InputError, match=r"^max_length=32 leaves 13 pieces of context in a window .*max_query_length "
                                         r"16\), not more than the doc_stride 128 the model was trained with \(.*qa/"
                                         r"task.json\): give a larger --max_length"):
        Predictor(str(tmp_path / "qa"), max_length=32)(("what was good", "the movie was good"))
    # a question past the run's max_query_length: the warning names fine-tuning's setting, which predict cannot change
    card = squad.SquadTask("t", {}, version_2=False, max_query_length=2, doc_stride=4).card()
    (tmp_path / "qa" / "task.json").write_text(json.dumps(card))
    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.tokenizer"):
        Predictor(str(tmp_path / "qa"), max_length=32)(("what was good", "the movie was good"))
    assert [r.getMessage() for r in caplog.records] == [
        "1 of 1 questions (100.0%) are longer than 2 tokens and were cut to fit (the model reads none of the rest); a "
        "larger data.max_query_length when fine-tuning (predict reads questions as the model's task.json says) keeps "
        "more"]


# 6. task.json: one validator, naming the file and the key

def _real_cards():
    from squeezebert_jax import squad

    return [tasks.FileTask("t", "classification", {"train": "x.csv"}, ("review",), "l", ("a", "b")).card(),
            tasks.FileTask("t", "multilabel", {"train": "x.csv"}, ("a", "b"), "l", ("x", "y")).card(),
            tasks.ChoiceTask("t", {}, ("sent1", "sent2"), ("e0", "e1", "e2"), "label").card(),
            squad.SquadTask("t", {}, version_2=True).card()]


def test_the_cards_fine_tuning_writes_are_read(tmp_path):
    for card in _real_cards():
        (tmp_path / CARD).write_text(json.dumps(card, indent=2))
        assert predict.read_card(str(tmp_path)) == card
    (tmp_path / CARD).unlink()
    assert predict.read_card(str(tmp_path)) == {}


@pytest.mark.parametrize("card, msg", [
    ({"kind": "classification", "text_columns": ["text"], "epochs": 3},
     r"unknown key 'epochs' for a classification model \(its keys: kind, text_columns, glue_task\); remove it"),
    ({"kind": "classification", "text_columns": ["sentence"], "glue_task": "sst3"},
     r"'glue_task' is \"sst3\"; it must be one of GLUE's tasks \(cola, sst2"),
    ({"kind": "question_answering", "doc_stride": 8, "text_columns": ["q", "c"]},
     r"unknown key 'text_columns' for a question_answering model"),
    ({"text_columns": ["text"]}, r"no key 'kind' \(one of classification, regression"),
    ({"kind": "clasification"}, r"'kind' is \"clasification\", not one of classification, regression"),
    ({"kind": ["classification"]}, r"'kind' is \[\"classification\"\], not one of"),
    ({"kind": "classification", "text_columns": []}, r"'text_columns' is \[\]; it must be a non-empty list"),
    ({"kind": "classification", "text_columns": "text"}, r"'text_columns' is \"text\"; it must be a non-empty list"),
    ({"kind": "classification", "text_columns": ["a", "a"]}, r"'text_columns' is .*distinct non-empty"),
    ({"kind": "classification", "text_columns": ["a", ""]}, r"'text_columns' is .*distinct non-empty"),
    # names a file's reader keys alike (white space and invisible marks dropped, NFC): one column twice
    ({"kind": "classification", "text_columns": ["text", "text "]}, r"'text_columns' is .*distinct non-empty"),
    ({"kind": "classification", "text_columns": ["text", "\u200b"]}, r"'text_columns' is .*distinct non-empty"),
    ({"kind": "multiple_choice", "text_columns": ["ctx"], "choice_columns": ["a", "ctx\u200b"]},
     r"'choice_columns' repeats the text column 'ctx'"),
    ({"kind": "classification", "text_columns": ["a", 1]}, r"'text_columns' is .*distinct non-empty"),
    ({"kind": "classification", "text_columns": ["a", "b", "c"]}, r"'text_columns' is .*; it must be 1 to 2 column"),
    ({"kind": "multiple_choice", "text_columns": ["ctx"], "choice_columns": ["e0"]},
     r"'choice_columns' is \[\"e0\"\]; it must be 2 or more column names"),
    ({"kind": "multiple_choice", "text_columns": ["ctx"], "choice_columns": ["ctx", "e1"]},
     r"'choice_columns' repeats the text column 'ctx'"),
    ({"kind": "question_answering", "doc_stride": -1}, r"'doc_stride' is -1; it must be an integer >= 0"),
    ({"kind": "question_answering", "n_best": 0}, r"'n_best' is 0; it must be an integer >= 1"),
    ({"kind": "question_answering", "n_best": 2.5}, r"'n_best' is 2.5; it must be an integer >= 1"),
    ({"kind": "question_answering", "max_query_length": True}, r"'max_query_length' is true; it must be an integer"),
    ({"kind": "question_answering", "max_answer_length": "30"}, r"'max_answer_length' is \"30\"; it must be an int"),
    ({"kind": "question_answering", "version_2": 1}, r"'version_2' is 1; it must be true or false"),
    ('{"kind": "question_answering", "null_threshold": NaN}', r"'null_threshold' is NaN; it must be a finite number"),
    ('{"kind": "question_answering", "null_threshold": Infinity}', r"'null_threshold' is Infinity; it must be a fin"),
    ('{"kind": "classification", "kind": "regression"}', r"the key 'kind' appears twice in one object"),
    ('["classification"]', r"a list, not an object of the task's settings"),
    ('{"kind": "classification",\n', r"2:1: not valid JSON \(.*\) \(a task description: train/finetune.py"),
])
def test_a_bad_task_card_names_the_file_and_the_key(tmp_path, card, msg):
    (tmp_path / CARD).write_text(card if isinstance(card, str) else json.dumps(card))
    with pytest.raises(InputError, match=rf"^{tmp_path / CARD}:{'' if msg[0].isdigit() else ' '}{msg}"):
        predict.read_card(str(tmp_path))


def test_a_card_of_another_kind_of_model_is_refused(model_dir, tmp_path):
    for card, msg in [({"kind": "question_answering"}, r"'kind' is 'question_answering', but .* holds a classifier "
                                                       r"model"),
                      ({"kind": "regression", "text_columns": ["text"]}, r"'kind' is 'regression', but the model's "
                                                                         r"classifier has 2 outputs")]:
        path = with_card(model_dir, tmp_path, card, name=card["kind"])
        with pytest.raises(InputError, match=rf"^{path / CARD}: {msg}"):
            Predictor(str(path))
    (tmp_path / "latin" / CARD).parent.mkdir()
    (tmp_path / "latin" / CARD).write_bytes(b'{"kind": "classification", "text_columns": ["caf\xe9"]}')
    with pytest.raises(DataFileError, match=r"task.json:1:49: not UTF-8 text \(byte 0xe9\)"):
        predict.read_card(str(tmp_path / "latin"))


@pytest.mark.parametrize("kw, msg", [
    (dict(batch_size=0), r"batch_size=0: an integer >= 1"), (dict(batch_size=-1), r"batch_size=-1: an integer >= 1"),
    (dict(batch_size=2.5), r"batch_size=2.5: an integer"), (dict(batch_size=True), r"batch_size=True: an integer"),
    (dict(max_length=8.5), r"max_length=8.5: an integer >= 4"), (dict(max_length=2), r"max_length=2: an integer >= 4"),
])
def test_predictor_sizes_are_checked_before_the_model_loads(tmp_path, kw, msg):
    with pytest.raises(InputError, match=rf"^{msg}"):
        Predictor(str(tmp_path / "no-model-here"), **kw)


def test_a_model_dir_that_is_not_there_is_named_as_no_directory(tmp_path):
    """Predictor("good movie") (a text where the MODEL_DIR goes) said "good movie: no config.json"."""
    with pytest.raises(FileNotFoundError, match=r"^good movie: no such directory \(a MODEL_DIR: config.json and the "
                                                r"weights\)$"):
        Predictor("good movie")


def test_a_file_given_as_the_model_dir_is_named_as_a_file(model_dir, tmp_path):
    """Its config.json for the MODEL_DIR said "config.json: no config.json"; a data file for --config.init_from
    "no such directory", though it exists."""
    with pytest.raises(FileNotFoundError, match=rf"^{model_dir / 'config.json'}: a file, not a MODEL_DIR \(a "
                                                rf"directory: config.json and the weights\); give {model_dir}$"):
        Predictor(str(model_dir / "config.json"))
    (tmp_path / "tr.csv").write_text("text,label\ngood,pos\n")
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path / 'tr.csv'}: a file, not a MODEL_DIR \(a directory: "
                                                r"config.json and the weights\)$"):
        sj.inference.model_tokenizer(str(tmp_path / "tr.csv"))


def test_a_card_and_a_config_of_other_problem_types_are_refused(model_dir, tmp_path):
    """config.json's problem_type (transformers') and task.json's kind must say the same: a multilabel card on a
    single-label classifier would score softmax outputs as sigmoids."""
    path = with_card(model_dir, tmp_path, {"kind": "multilabel", "text_columns": ["text"]})
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"problem_type": "single_label_classification"}))
    with pytest.raises(InputError, match=r"task.json says a multilabel model, but .*config.json says problem_type "
                                         r"'single_label_classification'"):
        Predictor(str(path))
    (path / "config.json").write_text(json.dumps(config | {"problem_type": "multi_label_classification"}))
    assert set(Predictor(str(path))("good")) == {"labels", "probabilities"}
    (path / "config.json").write_text(json.dumps(config | {"problem_type": "multilabel"}))
    with pytest.raises(InputError, match=r"problem_type is \"multilabel\"; expected one of single_label_class"):
        Predictor(str(path))
    # transformers' multi-output regression (problem_type regression, 2 outputs) read as a 2-class classifier
    (path / "config.json").write_text(json.dumps(config | {"problem_type": "regression"}))
    with pytest.raises(InputError, match=r"config.json: problem_type is \"regression\" with 2 outputs; a "
                                         r"regression model here has one output"):
        Predictor(str(path))


def test_inputs_cut_to_max_length_are_counted_in_a_warning(model_dir, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.tokenizer"):
        Predictor(str(model_dir), max_length=8)(["good", "the movie was good " * 20, "a very bad plot " * 3])
    assert [r.getMessage() for r in caplog.records] == [
        "2 of 3 inputs (66.7%) are longer than 8 tokens and were cut to fit (the model reads none of the rest); a "
        "larger max_length (up to the model's 64) keeps more"]  # Predictor's own argument; the script: --max_length
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.tokenizer"):  # at the model's 64: no setting helps
        Predictor(str(model_dir), max_length=64)(["the movie was good " * 20])
    assert caplog.records[-1].getMessage() == (
        "1 of 1 inputs (100.0%) are longer than 64 tokens and were cut to fit (the model reads none of the rest); the "
        "model reads at most 64 tokens (its positions): split longer texts to read all of them")
    caplog.clear()  # fine-tuning's predictions of its test file name its own setting (it has no --max_length)
    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.tokenizer"):
        Predictor(str(model_dir), max_length=8, length_setting="config.max_seq_length")(["the movie was good " * 20])
    assert "a larger config.max_seq_length (up to the model's 64) keeps more" in caplog.text


def test_max_length_past_the_models_positions_is_refused_not_cut(model_dir, tmp_path, run_cli):
    """The model reads at most max_position_embeddings (64 here) tokens: more is refused by name, in Python and from
    the script, before any output; left out, it is 128 or the model's maximum where that is less."""
    assert Predictor(str(model_dir)).max_length == 64 and Predictor(str(model_dir), max_length=64).max_length == 64
    with pytest.raises(InputError, match=r"^max_length=65: the model at .* reads at most 64 tokens \(its config"):
        Predictor(str(model_dir), max_length=65)
    (tmp_path / "in.txt").write_text("good\n")
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.txt", "--out",
                           tmp_path / "o.jsonl", "--max_length", "512")
    assert rc == 1 and err.count("\n") == 1 and ": --max_length=512: the model at" in err, err  # the flag named
    assert not (tmp_path / "o.jsonl").exists()
    for low in ("0", "2"):  # one rule below the model's bound, as in Python (0 said ">= 1", 2 said ">= 4")
        rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.txt", "--out",
                               tmp_path / "o.jsonl", "--max_length", low)
        assert rc == 2 and f"argument --max_length: {low}: an integer >= 4" in err.splitlines()[-1], err


def test_a_card_with_an_extra_key_is_one_line_from_the_script(model_dir, tmp_path, run_cli):
    path = with_card(model_dir, tmp_path, {"kind": "classification", "text_columns": ["text"], "lr": 0.1})
    (tmp_path / "in.txt").write_text("good\n")
    rc, out, err = run_cli("eval/predict.py", "--model", path, "--input", tmp_path / "in.txt", "--out",
                           tmp_path / "o.jsonl")
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{path / CARD}: unknown key 'lr' for a classification model" in err


@pytest.mark.parametrize("inputs, msg", [
    ("", r"^the input is empty"), ("  \u200b ", r"^the input is empty"),
    (["good", "\t"], r"^input 2 is empty"), (("good", ""), r"^the input, text 2, is empty"),
    ("a\x00b", r"^the input holds a NUL character at character 2, which no text holds"),  # as a file's NUL
    (["good", "x\x00"], r"^input 2 holds a NUL character at character 2"),
])
def test_an_empty_text_is_refused_not_predicted(model_dir, inputs, msg):
    with pytest.raises(sj.errors.InputError, match=msg):
        Predictor(str(model_dir))(inputs)


def test_a_config_json_that_is_not_the_weights_own_is_refused(model_dir, tmp_path):
    """A classifier's config.json naming more or fewer labels than its outputs (the extra names dropped, or an
    output named LABEL_2), or another architecture than the weights were saved for (a tagger's classifier has a
    2-label sentence classifier's shape): refused when the model loads, not predicted with."""
    import shutil

    for change, message in (
            (lambda c: c.update(id2label={"0": "neg", "1": "pos", "2": "mixed"}, num_labels=3),
             r"the saved classifier has 2 outputs, but config.json names 3 labels \(id2label\)"),
            (lambda c: (c.pop("id2label", None), c.update(num_labels=3)),  # the labels said by number alone
             r"the saved classifier has 2 outputs, but config.json names 3 labels \(num_labels\)"),
            (lambda c: c.update(architectures=["SqueezeBertForTokenClassification"]),
             r"config.json: architectures says SqueezeBertForTokenClassification, but params.safetensors holds the "
             r"weights of a SqueezeBertForSequenceClassification")):
        bad = tmp_path / "bad"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(model_dir, bad)
        config = json.loads((bad / "config.json").read_text())
        config.pop("num_labels", None)
        config.pop("label2id", None)
        change(config)
        (bad / "config.json").write_text(json.dumps(config))
        with pytest.raises(InputError, match=message):
            Predictor(str(bad))


def test_a_task_card_linked_from_outside_the_model_dir_is_refused(model_dir, tmp_path):
    """task.json is a file of the MODEL_DIR like vocab.txt (``tokenizer.checkpoint_file``): a link to a card outside
    it is refused, naming both, not read."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    (tmp_path / "outside.json").write_text(json.dumps({"kind": "classification", "text_columns": ["a", "b"]}))
    os.symlink(tmp_path / "outside.json", model / "task.json")
    with pytest.raises(InputError, match=rf"{model}/task.json resolves to {tmp_path}/outside.json, outside the "
                                         r"checkpoint directory"):
        Predictor(str(model))


def test_a_glue_models_card_gives_its_text_count_and_reads_a_users_file_as_documented(model_dir, tmp_path):
    """A GLUE model's task.json names TFDS's columns for its task (sentence), which a user's file need not have: a
    file's texts are read as for a model without a card (its only column, or "text"), with the task's number of texts;
    a card whose text columns are not its task's count is refused by name."""
    path = with_card(model_dir, tmp_path, {"kind": "classification", "text_columns": ["sentence"],
                                           "glue_task": "sst2"})
    (tmp_path / "in.csv").write_text("text\nthe movie was good\na very bad plot\n")
    assert predict.predict_file(str(path), str(tmp_path / "in.csv"), str(tmp_path / "out.jsonl")) == 2
    with pytest.raises(InputError, match=r"^the input holds 2 texts; this model reads one text"):
        Predictor(str(path))(("good", "bad"))
    bad = with_card(model_dir, tmp_path, {"kind": "classification", "text_columns": ["sentence1", "sentence2"],
                                          "glue_task": "sst2"}, name="bad")
    with pytest.raises(InputError, match=r"task.json: 'text_columns' names 2 but sst2 reads 1 \(sentence\); put back "
                                         r"the task.json its fine-tuning wrote"):
        Predictor(str(bad))


def test_the_predictor_is_reached_from_a_bare_package_import():
    """``import squeezebert_jax; squeezebert_jax.predict.Predictor(...)`` as the README writes it (an AttributeError
    after a bare import): the package's submodules and ``Predictor`` load on first use; another name is refused."""
    import squeezebert_jax
    from squeezebert_jax import predict

    assert squeezebert_jax.__getattr__("predict") is predict
    assert squeezebert_jax.__getattr__("Predictor") is predict.Predictor is squeezebert_jax.Predictor
    with pytest.raises(AttributeError, match="module 'squeezebert_jax' has no attribute 'predictor'"):
        squeezebert_jax.__getattr__("predictor")
