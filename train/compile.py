"""Compile the pretraining or fine-tuning step for a TPU topology or a GPU target on this (CPU-only) host: memory,
FLOPs, roofline.

    python train/compile.py --config train/configs/pretrain.py:paper --topology v5e:2x4
    python train/compile.py --config train/configs/pretrain.py:bert-base --topology v5e:2x4 --max-batch
    python train/compile.py --config train/configs/pretrain.py:paper --topology h100:1x8 --config.num_microbatches=4
    python train/compile.py --config train/configs/pretrain.py:paper --topology h100:1x1 --census --hlo DIR
                                  # kernels by kind, the bytes they read and write, the program to read in DIR
    python train/compile.py --config train/configs/pretrain.py:paper --topology v4:2x2x1 --fit
    python train/compile.py --config train/configs/pretrain.py:paper --topology v5p:2x2x2 --num_slices 2
    python train/compile.py --config train/configs/pretrain.py:paper --topology v5e:2x4 --phase phase2
    python train/compile.py --config train/configs/glue.py:mnli --topology v5e:2x4 --preset bert-base-uncased
    python train/compile.py --config train/configs/glue.py:mnli --topology v5e:2x4 --teacher_preset bert-base-uncased \
        --config.distill.hidden_weight=1   # layer distillation: the teacher's forward inside the step

The same config files and --config.x=... overrides as train/pretrain.py; for every phase it compiles the exact step
pretrain.py runs (pretrain.build_phase_step) over the topology's compile-only devices and prints one table: per-chip
batch, microbatches, memory (arguments, temporaries, code, peak) against the chip's HBM, fits or not, XLA's FLOPs
per step vs the analytic count, XLA's bytes accessed, the roofline (max(FLOPs / peak, bytes / HBM bandwidth): the
FLOP term is a strict lower bound, the byte term XLA's cost-model estimate) and the phase's hours at the FLOP bound,
at the roofline and at 50% / 35% MFU. The memory answer comes with the step's own compile; --bytes adds XLA's bytes
accessed (two more compiles per phase: minutes at full size). --max-batch finds the largest per-chip batch that fits and the fewest
microbatches for the config's global batch; --fit multiplies a phase's microbatches until its step fits and reports
that step. --phase NAME (repeatable) compiles only the named phases (each compile of a full-size step is
minutes). Exit 1 when a phase does not fit. TPU targets need the `tpu` extra (libtpu), GPU targets the `gpu-aot`
extra (no CUDA libraries or GPU needed). Library logs and libtpu's start-up chatter go to
$TMPDIR/squeezebert_compile.log.
Topologies: v4:AxBxC, v5e:AxB, v5p:AxBxC, v6e:AxB (libtpu's names), h100:1xN, a100:1xN.

A fine-tuning config (train/configs/glue.py) compiles the step train/finetune.py runs (AdamW, data parallel or FSDP,
the task's head) for the architecture of --config.init_from (its config.json) or --preset; with a teacher
(--config.distill.teacher's config.json or --teacher_preset) the step takes the teacher's logits, and the teacher's
logits pass is compiled too, or, when a layer-loss weight is set, the teacher's forward runs inside the step. Hours are
for the task's GLUE training set and the config's epochs.
"""

import dataclasses
import json
import math
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host computes nothing; the targets are compile-only devices

import jax  # noqa: E402
from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from squeezebert_jax import (aot, cli, corpus, files, finetune_settings, glue, parallel, pretrain,  # noqa: E402
                             pretrain_settings, trainer)
