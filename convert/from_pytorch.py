"""Convert a transformers PyTorch checkpoint (SqueezeBERT or BERT) into a squeezebert_jax MODEL_DIR.

    python convert/from_pytorch.py --src HF_DIR --out MODEL_DIR [--head SqueezeBertForSequenceClassification]
    # the released MNLI model: its config says LABEL_0..2; transformers' run_glue of the time used this order
    python convert/from_pytorch.py --src squeezebert-mnli --out models/squeezebert-mnli \
        --label-names contradiction,entailment,neutral

HF_DIR holds config.json and model.safetensors or pytorch_model.bin (read with weights_only=True), and
usually vocab.txt (copied along). Heads present in the source come across; a head the source lacks is
reported (and randomly initialised) — never silently. --label-names names a classifier's outputs (its
id2label) where the checkpoint's config does not; GLUE evaluation and fine-tuning reorder named outputs into the
task's label order (MNLI: entailment, neutral, contradiction, as TFDS).
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
    p.add_argument("--label-names", default=None,
                   help="comma-separated names of the classifier's outputs 0..n-1, e.g. contradiction,entailment,neutral")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    names = [n.strip() for n in args.label_names.split(",")] if args.label_names else None
    model = import_torch(args.src, args.out, head=args.head, label_names=names)
    print(f"wrote {args.out}: {head_name(model)}, {count_params(model):,} parameters"
          + (f"; randomly initialised (absent from source): {', '.join(model.newly_initialized)}"
             if model.newly_initialized else ""))


if __name__ == "__main__":
    main()
