"""Own data from datasets instead of files (squeezebert_jax.sources): ``hf:DIR:SPLIT`` (a datasets dataset saved with
save_to_disk) and ``tfds:NAME:SPLIT`` (TFDS mock data in a real builder's features), for classification (ClassLabel
names become the model's labels), token classification (a Sequence of ClassLabel tags) and SQuAD rows; errors name
the dataset and row."""

from __future__ import annotations

import re

import numpy as np
import pytest

import squeezebert_jax as sj
from conftest import VOCAB, WORDS, glue_config, tiny_init
from squeezebert_jax import finetune as ft
from squeezebert_jax import errors, sources, squad, tasks

datasets = pytest.importorskip("datasets")


def _texts(rng, y):
    return [" ".join([*rng.choice(WORDS[6:], 2), rng.choice(WORDS[:3] if t else WORDS[3:6]), "the"]) for t in y]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A DatasetDict on disk: train (384) and validation (32) rows of text and a ClassLabel (neg, pos); -1 marks an
    unlabelled test row."""
    rng = np.random.default_rng(0)
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos"])})
    splits = {}
    for name, n in (("train", 384), ("validation", 32), ("test", 4)):
        y = rng.integers(0, 2, n)
        splits[name] = datasets.Dataset.from_dict({"text": _texts(rng, y),
                                                   "label": [-1] * n if name == "test" else y.tolist()}, features)
    path = tmp_path_factory.mktemp("hf") / "reviews"
    datasets.DatasetDict(splits).save_to_disk(str(path))
    return path


def _config(init, train, dev, **kw):
    c = glue_config("rte", init, "", **{"learning_rate": 3e-3, "num_epochs": 3, "dropout": 0.0, **kw})
    c.task, c.data.train_file, c.data.validation_file = "files", train, dev
    c.data.text_columns = "text"
    return c


def test_a_saved_datasets_dataset_trains_with_its_class_label_names(saved, tmp_path):
    init = tiny_init(tmp_path / "init", VOCAB)
    res = ft.finetune(_config(init, f"hf:{saved}:train", f"hf:{saved}:validation"), str(tmp_path / "run"))
    assert res["labels"] == ["neg", "pos"] and res["best"]["validation/accuracy"] > 0.9
    assert sj.load_pretrained(tmp_path / "run" / "model").config.id2label == {0: "neg", 1: "pos"}
    # an unlabelled split (ClassLabel -1) reads as a test file without labels
    task = tasks.FileTask("r", "classification", {"train": f"hf:{saved}:train", "test": f"hf:{saved}:test"}, ("text",),
                          "label", ("neg", "pos"))
    assert [e.label for e in task.load("test")] == [None] * 4
    # ... and in a training split it is named by row ("no label column 'label'", though the dataset has one)
    with pytest.raises(errors.DataFileError, match=rf"^hf:{saved}:test:1: column 'label': the label is null \(a "
                                                   r"dataset's class label -1: unlabelled\); every training and"):
        tasks.label_names_of(f"hf:{saved}:test", "label")


@pytest.mark.parametrize("spec", ["tfds:huggingface:evil:train", "tfds:kaggle:someone/data"])
def test_a_tfds_community_namespace_is_refused_before_any_connection(spec, monkeypatch):
    """tfds:huggingface:NAME went to the Hugging Face hub (a ConnectError here; a download and its builder where a
    network is), past hf:'s offline guard: refused by its spec, before TFDS is imported."""
    import builtins

    real_import = builtins.__import__

    def no_tfds(name, *args, **kwargs):
        assert not name.startswith("tensorflow_datasets"), "TFDS was imported"
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tfds)
    with pytest.raises(errors.DataFileError, match=rf"^{spec}: '.*' names a TFDS community namespace \(\w+:\), whose "
                                                   r"datasets TFDS fetches from elsewhere"):
        list(sources.rows(spec))


