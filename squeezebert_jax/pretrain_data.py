"""Pretraining data: corpus -> tokenized ArrayRecord shards (once) -> MLM + SOP batches made online.

Sources are plain-text files in BERT's create_pretraining_data format (one sentence per line, blank line
between documents) or TFDS text datasets (e.g. ``wikipedia/20230601.en``). ``prepare`` tokenizes them once into
``shard-*.array_record`` files (one record per document: its sentences' token ids), ``meta.json`` and the
tokenizer file. ``make_pretrain_loader`` then makes examples online with grain, as a pure function of
(seed, global example index):

* record: global example ``p`` reads record ``perm_e(p mod N)``, ``perm_e`` a permutation of the N records
  keyed by (seed, epoch ``e = p // N``): every epoch visits each document once, in a new order;
* SOP (ALBERT): a target length (``seq_len - 3``, or uniform in [2, seq_len - 3] with ``short_seq_prob``),
  consecutive sentences from a random start until the target is reached (at least two), split at a random
  sentence boundary into A and B; swapped with probability 0.5 (``sop_label`` 1); longest-first truncation to
  ``seq_len - 3`` (the ``tokenizers`` rule, cut at the end); ``[CLS] A [SEP] B [SEP]``;
* MLM (BERT): ``round(0.15 * maskable)`` positions (at least 1, at most ``max_predictions_per_seq``), maskable =
  every real token but [PAD] [CLS] [SEP] [MASK]; of those 80% [MASK], 10% a random non-special token, 10% kept;
  with whole-word masking, words (a start piece and its ``##`` continuations) are chosen in random order and
  skipped when they would overflow the budget, as in BERT's create_pretraining_data. (Where BERT differs:
  it takes 15% of all tokens including [CLS]/[SEP], draws random tokens from the whole vocabulary, truncates
  at a random end, and makes its examples offline with a fixed duplication factor.)

All randomness comes from a counter-based hash of (seed, p), vectorized over the batch, so a step's batch
does not depend on restarts, worker count or host count: host ``h`` of ``H`` makes rows ``h*L:(h+1)*L``
(``L = global_batch / H``) of the global batch, i.e. disjoint examples. The iterator is checkpointable
(``get_state``/``set_state``; orbax saves it with ``grain.checkpoint.CheckpointHandler``).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from squeezebert_jax import corpus, files
from squeezebert_jax.errors import InputError, MissingExtraError
from squeezebert_jax.files import atomic_write, file_sha256, json_type, read_json
from squeezebert_jax.tokenizer import Tokenizer, truncated_lengths

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 20_000
# A text file in which more than this share of the bytes is not UTF-8 text (invalid sequences, or NUL bytes: a
# binary file, UTF-16, Latin-1 prose, ...) is refused; below it, lines holding such bytes are kept with U+FFFD and
# counted. Checked after every _CHECK_BYTES read (a 10 GB binary file fails at once) and at the end of each file.
MAX_INVALID_UTF8 = 0.01
_CHECK_BYTES = 1 << 20
_STRAY_BYTES = 16  # never refused for fewer bad bytes than this (one odd character in a short file)
FORMAT_VERSION = 2
WRITER_OPTIONS = "group_size:1,uncompressed"  # one record per chunk: fastest random access


# --------------------------------------------------------------------------------------------------
# Reading corpora
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class CorpusStats:
    """Counts of what reading and tokenizing a corpus met; none of these stops ``prepare``."""

    documents: int = 0               # documents read (non-empty)
    sentences: int = 0               # sentences kept (non-empty after tokenization)
    empty_documents: int = 0         # each extra blank line in a run of separators (nothing between them)
    one_sentence_documents: int = 0  # < 2 non-empty sentences: skipped (SOP needs two segments)
    empty_sentences: int = 0         # lines that tokenize to nothing (e.g. only control characters): dropped
    invalid_utf8_lines: int = 0      # not UTF-8 text (invalid bytes or NUL): decoded with U+FFFD / NUL dropped, kept
    invalid_utf8_bytes: int = 0      # the bytes of those lines that are not UTF-8 text (~ one per U+FFFD, NULs)
    truncated_lines: int = 0         # longer than max_line_chars characters: cut to that length, kept


def _decode(raw: bytes, stats: CorpusStats) -> str:
    """UTF-8, or with U+FFFD replacement characters (counted) when the bytes are not valid UTF-8; NUL bytes (never
    in UTF-8 text: a binary file or UTF-16) count as invalid too."""
    try:
        text = raw.decode("utf-8")
        if "\0" not in text:
            return text
        bad = text.count("\0")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        bad = text.count("\ufffd") - raw.count("\ufffd".encode()) + text.count("\0")
    stats.invalid_utf8_lines += 1
    stats.invalid_utf8_bytes += bad
    return text.replace("\0", "")


def _check_invalid_share(path: str, bad: int, size: int, limit: float, at_end: bool) -> None:
    if bad > _STRAY_BYTES and bad / size > limit:
        where = f"its {size} bytes" if at_end else f"the first {size} bytes"
        raise InputError(f"{path}: {bad} of {where} ({bad / size:.1%}) are not UTF-8 text (a binary file, or UTF-16 "
                         f"or Latin-1 text?); the limit is {limit:.1%} (max_invalid_utf8): convert it to UTF-8 "
                         "(e.g. iconv -f LATIN1 -t UTF-8) or raise the limit")


def _clean(line: str, stats: CorpusStats, max_line_chars: int) -> str:
    line = line.strip()
    if len(line) > max_line_chars:
        stats.truncated_lines += 1
        line = line[:max_line_chars]
    return line


MAX_CUT_SHARE = 0.5  # a text file losing more than this share of its bytes to cut lines is refused


def _utf8_boundary(raw: bytes) -> int:
    """The length of ``raw`` without a UTF-8 character cut at its end (a line read in part)."""
    if not raw:
        return 0
    i = len(raw) - 1
    while i > 0 and len(raw) - i < 4 and (raw[i] & 0xC0) == 0x80:  # back over continuation bytes to the lead byte
        i -= 1
    lead = raw[i]
    need = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return len(raw) if len(raw) - i >= need else i


def _report_cut_lines(path: str, cut: int, lost: int, size: int, max_line_chars: int, cr_only: bool,
                      first: int = 0) -> None:
    """A file whose lines were cut at ``max_line_chars`` (the first of them line ``first``): a warning on the
    console, or a refusal when more than ``MAX_CUT_SHARE`` of its bytes would be lost (a file with no usable line
    breaks)."""
    share = lost / max(size, 1)
    why = ("; its lines end in CR alone (an old Mac file?): convert them first, e.g. tr '\\r' '\\n' < IN > OUT"
           if cr_only else "; one sentence per line is expected")
    where = f"{path}:{first}" if first else path
    msg = (f"{where}: {cut} line{'s' if cut > 1 else ''} longer than max_line_chars ({max_line_chars}) cut"
           f"{f' (the first: line {first})' if first and cut > 1 else ''}, losing {lost} of its {size} bytes "
           f"({share:.1%}){why}")
    if share > MAX_CUT_SHARE:
        raise InputError(f"{msg}; refused (more than {MAX_CUT_SHARE:.0%} of the file would be lost): fix its line "
                         "breaks, or raise --max_line_chars")
    log.warning("%s", msg)


def read_text_documents(paths: Sequence[str | os.PathLike], stats: CorpusStats | None = None,
                        max_line_chars: int = MAX_LINE_CHARS, max_invalid_utf8: float = MAX_INVALID_UTF8
                        ) -> Iterator[list[str]]:
    """Documents (lists of sentence strings) from text files: one sentence per line, documents separated by
    blank (or whitespace-only) lines; a document never spans two files. Odd input is counted in ``stats``; a file
    with more than ``max_invalid_utf8`` of its bytes not UTF-8 text raises InputError naming it and the share."""
    stats = stats if stats is not None else CorpusStats()
    cap = 4 * max_line_chars + 4  # bytes read of one line at most: its first max_line_chars characters (UTF-8)
    for path in paths:
        doc: list[str] = []
        blank_run = 0
        lines_before, bytes_before, size = stats.invalid_utf8_lines, stats.invalid_utf8_bytes, 0
        next_check = _CHECK_BYTES
        cut, lost, cr_only, rest, lineno, first_cut, texts = 0, 0, False, False, 0, 0, 0
        with open(path, "rb") as f:
            for raw in iter(lambda: f.readline(cap), b""):
                lineno += not rest
                size += len(raw)
                if size >= next_check:
                    _check_invalid_share(path, stats.invalid_utf8_bytes - bytes_before, size, max_invalid_utf8, False)
                    next_check = size + _CHECK_BYTES
                if rest:  # the rest of a line already cut: skipped, never held whole in memory
                    lost += len(raw.rstrip(b"\r\n"))
                    rest = not raw.endswith(b"\n")
                    continue
                rest = len(raw) == cap and not raw.endswith(b"\n")
                cr_only = cr_only or b"\r" in raw.rstrip(b"\r\n")
                if size == len(raw) and raw.rstrip(b"\r\n").count(b"\r") >= 2:  # the first line: CR line ends
                    # (or a binary file's bytes: named as such first)
                    bad = len(raw) - len(raw.decode("utf-8", "ignore").encode("utf-8"))
                    _check_invalid_share(path, bad, len(raw), max_invalid_utf8, False)
                    col = raw.index(b"\r") + 1
                    raise InputError(f"{path}:1:{col}: lines end in a carriage return alone (old "
                                     "Mac line ends): read so, the file is one line and its documents would be "
                                     "lost; save it with \\n line ends")
                part = raw[:_utf8_boundary(raw)] if rest else raw
                while lineno == 1 and part.startswith(files.BOM):  # as files.text_lines reads a file's start
                    part = part.removeprefix(files.BOM)
                truncated, invalid = stats.truncated_lines, stats.invalid_utf8_lines
                text = _decode(part, stats)
                # in a line of text (a line of other bytes is counted, for the share above), a mark inside the file
                # or a lone CR: refused by line as the tokenizer's trainer refuses them (files.text_lines), not
                # glued to a word or a sentence
                if stats.invalid_utf8_lines == invalid and (
                        problem := files.line_problem(text.removesuffix("\n").removesuffix("\r"), lineno)):
                    raise InputError(f"{path}:{lineno}:{problem[0]}: {problem[1]}{files.LINE_ADVICE[problem[1]]}")
                line = _clean(text, stats, max_line_chars)
                if stats.truncated_lines > truncated or rest:
                    stats.truncated_lines = truncated + 1
                    cut, lost = cut + 1, lost + len(raw.rstrip(b"\r\n")) - len(line.encode("utf-8"))
                    first_cut = first_cut or lineno
                if line:
                    texts += 1
                    doc.append(line)
                    blank_run = 0
                    continue
                blank_run += 1
                if doc:
                    yield doc
                    doc = []
                elif blank_run > 1:
                    stats.empty_documents += 1
        bad = stats.invalid_utf8_bytes - bytes_before
        _check_invalid_share(path, bad, size, max_invalid_utf8, True)
        if cut:
            _report_cut_lines(path, cut, lost, size, max_line_chars, cr_only, first_cut)
        if not texts and len(paths) > 1:  # alone, it is "no document"; beside others it would add none unsaid
            raise InputError(f"{path}: no text ({'empty' if not size else 'blank lines only'}): a corpus file holds "
                             "documents (a failed download or copy?); fix it, or leave it out of the inputs")
        if stats.invalid_utf8_lines > lines_before:
            log.warning("%s: %d lines hold %d bytes (%.3f%% of the file) that are not UTF-8 text; kept with U+FFFD "
                        "replacement characters", path, stats.invalid_utf8_lines - lines_before, bad, 100 * bad / size)
        if doc:
            yield doc


# A sentence ends at '.', '!' or '?' (and closing quotes/brackets) followed by whitespace and an upper-case
# letter, digit or opening quote/bracket -- unless the word before is a known abbreviation or an initial.
_BOUNDARY = re.compile(r"[.!?]+['\")\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = frozenset("mr mrs ms dr prof st jr sr vs etc e.g i.e no nos fig al inc ltd co gen col lt sgt "
                           "rev hon jan feb mar apr jun jul aug sep sept oct nov dec ca approx".split())


def split_sentences(text: str) -> list[str]:
    """A simple rule-based splitter for article text: paragraphs on newlines, then sentences at ``.``/``!``/
    ``?`` followed by whitespace and a capital, digit or opening quote. No split after an abbreviation from a
    short list (``Mr.``, ``Dr.``, ``e.g.``, months, ...) or a single-letter initial (``J. R. R. Tolkien``)."""
    out = []
    for para in text.splitlines():
        start = 0
        for m in _BOUNDARY.finditer(para):
            words = para[start:m.start()].split()
            word = words[-1].lstrip("\"'([").lower() if words else ""
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
            out.append(para[start:m.end()].strip())
            start = m.end()
        out.append(para[start:].strip())
    return [s for s in out if s]


def iter_tfds_documents(name: str, split: str = "train", text_feature: str = "text", data_dir: str | None = None,
                        stats: CorpusStats | None = None) -> Iterator[list[str]]:
    """Documents from a TFDS text dataset (one per example, e.g. a Wikipedia article): ``text_feature`` decoded
    as UTF-8 (invalid bytes replaced and counted) and cut into sentences by ``split_sentences``. ``prepare``
    truncates over-long sentences (``max_line_chars``) as it does for text files."""
    try:
        import tensorflow_datasets as tfds
    except ImportError as e:
        raise MissingExtraError("TFDS sources need tensorflow-datasets: pip install 'squeezebert_jax[tfds]'") from e
    stats = stats if stats is not None else CorpusStats()
    for i, ex in enumerate(tfds.as_numpy(tfds.load(name, split=split, data_dir=data_dir, shuffle_files=False))):
        if text_feature not in ex:
            raise KeyError(f"TFDS {name}[{split}] example {i} has no feature {text_feature!r} "
                           f"(features: {sorted(ex)})")
        text = ex[text_feature]
        sents = split_sentences(_decode(text, stats) if isinstance(text, bytes) else str(text))
        if sents:
            yield sents
        else:
            stats.empty_documents += 1


# --------------------------------------------------------------------------------------------------
# Records: one document = int32 [n, token width] + int32 sentence lengths [n] + tokens (uint16 or int32)
# --------------------------------------------------------------------------------------------------

def encode_document(sentences: Sequence[Sequence[int]], width: int = 2) -> bytes:
    """Serialize a document's sentences (token id lists) with ``width``-byte tokens (2: uint16, 4: int32)."""
    dtype = {2: "<u2", 4: "<i4"}[width]
    lens = [len(s) for s in sentences]
    head = np.asarray([len(sentences), width, *lens], "<i4").tobytes()
    return head + np.fromiter(itertools.chain.from_iterable(sentences), dtype, sum(lens)).tobytes()


