"""What every benchmark shares: threads, interleaved timers, load notes, Markdown tables, and the models timed.

Every measurement runs in one process, in interleaved rounds (model A, model B, ..., A, B, ...) so that a
burst of load from another process on a shared machine hits every column alike, and reports the median.

Threads. ``set_threads(n)`` pins the process to ``n`` CPUs (``os.sched_setaffinity``) and sets
``torch.set_num_threads(n)``. XLA:CPU sizes its intra-op thread pool from the CPUs the process may use
when its backend starts, and ``--xla_cpu_multi_thread_eigen=false`` / ``intra_op_parallelism_threads``
no longer limit the dot kernels (measured with jax 0.10: CPU time stays 2x wall time with them), so the
affinity mask is what makes "1 thread" true for both frameworks. Call it before the first JAX computation
(importing jax is fine; its backend starts lazily).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import time
import warnings
from typing import Any, Callable, Sequence

import jax
import numpy as np
from flax import nnx

from squeezebert_jax import cli
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import atomic_write, check_output_file
from squeezebert_jax.model import HEADS, MOBILEBERT_FIELDS, SqueezeBertConfig
from squeezebert_jax.pretrained import load_pretrained

REFERENCE = "bert-base-uncased"  # speedups and ratios are relative to it

# --------------------------------------------------------------------------------------------------
# Threads and timers
# --------------------------------------------------------------------------------------------------


def set_threads(n: int | None = None) -> int:
    """Restrict this process to ``n`` CPUs (default: all it may use) for XLA and PyTorch; returns n."""
    import torch

    allowed = sorted(os.sched_getaffinity(0))
    n = len(allowed) if n is None else n
    if not 1 <= n <= len(allowed):
        raise InputError(f"--threads {n}: this process may use {len(allowed)} CPUs ({allowed})")
    os.sched_setaffinity(0, allowed[:n])
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            warnings.warn("set_threads: the JAX backend has already started; its thread pool keeps its size")
    except (ImportError, AttributeError):
        pass
    return n


def _cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (vals[7] if len(vals) > 7 else 0), sum(vals[:8])


class LoadMonitor:
    """Notes the CPU model (hosts differ: AVX2 vs AVX-512), the load average before timing and the hypervisor steal
    time during it (other tenants of a shared VM host do not show in the load average, but take CPU time away as
    steal). Every timed table's title carries its ``note()``."""

    def __init__(self):
        self.load = os.getloadavg()[0]
        self.start = _cpu_ticks()

    def note(self) -> str:
        end, steal = _cpu_ticks(), ""
        if self.start and end and end[1] > self.start[1]:
            steal = f", steal {100 * (end[0] - self.start[0]) / (end[1] - self.start[1]):.1f}% during"
        return (f"host: {cpu_model()}; {len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs; load average "
                f"{self.load:.2f} before{steal}")


@dataclasses.dataclass
class Timing:
    times_ms: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.times_ms))

    @property
    def min(self) -> float:
        return float(np.min(self.times_ms))


_DEVICE_LOCK: str | None = None  # set_device_lock


def set_device_lock(path: str | None) -> None:
    """Time under an exclusive lock (``fcntl.flock``) on the file ``path``: benchmark processes run side by side on one
    GPU compile at once and time one at a time (``device_timing``); None: no lock."""
    global _DEVICE_LOCK
    _DEVICE_LOCK = path


