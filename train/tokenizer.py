"""Train a WordPiece vocab.txt or a SentencePiece spiece.model on text files (one sentence/document a line).

    python train/tokenizer.py --input corpus.txt --out /tmp/vocab --vocab_size 30528 --kind wordpiece
    python train/tokenizer.py --input a.txt b.txt --out /tmp/spm --vocab_size 30000 --kind sentencepiece

WordPiece: uncased BERT normalization, [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4, writes OUT/vocab.txt.
SentencePiece: unigram, lowercased, the same specials at ids 0-4, writes OUT/spiece.model.
Either file loads with squeezebert_jax.tokenizer.Tokenizer.from_dir(OUT).
"""

import sys

from squeezebert_jax import cli
from squeezebert_jax.tokenizer import train_tokenizer


def main(argv=None) -> int:
    p = cli.ArgumentParser(description=__doc__)
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="training text file(s)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write vocab.txt / spiece.model into")
    p.add_argument("--vocab_size", type=cli.positive_int, required=True, help="vocabulary size, specials included")
    p.add_argument("--kind", choices=["wordpiece", "sentencepiece"], default="wordpiece")
    p.add_argument("--verbose", action="store_true", help="show the SentencePiece trainer's log")
    p.add_argument("--overwrite", action="store_true", help="replace a vocab.txt / spiece.model already in --out")
    args = p.parse_args(argv)
    cli.setup_logging(None)
    tok = train_tokenizer(args.input, args.out, args.vocab_size, args.kind, verbose=args.verbose,
                          overwrite=args.overwrite)
    print(f"wrote {tok.path}: {tok.kind}, vocab_size {tok.vocab_size}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
