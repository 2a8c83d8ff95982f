"""GLUE files in their real layouts, metrics against scikit-learn / scipy, GLUE-server prediction files."""

from __future__ import annotations

import re

import numpy as np
import pytest

from squeezebert_jax import errors, glue

sklearn_metrics = pytest.importorskip("sklearn.metrics")
scipy_stats = pytest.importorskip("scipy.stats")


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_cola_header_less_train_and_headed_test(tmp_path):
    write(tmp_path / "CoLA" / "train.tsv", ["gj04\t1\t\tThe sailors rode the breeze clear of the rocks.",
                                            "gj04\t0\t*\tThe more does Bill smoke, the more Susan hates him."])
    write(tmp_path / "CoLA" / "test.tsv", ["index\tsentence", "0\tBill whistled past the house."])
    train = glue.load_examples("cola", "train", data_dir=str(tmp_path))
    assert [(e.text_a[:11], e.label) for e in train] == [("The sailors", 1), ("The more do", 0)]
    test = glue.load_examples("cola", "test", data_dir=str(tmp_path))
    assert test[0].idx == 0 and test[0].label is None and test[0].text_a.startswith("Bill")


def test_mnli_extra_columns_and_quotes(tmp_path):
    head = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\tlabel2\tgold_label"
    row = '7\t1\t2\tfiction\t(\t(\t(\t(\tHe said "hi\tNobody spoke.\tcontradiction\tneutral\tcontradiction'
    write(tmp_path / "MNLI" / "dev_matched.tsv", [head, row])
    ex = glue.load_examples("mnli", "validation_matched", data_dir=str(tmp_path))
    assert ex[0].text_a == 'He said "hi' and ex[0].text_b == "Nobody spoke." and ex[0].label == 2 and ex[0].idx == 7


