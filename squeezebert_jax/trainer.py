"""Training infrastructure shared by pretraining and fine-tuning.

Mesh and shardings (data parallel or FSDP over one ``data`` axis: ``jax.jit`` + ``NamedSharding``, no
pmap), multi-host start-up, the orbax checkpoint manager (async, keeps the last N, falls back past a
corrupt checkpoint), metrics (JSON lines + TensorBoard), MFU, and a SIGTERM (preemption) flag.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Distributed start-up and mesh
# --------------------------------------------------------------------------------------------------


def maybe_initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                                 process_id: int | None = None) -> None:
    """``jax.distributed.initialize`` for multi-host runs (explicit, or auto-detected on TPU/SLURM)."""
    if coordinator_address:
        # Cross-process collectives for CPU devices (only the CPU backend reads this; it must be set before
        # the backend starts, so no jax.devices() call here).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    elif os.environ.get("SQUEEZEBERT_AUTO_DISTRIBUTED") == "1":
        jax.distributed.initialize()


def make_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the ``data`` axis (all devices, or the first ``num_devices`` on one host)."""
    devices = jax.devices()
    if num_devices:
        if jax.process_count() > 1 and num_devices != len(devices):
            raise ValueError("num_devices can only restrict a single-process run")
        devices = devices[:num_devices]
    return Mesh(np.asarray(devices), ("data",))


def fsdp_spec(shape: tuple[int, ...], n: int, min_size: int = 2 ** 10) -> P:
    """Shard the largest axis divisible by the mesh size ``n`` (ZeRO-3 style); small leaves stay replicated."""
    if n == 1 or int(np.prod(shape)) < min_size:
        return P()
    for axis in sorted(range(len(shape)), key=lambda a: -shape[a]):
        if shape[axis] % n == 0:
            return P(*([None] * axis + ["data"]))
    return P()


def state_shardings(tree, mesh: Mesh, fsdp: bool):
    """NamedShardings for a pytree of arrays: replicated (data parallel) or FSDP-sharded."""
    n = mesh.shape["data"]
    return jax.tree.map(lambda x: NamedSharding(mesh, fsdp_spec(x.shape, n) if fsdp else P()), tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P("data"))


def global_batch(local: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Per-host numpy batch -> global jax.Arrays sharded on the data axis (multi-host safe)."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


class Checkpointer:
    """orbax CheckpointManager for {train state, data iterator}. Saves are async; orbax writes to a
    temporary directory and renames on commit, so a half-written checkpoint is never listed. ``restore``
    walks back from the newest step past any checkpoint that fails to load."""

    def __init__(self, directory: str, max_to_keep: int = 3, async_save: bool = True, with_data: bool = True):
        import orbax.checkpoint as ocp

        self._ocp, self.with_data, self.directory = ocp, with_data, os.path.abspath(directory)
        handlers = {"state": ocp.StandardCheckpointHandler()}
        if with_data:
            import grain

            handlers["data"] = grain.checkpoint.CheckpointHandler()
        self.manager = ocp.CheckpointManager(
            os.path.abspath(directory),
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 enable_async_checkpointing=async_save),
            item_handlers=handlers)

    def save(self, step: int, state, data_iterator=None, force: bool = False) -> bool:
        args = {"state": self._ocp.args.StandardSave(state)}
        if self.with_data and data_iterator is not None:
            import grain

            args["data"] = grain.checkpoint.CheckpointSave(data_iterator)
        return self.manager.save(step, args=self._ocp.args.Composite(**args), force=force)

    def _set_aside(self, step: int) -> None:
        """Rename an unreadable step directory to ``corrupt-<step>-<time>`` so that the run can write that step
        again; nothing is deleted."""
        if jax.process_index() == 0:
            path = os.path.join(self.directory, str(step))
            if os.path.isdir(path):
                os.rename(path, os.path.join(self.directory, f"corrupt-{step}-{int(time.time())}"))
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"set_aside_{step}")
        self.manager.reload()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def restore(self, abstract_state, data_iterator=None, step: int | None = None):
        """(step, state) of the newest loadable checkpoint (or ``step``); None when there is none."""
        steps = [step] if step is not None else self.all_steps()[::-1]
        for s in steps:
            args = {"state": self._ocp.args.StandardRestore(abstract_state)}
            if self.with_data and data_iterator is not None:
                import grain

                args["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
            try:
                restored = self.manager.restore(s, args=self._ocp.args.Composite(**args))
            except Exception as e:  # corrupt or partial: set it aside (kept), fall back to the previous one
                log.warning("checkpoint at step %d cannot be restored (%s: %s); trying an older one", s,
                            type(e).__name__, str(e)[:300])
                self._set_aside(s)
                continue
            return s, restored["state"]
        return None

    def wait(self):
        self.manager.wait_until_finished()

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------

# Peak dense bf16 FLOP/s per chip, for MFU (public spec sheets).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "TPU v4": 275e12,
              "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12}


def peak_flops_per_device(override: float | None = None) -> float | None:
    if override:
        return float(override)
    kind = jax.devices()[0].device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None  # CPU or unknown: MFU is not reported


class MetricsWriter:
    """WORKDIR/metrics.jsonl (one flat dict of scalars per line) and TensorBoard events (process 0 only)."""

    def __init__(self, workdir: str, filename: str = "metrics.jsonl"):
        self.enabled = jax.process_index() == 0
        self.path = os.path.join(workdir, filename)
        self._tb = None
        if self.enabled:
            os.makedirs(workdir, exist_ok=True)
            try:
                from tensorboardX import SummaryWriter

                self._tb = SummaryWriter(os.path.join(workdir, "tb"))
            except ImportError:  # optional
                log.info("tensorboardX not installed: no TensorBoard events")

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        row = {"step": int(step)}
        row.update({k: (None if v is None else float(v)) for k, v in metrics.items()})
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if v is not None:
                    self._tb.add_scalar(k, float(v), step)
            self._tb.flush()

    def close(self):
        if self._tb is not None:
            self._tb.close()


def read_metrics(workdir: str, filename: str = "metrics.jsonl") -> list[dict]:
    with open(os.path.join(workdir, filename)) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean_metrics(window: list[dict[str, jax.Array]]) -> dict[str, float]:
    """Average a window of per-step device metrics, fetched from the device in one transfer."""
    host = jax.device_get(window)
    return {k: float(np.mean([m[k] for m in host])) for k in host[0]}


def tree_norm(tree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


# --------------------------------------------------------------------------------------------------
# Preemption
# --------------------------------------------------------------------------------------------------


class PreemptionFlag:
    """Set by SIGTERM (and SIGINT): the loop saves a checkpoint and exits cleanly at the next step."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        log.warning("signal %d: saving a checkpoint and stopping", signum)
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class Timer:
    """Wall-clock throughput over the steps since the last ``lap``."""

    def __init__(self):
        self.t, self.steps = time.perf_counter(), 0

    def tick(self):
        self.steps += 1

    def lap(self) -> tuple[float, int]:
        now = time.perf_counter()
        dt, n = now - self.t, self.steps
        self.t, self.steps = now, 0
        return dt, n
