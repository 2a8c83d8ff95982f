"""Tokenizers: uncased BERT WordPiece (``vocab.txt``) and SentencePiece (``*.model``) behind one interface.

``load(path)`` (also ``Tokenizer.from_file``; ``Tokenizer.from_dir`` finds the file) returns one of two small classes
behind the ``Tokenizer`` interface, which holds everything they share (specials, the encoding layout, decoding,
word starts); each kind supplies only its vocabulary and the native library's encode/decode.

``WordPieceTokenizer`` (``vocab.txt``) builds the uncased BERT WordPiece pipeline with the ``tokenizers``
library — BertNormalizer (clean text, CJK split, lowercase, strip accents), BertPreTokenizer, WordPiece
(unk ``[UNK]``, words over 100 characters -> ``[UNK]``), the five specials matched verbatim in raw text —
so ids equal ``transformers.BertTokenizerFast(vocab_file, do_lower_case=True)`` on any text.

``SentencePieceTokenizer`` (``*.model``) wraps a ``sentencepiece`` model. It must hold BERT-style specials:
``[CLS]`` (or ``<cls>``), ``[SEP]`` (or ``<sep>``), ``[MASK]`` (or ``<mask>``), a pad piece (the model's
``pad_id``, else ``[PAD]`` or ``<pad>``); the unknown id is the model's own ``unk_id`` (``[UNK]``/``<unk>``).
ALBERT's ``spiece.model`` qualifies, as does every model ``train_tokenizer(..., kind="sentencepiece")``
writes. A SentencePiece model applies its own normalization (``train_tokenizer`` builds lowercasing in).

``checkpoint_file(directory, name)`` is the one way a file of a checkpoint directory or MODEL_DIR is found (here, and by
``pretrained`` and ``convert``): a file whose real path is outside the directory (a symlink to ``/etc/passwd``) is
refused.

``encode``/``encode_batch`` lay out ``[CLS] a [SEP] (b [SEP])`` the same way for both kinds, truncating with
the ``tokenizers`` library's longest-first rule (reimplemented here, so SentencePiece gets it too) and
padding to ``max_length``.
"""

from __future__ import annotations

import abc
import logging
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Sequence

import numpy as np

from squeezebert_jax.errors import InputError
from squeezebert_jax.files import (atomic_write, check_inputs_not_inside, check_text_files, json_type, json_value,
                                   make_dirs, overwrite_flag, path_argument, read_json, refuse_model_dir, refuse_nested,
                                   special_kind, text_lines)

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
BERT_SPECIALS = (PAD, UNK, CLS, SEP, MASK)  # ids 0..4 in every vocabulary ``train_tokenizer`` writes
MAX_INPUT_CHARS_PER_WORD = 100
# Names ``from_dir`` looks for, in this order.
TOKENIZER_FILE_NAMES = ("vocab.txt", "spiece.model", "sentencepiece.model", "tokenizer.model")
# Accepted SentencePiece piece names for each special (first found wins).
SP_SPECIAL_NAMES = {"pad": (PAD, "<pad>"), "unk": (UNK, "<unk>"), "cls": (CLS, "<cls>"),
                    "sep": (SEP, "<sep>"), "mask": (MASK, "<mask>")}
# Rust's `char::is_whitespace` (what `tokenizers` strips from the end of each vocab.txt line).
_RUST_WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


# --------------------------------------------------------------------------------------------------
# Finding a checkpoint's files; reading vocab.txt
# --------------------------------------------------------------------------------------------------

def _containment_root(directory: str) -> str:
    """The real directory whose files ``directory``'s may resolve into: ``directory`` itself, or for a Hugging Face hub
    cache snapshot (``.../models--ORG--NAME/snapshots/REV``, whose files link to ``../../blobs/HASH``) the model's
    cache folder ``models--ORG--NAME``."""
    root = os.path.realpath(directory)
    parent = os.path.dirname(root)
    if os.path.basename(parent) == "snapshots" and os.path.basename(os.path.dirname(parent)).startswith("models--"):
        return os.path.dirname(parent)
    return root


def checkpoint_file(directory: str | os.PathLike, name: str) -> str | None:
    """``directory/name`` if it is a file, None if nothing is there: the one way a file of a checkpoint directory or
    MODEL_DIR (config.json, the weights, vocab.txt and the other tokenizer files) is found.

    A path whose real location lies outside the directory's (a ``vocab.txt`` linked to ``/etc/passwd``, a ``..`` in
    ``name``) is an ``InputError`` naming both: a checkpoint's files are read (and copied on) from the checkpoint alone.
    So is a ``name`` that is no regular file (a directory, a pipe, a link to nothing): not "no vocab.txt". Symlinks that
    stay inside the directory are followed, as are a Hugging Face hub cache snapshot's links into its model's
    ``blobs/``.
    """
    directory = os.fspath(directory)
    path = os.path.join(directory, name)
    if not os.path.lexists(path):
        return None
    root, real = _containment_root(directory), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise InputError(f"{path} resolves to {real}, outside the checkpoint directory {directory}; a checkpoint's "
                         "files are read from its own directory only: copy the file in instead of linking to it")
    if os.path.isfile(real):
        return path
    kind = (special_kind(real) if os.path.exists(real) else
            f"a symbolic link to {os.readlink(path)}, which does not exist")
    raise InputError(f"{path}: {kind}, where the checkpoint's {name} goes (a regular file); put the file there, or "
                     "remove what is in its place")


