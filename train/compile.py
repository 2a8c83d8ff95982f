"""Compile the pretraining step for a TPU topology or a GPU target on this (CPU-only) host: memory, FLOPs, roofline.

    python train/compile.py --config train/configs/pretrain.py:paper --topology v5e:2x4
    python train/compile.py --config train/configs/pretrain.py:bert-base --topology v5e:2x4 --max-batch
    python train/compile.py --config train/configs/pretrain.py:paper --topology h100:1x8 --config.num_microbatches=4
    python train/compile.py --config train/configs/pretrain.py:paper --topology v5p:2x2x2 --num_slices 2

The same config files and --config.x=... overrides as train/pretrain.py; for every phase it compiles the exact step
pretrain.py runs (pretrain.build_phase_step) over the topology's compile-only devices and prints one table: per-chip
batch, microbatches, memory (arguments, temporaries, code, peak) against the chip's HBM, fits or not, XLA's FLOPs
per step vs the analytic count, bytes accessed, the roofline lower bound on the step time (max(FLOPs / peak,
bytes / HBM bandwidth)) and the phase's hours at that bound and at 50% / 35% MFU. --max-batch finds the largest
per-chip batch that fits and the fewest microbatches for the config's global batch. Exit 1 when a phase does not
fit. TPU targets need the `tpu` extra (libtpu), GPU targets the `gpu-aot` extra (no CUDA libraries or GPU needed).
Topologies: v4:AxBxC, v5e:AxB, v5p:AxBxC, v6e:AxB (libtpu's names), h100:1xN, a100:1xN.
"""

import json
import logging
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host computes nothing; the targets are compile-only devices

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file:variant", lock_config=False)
_TOPOLOGY = flags.DEFINE_string("topology", None, "CHIP:AxB[xC], e.g. v5e:2x4, v4:2x2x1, h100:1x8")
_SLICES = flags.DEFINE_integer("num_slices", 1, "TPU slices (data parallel over DCN: a hybrid mesh)")
_MAX_BATCH = flags.DEFINE_bool("max-batch", False, "search the largest per-chip batch that fits (each phase)")
_JSON = flags.DEFINE_string("json", None, "also write the rows as JSON lines to this file")
flags.mark_flags_as_required(["config", "topology"])


def _vocab_size(config) -> int | None:
    """The tokenizer's size where the config takes the vocabulary from it (the demo corpus, or a prepared dataset)."""
    from squeezebert_jax import corpus
    from squeezebert_jax.tokenizer import Tokenizer

    if not config.model.vocab_from_tokenizer:
        return None
    if config.data.source == "demo":
        with tempfile.TemporaryDirectory() as d:
            return Tokenizer.from_file(corpus.write_demo_vocab(os.path.join(d, "vocab.txt"))).vocab_size
    tok = Tokenizer.from_dir(config.data.path) if config.data.path else None
    return tok.vocab_size if tok else None


def main(argv) -> int:
    del argv
    import jax

    from squeezebert_jax import aot, pretrain, trainer
    from squeezebert_jax.bench import format_table

    config = _CONFIG.value
    log_path = os.path.join(tempfile.gettempdir(), "squeezebert_compile.log")
    logging.basicConfig(filename=log_path, level=logging.INFO)
    try:
        target = aot.get_target(_TOPOLOGY.value, _SLICES.value, log_path=log_path)
    except aot.TopologyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = aot.build_model(config, _vocab_size(config))
    n = len(target.devices)
    print(f"{target.topology} x {target.num_slices} slice(s): {n} x {target.devices[0].device_kind} "
          f"({target.chip.peak_bf16 / 1e12:.0f} TFLOP/s bf16, {target.chip.hbm_gib:.2f} GiB HBM at "
          f"{target.chip.hbm_gbs:.0f} GB/s per chip); model {config.model.preset} "
          f"({sum(x.size for x in jax.tree.leaves(pretrain.split_model(model)[1])) / 1e6:.2f}M params), "
          f"{config.compute_dtype}, scan_layers={model.config.scan_layers}, remat={model.config.remat}, "
          f"fsdp={config.fsdp}; host: {trainer.cpu_model()}", flush=True)
    rows, bad = [], []
    for phase in pretrain._phases(config):
        try:
            r = aot.compile_or_oom(config, phase, target, model)
        except aot.DoesNotFit as e:
            need = f"{e.required_gib:.2f} GiB" if e.required_gib else "more than it has"
            bad.append(f"{phase['name']} (seq {phase['seq_len']}, global batch {config.global_batch_size}, "
                       f"{config.global_batch_size // n // config.num_microbatches} per chip per microbatch): "
                       f"XLA needs {need} of temporaries, a {target.chip.name} has {target.chip.hbm_gib:.2f} GiB")
            continue
        rows.append(r)
        if not r.fits:
            bad.append(f"{phase['name']}: peak {r.peak_gib:.2f} GiB > {r.hbm_gib:.2f} GiB HBM")
        print(f"compiled {phase['name']} in {r.compile_s:.0f} s", flush=True)
    if rows:
        print(format_table(aot.REPORT_HEADERS, [aot.report_row(r) for r in rows],
                           title=f"pretraining step on {target.topology} ({n} chips)"))
        total = [sum(r.num_steps * r.roofline_s for r in rows) / 3600] + [sum(r.hours_at_mfu(m) for r in rows)
                                                                          for m in (0.5, 0.35)]
        print(f"whole recipe ({len(rows)} phases compiled): {total[0]:.1f} h at the roofline bound, {total[1]:.1f} h "
              f"at 50% MFU, {total[2]:.1f} h at 35% MFU on {n} chips")
    if _MAX_BATCH.value:
        for phase in pretrain._phases(config):
            b, tried = aot.max_per_chip_batch(config, phase, target, model)
            k = aot.fewest_microbatches(config.global_batch_size, n, b)
            print(f"{phase['name']} (seq {phase['seq_len']}): largest per-chip batch that fits ~ {b} (compiled: "
                  + ", ".join(f"{bb} -> {'no' if p is None else f'{p:.2f} GiB'}" for bb, p in tried)
                  + f"); global batch {config.global_batch_size} needs >= {k} microbatches" if k else ")")
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            for r in rows:
                raw = {k: v for k, v in vars(r).items() if k != "chip"}
                f.write(json.dumps(dict(zip(aot.REPORT_HEADERS, map(str, aot.report_row(r)))) | raw
                                   | {"topology": target.topology, "fits": r.fits, "roofline_s": r.roofline_s}) + "\n")
    for line in bad:
        print(f"does not fit: {line}", file=sys.stderr)
    if bad:
        print("try --config.num_microbatches=K, --config.fsdp=True, --config.model.remat=minimal|full, or "
              "--max-batch", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
