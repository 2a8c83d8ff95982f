"""Pretraining data: corpus -> tokenized ArrayRecord shards (once) -> MLM + SOP batches made online.

Sources: plain-text files in BERT's create_pretraining_data format (one sentence per line, blank line between
documents) and TFDS text datasets (e.g. ``wikipedia/20230601.en``). ``prepare`` tokenizes once into sharded
ArrayRecord files (one record per document) plus ``meta.json`` and the tokenizer file. ``make_pretrain_loader``
builds examples online with grain, deterministically from (seed, example index): SOP pairs (two consecutive
segments of one document, swapped with probability 0.5, as ALBERT) and BERT's MLM masking (15%, 80/10/10,
``max_predictions_per_seq``, specials never masked, optional whole-word masking). Records are sharded per host
and the iterator is checkpointable (grain state in the orbax checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from typing import Iterable, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 20_000


# --------------------------------------------------------------------------------------------------
# Reading corpora
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class CorpusStats:
    documents: int = 0
    sentences: int = 0
    empty_documents: int = 0        # blank-line runs with nothing between them (not counted as documents)
    one_sentence_documents: int = 0  # kept in the corpus stats, skipped for SOP (needs two segments)
    invalid_utf8_lines: int = 0      # decoded with U+FFFD replacement characters
    truncated_lines: int = 0         # longer than MAX_LINE_CHARS characters: cut


def read_text_documents(paths: Sequence[str], stats: CorpusStats | None = None,
                        max_line_chars: int = MAX_LINE_CHARS) -> Iterator[list[str]]:
    """Documents (lists of sentences) from text files; odd input is counted in ``stats``, never a crash."""
    stats = stats if stats is not None else CorpusStats()
    for path in paths:
        doc: list[str] = []
        blank_run = 0
        with open(path, "rb") as f:
            for raw in f:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line = raw.decode("utf-8", errors="replace")
                    stats.invalid_utf8_lines += 1
                line = line.strip()
                if len(line) > max_line_chars:
                    line = line[:max_line_chars]
                    stats.truncated_lines += 1
                if line:
                    doc.append(line)
                    blank_run = 0
                    continue
                blank_run += 1
                if doc:
                    yield doc
                    doc = []
                elif blank_run > 1:  # a second separator in a row: an empty document
                    stats.empty_documents += 1
        if doc:
            yield doc


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def iter_tfds_documents(name: str, split: str = "train", text_feature: str = "text",
                        data_dir: str | None = None) -> Iterator[list[str]]:
    """Documents from a TFDS text dataset: paragraphs split on newlines, sentences on '.', '!' or '?' followed
    by whitespace and an upper-case letter, digit or quote (a simple, documented splitter)."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise ImportError("TFDS sources need the 'tfds' extra: pip install 'squeezebert_jax[tfds]'") from e
    for ex in tfds.as_numpy(tfds.load(name, split=split, data_dir=data_dir)):
        text = ex[text_feature]
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
        sents = [s.strip() for para in text.split("\n") for s in _SENTENCE_END.split(para) if s.strip()]
        if sents:
            yield sents


# --------------------------------------------------------------------------------------------------
# Tokenize once into ArrayRecord shards
# --------------------------------------------------------------------------------------------------

def encode_document(sentences: list[list[int]]) -> bytes:
    """[n, len_1..len_n, tokens...] as little-endian int32 bytes."""
    lens = [len(s) for s in sentences]
    return np.asarray([len(sentences), *lens, *[t for s in sentences for t in s]], "<i4").tobytes()


def decode_document(record: bytes) -> list[np.ndarray]:
    a = np.frombuffer(record, "<i4")
    n = int(a[0])
    lens = a[1:1 + n]
    ends = np.cumsum(lens) + 1 + n
    return [a[e - l:e] for e, l in zip(ends, lens)]


