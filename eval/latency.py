"""The paper's latency comparison (Table 2) on this machine: SqueezeBERT vs BERT-base, random weights.

    python eval/latency.py [--models squeezebert-uncased bert-base-uncased bert-L4-H256 MODEL_DIR ...] [--runs 20]
                           [--warmup 3] [--seq-len 128] [--batch 1] [--threads 1] [--tiny] [--out FILE [--overwrite]]

Each model (a preset's sequence classifier with random weights, nothing downloads; or the model a MODEL_DIR holds)
is exported to a TorchScript lite-interpreter file exactly as convert/to_torchscript.py does (checked against Flax),
then timed through torch.jit.mobile._load_for_lite_interpreter and through our jitted Flax forward, in one process,
batch 1, seq 128, median of --runs after --warmup, beside the paper's Pixel 3 numbers (BERT-base 1690 ms,
SqueezeBERT 390 ms, 4.3x). One thread: the process is pinned to one CPU (os.sched_setaffinity) before JAX
starts its backend, which sizes XLA:CPU's thread pool to 1, and torch.set_num_threads(1) (see
squeezebert_jax/benchmarks/timing.py). --tiny uses tiny configs with each preset's group counts (CI, seconds).
--out also writes the table and notes to FILE (Markdown).
"""

import sys

from squeezebert_jax import cli
from squeezebert_jax.benchmarks import latency, timing


def main(argv=None) -> int:
    args, report = timing.per_model_cli(
        __doc__, ["squeezebert-uncased", "bert-base-uncased"],
        "presets (squeezebert-uncased, bert-base-uncased, bert-L{2..12}-H{128..768}, bert-tiny ...) or MODEL_DIRs", argv)
    table, notes = latency.latency_table(args.models, runs=args.runs, warmup=args.warmup, batch=args.batch,
                                         seq_len=args.seq_len, tiny=args.tiny)
    report.add(table)
    report.add("\n".join(f"note: {n}" for n in notes))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