from squeezebert_jax.benchmarks import timing  # noqa: E402
from squeezebert_jax.benchmarks.hlo_census import census  # noqa: E402
from squeezebert_jax.benchmarks.timing import format_table  # noqa: E402
from squeezebert_jax.errors import InputError  # noqa: E402
from squeezebert_jax.model import SqueezeBertConfig, abstract_model  # noqa: E402
from squeezebert_jax.pretrained import read_model_config  # noqa: E402
from squeezebert_jax.tokenizer import Tokenizer  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file:variant", lock_config=False)
_TOPOLOGY = flags.DEFINE_string("topology", None, "CHIP:AxB[xC]: v5e/v6e AxB (v5e:2x4), v4/v5p AxBxC (v4:2x2x1), a GPU "
                                "HOSTSxGPUS (h100:1x8)")
_SLICES = flags.DEFINE_integer("num_slices", 1, "TPU slices (data parallel over DCN: a hybrid mesh)")
_MAX_BATCH = flags.DEFINE_bool("max-batch", False, "search the largest per-chip batch that fits (each phase)")
_FIT = flags.DEFINE_bool("fit", False, "a phase that does not fit is compiled again with 2x, 4x, ... microbatches "
                          "until it does; the table shows the fewest that fit")
_PHASE = flags.DEFINE_multi_string("phase", None, "compile only this phase (by name; repeatable); default: all")
_BYTES = flags.DEFINE_bool("bytes", False, "also XLA's bytes accessed per step (TPU; two more compiles per phase)")
_CENSUS = flags.DEFINE_bool("census", False, "also the compiled step's kernels by kind: its entry and each loop "
                            "body (the layer scan's forward and backward), e.g. transposes and cuDNN attention, and the "
                            "bytes their kernels read and write")
_PRESET = flags.DEFINE_string("preset", "squeezebert-uncased", "fine-tuning: the model's architecture when "
                              "--config.init_from is not set (SqueezeBertConfig.preset names)")
_TEACHER = flags.DEFINE_string("teacher_preset", "", "fine-tuning: a distillation teacher of this architecture "
                               "(or --config.distill.teacher MODEL_DIR)")
_HLO = flags.DEFINE_string("hlo", None, "also write each compiled phase's program (XLA's optimized HLO text) to "
                           "DIR/<phase>.hlo.txt, DIR made if missing: to read what the accelerator would run")
_JSON = flags.DEFINE_string("json", None, "also write the rows as JSON lines to this file")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "replace an existing --json or --hlo file")
flags.mark_flags_as_required(["config", "topology"])
_LOG_PATH = os.path.join(tempfile.gettempdir(), "squeezebert_compile.log")


def _vocab_size(config) -> int | None:
    """The tokenizer's size where the config takes the vocabulary from it (the demo corpus, or a prepared dataset)."""
    if not config.model.vocab_from_tokenizer:
        return None
    if config.data.source == "demo":
        with tempfile.TemporaryDirectory() as d:
            return Tokenizer.from_file(corpus.write_demo_vocab(os.path.join(d, "vocab.txt"))).vocab_size
    tok = Tokenizer.from_dir(config.data.path) if config.data.path else None
    return tok.vocab_size if tok else None


def _hlo_path(phase: str) -> str:
    return os.path.join(_HLO.value, f"{phase}.hlo.txt")


