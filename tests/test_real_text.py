"""eval/real_text.py's plumbing on material the test writes: VADER's file layout split by the sign of the mean rating,
a (tiny, random) transformers BERT fine-tuned by ours and by transformers with the same recipe."""

from __future__ import annotations

import csv

import pytest

from conftest import VOCAB, WORDS, load_script
from squeezebert_jax.benchmarks import real_text


def _snippets(path, n=160, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = ["id\tsentiment\ttext"]
    for i in range(n):
        y = int(rng.integers(0, 3)) - 1  # -1, 0 (dropped) or 1
        word = rng.choice(WORDS[:3] if y > 0 else WORDS[3:6])
        lines.append(f"{i + 1}\t{y * rng.uniform(0.1, 3.5):.5f}\t{' '.join(rng.choice(WORDS[6:], 3))} {word} ''q''")
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())  # the file's CRLF line ends
    return path


def test_the_split_is_the_sign_of_the_mean_seeded_and_drops_zeros(tmp_path):
    snippets = _snippets(tmp_path / "s.txt")
    sizes = real_text.movie_splits(str(snippets), str(tmp_path / "a"))
    again = real_text.movie_splits(str(snippets), str(tmp_path / "b"))
    assert sizes == again and sizes["train"] + sizes["dev"] < 160  # zeros dropped
    assert (tmp_path / "a" / "train.csv").read_text() == (tmp_path / "b" / "train.csv").read_text()
    with open(tmp_path / "a" / "dev.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["label"] for r in rows} == {"negative", "positive"}
    for r in rows:  # the label words were drawn by the sign
        assert (r["label"] == "positive") == any(w in r["text"].split() for w in WORDS[:3])
        assert "''q''" in r["text"]  # quotes kept as text (QUOTE_NONE)


@pytest.mark.slow
def test_both_sides_fine_tune_the_same_converted_bert(tmp_path):
    import transformers

    import squeezebert_jax as sj

    hf = tmp_path / "hf"
    cfg = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    transformers.BertModel(cfg).save_pretrained(hf)
    (hf / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    transformers.BertTokenizerFast(str(hf / "vocab.txt"), do_lower_case=True).save_pretrained(hf)
    sj.import_torch(str(hf), str(tmp_path / "model"))
    real_text.movie_splits(str(_snippets(tmp_path / "s.txt", n=1200)), str(tmp_path / "data"))
    recipe = real_text.Recipe(learning_rate=1e-3, epochs=4, max_length=16)
    config = load_script("eval/real_text.py").files_config()
    ours = real_text.ours(str(tmp_path / "model"), str(tmp_path / "data"), str(tmp_path / "run"), recipe, config)
    theirs = real_text.transformers_run(str(hf), str(tmp_path / "data"), recipe)
    for r in (ours, theirs):
        assert len(r.per_epoch) == recipe.epochs and r.examples_per_s > 0
        assert r.dev_accuracy == 1.0, r  # a separable task: both learn it


@pytest.mark.slow
def test_every_kind_is_written_from_the_snippets_and_runs_end_to_end(tmp_path):
    """eval/real_text.py --part kinds on a tiny random model: each kind's files load, fine-tune one epoch, and a dev row
    is predicted (QA: a SQuAD v2.0 file whose answers sit at their offsets; tagging: B-PRAISE / B-BLAME words)."""
    from conftest import tiny_init

    snippets = _snippets(tmp_path / "s.txt", n=500)
    settings = real_text.write_kind_files(str(snippets), str(tmp_path / "kinds"), n_train=120, n_dev=40)
    assert sorted(settings) == sorted(real_text.KIND_DESCRIPTIONS)
    conll = (tmp_path / "kinds" / "token_classification" / "dev.conll").read_text()
    assert "good B-PRAISE" in conll and "bad B-BLAME" in conll and "movie O" in conll
    rows = real_text.run_kinds(str(tiny_init(tmp_path / "init", VOCAB)), settings, str(tmp_path / "runs"),
                               load_script("train/configs/glue.py").get_config, epochs=1, learning_rate=1e-3)
    got = {r["kind"]: r for r in rows}
    assert got["question_answering"]["metrics"].keys() >= {"exact_match", "f1", "HasAns_f1", "NoAns_f1"}
    assert set(got["question_answering"]["prediction"]) >= {"answer", "probability"}
    assert got["token_classification"]["prediction"]["tags"][0] in ("O", "B-PRAISE", "B-BLAME")
    assert len(got["multiple_choice"]["prediction"]["probabilities"]) == 4
    assert "score" in got["regression"]["prediction"] and "micro_f1" in got["multilabel"]["metrics"]
    assert all(r["train"] > 0 and r["wall_s"] > 0 for r in rows)


@pytest.mark.slow
def test_the_pretraining_proof_runs_end_to_end_on_written_material(tmp_path, monkeypatch, run_cli):
    """eval/real_pretraining.py with its fetchers pointed at material the test writes (addresses from the demo
    grammar, the snippets above, the tests' vocabulary): the corpus in prepare_data's format, a few pretraining steps,
    both fine-tunes, and the table."""
    from squeezebert_jax import corpus

    sotu = tmp_path / "sotu"
    sotu.mkdir()
    for i, doc in enumerate(corpus.generate_documents(12, seed=3)):
        (sotu / f"{1790 + i}_someone_n.txt").write_text(" ".join(s.capitalize() + "." for s in doc) + "\n")
    hf = tmp_path / "hf"
    hf.mkdir()
    vocab = sorted({w for doc in corpus.generate_documents(12, seed=3) for s in doc for w in s.split()} | set(WORDS))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (hf / "vocab.txt").write_text("\n".join(specials + sorted(set(vocab) | {"."})) + "\n")
    snippets = _snippets(tmp_path / "s.txt", n=120)
    monkeypatch.setattr(real_text, "fetch", lambda cache: (str(hf), str(snippets)))
    monkeypatch.setattr(real_text, "fetch_sotu", lambda cache: str(sotu))
    counts = real_text.sotu_corpus(str(sotu), str(tmp_path / "c.txt"))
    lines = (tmp_path / "c.txt").read_text().split("\n")
    assert counts["addresses"] == 12 and lines.count("") >= 12 and counts["sentences"] == len([x for x in lines if x])
    rc, out, err = run_cli("eval/real_pretraining.py", "--workdir", tmp_path / "run", "--steps", "4", "--batch", "8",
                           "--finetune_epochs", "1", "--out", tmp_path / "table.md")
    assert rc == 0, err
    assert "pretrained on SOTU (4 steps x 8 seq x 128" in out and "random initialisation" in out
    assert "MLM loss / accuracy at steps: " in out and "pretraining - random:" in out
    assert (tmp_path / "table.md").read_text().startswith("SqueezeBERT 4 layers x 256")


@pytest.mark.parametrize("argv, msg", [
    (["--part", "kinds", "--lr", "1e-3"], r"^--lr 0.001: a setting of --part compare; --part kinds runs each kind at "
                                          r"its own settings"),
    (["--part", "kinds", "--max_train", "10"], r"^--max_train 10: a setting of --part compare"),
    (["--lr", "-1"], r"^--lr -1.0: a learning rate > 0$"),
    (["--max_train", "-3"], r"^--max_train -3: a number of snippets >= 0"),
])
def test_a_flag_the_part_does_not_read_or_out_of_range_is_refused_before_any_work(tmp_path, argv, msg):
    """--lr and --max_train were taken by --part kinds without a word (they only set --part compare's runs), and a
    negative rate ran to the compare part's own refusal."""
    import squeezebert_jax as sj

    with pytest.raises(sj.errors.InputError, match=msg):
        load_script("eval/real_text.py").main(["--workdir", str(tmp_path / "w"), "--cache", str(tmp_path / "c"),
                                              *argv])
    assert not (tmp_path / "w").exists() and not (tmp_path / "c").exists()
