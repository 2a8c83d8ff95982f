"""Tokenizer: ids equal transformers' BertTokenizerFast; SentencePiece round trips; clear errors."""

from __future__ import annotations

import importlib.util
import os
import pickle
import random
import re

import numpy as np
import pytest
from conftest import VOCAB, one_error_line, tiny_init

from squeezebert_jax import corpus, pretrained
from squeezebert_jax.errors import InputError
from squeezebert_jax.tokenizer import (BERT_SPECIALS, Tokenizer, read_vocab, train_tokenizer,
                                       truncated_lengths)

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A hand-made vocab: specials, [unused], ASCII words, ## pieces, accent-stripped words, CJK, punctuation.
HAND_VOCAB = (
    ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    + list("0123456789abcdefghijklmnopqrstuvwxyz")
    + ["##" + c for c in "0123456789abcdefghijklmnopqrstuvwxyz"]
    + "the an quick brown fox jumps over lazy dog hello world un cafe naive resume strasse is of and to in".split()
    + ["##aff", "##able", "##ing", "##ed", "##ly", "##er", "##est"]
    + list("中国人日本語我是的")
    + ["12", "##34", "100"]
)

TEXTS = [
    "Hello, World!",
    "The quick brown fox jumps over the lazy dog.",
    "unaffable unaffably jumping jumped",
    "Café NAÏVE résumé Straße",
    "e\u0301cole cafe\u0301 ﬁne Ǆ İstanbul",  # combining accent, ligature, titlecase digraph, dotted I
    "我是中国人，日本語もある。hello中国world",
    "ＨＥＬＬＯ ｗｏｒｌｄ ①②",  # fullwidth / circled
    "\x00hel\x07lo\ufffd wor\x1fld\u200b zero\u200dwidth",  # control and format characters
    "emoji 😀👍🏽 and flags 🇫🇷 and symbols ∑ ≤ ♥",
    "\t\n  leading and\u3000ideographic\xa0nbsp\r\ntrailing \u2028 ",
    "",
    "   ",
    "a" * 100,  # exactly max_input_chars_per_word: WordPiece splits it
    "a" * 101 + " ok",  # one longer -> [UNK]
    "literal [MASK] and [SEP][CLS] but [mask] [Pad] is text",
    "1234 12.34 100% $5 #tag @user e-mail isn't don't",
    "<html>tags</html> path/to/file.txt C++ a_b",
    "ﾊﾝｶｸ カタカナ ひらがな 한국어 Ελληνικά русский عربى",
    "x" * 30 + "##" + "y" * 5,
]


def _hf(vocab_path: str):
    # Positional: transformers 5 builds the WordPiece model from a vocab path passed as `vocab`.
    return transformers.BertTokenizerFast(str(vocab_path), do_lower_case=True)


@pytest.fixture(scope="session")
def hand_vocab(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("hand") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in HAND_VOCAB), encoding="utf-8")
    return str(path)


