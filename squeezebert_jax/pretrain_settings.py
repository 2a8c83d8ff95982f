"""What a pretraining run is, as its config says, and the checks of it before anything is written, loaded or compiled.

- ``get_phases``: ``config.phases`` as ``Phase`` records; ``model_config``: ``config.model`` as the architecture and
  how it runs; ``microbatches`` and ``check_batch_division``: each phase's gradient accumulation over the mesh.
- ``check_settings``: every setting against its range and the others (``loop.Settings``: one line naming the setting,
  its value and what is valid); ``check_workdir`` and ``check_init_vocabulary``: the run's directory and the
  vocabulary of the model it starts from.
- ``run_stream``: the settings that define the run's stream, recorded at each start; a resume with any of them
  changed is refused.

``squeezebert_jax.pretrain`` runs what these describe.
"""

from __future__ import annotations

import dataclasses
import os
import re

import jax
import ml_collections

from squeezebert_jax import corpus, files, loop, pretrain_data, trainer
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import EXECUTION_FIELDS, RTD_SETTINGS, SqueezeBertConfig, scan_layers_on
from squeezebert_jax.pretrained import read_model_config
from squeezebert_jax.tokenizer import Tokenizer

@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of the recipe: global steps ``start + 1 .. end``, its sequence length and masked predictions, and its
    own gradient accumulation (0: the config's ``num_microbatches``)."""

    name: str
    index: int
    start: int
    num_steps: int
    seq_len: int
    max_predictions_per_seq: int
    num_microbatches: int = 0

    @property
    def end(self) -> int:
        return self.start + self.num_steps


def get_phases(config) -> list[Phase]:
    """``config.phases`` (dicts, as config files write them) as consecutive ``Phase`` records."""
    out, start = [], 0
    keys = "a phase has name, num_steps, seq_len, max_predictions_per_seq and optionally num_microbatches"
    if not isinstance(config.phases, (list, tuple)):
        raise InputError(f"config.phases is {type(config.phases).__name__}, not a list of phases; {keys}")
    for i, p in enumerate(config.phases):
        if not isinstance(p, (dict, ml_collections.ConfigDict)):
            raise InputError(f"config.phases[{i}]={p!r:.60}: not a phase (a dict); {keys}")
        unknown = set(p) - ({f.name for f in dataclasses.fields(Phase)} - {"index", "start"})  # those two: derived
        if unknown:
            raise InputError(f"config.phases[{i}]: unknown keys {sorted(unknown)}; {keys}")
        if missing := [k for k in ("name", "num_steps", "seq_len", "max_predictions_per_seq") if k not in p]:
            raise InputError(f"config.phases[{i}]: no {', '.join(missing)}; {keys}")
        if not isinstance(p["name"], str) or not re.fullmatch(r"[\w.-]+", p["name"]) or p["name"] in (".", ".."):
            raise InputError(f"config.phases[{i}].name={p['name']!r}: a name of letters, digits, '_', '-' or '.' (it "
                             "names the phase's checkpoints, --phase and compile.py's files)")
        k = p.get("num_microbatches") or 0
        if not files.is_int(k) or k < 0:
            raise InputError(f"config.phases[{i}].num_microbatches={k!r}: an integer >= 1, or 0 for the config's")
        if not files.is_int(p["num_steps"]):  # summed into the phases' ends below
            raise InputError(f"config.phases[{i}].num_steps={p['num_steps']!r}: an integer >= 1")
        out.append(Phase(p["name"], i, start, p["num_steps"], p["seq_len"], p["max_predictions_per_seq"],
                         p.get("num_microbatches") or 0))
        start += p["num_steps"]
        if start > 2 ** 31 - 1:  # the step is an int32 in the train state
            raise InputError(f"config.phases[{i}].num_steps={p['num_steps']!r}: the phases' steps end at {start:,}, "
                             "past 2,147,483,647 (the step counts in 32-bit integers)")
    return out


def model_config(config: ml_collections.ConfigDict, platform: str | None = None) -> SqueezeBertConfig:
    """The architecture of ``config.model`` (preset + overrides) with its execution choices: ``model.layers`` on
    ``platform`` (default: this process's backend; a compile target's for ``aot``), remat, attention, ffn and
    layernorm. A field given both as ``config.model.X`` and in ``model.overrides`` with another value is refused (the
    override won without a word)."""
    given = dict(config.model.overrides)
    if "vocab_size" in given and config.model.get("vocab_from_tokenizer"):  # the tokenizer's replaced it silently
        raise InputError(f"config.model.overrides sets vocab_size {given['vocab_size']!r}, and "
                         "config.model.vocab_from_tokenizer=True takes the tokenizer's: set "
                         "--config.model.vocab_from_tokenizer=False to keep yours, or leave vocab_size out")
    overrides = dict(given)
    for field in ("remat", "attention", "ffn", "layernorm"):
        if field in config.model:
            overrides.setdefault(field, config.model[field])
    overrides.setdefault("padding", "right")  # every batch is right padding (parallel.global_batch checks it)
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(SqueezeBertConfig)})
    if unknown:
        raise InputError(f"config.model.overrides: {', '.join(map(repr, unknown))} is no model field (e.g. "
                         "hidden_size, num_hidden_layers, hidden_dropout_prob)")
    try:
        overrides.setdefault("scan_layers", scan_layers_on(config.model.layers, platform or jax.default_backend()))
        cfg = SqueezeBertConfig.preset(config.model.preset, **overrides)
    except InputError as e:  # the model's own validator; the refusal names the config section it read
        raise InputError(f"config.model: {e}") from None
    if twice := next((f for f in ("remat", "attention", "ffn", "layernorm")
                      if f in given and f in config.model and given[f] != config.model[f]), None):
        raise InputError(f"config.model.overrides sets {twice} {given[twice]!r}, and config.model.{twice} is "
                         f"{config.model[twice]!r}: set it in one place (config.model.{twice})")
    layers = config.model.get("layers", "auto")  # scan_layers in overrides beside a chosen model.layers: it won
    if "scan_layers" in given and layers != "auto" and bool(given["scan_layers"]) != (layers == "scan"):
        raise InputError(f"config.model.overrides sets scan_layers {given['scan_layers']!r}, and config.model.layers "
                         f"is {layers!r}: set it in one place (config.model.layers)")
    return cfg


