"""The training layer pretraining and fine-tuning share: the pure update step ``train_step(state, batch, rng, lr)
-> (state, metrics)`` and how it is jitted (shardings in and out, the state donated), the reuse of jitted steps within a
process, the compute dtype, the workdir's config history and the training stream a resume must find unchanged
(``check_stream``), and the SIGTERM (preemption) flag that all hosts agree on.
The mesh and shardings live in ``parallel``, checkpoints in ``checkpointing``, metrics in ``reporting``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from squeezebert_jax import optim, reporting, sources
from squeezebert_jax.errors import DataFileError, InputError
from squeezebert_jax.files import atomic_write, file_sha256, file_sha256s, json_text, read_text
from squeezebert_jax.parallel import any_process, batch_sharding, state_shardings
from squeezebert_jax.pretrained import MODEL_FILES, TOKENIZER_FILES


log = logging.getLogger(__name__)


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
        with jax.named_scope("optimizer"):  # labels the update's kernels in a profile (benchmarks.step_profile)
            updates, opt_state = tx.update(grads, optim.set_learning_rate(state["opt_state"], lr), state["params"])
            params = optax.apply_updates(state["params"], updates)
            # over the layer-stacked trees: one reduction per parameter kind, not per layer (optim.by_layer)
            norms = tuple(optax.tree.norm(optim.stack_layers(t)) for t in (grads, params, updates))
        metrics = finalize(loss, aux) | dict(zip(STEP_NORMS, norms))
        return {**state, "step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics

    return train_step


STEP_NORMS = ("grad_norm", "param_norm", "update_norm")  # the metrics every step adds to its loss's

RNG_IMPLS = ("threefry2x32", "rbg")  # config.rng_impl


def run_key(seed: int, impl: str) -> jax.Array:
    """The run's base key; step i's dropout (and RTD sampling) key is ``fold_in(key, i)``, so a resumed run draws what
    an uninterrupted one would. ``impl`` "threefry2x32" (jax's default) gives the same bits on every platform and
    mesh; "rbg" derives keys with threefry but draws the bits with XLA's RngBitGenerator, cheaper to generate on
    accelerators, the same bits for the same program (a resume on the same platform and mesh), other bits elsewhere."""
    if impl not in RNG_IMPLS:
        raise InputError(f"config.rng_impl={impl!r}: one of {', '.join(RNG_IMPLS)}")
    return jax.random.key(seed, impl=impl)


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


def fingerprint(tree) -> tuple:
    """A hashable snapshot of a small pytree of arrays (a model's ``rest``: the dropout streams' keys and counts): its
    structure, and each leaf's dtype, shape and bytes."""
    leaves, treedef = jax.tree.flatten(tree)

    def raw(x):
        data = jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        return str(x.dtype), tuple(x.shape), np.asarray(jax.device_get(data)).tobytes()

    return treedef, tuple(raw(x) for x in leaves)


class StepCache:
    """Jitted training steps by key, the ``maxsize`` most recently used kept: a second run in the process (a sweep, a notebook
    cell run again, a restart after a preemption) with an equal key gets the same ``jax.jit`` object, so jax neither
    traces, lowers nor loads its program again (measured: a smoke pretraining run in a warm process, 3.8 -> 1.4 s on a
    2-core host). The key must hold everything the step closes over (``model.Structure`` for the graphdef,
    ``fingerprint`` for arrays); jax's own cache then holds one compiled program per input shape."""

    def __init__(self, maxsize: int = 16):
        self.maxsize, self._steps = maxsize, {}

    def get(self, key, build: Callable[[], Any]):
        if key in self._steps:  # the most recently used last: the least recently used goes first
            self._steps[key] = self._steps.pop(key)
        else:
            while len(self._steps) >= self.maxsize:
                self._steps.pop(next(iter(self._steps)))
            self._steps[key] = build()
        return self._steps[key]


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


HISTORY_ADVICE = ("the run's config history is damaged: move it away (a resume then starts a new history; the "
                  "checkpoints hold the run)")


def _history(workdir: str) -> tuple[list[dict], bool]:
    """The history's rows, and whether its file does not end in a line end (``reporting.read_log``)."""
    path = os.path.join(workdir, "config_history.jsonl")
    if not os.path.exists(path):
        return [], False
    rows, unterminated = reporting.read_log(path, HISTORY_ADVICE)
    for lineno, row in rows:
        if not isinstance(row.get("config"), dict):
            raise InputError(f"{path}:{lineno}: a row without the start's config (a JSON object); {HISTORY_ADVICE}")
    return [row for _, row in rows], unterminated


def read_config_history(workdir: str) -> list[dict]:
    """The rows of ``WORKDIR/config_history.jsonl``: one per start of the run, ``{"start_step", "time", "config",
    "changed"}`` and ``"stream"`` (``run_stream``; not in a run begun by an older version), oldest first. Read as every
    log of a run is (``reporting.read_jsonl``): a last line torn by a hard kill is dropped with a warning; other damage
    (bytes that are not UTF-8, a line that is not a start's record) is refused naming FILE:LINE."""
    return _history(workdir)[0]


def record_config(workdir: str, config: ml_collections.ConfigDict, start_step: int,
                  stream: dict | None = None) -> dict[str, tuple[Any, Any]]:
    """Keep the run's config history: append this start (its step, full config and ``stream``, the fingerprint of its
    training stream that the next resume is checked against: ``check_stream``) to ``config_history.jsonl``, never
    rewriting earlier rows, and write ``config.json`` (the config now in use). Fields that changed since the previous
    start (a resume with another learning rate, say) are logged at WARNING, old -> new, and returned. Structural
    changes never get here: the checkpoint restore refuses them; nor do the settings that define the stream
    (``check_stream`` refuses them first)."""
    import datetime

    new = json.loads(config.to_json_best_effort())
    hist_path, cfg_path = os.path.join(workdir, "config_history.jsonl"), os.path.join(workdir, "config.json")
    history, unterminated = _history(workdir)
    rows = []
    if history:
        previous = history[-1]["config"]
    elif os.path.exists(cfg_path):  # a workdir from before the history: keep its config as the first start
        damaged = "the run's config file is damaged: move it away (a resume needs only the checkpoints)"
        try:
            previous = json.loads(read_text(cfg_path))
        except DataFileError as e:
            raise InputError(f"{str(e).rsplit('; save the file', 1)[0]}; {damaged}") from None
        except ValueError as e:
            raise InputError(f"{cfg_path}: not valid JSON ({e}); {damaged}") from None
        if not isinstance(previous, dict):
            raise InputError(f"{cfg_path}: not a config (a JSON object); move it away (a resume needs only the "
                             "checkpoints)")
        rows.append({"start_step": None, "time": None, "config": previous, "changed": {}})
    else:
        previous = None
    changes = config_changes(previous, new) if previous is not None else {}
    for k, (old, val) in changes.items():
        log.warning("config.%s changed since the last start of %s: %s -> %s%s", k, workdir, json.dumps(old),
                    json.dumps(val), f" (resuming at step {start_step})" if start_step else "")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    rows.append({"start_step": start_step, "time": now, "config": new,
                 "changed": {k: list(v) for k, v in changes.items()}} | ({"stream": stream} if stream else {}))
    if unterminated:  # a torn last line (dropped when read), or a last row without its line end: mended first
        atomic_write(hist_path, "".join(json_text(r) + "\n" for r in history))
    with open(hist_path, "a", encoding="utf-8") as f:
        f.writelines(json_text(r) + "\n" for r in rows)
        f.flush()
        os.fsync(f.fileno())
    atomic_write(cfg_path, json_text(json.loads(config.to_json_best_effort()), indent=2))
    return changes


# --------------------------------------------------------------------------------------------------
# The training stream: what a resume must find unchanged
# --------------------------------------------------------------------------------------------------

# the layout of a stream record; records of another version are compared on their common keys (3: pretraining records
# model.vocab_from_tokenizer and, for RTD, rtd.*; 4: both record rng_impl, the dropout bits' generator; 5: pretraining
# records model.preset, named before the fields it resolves to; so a run begun before resumes on what both record)
STREAM_VERSION = 5


def source_identity(source: str) -> dict:
    """What a data source is, as a resume compares it: ``{"path", "sha256", "bytes"}``. A file:
    the sha256 of its bytes, and of its text (``text_sha256``: the same for the file saved again with other line
    ends); a directory (a MODEL_DIR, a transformers checkpoint): of the files that make the model
    (``pretrained.MODEL_FILES`` and ``TOKENIZER_FILES``), each also in ``files`` (name: sha256) so that a resume names
    the one that changed; a file of anything else there (predictions written beside the model, a README) is none of
    it; a dataset spec
    (``hf:``/``tfds:``, ``squeezebert_jax.sources``): the spec itself (a TFDS one's ``$TFDS_DATA_DIR`` too), and for a
    dataset saved or prepared on disk its files, each
    in ``files`` too: its metadata and its data (the ``.arrow`` files: new data under the old ``state.json`` is other
    data), its split directories followed through links (a link moved to other rows), ``datasets``' cache files of a
    later ``map`` left out."""

    out = {"path": source, "sha256": None, "bytes": None}
    if sources.is_dataset(source):
        kind, name, split = sources.parse(source)
        if kind == "tfds":  # prepared under $TFDS_DATA_DIR: another directory is other data by the same name
            root = os.environ.get("TFDS_DATA_DIR") or os.path.join(os.path.expanduser("~"), "tensorflow_datasets")
            base, version = sources.tfds_version(name)  # glue/sst2:2.0.0 is prepared in glue/sst2/2.0.0
            concrete = version and "*" not in version
            out["data_dir"], name = os.path.realpath(root), os.path.join(root, base, version if concrete else "")
            depth = 2 if concrete else 4
        else:
            depth = 2
        # a DatasetDict's other splits and a README beside them are not this split's rows
        own = split if kind == "hf" and os.path.isdir(os.path.join(name, split)) else None
        if os.path.isdir(name):
            found = sorted(os.path.relpath(os.path.join(d, f), name) for d, _, fs in os.walk(name, followlinks=True)
                           for f in fs if os.path.relpath(d, name).count(os.sep) < depth
                           and not f.startswith((".", "cache-")) and os.path.isfile(os.path.join(d, f))
                           and (own is None or (d == name and f.endswith(".json"))
                                or os.path.relpath(d, name).split(os.sep)[0] == own))
            out["files"] = {m: file_sha256(os.path.join(name, m)) for m in found}
            out["sha256"] = hashlib.sha256(json.dumps(sorted(out["files"].items())).encode()).hexdigest()
            out["bytes"] = sum(os.path.getsize(os.path.join(name, m)) for m in found)
        return out
    path = os.path.realpath(source)  # one file, however the path to it is spelt (a link, a relative path)
    out["path"] = path
    if os.path.isfile(path):
        (out["sha256"], out["text_sha256"]), out["bytes"] = file_sha256s(path), os.path.getsize(path)
    elif os.path.isdir(path):
        names = sorted(n for n in MODEL_FILES + TOKENIZER_FILES if os.path.isfile(os.path.join(path, n)))
        out["files"] = {n: file_sha256(os.path.join(path, n)) for n in names}
        out["sha256"] = hashlib.sha256(json.dumps([[n, out["files"][n]] for n in names]).encode()).hexdigest()
        out["bytes"] = sum(os.path.getsize(os.path.join(path, n)) for n in names)
    return out


def config_value(config, name: str):
    """``config`` at the dotted ``name`` (``data.train_file``) as plain JSON values; None where it has no such field."""
    v = config
    for part in name.split("."):
        try:
            v = v[part]
        except (KeyError, AttributeError, TypeError):
            return None
    return json.loads(json.dumps(v.to_dict() if hasattr(v, "to_dict") else v, default=str))


def run_stream(config, settings, sources: dict | None = None, derived: dict | None = None) -> dict:
    """A run's stream fingerprint: what decides which example lands at which step, and what it is trained towards.
    ``settings``: the dotted config names that define it (each entry point keeps its one list, ``RUN_SETTINGS``), each
    recorded as ``config.NAME``: its value, or for a setting that names data (``sources``: name -> ``source_identity``
    or a list of them) what that data is; ``derived``: values the settings resolve to (a task's label names read from
    its training file, say). Recorded with each start (``record_config``), checked by the next resume
    (``check_stream``)."""
    sources = sources or {}
    stream = {"version": STREAM_VERSION}
    stream |= {f"config.{name}": sources[name] if name in sources else config_value(config, name)
               for name in (*settings, *(n for n in sources if n not in settings))}
    return stream | dict(derived or {})


def _is_identity(x) -> bool:
    return isinstance(x, dict) and "sha256" in x and "path" in x


def _same(old, new) -> bool:
    """Whether two records of a stream entry say the same. Files and directories are compared by what they hold (their
    sha256: one moved or copied elsewhere is the same data), datasets by their spec; a directory recorded before its
    identity named its files (all its files were hashed then) by its path alone."""
    if _is_identity(old) and _is_identity(new):
        if "files" in new and "files" not in old:
            return old["path"] == new["path"]
        if "files" in new and sources.is_dataset(new["path"]):  # what it holds, wherever $TFDS_DATA_DIR put it
            return old["path"] == new["path"] and old["files"] == new["files"]
        if old["sha256"] and new["sha256"] and not sources.is_dataset(new["path"]):
            if old.get("text_sha256") and old.get("text_sha256") == new.get("text_sha256"):
                return True  # the same text, its line ends written otherwise (files.file_sha256s)
            return old["sha256"] == new["sha256"] and old.get("bytes") == new.get("bytes")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return all(_same(a, b) for a, b in zip(old, new))
    return old == new


def holds_recorded(recorded, path) -> bool:
    """Whether ``path`` holds what a run recorded (``source_identity``) of a file or directory it named elsewhere: the
    same bytes moved or copied are the same data (fine-tuning's workdir check; the stream check compares them too)."""
    return (_is_identity(recorded) and bool(recorded["sha256"]) and isinstance(path, str) and bool(path)
            and not sources.is_dataset(path) and os.path.exists(path) and _same(recorded, source_identity(path)))


def _describe(key: str, old, new) -> str:
    """One phrase: how the stream entry ``key`` changed, ``old`` -> ``new``."""
    if _is_identity(old) and _is_identity(new):
        if old["path"] != new["path"]:
            return f"{key} changed since the run began ({old['path']} -> {new['path']})"
        if isinstance(old.get("files"), dict) and isinstance(new.get("files"), dict):
            a, b = old["files"], new["files"]
            what = ([f"{n} changed" for n in b if n in a and a[n] != b[n]] + [f"{n} added" for n in b if n not in a]
                    + [f"{n} removed" for n in a if n not in b])
            return f"{key} {new['path']} changed since the run began ({', '.join(what)})"
        if old["sha256"] and new["sha256"]:
            size = (f"; {old['bytes']} -> {new['bytes']} bytes" if None not in (old.get("bytes"), new.get("bytes"))
                    and old["bytes"] != new["bytes"] else "")
            return (f"{key} {new['path']} changed since the run began (sha256 {old['sha256'][:12]}.. -> "
                    f"{new['sha256'][:12]}..{size})")
        return f"{key} {new['path']} changed since the run began (it cannot be read as it was)"
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and old \
            and all(map(_is_identity, old + new)):
        return "; ".join(_describe(key, a, b) for a, b in zip(old, new) if not _same(a, b))
    plain = [[x["path"] for x in v] if isinstance(v, list) and all(map(_is_identity, v)) else
             v["path"] if _is_identity(v) else v for v in (old, new)]
    return f"{key} changed since the run began ({_short(plain[0])} -> {_short(plain[1])})"


def _short(value, most: int = 8) -> str:
    """``value`` as JSON, a list of more than ``most`` items cut to its first ``most`` and its length (a label
    column read as texts: one line, not every text)."""
    if isinstance(value, list) and len(value) > most:
        return json.dumps(value[:most])[:-1] + f", ... ({len(value)} in all)]"
    return json.dumps(value)


def stream_changes(old: dict, new: dict) -> list[str]:
    """What differs between two stream records, one phrase each (``[]``: the same stream)."""
    keys = [k for k in new if k != "version"] + [k for k in old if k != "version" and k not in new]
    if old.get("version") != new.get("version"):  # another layout: only what both record is comparable
        keys = [k for k in keys if k in old and k in new]
    return [_describe(k, old.get(k), new.get(k)) for k in keys if not _same(old.get(k), new.get(k))]


def source_changes(old: dict, new: dict) -> list[str]:
    """``stream_changes`` for what a stream's settings name and resolve to, not the settings' own values: the
    contents of its data files and model directories changed in place (at the same path: another path is another
    setting) and the values derived from them (a task's label names read from its training file)."""
    def paths(v):
        return (v["path"] if _is_identity(v) else [x["path"] for x in v]
                if isinstance(v, list) and v and all(map(_is_identity, v)) else None)

    keys = [k for k in new if k in old and k != "version"
            and ((paths(old[k]) is not None and paths(old[k]) == paths(new[k])) or not k.startswith("config."))]
    return stream_changes({k: old[k] for k in keys}, {k: new[k] for k in keys})


def recorded_stream(workdir: str) -> dict | None:
    """The stream the run's last start recorded in ``config_history.jsonl`` (``record_config``); None where none did
    (a run begun by an older version)."""
    streams = [row["stream"] for row in read_config_history(workdir) if isinstance(row.get("stream"), dict)]
    return streams[-1] if streams else None


def check_stream(workdir: str, stream: dict, resuming: bool, saved: dict | None = None) -> None:
    """Refuse to resume a run on another training stream than the one it began with: ``saved``, the stream the
    newest checkpoint holds (``Checkpointer.newest_stream``), else the last one recorded in ``config_history.jsonl``
    (a run whose history was moved away or emptied is still checked): a data file with other bytes, another batch
    size, seed, label set, ... (``run_stream``). The one check of pretraining and fine-tuning alike, run before
    anything is restored or written; a run with no checkpoint yet (``resuming`` False) starts afresh and may change
    anything. A run that recorded no stream anywhere (written by an older version) resumes with a warning."""
    if not resuming:
        return
    recorded = [s for s in (recorded_stream(workdir), saved) if s]
    if not recorded:
        log.warning("%s records no training stream (a run begun by an older version): its data and settings are "
                    "assumed to be the ones it began with", workdir)
        return
    if changes := stream_changes(recorded[-1], stream):
        more = f" (and {len(changes) - 3} more)" if len(changes) > 3 else ""
        raise InputError(f"{'; '.join(changes[:3])}{more}. The checkpoints in {os.path.join(workdir, 'checkpoints')} "
                         "are left untouched: resume with the data and settings the run began with, or start a new "
                         "--workdir")


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
