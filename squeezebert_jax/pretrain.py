"""MLM + sentence-order-prediction pretraining with LAMB on a device mesh (the paper's recipe).

Read top to bottom: distributed start-up, mesh, data, model + optimizer, the pure jitted update step, then the shared
loop (``squeezebert_jax.loop``: restore, steps, metrics, checkpoints, preemption, export), to which pretraining gives
its step, its batches and each phase's end.
Phases (the paper: 56k steps at seq 128, then 6k at seq 512) run in order; each starts a fresh LAMB state
and schedule from the previous phase's parameters. A restarted run continues from the newest good
checkpoint in its workdir with exactly the losses of a run that never stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from squeezebert_jax import checkpointing, files, loop, losses, optim, parallel, pretrain_data, reporting, trainer
from squeezebert_jax.errors import InputError
from squeezebert_jax.flops import flops
from squeezebert_jax.pretrained import atomic_write, load_pretrained
from squeezebert_jax.tokenizer import Tokenizer
from squeezebert_jax.model import (ElectraPreTraining, SqueezeBertConfig, SqueezeBertForPreTraining, Structure,
                                   generator_config, set_execution)
from squeezebert_jax.pretrain_settings import (Phase, check_batch_division, check_init_vocabulary, check_settings,
                                               check_workdir, get_phases, microbatches, model_config, run_stream)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------------
# The update step
# --------------------------------------------------------------------------------------------------

def make_train_step(graphdef, rest, tx: optax.GradientTransformation, num_microbatches: int,
                    rtd_weight: float = 0.0):
    """``train_step(state, batch, rng, lr) -> (state, metrics)``: pure; jitted by the caller with shardings. ``tx``
    takes the update's learning rate ``lr`` as an input (``optim.learning_rate_input``): the host reads it from the
    phase's schedule, so that one compiled step serves every rate.

    The loss over the global batch is mean MLM NLL (over all real predictions) + mean SOP NLL; with
    ``num_microbatches`` > 1 the per-microbatch *sums* are accumulated and normalised once, so the
    gradient equals the big batch's up to float error. An ``ElectraPreTraining`` model (``rtd_weight`` > 0) trains
    ELECTRA's objective instead: the generator's MLM NLL + ``rtd_weight`` x the discriminator's mean per-token
    sigmoid cross-entropy on the sampled replacements (``losses.replace_with_samples``).
    """

    def sums_fn(params, batch, rng):
        model = nnx.merge(graphdef, params, rest)
        rng, sample_rng = jax.random.split(rng)
        nnx.reseed(model, dropout=rng, default=rng)
        model.train()
        inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        if not rtd_weight:
            return losses.pretraining_losses(model(*inputs, masked_positions=batch["masked_lm_positions"]), batch)
        gen = model.generator(*inputs, masked_positions=batch["masked_lm_positions"])
        s = losses.mlm_losses(gen.logits, batch)
        disc_ids, labels, _ = losses.replace_with_samples(batch["input_ids"], batch["masked_lm_positions"],
                                                   batch["masked_lm_ids"], batch["masked_lm_weights"], gen.logits,
                                                   sample_rng)
        disc = model.discriminator(disc_ids, batch["attention_mask"], batch["token_type_ids"])
        return s | losses.rtd_losses(disc.logits, labels, batch["attention_mask"])

    def loss_fn(params, batch, rng, norm):
        s = sums_fn(params, batch, rng)
        # Scaled so that summing the microbatch losses gives the global mean losses.
        second = (rtd_weight * s["rtd_bce_sum"] / norm["tokens"] if rtd_weight
                  else s["sop_nll_sum"] / norm["sop_count"])
        return s["mlm_nll_sum"] / norm["mlm_weight"] + second, s

    def normalizers(batch):
        return {"mlm_weight": jnp.maximum(jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)), 1.0),
                "sop_count": jnp.asarray(batch["sop_label"].shape[0], jnp.float32),
                "tokens": jnp.maximum(jnp.sum(batch["attention_mask"].astype(jnp.float32)), 1.0)}

    return trainer.make_train_step(loss_fn, tx, num_microbatches, normalizers,
                                   finalize=lambda loss, sums: losses.finalize_losses(sums, rtd_weight))


# --------------------------------------------------------------------------------------------------
# What each phase trains with
# --------------------------------------------------------------------------------------------------

def new_model(config: ml_collections.ConfigDict, vocab_size: int | None = None, platform: str | None = None):
    """``config``'s pretraining model, randomly initialised from ``config.seed``: a ``SqueezeBertForPreTraining``
    (MLM + SOP), or with ``objective="rtd"`` an ``ElectraPreTraining`` pair whose discriminator is ``config.model``;
    ``vocab_size`` (the tokenizer's) replaces the preset's when ``model.vocab_from_tokenizer``; ``platform``: where
    it will run (``model_config``)."""
    cfg = model_config(config, platform)
    if vocab_size and config.model.vocab_from_tokenizer:
        cfg = cfg.replace(vocab_size=vocab_size)
    rngs = nnx.Rngs(params=config.seed, dropout=config.seed)
    if rtd_weight(config):
        return ElectraPreTraining(cfg, config.rtd.generator_fraction, dtype=trainer.compute_dtype(config), rngs=rngs)
    return SqueezeBertForPreTraining(cfg, dtype=trainer.compute_dtype(config), rngs=rngs)


def rtd_weight(config) -> float:
    """The discriminator's loss weight when ``config.objective`` is "rtd" (ELECTRA's 50), else 0 (MLM + SOP)."""
    return float(config.rtd.weight) if config.objective == "rtd" else 0.0


def split_model(model) -> tuple[Any, dict, dict]:
    """(graphdef, params, rest) as plain arrays (safe to close over in the jitted step)."""
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)


def train_flops_per_sequence(cfg: SqueezeBertConfig, seq_len: int, max_predictions: int,
                             generator_fraction: float = 0.0) -> float:
    """Forward + backward (3x forward) FLOPs of one training sequence, MLM head at the masked positions (+ SOP); with
    ``generator_fraction`` ELECTRA's: the generator with its MLM head, and the discriminator with its per-token head."""
    if generator_fraction:
        g = generator_config(cfg, generator_fraction)
        gen = flops(g, seq_len) + max_predictions * (2 * g.hidden_size * g.embedding_size
                                                      + 2 * g.embedding_size * g.vocab_size)
        rtd_head = seq_len * (2 * cfg.hidden_size * cfg.hidden_size + 2 * cfg.hidden_size)
        return 3.0 * (gen + flops(cfg, seq_len) + rtd_head)
    head = max_predictions * (2 * cfg.hidden_size * cfg.hidden_size + 2 * cfg.hidden_size * cfg.vocab_size)
    return 3.0 * (flops(cfg, seq_len) + head + 2 * cfg.hidden_size * 2)


