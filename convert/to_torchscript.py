"""Export a MODEL_DIR to a TorchScript lite-interpreter file (.ptl), the paper's mobile latency path.

    python convert/to_torchscript.py --src MODEL_DIR --out model.ptl [--seq-len 128] [--batch 1]

Loads our model, converts it to the transformers PyTorch class of its head (SqueezeBert*, or Bert* when all
group counts are 1; a ForPreTraining model exports its MLM logits through the ...ForMaskedLM class), traces
it on (input_ids, attention_mask, token_type_ids), freezes it, applies optimize_for_mobile when PyTorch has
XNNPACK, saves it with _save_for_lite_interpreter, then reloads it with the lite interpreter and checks its
outputs against the Flax model on padded inputs (max |diff| <= --tol). Exit status 1 when the check fails.
The arguments are checked before any work: --seq-len, --batch, --num-choices >= 1, --out a file path (not a
directory) that does not exist yet unless --overwrite.
"""

import os
import sys

from squeezebert_jax import cli, load_pretrained
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import check_output_file
from squeezebert_jax.mobile import DEFAULT_TOL, ParityError, export_lite
from squeezebert_jax.pretrained import not_a_model_dir


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--src", required=True, help="MODEL_DIR (or a transformers checkpoint directory)")
    p.add_argument("--out", required=True, help=".ptl file to write")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--seq-len", type=cli.positive_int, default=None,
                   help="tokens per input traced (default: 128, or the model's max_position_embeddings where fewer)")
    p.add_argument("--batch", type=cli.positive_int, default=1)
    p.add_argument("--num-choices", type=cli.positive_int, default=None,
                   help="choices per example (multiple-choice heads only; default 2)")
    p.add_argument("--tol", type=cli.nonnegative_float, default=DEFAULT_TOL, help="max |lite - Flax| allowed")
    p.add_argument("--no-optimize", action="store_true", help="skip optimize_for_mobile even with XNNPACK")
    args = p.parse_args(argv)
    cli.setup_logging(None)
    if not os.path.isdir(args.src):  # a typo, or a file (its .ptl, its config.json), named as such
        raise not_a_model_dir(args.src, "config.json", "--src ")
    check_output_file(args.out, args.overwrite, inputs=(args.src,))  # before the minute-long export
    model = load_pretrained(args.src)
    choice = type(model).__name__.endswith("ForMultipleChoice")
    if args.num_choices is not None and not choice:
        raise InputError(f"--num-choices {args.num_choices}: {args.src} holds a {type(model).__name__}, not a "
                         "multiple-choice model; leave the flag out")
    if type(model).__name__ == "SqueezeBertForPreTraining":
        print("note: ForPreTraining model: exporting the MLM logits (transformers' MaskedLM class); "
              "the SOP head is not exported")
    try:
        seq_len = args.seq_len or min(128, model.config.max_position_embeddings)  # a 64-position model: 64
        result = export_lite(model, args.out, batch=args.batch, seq_len=seq_len, num_choices=args.num_choices or 2,
                             tol=args.tol, optimize=not args.no_optimize, overwrite=args.overwrite)
    except ParityError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    print(f"OK {result.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
