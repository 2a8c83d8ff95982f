"""Fine-tune on a GLUE task — see train/configs/glue.py for the launch commands.

    python train/finetune.py --config train/configs/glue.py:rte --config.init_from MODEL_DIR \
        --config.data_dir GLUE_DIR --workdir DIR

The run uses every device (data parallel; --config.fsdp shards the weights too) and checkpoints every
--config.checkpoint_every steps and at each epoch's end: after a preemption (SIGTERM) or a crash, the same command
resumes it exactly. The console shows a progress bar, warnings and the best epoch's metrics; WORKDIR/log.txt has the
full log, WORKDIR/metrics.jsonl the training and evaluation metrics.
"""

import json
import os

from absl import app, flags
from ml_collections import config_flags

from squeezebert_jax import cli, loop
from squeezebert_jax.finetune import finetune
from squeezebert_jax.finetune_settings import check_workdir

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file:task", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory: config, checkpoints, metrics.jsonl, eval_results.json, model/")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "write the run into a --workdir that holds files of no fine-tuning "
                               "run (files of the same names are replaced)")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    if not _CONFIG.value.init_from:
        raise app.UsageError("--config.init_from MODEL_DIR is required")
    check_workdir(_CONFIG.value, _WORKDIR.value, _OVERWRITE.value)  # before log.txt is written there
    cli.setup_logging(os.path.join(_WORKDIR.value, "log.txt"))
    cli.enable_compilation_cache()
    results = loop.require_finished(finetune(_CONFIG.value, _WORKDIR.value, overwrite=_OVERWRITE.value),
                                    _WORKDIR.value, "fine-tuning")
    print(json.dumps(results["best"], indent=2))
    print(f"best model: {os.path.join(_WORKDIR.value, 'model')}")


if __name__ == "__main__":
    cli.run_absl(main)