@dataclasses.dataclass
class PhaseStep:
    """What one phase trains with: optimizer, the learning rate of each of its steps, the train state's shardings and
    abstract shape, and the jitted step. ``pretrain`` runs ``step_fn(state, batch, rng, learning_rates[i])`` for the
    phase's step i; ``train/compile.py`` compiles the very same object for a TPU/GPU topology (``aot``)."""

    tx: optax.GradientTransformation
    learning_rates: np.ndarray  # [phase.num_steps] float32: warmup + polynomial decay over the phase
    init: Any  # params -> fresh train state of this phase
    shardings: Any
    abstract: Any  # the train state as ShapeDtypeStructs carrying their shardings
    step_fn: Any  # jax.jit(train_step) with in/out shardings and the state donated


_STEPS = trainer.StepCache()


def _jitted_train_step(graphdef, rest, tx_settings: tuple, num_microbatches: int, shardings, mesh,
                       rtd: float = 0.0):
    """``jax.jit(make_train_step(...))`` with LAMB at ``tx_settings`` (weight decay, clip norm), from ``_STEPS``: one
    per distinct (model structure, ``rest``'s values, settings, microbatches, shardings) in the process."""
    leaves, treedef = jax.tree.flatten(shardings)
    structure = Structure(graphdef)
    key = (structure, trainer.fingerprint(rest), tx_settings, num_microbatches, treedef, tuple(leaves),
           parallel.batch_sharding(mesh), rtd)

    def build():
        weight_decay, clip_norm = tx_settings
        tx = optim.learning_rate_input(optim.lamb, weight_decay=weight_decay, clip_norm=clip_norm)
        return trainer.jit_train_step(make_train_step(structure.graphdef, rest, tx, num_microbatches, rtd),
                                      shardings, mesh)

    return _STEPS.get(key, build)


