"""What a run reports: WORKDIR/metrics.jsonl and TensorBoard events, windows of device metrics fetched in one
transfer, throughput timing, MFU's peak per device, and lines for the person at the console."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

import jax
import numpy as np

from squeezebert_jax.chips import PEAK_FLOPS
from squeezebert_jax.files import atomic_write

log = logging.getLogger(__name__)


def say(line: str) -> None:
    """A line for the person at the console (process 0), printed above any progress bar."""
    if jax.process_index() == 0:
        from tqdm.auto import tqdm

        tqdm.write(line)


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


def peak_flops_per_device(override: float | None = None) -> float | None:
    if override:
        return float(override)
    kind = jax.devices()[0].device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None  # CPU or unknown: MFU is not reported
