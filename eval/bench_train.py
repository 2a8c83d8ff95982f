"""Train-step throughput (sequences/s, tokens/s, MFU) of SqueezeBERT vs BERT-base at seq 128 and 512, and the
input pipeline's sequences/s per CPU core, and whether the real pipeline keeps the step fed — all in one run,
ratios printed.

    python eval/bench_train.py --peer               # on a GPU: ours vs transformers (eager, torch.compile), train
                                                    # and bf16 inference, and the real trainer vs the synthetic step
    python eval/bench_train.py                      # full size, bf16, batch 256 per step
    python eval/bench_train.py --executions         # only: SqueezeBERT's step by remat, scan, attention, dropout
    python eval/bench_train.py --tiny               # tiny dims (CI): checks the plumbing, not the speed
    python eval/bench_train.py --pipeline-only      # only the input pipeline (full-size corpora, any CPU)
    python eval/bench_train.py --feeding            # only: pretrain.py's step fed by the real pipeline vs a fixed
                                                    # batch (the paper config on an accelerator, the demo on a CPU)
Targets (one H100 or H200, seq 128, batch 256, bf16): SqueezeBERT >= 8,000 sequences/s; BERT-base >= 35% MFU;
SqueezeBERT >= 1.8x BERT-base in training and >= 2.2x in inference; SqueezeBERT's step >= 3x transformers eager and
>= 2x with torch.compile; the real pipeline >= 0.95x the synthetic step; input pipeline >= 20k sequences/s per core.
--peer adds transformers (eager and torch.compile; --tiny skips torch.compile) and both frameworks' bf16 inference.
MFU needs a known accelerator (chips.PEAK_FLOPS) or --peak-flops; on CPU it is left out. --out FILE [--overwrite]
also writes what it prints.
"""

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
    p.add_argument("--batch", type=cli.positive_int, default=256)
    p.add_argument("--peer", action="store_true",
                   help="also transformers' step (eager, torch.compile) and both frameworks' bf16 inference")
    p.add_argument("--seq-lens", type=cli.positive_int, nargs="+", default=[128, 512])
    p.add_argument("--steps", type=cli.positive_int, default=10)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--peak-flops", type=float, default=None,
                   help="peak FLOP/s per device for MFU (default: chips.PEAK_FLOPS by device kind)")
    p.add_argument("--executions", action="store_true",
                   help="only SqueezeBERT's step at the first --seq-lens under each execution choice (EXECUTIONS: remat, "
                        "scan or unrolled layers, fused or reference attention, dropout off)")
    p.add_argument("--pipeline-only", action="store_true", help="skip the train-step benchmark")
    p.add_argument("--feeding", action="store_true",
                   help="only the demo step fed by the real pipeline (inline / prefetched) vs a fixed batch")
    add_out_args(p)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    report = Report(args.out, args.overwrite)
    report.add(f"host: {cpu_model()}, jax {jax.__version__} on {jax.devices()[0].device_kind} x {jax.device_count()}")
    if args.executions:
        executions(args, report)
        report.write()
        return 0
    ours = throughput(args, report) if not args.feeding else {}
    if args.peer and not args.feeding:
        peers(args, report, ours)
    if args.feeding or not args.pipeline_only:
        feeding(args, report)
    report.write()
    return 0


def throughput(args, report: Report) -> dict[tuple[str, int], float]:
    """The train step of SqueezeBERT and BERT-base per --seq-lens, then the input pipeline's rate per core; returns
    the steps' sequences/s by (preset, seq_len)."""
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
        report.add(f"seq {seq_len}: SqueezeBERT / BERT-base sequences/s = {ratio:.2f}x (target >= 1.8x at seq 128)")
        if seq_len == 128:
            report.add(f"seq 128: SqueezeBERT {seq[('squeezebert-uncased', 128)]:.0f} sequences/s (target >= 8,000 on "
                       "one H100 or H200)")
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
    return seq


# (name, SqueezeBertConfig changes, or rng_impl): the execution choices --executions times, the first the default
EXECUTIONS = [("scan, remat minimal, fused attention (default)", {}),
              ("scan, remat lean", {"remat": "lean"}),
              ("scan, remat dots_saveable", {"remat": "dots_saveable"}),
              ("scan, remat full", {"remat": "full"}),
              ("scan, remat none", {"remat": "none"}),
              ("unrolled, remat none", {"scan_layers": False, "remat": "none"}),
              ("unrolled, remat minimal", {"scan_layers": False}),
              ("reference attention (probability dropout)", {"attention": "reference"}),
              ("rbg dropout bits", {"rng_impl": "rbg"}),
              ("dropout off", {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})]


