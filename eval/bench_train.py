"""Train-step throughput (sequences/s, tokens/s, MFU) of SqueezeBERT vs BERT-base at seq 128 and 512, and the
input pipeline's sequences/s per CPU core, and whether the real pipeline keeps the step fed — all in one run,
ratios printed.

    python eval/bench_train.py --peer               # on a GPU: ours vs transformers (eager, torch.compile), train
                                                    # and bf16 inference, and the real trainer vs the synthetic step
    python eval/bench_train.py                      # full size, bf16, batch 256 per step
    python eval/bench_train.py --executions         # only: SqueezeBERT's step by remat, scan, attention, dropout
    python eval/bench_train.py --executions "remat none" XLA   # only those choices (and the default): a GPU
                                                    # compiles the twelve in about 3 minutes
    python eval/bench_train.py --profile DIR        # only: where each step's device time goes, kernel by kernel
    python eval/bench_train.py --kernels            # only: the fused FFN kernel per tile choice vs XLA's FFN, and
                                                    # the bf16 inference forward with and without it
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

from squeezebert_jax import cli, corpus, kernels, pretrain_data
from squeezebert_jax.benchmarks.timing import Report, add_out_args, format_table, set_device_lock
from squeezebert_jax.benchmarks import ffn_kernel, step_profile
from squeezebert_jax.benchmarks.train_step import (compile_all, feeding_benchmark,
                                                   train_step_bench)
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import atomic_write, check_output_dir, check_output_file
from squeezebert_jax.model import SqueezeBertConfig, scan_layers_on
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
    p.add_argument("--peak-flops", type=cli.positive_float, default=None,
                   help="peak FLOP/s per device for MFU (default: chips.PEAK_FLOPS by device kind)")
    p.add_argument("--executions", nargs="*", default=None, metavar="CHOICE",
                   help="only SqueezeBERT's step at the first --seq-lens under each execution choice (EXECUTIONS: remat, "
                        "scan or unrolled layers, fused or reference attention, dropout off), or only those whose "
                        "names hold a CHOICE (case ignored), beside the default")
    p.add_argument("--repeats", type=cli.positive_int, default=1,
                   help="--executions: time every choice this many times, in turns (the median is the row's)")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="only: where each model's step spends its device time (by scope, by kind, largest kernels); "
                        "every kernel to DIR/kernels.tsv, each compiled program to DIR/<model>.hlo.txt")
    p.add_argument("--top", type=cli.positive_int, default=25, help="--profile: how many of the largest kernels")
    p.add_argument("--kernels", action="store_true",
                   help="only: the fused grouped FFN kernel (kernels.grouped_ffn) per tile choice against XLA's FFN "
                        "(ms, GB/s, TFLOP/s, error against float32), and the bf16 inference forward of SqueezeBERT "
                        "with and without it beside BERT-base's")
    p.add_argument("--pipeline-only", action="store_true", help="skip the train-step benchmark")
    p.add_argument("--step-only", action="store_true", help="skip the input pipeline's rate per core")
    p.add_argument("--lock", metavar="FILE", default=None,
                   help="time under an exclusive lock on FILE: benchmarks run side by side on one GPU compile at once "
                        "and time one at a time")
    p.add_argument("--feeding", action="store_true",
                   help="only the demo step fed by the real pipeline (inline / prefetched) vs a fixed batch")
    add_out_args(p)
    args = p.parse_args(argv)
    cli.setup_logging(None)
    if args.peer:  # PyTorch shares the device: JAX takes memory as it needs it, not 75% of it at its start
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    report = Report(args.out, args.overwrite)
    if args.lock:  # before any work: a lock file shared with other benchmarks, created or taken as it is
        check_output_file(args.lock, overwrite=True, what="--lock")
    if args.profile:  # its kernels.tsv and programs are replaced in it
        check_output_dir(args.profile, overwrite=True, what="--profile", entries=False)
    set_device_lock(args.lock)
    report.add(f"host: {cpu_model()}, jax {jax.__version__} on {jax.devices()[0].device_kind} x {jax.device_count()}")
    if args.executions is not None or args.profile or args.kernels:
        (executions if args.executions is not None else profile if args.profile else kernel_tables)(args, report)
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
    rows, seq, names = [], {}, ("squeezebert-uncased", "bert-base-uncased")
    cases = [(name, seq_len) for seq_len in args.seq_lens for name in names]
    benches = [train_step_bench(preset(name, args.tiny), seq_len, args.batch, 20 if seq_len <= 128 else 77, dtype)
               for name, seq_len in cases]
    compile_all(benches, strict=True)  # all at once, then timed one by one
    for (name, seq_len), bench in zip(cases, benches):
        r = bench.time(args.steps, peak_flops=args.peak_flops)
        bench.args = bench.compiled = None
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
    if args.step_only:
        return seq
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


# (name, SqueezeBertConfig changes, or rng_impl, or "xla": XLA options of that compile): the execution choices
# --executions times, the first the default; the XLA options only on a GPU
EXECUTIONS = [("default: layers auto (unrolled on CPU and GPU), remat minimal, fused attention", {}),
              ("remat none", {"remat": "none"}),
              ("remat full", {"remat": "full"}),
              ("scan, remat minimal", {"scan_layers": True}),
              ("reference attention (probability dropout)", {"attention": "reference"}),
              ("rbg dropout bits", {"rng_impl": "rbg"}),
              ("dropout off", {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
              ("fused FFN kernel (Pallas)", {"ffn": "fused"}),
              ("LayerNorm backward kernel (Pallas)", {"layernorm": "fused"}),
              ("remat none + LayerNorm backward kernel", {"remat": "none", "layernorm": "fused"}),
              ("padding as a mask (the attention kernel reads a bias)", {"padding": "any"})]
CUDNN_LN, BLOCK_LEVEL = "xla_gpu_enable_cudnn_layer_norm", "xla_gpu_experimental_enable_fusion_block_level_rewriter"
GPU_EXECUTIONS = [("XLA: cuBLAS for every matmul (no Triton gemm)", {"xla": {"xla_gpu_enable_triton_gemm": False}}),
                  ("XLA: Triton for any matmul", {"xla": {"xla_gpu_triton_gemm_any": True}}),
                  ("XLA: no command buffers (CUDA graphs)", {"xla": {"xla_gpu_enable_command_buffer": ""}}),
                  ("XLA: cuDNN LayerNorm", {"xla": {CUDNN_LN: True}}),
                  ("XLA: block-level fusions", {"xla": {BLOCK_LEVEL: True}}),
                  ("XLA: cuDNN LayerNorm + block-level fusions", {"xla": {CUDNN_LN: True, BLOCK_LEVEL: True}}),
                  ("remat none + XLA: cuDNN LayerNorm + block-level fusions",
                   {"remat": "none", "xla": {CUDNN_LN: True, BLOCK_LEVEL: True}})]


def preset(name: str, tiny: bool, **changes) -> SqueezeBertConfig:
    """The preset ``name`` (at ``TINY`` dims with ``tiny``) run as the trainer runs it on this platform (its layers
    unrolled or scanned: ``model.scan_layers_on("auto", ...)``), with ``changes``."""
    changes.setdefault("scan_layers", scan_layers_on("auto", jax.default_backend()))
    return SqueezeBertConfig.preset(name, **(TINY if tiny else {}), **changes)


def executions(args, report: Report) -> None:
    """SqueezeBERT's step under each of ``EXECUTIONS`` (what remat, the layer scan, the attention path, dropout and, on
    a GPU, XLA's options cost on this device), all compiled at once (``compile_all``) then timed one after another,
    with each one's speed relative to the default."""
    seq_len = args.seq_lens[0]
    preds = 20 if seq_len <= 128 else 77
    dtype = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    choices = EXECUTIONS + (GPU_EXECUTIONS if jax.default_backend() == "gpu" else [])
    if args.executions:
        wanted = [c.casefold() for c in args.executions]
        unknown = [c for c in args.executions if not any(c.casefold() in n.casefold() for n, _ in choices)]
        if unknown:
            raise InputError(f"--executions {', '.join(map(repr, unknown))}: no execution choice here is named so; "
                             f"they are: {'; '.join(n for n, _ in choices)}")
        choices = choices[:1] + [(n, c) for n, c in choices[1:] if any(w in n.casefold() for w in wanted)]
    benches = []
    for name, changes in choices:
        changes = dict(changes)
        impl, xla = changes.pop("rng_impl", "threefry2x32"), changes.pop("xla", None)
        padding = changes.pop("padding", "right")
        benches.append(train_step_bench(preset("squeezebert-uncased", args.tiny, **changes), seq_len, args.batch,
                                        preds, dtype, rng_impl=impl, compiler_options=xla, padding=padding))
    errors = compile_all(benches)
    runs: dict[int, list[dict]] = {i: [] for i, e in enumerate(errors) if e is None}
    for _ in range(args.repeats):  # each pass times every choice once: a drift of the device shows in every row
        for i in runs:
            runs[i].append(benches[i].time(args.steps, peak_flops=args.peak_flops))
    rows, base = [], None
    for i, ((name, _), bench, error) in enumerate(zip(choices, benches, errors)):
        bench.args = bench.compiled = None  # frees its state on the device
        if error is not None:
            rows.append([name, "-", "-", "-", f"did not compile: {str(error).splitlines()[0][:80]}", "-"])
            continue
        r = sorted(runs[i], key=lambda r: r["step_ms"])[(len(runs[i]) - 1) // 2]  # the median run (lower middle)
        base = base or r["seq_per_s"]
        rows.append([name, f"{r['step_ms']:.1f}", ", ".join(f"{x['step_ms']:.1f}" for x in runs[i]),
                     f"{r['seq_per_s']:.1f}", f"{r['seq_per_s'] / base:.2f}x",
                     "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"])
    report.add(format_table(["execution", "step ms", "runs (ms)", "seq/s", "vs default", "MFU"], rows,
                            title=f"SqueezeBERT train step (LAMB, {args.dtype}) by execution choice, seq {seq_len}, "
                                  f"batch {args.batch}, {jax.devices()[0].device_kind}"))


def kernel_tables(args, report: Report) -> None:
    """The fused FFN kernel per tile choice against XLA's FFN at the first --seq-lens x --batch tokens (on a CPU, in
    Pallas' interpreter: plumbing, not speed), then the bf16 inference forward of SqueezeBERT with either FFN and of
    BERT-base."""
    seq_len = args.seq_lens[0]
    cfg = preset("squeezebert-uncased", args.tiny)
    cpu = jax.default_backend() == "cpu"
    choices = [kernels.Tiles(64, 128, 4, 3), kernels.default_tiles()] if cpu else None  # interpreted: two, not 24
    hidden, inner = (256, 1024) if args.tiny else (cfg.hidden_size, cfg.intermediate_size)  # tiny: the tiles' least
    rows = ffn_kernel.kernel_rows(args.batch * seq_len, hidden, inner, cfg.intermediate_groups,
                                  steps=2 if cpu else 50, choices=choices, interpret=cpu)
    report.add(format_table(["FFN", "ms", "GB/s moved", "TFLOP/s", "error vs float32"], rows,
                            title=f"SqueezeBERT's grouped FFN, {args.batch * seq_len} tokens, bf16, "
                                  f"{jax.devices()[0].device_kind}" + (" (interpreted)" if cpu else "")))
    configs = {n: preset(n, args.tiny) for n in ("squeezebert-uncased", "bert-base-uncased")}
    rows = ffn_kernel.inference_rows(configs, seq_len, args.batch, args.steps)
    report.add(format_table(["model", "FFN", "seq/s", "logits max |fused - xla|", "s"], rows,
                            title=f"bf16 inference forward, seq {seq_len}, batch {args.batch}, "
                                  f"{jax.devices()[0].device_kind}"))
    speed = {(r[0], r[1]): float(r[2]) for r in rows if r[2] != "-"}
    bert = next(v for (n, _), v in speed.items() if n == "bert-base-uncased")
    for ffn in ("xla", "fused"):
        if ("squeezebert-uncased", ffn) in speed:
            report.add(f"inference, FFN {ffn}: SqueezeBERT / BERT-base = "
                       f"{speed[('squeezebert-uncased', ffn)] / bert:.2f}x (target >= 2.2x)")


def profile(args, report: Report) -> None:
    """Where each model's step spends its device time (``step_profile``), at the first --seq-lens: by scope and pass,
    by kind, and the largest kernels; every kernel to --profile DIR/kernels.tsv, each compiled program to
    DIR/<model>.hlo.txt."""
    seq_len = args.seq_lens[0]
    preds = 20 if seq_len <= 128 else 77
    dtype = jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32
    os.makedirs(args.profile, exist_ok=True)
    names = ("squeezebert-uncased", "bert-base-uncased")
    benches = [train_step_bench(preset(n, args.tiny), seq_len, args.batch, preds, dtype) for n in names]
    compile_all(benches, strict=True)
    tsv = []
    for name, bench in zip(names, benches):
        r = bench.time(args.steps, peak_flops=args.peak_flops)
        hlo = bench.compiled.as_text()
        atomic_write(os.path.join(args.profile, f"{name}.hlo.txt"), hlo)
        prof = step_profile.profile_step(bench.blocking_step, hlo, runs=3)
        bench.args = None
        total = prof.total_us
        pct = lambda us: f"{100 * us / total:.1f}%"  # noqa: E731
        scope = lambda i: f"{i.scope} {'bwd' if i.backward else 'fwd'}" if i else "?"  # noqa: E731
        report.add(f"{name}: step {r['step_ms']:.1f} ms wall, kernels {total / 1e3:.1f} ms ({prof.where})")
        report.add(format_table(["scope, pass", "ms", "share", "launches"],
                                [[k, f"{us / 1e3:.2f}", pct(us), f"{n:g}"] for k, us, n in prof.by(scope)],
                                title=f"{name} step by scope (seq {seq_len}, batch {args.batch}, {args.dtype})"))
        report.add(format_table(["kind", "ms", "share", "launches"],
                                [[k, f"{us / 1e3:.2f}", pct(us), f"{n:g}"]
                                 for k, us, n in prof.by(lambda i: i.kind if i else "?")], title=f"{name} by kind"))
        report.add(format_table(["kernel (hlo_op)", "scope, pass", "kind", "us", "share", "launches"],
                                [[op, scope(i), i.kind if i else "?", f"{us:.0f}", pct(us), f"{n:g}"]
                                 for op, i, us, n in prof.rows[:args.top]], title=f"{name}: largest kernels"))
        tsv += [f"{name}\t{line}" for line in prof.tsv().splitlines()[(1 if tsv else 0):]]
    if tsv:
        tsv[0] = "model\t" + tsv[0].split("\t", 1)[1]
    atomic_write(os.path.join(args.profile, "kernels.tsv"), "\n".join(tsv) + "\n")


def peers(args, report: Report, ours: dict[tuple[str, int], float]) -> None:
    """transformers' train step (eager, torch.compile) and both frameworks' bf16 inference at the first --seq-lens
    (128 by default) on the same device, beside ``ours`` (``throughput``'s), with the ratios the targets name."""
    from squeezebert_jax.benchmarks import peer  # lazy: torch and transformers, only for --peer

    seq_len = (args.seq_lens or [128])[0]
    preds = 20 if seq_len <= 128 else 77
    bf16 = args.dtype == "bfloat16"
    rows, got = [], {}

    def measured(name, what, value):  # each number as it comes (stderr), should the run be cut short
        peer.release_memory()
        if value is not None:
            print(f"peer: {name} {what} {value:.1f} sequences/s", file=sys.stderr, flush=True)
        return value

    for name in ("squeezebert-uncased", "bert-base-uncased"):
        cfg = preset(name, args.tiny)
        inf_ours = measured(name, "ours inference", peer.flax_inference(cfg, seq_len, args.batch, bf16,
                                                                        steps=args.steps))
        inf_torch = measured(name, "transformers inference", peer.torch_inference(cfg, seq_len, args.batch, bf16,
                                                                                  steps=args.steps))
        eager = measured(name, "transformers eager train", peer.torch_train_step(
            cfg, seq_len, args.batch, preds, bf16, steps=args.steps)["seq_per_s"])
        compiled = None if args.tiny else measured(name, "transformers torch.compile train", peer.torch_train_step(
            cfg, seq_len, args.batch, preds, bf16, compile=True, steps=args.steps)["seq_per_s"])
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
