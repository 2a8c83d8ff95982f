"""The project's own demo corpus: short generated stories whose sentence order is learnable.

Each document is a story told by ``TEMPLATES`` in a fixed order (introduction -> routine -> liking -> discovery
-> sharing -> reaction -> outcome -> closing); the first and last steps are always there and each middle step
with probability 0.8. A sentence's template therefore gives its position (``template_index``), so
sentence-order prediction is learnable, and MLM has structure to learn: the same names recur within a document,
pronouns agree with them, objects and places reappear. Nothing here is copied text; everything is drawn from a
seeded numpy Generator, so ``generate_documents(n, seed)`` is deterministic.

``demo_vocab`` is a small WordPiece vocabulary (< 300 entries) built from the templates and slot lists, plus
single letters, digits, punctuation and their ``##`` pieces, so any lowercase ASCII text tokenizes.
"""

from __future__ import annotations

import os
import re

import numpy as np

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_NAMES = {"she": ["anna", "maria", "lena", "sofia", "clara", "emma", "nora", "julia", "rosa", "ida"],
          "he": ["tom", "leo", "paul", "max", "ben", "sam", "hugo", "oscar", "felix", "jonas"]}
_POSSESSIVE = {"she": "her", "he": "his"}
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

# Story steps in document order; the last step is one of _END.
TEMPLATES = [
    "once there was a {adj} {noun} called {name} who lived in the {place} .",
    "every {time} {name} went to the {spot} to {act} .",
    "{pron} liked {acting} more than anything else in the {place} .",
    "one day {name} found a {oadj} {obj} near the {spot} .",
    "{pron} took the {obj} home and showed it to {poss} friend {friend} .",
    "{friend} looked at the {obj} and said it was {react} .",
    "after that {name} and {friend} went {acting} together every {time} .",
]
_MIDDLE_PROB = 0.8


def _story(rng: np.random.Generator) -> list[str]:
    pron = "she" if rng.random() < 0.5 else "he"
    name = str(rng.choice(_NAMES[pron]))
    pron2 = "she" if rng.random() < 0.5 else "he"
    friend = str(rng.choice([n for n in _NAMES[pron2] if n != name]))
    slots = dict(pron=pron, name=name, friend=friend, poss=_POSSESSIVE[pron],
                 adj=rng.choice(_ADJ), noun=rng.choice(_NOUN), place=rng.choice(_PLACE), spot=rng.choice(_SPOT))
    slots["act"], slots["acting"] = _ACT[rng.integers(len(_ACT))]
    slots.update(obj=rng.choice(_OBJ), oadj=rng.choice(_OBJ_ADJ), react=rng.choice(_REACT), time=rng.choice(_TIME))
    steps = [t.format(**slots) for t in TEMPLATES] + [str(rng.choice(_END))]
    middle = [s for s in steps[1:-1] if rng.random() < _MIDDLE_PROB]
    return [steps[0], *middle, steps[-1]]


def generate_documents(num_docs: int, seed: int = 0) -> list[list[str]]:
    """``num_docs`` stories (lists of 2-8 sentences, lowercase, space-separated tokens), deterministic in
    ``seed``."""
    if num_docs < 0:
        raise ValueError(f"num_docs must be >= 0, got {num_docs}")
    rng = np.random.default_rng(seed)
    return [_story(rng) for _ in range(num_docs)]


_TEMPLATE_RES = [re.compile("^" + re.sub(r"\\\{\w+\\\}", r"(\\w+)", re.escape(t)) + "$") for t in TEMPLATES]


def template_index(sentence: str) -> int:
    """The story position of a generated sentence: 0..6 for ``TEMPLATES``, 7 for a closing sentence;
    -1 if the grammar cannot have produced it. Within a document the indices strictly increase, which is what
    makes sentence-order prediction learnable on this corpus."""
    if sentence in _END:
        return len(TEMPLATES)
    for i, pattern in enumerate(_TEMPLATE_RES):
        if pattern.match(sentence):
            return i
    return -1


def write_corpus(path: str | os.PathLike, num_docs: int = 4000, seed: int = 0) -> str:
    """Write ``generate_documents(num_docs, seed)`` in BERT's create_pretraining_data format (one sentence per
    line, a blank line after each document), atomically; returns the path."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for doc in generate_documents(num_docs, seed):
            f.write("\n".join(doc) + "\n\n")
    os.replace(tmp, path)
    return path


def grammar_words() -> set[str]:
    """Every whole word the grammar can emit (template words, slot fillers, pronouns, closings)."""
    words = set(_ADJ + _NOUN + _PLACE + _SPOT + _OBJ + _OBJ_ADJ + _REACT + _TIME + sum(_NAMES.values(), []))
    words |= {w for pair in _ACT for w in pair} | set(_NAMES) | set(_POSSESSIVE.values())
    for t in TEMPLATES + _END:
        words |= {w for w in t.split() if not w.startswith("{")}
    return words


def demo_vocab() -> list[str]:
    """vocab.txt lines: [PAD]=0 [UNK] [CLS] [SEP] [MASK], the grammar's words (sorted), single letters, digits,
    punctuation, then ``##`` + each letter and digit (so any lowercase ASCII word tokenizes without [UNK])."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    punct = list(".,;:!?'\"()-")
    digits = [str(d) for d in range(10)]
    pieces = ["##" + c for c in letters + digits]
    return SPECIALS + sorted(grammar_words() - set(letters) - set(punct)) + letters + digits + punct + pieces


def write_demo_vocab(path: str | os.PathLike) -> str:
    """Write ``demo_vocab()`` (one token per line) to ``path`` atomically; returns the path."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(demo_vocab()) + "\n")
    os.replace(tmp, path)
    return path