def _corpus_lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ("the of and to in is was for on with as by at from that this which squeeze bert grouped "
             "convolution attention layer token model pretraining mobile latency café naïve résumé "
             "über straße 中国 日本 東京 😀 hello world unbelievable").split()
    punct = [",", ".", "!", "?", ";", "(", ")", "'s", "-"]
    syllables = "ka ri to ma ne su lo vi de ran tor pel quin str ght ough ing ed ly".split()
    words += ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(150)]
    lines = []
    for _ in range(n):
        ws = [rng.choice(words) for _ in range(rng.randint(4, 16))]
        ws = [w.capitalize() if rng.random() < 0.2 else w for w in ws]
        ws = [w + rng.choice(punct) if rng.random() < 0.15 else w for w in ws]
        lines.append(" ".join(ws))
    return lines


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(_corpus_lines(600, 0)) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def trained_vocab(corpus_file, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("wp")
    train_tokenizer([corpus_file], out, vocab_size=300, kind="wordpiece")
    return str(out / "vocab.txt")


@pytest.fixture(scope="session")
def sp_tok(corpus_file, tmp_path_factory) -> Tokenizer:
    return train_tokenizer([corpus_file], tmp_path_factory.mktemp("sp"), vocab_size=120, kind="sentencepiece")


# --------------------------------------------------------------------------------------------------
# WordPiece == BertTokenizerFast
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab_name", ["hand_vocab", "trained_vocab"])
def test_tokenize_matches_bert_tokenizer_fast(vocab_name, request):
    path = request.getfixturevalue(vocab_name)
    tok, hf = Tokenizer.from_file(path), _hf(path)
    texts = TEXTS + _corpus_lines(20, 1)
    assert tok.kind == "wordpiece" and tok.vocab_size == len(hf)
    for t in texts:
        assert tok.tokenize(t) == hf(t, add_special_tokens=False)["input_ids"], t
    assert tok.tokenize_batch(texts) == [tok.tokenize(t) for t in texts]
    assert tok.tokenize("a" * 101) == [tok.unk_id]
    assert tok.tokenize("literal [MASK]")[-1] == tok.mask_id
    for t in texts:  # decoding agrees too
        ids = hf(t)["input_ids"]
        assert tok.decode(ids) == hf.decode(ids), t


@pytest.mark.parametrize("vocab_name", ["hand_vocab", "trained_vocab"])
def test_encode_single_and_pairs_match_bert_tokenizer_fast(vocab_name, request):
    path = request.getfixturevalue(vocab_name)
    tok, hf = Tokenizer.from_file(path), _hf(path)
    rng = random.Random(3)
    texts = TEXTS + _corpus_lines(10, 2)
    for max_length in (2, 3, 5, 8, 16, 64):
        for t in texts:
            ref = hf(t, truncation=True, max_length=max_length, padding="max_length")
            got = tok.encode(t, max_length=max_length)
            for k in ("input_ids", "token_type_ids", "attention_mask"):
                assert got[k].dtype == np.int32 and got[k].shape == (max_length,)
                np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{k} {t!r} {max_length}")
    pairs = [(rng.choice(texts), rng.choice(texts)) for _ in range(60)]
    pairs += [("hello world", ""), ("", "hello world"), ("", "")]
    for max_length in (3, 4, 7, 10, 13, 32):
        # The batched call: for one pair, transformers drops an empty second text (its quirk), while its
        # batched call and the tokenizers library keep the layout [CLS] a [SEP] [SEP], as we do.
        ref = hf([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first", max_length=max_length,
                 padding="max_length")
        for i, (a, b) in enumerate(pairs):
            got = tok.encode(a, b, max_length=max_length)
            for k in ("input_ids", "token_type_ids", "attention_mask"):
                np.testing.assert_array_equal(got[k], ref[k][i], err_msg=f"{k} {a!r} {b!r} {max_length}")
        batch = tok.encode_batch([a for a, _ in pairs], [b for _, b in pairs], max_length=max_length)
        for k in ("input_ids", "token_type_ids", "attention_mask"):
            assert batch[k].dtype == np.int32 and batch[k].shape == (len(pairs), max_length)
            np.testing.assert_array_equal(batch[k], np.stack([tok.encode(a, b, max_length)[k] for a, b in pairs]))
    single = tok.encode_batch(texts, max_length=12)
    np.testing.assert_array_equal(single["input_ids"], np.stack([tok.encode(t, max_length=12)["input_ids"]
                                                                 for t in texts]))


def test_truncated_lengths_rule():
    # The cases of the tokenizers library's own unit test (max_length 7; lengths 0, 2, 4, 8).
    expect = {(0, 0): (0, 0), (0, 2): (0, 2), (0, 4): (0, 4), (0, 8): (0, 7), (2, 0): (2, 0), (2, 2): (2, 2),
              (2, 4): (2, 4), (2, 8): (2, 5), (4, 0): (4, 0), (4, 2): (4, 2), (4, 4): (3, 4), (4, 8): (3, 4),
              (8, 0): (7, 0), (8, 2): (5, 2), (8, 4): (4, 3), (8, 8): (3, 4)}
    for (n1, n2), want in expect.items():
        assert truncated_lengths(n1, n2, 7) == want, (n1, n2)
    assert truncated_lengths(9, None, 7) == (7, 0)


def test_word_starts(hand_vocab, sp_tok):
    tok, hf = Tokenizer.from_file(hand_vocab), _hf(hand_vocab)
    ids = np.array(tok.tokenize("unaffable hello, jumping cafés 中国"))
    want = [not t.startswith("##") for t in hf.convert_ids_to_tokens(ids.tolist())]
    assert want.count(False) >= 3
    np.testing.assert_array_equal(tok.is_word_start(ids), want)
    np.testing.assert_array_equal(tok.is_word_start(ids.reshape(1, -1).astype(np.int32)), [want])
    assert tok.is_word_start(np.array([tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id])).all()
    sp_ids = np.array(sp_tok.tokenize("squeeze bert unbelievable grouped convolutions, hello"))
    want = [sp_tok.id_to_token(i).startswith("\u2581") for i in sp_ids.tolist()]
    assert any(want) and not all(want)  # both word starts and continuations occur
    np.testing.assert_array_equal(sp_tok.is_word_start(sp_ids), want)
    with pytest.raises(ValueError, match="token ids must lie in"):
        tok.is_word_start(np.array([tok.vocab_size]))


def test_specials_and_save_load(hand_vocab, tmp_path):
    tok = Tokenizer.from_file(hand_vocab)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 3, 4, 5, 6)
    assert tok.special_ids == frozenset({0, 4, 5, 6})
    assert tok.save(tmp_path / "m") == "vocab.txt"
    again = Tokenizer.from_dir(tmp_path / "m")
    assert again.kind == "wordpiece" and again.tokenize_batch(TEXTS) == tok.tokenize_batch(TEXTS)
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.tokenize_batch(TEXTS) == tok.tokenize_batch(TEXTS)
    assert Tokenizer.from_dir(tmp_path) is None
    assert tok.decode(tok.encode("hello world", max_length=6)["input_ids"], skip_special_tokens=True) == "hello world"


def test_trained_wordpiece_vocab(trained_vocab):
    tokens = read_vocab(trained_vocab)
    assert tuple(tokens[:5]) == BERT_SPECIALS and len(tokens) == 300 and len(set(tokens)) == 300
    assert any(t.startswith("##") for t in tokens) and "café" not in tokens  # accents stripped
    tok = Tokenizer.from_file(trained_vocab)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)


