"""The comparison table: parameters, FLOPs at seq 128 and our CPU latency of BERT-base, PKD-6/PKD-3-style
students, the 24 BERT miniatures, SqueezeBERT and a 50%-pruned BERT-base, beside the published figures
(MobileBERT's Table 3; the BERT miniatures of Turc et al.; the SqueezeBERT paper's Table 3), each with its source.

    python eval/compare.py [--no-latency] [--runtime lite|flax] [--only TEXT ...] [--runs 10] [--warmup 2]
                           [--seq-len 128] [--threads 1] [--tiny] [--out FILE [--overwrite]]

Parameters are counted from the built Flax model, FLOPs by squeezebert_jax.flops (the paper's count); latency is
that of a random-weight classifier at batch 1, every model timed interleaved with BERT-base (speedups against the
BERT-base timings of the same run), on the CPU printed beside it: --runtime lite (the default) exports each row to a
.ptl (checked against Flax) and times PyTorch's lite interpreter, the paper's runtime; --runtime flax times our jitted
Flax forward. --no-latency skips the timing (seconds instead of minutes); --tiny builds tiny configs (tests: the
plumbing, not the numbers). --out also writes the table to FILE.
"""

import sys

from squeezebert_jax import cli
from squeezebert_jax.benchmarks import compare, timing


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--no-latency", action="store_true", help="parameters and FLOPs only")
    p.add_argument("--runtime", choices=sorted(compare.RUNTIMES), default="lite",
                   help="what is timed: the exported .ptl in PyTorch's lite interpreter (default), or our jitted "
                        "Flax forward")
    p.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                   help="only the rows whose name contains one of these (case-insensitive); BERT-base is always in")
    timing.add_timing_args(p, runs=10, warmup=2, threads=1)
    timing.add_out_args(p)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    entries = compare.select(args.only)
    report = timing.Report(args.out, args.overwrite)
    if not args.no_latency:
        timing.set_threads(args.threads)
    table = compare.compare_table(entries, tiny=args.tiny, seq_len=args.seq_len,
                                  latency=not args.no_latency, runs=args.runs, warmup=args.warmup,
                                  runtime=args.runtime)
    report.add(table + "\n")
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
