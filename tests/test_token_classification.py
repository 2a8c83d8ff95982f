"""Token classification from CoNLL files (tasks.ConllTask): word-to-piece label alignment equal to transformers'
``word_ids()`` alignment, entity precision/recall/F1 by conlleval's chunk rules, a tiny tagger trained to a high F1,
and loader errors naming file and line."""

from __future__ import annotations

import numpy as np
import pytest

import squeezebert_jax as sj
from conftest import glue_config, tiny_init
from squeezebert_jax import finetune as ft
from squeezebert_jax import tasks

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "was", "shot", "in", "york", "##shire", "by",
         "john", "smith", "and", "mary", "jones", "new", "para", "##mount", "##s", "at", "."]
PERSONS = [("john", "smith"), ("mary", "jones"), ("mary",), ("john",)]
PLACES = [("york",), ("yorkshire",), ("new", "york")]


def _sentence(rng):
    """Words and IOB2 tags: '<person> shot the film in <place> .', with filler words around."""
    person, place = PERSONS[rng.integers(len(PERSONS))], PLACES[rng.integers(len(PLACES))]
    words = [*person, "shot", "the", "film", "in", *place, "."]
    tags = (["B-PER"] + ["I-PER"] * (len(person) - 1) + ["O"] * 4 + ["B-LOC"] + ["I-LOC"] * (len(place) - 1) + ["O"])
    if rng.random() < 0.5:
        words, tags = ["the", "film", "was", "shot", "by", *person, "."], ["O"] * 5 + tags[:len(person)] + ["O"]
    return words, tags


def _write_conll(path, n, seed, docstart=True):
    rng = np.random.default_rng(seed)
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for _ in range(n):
        words, tags = _sentence(rng)
        lines += [f"{w} NN O {t}" for w, t in zip(words, tags)] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    return tiny_init(tmp_path_factory.mktemp("tok") / "init", VOCAB)


def _config(init, train, dev, **kw):
    c = glue_config("rte", init, "", **{"learning_rate": 3e-3, "num_epochs": 3, "dropout": 0.0, **kw})
    c.task, c.data.kind = "files", "token_classification"
    c.data.train_file, c.data.validation_file = str(train), str(dev)
    return c


def test_alignment_equals_transformers_word_ids(init, tmp_path):
    import transformers

    path = _write_conll(tmp_path / "a.conll", 12, 0)
    task = tasks.ConllTask("a", {"train": str(path)}, tasks.tag_names_of(str(path)))
    examples = task.load("train")
    ours = task.encode(examples, sj.Tokenizer.from_dir(init), 16)
    hf = transformers.BertTokenizerFast(str(init / "vocab.txt"), do_lower_case=True)
    enc = hf([list(ex.words) for ex in examples], is_split_into_words=True, truncation=True, max_length=16,
             padding="max_length")
    for i, ex in enumerate(examples):
        want, previous = [], None
        for w in enc.word_ids(i):  # run_ner: the first piece of each word labelled, the rest -100
            want.append(-100 if w is None or w == previous else task.labels.index(ex.tags[w]))
            previous = w
        assert ours["input_ids"][i].tolist() == enc["input_ids"][i]
        assert ours["labels"][i].tolist() == want
    assert any("##" in hf.convert_ids_to_tokens(enc["input_ids"][i])[j] for i in range(12) for j in range(16))


@pytest.mark.parametrize("gold, pred, want", [
    ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]], (1.0, 1.0, 1.0)),
    ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "O", "O", "B-LOC"]], (0.5, 0.5, 0.5)),  # a cut span is wrong
    ([["B-PER", "I-PER", "O", "O"]], [["I-PER", "I-PER", "O", "B-LOC"]], (0.5, 1.0, 2 / 3)),  # I- after O starts one
    ([["O", "O"]], [["B-MISC", "O"]], (0.0, 0.0, 0.0)),
    ([["B-PER", "B-PER"], ["B-LOC"]], [["B-PER", "I-PER"], ["B-LOC"]], (0.5, 1 / 3, 0.4)),  # B-B is two entities
])
def test_entity_scores_by_hand(gold, pred, want):
    got = tasks.entity_scores(gold, pred)
    assert (got["precision"], got["recall"], got["f1"]) == pytest.approx(want)


def test_entity_scores_equal_seqevals():
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = np.random.default_rng(0)
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-ORG"]
    gold = [[names[j] for j in rng.integers(0, 7, 9)] for _ in range(40)]
    pred = [[names[j] for j in rng.integers(0, 7, 9)] for _ in range(40)]
    got = tasks.entity_scores(gold, pred)
    assert got["f1"] == pytest.approx(seqeval.f1_score(gold, pred))
    assert got["precision"] == pytest.approx(seqeval.precision_score(gold, pred))


def test_a_tagger_learns_the_entities_and_keeps_its_tag_names(init, tmp_path):
    train, dev = _write_conll(tmp_path / "train.conll", 192, 0), _write_conll(tmp_path / "dev.conll", 32, 1)
    res = ft.finetune(_config(init, train, dev, num_epochs=4), str(tmp_path / "run"))
    assert res["labels"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    assert res["best"]["validation/f1"] > 0.9 and {"validation/precision", "validation/recall"} <= set(res["best"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert type(model) is sj.SqueezeBertForTokenClassification
    assert model.config.id2label == dict(enumerate(res["labels"]))


@pytest.mark.parametrize("text, msg", [
    ("john B-PER\nsmith\n", r"bad.conll:2: 1 field\(s\), the file's first line has 2"),
    ("john B-PER\n\nyork B-TOWN\n", r"bad.conll:3: tag 'B-TOWN' is not one of"),
    ("\n\n", r"bad.conll: no sentences"),
])
def test_loader_errors_name_the_file_and_line(init, tmp_path, text, msg):
    train = _write_conll(tmp_path / "train.conll", 8, 0)
    (tmp_path / "bad.conll").write_text(text)
    with pytest.raises(sj.errors.InputError, match=msg):
        ft.finetune(_config(init, train, tmp_path / "bad.conll"), str(tmp_path / "run"))
