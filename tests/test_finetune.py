"""GLUE fine-tuning: distillation loss limits, a tiny separable task to 100%, STS-B regression, MNLI transfer."""

from __future__ import annotations

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from conftest import VOCAB, WORDS, glue_config as _config, write_sst2 as _write_sst2

from squeezebert_jax import batching, distill, errors, evaluation, inference, losses
from squeezebert_jax import finetune as ft
from squeezebert_jax import finetune_settings



def test_distillation_teacher_weight_0_is_hard_label_loss():
    rng = np.random.default_rng(0)
    logits, teacher = jnp.asarray(rng.normal(size=(6, 3))), jnp.asarray(rng.normal(size=(6, 3)))
    labels, w = jnp.asarray([0, 1, 2, 1, 0, 2]), jnp.asarray([1, 1, 1, 1, 1, 0.0])
    hard = losses.task_loss(logits, labels, w)
    ref = -np.sum(np.asarray(jax.nn.log_softmax(logits))[np.arange(6), labels] * np.asarray(w)) / 5
    assert abs(float(hard) - ref) < 1e-6
    assert abs(float(losses.task_loss(logits, labels, w, teacher, 0.0)) - float(hard)) < 1e-7
    # weight 1: the soft cross-entropy is minimised exactly at the teacher's distribution
    soft = losses.task_loss(teacher, labels, w, teacher, 1.0)
    assert float(soft) < float(losses.task_loss(teacher + 0.3 * jnp.asarray(rng.normal(size=(6, 3))), labels, w,
                                            teacher, 1.0))
    # regression: MSE against the mixed target
    y = jnp.asarray([1.0, 2.0, 3.0, 4.0, 0.5, 2.5])
    pred = jnp.asarray(rng.normal(size=(6, 1)))
    t = jnp.asarray(rng.normal(size=(6, 1)))
    got = losses.task_loss(pred, y, w, t, 0.25, regression=True)
    target = 0.25 * t[:, 0] + 0.75 * y
    assert abs(float(got) - float(jnp.sum(jnp.square(pred[:, 0] - target) * w) / 5)) < 1e-6


