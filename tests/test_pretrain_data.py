"""Corpus -> ArrayRecord -> MLM + SOP batches: statistics, document order, determinism, sharding, odd input."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import tiny_config

from squeezebert_jax import corpus, errors, parallel, pretrain, pretrain_data
from squeezebert_jax.tokenizer import Tokenizer

GOOD = "Anna found a key .\nShe took it home .\n\nBen ran to the park .\nThe dog ran too .\n"

SEQ, BATCH, PREDS = 64, 32, 10
BATCH_KEYS = {"input_ids": (np.int32, (BATCH, SEQ)), "token_type_ids": (np.int32, (BATCH, SEQ)),
              "attention_mask": (np.int32, (BATCH, SEQ)), "masked_lm_positions": (np.int32, (BATCH, PREDS)),
              "masked_lm_ids": (np.int32, (BATCH, PREDS)), "masked_lm_weights": (np.float32, (BATCH, PREDS)),
              "sop_label": (np.int32, (BATCH,))}


def _loader(data_dir, n=1, **kw):
    args = dict(seq_len=SEQ, global_batch_size=BATCH, seed=0, max_predictions_per_seq=PREDS, shard_index=0,
                shard_count=1) | kw
    it = iter(pretrain_data.make_pretrain_loader(str(data_dir), **args))
    return it, [next(it) for _ in range(n)]


def _cli():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("prepare_data_cli", os.path.join(root, "train", "prepare_data.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cat(batches):
    return {k: np.concatenate([np.atleast_1d(b[k]) for b in batches]) for k in batches[0]}


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    text = corpus.write_corpus(d / "corpus.txt", num_docs=300, seed=1)
    tok = Tokenizer.from_file(corpus.write_demo_vocab(d / "vocab.txt"))
    meta = pretrain_data.prepare([text], tok, d / "prepared", num_shards=3, progress=False)
    return d, tok, meta


# Document i has 2 + i % 7 sentences; sentence j is "d<i> s<j>" repeated 1 + (i + 2 j) % 5 times: every token
# names its document and sentence, so a segment's provenance can be read back from the batch.
NUM_NUMBERED = 200


def _numbered_docs():
    return [[" ".join([f"d{i} s{j}"] * (1 + (i + 2 * j) % 5)) for j in range(2 + i % 7)]
            for i in range(NUM_NUMBERED)]


@pytest.fixture(scope="session")
def numbered(tmp_path_factory):
    d = tmp_path_factory.mktemp("numbered")
    words = [f"d{i}" for i in range(NUM_NUMBERED)] + [f"s{j}" for j in range(8)]
    (d / "vocab.txt").write_text("\n".join(corpus.SPECIALS + words) + "\n")
    tok = Tokenizer.from_file(d / "vocab.txt")
    pretrain_data.prepare(_numbered_docs(), tok, d / "prepared", num_shards=4, progress=False)
    flat = []  # per document: its tokens and sentence start offsets
    for doc in _numbered_docs():
        sents = tok.tokenize_batch(doc)
        flat.append((np.concatenate(sents), list(np.cumsum([0] + [len(x) for x in sents]))))
    return d / "prepared", tok, flat


def _restore(batch, i):
    """Row ``i`` with the masked positions set back to ``masked_lm_ids``."""
    ids = batch["input_ids"][i].copy()
    w = batch["masked_lm_weights"][i] > 0
    ids[batch["masked_lm_positions"][i][w]] = batch["masked_lm_ids"][i][w]
    return ids


def _segments(batch, i, tok):
    ids = _restore(batch, i)
    n = int(batch["attention_mask"][i].sum())
    seps = np.flatnonzero(ids[:n] == tok.sep_id)
    assert ids[0] == tok.cls_id and len(seps) == 2 and seps[1] == n - 1
    return ids[1:seps[0]], ids[seps[0] + 1:seps[1]]


# -- corpus ---------------------------------------------------------------------------------------

def test_corpus_is_deterministic_learnable_and_covered_by_the_vocab(tmp_path):
    assert corpus.generate_documents(5, seed=3) == corpus.generate_documents(5, seed=3)
    assert corpus.generate_documents(5, seed=3) != corpus.generate_documents(5, seed=4)
    vocab = corpus.demo_vocab()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) == len(set(vocab)) < 1000
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    docs = corpus.generate_documents(400, seed=0)
    ids = tok.tokenize_batch([s for d in docs for s in d] + ["zebra quixotic 42 jumps!", "x-ray's (wow)"])
    assert not any(tok.unk_id in x for x in ids)  # letters + ##letters: any lowercase text tokenizes
    # SOP proxy: every sentence's template gives its story position, strictly increasing within a document, so
    # "A's position < B's position" tells original from swapped pairs perfectly.
    pos = [[corpus.template_index(s) for s in d] for d in docs]
    assert all(p[0] == 0 and p[-1] == len(corpus.TEMPLATES) for p in pos)
    assert all(all(a < b for a, b in zip(p, p[1:])) for p in pos)
    assert len({len(d) for d in docs}) > 3 and -1 not in sum(pos, [])
    # MLM structure: the hero's name recurs (unless the story skips every step naming it), pronouns agree
    recurs = []
    for d in docs:
        name = d[0].split()[d[0].split().index("called") + 1]
        pron = next((s.split()[0] for s in d if s.split()[0] in ("she", "he")), None)
        recurs.append(sum(name in s.split() for s in d) >= 2)
        if pron is not None:
            assert (name in corpus._NAMES["she"]) == (pron == "she")
    assert np.mean(recurs) > 0.97
    # the file format round-trips through the reader
    path = corpus.write_corpus(tmp_path / "c.txt", num_docs=50, seed=5)
    assert list(pretrain_data.read_text_documents([path])) == corpus.generate_documents(50, seed=5)


# -- prepare --------------------------------------------------------------------------------------

def test_prepare_round_trip_and_meta(demo):
    d, tok, meta = demo
    docs = corpus.generate_documents(300, seed=1)
    tokenized = [tok.tokenize_batch(doc) for doc in docs]
    on_disk = json.loads((d / "prepared" / "meta.json").read_text())
    assert on_disk == meta
    assert meta["num_docs"] == 300 and meta["num_sentences"] == sum(map(len, docs))
    assert meta["num_tokens"] == sum(len(s) for doc in tokenized for s in doc)
    assert meta["tokenizer"] == {"kind": "wordpiece", "vocab_size": tok.vocab_size, "file": "vocab.txt",
                                 "tokens_sha256": pretrain_data.tokens_sha256(str(d / "prepared" / "vocab.txt"))}
    assert (d / "prepared" / "vocab.txt").read_bytes() == (d / "vocab.txt").read_bytes()
    assert meta["shard_num_records"] == [100, 100, 100] and meta["token_width"] == 2
    assert meta["stats"] == dict(documents=300, sentences=meta["num_sentences"], empty_documents=0,
                                 one_sentence_documents=0, empty_sentences=0, invalid_utf8_lines=0,
                                 invalid_utf8_bytes=0, truncated_lines=0)
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    paths = pretrain_data.shard_paths(d / "prepared")
    for s, path in enumerate(paths):  # round robin: record k of shard s is document s + 3 k
        src = ArrayRecordDataSource([path])
        for k in range(len(src)):
            got = [x.tolist() for x in pretrain_data.decode_document(src[k])]
            assert got == tokenized[s + 3 * k]
    wide = [[70000, 1], [2, 3, 4]]
    assert [x.tolist() for x in pretrain_data.decode_document(pretrain_data.encode_document(wide, 4))] == wide
    with pytest.raises(ValueError, match="corrupt"):
        pretrain_data.decode_document(pretrain_data.encode_document(wide, 4)[:-2])
    with pytest.raises(ValueError, match="not a pretraining record"):
        pretrain_data.decode_document(b"\x01\x00")


# -- examples -------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, msg", [
    (lambda t: t[:300], r"meta.json:\d+:\d+: not valid JSON"),  # cut short
    (lambda t: "[1, 2]", r"meta.json: a list \[1, 2\], not the JSON object prepare_data writes"),
    (lambda t: json.dumps(json.loads(t) | {"shards": "shard-00000-of-00003.array_record"}),
     r'meta.json: "shards" is a string "shard-0.*", not a non-empty list of the shard files\' names'),
    # no shard (grain's traceback after the run's first files were written), one shard listed twice (read twice)
    (lambda t: json.dumps(json.loads(t) | {"shards": [], "num_shards": 0}), r'"shards" is a list \[\], not a '
                                                                           r'non-empty list'),
    (lambda t: json.dumps(json.loads(t) | {"shards": [json.loads(t)["shards"][0]] * 3}),
     r'"shards" is a list .*, not a non-empty list of the shard files\' names, each once'),
    (lambda t: json.dumps(json.loads(t) | {"num_shards": "3"}), r'"num_shards" is a string "3", not an integer >= 0'),
    (lambda t: json.dumps(json.loads(t) | {"token_width": 3}), r'"token_width" is an integer 3, not 2 or 4'),
    (lambda t: json.dumps(json.loads(t) | {"num_shards": 4}), r"3 shards listed, but \"num_shards\""),
])
def test_a_damaged_meta_json_is_one_line_naming_it(tmp_path, demo, edit, msg):
    """pretrain_data.load_meta, the one reader of a preparation's meta.json (resume, data.source=prepared): its bytes
    and JSON through files.read_json, each field it is read for of its type."""
    shutil.copytree(demo[0] / "prepared", tmp_path / "p")
    meta = tmp_path / "p" / "meta.json"
    meta.write_text(edit(meta.read_text()))
    with pytest.raises(errors.InputError, match=msg):
        pretrain_data.load_meta(tmp_path / "p")


def test_batch_layout_and_masking_statistics(demo):
    d, tok, _ = demo
    _, batches = _loader(d / "prepared", n=60)
    for k, (dtype, shape) in BATCH_KEYS.items():
        assert batches[0][k].dtype == dtype and batches[0][k].shape == shape, k
    b = _cat(batches)
    att = b["attention_mask"].astype(bool)
    n = att.sum(1)
    assert (b["input_ids"][~att] == tok.pad_id).all() and (b["token_type_ids"][~att] == 0).all()
    assert att[:, 0].all() and (np.diff(b["attention_mask"], axis=1) <= 0).all()  # real tokens, then padding
    assert (b["input_ids"][:, 0] == tok.cls_id).all() and ((b["input_ids"] == tok.sep_id).sum(1) == 2).all()
    w = b["masked_lm_weights"] > 0
    # 15% of the maskable tokens (all but [CLS] + 2 [SEP]), rounded, in [1, max_predictions]
    assert (w.sum(1) == np.clip(np.rint(0.15 * (n - 3)), 1, PREDS)).all()
    assert (w[:, :-1] >= w[:, 1:]).all() and (b["masked_lm_positions"][~w] == 0).all()
    assert (b["masked_lm_ids"][~w] == 0).all()
    pos, orig = b["masked_lm_positions"], b["masked_lm_ids"]
    assert all((np.diff(p[m]) > 0).all() for p, m in zip(pos, w))  # sorted, distinct
    assert (np.take_along_axis(att, pos, 1)[w]).all() and (pos[w] > 0).all()
    specials = np.asarray(sorted(tok.special_ids))
    assert not np.isin(orig[w], specials).any()  # specials are never masked
    at = np.take_along_axis(b["input_ids"], pos, 1)[w]
    total = w.sum()
    p_mask, p_kept = np.mean(at == tok.mask_id), np.mean(at == orig[w])
    p_random = 1 - p_mask - p_kept
    sigma = lambda p: np.sqrt(p * (1 - p) / total)  # noqa: E731  (4 standard errors below)
    assert total > 10_000 and abs(p_mask - 0.8) < 4 * sigma(0.8)
    assert abs(p_kept - 0.1) < 4 * sigma(0.1) and abs(p_random - 0.1) < 4 * sigma(0.1)
    assert not np.isin(at[(at != tok.mask_id) & (at != orig[w])], specials).any()  # random tokens: non-special
    assert abs(b["sop_label"].mean() - 0.5) < 4 * np.sqrt(0.25 / len(n))  # SOP labels balanced
    assert (n < SEQ).mean() > 0.05  # short_seq_prob: some short targets


@pytest.mark.parametrize("seq_len", [SEQ, 16])
def test_segments_are_two_consecutive_runs_of_one_document(numbered, seq_len):
    """Read back from the tokens: A and B come from one document, each starts at a sentence start and is a
    contiguous span of it (ending at a sentence end unless truncated), and the one first in the document ends
    right where the other starts; which one is first is what ``sop_label`` says. Restoring the masked
    positions from ``masked_lm_ids`` must give back exactly the document's tokens."""
    data_dir, tok, flat = numbered
    _, batches = _loader(data_dir, n=4, seq_len=seq_len)
    d_ids = {tok.token_to_id(f"d{i}"): i for i in range(NUM_NUMBERED)}
    s_ids = {tok.token_to_id(f"s{j}"): j for j in range(8)}
    labels, truncated = [], 0
    for batch in batches:
        for i in range(BATCH):
            a, b = _segments(batch, i, tok)
            n = len(a) + len(b) + 3
            types = batch["token_type_ids"][i]
            assert (types[:len(a) + 2] == 0).all() and (types[len(a) + 2:n] == 1).all() and not types[n:].any()
            first, second = (b, a) if batch["sop_label"][i] else (a, b)
            docs = {d_ids[t] for t in np.concatenate([a, b]) if t in d_ids}
            assert len(docs) == 1  # one document
            tokens, offsets = flat[docs.pop()]
            spans = []
            for seg in (first, second):
                s0 = s_ids[seg[1]]  # "d<i> s<j>": the second token names the sentence
                begin = offsets[s0]
                np.testing.assert_array_equal(seg, tokens[begin:begin + len(seg)])
                spans.append((begin, begin + len(seg)))
                if n < seq_len:  # nothing truncated: the segment ends at a sentence end
                    assert begin + len(seg) in offsets
            assert spans[0][1] == spans[1][0] or n == seq_len  # consecutive (truncation cuts `first` at its end)
            assert spans[0][0] < spans[1][0]
            labels.append(batch["sop_label"][i])
            truncated += n == seq_len and (spans[0][1] < spans[1][0] or spans[1][1] not in offsets)
    assert 0.2 < np.mean(labels) < 0.8
    assert truncated > 10 if seq_len == 16 else truncated < 10