def _compile_phase(config, phase, target, model, bad: list[str]):
    """(report, microbatches) of ``phase``; with --fit, the fewest microbatches (powers of two times the config's)
    that fit. (None or a report that does not fit, k) when it does not fit, with the reason appended to ``bad``."""
    n = len(target.devices)

    def attempt(k):
        try:
            with aot.quiet_native_stderr(_LOG_PATH):  # XLA's own warnings (e.g. the GPU rematerializer's)
                r = aot.compile_or_oom(config, dataclasses.replace(phase, num_microbatches=k), target, model,
                                       bytes_accessed=_BYTES.value, keep_hlo=_CENSUS.value or bool(_HLO.value))
            return r, r.peak_gib, None if r.fits else f"peak {r.peak_gib:.2f} GiB > {r.hbm_gib:.2f} GiB HBM"
        except aot.DoesNotFit as e:
            why = (f"XLA needs {e.required_gib:.2f} GiB" if e.required_gib else "XLA needs more than it has") + \
                f", a {target.chip.name} has {target.chip.hbm_gib:.2f} GiB (XLA: {str(e)[:200]})"
            return None, e.required_gib, why

    k, failed = pretrain_settings.microbatches(config, phase), 0
    while True:
        per_micro = config.global_batch_size // n // k
        r, need, why = attempt(k)
        if why is None:
            break
        if not _FIT.value or per_micro % 2:
            bad.append(f"{phase.name} (seq {phase.seq_len}, global batch {config.global_batch_size}, "
                       f"{per_micro} per chip per microbatch, {k} microbatches): {why}")
            return r, k
        # activations shrink ~ 1/k: jump to the power of two that would fit, at least 2x (each compile is minutes)
        jump = 2 ** max(1, math.ceil(math.log2(need / target.chip.hbm_gib))) if need else 2
        while jump > 2 and per_micro % jump:
            jump //= 2
        failed, k = k, k * jump
    while k // 2 > failed:  # the jump may have overshot: halve while the step still fits
        r2, _, why = attempt(k // 2)
        if why is not None:
            break
        r, k = r2, k // 2
    return r, k


def _target(config, log_path: str):
    """--topology's compile-only devices (``aot.Target``); the program is compiled for every one of them, so a
    config.num_devices other than 0 (all) or their count is refused (a TopologyError: exit 2)."""
    target = aot.get_target(_TOPOLOGY.value, _SLICES.value, log_path=log_path)
    n, asked = len(target.devices), config.get("num_devices", 0)
    try:
        parallel.check_num_devices(asked, count=False)  # an integer >= 0
    except InputError as e:
        raise aot.TopologyError(str(e)) from None
    if asked not in (0, None, n):
        raise aot.TopologyError(f"config.num_devices={asked}: this compiles for every chip of --topology "
                                f"{_TOPOLOGY.value} ({n}); leave config.num_devices at 0, or give a topology of "
                                f"{asked} chips")
    return target


def main(argv) -> int:
    del argv
    config = _CONFIG.value
    log_path = _LOG_PATH
    cli.setup_logging(log_path)
    inputs = _inputs(config)
    if _JSON.value:  # before minutes of compiling
        files.check_output_file(_JSON.value, _OVERWRITE.value, "--json", inputs=inputs)
    if "task" in config:  # a fine-tuning config
        pretraining_only = [f"--{f}" for f, v in (("phase", _PHASE.value), ("fit", _FIT.value),
                                                    ("max-batch", _MAX_BATCH.value), ("bytes", _BYTES.value),
                                                    ("census", _CENSUS.value), ("hlo", _HLO.value)) if v]
        if pretraining_only:
            cli.report(InputError(f"{', '.join(pretraining_only)}: for pretraining configs only (the fine-tuning "
                                  "step has no phases or microbatches, and its report no byte count, census or "
                                  "program)"))
            return 2
        try:
            target = _target(config, log_path)
        except aot.TopologyError as e:
            cli.report(e)
            return 2
        return _compile_finetune(config, target)
    phases = pretrain_settings.get_phases(config)
    if _PHASE.value:
        unknown = sorted(set(_PHASE.value) - {p.name for p in phases})
        if unknown:  # a usage error, before any compile
            cli.report(InputError(f"--phase {', '.join(unknown)}: the config's phases are "
                                  f"{', '.join(p.name for p in phases)}"))
            return 2
        phases = [p for p in phases if p.name in _PHASE.value]
    if _HLO.value:  # before minutes of compiling
        if _JSON.value and files.within(_JSON.value, _HLO.value):
            raise InputError(f"--json {_JSON.value} and --hlo {_HLO.value}: the rows' file would be the programs' "
                             "directory or inside it; give each its own path")
        if os.path.exists(_HLO.value) and not os.path.isdir(_HLO.value):
            raise InputError(f"--hlo {_HLO.value} is not a directory; give a directory for the programs")
        files.check_output_dir(_HLO.value, overwrite=True, what="--hlo", entries=False,
                               writes="the compiled programs")  # under a file, a dead link
        for phase in phases if os.path.isdir(_HLO.value) else ():
            files.check_output_file(_hlo_path(phase.name), _OVERWRITE.value, "--hlo", inputs=inputs)
    try:
        target = _target(config, log_path)
    except aot.TopologyError as e:  # a usage error: exit 2, as for an unknown flag
        cli.report(e)
        return 2
    if _BYTES.value and target.platform != "tpu":  # XLA:GPU reports no bytes accessed: two compiles for nothing
        cli.report(InputError(f"--bytes: XLA reports bytes accessed for TPU targets only, not for {target.topology}; "
                              "--census counts the bytes of a GPU program's kernels"))
        return 2
    pretrain_settings.check_settings(config, data=False)  # the run's own refusals, one line, before any compile
    # the parameters' shapes only (no random weights drawn: 3.5 s for the full-size model on a 2-core host)
    model = abstract_model(lambda: pretrain.new_model(config, _vocab_size(config), target.platform))
    n = len(target.devices)
    print(f"{target.topology} x {target.num_slices} slice(s): {n} x {target.devices[0].device_kind} "
          f"({target.chip.peak_bf16 / 1e12:.0f} TFLOP/s bf16, {target.chip.hbm_gib:.2f} GiB HBM at "
          f"{target.chip.hbm_gbs:.0f} GB/s per chip); model {config.model.preset} "
          f"({sum(x.size for x in jax.tree.leaves(pretrain.split_model(model)[1])) / 1e6:.2f}M params), "
          f"{config.compute_dtype}, scan_layers={model.config.scan_layers}, remat={model.config.remat}, "
          f"fsdp={config.fsdp}; host: {timing.cpu_model()}", flush=True)
    rows, bad = [], []
    for phase in phases:
        r, k = _compile_phase(config, phase, target, model, bad)
        if r is None:
            continue
        rows.append(r)
        note = ""
        if _FIT.value and k != pretrain_settings.microbatches(config, phase):  # --fit changed it
            note = (f" (--fit: fits with num_microbatches={k}: set --config.phases[{phase.index}].num_microbatches={k})")
        print(f"compiled {phase.name} in {r.compile_s:.0f} s{note}", flush=True)
        if _HLO.value:
            os.makedirs(_HLO.value, exist_ok=True)
            files.atomic_write(_hlo_path(phase.name), r.hlo)
        if _CENSUS.value:

            print(f"{phase.name} kernels (the program XLA compiled for {target.topology}):\n{census(r.hlo)}", flush=True)
    if rows:
        print(format_table(aot.REPORT_HEADERS, [aot.report_row(r) for r in rows],
                           title=f"pretraining step on {target.topology} ({n} chips)"))
        hours = [sum(r.num_steps * t(r) for r in rows) / 3600 for t in (lambda r: r.flop_bound_s,
                                                                      lambda r: r.roofline_s)]
        hours += [sum(r.hours_at_mfu(m) for r in rows) for m in (0.5, 0.35)]
        roofline = f"{hours[1]:.1f} h at the roofline with XLA's bytes, " if _BYTES.value else ""
        measured = (f", {sum(r.hours_at_mfu(r.measured_mfu) for r in rows):.1f} h at the MFU measured on one "
                    f"{target.chip.name}" if all(r.measured_mfu for r in rows) else "")
        print(f"whole recipe ({len(rows)} phases compiled) on {n} chips: {hours[0]:.1f} h at the FLOP bound (100% "
              f"MFU), {roofline}{hours[2]:.1f} h at 50% MFU, {hours[3]:.1f} h at 35% MFU{measured}"
              + ("" if _BYTES.value else " (--bytes: XLA's bytes accessed and the roofline)"))
    if _MAX_BATCH.value:
        for phase in phases:
            b, tried = aot.max_per_chip_batch(config, phase, target, model)
            k = aot.fewest_microbatches(config.global_batch_size, n, b)
            need = (f"; global batch {config.global_batch_size} needs >= {k} microbatches" if k else
                    f"; global batch {config.global_batch_size} cannot be split to fit")
            over = [bb for bb, p in tried if bb > b and (p is None or p > target.chip.hbm_gib)]
            most = (" (the most the search tries: 2^24 tokens a chip)" if (b + 8) * phase.seq_len >
                    aot.MAX_TOKENS_PER_CHIP else f" or more: the search stopped at its {len(tried)} compiles below "
                    f"{min(over)}, which does not fit" if over and min(over) - b > 8 else "")
            print(f"{phase.name} (seq {phase.seq_len}): largest per-chip batch that fits ~ {b}{most} (compiled: "
                  + ", ".join(f"{bb} -> {'no' if p is None else f'{p:.2f} GiB'}" for bb, p in tried) + f"){need}",
                  flush=True)
    _write_json(rows, target)
    for line in bad:
        print(f"does not fit: {line}", file=sys.stderr)
    if bad:
        print("try --fit (more microbatches), --config.fsdp=True, --config.model.remat=lean|full, or "
              "--max-batch", file=sys.stderr)
    return 1 if bad else 0


def _inputs(config) -> list[str]:
    """What the command reads, which an output never replaces: the config file and the paths the config names (a
    MODEL_DIR to start from, a teacher, the data)."""
    keys = ("init_from", "distill.teacher", "data_dir", "data.path", "data.train_file", "data.validation_file",
            "data.test_file")
    named = [trainer.config_value(config, k) for k in keys]
    spec = config_flags.get_config_filename(flags.FLAGS["config"])  # FILE:VARIANT
    path = spec if os.path.exists(spec) else spec.rsplit(":", 1)[0]
    return [path, *(v for v in named if isinstance(v, str) and v and "://" not in v
                                                  and not v.startswith(("hf:", "tfds:")))]


def _json_cell(value):
    """A table cell as JSON: a number as a number (``"256"`` -> 256, ``"1.026"`` -> 1.026), ``-`` (nothing to
    say) as null, any other text (``"0.013 / 79.10"``, ``"yes"``) as it reads."""
    if isinstance(value, (int, float)) or value is None:
        return value
    if value == "-":
        return None
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        return number if math.isfinite(number) else value  # "nan" and "inf" are no JSON numbers
    return value


def _write_json(rows, target) -> None:
    if _JSON.value:
        files.atomic_write(_JSON.value, "".join(
            json.dumps(dict(zip(aot.REPORT_HEADERS, map(_json_cell, aot.report_row(r))))
                       | {k: v for k, v in vars(r).items() if k not in ("chip", "hlo")}
                       | {"topology": target.topology, "fits": r.fits, "roofline_s": r.roofline_s}) + "\n"
            for r in rows))


def _compile_finetune(config, target) -> int:
    """The fine-tuning step (and a distillation teacher's logits pass) on ``target``: one table, exit 1 when a
    program does not fit."""
    if config.task not in glue.TRAIN_EXAMPLES:  # its step's sizes and steps come from the task's card
        raise InputError(f"config.task {config.task!r}: compile.py compiles the fine-tuning step of a GLUE task (one "
                         f"of {', '.join(sorted(glue.TRAIN_EXAMPLES))}); a classifier on your own files compiles as "
                         "the GLUE task with as many labels (sst2: 2, mnli: 3) at your max_seq_length and batch_size")
    for flag, setting, value in (("preset", "init_from", config.init_from),
                                 ("teacher_preset", "distill.teacher", config.distill.teacher)):
        if value and flags.FLAGS[flag].present:  # which architecture was meant? (the directory's was taken)
            raise InputError(f"--{flag} {flags.FLAGS[flag].value} beside --config.{setting}={value}: the architecture "
                             f"is {setting}'s (its config.json); give one of them")
    for flag in ("preset", "teacher_preset"):  # the flag named, before a teacher's settings are read
        try:
            flags.FLAGS[flag].value and SqueezeBertConfig.preset(flags.FLAGS[flag].value)
        except InputError as e:
            raise InputError(f"--{flag}: {e}") from None
    checked = config.copy_and_resolve_references()  # a --teacher_preset is a teacher: its settings are read
    checked.distill.teacher = checked.distill.teacher or _TEACHER.value
    finetune_settings.check_settings(checked, len(target.devices))  # the run's own refusals, before any compile
    model_cfg = read_model_config(config.init_from)[0] if config.init_from else SqueezeBertConfig.preset(_PRESET.value)
    teacher_cfg = (read_model_config(config.distill.teacher)[0] if config.distill.teacher else
                   SqueezeBertConfig.preset(_TEACHER.value) if _TEACHER.value else None)
    model = aot.finetune_model(config, model_cfg)
    n_train = glue.TRAIN_EXAMPLES[config.task]
    n_train = min(n_train, config.max_train_examples) if config.max_train_examples else n_train
    steps = -(-n_train // config.batch_size) * config.num_epochs
    n = len(target.devices)
    print(f"{target.topology}: {n} x {target.devices[0].device_kind} ({target.chip.hbm_gib:.2f} GiB HBM per chip); "
          f"fine-tuning {config.task} ({n_train} examples x {config.num_epochs} epochs = {steps} steps of batch "
          f"{config.batch_size}, seq {config.max_seq_length}), model {config.init_from or _PRESET.value}"
          + (f", teacher {config.distill.teacher or _TEACHER.value}" if teacher_cfg else "")
          + f", {config.compute_dtype}, fsdp={config.fsdp}; host: {timing.cpu_model()}", flush=True)
    jobs = [("step", lambda: aot.compile_finetune(config, target, model, teacher_cfg, steps))]
    if teacher_cfg is not None and aot._layer_teacher(config, model_cfg, teacher_cfg)[0] is None:
        jobs.append(("teacher logits", lambda: aot.compile_teacher_logits(config, target, teacher_cfg, n_train)))
    rows, bad = [], []
    for name, job in jobs:
        try:
            with aot.quiet_native_stderr(_LOG_PATH):
                r = aot.oom_as_does_not_fit(job)
        except aot.DoesNotFit as e:
            bad.append(f"{name}: XLA needs {e.required_gib or 'more than'} GiB, a {target.chip.name} has "
                       f"{target.chip.hbm_gib:.2f} GiB")
            continue
        rows.append(r)
        print(f"compiled {r.phase} in {r.compile_s:.0f} s", flush=True)
        if not r.fits:
            bad.append(f"{r.phase}: peak {r.peak_gib:.2f} GiB > {r.hbm_gib:.2f} GiB HBM")
    if rows:
        print(timing.format_table(aot.REPORT_HEADERS, [aot.report_row(r) for r in rows],
                                  title=f"fine-tuning {config.task} on {target.topology} ({n} chips)"))
        print(f"the run ({rows[0].num_steps} steps{', and the teacher logits pass' if len(rows) > 1 else ''}) on "
              f"{n} chips: {sum(r.num_steps * r.flop_bound_s for r in rows) / 60:.1f} min at the FLOP bound (100% "
              f"MFU), {60 * sum(r.hours_at_mfu(0.35) for r in rows):.1f} min at 35% MFU", flush=True)
    _write_json(rows, target)
    for line in bad:
        print(f"does not fit: {line}", file=sys.stderr)
    if bad:
        print("try --config.fsdp=True, a smaller --config.batch_size per chip, or --config.compute_dtype=bfloat16",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    cli.run_absl(main)
