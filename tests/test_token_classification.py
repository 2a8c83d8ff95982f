"""Token classification from CoNLL files (tasks.ConllTask): word-to-piece label alignment equal to transformers'
``word_ids()`` alignment, entity precision/recall/F1 by conlleval's chunk rules, a tiny tagger trained to a high F1,
and loader errors naming file and line."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("tags, gold, pred, want", [
    # BILOU: two single-word entities side by side, one found (the default rules read U-X U-X as one entity: F1 0)
    (("O", "U-MISC"), ["O", "U-MISC", "U-MISC", "O"], ["O", "U-MISC", "O", "O"], (1.0, 0.5)),
    (("O", "B-PER", "I-PER", "L-PER", "U-LOC"), ["B-PER", "L-PER", "U-LOC"], ["B-PER", "I-PER", "U-LOC"], (1.0, 0.5)),
    # IOBES: an entity without its E- is no entity
    (("O", "B-PER", "E-PER", "S-LOC"), ["B-PER", "E-PER", "S-LOC"], ["B-PER", "O", "S-LOC"], (1.0, 0.5)),
    (("O", "B-PER", "I-PER"), ["B-PER", "I-PER", "O"], ["I-PER", "I-PER", "O"], (1.0, 1.0)),  # IOB1: conlleval's
])
def test_a_taggers_scores_read_its_tags_in_their_scheme(tags, gold, pred, want):
    """ConllTask.metrics takes the scheme from the task's tags (tasks.tag_scheme), as seqeval's strict mode
    (mode="strict" with that scheme) scores it."""
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval import scheme

    task = tasks.ConllTask("t", {}, tags)
    ids = lambda seq: np.asarray([[tags.index(t) for t in seq]])  # noqa: E731
    got = task.metrics(ids(pred), ids(gold))
    assert (got["precision"], got["recall"]) == pytest.approx(want)
    how = {"mode": "strict", "scheme": getattr(scheme, s)} if (s := tasks.tag_scheme(dict.fromkeys(tags))) else {}
    assert got["f1"] == pytest.approx(seqeval.f1_score([gold], [pred], **how))


def test_words_cut_by_the_length_count_their_entities_as_missed(init, tmp_path, caplog):
    """A sentence longer than max_seq_length: its cut words' entities are gold entities the model missed (seqeval on
    the whole sentence, the cut words predicted "O"), and a perfect tagger of what it sees scores recall < 1. The
    warning names the file and the first cut sentence's line (it named the task, the training file's stem)."""
    lines = ["john B-PER", "smith I-PER", "shot O", "the O", "film O", "in O", "new B-LOC", "york I-LOC", ". O", "",
             "mary B-PER", "shot O", "in O", "york B-LOC", ""]
    (tmp_path / "long.conll").write_text("\n".join(lines) + "\n")
    task = tasks.ConllTask("t", {"validation": str(tmp_path / "long.conll")},
                           tasks.tag_names_of(str(tmp_path / "long.conll")))
    examples = task.load("validation")
    with caplog.at_level("WARNING", logger="squeezebert_jax.tasks"):
        arrays = task.encode(examples, sj.Tokenizer.from_dir(init), 9)  # [CLS] + 7 pieces + [SEP]: "york" is cut
    assert (arrays["cut_labels"] != tasks.IGNORE).sum() == 2  # "york" and "."
    assert f"{tmp_path / 'long.conll'}: 2 words of 1 sentences (the first at line 1) lie past max_seq_length=9" \
        in caplog.text
    perfect = np.where(arrays["labels"] == tasks.IGNORE, 0, arrays["labels"])  # the gold tag of every seen word
    got = task.score(perfect, arrays)
    seqeval = pytest.importorskip("seqeval.metrics")
    gold = [list(e.tags) for e in examples]
    pred = [["B-PER", "I-PER", "O", "O", "O", "O", "B-LOC", "O", "O"], list(examples[1].tags)]
    assert got["recall"] == pytest.approx(seqeval.recall_score(gold, pred)) == pytest.approx(3 / 4)
    assert got["precision"] == pytest.approx(seqeval.precision_score(gold, pred)) == pytest.approx(3 / 4)
    assert got["f1"] == pytest.approx(seqeval.f1_score(gold, pred))


@pytest.mark.parametrize("word", ["\u200b", "\x07", "\u0301", "\u00ad"])
def test_a_word_the_tokenizer_reads_as_nothing_is_refused_naming_its_sentence(init, tmp_path, word):
    """A word of no text (a zero-width space, a bell, a lone combining accent that BERT's normaliser strips, a soft
    hyphen) would keep no piece and lose its tag from training and the scores: refused by file, line and word."""
    path = tmp_path / "odd.conll"
    path.write_text(f"-DOCSTART- O\n\nmary B-PER\nshot O\n\njohn B-ORG\n{word} B-PER\nsmith O\n")
    task = tasks.ConllTask("t", {"train": str(path)}, tasks.tag_names_of(str(path)))
    with pytest.raises(sj.errors.DataFileError, match=rf"odd.conll:7: word 2 of the sentence \({re.escape(repr(word))}"
                                                      r"\) holds nothing the tokenizer reads"):
        task.encode(task.load("train"), sj.Tokenizer.from_dir(init), 16)


def test_a_byte_order_mark_before_docstart_starts_no_sentence(tmp_path):
    path = tmp_path / "bom.conll"
    path.write_bytes(b"\xef\xbb\xbf-DOCSTART- -X- -X- O\n\njohn NN O B-PER\nshot VB O O\n")
    assert [(words, tags) for _, words, tags in tasks.read_conll(str(path))] == [(["john", "shot"], ["B-PER", "O"])]
    path.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf-DOCSTART- O\n\njohn B-PER\n")  # saved twice with a mark: still no word
    assert [(words, tags) for _, words, tags in tasks.read_conll(str(path))] == [(["john"], ["B-PER"])]
    path.write_text("-docstart- -X- -X- O\n\njohn NN O B-PER\n")  # the marker in any case starts no sentence
    assert [words for _, words, _ in tasks.read_conll(str(path))] == [["john"]]
    path.write_text("john B-PER\n\u200b\nshot O\n")  # a line that only looks blank (a zero-width space) is blank
    assert [words for _, words, _ in tasks.read_conll(str(path))] == [["john"], ["shot"]]


def test_a_special_token_as_a_word_is_counted_in_a_warning(tmp_path, caplog):
    """A word [SEP] or [PAD] is read as that token (its id, as BertTokenizerFast reads it): files.warn_texts counts
    the sentences, as it counts a file's rows."""
    path = tmp_path / "s.conll"
    path.write_text("john B-PER\n[SEP] O\n\nshot O\n\n[PAD] O\n")
    with caplog.at_level("WARNING"):
        tasks.ConllTask("t", {"train": str(path)}, ("B-PER", "O")).load("train")
    assert f"{path}: 2 of 3 rows have a text holding a special token written out ([SEP] at line 1)" in caplog.text


