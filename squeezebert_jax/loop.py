"""The one training loop: pretraining and fine-tuning both run it. Each entry point supplies only its step, its
batches and its boundary (a phase's end; an epoch's evaluation) as ``Hooks``; the loop owns the rest, written once:

- ``Settings``: the settings validator (each refusal one line naming ``config.NAME``, its value and what is valid),
  with the settings every training run shares (``Settings.check_training``);
- ``restore``: the checkpoint range check (``check_checkpoints_within``), the newest readable checkpoint, and the
  run's (re)start recorded (``begin``: the config history and the run's stream);
- ``run``: the steps, the progress bar, preemption (SIGTERM, ``stop_at_step``), the metrics window written every
  ``log_every`` steps, the finiteness check of every step's loss and norms before anything is logged or saved
  (``check_finite``: a non-finite state is never saved), and checkpoints every ``checkpoint_every`` steps, at each
  boundary and on a stop;
- ``export``: the trained parameters into the model, saved as MODEL_DIRs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Iterable
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from squeezebert_jax import checkpointing, parallel, reporting, trainer
from squeezebert_jax.errors import CheckpointMismatchError, InputError, StoppedEarly
from squeezebert_jax.files import host_memory_bytes, json_text, python_scalar
from squeezebert_jax.pretrained import atomic_write, save_pretrained

log = logging.getLogger(__name__)

# Checked on the host for every step before anything is logged or saved: the loss (of the params before the step's
# update), and the gradient and parameter norms (the latter of the params after it: the state a checkpoint holds).
FINITE_METRICS = ("loss", "grad_norm", "param_norm")


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------

def python_numbers(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """``config`` with each numpy or jax scalar (a notebook's ``np.int64(32)`` batch size, a ``np.logspace`` rate, a
    0-d array) replaced in place by the Python number it holds, a float by its shortest form (float32's 1e-4, not
    9.99999975e-05): a number is a number to the validator, and the run's config record is plain JSON (ml_collections'
    ``to_json`` refused numpy types after the run had begun). Returns ``config``."""
    def plain(v):  # ``v`` itself where it holds no numpy number
        if isinstance(v, ml_collections.ConfigDict):
            return python_numbers(v)
        if isinstance(v, (list, tuple, dict)):
            pairs = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            new = [(k, plain(x)) for k, x in pairs]
            if all(a is b for (_, a), (_, b) in zip(new, pairs)):
                return v
            return dict(new) if isinstance(v, dict) else type(v)(x for _, x in new)
        return python_scalar(v)

    for key, v in list(config.items()):
        if (p := plain(v)) is not v:
            with config.ignore_type():
                config[key] = p
    return config


class Settings:
    """One validator for a run's config: ``need(ok, name, valid)`` refuses with one line, ``config.NAME=value: valid``
    (``NAME`` may index a list: ``phases[0].seq_len``); ``number``/``integer`` test a value's type and range."""

    def __init__(self, config: ml_collections.ConfigDict):
        self.config = python_numbers(config)

    def value(self, name: str):
        v, path = self.config, []
        for part in name.replace("]", "").replace("[", ".").split("."):
            if not isinstance(v, (list, tuple, dict, ml_collections.ConfigDict)):  # a section set to None, say
                raise InputError(f"config.{'.'.join(path)}={v!r:.60}: a section of settings (a dict), as the config "
                                 "file has it")
            if isinstance(v, (list, tuple)):
                v = v[int(part)]
            elif part not in v:  # a section replaced by one without it (a TypeError or KeyError later)
                raise InputError(f"config.{'.'.join(path + [part])} is missing: the config file's section has it; "
                                 "set the values to change, not the section whole")
            else:
                v = v[part]
            path.append(part)
        return v

    def need(self, ok: bool, name: str, valid: str) -> None:
        if not ok:
            v = self.value(name)
            v = v.to_dict() if isinstance(v, ml_collections.ConfigDict) else v  # its repr is YAML, lines of it
            raise InputError(f"config.{name}={v!r}: {valid}")

    def unread(self, defaults: dict, names, why: str, section: str = "") -> None:
        """Settings no run of this config reads (``why``: beside what), refused unless at their ``defaults``: one line,
        ``config.SECTION.NAME=value: read by no run: leave it at its default D WHY`` (``leave it empty`` for ""), never
        silently ignored (it said "left at its default", which read as if the setting had not been given)."""
        for name in names:
            path = f"{section}.{name}" if section else name
            if name in (self.config[section] if section else self.config):
                default = defaults[name]
                self.need(self.value(path) == default, path,
                          f"read by no run: leave it {'empty' if default == '' else f'at its default {default!r}'} "
                          f"{why}")

    def number(self, name: str, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False) -> bool:
        """A finite int or float (never a bool) in the range: ``lo``/``hi`` closed unless ``*_open``."""
        v = self.value(name)
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and (lo is None or (v > lo if lo_open else v >= lo))
                and (hi is None or (v < hi if hi_open else v <= hi)))

    def flags(self, *names: str) -> None:
        """Each of ``names`` the config holds is True or False: a string ("no", "false") was read as true."""
        for name in names:
            section, _, key = name.rpartition(".")
            held = self.value(section) if section else self.config
            if not isinstance(held, (dict, ml_collections.ConfigDict)):
                self.value(name)  # the section is no dict: one line naming it
            if key in held:
                v = self.value(name)
                self.need(isinstance(v, bool), name, f"true or false (a bool; the string {v!r} read as true)"
                          if isinstance(v, str) else "true or false")

    def integer(self, name: str, lo: int, hi: int = 2 ** 31 - 1) -> bool:
        """An int (never a bool) >= ``lo``; one past ``hi`` (int32's: steps, sizes and counts are int32 in the
        step) is refused here, by its own line."""
        v = self.value(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > hi:
            raise InputError(f"config.{name}={v!r}: at most {hi:,} (steps, sizes and counts are 32-bit integers)")
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    def fits_host(self, name: str, rows: int, row_bytes: int, what: str) -> None:
        """A batch of ``rows`` rows of ``row_bytes`` each (the setting ``name`` sets ``rows``) fits in half of this
        host's memory: a size past it is one line naming the setting and both sizes, before anything is written,
        not a MemoryError after the run began."""
        total, have = rows * row_bytes, host_memory_bytes()
        self.need(not have or total <= have // 2, name, f"{what} would take {total / 1e9:,.1f} GB, more than half of "
                  f"this host's {have / 1e9:,.1f} GB of memory")

    def check_training(self) -> None:
        """The settings every training run has: the optimizer's rate, warmup and decay, the dropout bits, the compute
        dtype, the loop's intervals and the device count."""
        need, number, integer = self.need, self.number, self.integer
        need(number("learning_rate", 0, lo_open=True), "learning_rate", "a finite rate > 0")
        need(number("warmup_fraction", 0, 1), "warmup_fraction", "a fraction in [0, 1]")
        need(number("weight_decay", 0), "weight_decay", "a finite decay >= 0")
        need(self.config.rng_impl in trainer.RNG_IMPLS, "rng_impl", " or ".join(trainer.RNG_IMPLS))
        need(self.config.compute_dtype in ("bfloat16", "float32"), "compute_dtype", "bfloat16 or float32")
        for name in ("log_every", "checkpoint_every", "preemption_sync_every"):
            need(integer(name, 1), name, "an integer >= 1")
        need(integer("keep_checkpoints", 1), "keep_checkpoints",
             "an integer >= 1 (the newest this many are kept; 0 would delete every checkpoint)")
        need(integer("stop_at_step", 0), "stop_at_step", "an integer >= 0 (0: off)")
        need(integer("seed", 0, 2 ** 1024) and self.value("seed") < 2 ** 32, "seed",
             "an integer in [0, 2**32): jax's keys hold 32 bits of it, so a larger seed would draw a smaller one's "
             "dropout")
        self.flags("fsdp", "progress", "async_checkpoints")
        parallel.check_num_devices(self.config.num_devices, count=False)  # counted by make_mesh


# --------------------------------------------------------------------------------------------------
# Restore
# --------------------------------------------------------------------------------------------------

def check_checkpoints_within(checkpointer: checkpointing.Checkpointer, final_step: int, ends: str) -> None:
    """Refuse checkpoints at steps outside ``1..final_step``: a run of this config never wrote them. ``ends``
    says where the run ends (e.g. "whose phases end at step 600")."""
    if outside := [s for s in checkpointer.all_steps() if not 0 < s <= final_step]:
        empty = [p for s in outside for p in [os.path.join(checkpointer.directory, str(s))]
                 if os.path.isdir(p) and not os.listdir(p)]
        if empty:  # no run wrote it: named as what it is
            raise CheckpointMismatchError(f"{empty[0]} is an empty directory, not a checkpoint; remove it to resume "
                                          "(nothing was changed)")
        stateless = [p for s in outside for p in [os.path.join(checkpointer.directory, str(s))]
                     if os.path.isdir(p) and not os.path.isdir(os.path.join(p, "state"))]
        if stateless:  # every checkpoint of a run holds its state: this is something else
            raise CheckpointMismatchError(f"{stateless[0]} is not a checkpoint (it holds no state/: "
                                          f"{', '.join(sorted(os.listdir(stateless[0]))[:4])}); remove it to resume "
                                          "(nothing was changed)")
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


def restore(checkpointer: checkpointing.Checkpointer, target: Callable[[int], tuple[Any, Any]], final_step: int,
            ends: str, *, workdir: str, config: ml_collections.ConfigDict, writer: reporting.MetricsWriter,
            stream: dict) -> tuple[int, Any] | None:
    """The newest readable checkpoint in ``checkpointer`` (``target(step)``: its abstract tree and data iterator), as
    ``(step, tree)``, or None: start at step 0. Checkpoints outside ``1..final_step`` are refused first (``ends``:
    where this run ends); one that cannot be read is set aside once an older one restores, and none readable stops
    the run (never a silent restart). Then the (re)start is recorded (``begin``)."""
    check_checkpoints_within(checkpointer, final_step, ends)
    restored = checkpointer.restore(target)
    step = restored[0] if restored else 0
    if restored:
        reporting.say(f"resuming from the checkpoint at step {step} in {checkpointer.directory}")
    begin(workdir, config, step, writer, stream)
    return restored


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------

def check_finite(rows: Iterable[tuple[int, dict]], keys: tuple[str, ...],
                 checkpointer: checkpointing.Checkpointer) -> None:
    """``rows``: (step, host metrics). Raise ``FloatingPointError`` at the first step where one of ``keys`` is not
    finite, naming it, its value and the last good checkpoint."""
    for at, m in rows:
        bad = [f"{key} {float(m[key])}" for key in keys if key in m and not np.isfinite(m[key])]
        if bad:
            checkpointer.wait()
            good = max(checkpointer.all_steps(), default=None)
            raise FloatingPointError(
                f"non-finite {', '.join(bad)} at step {at} (training diverged); "
                + (f"the last good checkpoint is step {good} in {checkpointer.directory}" if good is not None
                   else "no checkpoint was saved"))


@dataclasses.dataclass
class Hooks:
    """What an entry point supplies to ``run``.

    - ``step(state, step) -> (state, device metrics, host info)``: the batch for ``step`` through the jitted step (and
      what follows it, e.g. pruning's masks); ``info`` is anything the log row needs from the host (e.g. real tokens);
    - ``log_row(done, window, seconds, steps) -> row``: the metrics row for ``metrics.jsonl`` of the checked steps
      since the last row (``window``: their (host metrics, info)) over ``seconds`` of ``steps`` steps;
    - ``save(done, state)``: a checkpoint after step ``done`` (every step up to it checked);
    - ``checked(done, host metrics)``: each step's metrics once checked (e.g. an epoch's losses);
    - ``boundary(done, state)``: at every ``boundary_every`` steps and at the range's end, before the checkpoint (an
      epoch's evaluation); ``postfix(row)``: the progress bar's fields from a log row.
    """

    step: Callable[[Any, int], tuple[Any, dict, Any]]
    log_row: Callable[[int, list, float, int], dict]
    save: Callable[[int, Any], None]
    checked: Callable[[int, dict], None] | None = None
    boundary: Callable[[int, Any], dict | None] | None = None
    boundary_every: int = 0
    postfix: Callable[[dict], dict] | None = None


def run(state, start: int, end: int, hooks: Hooks, *, config: ml_collections.ConfigDict,
        checkpointer: checkpointing.Checkpointer, writer: reporting.MetricsWriter, preempt: trainer.PreemptionFlag,
        final_step: int, desc: str) -> tuple[Any, bool]:
    """Steps ``start..end`` (``end <= final_step``, the run's last step), or until a signal or ``config.stop_at_step``
    stops the run before ``final_step`` (a ``stop_at_step`` the restored ``start`` has reached already: stopped
    before any step, nothing trained or saved). Returns ``(state, stopped)``. Every ``log_every`` steps, at ``end``
    and on a stop, the window of checked metrics becomes a row; checkpoints every ``checkpoint_every`` steps, at
    each boundary and on a stop. The device metrics are fetched only at those points (one transfer each), and every
    step's ``FINITE_METRICS`` are checked before a row or a checkpoint is written."""
    pending: list[tuple[int, dict, Any]] = []  # (step, device metrics, info) not yet fetched and checked
    window: list[tuple[dict, Any]] = []  # checked host metrics since the last row
    timer, stop = reporting.Timer(), False
    stop_at = config.stop_at_step
    if 0 < stop_at <= start < min(end, final_step):  # it used to train one step past it, and save that
        log.warning("config.stop_at_step=%d: the run is at step %d already (its checkpoint); nothing trained", stop_at,
                    start)
        return state, True

    def fetch_and_check():
        host = jax.device_get([m for _, m, _ in pending])
        check_finite(((s, h) for (s, _, _), h in zip(pending, host)), FINITE_METRICS, checkpointer)
        for (s, _, info), h in zip(pending, host):
            window.append((h, info))
            if hooks.checked is not None:
                hooks.checked(s, h)
        pending.clear()

    def write_row(done):
        fetch_and_check()
        row = hooks.log_row(done, window, *timer.lap())
        window.clear()
        writer.write(done, row)
        if hooks.postfix is not None:
            bar.set_postfix(**hooks.postfix(row))

    bar = tqdm(total=end, initial=start, desc=desc, dynamic_ncols=True,
               disable=jax.process_index() != 0 or not config.progress)
    for step in range(start, end):
        state, metrics, info = hooks.step(state, step)
        done = step + 1
        pending.append((done, metrics, info))
        timer.tick()
        bar.update(1)
        at_boundary = done == end or bool(hooks.boundary_every and done % hooks.boundary_every == 0)
        logged = done % config.log_every == 0 or done == end
        if logged:
            write_row(done)
        if at_boundary and hooks.boundary is not None:
            fetch_and_check()
            if postfix := hooks.boundary(done, state):
                bar.set_postfix(**postfix)
        # as late in the step as can be (a signal during its row or evaluation stops here), and the same decision on
        # every host: the signal flag is agreed collectively, stop_at_step is config
        stop = preempt.should_stop(done, boundary=at_boundary) or (stop_at > 0 and done >= stop_at)
        stop = stop and done < final_step  # at the last step the run is complete: finish and export
        if stop and not logged:
            write_row(done)
        if done % config.checkpoint_every == 0 or at_boundary or stop:
            fetch_and_check()  # never save a state whose step has not been checked
            hooks.save(done, state)
        if stop:
            break
    bar.close()
    return state, stop


def require_finished(result: dict, workdir: str, what: str = "the run") -> dict:
    """``result`` (pretraining's or fine-tuning's) of a training that ran to its end; one stopped early (SIGTERM,
    ``stop_at_step``) raises ``StoppedEarly`` naming it and its checkpoint, so that neither a script nor a job that
    goes on to read the run's model and scores (a sweep, a comparison) takes a stopped run for a finished one."""
    if not result.get("preempted"):
        return result
    checkpoints, step = os.path.join(workdir, "checkpoints"), result.get("checkpoint_step")
    if step is None:
        raise StoppedEarly(f"{what} stopped early (signal or stop_at_step), and no checkpoint is on disk in "
                           f"{checkpoints}: it starts over when run again", resumable=False)
    raise StoppedEarly(f"{what} stopped early (signal or stop_at_step): checkpoint of step {step} saved in "
                       f"{checkpoints}, no model exported; run the same command again to resume", resumable=True)


# --------------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------------

def export(model: nnx.Module, params, tokenizer_dir: str, out_dirs: dict[str, nnx.Module],
           extra_files: dict[str, dict] | None = None) -> None:
    """``params`` (on the mesh, gathered from every host) into ``model``; then, on process 0, each of ``out_dirs``'
    modules (``model`` or its parts) saved as a MODEL_DIR there with ``tokenizer_dir``'s tokenizer, and
    ``extra_files`` (name: JSON object, e.g. a task's card) beside the first."""
    params_state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params_state, parallel.to_host(params))
    nnx.update(model, params_state)
    if jax.process_index() != 0:
        return
    first = next(iter(out_dirs))
    for out_dir, module in out_dirs.items():  # the run's own directories, written again at each export
        save_pretrained(module, out_dir, tokenizer_dir=tokenizer_dir, overwrite="replace",
                        beside=tuple(extra_files or ()) if out_dir == first else ())
    for name, obj in (extra_files or {}).items():
        atomic_write(os.path.join(first, name), json_text(obj, indent=2))
