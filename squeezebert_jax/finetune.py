"""GLUE fine-tuning (the paper's protocol) with optional final-layer distillation and MNLI -> task transfer.

AdamW (batch 16, b1 0.9, b2 0.999, no weight decay), linear warmup + linear decay, evaluation after every
epoch, the best epoch exported as WORKDIR/model (a MODEL_DIR with its tokenizer), dev metrics in
WORKDIR/eval_results.json, training rows every ``log_every`` steps and each epoch's evaluation in
WORKDIR/metrics.jsonl. The run is pretraining's trainer (``squeezebert_jax.trainer``: the mesh, the donated
``train_step(state, batch, rng, lr)``) on pretraining's loop (``squeezebert_jax.loop``: orbax checkpoints, SIGTERM
saves, exact resume, the config history), to which fine-tuning gives its step, its batches and each epoch's end.

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
import json
import logging
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from squeezebert_jax import (batching, checkpointing, distill, files, glue, inference, loop, losses, optim, parallel,
                             predict, prune, reporting, tasks, trainer)
from squeezebert_jax.evaluation import align_to_task
from squeezebert_jax.errors import InputError
from squeezebert_jax.finetune_settings import (check_best_model, check_meta, check_same_run, check_settings,
                                               check_workdir, run_stream)
from squeezebert_jax.pretrained import atomic_write, load_pretrained, read_model_config
from squeezebert_jax.model import Structure, scan_layers_on, set_execution
from squeezebert_jax.tokenizer import Tokenizer

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# The fine-tuning run
# --------------------------------------------------------------------------------------------------

def _better(score: float, best: float) -> bool:
    """A NaN score (e.g. STS-B correlation of constant predictions) never wins, and never blocks a later one."""
    return not math.isnan(score) and (math.isnan(best) or score > best)


def _layer_distillation(config, student_cfg, dtype):
    """(LayerLoss, LayerTeacher, projection params) for the config's intermediate-layer losses, or (None, None, {})
    when their weights are all 0 (``check_settings`` refused them without a teacher). ``student_cfg``: the student's
    architecture."""
    d = config.distill
    if not any(float(d[f"{k}_weight"]) for k in ("patient", "hidden", "attention")):
        return None, None, {}
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
    """AdamW over ``total_steps`` and the jitted, sharded step of ``loss`` (the task's: ``losses.LOSSES[task.loss]``)
    for ``trainable`` (``{"model": params[, "proj"]}``; arrays or ShapeDtypeStructs: only their shapes are read). Reused
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


def layer_execution(layers: str, platform: str) -> tuple[bool, str]:
    """(scan_layers, remat) for ``config.layers`` on ``platform`` (``model.scan_layers_on``: "auto" is unrolled on CPU
    and GPU, the scan on TPU). Scanned, each layer keeps only its named matmul outputs for the backward pass (remat
    "minimal": what the scan's stacked buffers can hold); unrolled, nothing is recomputed (remat "none": on a 2-core
    Xeon, MiniLM's fine-tuning step at batch 16 x 32 runs 56 examples/s against the scan's 51; on one H100 the paper's
    pretraining step took 48.4 ms against 51.2 with "minimal"). The numbers are the same either way."""
    scan = scan_layers_on(layers, platform)
    return scan, "minimal" if scan else "none"



@dataclasses.dataclass
class TaskData:
    """What one fine-tuning run trains and evaluates on: encoded rows (the training rows with the teacher's logits
    and per-row teacher weights when distilling) and each eval split's."""

    train: dict[str, np.ndarray]
    evals: dict[str, dict[str, np.ndarray]]
    num_labeled: int
    num_transfer: int
    tests: dict[str, list] = dataclasses.field(default_factory=dict)  # your own data's test rows, read before training


def load_task_data(config: ml_collections.ConfigDict, task: tasks.Task, tok: Tokenizer, workdir: str,
                   mesh) -> TaskData:
    """``task``'s splits (``tasks.resolve(config)``), encoded; with a teacher, its logits on the training rows
    (cached; computed on ``mesh``); with ``distill.transfer_text``, the unlabeled rows on the teacher's soft labels
    alone."""
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
        teacher = functools.partial(distill.teacher_logits, config.distill.teacher, task,
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
    for examples in tests.values() if isinstance(task, tasks.ConllTask) else ():
        task.word_pieces(examples, tok)  # a word that would get no tag is named by its line now, not after training
    return TaskData({k: train[k] for k in keys}, evals, len(train_ex), len(transfer_ex), tests)


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
    workdir = files.path_argument("workdir", workdir)  # bytes or None: named, not os's TypeError

    # -- Mesh and settings -------------------------------------------------------------------------
    parallel.maybe_initialize_distributed()
    mesh = parallel.make_mesh(config.num_devices or None)
    check_settings(config, mesh.shape["data"])
    check_workdir(config, workdir, overwrite)
    check_same_run(workdir, config)
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
    ckpt_dir = os.path.join(workdir, "checkpoints")
    resuming = bool(checkpointing.steps_on_disk(ckpt_dir))
    trainer.check_stream(workdir, stream, resuming, checkpointing.newest_stream(ckpt_dir))
    data = load_task_data(config, spec, tok, workdir, mesh)

    overrides = {k: v for k, v in (("hidden_dropout_prob", config.dropout),
                                   ("attention_probs_dropout_prob", config.attention_dropout)) if v is not None}
    init_from = config.init_from
    if config.student_layers:  # a shallower student from init_from's layers (PKD / DistilBERT start)
        init_from = os.path.join(workdir, "student_init")
        distill.init_student_from_teacher(config.init_from, config.student_layers, config.student_layer_map,
                                          out_dir=init_from, overwrite="replace")  # the run's own
    model = load_pretrained(init_from, spec.head, num_labels=num_labels,
                            dtype=dtype, seed=config.seed, config_overrides=overrides, resuming=resuming)
    model = align_to_task(model, spec, config.init_from)
    set_execution(model, *layer_execution(config.layers, jax.default_backend()), attention=config.attention,
                  padding="right")  # every batch is right padding (parallel.shard_batch checks it)
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)  # plain arrays: safe to close over
    model.eval()
    eval_graphdef = nnx.graphdef(model)  # dropout off; the same parameters
    eval_rest = jax.device_put(rest, NamedSharding(mesh, P()))

    # -- Optimizer, train state and the jitted step ------------------------------------------------
    buckets = batching.length_buckets(config.length_buckets, config.max_seq_length, batching.lengths(data.train))
    steps_per_epoch = batching.steps_per_epoch(data.train, config.batch_size, buckets)
    total = steps_per_epoch * config.num_epochs
    if config.stop_at_step > total:  # known once the rows are read: it would never stop the run
        raise InputError(f"config.stop_at_step={config.stop_at_step}: past the run's end at step {total} "
                         f"({config.num_epochs} epochs of {steps_per_epoch} steps), so it would never stop early; 0 "
                         "turns it off")
    trainable = {"model": params} | ({"proj": proj} if proj else {})
    fs = build_step(config, graphdef, rest, trainable, total, mesh, losses.LOSSES[spec.loss], layer_loss, layer_teacher)
    init, shardings, abstract, step_fn, rates = fs.init, fs.shardings, fs.abstract, fs.step_fn, fs.learning_rates
    replicated = NamedSharding(mesh, P())
    consts = (jax.device_put(layer_teacher.state, replicated),) if layer_loss is not None else ()
    pruner = prune.Pruner.from_config(config.prune, model.config.num_attention_heads, total)
    masks_abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, np.float32), params)

    # -- Restore: the newest readable checkpoint in workdir, else step 0 -----------------------------
    checkpointer = checkpointing.Checkpointer(ckpt_dir, config.keep_checkpoints, async_save=config.async_checkpoints,
                                              with_data=False, with_meta=True,
                                              meta_check=functools.partial(check_meta, pruned=pruner is not None))
    writer = reporting.MetricsWriter(workdir)
    try:
        saved_tree = {"train": abstract} | ({"prune_masks": masks_abstract} if pruner is not None else {})
        step, meta = 0, {"history": [], "best": None, "epoch_losses": [], "epoch_parts": [], "epoch_tokens": [0, 0]}
        if restored := loop.restore(checkpointer, lambda s: (saved_tree, None), total,
                                    f"whose run ends at step {total} ({config.num_epochs} epochs of {steps_per_epoch} "
                                    "steps)", workdir=workdir, config=config, writer=writer, stream=stream):
            step, saved = restored
            state, meta = saved["train"], checkpointer.read_meta(step)
            if pruner is not None:
                pruner.masks = jax.device_get(saved["prune_masks"])
                pruner._updated_at, pruner._sparsity = meta["pruner"]
        else:
            state = jax.device_put(init(trainable), shardings)
        history, best = meta["history"], meta["best"]
        # this epoch so far, host values: each step's loss and layer losses, its real tokens and tokens computed
        epoch_losses, layer_parts = list(meta["epoch_losses"]), list(meta["epoch_parts"])
        tokens = list(meta["epoch_tokens"])
        rng = trainer.run_key(config.seed, config.rng_impl)
        plans = {}  # epoch -> its batches (each epoch's order drawn from seed + epoch)

        def train_step(state, i):
            epoch, at = divmod(i, steps_per_epoch)
            if epoch not in plans:
                plans.clear()
                plans[epoch] = batching.epoch_plan(data.train, config.batch_size, buckets, config.seed + epoch)
            idx, width = plans[epoch][at]
            b = batching.assemble(data.train, idx, config.batch_size, width)
            real_tokens = int(b["attention_mask"][b["weights"] > 0].sum())
            tokens[0], tokens[1] = tokens[0] + real_tokens, tokens[1] + config.batch_size * width
            state, metrics = step_fn(state, parallel.shard_batch(b, mesh), rng, rates[i], *consts)
            if pruner is not None:  # the update may regrow pruned weights: masked again (re-scored on schedule)
                pruned = jax.device_put(pruner(i + 1, state["params"]["model"]), shardings["params"]["model"])
                state = {**state, "params": {**state["params"], "model": pruned}}
            return state, metrics, (int(b["weights"].sum()), real_tokens)

        def checked(done, m):
            epoch_losses.append(float(m["loss"]))
            layer_parts.append({k: float(v) for k, v in m.items() if k not in trainer.STEP_NORMS + ("loss",)})

        def log_row(done, window, dt, n):
            """The mean loss and norms, the rate, and examples and real (non-padding) tokens per second."""
            return reporting.mean_metrics([m for m, _ in window]) | {
                "learning_rate": float(rates[done - 1]), "examples_per_s": sum(w[0] for _, w in window) / dt,
                "tokens_per_s": sum(w[1] for _, w in window) / dt}

        def end_of_epoch(done, state):
            """Evaluate the epoch's model on the dev splits and export it if it is the best so far."""
            nonlocal best
            result = {"epoch": done // steps_per_epoch, "step": done, "train_loss": float(np.mean(epoch_losses)),
                      "train_padding_share": 1.0 - tokens[0] / max(tokens[1], 1)}
            if pruner is not None:
                result["sparsity"] = float(pruner.report(state["params"]["model"])["reached"])
            for name in layer_parts[0] if layer_parts else ():  # the layer losses, unweighted: train_patient, ...
                result[f"train_{name}"] = float(np.mean([p[name] for p in layer_parts]))
            eval_state = (state["params"]["model"], eval_rest)
            for split, arr in data.evals.items():
                logits = inference.predict_batches(eval_graphdef, eval_state, arr, config.eval_batch_size, mesh,
                                                   buckets)
                if not np.isfinite(logits).all():
                    raise FloatingPointError(f"non-finite logits on {config.task} {split} after epoch "
                                             f"{result['epoch']}")
                for name, value in spec.score(logits, arr).items():
                    result[f"{split}/{name}"] = value
            result["score"] = float(np.mean([result[f"{s}/{spec.main_metric}"] for s in spec.eval_splits]))
            history.append(result)
            writer.write(done, {k: v for k, v in result.items() if k not in ("epoch", "step")})
            # a pruned run keeps only epochs at the target sparsity (the schedule ends by the last step at the latest)
            if (pruner is None or pruner.at_target) and (best is None or _better(result["score"], best["score"])):
                best = result
                card = spec.card()  # how predict reads and decodes the task's inputs
                loop.export(model, state["params"]["model"], config.init_from, {os.path.join(workdir, "model"): model},
                            {tasks.TASK_CARD: card} if card is not None else None)
            epoch_losses.clear()
            layer_parts.clear()
            tokens[:] = [0, 0]
            return {"score": f"{result['score']:.4f}", "loss": f"{result['train_loss']:.4f}"}

        def save(done, state):
            """A checkpoint after step ``done``, with what the epochs so far gave."""
            tree = {"train": state} | ({"prune_masks": pruner.masks} if pruner is not None else {})
            extra = {"pruner": [int(pruner._updated_at), float(pruner._sparsity)]} if pruner is not None else {}
            meta = {"history": history, "best": best, "epoch_losses": epoch_losses, "epoch_parts": layer_parts,
                    "epoch_tokens": tokens, "stream": stream} | extra
            checkpointer.save(done, tree, force=True, meta=json.loads(json.dumps(meta, default=float)))

        hooks = loop.Hooks(train_step, log_row, save, checked=checked, boundary=end_of_epoch,
                           boundary_every=steps_per_epoch)
        with trainer.PreemptionFlag(config.preemption_sync_every) as preempt:
            state, stopped = loop.run(state, step, total, hooks, config=config, checkpointer=checkpointer,
                                      writer=writer, preempt=preempt, final_step=total, desc=config.task)
    finally:
        checkpointer.close()
        writer.close()
    if stopped:
        saved = max(checkpointer.steps_on_disk(), default=None)
        log.warning("stopped early (signal or stop_at_step): checkpoint saved at step %s, exiting cleanly; run again "
                    "on %s to resume",
                    saved, workdir)
        return {"task": config.task, "best": best, "history": history, "preempted": True, "checkpoint_step": saved}
    results = {"task": config.task, "init_from": config.init_from, "best": best, "history": history,
               "train_examples": data.num_labeled, "transfer_examples": data.num_transfer,
               "distill": dict(config.distill), "paper_dev": glue.PAPER_DEV.get(config.task), "preempted": False,
               "labels": list(spec.labels) if spec.labels else None}
    if pruner is not None:
        results["prune"] = dict(config.prune) | {"report": pruner.report(state["params"]["model"])}
        log.info("%s: %s sparsity %.3f (target %.3f)", config.task, config.prune.kind,
                 results["prune"]["report"]["reached"], config.prune.target)
    if jax.process_index() == 0:  # (the host that wrote the model)
        check_best_model(os.path.join(workdir, "model"))
        if data.tests and jax.process_count() > 1:
            log.warning("test predictions are made on one host: run eval/predict.py --model %s/model on the test file",
                        workdir)
        for split, examples in data.tests.items() if jax.process_count() == 1 else ():  # the best model's predictions
            out = os.path.join(workdir, f"predictions_{split}.jsonl")
            n = predict.write_predictions(os.path.join(workdir, "model"), examples, out, config.max_seq_length)
            results.setdefault("predictions", {})[split] = out
            log.info("%s: %d predictions of the best model on %s", out, n, split)
        atomic_write(os.path.join(workdir, "eval_results.json"), files.json_text(results, indent=2))
    return results


