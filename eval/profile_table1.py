"""The paper's Table 1 on this machine: where BERT-base and SqueezeBERT spend FLOPs and time.

    python eval/profile_table1.py [--models bert-base-uncased squeezebert-uncased MODEL_DIR ...] [--runs 20]
                                  [--warmup 3] [--seq-len 128] [--batch 1] [--threads 1] [--tiny]
                                  [--out FILE [--overwrite]]

FLOPs shares come from squeezebert_jax.flops_breakdown, grouped as the paper's Table 1 counts them: its
"FC in self-attention" is Q/K/V only and the post-attention FC goes with the FFN (that grouping reproduces
the paper's BERT-base FLOPs shares 24.3 / 2.70 / 73.0 exactly). Latency shares are measured two ways:
(a) Flax: one XLA profile (jax.profiler) of the whole jitted forward -- no cuts, XLA fuses as in real use --
with every op attributed to the model's named scope for its component
(squeezebert_jax.benchmarks.profile_table.op_profile); a fusion that crosses two components counts where its
root op is. The whole forward's wall time is printed beside the sum of its ops.
(b) PyTorch: forward hooks timing the modules of the eager transformers model holding the same weights.
The paper's BERT-base percentages (Pixel 3) are printed beside ours. A MODEL_DIR is profiled with its own
weights and head. --out also writes the tables to FILE (Markdown).
"""

import sys

from squeezebert_jax import cli
from squeezebert_jax.benchmarks import profile_table, timing


def main(argv=None) -> int:
    args, report = timing.per_model_cli(__doc__, ["bert-base-uncased", "squeezebert-uncased"],
                                        "presets or MODEL_DIRs", argv)
    for name in args.models:
        report.add(profile_table.profile_table(name, tiny=args.tiny, batch=args.batch, seq_len=args.seq_len,
                                               runs=args.runs, warmup=args.warmup) + "\n")
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
