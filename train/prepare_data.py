"""Tokenize a pretraining corpus once into sharded ArrayRecord files (+ meta.json and the tokenizer file).

    python train/prepare_data.py --input corpus/*.txt --vocab vocab.txt --out data/prepared --num_shards 64
    python train/prepare_data.py --tfds wikipedia/20230601.en --vocab vocab.txt --out data/wiki --num_shards 256
Text files: one sentence per line, a blank line between documents (BERT's create_pretraining_data format).
TFDS: one document per example, its text feature split into sentences (pretrain_data.split_sentences).
"""

import argparse
import json
import logging
import sys

from squeezebert_jax import pretrain_data
from squeezebert_jax.tokenizer import Tokenizer


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", nargs="+", help="text files")
    src.add_argument("--tfds", help="TFDS name, e.g. wikipedia/20230601.en")
    p.add_argument("--tfds_split", default="train")
    p.add_argument("--tfds_text_feature", default="text")
    p.add_argument("--tfds_data_dir", default=None)
    p.add_argument("--vocab", required=True, help="vocab.txt (WordPiece) or a SentencePiece .model")
    p.add_argument("--out", required=True)
    p.add_argument("--num_shards", type=int, default=8)
    p.add_argument("--max_line_chars", type=int, default=pretrain_data.MAX_LINE_CHARS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    stats = pretrain_data.CorpusStats()
    sources = args.input or pretrain_data.iter_tfds_documents(
        args.tfds, args.tfds_split, args.tfds_text_feature, args.tfds_data_dir, stats)
    meta = pretrain_data.prepare(sources, Tokenizer.from_file(args.vocab), args.out, args.num_shards, stats=stats,
                                 max_line_chars=args.max_line_chars)
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