def test_student_matches_fixed_teacher_with_weight_1():
    """Gradient descent on the teacher_weight=1 loss drives a linear student to the teacher's probabilities."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(32, 4)))
    teacher = x @ jnp.asarray(rng.normal(size=(4, 3)))
    labels = jnp.asarray(rng.integers(0, 3, 32))
    w = jnp.ones(32)
    W = jnp.zeros((4, 3))
    g = jax.jit(jax.grad(lambda W: losses.task_loss(x @ W, labels, w, teacher, 1.0)))
    for _ in range(3000):
        W = W - 0.5 * g(W)
    diff = jnp.abs(jax.nn.softmax(x @ W) - jax.nn.softmax(teacher))
    assert float(diff.max()) < 0.02


def test_batches_pad_with_zero_weight():
    arrays = {"input_ids": np.arange(10).reshape(5, 2), "labels": np.arange(5)}
    out = list(batching.batches(arrays, 2))
    assert len(out) == 3 and out[-1]["weights"].tolist() == [1.0, 0.0]
    assert out[-1]["input_ids"].shape == (2, 2)



def test_predict_logits_compiles_once_per_model():
    """Two splits and a second epoch (new parameter values) with the same batch shape: one trace, right logits."""
    cfg = sj.SqueezeBertConfig(vocab_size=23, hidden_size=24, embedding_size=24, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=48, max_position_embeddings=16,
                               q_groups=2, k_groups=2, v_groups=2, post_attention_groups=1, intermediate_groups=2,
                               output_groups=2)  # dims no other test uses: the first call must trace
    model = sj.SqueezeBertForSequenceClassification(cfg, num_labels=5, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)

    def split(n):
        return {"input_ids": rng.integers(0, 23, (n, 8)).astype(np.int32), "attention_mask": np.ones((n, 8), np.int32),
                "token_type_ids": np.zeros((n, 8), np.int32)}

    reference = nnx.jit(lambda m, *inputs: m(*inputs).logits)  # the whole split in one call, no padding
    before = inference.eval_logits._cache_size()
    dev, test = split(11), split(3)
    for epoch in range(2):
        for arr in (dev, test):
            logits = inference.predict_logits(model, arr, batch_size=4)
            want = reference(model, *(jnp.asarray(arr[k]) for k in ("input_ids", "attention_mask", "token_type_ids")))
            np.testing.assert_allclose(logits, want, atol=1e-5)
        model.classifier.bias.set_value(model.classifier.bias[...] + 1.0)  # the next epoch's parameters
    assert inference.eval_logits._cache_size() - before == 1

# ---- end to end on GLUE-format files ------------------------------------------------------------------

def _tiny_model_dir(path, head="SqueezeBertForPreTraining", seed=0):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    model = sj.HEADS[head](cfg, rngs=nnx.Rngs(seed))
    sj.save_pretrained(model, path, overwrite=True)  # some tests retrain a model in place
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


def test_tiny_separable_task_reaches_dev_accuracy_1(tmp_path, monkeypatch):
    """To dev accuracy 1; a second run in the process (a sweep, the GLUE table) reuses the jitted step (no new trace)
    with the same history; another weight decay is another step."""
    steps, get = [], ft._STEPS.get
    monkeypatch.setattr(ft._STEPS, "get", lambda key, build: steps.append(get(key, build)) or steps[-1])
    _write_sst2(tmp_path / "glue")
    init = _tiny_model_dir(tmp_path / "init")
    c = _config("sst2", init, tmp_path / "glue", learning_rate=3e-3, num_epochs=4, dropout=0.0)
    res = ft.finetune(c, str(tmp_path / "run"))
    assert res["best"]["score"] == 1.0
    saved = json.load(open(tmp_path / "run" / "eval_results.json"))
    assert saved["best"]["score"] == 1.0 and len(saved["history"]) == 4
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert type(model) is sj.SqueezeBertForSequenceClassification and model.num_labels == 2
    assert os.path.exists(tmp_path / "run" / "model" / "vocab.txt")
    # the model says what it was fine-tuned on: evaluation scores it on no other task, predict gives it one text
    assert json.load(open(tmp_path / "run" / "model" / "task.json")) == {
        "kind": "classification", "text_columns": ["sentence"], "glue_task": "sst2"}
    traces = steps[0]._cache_size()
    assert ft.finetune(c, str(tmp_path / "again"))["history"] == res["history"]
    assert steps[1] is steps[0] and steps[0]._cache_size() == traces
    c.weight_decay, c.num_epochs, c.max_train_examples = 0.01, 1, 16
    ft.finetune(c, str(tmp_path / "decay"))
    assert steps[2] is not steps[0]


def test_tfds_source_without_data_dir(tmp_path):
    """No --config.data_dir: TFDS glue/sst2 (mock data in SST-2's features, separable), to dev accuracy 1.0."""
    tfds = pytest.importorskip("tensorflow_datasets")
    import tensorflow as tf

    def as_dataset(self, split, *args, **kwargs):
        rng = np.random.default_rng(len(str(split)))
        n = 384 if str(split) == "train" else 32
        y = rng.integers(0, 2, n)
        text = [" ".join([*rng.choice(WORDS[6:], 2), rng.choice(WORDS[:3] if t else WORDS[3:6]), "the"]).encode()
                for t in y]
        return tf.data.Dataset.from_tensor_slices({"sentence": text, "label": y.astype(np.int64),
                                                   "idx": np.arange(n, dtype=np.int32)})

    init = _tiny_model_dir(tmp_path / "init")
    c = _config("sst2", init, "", learning_rate=3e-3, num_epochs=4, dropout=0.0)
    with tfds.testing.mock_data(as_dataset_fn=as_dataset, policy=tfds.testing.MockPolicy.USE_CODE):
        res = ft.finetune(c, str(tmp_path / "run"))
    assert res["best"]["score"] == 1.0 and len(res["history"]) == 4


def _write_pair_task(d, glue_dir, labels, n, seed, mnli=False):
    """RTE-style (index, sentence1, sentence2, label) or MNLI-style (12 columns, gold_label last) files."""
    rng = np.random.default_rng(seed)
    os.makedirs(d / glue_dir, exist_ok=True)

    def row(i, with_label):
        y = int(rng.integers(0, len(labels)))
        a = " ".join(rng.choice(WORDS[6:], 3)) + " " + WORDS[y]
        b = " ".join(rng.choice(WORDS[6:], 2))
        if mnli:
            cols = [str(i), "1", "2", "fiction", "(", "(", "(", "(", a, b] + ([labels[y], labels[y]] if with_label else [])
        else:
            cols = [str(i), a, b] + ([labels[y]] if with_label else [])
        return "\t".join(cols)

    if mnli:
        head = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2"
        files = {"train.tsv": True, "dev_matched.tsv": True, "dev_mismatched.tsv": True,
                 "test_matched.tsv": False, "test_mismatched.tsv": False}
        for name, lab in files.items():
            h = head + ("\tlabel1\tgold_label" if lab else "")
            (d / glue_dir / name).write_text(h + "\n" + "\n".join(row(i, lab) for i in range(n)) + "\n")
    else:
        for name, lab in {"train.tsv": True, "dev.tsv": True, "test.tsv": False}.items():
            h = "index\tsentence1\tsentence2" + ("\tlabel" if lab else "")
            (d / glue_dir / name).write_text(h + "\n" + "\n".join(row(i, lab) for i in range(n)) + "\n")


@pytest.mark.slow
def test_recipe_with_transfer_distillation_and_predictions(tmp_path, capsys):
    """The whole-table command end to end: MNLI first, RTE from the MNLI student with a cached teacher,
    test files for the GLUE server (AX by the MNLI model), and eval/glue.py over the runs (in-process; its command
    line runs in test_whole_table_on_a_converted_checkpoint)."""
    import importlib.util

    from conftest import load_script

    from squeezebert_jax import glue

    data = tmp_path / "glue"
    _write_pair_task(data, "MNLI", ("entailment", "neutral", "contradiction"), 24, 0, mnli=True)
    _write_pair_task(data, "RTE", ("entailment", "not_entailment"), 24, 1)
    os.makedirs(data / "diagnostic")
    (data / "diagnostic" / "diagnostic.tsv").write_text(
        "index\tsentence1\tsentence2\n0\tthe movie\tgood plot\n1\ta plot\tbad movie\n")
    init = _tiny_model_dir(tmp_path / "init")
    teachers = tmp_path / "teachers"
    _tiny_model_dir(teachers / "rte", head="SqueezeBertForSequenceClassification", seed=5)
    root = os.path.join(os.path.dirname(__file__), "..")
    spec = importlib.util.spec_from_file_location("recipe", os.path.join(root, "train", "glue_recipe.py"))
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    runs = tmp_path / "runs"
    recipe.main(["--init_from", str(init), "--data_dir", str(data), "--workdir", str(runs), "--tasks", "rte", "mnli",
                 "--transfer", "--teacher_root", str(teachers), "--epochs", "1", "--max_seq_length", "16", "--predict"])
    table = (runs / "table.md").read_text()
    assert "MNLI-m" in table and "RTE" in table and "82.3" in table  # ours, with the paper's row
    res = json.load(open(runs / "rte" / "eval_results.json"))
    assert res["init_from"] == str(runs / "mnli" / "model") and res["distill"]["teacher"] == str(teachers / "rte")
    assert any(f.startswith("teacher_rte_train") for f in os.listdir(runs / "teacher_cache"))
    preds = sorted(os.listdir(runs / "predictions"))
    assert preds == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "RTE.tsv"]
    back = glue.read_predictions(str(runs / "predictions" / "RTE.tsv"), expected_rows=24)
    assert len(back.idx) == 24
    capsys.readouterr()
    load_script("eval/glue.py").main(["--model", str(runs), "--task", "all", "--data_dir", str(data)])
    out = capsys.readouterr().out
    assert "MNLI-mm" in out and "sst2: no" in out