# --------------------------------------------------------------------------------------------------
# SentencePiece
# --------------------------------------------------------------------------------------------------

def test_sentencepiece_round_trip_and_layout(sp_tok, tmp_path):
    tok = sp_tok
    assert tok.kind == "sentencepiece" and tok.vocab_size == 120
    assert [tok.id_to_token(i) for i in range(5)] == list(BERT_SPECIALS)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ref = spm.SentencePieceProcessor(model_file=tok.path)
    lines = _corpus_lines(30, 7)
    for t in lines:
        ids = tok.tokenize(t)
        assert ids == ref.encode(t, out_type=int)
        assert tok.decode(ids) == t.lower()  # the model case-folds
    assert tok.tokenize_batch(lines) == [tok.tokenize(t) for t in lines]
    assert tok.mask_id in tok.tokenize("the [MASK] of")
    # Layout [CLS] a [SEP] b [SEP], pad after; longest-first truncation as for WordPiece.
    a, b = "squeeze bert is a mobile model", "hello world"
    ta, tb = tok.tokenize(a), tok.tokenize(b)
    enc = tok.encode(a, b, max_length=len(ta) + len(tb) + 5)
    want = [2] + ta + [3] + tb + [3, 0, 0]
    np.testing.assert_array_equal(enc["input_ids"], want)
    np.testing.assert_array_equal(enc["token_type_ids"], [0] * (len(ta) + 2) + [1] * (len(tb) + 1) + [0, 0])
    np.testing.assert_array_equal(enc["attention_mask"], [1] * (len(want) - 2) + [0, 0])
    assert tok.decode(enc["input_ids"], skip_special_tokens=True) == f"{a} {b}"
    a3, b3 = f"{a} {a} {a}", f"{b} {b} {b}"
    keep = len(tb) + 1  # budget 2 * len(tb) + 1: b, the shorter side, keeps all of its tokens
    short = tok.encode(a3, b, max_length=len(tb) + keep + 3)
    assert len(tok.tokenize(a3)) > keep and short["attention_mask"].all()
    np.testing.assert_array_equal(short["input_ids"], [2] + tok.tokenize(a3)[:keep] + [3] + tb + [3])
    both = tok.encode(a3, b3, max_length=13)  # both longer than half the budget: 5 + 5 tokens
    np.testing.assert_array_equal(both["input_ids"], [2] + tok.tokenize(a3)[:5] + [3] + tok.tokenize(b3)[:5] + [3])
    batch = tok.encode_batch(lines[:5], lines[5:10], max_length=9)
    np.testing.assert_array_equal(batch["input_ids"], np.stack([tok.encode(x, y, 9)["input_ids"]
                                                                for x, y in zip(lines[:5], lines[5:10])]))
    assert tok.save(tmp_path) == "spiece.model"
    again = Tokenizer.from_dir(tmp_path)
    assert again.kind == "sentencepiece" and again.tokenize_batch(lines) == tok.tokenize_batch(lines)
    assert pickle.loads(pickle.dumps(tok)).tokenize(lines[0]) == tok.tokenize(lines[0])


def test_sentencepiece_missing_specials(corpus_file, tmp_path):
    spm.SentencePieceTrainer.train(input=corpus_file, model_prefix=str(tmp_path / "plain"), vocab_size=80,
                                   user_defined_symbols=["[CLS]", "[SEP]"], minloglevel=2)
    with pytest.raises(ValueError, match=r"plain\.model.*\[MASK\] or <mask>"):
        Tokenizer.from_file(tmp_path / "plain.model")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="junk.model: not a readable SentencePiece model"):
        Tokenizer.from_file(tmp_path / "junk.model")


# --------------------------------------------------------------------------------------------------
# Errors and the CLI
# --------------------------------------------------------------------------------------------------

