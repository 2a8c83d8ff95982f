"""Inference with a model on the devices: the jitted eval forward, batches cut to their length bucket and split over
the mesh, and a MODEL_DIR's tokenizer checked against its vocabulary. Fine-tuning's evaluation, distillation teachers'
logits, GLUE evaluation and ``predict`` all run through here."""

from __future__ import annotations

import functools
import os

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from squeezebert_jax import batching, parallel
from squeezebert_jax.errors import InputError
from squeezebert_jax.pretrained import not_a_model_dir, read_model_config
from squeezebert_jax.model import Structure
from squeezebert_jax.tokenizer import Tokenizer

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class NoClassifierError(InputError):
    """A model without a sequence-classifier head (e.g. saved from pretraining) where a GLUE classifier is needed.
    Not a TaskMismatchError: it fits no task, so ``eval/glue.py --task all`` stops instead of skipping every one."""


def model_tokenizer(model_dir: str, vocab_size: int | None = None, role: str = "") -> Tokenizer:
    """The tokenizer saved in ``model_dir``, refused when it has more ids than the model's ``vocab_size`` (read
    from its config.json when not given): under jax.jit an id past the embedding table is no error, XLA clamps
    the gather and the run goes on with wrong embeddings. ``role`` prefixes messages (e.g. ``"teacher "``)."""
    if not os.path.isdir(model_dir):
        raise not_a_model_dir(model_dir, "tokenizer file (vocab.txt or SentencePiece model)", role)
    tok = Tokenizer.from_dir(model_dir)
    if tok is None:
        raise not_a_model_dir(model_dir, "tokenizer file (vocab.txt or SentencePiece model)", role)
    if vocab_size is None:
        vocab_size = read_model_config(model_dir)[0].vocab_size
    if tok.vocab_size > vocab_size:
        raise InputError(f"{role}{model_dir}: its tokenizer has {tok.vocab_size} ids but the model's vocab_size is "
                         f"{vocab_size} (ids >= {vocab_size} would silently read the wrong embedding): put the "
                         f"tokenizer the model was trained with in {model_dir}, or use a model with vocab_size >= "
                         f"{tok.vocab_size}")
    return tok


@functools.partial(jax.jit, static_argnums=0)
def eval_logits(structure: Structure, state: tuple, b):
    """The eval forward as a pure function of (graphdef, states, batch), jitted once at import: every split and
    epoch of a model (and any model of the same structure) with the same batch shape reuses one program. The batch
    comes split over the mesh's data axis, the weights replicated (or FSDP-sharded: gathered where used)."""
    m = nnx.merge(structure.graphdef, *state)
    return m(b["input_ids"], b["attention_mask"], b["token_type_ids"]).logits


def check_finite(logits: np.ndarray, source: str, on: str = "") -> np.ndarray:
    """``logits``, or one line naming the model (``source``) and the data (``on``) when any is not a finite number: a
    non-finite output is an error, never a score or a prediction (a classifier with NaN weights would otherwise get an
    accuracy and a server file)."""
    bad = ~np.isfinite(logits).reshape(len(logits), -1).all(-1) if len(logits) else np.zeros(0, bool)
    if bad.any():
        raise InputError(f"{source}: the model's outputs{' on ' + on if on else ''} are not finite numbers for "
                         f"{int(bad.sum())} of {len(logits)} examples (damaged weights?); no metrics or predictions "
                         f"written")
    return logits


def eval_batch_size(batch_size: int, mesh) -> int:
    """``batch_size`` rounded up to a multiple of the mesh's devices (each device takes the same number of rows)."""
    n = mesh.shape["data"]
    return -(-int(batch_size) // n) * n


def predict_batches(graphdef, state: tuple, arrays: dict[str, np.ndarray], batch_size: int, mesh,
             buckets: tuple[int, ...] | None = None) -> np.ndarray:
    """Logits of an eval-mode ``graphdef`` with ``state`` for every row of ``arrays`` (in their order), batches split
    over ``mesh`` and cut to their length bucket (``batching``; default: the ``auto`` buckets of the rows' lengths)."""
    structure, arrays = Structure(graphdef), {k: arrays[k] for k in INPUT_KEYS}
    buckets = buckets or batching.length_buckets("auto", arrays["input_ids"].shape[-1], batching.lengths(arrays))
    size, out = eval_batch_size(batch_size, mesh), None
    for idx, width in batching.eval_plan(arrays, size, buckets):
        b = batching.assemble(arrays, idx, size, width)
        del b["weights"]
        logits = np.asarray(parallel.to_host(eval_logits(structure, state, parallel.shard_batch(b, mesh))))
        if out is None:  # [N, C], or [N, max_length, C] for a token head (its positions past a bucket: 0)
            per_row = (arrays["input_ids"].shape[1], logits.shape[-1]) if logits.ndim == 3 else logits.shape[1:]
            out = np.zeros((len(arrays["input_ids"]), *per_row), logits.dtype)
        out[(idx, slice(0, width)) if logits.ndim == 3 else idx] = logits[:len(idx)]
    return out if out is not None else np.zeros((0, 1), np.float32)


def predict_logits(model, arrays: dict[str, np.ndarray], batch_size: int = 64, mesh=None,
                   buckets: tuple[int, ...] | None = None) -> np.ndarray:
    """Logits for every row of ``arrays`` with the jitted eval forward (dropout off), data parallel over ``mesh``
    (default: every device; the weights replicated on it), batches cut to their length bucket."""
    mesh = mesh if mesh is not None else parallel.make_mesh()
    model.eval()
    graphdef, *state = nnx.split(model, nnx.Param, ...)
    state = jax.device_put(tuple(state), NamedSharding(mesh, P()))
    return predict_batches(graphdef, state, arrays, batch_size, mesh, buckets)