def _parse(record: bytes) -> tuple[list[int], np.ndarray]:
    """(sentence offsets [n + 1], flat tokens) of a record; ValueError if it is not one."""
    n = int.from_bytes(record[0:4], "little", signed=True) if len(record) >= 8 else -1
    width = int.from_bytes(record[4:8], "little") if len(record) >= 8 else 0
    if n < 0 or width not in (2, 4) or len(record) < 8 + 4 * n:
        raise InputError(f"not a pretraining record (header n={n}, width={width}, {len(record)} bytes)")
    offsets = [0, *itertools.accumulate(np.frombuffer(record, "<i4", n, 8).tolist())]
    if len(record) != 8 + 4 * n + width * offsets[-1]:
        raise InputError(f"corrupt pretraining record: {len(record)} bytes, header says "
                         f"{8 + 4 * n + width * offsets[-1]}")
    return offsets, np.frombuffer(record, "<u2" if width == 2 else "<i4", offsets[-1], 8 + 4 * n)


def decode_document(record: bytes) -> list[np.ndarray]:
    """The sentences (int32 token id arrays) of a record written by ``encode_document``."""
    offsets, tokens = _parse(record)
    return [tokens[a:b].astype(np.int32) for a, b in zip(offsets, offsets[1:])]


# --------------------------------------------------------------------------------------------------
# Tokenize once into ArrayRecord shards
# --------------------------------------------------------------------------------------------------

