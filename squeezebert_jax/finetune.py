"""GLUE fine-tuning (the paper's protocol) with optional final-layer distillation and MNLI -> task transfer.

AdamW (batch 16, b1 0.9, b2 0.999, no weight decay), linear warmup + linear decay, evaluation after every
epoch, the best epoch exported as WORKDIR/model (a MODEL_DIR with its tokenizer), dev metrics in
WORKDIR/eval_results.json and per-epoch lines in WORKDIR/metrics.jsonl.

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
from tqdm.auto import tqdm

from squeezebert_jax import distill, glue, optim, prune, trainer
from squeezebert_jax.errors import InputError
from squeezebert_jax.io import (
    _read_config,
    atomic_write,
    load_pretrained,
    save_pretrained,
)
from squeezebert_jax.model import SqueezeBertForSequenceClassification, Structure
from squeezebert_jax.pretrain import compute_dtype
from squeezebert_jax.tokenizer import Tokenizer

log = logging.getLogger(__name__)

INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


# --------------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------------

def task_loss(logits, labels, weights, teacher=None, teacher_weight=0.0, regression: bool = False):
    """Weighted mean loss over real examples (weights 0 on padding). See the module docstring. ``teacher_weight``:
    a number, or one per example (1 on unlabeled transfer rows: the soft-label cross-entropy alone)."""
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


# --------------------------------------------------------------------------------------------------
# A classifier for a task
# --------------------------------------------------------------------------------------------------

class TaskMismatchError(InputError):
    """A sequence classifier whose output count does not fit the GLUE task."""


class NoClassifierError(InputError):
    """A model without a sequence-classifier head (e.g. saved from pretraining) where a GLUE classifier is needed.
    Not a TaskMismatchError: it fits no task, so ``eval/glue.py --task all`` stops instead of skipping every one."""


def model_tokenizer(model_dir: str, vocab_size: int | None = None, role: str = "") -> Tokenizer:
    """The tokenizer saved in ``model_dir``, refused when it has more ids than the model's ``vocab_size`` (read
    from its config.json when not given): under jax.jit an id past the embedding table is no error, XLA clamps
    the gather and the run goes on with wrong embeddings. ``role`` prefixes messages (e.g. ``"teacher "``)."""
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{role}{model_dir}: no such directory (a MODEL_DIR with config.json, weights and "
                                f"tokenizer)")
    tok = Tokenizer.from_dir(model_dir)
    if tok is None:
        raise FileNotFoundError(f"{role}{model_dir}: no tokenizer file (vocab.txt or SentencePiece model)")
    if vocab_size is None:
        vocab_size = _read_config(model_dir)[0].vocab_size
    if tok.vocab_size > vocab_size:
        raise InputError(f"{role}{model_dir}: its tokenizer has {tok.vocab_size} ids but the model's vocab_size is "
                         f"{vocab_size} (ids >= {vocab_size} would silently read the wrong embedding): put the "
                         f"tokenizer the model was trained with in {model_dir}, or use a model with vocab_size >= "
                         f"{tok.vocab_size}")
    return tok


def align_to_task(model, task: str, source: str):
    """Check that ``model`` (a sequence classifier) fits ``task`` and put its outputs in the task's label order.

    When the config's ``id2label`` names the task's labels in another order (e.g. an MNLI checkpoint trained
    with transformers' old contradiction/entailment/neutral order), the classifier's columns are permuted
    once, here, so predictions, metrics, server files and teacher targets all use the task's order.
    """
    spec = glue.get_task(task)
    if not isinstance(model, SqueezeBertForSequenceClassification):
        raise NoClassifierError(
            f"{source}: the model ({type(model).__name__}) has no sequence-classifier head, so it cannot be used for "
            f"{task}: fine-tune it on {task} first (train/finetune.py with --config.init_from set to it), or convert "
            f"a PyTorch classifier with convert/from_pytorch.py --head SqueezeBertForSequenceClassification")
    n = getattr(model, "num_labels", None)
    if n != spec.num_labels:
        raise TaskMismatchError(f"{source}: a classifier with {n} outputs cannot be used for {task} "
                                f"({spec.num_labels} {'output' if spec.is_regression else 'labels'})")
    perm = glue.label_permutation(model.config.id2label, task)
    if perm is not None:
        log.info("%s: classifier outputs %s reordered to %s's order %s", source,
                 [model.config.id2label[i] for i in range(n)], task, list(spec.labels))
        model.classifier.kernel.set_value(model.classifier.kernel[...][:, perm])
        model.classifier.bias.set_value(model.classifier.bias[...][perm])
    model.config.id2label = None if spec.is_regression else dict(enumerate(spec.labels))
    return model


# --------------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------------

def batches(arrays: dict[str, np.ndarray], batch_size: int, order: np.ndarray | None = None):
    """Fixed-shape batches; the last one is padded and carries ``weights`` 0 on the padding."""
    n = len(arrays["input_ids"])
    order = np.arange(n) if order is None else order
    for i in range(0, n, batch_size):
        idx = order[i:i + batch_size]
        pad = batch_size - len(idx)
        b = {k: np.concatenate([v[idx], np.repeat(v[idx[:1]], pad, 0)]) if pad else v[idx] for k, v in arrays.items()}
        b["weights"] = np.concatenate([np.ones(len(idx), np.float32), np.zeros(pad, np.float32)])
        yield b


@functools.partial(jax.jit, static_argnums=0)
def _eval_logits(structure: Structure, state, b):
    """The eval forward as a pure function of (graphdef, state, batch), jitted once at import: every split and
    epoch of a model (and any model of the same structure) with the same batch shape reuses one program."""
    m = nnx.merge(structure.graphdef, state)
    return m(b["input_ids"], b["attention_mask"], b["token_type_ids"]).logits


def predict_logits(model, arrays: dict[str, np.ndarray], batch_size: int = 64, mesh=None) -> np.ndarray:
    """Logits for every row of ``arrays`` with the jitted eval forward (dropout off)."""
    model.eval()
    graphdef, state = nnx.split(model)
    structure = Structure(graphdef)
    out = []
    for b in batches({k: arrays[k] for k in INPUT_KEYS}, batch_size):
        n = int(b.pop("weights").sum())
        out.append(np.asarray(_eval_logits(structure, state, b))[:n])
    return np.concatenate(out) if out else np.zeros((0, 1), np.float32)


def teacher_logits(teacher_dir: str, task: str, split: str, examples, max_length: int, cache_dir: str) -> np.ndarray:
    """The teacher's logits on ``examples`` (in ``task``'s label order), computed once and cached.

    The cache key covers the teacher (its directory and the size and mtime of its weights and config), the task,
    split and length, and the encoded examples themselves: other data, another order or a retrained teacher is
    never served stale targets."""
    tok = model_tokenizer(teacher_dir, role="teacher ")
    arrays = glue.encode_examples(examples, tok, max_length, task=task)
    key = hashlib.sha1(f"{os.path.abspath(teacher_dir)}|{task}|{split}|{max_length}".encode())
    for name in sorted(os.listdir(teacher_dir)):
        if name.endswith((".safetensors", ".bin", ".json")):
            st = os.stat(os.path.join(teacher_dir, name))
            key.update(f"|{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    for k in INPUT_KEYS:
        key.update(np.ascontiguousarray(arrays[k]).tobytes())
    path = os.path.join(cache_dir, f"teacher_{task}_{split}_{key.hexdigest()[:16]}.npy")
    if os.path.exists(path):
        return np.load(path)
    teacher = align_to_task(load_pretrained(teacher_dir), task, f"teacher {teacher_dir}")
    logits = predict_logits(teacher, arrays)
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
    loss_weights = {k: float(d[f"{k}_weight"]) for k in ("patient", "hidden", "attention")}
    if not any(loss_weights.values()):
        return None, None, {}
    if not d.teacher:
        raise InputError("distill.patient_weight / hidden_weight / attention_weight need a distill.teacher MODEL_DIR")
    teacher_cfg = _read_config(d.teacher)[0]
    pairs = distill.layer_pairs(d.layer_map, student_cfg.num_hidden_layers, teacher_cfg.num_hidden_layers)
    loss = distill.LayerLoss(pairs, **{f"{k}_weight": v for k, v in loss_weights.items()})
    teacher = distill.layer_teacher(d.teacher, config.init_from, student_cfg, loss, config.max_seq_length, dtype)
    proj = distill.init_projection(student_cfg.hidden_size, teacher_cfg.hidden_size, config.seed)
    log.info("layer distillation from %s: pairs %s, weights %s%s", d.teacher, pairs, loss_weights,
             f", projection {student_cfg.hidden_size} -> {teacher_cfg.hidden_size}" if proj else "")
    return loss, teacher, proj


def _train_step(graphdef, rest, tx, w_teacher: float, regression: bool, layer_loss=None, layer_teacher=None):
    """``train_step(trainable, opt_state, batch, rng, teacher_state, lr) -> (trainable, opt_state, loss, parts)``,
    jitted: the task loss (with the teacher's soft labels when the batch has them) plus the layer losses, and the
    AdamW update at rate ``lr``. ``trainable`` is ``(params, proj)``."""

    def loss_fn(trainable, b, rng, teacher_state):
        params, proj = trainable
        m = nnx.merge(graphdef, params, rest)
        nnx.reseed(m, dropout=rng, default=rng)
        m.train()
        inputs = (b["input_ids"], b["attention_mask"], b["token_type_ids"])
        out = m(*inputs, collect=layer_loss is not None)
        loss = task_loss(out.logits, b["labels"], b["weights"], b.get("teacher"), b.get("teacher_weight", w_teacher),
                         regression)
        if layer_loss is None:
            return loss, {}
        extra, parts = layer_loss(out.states, layer_teacher.states(teacher_state, *inputs), proj,
                                  b["attention_mask"], b["weights"])
        return loss + extra, parts

    @jax.jit
    def train_step(trainable, opt_state, b, rng, teacher_state, lr):
        (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, b, rng, teacher_state)
        updates, opt_state = tx.update(grads, optim.set_learning_rate(opt_state, lr), trainable)
        return optax.apply_updates(trainable, updates), opt_state, loss, parts

    return train_step


_STEPS = trainer.StepCache()


def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Fine-tune ``config.init_from`` on ``config.task``; returns the eval results dict.

    A pretraining (or bare encoder) MODEL_DIR gets a new classifier head; a classifier for another label count
    keeps its encoder and gets a new head too. Nothing is written to ``workdir`` before the inputs are checked."""
    spec = glue.get_task(config.task)
    regression, num_labels = spec.is_regression, spec.num_labels

    # -- Data --------------------------------------------------------------------------------------
    tok = model_tokenizer(config.init_from)
    model_cfg = _read_config(config.init_from)[0]
    if config.max_seq_length > model_cfg.max_position_embeddings:
        raise InputError(f"max_seq_length {config.max_seq_length} is more than the max_position_embeddings "
                         f"{model_cfg.max_position_embeddings} of {config.init_from}: set max_seq_length <= "
                         f"{model_cfg.max_position_embeddings}")
    if config.distill.teacher:
        model_tokenizer(config.distill.teacher, role="teacher ")
    student_cfg = model_cfg
    if config.student_layers:
        distill.student_layer_choice(config.student_layer_map, config.student_layers, model_cfg.num_hidden_layers)
        student_cfg = model_cfg.replace(num_hidden_layers=config.student_layers)
    dtype = compute_dtype(config)
    layer_loss, layer_teacher, proj = _layer_distillation(config, student_cfg, dtype)
    load = lambda split: glue.load_examples(config.task, split, data_dir=config.data_dir or None,  # noqa: E731
                                            skip_malformed=config.skip_malformed)
    train_ex = load("train")
    if config.max_train_examples:
        train_ex = train_ex[:config.max_train_examples]
    train = glue.encode_examples(train_ex, tok, config.max_seq_length, task=config.task)
    evals = {s: (ex, glue.encode_examples(ex, tok, config.max_seq_length, task=config.task))
             for s in spec.eval_splits for ex in [load(s)]}
    if config.distill.transfer_text and not config.distill.teacher:
        raise InputError("distill.transfer_text is labelled by the teacher's logits: set distill.teacher")
    transfer_ex = distill.read_transfer_text(config.distill.transfer_text, config.task) \
        if config.distill.transfer_text else []
    if config.distill.teacher:
        cache = config.distill.cache_dir or os.path.join(workdir, "teacher_cache")
        train["teacher"] = teacher_logits(config.distill.teacher, config.task, "train", train_ex,
                                          config.max_seq_length, cache).astype(np.float32)
    if transfer_ex:  # pre-trained distillation: unlabeled rows trained on the teacher's soft labels alone
        extra = glue.encode_examples(transfer_ex, tok, config.max_seq_length, task=config.task)
        extra["labels"] = np.zeros_like(extra["labels"])  # unused: teacher weight 1
        extra["teacher"] = teacher_logits(config.distill.teacher, config.task, "transfer", transfer_ex,
                                          config.max_seq_length, cache).astype(np.float32)
        train["teacher_weight"] = np.full(len(train["input_ids"]), config.distill.teacher_weight, np.float32)
        extra["teacher_weight"] = np.ones(len(transfer_ex), np.float32)
        train = {k: np.concatenate([v, extra[k]]) for k, v in train.items() if k in extra}
        log.info("%d labeled + %d transfer-text examples", len(train_ex), len(transfer_ex))

    # -- Model + optimizer -------------------------------------------------------------------------
    overrides = {k: v for k, v in (("hidden_dropout_prob", config.dropout),
                                   ("attention_probs_dropout_prob", config.attention_dropout)) if v is not None}
    init_from = config.init_from
    if config.student_layers:  # a shallower student from init_from's layers (PKD / DistilBERT start)
        init_from = os.path.join(workdir, "student_init")
        distill.init_student_from_teacher(config.init_from, config.student_layers, config.student_layer_map,
                                          out_dir=init_from)
    model = load_pretrained(init_from, "SqueezeBertForSequenceClassification", num_labels=num_labels,
                            dtype=dtype, seed=config.seed, config_overrides=overrides)
    model = align_to_task(model, config.task, config.init_from)
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)  # plain arrays: safe to close over
    steps_per_epoch = math.ceil(len(train["input_ids"]) / config.batch_size)
    total = steps_per_epoch * config.num_epochs
    tx, rates = optim.adamw_finetune(config.learning_rate, total, warmup_fraction=config.warmup_fraction,
                                     weight_decay=config.weight_decay)
    trainable = (params, proj)  # proj: the layer losses' width projection ({} without), trained, never saved
    opt_state = tx.init(trainable)
    w_teacher = float(config.distill.teacher_weight) if config.distill.teacher else 0.0

    build = functools.partial(_train_step, graphdef, rest, tx, w_teacher, regression, layer_loss, layer_teacher)
    # reused by a later run in the process with an equal model and settings (a sweep, the GLUE table): the key holds
    # all the step closes over (tx: AdamW whose only setting is the weight decay; the rate is an input). A layer
    # distillation step (it closes over the teacher) is built for its run alone.
    train_step = build() if layer_loss is not None else _STEPS.get(
        (Structure(graphdef), trainer.fingerprint(rest), config.weight_decay, w_teacher, regression), build)

    pruner = prune.Pruner.from_config(config.prune, model.config.num_attention_heads, total)

    # -- Loop: train an epoch, evaluate, keep the best ----------------------------------------------
    os.makedirs(workdir, exist_ok=True)
    writer = trainer.MetricsWriter(workdir)
    rng = jax.random.key(config.seed)
    history, best, step = [], None, 0
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids", "labels", "teacher", "teacher_weight")
            if k in train]
    teacher_state = layer_teacher.state if layer_teacher is not None else {}
    bar = tqdm(total=total, desc=f"{config.task}", disable=not config.progress, dynamic_ncols=True)
    for epoch in range(config.num_epochs):
        order = np.random.default_rng(config.seed + epoch).permutation(len(train["input_ids"]))
        losses, layer_parts = [], []
        for b in batches({k: train[k] for k in keys}, config.batch_size, order):
            trainable, opt_state, loss, parts = train_step(trainable, opt_state, b, jax.random.fold_in(rng, step),
                                                           teacher_state, rates[step])
            losses.append(loss)
            layer_parts.append(parts)
            step += 1
            if pruner is not None:  # the update may regrow pruned weights: masked again (and re-scored on schedule)
                trainable = (pruner(step, trainable[0]), trainable[1])
            bar.update(1)
        train_loss = float(np.mean(jax.device_get(losses)))
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"non-finite training loss in epoch {epoch + 1} (step {step})")
        nnx.replace_by_pure_dict(params_state, trainable[0])
        nnx.update(model, params_state)
        result = {"epoch": epoch + 1, "step": step, "train_loss": train_loss}
        if pruner is not None:
            result["sparsity"] = pruner.report(trainable[0])["reached"]
        for name in layer_parts[0] if layer_parts else ():  # the layer losses, unweighted: train_patient, ...
            result[f"train_{name}"] = float(np.mean(jax.device_get([p[name] for p in layer_parts])))
        for split, (ex, arr) in evals.items():
            logits = predict_logits(model, arr)
            preds = logits[:, 0] if regression else logits.argmax(-1)
            for name, value in glue.compute_metrics(config.task, preds, arr["labels"]).items():
                result[f"{split}/{name}"] = value
        result["score"] = float(np.mean([result[f"{s}/{spec.main_metric}"] for s in spec.eval_splits]))
        history.append(result)
        writer.write(step, {k: v for k, v in result.items() if k not in ("epoch", "step")})
        bar.set_postfix(score=f"{result['score']:.4f}", loss=f"{train_loss:.4f}")
        # a pruned run keeps only epochs at the target sparsity (the schedule ends by the last step at the latest)
        at_target = pruner is None or pruner.at_target
        if at_target and (best is None or _better(result["score"], best["score"])):
            best = result
            save_pretrained(model, os.path.join(workdir, "model"), tokenizer_dir=config.init_from)
    bar.close()
    writer.close()
    results = {"task": config.task, "init_from": config.init_from, "best": best, "history": history,
               "train_examples": len(train_ex), "transfer_examples": len(transfer_ex),
               "distill": dict(config.distill), "paper_dev": glue.PAPER_DEV.get(config.task)}
    if pruner is not None:
        results["prune"] = dict(config.prune) | {"report": pruner.report(trainable[0])}
        log.info("%s: %s sparsity %.3f (target %.3f)", config.task, config.prune.kind,
                 results["prune"]["report"]["reached"], config.prune.target)
    with open(os.path.join(workdir, "eval_results.json"), "w") as f:
        json.dump(results, f, indent=2)
    return results


