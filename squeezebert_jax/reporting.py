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
from squeezebert_jax.errors import DataFileError, InputError
from squeezebert_jax.files import atomic_write, json_text, json_type, json_value, text_lines

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
        with open(self.path, "a") as f:  # standard JSON: an undefined metric (a constant prediction's Pearson) is null
            f.write(json_text(row) + "\n")
        if self._tb:
            for k, v in metrics.items():
                if v is not None:
                    self._tb.add_scalar(k, float(v), step)
            self._tb.flush()

    def drop_after(self, step: int) -> int:
        """Remove the rows with step > ``step`` (logged after the checkpoint that a resumed run starts from, so
        that they are not written twice) and a torn last line (``read_jsonl``); an atomic rewrite. Returns the rows
        dropped. Other damage is refused (``read_jsonl``), as is a row without an integer step."""
        if not self.enabled or not os.path.exists(self.path):
            return 0
        rows, torn = read_log(self.path, METRICS_ADVICE)
        keep = []
        for lineno, row in rows:
            row_step = row.get("step")
            if isinstance(row_step, bool) or not isinstance(row_step, int):
                held = json_value(row_step) if "step" in row else 'no key "step"'
                raise InputError(f"{self.path}:{lineno}: a metrics row without an integer step ({held}); "
                                 f"{METRICS_ADVICE}")
            if row_step <= step:
                keep.append(json_text(row) + "\n")
        if len(keep) < len(rows) or torn:
            atomic_write(self.path, "".join(keep))
            log.info("%s: dropped %d rows logged after step %d", self.path, len(rows) - len(keep), step)
        return len(rows) - len(keep)

    def close(self):
        if self._tb:
            self._tb.close()


METRICS_ADVICE = ("the run's metrics log is damaged: move it away (a resume then starts a new one; the checkpoints "
                  "hold the run)")


def read_log(path: str, advice: str) -> tuple[list[tuple[int, dict]], bool]:
    """(line number, row) of each JSON object in ``path`` (``read_jsonl``), and whether the file does not end in a line
    end (a torn last line was dropped, or the last row lacks its line end): then it is rewritten before an append."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if not f.tell():
            return [], False
        f.seek(-1, os.SEEK_END)
        unterminated = f.read(1) != b"\n"  # a crash mid-append cuts the last line before its line end

    def torn_tail(lineno: int, why: str) -> bool:
        """Whether line ``lineno`` is the unterminated last line (then dropped with a warning)."""
        if not unterminated:
            return False
        with open(path, "rb") as f:
            last = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) + 1
        if lineno != last:
            return False
        log.warning("%s:%d: the last line is cut short (%s; a crash while it was written): dropped", path, lineno,
                    why)
        return True

    rows, lineno = [], 0
    try:
        for lineno, line in text_lines(path):
            if not line.strip():
                continue
            try:
                row = json.loads(line.rstrip("\r\n"))  # (with its line end, a cut line's error was at column 1)
            except ValueError as e:
                if torn_tail(lineno, "not JSON"):
                    return rows, True
                raise InputError(f"{path}:{lineno}: not a JSON object ({e.msg}, column {e.colno}); {advice}") \
                    from None
            if not isinstance(row, dict):
                if torn_tail(lineno, "not a JSON object"):
                    return rows, True
                raise InputError(f"{path}:{lineno}: {json_type(row)}, not a JSON object; {advice}")
            rows.append((lineno, row))
    except DataFileError as e:  # text_lines: a byte that is not UTF-8 or a NUL, named FILE:LINE:COL
        why = "NUL bytes, as a crash leaves a file padded" if ": a NUL byte" in str(e) else "a character cut in two"
        if torn_tail(lineno + 1, why):
            return rows, True
        raise InputError(f"{str(e).rsplit('; save the file', 1)[0]}; {advice}") from None
    return rows, unterminated  # a last row without its line end: rewritten before anything is appended


def read_jsonl(path: str, advice: str = "move the damaged file away") -> list[dict]:
    """The rows of one of a run's own append-only JSON Lines files (``metrics.jsonl``, ``config_history.jsonl``), read
    through ``files.text_lines``: a last line cut short by a crash mid-append (no line end, and not a JSON object, or
    a character cut in two) is dropped with a warning; any other damage -- bytes that are not UTF-8, a line that is
    not a JSON object -- is refused in one line naming FILE:LINE, then ``advice`` (what to do). A missing file: []."""
    if not os.path.exists(path):
        return []
    return [row for _, row in read_log(path, advice)[0]]


def read_metrics(workdir: str, filename: str = "metrics.jsonl") -> list[dict]:
    """The rows of ``WORKDIR/metrics.jsonl`` (``read_jsonl``)."""
    path = os.path.join(workdir, filename)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (the run has logged no metrics)")
    return read_jsonl(path, METRICS_ADVICE)


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
