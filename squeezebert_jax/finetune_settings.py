"""What a fine-tuning run is, as its config says, and the checks of it before anything is written, loaded or compiled.

- ``check_settings``: every setting against its range and the others (``loop.Settings``: one line naming the setting,
  its value and what is valid), and the settings no run of the config would read, refused;
- ``check_workdir`` and ``check_same_run``: the run's directory, never over its inputs (``run_inputs``), and one
  run per workdir;
- ``run_stream``: the settings and data that define the run, recorded at each start; a resume with any of them
  changed is refused;
- ``check_meta`` and ``check_best_model``: what a checkpoint's JSON item and the exported best model hold.

``squeezebert_jax.finetune`` runs what these describe.
"""

from __future__ import annotations

import json
import os

import ml_collections

from squeezebert_jax import batching, distill, files, glue, loop, prune, tasks, trainer
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import ATTENTION, LAYERS
from squeezebert_jax.pretrained import PARAMS_FILE, read_model_config
from squeezebert_jax.sources import is_dataset

def check_settings(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Every training setting against its range, before anything is loaded or compiled: one line naming the setting,
    its value and what is valid."""
    settings = loop.Settings(config)
    need, number, integer, value = settings.need, settings.number, settings.integer, settings.value
    need(isinstance(config.task, str), "task", "a GLUE task's name or 'files' (your own files), a string")
    settings.check_training()
    settings.flags("skip_malformed")
    for name in ("init_from", "distill.teacher"):  # a path: None was os's TypeError, naming neither
        need(isinstance(value(name), str), name, "a MODEL_DIR's path (a string)")
    for name in ("num_epochs", "batch_size", "eval_batch_size"):
        need(integer(name, 1), name, "an integer >= 1")
    zero_means = {"max_train_examples": "every row", "student_layers": "init_from's depth"}
    for name, meaning in zero_means.items():
        need(integer(name, 0), name, f"an integer >= 0 (0: {meaning})")
    for name in ("dropout", "attention_dropout"):
        need(value(name) is None or number(name, 0, 1, hi_open=True), name, "a probability in [0, 1), or unset "
             "(init_from's own)")
    need(number("distill.teacher_weight", 0, 1), "distill.teacher_weight", "a share in [0, 1] (1: the teacher's "
         "soft labels alone)")
    for name in ("patient_weight", "hidden_weight", "attention_weight"):
        need(number(f"distill.{name}", 0), f"distill.{name}", "a finite weight >= 0 (0: off)")
    need(number("prune.target", 0, 1, hi_open=True), "prune.target", "a sparsity in [0, 1) (0: off)")
    for name in ("prune.begin", "prune.end"):
        need(number(name, 0, 1), name, "a fraction of the run in [0, 1]")
    need(config.prune.begin <= config.prune.end, "prune.begin", f"at most prune.end ({config.prune.end!r}): "
         "pruning starts before it ends")
    need(integer("prune.every", 1), "prune.every", "an integer >= 1")
    for name in ("max_query_length", "doc_stride", "max_answer_length", "n_best"):
        need(integer(f"data.{name}", 1), f"data.{name}", "an integer >= 1")
    need(number("data.null_threshold"), "data.null_threshold", "a finite score margin")
    need(integer("max_seq_length", tasks.MIN_SEQ_LENGTH), "max_seq_length",
         f"an integer >= {tasks.MIN_SEQ_LENGTH} (the special tokens and a word of each text)")
    need(config.layers in LAYERS, "layers", "auto, scan or unrolled")
    need(config.attention in ATTENTION, "attention", " or ".join(ATTENTION))
    need(config.attention == "reference" or not config.attention_dropout, "attention_dropout",
         f"0 or unset with attention 'fused' (the fused kernel drops nothing out of the attention probabilities; "
         f"--config.attention=reference keeps attention_dropout={config.attention_dropout})")
    batching.length_buckets(config.length_buckets, config.max_seq_length)  # its own one-line refusal
    for name in ("batch_size", "eval_batch_size"):  # a batch's int32 ids, types and mask, as the host makes it
        settings.fits_host(name, settings.value(name), 12 * config.max_seq_length,
                           f"one batch at max_seq_length {config.max_seq_length}")
    need(config.prune.kind in prune.KINDS, "prune.kind", f"one of {', '.join(prune.KINDS)}")
    distill.check_map_forms(config.distill.layer_map, config.student_layer_map)
    # settings no run of this config reads, given anyway: refused, not silently ignored (a run on GLUE's SST-2 while
    # you meant your file; a teacher's share with no teacher)
    unread = settings.unread
    if not config.distill.teacher:  # the layer losses compare with a teacher's layers: without one they did nothing
        for name in ("patient_weight", "hidden_weight", "attention_weight"):
            need(not config.distill[name], f"distill.{name}", "0 without a distill.teacher (the layer losses compare "
                 "the student's layers with the teacher's)")
        unread(distill.SETTINGS, ("teacher_weight", "layer_map", "cache_dir"),
               "without a distill.teacher (only distillation reads it)", "distill")
    elif not any(config.distill[n] for n in ("patient_weight", "hidden_weight", "attention_weight")):
        unread(distill.SETTINGS, ("layer_map",), "with every layer loss's weight 0 (only the layer losses read it: "
               "distill.patient_weight, hidden_weight, attention_weight)", "distill")
    if not config.student_layers:
        unread({"student_layer_map": distill.STUDENT_LAYER_MAP}, ("student_layer_map",),
               "with student_layers 0 (init_from's depth: no layer is chosen)")
    if not config.prune.target:
        unread(prune.SETTINGS, ("kind", "begin", "end", "every"), "with prune.target 0 (pruning off)", "prune")
    if config.task != "files":
        glue.get_task(config.task)  # an unknown task named as such first, not as the task that reads its own files
        unread(tasks.DATA_SETTINGS, tasks.DATA_SETTINGS, f"with task {config.task!r}, which reads its own files "
               "(config.data_dir); your own files: train/configs/glue.py:files", "data")
    else:  # what the kind reads: the QA windows only question answering, whose SQuAD files name their own fields
        unread({"data_dir": ""}, ("data_dir",), "with task 'files' (only a GLUE task reads its data_dir)")
        need(not config.skip_malformed, "skip_malformed", "False with task 'files' (a malformed row of your own files "
             "is refused by file and line; only GLUE's TSV reader skips rows)")
        if value("data.choice_columns"):
            need(config.data.kind == "multiple_choice", "data.choice_columns",
                 f"read by no run: leave it empty with data.kind {config.data.kind!r} (only multiple_choice reads "
                 f"the ending columns)")
        if config.data.kind != "question_answering":
            unread(tasks.DATA_SETTINGS, tasks.QA_SETTINGS, f"with data.kind {config.data.kind!r} (only "
                   "question_answering reads it)", "data")
        else:
            unread(tasks.DATA_SETTINGS, ("text_columns", "label_column"), "with data.kind 'question_answering' "
                   "(SQuAD files name their own fields)", "data")
        if config.data.kind == "token_classification" and not any(
                is_dataset(config.data[f"{s}_file"]) for s in ("train", "validation", "test")):
            unread(tasks.DATA_SETTINGS, ("text_columns", "label_column"), "with data.kind 'token_classification' on "
                   "CoNLL files (a word and its tag per line; only an hf: or tfds: split has columns)", "data")
    need(config.batch_size % num_devices == 0, "batch_size",
         f"a multiple of the {num_devices} devices of the mesh (each takes the same number of rows; or set "
         f"config.num_devices)")


# The settings that define a fine-tuning run: what it trains on, which rows land at which step, what they are trained
# towards, and over how many steps. Each start records them, with the bytes of the data files and model directories
# they name (``run_stream``); a resume with any of them changed is refused (``trainer.check_stream``). The first ones,
# RUN_NAMES, name the run: a workdir holding a run of another is refused even before its first checkpoint (its model,
# results and metrics are that run's). Any other setting may change on resume, logged at WARNING
# (``trainer.record_config``): log_every, checkpoint_every, keep_checkpoints, eval_batch_size, learning_rate,
# warmup_fraction, dropout, num_devices, fsdp, layers, attention, ...
RUN_NAMES = ("task", "init_from", "data_dir", "data.kind", "data.train_file", "data.validation_file", "student_layers")
# (data.labels is none: the label names it resolves to, the run's "task labels", are; naming in data.labels the labels
# its file holds, in their order, changes nothing)
RUN_SETTINGS = RUN_NAMES + ("skip_malformed", "data.text_columns", "data.label_column",
                            "data.choice_columns", "data.max_query_length", "data.doc_stride", "max_seq_length",
                            "length_buckets", "batch_size", "num_epochs", "max_train_examples", "seed", "rng_impl",
                            "distill.teacher", "distill.teacher_weight", "distill.transfer_text",
                            "distill.patient_weight", "distill.hidden_weight", "distill.attention_weight",
                            "distill.layer_map", "student_layer_map", "prune.target", "prune.kind", "prune.begin",
                            "prune.end", "prune.every")


def check_meta(meta: dict, pruned: bool = False) -> None:
    """A fine-tuning checkpoint's JSON item holds what the run keeps between steps, each of its type: the epochs'
    results (``history``: objects; ``best``: one or null), this epoch's step losses (finite numbers) and layer losses
    (objects of numbers), its token counts (two integers) and, pruning, the pruner's [step, sparsity]. Raises
    ``ValueError`` naming the first field that is not (``Checkpointer`` then reads the checkpoint as damaged)."""
    number = files.is_number
    fields = {"history": lambda v: isinstance(v, list) and all(isinstance(h, dict) for h in v),
              "best": lambda v: v is None or isinstance(v, dict),
              "epoch_losses": lambda v: isinstance(v, list) and all(map(number, v)),
              "epoch_parts": lambda v: isinstance(v, list) and all(
                  isinstance(p, dict) and all(map(number, p.values())) for p in v),
              "epoch_tokens": lambda v: isinstance(v, list) and len(v) == 2 and all(
                  files.is_int(t) and t >= 0 for t in v)}
    if pruned:
        fields["pruner"] = lambda v: isinstance(v, list) and len(v) == 2 and all(map(number, v))
    for name, ok in fields.items():
        if name not in meta:
            raise ValueError(f"its JSON item has no {name!r}")
        if not ok(meta[name]):
            raise ValueError(f"its JSON item's {name!r} is {files.json_value(meta[name])}, not what a run keeps there")


def run_inputs(config: ml_collections.ConfigDict) -> dict[str, str]:
    """What a fine-tuning run reads from disk, ``{setting: path}``: the run never writes over them
    (``files.check_inputs_outside``)."""
    out = {name: config[name] for name in ("init_from", "data_dir")}
    out |= {f"data.{s}_file": config.data[f"{s}_file"] for s in ("train", "validation", "test")}
    out["distill.teacher"] = config.distill.teacher
    texts = distill.transfer_paths(config.distill.get("transfer_text") or "")
    out |= {f"distill.transfer_text[{i}]": p for i, p in enumerate(texts)}
    return out


def check_workdir(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> str:
    """The workdir can hold this fine-tuning run (``files.check_run_dir``, never over the run's inputs): the script
    runs it before its log file is written there, ``finetune`` again."""
    inputs = run_inputs(config)
    if cache := config.distill.get("cache_dir"):  # the teacher's logits go there: not into a model, nor checkpoints
        if not isinstance(cache, str):
            raise InputError(f"config.distill.cache_dir={cache!r:.60}: a directory's path (a string)")
        # another run's tb/, predictions/ or own directory too; a teacher_cache/ may be shared
        files.refuse_nested(cache, "config.distill.cache_dir", "", mine=("teacher_cache",))
        if owner := files.run_of(cache):
            raise InputError(f"config.distill.cache_dir {cache} is the directory of a {owner} run; choose a directory "
                             "of its own (WORKDIR/teacher_cache is the run's default)")
        if os.path.isdir(cache):
            files.refuse_model_dir(cache, "the teacher's logits", "config.distill.cache_dir")
        files.check_inputs_outside(cache, inputs, "config.distill.cache_dir")
    return files.check_run_dir(workdir, "fine-tuning", overwrite, inputs=inputs)


def check_same_run(workdir: str, config: ml_collections.ConfigDict) -> None:
    """A workdir holds one fine-tuning run: its own is resumed (its data or model moved, the same bytes, too); one of
    another task or model (``RUN_NAMES``) is refused (its model and results would be replaced and the metrics
    mixed)."""
    history = trainer.read_config_history(workdir)
    if not history:
        return
    was = history[-1]["config"]
    now = json.loads(config.to_json_best_effort())
    stream = trainer.recorded_stream(workdir) or {}
    for key in RUN_NAMES:
        a, b = was, now
        for part in key.split("."):
            a, b = (a or {}).get(part), (b or {}).get(part)
        recorded = stream.get(f"config.{key}")
        if a is not None and a != b and not _same_path(a, b) and not trainer.holds_recorded(recorded, b):
            # the same bytes moved elsewhere are the same data; other bytes are said to be so
            other = (" (it holds other data than the run recorded)" if isinstance(b, str) and os.path.isfile(b)
                     and isinstance(recorded, dict) and recorded.get("sha256") else "")
            raise InputError(f"{workdir} holds the fine-tuning run of {key} {a!r}, not {b!r}{other}: use another "
                             f"--workdir (its model, results and checkpoints are left as they are)")


def check_best_model(model_dir: str) -> None:
    """The best epoch's MODEL_DIR, written when that epoch ended: a rerun of a finished run (its checkpoint at the
    last step) reported it as the run's result even when it was gone or damaged. The checkpoints hold the last step,
    not necessarily the best epoch, so it is refused rather than rebuilt."""
    from safetensors import safe_open

    why = "train again into another --workdir, or put the directory back"
    try:
        read_model_config(model_dir)
        with safe_open(os.path.join(model_dir, PARAMS_FILE), "numpy") as f:
            if not list(f.keys()):
                raise InputError("no tensors")
    except FileNotFoundError as e:
        raise InputError(f"{model_dir}: the run's best model is missing ({e}); it was written when its best epoch "
                         f"ended, and the checkpoints hold only the last step: {why}") from None
    except Exception as e:  # noqa: BLE001 -- a damaged config.json or weights file, whatever its reader raised
        raise InputError(f"{model_dir}: the run's best model cannot be read ({str(e).splitlines()[0][:200]}); the "
                         f"checkpoints hold only the last step: {why}") from None


def _same_path(a, b) -> bool:
    """Two spellings of one file or directory (``../data/x.csv`` and ``/home/me/data/x.csv``); the run's stream
    (``run_stream``) then compares what the file holds."""
    return (isinstance(a, str) and isinstance(b, str) and bool(a) and bool(b) and not is_dataset(a)
            and not is_dataset(b) and os.path.realpath(a) == os.path.realpath(b))


def run_stream(config: ml_collections.ConfigDict, spec, identity=trainer.source_identity) -> dict:
    """The fingerprint of this run's training stream (``trainer.run_stream``): ``RUN_SETTINGS``, the sha256 of the
    files and model directories they name (a GLUE_DIR's split files, a ``hf:``/``tfds:`` dataset by its spec), and the
    task's label names as read from its files. ``identity``: ``trainer.source_identity``, or a memo of it (a sweep
    checks many runs of one model directory)."""
    sources = {"init_from": identity(config.init_from)}
    if config.task == "files":
        sources |= {f"data.{s}_file": identity(config.data[f"{s}_file"])
                    for s in ("train", "validation") if config.data[f"{s}_file"]}
    elif config.data_dir:
        sources["data_dir"] = [identity(glue.glue_tsv_path(config.task, config.data_dir, s))
                               for s in ("train", *spec.eval_splits)]
    if config.distill.teacher:
        sources["distill.teacher"] = identity(config.distill.teacher)
    if config.distill.transfer_text:
        sources["distill.transfer_text"] = [identity(p) for p in distill.transfer_paths(config.distill.transfer_text)]
    return trainer.run_stream(config, RUN_SETTINGS, sources,
                              {"task labels": list(spec.labels) if spec.labels else None})