# --------------------------------------------------------------------------------------------------
# Evaluation, test predictions and the whole-table recipe
# --------------------------------------------------------------------------------------------------

def evaluate(model_dir: str, task: str, data_dir: str | None, split: str | None = None,
             max_length: int = 128) -> dict[str, dict[str, float]]:
    """Dev metrics of a fine-tuned MODEL_DIR: {split: compute_metrics(...)} for the task's eval splits."""
    spec = glue.get_task(task)
    model = align_to_task(load_pretrained(model_dir), task, model_dir)
    tok = model_tokenizer(model_dir, model.config.vocab_size)
    max_length = min(max_length, model.config.max_position_embeddings)
    out = {}
    for s in ([split] if split else spec.eval_splits):
        arr = glue.encode_examples(glue.load_examples(task, s, data_dir=data_dir), tok, max_length, task=task)
        logits = predict_logits(model, arr)
        out[s] = glue.compute_metrics(task, logits[:, 0] if spec.is_regression else logits.argmax(-1), arr["labels"])
    return out


def predict_test(model_dir: str, task: str, data_dir: str | None, out_dir: str, max_length: int = 128) -> list[str]:
    """GLUE-server files for the task's test splits (AX: pass task="ax" with the MNLI model)."""
    spec = glue.get_task(task)
    model = align_to_task(load_pretrained(model_dir), task, model_dir)
    tok = model_tokenizer(model_dir, model.config.vocab_size)
    max_length = min(max_length, model.config.max_position_embeddings)
    paths = []
    for s in spec.test_splits:
        arr = glue.encode_examples(glue.load_examples(task, s, data_dir=data_dir), tok, max_length, task=task)
        logits = predict_logits(model, arr)
        paths.append(glue.write_predictions(task, arr["idx"], logits[:, 0] if spec.is_regression else logits,
                                            out_dir, split_name=s))
    return paths


