"""Fine-tune on all GLUE tasks and print the paper's Table 2 form, with or without bells and whistles.

    # plain fine-tuning of a pretrained MODEL_DIR on every task (the paper's Table 2 "-" rows)
    python train/glue_recipe.py --init_from MODEL_DIR --data_dir GLUE_DIR --workdir runs/plain
    # bells and whistles "DS" (paper §4.2.2): distillation from teacher MODEL_DIRs in TEACHERS/<task>,
    # and MNLI -> task transfer (every task but CoLA starts from the MNLI-finetuned student)
    python train/glue_recipe.py --init_from MODEL_DIR --data_dir GLUE_DIR --workdir runs/ds \
        --transfer --teacher_root TEACHERS --teacher_weight 0.5 --predict
"""

import argparse
import importlib.util
import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from squeezebert_jax.finetune import run_recipe  # noqa: E402


def load_get_config():
    spec = importlib.util.spec_from_file_location("glue_config", os.path.join(ROOT, "train", "configs", "glue.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init_from", required=True)
    p.add_argument("--data_dir", default="", help="GLUE_DIR; default: TFDS")
    p.add_argument("--workdir", required=True)
    p.add_argument("--tasks", nargs="*", default=None)
    p.add_argument("--transfer", action="store_true", help="MNLI -> task transfer (not CoLA)")
    p.add_argument("--teacher_root", default="", help="directory of teacher MODEL_DIRs, one per task")
    p.add_argument("--teacher_weight", type=float, default=0.5)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--max_train_examples", type=int, default=0)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--predict", action="store_true", help="write GLUE-server test files (AX from MNLI)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    get_config = load_get_config()

    def make_config(task):
        c = get_config(task)
        c.data_dir, c.max_train_examples, c.max_seq_length = args.data_dir, args.max_train_examples, args.max_seq_length
        c.distill.teacher_weight = args.teacher_weight
        if args.epochs:
            c.num_epochs = args.epochs
        return c

    print(run_recipe(make_config, args.init_from, args.workdir, args.tasks, args.transfer, args.teacher_root,
                     args.predict))


if __name__ == "__main__":
    main()