def test_stsb_and_qqp_layouts(tmp_path):
    write(tmp_path / "STS-B" / "dev.tsv", [
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
        "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man plays.\tA man is playing.\t4.750"])
    s = glue.load_examples("stsb", "validation", data_dir=str(tmp_path))
    assert s[0].label == pytest.approx(4.75) and s[0].text_b == "A man is playing."
    for score in ("0_5", "\u0967.\u096b", "1,5", "true"):  # float() reads the first two (as 5.0 and 1.5): one reader
        write(tmp_path / "STS-B" / "dev.tsv", [
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
            f"0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man plays.\tA man is playing.\t{score}"])
        with pytest.raises(glue.GlueFormatError, match=rf"dev.tsv:2: malformed stsb row: '{score}' is not a number"):
            glue.load_examples("stsb", "validation", data_dir=str(tmp_path))
    write(tmp_path / "QQP" / "train.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                                           "5\t11\t12\tHow do I learn?\tWhat's the way to learn?\t1"])
    q = glue.load_examples("qqp", "train", data_dir=str(tmp_path))
    assert q[0].idx == 5 and q[0].label == 1 and q[0].text_a == "How do I learn?"


def test_malformed_rows_name_file_and_line_or_are_counted(tmp_path):
    path = write(tmp_path / "RTE" / "dev.tsv", ["index\tsentence1\tsentence2\tlabel",
                                                "0\tA\tB\tentailment", "1\tA\tB", "2\tA\tB\tmaybe"])
    with pytest.raises(ValueError, match=rf"{path}:3"):
        glue.load_examples("rte", "validation", data_dir=str(tmp_path))
    ex, skipped = glue.read_glue_tsv(str(path), "rte", "validation", skip_malformed=True)
    assert len(ex) == 1 and skipped == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_sklearn_and_scipy(seed):
    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    assert glue.compute_metrics("cola", p, y)["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(y, p))
    m = glue.compute_metrics("mrpc", p, y)
    assert m["f1"] == pytest.approx(sklearn_metrics.f1_score(y, p))
    assert m["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(y, p))
    y3, p3 = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    assert glue.compute_metrics("mnli", p3, y3)["accuracy"] == pytest.approx(sklearn_metrics.accuracy_score(y3, p3))
    a, b = rng.normal(size=100), rng.normal(size=100)
    s = glue.compute_metrics("stsb", a, b)
    assert s["pearson"] == pytest.approx(scipy_stats.pearsonr(a, b)[0])
    assert s["spearman"] == pytest.approx(scipy_stats.spearmanr(a, b)[0])


@pytest.mark.parametrize("task", ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax"])
def test_prediction_files_parse_back(tmp_path, task):
    spec = glue.get_task(task)
    rng = np.random.default_rng(0)
    idx = rng.permutation(13)
    preds = rng.uniform(-1, 6, 13) if spec.is_regression else rng.integers(0, spec.num_labels, 13)
    for split in spec.test_splits:
        path = glue.write_predictions(task, idx, preds, str(tmp_path), split_name=split)
        assert path.endswith(spec.submission[split])
        assert open(path).readline() == "index\tprediction\n"
        back = glue.read_predictions(path, expected_rows=13)
        assert back.idx.tolist() == sorted(idx.tolist())
        if spec.is_regression:
            assert np.all((back.values >= 0) & (back.values <= 5))
        else:
            assert set(back.labels) <= set(spec.labels)
    expected = {"mnli": {"MNLI-m.tsv", "MNLI-mm.tsv"}}.get(task, {spec.submission["test"]} if "test" in spec.submission
                                                           else set())
    assert set(p.name for p in tmp_path.iterdir()) == expected


# -- TFDS glue/<task> (mock data: no download) ----------------------------------------------------

def test_tfds_loader_every_task_and_split_with_mock_data():
    """Random examples from each TFDS builder's declared features: our column names, label kinds and
    ranges, and test splits without labels, for all ten tasks."""
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        for name, spec in glue.TASKS.items():
            for split in spec.layouts:
                ex = glue.load_examples(name, split)
                assert len(ex) == 6, (name, split)
                assert all(isinstance(e.text_a, str) and isinstance(e.idx, int) for e in ex)
                assert all((e.text_b is not None) == (len(spec.text_columns) == 2) for e in ex), name
                if split.startswith("test"):
                    assert all(e.label is None for e in ex), (name, split)
                elif spec.is_regression:
                    assert all(isinstance(e.label, float) for e in ex)
                else:
                    assert all(isinstance(e.label, int) and 0 <= e.label < spec.num_labels for e in ex)


def test_tfds_loader_maps_fields_and_unlabeled_rows():
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    rows = {"premise": [b"A man sleeps.", "Caf\u00e9 au lait".encode()], "hypothesis": [b"Nobody sleeps.", b"Coffee."],
            "label": [2, -1], "idx": [10, 11]}

    def as_dataset(self, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices(rows)

    with tfds.testing.mock_data(as_dataset_fn=as_dataset, policy=tfds.testing.MockPolicy.USE_CODE):
        ex = glue.load_examples("mnli", "dev_matched")  # the GLUE-directory split name works too
    assert ex == [glue.GlueExample(10, "A man sleeps.", "Nobody sleeps.", 2),
                  glue.GlueExample(11, "Caf\u00e9 au lait", "Coffee.", None)]  # TFDS's -1: no label


# -- writing GLUE files; the story tasks -------------------------------------------------------------

def test_write_glue_tsv_round_trips_in_the_real_layouts(tmp_path):
    rng = np.random.default_rng(0)
    for name, spec in glue.TASKS.items():
        for split in spec.splits:
            test = split.startswith("test")
            ex = [glue.GlueExample(int(i), f"a {name} \"quoted\" {i}", None if len(spec.text_columns) == 1 else f"b {i}",
                                   None if test else round(float(rng.uniform(0, 5)), 3) if spec.is_regression
                                   else int(rng.integers(spec.num_labels)))
                  for i in rng.permutation(7)]
            glue.write_glue_tsv(name, split, ex, str(tmp_path))
            back = glue.load_examples(name, split, data_dir=str(tmp_path))
            if spec.layouts[split].index is None:  # SST-2/MRPC train and dev, CoLA: idx is the row number
                ex = [glue.GlueExample(k, e.text_a, e.text_b, e.label) for k, e in enumerate(ex)]
            assert back == ex, (name, split)
    lines = (tmp_path / "CoLA" / "train.tsv").read_text().splitlines()
    assert len(lines) == 7 and all(len(x.split("\t")) == 4 for x in lines)  # header-less, 4 columns
    assert all(x.split("\t")[2] == ("" if x.split("\t")[1] == "1" else "*") for x in lines)
    head = (tmp_path / "MNLI" / "dev_matched.tsv").read_text().splitlines()[0].split("\t")
    assert head[8:] == ["sentence1", "sentence2", "label1", "gold_label"]
    assert (tmp_path / "diagnostic" / "diagnostic.tsv").read_text().startswith("index\tsentence1\tsentence2\n")
    with pytest.raises(ValueError, match="example 0 .* without tabs"):
        glue.write_glue_tsv("rte", "train", [glue.GlueExample(0, "a\tb", "c", 0)], str(tmp_path))
    with pytest.raises(ValueError, match="needs a label"):
        glue.write_glue_tsv("rte", "train", [glue.GlueExample(0, "a", "c", None)], str(tmp_path))


def test_story_tasks_cover_every_task_with_learnable_labels(tmp_path):
    from squeezebert_jax import corpus

    d = corpus.write_glue_tasks(tmp_path, num_train=300, num_dev=40, num_test=10, seed=1)
    for name, spec in glue.TASKS.items():
        for split in spec.splits:
            ex = glue.load_examples(name, split, data_dir=d)
            assert len(ex) == (300 if split == "train" else 10 if split.startswith("test") else 40), (name, split)
        if name == "ax":
            continue
        train = glue.load_examples(name, "train", data_dir=d)
        labels = np.array([e.label for e in train])
        if spec.is_regression:
            assert labels.min() >= 0 and labels.max() == 5.0 and labels.std() > 1
        else:
            assert np.bincount(labels, minlength=spec.num_labels).min() > 0.2 * len(labels) / spec.num_labels
    # the rules behind the labels hold (so a model can learn them)
    pos = {"beautiful", "valuable", "funny", "wonderful", "rare"}
    assert all(e.label == (e.text_a.split()[-2] in pos) for e in glue.load_examples("sst2", "train", data_dir=d))
    order = [(corpus.template_index(e.text_a) < corpus.template_index(e.text_b), e.label)
             for e in glue.load_examples("rte", "train", data_dir=d)]
    assert all(in_order == (label == 0) for in_order, label in order)  # 0 = entailment = story order
    assert corpus.write_glue_tasks(tmp_path / "again", 300, 40, 10, seed=1) and \
        (tmp_path / "again" / "QQP" / "train.tsv").read_text() == (tmp_path / "QQP" / "train.tsv").read_text()


@pytest.mark.parametrize("row, why", [
    ("1\t\tB\tentailment", "an empty text"),
    ("1\tA\t \u200b \tentailment", r"an empty text \(only white space or invisible marks\)"),
    ("1\t\ufffd\tB\tentailment", "an empty text"),  # U+FFFD alone: BERT's normalizer drops it
    ("1\tA\x00B\tB\tentailment", "a NUL byte at column 4"),
    ("1\tA\rB\tB\tentailment", "a carriage return that ends no line at column 4"),
    ("\ufeff1\tA\tB\tentailment", "a byte-order mark inside the file"),
])
def test_a_glue_row_holds_what_any_text_file_may(tmp_path, row, why):
    """GLUE_DIR's TSV reader checks texts and lines as the user's files are checked (files.has_text, text_lines'
    rules): such a row is malformed, named by file and line, or dropped and counted with skip_malformed."""
    path = write(tmp_path / "RTE" / "dev.tsv", ["index\tsentence1\tsentence2\tlabel", "0\tA\tB\tentailment", row,
                                                "2\tC\tD\tnot_entailment"])
    with pytest.raises(glue.GlueFormatError, match=rf"{path}:3: malformed rte row: {why}"):
        glue.load_examples("rte", "validation", data_dir=str(tmp_path))
    ex, skipped = glue.read_glue_tsv(str(path), "rte", "validation", skip_malformed=True)
    assert [e.idx for e in ex] == [0, 2] and skipped == 1


def test_non_utf8_row_names_file_and_line_or_is_counted(tmp_path):
    path = tmp_path / "RTE" / "dev.tsv"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xef\xbb\xbfindex\tsentence1\tsentence2\tlabel\n0\tA\tB\tentailment\n1\tA \xff\tB\tentailment\n"
                     b"2\tC\tD\tnot_entailment\n")
    with pytest.raises(glue.GlueFormatError, match=rf"{path}:3: not UTF-8"):
        glue.load_examples("rte", "validation", data_dir=str(tmp_path))
    ex, skipped = glue.read_glue_tsv(str(path), "rte", "validation", skip_malformed=True)
    assert [e.idx for e in ex] == [0, 2] and skipped == 1  # the BOM before the header is not a column name


def test_label_permutation_from_label_names():
    legacy = {0: "contradiction", 1: "entailment", 2: "neutral"}  # transformers' old MnliProcessor order
    perm = glue.label_permutation(legacy, "mnli")
    logits = np.array([[5.0, 1.0, 2.0]])  # contradiction wins
    assert glue.get_task("mnli").labels[int(logits[:, perm].argmax())] == "contradiction"
    assert glue.label_permutation({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, "mnli") is None  # same order
    assert glue.label_permutation({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, "mnli") is None  # nothing to go by
    assert glue.label_permutation(None, "rte") is None
    assert glue.label_permutation({0: "not_entailment", 1: "entailment"}, "qnli").tolist() == [1, 0]
    assert glue.label_permutation(legacy, "stsb") is None


def test_a_duplicated_test_index_is_named_by_file_and_line(tmp_path):
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\ta fine film\n1\ta bad film\n0\tagain\n")
    with pytest.raises(errors.InputError, match=r"test.tsv:4: index 0 appears twice \(also at line 2\)"):
        glue.read_glue_tsv(str(tmp_path / "test.tsv"), "sst2", "test")


def test_a_test_files_rows_are_never_skipped(tmp_path):
    """A test file's malformed row (an index that is no integer, a text that is not UTF-8) is refused even with
    skip_malformed, which the message does not offer: the GLUE server wants a prediction for every index."""
    (tmp_path / "test.tsv").write_bytes(b"index\tsentence\n0\ta fine film\n1.5\ta bad film\n2\t\xff\xfe\n")
    for skip in (False, True):
        with pytest.raises(errors.InputError, match=r"test.tsv:3: malformed sst2 row: index '1.5' is not an integer "
                                                    r"\(a test file's rows are never skipped: the GLUE server wants a "
                                                    r"prediction for each\)$"):
            glue.read_glue_tsv(str(tmp_path / "test.tsv"), "sst2", "test", skip_malformed=skip)
    (tmp_path / "test.tsv").write_bytes(b"index\tsentence\n0\ta fine film\n2\t\xff\xfe\n")
    with pytest.raises(errors.InputError, match=r"test.tsv:3: not UTF-8 text .*\(a test file's rows are never skipped"):
        glue.read_glue_tsv(str(tmp_path / "test.tsv"), "sst2", "test", skip_malformed=True)


def test_inputs_cut_to_max_length_are_counted_in_a_warning(tmp_path, caplog):
    """A row longer than max_seq_length loses its end: never without a word (10 words and the 2 special tokens fit
    12; a pair counts once, whichever text is cut)."""
    import logging

    from squeezebert_jax import corpus, tokenizer

    tok = tokenizer.Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    rows = [glue.GlueExample(idx=i, text_a="the " * n, text_b=None, label=0) for i, n in enumerate((3, 10, 11, 30))]
    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.glue"):
        glue.encode_examples(rows, tok, 12)
        glue.encode_examples(rows[:1], tok, 12)
        glue.encode_examples([glue.GlueExample(0, "the", "the " * 20, 1)], tok, 12)
    assert [r.getMessage().split(" are longer")[0] for r in caplog.records] == ["2 of 4 inputs (50.0%)",
                                                                                "1 of 1 inputs (100.0%)"]


def test_glue_without_data_dir_or_prepared_tfds_data_is_one_line_naming_both(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(errors.InputError, match=rf"^no GLUE data_dir given, and TFDS holds no prepared glue/rte in "
                                         rf"{re.escape(str(tmp_path))}: set data_dir \(config.data_dir, --data_dir\) "
                                         r"to a glue_data directory of GLUE's TSV files, or prepare the TFDS copy once "
                                         r"with `tfds build glue/rte` \(it downloads\)$"):
        glue.load_examples("rte", "validation", tfds_data_dir=str(tmp_path))


def test_a_data_dir_that_is_not_there_is_named_as_such(tmp_path):
    """It read "no dev.tsv for rte validation under DIR (looked in DIR/RTE and DIR)": the directory itself is absent."""
    with pytest.raises(FileNotFoundError, match=rf"^{re.escape(str(tmp_path / 'nope'))}: no such directory \(the GLUE "
                                                r"data: glue_data/"):
        glue.load_examples("rte", "validation", data_dir=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=r"no dev.tsv for rte validation under .* \(looked in"):
        glue.load_examples("rte", "validation", data_dir=str(tmp_path))