def table_results(per_task: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """{task: {split: metrics}} -> the keys glue.table expects (mnli_matched, mnli_mismatched, qqp, ...)."""
    flat = {}
    for task, splits in per_task.items():
        for split, metrics in splits.items():
            key = task if task != "mnli" else ("mnli_matched" if split.endswith("_matched") else "mnli_mismatched")
            flat[key] = metrics
    return flat


def run_recipe(make_config, init_from: str, workdir: str, tasks=None, transfer: bool = False,
               teacher_root: str = "", predict: bool = False) -> str:
    """Fine-tune every task (MNLI first), optionally with MNLI -> task transfer (not CoLA, as the paper) and
    distillation from ``teacher_root/<task>`` MODEL_DIRs; return the paper's Table 2 form.

    ``make_config(task)`` gives each task's fine-tuning config (train/configs/glue.py plus overrides)."""
    tasks = list(tasks or glue.RECIPE_ORDER)
    if transfer and "mnli" in tasks:
        tasks.remove("mnli")
        tasks.insert(0, "mnli")
    per_task = {}
    for task in tasks:
        c = make_config(task)
        mnli_model = os.path.join(workdir, "mnli", "model")
        c.init_from = mnli_model if (transfer and task not in ("mnli", "cola") and os.path.isdir(mnli_model)) \
            else init_from
        teacher = os.path.join(teacher_root, task) if teacher_root else ""
        c.distill.teacher = teacher if teacher and os.path.isdir(teacher) else ""
        c.distill.cache_dir = os.path.join(workdir, "teacher_cache")
        res = finetune(c, os.path.join(workdir, task))
        per_task[task] = {k.split("/")[0]: {} for k in res["best"] if "/" in k}
        for k, v in res["best"].items():
            if "/" in k:
                split, name = k.split("/")
                per_task[task][split][name] = v
        if predict and glue.get_task(task).test_splits:
            out = os.path.join(workdir, "predictions")
            try:
                for t in (task, "ax") if task == "mnli" else (task,):
                    predict_test(os.path.join(workdir, task, "model"), t, c.data_dir or None, out, c.max_seq_length)
            except FileNotFoundError as e:
                log.warning("no test predictions for %s: %s", task, e)
    label = "this run" + (" (D)" if teacher_root else "") + (" (S)" if transfer else "")
    text = glue.table(table_results(per_task), name=label)
    with open(os.path.join(workdir, "table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(per_task, f, indent=2)
    return text

