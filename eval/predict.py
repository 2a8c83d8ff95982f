"""Label new text with a fine-tuned model: one JSON line per input (label and probabilities, or a score; a tagger
(token classifier): the words and a tag per word; extractive QA: the answer's text, characters and probability;
multiple choice: the chosen ending and every choice's probability).

    python eval/predict.py --model runs/reviews/model --input new_reviews.txt --out predictions.jsonl
    python eval/predict.py --model runs/reviews/model --input new.csv --text_columns review --out predictions.jsonl
    python eval/predict.py --model runs/rte/model --input pairs.jsonl --text_columns premise,hypothesis --out p.jsonl
    python eval/predict.py --model runs/squad/model --input questions.jsonl --max_length 384 --out answers.jsonl

--input: .txt (a text per line; a pair as two tab-separated texts), .csv, .tsv or .jsonl (--text_columns: one column,
or two for pairs; default the file's only column, or "text"; QA: "question,context"; multiple choice: the run's
columns); each input holds as many texts as the model reads (its task.json text_columns). --out is refused before any
work when it exists (unless --overwrite), when its directory does not exist, when it is --input or inside --model
(always), and while another command writes it (OUT.lock). In Python:
squeezebert_jax.predict.Predictor(MODEL_DIR)(["a text", ...]) (a list of results; one str: one result).
"""

import argparse
import sys

from squeezebert_jax import cli, tasks
from squeezebert_jax.errors import InputError
from squeezebert_jax.predict import predict_file


def _max_length(text: str) -> int:
    """argparse type: tokens per input, as ``tasks.input_length`` takes them (the model's own bound comes later)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    try:
        return tasks.input_length(value, name="--max_length")
    except InputError as e:  # below the special tokens and a word of each text: one rule for every value
        raise argparse.ArgumentTypeError(str(e).removeprefix("--max_length=")) from None


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="MODEL_DIR of a fine-tuned model")
    p.add_argument("--input", required=True, help=".txt, .csv, .tsv or .jsonl")
    p.add_argument("--out", required=True, help="JSON lines to write (one per input), in an existing directory")
    p.add_argument("--text_columns", default="", help="the input's text column, or two for pairs (csv/jsonl)")
    p.add_argument("--max_length", type=_max_length, default=None,
                   help="tokens per input, at most the model's max_position_embeddings (default: 128, or that "
                        "maximum where it is less)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = p.parse_args(argv)
    cli.setup_logging(None)
    n = predict_file(args.model, args.input, args.out, args.text_columns, args.max_length, args.overwrite)
    print(f"{n} predictions -> {args.out}")


if __name__ == "__main__":
    sys.exit(cli.run(main))