def test_same_seed_same_batches_and_resume_from_state(numbered):
    data_dir = numbered[0]
    _, a = _loader(data_dir, n=6)
    _, b = _loader(data_dir, n=6, num_threads=0)  # no prefetch thread: the same stream
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
    it, d = _loader(data_dir, n=6, num_workers=2)  # batches made in worker processes: the same stream
    for x, y in zip(a, d):
        assert all(np.array_equal(x[k], y[k]) for k in x)
    del it, d
    _, c = _loader(data_dir, n=1, seed=1)
    assert not np.array_equal(c[0]["input_ids"], a[0]["input_ids"])
    it, _ = _loader(data_dir, n=3)
    state = it.get_state()
    json.dumps(state)  # what orbax's grain handler writes
    resumed = iter(pretrain_data.make_pretrain_loader(str(data_dir), SEQ, BATCH, 0, PREDS, shard_index=0,
                                                      shard_count=1))
    resumed.set_state(state)
    for step in (3, 4, 5):
        got = next(resumed)
        assert all(np.array_equal(got[k], a[step][k]) for k in got)


def test_shards_are_disjoint_rows_of_the_global_batch(numbered):
    data_dir, tok, _ = numbered
    _, one = _loader(data_dir, n=4)
    hosts = [_loader(data_dir, n=4, shard_index=h, shard_count=2)[1] for h in (0, 1)]
    assert hosts[0][0]["input_ids"].shape == (BATCH // 2, SEQ)
    for step in range(4):
        for k in one[step]:
            np.testing.assert_array_equal(np.concatenate([hosts[0][step][k], hosts[1][step][k]]), one[step][k])
    d_ids = {tok.token_to_id(f"d{i}"): i for i in range(NUM_NUMBERED)}

    def docs(batches):
        return [next(d_ids[t] for t in _restore(b, i) if t in d_ids)
                for b in batches for i in range(len(b["sop_label"]))]

    d0, d1 = docs(hosts[0]), docs(hosts[1])  # 128 examples < 200 documents: one epoch, no repeats
    assert len(set(d0)) == len(d0) and len(set(d1)) == len(d1) and not set(d0) & set(d1)
    for n in (1, 2, 7, 200, 1000):  # each epoch is a permutation of the records, a new one each epoch
        perm = pretrain_data.permute(np.arange(3 * n), n, seed=5).reshape(3, n)
        assert all(sorted(p) == list(range(n)) for p in perm)
        if n > 2:
            assert not np.array_equal(perm[0], perm[1]) and not np.array_equal(perm[0], np.arange(n))


def test_whole_word_masking_masks_whole_words(tmp_path):
    vocab = corpus.SPECIALS + ["un", "##believ", "##able", "dog", "cat", "."]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = Tokenizer.from_file(tmp_path / "vocab.txt")
    docs = [["unbelievable dog unbelievable cat .", "dog cat unbelievable dog unbelievable .",
             "cat unbelievable unbelievable dog .", "dog dog unbelievable cat cat ."]] * 40
    pretrain_data.prepare(docs, tok, tmp_path / "p", num_shards=1, progress=False)
    starts = tok.is_word_start(np.arange(tok.vocab_size))

    def partial_words(wwm):
        _, batches = _loader(tmp_path / "p", n=10, seq_len=40, global_batch_size=8, max_predictions_per_seq=6,
                             whole_word_masking=wwm)
        partial = multi = 0
        for b in batches:
            for i in range(len(b["input_ids"])):
                ids, w = _restore(b, i), b["masked_lm_weights"][i] > 0
                masked = np.zeros(len(ids), bool)
                masked[b["masked_lm_positions"][i][w]] = True
                word = np.cumsum(starts[ids])  # word number of each token
                for x in np.unique(word[masked]):
                    partial += not masked[word == x].all()
                    multi += (word == x).sum() > 1
                assert w.sum() <= 6
        return partial, multi

    partial, multi = partial_words(True)
    assert partial == 0 and multi > 20  # three-piece words are masked, always whole
    assert partial_words(False)[0] > 20  # without it, single pieces of words are masked


# -- odd input, TFDS, CLI -------------------------------------------------------------------------

def test_odd_corpus_input_is_counted_not_fatal(tmp_path, demo, caplog):
    tok = demo[1]
    raw = (b"first doc one .\r\nfirst doc two .\n\n\n  \nonly one sentence .\n\n"
           b"bad bytes \xff\xfe here .\n" + b"x" * 30_000 + b"\n\x07\x07\n\n"
           b"last a .\nlast b .")  # no final newline
    (tmp_path / "odd.txt").write_bytes(raw)
    meta = pretrain_data.prepare([str(tmp_path / "odd.txt")], tok, tmp_path / "p", num_shards=2, progress=False)
    s = meta["stats"]
    assert s["empty_documents"] == 2 and s["one_sentence_documents"] == 1 and s["empty_sentences"] == 1
    assert s["invalid_utf8_lines"] == 1 and s["truncated_lines"] == 1 and s["documents"] == 4
    assert s["invalid_utf8_bytes"] == 2  # \xff \xfe: two stray bytes, far below the refusal threshold
    assert meta["num_docs"] == 3 and meta["num_sentences"] == 6
    assert "empty" not in caplog.text
    # more shards than documents: the empty ones are counted in a warning (a shard holds whole documents)
    meta = pretrain_data.prepare([str(tmp_path / "odd.txt")], tok, tmp_path / "p5", num_shards=5, progress=False)
    assert meta["shard_num_records"].count(0) == 2 and ("num_shards=5: more shards than the 3 documents written, so "
                                                        "2 shards are empty; fewer shards (at most 3)") in caplog.text
    src_docs = [["ok one .", "bad \ud800 surrogate ."], [" ", ""], ["lonely ."]]
    meta = pretrain_data.prepare(src_docs, tok, tmp_path / "p", num_shards=1, progress=False)
    assert meta["stats"]["invalid_utf8_lines"] == 1 and meta["stats"]["empty_documents"] == 1
    assert meta["num_docs"] == 1 and sorted(os.listdir(tmp_path / "p")) == [
        "meta.json", "shard-00000-of-00001.array_record", "vocab.txt"]  # stale shards of the 2-shard run gone
    with pytest.raises(ValueError, match="no document with at least two"):
        pretrain_data.prepare([["lonely ."]], tok, tmp_path / "q", num_shards=1, progress=False)
    with pytest.raises(FileNotFoundError, match="meta.json"):
        pretrain_data.make_pretrain_loader(str(tmp_path / "q"), SEQ, BATCH, 0, PREDS, shard_index=0, shard_count=1)
    with pytest.raises(ValueError, match="seq_len"):
        pretrain_data.make_pretrain_loader(str(tmp_path / "p"), 4, BATCH, 0, PREDS, shard_index=0, shard_count=1)
    with pytest.raises(ValueError, match="multiple of 3"):
        pretrain_data.make_pretrain_loader(str(tmp_path / "p"), SEQ, 32, 0, PREDS, shard_index=0, shard_count=3)


@pytest.mark.parametrize("text, where", [
    (b"good great\rvery good .\nthe good .\n", "2:11: a carriage return that ends no line"),
    (b"the good .\n\xef\xbb\xbfgood great .\n", "3:1: a byte-order mark inside the file"),
])
def test_the_corpus_reader_refuses_by_line_what_the_tokenizers_trainer_refuses(tmp_path, text, where):
    """A lone CR or a byte-order mark inside a corpus: prepare_data read it into a sentence (the mark glued to a
    word) while train/tokenizer.py refused the same file (files.text_lines): both refuse it, at one line:column. A
    mark at the file's start is dropped by both."""
    from squeezebert_jax import tokenizer

    path = tmp_path / "c.txt"
    path.write_bytes(b"\xef\xbb\xbfone good .\n" + text)
    with pytest.raises(errors.InputError, match=rf"^{path}:{where}"):
        list(pretrain_data.read_text_documents([str(path)]))
    with pytest.raises(errors.InputError, match=rf"^{path}:{where}"):
        tokenizer.train_tokenizer([str(path)], tmp_path / "tok", vocab_size=40)
    path.write_bytes(b"\xef\xbb\xbfone good .\r\nthe good .\n")
    assert list(pretrain_data.read_text_documents([str(path)])) == [["one good .", "the good ."]]


def test_sentence_splitter():
    text = ("Dr. Smith went home. He slept! Then J. R. R. Tolkien wrote 3 books? \"Yes,\" she said.\n\n"
            "A new paragraph, e.g. This one... 2 more. done.")
    assert pretrain_data.split_sentences(text) == [
        "Dr. Smith went home.", "He slept!", "Then J. R. R. Tolkien wrote 3 books?", "\"Yes,\" she said.",
        "A new paragraph, e.g. This one...", "2 more. done."]


def test_tfds_source_and_cli(tmp_path, demo):
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    texts = [b"Anna found a key. She took it home.\nThe end came soon.", b"Only one sentence here",
             b"Bad \xff byte. Then a second sentence."]

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices({"text": texts, "title": [b"t"] * len(texts)})

    prepare_data = _cli()

    with tfds.testing.mock_data(as_dataset_fn=as_dataset, policy=tfds.testing.MockPolicy.USE_CODE):
        stats = pretrain_data.CorpusStats()
        docs = list(pretrain_data.iter_tfds_documents("wikipedia/20230601.en", stats=stats))
        assert docs == [["Anna found a key.", "She took it home.", "The end came soon."],
                        ["Only one sentence here"], ["Bad \ufffd byte.", "Then a second sentence."]]
        assert stats.invalid_utf8_lines == 1
        vocab = str(demo[0] / "vocab.txt")
        assert prepare_data.main(["--tfds", "wikipedia/20230601.en", "--vocab", vocab, "--out",
                                  str(tmp_path / "w"), "--num_shards", "2"]) == 0
    meta = pretrain_data.load_meta(tmp_path / "w")
    assert meta["num_docs"] == 2 and meta["stats"]["one_sentence_documents"] == 1
    assert meta["stats"]["invalid_utf8_lines"] == 1
    path = corpus.write_corpus(tmp_path / "c.txt", num_docs=20, seed=0)
    twin = shutil.copyfile(path, tmp_path / "c2.txt")  # the same text in another file (one file twice is refused)
    assert prepare_data.main(["--input", path, str(twin), "--vocab", vocab, "--out", str(tmp_path / "t")]) == 0
    log = (tmp_path / "t" / prepare_data.LOG_NAME).read_text()
    assert f"{twin} holds the same bytes as {path}, given before: its documents count twice" in log
    assert pretrain_data.load_meta(tmp_path / "t")["num_docs"] == 40
    assert pretrain_data.sequences_per_second(tmp_path / "t", 32, 16, num_batches=2) > 0



def test_batch_spec_is_the_loaders_layout(demo):
    """aot compiles the step for pretrain_data.batch_spec: it must be what the loader makes."""
    _, (b,) = _loader(demo[0] / "prepared")
    spec = pretrain_data.batch_spec(BATCH, SEQ, PREDS)
    assert set(spec) == set(b) == set(BATCH_KEYS)
    for k, (shape, dtype) in spec.items():
        assert (b[k].shape, b[k].dtype) == (shape, np.dtype(dtype)), k


def test_device_prefetcher_same_batches_and_exact_resume(numbered):
    """Batches made and put on the devices ahead: the same batches in the same order; its state is the consumed
    position (not the prefetched one), so saving after k batches and restoring continues at batch k."""
    import grain
    import orbax.checkpoint as ocp

    data_dir = numbered[0]
    _, ref = _loader(data_dir, n=8)
    mesh = parallel.make_mesh()
    it, _ = _loader(data_dir, n=0)
    pf = parallel.DevicePrefetcher(it, mesh, depth=3)
    got = [next(pf) for _ in range(5)]
    for g, r in zip(got, ref):
        assert len(g["input_ids"].sharding.device_set) == len(mesh.devices.flat)  # global arrays on the mesh
        assert all(np.array_equal(np.asarray(g[k]), r[k]) for k in r)
    # the thread has made batches 5..7 by now; the state still says "5 consumed", as the plain iterator's would
    plain, _ = _loader(data_dir, n=5)
    assert json.loads(pf.get_state()) == plain.get_state()
    # saved and restored through orbax's grain handler, into a fresh prefetcher, mid-stream
    ckpt = ocp.CheckpointManager(str(numbered[0].parent / "pf_ckpt"), item_handlers={
        "data": grain.checkpoint.CheckpointHandler()})
    ckpt.save(5, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(pf)))
    ckpt.wait_until_finished()
    for r in ref[5:8]:  # saving did not disturb the stream
        assert np.array_equal(np.asarray(next(pf)["input_ids"]), r["input_ids"])
    fresh = parallel.DevicePrefetcher(_loader(data_dir, n=0)[0], mesh, depth=2)
    next(fresh)  # it has run ahead from batch 0; the restore must drop that
    ckpt.restore(5, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(fresh)))
    for r in ref[5:8]:
        nb = next(fresh)
        assert all(np.array_equal(np.asarray(nb[k]), r[k]) for k in r), [(k, np.asarray(nb[k])[:2], r[k][:2]) for k in r if not np.array_equal(np.asarray(nb[k]), r[k])]
    pf.close(), fresh.close(), ckpt.close()