def test_stsb_regression_lowers_mse(tmp_path):
    """STS-B (num_labels 1, MSE): the score is the count of 'good' words; training lowers the dev MSE."""
    rng = np.random.default_rng(0)
    d = tmp_path / "glue" / "STS-B"
    d.mkdir(parents=True)
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"

    def rows(n):
        out = []
        for i in range(n):
            k = int(rng.integers(0, 6))
            a = " ".join(["good"] * k + list(rng.choice(WORDS[6:], 5 - k)))
            out.append(f"{i}\tg\tf\t2012\t{i:04d}\tnone\tnone\t{a}\tthe movie\t{float(k):.3f}")
        return out

    (d / "train.tsv").write_text(head + "\n" + "\n".join(rows(256)) + "\n")
    (d / "dev.tsv").write_text(head + "\n" + "\n".join(rows(32)) + "\n")
    init = _tiny_model_dir(tmp_path / "init")
    c = _config("stsb", init, tmp_path / "glue", learning_rate=2e-3, num_epochs=3, dropout=0.0)
    model = sj.load_pretrained(init, "SqueezeBertForSequenceClassification", num_labels=1)
    from squeezebert_jax import glue
    from squeezebert_jax.tokenizer import Tokenizer

    dev = glue.encode_examples(glue.load_examples("stsb", "validation", data_dir=str(tmp_path / "glue")),
                               Tokenizer.from_dir(init), 16, task="stsb")
    mse = lambda m: float(np.mean((inference.predict_logits(m, dev)[:, 0] - dev["labels"]) ** 2))  # noqa: E731
    before = mse(model)
    res = ft.finetune(c, str(tmp_path / "run"))
    after = mse(sj.load_pretrained(tmp_path / "run" / "model"))
    assert after < 0.5 * before
    assert res["best"]["validation/corr"] > 0.5