def test_a_tfds_dataset_reads_in_its_builders_features():
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    def as_dataset(self, split, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices({"text": [b"a good movie", "caf\u00e9 bad".encode()],
                                                   "label": np.array([1, 0], np.int64)})

    with tfds.testing.mock_data(as_dataset_fn=as_dataset, policy=tfds.testing.MockPolicy.USE_CODE):
        rows = list(sources.rows("tfds:imdb_reviews:test"))
        names = tasks.label_names_of("tfds:imdb_reviews:train", "label")
    assert rows == [(1, {"text": "a good movie", "label": "pos"}), (2, {"text": "caf\u00e9 bad", "label": "neg"})]
    assert names == ("neg", "pos")


def test_tagged_sentences_and_squad_rows_from_datasets(tmp_path):
    tags = datasets.ClassLabel(names=["O", "B-PER", "I-PER"])
    ner = datasets.Dataset.from_dict({"tokens": [["john", "smith", "was", "here"], ["mary"]],
                                      "ner_tags": [[1, 2, 0, 0], [1]]},
                                     datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                                        "ner_tags": datasets.Sequence(tags)}))
    ner.save_to_disk(str(tmp_path / "ner"))
    c = glue_config("rte", "x", "")
    c.task, c.data.kind, c.data.train_file = "files", "token_classification", f"hf:{tmp_path / 'ner'}"
    task = tasks.resolve(c)
    assert task.labels == ("O", "B-PER", "I-PER")
    assert [(e.words, e.tags) for e in task.load("train")] == [
        (("john", "smith", "was", "here"), ("B-PER", "I-PER", "O", "O")), (("mary",), ("B-PER",))]

    context = "John Smith shot the film."
    qa = datasets.Dataset.from_dict({"id": ["a", "b"], "question": ["Who shot it?", "Who sold it?"],
                                     "context": [context, context],
                                     "answers": [{"text": ["John Smith"], "answer_start": [0]},
                                                 {"text": [], "answer_start": []}]})
    qa.save_to_disk(str(tmp_path / "qa"))
    got = squad.read_squad(f"hf:{tmp_path / 'qa'}")
    assert [(e.id, e.answers) for e in got] == [("a", (("John Smith", 0),)), ("b", ())]
    # one Dataset has no splits: a split named for it (the same rows whatever the name) is refused, any name
    for split in ("validation", "train", "tset"):
        with pytest.raises(sj.errors.DataFileError, match=rf"qa:{split}: .*qa is one dataset without splits, so "
                                                          rf"':{split}' would read the same rows as any other"):
            squad.read_squad(f"hf:{tmp_path / 'qa'}:{split}")


def test_tagged_rows_that_would_change_silently_are_refused_by_row(tmp_path):
    """A tag id of -1 inside a sequence read as the last name (Python indexes from the end), a None word as the word
    "None", a string of words split into characters, a word holding a space split in two by the predictions, bytes
    that are not UTF-8 a traceback: each is now one line naming the split, the row and the column."""
    tags = datasets.ClassLabel(names=["O", "B-PER", "I-PER"])
    words = datasets.Sequence(datasets.Value("string"))
    cases = [({"tokens": [["john", "was"]], "ner_tags": [[1, -1]]}, {"ner_tags": datasets.Sequence(tags)},
              r":1: column 'ner_tags': class label -1 is none of the 3 names"),
             ({"tokens": [["john", None]], "ner_tags": [[1, 0]]}, {"ner_tags": datasets.Sequence(tags)},
              r":1: column 'tokens' holds a list \["),
             ({"tokens": ["john was here"], "ner_tags": [[1, 0, 0]]}, {"tokens": datasets.Value("string"),
                                                                       "ner_tags": datasets.Sequence(tags)},
              r":1: column 'tokens' holds a string \"john was here\"; expected a list of words \(strings\)"),
             ({"tokens": [["New York", "was"]], "ner_tags": [[1, 0]]}, {"ner_tags": datasets.Sequence(tags)},
              r":1: column 'tokens' holds the word 'New York'; a word is text without spaces")]
    for i, (data, features, message) in enumerate(cases):
        ds = datasets.Dataset.from_dict(data, datasets.Features({"tokens": words, **features}))
        ds.save_to_disk(str(tmp_path / f"d{i}"))
        with pytest.raises(sj.errors.DataFileError, match=rf"^hf:{tmp_path / f'd{i}'}{message}"):
            tasks.read_conll(f"hf:{tmp_path / f'd{i}'}")
    binary = datasets.Dataset.from_dict({"text": [b"caf\xe9"], "label": [0]},
                                        datasets.Features({"text": datasets.Value("binary"),
                                                           "label": datasets.ClassLabel(names=["a", "b"])}))
    binary.save_to_disk(str(tmp_path / "bin"))
    with pytest.raises(sj.errors.DataFileError, match=rf"^hf:{tmp_path / 'bin'}:1: column 'text': bytes that are not "
                                                      r"UTF-8 \(byte 3: b'\\xe9'\)"):
        list(sources.rows(f"hf:{tmp_path / 'bin'}"))


