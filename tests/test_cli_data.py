"""train/prepare_data.py and the pretraining loader on bad input, as a user meets them: one line naming the file and
what to do, exit 1 (2 for usage), no traceback, and nothing already on disk changed (digests before and after)."""
import os

import numpy as np
import pytest

from squeezebert_jax import corpus, pretrain_data
from squeezebert_jax.errors import InputError
from squeezebert_jax.tokenizer import Tokenizer

SCRIPT = "train/prepare_data.py"
GOOD = "Anna found a key .\nShe took it home .\n\nBen ran to the park .\nThe dog ran too .\n"


@pytest.fixture
def files(tmp_path):
    vocab = corpus.write_demo_vocab(tmp_path / "vocab.txt")
    (tmp_path / "ok.txt").write_text(GOOD)
    return tmp_path, str(vocab)


def _one_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip() and "tokenizing into" not in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_pattern_that_matched_nothing_writes_nothing(files, run_cli):
    d, vocab = files
    out = d / "out"
    rc, _, err = run_cli(SCRIPT, "--input", str(d / "corpus" / "*.txt"), "--vocab", vocab, "--out", out)
    assert rc == 1 and "matched no file" in _one_line(err) and "corpus/*.txt" in err
    assert not out.exists()  # checked before any writer opened: no .tmp*-shard-* files, no directory


@pytest.mark.parametrize("kind", ["binary", "binary_cr", "utf16", "latin1"])
def test_file_that_is_not_utf8_text_is_refused_naming_it_and_the_share(files, run_cli, digest, kind):
    d, vocab = files
    data = {"binary": np.random.default_rng(0).bytes(50_000),
            # carriage returns in its first "line": named as a binary file, not as old Mac line ends
            "binary_cr": b"\xd3\x9f\r\x00\xfe\r\x81\x90" * 300,
            "utf16": (GOOD * 20).encode("utf-16"),
            "latin1": ("Le caf\u00e9 \u00e9tait ferm\u00e9 .\nIl pleuvait d\u00e9j\u00e0 .\n\n" * 40).encode("latin-1")}[kind]
    bad = d / f"{kind}.dat"
    bad.write_bytes(data)
    out = d / "out"
    assert run_cli(SCRIPT, "--input", d / "ok.txt", "--vocab", vocab, "--out", out)[0] == 0  # a preparation to keep
    before = digest(out, d / "ok.txt", bad)
    rc, _, err = run_cli(SCRIPT, "--input", d / "ok.txt", bad, "--vocab", vocab, "--out", out, "--overwrite")
    line = _one_line(err)
    assert rc == 1 and f"{bad}:" in line and "are not UTF-8 text" in line and "%" in line, line
    after = digest(out, d / "ok.txt", bad)
    log = str(out / "prepare_log.txt")  # the one file that changes: the failed run's log, holding its error
    assert {k: v for k, v in after.items() if k != log} == {k: v for k, v in before.items() if k != log}
    assert not [f for f in os.listdir(out) if f.startswith(".tmp")]
    assert "are not UTF-8 text" in open(log).read()


@pytest.mark.parametrize("body, msg", [("", "read 0 documents"), ("One sentence .\n\nAnother one .\n",
                                                                   "read 2 documents, 2 of them of one sentence")])
def test_a_corpus_without_a_sentence_pair_names_its_files_and_leaves_no_directory(files, run_cli, body, msg):
    """An empty corpus, or documents of one sentence: refused by file with what was read (it printed a CorpusStats
    repr), and the new --out (and its parent) taken away again (an empty directory used to stay)."""
    d, vocab = files
    (d / "c.txt").write_text(body)
    rc, _, err = run_cli(SCRIPT, "--input", d / "c.txt", "--vocab", vocab, "--out", d / "new" / "out")
    line = _one_line(err)
    assert rc == 1 and f"{d / 'c.txt'}: no document with at least two non-empty sentences" in line and msg in line
    assert not (d / "new").exists()


def test_stray_bytes_below_the_threshold_are_counted_and_reported(files, run_cli):
    d, vocab = files
    (d / "mostly.txt").write_bytes(GOOD.encode() * 30 + b"one odd \xe9 byte .\nand more text .\n")
    rc, out, _ = run_cli(SCRIPT, "--input", d / "mostly.txt", "--vocab", vocab, "--out", d / "out")
    assert rc == 0 and '"invalid_utf8_lines": 1' in out and '"invalid_utf8_bytes": 1' in out
    assert "1 lines hold 1 bytes" in (d / "out" / "prepare_log.txt").read_text()
    # the threshold is the user's: 0 refuses even one stray byte past the few-bytes floor
    (d / "some.txt").write_bytes(GOOD.encode() * 30 + b"odd \xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9"
                                 b"\xe9\xe9\xe9\xe9 bytes .\nmore .\n")
    rc, _, err = run_cli(SCRIPT, "--input", d / "some.txt", "--vocab", vocab, "--out", d / "o2",
                         "--max_invalid_utf8", "0")
    assert rc == 1 and "the limit is 0.0%" in _one_line(err)
    assert run_cli(SCRIPT, "--input", d / "some.txt", "--vocab", vocab, "--out", d / "o3")[0] == 0  # 17/1.6k bytes