@contextlib.contextmanager
def device_timing():
    """Hold ``set_device_lock``'s lock, if any, while timing."""
    if not _DEVICE_LOCK:
        yield
        return
    with open(_DEVICE_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def time_interleaved(fns: dict[str, Callable[[], Any]], runs: int = 20, warmup: int = 3,
                     rounds: int | None = None) -> dict[str, Timing]:
    """Median-ready wall times of blocking zero-argument callables, interleaved in ``rounds`` rounds.

    In each round every callable first runs once untimed: the first call after another model's (page faults on
    freed buffers, cold caches) was measured up to 25% slower at batch 1 after a batch-8 forward, and with two
    timed calls a round it would pull the median."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    rounds = min(rounds or 5, runs)
    out = {k: Timing([]) for k in fns}
    with device_timing():
        for r in range(rounds):
            for name, fn in fns.items():
                if len(fns) > 1:
                    fn()  # settle after the previous callable
                for _ in range(runs // rounds + (r < runs % rounds)):  # exactly ``runs`` in all
                    t0 = time.perf_counter()
                    fn()
                    out[name].times_ms.append((time.perf_counter() - t0) * 1e3)
        return out


def time_steps(step: Callable[[], Any], sync: Callable[[], Any], steps: int, warmup: int) -> float:
    """Seconds per call of ``step`` run ``steps`` times back to back (after ``warmup`` calls), as a training loop runs:
    no wait between calls, ``sync()`` (block on the device) only before and after."""
    for _ in range(warmup):  # compiles (torch.compile, a first jit call) outside device_timing's lock
        step()
    sync()
    with device_timing():
        step()
        sync()
        t = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return (time.perf_counter() - t) / steps


def blocking(f: Callable, *args) -> Callable[[], Any]:
    """A zero-argument callable that runs ``f(*args)`` and waits for JAX results."""
    return lambda: jax.block_until_ready(f(*args))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """A Markdown table (every line starts and ends with ``|``, as many cells as headers)."""
    cells = [[str(h).replace("|", "/") for h in headers]] + [[_fmt(c).replace("|", "/") for c in r] for r in rows]
    for r in cells:
        if len(r) != len(headers):
            raise ValueError(f"row {r} has {len(r)} cells, headers {len(headers)}")
    width = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |"  # noqa: E731
    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in width) + "|"] + [line(r) for r in cells[1:]]
    return (f"{title}\n" if title else "") + "\n".join(out)


def _fmt(c) -> str:
    if c is None:
        return "-"
    if isinstance(c, float):
        return f"{c:.3g}" if abs(c) < 10 else f"{c:.1f}"
    return str(c)


# --------------------------------------------------------------------------------------------------
# Models: presets with random weights (nothing downloads), or a MODEL_DIR
# --------------------------------------------------------------------------------------------------

# Small dimensions with the preset's group structure (4 divides 64 and 128), for --tiny runs and tests.
TINY_DIMS = dict(vocab_size=128, hidden_size=64, embedding_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=128)


def tiny_config(name: str = "squeezebert-uncased", **overrides) -> SqueezeBertConfig:
    """The preset ``name`` (its group counts and family) at tiny dimensions: seconds to build, trace and time."""

    base = SqueezeBertConfig.preset(name)
    kept = {f: getattr(base, f) for f in ("q_groups", "k_groups", "v_groups", "post_attention_groups",
                                          "intermediate_groups", "output_groups", "family", "hidden_act")}
    if base.family == "mobilebert":  # a 64 body around a 32 bottleneck, 3-gram embeddings of 32
        kept |= {f: getattr(base, f) for f in MOBILEBERT_FIELDS} | dict(intra_bottleneck_size=32, embedding_size=32)
    elif base.factorized_embeddings:  # ALBERT, ELECTRA: embeddings projected to the hidden size
        kept |= dict(embedding_size=32)
    elif base.family == "distilbert":
        kept |= dict(type_vocab_size=0)
    return SqueezeBertConfig(**(TINY_DIMS | kept | overrides))


def preset_config(name: str, tiny: bool = False) -> SqueezeBertConfig:
    """A preset (squeezebert-uncased, bert-base-uncased, BERT miniatures); ``tiny`` keeps only its groups."""
    return tiny_config(name) if tiny else SqueezeBertConfig.preset(name)


def build_classifier(name: str, tiny: bool = False, num_labels: int = 2, seed: int = 0) -> nnx.Module:
    """Randomly initialised sequence classifier of preset ``name`` (nothing downloads)."""
    return HEADS["SqueezeBertForSequenceClassification"](preset_config(name, tiny), num_labels=num_labels,
                                                         rngs=nnx.Rngs(seed))


def is_model_dir(name: str) -> bool:
    """A ``--models`` entry that names a directory (a MODEL_DIR) rather than a preset."""
    return os.path.isdir(name) or os.sep in name or name.startswith(".")


def check_models(names: Sequence[str], flag: str = "--models") -> None:
    """Refuse, before any work, an entry that is neither a known preset nor a directory holding config.json."""
    for name in names:
        if is_model_dir(name):
            if not os.path.isdir(name):
                raise InputError(f"{flag} {name}: no such directory (expected a preset name or a MODEL_DIR)")
            if not os.path.isfile(os.path.join(name, "config.json")):
                raise InputError(f"{flag} {name}: no config.json there (not a MODEL_DIR)")
        else:
            try:
                SqueezeBertConfig.preset(name)
            except InputError as e:
                raise InputError(f"{flag}: {e.args[0]}; or a MODEL_DIR") from None


def load_model(name: str, tiny: bool = False) -> nnx.Module:
    """The model a ``--models`` entry names: a MODEL_DIR's model (its weights and head; ``tiny`` does not apply),
    else ``build_classifier(name, tiny)``."""
    if is_model_dir(name):

        return load_pretrained(name)
    return build_classifier(name, tiny)


def torch_tensor(a):
    """A numpy array (or a JAX one) as a torch tensor, without a copy where possible."""
    import torch

    return torch.from_numpy(np.asarray(a))


def torch_call(module, *args) -> Callable[[], Any]:
    """A zero-argument callable running a torch module under ``no_grad``."""
    import torch

    def call():
        with torch.no_grad():
            return module(*args)

    return call


# --------------------------------------------------------------------------------------------------
# The eval/ scripts' shared arguments and output
# --------------------------------------------------------------------------------------------------


def add_timing_args(p, runs: int, warmup: int, threads: int | None) -> None:
    """--runs, --warmup, --seq-len, --threads, --tiny on an ``argparse`` parser (``cli.ArgumentParser``)."""

    p.add_argument("--runs", type=cli.positive_int, default=runs, help="timed runs per model (median)")
    p.add_argument("--warmup", type=cli.positive_int, default=warmup, help="untimed runs first")
    p.add_argument("--seq-len", type=cli.positive_int, default=128)
    p.add_argument("--threads", type=cli.positive_int, default=threads,
                   help="CPUs for both frameworks" + ("" if threads else " (default: every CPU this process may use)"))
    p.add_argument("--tiny", action="store_true", help="tiny configs with the same group counts (seconds)")


def add_out_args(p) -> None:
    """--out FILE and --overwrite: the printed tables also go to FILE (Markdown)."""
    p.add_argument("--out", default=None, help="also write what is printed to this file (Markdown)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")


def per_model_cli(description: str, default_models: Sequence[str], models_help: str, argv=None):
    """The arguments of the per-model table scripts (eval/latency.py, eval/profile_table1.py): --models (presets or
    MODEL_DIRs, checked), --batch, the timing arguments (20 runs, 3 warm-up, 1 thread: the paper's one phone CPU) and
    --out; parsed, with the threads set. Returns ``(args, Report)``."""

    p = cli.ArgumentParser(description=description)
    p.add_argument("--models", nargs="+", default=list(default_models), help=models_help)
    p.add_argument("--batch", type=cli.positive_int, default=1)
    add_timing_args(p, runs=20, warmup=3, threads=1)
    add_out_args(p)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    check_models(args.models)
    report = Report(args.out, args.overwrite)
    set_threads(args.threads)
    return args, report


class Report:
    """What a benchmark script prints, block by block (tables, notes), also written to ``out`` at the end. ``out``
    is checked when the report is made (``files.check_output_file``: not a directory, not an existing file unless
    ``overwrite``), so make it before the work."""

    def __init__(self, out: str | None = None, overwrite: bool = False):
        self.out = check_output_file(out, overwrite) if out else None
        self.blocks: list[str] = []

    def add(self, text: str) -> None:
        print(text, flush=True)
        self.blocks.append(text)

    def write(self) -> None:
        """Write the blocks to ``out`` atomically (nothing without one)."""
        if not self.out:
            return

        atomic_write(self.out, "\n".join(self.blocks) + "\n")


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