def test_errors(tmp_path, hand_vocab):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        Tokenizer.from_file(tmp_path / "nope.txt")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="unknown tokenizer file extension"):
        Tokenizer.from_file(tmp_path / "tokenizer.json")
    with pytest.raises(IsADirectoryError, match="is a directory holding no tokenizer file"):
        Tokenizer.from_file(tmp_path)
    no_mask = tmp_path / "nomask" / "vocab.txt"
    no_mask.parent.mkdir()
    no_mask.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(ValueError, match=r"nomask/vocab.txt.*lacks the special token\(s\) \[MASK\]"):
        Tokenizer.from_dir(no_mask.parent)
    dup = tmp_path / "dup.txt"
    dup.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nhello \n")
    with pytest.raises(ValueError, match=r"dup.txt: line 8 repeats token 'hello' of line 6"):
        Tokenizer.from_file(dup)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"[PAD]\n\xff\n")
    with pytest.raises(ValueError, match=r"bad.txt: line 2, column 1: not UTF-8 text \(byte 0xff\)"):
        Tokenizer.from_file(bad)
    tok = Tokenizer.from_file(hand_vocab)
    with pytest.raises(ValueError, match="2 texts but 1 text_pairs"):
        tok.encode_batch(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="max_length=2 cannot hold the 3 special tokens"):
        tok.encode("a", "b", max_length=2)
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType"):
        tok.tokenize_batch(["a", None])
    with pytest.raises(ValueError, match="kind='bpe'"):
        train_tokenizer([hand_vocab], tmp_path / "t", 100, kind="bpe")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        train_tokenizer([tmp_path / "missing.txt"], tmp_path / "t", 100)


def test_tokens_no_text_can_match_are_named_once_in_a_warning(tmp_path, caplog):
    """A vocab.txt token holding a character BertTokenizerFast's normalizer removes (a control or format character)
    is never produced (checked against BertTokenizerFast): loaded, with one warning per file naming the first."""
    transformers = pytest.importorskip("transformers")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "bc", "\x07", "b\u200bc",
                                 "\ufffd"]) + "\n")
    hf = transformers.BertTokenizerFast(str(vocab))
    assert [hf.tokenize(t) for t in ("a \x07", "b\u200bc", "\ufffd")] == [["a"], ["bc"], []]
    with caplog.at_level("WARNING"):
        tok = Tokenizer.from_file(vocab)
        Tokenizer.from_file(vocab)
    assert tok.vocab_size == 10 and [tok.tokenize(t) for t in ("a \x07", "b\u200bc")] == [[5], [6]]  # a, bc
    assert caplog.text.count("token(s) hold a control or format character") == 1
    assert f"{vocab}: 3 token(s) hold a control or format character" in caplog.text and "line 8, '\\x07'" in caplog.text
    caplog.clear()
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
    with caplog.at_level("WARNING"):
        Tokenizer.from_file(tmp_path / "clean" / "vocab.txt")
    assert "control or format" not in caplog.text


def test_a_tokenizers_corpus_is_checked_as_prepare_datas_and_nothing_is_written(corpus_file, tmp_path):
    """files.check_text_files and text_lines, as for pretraining's corpus: the same file twice (it counted twice), a
    directory, bytes that are not UTF-8 (WordPiece's trainer died in a traceback, SentencePiece trained on them); an
    --out that is a file; too small a SentencePiece vocabulary (its message named a flag we do not have). A refused
    training leaves no directory behind."""
    (tmp_path / "latin1.txt").write_bytes(b"a caf\xe9 here.\n")
    (tmp_path / "bin.txt").write_bytes(b"text\n\x00\x01\x02\n")
    (tmp_path / "a_file").write_text("x")
    os.link(corpus_file, tmp_path / "linked.txt")  # one file by two names
    out = tmp_path / "new" / "out"
    for inputs, kw, msg in (
            ([corpus_file, corpus_file], {}, r"corpus.txt, given before: each corpus file once"),
            ([corpus_file, tmp_path / "linked.txt"], {}, r"linked.txt is .*corpus.txt, given before"),
            ([tmp_path], {}, rf"{tmp_path} is a directory; give the text files in it"),
            ([tmp_path / "latin1.txt"], {}, r"latin1.txt:1:6: not UTF-8 text \(byte 0xe9\)"),
            ([tmp_path / "bin.txt"], {"kind": "sentencepiece"}, r"bin.txt:2:1: a NUL byte"),
            ([corpus_file], {"kind": "sentencepiece", "vocab_size": 8},
             r"take \d+ SentencePiece entries with the specials, more than the vocab_size 8 asked: ask for at least")):
        with pytest.raises(InputError, match=msg):
            train_tokenizer(inputs, out, kw.pop("vocab_size", 100), **kw)
        assert not (tmp_path / "new").exists()
    with pytest.raises(InputError, match=rf"--out {tmp_path / 'a_file'} is a file; give the directory"):
        train_tokenizer([corpus_file], tmp_path / "a_file", 100)


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_more_entries_than_the_corpus_holds_gives_what_it_holds_with_a_warning(tmp_path, kind, caplog):
    """One policy for both kinds: SentencePiece's trainer refused ("Vocabulary size too high ... Please set it to a
    value <= 34"), WordPiece wrote what the corpus supports; both now write that, with a warning."""
    (tmp_path / "c.txt").write_text("the movie was good.\nthe plot was bad, truly awful.\nvery fine film.\n" * 5)
    with caplog.at_level("WARNING"):
        tok = train_tokenizer([tmp_path / "c.txt"], tmp_path / kind, 100_000, kind=kind)
    assert 5 < tok.vocab_size < 100 and f"the corpus supports only {tok.vocab_size} of the 100000" in caplog.text


