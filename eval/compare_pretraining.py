"""The compared networks pretrained the same way: small SqueezeBERT, BERT, ALBERT, MobileBERT (MLM + SOP) and
ELECTRA (replaced-token detection) encoders of one width pretrained on the demo corpus for the same steps, batch and
length, each then fine-tuned on one story task with the same recipe; a table of parameters, the end of pretraining,
dev accuracy and wall time, with the CPU model (squeezebert_jax.benchmarks.pretraining_compare). At this scale the
numbers are not the paper's: the command shows the machinery runs the comparison end to end.

    python eval/compare_pretraining.py                         # 600 steps of 32 x 64 each, QNLI-style story task
    python eval/compare_pretraining.py --steps 50 --epochs 1 --workdir /tmp/cmp_quick
"""

import datetime
import os
import sys

from squeezebert_jax import cli
from squeezebert_jax.benchmarks import pretraining_compare
from squeezebert_jax.benchmarks.timing import cpu_model
from squeezebert_jax.files import atomic_write, check_output_dir, check_output_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--workdir", default="/tmp/sqb_compare_pretraining", help="the runs (a new or empty directory)")
    p.add_argument("--overwrite", action="store_true", help="reuse a non-empty --workdir, replace --out")
    p.add_argument("--steps", type=cli.positive_int, default=600, help="pretraining steps of each network")
    p.add_argument("--batch", type=cli.positive_int, default=32)
    p.add_argument("--seq_len", type=cli.positive_int, default=64)
    p.add_argument("--task", default="qnli", help="the story GLUE task fine-tuned on")
    p.add_argument("--epochs", type=cli.positive_int, default=3)
    p.add_argument("--train_rows", type=cli.positive_int, default=2000)
    p.add_argument("--families", nargs="+", default=list(pretraining_compare.FAMILIES),
                   choices=list(pretraining_compare.FAMILIES))
    p.add_argument("--out", default=None, help="also write the table here (Markdown)")
    args = p.parse_args(argv)
    check_output_dir(args.workdir, overwrite=args.overwrite, what="--workdir")
    if args.out:
        check_output_file(args.out, overwrite=args.overwrite)
    cli.setup_logging(os.path.join(args.workdir, "log.txt"))
    pretrain_base = cli.config_module(os.path.join(ROOT, "train", "configs", "pretrain.py")).get_config("demo")
    glue_configs = cli.config_module(os.path.join(ROOT, "train", "configs", "glue.py"))
    rows = pretraining_compare.run(pretrain_base, glue_configs.get_config, args.workdir, args.steps, args.batch,
                                   args.seq_len, args.task, args.epochs, train_rows=args.train_rows,
                                   families=tuple(args.families))
    text = (f"Pretrained the same way: {args.steps} steps of {args.batch} x {args.seq_len} on the demo corpus, then "
            f"{args.epochs} epochs of story {args.task} ({args.train_rows} rows); host: {cpu_model()}; "
            f"{datetime.date.today().isoformat()}\n\n{pretraining_compare.table(rows)}\n")
    print(text)
    if args.out:
        atomic_write(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
