"""GLUE evaluation: dev metrics, GLUE-server test files, and the paper's Table 2 over all tasks.

    python eval/glue.py --model MODEL_DIR --task rte --data_dir GLUE_DIR
    python eval/glue.py --model MODEL_DIR --task rte --data_dir GLUE_DIR --predict test --out submission/
    # all tasks: --model is a runs directory holding <task>/model (as train/glue_recipe.py writes)
    python eval/glue.py --model RUNS_DIR --task all --data_dir GLUE_DIR [--predict test --out submission/]
Without --data_dir the TFDS glue/<task> datasets are read. MODEL_DIR must hold a fine-tuned sequence classifier
(train/finetune.py writes one; convert/from_pytorch.py --head SqueezeBertForSequenceClassification converts one).
"""

import contextlib
import json
import os
import sys

from squeezebert_jax import cli, files, glue
from squeezebert_jax.errors import InputError
from squeezebert_jax.evaluation import TaskMismatchError, evaluate, predict_test
from squeezebert_jax.pretrained import read_model_config


def _submission_files(plan: list[tuple[str, str]]) -> list[str]:
    """The GLUE-server files the planned tasks write: only these are refused in --out (without --overwrite). A single
    MODEL_DIR for every task writes no file for a task whose label count its classifier does not have."""
    names = []
    for task, model_dir in plan:
        try:
            n = read_model_config(model_dir)[1].get("num_labels")
        except (OSError, ValueError):
            n = None  # evaluate names the problem
        if isinstance(n, int) and n != glue.get_task(task).num_labels:
            continue
        names += glue.submission_files(task) + (glue.submission_files("ax") if task == "mnli" else [])
    return names


def _inputs(plan: list[tuple[str, str]], data_dir: str | None) -> list[str]:
    """What the planned tasks read: each MODEL_DIR and each of the tasks' GLUE_DIR files, every split (an output is
    never one of them, nor inside a MODEL_DIR: not through a link either)."""
    paths = [model_dir for _, model_dir in plan]
    for task in [t for t, _ in plan] + (["ax"] if any(t == "mnli" for t, _ in plan) else []):
        for split in glue.get_task(task).layouts if data_dir else ():
            try:
                paths.append(glue.glue_tsv_path(task, data_dir, split))
            except FileNotFoundError:
                pass  # named when it is read
    return paths + ([data_dir] if data_dir else [])  # nor anything else among GLUE's files (the files named first)


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="MODEL_DIR (one task) or RUNS_DIR with <task>/model (all)")
    p.add_argument("--task", required=True, help="a TFDS task name, or 'all'")
    p.add_argument("--data_dir", default=None, help="GLUE_DIR (glue_data/); default: TFDS")
    p.add_argument("--predict", choices=["test"], default=None, help="also write GLUE-server test files")
    p.add_argument("--out", default=None, help="where --predict writes (default: glue_predictions)")
    p.add_argument("--overwrite", action="store_true", help="replace the prediction files already in --out")
    p.add_argument("--max_length", type=cli.positive_int, default=None,
                   help="tokens per input, at most the model's max_position_embeddings (default: 128, or those)")
    args = p.parse_args(argv)
    cli.setup_logging(None)
    for flag, given in (("--out", args.out is not None), ("--overwrite", args.overwrite)):
        if given and not args.predict:  # they say where the test predictions go: without --predict, none are made
            raise InputError(f"{flag} is for the files --predict test writes; give --predict test, or leave it out")
    args.out = args.out or "glue_predictions"
    if args.task != "all":
        try:
            args.task = glue.get_task(args.task).name  # also takes GLUE directory names (SST-2)
        except glue.UnknownTaskError as e:
            raise glue.UnknownTaskError(f"--task: {e.args[0]}; or 'all'") from None
    tasks = glue.RECIPE_ORDER if args.task == "all" else (args.task,)
    plan = []  # (task, MODEL_DIR) for each task evaluated
    for task in tasks:
        model_dir = args.model
        if args.task == "all" and os.path.isdir(os.path.join(args.model, task, "model")):
            model_dir = os.path.join(args.model, task, "model")
        elif args.task == "all" and not os.path.exists(os.path.join(args.model, "config.json")):
            print(f"{task}: no {os.path.join(args.model, task, 'model')}, skipped")
            continue
        plan.append((task, model_dir))
    with contextlib.ExitStack() as stack:
        if args.predict:  # before any work: the files this command writes, each claimed (another task's are no bother)
            stack.enter_context(files.claim_output_files(args.out, _submission_files(plan), args.overwrite,
                                                         inputs=_inputs(plan, args.data_dir)))
            for task, _ in plan:  # the test files read before the evaluations: a bad row named now, not after them
                for t in (task, "ax") if task == "mnli" else (task,):
                    for split in glue.get_task(t).test_splits:
                        glue.load_examples(t, split, data_dir=args.data_dir)
        per_task = {}
        for task, model_dir in plan:
            try:
                per_task[task] = evaluate(model_dir, task, args.data_dir, max_length=args.max_length)
            except TaskMismatchError as e:
                if args.task != "all":
                    raise
                print(f"{task}: skipped: {e}")  # one MODEL_DIR for all tasks: it fits only those with its label count
                continue
            print(task, json.dumps(per_task[task]))
            if args.predict:
                for t in (task, "ax") if task == "mnli" else (task,):  # AX is predicted by the MNLI model
                    for path in predict_test(model_dir, t, args.data_dir, args.out, args.max_length):
                        print("wrote", path)
    if not per_task:
        raise InputError(f"--model {args.model}: no task was evaluated (no <task>/model directory fits, and it is no "
                         f"MODEL_DIR itself); a table of no results is not printed")
    print(glue.table(glue.table_results(per_task), name=os.path.basename(os.path.normpath(args.model))))


if __name__ == "__main__":
    sys.exit(cli.run(main))
