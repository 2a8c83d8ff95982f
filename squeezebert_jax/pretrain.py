"""MLM + sentence-order-prediction pretraining with LAMB on a device mesh (the paper's recipe).

One linear trainer, read top to bottom: distributed start-up, mesh, data, model + optimizer, the pure
jitted update step, restore, loop (progress bar, metrics, checkpoints, preemption), export.
Phases (the paper: 56k steps at seq 128, then 6k at seq 512) run in order; each starts a fresh LAMB state
and schedule from the previous phase's parameters. A restarted run continues from the newest good
checkpoint in its workdir with exactly the losses of a run that never stopped.
"""

from __future__ import annotations

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

from squeezebert_jax import optim, trainer
from squeezebert_jax.flops import flops
from squeezebert_jax.io import load_pretrained, save_pretrained
from squeezebert_jax.model import SqueezeBertConfig, SqueezeBertForPreTraining

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------------

def pretraining_losses(out, batch) -> dict[str, jax.Array]:
    """Per-batch sums (so microbatches add up exactly): MLM NLL over real predictions, SOP NLL."""
    logp = jax.nn.log_softmax(out.mlm_logits.astype(jnp.float32), axis=-1)
    ids, w = batch["masked_lm_ids"], batch["masked_lm_weights"].astype(jnp.float32)
    nll = -jnp.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]
    mlm_correct = (jnp.argmax(logp, -1) == ids).astype(jnp.float32)
    sop_logp = jax.nn.log_softmax(out.sop_logits.astype(jnp.float32), axis=-1)
    sop_nll = -jnp.take_along_axis(sop_logp, batch["sop_label"][:, None], axis=-1)[:, 0]
    return {"mlm_nll_sum": jnp.sum(nll * w), "mlm_correct_sum": jnp.sum(mlm_correct * w), "mlm_weight": jnp.sum(w),
            "sop_nll_sum": jnp.sum(sop_nll), "sop_correct_sum": jnp.sum(
                (jnp.argmax(sop_logp, -1) == batch["sop_label"]).astype(jnp.float32)),
            "sop_count": jnp.asarray(sop_nll.shape[0], jnp.float32)}


def finalize_losses(s: dict[str, jax.Array]) -> dict[str, jax.Array]:
    mlm = s["mlm_nll_sum"] / jnp.maximum(s["mlm_weight"], 1.0)
    sop = s["sop_nll_sum"] / jnp.maximum(s["sop_count"], 1.0)
    return {"loss": mlm + sop, "mlm_loss": mlm, "sop_loss": sop,
            "mlm_accuracy": s["mlm_correct_sum"] / jnp.maximum(s["mlm_weight"], 1.0),
            "sop_accuracy": s["sop_correct_sum"] / jnp.maximum(s["sop_count"], 1.0)}


# --------------------------------------------------------------------------------------------------
# The update step
# --------------------------------------------------------------------------------------------------

def make_train_step(graphdef, rest, tx: optax.GradientTransformation, num_microbatches: int):
    """``train_step(state, batch, rng) -> (state, metrics)``: pure; jitted by the caller with shardings.

    The loss over the global batch is mean MLM NLL (over all real predictions) + mean SOP NLL; with
    ``num_microbatches`` > 1 the per-microbatch *sums* are accumulated and normalised once, so the
    gradient equals the big batch's up to float error.
    """

    def sums_fn(params, batch, rng):
        model = nnx.merge(graphdef, params, rest)
        nnx.reseed(model, dropout=rng, default=rng)
        model.train()
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                    masked_positions=batch["masked_lm_positions"])
        return pretraining_losses(out, batch)

    def loss_fn(params, batch, rng, norm):
        s = sums_fn(params, batch, rng)
        # Scaled so that summing the microbatch losses gives the global mean losses.
        loss = s["mlm_nll_sum"] / norm["mlm_weight"] + s["sop_nll_sum"] / norm["sop_count"]
        return loss, s

    def train_step(state, batch, rng):
        rng = jax.random.fold_in(rng, state["step"])
        norm = {"mlm_weight": jnp.maximum(jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)), 1.0),
                "sop_count": jnp.asarray(batch["sop_label"].shape[0], jnp.float32)}
        _, sums, grads = optim.accumulate_gradients(
            lambda p, mb, r: loss_fn(p, mb, r, norm), state["params"], batch, num_microbatches, rng)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics = finalize_losses(sums) | {"grad_norm": optax.tree.norm(grads),
                                           "param_norm": optax.tree.norm(params),
                                           "update_norm": optax.tree.norm(updates)}
        return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics

    return train_step


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------

