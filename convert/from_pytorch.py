"""Convert a transformers PyTorch checkpoint (SqueezeBERT or BERT) into a squeezebert_jax MODEL_DIR.

    python convert/from_pytorch.py --src HF_DIR --out MODEL_DIR [--head SqueezeBertForSequenceClassification]
    # the released MNLI model: its config says LABEL_0..2; transformers' run_glue of the time used this order
    python convert/from_pytorch.py --src squeezebert-mnli --out models/squeezebert-mnli \
        --label-names contradiction,entailment,neutral

--out must be a new or empty directory (--overwrite: replace the files written into an existing one, refused where a
file of another model, its model.safetensors or task.json, would stay beside them) and never --src itself or a
directory inside it.

HF_DIR holds config.json and model.safetensors or pytorch_model.bin (read with weights_only=True), and
usually vocab.txt (copied along). Heads present in the source come across; a head the source lacks is
reported (and randomly initialised) — never silently. --label-names names a classifier's outputs (its
id2label) where the checkpoint's config does not; GLUE evaluation and fine-tuning reorder named outputs into the
task's label order (MNLI: entailment, neutral, contradiction, as TFDS).

Refused in one line, with nothing written: a weight tensor that is not floating-point (int, bool, ...) or holds NaN /
inf (named, with its dtype or the count); a config.json value out of range (e.g. layer_norm_eps <= 0); a file of
--src that is a symlink to somewhere outside it; a vocab.txt lacking one of [PAD] [UNK] [CLS] [SEP] [MASK], repeating
a line or of more tokens than the model's vocab_size; no tokenizer file at all (--no-tokenizer: the weights alone).
"""

import os
import sys

from squeezebert_jax import cli, count_params, import_torch
from squeezebert_jax.convert import check_head, head_name
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import check_output_dir
from squeezebert_jax.predict import read_card
from squeezebert_jax.pretrained import model_kind, tokenizer_files
from squeezebert_jax.tasks import HEAD_KINDS, declared_labels
from squeezebert_jax.tokenizer import TOKENIZER_FILE_NAMES


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--src", required=True, help="transformers checkpoint directory")
    p.add_argument("--out", required=True, help="MODEL_DIR to write (new or empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out, replacing config.json, params.safetensors and tokenizer files")
    p.add_argument("--head", default=None, help="our head class (default: what the checkpoint holds)")
    p.add_argument("--label-names", default=None,
                   help="comma-separated names of the classifier's outputs 0..n-1, e.g. contradiction,entailment,neutral")
    p.add_argument("--no-tokenizer", action="store_true",
                   help="convert a --src that holds no tokenizer file (the MODEL_DIR then reads no text by itself)")
    args = p.parse_args(argv)
    cli.setup_logging(None)
    # Refuse before reading any weights: a misspelt head, an --out that would overwrite something.
    check_head(args.head, "--head")
    if not os.path.isdir(args.src):
        raise FileNotFoundError(f"--src {args.src}: no such directory (expected a transformers checkpoint directory)")
    check_output_dir(args.out, args.src, args.overwrite, writes=None)
    if not args.no_tokenizer and not any(n in TOKENIZER_FILE_NAMES for n, _ in tokenizer_files(args.src)):
        fast = (" (its tokenizer.json, a fast tokenizer's file, is not read here: transformers writes the vocabulary "
                "beside it with AutoTokenizer.from_pretrained(SRC).save_pretrained(SRC, legacy_format=True))"
                if os.path.isfile(os.path.join(args.src, "tokenizer.json")) else "")
        raise InputError(f"--src {args.src}: no tokenizer file ({', '.join(TOKENIZER_FILE_NAMES)}){fast}; a MODEL_DIR "
                         "reads text with it: add the checkpoint's vocabulary, or pass --no-tokenizer for the weights "
                         "alone")
    # each name read as config.data.labels reads them: none empty, none twice (1 and 1.0 are one)
    names = list(declared_labels(args.label_names, "--label-names")) if args.label_names is not None else None
    # a task.json to_pytorch wrote beside the checkpoint (how predict reads the model's inputs), checked before the work
    card = read_card(args.src) if os.path.lexists(os.path.join(args.src, "task.json")) else None
    if card and args.head and not _card_fits(args.src, args.head):  # a new head: the card is the saved head's
        print(f"note: {os.path.join(args.src, 'task.json')} describes the checkpoint's own head, not --head "
              f"{args.head}: not carried")
        card = None
    def check(model):  # ... and against the model it describes, before the MODEL_DIR is written
        read_card(args.src, model_kind(model), getattr(model, "num_labels", None))

    model = import_torch(args.src, args.out, head=args.head, label_names=names, overwrite=args.overwrite, card=card,
                         check=check if card else None)
    print(f"wrote {args.out}: {head_name(model)}, {count_params(model):,} parameters"
          + (f"; randomly initialised (absent from source): {', '.join(model.newly_initialized)}"
             if model.newly_initialized else ""))


def _card_fits(src: str, head: str) -> bool:
    """Whether ``src``'s task.json describes a model of ``head``'s kind (a classifier's card, a tagger's, ...)."""
    kind = next((k for k, h in HEAD_KINDS.items() if h == head), None)
    if kind is None:  # a pretraining or bare encoder model: no card describes one
        return False
    try:
        read_card(src, kind)
    except InputError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(cli.run(main))
