"""Batches of encoded text, padded to a few lengths instead of all to ``max_seq_length``.

Real sentences are short (movie-review snippets: 27 WordPiece tokens on average, 46 at the 95th percentile): padding
every example to 128 computes mostly padding. Examples are grouped by length into buckets (``"auto"``: four widths
chosen from the training rows' lengths to pad least, and ``max_seq_length``), each batch is cut to its bucket's width,
and so XLA compiles one program per bucket (a fixed, small number) while the tokens computed are mostly real. Cutting
only removes padding (positions past every example's last token): logits and losses equal those of fixed padding up to
float error.

A training epoch's plan is drawn from its seed alone (a permutation of the examples, grouped by bucket into batches,
the batches shuffled when more than one bucket holds rows), so a resumed run finds its position from the step.
"""

from __future__ import annotations

import math

import numpy as np

from squeezebert_jax.errors import InputError

SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids")


AUTO_BUCKETS = 4  # "auto": this many widths chosen from the data (and max_seq_length for longer rows)


def length_buckets(spec, max_length: int, data_lengths=None) -> tuple[int, ...]:
    """The bucket widths, ascending, the last ``max_length``: ``"auto"`` or ``"auto:K"`` (K widths chosen from
    ``data_lengths``, the training rows' lengths, by ``best_widths``; without them: a quarter, a half, three quarters
    and all of ``max_length``, in multiples of 8), ``""``/``"none"`` (fixed padding), or widths ``"32,64,96"``."""
    text = str(spec).strip().lower()
    if text in ("", "none", "off"):
        return (max_length,)
    if text == "auto" or text.startswith("auto:"):
        k = AUTO_BUCKETS
        if text.startswith("auto:"):
            try:
                k = int(text[5:])
            except ValueError:
                k = 0
            if k < 1:
                raise InputError(f"config.length_buckets={spec!r}: auto:K needs a number of widths K >= 1")
        if data_lengths is not None and len(data_lengths):
            widths = set(best_widths(data_lengths, max_length, k))
        else:
            widths = {min(max_length, max(8, math.ceil(max_length * q / 4 / 8) * 8)) for q in (1, 2, 3)}
    else:
        try:
            widths = {int(x) for x in text.split(",") if x.strip()}
        except ValueError:
            raise InputError(f"config.length_buckets={spec!r}: 'auto', 'auto:K', 'none' or widths such as "
                             f"'32,64,96'") from None
        if bad := sorted(w for w in widths if not 1 <= w <= max_length):
            raise InputError(f"config.length_buckets={spec!r}: widths {bad} outside 1..max_seq_length ({max_length})")
    return tuple(sorted(widths | {max_length}))


