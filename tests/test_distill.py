"""Layer-wise distillation: students from a teacher's layers, PKD / TinyBERT losses against numpy, a student moving
toward its teacher, and pre-trained distillation on unlabeled transfer text."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import distill
from squeezebert_jax import finetune as ft
from squeezebert_jax.errors import InputError
from test_finetune import VOCAB, _config, _write_sst2


def _model(layers=6, hidden=32, head="SqueezeBertForSequenceClassification", seed=0, **kw):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=hidden, embedding_size=hidden,
                               num_hidden_layers=layers, num_attention_heads=4, intermediate_size=2 * hidden,
                               max_position_embeddings=64, **kw)
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
    with pytest.raises(InputError, match="7 layers cannot be built from a 6-layer"):
        distill.student_layer_choice("skip", 7, 6)
    with pytest.raises(InputError, match=r"expected 3 teacher layers in 1\.\.6"):
        distill.student_layer_choice("1,3,7", 3, 6)
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