def test_crlf_vocab_matches_hf(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\r\n".join(HAND_VOCAB).encode())  # CRLF lines, no final newline
    tok, hf = Tokenizer.from_file(path), _hf(path)
    assert tok.vocab_size == len(HAND_VOCAB) == len(hf)
    for t in TEXTS:
        assert tok.tokenize(t) == hf(t, add_special_tokens=False)["input_ids"]


def test_cli_trains_both_kinds(corpus_file, tmp_path):
    spec = importlib.util.spec_from_file_location("train_tokenizer_cli", os.path.join(ROOT, "train", "tokenizer.py"))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    cli.main(["--input", corpus_file, "--out", str(tmp_path / "wp"), "--vocab_size", "200", "--kind", "wordpiece"])
    second = tmp_path / "more.txt"
    second.write_text("\n".join(_corpus_lines(50, 1)) + "\n", encoding="utf-8")
    cli.main(["--input", corpus_file, str(second), "--out", str(tmp_path / "sp"), "--vocab_size", "100",
              "--kind", "sentencepiece"])
    wp, sp = Tokenizer.from_dir(tmp_path / "wp"), Tokenizer.from_dir(tmp_path / "sp")
    assert (wp.kind, wp.vocab_size, sp.kind, sp.vocab_size) == ("wordpiece", 200, "sentencepiece", 100)


def test_cased_tokenizer_config_is_refused(hand_vocab, tmp_path):
    """A cased BERT's directory (do_lower_case: false) is not silently lowercased; an uncased one loads."""
    Tokenizer.from_file(hand_vocab).save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    assert Tokenizer.from_dir(tmp_path).kind == "wordpiece"
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    with pytest.raises(ValueError, match="do_lower_case is false"):
        Tokenizer.from_dir(tmp_path)
    for value, shown in (('"false"', 'a string "false"'), ("0", "an integer 0"), ("null", "null")):  # which is meant?
        (tmp_path / "tokenizer_config.json").write_text(f'{{"do_lower_case": {value}}}')
        with pytest.raises(ValueError, match=f"do_lower_case is {shown}; expected true or false"):
            Tokenizer.from_dir(tmp_path)
    # what else BertTokenizerFast's normalizer reads: accents kept, CJK characters inside words, would read text
    # otherwise there ("Góod": [UNK] there, good here); null / true strip accents with the lowercasing, as here
    for value, msg in (('"strip_accents": false', r"strip_accents is a boolean false; expected null or true"),
                       ('"strip_accents": 1', r"strip_accents is an integer 1; expected null or true"),
                       ('"tokenize_chinese_chars": false', r"tokenize_chinese_chars is a boolean false; expected true"),
                       ('"do_lower_case": true, "tokenize_chinese_chars": "yes"',
                        r'tokenize_chinese_chars is a string "yes"')):
        (tmp_path / "tokenizer_config.json").write_text(f'{{{value}}}')
        with pytest.raises(ValueError, match=rf"tokenizer_config.json: {msg}"):
            Tokenizer.from_dir(tmp_path)
    for ok in ('{"strip_accents": null}', '{"strip_accents": true, "tokenize_chinese_chars": true}'):
        (tmp_path / "tokenizer_config.json").write_text(ok)
        assert Tokenizer.from_dir(tmp_path).kind == "wordpiece"


def test_load_picks_the_kind_behind_one_interface(hand_vocab, sp_tok):
    from squeezebert_jax.tokenizer import SentencePieceTokenizer, WordPieceTokenizer, load

    wp = load(hand_vocab)
    assert type(wp) is WordPieceTokenizer and type(Tokenizer.from_file(hand_vocab)) is WordPieceTokenizer
    assert type(sp_tok) is SentencePieceTokenizer
    for tok, kind, name in ((wp, "wordpiece", "vocab.txt"), (sp_tok, "sentencepiece", "spiece.model")):
        assert isinstance(tok, Tokenizer) and (tok.kind, tok.file_name) == (kind, name)


@pytest.mark.parametrize("vocab_name", ["hand_vocab", "trained_vocab"])
def test_piece_offsets_equal_bert_tokenizer_fast(vocab_name, request):
    path = request.getfixturevalue(vocab_name)
    texts = ["The Café's owner, Zoë, said \u201chello\u201d!", "  spaced   out  ", "naïve résumé x"]
    ours = Tokenizer.from_file(path).pieces_with_offsets(texts)
    enc = _hf(path)(texts, add_special_tokens=False, return_offsets_mapping=True)
    for (ids, offsets), want_ids, want_offsets in zip(ours, enc["input_ids"], enc["offset_mapping"]):
        assert ids == want_ids and offsets == [tuple(o) for o in want_offsets]


def test_sentencepiece_piece_offsets_cover_their_characters(sp_tok):
    texts = ["the café's owner said hello", "  spaced   out  ", "naïve résumé"]
    for text, (ids, offsets) in zip(texts, sp_tok.pieces_with_offsets(texts)):
        assert ids == sp_tok.tokenize(text)
        pieces = [sp_tok.id_to_token(i).replace("\u2581", "") for i in ids]
        for (s, e), piece in zip(offsets, pieces):
            assert 0 <= s <= e <= len(text) and not text[s:s + 1].isspace()
            if sp_tok.unk_id not in ids:
                assert text[s:e].lower() == piece


@pytest.mark.parametrize("kind, name", [("wordpiece", "vocab.txt"), ("sentencepiece", "spiece.model")])
def test_an_existing_tokenizer_is_replaced_only_with_overwrite(corpus_file, tmp_path, run_cli, digest, kind, name):
    """Issue 26 class 3: a MODEL_DIR's tokenizer is never replaced by accident; with --overwrite it is."""
    out = tmp_path / "model"
    out.mkdir()
    (out / name).write_bytes(b"the model's own tokenizer\n")
    before = digest(out)
    rc, stdout, err = run_cli("train/tokenizer.py", "--input", corpus_file, "--out", out, "--vocab_size", "150",
                              "--kind", kind)
    assert rc == 1 and f"{out / name} already exists (a model's tokenizer?); pass --overwrite" in err
    assert len(err.strip().splitlines()) == 1 and digest(out) == before
    rc, stdout, err = run_cli("train/tokenizer.py", "--input", corpus_file, "--out", out, "--vocab_size", "150",
                              "--kind", kind, "--overwrite")
    assert rc == 0, err
    assert Tokenizer.from_file(out / name).vocab_size == 150 and not [p for p in os.listdir(out) if p.startswith(".")]


def test_a_models_directory_never_gets_a_new_tokenizer_even_with_overwrite(corpus_file, tmp_path, digest):
    """A vocab.txt beside a model's config.json and weights is the vocabulary its embeddings were trained for: a new
    one there (of another size: ids past the embedding table) is refused, --overwrite or not, the model untouched."""
    from conftest import tiny_init

    from squeezebert_jax.errors import InputError

    model = tiny_init(tmp_path / "model", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film"])
    before = digest(model)
    for kind in ("wordpiece", "sentencepiece"):
        with pytest.raises(InputError, match=rf"^--out {model} holds a model \(config.json, "
                                                       r"params.safetensors\): a new tokenizer there would replace"):
            train_tokenizer([corpus_file], model, 150, kind=kind, overwrite=True)
    assert digest(model) == before


def test_a_wordpiece_vocabulary_smaller_than_the_corpus_alphabet_is_refused(corpus_file, tmp_path, run_cli):
    """The trainer keeps every character (and its ## form) whatever the size asked: refused, naming the size needed,
    instead of a vocab.txt larger than asked."""
    rc, stdout, err = run_cli("train/tokenizer.py", "--input", corpus_file, "--out", tmp_path / "v", "--vocab_size",
                              "20")
    assert rc == 1 and "more than the vocab_size 20 asked: ask for at least" in err
    assert not (tmp_path / "v" / "vocab.txt").exists()


# --------------------------------------------------------------------------------------------------
# A vocab.txt the model cannot use; files linked out of a directory
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("special", BERT_SPECIALS)
def test_every_special_the_model_uses_is_required(tmp_path, special):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in HAND_VOCAB if t != special))
    with pytest.raises(ValueError, match=rf"{path}: vocab.txt lacks the special token\(s\) {re.escape(special)} "):
        read_vocab(str(path))
    with pytest.raises(ValueError, match=re.escape(special)):
        Tokenizer.from_dir(tmp_path)


