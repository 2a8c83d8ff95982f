"""Convert a squeezebert_jax MODEL_DIR into a transformers PyTorch checkpoint directory.

    python convert/to_pytorch.py --src MODEL_DIR --out HF_DIR [--model_type bert]

Writes config.json (with `architectures`) and model.safetensors that `transformers.AutoModel.from_pretrained`
and the matching SqueezeBertFor... class load with no missing or unexpected keys (a pretraining model keeps
its SOP head as `cls.seq_relationship.*`, as the released squeezebert-uncased does). --model_type bert
writes BERT keys (only for models whose group counts are all 1). HF_DIR must be a new or empty directory
(--overwrite: replace the files written into an existing one, refused where a file of another model, its
params.safetensors or task.json, would stay beside them), and never MODEL_DIR itself or a directory inside it.
"""

import os
import sys

from squeezebert_jax import cli, export_torch, load_pretrained
from squeezebert_jax.files import check_output_dir
from squeezebert_jax.convert import target_family, torch_architecture
from squeezebert_jax.predict import read_card
from squeezebert_jax.pretrained import model_kind
from squeezebert_jax.pretrained import not_a_model_dir


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--src", required=True, help="MODEL_DIR")
    p.add_argument("--out", required=True, help="transformers checkpoint directory to write (new or empty, unless "
                   "--overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out, replacing config.json, model.safetensors and tokenizer files")
    p.add_argument("--model_type", default=None,
                   choices=["squeezebert", "bert", "albert", "distilbert", "electra"],
                   help="transformers family to write (default: the model's own for ALBERT, DistilBERT and "
                        "ELECTRA, else squeezebert; bert when every group count is 1)")
    args = p.parse_args(argv)
    cli.setup_logging(None)
    if not os.path.isdir(args.src):  # a typo, or a file (its .ptl, its config.json), named as such
        raise not_a_model_dir(args.src, "config.json", "--src ")
    # before any work: never into MODEL_DIR, nor over files (a model there: replaced with --overwrite)
    check_output_dir(args.out, args.src, args.overwrite, writes=None)
    model = load_pretrained(args.src)
    family = target_family(model.config, args.model_type)
    kind = model_kind(model)
    card = read_card(args.src, kind, getattr(model, "num_labels", None)) if kind else {}
    export_torch(model, args.out, style=family, tokenizer_dir=args.src, overwrite=args.overwrite,
                 finetuning_task=card.get("glue_task"),  # a GLUE model's task, where run_glue writes it
                 card=card or None)  # and the task.json beside it, which from_pytorch takes back
    print(f"wrote {args.out}: {torch_architecture(model, family)} (model_type {family.style})")


if __name__ == "__main__":
    sys.exit(cli.run(main))
