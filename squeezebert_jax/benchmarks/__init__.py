"""Benchmarks and profiles: timing on this machine, run by the eval/ scripts. No library module imports this package.

    timing.py         threads, interleaved timers, load notes, Markdown tables, the models timed (presets or MODEL_DIRs)
    profile_table.py  the paper's Table 1 (FLOPs and latency per component) and the op-by-op forward breakdown
    infer.py          CPU inference: Flax vs TorchScript, SqueezeBERT vs BERT-base, bf16; other formulations
    latency.py        the paper's Table 2 latency through the lite interpreter (eval/latency.py)
    train_step.py     train-step throughput and MFU, and whether the input pipeline feeds the step
    compare.py        the seeds' comparison table: params, FLOPs, CPU latency beside the published figures
"""