def warn_truncated(cut: int, total: int, max_length: int, setting: str, what: str = "inputs",
                   limit: int | None = None) -> None:
    """Never silent: a warning with how many (``cut``) of the ``total`` inputs were cut to ``max_length`` tokens (the
    model reads none of what was cut; ``encode_batch`` counts them in ``last_truncated``), naming the ``setting``
    that keeps more, up to ``limit`` (the model's positions) where given; at that limit, that no setting does."""
    if cut:
        if limit is not None and max_length >= limit:
            advice = f"the model reads at most {limit} tokens (its positions): split longer texts to read all of them"
        else:
            upto = f" (up to the model's {limit})" if limit else ""
            advice = f"a larger {setting}{upto} keeps more"
        logging.getLogger(__name__).warning(
            "%d of %d %s (%.1f%%) are longer than %d tokens and were cut to fit (the model reads none of the "
            "rest); %s", cut, total, what, 100 * cut / total, max_length, advice)


def read_vocab(path: str, data: bytes | None = None) -> list[str]:
    """The tokens of a BERT ``vocab.txt``, one per line, id = line index (as ``tokenizers`` reads it).

    Trailing whitespace (and ``\\r``) is stripped from each line; a final newline ends the last line. A blank line
    is the empty token and keeps its id, as in ``BertTokenizerFast`` (no id after it shifts); a second blank line
    is a repeated token. The one reader of a WordPiece vocabulary: an ``InputError`` names the file and line of a token
    holding white space (the pre-tokenizer splits there: no word matches it), both line numbers for a repeated token
    (transformers would give the token the later id, leaving the earlier one unused), the file and byte offset for
    invalid UTF-8, and the file and the missing names if one of the five BERT specials the model uses ([PAD] [UNK]
    [CLS] [SEP] [MASK]) is absent.
    """
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start, lineno = data.rfind(b"\n", 0, e.start) + 1, data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}: line {lineno}, column {len(data[line_start:e.start].decode('utf-8', 'replace')) + 1}"
                         f": not UTF-8 text (byte 0x{data[e.start]:02x}); save the file as UTF-8") from None
    if text.startswith("\ufeff"):  # BertTokenizerFast keeps it: its first token would be "\ufeff[PAD]"
        raise InputError(f"{path}: line 1 starts with a byte-order mark, which BertTokenizerFast reads as part of its "
                         "first token; save the file without it (UTF-8 without BOM)")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tokens = [line.rstrip(_RUST_WHITESPACE) for line in lines]
    first_line: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if space := next((c for c in tok if c in _RUST_WHITESPACE), None):
            raise InputError(f"{path}: line {i + 1}: token {tok!r} holds white space ({space!r}), where the tokenizer "
                             "splits words, so no text can ever match it; a vocab.txt line holds one token and "
                             "nothing else (a 'token<TAB>count' line is a word-count file, not a vocabulary)")
        if tok in first_line:
            what = (f"line {i + 1} is blank, as is line {first_line[tok] + 1} (a blank line is a token, the empty one)"
                    if tok == "" else f"line {i + 1} repeats token {tok!r} of line {first_line[tok] + 1}")
            raise InputError(f"{path}: {what}; every vocab.txt line must be a distinct token (its id is its line "
                             "number - 1): remove the repeated line")
        first_line[tok] = i
    missing = [s for s in BERT_SPECIALS if s not in first_line]
    if missing:
        raise InputError(f"{path}: vocab.txt lacks the special token(s) {', '.join(missing)} "
                         f"(a BERT vocab needs all of {', '.join(BERT_SPECIALS)}, one per line)")
    _warn_unmatchable(path, tokens)
    return tokens


_WARNED_UNMATCHABLE: set[str] = set()


def _warn_unmatchable(path: str, tokens: list[str]) -> None:
    """A token holding a character BertTokenizerFast's normalizer removes from every text (a control or format
    character: \x07, U+200B zero-width space, U+FFFD) can never be matched: its id is never given. Not refused (a
    multilingual vocabulary may hold a few such dead tokens), but said once per file, with the first one's line."""
    dead = [i for i, tok in enumerate(tokens) if any(c == "\ufffd" or (unicodedata.category(c).startswith("C")
                                                                        and c not in "\t\n\r") for c in tok)]
    if dead and path not in _WARNED_UNMATCHABLE:
        _WARNED_UNMATCHABLE.add(path)
        logging.getLogger(__name__).warning(
            "%s: %d token(s) hold a control or format character, which the tokenizer removes from every text, so no "
            "text can match them (the first: line %d, %r)", path, len(dead), dead[0] + 1, tokens[dead[0]])


