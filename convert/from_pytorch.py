"""Convert a transformers PyTorch checkpoint (SqueezeBERT or BERT) into a squeezebert_jax MODEL_DIR.

    python convert/from_pytorch.py --src HF_DIR --out MODEL_DIR [--head SqueezeBertForSequenceClassification]

HF_DIR holds config.json and model.safetensors or pytorch_model.bin (read with weights_only=True), and
usually vocab.txt (copied along). Heads present in the source come across; a head the source lacks is
reported (and randomly initialised) — never silently.
"""

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from squeezebert_jax import count_params, import_torch  # noqa: E402
from squeezebert_jax.convert import head_name  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True, help="transformers checkpoint directory")
    p.add_argument("--out", required=True, help="MODEL_DIR to write")
    p.add_argument("--head", default=None, help="our head class (default: what the checkpoint holds)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    model = import_torch(args.src, args.out, head=args.head)
    print(f"wrote {args.out}: {head_name(model)}, {count_params(model):,} parameters"
          + (f"; randomly initialised (absent from source): {', '.join(model.newly_initialized)}"
             if model.newly_initialized else ""))


if __name__ == "__main__":
    main()