_N = len(HAND_VOCAB)


@pytest.mark.parametrize("extra,message", [
    (["##ing"], rf"line {_N + 1} repeats token '##ing' of line {HAND_VOCAB.index('##ing') + 1};"),
    (["[CLS]"], rf"line {_N + 1} repeats token '\[CLS\]' of line 5;"),
    (["fox \t"], rf"line {_N + 1} repeats token 'fox' of line {HAND_VOCAB.index('fox') + 1};"),  # stripped, as
    (["", "xyzzy", ""], rf"line {_N + 3} is blank, as is line {_N + 1}"),                           # tokenizers does
])
def test_a_repeated_token_names_both_lines(tmp_path, extra, message):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in HAND_VOCAB + extra))
    with pytest.raises(ValueError, match=rf"^{path}: {message}"):
        read_vocab(str(path))


def test_one_blank_line_is_a_token_as_in_bert_tokenizer_fast(tmp_path):
    """BertTokenizerFast gives a blank line an id of its own (the empty token): no id after it shifts, so it is
    followed; ids equal the reference's."""
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in HAND_VOCAB[:40] + [""] + HAND_VOCAB[40:]))
    tok, hf = Tokenizer.from_file(path), _hf(path)
    assert tok.vocab_size == len(HAND_VOCAB) + 1 == len(hf) and tok.cls_id == hf.cls_token_id
    assert tok.token_to_id("the") == hf.convert_tokens_to_ids("the") == HAND_VOCAB.index("the") + 1
    for t in TEXTS[:6]:
        assert tok.tokenize(t) == hf(t, add_special_tokens=False)["input_ids"]


