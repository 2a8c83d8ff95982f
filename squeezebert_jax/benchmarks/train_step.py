"""Training throughput: the jitted pretraining step on synthetic batches (sequences/s, tokens/s, MFU), and whether
the real input pipeline keeps that step fed."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import optim, parallel, pretrain, pretrain_data, pretrain_settings, reporting, trainer
from squeezebert_jax.benchmarks.timing import time_interleaved, time_steps
from squeezebert_jax.model import SqueezeBertConfig, SqueezeBertForPreTraining
from squeezebert_jax.tokenizer import Tokenizer

# --------------------------------------------------------------------------------------------------
# The train step on synthetic batches
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class StepBench:
    """The jitted LAMB train step (``pretrain.make_train_step``) of one model on synthetic batches, on all devices,
    ready to compile (``compile``: safe to call from several threads at once) and to time or profile."""

    cfg: SqueezeBertConfig
    seq_len: int
    batch_size: int
    max_predictions: int
    step: Any  # the jitted step
    args: list  # [state, batch, key, lr]; the state is donated and replaced by each call
    data_devices: int
    compiler_options: dict | None = None  # XLA options of this compile alone: {"xla_gpu_enable_triton_gemm": False}
    compiled: Any = None
    metrics: Any = None

    def compile(self) -> "StepBench":
        if self.compiled is None:
            self.compiled = self.step.lower(*self.args).compile(compiler_options=self.compiler_options)
        return self

    def one_step(self) -> None:
        self.args[0], self.metrics = self.compile().compiled(*self.args)

    def sync(self) -> None:
        jax.block_until_ready(self.metrics)

    def blocking_step(self) -> None:
        self.one_step()
        self.sync()

    def time(self, steps: int = 10, warmup: int = 2, peak_flops: float | None = None) -> dict[str, float]:
        """Sequences/s, tokens/s, step ms and MFU (with ``peak_flops`` per device, else ``chips.PEAK_FLOPS``; None
        where unknown) of ``steps`` steps run back to back."""
        dt = time_steps(self.one_step, self.sync, steps, warmup)
        peak = reporting.peak_flops_per_device(peak_flops)
        seq_s = self.batch_size / dt
        flops = pretrain.train_flops_per_sequence(self.cfg, self.seq_len, self.max_predictions)
        mfu = seq_s * flops / (peak * self.data_devices) if peak else None
        return {"seq_per_s": seq_s, "tokens_per_s": seq_s * self.seq_len, "step_ms": 1000 * dt, "mfu": mfu}


def train_step_bench(cfg: SqueezeBertConfig, seq_len: int, batch_size: int, max_predictions: int,
                     dtype=jnp.bfloat16, fsdp: bool = False, rng_impl: str = "threefry2x32",
                     compiler_options: dict | None = None, padding: str = "right") -> StepBench:
    """The ``StepBench`` of ``cfg``'s pretraining model: random weights, the paper's peak rate at every step, a
    synthetic batch (half segment A, half B; ``max_predictions`` sorted masked positions); ``rng_impl``: the dropout
    bits' generator (``trainer.run_key``)."""
    mesh = parallel.make_mesh()
    cfg = cfg.replace(padding=padding)  # "right": as the trainers run it (their batches are right padding)
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
    return StepBench(cfg, s, b, p, step, [state, batch, trainer.run_key(0, rng_impl), lr], mesh.shape["data"],
                     compiler_options)


def compile_all(benches: list[StepBench], strict: bool = False) -> list[Exception | None]:
    """Compile every bench's step at once, one thread each (XLA compiles outside the GIL: on a many-core GPU host
    ten full-size steps compile in about the time of one); each one's error (e.g. an XLA option this XLA does not
    know), or None; ``strict``: the first error is raised instead."""
    def compile_one(bench):
        try:
            bench.compile()
        except Exception as e:  # noqa: BLE001 -- reported beside the others' timings
            return e
        return None

    with concurrent.futures.ThreadPoolExecutor(max(1, len(benches))) as pool:
        errors = list(pool.map(compile_one, benches))
    if strict and (first := next((e for e in errors if e is not None), None)):
        raise first
    return errors


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
    phase = pretrain_settings.get_phases(config)[0]
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
