"""Devices and data placement: multi-host start-up, the 1-D ``data`` mesh (ordered by the physical topology), the
shardings of a train state (replicated, or FSDP over the data axis) and of a batch, batches put on the mesh (from each
host's rows or from a batch every host holds), a device prefetcher, and arrays gathered back to the host.
``jax.jit`` + ``NamedSharding`` throughout (no pmap)."""

from __future__ import annotations

import collections
import json
import logging
import socket
import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from squeezebert_jax.errors import InputError
from squeezebert_jax.files import env_flag

log = logging.getLogger(__name__)

DISTRIBUTED_TIMEOUT_S = 300  # how long the processes wait for each other at start-up (jax's own default)


def maybe_initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                                 process_id: int | None = None, timeout_s: int = DISTRIBUTED_TIMEOUT_S) -> None:
    """``jax.distributed.initialize`` for multi-host runs (explicit, or auto-detected on TPU/SLURM).

    ``num_processes`` <= 0 and ``process_id`` < 0 (the config defaults) mean "auto-detect" (None). The wait for
    the other processes is said before it begins, and a process other than the first first waits (``timeout_s``)
    for the coordinator to answer (``wait_for_coordinator``): jax's own wait ended in an abort with a C++ stack
    trace, after five silent minutes."""
    num_processes = num_processes if num_processes and num_processes > 0 else None
    process_id = process_id if process_id is not None and process_id >= 0 else None
    if coordinator_address:
        # Cross-process collectives for CPU devices (only the CPU backend reads this; it must be set before
        # the backend starts, so no jax.devices() call here).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        who = f"process {process_id} of {num_processes}" if process_id is not None and num_processes else "a process"
        log.info("%s: waiting up to %d s for every process to join through the coordinator at %s", who, timeout_s,
                 coordinator_address)
        if process_id:  # process 0 serves the address
            wait_for_coordinator(coordinator_address, timeout_s)
        try:
            jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                       initialization_timeout=timeout_s)
        except ValueError as e:  # no cluster (SLURM, a TPU pod) to read the process count or this process's id from
            if num_processes is not None and process_id is not None:
                raise
            raise InputError(f"config.coordinator_address={coordinator_address!r}: {str(e).rstrip('.')}, and no "
                             "cluster environment (SLURM, a TPU pod) gives it: set config.num_processes and "
                             "config.process_id (this process's, from 0)") from None
    elif env_flag("SQUEEZEBERT_AUTO_DISTRIBUTED"):  # 1, true, yes, on; another word is refused
        jax.distributed.initialize()


def wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Return once something answers at ``address`` (HOST:PORT, the first process's), trying every second for
    ``timeout_s``; else one line naming the address, the wait and the last error (a host that does not resolve, a
    refused connection: the first process not started yet, or another port)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(5.0, max(timeout_s, 0.1))):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise InputError(f"config.coordinator_address={address!r}: nothing answered there in {timeout_s:g} s "
                                 f"({e.strerror or e}); start the first process (config.process_id=0: it serves "
                                 "that address), or give its host and a port it can open") from None
        time.sleep(1)


def check_num_devices(num_devices, devices=None, *, what: str = "config.num_devices", count: bool = True) -> int:
    """How many devices a mesh of ``num_devices`` takes: the one check of that setting (``make_mesh`` and both trainers'
    settings validators call it). 0 or None: all of ``devices`` (``jax.devices()`` by default). Refused in one line
    naming ``what`` and the devices there are: not an integer, negative, more devices than there are, or a subset of
    the devices of a multi-process run (every process takes part). ``count=False`` checks the value alone (a validator
    that runs before ``jax.distributed.initialize``, which must come before the backend starts); returns 0 then."""
    if num_devices is not None and (isinstance(num_devices, bool) or not isinstance(num_devices, (int, np.integer))
                                    or num_devices < 0):
        raise InputError(f"{what}={num_devices!r}: an integer >= 0 (0: all devices)")
    if not count:
        return 0
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    kind = getattr(devices[0], "device_kind", "") if devices else ""
    have = f"{n} device{'s' if n != 1 else ''}" + (f" ({kind})" if kind else "")
    if num_devices is None:
        return n
    if num_devices > n:
        raise InputError(f"{what}={num_devices}: more devices than there are ({have}); set {what} <= {n}, or 0 for "
                         "all of them")
    if num_devices and jax.process_count() > 1 and num_devices != n:
        raise InputError(f"{what}={num_devices}: a run of {jax.process_count()} processes takes all {have}; "
                         f"{what} can only restrict a single-process run (set 0)")
    return int(num_devices) or n


