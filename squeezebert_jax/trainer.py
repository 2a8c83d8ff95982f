"""Training infrastructure shared by pretraining and fine-tuning.

Mesh and shardings (data parallel or FSDP over one ``data`` axis: ``jax.jit`` + ``NamedSharding``, no
pmap), multi-host start-up, the orbax checkpoint manager (async, keeps the last N, falls back past a
corrupt checkpoint, refuses one written by another config), metrics (JSON lines + TensorBoard), MFU, and a
SIGTERM (preemption) flag that all hosts agree on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from squeezebert_jax.errors import InputError
from squeezebert_jax.io import atomic_write
from squeezebert_jax import optim
from squeezebert_jax.optim import key_name

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# Distributed start-up and mesh
# --------------------------------------------------------------------------------------------------


def maybe_initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                                 process_id: int | None = None) -> None:
    """``jax.distributed.initialize`` for multi-host runs (explicit, or auto-detected on TPU/SLURM).

    ``num_processes`` <= 0 and ``process_id`` < 0 (the config defaults) mean "auto-detect" (None)."""
    num_processes = num_processes if num_processes and num_processes > 0 else None
    process_id = process_id if process_id is not None and process_id >= 0 else None
    if coordinator_address:
        # Cross-process collectives for CPU devices (only the CPU backend reads this; it must be set before
        # the backend starts, so no jax.devices() call here).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    elif os.environ.get("SQUEEZEBERT_AUTO_DISTRIBUTED") == "1":
        jax.distributed.initialize()


def make_mesh(num_devices: int | None = None, devices=None, num_slices: int | None = None) -> Mesh:
    """A 1-D mesh over the ``data`` axis, ordered by the physical topology.

    ``devices``: all of ``jax.devices()`` by default (or the first ``num_devices`` on one host), or given (e.g. the
    compile-only devices of a TPU topology, ``aot``). The order comes from ``mesh_utils.create_device_mesh`` (ring
    order on a TPU torus) and, over several slices (ICI within a slice, DCN between them; by default counted from
    the devices' ``slice_index``, as a multi-slice TPU run reports them), ``create_hybrid_device_mesh``, so the data
    axis runs slice by slice."""
    from jax.experimental import mesh_utils

    devices = list(jax.devices() if devices is None else devices)
    if num_devices:
        if jax.process_count() > 1 and num_devices != len(devices):
            raise InputError("num_devices can only restrict a single-process run")
        devices = devices[:num_devices]
    if num_slices is None:
        num_slices = len({getattr(d, "slice_index", 0) for d in devices})
    if num_slices > 1:
        if len(devices) % num_slices:
            raise InputError(f"{len(devices)} devices do not split into {num_slices} slices")
        arr = mesh_utils.create_hybrid_device_mesh((len(devices) // num_slices,), (num_slices,), devices)
    else:
        try:
            arr = mesh_utils.create_device_mesh((len(devices),), devices)
        except (ValueError, NotImplementedError, AssertionError):  # a subset or a backend without topology info
            arr = np.asarray(devices)
    return Mesh(np.asarray(arr).reshape(-1), ("data",))


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


def shard_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """A whole numpy batch that every host holds (fine-tuning and evaluation read their small files on every host) ->
    global jax.Arrays sharded on the data axis, each device given its rows."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index]) for k, v in batch.items()}


def to_host(tree):
    """A pytree of (possibly sharded, possibly multi-host) arrays as numpy arrays, whole, on every host."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


class DevicePrefetcher:
    """Makes the next ``depth`` batches and puts them on the devices while the current step runs.

    A background thread takes host batches from ``iterator`` (a grain iterator: its own read threads or worker
    processes make them) and turns each into global ``jax.Array``s (``global_batch``) ahead of the training loop,
    so neither the batch making nor the host-to-device copy sits between two steps. Batches come out in the same
    order as from ``iterator``. For checkpoints it behaves as the iterator *as consumed*: ``get_state`` is the
    inner state after the last batch handed out (not after the ones made ahead), and ``set_state`` drops what
    was made ahead and continues from the given state, so a restart resumes exactly (the same JSON as the inner
    iterator's, so checkpoints read the same with or without prefetching).
    """

    def __init__(self, iterator, mesh: Mesh, depth: int = 2):
        import queue
        import threading

        if depth < 1:
            raise InputError(f"prefetch depth {depth} must be >= 1")
        self._queue_cls, self._thread_cls = queue.Queue, threading.Thread
        self._it, self._mesh, self._depth = iterator, mesh, depth
        self._state = iterator.get_state()  # the inner state after the last batch handed out
        self._thread = None  # started by the first next() (or a checkpoint restore), not before

    def start_prefetch(self):
        """Start making batches ahead (grain's checkpoint handler calls this after ``set_state``)."""
        if self._thread is not None:
            return
        import threading

        self._q = self._queue_cls(maxsize=self._depth)
        self._stop = threading.Event()
        self._thread = self._thread_cls(target=self._work, args=(self._q, self._stop), daemon=True,
                                        name="device-prefetch")
        self._thread.start()

    def _work(self, q, stop):
        while not stop.is_set():
            try:
                item = (global_batch(next(self._it), self._mesh), self._it.get_state())
            except BaseException as e:  # noqa: BLE001 -- handed to the consumer, raised there
                item = e
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    break
                except Exception:  # queue.Full
                    continue
            if isinstance(item, BaseException):
                return

    def _halt(self):
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a put
                self._q.get_nowait()
            except Exception:  # queue.Empty
                self._thread.join(timeout=0.05)
        self._thread = None

    def __iter__(self):
        return self

    def __next__(self):
        self.start_prefetch()
        item = self._q.get()
        if isinstance(item, BaseException):
            self._thread = None
            raise item
        batch, self._state = item
        return batch

    def get_state(self) -> bytes:
        return json.dumps(self._state, indent=4).encode()

    def set_state(self, state: bytes | dict) -> None:
        self._halt()
        self._state = json.loads(state) if isinstance(state, (bytes, str)) else state
        self._it.set_state(self._state)

    def close(self):
        self._halt()


# --------------------------------------------------------------------------------------------------
# The update step (both trainers) and how it is jitted
# --------------------------------------------------------------------------------------------------

def make_train_step(loss_fn: Callable, tx: optax.GradientTransformation, num_microbatches: int = 1,
                    normalizers: Callable | None = None, finalize: Callable | None = None) -> Callable:
    """``train_step(state, batch, rng, lr, *consts) -> (state, metrics)``: the pure update both trainers jit.

    ``state`` is ``{"step", "params", "opt_state"}`` (more entries pass through untouched). The dropout key of the
    update is ``fold_in(rng, state["step"])``. ``loss_fn(params, microbatch, rng, norm, *consts) -> (loss, aux)`` is
    written so that the microbatches' losses add up to the batch's (a weighted sum over the whole batch's weight
    ``norm = normalizers(batch)``); with ``num_microbatches`` > 1 the gradient then equals the big batch's to float
    error (``optim.accumulate_gradients``). ``tx`` takes the rate ``lr`` as an input (``optim.learning_rate_input``):
    one compiled step serves every schedule. ``finalize(loss, aux)`` makes the metrics (default: ``loss`` and
    ``aux``); the gradient, parameter and update norms are added."""
    finalize = finalize or (lambda loss, aux: {"loss": loss, **aux})

    def train_step(state, batch, rng, lr, *consts):
        rng = jax.random.fold_in(rng, state["step"])
        norm = normalizers(batch) if normalizers is not None else None
        loss, aux, grads = optim.accumulate_gradients(lambda p, mb, r: loss_fn(p, mb, r, norm, *consts),
                                                      state["params"], batch, num_microbatches, rng)
        updates, opt_state = tx.update(grads, optim.set_learning_rate(state["opt_state"], lr), state["params"])
        params = optax.apply_updates(state["params"], updates)
        norms = (optax.tree.norm(grads), optax.tree.norm(params), optax.tree.norm(updates))
        metrics = finalize(loss, aux) | dict(zip(STEP_NORMS, norms))
        return {**state, "step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics

    return train_step


STEP_NORMS = ("grad_norm", "param_norm", "update_norm")  # the metrics every step adds to its loss's


def jit_train_step(train_step: Callable, shardings, mesh: Mesh, num_consts: int = 0):
    """``jax.jit(train_step)`` with the state's ``shardings`` in and out, the batch split over the mesh's data axis,
    the rng, rate and ``num_consts`` constants (e.g. a distillation teacher's weights) replicated, and the state donated
    (updated in place: no second copy of parameters and optimizer state)."""
    replicated = NamedSharding(mesh, P())
    return jax.jit(train_step, in_shardings=(shardings, batch_sharding(mesh), None, None) + (replicated,) * num_consts,
                   out_shardings=(shardings, None), donate_argnums=(0,))


def train_state_shardings(init: Callable, params, mesh: Mesh, fsdp: bool):
    """(shardings, abstract state) of ``init(params)``: replicated, or FSDP-sharded over the data axis; the abstract
    state's ShapeDtypeStructs carry their shardings (a checkpoint restores into them, ``aot`` compiles against them).
    ``params`` may be arrays or ShapeDtypeStructs: only their shapes are read."""
    shapes = jax.eval_shape(init, params)
    shardings = state_shardings(shapes, mesh, fsdp)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings)
    return shardings, abstract


def compute_dtype(config: ml_collections.ConfigDict):
    """``config.compute_dtype`` as a jnp dtype (the parameters stay float32: bf16 compute, fp32 master weights)."""
    if config.compute_dtype not in ("bfloat16", "float32"):
        raise InputError(f"compute_dtype {config.compute_dtype!r}: bfloat16 or float32")
    return jnp.bfloat16 if config.compute_dtype == "bfloat16" else jnp.float32


# --------------------------------------------------------------------------------------------------
# Jitted steps, reused within the process
# --------------------------------------------------------------------------------------------------

def fingerprint(tree) -> tuple:
    """A hashable snapshot of a small pytree of arrays (a model's ``rest``: the dropout streams' keys and counts): its
    structure, and each leaf's dtype, shape and bytes."""
    leaves, treedef = jax.tree.flatten(tree)

    def raw(x):
        data = jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        return str(x.dtype), tuple(x.shape), np.asarray(jax.device_get(data)).tobytes()

    return treedef, tuple(raw(x) for x in leaves)


class StepCache:
    """Jitted training steps by key, the newest ``maxsize`` kept: a second run in the process (a sweep, a notebook
    cell run again, a restart after a preemption) with an equal key gets the same ``jax.jit`` object, so jax neither
    traces, lowers nor loads its program again (measured: a smoke pretraining run in a warm process, 3.8 -> 1.4 s on a
    2-core host). The key must hold everything the step closes over (``model.Structure`` for the graphdef,
    ``fingerprint`` for arrays); jax's own cache then holds one compiled program per input shape."""

    def __init__(self, maxsize: int = 16):
        self.maxsize, self._steps = maxsize, {}

    def get(self, key, build: Callable[[], Any]):
        if key not in self._steps:
            while len(self._steps) >= self.maxsize:
                self._steps.pop(next(iter(self._steps)))
            self._steps[key] = build()
        return self._steps[key]


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


class CheckpointMismatchError(InputError):
    """A readable checkpoint whose train state has another structure or other shapes than the current config's."""


class UnreadableCheckpointsError(InputError, RuntimeError):
    """A checkpoint directory none of whose checkpoints can be read: the run refuses to start over them."""


def _flat_shapes(tree) -> dict[str, tuple[int, ...]]:
    """``{"opt_state/1/mu/...": shape}``: tuples/namedtuples/dicts and orbax's saved lists/dicts name alike."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(key_name(k) for k in path): tuple(getattr(x, "shape", ())) for path, x in leaves}


def state_mismatch(saved_metadata, abstract_state, limit: int = 4) -> str:
    """'' when the saved tree has the paths and shapes of ``abstract_state``, else a short description."""
    saved, want = _flat_shapes(saved_metadata), _flat_shapes(abstract_state)
    parts = []
    if missing := sorted(set(want) - set(saved)):
        parts.append(f"{len(missing)} entries the config needs are not in the checkpoint (e.g. {missing[:limit]})")
    if extra := sorted(set(saved) - set(want)):
        parts.append(f"{len(extra)} checkpoint entries are not in the config's state (e.g. {extra[:limit]})")
    if shapes := [f"{k}: checkpoint {saved[k]} vs config {want[k]}" for k in sorted(set(saved) & set(want))
                  if saved[k] != want[k]]:
        parts.append(f"{len(shapes)} shapes differ (e.g. {shapes[:limit]})")
    return "; ".join(parts)


class Checkpointer:
    """orbax CheckpointManager for {train state, data iterator}. Saves are async; orbax writes to a
    temporary directory and renames on commit, so a half-written checkpoint is never listed.

    Restoring tells two failures apart. A checkpoint that cannot be read (damaged files, missing metadata) is
    *damaged*: the caller may fall back to an older one and set the damaged one aside. A readable checkpoint
    whose tree or shapes differ from the current config's state is a *mismatch* (the config changed):
    ``CheckpointMismatchError``, and nothing in the directory is touched."""

    def __init__(self, directory: str, max_to_keep: int = 3, async_save: bool = True, with_data: bool = True,
                 with_meta: bool = False):
        import orbax.checkpoint as ocp

        self._ocp, self.with_data, self.directory = ocp, with_data, os.path.abspath(directory)
        self.with_meta = with_meta  # a JSON item beside the state (fine-tuning: the epochs' results so far)
        if jax.default_backend() == "cpu":
            # Replica-parallel saving (orbax's default off GPU) writes a replicated array as one slice per device so
            # that the devices' copies to the host run side by side. CPU devices share the host's memory: the slices
            # are only extra work (an eager slice per array per device: ~1 s per save of a small model on 8
            # simulated devices). Whole arrays from replica 0 instead; the files are the same format.
            ocp.type_handlers.register_type_handler(
                jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False), override=True)
        handlers = {"state": ocp.StandardCheckpointHandler()}
        if with_data:
            import grain

            handlers["data"] = grain.checkpoint.CheckpointHandler()
        if with_meta:
            handlers["meta"] = ocp.JsonCheckpointHandler()
        self.manager = ocp.CheckpointManager(
            os.path.abspath(directory),
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 enable_async_checkpointing=async_save),
            item_handlers=handlers)

    def save(self, step: int, state, data_iterator=None, force: bool = False, meta: dict | None = None) -> bool:
        args = {"state": self._ocp.args.StandardSave(state)}
        if self.with_data and data_iterator is not None:
            import grain

            args["data"] = grain.checkpoint.CheckpointSave(data_iterator)
        if self.with_meta:
            args["meta"] = self._ocp.args.JsonSave(meta or {})
        return self.manager.save(step, args=self._ocp.args.Composite(**args), force=force)

    def set_aside(self, step: int) -> None:
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

    def try_restore(self, step: int, abstract_state, data_iterator=None):
        """The train state saved at ``step`` (the data iterator restored in place); None when the checkpoint
        cannot be read (damaged). Raises ``CheckpointMismatchError`` when it reads but does not fit
        ``abstract_state``."""
        try:
            metadata = self.manager.item_metadata(step)["state"]
            if metadata is None:
                raise FileNotFoundError("no train-state metadata")
        except Exception as e:  # noqa: BLE001 -- unreadable metadata is damage, whatever the exception
            log.warning("checkpoint at step %d in %s cannot be read (%s: %s)", step, self.directory,
                        type(e).__name__, str(e)[:300])
            return None
        if diff := state_mismatch(metadata, abstract_state):
            raise CheckpointMismatchError(
                f"the checkpoint at step {step} in {self.directory} does not match the current config (model, "
                f"optimizer or phases changed?): {diff}. The checkpoints are left untouched: resume with the config "
                f"they were written with, or start the new config in a new workdir.")
        args = {"state": self._ocp.args.StandardRestore(abstract_state)}
        if self.with_data and data_iterator is not None:
            import grain

            args["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
        try:
            return self.manager.restore(step, args=self._ocp.args.Composite(**args))["state"]
        except Exception as e:  # noqa: BLE001 -- the structure matched: a failed read is damage
            log.warning("checkpoint at step %d in %s cannot be restored (%s: %s)", step, self.directory,
                        type(e).__name__, str(e)[:300])
            return None

    def restore(self, target: Callable[[int], tuple[Any, Any]]):
        """(step, state) of the newest readable checkpoint, setting aside the damaged newer ones; None when the
        directory has no checkpoint. ``target(step)`` gives the (abstract state, data iterator) to restore that
        step into (they depend on the step's phase). Raises when checkpoints exist but none can be read (nothing
        is renamed), and ``CheckpointMismatchError`` on a config mismatch."""
        steps, damaged = self.all_steps()[::-1], []
        for s in steps:
            state = self.try_restore(s, *target(s))
            if state is None:
                damaged.append(s)
                continue
            for d in damaged:
                log.warning("checkpoint at step %d set aside (corrupt-%d-*); resuming from step %d", d, d, s)
                self.set_aside(d)
            return s, state
        if steps:
            raise UnreadableCheckpointsError(f"{self.directory} has checkpoints at steps {sorted(steps)} but none can be read; "
                               "refusing to start from scratch over them. They are left as they are: move them "
                               "away to start over.")
        return None

    def read_meta(self, step: int) -> dict:
        """The JSON item saved with the checkpoint at ``step`` (``with_meta``)."""
        return self.manager.restore(step, args=self._ocp.args.Composite(meta=self._ocp.args.JsonRestore()))["meta"]

    def wait(self):
        self.manager.wait_until_finished()

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Chip:
    """An accelerator chip's public figures: dense bf16 peak, HBM capacity and bandwidth."""

    name: str
    peak_bf16: float  # FLOP/s, dense (no sparsity)
    hbm_gib: float
    hbm_gbs: float  # GB/s (1e9 bytes)


# Public spec sheets (per chip; a TPU v4/v5p chip is two TensorCores run as one device, megacore):
#   TPU v4: 275 TFLOP/s bf16, 32 GiB HBM2, 1200 GB/s           cloud.google.com/tpu/docs/v4
#   TPU v5e: 197 TFLOP/s bf16, 16 GiB HBM2, 819 GB/s           cloud.google.com/tpu/docs/v5e
#   TPU v5p: 459 TFLOP/s bf16, 95 GiB HBM2e, 2765 GB/s         cloud.google.com/tpu/docs/v5p
#   TPU v6e (Trillium): 918 TFLOP/s bf16, 32 GiB, 1640 GB/s    cloud.google.com/tpu/docs/v6e
#   H100 SXM5: 989 TFLOP/s bf16 dense, 80 GB HBM3, 3350 GB/s   nvidia.com/en-us/data-center/h100 (datasheet)
#   H200 SXM: 989 TFLOP/s bf16 dense, 141 GB HBM3e, 4800 GB/s  nvidia.com/en-us/data-center/h200
#   A100 SXM4 80GB: 312 TFLOP/s bf16 dense, 80 GB HBM2e, 2039 GB/s  nvidia.com/en-us/data-center/a100
#   L4: 121 TFLOP/s bf16 dense, 24 GB GDDR6, 300 GB/s          nvidia.com/en-us/data-center/l4
# (GPU capacities are the usable bytes a device reports, e.g. 79.1 GiB on an H100 80GB.)
CHIPS = {
    "v4": Chip("TPU v4", 275e12, 32.0, 1200.0),
    "v5e": Chip("TPU v5 lite", 197e12, 15.75, 819.0),
    "v5p": Chip("TPU v5p", 459e12, 95.74, 2765.0),
    "v6e": Chip("TPU v6 lite", 918e12, 31.25, 1640.0),
    "h100": Chip("H100", 989e12, 79.1, 3350.0),
    "h200": Chip("H200", 989e12, 139.8, 4800.0),
    "a100": Chip("A100", 312e12, 79.1, 2039.0),
    "l4": Chip("L4", 121e12, 22.0, 300.0),
}

# Peak dense bf16 FLOP/s by ``device_kind`` substring, for MFU (the CHIPS table; "TPU v5e" as some runtimes name it).
PEAK_FLOPS = {c.name: c.peak_bf16 for c in CHIPS.values()} | {"TPU v5e": CHIPS["v5e"].peak_bf16}


def peak_flops_per_device(override: float | None = None) -> float | None:
    if override:
        return float(override)
    kind = jax.devices()[0].device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None  # CPU or unknown: MFU is not reported


def _summary_writer_class():
    """tensorboardX's ``SummaryWriter``, or None where tensorboardX is not installed.

    tensorboardX's writer module imports PyTorch whenever it is installed, only to accept torch tensors (we log
    floats): 0.85 s of a pretraining process's start-up on a 2-core host, and PyTorch's memory, in a process with no
    other use for it. So while tensorboardX is imported, ``import torch`` fails (it then falls back to numpy), unless
    PyTorch is already loaded; afterwards it imports as usual. Called before the loop starts its threads."""
    block = "torch" not in sys.modules
    if block:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    except ImportError as e:  # optional (or a tensorboardX that needs PyTorch: then say so)
        log.info("tensorboardX cannot be imported (%s): no TensorBoard events", e)
        return None
    finally:
        if block and "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


class MetricsWriter:
    """WORKDIR/metrics.jsonl (one flat dict of scalars per line) and TensorBoard events (process 0 only)."""

    def __init__(self, workdir: str, filename: str = "metrics.jsonl"):
        self.enabled = jax.process_index() == 0
        self.path = os.path.join(workdir, filename)
        self._tb, self._tb_dir = None, os.path.join(workdir, "tb")
        self._tb_class = _summary_writer_class() if self.enabled else None
        if self.enabled:
            os.makedirs(workdir, exist_ok=True)

    def _tensorboard(self):
        """The events writer, made at the first row (a run refused at start-up leaves no events file)."""
        if self._tb is None:
            self._tb = self._tb_class(self._tb_dir) if self._tb_class is not None else False
        return self._tb

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._tensorboard()
        row = {"step": int(step)}
        row.update({k: (None if v is None else float(v)) for k, v in metrics.items()})
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb:
            for k, v in metrics.items():
                if v is not None:
                    self._tb.add_scalar(k, float(v), step)
            self._tb.flush()

    def drop_after(self, step: int) -> int:
        """Remove the rows with step > ``step`` (logged after the checkpoint that a resumed run starts from, so
        that they are not written twice) and any torn last line; an atomic rewrite. Returns the rows dropped."""
        if not self.enabled or not os.path.exists(self.path):
            return 0
        with open(self.path) as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        keep = []
        for line in lines:
            try:
                row_step = json.loads(line)["step"]
            except (ValueError, KeyError, TypeError):  # a line torn by a hard kill
                continue
            if row_step <= step:
                keep.append(line + "\n")
        if len(keep) < len(lines):
            atomic_write(self.path, "".join(keep))
            log.info("%s: dropped %d rows logged after step %d", self.path, len(lines) - len(keep), step)
        return len(lines) - len(keep)

    def close(self):
        if self._tb:
            self._tb.close()


def read_metrics(workdir: str, filename: str = "metrics.jsonl") -> list[dict]:
    with open(os.path.join(workdir, filename)) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean_metrics(window: list[dict[str, jax.Array]]) -> dict[str, float]:
    """Average a window of per-step device metrics, fetched from the device in one transfer."""
    host = jax.device_get(window)
    return {k: float(np.mean([m[k] for m in host])) for k in host[0]}


# --------------------------------------------------------------------------------------------------
# The workdir's config history
# --------------------------------------------------------------------------------------------------

def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_changes(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
    """``{"data.prefetch": (2, 4), ...}``: the fields whose values differ (a missing field reads as None)."""
    a, b = _flatten(old), _flatten(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def read_config_history(workdir: str) -> list[dict]:
    """The rows of ``WORKDIR/config_history.jsonl``: one per start of the run, ``{"start_step", "time", "config",
    "changed"}``, oldest first (a line torn by a hard kill is skipped)."""
    rows = []
    path = os.path.join(workdir, "config_history.jsonl")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    return rows


def record_config(workdir: str, config: ml_collections.ConfigDict, start_step: int) -> dict[str, tuple[Any, Any]]:
    """Keep the run's config history: append this start (its step and full config) to ``config_history.jsonl``, never
    rewriting earlier rows, and write ``config.json`` (the config now in use). Fields that changed since the previous
    start (a resume with another learning rate, say) are logged at WARNING, old -> new, and returned. Structural
    changes never get here: the checkpoint restore refuses them."""
    import datetime

    new = json.loads(config.to_json_best_effort())
    history = read_config_history(workdir)
    hist_path, cfg_path = os.path.join(workdir, "config_history.jsonl"), os.path.join(workdir, "config.json")
    rows = []
    if history:
        previous = history[-1]["config"]
    elif os.path.exists(cfg_path):  # a workdir from before the history: keep its config as the first start
        with open(cfg_path, encoding="utf-8") as f:
            previous = json.load(f)
        rows.append({"start_step": None, "time": None, "config": previous, "changed": {}})
    else:
        previous = None
    changes = config_changes(previous, new) if previous is not None else {}
    for k, (old, val) in changes.items():
        log.warning("config.%s changed since the last start of %s: %s -> %s%s", k, workdir, json.dumps(old),
                    json.dumps(val), f" (resuming at step {start_step})" if start_step else "")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rows.append({"start_step": start_step, "time": now, "config": new,
                 "changed": {k: list(v) for k, v in changes.items()}})
    with open(hist_path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        f.flush()
        os.fsync(f.fileno())
    atomic_write(cfg_path, config.to_json_best_effort(indent=2))
    return changes


# --------------------------------------------------------------------------------------------------
# Preemption
# --------------------------------------------------------------------------------------------------


def say(line: str) -> None:
    """A line for the person at the console (process 0), printed above any progress bar."""
    if jax.process_index() == 0:
        from tqdm.auto import tqdm

        tqdm.write(line)


def any_process(flag: bool) -> bool:
    """True on every process when ``flag`` is True on any one: a collective (every process must call it at the same
    step); the local value when there is one process."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(np.asarray(multihost_utils.process_allgather(np.asarray(flag, np.int32)))))


class PreemptionFlag:
    """Set by SIGTERM (and SIGINT): the loop saves a checkpoint and exits cleanly.

    Each host receives its own signal, possibly at different steps, and a host that stopped alone would leave the
    others waiting in a collective. So on a multi-host run ``should_stop`` agrees: every ``sync_every`` steps (and
    at phase ends) all hosts gather their flags and all stop if any was signalled. One process: the next step."""

    def __init__(self, sync_every: int = 10):
        self.requested = False
        self.sync_every = max(int(sync_every), 1)
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

    def should_stop(self, step: int, boundary: bool = False) -> bool:
        """Whether to stop after ``step``: the same answer on every host (call it after every step on every host;
        ``boundary``: a step where all hosts must decide, e.g. a phase's last)."""
        if jax.process_count() == 1:
            return self.requested
        if step % self.sync_every and not boundary:
            return False
        return any_process(self.requested)

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


def cpu_model() -> str:
    """This host's CPU ("AMD EPYC 9B45, 2 cores"): printed beside every timing, since hosts differ (AVX2 vs AVX-512)."""
    import platform

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


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
