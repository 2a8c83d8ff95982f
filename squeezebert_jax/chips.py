"""Accelerator chips' public figures (dense bf16 peak, HBM capacity and bandwidth): MFU's peak (``reporting``) and
the memory a compiled program must fit in (``aot``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Chip:
    """An accelerator chip's public figures: dense bf16 peak, HBM capacity and bandwidth."""

    name: str
    peak_bf16: float  # FLOP/s, dense (no sparsity)
    hbm_gib: float
    hbm_gbs: float  # GB/s (1e9 bytes)


# Public spec sheets (per chip; a TPU v4/v5p chip is two TensorCores run as one device, megacore):
#   TPU v4: 275 TFLOP/s bf16, 32 GiB HBM2, 1200 GB/s           cloud.google.com/tpu/docs/v4
#   TPU v5e: 197 TFLOP/s bf16, 16 GiB HBM2, 819 GB/s           cloud.google.com/tpu/docs/v5e
#   TPU v5p: 459 TFLOP/s bf16, 95 GiB HBM2e, 2765 GB/s         cloud.google.com/tpu/docs/v5p
#   TPU v6e (Trillium): 918 TFLOP/s bf16, 32 GiB, 1640 GB/s    cloud.google.com/tpu/docs/v6e
#   H100 SXM5: 989 TFLOP/s bf16 dense, 80 GB HBM3, 3350 GB/s   nvidia.com/en-us/data-center/h100 (datasheet)
#   H200 SXM: 989 TFLOP/s bf16 dense, 141 GB HBM3e, 4800 GB/s  nvidia.com/en-us/data-center/h200
#   A100 SXM4 80GB: 312 TFLOP/s bf16 dense, 80 GB HBM2e, 2039 GB/s  nvidia.com/en-us/data-center/a100
#   L4: 121 TFLOP/s bf16 dense, 24 GB GDDR6, 300 GB/s          nvidia.com/en-us/data-center/l4
# (GPU capacities are the usable bytes a device reports, e.g. 79.1 GiB on an H100 80GB.)
CHIPS = {
    "v4": Chip("TPU v4", 275e12, 32.0, 1200.0),
    "v5e": Chip("TPU v5 lite", 197e12, 15.75, 819.0),
    "v5p": Chip("TPU v5p", 459e12, 95.74, 2765.0),
    "v6e": Chip("TPU v6 lite", 918e12, 31.25, 1640.0),
    "h100": Chip("H100", 989e12, 79.1, 3350.0),
    "h200": Chip("H200", 989e12, 139.8, 4800.0),
    "a100": Chip("A100", 312e12, 79.1, 2039.0),
    "l4": Chip("L4", 121e12, 22.0, 300.0),
}


# MFU measured for the pretraining step as the configs run it by default (LAMB, MLM + SOP, bf16, remat "minimal",
# fused attention, layers unrolled; batch 256 per device), ``python eval/bench_train.py --peer`` on one device:
# (CHIPS key, model preset, seq_len) -> MFU (docs/results.md). train/compile.py projects a recipe's hours at it
# where it is known, beside the assumed 50% and 35%. H200 at seq 128: 2026-11-27, with the padding as key counts and
# 16-bit dropout draws; at seq 512: without them (1.07x slower at 128); H100: 2026-11-26, also with the MLM loss's
# vocabulary-wide scatter (2.6% slower on the H200).
MEASURED_MFU = {
    ("h200", "squeezebert-uncased", 128): 0.157, ("h200", "squeezebert-uncased", 512): 0.177,
    ("h200", "bert-base-uncased", 128): 0.308, ("h200", "bert-base-uncased", 512): 0.325,
    ("h100", "squeezebert-uncased", 128): 0.127, ("h100", "bert-base-uncased", 128): 0.273,
}


# Peak dense bf16 FLOP/s by ``device_kind`` substring, for MFU (the CHIPS table; "TPU v5e" as some runtimes name it).
PEAK_FLOPS = {c.name: c.peak_bf16 for c in CHIPS.values()} | {"TPU v5e": CHIPS["v5e"].peak_bf16}
