"""Layer-wise and pre-trained distillation: students built from a teacher's layers, PKD / TinyBERT intermediate-layer
losses, and unlabeled transfer text for the teacher's soft labels.

Layers are numbered as the papers do, 1..L (layer i's output is ``EncoderStates.hidden_states[i]``); in a layer
map, 0 is the embeddings' output.

Students (``init_student_from_teacher``): the embeddings, the chosen layers, the pooler and the head are copied
exactly. "skip" takes every k-th layer starting with the first (1, 3, 5 of 6: DistilBERT's and PKD-Skip's start),
"first" the first k (PKD's and Turc et al.'s "truncated" start), or an explicit list of 1-based layers.

Losses (added to the final-layer loss of ``losses.task_loss``; teacher states computed in the train step):
  - patient (PKD, Sun et al. 2019): per mapped pair, the squared L2 distance between the L2-normalised [CLS]
    hidden states of student and teacher, averaged over pairs and examples;
  - hidden (TinyBERT, Jiao et al. 2019): MSE between hidden states, over real tokens, channels and pairs;
  - attention (TinyBERT): MSE between attention probabilities (softmax, before dropout), over real query
    tokens, heads, keys and pairs (pairs with layer 0 are skipped: the embeddings have no attention).
When student and teacher widths differ, the student's states go through a learned linear projection
(``init_projection``) trained with the student and not saved with it.

Pre-trained distillation (Turc et al. 2019, "Well-Read Students Learn Better"): unlabeled text
(``read_transfer_text``) labelled by the teacher's logits (cached as the labeled set's) joins the labeled set; its
rows are trained on the teacher's soft labels alone (teacher weight 1).
Layer maps (``layer_pairs``): "skip" = PKD-Skip (student i -> teacher i*T/S, i < S), "last" = PKD-Last (student
i -> teacher T-S+i, i < S), "uniform" = TinyBERT (0 -> 0 and i -> i*T/S for every i <= S), or "s:t,s:t,...".
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import convert, inference, tasks
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import warn_texts
from squeezebert_jax.files import check_input_file, has_text
from squeezebert_jax.evaluation import load_for_task
from squeezebert_jax.glue import GlueExample
from squeezebert_jax.pretrained import atomic_write, build_model, load_pretrained, not_a_model_dir, save_pretrained
from squeezebert_jax.tokenizer import Tokenizer

_LAYER = re.compile(r"^encoder/layers/(\d+)/")


# --------------------------------------------------------------------------------------------------
# Students from a teacher's layers
# --------------------------------------------------------------------------------------------------

def student_layer_choice(mapping, num_layers: int, teacher_layers: int) -> list[int]:
    """The teacher layers (1-based) a ``num_layers`` student is built from: "skip", "first", or a list / "1,3,5"."""
    if not 1 <= num_layers <= teacher_layers:
        raise InputError(f"config.student_layers={num_layers}: a student of 1 to {teacher_layers} layers, built from "
                         f"the layers of init_from's {teacher_layers}-layer model")
    if mapping == "skip":
        return [1 + i * teacher_layers // num_layers for i in range(num_layers)]
    if mapping == "first":
        return list(range(1, num_layers + 1))
    try:
        chosen = [int(x) for x in (mapping.split(",") if isinstance(mapping, str) else mapping)]
    except (TypeError, ValueError):
        raise InputError(f"student layer map {mapping!r}: expected 'skip', 'first' or 1-based teacher layers "
                         f"such as '1,3,5'") from None
    # numbered from 0, checked alone: before init_from's depth is known, the range would name a placeholder's
    if (low := next((t for t in chosen if t < 1), None)) is not None:
        raise InputError(f"student layer map {mapping!r}: teacher layer {low}; the teacher's layers are numbered "
                         "from 1")
    if len(chosen) != num_layers or not all(1 <= t <= teacher_layers for t in chosen):
        raise InputError(f"student layer map {mapping!r}: expected {num_layers} teacher layers in 1..{teacher_layers}")
    if len(set(chosen)) != len(chosen):  # two student layers of one teacher layer: the weights' map breaks
        twice = next(t for t in chosen if chosen.count(t) > 1)
        raise InputError(f"student layer map {mapping!r}: teacher layer {twice} named twice (each student layer is "
                         "another teacher layer)")
    return chosen


def check_map_forms(layer_map, student_layer_map) -> None:
    """The two layer maps' forms, checked with the other settings (their layers against the models when those load),
    whether or not a teacher or a shallower student uses them: a typo is named, not left to the run that uses it."""
    if layer_map not in LAYER_MAPS:
        layer_pairs(layer_map, _ANY_DEPTH, _ANY_DEPTH)
    if student_layer_map not in ("skip", "first"):  # as many student layers as it names
        student_layer_choice(student_layer_map, len(str(student_layer_map).split(",")), _ANY_DEPTH)


_ANY_DEPTH = 10_000  # no model has more layers: the forms are checked, not the layers


def init_student_from_teacher(teacher, num_layers: int, mapping="skip", out_dir: str | None = None, *,
                              overwrite: bool | str = False) -> nnx.Module:
    """A ``num_layers`` student of the teacher's class whose embeddings, chosen layers (``student_layer_choice``),
    pooler and head are the teacher's tensors. ``teacher``: a model or a MODEL_DIR; ``out_dir``: also saved there
    as a MODEL_DIR (with the teacher directory's tokenizer)."""
    source = teacher if isinstance(teacher, (str, os.PathLike)) else None
    model = load_pretrained(source) if source is not None else teacher
    chosen = student_layer_choice(mapping, num_layers, model.config.num_hidden_layers)
    new_index = {t - 1: i for i, t in enumerate(chosen)}
    flat = {}
    for key, value in convert.flat_params(model).items():
        key = key.removeprefix("transformer/")
        m = _LAYER.match(key)
        if m is None or model.config.shared_layers:  # ALBERT: every layer is the one shared layer, run fewer times
            flat[key] = value
        elif int(m[1]) in new_index:
            flat[f"encoder/layers/{new_index[int(m[1])]}/{key[m.end():]}"] = value
    config = model.config.replace(num_hidden_layers=num_layers)
    head = convert.head_name(model)
    student = build_model(convert.Mapped(head, flat), config, head, source=f"student of {source or head}")
    if out_dir is not None:
        save_pretrained(student, out_dir, tokenizer_dir=os.fspath(source) if source is not None else None,
                        overwrite=overwrite)
    return student


# --------------------------------------------------------------------------------------------------
# Pre-trained distillation: unlabeled transfer text (Turc et al., 2019)
# --------------------------------------------------------------------------------------------------

def transfer_paths(paths) -> list[str]:
    """The transfer text files ``distill.transfer_text`` names: a list, or "a.txt,b.txt" (empty names dropped)."""
    if not isinstance(paths, (str, list, tuple)) or not all(isinstance(x, (str, os.PathLike)) for x in (
            [] if isinstance(paths, str) else paths)):
        raise InputError(f"config.distill.transfer_text={paths!r:.80}: text files' paths, as \"a.txt,b.txt\" or a "
                         "list of them")
    return [p for p in (os.fspath(x).strip() for x in (paths.split(",") if isinstance(paths, str) else paths)) if p]


def read_transfer_text(paths, task) -> list[GlueExample]:
    """Unlabeled examples for ``task`` (a GLUE name or a ``tasks`` Task) from text files (``paths``: a list or
    "a.txt,b.txt"): one sentence per line, or for a sentence-pair task two tab-separated sentences per line; blank
    lines are skipped; a line with an empty sentence, a file given twice and a CSV / TSV / JSON file are refused."""
    task = tasks.task_by_name(task)
    pair = len(task.text_columns) == 2
    examples, seen = [], {}
    for path in transfer_paths(paths):
        check_input_file(path, "transfer text ", " of text (a text or tab-separated pair per line)")
        if os.path.realpath(path) in seen:
            raise InputError(f"transfer text {path} is given twice (also as {seen[os.path.realpath(path)]}): its "
                             "lines would count twice")
        seen[os.path.realpath(path)] = path
        if os.path.splitext(path)[1].lower() in (".csv", ".tsv", ".json", ".jsonl"):  # (tables with a header)
            raise InputError(f"transfer text {path}: a {os.path.splitext(path)[1]} file, whose header and quoting "
                             "would be read as sentences; give plain text, a sentence (or a tab-separated pair) "
                             "per line")
        rows = []
        for lineno, cols in tasks.text_lines(path):
            if len(cols) != (2 if pair else 1):
                want = "two tab-separated sentences" if pair else "one sentence (no tab)"
                raise InputError(f"transfer text {path}:{lineno}: {task.name} needs {want} per line, got "
                                 f"{len(cols)} field(s)")
            if not all(map(has_text, cols)):
                raise InputError(f"transfer text {path}:{lineno}: an empty sentence (only white space or invisible "
                                 "marks); remove the line or fill it")
            examples.append(GlueExample(len(examples), cols[0], cols[1] if pair else None, None))
            rows.append((lineno, tuple(cols)))
        warn_texts(path, rows)
    if not examples:
        raise InputError(f"transfer text {paths!r}: no lines")
    return examples


# --------------------------------------------------------------------------------------------------
# Layer maps
# --------------------------------------------------------------------------------------------------

def config_layer_loss(d, student_layers: int, teacher_layers: int) -> LayerLoss | None:
    """The ``distill`` config block's intermediate-layer losses (its weights, over ``layer_map``'s pairs); None when
    their weights are all 0."""
    weights = {f"{k}_weight": float(d[f"{k}_weight"]) for k in ("patient", "hidden", "attention")}
    if not any(weights.values()):
        return None
    return LayerLoss(layer_pairs(d.layer_map, student_layers, teacher_layers), **weights)


# config.distill and config.student_layer_map with their defaults (train/configs/glue.py builds its sections from
# these): without a teacher, fine-tuning's validator refuses the others changed (finetune_settings.check_settings)
SETTINGS = {"teacher": "", "teacher_weight": 0.5, "cache_dir": "", "patient_weight": 0.0, "hidden_weight": 0.0,
            "attention_weight": 0.0, "layer_map": "skip", "transfer_text": ""}
STUDENT_LAYER_MAP = "skip"
LAYER_MAPS = ("skip", "last", "uniform")  # the named layer maps (layer_pairs); else "student:teacher,..." pairs


def layer_pairs(spec, student_layers: int, teacher_layers: int) -> tuple[tuple[int, int], ...]:
    """(student layer, teacher layer) pairs of a layer map (see the module docstring); 0 is the embeddings."""
    s, t = student_layers, teacher_layers
    if spec in LAYER_MAPS and s > t:  # "last" paired student layer 1 with teacher layer -1, "skip" two with one
        raise InputError(f"layer map {spec!r} maps a student onto a deeper teacher, and this {s}-layer student is "
                         f"deeper than the {t}-layer teacher: give the pairs 'student:teacher,...' (e.g. '{s}:{t}')")
    if spec == "skip":
        pairs = [(i, i * t // s) for i in range(1, s)]
    elif spec == "last":
        pairs = [(i, t - s + i) for i in range(1, s)]
    elif spec == "uniform":
        pairs = [(i, i * t // s) for i in range(s + 1)]
    else:
        try:
            items = spec.split(",") if isinstance(spec, str) else list(spec)
            pairs = [tuple(int(x) for x in (p.split(":") if isinstance(p, str) else p)) for p in items]
            if any(len(p) != 2 for p in pairs):
                raise ValueError
        except (TypeError, ValueError):
            raise InputError(f"layer map {spec!r}: expected 'skip', 'last', 'uniform' or pairs "
                             f"'student:teacher,...' such as '1:2,2:4'") from None
        if twice := next((p for i, p in enumerate(pairs) if p in pairs[:i]), None):  # its loss would count twice
            raise InputError(f"layer map {spec!r}: pair {twice[0]}:{twice[1]} given twice")
        for a, b in pairs:
            if not (0 <= a <= s and 0 <= b <= t):
                raise InputError(f"layer map {spec!r}: pair {a}:{b} names a layer the student ({s} layers) or the "
                                 f"teacher ({t} layers) lacks (0 is the embeddings)")
    if not pairs:
        raise InputError(f"layer map {spec!r} pairs no layers of a {s}-layer student with a {t}-layer teacher: "
                         f"give the pairs, e.g. '{s}:{t}'")
    return tuple(pairs)


# --------------------------------------------------------------------------------------------------
# Losses (weights [B]: 0 on padding rows; mask [B, S]: the attention mask)
# --------------------------------------------------------------------------------------------------

def _normalise(x):
    x = x.astype(jnp.float32)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def patient_loss(student_cls, teacher_cls, weights):
    """PKD: student_cls, teacher_cls [P, B, H] -> mean over pairs and examples of |s/|s| - t/|t||^2."""
    per = jnp.sum(jnp.square(_normalise(student_cls) - _normalise(teacher_cls)), -1).mean(0)
    w = weights.astype(jnp.float32)
    return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)


def hidden_mse(student, teacher, mask, weights):
    """TinyBERT hidden states: [P, B, S, H] each -> mean squared difference over real tokens, channels and pairs."""
    m = (mask.astype(jnp.float32) * weights.astype(jnp.float32)[:, None])[None, :, :, None]
    sq = jnp.square(student.astype(jnp.float32) - teacher.astype(jnp.float32))
    return jnp.sum(sq * m) / jnp.maximum(jnp.sum(m) * sq.shape[0] * sq.shape[-1], 1.0)


def attention_mse(student, teacher, mask, weights):
    """TinyBERT attention: [P, B, heads, S, S] each -> mean squared difference over real query rows, heads, keys
    and pairs."""
    m = (mask.astype(jnp.float32) * weights.astype(jnp.float32)[:, None])[None, :, None, :, None]
    sq = jnp.square(student.astype(jnp.float32) - teacher.astype(jnp.float32))
    return jnp.sum(sq * m) / jnp.maximum(jnp.sum(m) * sq.shape[0] * sq.shape[2] * sq.shape[-1], 1.0)


def init_projection(student_width: int, teacher_width: int, seed: int = 0) -> dict:
    """The learned student -> teacher width projection ({} when the widths agree: no projection)."""
    if student_width == teacher_width:
        return {}
    kernel = jax.random.normal(jax.random.key(seed), (student_width, teacher_width)) * 0.02
    return {"kernel": kernel, "bias": jnp.zeros((teacher_width,))}


def _project(h, proj):
    return h if not proj else h.astype(jnp.float32) @ proj["kernel"] + proj["bias"]


@dataclasses.dataclass(frozen=True)
class LayerLoss:
    """The weighted sum of the intermediate-layer losses for one layer map."""

    pairs: tuple[tuple[int, int], ...]
    patient_weight: float = 0.0
    hidden_weight: float = 0.0
    attention_weight: float = 0.0

    def __call__(self, student, teacher, proj, mask, weights) -> tuple[jax.Array, dict[str, jax.Array]]:
        """student, teacher: ``EncoderStates``; returns (weighted sum, {name: unweighted loss})."""
        s_idx = np.array([s for s, _ in self.pairs])
        t_idx = np.array([t for _, t in self.pairs])
        parts = {}
        if self.patient_weight or self.hidden_weight:
            hs = _project(student.hidden_states[s_idx], proj)
            ht = jax.lax.stop_gradient(teacher.hidden_states[t_idx])
            if self.patient_weight:
                parts["patient"] = patient_loss(hs[:, :, 0], ht[:, :, 0], weights)
            if self.hidden_weight:
                parts["hidden"] = hidden_mse(hs, ht, mask, weights)
        if self.attention_weight:
            att = [(s - 1, t - 1) for s, t in self.pairs if s and t]
            sa = student.attentions[np.array([s for s, _ in att])]
            ta = jax.lax.stop_gradient(teacher.attentions[np.array([t for _, t in att])])
            parts["attention"] = attention_mse(sa, ta, mask, weights)
        total = sum(getattr(self, f"{k}_weight") * v for k, v in parts.items())
        return total, parts


# --------------------------------------------------------------------------------------------------
# The teacher in the train step
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LayerTeacher:
    """A teacher's encoder as (graphdef, params) for a jitted train step: its per-layer states are recomputed for
    each batch (caching them would take [layers, N, S, H] floats), without gradient. Pass ``state`` to the step as
    an argument (closing over it would embed the weights in the program as constants)."""

    graphdef: Any
    state: Any

    def states(self, state, input_ids, attention_mask, token_type_ids):
        encoder = nnx.merge(self.graphdef, state)
        return jax.lax.stop_gradient(encoder(input_ids, attention_mask, token_type_ids, collect=True).states)


def _tokens(model_dir: str, role: str) -> list[str]:
    tok = Tokenizer.from_dir(model_dir)
    if tok is None:
        raise not_a_model_dir(model_dir, "tokenizer file (vocab.txt or SentencePiece model)", role)
    return tok.tokens


def layer_teacher(teacher_dir: str, student_dir: str, student_config, loss: LayerLoss, max_length: int,
                  dtype=jnp.float32) -> LayerTeacher:
    """Load ``teacher_dir``'s encoder for the layer losses, after checking that it reads the student's inputs (the
    same vocabulary, ``max_length`` positions) and fits ``loss`` (``check_pair``)."""
    if _tokens(teacher_dir, "teacher ") != _tokens(student_dir, ""):
        raise InputError(f"layer-wise distillation feeds the student's token ids to the teacher, but the "
                         f"vocabularies of {student_dir} and teacher {teacher_dir} differ: use a teacher with the "
                         f"student's tokenizer, or only the final-layer loss (patient/hidden/attention weights 0)")
    teacher = load_pretrained(teacher_dir, dtype=dtype)
    encoder = teacher.transformer if hasattr(teacher, "transformer") else teacher
    if max_length > encoder.config.max_position_embeddings:
        raise InputError(f"max_seq_length {max_length} is more than the max_position_embeddings "
                         f"{encoder.config.max_position_embeddings} of teacher {teacher_dir}")
    check_pair(student_config, encoder.config, loss, student_dir, teacher_dir)
    encoder.eval()
    graphdef, state = nnx.split(encoder)
    return LayerTeacher(graphdef, nnx.to_pure_dict(state))


def check_pair(student_config, teacher_config, loss: LayerLoss, student_dir: str, teacher_dir: str) -> None:
    """The student and teacher can be compared layer by layer: the attention loss needs the same head count."""
    if loss.attention_weight and student_config.num_attention_heads != teacher_config.num_attention_heads:
        raise InputError(f"attention distillation needs the same number of heads: {student_dir} has "
                         f"{student_config.num_attention_heads}, teacher {teacher_dir} has "
                         f"{teacher_config.num_attention_heads} (set distill.attention_weight=0)")
    if loss.attention_weight and not any(s and t for s, t in loss.pairs):
        raise InputError(f"layer map {loss.pairs} has no pair of encoder layers for the attention loss "
                         f"(0 is the embeddings)")


def teacher_logits(teacher_dir: str, task: str, split: str, examples, max_length: int, cache_dir: str,
                   mesh=None) -> np.ndarray:
    """The teacher's logits on ``examples`` (in ``task``'s label order), computed once (data parallel over ``mesh``)
    and cached.

    The cache key covers the teacher (its directory and the size and mtime of its weights and config), the task,
    split and length, and the encoded examples themselves: other data, another order or a retrained teacher is
    never served stale targets."""
    task = tasks.task_by_name(task)
    tok = inference.model_tokenizer(teacher_dir, role="teacher ")
    arrays = task.encode(examples, tok, max_length)
    key = hashlib.sha1(f"{os.path.abspath(teacher_dir)}|{task.name}|{split}|{max_length}".encode())
    for name in sorted(os.listdir(teacher_dir)):
        if name.endswith((".safetensors", ".bin", ".json")):
            st = os.stat(os.path.join(teacher_dir, name))
            key.update(f"|{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    for k in inference.INPUT_KEYS:
        key.update(np.ascontiguousarray(arrays[k]).tobytes())
    path = os.path.join(cache_dir, f"teacher_{task.name}_{split}_{key.hexdigest()[:16]}.npy")
    if os.path.exists(path):
        return _cached_logits(path, len(examples))
    teacher = load_for_task(teacher_dir, task, f"teacher {teacher_dir}")
    logits = inference.predict_logits(teacher, arrays, mesh=mesh)
    os.makedirs(cache_dir, exist_ok=True)
    atomic_write(path, lambda tmp: np.save(tmp, logits))
    return logits


def _cached_logits(path: str, rows: int) -> np.ndarray:
    """A cached teacher's logits, checked: a float array of a row per example, every value finite. A damaged file
    (cut short, another array, NaN) is one line naming it, not a traceback or a run that "diverges"."""
    try:
        logits = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        why = str(e).splitlines()[0][:80]
    else:
        if not (isinstance(logits, np.ndarray) and logits.dtype.kind == "f" and logits.ndim in (1, 2)
                and len(logits) == rows):
            why = f"an array of shape {getattr(logits, 'shape', '?')} and dtype {getattr(logits, 'dtype', '?')}, not " \
                  f"{rows} rows of float logits"
        elif not np.isfinite(logits).all():
            why = "values that are not finite"
        else:
            return logits
    raise InputError(f"teacher cache {path} is damaged ({why}); delete it (the teacher's logits are computed again)")