def _wordpiece_backend(tokens: Sequence[str]):
    """The ``tokenizers.Tokenizer`` that ``BertTokenizerFast(vocab_file, do_lower_case=True)`` builds."""
    from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers.models import WordPiece

    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = RustTokenizer(WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    # As in transformers: the specials are matched verbatim in raw text ("[MASK]" -> mask id).
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in BERT_SPECIALS])
    return tok


def _check_texts(texts, name: str) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(f"{name} must be a list of strings, not one string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"{name}[{i}] is {type(t).__name__}, expected str")
    return texts


def _short_repr(text: str, pos: int, width: int = 40) -> str:
    """``repr`` of ``text``, or of a window of it around ``pos`` when it is long."""
    if len(text) <= width:
        return repr(text)
    lo = max(0, min(pos - width // 2, len(text) - width))
    return ("..." if lo else "") + repr(text[lo:lo + width]) + ("..." if lo + width < len(text) else "")


def _check_encodable(texts: Sequence[str], name: str, single: bool = False) -> None:
    """Raise an InputError for the first text with a character that is not valid Unicode (a lone surrogate such
    as ``"\\ud800"``, which no tokenizer can encode): which text, a short repr of it, and the character's position."""
    for i, t in enumerate(texts):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            label = name if single else f"{name}[{i}]"
            raise InputError(f"{label} {_short_repr(t, e.start)} has a lone surrogate {t[e.start]!r} at character "
                             f"{e.start}, which is not valid Unicode; fix the text where it was made (e.g. decode its "
                             "bytes with errors='replace')") from None


def truncated_lengths(n_a: int, n_b: int | None, budget: int) -> tuple[int, int]:
    """How many tokens of ``a`` and ``b`` survive longest-first truncation to ``budget`` tokens in all.

    The ``tokenizers`` library's rule (``truncate_encodings``, LongestFirst), which
    ``BertTokenizerFast(..., truncation="longest_first")`` uses: the shorter side keeps all its tokens if the
    longer one can take the rest; otherwise both are cut to ``budget // 2`` (the first sequence) and
    ``budget // 2 + budget % 2`` (the second), the longer side taking the odd token.
    """
    if n_b is None:
        return min(n_a, budget), 0
    if n_a + n_b <= budget:
        return n_a, n_b
    n1, n2 = n_a, n_b
    swap = n1 > n2
    if swap:
        n1, n2 = n2, n1
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    if swap:
        n1, n2 = n2, n1
    return min(n_a, n1), min(n_b, n2)


# --------------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------------


# What BertTokenizerFast reads from a tokenizer_config.json into its normalizer, which this library's WordPiece does one
# way only (``_wordpiece_backend``: lowercased, accents stripped with the lowercasing, each CJK character a word): the
# values that read text as it does, and what they mean. Another value would tokenize otherwise there, silently.
WORDPIECE_SETTINGS = {
    "do_lower_case": ((True,), "true or false (this library's WordPiece is uncased BERT's: true)"),
    "strip_accents": ((None, True), "null or true (uncased BERT strips accents with the lowercasing: \"Góod\" is good)"),
    "tokenize_chinese_chars": ((True,), "true (each CJK character a word, as BERT splits them)"),
}


def _side_file(directory: str, name: str) -> tuple[str | None, dict]:
    """(path, JSON object) of a tokenizer's side file ``name`` in ``directory`` ((None, {}) where there is none); one
    that holds no JSON object is refused by name."""
    path = checkpoint_file(directory, name)
    if path is None:
        return None, {}
    value = read_json(path)
    if not isinstance(value, dict):
        raise InputError(f"{path}: {json_type(value)}, not a JSON object")
    return path, value


def check_tokenizer_config(directory: str) -> None:
    """A ``tokenizer_config.json`` in ``directory`` beside a WordPiece vocabulary: refused unless it is a JSON object
    whose ``WORDPIECE_SETTINGS`` (where set) read text as this library's WordPiece does. A cased BERT
    (``do_lower_case: false``) is refused: lowercasing a cased model's input would be silently wrong; so are accents
    kept (``strip_accents: false``), CJK characters left in words, and a value of another type (which is meant?)."""
    cfg_path, settings = _side_file(directory, "tokenizer_config.json")
    if cfg_path is None:
        return
    if settings.get("do_lower_case", True) is False:
        raise InputError(f"{cfg_path}: do_lower_case is false (a cased model); this library's "
                         "WordPiece is uncased BERT's and would lowercase its input")
    for name, (allowed, meant) in WORDPIECE_SETTINGS.items():
        value = settings.get(name, allowed[0])
        if not any(value is a for a in allowed):  # "false", 0 (== False in Python), null: which is meant?
            raise InputError(f"{cfg_path}: {name} is {json_value(value)}; expected {meant}")


def check_added_tokens(directory: str, vocabulary: str, vocab_tokens) -> None:
    """Tokens transformers adds beside the vocabulary (``vocabulary``'s tokens in id order, from ``vocab_tokens()``,
    called only where a side file names any): ``added_tokens.json``,
    ``tokenizer.json``'s ``added_tokens`` and ``tokenizer_config.json``'s ``added_tokens_decoder``. One that is not
    the vocabulary's own token at its id (an id past it, which the model's embeddings were grown for, or another
    token's) is read by no tokenizer here: text holding it would split into other pieces, without a word. Refused;
    the specials at their own ids, as transformers writes them, add nothing."""
    found = []
    path, added = _side_file(directory, "added_tokens.json")
    found += [(path, t, i) for t, i in added.items()]
    for name, entries in (("tokenizer.json", lambda d: d.get("added_tokens")),
                          ("tokenizer_config.json", lambda d: [dict(v, id=k) for k, v in d.get(
                              "added_tokens_decoder", {}).items() if isinstance(v, dict)])):
        side, doc = _side_file(directory, name)
        for entry in (entries(doc) or []) if side else []:
            if isinstance(entry, dict):
                found.append((side, entry.get("content"), entry.get("id")))
    tokens = vocab_tokens() if found else []
    for where, token, i in found:
        at = int(i) if isinstance(i, (int, str)) and str(i).isdigit() else None
        if at is None or at >= len(tokens) or tokens[at] != token:
            whose = f"{vocabulary} has {tokens[at]!r} there" if at is not None and at < len(tokens) else \
                f"past {vocabulary}'s {len(tokens)} tokens"
            raise InputError(f"{where}: the added token {token!r} at id {i!r} ({whose}), which this library's "
                             "tokenizers do not read (text holding it would split into other pieces): remove the "
                             f"added tokens, or write them into {vocabulary} at their ids")


class Tokenizer(abc.ABC):
    """What both tokenizers share: BERT specials, tokens <-> ids, ``[CLS] a [SEP] (b [SEP])`` encoding, decoding and
    word starts. The two kinds, ``WordPieceTokenizer`` and ``SentencePieceTokenizer``, supply the vocabulary and the
    native library's encode/decode; ``load(path)`` (or ``Tokenizer.from_file``/``from_dir``) picks the kind."""

    kind: str  # "wordpiece" or "sentencepiece"
    file_name: str  # the name ``save`` writes
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    special_ids: frozenset[int]

    def __init__(self, path: str, blob: bytes, tokens: list[str], specials: Sequence[int], unk_starts_word: bool):
        """``specials``: the ids of [PAD] [UNK] [CLS] [SEP] [MASK]; ``unk_starts_word``: whether [UNK] begins a word
        (WordPiece) or stands for characters inside one (SentencePiece)."""
        self.path, self._blob, self._tokens = path, blob, tokens
        self.vocab_size = len(tokens)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = specials
        self.special_ids = frozenset({self.pad_id, self.cls_id, self.sep_id, self.mask_id})
        word_start = np.array([self._starts_word(t) for t in tokens], dtype=bool)
        for i in specials:
            word_start[i] = unk_starts_word or i != self.unk_id
        self._word_start = word_start

    # -- what each kind supplies ------------------------------------------------------------------

    @abc.abstractmethod
    def _starts_word(self, token: str) -> bool:
        """Whether vocabulary entry ``token`` begins a word (whole-word masking)."""

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """The id of vocabulary entry ``token``, or None if it is not in the vocabulary."""

    @abc.abstractmethod
    def _ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text (no specials), in the native library's batch call."""

    @abc.abstractmethod
    def _text(self, ids: list[int]) -> str:
        """The text of token ids (specials skipped)."""

    @abc.abstractmethod
    def _offsets(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Token ids and each piece's character span, in the native library's batch call."""

    # -- construction / saving --------------------------------------------------------------------

    @staticmethod
    def from_file(path: str | os.PathLike) -> Tokenizer:
        """``vocab.txt`` (any ``*.txt``) -> uncased BERT WordPiece; ``*.model`` -> SentencePiece (``load``)."""
        return load(path)

    @staticmethod
    def from_dir(directory: str | os.PathLike) -> Tokenizer | None:
        """The tokenizer in ``directory`` (the first of ``TOKENIZER_FILE_NAMES`` present), or None if none is.

        A ``tokenizer_config.json`` beside a ``vocab.txt`` that says ``do_lower_case: false`` (a cased BERT) is
        refused: the WordPiece here is uncased, and lowercasing a cased model's input would be silently wrong. Files
        are found through ``checkpoint_file`` (a symlink out of ``directory`` is refused).
        """
        directory = os.fspath(directory)
        for name in TOKENIZER_FILE_NAMES:
            path = checkpoint_file(directory, name)
            if path is not None:
                tok = load(path)
                if isinstance(tok, WordPieceTokenizer):
                    check_tokenizer_config(directory)
                check_added_tokens(directory, name, lambda: tok.tokens)
                return tok
        return None

    def save(self, directory: str | os.PathLike) -> str:
        """Write the tokenizer file (the bytes it was loaded from) into ``directory``; returns its file name. A
        model's directory, or one inside it, is refused: another vocabulary there would read other words with the
        model's embeddings (``train_tokenizer`` refuses it alike)."""
        directory = path_argument("directory", directory)
        if os.path.isdir(directory):
            refuse_model_dir(directory, "a tokenizer", "directory")
        refuse_nested(directory, "directory")
        os.makedirs(directory, exist_ok=True)
        atomic_write(os.path.join(directory, self.file_name), self._blob)
        return self.file_name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, path={self.path!r})"

    # -- tokens <-> ids ---------------------------------------------------------------------------

    def id_to_token(self, i: int) -> str:
        """The vocabulary entry (WordPiece token or SentencePiece piece) of id ``i``."""
        return self._tokens[i]

    @property
    def tokens(self) -> list[str]:
        """Every vocabulary entry in id order: two tokenizers with equal ``tokens`` give ids the same meaning."""
        return [self.id_to_token(i) for i in range(self.vocab_size)]

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``: no special tokens added, no truncation."""
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, expected str")
        return self._tokenize_batch([text], "text", single=True)[0]

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[tokenize(t) for t in texts]``, computed in the native library's (multi-threaded) batch call."""
        return self._tokenize_batch(_check_texts(texts, "texts"), "texts")

    def _tokenize_batch(self, texts: list[str], name: str, single: bool = False) -> list[list[int]]:
        if not texts:
            return []
        try:
            return self._ids(texts)
        except (TypeError, RuntimeError, UnicodeError):
            # Checked only on failure (free otherwise): a lone surrogate makes both libraries raise a cryptic
            # TypeError / RuntimeError that names neither the text nor the character.
            _check_encodable(texts, name, single)
            raise

    def _check_ids(self, ids: np.ndarray) -> None:
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"token ids must be integers, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise InputError(f"token ids must lie in [0, {self.vocab_size}), got range "
                             f"[{ids.min()}, {ids.max()}]")

    def is_word_start(self, ids) -> np.ndarray:
        """Bool array shaped like ``ids``: True where a token begins a word.

        WordPiece: every token but ``##`` continuations. SentencePiece: pieces that begin with U+2581.
        The specials count as word starts, except SentencePiece's ``[UNK]`` (it stands for characters inside
        a word). Used for whole-word masking.
        """
        ids = np.asarray(ids)
        self._check_ids(ids)
        return self._word_start[ids.astype(np.int64, copy=False)] if ids.size else np.zeros(ids.shape, bool)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of ``ids``. ``skip_special_tokens`` drops [PAD] [CLS] [SEP] [MASK] first ([UNK] is kept).

        WordPiece output is what ``BertTokenizerFast.decode`` gives (lowercased, accents stripped, ``##``
        pieces joined); SentencePiece output is ``SentencePieceProcessor.decode``.
        """
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise InputError(f"decode takes one sequence of ids, got an array of shape {arr.shape}")
        self._check_ids(arr)
        seq = [int(i) for i in arr.tolist()]
        if skip_special_tokens:
            seq = [i for i in seq if i not in self.special_ids]
        return self._text(seq)

    # -- model inputs -----------------------------------------------------------------------------

    def word_pieces(self, words: Sequence[str]) -> list[list[int]]:
        """Each word's token ids, the words tokenized one by one (pre-split text: a tagged word's pieces; the first
        piece carries its tag), in one batch call of the native library."""
        return self._ids(list(words)) if len(words) else []

    def pieces_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Each text's token ids (no specials) and each piece's character span ``(start, end)`` in the text: what
        ``text[start:end]`` a piece stands for (extractive QA maps a span of pieces back to the context's text)."""
        texts = _check_texts(texts, "texts")
        return self._offsets(texts) if texts else []

    def encode(self, text: str, text_pair: str | None = None, max_length: int = 128) -> dict[str, np.ndarray]:
        """``[CLS] text [SEP] (text_pair [SEP])``, longest-first truncated and padded to ``max_length``.

        Returns int32 arrays of shape [max_length]: ``input_ids``, ``token_type_ids`` (0 for the first
        segment and its specials, 1 for the second), ``attention_mask`` (1 on real tokens).
        """
        out = self._encode_batch([text], None if text_pair is None else [text_pair], max_length, single=True)
        return {k: v[0] for k, v in out.items()}

    def encode_batch(self, texts: Sequence[str], text_pairs: Sequence[str] | None = None,
                     max_length: int = 128) -> dict[str, np.ndarray]:
        """``encode`` for each text (and pair): int32 arrays of shape [len(texts), max_length]."""
        return self._encode_batch(texts, text_pairs, max_length)

    def _encode_batch(self, texts, text_pairs, max_length, single: bool = False) -> dict[str, np.ndarray]:
        names = ("text", "text_pair") if single else ("texts", "text_pairs")
        texts = _check_texts(texts, names[0])
        pairs = None if text_pairs is None else _check_texts(text_pairs, names[1])
        if pairs is not None and len(pairs) != len(texts):
            raise InputError(f"{len(texts)} texts but {len(pairs)} text_pairs")
        n_special = 2 if pairs is None else 3
        if not isinstance(max_length, (int, np.integer)) or max_length < n_special:
            raise InputError(f"max_length={max_length} cannot hold the {n_special} special tokens of a "
                             f"{'single text' if pairs is None else 'text pair'}")
        a_ids = self._tokenize_batch(texts, names[0], single)
        b_ids = self._tokenize_batch(pairs, names[1], single) if pairs is not None else None
        return self._layout(a_ids, b_ids, int(max_length))

    def _layout(self, a_ids: list[list[int]], b_ids: list[list[int]] | None, max_length: int
                ) -> dict[str, np.ndarray]:
        n = len(a_ids)
        input_ids = np.full((n, max_length), self.pad_id, np.int32)
        token_type_ids = np.zeros((n, max_length), np.int32)
        attention_mask = np.zeros((n, max_length), np.int32)
        budget = max_length - (2 if b_ids is None else 3)
        cls, sep = self.cls_id, self.sep_id
        self.last_truncated = 0  # how many of the last call's inputs were cut to max_length (glue.encode_examples)
        for r in range(n):
            a = a_ids[r]
            b = None if b_ids is None else b_ids[r]
            na, nb = truncated_lengths(len(a), None if b is None else len(b), budget)
            self.last_truncated += na < len(a) or (b is not None and nb < len(b))
            row = input_ids[r]
            row[0] = cls
            row[1:1 + na] = a[:na]
            row[1 + na] = sep
            end = 2 + na
            if b is not None:
                row[end:end + nb] = b[:nb]
                row[end + nb] = sep
                token_type_ids[r, end:end + nb + 1] = 1
                end += nb + 1
            attention_mask[r, :end] = 1
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


class WordPieceTokenizer(Tokenizer):
    """Uncased BERT WordPiece from a ``vocab.txt``: ids equal ``BertTokenizerFast(vocab_file, do_lower_case=True)``."""

    kind, file_name = "wordpiece", "vocab.txt"

    def __init__(self, path: str | os.PathLike):
        path = os.fspath(path)
        blob = _read_bytes(path)
        tokens = read_vocab(path, blob)
        self._backend = _wordpiece_backend(tokens)
        index = {t: i for i, t in enumerate(tokens)}
        super().__init__(path, blob, tokens, [index[s] for s in BERT_SPECIALS], unk_starts_word=True)

    def _starts_word(self, token: str) -> bool:
        return not token.startswith("##")

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._backend.encode_batch_fast(texts, add_special_tokens=False)]

    def _text(self, ids: list[int]) -> str:
        return self._backend.decode(ids, skip_special_tokens=False)

    def _offsets(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        return [(e.ids, [tuple(o) for o in e.offsets]) for e in self._backend.encode_batch(texts,
                                                                                         add_special_tokens=False)]


class SentencePieceTokenizer(Tokenizer):
    """A ``sentencepiece`` model (``*.model``) holding BERT-style specials (see ``SP_SPECIAL_NAMES``)."""

    kind, file_name = "sentencepiece", "spiece.model"

    def __init__(self, path: str | os.PathLike):
        import sentencepiece as spm

        path = os.fspath(path)
        blob = _read_bytes(path)
        try:
            self._sp = sp = spm.SentencePieceProcessor(model_proto=blob)
        except (RuntimeError, OSError) as e:
            raise InputError(f"{path}: not a readable SentencePiece model ({e})") from None
        tokens = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        index = {t: i for i, t in enumerate(tokens)}
        found: dict[str, int] = {}
        if sp.unk_id() >= 0:
            found["unk"] = sp.unk_id()
        if sp.pad_id() >= 0:
            found["pad"] = sp.pad_id()
        for role, names in SP_SPECIAL_NAMES.items():
            if role not in found:
                hit = next((index[n] for n in names if n in index), None)
                if hit is not None:
                    found[role] = hit
        missing = [" or ".join(SP_SPECIAL_NAMES[r]) for r in SP_SPECIAL_NAMES if r not in found]
        if missing:
            raise InputError(f"{path}: the SentencePiece model lacks the special piece(s) {'; '.join(missing)} "
                             "(train it with user_defined_symbols=[CLS],[SEP],[MASK] and a pad_id, as "
                             "squeezebert_jax.tokenizer.train_tokenizer does)")
        super().__init__(path, blob, tokens, [found[r] for r in ("pad", "unk", "cls", "sep", "mask")],
                         unk_starts_word=False)  # [UNK] stands for characters inside a word

    def _starts_word(self, token: str) -> bool:
        return token.startswith("\u2581")

    def token_to_id(self, token: str) -> int | None:
        i = self._sp.piece_to_id(token)
        return i if self._tokens[i] == token else None

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(texts, out_type=int)

    def _text(self, ids: list[int]) -> str:
        return self._sp.decode(ids)

    def _offsets(self, texts: list[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        out = []
        try:
            protos = self._sp.encode(texts, return_type="proto")  # sentencepiece >= 0.2.1
        except (TypeError, ValueError):
            protos = self._sp.encode(texts, out_type="immutable_proto")
        for text, proto in zip(texts, protos):
            # sentencepiece's spans are UTF-8 byte offsets: as character offsets (a piece's leading U+2581 stands
            # for the space before it, which its span leaves out where it can)
            byte_end = np.cumsum([0] + [len(ch.encode()) for ch in text])
            char = lambda b: int(np.searchsorted(byte_end, b))  # noqa: E731
            spans = []
            for p in proto.pieces:
                start, end = char(p.begin), char(p.end)
                while start < end and text[start].isspace():
                    start += 1
                spans.append((start, end))
            out.append(([p.id for p in proto.pieces], spans))
        return out


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def load(path: str | os.PathLike) -> Tokenizer:
    """The tokenizer in file ``path``: a ``*.txt`` vocabulary (uncased BERT WordPiece) or a ``*.model``
    (SentencePiece)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        found = [os.path.join(path, n) for n in TOKENIZER_FILE_NAMES if os.path.isfile(os.path.join(path, n))]
        raise IsADirectoryError(f"{path} is a directory; give the tokenizer file in it ({found[0]})" if found else
                                f"{path} is a directory holding no tokenizer file ({', '.join(TOKENIZER_FILE_NAMES)}); "
                                "give the tokenizer file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    if path.endswith(".txt"):
        return WordPieceTokenizer(path)
    if path.endswith(".model"):
        return SentencePieceTokenizer(path)
    raise InputError(f"{path}: unknown tokenizer file extension; expected a WordPiece vocab.txt (*.txt) "
                     "or a SentencePiece model (*.model)")


# --------------------------------------------------------------------------------------------------
# Training a vocabulary
# --------------------------------------------------------------------------------------------------

def _train_wordpiece(files: list[str], out_dir: str, vocab_size: int) -> str:
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import normalizers, pre_tokenizers, trainers
    from tokenizers.models import WordPiece

    tok = RustTokenizer(WordPiece(unk_token=UNK, max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(BERT_SPECIALS),
                                        continuing_subword_prefix="##", show_progress=False)
    tok.train(files, trainer)
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.__getitem__)
    if len(tokens) > vocab_size:  # the trainer keeps every character of the corpus (and its ## form)
        raise InputError(f"the characters of {', '.join(files)} alone (each, and its ## form) take {len(tokens)} "
                         f"WordPiece entries with the specials, more than the vocab_size {vocab_size} asked: ask for "
                         f"at least {len(tokens)} (nothing written)")
    if [vocab[t] for t in tokens] != list(range(len(tokens))) or tuple(tokens[:len(BERT_SPECIALS)]) != BERT_SPECIALS:
        raise RuntimeError("the WordPiece trainer returned ids that are not 0..N-1 with the specials first")
    bad = [t for t in tokens if not t or "\n" in t or t != t.rstrip(_RUST_WHITESPACE)]
    if bad:
        raise RuntimeError(f"the WordPiece trainer produced tokens that vocab.txt cannot hold: {bad[:5]!r}")
    return atomic_write(os.path.join(out_dir, "vocab.txt"), "".join(t + "\n" for t in tokens))


def _train_sentencepiece(files: list[str], out_dir: str, vocab_size: int, verbose: bool) -> str:
    import sentencepiece as spm

    tmp = tempfile.mkdtemp(prefix=".spiece-", dir=out_dir)  # the model and its .vocab appear together, or not at all
    prefix = os.path.join(tmp, "spiece")
    try:
        spm.SentencePieceTrainer.train(
            input=files, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, pad_piece=PAD, unk_piece=UNK,
            user_defined_symbols=[CLS, SEP, MASK],  # ids 2, 3, 4
            normalization_rule_name="nmt_nfkc_cf",  # NFKC + case folding: an uncased model
            input_sentence_size=10_000_000, shuffle_input_sentence=True,
            hard_vocab_limit=False,  # a corpus of fewer pieces than asked gives them all (as WordPiece does), warned
            num_threads=os.cpu_count() or 1, minloglevel=0 if verbose else 1)  # 1: warnings and errors only
    except RuntimeError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if m := re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(e)):  # (its hint names a flag of its own)
            need = int(m.group(1))  # the characters and the specials: the smallest vocab_size that trains
            raise InputError(f"the characters of {', '.join(files)} alone take {need} SentencePiece entries with the "
                             f"specials, more than the vocab_size {vocab_size} asked: ask for at least {need} "
                             "(nothing written)") from None
        raise InputError(f"SentencePiece training on {', '.join(files)} failed: {e}") from None
    for name in ("spiece.vocab", "spiece.model"):
        os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(out_dir, "spiece.model")


def _has_text(path: str) -> bool:
    """Whether ``path`` has a line with a non-whitespace character (reads only up to the first such line)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return any(not line.isspace() for line in f)


def train_tokenizer(files: Sequence[str | os.PathLike], out_dir: str | os.PathLike, vocab_size: int,
                    kind: str = "wordpiece", *, verbose: bool = False, overwrite: bool = False) -> Tokenizer:
    """Train a vocabulary of ``vocab_size`` entries on text ``files`` and write it into ``out_dir``.

    ``wordpiece``: the ``tokenizers`` WordPiece trainer behind uncased BERT normalization and
    pre-tokenization; writes ``out_dir/vocab.txt`` with [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4.
    ``sentencepiece``: a unigram ``SentencePieceTrainer`` model with NFKC + lowercase normalization,
    [PAD]=0, [UNK]=1 and user-defined [CLS] [SEP] [MASK] at 2-4 (no BOS/EOS); writes
    ``out_dir/spiece.model`` (and the readable ``spiece.vocab``). Training reads lines; at most 10M lines
    (a random sample) feed SentencePiece. Returns the trained tokenizer, loaded from the written file; a
    WordPiece vocabulary comes out smaller than ``vocab_size`` (with a warning) when the corpus runs out of
    merges, and is refused (nothing written) when the corpus's characters alone need more entries than asked. An
    existing ``vocab.txt`` / ``spiece.model`` in ``out_dir`` is refused unless ``overwrite`` (a MODEL_DIR's tokenizer
    replaced would silently change what its ids mean).
    """
    # the corpus files as prepare_data checks them: each an existing file, given once (a directory, a pattern that
    # matched nothing, the same file twice named as such)
    overwrite, out_dir = overwrite_flag(overwrite), path_argument("out_dir", out_dir)
    files = check_text_files([files] if isinstance(files, (str, os.PathLike)) else list(files))
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise InputError(f"vocab_size={vocab_size!r}; expected an integer (the vocabulary's entries)")
    if kind not in ("wordpiece", "sentencepiece"):
        raise InputError(f"kind={kind!r}; expected 'wordpiece' or 'sentencepiece'")
    if vocab_size <= len(BERT_SPECIALS):
        raise InputError(f"vocab_size={vocab_size} leaves no room beyond the {len(BERT_SPECIALS)} special tokens")
    if not any(_has_text(f) for f in files):  # both trainers alike (SentencePiece would fail, WordPiece not)
        raise InputError(f"no text to train on in {', '.join(files)}: "
                         f"{'the file is' if len(files) == 1 else 'every file is'} empty or holds only blank lines")
    for f in files:  # UTF-8 text by line, as every reader of a user's text: the trainers crash or learn bytes
        if os.path.isfile(f):  # (a pipe is read once: by the trainer)
            for _ in text_lines(f):
                pass
    out_dir = os.fspath(out_dir)
    check_inputs_not_inside(out_dir, files)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"--out {out_dir} is a file; give the directory to write the tokenizer into")
    if os.path.isdir(out_dir):  # a new vocabulary beside the model's embeddings would read other words
        refuse_model_dir(out_dir, "a new tokenizer", "--out")
        if os.path.isfile(os.path.join(out_dir, "meta.json")) and any(  # prepared data: its shards' ids are its own
                n.endswith(".array_record") for n in os.listdir(out_dir)):
            raise InputError(f"--out {out_dir} holds prepared data (meta.json and its shards): a new tokenizer there "
                             "would replace the vocabulary its token ids were written with, --overwrite or not; "
                             "choose another --out")
    refuse_nested(out_dir, "--out", job="")  # nor inside one, nor a run's model/ (its export replaced it)
    target = os.path.join(out_dir, "vocab.txt" if kind == "wordpiece" else "spiece.model")
    present = [os.path.join(out_dir, n) for n in TOKENIZER_FILE_NAMES if os.path.exists(os.path.join(out_dir, n))]
    if present and not overwrite:  # another kind's file too: Tokenizer.from_dir would go on reading that one
        raise InputError(f"{present[0]} already exists (a model's tokenizer?); pass --overwrite to replace it, or "
                         f"choose another --out")
    made = make_dirs(out_dir)
    try:
        if kind == "wordpiece":
            path = _train_wordpiece(files, out_dir, vocab_size)
        else:
            path = _train_sentencepiece(files, out_dir, vocab_size, verbose)
    except BaseException:
        for d in made:  # a refused training leaves no empty --out behind
            if not os.listdir(d):
                os.rmdir(d)
        raise
    for other in present:  # --overwrite: the directory ends with this tokenizer alone
        if other != target:
            os.remove(other)
    tok = load(path)
    if tok.vocab_size < vocab_size:
        logging.warning("%s: the corpus supports only %d of the %d vocabulary entries asked for",
                        path, tok.vocab_size, vocab_size)
    return tok