def make_mesh(num_devices: int | None = None, devices=None, num_slices: int | None = None,
              what: str = "config.num_devices") -> Mesh:
    """A 1-D mesh over the ``data`` axis, ordered by the physical topology.

    ``devices``: all of ``jax.devices()`` by default (or the first ``num_devices`` on one host, checked by
    ``check_num_devices``; ``what`` names the setting in its refusals), or given (e.g. the compile-only devices of a
    TPU topology, ``aot``). The order comes from ``mesh_utils.create_device_mesh`` (ring order on a TPU torus) and,
    over several slices (ICI within a slice, DCN between them; by default counted from the devices' ``slice_index``,
    as a multi-slice TPU run reports them), ``create_hybrid_device_mesh``, so the data axis runs slice by slice."""
    from jax.experimental import mesh_utils

    devices = list(jax.devices() if devices is None else devices)
    devices = devices[:check_num_devices(num_devices, devices, what=what)]
    if num_slices is None:
        num_slices = len({getattr(d, "slice_index", 0) for d in devices})
    if num_slices > 1:
        per_slice = collections.Counter(getattr(d, "slice_index", 0) for d in devices)
        if len(devices) % num_slices or len(set(per_slice.values())) > 1:
            raise InputError(f"{what}={num_devices}: {len(devices)} devices do not split evenly into the "
                             f"{num_slices} slices; take whole slices (0: all devices)"
                             if num_devices else f"{len(devices)} devices do not split into {num_slices} slices")
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


def check_right_padding(batch: dict[str, np.ndarray]) -> None:
    """A training batch's ``attention_mask`` rows (``[B, S]``, or ``[B, choices, S]``) each attend to a prefix of
    the sequence, one token at least (ones, then zeros: right padding), which the trainers' models take as each row's
    key count (``SqueezeBertConfig.padding`` "right"); anything else is refused, naming the first row that is not."""
    mask = batch.get("attention_mask")
    if mask is None or np.ndim(mask) < 2 or not np.size(mask):
        return
    m = np.asarray(mask).reshape(-1, np.shape(mask)[-1]) != 0
    bad = np.flatnonzero((m[:, 1:] & ~m[:, :-1]).any(axis=1) | ~m[:, 0])
    if bad.size:
        row = m[bad[0]].astype(int)
        raise InputError(f"a batch's attention_mask row {bad[0]} is not right padding (one or more ones, then zeros): "
                         f"{''.join(map(str, row[:64]))}{'...' if row.size > 64 else ''}; the trainers' models read "
                         "each row's mask as its count of leading tokens")


def global_batch(local: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Per-host numpy batch -> global jax.Arrays sharded on the data axis (multi-host safe); its attention mask must
    be right padding (``check_right_padding``)."""
    check_right_padding(local)
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


def shard_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """A whole numpy batch that every host holds (fine-tuning and evaluation read their small files on every host) ->
    global jax.Arrays sharded on the data axis, each device given its rows; its attention mask must be right padding
    (``check_right_padding``)."""
    check_right_padding(batch)
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_callback(v.shape, sharding, lambda index, v=v: v[index]) for k, v in batch.items()}


def to_host(tree):
    """A pytree of (possibly sharded, possibly multi-host) arrays as numpy arrays, whole, on every host."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def any_process(flag: bool) -> bool:
    """True on every process when ``flag`` is True on any one: a collective (every process must call it at the same
    step); the local value when there is one process."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(np.asarray(multihost_utils.process_allgather(np.asarray(flag, np.int32)))))


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
