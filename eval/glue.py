"""GLUE evaluation: dev metrics, GLUE-server test files, and the paper's Table 2 over all tasks.

    python eval/glue.py --model MODEL_DIR --task rte --data_dir GLUE_DIR
    python eval/glue.py --model MODEL_DIR --task rte --data_dir GLUE_DIR --predict test --out submission/
    # all tasks: --model is a runs directory holding <task>/model (as train/glue_recipe.py writes)
    python eval/glue.py --model RUNS_DIR --task all --data_dir GLUE_DIR [--predict test --out submission/]
Without --data_dir the TFDS glue/<task> datasets are read. MODEL_DIR must hold a fine-tuned sequence classifier
(train/finetune.py writes one; convert/from_pytorch.py --head SqueezeBertForSequenceClassification converts one).
"""

import json
import os
import sys

from squeezebert_jax import cli, files, glue
from squeezebert_jax.errors import InputError
from squeezebert_jax.finetune import TaskMismatchError, evaluate, predict_test



def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="MODEL_DIR (one task) or RUNS_DIR with <task>/model (all)")
    p.add_argument("--task", required=True, help="a TFDS task name, or 'all'")
    p.add_argument("--data_dir", default=None, help="GLUE_DIR (glue_data/); default: TFDS")
    p.add_argument("--predict", choices=["test"], default=None, help="also write GLUE-server test files")
    p.add_argument("--out", default="glue_predictions", help="where --predict writes")
    p.add_argument("--overwrite", action="store_true", help="replace the prediction files already in --out")
    p.add_argument("--max_length", type=cli.positive_int, default=128)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    if args.task != "all":
        try:
            args.task = glue.get_task(args.task).name  # also takes GLUE directory names (SST-2)
        except glue.UnknownTaskError as e:
            raise glue.UnknownTaskError(f"--task: {e.args[0]}; or 'all'") from None
    tasks = glue.RECIPE_ORDER if args.task == "all" else (args.task,)
    if args.predict:  # before any work: a submission already written is never replaced without --overwrite
        files.check_output_dir(args.out, overwrite=args.overwrite)
    per_task = {}
    for task in tasks:
        model_dir = args.model
        if args.task == "all" and os.path.isdir(os.path.join(args.model, task, "model")):
            model_dir = os.path.join(args.model, task, "model")
        elif args.task == "all" and not os.path.exists(os.path.join(args.model, "config.json")):
            print(f"{task}: no {os.path.join(args.model, task, 'model')}, skipped")
            continue
        try:
            per_task[task] = evaluate(model_dir, task, args.data_dir, max_length=args.max_length)
        except TaskMismatchError as e:
            if args.task != "all":
                raise
            print(f"{task}: skipped: {e}")  # one MODEL_DIR for all tasks: it fits only those with its label count
            continue
        print(task, json.dumps(per_task[task]))
        if args.predict:
            for path in predict_test(model_dir, task, args.data_dir, args.out, args.max_length):
                print("wrote", path)
            if task == "mnli":  # AX is predicted by the MNLI model
                for path in predict_test(model_dir, "ax", args.data_dir, args.out, args.max_length):
                    print("wrote", path)
    if not per_task:
        raise InputError(f"--model {args.model}: no task was evaluated (no <task>/model directory fits, and it is no "
                         f"MODEL_DIR itself); a table of no results is not printed")
    print(glue.table(glue.table_results(per_task), name=os.path.basename(os.path.normpath(args.model))))


if __name__ == "__main__":
    sys.exit(cli.run(main))
