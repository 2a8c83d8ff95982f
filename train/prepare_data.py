"""Tokenize a pretraining corpus once into sharded ArrayRecord files (+ meta.json and the tokenizer file).

    python train/prepare_data.py --input corpus/*.txt --vocab vocab.txt --out data/prepared --num_shards 64
    python train/prepare_data.py --tfds wikipedia/20230601.en --vocab vocab.txt --out data/wiki --num_shards 256
Text files: one sentence per line, a blank line between documents (BERT's create_pretraining_data format), UTF-8: a
file with more than --max_invalid_utf8 of its bytes not UTF-8 text is refused (below that, counted and reported).
TFDS: one document per example, its text feature split into sentences (pretrain_data.split_sentences).
An --out that already holds files (an earlier preparation) is refused unless --overwrite; the earlier preparation
stays valid until the new meta.json is written. One preparation at a time writes into --out (OUT/.lock); the rerun
of one that failed (a full disk, say) needs no --overwrite. Library logs go to OUT/prepare_log.txt.
"""

import argparse
import json
import os
import sys

from squeezebert_jax import cli, files, pretrain_data
from squeezebert_jax.tokenizer import TOKENIZER_FILE_NAMES, Tokenizer

LOG_NAME = "prepare_log.txt"
WHAT = "data preparation"


def _shards(s: str) -> int:
    n = cli.positive_int(s)
    if n > pretrain_data.max_shards():
        raise argparse.ArgumentTypeError(f"{n}: {pretrain_data.SHARDS_VALID.format(pretrain_data.max_shards())}")
    return n


def _share(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{v} is not a share in [0, 1]")
    return v


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", nargs="+", help="text files")
    src.add_argument("--tfds", help="TFDS name, e.g. wikipedia/20230601.en")
    p.add_argument("--tfds_split", default="train")
    p.add_argument("--tfds_text_feature", default="text")
    p.add_argument("--tfds_data_dir", default=None)
    p.add_argument("--vocab", required=True, help="vocab.txt (WordPiece) or a SentencePiece .model")
    p.add_argument("--out", required=True)
    p.add_argument("--overwrite", action="store_true", help="replace the preparation (files) already in --out")
    p.add_argument("--num_shards", type=_shards, default=8)
    p.add_argument("--max_line_chars", type=cli.positive_int, default=pretrain_data.MAX_LINE_CHARS)
    p.add_argument("--max_invalid_utf8", type=_share, default=pretrain_data.MAX_INVALID_UTF8,
                   help="refuse a text file with more than this share of its bytes not UTF-8 text (default %(default)s)")
    args = p.parse_args(argv)
    # Everything that can be checked is checked before anything is written.
    inputs = files.check_text_files(args.input) if args.input else None
    files.check_inputs_not_inside(args.out, [*(inputs or ()), args.vocab])
    tokenizer = Tokenizer.from_file(args.vocab)
    check_out(args.out, args.overwrite)
    # the log first: it records the directories it makes, which a refused preparation takes away again (cli.run)
    cli.setup_logging(os.path.join(args.out, LOG_NAME))
    with files.RunLock(args.out, WHAT, logs=(LOG_NAME,)):  # one preparation at a time into --out
        check_out(args.out, args.overwrite)  # again, now that no other run can write there: one may have just ended
        stats = pretrain_data.CorpusStats()
        sources = inputs or pretrain_data.iter_tfds_documents(
            args.tfds, args.tfds_split, args.tfds_text_feature, args.tfds_data_dir, stats)
        meta = pretrain_data.prepare(sources, tokenizer, args.out, args.num_shards, stats=stats,
                                     max_line_chars=args.max_line_chars, max_invalid_utf8=args.max_invalid_utf8)
    print(json.dumps(meta, indent=2))
    return 0


def check_out(out: str, overwrite: bool) -> None:
    """--out is empty, or holds a preparation's leftovers only (a failed run's log and lock; an unfinished
    preparation: shards and the tokenizer file, no meta.json), or --overwrite was given."""
    ignore = (LOG_NAME, files.LOCK_NAME)
    if (os.path.isdir(out) and files.read_lock(out).get("what") == WHAT
            and not os.path.exists(os.path.join(out, "meta.json"))):
        ignore += tuple(n for n in os.listdir(out) if n.startswith(("shard-", ".tmp")) or n in TOKENIZER_FILE_NAMES)
    # never into a model, nor into another job's directory
    files.check_output_dir(out, overwrite=overwrite, ignore=ignore, writes="prepared data", job=WHAT)


if __name__ == "__main__":
    sys.exit(cli.run(main))