@pytest.mark.slow
def test_whole_table_on_a_converted_checkpoint(tmp_path, run_cli):
    """A transformers checkpoint -> convert/from_pytorch.py -> train/glue_recipe.py over all nine tasks on a
    GLUE_DIR in the real layouts -> the Table 2 form with every column, server files for all eleven
    submissions, and eval/glue.py --task all giving the same dev numbers."""
    import importlib.util

    import torch
    import transformers

    from squeezebert_jax import corpus, glue

    hf = tmp_path / "hf"
    cfg = transformers.SqueezeBertConfig(vocab_size=len(corpus.demo_vocab()), hidden_size=32, embedding_size=32,
                                         num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.SqueezeBertForMaskedLM(cfg).save_pretrained(hf)
    corpus.write_demo_vocab(hf / "vocab.txt")
    root = os.path.join(os.path.dirname(__file__), "..")
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", hf, "--out", tmp_path / "model")
    assert rc == 0, err[-2000:]
    data = corpus.write_glue_tasks(tmp_path / "glue_data", num_train=64, num_dev=32, num_test=8)
    spec = importlib.util.spec_from_file_location("recipe_all", os.path.join(root, "train", "glue_recipe.py"))
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    runs = tmp_path / "runs"
    recipe.main(["--init_from", str(tmp_path / "model"), "--data_dir", data, "--workdir", str(runs), "--epochs", "1",
                 "--max_seq_length", "32", "--predict"])
    table = (runs / "table.md").read_text()
    ours = next(line for line in table.splitlines() if line.startswith("this run"))
    cells = ours[len("this run"):].split()
    assert len(cells) == 10 and all(np.isfinite([float(c) for c in cells])), table  # every column + average
    assert sorted(os.listdir(runs / "predictions")) == sorted(
        ["AX.tsv", "CoLA.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "MRPC.tsv", "QNLI.tsv", "QQP.tsv", "RTE.tsv", "SST-2.tsv",
         "STS-B.tsv", "WNLI.tsv"])
    for f in os.listdir(runs / "predictions"):
        assert len(glue.read_predictions(str(runs / "predictions" / f), expected_rows=8).idx) == 8
    rc, stdout, err = run_cli("eval/glue.py", "--model", runs, "--task", "all", "--data_dir", data, "--max_length",
                              "32")
    assert rc == 0, err[-2000:]
    results = json.load(open(runs / "results.json"))
    for task in ("mnli", "qqp", "stsb", "cola"):  # the recipe's best-epoch dev metrics, recomputed from its model
        line = next(x for x in stdout.splitlines() if x.startswith(task + " "))
        got = json.loads(line[len(task) + 1:])
        for split, metrics in results[task].items():
            for k, v in metrics.items():
                assert got[split][k] == pytest.approx(v, abs=1e-6), (task, split, k)


# ---- label order, task checks, teacher cache --------------------------------------------------------------------

def _mnli_classifier_dir(path, id2label, seed=0):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                               id2label=id2label)
    model = sj.SqueezeBertForSequenceClassification(cfg, num_labels=3, rngs=nnx.Rngs(seed))
    sj.save_pretrained(model, path, overwrite=True)  # some tests save another in its place
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return model