def test_a_taggers_test_file_is_checked_before_training(init, tmp_path):
    """The test file of a tagger is a CoNLL file like the others (a .jsonl or .csv one read as CoNLL made each line a
    word), and its words are checked when it is read, before any training: a word that would get no tag is named by
    its file and line (it used to fail after training, as "input 1")."""
    from squeezebert_jax import finetune, parallel

    train = _write_conll(tmp_path / "train.conll", 4, 0)
    for name in ("test.jsonl", "test.csv", "test.json"):
        c = _config(init, train, train)
        c.data.test_file = str(tmp_path / name)
        (tmp_path / name).write_text('{"tokens": ["John"]}\n')
        with pytest.raises(sj.errors.InputError, match=rf"^config.data.test_file='{tmp_path / name}': "
                                                       r"token_classification reads CoNLL files"):
            tasks.resolve(c)
    (tmp_path / "test.conll").write_text("john O\n\u200b O\nwas O\n")
    c = _config(init, train, train)
    c.data.test_file = str(tmp_path / "test.conll")
    with pytest.raises(sj.errors.DataFileError, match=rf"^{tmp_path / 'test.conll'}:2: word 2 of the sentence"):
        finetune.load_task_data(c, tasks.resolve(c), sj.Tokenizer.from_dir(init), str(tmp_path / "run"),
                                parallel.make_mesh(1))


