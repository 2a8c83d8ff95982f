"""Layer-wise distillation: students from a teacher's layers, PKD / TinyBERT losses against numpy, a student moving
toward its teacher, and pre-trained distillation on unlabeled transfer text."""

import os

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from conftest import VOCAB, glue_config as _config, write_sst2 as _write_sst2

import squeezebert_jax as sj
from squeezebert_jax import distill, inference, losses
from squeezebert_jax import finetune as ft
from squeezebert_jax.errors import InputError


def _model(layers=6, hidden=32, head="SqueezeBertForSequenceClassification", seed=0, heads=4):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=hidden, embedding_size=hidden,
                               num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden,
                               max_position_embeddings=64)
    return sj.HEADS[head](cfg, rngs=nnx.Rngs(seed), **({"num_labels": 2} if "Classification" in head else {}))


def _model_dir(path, **kw):
    sj.save_pretrained(_model(**kw), path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


def _flat(model):
    return {k.removeprefix("transformer/"): v for k, v in sj.convert.flat_params(model).items()}


# ---- students from a teacher's layers ----------------------------------------------------------------------------

@pytest.mark.parametrize("mapping,chosen", [("skip", [1, 3, 5]), ("first", [1, 2, 3]), ([2, 4, 6], [2, 4, 6]),
                                            ("6,5,1", [6, 5, 1])])
def test_student_copies_the_chosen_layers_exactly(tmp_path, mapping, chosen):
    teacher = _model_dir(tmp_path / "teacher")
    student = distill.init_student_from_teacher(str(teacher), 3, mapping, out_dir=str(tmp_path / "student"))
    assert student.config.num_hidden_layers == 3
    t, s = _flat(sj.load_pretrained(teacher)), _flat(sj.load_pretrained(tmp_path / "student"))
    assert os.path.exists(tmp_path / "student" / "vocab.txt")
    for key, value in s.items():
        if key.startswith("encoder/layers/"):
            i, rest = key.split("/")[2], key.split("/", 3)[3]
            np.testing.assert_array_equal(value, t[f"encoder/layers/{chosen[int(i)] - 1}/{rest}"])
        else:  # embeddings, pooler, classifier
            np.testing.assert_array_equal(value, t[key])
    assert len([k for k in s if k.startswith("encoder/layers/")]) * 2 == len([k for k in t if k.startswith("encoder/")])


def test_student_layer_map_errors():
    assert distill.student_layer_choice("skip", 6, 12) == [1, 3, 5, 7, 9, 11]
    with pytest.raises(InputError, match=r"config.student_layers=7: a student of 1 to 6 layers, built from the "
                                         r"layers of init_from's 6-layer model"):
        distill.student_layer_choice("skip", 7, 6)
    with pytest.raises(InputError, match=r"student layer map '1,1': teacher layer 1 named twice"):
        distill.student_layer_choice("1,1", 2, 6)
    with pytest.raises(InputError, match=r"expected 3 teacher layers in 1\.\.6"):
        distill.student_layer_choice("1,3,7", 3, 6)
    # 0-based, checked with the settings (init_from's depth not yet known): "in 1..10000" was said
    with pytest.raises(InputError, match=r"^student layer map '0,1': teacher layer 0; the teacher's layers are "
                                         r"numbered from 1$"):
        distill.check_map_forms("uniform", "0,1")
    with pytest.raises(InputError, match="'skip', 'first'"):
        distill.student_layer_choice("every", 3, 6)


def test_finetune_starts_a_student_from_init_from(tmp_path):
    _write_sst2(tmp_path / "glue", n_train=32, n_dev=16)
    init = _model_dir(tmp_path / "init", layers=4, head="SqueezeBertForPreTraining")
    c = _config("sst2", init, tmp_path / "glue", num_epochs=1, student_layers=2, student_layer_map="first")
    ft.finetune(c, str(tmp_path / "run"))
    saved = sj.load_pretrained(tmp_path / "run" / "model")
    assert saved.config.num_hidden_layers == 2
    start, src = _flat(sj.load_pretrained(tmp_path / "run" / "student_init")), _flat(sj.load_pretrained(init))
    np.testing.assert_array_equal(start["encoder/layers/1/output/conv1d/kernel"],
                                  src["encoder/layers/1/output/conv1d/kernel"])


# ---- layer maps and losses ---------------------------------------------------------------------------------------

def test_layer_maps():
    assert distill.layer_pairs("skip", 6, 12) == ((1, 2), (2, 4), (3, 6), (4, 8), (5, 10))  # PKD-Skip
    assert distill.layer_pairs("last", 6, 12) == ((1, 7), (2, 8), (3, 9), (4, 10), (5, 11))  # PKD-Last
    assert distill.layer_pairs("uniform", 3, 6) == ((0, 0), (1, 2), (2, 4), (3, 6))  # TinyBERT
    assert distill.layer_pairs("1:3, 2:6", 2, 6) == ((1, 3), (2, 6))
    with pytest.raises(InputError, match="pair 3:6 names a layer the student \\(2 layers\\)"):
        distill.layer_pairs("1:3,3:6", 2, 6)
    with pytest.raises(InputError, match="expected 'skip', 'last', 'uniform' or pairs"):
        distill.layer_pairs("1-3", 2, 6)
    with pytest.raises(InputError, match="pairs no layers"):
        distill.layer_pairs("skip", 1, 6)
    with pytest.raises(InputError, match=r"layer map '1:2,1:2': pair 1:2 given twice"):  # its loss counted twice
        distill.layer_pairs("1:2,1:2", 2, 6)
    # a student deeper than its teacher: "last" paired student layer 1 with teacher layer -1 (Python's last), "skip"
    # and "uniform" two student layers with one teacher layer; explicit pairs say what is meant
    for spec in ("skip", "last", "uniform"):
        with pytest.raises(InputError, match=rf"^layer map '{spec}' maps a student onto a deeper teacher, and this "
                                             r"4-layer student is deeper than the 2-layer teacher: give the pairs"):
            distill.layer_pairs(spec, 4, 2)
    assert distill.layer_pairs("last", 2, 2) == ((1, 1),) and distill.layer_pairs("2:2,4:2", 4, 2) == ((2, 2), (4, 2))
    # the forms, checked with the settings whether or not a teacher uses them
    distill.check_map_forms("uniform", "skip")
    distill.check_map_forms("1:2,2:4", "1,3")
    for layer_map, student_map, msg in (("a:b", "skip", r"layer map 'a:b': expected 'skip', 'last', 'uniform'"),
                                        ("1:2,,3:4", "skip", r"layer map '1:2,,3:4': expected"),
                                        ("skip", "zzz", r"student layer map 'zzz': expected 'skip', 'first'"),
                                        ("skip", "2,2", r"teacher layer 2 named twice")):
        with pytest.raises(InputError, match=msg):
            distill.check_map_forms(layer_map, student_map)


def _np_normalise(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_losses_equal_numpy_references():
    rng = np.random.default_rng(0)
    P, B, S, H, heads = 2, 3, 5, 8, 2
    s, t = rng.normal(size=(P, B, S, H)), rng.normal(size=(P, B, S, H))
    sa, ta = rng.dirichlet(np.ones(S), size=(P, B, heads, S)), rng.dirichlet(np.ones(S), size=(P, B, heads, S))
    mask = np.ones((B, S)); mask[1, 3:] = 0
    w = np.array([1.0, 1.0, 0.0])  # the last row is batch padding

    per = np.sum((_np_normalise(s[:, :, 0]) - _np_normalise(t[:, :, 0])) ** 2, -1).mean(0)
    want = np.sum(per * w) / w.sum()
    got = distill.patient_loss(jnp.asarray(s[:, :, 0]), jnp.asarray(t[:, :, 0]), jnp.asarray(w))
    np.testing.assert_allclose(float(got), want, rtol=1e-5)

    m = mask * w[:, None]
    want = sum(np.sum((s[p, b, i] - t[p, b, i]) ** 2) for p in range(P) for b in range(B) for i in range(S)
               if m[b, i]) / (m.sum() * P * H)
    np.testing.assert_allclose(float(distill.hidden_mse(jnp.asarray(s), jnp.asarray(t), jnp.asarray(mask),
                                                        jnp.asarray(w))), want, rtol=1e-5)

    want = sum(np.sum((sa[p, b, h, i] - ta[p, b, h, i]) ** 2) for p in range(P) for b in range(B)
               for h in range(heads) for i in range(S) if m[b, i]) / (m.sum() * P * heads * S)
    np.testing.assert_allclose(float(distill.attention_mse(jnp.asarray(sa), jnp.asarray(ta), jnp.asarray(mask),
                                                           jnp.asarray(w))), want, rtol=1e-5)


def test_layer_loss_picks_the_mapped_layers_and_projects():
    rng = np.random.default_rng(1)
    B, S, heads = 2, 4, 2
    student = sj.model.EncoderStates(jnp.asarray(rng.normal(size=(3, B, S, 4))),
                                     jnp.asarray(rng.dirichlet(np.ones(S), size=(2, B, heads, S))))
    teacher = sj.model.EncoderStates(jnp.asarray(rng.normal(size=(5, B, S, 6))),
                                     jnp.asarray(rng.dirichlet(np.ones(S), size=(4, B, heads, S))))
    proj = distill.init_projection(4, 6, seed=3)
    assert proj["kernel"].shape == (4, 6) and distill.init_projection(6, 6) == {}
    mask, w = jnp.ones((B, S)), jnp.ones((B,))
    loss = distill.LayerLoss(((0, 0), (2, 4)), patient_weight=2.0, hidden_weight=3.0, attention_weight=5.0)
    total, parts = loss(student, teacher, proj, mask, w)
    hs = np.asarray(student.hidden_states)[[0, 2]] @ np.asarray(proj["kernel"]) + np.asarray(proj["bias"])
    ht = np.asarray(teacher.hidden_states)[[0, 4]]
    np.testing.assert_allclose(float(parts["patient"]), float(distill.patient_loss(hs[:, :, 0], ht[:, :, 0], w)),
                               rtol=1e-5)
    np.testing.assert_allclose(float(parts["hidden"]), np.mean((hs - ht) ** 2), rtol=1e-5)
    att = np.mean((np.asarray(student.attentions)[[1]] - np.asarray(teacher.attentions)[[3]]) ** 2)  # 0:0 skipped
    np.testing.assert_allclose(float(parts["attention"]), att, rtol=1e-5)
    np.testing.assert_allclose(float(total), 2 * parts["patient"] + 3 * parts["hidden"] + 5 * parts["attention"],
                               rtol=1e-6)


# ---- a student trained with the layer losses moves toward its teacher ---------------------------------------------

def _agreement(model_or_dir, teacher_logits, arrays):
    model = sj.load_pretrained(model_or_dir) if isinstance(model_or_dir, (str, os.PathLike)) else model_or_dir
    return float(np.mean(inference.predict_logits(model, arrays).argmax(-1) == teacher_logits.argmax(-1)))


@pytest.mark.slow
def test_layer_distillation_moves_the_student_toward_the_teacher(tmp_path):
    _write_sst2(tmp_path / "glue", n_train=384, n_dev=64)
    init = _model_dir(tmp_path / "init", layers=2, head="SqueezeBertForPreTraining")
    ft.finetune(_config("sst2", init, tmp_path / "glue", learning_rate=3e-3, num_epochs=4, dropout=0.0),
                str(tmp_path / "teacher"))
    teacher = str(tmp_path / "teacher" / "model")
    # a narrower student (hidden 16 vs 32: the projection is used), 2 layers, random weights
    student = _model_dir(tmp_path / "student", layers=2, hidden=16, head="SqueezeBertForPreTraining", seed=2)
    c = _config("sst2", student, tmp_path / "glue", learning_rate=1e-2, num_epochs=3, dropout=0.0,
                attention_dropout=0.0, warmup_fraction=0.0)
    c.distill.update(teacher=teacher, teacher_weight=1.0, patient_weight=1.0, hidden_weight=1.0,
                     attention_weight=100.0, layer_map="uniform")  # attention MSE is ~1e-4: weighted up
    tok = inference.model_tokenizer(teacher)
    dev = sj.glue.encode_examples(sj.glue.load_examples("sst2", "dev", data_dir=str(tmp_path / "glue")), tok, 16,
                                  task="sst2")
    t_logits = inference.predict_logits(sj.load_pretrained(teacher), dev)
    assert 0.2 < t_logits.argmax(-1).mean() < 0.8  # the teacher's predictions are not one class
    before = _agreement(sj.load_pretrained(student, "SqueezeBertForSequenceClassification", num_labels=2), t_logits,
                        dev)
    res = ft.finetune(c, str(tmp_path / "run"))
    hist = res["history"]
    for name in ("train_loss", "train_patient", "train_hidden", "train_attention"):
        assert hist[-1][name] < hist[0][name], (name, [h[name] for h in hist])
    after = _agreement(str(tmp_path / "run" / "model"), t_logits, dev)
    assert after > before and after >= 0.9, (before, after)
    # the projection is not part of the exported student
    assert not any("proj" in k for k in sj.convert.flat_params(sj.load_pretrained(tmp_path / "run" / "model")))


def test_layer_distillation_input_errors(tmp_path):
    _write_sst2(tmp_path / "glue", n_train=16, n_dev=8)
    student = _model_dir(tmp_path / "student", layers=2)
    teacher = _model_dir(tmp_path / "teacher", layers=4)
    c = _config("sst2", student, tmp_path / "glue", num_epochs=1)
    c.distill.update(teacher=str(teacher), hidden_weight=1.0, layer_map="1:2,3:4")
    with pytest.raises(InputError, match="pair 3:4 names a layer the student \\(2 layers\\)"):
        ft.finetune(c, str(tmp_path / "run"))
    c.student_layers, c.distill.layer_map = 1, "skip"  # a 1-layer student has no layer below its last to map
    with pytest.raises(InputError, match="'skip' pairs no layers of a 1-layer student"):
        ft.finetune(c, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")  # checked before anything is written
    c.student_layers = 0
    c.distill.layer_map = "skip"
    (teacher / "vocab.txt").write_text("\n".join(VOCAB[:-1] + ["other"]) + "\n")
    with pytest.raises(InputError, match="vocabularies of .* differ"):
        ft.finetune(c, str(tmp_path / "run"))
    c.distill.teacher = ""
    with pytest.raises(InputError, match=r"config.distill.hidden_weight=1.0: 0 without a distill.teacher"):
        ft.finetune(c, str(tmp_path / "run"))
    c.distill.update(teacher=str(_model_dir(tmp_path / "heads8", layers=4, heads=8)), hidden_weight=0.0,
                     attention_weight=1.0)
    with pytest.raises(InputError, match="same number of heads: .* has 4, teacher .* has 8"):
        ft.finetune(c, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")


# ---- pre-trained distillation on transfer text --------------------------------------------------------------------

def test_transfer_rows_are_trained_on_the_soft_labels_alone():
    rng = np.random.default_rng(2)
    logits, teacher = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    labels, w = np.array([0, 2, 0, 0]), np.ones(4)
    tw = np.array([0.5, 0.5, 1.0, 1.0])  # two labeled rows (mix 0.5), two transfer rows
    p_t = np.exp(teacher) / np.exp(teacher).sum(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = tw[:, None] * p_t + (1 - tw[:, None]) * np.eye(3)[labels]
    want = np.mean(-np.sum(target * logp, -1))
    got = losses.task_loss(jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(w), jnp.asarray(teacher), jnp.asarray(tw))
    np.testing.assert_allclose(float(got), want, rtol=1e-6)
    soft = losses.task_loss(jnp.asarray(logits[2:]), jnp.asarray(labels[2:]), jnp.asarray(w[2:]), jnp.asarray(teacher[2:]),
                        jnp.asarray(tw[2:]))
    np.testing.assert_allclose(float(soft), np.mean(-np.sum(p_t[2:] * logp[2:], -1)), rtol=1e-6)
    # regression: the transfer rows' target is the teacher's score (their labels are not read)
    got = losses.task_loss(jnp.asarray(logits[:, :1]), jnp.asarray([1.0, 2.0, 0.0, 0.0]), jnp.asarray(w),
                       jnp.asarray(teacher[:, :1]), jnp.asarray(tw), regression=True)
    target = tw * teacher[:, 0] + (1 - tw) * np.array([1.0, 2.0, 0.0, 0.0])
    np.testing.assert_allclose(float(got), np.mean((logits[:, 0] - target) ** 2), rtol=1e-6)


@pytest.mark.slow
def test_transfer_text_joins_the_training_set(tmp_path):
    _write_sst2(tmp_path / "glue", n_train=32, n_dev=16)
    student = _model_dir(tmp_path / "student", layers=2, head="SqueezeBertForPreTraining")
    teacher = _model_dir(tmp_path / "teacher", layers=2, seed=3)
    text = tmp_path / "unlabeled.txt"
    text.write_text("\n".join(f"the movie was {w} truly" for w in VOCAB[5:] * 2) + "\n\n")  # 26 lines, a blank one
    more = tmp_path / "more.txt"
    more.write_text("a very good plot\n")
    c = _config("sst2", student, tmp_path / "glue", num_epochs=2, batch_size=16)
    c.distill.update(teacher=str(teacher), transfer_text=f"{text},{more}")
    res = ft.finetune(c, str(tmp_path / "run"))
    assert (res["train_examples"], res["transfer_examples"]) == (32, 27)
    assert res["history"][-1]["step"] == 2 * 4  # ceil((32 + 27) / 16) steps an epoch, against 2 without
    assert any(f.startswith("teacher_sst2_transfer") for f in os.listdir(tmp_path / "run" / "teacher_cache"))

    c.distill.transfer_text = ""
    assert ft.finetune(c, str(tmp_path / "run2"))["history"][-1]["step"] == 2 * 2


def test_transfer_text_input_errors(tmp_path):
    _write_sst2(tmp_path / "glue", n_train=16, n_dev=8)
    student = _model_dir(tmp_path / "student", layers=2)
    text = tmp_path / "t.txt"
    text.write_text("good movie\tbad movie\n")
    c = _config("sst2", student, tmp_path / "glue", num_epochs=1)
    c.distill.transfer_text = str(text)
    with pytest.raises(InputError, match="set distill.teacher"):
        ft.finetune(c, str(tmp_path / "run"))
    c.distill.teacher = str(student)
    with pytest.raises(InputError, match=r"t.txt:1: sst2 needs one sentence \(no tab\) per line, got 2"):
        ft.finetune(c, str(tmp_path / "run"))
    assert distill.read_transfer_text(str(text), "rte")[0].text_b == "bad movie"
    (tmp_path / "single.txt").write_text("good movie\n")
    with pytest.raises(InputError, match="rte needs two tab-separated sentences per line, got 1"):
        distill.read_transfer_text([str(tmp_path / "single.txt")], "rte")
    with pytest.raises(FileNotFoundError, match="no such file"):
        distill.read_transfer_text(str(tmp_path / "missing.txt"), "rte")
    # each line's sentences are texts (files.has_text), each file is read once, and a CSV is no plain text
    for body in ("good movie\tbad movie\nfine\t \n", "good movie\tbad movie\n\u200b\tx\n"):
        (tmp_path / "empty.txt").write_text(body)
        with pytest.raises(InputError, match=r"empty.txt:2: an empty sentence"):
            distill.read_transfer_text(str(tmp_path / "empty.txt"), "rte")
    os.symlink(text, tmp_path / "again.txt")
    with pytest.raises(InputError, match=r"again.txt is given twice \(also as .*t.txt\)"):
        distill.read_transfer_text(f"{text},{tmp_path / 'again.txt'}", "rte")
    (tmp_path / "t.csv").write_text("premise,hypothesis\ngood,bad\n")
    with pytest.raises(InputError, match=r"t.csv: a .csv file, whose header and quoting would be read as sentences"):
        distill.read_transfer_text(str(tmp_path / "t.csv"), "rte")
    (tmp_path / "t.tsv").write_text("sentence\ngood movie\n")  # its header was read as a sentence
    with pytest.raises(InputError, match=r"t.tsv: a .tsv file, whose header and quoting would be read as sentences"):
        distill.read_transfer_text(str(tmp_path / "t.tsv"), "sst2")


def test_a_damaged_teacher_cache_is_named_and_not_trained_on(tmp_path):
    """``distill._cached_logits``: a cache file cut short, holding pickled objects, another shape or NaN is one line
    naming the file and what to do (it was a traceback, an IndexError after "resuming", or a run that "diverged")."""
    from squeezebert_jax import distill

    good = tmp_path / "good.npy"
    np.save(good, np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(distill._cached_logits(str(good), 4), np.ones((4, 2), np.float32))
    cases = {"cut.npy": (lambda p: p.write_bytes(good.read_bytes()[:20]), r"\(.*\)"),
             "objects.npy": (lambda p: np.save(p, np.array([{"a": 1}] * 4, dtype=object)), r"\(.*pickle"),
             "shape.npy": (lambda p: np.save(p, np.ones(3, np.float32)), r"\(an array of shape \(3,\)"),
             "nan.npy": (lambda p: np.save(p, np.full((4, 2), np.nan, np.float32)), r"\(values that are not finite\)")}
    for name, (write, why) in cases.items():
        write(tmp_path / name)
        with pytest.raises(sj.errors.InputError, match=rf"^teacher cache {tmp_path / name} is damaged {why}.*; delete "
                                                        r"it \(the teacher's logits are computed again\)"):
            distill._cached_logits(str(tmp_path / name), 4)