def microbatches(config, phase: Phase) -> int:
    """Gradient-accumulation steps of ``phase``: its own ``num_microbatches`` (a seq-512 phase may need more than a
    seq-128 one) or the config's."""
    k = int(phase.num_microbatches or config.num_microbatches)
    if k < 1:
        raise InputError(f"{phase.name}: num_microbatches {k} must be >= 1")
    return k


def check_batch_division(config, phase: Phase, num_devices: int) -> None:
    k = microbatches(config, phase)
    if config.global_batch_size % (num_devices * k):
        raise InputError(f"{phase.name}: global_batch_size {config.global_batch_size} must divide by devices x "
                         f"microbatches ({num_devices} x {k})")


def check_settings(config: ml_collections.ConfigDict, data: bool = True) -> None:
    """Every setting against its range and the others, before anything is written, loaded or compiled: one line naming
    the setting, its value and what is valid (a phase-2 ``seq_len`` past the model's positions is refused here, not
    56k steps into the run). Not ``data``: the data's path is not asked for (train/compile.py compiles the step
    without data)."""
    settings = loop.Settings(config)
    need, finite = settings.need, settings.number
    settings.check_training()
    settings.flags("data.whole_word_masking", "data.start_over", "model.vocab_from_tokenizer")
    need(finite("decay_power", 0, lo_open=True), "decay_power", "a finite power > 0")
    need(config.clip_norm is None or finite("clip_norm", 0), "clip_norm", "a global norm > 0, or 0 for no clipping")
    for name in ("global_batch_size", "num_microbatches"):
        need(settings.integer(name, 1), name, "an integer >= 1")
    for name, lo, valid in (("data.num_workers", 0, "an integer >= 0 (0: grain's thread in this process)"),
                            ("data.prefetch", 0, "an integer >= 0 (0: batches made inline)"),
                            ("data.num_shards", 1, "an integer >= 1"), ("data.demo_num_docs", 1, "an integer >= 1")):
        need(settings.integer(name, lo), name, valid)
    cap = pretrain_data.max_shards()
    need(config.data.num_shards <= cap, "data.num_shards", pretrain_data.SHARDS_VALID.format(cap))
    settings.fits_host("data.demo_num_docs", config.data.demo_num_docs, 2000, "the demo corpus (~2 KB a document)")
    need(finite("peak_flops_per_device", 0), "peak_flops_per_device",
         "a finite FLOP/s >= 0 (0: looked up by device kind)")
    need(config.objective in ("mlm_sop", "rtd"), "objective",
         "mlm_sop (masked LM + sentence order) or rtd (ELECTRA's replaced-token detection)")
    if config.objective == "rtd":
        need(finite("rtd.weight", 0, lo_open=True), "rtd.weight", "a finite weight > 0 (ELECTRA: 50)")
        need(finite("rtd.generator_fraction", 0, 1, lo_open=True),
             "rtd.generator_fraction", "a fraction in (0, 1] of the discriminator's width (ELECTRA: 1/4)")
        need(not config.init_from, "init_from", "empty with objective=rtd (the generator and discriminator pair "
             "starts from random weights here)")
    elif "rtd" in config:  # settings nothing reads: refused, not ignored (nor written into the run's config as NaN)
        settings.unread(RTD_SETTINGS, RTD_SETTINGS,
                        f"with objective {config.objective!r} (only objective=rtd reads it)", "rtd")
    need(config.data.source in ("demo", "prepared"), "data.source", "demo or prepared")
    need(not data or config.data.source != "prepared" or (isinstance(config.data.path, str)
                                                          and config.data.path.strip() != ""
                                                          and os.path.isdir(config.data.path)), "data.path",
         "a directory written by train/prepare_data.py (data.source=prepared)")
    need(not data or config.data.source != "prepared" or os.path.isfile(os.path.join(config.data.path, "meta.json")),
         "data.path", "a finished train/prepare_data.py output: this directory has no meta.json (an empty or "
         "unfinished preparation?)")
    need(settings.integer("data.demo_seed", 0), "data.demo_seed", "an integer >= 0")
    if config.data.source == "demo":
        settings.unread({"path": ""}, ("path",), "with data.source=demo (the demo corpus is generated; "
                        "data.source=prepared reads data.path)", "data")
    if "num_processes" in config:  # multi-host without jax.distributed's own discovery
        need(settings.integer("num_processes", 0), "num_processes", "an integer >= 0 (0: found by jax.distributed)")
        need(settings.integer("process_id", -1)
             and (config.num_processes == 0 or config.process_id < config.num_processes), "process_id",
             f"an integer in [0, num_processes {config.num_processes}), or -1: found by jax.distributed")
        address = config.get("coordinator_address")  # jax splits it at its last ':' (IndexError without one)
        port = re.fullmatch(r"\S+:(\d{1,5})", address.strip()) if isinstance(address, str) else None
        need(not address or bool(port) and 0 < int(port[1]) < 65536,
             "coordinator_address", "HOST:PORT, the first process's address and a free port (e.g. 10.0.0.1:1234)")
        for name, unset in (("num_processes", 0), ("process_id", -1)):  # read only beside a coordinator
            need(config.get("coordinator_address") or config[name] == unset, name,
                 f"left at {unset} without coordinator_address (a single process reads neither)")
    trainer.compute_dtype(config)
    if not config.phases:
        raise InputError("config.phases is empty: at least one phase (name, num_steps, seq_len, "
                         "max_predictions_per_seq)")
    need(isinstance(config.init_from, str), "init_from", "a MODEL_DIR's path (a string), or empty")
    need(isinstance(config.model.overrides, (dict, ml_collections.ConfigDict)), "model.overrides",
         "a dict of model fields, e.g. {'q_groups': 2} ({} for none)")
    if config.init_from:
        positions, source = read_model_config(config.init_from)[0].max_position_embeddings, config.init_from
        shape = sorted(set(config.model.overrides or {}) - set(EXECUTION_FIELDS))  # what init_from's config.json sets
        need(not shape, "model.overrides", f"only how the model runs ({', '.join(EXECUTION_FIELDS)}) with init_from: "
             f"the model is init_from's, as its config.json describes it, so {', '.join(shape)} would not be read")
        model_config(config, platform="cpu")  # the values of how it runs, checked as without init_from
    else:
        # any platform: only the architecture is read, and no backend may start before jax.distributed
        positions = model_config(config, platform="cpu").max_position_embeddings
        source = ("model.overrides" if "max_position_embeddings" in (config.model.overrides or {})
                  else f"model.preset {config.model.preset!r}")
    phases, names = get_phases(config), {}
    for phase in phases:
        at = f"phases[{phase.index}]"
        need(phase.name not in names, f"{at}.name", f"a name no other phase has (phases[{names.get(phase.name)}] is "
             f"{phase.name!r}: each names its own checkpoints, --phase and compile.py's files)")
        names[phase.name] = phase.index
        need(files.is_int(phase.num_steps) and phase.num_steps >= 1, f"{at}.num_steps", "an integer >= 1")
        need(files.is_int(phase.seq_len) and 5 <= phase.seq_len <= positions, f"{at}.seq_len",
             f"an integer in [5, {positions}] (the max_position_embeddings of {source}; 5: [CLS] a [SEP] b [SEP])")
        need(files.is_int(phase.max_predictions_per_seq)
             and 1 <= phase.max_predictions_per_seq <= phase.seq_len,
             f"{at}.max_predictions_per_seq", f"an integer in [1, seq_len {phase.seq_len}]")
        microbatches(config, phase)
        # one global batch's arrays (three int32 [B, S] and three [B, P]), as the host assembles it
        settings.fits_host("global_batch_size", config.global_batch_size,
                           4 * (3 * phase.seq_len + 3 * phase.max_predictions_per_seq),
                           f"one batch of phase {phase.name} (seq {phase.seq_len})")
    need(config.stop_at_step <= phases[-1].end, "stop_at_step",
         f"an integer in [0, {phases[-1].end}]: the run's steps end at {phases[-1].end} (0: off)")