def _clean_documents(docs: Iterable[Sequence[str]], stats: CorpusStats, max_line_chars: int
                     ) -> Iterator[list[str]]:
    for doc in docs:
        out = []
        for s in doc:
            if not isinstance(s, str):
                raise TypeError(f"a document must be a list of str sentences, got {type(s).__name__}")
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates (e.g. from errors='surrogateescape')
                stats.invalid_utf8_bytes += sum(0xD800 <= ord(c) <= 0xDFFF for c in s)
                s = s.encode("utf-8", errors="replace").decode("utf-8")
                stats.invalid_utf8_lines += 1
            s = _clean(s, stats, max_line_chars)
            if s:
                out.append(s)
        if out:
            yield out
        else:
            stats.empty_documents += 1


SHARDS_VALID = ("an integer in [1, {}]: the shards' writers are open at once, a file each, within this process's "
                "limit of open files (ulimit -n)")


def max_shards() -> int:
    """The most shards ``prepare`` may write: its writers are open at once, one file each, within this process's limit
    of open files (``ulimit -n``), less 64 for the rest of the process."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(1, (1 << 20 if soft == resource.RLIM_INFINITY else soft) - 64)


def prepare(sources: Sequence[str | os.PathLike] | Iterable[Sequence[str]], tokenizer, out_dir: str | os.PathLike,
            num_shards: int = 8, *, stats: CorpusStats | None = None, max_line_chars: int = MAX_LINE_CHARS,
            max_invalid_utf8: float = MAX_INVALID_UTF8, batch_docs: int = 256, writer_options: str = WRITER_OPTIONS,
            progress: bool = True) -> dict:
    """Tokenize documents into ``out_dir`` once and return its ``meta.json`` contents.

    ``sources``: text file paths (``read_text_documents``) or an iterable of documents (lists of sentence
    strings, e.g. ``iter_tfds_documents(...)``; pass the same ``stats`` to both to count everything).
    Writes ``shard-0000i-of-0000n.array_record`` (documents round-robin over the shards, one record each, via
    temporary names and atomic renames), the tokenizer file (``tokenizer.save``) and, last, ``meta.json``:
    num_docs, num_sentences, num_tokens, shards, token width, tokenizer kind/vocab_size/file, stats.
    Documents with fewer than two non-empty sentences are counted and skipped (SOP needs two segments).
    Text files are checked to exist before anything is written; on any error (a file that is not UTF-8 text, see
    ``read_text_documents``) the temporary shards are removed and an earlier preparation in ``out_dir`` is untouched.
    """
    from array_record.python.array_record_module import ArrayRecordWriter
    from tqdm.auto import tqdm

    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) \
            or not 1 <= num_shards <= max_shards():
        raise InputError(f"num_shards={num_shards!r}: {SHARDS_VALID.format(max_shards())}")
    out_dir = files.path_argument("out_dir", out_dir)
    if os.path.isdir(out_dir):  # the API as the script: never into a model (its vocab.txt was replaced), nor inside
        files.refuse_model_dir(out_dir, "prepared data", "out_dir")
    files.refuse_nested(out_dir, "out_dir", job="", mine=files.DEMO_DIRS)  # a run's model/, tb/: not its demo data
    stats = stats if stats is not None else CorpusStats()
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    is_files = isinstance(sources, (list, tuple)) and all(isinstance(s, (str, os.PathLike)) for s in sources)
    docs = (read_text_documents(files.check_text_files(sources), stats, max_line_chars, max_invalid_utf8) if is_files
            else _clean_documents(sources, stats, max_line_chars))
    width = 2 if tokenizer.vocab_size <= 2 ** 16 else 4
    names = [f"shard-{i:05d}-of-{num_shards:05d}.array_record" for i in range(num_shards)]
    created = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tmp = [os.path.join(out_dir, f".tmp{os.getpid()}-{n}") for n in names]
    writers, sizes, num_tokens, done = [], [0] * num_shards, 0, False
    bar = tqdm(desc=f"tokenizing into {out_dir}", unit=" docs", disable=not progress, mininterval=2.0)
    try:
        writers += [ArrayRecordWriter(p, writer_options) for p in tmp]
        for batch in iter(lambda: list(itertools.islice(docs, batch_docs)), []):
            ids = iter(tokenizer.tokenize_batch([s for d in batch for s in d]))
            for d in batch:
                stats.documents += 1
                sents = [x for x in itertools.islice(ids, len(d)) if x]
                stats.empty_sentences += len(d) - len(sents)
                if len(sents) < 2:
                    stats.one_sentence_documents += 1
                    continue
                shard = sum(sizes) % num_shards
                writers[shard].write(encode_document(sents, width))
                sizes[shard] += 1
                stats.sentences += len(sents)
                num_tokens += sum(map(len, sents))
            bar.update(len(batch))
        done = sum(sizes) > 0
    finally:
        bar.close()
        try:
            failed = None
            for w in writers:  # each closed even when another's close fails (a full disk fails them all)
                try:
                    w.close()
                except Exception as e:  # noqa: BLE001 -- re-raised below, once every writer is closed
                    done, failed = False, failed or e
            if failed is not None:
                raise failed
        finally:
            if not done:  # an error, or nothing to write: leave out_dir as it was
                for p in tmp:
                    if os.path.exists(p):
                        os.remove(p)
                if created and not os.listdir(out_dir):
                    os.rmdir(out_dir)
    num_docs = sum(sizes)
    if num_docs == 0:
        shown = f"{', '.join(map(os.fspath, sources))}: " if is_files else ""
        raise InputError(f"{shown}no document with at least two non-empty sentences (sentence-order prediction pairs "
                         f"two of a document): read {stats.documents} documents, {stats.one_sentence_documents} of "
                         "them of one sentence; a document is a run of lines, a sentence per line, documents "
                         "separated by a blank line")
    if num_docs < num_shards:  # a shard holds whole documents
        log.warning("num_shards=%d: more shards than the %d documents written, so %d shards are empty; fewer shards "
                    "(at most %d) hold the same data", num_shards, num_docs, num_shards - num_docs, num_docs)
    meta_path = os.path.join(out_dir, "meta.json")
    shard_sha256 = {n: file_sha256(p) for p, n in zip(tmp, names)}  # what a resume compares (data_fingerprint)
    try:
        if os.path.exists(meta_path):  # an older preparation here is replaced: invalid until the new meta.json
            os.remove(meta_path)
        for p, n in zip(tmp, names):
            os.replace(p, os.path.join(out_dir, n))
        for f in os.listdir(out_dir):  # stale shards of an earlier run with another num_shards
            if f.startswith("shard-") and f.endswith(".array_record") and f not in names:
                os.remove(os.path.join(out_dir, f))
        meta = {"format_version": FORMAT_VERSION, "num_docs": num_docs, "num_records": num_docs,
                "num_sentences": stats.sentences, "num_tokens": num_tokens, "num_shards": num_shards,
                "shards": names, "shard_num_records": sizes, "shard_sha256": shard_sha256, "token_width": width,
                "writer_options": writer_options,
                "tokenizer": {"kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size,
                              "file": tokenizer.save(out_dir)},
                "stats": dataclasses.asdict(stats)}
        meta["tokenizer"]["tokens_sha256"] = tokens_sha256(os.path.join(out_dir, meta["tokenizer"]["file"]))
        atomic_write(meta_path, json.dumps(meta, indent=2))
    finally:
        for p in tmp:  # renamed unless the renames failed
            if os.path.exists(p):
                os.remove(p)
    log.info("prepared %d documents, %d sentences, %d tokens into %s; %s", num_docs, stats.sentences,
             num_tokens, out_dir, stats)
    return meta


def _count(v) -> bool:
    return files.is_int(v) and v >= 0


# meta.json's fields that the reader uses, each with its test and what it should be (older preparations lack the
# optional ones: None is taken for them)
_META_FIELDS = {
    "num_records": (_count, False, "an integer >= 0"),
    "num_shards": (_count, False, "an integer >= 0"),
    "shards": (lambda v: isinstance(v, list) and bool(v) and len(set(v)) == len(v) and all(
        isinstance(n, str) and n and os.path.basename(n) == n for n in v), False,
        "a non-empty list of the shard files' names, each once"),
    "shard_num_records": (lambda v: isinstance(v, list) and all(map(_count, v)), True, "a list of integers >= 0"),
    "shard_sha256": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()), True,
                     "an object of sha256 strings"),
    "num_tokens": (_count, True, "an integer >= 0"),
    "token_width": (lambda v: files.is_int(v) and v in (2, 4), True, "2 or 4 (bytes per token id)"),
    "tokenizer": (lambda v: isinstance(v, dict) and isinstance(v.get("file"), str) and _count(v.get("vocab_size")),
                  False, "an object with the tokenizer's \"file\" and \"vocab_size\""),
}


def load_meta(data_dir: str | os.PathLike) -> dict:
    """``meta.json`` of a directory ``prepare`` wrote (its presence marks a complete preparation), read through
    ``files.read_json`` (bad bytes and JSON named by line and column) with each field it is read for of its type: a
    damaged file is one line naming it and the field."""
    path = os.path.join(os.fspath(data_dir), "meta.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: prepare the data first (train/prepare_data.py)")
    meta = files.read_json(path)
    if not isinstance(meta, dict):
        raise InputError(f"{path}: {files.json_value(meta)}, not the JSON object prepare_data writes; prepare the "
                         "data again (train/prepare_data.py)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{path}: format_version {meta.get('format_version')}, this code reads "
                         f"{FORMAT_VERSION}; prepare the data again (train/prepare_data.py)")
    for name, (ok, optional, want) in _META_FIELDS.items():
        if not (ok(meta.get(name)) or (optional and meta.get(name) is None)):
            raise InputError(f"{path}: \"{name}\" is {files.json_value(meta.get(name))}, not {want}: the file is "
                             "damaged; prepare the data again (train/prepare_data.py)")
    if meta["num_shards"] != len(meta["shards"]) or (meta.get("shard_num_records") is not None
                                                    and len(meta["shard_num_records"]) != len(meta["shards"])):
        raise InputError(f"{path}: {len(meta['shards'])} shards listed, but \"num_shards\" or \"shard_num_records\" "
                         "counts another number: the file is damaged; prepare the data again")
    return meta


def tokens_sha256(path: str) -> str:
    """The sha256 of the vocabulary a tokenizer file holds, as read (its tokens in id order): line ends and a final
    newline are no change (a checkout that writes CRLF), a renamed or moved token is."""
    return hashlib.sha256(json.dumps(Tokenizer.from_file(path).tokens).encode()).hexdigest()


def data_fingerprint(data_dir: str | os.PathLike) -> dict:
    """What a checkpoint's data position refers to: the tokenizer file's sha256 and each shard's records, bytes and
    content (its sha256: the same sizes with other sentences are other data). Each shard is read once to take it, and
    one whose bytes are not the ones ``prepare`` wrote (``meta.json``'s ``shard_sha256``) is refused by name: changed
    in place or damaged, it would train on other or broken records. So is a tokenizer file that is not the one the
    shards were tokenized with (``meta.json``'s ``tokenizer.tokens_sha256``: the vocabulary as read): a vocab.txt of
    the same size with a token renamed trained, and was exported as the model's."""
    data_dir = os.fspath(data_dir)
    meta = load_meta(data_dir)
    tok_path = os.path.join(data_dir, meta["tokenizer"]["file"])
    vocab, now = file_sha256(tok_path), tokens_sha256(tok_path)
    prepared = meta["tokenizer"].get("tokens_sha256")
    if not isinstance(prepared, str):  # prepared by an older version
        log.warning("%s records no digest of its tokenizer (prepared by an older version): %s is not checked against "
                    "the shards; prepare the data again to have it checked", os.path.join(data_dir, "meta.json"),
                    tok_path)
    elif now != prepared:
        raise InputError(f"{tok_path}: not the tokenizer the data was prepared with (its tokens' sha256 {now[:12]}.., "
                         f"meta.json records {prepared[:12]}..): the shards' token ids would read other words; put "
                         "back the one prepared, or prepare the data again")
    sizes = meta.get("shard_num_records") or [None] * len(meta["shards"])
    recorded = meta.get("shard_sha256") or {}  # data prepared by an older version records none
    shards = {}
    for path, n, r in zip(shard_paths(data_dir), meta["shards"], sizes):
        sha = file_sha256(path)
        if n in recorded and recorded[n] != sha:
            raise InputError(f"{path}: its bytes are not the ones prepared (sha256 {sha[:12]}.., meta.json records "
                             f"{recorded[n][:12]}..): the shard was changed or damaged; prepare the data again")
        shards[n] = [r, os.path.getsize(path), sha]
    return {"tokenizer_sha256": vocab, "tokens_sha256": now, "num_tokens": meta.get("num_tokens"), "shards": shards}


def fingerprint_change(saved: dict, now: dict) -> tuple[bool, str]:
    """(whether the vocabulary changed, what changed in words; '' when nothing did) between two fingerprints. The
    vocabulary is compared as read (``tokens_sha256``: a vocab.txt saved again with CRLF line ends is the same one),
    by its file's bytes where the saved fingerprint is an older version's."""
    key = "tokens_sha256" if "tokens_sha256" in saved and "tokens_sha256" in now else "tokenizer_sha256"
    if saved.get(key) != now.get(key):
        return True, "its tokenizer file is another vocabulary (token ids now mean other words)"
    a, b = saved.get("shards", {}), now.get("shards", {})
    # a shard is [records, bytes] or [records, bytes, sha256]: compared on what both fingerprints hold
    if a.keys() == b.keys() and all(list(x[:len(y)]) == list(y[:len(x)]) for x, y in ((a[k], b[k]) for k in a)):
        return False, ""

    def count(x):
        return f"{len(x)} shards, {sum(v[0] for v in x.values() if v[0])} documents, {sum(v[1] for v in x.values())} " \
               "bytes"

    same = "; the same sizes, other contents" if count(a) == count(b) else ""
    return False, f"its shards are not the ones the checkpoint read ({count(a)} then; {count(b)} now{same})"


def shard_paths(data_dir: str | os.PathLike) -> list[str]:
    """The ArrayRecord shard files listed in ``data_dir/meta.json``, checked to exist."""
    paths = [os.path.join(os.fspath(data_dir), n) for n in load_meta(data_dir)["shards"]]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"{data_dir}: meta.json lists missing shards {missing}")
    return paths


# --------------------------------------------------------------------------------------------------
# Counter-based randomness: a splitmix64 hash of (seed, stream, example, counter), vectorized
# --------------------------------------------------------------------------------------------------

_M1, _M2, _GOLD = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
_STREAM_SCALARS, _STREAM_POSITIONS, _STREAM_ACTIONS, _STREAM_SHUFFLE = 1, 2, 3, 4


def _mix64(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _keys(seed: int, stream: int, ids: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        base = _mix64(np.asarray([(seed % 2 ** 64) ^ (stream * 0x632BE59BD9B4E019 % 2 ** 64)], np.uint64))
        return _mix64(np.asarray(ids).astype(np.uint64) * _GOLD + base)


def uniforms(seed: int, stream: int, ids: np.ndarray, n: int) -> np.ndarray:
    """float64 [len(ids), n] uniform in [0, 1): a pure function of (seed, stream, id, column)."""
    with np.errstate(over="ignore"):
        x = _keys(seed, stream, ids)[:, None] + np.arange(1, n + 1, dtype=np.uint64)[None] * _GOLD
        return (_mix64(x) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def permute(index: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Record of global example ``index``: epoch ``e = index // n`` is a pseudo-random permutation of
    ``range(n)`` keyed by (seed, e) -- a 4-round Feistel network on the next even bit width, cycle-walked into
    ``[0, n)`` -- so every epoch visits each record exactly once."""
    index = np.asarray(index, np.int64)
    keys = _keys(seed, _STREAM_SHUFFLE, index // n)
    x = (index % n).astype(np.uint64)
    bits = max(2, (n - 1).bit_length())
    half = np.uint64((bits + 1) // 2)
    mask = np.uint64((1 << int(half)) - 1)
    todo = np.arange(len(x))
    with np.errstate(over="ignore"):
        while todo.size:
            left, right, k = x[todo] >> half, x[todo] & mask, keys[todo]
            for r in range(4):
                left, right = right, left ^ (_mix64(right ^ (k + np.uint64(r) * _GOLD)) & mask)
            x[todo] = (left << half) | right
            todo = todo[x[todo] >= n]
    return x.astype(np.int64)


# --------------------------------------------------------------------------------------------------
# Online example creation: SOP pair + MLM masking, a batch at a time
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ExampleMaker:
    """Turns document records into a batch (BATCH_API) for given global example ids and seed."""

    seq_len: int
    max_predictions: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    maskable: np.ndarray                  # bool [vocab]: False for [PAD] [CLS] [SEP] [MASK]
    word_start: np.ndarray | None = None  # bool [vocab]: set for whole-word masking
    mask_prob: float = 0.15
    short_seq_prob: float = 0.1

    def __post_init__(self):
        if self.seq_len < 5:
            raise InputError(f"seq_len must be >= 5 ([CLS] A [SEP] B [SEP]), got {self.seq_len}")
        if self.max_predictions < 1:
            raise InputError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions}")

    def make_batch(self, records: Sequence[bytes], example_ids: np.ndarray, seed: int) -> dict[str, np.ndarray]:
        """One row per (record, example id): SOP pair, layout, then MLM masking."""
        b, s, t = len(records), self.seq_len, self.seq_len - 3
        example_ids = np.asarray(example_ids, np.int64)
        u = uniforms(seed, _STREAM_SCALARS, example_ids, 5)
        targets = np.where(u[:, 0] < self.short_seq_prob, 2 + (u[:, 1] * (t - 1)).astype(np.int64), t).tolist()
        swapped = u[:, 4] < 0.5
        ids = np.full((b, s), self.pad_id, np.int32)
        types = np.zeros((b, s), np.int32)
        lengths = np.zeros(b, np.int64)
        for i, (record, u_start, u_split, swap) in enumerate(zip(records, u[:, 2].tolist(), u[:, 3].tolist(),
                                                                 swapped.tolist())):
            try:
                offs, toks = _parse(record)
            except ValueError as e:
                raise InputError(f"example {example_ids[i]}: {e}") from None
            n = len(offs) - 1
            if n < 2:
                raise InputError(f"example {example_ids[i]}: a record with {n} sentence(s); SOP needs two")
            if toks.size and (top := int(toks.max())) >= len(self.maskable):
                # under jax.jit an embedding lookup clamps an out-of-range id (no error, no NaN): stop it here
                raise InputError(f"example {example_ids[i]}: token id {top} >= the tokenizer's vocab size "
                                 f"{len(self.maskable)}: the records were tokenized with a larger vocabulary; "
                                 "prepare the data again with this tokenizer")
            start = min(int(u_start * (n - 1)), n - 2)  # (min: float rounding at u -> 1)
            end = min(n, max(start + 2, bisect.bisect_left(offs, offs[start] + targets[i])))
            split = min(start + 1 + int(u_split * (end - start - 1)), end - 1)
            (a0, a1), (b0, b1) = (offs[start], offs[split]), (offs[split], offs[end])
            if swap:
                (a0, a1), (b0, b1) = (b0, b1), (a0, a1)
            na, nb = truncated_lengths(a1 - a0, b1 - b0, t)
            row = ids[i]
            row[0] = self.cls_id
            row[1:1 + na] = toks[a0:a0 + na]
            row[1 + na] = self.sep_id
            row[2 + na:2 + na + nb] = toks[b0:b0 + nb]
            row[2 + na + nb] = self.sep_id
            types[i, 2 + na:3 + na + nb] = 1
            lengths[i] = 3 + na + nb
        attention = (np.arange(s)[None] < lengths[:, None]).astype(np.int32)
        out = self.mask(ids, attention.astype(bool), example_ids, seed)
        return {"input_ids": out.pop("input_ids"), "token_type_ids": types, "attention_mask": attention, **out,
                "sop_label": swapped.astype(np.int32)}

    def _choose_whole_words(self, ids, cand, keys, num):
        b, s = ids.shape
        rows = np.arange(b)
        prev = np.zeros_like(cand)
        prev[:, 1:] = cand[:, :-1]
        starts = cand & (self.word_start[ids] | ~prev)
        wid = np.maximum(np.cumsum(starts, axis=1) - 1, 0)  # word number of each position (if a candidate)
        size = np.bincount((rows[:, None] * s + wid)[cand], minlength=b * s).reshape(b, s)
        order = np.argsort(np.where(starts, keys, 2.0), axis=1, kind="stable")  # word starts, shuffled
        n_words = starts.sum(1)
        taken = np.zeros(b, np.int64)
        chosen_word = np.zeros((b, s), bool)
        for k in range(int(n_words.max(initial=0))):  # BERT: skip a word that would overflow the budget
            w = wid[rows, order[:, k]]
            size_k = size[rows, w]
            ok = (k < n_words) & (taken + size_k <= num)
            chosen_word[rows[ok], w[ok]] = True
            taken += np.where(ok, size_k, 0)
            if (taken >= num).all():
                break
        return cand & chosen_word[rows[:, None], wid]

    def mask(self, ids: np.ndarray, real: np.ndarray, example_ids: np.ndarray, seed: int) -> dict[str, np.ndarray]:
        """BERT's masked LM on laid-out rows ``ids`` [B, S] (``real``: bool, not padding)."""
        b, s = ids.shape
        p = self.max_predictions
        k = min(p, s)
        cand = self.maskable[ids] & real
        n_cand = cand.sum(1)
        num = np.minimum(np.clip(np.rint(n_cand * self.mask_prob).astype(np.int64), 1, p), n_cand)
        keys = uniforms(seed, _STREAM_POSITIONS, example_ids, s)
        if self.word_start is None:
            order = np.argsort(np.where(cand, keys, 2.0), axis=1, kind="stable")[:, :k]
            valid = np.arange(k)[None] < num[:, None]
            pos = np.sort(np.where(valid, order, s), axis=1)
        else:
            chosen = self._choose_whole_words(ids, cand, keys, num)
            valid = np.arange(k)[None] < chosen.sum(1)[:, None]
            pos = np.argsort(~chosen, axis=1, kind="stable")[:, :k]
        pos = np.where(valid, pos, 0).astype(np.int32)
        rows = np.arange(b)[:, None]
        labels = np.where(valid, ids[rows, pos], 0).astype(np.int32)
        r = uniforms(seed, _STREAM_ACTIONS, example_ids, 2 * k)
        normal = np.flatnonzero(self.maskable)
        random_tokens = normal[(r[:, k:] * len(normal)).astype(np.int64)]
        new = np.where(r[:, :k] < 0.8, self.mask_id, np.where(r[:, :k] < 0.9, random_tokens, labels))
        out = ids.copy()
        vr, vc = np.nonzero(valid)
        out[vr, pos[vr, vc]] = new[vr, vc]
        pad = ((0, 0), (0, p - k))
        return {"input_ids": out, "masked_lm_positions": np.pad(pos, pad), "masked_lm_ids": np.pad(labels, pad),
                "masked_lm_weights": np.pad(valid.astype(np.float32), pad)}


def example_maker(tokenizer, seq_len: int, max_predictions_per_seq: int, whole_word_masking: bool = False,
                  mask_prob: float = 0.15, short_seq_prob: float = 0.1) -> ExampleMaker:
    """An ``ExampleMaker`` for ``tokenizer``'s special ids (and word starts, for whole-word masking)."""
    maskable = np.ones(tokenizer.vocab_size, bool)
    maskable[sorted(tokenizer.special_ids)] = False
    word_start = tokenizer.is_word_start(np.arange(tokenizer.vocab_size)) if whole_word_masking else None
    return ExampleMaker(seq_len, max_predictions_per_seq, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id,
                        tokenizer.pad_id, maskable, word_start, mask_prob, short_seq_prob)


def batch_spec(batch_size: int, seq_len: int, max_predictions: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """Shape and dtype of every field of a batch (BATCH_API), as ``ExampleMaker.make_batch`` makes it; what the
    train step is compiled for ahead of time (``aot``). tests/test_pretrain_data.py checks it against the loader."""
    b, s, p = batch_size, seq_len, max_predictions
    return {"input_ids": ((b, s), "int32"), "token_type_ids": ((b, s), "int32"), "attention_mask": ((b, s), "int32"),
            "masked_lm_positions": ((b, p), "int32"), "masked_lm_ids": ((b, p), "int32"),
            "masked_lm_weights": ((b, p), "float32"), "sop_label": ((b,), "int32")}


@dataclasses.dataclass(frozen=True)
class HostBatches:
    """Local step ``t`` of host ``h`` -> rows ``h*L:(h+1)*L`` of global batch ``t``: global example ids
    ``t*G + h*L + arange(L)``, their records ``permute(ids, N, seed)``, made by ``maker`` (a grain map)."""

    source: object  # an ArrayRecordDataSource (random access, picklable for grain workers)
    num_records: int
    maker: ExampleMaker
    seed: int
    per_host: int
    global_batch: int
    shard_index: int

    def example_ids(self, step: int) -> np.ndarray:
        return step * self.global_batch + self.shard_index * self.per_host + np.arange(self.per_host)

    def __call__(self, step: int) -> dict[str, np.ndarray]:
        ids = self.example_ids(step)
        # One record at a time: ArrayRecordDataSource.__getitems__ starts a thread pool per call, which costs
        # 4x the CPU of these reads (6.1 vs 1.6 ms per 256 records); grain's read threads give the overlap.
        source = self.source
        try:
            records = [source[k] for k in permute(ids, self.num_records, self.seed).tolist()]
        except Exception as e:  # noqa: BLE001 -- array_record's reader raises bare RuntimeErrors on damaged bytes
            raise InputError(f"a record of the pretraining shards cannot be read ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:120] if str(e) else 'no message'}): a shard was damaged "
                             "after the run began; prepare the data again") from e
        return self.maker.make_batch(records, ids, self.seed)


def make_pretrain_loader(data_dir: str | os.PathLike, seq_len: int, global_batch_size: int, seed: int,
                         max_predictions_per_seq: int, whole_word_masking: bool = False,
                         shard_index: int | None = None, shard_count: int | None = None, num_workers: int = 0,
                         num_threads: int = 1, prefetch: int = 4, mask_prob: float = 0.15,
                         short_seq_prob: float = 0.1):
    """An endless grain ``IterDataset`` of this host's batches (``global_batch_size // shard_count`` rows).

    Iterate it for numpy batches in the BATCH_API layout; ``iter(loader)`` has ``get_state``/``set_state``
    (save it with orbax's ``grain.checkpoint.CheckpointHandler``). Batch ``t`` depends only on (data, seed, t,
    shard_index, shard_count) and the shards of one global batch are disjoint rows of it. ``num_threads``
    background threads prefetch up to ``prefetch`` batches (0: made on demand); ``num_workers`` > 0 makes
    batches in that many processes (``mp_prefetch``).
    """
    import grain
    import jax

    shard_index = jax.process_index() if shard_index is None else shard_index
    shard_count = jax.process_count() if shard_count is None else shard_count
    if not 0 <= shard_index < shard_count:
        raise InputError(f"shard_index {shard_index} is not in [0, {shard_count})")
    if global_batch_size <= 0 or global_batch_size % shard_count:
        raise InputError(f"global_batch_size {global_batch_size} is not a positive multiple of {shard_count} "
                         "shards (hosts)")
    meta = load_meta(data_dir)
    tokenizer = Tokenizer.from_dir(data_dir)
    if tokenizer is None or tokenizer.vocab_size != meta["tokenizer"]["vocab_size"]:
        raise FileNotFoundError(f"{data_dir}: the tokenizer file {meta['tokenizer']['file']} that prepare() saved "
                                "is missing or does not match meta.json")
    maker = example_maker(tokenizer, seq_len, max_predictions_per_seq, whole_word_masking, mask_prob,
                          short_seq_prob)
    source = open_shards(shard_paths(data_dir))
    if len(source) != meta["num_records"]:
        raise InputError(f"{data_dir}: the shards hold {len(source)} records, meta.json says {meta['num_records']}")
    per_host = global_batch_size // shard_count
    batches = HostBatches(source, len(source), maker, seed, per_host, global_batch_size, shard_index)
    ds = grain.MapDataset.range(2 ** 62).map(batches)
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch))
    if num_workers:
        from absl import flags

        if not flags.FLAGS.is_parsed():  # grain's workers read absl flags; outside absl.app nobody parsed them
            flags.FLAGS.mark_as_parsed()
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return it


def open_shards(paths: list[str]):
    """grain's ``ArrayRecordDataSource`` over ``paths``; a shard that array_record cannot open (cut short, not an
    ArrayRecord file) is refused by name, not as the reader's bare RuntimeError."""
    import grain

    try:
        return grain.sources.ArrayRecordDataSource(paths)
    except Exception as e:  # noqa: BLE001 -- array_record raises bare RuntimeErrors
        for path in paths:
            try:
                grain.sources.ArrayRecordDataSource([path])
            except Exception:  # noqa: BLE001
                raise InputError(f"{path}: not a readable ArrayRecord shard (cut short or damaged): prepare the "
                                 "data again") from e
        raise


def sequences_per_second(data_dir: str | os.PathLike, seq_len: int = 128, batch_size: int = 256,
                         num_batches: int = 20, max_predictions_per_seq: int = 20,
                         whole_word_masking: bool = False) -> float:
    """Input-pipeline throughput per core: sequences made per CPU-second of this process, batches made on
    demand in the calling thread (no prefetch threads or workers)."""
    it = iter(make_pretrain_loader(data_dir, seq_len, batch_size, 0, max_predictions_per_seq, whole_word_masking,
                                   shard_index=0, shard_count=1, num_threads=0))
    next(it)
    cpu = time.process_time()
    for _ in range(num_batches):
        next(it)
    return num_batches * batch_size / max(time.process_time() - cpu, 1e-9)


def check_resume_data(checkpointer, data_dir: str, fingerprint: dict, start_over: bool) -> bool:
    """Refuse to resume on data other than the newest checkpoint's (``data_fingerprint``, saved in each checkpoint's
    meta by ``checkpointer``, a ``checkpointing.Checkpointer``): another vocabulary always; other shards unless
    ``start_over`` (``config.data.start_over``; then True: the data iterator starts afresh). A checkpoint from before
    fingerprints is resumed with a warning."""
    for saved_step in checkpointer.all_steps()[::-1]:
        try:
            saved = checkpointer.read_meta(saved_step).get("data")
        except Exception:  # noqa: BLE001 -- no meta item (an older checkpoint) or damage: restore decides
            continue
        if not saved:
            break
        vocab, change = fingerprint_change(saved, fingerprint)
        if not change:
            return False
        where = (f"the prepared data in {data_dir} changed since the checkpoint at step {saved_step} in "
                 f"{checkpointer.directory}")
        if vocab:
            raise InputError(f"{where}: {change}. The checkpoints are left untouched: resume with the data they were "
                             "written with, or start a new workdir (--config.init_from a MODEL_DIR keeps weights)")
        if not start_over:
            raise InputError(f"{where}: {change}, so the saved data position means nothing there. The checkpoints are "
                             "left untouched: resume with the data they were written with, or pass "
                             "--config.data.start_over=True to keep the model and optimizer and read the new data from "
                             "its beginning")
        log.warning("%s: %s; data.start_over: the new data is read from its beginning", where, change)
        return True
    if checkpointer.all_steps():
        log.warning("the checkpoints in %s record no data fingerprint (written by an older version): the data in %s "
                    "is assumed to be the one they read", checkpointer.directory, data_dir)
    return False


def prepare_demo(workdir: str, data_config) -> str:
    """WORKDIR/data: the embedded corpus (``corpus``: generated by the project's grammar, ``data_config.demo_num_docs``
    documents from ``demo_seed``) tokenized once into ``num_shards`` ArrayRecord shards; the directory. Made once:
    a later run reuses it, and one whose settings would make other data is refused (``WORKDIR/demo/settings.json``
    records them) rather than trained on the old data without a word."""
    import jax

    data_dir = os.path.join(workdir, "data")
    settings = {k: data_config[k] for k in ("demo_num_docs", "demo_seed", "num_shards")}
    record = os.path.join(workdir, "demo", "settings.json")
    if os.path.exists(os.path.join(data_dir, "meta.json")):
        made = read_json(record) if os.path.exists(record) else settings  # older runs recorded none
        if not isinstance(made, dict):
            raise InputError(f"{record}: {json_type(made)}, not the demo data's settings; remove {data_dir} "
                             "to make the data again")
        if changed := [f"config.data.{k}={settings[k]} (it was made with {made.get(k)})" for k in settings
                       if made.get(k) != settings[k]]:
            raise InputError(f"{data_dir} holds the demo data made for other settings: {'; '.join(changed)}. Resume "
                             f"with the settings it was made with, or remove {data_dir} to make it again (with "
                             "--config.data.start_over=True to keep the model and optimizer)")
        return data_dir
    if jax.process_index() == 0:
        os.makedirs(data_dir, exist_ok=True)
        os.makedirs(os.path.join(workdir, "demo"), exist_ok=True)
        text = os.path.join(workdir, "demo", "corpus.txt")
        corpus.write_corpus(text, num_docs=data_config.demo_num_docs, seed=data_config.demo_seed)
        vocab = os.path.join(workdir, "demo", "vocab.txt")
        corpus.write_demo_vocab(vocab)
        prepare([text], Tokenizer.from_file(vocab), data_dir, num_shards=data_config.num_shards)
        atomic_write(record, json.dumps(settings) + "\n")
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("demo_data")
    return data_dir
