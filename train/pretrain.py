"""Pretrain SqueezeBERT (MLM + SOP, LAMB) — see train/configs/pretrain.py for the launch commands.

    python train/pretrain.py --config train/configs/pretrain.py:demo --workdir /tmp/sqb_demo

The console shows a progress bar, one line per log interval and a summary; WORKDIR/log.txt has the full log,
WORKDIR/metrics.jsonl the metrics, WORKDIR/config_history.jsonl the config of every start.
"""

import os
import time

from absl import flags
from ml_collections import config_flags

from squeezebert_jax import cli
from squeezebert_jax.pretrain import train_and_evaluate

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file:variant", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory: config, checkpoints, metrics.jsonl, model/")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    workdir, t0 = _WORKDIR.value, time.perf_counter()
    cli.setup_logging(os.path.join(workdir, "log.txt"))
    cli.enable_compilation_cache()
    print(f"pretraining in {workdir} (full log: {os.path.join(workdir, 'log.txt')})")
    final = train_and_evaluate(_CONFIG.value, workdir)
    elapsed = time.perf_counter() - t0
    if "loss" in final:
        print(f"last interval: loss {final['loss']:.4f} (mlm {final['mlm_loss']:.4f}, accuracy "
              f"{final['mlm_accuracy']:.3f}; sop {final['sop_loss']:.4f}, accuracy {final['sop_accuracy']:.3f}), "
              f"{final['seq_per_s']:.1f} seq/s; {elapsed:.0f} s in all")
    if final["preempted"]:
        print(f"stopped early: checkpoint saved, no model exported; run the same command again to resume "
              f"from {os.path.join(workdir, 'checkpoints')}")
    else:
        print(f"model saved to {os.path.join(workdir, 'model')} (convert/to_pytorch.py accepts it); "
              f"metrics in {os.path.join(workdir, 'metrics.jsonl')}")


if __name__ == "__main__":
    cli.run_absl(main)
