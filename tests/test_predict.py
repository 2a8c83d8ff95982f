"""eval/predict.py and squeezebert_jax.predict: labels and probabilities for new text from .txt, .csv and .jsonl, equal to
the classifier's own softmax; an existing --out is refused and kept."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from conftest import VOCAB
from squeezebert_jax.predict import Predictor


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
    assert [g["label"] for g in got] == [w["label"] for w in want] and len(got) == 4
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.csv", "--text_columns",
                           "review", "--out", tmp_path / "csv.jsonl")
    assert rc == 0 and len(open(tmp_path / "csv.jsonl").readlines()) == 2, err
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
    assert rc == 1 and "in.csv:2: no column 'text' (has id, review); name the text column(s)" in err


def test_a_model_without_a_classifier_is_one_line(tmp_path, run_cli):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0)), tmp_path / "m")
    (tmp_path / "m" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (tmp_path / "in.txt").write_text("good\n")
    rc, out, err = run_cli("eval/predict.py", "--model", tmp_path / "m", "--input", tmp_path / "in.txt", "--out",
                           tmp_path / "o.jsonl")
    assert rc == 1 and "has no classifier, tagger, question-answering or multiple-choice head" in err and not (tmp_path / "o.jsonl").exists()


def test_a_tagger_gives_a_tag_per_word_from_its_first_piece(tmp_path):
    """Tags per word: the argmax at each word's first piece, as the model scores it; words past max_length get None."""
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
    short = Predictor(str(tmp_path / "tagger"), max_length=4)(["the movie was good"])[0]
    assert short["tags"][2:] == [None, None] and None not in short["tags"][:2]  # [CLS] the movie [SEP]
