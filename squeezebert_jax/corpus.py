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

from squeezebert_jax import glue
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import atomic_write
from squeezebert_jax.glue import GlueExample

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
        raise InputError(f"num_docs must be >= 0, got {num_docs}")
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
    def write(tmp):
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for doc in generate_documents(num_docs, seed):
                f.write("\n".join(doc) + "\n\n")

    return atomic_write(path, write)


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
    return atomic_write(path, "\n".join(demo_vocab()) + "\n")


# --------------------------------------------------------------------------------------------------
# GLUE-format tasks from the stories: every GLUE task's file layout, with labels a model can learn
# --------------------------------------------------------------------------------------------------

_POSITIVE = {"beautiful", "valuable", "funny", "wonderful", "rare"}  # _REACT words; the rest are negative


def _glue_examples(task: str, n: int, rng: np.random.Generator) -> list:
    """``n`` examples of ``task`` from fresh stories:

    * CoLA: a story sentence (acceptable, 1) or the same words shuffled (0);
    * SST-2: the reaction sentence, positive (1) for beautiful/valuable/funny/wonderful/rare;
    * MRPC, QQP: a sentence and itself with the hero's name changed everywhere (paraphrase, 1), or another
      sentence of the story (0);
    * STS-B: two sentences of one story, scored 5 x the Jaccard overlap of their word sets;
    * MNLI, AX: adjacent sentences in story order (entailment), swapped (contradiction), or from two
      stories (neutral);
    * QNLI, RTE: adjacent sentences in order (entailment) or swapped (not_entailment); WNLI the same with
      1 = in order.
    """

    out = []
    while len(out) < n:
        doc, other = _story(rng), _story(rng)
        j = int(rng.integers(len(doc) - 1))
        a, b = doc[j], doc[j + 1]
        if task == "cola":
            ok = bool(rng.random() < 0.5)
            words = a.split()
            if not ok:
                while words == a.split():
                    words = list(rng.permutation(words))
            out.append((" ".join(words), None, int(ok)))
        elif task == "sst2":
            said = [s for s in doc if " said it was " in s]
            if said:
                out.append((said[0], None, int(said[0].split()[-2] in _POSITIVE)))
        elif task in ("mrpc", "qqp"):
            name = doc[0].split()[doc[0].split().index("called") + 1]
            new = str(rng.choice([x for x in sum(_NAMES.values(), []) if x != name]))
            if rng.random() < 0.5:
                out.append((a, " ".join(new if w == name else w for w in a.split()), 1))
            else:
                out.append((a, doc[(j + 1 + int(rng.integers(len(doc) - 1))) % len(doc)], 0))
        elif task == "stsb":
            c = doc[int(rng.integers(len(doc)))]
            x, y = set(a.split()), set(c.split())
            out.append((a, c, 5.0 * len(x & y) / len(x | y)))
        elif task in ("mnli", "ax"):
            r = int(rng.integers(3))
            pair = [(a, b), (other[int(rng.integers(len(other)))], b), (b, a)][r]
            out.append((*pair, r))  # 0 entailment, 1 neutral, 2 contradiction
        else:  # qnli, rte (0 = entailment), wnli (1 = entailment)
            swap = bool(rng.random() < 0.5)
            label = int(swap) if task != "wnli" else int(not swap)
            out.append(((b, a) if swap else (a, b)) + (label,))
    return [GlueExample(i, x, y, lab) for i, (x, y, lab) in enumerate(out[:n])]


def write_glue_tasks(data_dir: str | os.PathLike, num_train: int = 800, num_dev: int = 200, num_test: int = 100,
                     seed: int = 0, tasks: tuple[str, ...] | None = None) -> str:
    """A GLUE_DIR of story tasks (see ``_glue_examples``) for ``tasks``, in the exact file layouts of the GLUE
    download script (``glue.write_glue_tsv``): every split, unlabeled test files, AX as diagnostic.tsv.
    Deterministic in ``seed``; returns ``data_dir``. ``tasks``: all of ``glue.TASKS`` (AX included) by default."""

    data_dir = os.fspath(data_dir)
    tasks = tuple(glue.TASKS) if tasks is None else tasks
    for t, task in enumerate(tasks):
        spec = glue.get_task(task)
        for s, split in enumerate(spec.splits):
            n = num_train if split == "train" else num_test if split.startswith("test") else num_dev
            ex = _glue_examples(task, n, np.random.default_rng([seed, t, s]))
            if split.startswith("test"):
                ex = [glue.GlueExample(e.idx, e.text_a, e.text_b, None) for e in ex]
            glue.write_glue_tsv(task, split, ex, data_dir)
    return data_dir
