"""CPU inference: our jitted Flax forward vs transformers' SqueezeBERT as frozen TorchScript, and ours vs BERT-base.

    python eval/bench_infer.py [--tiny] [--batch 1 8] [--threads N] [--runs 10] [--no-bf16]
                               [--formulation conv-bmm+core-bhsd] [--sweep [--sweep-only NAME ...]] [--breakdown]

float32, seq 128, random-weight sequence classifiers, one process, the same CPUs for both frameworks
(--threads, default all this process may use; set before JAX starts). Prints ours vs TorchScript per batch
(target >= 1.2x), our SqueezeBERT vs our BERT-base (FLOP ratio 3.0; target >= 3x at batch 8), and
bfloat16 vs float32. --formulation adds rows for our forward compiled with one of the alternative
formulations of squeezebert_jax.bench.FORMULATIONS (model.py itself is untouched); --sweep times every
formulation on the whole model, each checked against model.py's outputs. --breakdown profiles both forwards
with XLA's profiler and prints the time of every component, matmuls apart, and what a 3x ratio would need.
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
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=None, help="default: every CPU this process may use")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 columns")
    p.add_argument("--sweep", action="store_true", help="also run the formulation micro-benchmark")
    p.add_argument("--sweep-only", nargs="*", default=None, metavar="NAME",
                   help="formulations for --sweep (default all): " + ", ".join(bench.FORMULATIONS))
    p.add_argument("--formulation", default=None, choices=sorted(bench.FORMULATIONS),
                   help="also time our forward compiled with this formulation in the main tables")
    p.add_argument("--breakdown", action="store_true",
                   help="also profile both forwards (XLA profiler) at the largest batch: milliseconds per component, "
                        "matmuls apart, and the bound they put on the SqueezeBERT/BERT-base ratio")
    p.add_argument("--tiny", action="store_true", help="tiny configs with the same group counts (seconds)")
    args = p.parse_args(argv)
    bench.set_threads(args.threads)
    for table in bench.bench_infer(tiny=args.tiny, batches=args.batch, seq_len=args.seq_len, runs=args.runs,
                                   warmup=args.warmup, bf16=not args.no_bf16, formulation=args.formulation):
        print(table)
        print()
    if args.breakdown:
        print(bench.op_breakdown(tiny=args.tiny, batch=max(args.batch), seq_len=args.seq_len, runs=args.runs))
        print()
    if args.sweep:
        print(bench.formulation_sweep(tiny=args.tiny, batches=args.batch, seq_len=args.seq_len, runs=args.runs,
                                      warmup=1, formulations=args.sweep_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
