"""GLUE fine-tuning (the paper's protocol) with optional final-layer distillation and MNLI -> task transfer.

AdamW (batch 16, b1 0.9, b2 0.999, no weight decay), linear warmup + linear decay, evaluation after every
epoch, the best epoch exported as WORKDIR/model (a MODEL_DIR with its tokenizer), dev metrics in
WORKDIR/eval_results.json, training rows every ``log_every`` steps and each epoch's evaluation in
WORKDIR/metrics.jsonl. The run is pretraining's trainer (``squeezebert_jax.trainer``): the mesh, the donated
``train_step(state, batch, rng, lr)``, orbax checkpoints, SIGTERM saves, exact resume and the config history.

Distillation (paper §4.2.2, final layer only): the target is ``w * teacher + (1 - w) * label`` — soft
cross-entropy against the mix of the teacher's softmax and the one-hot label for classification, mean squared
error against the mixed score for STS-B. ``w`` = ``distill.teacher_weight`` (the paper's 1 - alpha). Teacher
logits are computed once from any teacher MODEL_DIR and cached on disk.

Beyond the paper (``squeezebert_jax.distill``): a student of fewer layers built from ``init_from``'s
(``student_layers``), PKD / TinyBERT intermediate-layer losses against the teacher's states, recomputed in the train
step (``distill.patient_weight`` ...), and unlabeled transfer text on the teacher's soft labels
(``distill.transfer_text``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from squeezebert_jax import (batching, checkpointing, distill, files, glue, inference, loop, optim, parallel,
                             predict, prune, reporting, tasks, trainer)
from squeezebert_jax.evaluation import align_to_task
from squeezebert_jax.errors import InputError
from squeezebert_jax.pretrained import (
    atomic_write,
    load_pretrained,
    read_model_config,
    save_pretrained,
)
from squeezebert_jax.model import ATTENTION, Structure, set_execution
from squeezebert_jax.tokenizer import Tokenizer

log = logging.getLogger(__name__)



# --------------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------------

def task_loss(logits, labels, weights, teacher=None, teacher_weight=0.0, regression: bool = False):
    """A single-label classifier's cross-entropy (over its labels, or a multiple-choice model's choices), or with
    ``regression`` a regressor's squared error: the weighted mean over real examples (weights 0 on padding), towards
    the teacher's soft labels mixed in when ``teacher`` is given (see the module docstring). ``teacher_weight``: a
    number, or one per example (1 on unlabeled transfer rows: the soft-label cross-entropy alone)."""
    w = weights.astype(jnp.float32)
    tw = jnp.asarray(teacher_weight, jnp.float32)  # a scalar, or per example [B] (transfer rows: 1)
    if regression:
        pred = logits[..., 0]
        target = labels.astype(jnp.float32)
        if teacher is not None:
            target = tw * teacher[..., 0] + (1.0 - tw) * target
        per = jnp.square(pred - target)
    else:
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
        target = jax.nn.one_hot(labels, logits.shape[-1])
        if teacher is not None:
            tw = tw[..., None]
            target = tw * jax.nn.softmax(teacher.astype(jnp.float32), -1) + (1.0 - tw) * target
        per = -jnp.sum(target * logp, -1)
    return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)


def multilabel_loss(logits, labels, weights):
    """Multilabel: a sigmoid cross-entropy per label (``labels`` multi-hot [B, L]), their mean per example, the
    weighted mean over real examples."""
    w = weights.astype(jnp.float32)
    per = optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), labels).mean(-1)
    return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)


def token_loss(logits, labels, weights):
    """Token classification: the mean cross-entropy of the scored pieces (``labels`` [B, S]; ``tasks.IGNORE`` on the
    pieces not scored) of the real examples."""
    w = weights.astype(jnp.float32)
    valid = (labels != tasks.IGNORE).astype(jnp.float32) * w[:, None]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
    return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1.0)


def span_loss(logits, start_positions, end_positions, attention_mask, weights):
    """Extractive QA: the mean of the start and end positions' cross-entropies over each real example's positions
    (``logits`` [B, S, 2]); the padding is left out of the softmax, so a batch cut to its length bucket gives the loss
    of one padded to ``max_seq_length`` (transformers' ``run_qa`` keeps the padding in)."""
    w = weights.astype(jnp.float32)
    x = jnp.where(attention_mask[..., None] > 0, logits.astype(jnp.float32), -1e9)
    logp = jax.nn.log_softmax(x, axis=1)
    nll = -(jnp.take_along_axis(logp[..., 0], start_positions[:, None], 1)[:, 0]
            + jnp.take_along_axis(logp[..., 1], end_positions[:, None], 1)[:, 0]) / 2
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


# The training loss of each ``tasks.Task.loss``: ``(logits, batch, teacher_weight) -> the batch's weighted mean``. A
# batch holds the teacher's logits (``teacher``) only when distilling, and its own ``teacher_weight`` per row only
# with transfer text; ``teacher_weight`` (distill.teacher_weight) serves the others.
LOSSES = {
    "cross_entropy": lambda logits, b, tw: task_loss(logits, b["labels"], b["weights"], b.get("teacher"),
                                                     b.get("teacher_weight", tw)),
    "mse": lambda logits, b, tw: task_loss(logits, b["labels"], b["weights"], b.get("teacher"),
                                           b.get("teacher_weight", tw), regression=True),
    "sigmoid_bce": lambda logits, b, tw: multilabel_loss(logits, b["labels"], b["weights"]),
    "token_cross_entropy": lambda logits, b, tw: token_loss(logits, b["labels"], b["weights"]),
    "span_cross_entropy": lambda logits, b, tw: span_loss(logits, b["start_positions"], b["end_positions"],
                                                          b["attention_mask"], b["weights"]),
}


# --------------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------------

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
        return np.load(path)
    teacher = align_to_task(load_pretrained(teacher_dir), task, f"teacher {teacher_dir}")
    logits = inference.predict_logits(teacher, arrays, mesh=mesh)
    os.makedirs(cache_dir, exist_ok=True)
    atomic_write(path, lambda tmp: np.save(tmp, logits))
    return logits


# --------------------------------------------------------------------------------------------------
# The fine-tuning run
# --------------------------------------------------------------------------------------------------

def _better(score: float, best: float) -> bool:
    """A NaN score (e.g. STS-B correlation of constant predictions) never wins, and never blocks a later one."""
    return not math.isnan(score) and (math.isnan(best) or score > best)


def _layer_distillation(config, student_cfg, dtype):
    """(LayerLoss, LayerTeacher, projection params) for the config's intermediate-layer losses, or (None, None, {})
    when their weights are all 0. ``student_cfg``: the student's architecture."""
    d = config.distill
    if not any(float(d[f"{k}_weight"]) for k in ("patient", "hidden", "attention")):
        return None, None, {}
    if not d.teacher:
        raise InputError("distill.patient_weight / hidden_weight / attention_weight need a distill.teacher MODEL_DIR")
    teacher_cfg = read_model_config(d.teacher)[0]
    loss = distill.config_layer_loss(d, student_cfg.num_hidden_layers, teacher_cfg.num_hidden_layers)
    teacher = distill.layer_teacher(d.teacher, config.init_from, student_cfg, loss, config.max_seq_length, dtype)
    proj = distill.init_projection(student_cfg.hidden_size, teacher_cfg.hidden_size, config.seed)
    log.info("layer distillation from %s: pairs %s, weights %s%s", d.teacher, loss.pairs,
             {k: getattr(loss, f"{k}_weight") for k in ("patient", "hidden", "attention")},
             f", projection {student_cfg.hidden_size} -> {teacher_cfg.hidden_size}" if proj else "")
    return loss, teacher, proj


def make_train_step(graphdef, rest, tx, w_teacher: float, loss, layer_loss=None, layer_teacher=None):
    """``train_step(state, batch, rng, lr[, teacher_state]) -> (state, metrics)`` (``trainer.make_train_step``): the
    task's ``loss`` (a ``LOSSES`` value; with the teacher's soft labels when the batch has them) plus the layer losses,
    and the AdamW update at rate ``lr``. ``state["params"]`` is ``{"model": ...}``, with ``"proj"`` (the layer losses'
    width projection, trained, never exported) when it has one; ``teacher_state`` (the layer losses' teacher) is an
    input, not a constant of the program."""

    def loss_fn(trainable, b, rng, norm, teacher_state=None):
        del norm  # one microbatch: the loss is the batch's weighted mean
        m = nnx.merge(graphdef, trainable["model"], rest)
        nnx.reseed(m, dropout=rng, default=rng)
        m.train()
        inputs = (b["input_ids"], b["attention_mask"], b["token_type_ids"])
        out = m(*inputs, collect=True) if layer_loss is not None else m(*inputs)
        value = loss(out.logits, b, w_teacher)
        if layer_loss is None:
            return value, {}
        extra, parts = layer_loss(out.states, layer_teacher.states(teacher_state, *inputs), trainable.get("proj", {}),
                                  b["attention_mask"], b["weights"])
        return value + extra, parts

    return trainer.make_train_step(loss_fn, tx)


_STEPS = trainer.StepCache()


@dataclasses.dataclass
class FinetuneStep:
    """What a fine-tuning run trains with: AdamW, the rate of each step, the train state's init, shardings and abstract
    shape, and the jitted step. ``finetune`` runs ``step_fn(state, batch, rng, learning_rates[i], *consts)``;
    ``train/compile.py`` compiles the very same object for a TPU/GPU topology (``aot.compile_finetune``)."""

    tx: Any
    learning_rates: np.ndarray  # [total_steps] float32: warmup + linear decay
    init: Any  # trainable -> the train state at step 0
    shardings: Any
    abstract: Any  # the train state as ShapeDtypeStructs carrying their shardings
    step_fn: Any


def build_step(config: ml_collections.ConfigDict, graphdef, rest, trainable, total_steps: int, mesh,
               loss, layer_loss=None, layer_teacher=None) -> FinetuneStep:
    """AdamW over ``total_steps`` and the jitted, sharded step of ``loss`` (the task's, ``LOSSES[task.loss]``) for
    ``trainable`` (``{"model": params[, "proj"]}``; arrays or ShapeDtypeStructs: only their shapes are read). Reused
    by a later run in the process with an equal model and settings (a sweep, the GLUE table): the cache key holds all
    the step closes over (AdamW's only setting is the weight decay; the rate is an input). A layer-distillation step
    (it closes over the teacher's structure) is built for its run alone."""
    tx, rates = optim.adamw_finetune(config.learning_rate, total_steps, warmup_fraction=config.warmup_fraction,
                                     weight_decay=config.weight_decay)

    def init(p):
        return {"step": jnp.asarray(0, jnp.int32), "params": p, "opt_state": tx.init(p)}

    shardings, abstract = trainer.train_state_shardings(init, trainable, mesh, config.fsdp)
    w_teacher = float(config.distill.teacher_weight) if config.distill.teacher else 0.0
    build = lambda: trainer.jit_train_step(  # noqa: E731
        make_train_step(graphdef, rest, tx, w_teacher, loss, layer_loss, layer_teacher), shardings, mesh,
        num_consts=1 if layer_loss is not None else 0)
    leaves, treedef = jax.tree.flatten(shardings)
    step_fn = build() if layer_loss is not None else _STEPS.get(
        (Structure(graphdef), trainer.fingerprint(rest), config.weight_decay, w_teacher, loss, treedef,
         tuple(leaves)), build)
    return FinetuneStep(tx, rates, init, shardings, abstract, step_fn)


LAYERS = {"scan": (True, "minimal"), "unrolled": (False, "none")}


def layer_execution(layers: str, platform: str) -> tuple[bool | None, str | None]:
    """(scan_layers, remat) for ``config.layers`` on ``platform``: ``scan`` (the layers under one ``lax.scan``, each
    keeping only its named matmul outputs for the backward pass: accelerators' compile time and memory), ``unrolled``
    (every layer its own code, nothing recomputed: on a 2-core Xeon, MiniLM's fine-tuning step at batch 16 x 32 runs
    56 examples/s against scan's 51), ``auto``: unrolled on CPU, scan elsewhere. The numbers are the same either way."""
    if layers == "auto":
        layers = "unrolled" if platform == "cpu" else "scan"
    return LAYERS[layers]


def check_settings(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Every training setting against its range, before anything is loaded or compiled: one line naming the setting,
    its value and what is valid."""

    def value(name):
        v = config
        for part in name.split("."):
            v = v[part]
        return v

    def need(ok: bool, name: str, valid: str):
        if not ok:
            raise InputError(f"config.{name}={value(name)!r}: {valid}")

    def number(name, lo=None, hi=None, lo_open=False, hi_open=False) -> bool:
        v = value(name)
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and (lo is None or (v > lo if lo_open else v >= lo))
                and (hi is None or (v < hi if hi_open else v <= hi)))

    def integer(name, lo) -> bool:
        v = value(name)
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    need(number("learning_rate", 0, lo_open=True), "learning_rate", "a finite rate > 0")
    for name in ("num_epochs", "batch_size", "log_every", "checkpoint_every", "keep_checkpoints", "eval_batch_size",
                 "preemption_sync_every"):
        need(integer(name, 1), name, "an integer >= 1")
    parallel.check_num_devices(config.num_devices, count=False)  # counted by make_mesh
    zero_means = {"max_train_examples": "every row", "student_layers": "init_from's depth"}
    for name, meaning in zero_means.items():
        need(integer(name, 0), name, f"an integer >= 0 (0: {meaning})")
    need(number("warmup_fraction", 0, 1), "warmup_fraction", "a fraction in [0, 1]")
    need(number("weight_decay", 0), "weight_decay", "a finite decay >= 0")
    for name in ("dropout", "attention_dropout"):
        need(value(name) is None or number(name, 0, 1, hi_open=True), name, "a probability in [0, 1), or unset "
             "(init_from's own)")
    need(number("distill.teacher_weight", 0, 1), "distill.teacher_weight", "a share in [0, 1] (1: the teacher's "
         "soft labels alone)")
    for name in ("patient_weight", "hidden_weight", "attention_weight"):
        need(number(f"distill.{name}", 0), f"distill.{name}", "a finite weight >= 0 (0: off)")
    need(number("prune.target", 0, 1, hi_open=True), "prune.target", "a sparsity in [0, 1) (0: off)")
    need(number("prune.begin", 0, 1) and number("prune.end", 0, 1) and config.prune.begin <= config.prune.end,
         "prune.begin", f"a fraction of the run with 0 <= prune.begin <= prune.end <= 1 (prune.end is "
         f"{config.prune.end!r})")
    need(integer("prune.every", 1), "prune.every", "an integer >= 1")
    for name in ("max_query_length", "doc_stride", "max_answer_length", "n_best"):
        need(integer(f"data.{name}", 1), f"data.{name}", "an integer >= 1")
    need(number("data.null_threshold"), "data.null_threshold", "a finite score margin")
    need(integer("max_seq_length", 2), "max_seq_length", "an integer >= 2 ([CLS] and [SEP])")
    need(config.layers in ("auto", *LAYERS), "layers", "auto, scan or unrolled")
    need(config.attention in ATTENTION, "attention", " or ".join(ATTENTION))
    need(config.rng_impl in trainer.RNG_IMPLS, "rng_impl", " or ".join(trainer.RNG_IMPLS))
    need(config.attention == "reference" or not config.attention_dropout, "attention_dropout",
         f"0 or unset with attention 'fused' (the fused kernel drops nothing out of the attention probabilities; "
         f"--config.attention=reference keeps attention_dropout={config.attention_dropout})")
    batching.length_buckets(config.length_buckets, config.max_seq_length)  # its own one-line refusal
    need(config.batch_size % num_devices == 0, "batch_size",
         f"a multiple of the {num_devices} devices of the mesh (each takes the same number of rows; or set "
         f"config.num_devices)")


# The settings that define a fine-tuning run: what it trains on, which rows land at which step, what they are trained
# towards, and over how many steps. Each start records them, with the bytes of the data files and model directories
# they name (``run_stream``); a resume with any of them changed is refused (``trainer.check_stream``). The first ones,
# RUN_NAMES, name the run: a workdir holding a run of another is refused even before its first checkpoint (its model,
# results and metrics are that run's). Any other setting may change on resume, logged at WARNING
# (``trainer.record_config``): log_every, checkpoint_every, keep_checkpoints, eval_batch_size, learning_rate,
# warmup_fraction, dropout, num_devices, fsdp, layers, attention, ...
RUN_NAMES = ("task", "init_from", "data_dir", "data.kind", "data.train_file", "data.validation_file", "student_layers")
RUN_SETTINGS = RUN_NAMES + ("skip_malformed", "data.text_columns", "data.label_column", "data.labels",
                            "data.choice_columns", "data.max_query_length", "data.doc_stride", "max_seq_length",
                            "length_buckets", "batch_size", "num_epochs", "max_train_examples", "seed",
                            "distill.teacher", "distill.teacher_weight", "distill.transfer_text")


def _check_workdir(workdir: str, config: ml_collections.ConfigDict) -> None:
    """A workdir holds one fine-tuning run: its own is resumed; one of another task or model (``RUN_NAMES``) is
    refused (its model and results would be replaced and the metrics mixed)."""
    history = trainer.read_config_history(workdir)
    if not history:
        return
    was = history[-1]["config"]
    now = json.loads(config.to_json_best_effort())
    for key in RUN_NAMES:
        a, b = was, now
        for part in key.split("."):
            a, b = (a or {}).get(part), (b or {}).get(part)
        if a is not None and a != b:
            raise InputError(f"{workdir} holds the fine-tuning run of {key} {a!r}, not {b!r}: use another --workdir "
                             f"(its model, results and checkpoints are left as they are)")


def run_stream(config: ml_collections.ConfigDict, spec) -> dict:
    """The fingerprint of this run's training stream (``trainer.run_stream``): ``RUN_SETTINGS``, the sha256 of the
    files and model directories they name (a GLUE_DIR's split files, a ``hf:``/``tfds:`` dataset by its spec), and the
    task's label names as read from its files."""
    sources = {"init_from": trainer.source_identity(config.init_from)}
    if config.task == "files":
        sources |= {f"data.{s}_file": trainer.source_identity(config.data[f"{s}_file"])
                    for s in ("train", "validation") if config.data[f"{s}_file"]}
    elif config.data_dir:
        sources["data_dir"] = [trainer.source_identity(glue.glue_tsv_path(config.task, config.data_dir, s))
                               for s in ("train", *spec.eval_splits)]
    if config.distill.teacher:
        sources["distill.teacher"] = trainer.source_identity(config.distill.teacher)
    if config.distill.transfer_text:
        sources["distill.transfer_text"] = [trainer.source_identity(p.strip())
                                            for p in config.distill.transfer_text.split(",") if p.strip()]
    return trainer.run_stream(config, RUN_SETTINGS, sources,
                              {"task labels": list(spec.labels) if spec.labels else None})


@dataclasses.dataclass
class TaskData:
    """What one fine-tuning run trains and evaluates on: encoded rows (the training rows with the teacher's logits
    and per-row teacher weights when distilling) and each eval split's."""

    train: dict[str, np.ndarray]
    evals: dict[str, dict[str, np.ndarray]]
    num_labeled: int
    num_transfer: int
    tests: dict[str, list] = dataclasses.field(default_factory=dict)  # your own data's test rows, read before training


def load_task_data(config: ml_collections.ConfigDict, tok: Tokenizer, workdir: str, mesh) -> TaskData:
    """The task's splits, encoded; with a teacher, its logits on the training rows (cached; computed on ``mesh``);
    with ``distill.transfer_text``, the unlabeled rows on the teacher's soft labels alone."""
    task = tasks.resolve(config)
    load = task.load
    encode = lambda ex: task.encode(ex, tok, config.max_seq_length)  # noqa: E731
    if (config.distill.teacher or config.distill.transfer_text) and task.kind not in ("classification", "regression"):
        raise InputError(f"distillation (distill.teacher, distill.transfer_text) is for single-label classifiers "
                         f"and regression, not {task.kind}")
    train_ex = load("train")
    if config.max_train_examples:
        train_ex = train_ex[:config.max_train_examples]
    train = encode(train_ex)
    evals = {s: encode(load(s)) for s in task.eval_splits}
    if config.distill.transfer_text and not config.distill.teacher:
        raise InputError("distill.transfer_text is labelled by the teacher's logits: set distill.teacher")
    transfer_ex = distill.read_transfer_text(config.distill.transfer_text, task) \
        if config.distill.transfer_text else []
    if config.distill.teacher:
        cache = config.distill.cache_dir or os.path.join(workdir, "teacher_cache")
        teacher = functools.partial(teacher_logits, config.distill.teacher, task,
                                    max_length=config.max_seq_length, cache_dir=cache, mesh=mesh)
        train["teacher"] = teacher(split="train", examples=train_ex).astype(np.float32)
    if transfer_ex:  # pre-trained distillation: unlabeled rows trained on the teacher's soft labels alone
        extra = encode(transfer_ex)
        extra["labels"] = np.zeros_like(extra["labels"])  # unused: teacher weight 1
        extra["teacher"] = teacher(split="transfer", examples=transfer_ex).astype(np.float32)
        train["teacher_weight"] = np.full(len(train["input_ids"]), config.distill.teacher_weight, np.float32)
        extra["teacher_weight"] = np.ones(len(transfer_ex), np.float32)
        train = {k: np.concatenate([v, extra[k]]) for k, v in train.items() if k in extra}
        log.info("%d labeled + %d transfer-text examples", len(train_ex), len(transfer_ex))
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions",
                        "teacher", "teacher_weight") if k in train]
    # your own data's test file is read (and refused) before training, and predicted by the best model after it; a
    # GLUE test split is predicted in the GLUE server's format by eval/glue.py --predict test
    tests = {s: load(s) for s in task.test_splits} if not isinstance(task, tasks.GlueTask) else {}
    return TaskData({k: train[k] for k in keys}, evals, len(train_ex), len(transfer_ex), tests)


def _host_losses(values) -> list[float]:
    return [float(v) for v in jax.device_get(values)]


def finetune(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> dict[str, Any]:
    """Fine-tune ``config.init_from`` on ``config.task`` in ``workdir``; returns the eval results dict.

    The run is data parallel over the mesh (``num_devices``, ``fsdp`` as in pretraining): the shared donated step
    (``trainer.make_train_step``), orbax checkpoints every ``checkpoint_every`` steps and at each epoch's end (the data
    position is the step: each epoch's order is drawn from ``seed + epoch``), SIGTERM saves and stops, a rerun resumes
    exactly (on the data and ``RUN_SETTINGS`` the run began with: a resume on others is refused). After each epoch the
    dev splits are evaluated on the mesh and the best epoch is exported as WORKDIR/model. A pretraining (or bare
    encoder) MODEL_DIR gets a new classifier head; a classifier for another label count keeps its encoder and gets a new
    head too. Nothing is written to ``workdir`` before the settings and inputs are checked; one run per workdir
    (``files.RunLock``), and a workdir holding files of no fine-tuning run (a MODEL_DIR, a pretraining run) is refused
    unless ``overwrite``."""
    workdir = os.fspath(workdir)

    # -- Mesh and settings -------------------------------------------------------------------------
    parallel.maybe_initialize_distributed()
    mesh = parallel.make_mesh(config.num_devices or None)
    check_settings(config, mesh.shape["data"])
    files.check_run_dir(workdir, "fine-tuning", overwrite)
    _check_workdir(workdir, config)
    with files.RunLock(workdir, "fine-tuning") if jax.process_index() == 0 else contextlib.nullcontext():
        return _finetune(config, workdir, mesh)


def _finetune(config: ml_collections.ConfigDict, workdir: str, mesh) -> dict[str, Any]:
    spec = tasks.resolve(config)  # a GLUE task, or the user's files (their labels read here)
    num_labels = spec.num_labels
    if not spec.eval_splits:
        raise InputError("config.data.validation_file is required: each epoch is evaluated on it and the best one "
                         "exported")

    # -- Models, tokenizers and data ---------------------------------------------------------------
    tok = inference.model_tokenizer(config.init_from)
    model_cfg = read_model_config(config.init_from)[0]
    if config.max_seq_length > model_cfg.max_position_embeddings:
        raise InputError(f"max_seq_length {config.max_seq_length} is more than the max_position_embeddings "
                         f"{model_cfg.max_position_embeddings} of {config.init_from}: set max_seq_length <= "
                         f"{model_cfg.max_position_embeddings}")
    if config.prune.target:
        prune.check_prunable(model_cfg, config.init_from, f"config.prune.target={config.prune.target}")
    if config.distill.teacher:
        inference.model_tokenizer(config.distill.teacher, role="teacher ")
    student_cfg = model_cfg
    if config.student_layers:
        distill.student_layer_choice(config.student_layer_map, config.student_layers, model_cfg.num_hidden_layers)
        student_cfg = model_cfg.replace(num_hidden_layers=config.student_layers)
    dtype = trainer.compute_dtype(config)
    layer_loss, layer_teacher, proj = _layer_distillation(config, student_cfg, dtype)
    # a resume finds the data and settings the run began with (its checkpoints are positions in that stream)
    stream = run_stream(config, spec)
    trainer.check_stream(workdir, stream, bool(checkpointing.steps_on_disk(os.path.join(workdir, "checkpoints"))))
    data = load_task_data(config, tok, workdir, mesh)

    overrides = {k: v for k, v in (("hidden_dropout_prob", config.dropout),
                                   ("attention_probs_dropout_prob", config.attention_dropout)) if v is not None}
    init_from = config.init_from
    if config.student_layers:  # a shallower student from init_from's layers (PKD / DistilBERT start)
        init_from = os.path.join(workdir, "student_init")
        distill.init_student_from_teacher(config.init_from, config.student_layers, config.student_layer_map,
                                          out_dir=init_from)
    model = load_pretrained(init_from, spec.head, num_labels=num_labels,
                            dtype=dtype, seed=config.seed, config_overrides=overrides)
    model = align_to_task(model, spec, config.init_from)
    set_execution(model, *layer_execution(config.layers, jax.default_backend()), attention=config.attention)
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)  # plain arrays: safe to close over
    model.eval()
    eval_graphdef = nnx.graphdef(model)  # dropout off; the same parameters
    eval_rest = jax.device_put(rest, NamedSharding(mesh, P()))

    # -- Optimizer, train state and the jitted step ------------------------------------------------
    buckets = batching.length_buckets(config.length_buckets, config.max_seq_length, batching.lengths(data.train))
    steps_per_epoch = batching.steps_per_epoch(data.train, config.batch_size, buckets)
    total = steps_per_epoch * config.num_epochs
    trainable = {"model": params} | ({"proj": proj} if proj else {})
    fs = build_step(config, graphdef, rest, trainable, total, mesh, LOSSES[spec.loss], layer_loss, layer_teacher)
    init, shardings, abstract, step_fn, rates = fs.init, fs.shardings, fs.abstract, fs.step_fn, fs.learning_rates
    replicated = NamedSharding(mesh, P())
    consts = (jax.device_put(layer_teacher.state, replicated),) if layer_loss is not None else ()
    pruner = prune.Pruner.from_config(config.prune, model.config.num_attention_heads, total)
    masks_abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, np.float32), params)

    # -- Restore: the newest readable checkpoint in workdir, else step 0 -----------------------------
    checkpointer = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints,
                                              async_save=config.async_checkpoints, with_data=False, with_meta=True)
    writer = reporting.MetricsWriter(workdir)
    try:
        loop.check_checkpoints_within(checkpointer, total, f"whose run ends at step {total} ({config.num_epochs} "
                                                           f"epochs of {steps_per_epoch} steps)")
        saved_tree = {"train": abstract} | ({"prune_masks": masks_abstract} if pruner is not None else {})
        step, meta = 0, {"history": [], "best": None, "epoch_losses": [], "epoch_parts": [], "epoch_tokens": [0, 0]}
        if restored := checkpointer.restore(lambda s: (saved_tree, None)):
            step, saved = restored
            state, meta = saved["train"], checkpointer.read_meta(step)
            if pruner is not None:
                pruner.masks = jax.device_get(saved["prune_masks"])
                pruner._updated_at, pruner._sparsity = meta["pruner"]
            reporting.say(f"resuming from the checkpoint at step {step} in {checkpointer.directory}")
        else:
            state = jax.device_put(init(trainable), shardings)
        loop.begin(workdir, config, step, writer, stream)
        history, best = meta["history"], meta["best"]
        losses, layer_parts = list(meta["epoch_losses"]), list(meta["epoch_parts"])  # this epoch's, host floats
        tokens = list(meta["epoch_tokens"])  # this epoch's real tokens, and tokens computed (padding included)

        def save(done: int):
            """A checkpoint after step ``done``, with what the epochs so far gave (never of a non-finite state)."""
            losses[:] = _host_losses(losses)
            layer_parts[:] = [{k: float(v) for k, v in p.items()} for p in jax.device_get(layer_parts)]
            loop.check_finite(((done - len(losses) + i + 1, {"loss": x}) for i, x in enumerate(losses)), ("loss",),
                              checkpointer)
            tree = {"train": state} | ({"prune_masks": pruner.masks} if pruner is not None else {})
            extra = {"pruner": [int(pruner._updated_at), float(pruner._sparsity)]} if pruner is not None else {}
            meta = {"history": history, "best": best, "epoch_losses": losses, "epoch_parts": layer_parts,
                    "epoch_tokens": tokens} | extra
            checkpointer.save(done, tree, force=True, meta=json.loads(json.dumps(meta, default=float)))

        # -- Loop: epochs of steps; evaluate after each, keep the best -----------------------------------
        rng = trainer.run_key(config.seed, config.rng_impl)
        window, timer, stopped = [], reporting.Timer(), False
        bar = tqdm(total=total, initial=step, desc=config.task, dynamic_ncols=True,
                   disable=jax.process_index() != 0 or not config.progress)
        with trainer.PreemptionFlag(config.preemption_sync_every) as preempt:
            while step < total:
                epoch, first = divmod(step, steps_per_epoch)
                plan = batching.epoch_plan(data.train, config.batch_size, buckets, config.seed + epoch)
                for idx, width in plan[first:]:
                    b = batching.assemble(data.train, idx, config.batch_size, width)
                    real_tokens = int(b["attention_mask"][b["weights"] > 0].sum())
                    tokens[0], tokens[1] = tokens[0] + real_tokens, tokens[1] + config.batch_size * width
                    state, metrics = step_fn(state, parallel.shard_batch(b, mesh), rng, rates[step], *consts)
                    step += 1
                    losses.append(metrics["loss"])
                    layer_parts.append({k: v for k, v in metrics.items() if k not in trainer.STEP_NORMS + ("loss",)})
                    window.append((metrics, int(b["weights"].sum()), real_tokens))
                    if pruner is not None:  # the update may regrow pruned weights: masked again (re-scored on schedule)
                        pruned = jax.device_put(pruner(step, state["params"]["model"]), shardings["params"]["model"])
                        state = {**state, "params": {**state["params"], "model": pruned}}
                    bar.update(1)
                    if step % config.log_every == 0:
                        writer.write(step, _train_row(window, timer, rates[step - 1]))
                    end_of_epoch = step % steps_per_epoch == 0
                    stopped = preempt.should_stop(step, boundary=end_of_epoch) and step < total
                    if end_of_epoch:
                        break
                    if step % config.checkpoint_every == 0 or stopped:
                        save(step)
                    if stopped:
                        break
                if stopped and step % steps_per_epoch:
                    break
                # the epoch's end: evaluate, export the best, checkpoint
                losses[:] = _host_losses(losses)
                loop.check_finite(((step - len(losses) + i + 1, {"loss": x}) for i, x in enumerate(losses)), ("loss",),
                                  checkpointer)
                train_loss = float(np.mean(losses))
                result = {"epoch": epoch + 1, "step": step, "train_loss": train_loss,
                          "train_padding_share": 1.0 - tokens[0] / max(tokens[1], 1)}
                if pruner is not None:
                    result["sparsity"] = float(pruner.report(state["params"]["model"])["reached"])
                host_parts = jax.device_get(layer_parts)
                for name in host_parts[0] if host_parts else ():  # the layer losses, unweighted: train_patient, ...
                    result[f"train_{name}"] = float(np.mean([float(p[name]) for p in host_parts]))
                eval_state = (state["params"]["model"], eval_rest)
                for split, arr in data.evals.items():
                    logits = inference.predict_batches(eval_graphdef, eval_state, arr, config.eval_batch_size, mesh,
                                                       buckets)
                    if not np.isfinite(logits).all():
                        raise FloatingPointError(f"non-finite logits on {config.task} {split} after epoch {epoch + 1}")
                    for name, value in spec.score(logits, arr).items():
                        result[f"{split}/{name}"] = value
                result["score"] = float(np.mean([result[f"{s}/{spec.main_metric}"] for s in spec.eval_splits]))
                history.append(result)
                writer.write(step, {k: v for k, v in result.items() if k not in ("epoch", "step")})
                bar.set_postfix(score=f"{result['score']:.4f}", loss=f"{train_loss:.4f}")
                # a pruned run keeps only epochs at the target sparsity (the schedule ends by the last step at the latest)
                at_target = pruner is None or pruner.at_target
                if at_target and (best is None or _better(result["score"], best["score"])):
                    best = result
                    _export(model, state["params"]["model"], os.path.join(workdir, "model"), config.init_from,
                            spec.card())
                losses.clear()
                layer_parts.clear()
                tokens[:] = [0, 0]
                save(step)
                if stopped:
                    break
        bar.close()
    finally:
        checkpointer.close()
        writer.close()
    if stopped:
        log.warning("stopped early (signal): checkpoint saved at step %d, exiting cleanly; run again on %s to resume",
                    step, workdir)
        return {"task": config.task, "best": best, "history": history, "preempted": True,
                "checkpoint_step": max(checkpointer.steps_on_disk(), default=None)}
    results = {"task": config.task, "init_from": config.init_from, "best": best, "history": history,
               "train_examples": data.num_labeled, "transfer_examples": data.num_transfer,
               "distill": dict(config.distill), "paper_dev": glue.PAPER_DEV.get(config.task), "preempted": False,
               "labels": list(spec.labels) if spec.labels else None}
    if pruner is not None:
        results["prune"] = dict(config.prune) | {"report": pruner.report(state["params"]["model"])}
        log.info("%s: %s sparsity %.3f (target %.3f)", config.task, config.prune.kind,
                 results["prune"]["report"]["reached"], config.prune.target)
    if jax.process_index() == 0:
        if data.tests and jax.process_count() > 1:
            log.warning("test predictions are made on one host: run eval/predict.py --model %s/model on the test file",
                        workdir)
        for split, examples in data.tests.items() if jax.process_count() == 1 else ():  # the best model's predictions
            out = os.path.join(workdir, f"predictions_{split}.jsonl")
            n = predict.write_predictions(os.path.join(workdir, "model"), examples, out, config.max_seq_length)
            results.setdefault("predictions", {})[split] = out
            log.info("%s: %d predictions of the best model on %s", out, n, split)
        atomic_write(os.path.join(workdir, "eval_results.json"), json.dumps(results, indent=2))
    return results


def _train_row(window: list, timer, lr: float) -> dict[str, float]:
    """The metrics row of the steps since the last one: their mean loss and norms (one transfer from the devices), the
    rate, and examples and real (non-padding) tokens per second."""
    m = reporting.mean_metrics([w[0] for w in window])
    dt, _ = timer.lap()
    examples, tokens = sum(w[1] for w in window), sum(w[2] for w in window)
    window.clear()
    return m | {"learning_rate": float(lr), "examples_per_s": examples / dt, "tokens_per_s": tokens / dt}


def _export(model, params, out_dir: str, tokenizer_dir: str, card: dict | None = None) -> None:
    """``params`` (on the mesh) into ``model`` and saved as a MODEL_DIR with ``tokenizer_dir``'s tokenizer (process 0);
    ``card``: how the task reads and decodes (QA's windows, the choice columns) as ``task.json``, for ``predict``."""
    host = parallel.to_host(params)
    params_state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params_state, host)
    nnx.update(model, params_state)
    if jax.process_index() == 0:
        save_pretrained(model, out_dir, tokenizer_dir=tokenizer_dir)
        if card is not None:
            atomic_write(os.path.join(out_dir, tasks.TASK_CARD), json.dumps(card, indent=2))