def prepare(sources: Sequence[str] | Iterable[list[str]], tokenizer, out_dir: str, num_shards: int = 4,
            batch_docs: int = 256) -> dict:
    """Tokenize documents (file paths, or an iterable of documents) into ``out_dir``:
    ``shard-00000-of-00004.array_record`` ... (round-robin over documents), ``meta.json`` and the tokenizer
    file. Documents with fewer than two sentences are counted and skipped (SOP needs two segments)."""
    from array_record.python.array_record_module import ArrayRecordWriter
    from tqdm.auto import tqdm

    os.makedirs(out_dir, exist_ok=True)
    stats = CorpusStats()
    is_files = isinstance(sources, (list, tuple)) and all(isinstance(s, (str, os.PathLike)) for s in sources)
    docs = read_text_documents([os.fspath(s) for s in sources], stats) if is_files else iter(sources)
    tmp_names = [os.path.join(out_dir, f".tmp-shard-{i:05d}-of-{num_shards:05d}.array_record")
                 for i in range(num_shards)]
    writers = [ArrayRecordWriter(p, "group_size:1") for p in tmp_names]
    n_tokens, written = 0, 0
    bar = tqdm(desc="tokenizing documents", unit=" docs", dynamic_ncols=True)

    def flush(batch):
        nonlocal n_tokens, written
        flat = [s for d in batch for s in d]
        ids = tokenizer.tokenize_batch(flat)
        k = 0
        for d in batch:
            sents = [i for i in ids[k:k + len(d)] if i]
            k += len(d)
            stats.sentences += len(sents)
            if len(sents) < 2:
                stats.one_sentence_documents += 1
                continue
            writers[written % num_shards].write(encode_document(sents))
            written += 1
            n_tokens += sum(len(s) for s in sents)
        bar.update(len(batch))

    batch = []
    for doc in docs:
        stats.documents += 1
        batch.append(doc)
        if len(batch) == batch_docs:
            flush(batch)
            batch = []
    if batch:
        flush(batch)
    bar.close()
    for w in writers:
        w.close()
    if written == 0:
        raise ValueError(f"no document with at least two sentences in {sources!r}")
    for i, p in enumerate(tmp_names):
        os.replace(p, os.path.join(out_dir, f"shard-{i:05d}-of-{num_shards:05d}.array_record"))
    meta = {"num_records": written, "num_tokens": n_tokens, "num_shards": num_shards,
            "tokenizer": {"kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size,
                          "file": tokenizer.save(out_dir)},
            "stats": dataclasses.asdict(stats)}
    with open(os.path.join(out_dir, "meta.json.tmp"), "w") as f:
        json.dump(meta, f, indent=2)
    os.replace(os.path.join(out_dir, "meta.json.tmp"), os.path.join(out_dir, "meta.json"))
    log.info("prepared %d documents (%d tokens) into %s: %s", written, n_tokens, out_dir, stats)
    return meta


def shard_paths(data_dir: str) -> list[str]:
    paths = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                   if f.startswith("shard-") and f.endswith(".array_record"))
    if not paths:
        raise FileNotFoundError(f"{data_dir}: no shard-*.array_record files (run train/prepare_data.py)")
    return paths


# --------------------------------------------------------------------------------------------------
# Online example creation: SOP pair + MLM masking
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ExampleMaker:
    """Turns one document record into one training example, given a per-example numpy Generator."""

    seq_len: int
    max_predictions: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    vocab_size: int
    special_ids: tuple[int, ...]
    word_start: np.ndarray | None = None  # bool [vocab]: for whole-word masking
    mask_prob: float = 0.15
    short_seq_prob: float = 0.1

    def __call__(self, record: bytes, rng: np.random.Generator) -> dict[str, np.ndarray]:
        sents = decode_document(record)
        max_tokens = self.seq_len - 3
        target = max_tokens if rng.random() >= self.short_seq_prob else int(rng.integers(2, max_tokens + 1))
        # consecutive sentences from a random start (>= 2 of them) until the target length is reached
        start = int(rng.integers(0, len(sents) - 1))
        chunk, total = [], 0
        for s in sents[start:]:
            chunk.append(s)
            total += len(s)
            if total >= target and len(chunk) >= 2:
                break
        split = int(rng.integers(1, len(chunk)))
        a, b = np.concatenate(chunk[:split]), np.concatenate(chunk[split:])
        swapped = rng.random() < 0.5
        if swapped:
            a, b = b, a
        while len(a) + len(b) > max_tokens:  # longest first, from the end
            if len(a) >= len(b):
                a = a[:-1]
            else:
                b = b[:-1]
        tokens = np.concatenate([[self.cls_id], a, [self.sep_id], b, [self.sep_id]]).astype(np.int32)
        types = np.concatenate([np.zeros(len(a) + 2, np.int32), np.ones(len(b) + 1, np.int32)])
        input_ids, positions, labels = self.mask(tokens, rng)
        n, s, p = len(tokens), self.seq_len, self.max_predictions
        out = {"input_ids": np.full(s, self.pad_id, np.int32), "token_type_ids": np.zeros(s, np.int32),
               "attention_mask": np.zeros(s, np.int32), "masked_lm_positions": np.zeros(p, np.int32),
               "masked_lm_ids": np.zeros(p, np.int32), "masked_lm_weights": np.zeros(p, np.float32),
               "sop_label": np.int32(swapped)}
        out["input_ids"][:n], out["token_type_ids"][:n], out["attention_mask"][:n] = input_ids, types, 1
        k = len(positions)
        out["masked_lm_positions"][:k], out["masked_lm_ids"][:k], out["masked_lm_weights"][:k] = positions, labels, 1
        return out

    def mask(self, tokens: np.ndarray, rng: np.random.Generator):
        """BERT masking: ~15% of the non-special positions (whole words if configured), 80/10/10."""
        cand = np.flatnonzero(~np.isin(tokens, self.special_ids))
        if self.word_start is not None:  # group "##" pieces with their word start
            starts = self.word_start[tokens[cand]] | np.r_[True, np.diff(cand) != 1]
            groups = np.split(cand, np.flatnonzero(starts)[1:])
        else:
            groups = [np.asarray([c]) for c in cand]
        num = min(self.max_predictions, max(1, int(round(len(tokens) * self.mask_prob))))
        chosen = []
        for gi in rng.permutation(len(groups)):
            if len(chosen) >= num:
                break
            if len(chosen) + len(groups[gi]) > num:
                continue
            chosen.extend(groups[gi].tolist())
        positions = np.sort(np.asarray(chosen, np.int32))
        labels = tokens[positions]
        out = tokens.copy()
        r = rng.random(len(positions))
        out[positions[r < 0.8]] = self.mask_id
        rand = positions[(r >= 0.8) & (r < 0.9)]
        out[rand] = self._random_tokens(rng, len(rand))
        return out, positions, labels

    def _random_tokens(self, rng, n):
        ids = rng.integers(0, self.vocab_size, n)
        bad = np.isin(ids, self.special_ids)
        while bad.any():
            ids[bad] = rng.integers(0, self.vocab_size, int(bad.sum()))
            bad = np.isin(ids, self.special_ids)
        return ids.astype(np.int32)