def build_phase_step(config, phase: Phase, params, graphdef, rest, mesh, fsdp: bool) -> PhaseStep:
    """The phase's LAMB (fresh state, schedule over the phase's steps) and its jitted, sharded train step.
    ``params`` may be arrays or ShapeDtypeStructs: only their shapes are read."""
    schedule = optim.warmup_polynomial_decay(config.learning_rate, phase.num_steps, config.warmup_fraction,
                                             config.decay_power)
    tx = optim.learning_rate_input(optim.lamb, weight_decay=config.weight_decay, clip_norm=config.clip_norm)

    def init(p):
        return {"step": jnp.asarray(phase.start, jnp.int32), "params": p, "opt_state": tx.init(p)}

    shardings, abstract = trainer.train_state_shardings(init, params, mesh, fsdp)
    step_fn = _jitted_train_step(graphdef, rest, (config.weight_decay, config.clip_norm), microbatches(config, phase),
                                 shardings, mesh, rtd_weight(config))
    return PhaseStep(tx, optim.schedule_values(schedule, phase.num_steps), init, shardings, abstract, step_fn)


def phase_batches(config, phase: Phase, data_dir: str, mesh):
    """The phase's batch iterator: grain's loader (seeded per phase), behind a ``DevicePrefetcher`` when
    ``data.prefetch`` > 0 (its batches are then global arrays already on the devices)."""
    loader = pretrain_data.make_pretrain_loader(
        data_dir, seq_len=phase.seq_len, global_batch_size=config.global_batch_size,
        seed=config.seed + 1000 * phase.index, max_predictions_per_seq=phase.max_predictions_per_seq,
        whole_word_masking=config.data.whole_word_masking, num_workers=config.data.num_workers)
    batches = iter(loader)
    if config.data.prefetch > 0:  # batches made and put on the devices while the previous steps run
        batches = parallel.DevicePrefetcher(batches, mesh, depth=config.data.prefetch)
    return batches


# --------------------------------------------------------------------------------------------------
# One phase's steps
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Run:
    """What every phase of one run shares."""

    config: ml_collections.ConfigDict
    mesh: Any
    checkpointer: checkpointing.Checkpointer
    writer: reporting.MetricsWriter
    model_config: SqueezeBertConfig
    peak_flops: float | None  # per device; None: MFU left out (CPU)
    final_step: int  # the end of the last phase: the run is complete there
    data_fingerprint: dict  # saved with each checkpoint (pretrain_data.data_fingerprint), checked on resume
    stream: dict  # run_stream: saved with each checkpoint too (trainer.check_stream)


def second_task(m: dict) -> str:
    """"sop" or "rtd": the objective's second loss in a metrics row."""
    return "rtd" if "rtd_loss" in m else "sop"


def log_line(step: int, phase: Phase, m: dict) -> str:
    """The console's line per log interval: what metrics.jsonl holds, readable."""
    t = second_task(m)
    line = (f"step {step:>{len(str(phase.end))}d}/{phase.end} {phase.name} | loss {m['loss']:.4f} "
            f"(mlm {m['mlm_loss']:.4f} acc {m['mlm_accuracy']:.3f}, {t} {m[f'{t}_loss']:.4f} acc "
            f"{m[f'{t}_accuracy']:.3f}) | lr {m['learning_rate']:.3g} | grad norm {m['grad_norm']:.3g} | "
            f"{m['seq_per_s']:.1f} seq/s")
    return line + (f" | MFU {100 * m['mfu']:.1f}%" if m.get("mfu") else "")


