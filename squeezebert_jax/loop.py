"""What pretraining's and fine-tuning's loops share, written once (each entry point keeps its step, its batches and its
boundary: a phase's end, an epoch's evaluation):

- ``check_checkpoints_within``: checkpoints past the run's last step belong to another config, and are refused;
- ``begin``: after a restore, the metrics logged past the restored step are dropped and this start is recorded;
- ``check_finite``: a non-finite loss or norm stops the run, naming the step and the last good checkpoint (never is a
  non-finite state saved).
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import ml_collections
import numpy as np

from squeezebert_jax import checkpointing, reporting, trainer
from squeezebert_jax.errors import CheckpointMismatchError


def check_checkpoints_within(checkpointer: checkpointing.Checkpointer, final_step: int, ends: str) -> None:
    """Refuse checkpoints at steps outside ``1..final_step``: a run of this config never wrote them. ``ends``
    says where the run ends (e.g. "whose phases end at step 600")."""
    if outside := [s for s in checkpointer.all_steps() if not 0 < s <= final_step]:
        raise CheckpointMismatchError(
            f"the checkpoints at steps {outside} in {checkpointer.directory} do not match the current config, {ends}; "
            "they are left untouched: resume with the config they were written with, or use a new workdir")


def begin(workdir: str, config: ml_collections.ConfigDict, step: int, writer: reporting.MetricsWriter,
          stream: dict) -> None:
    """The run (re)starts at ``step`` (0, or the restored checkpoint's): rows logged after it would be written twice,
    so they go; this start, its config and its stream are recorded (only now, after the checkpoints were checked
    against the config: a refused restart changes nothing)."""
    writer.drop_after(step)
    if jax.process_index() == 0:
        trainer.record_config(workdir, config, step, stream)


def check_finite(rows: Iterable[tuple[int, dict]], keys: tuple[str, ...],
                 checkpointer: checkpointing.Checkpointer) -> None:
    """``rows``: (step, host metrics). Raise ``FloatingPointError`` at the first step where one of ``keys`` is not
    finite, naming it, its value and the last good checkpoint."""
    for step, m in rows:
        bad = [f"{key} {float(m[key])}" for key in keys if key in m and not np.isfinite(m[key])]
        if bad:
            checkpointer.wait()
            good = max(checkpointer.all_steps(), default=None)
            raise FloatingPointError(
                f"non-finite {', '.join(bad)} at step {step} (training diverged); "
                + (f"the last good checkpoint is step {good} in {checkpointer.directory}" if good is not None
                   else "no checkpoint was saved"))
