"""Pretrain SqueezeBERT (MLM + SOP, LAMB) — see train/configs/pretrain.py for the launch commands.

    python train/pretrain.py --config train/configs/pretrain.py:demo --workdir /tmp/sqb_demo
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from squeezebert_jax.pretrain import train_and_evaluate  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "ml_collections config file:variant", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory: config, checkpoints, metrics.jsonl, model/")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    del argv
    logging.getLogger().setLevel(logging.INFO)
    final = train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    print("final metrics:", {k: round(v, 4) for k, v in final.items() if isinstance(v, float)})
    if final["preempted"]:
        print(f"stopped early: checkpoint saved, no model exported; run the same command again to resume "
              f"from {os.path.join(_WORKDIR.value, 'checkpoints')}")
    else:
        print(f"model saved to {os.path.join(_WORKDIR.value, 'model')} (convert/to_pytorch.py accepts it)")


if __name__ == "__main__":
    app.run(main)