def executions(args, report: Report) -> None:
    """SqueezeBERT's step under each of ``EXECUTIONS`` (what remat, the layer scan, the attention path and dropout
    cost on this device), one compile each, with each one's speed relative to the default."""
    seq_len = args.seq_lens[0]
    preds = 20 if seq_len <= 128 else 77
    dtype = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    rows, base = [], None
    for name, changes in EXECUTIONS:
        changes = dict(changes)
        impl = changes.pop("rng_impl", "threefry2x32")
        cfg = SqueezeBertConfig.preset("squeezebert-uncased", **(TINY if args.tiny else {}), **changes)
        r = benchmark_train_step(cfg, seq_len, args.batch, preds, dtype, steps=args.steps, peak_flops=args.peak_flops,
                                 rng_impl=impl)
        base = base or r["seq_per_s"]
        rows.append([name, f"{r['step_ms']:.1f}", f"{r['seq_per_s']:.1f}", f"{r['seq_per_s'] / base:.2f}x",
                     "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"])
    report.add(format_table(["execution", "step ms", "seq/s", "vs default", "MFU"], rows,
                            title=f"SqueezeBERT train step (LAMB, {args.dtype}) by execution choice, seq {seq_len}, "
                                  f"batch {args.batch}, {jax.devices()[0].device_kind}"))


def peers(args, report: Report, ours: dict[tuple[str, int], float]) -> None:
    """transformers' train step (eager, torch.compile) and both frameworks' bf16 inference at the first --seq-lens
    (128 by default) on the same device, beside ``ours`` (``throughput``'s), with the ratios the targets name."""
    from squeezebert_jax.benchmarks import peer

    seq_len = (args.seq_lens or [128])[0]
    preds = 20 if seq_len <= 128 else 77
    bf16 = args.dtype == "bfloat16"
    rows, got = [], {}
    for name in ("squeezebert-uncased", "bert-base-uncased"):
        cfg = SqueezeBertConfig.preset(name, **(TINY if args.tiny else {}))
        eager = peer.torch_train_step(cfg, seq_len, args.batch, preds, bf16, steps=args.steps)["seq_per_s"]
        compiled = None if args.tiny else peer.torch_train_step(cfg, seq_len, args.batch, preds, bf16, compile=True,
                                                                 steps=args.steps)["seq_per_s"]
        inf_ours = peer.flax_inference(cfg, seq_len, args.batch, bf16, steps=args.steps)
        inf_torch = peer.torch_inference(cfg, seq_len, args.batch, bf16, steps=args.steps)
        got[name] = dict(ours=ours.get((name, seq_len)), eager=eager, compiled=compiled, inf_ours=inf_ours,
                         inf_torch=inf_torch)
        fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        rows.append([name, fmt(ours.get((name, seq_len))), fmt(eager), fmt(compiled) if not args.tiny
                     else "skipped (--tiny)", fmt(inf_ours), fmt(inf_torch)])
    report.add(format_table(["model", "ours train seq/s", "transformers eager train", "transformers torch.compile "
                             "train", "ours inference", "transformers inference"], rows,
                            title=f"sequences/s on {peer.device_name()}, seq {seq_len}, batch {args.batch}, "
                                  f"{args.dtype} (train: ours LAMB MLM+SOP, transformers AdamW MLM)"))
    sq, bert = got["squeezebert-uncased"], got["bert-base-uncased"]
    report.add(f"inference: SqueezeBERT / BERT-base = {sq['inf_ours'] / bert['inf_ours']:.2f}x (target >= 2.2x); "
               f"ours / transformers: SqueezeBERT {sq['inf_ours'] / sq['inf_torch']:.2f}x, "
               f"BERT-base {bert['inf_ours'] / bert['inf_torch']:.2f}x")
    if sq["ours"]:
        line = f"SqueezeBERT train: ours / transformers eager = {sq['ours'] / sq['eager']:.2f}x (target >= 3x)"
        if sq["compiled"]:
            line += f", ours / torch.compile = {sq['ours'] / sq['compiled']:.2f}x (target >= 2x)"
        report.add(line)


def feeding(args, report: Report) -> None:
    """train/pretrain.py's step fed by the real pipeline against one fixed batch: on an accelerator the paper config
    (full-size model, bf16, global batch --batch, phase 1) on the demo corpus, as pretrain.py runs it; on a CPU the
    demo config (:smoke with --tiny)."""
    configs = cli.config_module(CONFIGS)
    paper = not args.tiny and jax.default_backend() != "cpu"
    config = configs.get_config("smoke" if args.tiny else "paper" if paper else "demo")
    if paper:
        config.data.source, config.global_batch_size = "demo", args.batch
    with tempfile.TemporaryDirectory() as d:
        r = feeding_benchmark(config, d, steps_per_run=2 if args.tiny else 10, runs=1 if args.tiny else 6)
    phase = config.phases[0]
    report.add(format_table(["fed by", "steps/s", "vs synthetic"],
                            [[k, f"{v:.2f}", f"{v / r['synthetic']:.3f}x"] for k, v in r.items()],
                            title=f"{'paper' if paper else 'demo'} pretraining step ({config.model.preset} "
                                  f"{dict(config.model.overrides)}, batch {config.global_batch_size}, seq "
                                  f"{phase['seq_len']}, {config.compute_dtype}, demo corpus): real input pipeline vs "
                                  f"one fixed batch"))
    report.add(f"device fed: prefetched / synthetic steps/s = {r['prefetched'] / r['synthetic']:.3f} "
               f"(target >= 0.95), inline / synthetic = {r['inline'] / r['synthetic']:.3f}")


if __name__ == "__main__":
    sys.exit(cli.run(main))
