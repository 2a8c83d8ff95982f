"""The paper's Table 1 on this machine: where BERT-base and SqueezeBERT spend FLOPs and time.

    python eval/profile.py [--models bert-base-uncased squeezebert-uncased] [--runs 20] [--warmup 3]
                           [--seq-len 128] [--batch 1] [--threads 1] [--tiny]

FLOPs shares come from squeezebert_jax.flops_breakdown, grouped as the paper's Table 1 counts them: its
"FC in self-attention" is Q/K/V only and the post-attention FC goes with the FFN (that grouping reproduces
the paper's BERT-base FLOPs shares 24.3 / 2.70 / 73.0 exactly). Latency shares are measured two ways:
(a) Flax: one XLA profile (jax.profiler) of the whole jitted forward -- no cuts, XLA fuses as in real use --
with every op attributed to the model's named scope for its component (squeezebert_jax.bench.op_profile); a
fusion that crosses two components counts where its root op is. The whole forward's wall time is printed
beside the sum of its ops.
(b) PyTorch: forward hooks timing the modules of the eager transformers model holding the same weights.
The paper's BERT-base percentages (Pixel 3) are printed beside ours.
"""

import argparse
import os
import sys

# The repo root replaces this script's folder on sys.path: eval/profile.py would otherwise shadow the stdlib
# `profile` module that cProfile (imported by torch._dynamo, via transformers) needs.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _HERE:
    sys.path.pop(0)
sys.path.insert(0, os.path.dirname(_HERE))

from squeezebert_jax import bench  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["bert-base-uncased", "squeezebert-uncased"])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tiny", action="store_true", help="tiny configs with the same group counts (seconds)")
    args = p.parse_args(argv)
    bench.set_threads(args.threads)
    for name in args.models:
        print(bench.profile_table(name, tiny=args.tiny, batch=args.batch, seq_len=args.seq_len, runs=args.runs,
                                  warmup=args.warmup))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
