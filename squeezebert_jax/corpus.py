"""The project's own demo corpus: short generated stories whose sentence order is learnable.

Each document is a story told by templates in a fixed order (introduction -> routine -> discovery -> sharing
-> reaction -> outcome -> closing), with a random subset of the middle steps, so a sentence's template gives
its position: sentence-order prediction is learnable, and MLM has structure to learn (the same names recur in
a document, pronouns agree with them, objects reappear). Nothing here is copied text.
"""

from __future__ import annotations

import os

import numpy as np

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_NAMES = {"she": ["anna", "maria", "lena", "sofia", "clara", "emma", "nora", "julia", "rosa", "ida"],
          "he": ["tom", "leo", "paul", "max", "ben", "sam", "hugo", "oscar", "felix", "jonas"]}
_ADJ = ["small", "brave", "quiet", "clever", "old", "young", "happy", "curious", "kind", "tired"]
_NOUN = ["fox", "farmer", "baker", "sailor", "painter", "teacher", "rabbit", "miller", "doctor", "cat"]
_PLACE = ["village", "forest", "city", "valley", "harbor", "garden", "castle", "island", "mountain", "river"]
_SPOT = ["market", "bridge", "well", "library", "meadow", "lake", "station", "bakery", "field", "beach"]
_ACT = [("read", "reading"), ("fish", "fishing"), ("paint", "painting"), ("sing", "singing"), ("walk", "walking"),
        ("draw", "drawing"), ("swim", "swimming"), ("work", "working"), ("play", "playing"), ("cook", "cooking")]
_OBJ = ["key", "map", "box", "letter", "stone", "coin", "book", "lamp", "ring", "shell"]
_OBJ_ADJ = ["golden", "strange", "heavy", "shiny", "broken", "tiny", "ancient", "red", "blue", "magic"]
_REACT = ["beautiful", "useless", "valuable", "funny", "dangerous", "wonderful", "rare", "ordinary"]
_TIME = ["morning", "evening", "day", "week"]
_END = ["that was the end of the story .", "and so the story ends .", "nobody forgot that day .",
        "they still talk about it ."]


def _story(rng: np.random.Generator) -> list[str]:
    pron = "she" if rng.random() < 0.5 else "he"
    name = rng.choice(_NAMES[pron])
    pron2 = "she" if rng.random() < 0.5 else "he"
    friend = rng.choice([n for n in _NAMES[pron2] if n != name])
    poss = "her" if pron == "she" else "his"
    adj, noun, place, spot = rng.choice(_ADJ), rng.choice(_NOUN), rng.choice(_PLACE), rng.choice(_SPOT)
    act, acting = _ACT[rng.integers(len(_ACT))]
    obj, oadj, react, time = rng.choice(_OBJ), rng.choice(_OBJ_ADJ), rng.choice(_REACT), rng.choice(_TIME)
    steps = [
        f"once there was a {adj} {noun} called {name} who lived in the {place} .",
        f"every {time} {name} went to the {spot} to {act} .",
        f"{pron} liked {acting} more than anything else in the {place} .",
        f"one day {name} found a {oadj} {obj} near the {spot} .",
        f"{pron} took the {obj} home and showed it to {poss} friend {friend} .",
        f"{friend} looked at the {obj} and said it was {react} .",
        f"after that {name} and {friend} went {acting} together every {time} .",
        rng.choice(_END),
    ]
    middle = [s for s in steps[1:-1] if rng.random() < 0.8]
    return [steps[0], *middle, steps[-1]]


def generate_documents(num_docs: int, seed: int = 0) -> list[list[str]]:
    """``num_docs`` stories (lists of sentences), deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    return [_story(rng) for _ in range(num_docs)]


def write_corpus(path: str | os.PathLike, num_docs: int = 4000, seed: int = 0) -> str:
    """BERT's create_pretraining_data format: one sentence per line, a blank line between documents."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for doc in generate_documents(num_docs, seed):
            f.write("\n".join(doc) + "\n\n")
    os.replace(tmp, path)
    return path


def demo_vocab() -> list[str]:
    """A WordPiece vocab covering the grammar: specials, every word, punctuation, letters and ##letters."""
    words = set(_ADJ + _NOUN + _PLACE + _SPOT + _OBJ + _OBJ_ADJ + _REACT + _TIME + sum(_NAMES.values(), []))
    words |= {w for a in _ACT for w in a} | set(_NAMES)
    for doc in generate_documents(200, seed=12345):  # template words
        for s in doc:
            words |= set(s.split())
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    punct = list(".,;:!?'\"()-")
    digits = [str(d) for d in range(10)]
    pieces = ["##" + c for c in letters + digits]
    return SPECIALS + sorted(words - set(letters) - set(punct)) + letters + digits + punct + pieces


def write_demo_vocab(path: str | os.PathLike) -> str:
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(demo_vocab()) + "\n")
    return path
