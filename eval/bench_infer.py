"""CPU inference: our jitted Flax forward vs transformers' SqueezeBERT as frozen TorchScript, and ours vs BERT-base.

    python eval/bench_infer.py [--tiny] [--batch 1 8] [--threads N] [--runs 10] [--no-bf16]
                               [--formulation conv-loop] [--sweep [--sweep-only NAME ...]] [--breakdown]
                               [--out FILE [--overwrite]]

float32, seq 128, random-weight sequence classifiers, one process, the same CPUs for both frameworks
(--threads, default all this process may use; set before JAX starts). Prints ours vs TorchScript per batch
(target >= 1.2x), our SqueezeBERT vs our BERT-base (FLOP ratio 3.0; target >= 3x at batch 8), and
bfloat16 vs float32. --formulation adds rows for our forward compiled with one of the alternative
formulations of squeezebert_jax.benchmarks.infer.FORMULATIONS (model.py itself is untouched); --sweep times every
formulation on the whole model, each checked against model.py's outputs. --breakdown profiles both forwards
with XLA's profiler and prints the time of every component, matmuls apart, and what a 3x ratio would need.
--out also writes the tables to FILE (Markdown).
"""

import sys

from squeezebert_jax import cli
from squeezebert_jax.benchmarks import infer, profile_table, timing


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=cli.positive_int, nargs="+", default=[1, 8])
    timing.add_timing_args(p, runs=10, warmup=2, threads=None)
    p.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 columns")
    p.add_argument("--sweep", action="store_true", help="also run the formulation micro-benchmark")
    p.add_argument("--sweep-only", nargs="*", default=None, metavar="NAME", choices=list(infer.FORMULATIONS),
                   help="formulations for --sweep (default all): " + ", ".join(infer.FORMULATIONS))
    p.add_argument("--formulation", default=None, choices=[f for f in infer.FORMULATIONS if f != "model"],
                   help="also time our forward compiled with this formulation in the main tables")
    p.add_argument("--breakdown", action="store_true",
                   help="also profile both forwards (XLA profiler) at the largest batch: milliseconds per component, "
                        "matmuls apart, and the bound they put on the SqueezeBERT/BERT-base ratio")
    timing.add_out_args(p)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    report = timing.Report(args.out, args.overwrite)
    timing.set_threads(args.threads)
    for table in infer.bench_infer(tiny=args.tiny, batches=args.batch, seq_len=args.seq_len, runs=args.runs,
                                   warmup=args.warmup, bf16=not args.no_bf16, formulation=args.formulation):
        report.add(table + "\n")
    if args.breakdown:
        report.add(profile_table.op_breakdown(tiny=args.tiny, batch=max(args.batch), seq_len=args.seq_len,
                                              runs=args.runs) + "\n")
    if args.sweep:
        report.add(infer.formulation_sweep(tiny=args.tiny, batches=args.batch, seq_len=args.seq_len, runs=args.runs,
                                           warmup=1, formulations=args.sweep_only))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
