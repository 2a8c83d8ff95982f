"""Training throughput: the jitted pretraining step on synthetic batches (sequences/s, tokens/s, MFU), and whether
the real input pipeline keeps that step fed."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import optim, parallel, pretrain, pretrain_data, reporting, trainer
from squeezebert_jax.benchmarks.timing import time_interleaved, time_steps
from squeezebert_jax.model import SqueezeBertConfig, SqueezeBertForPreTraining
from squeezebert_jax.tokenizer import Tokenizer

# --------------------------------------------------------------------------------------------------
# The train step on synthetic batches
# --------------------------------------------------------------------------------------------------

def benchmark_train_step(cfg: SqueezeBertConfig, seq_len: int, batch_size: int, max_predictions: int,
                         dtype=jnp.bfloat16, steps: int = 10, warmup: int = 2, fsdp: bool = False,
                         peak_flops: float | None = None, rng_impl: str = "threefry2x32") -> dict[str, float]:
    """Sequences/s, tokens/s and MFU of the jitted LAMB train step (``pretrain.make_train_step``) on synthetic
    batches, on all devices. MFU uses ``peak_flops`` per device, else ``chips.PEAK_FLOPS`` (None where unknown);
    ``rng_impl``: the dropout bits' generator (``trainer.run_key``)."""
    mesh = parallel.make_mesh()
    model = SqueezeBertForPreTraining(cfg, dtype=dtype, rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, params_state, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params_state), nnx.to_pure_dict(rest)
    tx, lr = optim.learning_rate_input(optim.lamb), np.float32(2.5e-3)  # the paper's peak rate, every step
    state = {"step": jnp.asarray(0, jnp.int32), "params": params, "opt_state": tx.init(params)}
    shardings = parallel.state_shardings(state, mesh, fsdp)
    state = jax.device_put(state, shardings)
    rng = np.random.default_rng(0)
    b, s, p = batch_size, seq_len, max_predictions
    batch = {"input_ids": rng.integers(5, cfg.vocab_size, (b, s)).astype(np.int32),
             "token_type_ids": (np.arange(s)[None] >= s // 2).repeat(b, 0).astype(np.int32),
             "attention_mask": np.ones((b, s), np.int32),
             "masked_lm_positions": np.sort(rng.integers(1, s, (b, p)), 1).astype(np.int32),
             "masked_lm_ids": rng.integers(5, cfg.vocab_size, (b, p)).astype(np.int32),
             "masked_lm_weights": np.ones((b, p), np.float32), "sop_label": rng.integers(0, 2, b).astype(np.int32)}
    batch = parallel.global_batch(batch, mesh)
    step = trainer.jit_train_step(pretrain.make_train_step(graphdef, rest, tx, 1), shardings, mesh)
    key, carry = trainer.run_key(0, rng_impl), [state, None]

    def one_step():
        carry[:] = step(carry[0], batch, key, lr)

    dt = time_steps(one_step, lambda: jax.block_until_ready(carry[1]), steps, warmup)
    peak = reporting.peak_flops_per_device(peak_flops)
    seq_s = b / dt
    mfu = seq_s * pretrain.train_flops_per_sequence(cfg, s, p) / (peak * mesh.shape["data"]) if peak else None
    return {"seq_per_s": seq_s, "tokens_per_s": seq_s * s, "step_ms": 1000 * dt, "mfu": mfu}


# --------------------------------------------------------------------------------------------------
# Is the device fed? The pretraining step with the real input pipeline vs a fixed batch
# --------------------------------------------------------------------------------------------------

def feeding_benchmark(config, workdir: str, steps_per_run: int = 10, runs: int = 6,
                      depth: int | None = None) -> dict[str, float]:
    """Steps/s of ``config``'s first-phase pretraining step (``pretrain.build_phase_step``, the step pretrain.py runs)
    fed three ways, interleaved in one run: one fixed batch already on the devices ("synthetic", the ceiling), the
    real loader with batches made and put on the devices inline before each step ("inline", ``data.prefetch=0``),
    and the real loader behind ``parallel.DevicePrefetcher`` ("prefetched", depth ``data.prefetch``). Each timed
    call runs ``steps_per_run`` steps without waiting between them (as the training loop does) and then blocks.
    ``workdir`` receives the demo data when ``config.data.source`` is "demo"."""

    data_dir = pretrain_data.prepare_demo(workdir, config.data) if config.data.source == "demo" else config.data.path
    phase = pretrain.get_phases(config)[0]
    mesh = parallel.make_mesh(config.num_devices or None)
    model = pretrain.new_model(config, Tokenizer.from_dir(data_dir).vocab_size)
    graphdef, params, rest = pretrain.split_model(model)
    ps = pretrain.build_phase_step(config, phase, params, graphdef, rest, mesh, config.fsdp)
    state = [jax.device_put(ps.init(params), ps.shardings)]
    key = trainer.run_key(config.seed, config.rng_impl)

    def loader():
        return iter(pretrain_data.make_pretrain_loader(
            data_dir, seq_len=phase.seq_len, global_batch_size=config.global_batch_size, seed=config.seed,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            whole_word_masking=config.data.whole_word_masking, num_workers=config.data.num_workers))

    inline = loader()
    prefetched = parallel.DevicePrefetcher(loader(), mesh, depth=depth or config.data.prefetch or 2)
    fixed = parallel.global_batch(next(loader()), mesh)
    feeds = {"synthetic": lambda: fixed, "inline": lambda: parallel.global_batch(next(inline), mesh),
             "prefetched": lambda: next(prefetched)}

    lr = ps.learning_rates.max()  # the schedule's peak, every step (its first, warm-up value is 0)

    def run(feed):
        def f():
            m = None
            for _ in range(steps_per_run):
                state[0], m = ps.step_fn(state[0], feed(), key, lr)
            jax.block_until_ready(m)
        return f

    try:
        t = time_interleaved({k: run(f) for k, f in feeds.items()}, runs=runs, warmup=1)
    finally:
        prefetched.close()
    return {k: steps_per_run / (v.median / 1e3) for k, v in t.items()}