def test_a_tagger_learns_the_entities_and_keeps_its_tag_names(init, tmp_path):
    train, dev = _write_conll(tmp_path / "train.conll", 192, 0), _write_conll(tmp_path / "dev.conll", 32, 1)
    res = ft.finetune(_config(init, train, dev, num_epochs=4), str(tmp_path / "run"))
    assert res["labels"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    assert res["best"]["validation/f1"] > 0.9 and {"validation/precision", "validation/recall"} <= set(res["best"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert type(model) is sj.SqueezeBertForTokenClassification
    assert model.config.id2label == dict(enumerate(res["labels"]))


def test_tags_that_differ_only_in_case_or_form_are_refused(tmp_path):
    """One tag written two ways would train as two classes (and seqeval reads "o" as no tag at all)."""
    for body, msg in (("john B-PER\nshot O\n\nmary b-per\nran O\n", r"t.conll:4: the sentence's tags: the label "
                       r"'b-per' differs from 'B-PER' \(line 1\) only in case"),
                      ("john B-PER\nshot O\n\nmary B-PER\nran o\n", r"t.conll:4: .*'o' differs from 'O'"),
                      ("john B-PER\nshot O\n\nmary Ｂ-PER\nran O\n", r"t.conll:4: .*'Ｂ-PER' differs from 'B-PER'"),
                      ("john B-PER\nshot O\n\nmary B-PER\u200b\nran O\n",
                       r"t.conll:4: .*'B-PER\\u200b' differs from 'B-PER' .*invisible characters"),
                      ("john B-PER\nshot O\n\nmary B-\nran O\n",
                       r"t.conll:4: the sentence's tag 'B-' names no entity"),
                      ("john B-PER\nshot O\n\nmary b-\nran O\n", r"t.conll:4: the sentence's tag 'b-' names no entity"),
                      # a lowercase prefix alone (no B-PER to be its twin): seqeval sees no entity in it
                      ("john b-per\nshot O\n\nmary i-per\nran O\n",
                       r"t.conll:1: the sentence's tags: the tag 'b-per' has a lowercase prefix.*'B-per'"),
                      # a digit 0 beside the letter O, and one value in three spellings: numbers, not tags
                      ("john B-PER\nshot 0\n", r"t.conll:1: the sentence's tag '0' is a number, not a tag name "
                                               r"\(O, B-PER, ...\); the letter O\?"),
                      ("john B-PER\nshot 1.0\n", r"t.conll:1: the sentence's tag '1.0' is a number"),
                      ("john B-PER\nshot O\n\nmary \u0412-PER\nran O\n",  # a Cyrillic capital Ve for the B
                       r"t.conll:4: .*'\u0412-PER' differs from 'B-PER' .*letters or punctuation drawn alike"),
                      # a prefix joined by a dash that is not the hyphen (U+2010: autocorrect)
                      ("john B\u2010PER\nshot O\n", r"t.conll:1: .*the tag 'B\u2010PER' joins its prefix with "
                                                     r"'\u2010' \(U\+2010\), not the hyphen '-' entity F1 reads: "
                                                     r"write it as 'B-PER'"),
                      # a type without a prefix (seqeval: MISC an entity of type ISC, OTHER an O), two schemes
                      ("john B-PER\nshot O\n\nmary MISC\nran O\n", r"t.conll:4: the sentence's tags: the tag 'MISC' "
                                                                    r"is neither O nor an entity's tag"),
                      ("john U-PER\nshot O\n\nmary S-PER\nran O\n", r"t.conll:1: .*'U-PER' is BILOU's, beside "
                                                                     r"'S-PER' of IOBES"),
                      # O alone (a tagger of one class, entity F1 0 whatever it predicts)
                      ("the O\nmovie O\n\ngood O\n", r"t.conll:1: the sentence's tags: O, and no entity's tag "
                                                         r"\(B-PER, I-LOC, ...\) anywhere"),
                      ("B-PER john\nO shot\n\nB-PER mary\nO ran\n",  # the columns the other way round
                       r"t.conll: no tag is O or an entity's \(B-PER, I-LOC, ...\): the tags read are 'john', "
                       r"'shot', 'mary', 'ran'; a line is a word, then its tag last")):
        (tmp_path / "t.conll").write_text(body)
        with pytest.raises(sj.errors.DataFileError, match=msg):
            tasks.tag_names_of(str(tmp_path / "t.conll"))


@pytest.mark.parametrize("body, msg", [
    # IOB's B-/I- beside an IOBES S-: strict IOBES reads B-LOC I-LOC without its E-LOC as no entity
    ("John S-PER\nlives O\n\nNew B-LOC\nYork I-LOC\n", r"t.conll:5: tag 'I-LOC' is not followed by I-LOC or E-LOC "
                                                       r"\(the next tag is 'O'\) in IOBES"),
    ("John S-PER\nlives O\n\nYork I-LOC\nnow E-LOC\n", r"t.conll:4: tag 'I-LOC' continues no B-LOC or I-LOC \(the "
                                                       r"tag before it is 'O'\) in IOBES"),
    ("John U-PER\nin O\n\nNew B-LOC\nYork L-PER\n", r"t.conll:4: tag 'B-LOC' is not followed by I-LOC or L-LOC "
                                                      r"\(the next tag is 'L-PER'\) in BILOU"),
    ("John U-PER\nin O\nYork L-LOC\n", r"t.conll:3: tag 'L-LOC' continues no B-LOC or I-LOC"),
])
def test_an_entity_its_scheme_cannot_read_is_refused_by_line(tmp_path, body, msg):
    """Once S-/E- (IOBES) or U-/L- (BILOU) tags are there, seqeval's strict mode scores the file: an entity that
    breaks the scheme would drop out of the scores without a word. The training file (tag_names_of) and every split
    read with the task's tags (ConllTask.load: a dev file's gold) are checked alike."""
    (tmp_path / "t.conll").write_text(body)
    with pytest.raises(sj.errors.DataFileError, match=msg):
        tasks.tag_names_of(str(tmp_path / "t.conll"))
    end, single = ("L", "U") if "U-PER" in body else ("E", "S")
    (tmp_path / "ok.conll").write_text(f"John {single}-PER\nin O\n\nNew B-LOC\nold I-LOC\nYork {end}-LOC\n")
    labels = ("O", "B-LOC", "I-LOC", f"{end}-LOC", f"{end}-PER", f"{single}-PER")
    task = tasks.ConllTask("t", {"train": str(tmp_path / "ok.conll"), "validation": str(tmp_path / "t.conll")},
                           labels)
    with pytest.raises(sj.errors.DataFileError, match=msg):
        task.load("validation")
    assert [e.tags for e in task.load("train")] == [(f"{single}-PER", "O"), ("B-LOC", "I-LOC", f"{end}-LOC")]
    assert tasks.tag_names_of(str(tmp_path / "ok.conll")) == ("O", *sorted(["B-LOC", "I-LOC", f"{end}-LOC",
                                                                            f"{single}-PER"]))


@pytest.mark.parametrize("text, msg", [
    ("john B-PER\nsmith\n", r"bad.conll:2: 1 fields, the file's first word line \(1\) has 2"),
    ("john B-PER\nnew york B-LOC\n", r"bad.conll:2: 3 fields, the file's first word line \(1\) has 2"),
    # the first word line is the one without its tag: it is named too
    ("cat\t\ndog\tO\n", r"bad.conll:2: 2 fields, the file's first word line \(1\) has 1; every line holds one word "
                       r"and its columns \(a word cannot hold a space\); or line 1 lacks a column \(an empty tag\)$"),
    ("-DOCSTART- -X- O\n\njohn NN B-PER\nsmith I-PER\n", r"bad.conll:4: 2 fields, .*\(3\) has 3"),
    ("john B-PER\ncaf\xe9 O\n", r"bad.conll:2:4: not UTF-8 text \(byte 0xe9\)"),
    ("john B-PER\n\nyork B-TOWN\n", r"bad.conll:3: tag 'B-TOWN' is not one of"),
    ("\n\n", r"bad.conll: no sentences"),
    ("the O\njohn B-PER\n-DOCSTART- O\nshot O\n", r"bad.conll:3: -DOCSTART- inside a sentence \(from line 1\)"),
    # the document marker written otherwise trained as a sentence's word (a dash lost, en dashes, no dashes)
    ("-DOCSTART O\n\njohn B-PER\n", r"bad.conll:1: '-DOCSTART' reads as CoNLL's document marker written otherwise"),
    ("\u2013DOCSTART\u2013 O\n\njohn B-PER\n", r"bad.conll:1: '\u2013DOCSTART\u2013' reads as CoNLL's document"),
    # CoNLL-U's comment lines: named as such, not as a short word line
    ("# a remark here\njohn B-PER\n", r"bad.conll:2: 2 fields, .*; line 1 is a comment line \(# \.\.\.\), which a "
                                    r"CoNLL file here does not hold"),
    ("john NN O B-PER\n\n# left\n", r"bad.conll:3: a comment line \('# left'; the word '#' tagged 'left'\?\)"),
    # CoNLL-U's own comment lines, in any spacing: named at once (# sent_id=1 read as a word tagged "sent_id=1")
    ("# sent_id=1\njohn B-PER\n", r"bad.conll:1: a comment line \('# sent_id=1': CoNLL-U's\)"),
    # ... and a note after '#' (read as the word '#' tagged 'comment'); '#' tagged O is a word (a tweet's)
    ("john B-PER\n\n# comment\nshot O\n", r"bad.conll:3: a comment line \('# comment'"),
    ("john B-PER\n#text O\n# sent_id = 2\n", r"bad.conll:3: a comment line \('# sent_id = 2': CoNLL-U's\)"),
    ("john B-PER\n\n#text = mary left\nmary B-PER\n", r"bad.conll:3: a comment line"),
])
def test_loader_errors_name_the_file_and_line(tmp_path, text, msg):
    train = _write_conll(tmp_path / "train.conll", 8, 0)
    (tmp_path / "bad.conll").write_bytes(text.encode("latin-1" if max(map(ord, text)) < 256 else "utf-8"))
    with pytest.raises(sj.errors.InputError, match=msg):
        task = tasks.resolve(_config("unused", train, tmp_path / "bad.conll"))
        task.load("train"), task.load("validation")