def model_config(config: ml_collections.ConfigDict) -> SqueezeBertConfig:
    overrides = dict(config.model.get("overrides", {}))
    return SqueezeBertConfig.preset(config.model.preset, **overrides)


def train_flops_per_sequence(cfg: SqueezeBertConfig, seq_len: int, max_predictions: int) -> float:
    """Forward + backward (3x forward) FLOPs of one training sequence, MLM head at the masked positions."""
    head = max_predictions * (2 * cfg.hidden_size * cfg.hidden_size + 2 * cfg.hidden_size * cfg.vocab_size)
    return 3.0 * (flops(cfg, seq_len) + head + 2 * cfg.hidden_size * 2)


def _phases(config) -> list[dict[str, Any]]:
    out, start = [], 0
    for i, p in enumerate(config.phases):
        out.append(dict(p) | {"start": start, "end": start + p["num_steps"], "index": i})
        start += p["num_steps"]
    return out


def prepare_demo_data(config, workdir: str) -> str:
    """The embedded corpus: generated by the project's grammar, tokenized once into ArrayRecord shards."""
    from squeezebert_jax import corpus, pretrain_data
    from squeezebert_jax.tokenizer import Tokenizer

    data_dir = os.path.join(workdir, "data")
    if os.path.exists(os.path.join(data_dir, "meta.json")):
        return data_dir
    if jax.process_index() == 0:
        os.makedirs(data_dir, exist_ok=True)
        text = os.path.join(workdir, "demo_corpus.txt")
        corpus.write_corpus(text, num_docs=config.data.demo_num_docs, seed=config.data.demo_seed)
        vocab = os.path.join(workdir, "vocab.txt")
        corpus.write_demo_vocab(vocab)
        pretrain_data.prepare([text], Tokenizer.from_file(vocab), data_dir, num_shards=config.data.num_shards)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("demo_data")
    return data_dir


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Pretrain as ``config`` says, in ``workdir``; returns the last logged metrics."""
    from squeezebert_jax.tokenizer import Tokenizer

    # -- Distributed + mesh ------------------------------------------------------------------------
    trainer.maybe_initialize_distributed(config.get("coordinator_address") or None,
                                         config.get("num_processes") or None, config.get("process_id", None))
    os.makedirs(workdir, exist_ok=True)
    mesh = trainer.make_mesh(config.get("num_devices") or None)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(config.to_json_best_effort(indent=2))

    # -- Data --------------------------------------------------------------------------------------
    data_dir = prepare_demo_data(config, workdir) if config.data.source == "demo" else config.data.path
    tokenizer = Tokenizer.from_dir(data_dir)
    if tokenizer is None:
        raise FileNotFoundError(f"{data_dir}: no tokenizer file recorded by prepare_data")

    # -- Model + optimizer -------------------------------------------------------------------------
    cfg = model_config(config).replace(vocab_size=tokenizer.vocab_size) if config.model.get(
        "vocab_from_tokenizer", True) else model_config(config)
    dtype = jnp.bfloat16 if config.compute_dtype == "bfloat16" else jnp.float32
    if config.get("init_from"):
        model = load_pretrained(config.init_from, "SqueezeBertForPreTraining", dtype=dtype, seed=config.seed)
        cfg = model.config
    else:
        model = SqueezeBertForPreTraining(cfg, dtype=dtype, rngs=nnx.Rngs(params=config.seed, dropout=config.seed))
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)  # plain arrays: safe to close over
    n_dev, fsdp = mesh.shape["data"], config.get("fsdp", False)
    if config.global_batch_size % (n_dev * config.num_microbatches):
        raise ValueError(f"global_batch_size {config.global_batch_size} must divide by devices x microbatches "
                         f"({n_dev} x {config.num_microbatches})")
    checkpointer = trainer.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints,
                                        async_save=config.get("async_checkpoints", True))
    writer = trainer.MetricsWriter(workdir)
    peak = trainer.peak_flops_per_device(config.get("peak_flops_per_device"))
    phases = _phases(config)

    # -- Restore: the newest good checkpoint in workdir, else init_from / scratch --------------------
    resume = None
    for saved_step in checkpointer.all_steps()[::-1]:
        k = next((i for i, p in enumerate(phases) if p["start"] < saved_step <= p["end"]), None)
        if k is None:
            log.warning("checkpoint at step %d lies beyond this config's phases; ignored", saved_step)
            continue
        run = _setup_phase(config, phases[k], params, data_dir, mesh, fsdp)
        restored = checkpointer.restore(run["abstract"], run["data_iter"], step=saved_step)
        if restored is not None:
            resume = (k, saved_step, restored[1], run)
            log.info("resuming from the checkpoint at step %d", saved_step)
            break

    # -- Loop over phases --------------------------------------------------------------------------
    last: dict[str, float] = {}
    first_phase = 0
    if resume is not None:
        k, saved_step, rstate, run = resume
        params = rstate["params"]
        first_phase = k + 1 if saved_step == phases[k]["end"] else k
    with trainer.PreemptionFlag() as preempt:
        for k in range(first_phase, len(phases)):
            phase = phases[k]
            if resume is not None and k == resume[0] and resume[1] < phase["end"]:
                state = resume[2]
            else:
                run = _setup_phase(config, phase, params, data_dir, mesh, fsdp)
                state = run["state"]
            last = _run_phase(config, phase, k, state, run, graphdef, rest, mesh, checkpointer, writer, preempt,
                              cfg, peak) or last
            params = run["final_params"]
            if preempt.requested:
                break
    checkpointer.close()
    writer.close()
    if preempt.requested:
        log.warning("stopped by a signal: checkpoint saved, exiting cleanly")
        return last

    # -- Export: a MODEL_DIR that convert/to_pytorch.py accepts ---------------------------------------
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        params = multihost_utils.process_allgather(params, tiled=True)
    nnx.replace_by_pure_dict(params_state, jax.device_get(params))
    nnx.update(model, params_state)
    if jax.process_index() == 0:
        save_pretrained(model, os.path.join(workdir, "model"), tokenizer_dir=data_dir)
        with open(os.path.join(workdir, "final_metrics.json"), "w") as f:
            json.dump(last, f, indent=2)
    return last


def _setup_phase(config, phase, params, data_dir, mesh, fsdp) -> dict[str, Any]:
    """Optimizer, data iterator and a fresh sharded train state for one phase."""
    from squeezebert_jax import pretrain_data

    schedule = optim.warmup_polynomial_decay(config.learning_rate, phase["num_steps"], config.warmup_fraction,
                                             config.decay_power)
    tx = optim.lamb(schedule, weight_decay=config.weight_decay, clip_norm=config.clip_norm)
    loader = pretrain_data.make_pretrain_loader(
        data_dir, seq_len=phase["seq_len"], global_batch_size=config.global_batch_size,
        seed=config.seed + 1000 * phase["index"], max_predictions_per_seq=phase["max_predictions_per_seq"],
        whole_word_masking=config.data.whole_word_masking, num_workers=config.data.num_workers)
    state = {"step": jnp.asarray(phase["start"], jnp.int32), "params": params, "opt_state": tx.init(params)}
    shardings = trainer.state_shardings(state, mesh, fsdp)
    state = jax.device_put(state, shardings)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings)
    return {"tx": tx, "schedule": schedule, "data_iter": iter(loader), "state": state, "shardings": shardings,
            "abstract": abstract}


def _run_phase(config, phase, k, state, run, graphdef, rest, mesh, checkpointer, writer, preempt, cfg, peak):
    """Steps ``phase['start']..phase['end']`` (or until preempted); sets ``run['final_params']``."""
    shardings, data_iter, schedule = run["shardings"], run["data_iter"], run["schedule"]
    step_fn = jax.jit(make_train_step(graphdef, rest, run["tx"], config.num_microbatches),
                      in_shardings=(shardings, trainer.batch_sharding(mesh), None),
                      out_shardings=(shardings, None), donate_argnums=(0,))
    rng = jax.random.key(config.seed)
    n_dev = mesh.shape["data"]
    start = int(jax.device_get(state["step"]))
    seq_flops = train_flops_per_sequence(cfg, phase["seq_len"], phase["max_predictions_per_seq"])
    window, timer, last = [], trainer.Timer(), {}
    bar = tqdm(total=phase["end"], initial=start, desc=f"{phase['name']} (seq {phase['seq_len']})",
               disable=jax.process_index() != 0 or not config.get("progress", True), dynamic_ncols=True)
    for step in range(start, phase["end"]):
        state, metrics = step_fn(state, trainer.global_batch(next(data_iter), mesh), rng)
        window.append(metrics)
        timer.tick()
        bar.update(1)
        done = step + 1
        if config.get("stop_at_step") and done >= config.stop_at_step:
            preempt.requested = True  # as a SIGTERM: checkpoint, then exit cleanly
        if done % config.log_every == 0 or done == phase["end"] or preempt.requested:
            m = trainer.mean_metrics(window)
            window = []
            if not math.isfinite(m["loss"]):
                checkpointer.wait()
                raise FloatingPointError(f"non-finite loss {m['loss']} at step {done}; the last good checkpoint "
                                         f"is step {max(checkpointer.all_steps(), default=0)}")
            dt, n = timer.lap()
            seq_s = n * config.global_batch_size / dt
            m |= {"learning_rate": float(schedule(done - phase["start"] - 1)), "seq_per_s": seq_s,
                  "tokens_per_s": seq_s * phase["seq_len"], "phase": k,
                  "mfu": seq_s * seq_flops / (peak * n_dev) if peak else None}
            writer.write(done, m)
            bar.set_postfix(loss=f"{m['loss']:.3f}", mlm_acc=f"{m['mlm_accuracy']:.3f}",
                            sop_acc=f"{m['sop_accuracy']:.3f}")
            last = m
        if done % config.checkpoint_every == 0 or done == phase["end"] or preempt.requested:
            checkpointer.save(done, state, data_iter, force=True)
        if preempt.requested:
            break
    bar.close()
    run["final_params"] = state["params"]
    return last


def benchmark_train_step(cfg: SqueezeBertConfig, seq_len: int, batch_size: int, max_predictions: int,
                         dtype=jnp.bfloat16, steps: int = 10, warmup: int = 2, fsdp: bool = False) -> dict[str, float]:
    """Sequences/s, tokens/s and MFU of the jitted LAMB train step on synthetic batches, on all devices."""
    import time

    mesh = trainer.make_mesh()
    model = SqueezeBertForPreTraining(cfg, dtype=dtype, rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)
    tx = optim.lamb(optim.warmup_polynomial_decay(2.5e-3, 1000, 0.28))
    state = {"step": jnp.asarray(0, jnp.int32), "params": params, "opt_state": tx.init(params)}
    shardings = trainer.state_shardings(state, mesh, fsdp)
    state = jax.device_put(state, shardings)
    rng = np.random.default_rng(0)
    b, s, p = batch_size, seq_len, max_predictions
    batch = {"input_ids": rng.integers(5, cfg.vocab_size, (b, s)).astype(np.int32),
             "token_type_ids": (np.arange(s)[None] >= s // 2).repeat(b, 0).astype(np.int32),
             "attention_mask": np.ones((b, s), np.int32),
             "masked_lm_positions": np.sort(rng.integers(1, s, (b, p)), 1).astype(np.int32),
             "masked_lm_ids": rng.integers(5, cfg.vocab_size, (b, p)).astype(np.int32),
             "masked_lm_weights": np.ones((b, p), np.float32), "sop_label": rng.integers(0, 2, b).astype(np.int32)}
    batch = trainer.global_batch(batch, mesh)
    step = jax.jit(make_train_step(graphdef, rest, tx, 1), in_shardings=(shardings, trainer.batch_sharding(mesh), None),
                   out_shardings=(shardings, None), donate_argnums=(0,))
    key = jax.random.key(0)
    for _ in range(warmup):
        state, m = step(state, batch, key)
    jax.block_until_ready(m)
    t = time.perf_counter()
    for _ in range(steps):
        state, m = step(state, batch, key)
    jax.block_until_ready(m)
    dt = (time.perf_counter() - t) / steps
    peak = trainer.peak_flops_per_device()
    seq_s = b / dt
    mfu = seq_s * train_flops_per_sequence(cfg, s, p) / (peak * mesh.shape["data"]) if peak else None
    return {"seq_per_s": seq_s, "tokens_per_s": seq_s * s, "step_ms": 1000 * dt, "mfu": mfu}
