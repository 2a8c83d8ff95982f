"""Checkpoints of a train state (and the data iterator, or a JSON item) with orbax: async saves, the newest N kept, a
damaged checkpoint set aside once an older one restores, one written by another config refused untouched."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Callable

import jax

from squeezebert_jax.errors import CheckpointMismatchError, InputError
from squeezebert_jax.optim import key_name

log = logging.getLogger(__name__)


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


def _quiet_closed_asyncio_callbacks() -> None:
    """When a save fails (a full disk), tensorstore's pending writes keep completing into the asyncio loop that orbax
    has already closed: each raises ``RuntimeError('Event loop is closed')`` in a callback, which Python prints as an
    unraisable exception (hundreds of tracebacks for one full disk, before the error itself arrives). Those, and only
    those, are dropped (installed with the first Checkpointer)."""
    previous = sys.unraisablehook
    if getattr(previous, "closed_loop_filter", False):
        return

    def hook(unraisable):
        if isinstance(unraisable.exc_value, RuntimeError) and "Event loop is closed" in str(unraisable.exc_value):
            return
        previous(unraisable)

    hook.closed_loop_filter = True
    sys.unraisablehook = hook


def newest_stream(directory: str) -> dict | None:
    """``Checkpointer.newest_stream`` of the checkpoints in ``directory``, read without creating anything: None where
    there are none."""
    if not steps_on_disk(directory):
        return None
    reader = Checkpointer(directory, async_save=False, with_data=False, with_meta=True)
    try:
        return reader.newest_stream()
    finally:
        reader.close()


def steps_on_disk(directory: str) -> list[int]:
    """The steps whose checkpoints are committed in ``directory`` (orbax renames a step's temporary directory to the
    step's number on commit; a set-aside one is ``corrupt-STEP-TIME``): whether a start resumes, known before
    anything is built or restored. An entry of a step's name that is not a directory (a file put in its place) is
    refused: a run would otherwise start over from step 0 beside it without a word."""
    try:
        names = [n for n in os.listdir(directory) if n.isdigit()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    if bad := [n for n in names if not os.path.isdir(os.path.join(directory, n))]:
        path = os.path.join(directory, bad[0])
        raise InputError(f"{path} is a file, not the checkpoint of step {int(bad[0])} (a checkpoint is a directory): "
                         "put the checkpoint back, or move the file away to go on from the other checkpoints")
    return sorted(int(n) for n in names)


class Checkpointer:
    """orbax CheckpointManager for {train state, data iterator}. Saves are async; orbax writes to a
    temporary directory and renames on commit, so a half-written checkpoint is never listed.

    Restoring tells two failures apart. A checkpoint that cannot be read (damaged files, missing metadata) is
    *damaged*: the caller may fall back to an older one and set the damaged one aside. A readable checkpoint
    whose tree or shapes differ from the current config's state is a *mismatch* (the config changed):
    ``CheckpointMismatchError``, and nothing in the directory is touched."""

    def __init__(self, directory: str, max_to_keep: int = 3, async_save: bool = True, with_data: bool = True,
                 with_meta: bool = False, meta_check: Callable[[Any], None] | None = None):
        import orbax.checkpoint as ocp

        _quiet_closed_asyncio_callbacks()
        self._ocp, self.with_data, self.directory = ocp, with_data, os.path.abspath(directory)
        self.with_meta = with_meta  # a JSON item beside the state (fine-tuning: the epochs' results so far)
        # raises (ValueError, TypeError, KeyError) for a JSON item the run cannot use: such a checkpoint is damaged
        self.meta_check = meta_check
        self._metas: dict[int, dict] = {}  # each restored checkpoint's JSON item, read and checked with its state
        if jax.default_backend() == "cpu":
            # Saves finish before the next step on the CPU backend. Seen (the suite's notebook, 8 simulated devices):
            # the first all-reduce of a fine-tuning epoch stuck with 6 of 8 devices arrived, right after an async save
            # of the state that step donates. The likely cause: orbax's thread copies those buffers to the host while
            # the donating step is already queued on the same devices. On CPU the copy is the cost of a save anyway;
            # accelerators keep async saves.
            async_save = False
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
        try:
            return self.manager.save(step, args=self._ocp.args.Composite(**args), force=force)
        except Exception:
            # A failed save (a full disk) leaves orbax's writer threads running: let them end here, so that the error
            # reaches the user alone and the interpreter does not exit under them (a screen of asyncio tracebacks).
            # The step's temporary directory is orbax's to skip; the checkpoints before it are intact.
            self._failed = True
            try:
                self.manager.wait_until_finished()
            except Exception:  # noqa: BLE001 -- the same failure, seen again: the first one is raised
                pass
            raise

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

    def steps_on_disk(self) -> list[int]:
        """The steps whose checkpoint directories are committed on disk now (read from the directory, not orbax's
        cached list: what a message that says "saved" may rely on)."""
        return steps_on_disk(self.directory)

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def try_restore(self, step: int, abstract_state, data_iterator=None):
        """The train state saved at ``step`` (the data iterator restored in place); None when the checkpoint
        cannot be read (damaged: its JSON item too, ``with_meta``, which must be an object that ``meta_check``
        accepts). Raises ``CheckpointMismatchError`` when it reads but does not fit ``abstract_state``."""
        try:
            metadata = self.manager.item_metadata(step)["state"]
            if metadata is None:
                raise FileNotFoundError("no train-state metadata")
            if self.with_meta:
                meta = self.manager.restore(step, args=self._ocp.args.Composite(
                    meta=self._ocp.args.JsonRestore()))["meta"]
                if not isinstance(meta, dict):
                    raise TypeError(f"its JSON item is {type(meta).__name__}, not an object")
                if not isinstance(meta.get("stream", {}), dict):
                    raise TypeError(f"its JSON item's stream is {type(meta['stream']).__name__}, not an object")
                if self.meta_check is not None:
                    self.meta_check(meta)
                self._metas[step] = meta
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

    def newest_stream(self) -> dict | None:
        """The training stream (``trainer.run_stream``) saved in the JSON item of the newest checkpoint that has one
        readable, or None: what a resume is checked against even when the config history is gone."""
        for saved in sorted(self.steps_on_disk(), reverse=True):
            try:
                stream = self.read_meta(saved).get("stream")
            except Exception:  # noqa: BLE001 -- a damaged or older checkpoint: the one before it may have it
                continue
            if isinstance(stream, dict):
                return stream
            if stream is not None:  # damaged: read as "no stream", any change of the run would resume unchecked
                raise UnreadableCheckpointsError(
                    f"the checkpoint at step {saved} in {self.directory} records its training stream as "
                    f"{type(stream).__name__}, not an object: its JSON item is damaged; move the checkpoint away "
                    "to resume from an older one")
        return None

    def read_meta(self, step: int) -> dict:
        """The JSON item saved with the checkpoint at ``step`` (``with_meta``): as read and checked when that step
        was restored (``try_restore``), else read now."""
        if step in self._metas:
            return self._metas[step]
        return self.manager.restore(step, args=self._ocp.args.Composite(meta=self._ocp.args.JsonRestore()))["meta"]

    def wait(self):
        self.manager.wait_until_finished()

    def close(self):
        try:
            self.manager.wait_until_finished()
            self.manager.close()
        except Exception:
            if not getattr(self, "_failed", False):
                raise  # after a failed save the same error is already on its way up