def test_legacy_mnli_label_order_is_reordered_for_evaluation_and_predictions(tmp_path):
    """The same classifier saved with TFDS-ordered and with legacy-ordered (contradiction, entailment, neutral)
    columns gives the same predictions, metrics and server files once its id2label names the order."""
    _write_pair_task(tmp_path / "glue", "MNLI", ["entailment", "neutral", "contradiction"], 24, 0, mnli=True)
    ours = _mnli_classifier_dir(tmp_path / "tfds_order", None)
    rng = np.random.default_rng(0)  # a classifier that does not predict one class everywhere
    k, b = 30 * rng.standard_normal((32, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    ours.classifier.kernel.set_value(k)
    ours.classifier.bias.set_value(b)
    sj.save_pretrained(ours, tmp_path / "tfds_order", overwrite=True)  # its new head
    legacy = _mnli_classifier_dir(tmp_path / "legacy", {0: "contradiction", 1: "entailment", 2: "neutral"})
    legacy.classifier.kernel.set_value(k[:, [2, 0, 1]])  # column j of the legacy head = its label j
    legacy.classifier.bias.set_value(b[[2, 0, 1]])
    sj.save_pretrained(legacy, tmp_path / "legacy", overwrite=True)
    data = str(tmp_path / "glue")
    assert evaluation.evaluate(str(tmp_path / "legacy"), "mnli", data) == evaluation.evaluate(str(tmp_path / "tfds_order"), "mnli", data)
    a = evaluation.predict_test(str(tmp_path / "legacy"), "mnli", data, str(tmp_path / "pa"))
    b_ = evaluation.predict_test(str(tmp_path / "tfds_order"), "mnli", data, str(tmp_path / "pb"))
    assert [open(p).read() for p in a] == [open(p).read() for p in b_]
    # the teacher's soft targets (whole logit rows, so a wrong column order cannot hide) are the same too
    ex = sj.glue.load_examples("mnli", "train", data_dir=data)
    t_legacy = distill.teacher_logits(str(tmp_path / "legacy"), "mnli", "train", ex, 16, str(tmp_path / "cache"))
    t_ours = distill.teacher_logits(str(tmp_path / "tfds_order"), "mnli", "train", ex, 16, str(tmp_path / "cache"))
    np.testing.assert_allclose(t_legacy, t_ours, atol=1e-5)
    assert np.abs(t_ours[:, 0] - t_ours[:, 1]).max() > 1.0  # the columns differ: a permutation would show


def test_a_classifier_of_other_label_names_is_named_in_a_warning(tmp_path, caplog):
    """Three outputs named for another task (a, b, c) read as MNLI's labels where the model is fine-tuned on MNLI:
    kept in order, and the log says which is which (it used to be silent); transformers' LABEL_0.. names and the
    task's own say nothing. Scored on MNLI, or taken as its teacher, the same model is refused."""
    for id2label, warned in (({0: "a", 1: "b", 2: "c"}, True), ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, False),
                             ({0: "Entailment", 1: "neutral", 2: "contradiction"}, False)):
        model = _mnli_classifier_dir(tmp_path / "m", id2label)
        caplog.clear()
        with caplog.at_level("WARNING"):
            evaluation.align_to_task(model, "mnli", "M")
        assert ("M: the classifier's outputs are named ['a', 'b', 'c'], not mnli's labels ['entailment', 'neutral', "
                "'contradiction']: kept in order, read as a -> entailment, b -> neutral, c -> contradiction"
                in caplog.text) == warned, caplog.text
        # scored, or taken as a teacher, such a model is another task's: refused (its names, the task's, the fix)
        model = _mnli_classifier_dir(tmp_path / "m", id2label)
        if warned:
            with pytest.raises(evaluation.TaskMismatchError, match=r"^M: the classifier's outputs are named a, b, c, "
                                                                   r"not mnli's labels entailment, neutral, "
                                                                   r"contradiction: a model of another task\? If "
                                                                   r"they do mean .* write those names in its "
                                                                   r"config.json's id2label$"):
                evaluation.align_to_task(model, "mnli", "M", trained=True)
        else:
            evaluation.align_to_task(model, "mnli", "M", trained=True)


def test_an_evaluation_length_past_the_models_positions_is_refused(tmp_path):
    """eval/glue.py --max_length 1000 on a 64-position model was cut to 64 without a word; left out, it is 128 or
    the model's positions."""
    _write_pair_task(tmp_path / "glue", "MNLI", ["entailment", "neutral", "contradiction"], 8, 0, mnli=True)
    _mnli_classifier_dir(tmp_path / "m", None)
    for length, msg in ((1000, "reads at most 64 tokens (its config.json max_position_embeddings)"),
                        (2, "an integer >= 4 (the special tokens and a word of each text)")):
        with pytest.raises(sj.errors.InputError, match=rf"^--max_length={length}: .*{re.escape(msg)}"):
            evaluation.evaluate(str(tmp_path / "m"), "mnli", str(tmp_path / "glue"), max_length=length)
    assert evaluation.evaluate(str(tmp_path / "m"), "mnli", str(tmp_path / "glue")).keys() == {
        "validation_matched", "validation_mismatched"}


def test_a_classifier_for_another_label_count_is_refused(tmp_path):
    _write_pair_task(tmp_path / "glue", "RTE", ["entailment", "not_entailment"], 8, 0)
    _mnli_classifier_dir(tmp_path / "mnli", None)
    with pytest.raises(evaluation.TaskMismatchError, match="3 outputs cannot be used for rte"):
        evaluation.evaluate(str(tmp_path / "mnli"), "rte", str(tmp_path / "glue"))
    ex = sj.glue.load_examples("rte", "train", data_dir=str(tmp_path / "glue"))
    with pytest.raises(evaluation.TaskMismatchError, match=r"teacher .*mnli.*3 outputs"):
        distill.teacher_logits(str(tmp_path / "mnli"), "rte", "train", ex, 16, str(tmp_path / "cache"))


def test_teacher_cache_is_keyed_by_the_data_and_the_teacher(tmp_path):
    _write_sst2(tmp_path / "glue", n_train=16)
    teacher = _tiny_model_dir(tmp_path / "t", head="SqueezeBertForSequenceClassification")
    ex = sj.glue.load_examples("sst2", "train", data_dir=str(tmp_path / "glue"))
    cache = str(tmp_path / "cache")
    first = distill.teacher_logits(str(teacher), "sst2", "train", ex, 16, cache)
    rev = distill.teacher_logits(str(teacher), "sst2", "train", ex[::-1], 16, cache)  # same count, other order
    np.testing.assert_allclose(rev, first[::-1], atol=1e-6)
    _tiny_model_dir(tmp_path / "t", head="SqueezeBertForSequenceClassification", seed=1)  # retrained in place
    again = distill.teacher_logits(str(teacher), "sst2", "train", ex, 16, cache)
    assert np.abs(again - first).max() > 1e-4
    assert len(os.listdir(cache)) == 3


def test_nan_score_never_wins_nor_blocks():
    assert ft._better(0.5, float("nan")) and not ft._better(float("nan"), 0.5)
    assert not ft._better(float("nan"), float("nan")) and ft._better(0.6, 0.5) and not ft._better(0.5, 0.5)


@pytest.mark.parametrize("kind, target", [("unstructured", 0.5), ("ffn", 0.25)])
def test_pruning_during_finetuning_reaches_the_scheduled_sparsity(tmp_path, kind, target):
    """Gradual magnitude pruning (prune block of the config): the saved best model has the target sparsity (within 1%),
    the run records it per epoch and per layer, only epochs at the target compete for best, and the task is still
    learned."""
    import ml_collections

    from squeezebert_jax import prune

    _write_sst2(tmp_path / "glue")
    init = _tiny_model_dir(tmp_path / "init")
    c = _config("sst2", init, tmp_path / "glue", learning_rate=3e-3, num_epochs=4, dropout=0.0)
    c.prune = ml_collections.ConfigDict({"target": target, "kind": kind, "begin": 0.0, "end": 0.5, "every": 4})
    res = ft.finetune(c, str(tmp_path / "run"))
    rep = res["prune"]["report"]
    assert rep["reached"] == pytest.approx(target, abs=0.01) and res["history"][-1]["sparsity"] == rep["reached"]
    if kind == "unstructured":  # every layer, every kernel
        assert all(v == pytest.approx(target, abs=0.01) for v in rep["per_layer"].values())
    else:  # a quarter of each layer's FFN channels: those kernels' zeros, the attention kernels untouched
        assert rep["per_kernel"]["intermediate/conv1d"] == pytest.approx(target, abs=0.01)
        assert rep["per_kernel"]["attention/query"] == 0.0
    saved = sj.load_pretrained(tmp_path / "run" / "model")  # zeros kept in the saved model
    assert prune.Pruner(kind, target, 4, 1).report(nnx.to_pure_dict(nnx.state(saved, nnx.Param)))["reached"] == \
        pytest.approx(target, abs=0.01)
    assert res["best"]["score"] > 0.7  # still learns (chance: ~0.5; unpruned, this task reaches 1.0)


def test_an_unknown_compute_dtype_is_refused(tmp_path):
    """The settings every training run has (loop.Settings.check_training): not a silent float32, and refused by the
    validator (a sweep point of it was refused only after the sweep's workdir was made)."""
    model = _tiny_model_dir(tmp_path / "m", head="SqueezeBertForSequenceClassification")
    c = _config("sst2", str(model), str(tmp_path / "glue"), compute_dtype="float16")
    with pytest.raises(sj.errors.InputError, match="^config.compute_dtype='float16': bfloat16 or float32$"):
        finetune_settings.check_settings(c, 1)
    with pytest.raises(sj.errors.InputError, match="^config.compute_dtype='float16': bfloat16 or float32$"):
        ft.finetune(c, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("field, value, message", [
    ("dropout", 1.5, "config.dropout=1.5: a probability in [0, 1)"),
    ("distill.teacher_weight", 2.0, "config.distill.teacher_weight=2.0: a share in [0, 1]"),
    ("distill.hidden_weight", -1.0, "config.distill.hidden_weight=-1.0: a finite weight >= 0"),
    ("max_train_examples", -5, "config.max_train_examples=-5: an integer >= 0 (0: every row)"),
    ("preemption_sync_every", 0, "config.preemption_sync_every=0: an integer >= 1"),
    ("prune.target", 1.0, "config.prune.target=1.0: a sparsity in [0, 1)"),
    ("prune.end", 1.5, "config.prune.end=1.5: a fraction of the run in [0, 1]"),  # named itself, not prune.begin
    ("init_from", None, "config.init_from=None: a MODEL_DIR's path (a string)"),  # os's TypeError, naming neither
    ("distill.teacher", None, "config.distill.teacher=None: a MODEL_DIR's path (a string)"),
    ("prune.begin", 0.9, "config.prune.begin=0.9: at most prune.end (0.75)"),
    ("data.doc_stride", 0, "config.data.doc_stride=0: an integer >= 1"),
    ("batch_size", 2 ** 31 - 1, "config.batch_size=2147483647: one batch at max_seq_length 16 would take "
                                "412.3 GB, more than half of this host's"),
    ("eval_batch_size", 2 ** 31 - 1, "config.eval_batch_size=2147483647: one batch at max_seq_length"),
    ("batch_size", 8 * 10 ** 10, "config.batch_size=80000000000: at most 2,147,483,647"),
])
def test_finetuning_settings_are_checked_before_anything_loads(tmp_path, field, value, message):
    from conftest import glue_config

    from squeezebert_jax import finetune as ft

    c = glue_config("sst2", tmp_path / "no_model", tmp_path / "no_data")
    target, *rest = field.split(".")
    if rest:
        c[target][rest[0]] = value
    else:
        setattr(c, field, value)
    with pytest.raises(errors.InputError) as e:
        ft.finetune(c, str(tmp_path / "run"))
    assert str(e.value).startswith(message)
    assert not (tmp_path / "run").exists()
