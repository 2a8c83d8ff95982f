"""MLM + sentence-order-prediction pretraining with LAMB on a device mesh (the paper's recipe).

One linear trainer, read top to bottom: distributed start-up, mesh, data, model + optimizer, the pure
jitted update step, restore, loop (progress bar, metrics, checkpoints, preemption), export.
Phases (the paper: 56k steps at seq 128, then 6k at seq 512) run in order; each starts a fresh LAMB state
and schedule from the previous phase's parameters. A restarted run continues from the newest good
checkpoint in its workdir with exactly the losses of a run that never stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
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

from squeezebert_jax import checkpointing, corpus, files, loop, optim, parallel, pretrain_data, reporting, trainer
from squeezebert_jax.errors import InputError
from squeezebert_jax.flops import flops
from squeezebert_jax.pretrained import atomic_write, load_pretrained, read_model_config, save_pretrained
from squeezebert_jax.tokenizer import Tokenizer
from squeezebert_jax.model import (ElectraPreTraining, SqueezeBertConfig, SqueezeBertForPreTraining, Structure,
                                   generator_config, set_execution)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------------

def pretraining_losses(out, batch) -> dict[str, jax.Array]:
    """Per-batch sums (so microbatches add up exactly): MLM NLL over real predictions, SOP NLL."""
    sop_logp = jax.nn.log_softmax(out.sop_logits.astype(jnp.float32), axis=-1)
    sop_nll = -jnp.take_along_axis(sop_logp, batch["sop_label"][:, None], axis=-1)[:, 0]
    return mlm_losses(out.mlm_logits, batch) | {
        "sop_nll_sum": jnp.sum(sop_nll),
        "sop_correct_sum": jnp.sum((jnp.argmax(sop_logp, -1) == batch["sop_label"]).astype(jnp.float32)),
        "sop_count": jnp.asarray(sop_nll.shape[0], jnp.float32)}


def mlm_losses(mlm_logits, batch) -> dict[str, jax.Array]:
    """Per-batch sums of the MLM NLL and accuracy over the real predictions (``masked_lm_weights`` > 0)."""
    logp = jax.nn.log_softmax(mlm_logits.astype(jnp.float32), axis=-1)
    ids, w = batch["masked_lm_ids"], batch["masked_lm_weights"].astype(jnp.float32)
    nll = -jnp.take_along_axis(logp, ids[..., None], axis=-1)[..., 0]
    correct = (jnp.argmax(logp, -1) == ids).astype(jnp.float32)
    return {"mlm_nll_sum": jnp.sum(nll * w), "mlm_correct_sum": jnp.sum(correct * w), "mlm_weight": jnp.sum(w)}


def finalize_losses(s: dict[str, jax.Array], rtd_weight: float = 0.0) -> dict[str, jax.Array]:
    mlm = s["mlm_nll_sum"] / jnp.maximum(s["mlm_weight"], 1.0)
    out = {"mlm_loss": mlm, "mlm_accuracy": s["mlm_correct_sum"] / jnp.maximum(s["mlm_weight"], 1.0)}
    if "rtd_bce_sum" in s:  # ELECTRA: the generator's MLM + rtd_weight x the discriminator's per-token BCE
        rtd = s["rtd_bce_sum"] / jnp.maximum(s["rtd_tokens"], 1.0)
        return out | {"loss": mlm + rtd_weight * rtd, "rtd_loss": rtd,
                      "rtd_accuracy": s["rtd_correct_sum"] / jnp.maximum(s["rtd_tokens"], 1.0),
                      "replaced_share": s["rtd_replaced_sum"] / jnp.maximum(s["rtd_tokens"], 1.0)}
    sop = s["sop_nll_sum"] / jnp.maximum(s["sop_count"], 1.0)
    return out | {"loss": mlm + sop, "sop_loss": sop,
                  "sop_accuracy": s["sop_correct_sum"] / jnp.maximum(s["sop_count"], 1.0)}


def replace_with_samples(input_ids, positions, original_ids, weights, generator_logits, rng):
    """ELECTRA's corruption: at each real masked position (``weights`` > 0) the token is replaced by a sample of the
    generator's softmax (Gumbel-max, no gradient through it); everywhere else the input stays. Returns (the
    discriminator's input ids [B, S], its labels [B, S]: 1 where the token differs from the original -- a sample that
    equals the original counts as original --, the samples [B, P])."""
    logits = jax.lax.stop_gradient(generator_logits.astype(jnp.float32))
    gumbel = -jnp.log(-jnp.log(jax.random.uniform(rng, logits.shape, jnp.float32, 1e-9, 1.0)))
    sampled = jnp.argmax(logits + gumbel, axis=-1).astype(input_ids.dtype)
    real = weights > 0
    rows = jnp.arange(input_ids.shape[0])[:, None]
    at = jnp.where(real, positions, input_ids.shape[1])  # padding predictions write out of bounds: dropped
    disc_ids = input_ids.at[rows, at].set(sampled, mode="drop")
    labels = jnp.zeros(input_ids.shape, jnp.int32).at[rows, at].set(
        (sampled != original_ids).astype(jnp.int32), mode="drop")
    return disc_ids, labels, sampled


def rtd_losses(discriminator_logits, labels, attention_mask) -> dict[str, jax.Array]:
    """Per-batch sums of the discriminator's sigmoid cross-entropy over the real tokens, its accuracy and the
    share of replaced tokens."""
    z = discriminator_logits.astype(jnp.float32)
    y = labels.astype(jnp.float32)
    m = attention_mask.astype(jnp.float32)
    bce = optax.sigmoid_binary_cross_entropy(z, y)
    return {"rtd_bce_sum": jnp.sum(bce * m), "rtd_correct_sum": jnp.sum(((z > 0) == (y > 0)) * m),
            "rtd_replaced_sum": jnp.sum(y * m), "rtd_tokens": jnp.sum(m)}


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
    sigmoid cross-entropy on the sampled replacements (``replace_with_samples``).
    """

    def sums_fn(params, batch, rng):
        model = nnx.merge(graphdef, params, rest)
        rng, sample_rng = jax.random.split(rng)
        nnx.reseed(model, dropout=rng, default=rng)
        model.train()
        inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        if not rtd_weight:
            return pretraining_losses(model(*inputs, masked_positions=batch["masked_lm_positions"]), batch)
        gen = model.generator(*inputs, masked_positions=batch["masked_lm_positions"])
        s = mlm_losses(gen.logits, batch)
        disc_ids, labels, _ = replace_with_samples(batch["input_ids"], batch["masked_lm_positions"],
                                                   batch["masked_lm_ids"], batch["masked_lm_weights"], gen.logits,
                                                   sample_rng)
        disc = model.discriminator(disc_ids, batch["attention_mask"], batch["token_type_ids"])
        return s | rtd_losses(disc.logits, labels, batch["attention_mask"])

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
                                   finalize=lambda loss, sums: finalize_losses(sums, rtd_weight))