def test_checkpoint_file_keeps_reads_inside_the_directory(tmp_path, hand_vocab):
    from squeezebert_jax.errors import InputError
    from squeezebert_jax.tokenizer import checkpoint_file

    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "real.txt").write_text("x")
    os.symlink("real.txt", d / "inside.txt")
    os.symlink(hand_vocab, d / "vocab.txt")
    os.symlink(d / "missing.txt", d / "dangling.txt")
    (d / "sub").mkdir()
    assert checkpoint_file(d, "real.txt") == str(d / "real.txt")
    assert checkpoint_file(d, "inside.txt") == str(d / "inside.txt")
    assert checkpoint_file(d, "absent.txt") is None and checkpoint_file(tmp_path / "no_dir", "x") is None
    # what is there but no file is named, not read as absent ("no tokenizer file" for a vocab.txt directory)
    with pytest.raises(InputError, match=rf"^{d / 'dangling.txt'}: a symbolic link to {d / 'missing.txt'}, which does "
                                         r"not exist, where the checkpoint's dangling.txt goes \(a regular file\)"):
        checkpoint_file(d, "dangling.txt")
    with pytest.raises(InputError, match=rf"^{d / 'sub'}: a directory, where the checkpoint's sub goes"):
        checkpoint_file(d, "sub")
    os.mkfifo(d / "pipe")
    with pytest.raises(InputError, match=rf"^{d / 'pipe'}: a named pipe \(FIFO\), where"):
        checkpoint_file(d, "pipe")
    for name in ("vocab.txt", "../ckpt/../elsewhere.txt", "/etc/passwd"):
        if name != "vocab.txt":
            (tmp_path / "elsewhere.txt").write_text("x")
        with pytest.raises(InputError, match="outside the checkpoint directory"):
            checkpoint_file(d, name)
    with pytest.raises(InputError, match=rf"^{d}/vocab.txt resolves to {hand_vocab}, outside"):
        Tokenizer.from_dir(d)
    os.remove(d / "vocab.txt")
    Tokenizer.from_file(hand_vocab).save(d)
    os.symlink(tmp_path / "elsewhere.txt", d / "tokenizer_config.json")
    with pytest.raises(InputError, match=rf"^{d}/tokenizer_config.json resolves to"):
        Tokenizer.from_dir(d)


def test_a_tokenizer_of_the_other_kind_is_not_left_beside_a_new_one(tmp_path, run_cli, digest):
    """A SentencePiece model trained into a MODEL_DIR holding vocab.txt: refused; with --overwrite the directory ends
    with the new tokenizer alone (Tokenizer.from_dir would otherwise go on reading the old vocab.txt)."""
    text = corpus.write_corpus(tmp_path / "corpus.txt", num_docs=300, seed=0)
    out = tmp_path / "model"
    out.mkdir()
    (out / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    before = digest(out)
    rc, _, err = run_cli("train/tokenizer.py", "--input", text, "--out", out, "--vocab_size", "150",
                         "--kind", "sentencepiece")
    assert rc == 1 and f"{out / 'vocab.txt'} already exists" in one_error_line(err) and digest(out) == before
    rc, _, err = run_cli("train/tokenizer.py", "--input", text, "--out", out, "--vocab_size", "150",
                         "--kind", "sentencepiece", "--overwrite")
    assert rc == 0, err
    assert "vocab.txt" not in os.listdir(out) and Tokenizer.from_dir(out).kind == "sentencepiece"


def test_a_directory_given_for_a_tokenizer_file_names_the_file_to_give(tmp_path):
    """``--vocab DIR`` (prepare_data.py) or ``Tokenizer.from_file(DIR)``: the file in it is named, not a Python API."""
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError, match=rf"^{tmp_path / 'd'} is a directory holding no tokenizer file "
                                                r"\(vocab.txt, spiece.model, .*\); give the tokenizer file$"):
        Tokenizer.from_file(tmp_path / "d")
    (tmp_path / "d" / "vocab.txt").write_text("".join(t + "\n" for t in HAND_VOCAB))
    with pytest.raises(IsADirectoryError, match=rf"^{tmp_path / 'd'} is a directory; give the tokenizer file in it "
                                                rf"\({tmp_path / 'd' / 'vocab.txt'}\)$"):
        Tokenizer.from_file(tmp_path / "d")


