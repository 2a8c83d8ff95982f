"""Train-step throughput (sequences/s, tokens/s, MFU) of SqueezeBERT vs BERT-base at seq 128 and 512, and the
input pipeline's sequences/s per CPU core, and whether the real pipeline keeps the step fed — all in one run,
ratios printed.

    python eval/bench_train.py                      # full size, bf16, batch 64 per step
    python eval/bench_train.py --tiny               # tiny dims (CI): checks the plumbing, not the speed
    python eval/bench_train.py --pipeline-only      # only the input pipeline (full-size corpora, any CPU)
    python eval/bench_train.py --feeding            # only: the demo step fed by the real pipeline vs a fixed batch
Targets (issue): on one H100, >= 35% MFU (SqueezeBERT) / >= 45% (BERT-base) in bf16, SqueezeBERT >= 2.5x
BERT-base sequences/s; input pipeline >= 20k sequences/s per core at seq 128. MFU needs a known accelerator
(chips.PEAK_FLOPS) or --peak-flops; on CPU it is left out. --out FILE [--overwrite] also writes what it prints.
"""

import importlib.util
import os
import sys
import tempfile

import jax
import jax.numpy as jnp

from squeezebert_jax import cli, corpus, pretrain_data
from squeezebert_jax.benchmarks.timing import Report, add_out_args, format_table
from squeezebert_jax.benchmarks.train_step import benchmark_train_step, feeding_benchmark
from squeezebert_jax.model import SqueezeBertConfig
from squeezebert_jax.tokenizer import Tokenizer
from squeezebert_jax.benchmarks.timing import cpu_model

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train", "configs", "pretrain.py")

TINY = dict(hidden_size=64, embedding_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            vocab_size=512)


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--batch", type=cli.positive_int, default=64)
    p.add_argument("--seq-lens", type=cli.positive_int, nargs="+", default=[128, 512])
    p.add_argument("--steps", type=cli.positive_int, default=10)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--peak-flops", type=float, default=None,
                   help="peak FLOP/s per device for MFU (default: chips.PEAK_FLOPS by device kind)")
    p.add_argument("--pipeline-only", action="store_true", help="skip the train-step benchmark")
    p.add_argument("--feeding", action="store_true",
                   help="only the demo step fed by the real pipeline (inline / prefetched) vs a fixed batch")
    add_out_args(p)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    report = Report(args.out, args.overwrite)
    report.add(f"host: {cpu_model()}, jax {jax.__version__} on {jax.devices()[0].device_kind} x {jax.device_count()}")
    if not args.feeding:
        throughput(args, report)
    if args.feeding or not args.pipeline_only:
        feeding(args.tiny, report)
    report.write()
    return 0


def throughput(args, report: Report) -> None:
    """The train step of SqueezeBERT and BERT-base per --seq-lens, then the input pipeline's rate per core."""
    if args.pipeline_only:
        args.seq_lens = []
    dtype = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    rows, seq = [], {}
    for seq_len in args.seq_lens:
        preds = 20 if seq_len <= 128 else 77
        for name in ("squeezebert-uncased", "bert-base-uncased"):
            cfg = SqueezeBertConfig.preset(name, **(TINY if args.tiny else {}))
            r = benchmark_train_step(cfg, seq_len, args.batch, preds, dtype, steps=args.steps,
                                     peak_flops=args.peak_flops)
            seq[(name, seq_len)] = r["seq_per_s"]
            rows.append([name, seq_len, args.batch, f"{r['step_ms']:.1f}", f"{r['seq_per_s']:.1f}",
                         f"{r['tokens_per_s']:.0f}", "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"])
    if rows:
        report.add(format_table(["model", "seq", "batch", "step ms", "seq/s", "tokens/s", "MFU"], rows,
                                title=f"train step (LAMB, {args.dtype})"))
    for seq_len in args.seq_lens:
        ratio = seq[("squeezebert-uncased", seq_len)] / seq[("bert-base-uncased", seq_len)]
        report.add(f"seq {seq_len}: SqueezeBERT / BERT-base sequences/s = {ratio:.2f}x (target >= 2.5x on an H100)")
    with tempfile.TemporaryDirectory() as d:  # input pipeline, one process = one core
        tok = Tokenizer.from_file(corpus.write_demo_vocab(os.path.join(d, "v.txt")))
        stories = corpus.generate_documents(400 if args.tiny else 20_000, seed=0)
        # stories: ~7 sentences, ~90 tokens; long: 20 stories per document (~140 sentences, ~1.8k tokens),
        # closer to a Wikipedia article
        corpora = {"stories": stories, "long documents": [sum(stories[i:i + 20], []) for i in
                                                          range(0, len(stories), 20)]}
        rows, rate128 = [], {}
        for name, docs in corpora.items():
            path = os.path.join(d, name.replace(" ", "_"))
            pretrain_data.prepare(docs, tok, path, num_shards=4, progress=False)
            for seq_len, preds in ((128, 20), (512, 77)):
                for wwm in (False, True):
                    rate = pretrain_data.sequences_per_second(path, seq_len, 256, 4 if args.tiny else 20, preds, wwm)
                    rate128.setdefault(name, rate)
                    rows.append([name, seq_len, "yes" if wwm else "no", f"{rate:.0f}"])
    report.add(format_table(["corpus", "seq", "whole-word", "seq/s per core"], rows,
                            title="input pipeline (grain + ArrayRecord, batches of 256 made in one thread, CPU time)"))
    report.add("input pipeline, seq 128: " + ", ".join(f"{k} {v:.0f}" for k, v in rate128.items())
               + " sequences/s per core (target >= 20000)")


def feeding(tiny: bool, report: Report) -> None:
    """The demo pretraining step (train/configs/pretrain.py:demo; :smoke with --tiny) fed by the real pipeline."""
    spec = importlib.util.spec_from_file_location("pretrain_configs", CONFIGS)
    configs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(configs)
    config = configs.get_config("smoke" if tiny else "demo")
    with tempfile.TemporaryDirectory() as d:
        r = feeding_benchmark(config, d, steps_per_run=2 if tiny else 10, runs=1 if tiny else 6)
    phase = config.phases[0]
    report.add(format_table(["fed by", "steps/s", "vs synthetic"],
                            [[k, f"{v:.2f}", f"{v / r['synthetic']:.3f}x"] for k, v in r.items()],
                            title=f"demo pretraining step ({config.model.preset} {dict(config.model.overrides)}, "
                                  f"batch {config.global_batch_size}, seq {phase['seq_len']}, {config.compute_dtype}): "
                                  f"real input pipeline vs one fixed batch"))
    report.add(f"device fed: prefetched / synthetic steps/s = {r['prefetched'] / r['synthetic']:.3f} "
               f"(target >= 0.95), inline / synthetic = {r['inline'] / r['synthetic']:.3f}")


if __name__ == "__main__":
    sys.exit(cli.run(main))