def run_phase(run: Run, phase: Phase, ps: PhaseStep, state, batches, preempt) -> tuple[Any, dict, bool]:
    """Steps from ``state["step"]`` to ``phase.end`` through the shared loop (``loop.run``), or until a signal or
    ``stop_at_step`` stops the run before its final step. Returns ``(state, last logged metrics, stopped)``."""
    config = run.config
    rng = trainer.run_key(config.seed, config.rng_impl)
    n_dev = run.mesh.shape["data"]
    seq_flops = train_flops_per_sequence(run.model_config, phase.seq_len, phase.max_predictions_per_seq,
                                         config.rtd.generator_fraction if rtd_weight(config) else 0.0)
    on_device = isinstance(batches, parallel.DevicePrefetcher)
    last: dict = {}

    def step(state, i):
        batch = next(batches) if on_device else parallel.global_batch(next(batches), run.mesh)
        state, metrics = ps.step_fn(state, batch, rng, ps.learning_rates[i - phase.start])
        return state, metrics, None

    def log_row(done, window, dt, n):
        nonlocal last
        seq_s = n * config.global_batch_size / dt
        last = reporting.mean_metrics([m for m, _ in window]) | {
            "learning_rate": float(ps.learning_rates[done - phase.start - 1]), "seq_per_s": seq_s,
            "tokens_per_s": seq_s * phase.seq_len, "phase": phase.index,
            "mfu": seq_s * seq_flops / (run.peak_flops * n_dev) if run.peak_flops else None}
        reporting.say(log_line(done, phase, last))
        return last

    def postfix(m):
        t = second_task(m)
        return {"loss": f"{m['loss']:.3f}", "mlm_acc": f"{m['mlm_accuracy']:.3f}",
                f"{t}_acc": f"{m[f'{t}_accuracy']:.3f}"}

    def save(done, state):
        run.checkpointer.save(done, state, batches, force=True, meta={"data": run.data_fingerprint,
                                                                             "stream": run.stream})

    state, stopped = loop.run(state, int(jax.device_get(state["step"])), phase.end,
                              loop.Hooks(step, log_row, save, postfix=postfix), config=config,
                              checkpointer=run.checkpointer, writer=run.writer, preempt=preempt,
                              final_step=run.final_step, desc=f"{phase.name} (seq {phase.seq_len})")
    return state, last, stopped


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------