def test_a_model_dir_is_no_out_even_with_overwrite(files, run_cli, digest):
    """--overwrite replaces a preparation: into a MODEL_DIR it replaced the model's vocab.txt with the data's, and the
    model loaded with it, its ids meaning other words."""
    d, vocab = files
    model = d / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "params.safetensors").write_bytes(b"w")
    (model / "vocab.txt").write_text("[PAD]\n")
    before = digest(model)
    rc, _, err = run_cli(SCRIPT, "--input", d / "ok.txt", "--vocab", vocab, "--out", model, "--overwrite")
    assert rc == 1 and f"--out {model} holds a model (config.json, params.safetensors): prepared data there would " \
                       "replace or join its files" in _one_line(err)
    assert digest(model) == before


def test_existing_preparation_needs_overwrite(files, run_cli, digest):
    d, vocab = files
    out = d / "out"
    assert run_cli(SCRIPT, "--input", d / "ok.txt", "--vocab", vocab, "--out", out, "--num_shards", "2")[0] == 0
    before = digest(out)
    rc, _, err = run_cli(SCRIPT, "--input", d / "ok.txt", "--vocab", vocab, "--out", out)
    assert rc == 1 and "is not empty" in _one_line(err) and "--overwrite" in err and digest(out) == before
    rc, _, _ = run_cli(SCRIPT, "--input", d / "ok.txt", "--vocab", vocab, "--out", out, "--overwrite")
    assert rc == 0 and pretrain_data.load_meta(out)["num_shards"] == 8
    assert sorted(f for f in os.listdir(out) if f.startswith("shard-")) == [
        f"shard-{i:05d}-of-00008.array_record" for i in range(8)]  # the 2-shard run's shards are gone


@pytest.mark.parametrize("args, rc, needle", [
    (["--input", "DIR"], 1, "is a directory"),
    (["--input", "DIR/ok.txt", "--num_shards", "0"], 2, "--num_shards: 0 must be >= 1"),
    (["--input", "DIR/ok.txt", "--num_shards", "10000000"], 2, "--num_shards: 10000000: an integer in [1, "),
    (["--input", "DIR/ok.txt", "--max_invalid_utf8", "5"], 2, "not a share in [0, 1]"),
    (["--input", "DIR/ok.txt", "--vocab", "DIR/nope.txt"], 1, "nope.txt"),
    (["--input", "DIR/ok.txt", "DIR/ok.txt"], 1, "ok.txt is DIR/ok.txt, given before: each corpus file once"),
    (["--input", "DIR/ok.txt", "DIR/./ok.txt"], 1, "ok.txt, given before"),
])
def test_usage_and_file_errors_are_one_line(files, run_cli, args, rc, needle):
    d, vocab = files
    args = [a.replace("DIR", str(d)) for a in args]
    if "--vocab" not in args:
        args += ["--vocab", vocab]
    got, _, err = run_cli(SCRIPT, *args, "--out", d / "out")
    assert got == rc and needle.replace("DIR", str(d)) in err and "Traceback" not in err, err
    assert not (d / "out").exists()


def test_loader_refuses_token_ids_past_the_tokenizer(tmp_path):
    """Under jax.jit an id >= vocab_size is clamped by the embedding gather (no error): the loader is where it stops.
    Records written with a vocabulary of specials + a, b, c read with a tokenizer of specials + a fail naming the id
    and the size."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    n = len(corpus.SPECIALS)
    (tmp_path / "big.txt").write_text("\n".join(corpus.SPECIALS + ["a", "b", "c"]) + "\n")
    pretrain_data.prepare([["a b c", "c b a"], ["a a", "b b c"]], Tokenizer.from_file(tmp_path / "big.txt"),
                          tmp_path / "p", num_shards=1, progress=False)
    records = [ArrayRecordDataSource(pretrain_data.shard_paths(tmp_path / "p"))[0]]
    (tmp_path / "small.txt").write_text("\n".join(corpus.SPECIALS + ["a"]) + "\n")
    small = pretrain_data.example_maker(Tokenizer.from_file(tmp_path / "small.txt"), 16, 4)
    with pytest.raises(InputError, match=rf"example 7: token id {n + 2} >= the tokenizer's vocab size {n + 1}"):
        small.make_batch(records, np.array([7]), seed=0)
    big = pretrain_data.example_maker(Tokenizer.from_file(tmp_path / "big.txt"), 16, 4)
    assert big.make_batch(records, np.array([7]), seed=0)["input_ids"].max() <= n + 2