def best_widths(data_lengths, max_length: int, k: int, step: int = 8) -> tuple[int, ...]:
    """The ``k`` (or fewer) widths, multiples of ``step`` (or ``max_length``), that pad ``data_lengths`` least: each
    length goes to the smallest width that holds it, and the total of the widths is the smallest (dynamic programming
    over the candidate widths). Movie-review snippets (mean 27 pieces): 24, 32, 48, 80, padding 22% of the tokens
    computed, against 35% for the quarters of 128 and 44% for transformers' per-batch padding of random batches."""
    lengths = np.minimum(np.asarray(data_lengths, np.int64), max_length)
    cands = sorted({min(max_length, -(-max(int(x), 1) // step) * step) for x in np.unique(lengths)})
    upto = np.searchsorted(np.sort(lengths), cands, side="right")  # rows of length <= each candidate
    m, k = len(cands), min(k, len(cands))
    cost = np.full((k + 1, m), np.inf)
    back = np.full((k + 1, m), -1)
    cost[1] = upto * np.asarray(cands)
    for t in range(2, k + 1):
        for i in range(1, m):
            options = cost[t - 1][:i] + (upto[i] - upto[:i]) * cands[i]
            j = int(np.argmin(options))
            cost[t, i], back[t, i] = options[j], j
    t, i, out = int(np.argmin(cost[1:, m - 1])) + 1, m - 1, []
    while i >= 0 and t >= 1:
        out.append(cands[i])
        i, t = int(back[t, i]), t - 1
    return tuple(sorted(out))


def lengths(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Each example's length: the position after its last real token (the attention mask's)."""
    mask = arrays["attention_mask"]
    if mask.ndim == 3:  # multiple choice [N, choices, S]: the longest choice
        mask = mask.any(1)
    return np.where(mask.any(1), mask.shape[1] - np.argmax(mask[:, ::-1], axis=1), 0)


def bucket_index(arrays: dict[str, np.ndarray], buckets: tuple[int, ...]) -> np.ndarray:
    return np.searchsorted(np.asarray(buckets), lengths(arrays))


def assemble(arrays: dict[str, np.ndarray], idx: np.ndarray, batch_size: int, width: int) -> dict[str, np.ndarray]:
    """Rows ``idx`` as one batch of ``batch_size`` rows cut to ``width`` positions (the last axis of the sequences: a
    multiple-choice row is [choices, S]): padded with copies of its first row that carry ``weights`` 0."""
    pad = batch_size - len(idx)
    rows = np.concatenate([idx, np.repeat(idx[:1], pad)]) if pad else idx
    b = {k: (v[rows, ..., :width] if k in SEQUENCE_KEYS or _token_labels(k, v) else v[rows]) for k, v in arrays.items()}
    b["weights"] = np.concatenate([np.ones(len(idx), np.float32), np.zeros(pad, np.float32)])
    return b


def _token_labels(key: str, v: np.ndarray) -> bool:
    """A token task's labels: integer ids per position (a multilabel task's multi-hot labels are floats)."""
    return key == "labels" and v.ndim == 2 and v.dtype.kind == "i"


def batches(arrays: dict[str, np.ndarray], batch_size: int, order: np.ndarray | None = None):
    """Fixed-shape batches in ``order`` (all rows at full width); the last one is padded with ``weights`` 0."""
    n = len(arrays["input_ids"])
    order = np.arange(n) if order is None else order
    width = arrays["input_ids"].shape[-1]
    for i in range(0, n, batch_size):
        yield assemble(arrays, order[i:i + batch_size], batch_size, width)


def epoch_plan(arrays: dict[str, np.ndarray], batch_size: int, buckets: tuple[int, ...],
               seed: int) -> list[tuple[np.ndarray, int]]:
    """One training epoch as ``[(row indices, width)]``: the rows in a permutation drawn from ``seed``, each bucket's
    in batches of ``batch_size`` (the last one short), the batches in a shuffled order (when one bucket holds every
    row: in order, so fixed padding is the plain permutation's batches)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(arrays["input_ids"]))
    which = bucket_index(arrays, buckets)[order]
    plan = [(idx[i:i + batch_size], width) for k, width in enumerate(buckets) for idx in [order[which == k]]
            for i in range(0, len(idx), batch_size)]
    if len(set(which.tolist())) > 1:
        plan = [plan[i] for i in rng.permutation(len(plan))]
    return plan


def steps_per_epoch(arrays: dict[str, np.ndarray], batch_size: int, buckets: tuple[int, ...]) -> int:
    counts = np.bincount(bucket_index(arrays, buckets), minlength=len(buckets))
    return int(sum(-(-int(c) // batch_size) for c in counts))


def eval_plan(arrays: dict[str, np.ndarray], batch_size: int, buckets: tuple[int, ...]):
    """``[(row indices, width)]`` covering every row once, by bucket in row order (evaluation and prediction)."""
    which = bucket_index(arrays, buckets)
    return [(idx[i:i + batch_size], width) for k, width in enumerate(buckets) for idx in [np.flatnonzero(which == k)]
            for i in range(0, len(idx), batch_size)]