# The settings that define a pretraining run's stream: which sequences land at which step (the loader's seed per phase,
# the batch, each phase's length and masking, where each phase begins and ends) and what they are trained towards. Each
# start records them (``run_stream``); a resume with any of them changed is refused (``trainer.check_stream``). The data
# itself is checked against each checkpoint's record of it (``pretrain_data.check_resume_data``: ``data.start_over``
# may accept shards prepared again). Any other setting may change on resume, logged at WARNING
# (``trainer.record_config``): learning_rate, log_every, checkpoint_every, stop_at_step, num_devices,
# num_microbatches, ...
RUN_SETTINGS = ("seed", "rng_impl", "global_batch_size", "objective", "data.whole_word_masking",
                "model.vocab_from_tokenizer")
# the model fields a resume may change: the vocabulary's size (the data's, checked with it), dropout, initialisation
ARCHITECTURE_FREE = ("vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")
PHASE_STREAM = ("num_steps", "seq_len", "max_predictions_per_seq")
RTD_STREAM = ("generator_fraction", "weight")  # config.rtd's fields, when the objective is RTD


def run_stream(config: ml_collections.ConfigDict) -> dict:
    """The fingerprint of this run's training stream (``trainer.run_stream``): ``RUN_SETTINGS``, each phase's
    ``PHASE_STREAM`` fields and the model's architecture (``config.model``'s preset and overrides as the fields they
    resolve to, but for ``ARCHITECTURE_FREE``: another head count or group count has the same shapes and would load
    the checkpoint's weights into another function), after the preset itself (a resume on another preset names it,
    not only the fields it changes) and, for RTD, ``RTD_STREAM``. The data itself is fingerprinted by
    ``pretrain_data``."""
    phases = {f"config.phases[{p.index}].{f}": getattr(p, f) for p in get_phases(config) for f in PHASE_STREAM}
    arch = {f"config.model.{k}": v for k, v in model_config(config, "cpu").to_dict().items()
            if k not in ARCHITECTURE_FREE}
    # RTD's generator (its width: its weights' shapes) and its loss's weight: what the run is trained towards
    rtd = {f"config.rtd.{k}": trainer.config_value(config, f"rtd.{k}") for k in RTD_STREAM} \
        if config.objective == "rtd" else {}
    preset = {"config.model.preset": config.model.preset}
    return trainer.run_stream(config, RUN_SETTINGS, derived=preset | phases | arch | rtd)


