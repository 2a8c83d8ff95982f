"""Pretrain SqueezeBERT (MLM + SOP, LAMB) — see train/configs/pretrain.py for the launch commands.

    python train/pretrain.py --config train/configs/pretrain.py:demo --workdir /tmp/sqb_demo

The console shows a progress bar, one line per log interval and a summary; WORKDIR/log.txt has the full log,
WORKDIR/metrics.jsonl the metrics, WORKDIR/config_history.jsonl the config of every start.
"""

import os
import time

from absl import flags
from ml_collections import config_flags

from squeezebert_jax import cli, loop
from squeezebert_jax.pretrain import train_and_evaluate
from squeezebert_jax.pretrain_settings import check_settings, check_workdir

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file:variant", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory: config, checkpoints, metrics.jsonl, model/")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "write the run into a --workdir that holds files of no pretraining "
                               "run (files of the same names are replaced)")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    workdir, t0 = _WORKDIR.value, time.perf_counter()
    check_settings(_CONFIG.value)
    check_workdir(_CONFIG.value, workdir, _OVERWRITE.value)  # before log.txt is written there
    cli.setup_logging(os.path.join(workdir, "log.txt"))
    cli.enable_compilation_cache()
    print(f"pretraining in {workdir} (full log: {os.path.join(workdir, 'log.txt')})")
    final = train_and_evaluate(_CONFIG.value, workdir, overwrite=_OVERWRITE.value)
    elapsed = time.perf_counter() - t0
    if "loss" in final:
        t = "rtd" if "rtd_loss" in final else "sop"
        print(f"last interval: loss {final['loss']:.4f} (mlm {final['mlm_loss']:.4f}, accuracy "
              f"{final['mlm_accuracy']:.3f}; {t} {final[f'{t}_loss']:.4f}, accuracy {final[f'{t}_accuracy']:.3f}), "
              f"{final['seq_per_s']:.1f} seq/s; {elapsed:.0f} s in all")
    loop.require_finished(final, workdir, "pretraining")
    print(f"model saved to {os.path.join(workdir, 'model')} (convert/to_pytorch.py accepts it); "
          f"metrics in {os.path.join(workdir, 'metrics.jsonl')}")


if __name__ == "__main__":
    cli.run_absl(main)
