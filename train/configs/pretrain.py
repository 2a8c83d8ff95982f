"""Pretraining configs (ml_collections). Variants: demo, paper, bert-base, smoke.

    python train/pretrain.py --config train/configs/pretrain.py:demo --workdir /tmp/sqb_demo
    python train/pretrain.py --config train/configs/pretrain.py:paper --workdir /runs/sqb \
        --config.data.path /data/wiki_books_prepared
    python train/pretrain.py --config train/configs/pretrain.py:bert-base --workdir ... --config.data.path ...

Override anything with --config.x=... (e.g. --config.num_microbatches=8 when 8192 sequences do not fit); a phase's
field by its index in brackets: --config.phases[0].num_steps=1000, --config.phases[1].seq_len=384.
keep_checkpoints is >= 1 (the newest this many are kept; there is no "keep none").
The workdir is a local or mounted path (e.g. a bucket mounted with gcsfuse); URLs such as gs://... are refused.
"""

import ml_collections

from squeezebert_jax.model import RTD_SETTINGS


def get_config(variant: str = "demo") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    # rng_impl: how dropout masks are drawn: "threefry2x32" (jax's default: the same bits on every platform and mesh)
    # or "rbg" (XLA's RngBitGenerator: cheaper on accelerators; a resume on the same platform and mesh stays exact)
    c.rng_impl = "threefry2x32"
    # layers: "scan" (the encoder layers under one lax.scan: one compiled layer, the paper step compiles in ~1 min,
    # not 10), "unrolled" (each layer its own code: on one H100 the paper step runs 1.2x faster) or "auto" (unrolled
    # on CPU and GPU, the scan on TPU: model.AUTO_LAYERS); remat: what each layer keeps for the backward pass
    # ("minimal", "lean", "full", "dots_saveable", "none"; model.REMAT_POLICIES has the memory each costs). Neither
    # changes the numbers.
    # attention: "fused" runs the attention core as one kernel (cuDNN's flash attention on a GPU) and so drops nothing
    # out of the attention probabilities (the paper's recipe drops 10% of them; the hidden-state dropout stays);
    # "reference" keeps that dropout, computing the probabilities explicitly (docs/results.md: what each costs).
    # ffn: "xla" (XLA's ops) or "fused" (on an NVIDIA GPU, the grouped FFN as one Pallas kernel: opt-in, it was
    # slower on an H200; docs/results.md). layernorm: "xla" or "fused" (on an NVIDIA GPU, the backward of each
    # dropout + residual + LayerNorm as one Pallas kernel: opt-in, not yet timed on a GPU). The same numbers either way.
    c.model = ml_collections.ConfigDict({"preset": "squeezebert-uncased", "overrides": {},
                                         "vocab_from_tokenizer": False, "layers": "auto", "remat": "minimal",
                                         "attention": "fused", "ffn": "xla", "layernorm": "xla"})
    c.init_from = ""  # a MODEL_DIR to start from (e.g. a converted checkpoint)
    c.compute_dtype = "bfloat16"
    # The paper (via LAMB, You et al.): global batch 8192, lr 2.5e-3, warmup 28%, then polynomial decay.
    c.global_batch_size = 8192
    c.num_microbatches = 1  # gradient accumulation: equal (up to float error) to the large batch
    c.learning_rate = 2.5e-3
    c.warmup_fraction = 0.28
    c.decay_power = 1.0
    c.weight_decay = 0.01
    c.clip_norm = 1.0
    # A phase may set its own num_microbatches (seq 512 needs more than seq 128: --config.phases[1].num_microbatches=4);
    # 0: the config's applies.
    c.phases = [dict(name="phase1", num_steps=56_000, seq_len=128, max_predictions_per_seq=20, num_microbatches=0),
                dict(name="phase2", num_steps=6_000, seq_len=512, max_predictions_per_seq=77, num_microbatches=0)]
    # objective: "mlm_sop" (the paper's masked LM + sentence-order prediction) or "rtd" (ELECTRA's replaced-token
    # detection: a generator of rtd.generator_fraction of the model's width samples the masked tokens, the model --
    # the discriminator, exported as WORKDIR/model; the generator as WORKDIR/generator -- tells every token replaced
    # or original; loss = generator MLM + rtd.weight x discriminator BCE)
    c.objective = "mlm_sop"
    c.rtd = ml_collections.ConfigDict(dict(RTD_SETTINGS))  # generator_fraction 0.25, weight 50
    c.fsdp = False
    c.num_devices = 0  # 0: all devices
    c.data = ml_collections.ConfigDict({"source": "prepared", "path": "", "whole_word_masking": False,
                                        "num_workers": 0, "num_shards": 4, "demo_num_docs": 4000,
                                        "demo_seed": 0, "prefetch": 2})
    # data.prefetch: batches made and put on the devices ahead of the step (a background thread; 0: inline);
    # data.num_workers: grain worker processes making batches (0: grain's read thread in this process);
    # data.start_over: resume the model and optimizer on data prepared again since the checkpoint (other shards),
    # reading the new data from its beginning (without it such a resume is refused: the saved position is the old
    # data's). A changed vocabulary is always refused.
    c.data.start_over = False
    c.log_every = 100
    c.checkpoint_every = 1000
    c.keep_checkpoints = 3
    c.async_checkpoints = True
    c.progress = True
    c.stop_at_step = 0  # >0: save and exit at this global step, as a preemption would (resume later)
    c.preemption_sync_every = 10  # multi-host: hosts agree on a SIGTERM every this many steps (and at phase ends)
    c.peak_flops_per_device = 0.0  # 0: look up by device kind (MFU is left out on CPU)
    c.coordinator_address = ""  # multi-host: host:port of process 0 (or SQUEEZEBERT_AUTO_DISTRIBUTED=1)
    c.num_processes = 0  # 0: auto-detect
    c.process_id = -1  # -1: auto-detect

    if variant == "paper":
        pass
    elif variant == "bert-base":  # the paper's baseline: the same protocol on BERT-base
        c.model.preset = "bert-base-uncased"
    elif variant in ("demo", "smoke"):
        # A tiny SqueezeBERT on the embedded generated corpus: minutes on 2 CPU cores.
        c.model.preset = "squeezebert-uncased"
        c.model.overrides = dict(hidden_size=128, embedding_size=128, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=512, max_position_embeddings=128)
        c.model.vocab_from_tokenizer = True
        c.compute_dtype = "float32"
        c.data.source = "demo"
        c.global_batch_size = 32
        c.learning_rate = 2e-3
        c.warmup_fraction = 0.1
        c.phases = [dict(name="phase1", num_steps=600, seq_len=64, max_predictions_per_seq=10, num_microbatches=0),
                    dict(name="phase2", num_steps=60, seq_len=128, max_predictions_per_seq=20, num_microbatches=0)]
        c.log_every = 20
        c.checkpoint_every = 200
        if variant == "smoke":  # for tests: seconds
            c.model.overrides = dict(c.model.overrides, hidden_size=32, embedding_size=32, intermediate_size=64)
            c.data.demo_num_docs = 200
            c.global_batch_size = 16
            c.phases = [dict(name="phase1", num_steps=6, seq_len=32, max_predictions_per_seq=5, num_microbatches=0),
                        dict(name="phase2", num_steps=2, seq_len=64, max_predictions_per_seq=8, num_microbatches=0)]
            c.log_every = 2
            c.checkpoint_every = 2
            c.async_checkpoints = False
            c.progress = False
    else:
        raise ValueError(f"unknown variant {variant!r}: demo, smoke, paper, bert-base")
    return c
