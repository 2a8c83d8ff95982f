"""The compared networks pretrained the same way: small SqueezeBERT, BERT, ALBERT, MobileBERT (MLM + SOP) and ELECTRA
(replaced-token detection) encoders pretrained on the demo corpus for the same steps, batch and sequence
length, then each fine-tuned on one story task with the same recipe; one row per network: parameters, the end of
pretraining (MLM loss and accuracy; ELECTRA: its generator's, and the discriminator's accuracy), dev accuracy, and
wall time. The point is that one command runs the comparison end to end: at this scale the numbers are not the
paper's."""

from __future__ import annotations

import dataclasses
import os
import time

import ml_collections

from squeezebert_jax import corpus, finetune as ft, pretrain
from squeezebert_jax.benchmarks.timing import format_table
from squeezebert_jax.loop import require_finished
from squeezebert_jax.model import count_params, SqueezeBertConfig
from squeezebert_jax.pretrained import load_pretrained

# One width for all: hidden 128, 2 layers, 2 heads, FFN 512 (the demo's SqueezeBERT); ALBERT and ELECTRA project
# embeddings of 64 to it, as their small models do.
SHAPE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
             max_position_embeddings=128)
FAMILIES = {
    "SqueezeBERT": ("squeezebert-uncased", dict(embedding_size=128), "mlm_sop"),
    "BERT": ("bert-base-uncased", dict(embedding_size=128), "mlm_sop"),
    "ALBERT": ("albert-base-v2", dict(embedding_size=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
               "mlm_sop"),
    "ELECTRA (RTD)": ("electra-small-discriminator", dict(embedding_size=64), "rtd"),
    # MobileBERT's proportions at this width: a 128 body around a 32 bottleneck, 4 stacked FFNs of 128, 3-gram
    # embeddings of 32 (mobilebert-uncased: 512, 128, 512, 128)
    "MobileBERT": ("mobilebert-uncased", dict(embedding_size=32, intra_bottleneck_size=32, intermediate_size=128),
                   "mlm_sop"),
}


@dataclasses.dataclass
class Row:
    name: str
    params: int
    mlm_loss: float
    mlm_accuracy: float
    rtd_accuracy: float | None
    dev_accuracy: float
    pretrain_s: float
    finetune_s: float


def pretrain_config(base: ml_collections.ConfigDict, family: str, steps: int, batch: int, seq_len: int,
                    demo_docs: int) -> ml_collections.ConfigDict:
    """``base`` (train/configs/pretrain.py's demo) with ``family``'s encoder, one phase of ``steps`` x ``batch`` x
    ``seq_len`` on the demo corpus (``demo_docs`` documents)."""
    preset, overrides, objective = FAMILIES[family]
    c = ml_collections.ConfigDict(base.to_dict())
    c.model.preset, c.model.overrides = preset, dict(SHAPE, **overrides)
    c.objective = objective
    c.global_batch_size = batch
    c.phases = [dict(name="phase1", num_steps=steps, seq_len=seq_len,
                     max_predictions_per_seq=max(1, seq_len * 20 // 128))]  # 15%, as BERT's 20 of 128
    c.log_every, c.checkpoint_every = max(1, steps // 10), steps
    c.data.demo_num_docs = demo_docs
    c.progress = False
    return c


def run(pretrain_base: ml_collections.ConfigDict, finetune_base, workdir: str, steps: int, batch: int = 32,
        seq_len: int = 64, task: str = "qnli", epochs: int = 3, demo_docs: int = 4000, train_rows: int = 2000,
        families: tuple[str, ...] = tuple(FAMILIES), echo=print) -> list[Row]:
    """Pretrain and fine-tune each of ``families`` in ``workdir/<family>``; ``finetune_base(task)`` gives
    train/configs/glue.py's config for the task. The story task's files are written once, to ``workdir/glue``."""

    glue_dir = os.path.join(workdir, "glue")
    if not os.path.isdir(glue_dir):
        corpus.write_glue_tasks(glue_dir, num_train=train_rows, num_dev=max(50, train_rows // 4), num_test=10,
                                tasks=(task,))
    rows = []
    for name in families:
        run_dir = os.path.join(workdir, name.split()[0].lower())
        c = pretrain_config(pretrain_base, name, steps, batch, seq_len, demo_docs)
        t0 = time.perf_counter()
        final = require_finished(pretrain.train_and_evaluate(c, os.path.join(run_dir, "pretrain")),
                                 os.path.join(run_dir, "pretrain"), f"{name}'s pretraining")
        t1 = time.perf_counter()
        fc = finetune_base(task)
        fc.init_from, fc.data_dir, fc.num_epochs, fc.max_seq_length, fc.progress = (
            os.path.join(run_dir, "pretrain", "model"), glue_dir, epochs, seq_len, False)
        res = require_finished(ft.finetune(fc, os.path.join(run_dir, "finetune")), os.path.join(run_dir, "finetune"),
                               f"{name}'s fine-tuning")
        t2 = time.perf_counter()
        encoder = load_pretrained(os.path.join(run_dir, "pretrain", "model")).transformer
        row = Row(name, count_params(encoder), final["mlm_loss"], final["mlm_accuracy"], final.get("rtd_accuracy"),
                  100 * max(h["score"] for h in res["history"]), t1 - t0, t2 - t1)
        rows.append(row)
        echo(f"{name}: MLM {row.mlm_loss:.3f}, dev {row.dev_accuracy:.1f}, {row.pretrain_s + row.finetune_s:.0f} s")
    return rows


def table(rows: list[Row]) -> str:
    return format_table(
        ["network", "parameters", "MLM loss / accuracy at the end", "RTD accuracy", "dev accuracy",
         "pretrain s", "fine-tune s"],
        [[r.name, f"{r.params:,}", f"{r.mlm_loss:.3f} / {r.mlm_accuracy:.3f}",
          "-" if r.rtd_accuracy is None else f"{r.rtd_accuracy:.3f}", f"{r.dev_accuracy:.1f}",
          f"{r.pretrain_s:.0f}", f"{r.finetune_s:.0f}"] for r in rows])


def encoder_config(name: str) -> SqueezeBertConfig:
    """The encoder ``name`` is compared with (its preset at ``SHAPE``)."""
    preset, overrides, _ = FAMILIES[name]
    return SqueezeBertConfig.preset(preset, **dict(SHAPE, **overrides))