def example_maker(tokenizer, seq_len: int, max_predictions_per_seq: int, whole_word_masking: bool = False):
    word_start = tokenizer.is_word_start(np.arange(tokenizer.vocab_size)) if whole_word_masking else None
    return ExampleMaker(seq_len, max_predictions_per_seq, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id,
                        tokenizer.pad_id, tokenizer.vocab_size, tuple(sorted(tokenizer.special_ids)), word_start)


@dataclasses.dataclass(frozen=True)
class _HostExamples:
    """Example ``i`` of host ``h`` is global example ``p = (i // L) * G + h * L + i % L`` (L = G / hosts):
    record ``shuffled[p]``, masked with a Generator seeded by (seed, p). So the global batch of a step is the
    same whatever the number of hosts, and hosts read disjoint examples."""

    shuffled: object
    maker: ExampleMaker
    seed: int
    per_host: int
    global_batch: int
    shard_index: int

    def __call__(self, i: int) -> dict[str, np.ndarray]:
        p = (i // self.per_host) * self.global_batch + self.shard_index * self.per_host + i % self.per_host
        return self.maker(self.shuffled[p], np.random.default_rng([self.seed, p]))


def make_pretrain_loader(data_dir: str, seq_len: int, global_batch_size: int, seed: int,
                         max_predictions_per_seq: int, whole_word_masking: bool = False,
                         shard_index: int | None = None, shard_count: int | None = None, num_workers: int = 0):
    """An endless, checkpointable grain dataset of per-host batches (``global_batch_size / shard_count`` rows).

    The records are shuffled with ``seed`` (reshuffled every epoch); each example is made by ``ExampleMaker``
    from (seed, global example index), so the same (seed, step) gives the same global batch on any number of
    hosts, and host ``shard_index`` makes only its own disjoint rows of it.
    """
    import grain
    import jax

    from squeezebert_jax.tokenizer import Tokenizer

    shard_index = jax.process_index() if shard_index is None else shard_index
    shard_count = jax.process_count() if shard_count is None else shard_count
    if global_batch_size % shard_count:
        raise ValueError(f"global_batch_size {global_batch_size} is not divisible by {shard_count} hosts")
    tokenizer = Tokenizer.from_dir(data_dir)
    if tokenizer is None:
        raise FileNotFoundError(f"{data_dir}: no tokenizer file; prepare() saves one next to the shards")
    maker = example_maker(tokenizer, seq_len, max_predictions_per_seq, whole_word_masking)
    source = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(shard_paths(data_dir)))
    per_host = global_batch_size // shard_count
    make = _HostExamples(source.shuffle(seed=seed).repeat(None), maker, seed, per_host, global_batch_size,
                         shard_index)
    ds = grain.MapDataset.range(2 ** 62).map(make).batch(per_host, drop_remainder=True)
    it = ds.to_iter_dataset()
    if num_workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return it


def sequences_per_second(data_dir: str, seq_len: int = 128, batch_size: int = 256, num_batches: int = 20,
                         max_predictions_per_seq: int = 20) -> float:
    """Input-pipeline throughput (sequences/s) on this process's CPU (one worker: per core)."""
    it = iter(make_pretrain_loader(data_dir, seq_len, batch_size, 0, max_predictions_per_seq, shard_index=0,
                                   shard_count=1))
    next(it)
    t = time.perf_counter()
    for _ in range(num_batches):
        next(it)
    return num_batches * batch_size / (time.perf_counter() - t)