# --------------------------------------------------------------------------------------------------
# Phases and what each one trains with
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of the recipe: global steps ``start + 1 .. end``, its sequence length and masked predictions, and its
    own gradient accumulation (0: the config's ``num_microbatches``)."""

    name: str
    index: int
    start: int
    num_steps: int
    seq_len: int
    max_predictions_per_seq: int
    num_microbatches: int = 0

    @property
    def end(self) -> int:
        return self.start + self.num_steps


def get_phases(config) -> list[Phase]:
    """``config.phases`` (dicts, as config files write them) as consecutive ``Phase`` records."""
    out, start = [], 0
    for i, p in enumerate(config.phases):
        unknown = set(p) - ({f.name for f in dataclasses.fields(Phase)} - {"index", "start"})  # those two: derived
        if unknown:
            raise InputError(f"config.phases[{i}]: unknown keys {sorted(unknown)}; a phase has name, num_steps, "
                             "seq_len, max_predictions_per_seq and optionally num_microbatches")
        out.append(Phase(p["name"], i, start, p["num_steps"], p["seq_len"], p["max_predictions_per_seq"],
                         p.get("num_microbatches") or 0))
        start += p["num_steps"]
    return out


def model_config(config: ml_collections.ConfigDict) -> SqueezeBertConfig:
    """The architecture of ``config.model`` (preset + overrides) with its execution choices (scan, remat,
    attention)."""
    overrides = dict(config.model.overrides)
    for field in ("scan_layers", "remat", "attention"):
        overrides.setdefault(field, config.model[field])
    try:
        return SqueezeBertConfig.preset(config.model.preset, **overrides)
    except InputError as e:  # the model's own validator; the refusal names the config section it read
        raise InputError(f"config.model: {e}") from None


def new_model(config: ml_collections.ConfigDict, vocab_size: int | None = None):
    """``config``'s pretraining model, randomly initialised from ``config.seed``: a ``SqueezeBertForPreTraining``
    (MLM + SOP), or with ``objective="rtd"`` an ``ElectraPreTraining`` pair whose discriminator is ``config.model``;
    ``vocab_size`` (the tokenizer's) replaces the preset's when ``model.vocab_from_tokenizer``."""
    cfg = model_config(config)
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


def microbatches(config, phase: Phase) -> int:
    """Gradient-accumulation steps of ``phase``: its own ``num_microbatches`` (a seq-512 phase may need more than a
    seq-128 one) or the config's."""
    k = int(phase.num_microbatches or config.num_microbatches)
    if k < 1:
        raise InputError(f"{phase.name}: num_microbatches {k} must be >= 1")
    return k


def check_batch_division(config, phase: Phase, num_devices: int) -> None:
    k = microbatches(config, phase)
    if config.global_batch_size % (num_devices * k):
        raise InputError(f"{phase.name}: global_batch_size {config.global_batch_size} must divide by devices x "
                         f"microbatches ({num_devices} x {k})")


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


def prepare_demo_data(config, workdir: str) -> str:
    """The embedded corpus: generated by the project's grammar, tokenized once into ArrayRecord shards."""

    data_dir = os.path.join(workdir, "data")
    if os.path.exists(os.path.join(data_dir, "meta.json")):
        return data_dir
    if jax.process_index() == 0:
        os.makedirs(data_dir, exist_ok=True)
        os.makedirs(os.path.join(workdir, "demo"), exist_ok=True)
        text = os.path.join(workdir, "demo", "corpus.txt")
        corpus.write_corpus(text, num_docs=config.data.demo_num_docs, seed=config.data.demo_seed)
        vocab = os.path.join(workdir, "demo", "vocab.txt")
        corpus.write_demo_vocab(vocab)
        pretrain_data.prepare([text], Tokenizer.from_file(vocab), data_dir, num_shards=config.data.num_shards)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("demo_data")
    return data_dir


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


# Checked on the host before anything is logged or saved: the loss (of the params before the step's update), and
# the gradient and parameter norms (the latter of the params after it, i.e. of the state a checkpoint would hold).
FINITE_METRICS = ("loss", "grad_norm", "param_norm")


def run_phase(run: Run, phase: Phase, ps: PhaseStep, state, batches, preempt) -> tuple[Any, dict, bool]:
    """Steps from ``state["step"]`` to ``phase.end``, or until a signal or ``stop_at_step`` stops the run before its
    final step. Returns ``(state, last logged metrics, stopped)``; logs, checkpoints and checks finiteness on the way."""
    config, checkpointer = run.config, run.checkpointer
    rng = trainer.run_key(config.seed, config.rng_impl)
    n_dev = run.mesh.shape["data"]
    start = int(jax.device_get(state["step"]))
    seq_flops = train_flops_per_sequence(run.model_config, phase.seq_len, phase.max_predictions_per_seq,
                                         config.rtd.generator_fraction if rtd_weight(config) else 0.0)
    pending: list[tuple[int, dict]] = []  # (step, device metrics) not yet fetched and checked
    window: list[dict] = []  # checked host metrics since the last log line
    timer, last, stop = reporting.Timer(), {}, False

    def fetch_and_check():
        """Fetch the pending steps' metrics; raise naming the first step with a non-finite one."""
        host = jax.device_get([m for _, m in pending])
        loop.check_finite(zip([s for s, _ in pending], host), FINITE_METRICS, checkpointer)
        window.extend(host)
        pending.clear()

    bar = tqdm(total=phase.end, initial=start, desc=f"{phase.name} (seq {phase.seq_len})",
               disable=jax.process_index() != 0 or not config.progress, dynamic_ncols=True)
    on_device = isinstance(batches, parallel.DevicePrefetcher)
    for step in range(start, phase.end):
        batch = next(batches) if on_device else parallel.global_batch(next(batches), run.mesh)
        state, metrics = ps.step_fn(state, batch, rng, ps.learning_rates[step - phase.start])
        done = step + 1
        pending.append((done, metrics))
        timer.tick()
        bar.update(1)
        # the same decision on every host: the signal flag is agreed collectively, stop_at_step is config
        stop = preempt.should_stop(done, boundary=done == phase.end)
        stop = stop or (config.stop_at_step > 0 and done >= config.stop_at_step)
        stop = stop and done < run.final_step  # at the last step the run is complete: finish and export
        if done % config.log_every == 0 or done == phase.end or stop:
            fetch_and_check()
            m = reporting.mean_metrics(window)
            window.clear()
            dt, n = timer.lap()
            seq_s = n * config.global_batch_size / dt
            m |= {"learning_rate": float(ps.learning_rates[done - phase.start - 1]), "seq_per_s": seq_s,
                  "tokens_per_s": seq_s * phase.seq_len, "phase": phase.index,
                  "mfu": seq_s * seq_flops / (run.peak_flops * n_dev) if run.peak_flops else None}
            run.writer.write(done, m)
            reporting.say(log_line(done, phase, m))
            t = second_task(m)
            bar.set_postfix(**{"loss": f"{m['loss']:.3f}", "mlm_acc": f"{m['mlm_accuracy']:.3f}",
                               f"{t}_acc": f"{m[f'{t}_accuracy']:.3f}"})
            last = m
        if done % config.checkpoint_every == 0 or done == phase.end or stop:
            fetch_and_check()  # never save a state whose step has not been checked
            checkpointer.save(done, state, batches, force=True, meta={"data": run.data_fingerprint})
        if stop:
            break
    bar.close()
    return state, last, stop


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------

def check_settings(config: ml_collections.ConfigDict) -> None:
    """Every setting against its range and the others, before anything is written, loaded or compiled: one line naming
    the setting, its value and what is valid (a phase-2 ``seq_len`` past the model's positions is refused here, not
    56k steps into the run)."""

    def need(ok: bool, name: str, valid: str):
        if not ok:
            value = config
            for part in name.replace("]", "").replace("[", ".").split("."):
                value = value[int(part)] if isinstance(value, (list, tuple)) else value[part]
            raise InputError(f"config.{name}={value!r}: {valid}")

    def finite(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    need(finite(config.learning_rate) and config.learning_rate > 0, "learning_rate", "a finite rate > 0")
    need(config.rng_impl in trainer.RNG_IMPLS, "rng_impl", " or ".join(trainer.RNG_IMPLS))
    need(finite(config.warmup_fraction) and 0 <= config.warmup_fraction <= 1, "warmup_fraction", "a fraction in [0, 1]")
    need(finite(config.decay_power) and config.decay_power > 0, "decay_power", "a finite power > 0")
    need(finite(config.weight_decay) and config.weight_decay >= 0, "weight_decay", "a finite decay >= 0")
    need(config.clip_norm is None or (finite(config.clip_norm) and config.clip_norm >= 0), "clip_norm",
         "a global norm > 0, or 0 for no clipping")
    for name in ("global_batch_size", "num_microbatches", "log_every", "checkpoint_every", "preemption_sync_every"):
        need(isinstance(config[name], int) and config[name] >= 1, name, "an integer >= 1")
    need(isinstance(config.keep_checkpoints, int) and config.keep_checkpoints >= 1, "keep_checkpoints",
         "an integer >= 1 (the newest this many are kept; 0 would delete every checkpoint)")
    need(isinstance(config.stop_at_step, int) and config.stop_at_step >= 0, "stop_at_step", "an integer >= 0 (0: off)")
    parallel.check_num_devices(config.num_devices, count=False)  # counted by make_mesh, once jax.distributed is up
    for name, valid in (("data.num_workers", "an integer >= 0 (0: grain's thread in this process)"),
                        ("data.prefetch", "an integer >= 0 (0: batches made inline)"),
                        ("data.num_shards", "an integer >= 1"), ("data.demo_num_docs", "an integer >= 1")):
        v = config[name.split(".")[0]] if "." not in name else config.data[name.split(".")[1]]
        need(isinstance(v, int) and not isinstance(v, bool) and v >= (1 if valid.endswith(">= 1") else 0), name,
             valid)
    need(finite(config.peak_flops_per_device) and config.peak_flops_per_device >= 0, "peak_flops_per_device",
         "a finite FLOP/s >= 0 (0: looked up by device kind)")
    need(config.objective in ("mlm_sop", "rtd"), "objective",
         "mlm_sop (masked LM + sentence order) or rtd (ELECTRA's replaced-token detection)")
    if config.objective == "rtd":
        need(finite(config.rtd.weight) and config.rtd.weight > 0, "rtd.weight", "a finite weight > 0 (ELECTRA: 50)")
        need(finite(config.rtd.generator_fraction) and 0 < config.rtd.generator_fraction <= 1,
             "rtd.generator_fraction", "a fraction in (0, 1] of the discriminator's width (ELECTRA: 1/4)")
        need(not config.init_from, "init_from", "empty with objective=rtd (the generator and discriminator pair "
             "starts from random weights here)")
    need(config.data.source in ("demo", "prepared"), "data.source", "demo or prepared")
    need(config.data.source != "prepared" or bool(config.data.path), "data.path",
         "a directory written by train/prepare_data.py (data.source=prepared)")
    trainer.compute_dtype(config)
    if not config.phases:
        raise InputError("config.phases is empty: at least one phase (name, num_steps, seq_len, "
                         "max_predictions_per_seq)")
    if config.init_from:

        positions, source = read_model_config(config.init_from)[0].max_position_embeddings, config.init_from
    else:
        positions, source = model_config(config).max_position_embeddings, f"model.preset {config.model.preset!r}"
    for phase in get_phases(config):
        at = f"phases[{phase.index}]"
        need(isinstance(phase.num_steps, int) and phase.num_steps >= 1, f"{at}.num_steps", "an integer >= 1")
        need(isinstance(phase.seq_len, int) and 5 <= phase.seq_len <= positions, f"{at}.seq_len",
             f"an integer in [5, {positions}] (the max_position_embeddings of {source}; 5: [CLS] a [SEP] b [SEP])")
        need(isinstance(phase.max_predictions_per_seq, int) and 1 <= phase.max_predictions_per_seq <= phase.seq_len,
             f"{at}.max_predictions_per_seq", f"an integer in [1, seq_len {phase.seq_len}]")
        microbatches(config, phase)


def check_data_unchanged(config, checkpointer: checkpointing.Checkpointer, data_dir: str, fingerprint: dict) -> bool:
    """Refuse to resume on data other than the newest checkpoint's (``pretrain_data.data_fingerprint``): another
    vocabulary always; other shards unless ``data.start_over`` (then True: the data iterator starts afresh). A
    checkpoint from before fingerprints is resumed with a warning."""
    for step in checkpointer.all_steps()[::-1]:
        try:
            saved = checkpointer.read_meta(step).get("data")
        except Exception:  # noqa: BLE001 -- no meta item (an older checkpoint) or damage: restore decides
            continue
        if not saved:
            break
        vocab, change = pretrain_data.fingerprint_change(saved, fingerprint)
        if not change:
            return False
        where = (f"the prepared data in {data_dir} changed since the checkpoint at step {step} in "
                 f"{checkpointer.directory}")
        if vocab:
            raise InputError(f"{where}: {change}. The checkpoints are left untouched: resume with the data they were "
                             "written with, or start a new workdir (--config.init_from a MODEL_DIR keeps weights)")
        if not config.data.get("start_over", False):
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


# The settings that define a pretraining run's stream: which sequences land at which step (the loader's seed per phase,
# the batch, each phase's length and masking, where each phase begins and ends) and what they are trained towards. Each
# start records them (``run_stream``); a resume with any of them changed is refused (``trainer.check_stream``). The data
# itself is checked against each checkpoint's record of it (``check_data_unchanged``: ``data.start_over`` may accept
# shards prepared again). Any other setting may change on resume, logged at WARNING (``trainer.record_config``):
# learning_rate, log_every, checkpoint_every, stop_at_step, num_devices, num_microbatches, ...
RUN_SETTINGS = ("seed", "global_batch_size", "objective", "data.whole_word_masking")
PHASE_STREAM = ("num_steps", "seq_len", "max_predictions_per_seq")


def run_stream(config: ml_collections.ConfigDict) -> dict:
    """The fingerprint of this run's training stream (``trainer.run_stream``): ``RUN_SETTINGS`` and each phase's
    ``PHASE_STREAM`` fields."""
    phases = {f"config.phases[{p.index}].{f}": getattr(p, f) for p in get_phases(config) for f in PHASE_STREAM}
    return trainer.run_stream(config, RUN_SETTINGS, derived=phases)


DEMO_ENTRIES = ("data", "demo")  # what the demo source writes into a workdir before its first checkpoint


def check_workdir(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> str:
    """The workdir can hold this pretraining run (``files.check_run_dir``): nothing is written before this."""
    return files.check_run_dir(workdir, "pretraining", overwrite,
                               ours=DEMO_ENTRIES if config.data.source == "demo" else ())


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> dict[str, Any]:
    """Pretrain as ``config`` says, in ``workdir``; returns the last logged metrics, plus ``preempted``: True when
    the run stopped early (SIGTERM or ``stop_at_step``) with a checkpoint to resume from and no exported model.
    One run per workdir (``files.RunLock``); a workdir holding files of no pretraining run (a MODEL_DIR, say) is
    refused unless ``overwrite``."""
    workdir = os.fspath(workdir)
    check_settings(config)
    check_workdir(config, workdir, overwrite)

    # -- Distributed + mesh ------------------------------------------------------------------------
    parallel.maybe_initialize_distributed(config.coordinator_address or None, config.num_processes,
                                         config.process_id)
    mesh = parallel.make_mesh(config.num_devices or None)  # num_devices against the devices there are
    lock = files.RunLock(workdir, "pretraining") if jax.process_index() == 0 else contextlib.nullcontext()
    with lock:
        return _train_and_evaluate(config, workdir, mesh)


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, mesh) -> dict[str, Any]:
    os.makedirs(workdir, exist_ok=True)

    # -- Data --------------------------------------------------------------------------------------
    data_dir = prepare_demo_data(config, workdir) if config.data.source == "demo" else config.data.path
    tokenizer = Tokenizer.from_dir(data_dir)
    if tokenizer is None:
        raise FileNotFoundError(f"{data_dir}: no tokenizer file recorded by prepare_data")

    # -- Model -------------------------------------------------------------------------------------
    if config.init_from:
        model = load_pretrained(config.init_from, "SqueezeBertForPreTraining", dtype=trainer.compute_dtype(config),
                                seed=config.seed)
        execution = model_config(config)  # the config's scan/remat/attention (model.overrides may set them)
        set_execution(model, execution.scan_layers, execution.remat, execution.attention)
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
    for phase in phases:
        check_batch_division(config, phase, mesh.shape["data"])

    def setup(phase: Phase, params) -> tuple[PhaseStep, Any]:
        """The phase's optimizer and jitted step, and its batches."""
        return (build_phase_step(config, phase, params, graphdef, rest, mesh, config.fsdp),
                phase_batches(config, phase, data_dir, mesh))

    checkpointer = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints,
                                              async_save=config.async_checkpoints, with_meta=True)
    fingerprint = pretrain_data.data_fingerprint(data_dir)
    start_data_over = check_data_unchanged(config, checkpointer, data_dir, fingerprint)
    stream = run_stream(config)
    trainer.check_stream(workdir, stream, bool(checkpointer.all_steps()))
    writer = reporting.MetricsWriter(workdir)
    run = Run(config, mesh, checkpointer, writer, cfg, reporting.peak_flops_per_device(config.peak_flops_per_device),
              phases[-1].end, fingerprint)
    try:
        # -- Restore: the newest readable checkpoint in workdir, else init_from / scratch at step 0 ----------------
        # A checkpoint that cannot be read is set aside once an older one restores; one written by another config
        # raises CheckpointMismatchError; checkpoints of which none can be read stop the run (never a silent restart).
        loop.check_checkpoints_within(checkpointer, run.final_step, f"whose phases end at step {run.final_step}")
        built = {}  # saved step -> (its phase, PhaseStep, batches): what the checkpoint restores into

        def restore_target(saved_step):
            phase = next(p for p in phases if p.start < saved_step <= p.end)
            built[saved_step] = (phase, *setup(phase, params))
            return built[saved_step][1].abstract, None if start_data_over else built[saved_step][2]

        step, state, resumed = 0, None, None
        if restored := checkpointer.restore(restore_target):
            step, state = restored
            phase, ps, batches = built[step]
            params = state["params"]
            resumed = (ps, batches) if step < phase.end else None
            if resumed is None and isinstance(batches, parallel.DevicePrefetcher):
                batches.close()  # restored at its phase's end: the next phase starts fresh
            log.info("resuming from the checkpoint at step %d", step)
            reporting.say(f"resuming from the checkpoint at step {step} in {checkpointer.directory}")
        loop.begin(workdir, config, step, writer, stream)

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

    # -- Export: a MODEL_DIR that convert/to_pytorch.py accepts ---------------------------------------
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        params = multihost_utils.process_allgather(params, tiled=True)
    params_state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params_state, jax.device_get(params))
    nnx.update(model, params_state)
    if jax.process_index() == 0:
        if isinstance(model, ElectraPreTraining):  # the discriminator is the model; the generator is kept beside it
            save_pretrained(model.discriminator, os.path.join(workdir, "model"), tokenizer_dir=data_dir)
            save_pretrained(model.generator, os.path.join(workdir, "generator"), tokenizer_dir=data_dir)
        else:
            save_pretrained(model, os.path.join(workdir, "model"), tokenizer_dir=data_dir)
        atomic_write(os.path.join(workdir, "final_metrics.json"), json.dumps(last, indent=2))
    return last | {"preempted": False}

