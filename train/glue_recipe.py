"""Fine-tune on all GLUE tasks and print the paper's Table 2 form, with or without bells and whistles.

    # plain fine-tuning of a pretrained MODEL_DIR on every task (the paper's Table 2 "-" rows)
    python train/glue_recipe.py --init_from MODEL_DIR --data_dir GLUE_DIR --workdir runs/plain
    # bells and whistles "DS" (paper §4.2.2): distillation from teacher MODEL_DIRs in TEACHERS/<task>,
    # and MNLI -> task transfer (every task but CoLA starts from the MNLI-finetuned student)
    python train/glue_recipe.py --init_from MODEL_DIR --data_dir GLUE_DIR --workdir runs/ds \
        --transfer --teacher_root TEACHERS --teacher_weight 0.5 --predict
    # a sweep per task (the paper's appendix: lr and dropout), the best dev setting chosen, runs in WORKDIR/sweep.jsonl
    # (the recipe above is a sweep of one point: a rerun skips the finished tasks and resumes an interrupted one)
    python train/glue_recipe.py --init_from MODEL_DIR --data_dir GLUE_DIR --workdir runs/sweep \
        --sweep "lr=1e-5,2e-5,3e-5,4e-5,5e-5;dropout=0.0,0.1;batch=16,32"
    # Turc et al.'s grid (BERT miniatures): batch 8/16/32/64/128 x lr 3e-4/1e-4/5e-5/3e-5, 4 epochs
    python train/glue_recipe.py --init_from MODEL_DIR --data_dir GLUE_DIR --workdir runs/mini --preset miniatures

The console shows progress bars, warnings and the table; WORKDIR/log.txt has the full log.
"""

import os
import sys

from squeezebert_jax import cli, files, glue, sweep
from squeezebert_jax.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--init_from", required=True)
    p.add_argument("--data_dir", default="", help="GLUE_DIR; default: TFDS")
    p.add_argument("--workdir", required=True)
    p.add_argument("--tasks", nargs="*", default=None)
    p.add_argument("--transfer", action="store_true", help="MNLI -> task transfer (not CoLA)")
    p.add_argument("--teacher_root", default="", help="directory of teacher MODEL_DIRs, one per task")
    p.add_argument("--teacher_weight", type=float, default=0.5)
    p.add_argument("--epochs", type=cli.positive_int, default=None)
    p.add_argument("--max_train_examples", type=int, default=0)
    p.add_argument("--max_seq_length", type=cli.positive_int, default=128)
    p.add_argument("--predict", action="store_true", help="write GLUE-server test files (AX from MNLI)")
    p.add_argument("--sweep", default=None, metavar="GRID",
                   help='a grid per task, e.g. "lr=1e-5,2e-5;dropout=0.0,0.1;batch=16,32" (any config field; aliases '
                        'lr, dropout, batch, epochs, seed); the best dev setting per task is chosen')
    p.add_argument("--preset", default="", choices=sorted(sweep.PRESETS),
                   help="a named grid (miniatures: Turc et al.'s); --sweep adds fields to it or replaces them")
    p.add_argument("--overwrite", action="store_true",
                   help="write the sweep into a --workdir that holds files of no sweep (a MODEL_DIR, say)")
    args = p.parse_args(argv)
    if args.teacher_weight != p.get_default("teacher_weight") and not args.teacher_root:
        raise InputError(f"--teacher_weight {args.teacher_weight:g}: the teacher's share of the targets, which only a "
                         "distilled run reads: give --teacher_root too, or leave the flag out")
    files.check_run_dir(args.workdir, sweep.RUN_KIND, args.overwrite)  # before anything is written there
    get_config = cli.config_module(os.path.join(ROOT, "train", "configs", "glue.py")).get_config
    if args.tasks is not None:
        if not args.tasks:  # a bare --tasks planned every task
            raise InputError("--tasks: give the tasks (e.g. --tasks rte mrpc), or leave the flag out for all of them")
        args.tasks = [trainable_task(t) for t in args.tasks]
        if twice := next((t for i, t in enumerate(args.tasks) if t in args.tasks[:i]), None):
            raise InputError(f"--tasks: {twice} given twice (each task runs once)")
    sweeping = args.sweep is not None or args.preset
    grid = sweep.parse_grid(args.sweep, get_config("rte"), args.preset) if sweeping else {}  # {}: one point
    for field, flag in (("num_epochs", "--epochs"), ("max_seq_length", "--max_seq_length"),
                        ("max_train_examples", "--max_train_examples"), ("distill.teacher_weight", "--teacher_weight")):
        given = getattr(args, flag[2:]) not in (None, p.get_default(flag[2:]))
        key = next((k for k in (field, sweep.SHORT.get(field)) if k in grid), None)  # the grid names it either way
        if key and given:  # the grid's values would replace the flag's without a word
            raise InputError(f"{flag} {getattr(args, flag[2:])} and the grid's {key}="
                             f"{','.join(map(str, grid[key]))} both set {field}: give it in one of them")

    def make_config(task):
        c = get_config(task)
        c.data_dir, c.max_train_examples, c.max_seq_length = args.data_dir, args.max_train_examples, args.max_seq_length
        c.init_from = args.init_from  # with --transfer, the sweep starts a task from MNLI's chosen model instead
        c.distill.teacher_weight = args.teacher_weight
        if args.epochs:
            c.num_epochs = args.epochs
        return c

    sweep.check_points(make_config, grid, args.tasks or glue.RECIPE_ORDER, args.teacher_root)  # no log.txt if refused
    cli.setup_logging(os.path.join(args.workdir, "log.txt"))
    cli.enable_compilation_cache()
    print(sweep.run_sweep(make_config, grid, args.workdir, args.tasks, args.transfer, args.teacher_root, args.predict))


def trainable_task(task: str) -> str:
    """A --tasks entry as its TFDS name; one-line errors for an unknown task and for AX (test only)."""
    trainable = sorted(glue.FINETUNE_TASKS)
    try:
        name = glue.get_task(task).name
    except glue.UnknownTaskError:
        raise InputError(f"--tasks: unknown GLUE task {task!r}; known: {', '.join(trainable)}") from None
    if name not in trainable:
        raise InputError(f"--tasks: {task!r} has no training data (test only; --predict writes it from the MNLI "
                         f"model); known: {', '.join(trainable)}")
    return name


if __name__ == "__main__":
    sys.exit(cli.run(main))