DEMO_ENTRIES = files.DEMO_DIRS  # what the demo source writes into a workdir before its first checkpoint


def check_workdir(config: ml_collections.ConfigDict, workdir: str, overwrite: bool = False) -> str:
    """The workdir can hold this pretraining run (``files.check_run_dir``): nothing is written before this."""
    return files.check_run_dir(workdir, "pretraining", overwrite,
                               ours=DEMO_ENTRIES if config.data.source == "demo" else (),
                               inputs={"init_from": config.init_from,  # nor inside the prepared data it reads
                                       "data.path": config.data.path if config.data.source == "prepared" else ""})


def check_init_vocabulary(config: ml_collections.ConfigDict) -> None:
    """The data's ids mean the words ``init_from``'s embeddings were trained for: its vocabulary is the one the data
    is tokenized with (a prepared directory's recorded tokenizer; the demo corpus's own vocabulary). Before anything
    is written: the demo data was made first, and a refused run left it behind."""
    own = Tokenizer.from_dir(config.init_from) if config.init_from else None
    if config.data.source == "demo":
        data, where = corpus.demo_vocab(), "the demo corpus is tokenized with"
        fix = (f"pretrain on the demo corpus without init_from, or prepare your own text with {own and own.path} "
               "(train/prepare_data.py --vocab)")
    else:
        prepared = Tokenizer.from_dir(config.data.path) if os.path.isdir(config.data.path) else None
        data, where = prepared and prepared.tokens, f"{config.data.path} was prepared with"
        fix = f"prepare the data with {own and own.path}"
    if own is None or data is None or own.tokens == data:
        return
    differ = next((i for i, (a, b) in enumerate(zip(own.tokens, data)) if a != b), min(len(own.tokens), len(data)))
    raise InputError(f"config.init_from={config.init_from!r}: its vocabulary ({own.vocab_size} entries) is not the "
                     f"one {where} ({len(data)}; they differ from id {differ}): its embeddings would read other "
                     f"words; {fix}")