def test_errors_name_the_dataset_and_the_row(saved, tmp_path):
    with pytest.raises(sj.errors.DataFileError, match=r"no split 'dev' in .*reviews \(has train, validation, test\)"):
        list(sources.rows(f"hf:{saved}:dev"))
    task = tasks.FileTask("r", "classification", {"train": f"hf:{saved}:train"}, ("review",), "label", ("neg", "pos"))
    with pytest.raises(sj.errors.DataFileError, match=rf"hf:{saved}:train:1: no column 'review' \(has text, label\)"):
        task.load("train")
    with pytest.raises(sj.errors.DataFileError, match=r"hf:nosuchdataset-xyz: cannot load the dataset"):
        list(sources.rows("hf:nosuchdataset-xyz"))
    assert sources.parse("hf:/data/a:b/c") == ("hf", "/data/a:b/c", "train")
    assert sources.parse("tfds:glue/sst2:validation") == ("tfds", "glue/sst2", "validation")
    # a TFDS version, as tfds.load names it, is no split ("1.0.0" was read as one) and no community namespace (the
    # spec with a split after it was refused as one)
    assert sources.parse("tfds:glue/sst2:1.0.0") == ("tfds", "glue/sst2:1.0.0", "train")
    for spec in ("tfds:glue/sst2:train[:10%]", "hf:/data/x:train[:100]"):  # a namespace, a builder or a glob, it said
        with pytest.raises(sj.errors.DataFileError, match=rf"^{re.escape(spec)}: a slice of a split \(\[...\]\) is not "
                                                          r"read here"):
            sources.parse(spec)
    assert sources.parse("tfds:glue/sst2:1.*.*:test") == ("tfds", "glue/sst2:1.*.*", "test")
    assert sources.tfds_version("glue/sst2:1.0.0") == ("glue/sst2", "1.0.0")
    assert sources.tfds_version("kaggle:someone/data") == ("kaggle:someone/data", "")
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(sj.errors.DataFileError, match=r"^tfds:glue/sst2:1.0.0:train: cannot load the dataset"):
        list(sources.rows("tfds:glue/sst2:1.0.0:train"))  # not prepared here: tfds.load's refusal, not a namespace
    # a trailing ':' (no split after it): datasets' "Couldn't find any data file at DIR:." said nothing of it
    with pytest.raises(sj.errors.DataFileError, match=r"^hf:/data/a:: ends in ':' with no split after it"):
        sources.parse("hf:/data/a:")


def test_a_data_file_is_never_run_as_code(tmp_path):
    """hf: names a save_to_disk directory or a cached dataset, never a loading script: neither the script itself, nor
    a directory holding one, nor any other file runs or reads as a dataset."""
    marker = tmp_path / "ran"
    script = f"open({str(marker)!r}, 'w').write('x')\nimport datasets\n"
    (tmp_path / "evil").mkdir()
    for p in (tmp_path / "evil.py", tmp_path / "evil" / "evil.py"):
        p.write_text(script)
    (tmp_path / "rows.csv").write_text("text,label\na,b\n")
    for spec, msg in ((f"hf:{tmp_path}/evil.py:train", r"evil.py is a file; .*never runs a loading script"),
                      (f"hf:{tmp_path}/evil.py", r"evil.py is a file"),
                      (f"hf:{tmp_path}/rows.csv:train", r"rows.csv is a file; .*without the hf: prefix"),
                      (f"hf:{tmp_path}/evil:train", r"cannot load the dataset"),
                      ("hf:evil.py:train", r"evil.py is a file"),
                      ("hf:csv:train", r"'csv' is a datasets builder or a glob"),
                      ("hf:JSON", r"'JSON' is a datasets builder"),
                      (f"hf:{tmp_path}/*.csv:train", r"is a datasets builder or a glob")):
        with pytest.raises(sj.errors.DataFileError, match=msg):
            list(sources.rows(spec))
    assert not marker.exists()


@pytest.mark.parametrize("value", ["", " ", "maybe"])
def test_a_dataset_name_reaches_no_hub_unless_offline_mode_is_turned_off_by_name(monkeypatch, value):
    """hf:NAME reads the local cache only: an empty HF_HUB_OFFLINE (which huggingface_hub reads as online) sent the
    name to the hub, as did a process whose huggingface_hub was imported before (it reads the variable once, and
    transformers imports it first). Only HF_HUB_OFFLINE=0 (the user's own choice) lets it go there."""
    import huggingface_hub.constants

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # as read when it was first imported
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    with pytest.raises(sj.errors.DataFileError, match=r"^hf:nobody/no-such-set:train: cannot load the dataset \(.*"
                                                      r"OfflineModeIsEnabled"):
        list(sources.rows("hf:nobody/no-such-set:train"))
    assert huggingface_hub.constants.HF_HUB_OFFLINE and datasets.config.HF_DATASETS_OFFLINE