def test_a_resume_on_data_prepared_again_is_refused_unless_told_to_start_the_data_over(tmp_path):
    wd = tmp_path / "run"
    pretrain.train_and_evaluate(tiny_config(stop_at_step=2), str(wd))
    ckpt = wd / "checkpoints"
    before = sorted(os.listdir(ckpt))
    shutil.rmtree(wd / "data")  # the demo data made again from fewer documents: other shards, the same vocabulary
    with pytest.raises(errors.InputError, match=r"changed since the checkpoint at step 2 .* its shards are not the "
                                                r"ones the checkpoint read .*data.start_over=True"):
        pretrain.train_and_evaluate(tiny_config(**{"data.demo_num_docs": 150}), str(wd))
    assert sorted(os.listdir(ckpt)) == before
    data = sorted(os.listdir(wd / "data"))  # made again from 150 documents, kept: other settings now are refused
    with pytest.raises(errors.InputError, match=rf"^{wd / 'data'} holds the demo data made for other settings: "
                                                r"config.data.demo_seed=4 \(it was made with 0\). Resume with"):
        pretrain.train_and_evaluate(tiny_config(**{"data.demo_num_docs": 150, "data.demo_seed": 4}), str(wd))
    assert sorted(os.listdir(ckpt)) == before and sorted(os.listdir(wd / "data")) == data
    final = pretrain.train_and_evaluate(tiny_config(**{"data.demo_num_docs": 150, "data.start_over": True}), str(wd))
    assert final["preempted"] is False and sorted(json.loads(line)["step"] for line in open(wd / "metrics.jsonl")) \
        == [2, 4]

    other = tmp_path / "other"  # another vocabulary of the same size: refused even with start_over
    pretrain.train_and_evaluate(tiny_config(stop_at_step=2), str(other))
    vocab = (other / "data" / "vocab.txt").read_text().splitlines()
    vocab[-1], vocab[-2] = vocab[-2], vocab[-1]
    (other / "data" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    with pytest.raises(errors.InputError, match=r"vocab.txt: not the tokenizer the data was prepared with"):
        pretrain.train_and_evaluate(tiny_config(**{"data.start_over": True}), str(other))
    meta = json.loads((other / "data" / "meta.json").read_text())  # data prepared before tokenizers were hashed:
    del meta["tokenizer"]["tokens_sha256"]  # the checkpoint's fingerprint still tells
    (other / "data" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(errors.InputError, match=r"another vocabulary \(token ids now mean other words\)"):
        pretrain.train_and_evaluate(tiny_config(**{"data.start_over": True}), str(other))
    # a new run from a model whose vocabulary is not the data's: its embeddings would read other words (it trained)
    third = tmp_path / "third"
    n = len(vocab)
    with pytest.raises(errors.InputError, match=rf"^config.init_from='{re.escape(str(wd / 'model'))}': its vocabulary "
                                                rf"\({n} entries\) is not the one {re.escape(str(other))}/data was "
                                                rf"prepared with \({n}; they differ from id {n - 2}\): its embeddings "
                                                r"would read other words"):
        pretrain.train_and_evaluate(tiny_config(init_from=str(wd / "model"), **{
            "data.source": "prepared", "data.path": str(other / "data"), "model.overrides": {}}), str(third))
    assert not third.exists()
    # and on the demo corpus, which is tokenized with its own vocabulary: refused before the demo data is made
    swapped = tmp_path / "swapped"
    shutil.copytree(wd / "model", swapped)
    (swapped / "vocab.txt").write_text("\n".join(vocab) + "\n")
    with pytest.raises(errors.InputError, match=rf"^config.init_from='{re.escape(str(swapped))}': its vocabulary "
                                                rf"\({n} entries\) is not the one the demo corpus is tokenized with "
                                                rf"\({n}; they differ from id {n - 2}\): .*; pretrain on the demo "
                                                r"corpus without init_from, or prepare your own text with "):
        pretrain.train_and_evaluate(tiny_config(init_from=str(swapped), **{"model.overrides": {}}), str(third))
    assert not third.exists()


def test_lines_cut_at_max_line_chars_are_a_warning_and_a_file_with_no_line_breaks_is_refused(tmp_path, caplog):
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    (tmp_path / "long.txt").write_text(GOOD + "x" * 300 + "\n" + GOOD)
    with caplog.at_level(logging.WARNING):
        pretrain_data.prepare([str(tmp_path / "long.txt")], tok, tmp_path / "p", progress=False, max_line_chars=200)
    line = GOOD.count("\n") + 1  # the long line named by number (a 1.5 MB line was named by file alone)
    assert f"long.txt:{line}: 1 line longer than max_line_chars (200) cut, losing 100 of its" in caplog.text
    # an empty or blank file beside others adds no document: named, not passed over (alone it is "no document")
    for name, text in (("empty.txt", ""), ("blank.txt", "\n \n\t\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(errors.InputError, match=rf"{name}: no text \((empty|blank lines only)\): a corpus file"):
            pretrain_data.prepare([str(tmp_path / "long.txt"), str(tmp_path / name)], tok, tmp_path / "e",
                                  progress=False, max_line_chars=200)
        assert not (tmp_path / "e").exists()
    (tmp_path / "mac.txt").write_bytes((GOOD * 40).replace("\n", "\r").encode())  # CR-only line ends
    with pytest.raises(errors.InputError, match=r"mac.txt:1:19: lines end in a carriage return alone \(old Mac"):
        pretrain_data.prepare([str(tmp_path / "mac.txt")], tok, tmp_path / "q", progress=False, max_line_chars=200)
    assert not (tmp_path / "q").exists()


def test_a_pipe_is_read_as_a_corpus_stream(tmp_path):
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"printf '{GOOD}' > '{fifo}'"])
    meta = pretrain_data.prepare([str(fifo)], tok, tmp_path / "p", num_shards=1, progress=False)
    writer.wait()
    assert meta["num_docs"] == 2


def test_data_prepared_again_with_other_sentences_of_the_same_sizes_is_another_stream(tmp_path):
    """The fingerprint holds each shard's sha256 (taken by prepare): a resume compares content, not only counts; one
    saved by an older version (records and bytes alone) still matches the same data."""
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    text = corpus.write_corpus(tmp_path / "c.txt", num_docs=20, seed=0)
    pretrain_data.prepare([text], tok, str(tmp_path / "d"), num_shards=2)
    now = pretrain_data.data_fingerprint(tmp_path / "d")
    assert all(len(v) == 3 and len(v[2]) == 64 for v in now["shards"].values())
    older = now | {"shards": {k: v[:2] for k, v in now["shards"].items()}}
    assert pretrain_data.fingerprint_change(older, now) == (False, "")
    other = now | {"shards": {k: [*v[:2], "0" * 64] for k, v in now["shards"].items()}}
    vocab, change = pretrain_data.fingerprint_change(other, now)
    assert not vocab and change.startswith("its shards are not the ones the checkpoint read") and \
        change.endswith("; the same sizes, other contents)")
    # the vocabulary as read: its file saved again with CRLF line ends (an editor, a checkout) is no other vocabulary
    # (its bytes were compared: the resume was refused); a token renamed is, and so are other bytes under a fingerprint
    # of an older version (which holds the bytes' digest alone)
    vocab_path = tmp_path / "d" / "vocab.txt"
    vocab_path.write_bytes(vocab_path.read_bytes().replace(b"\n", b"\r\n"))
    crlf = pretrain_data.data_fingerprint(tmp_path / "d")
    assert crlf["tokenizer_sha256"] != now["tokenizer_sha256"] and pretrain_data.fingerprint_change(now, crlf) == (
        False, "")
    legacy = {k: v for k, v in now.items() if k != "tokens_sha256"}
    assert pretrain_data.fingerprint_change(legacy, crlf)[0]
    assert pretrain_data.fingerprint_change(now, crlf | {"tokens_sha256": "0" * 64}) == (
        True, "its tokenizer file is another vocabulary (token ids now mean other words)")


def test_a_shard_changed_in_place_cut_short_or_unreadable_is_refused_by_name(tmp_path):
    """Damage after prepare, by class: a shard whose bytes changed in place (the same size: meta.json's sha256 no
    longer holds) is refused before training by data_fingerprint; one cut short, by the loader when it opens the
    shards; a record that fails to read mid-run, by the batch maker. Each is one line naming what to do."""
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    text = corpus.write_corpus(tmp_path / "c.txt", num_docs=40, seed=0)
    pretrain_data.prepare([text], tok, str(tmp_path / "d"), num_shards=2, progress=False)
    shard = pretrain_data.shard_paths(tmp_path / "d")[1]
    good = open(shard, "rb").read()
    flipped = bytearray(good)
    flipped[len(good) // 3] ^= 0x01  # one bit, the size unchanged
    open(shard, "wb").write(bytes(flipped))
    with pytest.raises(errors.InputError, match=rf"^{re.escape(shard)}: its bytes are not the ones prepared \(sha256 "
                                         r"[0-9a-f]{12}\.\., meta.json records [0-9a-f]{12}\.\.\): the shard was "
                                         r"changed or damaged; prepare the data again$"):
        pretrain_data.data_fingerprint(tmp_path / "d")
    open(shard, "wb").write(good[:len(good) // 2])
    with pytest.raises(errors.InputError, match=rf"^{re.escape(shard)}: not a readable ArrayRecord shard "
                                                r"\(cut short or damaged\): prepare the data again$"):
        _loader(tmp_path / "d")
    # a run on the damaged data is refused before it writes anything: its new workdir is not made
    open(shard, "wb").write(bytes(flipped))
    with pytest.raises(errors.InputError, match=rf"^{re.escape(shard)}: its bytes are not the ones prepared"):
        pretrain.train_and_evaluate(tiny_config(**{"data.source": "prepared", "data.path": str(tmp_path / "d")}),
                                    str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    open(shard, "wb").write(good)
    assert pretrain_data.data_fingerprint(tmp_path / "d")["shards"]  # as prepared: taken again
    # the tokenizer file is the one the shards were tokenized with: a token renamed (the same size) read other words
    vocab = (tmp_path / "d" / "vocab.txt").read_text()
    (tmp_path / "d" / "vocab.txt").write_text(vocab.replace("\nstory\n", "\nstorm\n"))
    with pytest.raises(errors.InputError, match=rf"^{re.escape(str(tmp_path / 'd' / 'vocab.txt'))}: not the tokenizer "
                                                r"the data was prepared with \(its tokens' sha256 [0-9a-f]{12}\.\., "
                                                r"meta.json records [0-9a-f]{12}\.\.\): the shards' token ids would "
                                                r"read other words"):
        pretrain_data.data_fingerprint(tmp_path / "d")
    # the same tokens with CRLF line ends and no final newline (a checkout's conversion): the same vocabulary
    (tmp_path / "d" / "vocab.txt").write_bytes(vocab.rstrip("\n").replace("\n", "\r\n").encode())
    assert pretrain_data.data_fingerprint(tmp_path / "d")["shards"]
    (tmp_path / "d" / "vocab.txt").write_text(vocab)

    class Unreadable:
        def __getitem__(self, k):
            raise RuntimeError  # what array_record's reader raises on a damaged chunk: no message

    batches = pretrain_data.HostBatches(Unreadable(), 10, None, 0, 2, 2, 0)
    with pytest.raises(errors.InputError, match=r"^a record of the pretraining shards cannot be read \(RuntimeError: "
                                                r"no message\): a shard was damaged after the run began; prepare the "
                                                r"data again$"):
        batches(0)