def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> dict[str, Any]:
    """Pretrain as ``config`` says, in ``workdir``; returns the last logged metrics, plus ``preempted``: True when
    the run stopped early (SIGTERM or ``stop_at_step``) with a checkpoint to resume from and no exported model.
    One run per workdir (``files.RunLock``); a workdir holding files of no pretraining run (a MODEL_DIR, say) is
    refused unless ``overwrite``."""
    workdir = files.path_argument("workdir", workdir)  # bytes or None: named, not os's TypeError
    check_settings(config)
    check_workdir(config, workdir, overwrite)
    check_init_vocabulary(config)
    # prepared data is read (its shards and tokenizer checked against meta.json) before anything is written: a damaged
    # shard left the new workdir's lock and checkpoints behind
    prepared = pretrain_data.data_fingerprint(config.data.path) if config.data.source == "prepared" else None

    # -- Distributed + mesh ------------------------------------------------------------------------
    parallel.maybe_initialize_distributed(config.coordinator_address or None, config.num_processes,
                                         config.process_id)
    mesh = parallel.make_mesh(config.num_devices or None)  # num_devices against the devices there are
    for phase in get_phases(config):  # before the demo data is made or anything else is written
        check_batch_division(config, phase, mesh.shape["data"])
    lock = files.RunLock(workdir, "pretraining") if jax.process_index() == 0 else contextlib.nullcontext()
    with lock:
        return _train_and_evaluate(config, workdir, mesh, prepared)


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, mesh, fingerprint: dict | None = None
                        ) -> dict[str, Any]:
    os.makedirs(workdir, exist_ok=True)

    # -- Data --------------------------------------------------------------------------------------
    data_dir = pretrain_data.prepare_demo(workdir, config.data) if config.data.source == "demo" else config.data.path
    tokenizer = Tokenizer.from_dir(data_dir)
    if tokenizer is None:
        raise FileNotFoundError(f"{data_dir}: no tokenizer file recorded by prepare_data")
    # an example is one document's sentence pair: a corpus smaller than a batch repeats documents within each batch
    num_records, steps = pretrain_data.load_meta(data_dir)["num_records"], get_phases(config)[-1].end
    if jax.process_index() == 0 and num_records < config.global_batch_size:
        log.warning("%s holds %d documents, fewer than one global batch of %d sequences (each a document's): every "
                    "batch repeats documents, and the %d steps read each about %.0f times", data_dir, num_records,
                    config.global_batch_size, steps, steps * config.global_batch_size / max(num_records, 1))

    # -- Model -------------------------------------------------------------------------------------
    if config.init_from:
        model = load_pretrained(config.init_from, "SqueezeBertForPreTraining", dtype=trainer.compute_dtype(config),
                                seed=config.seed)
        execution = model_config(config)  # the config's scan/remat/attention (model.overrides may set them)
        set_execution(model, execution.scan_layers, execution.remat, execution.attention, execution.ffn,
                      execution.padding, execution.layernorm)
    else:
        model = new_model(config, tokenizer.vocab_size)
    cfg = model.config
    # Under jax.jit an id past the embedding table is not an error: XLA clamps the gather index, so id V+50 silently
    # reads row V-1. Hence the check here, where the data meets the model (and the loader's, per record).
    if tokenizer.vocab_size > cfg.vocab_size:
        raise InputError(f"the tokenizer of {data_dir} has {tokenizer.vocab_size} ids but the model's vocab_size is "
                         f"{cfg.vocab_size}" + (f" ({config.init_from})" if config.init_from else "")
                         + ": use a model with vocab_size >= the tokenizer's (or model.vocab_from_tokenizer=True)")
    graphdef, params, rest = split_model(model)
    phases = get_phases(config)

    def setup(phase: Phase, params) -> tuple[PhaseStep, Any]:
        """The phase's optimizer and jitted step, and its batches."""
        return (build_phase_step(config, phase, params, graphdef, rest, mesh, config.fsdp),
                phase_batches(config, phase, data_dir, mesh))

    fingerprint = fingerprint or pretrain_data.data_fingerprint(data_dir)  # the demo's, made in the workdir
    checkpointer = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints,
                                              async_save=config.async_checkpoints, with_meta=True)
    start_data_over = pretrain_data.check_resume_data(checkpointer, data_dir, fingerprint,
                                                      config.data.start_over)
    stream = run_stream(config)
    trainer.check_stream(workdir, stream, bool(checkpointer.all_steps()), checkpointer.newest_stream())
    writer = reporting.MetricsWriter(workdir)
    run = Run(config, mesh, checkpointer, writer, cfg, reporting.peak_flops_per_device(config.peak_flops_per_device),
              phases[-1].end, fingerprint, stream)
    try:
        # -- Restore: the newest readable checkpoint in workdir, else init_from / scratch at step 0 ----------------
        # A checkpoint that cannot be read is set aside once an older one restores; one written by another config
        # raises CheckpointMismatchError; checkpoints of which none can be read stop the run (never a silent restart).
        built = {}  # saved step -> (its phase, PhaseStep, batches): what the checkpoint restores into

        def restore_target(saved_step):
            phase = next(p for p in phases if p.start < saved_step <= p.end)
            built[saved_step] = (phase, *setup(phase, params))
            return built[saved_step][1].abstract, None if start_data_over else built[saved_step][2]

        step, state, resumed = 0, None, None
        if restored := loop.restore(checkpointer, restore_target, run.final_step,
                                    f"whose phases end at step {run.final_step}", workdir=workdir, config=config,
                                    writer=writer, stream=stream):
            step, state = restored
            phase, ps, batches = built[step]
            params = state["params"]
            resumed = (ps, batches) if step < phase.end else None
            if resumed is None and isinstance(batches, parallel.DevicePrefetcher):
                batches.close()  # restored at its phase's end: the next phase starts fresh

        # -- Loop over phases: each starts a fresh LAMB state and schedule from the previous phase's parameters ---
        last, stopped = {}, False
        with trainer.PreemptionFlag(config.preemption_sync_every) as preempt:
            for phase in phases:
                if phase.end <= step:
                    continue
                if resumed is not None:
                    (ps, batches), resumed = resumed, None
                else:
                    ps, batches = setup(phase, params)
                    state = jax.device_put(ps.init(params), ps.shardings)
                try:
                    state, metrics, stopped = run_phase(run, phase, ps, state, batches, preempt)
                finally:
                    if isinstance(batches, parallel.DevicePrefetcher):
                        batches.close()
                last, params = metrics or last, state["params"]
                if stopped:
                    break
    finally:
        checkpointer.close()
        writer.close()
    if stopped:
        log.warning("stopped early (signal or stop_at_step): checkpoint saved, exiting cleanly; run again on %s "
                    "to resume", workdir)
        return last | {"preempted": True, "checkpoint_step": max(checkpointer.steps_on_disk(), default=None)}

    # -- Export: a MODEL_DIR that convert/to_pytorch.py accepts (an ELECTRA pair: the discriminator is the model, the
    # generator is kept beside it) ----------------------------------------------------------------------------------
    out = {os.path.join(workdir, "model"): model}
    if isinstance(model, ElectraPreTraining):
        out = {os.path.join(workdir, "model"): model.discriminator, os.path.join(workdir, "generator"): model.generator}
    loop.export(model, params, data_dir, out)
    if jax.process_index() == 0:
        atomic_write(os.path.join(workdir, "final_metrics.json"), files.json_text(last, indent=2))
    return last | {"preempted": False}
