"""The paper's latency comparison (Table 2) on this machine: SqueezeBERT vs BERT-base, random weights.

    python eval/latency.py [--models squeezebert-uncased bert-base-uncased bert-L4-H256 ...] [--runs 20]
                           [--warmup 3] [--seq-len 128] [--batch 1] [--threads 1] [--tiny]

Each model (a sequence classifier with random weights; nothing downloads) is exported to a TorchScript
lite-interpreter file exactly as convert/to_torchscript.py does (checked against Flax), then timed through
torch.jit.mobile._load_for_lite_interpreter and through our jitted Flax forward, in one process, batch 1,
seq 128, median of --runs after --warmup, beside the paper's Pixel 3 numbers (BERT-base 1690 ms,
SqueezeBERT 390 ms, 4.3x). One thread: the process is pinned to one CPU (os.sched_setaffinity) before JAX
starts its backend, which sizes XLA:CPU's thread pool to 1, and torch.set_num_threads(1) (see
squeezebert_jax/bench.py). --tiny uses tiny configs with each preset's group counts (CI, seconds).
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

from squeezebert_jax import bench, mobile  # noqa: E402  (imports jax; its backend starts at first use)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["squeezebert-uncased", "bert-base-uncased"],
                   help="presets: squeezebert-uncased, bert-base-uncased, bert-L{2..12}-H{128..768}, bert-tiny ...")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="CPUs for both frameworks (the paper: 1 phone CPU)")
    p.add_argument("--tiny", action="store_true", help="tiny configs with the same group counts (seconds)")
    args = p.parse_args(argv)
    bench.set_threads(args.threads)
    table, notes = mobile.latency_table(args.models, runs=args.runs, warmup=args.warmup, batch=args.batch,
                                       seq_len=args.seq_len, tiny=args.tiny)
    print(table)
    for n in notes:
        print(f"note: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