def test_tokens_added_past_the_vocabulary_are_refused_by_both_readers(hand_vocab, tmp_path):
    """transformers' added_tokens.json (ids past vocab.txt, embeddings grown for them): no tokenizer here reads it, so
    a conversion dropped it without a word and text holding one split into other pieces. Refused by Tokenizer.from_dir
    and by a conversion's tokenizer check (pretrained.tokenizer_files); an empty one adds nothing."""
    (tmp_path / "vocab.txt").write_text(open(hand_vocab).read())
    (tmp_path / "added_tokens.json").write_text('{"newtok": 99999}')
    for read in (Tokenizer.from_dir, pretrained.tokenizer_files):
        with pytest.raises(InputError, match=r"added_tokens.json: the added token 'newtok' at id 99999 \(past "
                                             rf"vocab.txt's {len(HAND_VOCAB)} tokens\), which this library's "
                                             r"tokenizers do not read"):
            read(str(tmp_path))
    # in tokenizer.json and tokenizer_config.json too (transformers 5 reads them there); another token's id
    (tmp_path / "added_tokens.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text('{"added_tokens_decoder": {"7": {"content": "[MASK]"}}}')
    with pytest.raises(InputError, match=rf"tokenizer_config.json: the added token '\[MASK\]' at id '7' \(vocab.txt "
                                         rf"has {HAND_VOCAB[7]!r} there\)"):
        Tokenizer.from_dir(str(tmp_path))
    # the specials at their own ids, as transformers writes them, add nothing
    (tmp_path / "tokenizer_config.json").write_text('{"added_tokens_decoder": {"4": {"content": "[CLS]"}}}')
    (tmp_path / "added_tokens.json").write_text('{"[CLS]": 4}')
    assert Tokenizer.from_dir(str(tmp_path)).vocab_size == len(HAND_VOCAB)


def test_train_tokenizers_arguments_are_checked_before_any_work(tmp_path):
    """overwrite="no" replaced a user's vocab.txt (a truthy string), vocab_size "60" or 60.5 was a TypeError, and a
    pretraining run's model/ took a tokenizer its export then replaced."""
    corpus_file = tmp_path / "c.txt"
    corpus_file.write_text("the quick brown fox\n" * 20)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "vocab.txt").write_text("a user's vocabulary\n")
    for flag in ("no", "False", 0):
        with pytest.raises(InputError, match=rf"^overwrite={flag!r}: expected True or False$"):
            train_tokenizer([str(corpus_file)], str(tmp_path / "mine"), 60, overwrite=flag)
    for size in ("60", 60.5, None):
        with pytest.raises(InputError, match=rf"^vocab_size={size!r}; expected an integer"):
            train_tokenizer([str(corpus_file)], str(tmp_path / "new"), size)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config_history.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match=r"^--out .*run/model is model/ of the training run in"):
        train_tokenizer([str(corpus_file)], str(tmp_path / "run" / "model"), 60)
    assert (tmp_path / "mine" / "vocab.txt").read_text() == "a user's vocabulary\n"
    assert not (tmp_path / "new").exists() and not (tmp_path / "run" / "model").exists()


def test_a_tokenizer_is_never_saved_into_a_models_directory(hand_vocab, tmp_path):
    """Tokenizer.save (the API; prepare's writer) replaced a MODEL_DIR's vocab.txt with another vocabulary."""
    model = tiny_init(tmp_path / "model", VOCAB)
    before = (model / "vocab.txt").read_bytes()
    for target in (model, model / "sub"):
        with pytest.raises(InputError, match=r"^directory .*model(/sub is inside the model directory| holds a model)"):
            Tokenizer.from_file(hand_vocab).save(target)
    assert (model / "vocab.txt").read_bytes() == before and not (model / "sub").exists()
    assert Tokenizer.from_file(hand_vocab).save(tmp_path / "tok") == "vocab.txt"
