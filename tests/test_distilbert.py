"""DistilBERT (family "distilbert"): every head against transformers' PyTorch DistilBert* on random weights, the
converter both ways (DistilBERT's own names; no token types; pre_classifier as the ReLU pooler), the parameter count,
a MODEL_DIR round trip through convert/to_pytorch.py, the lite-interpreter export, and fine-tuning on a pair task."""

from __future__ import annotations

import os

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from conftest import VOCAB, assert_family_head_matches, glue_config, perturbed, tiny_init, write_sst2
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import mobile
from squeezebert_jax.benchmarks import compare

TINY = dict(vocab_size=50, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64)
OURS = dict(vocab_size=50, hidden_size=32, embedding_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
HEADS = {"DistilBertModel": "SqueezeBertModel", "DistilBertForMaskedLM": "SqueezeBertForMaskedLM",
         "DistilBertForSequenceClassification": "SqueezeBertForSequenceClassification",
         "DistilBertForTokenClassification": "SqueezeBertForTokenClassification",
         "DistilBertForQuestionAnswering": "SqueezeBertForQuestionAnswering",
         "DistilBertForMultipleChoice": "SqueezeBertForMultipleChoice"}
NO_PRE_CLASSIFIER = ("DistilBertModel", "DistilBertForMaskedLM", "DistilBertForTokenClassification",
                     "DistilBertForQuestionAnswering")


def torch_distilbert(cls: str):
    torch.manual_seed(0)
    return perturbed(getattr(transformers, cls)(transformers.DistilBertConfig(**TINY)).eval())


@pytest.mark.parametrize("cls", list(HEADS))
def test_every_head_equals_transformers_and_converts_back_exactly(cls, tmp_path):
    pooler = 32 * 32 + 32 if cls in NO_PRE_CLASSIFIER else 0
    assert_family_head_matches(torch_distilbert(cls), tmp_path, "distilbert", HEADS[cls], pooler,
                               token_types=False)  # ours is given token types and ignores them


def test_the_count_is_transformers_and_the_compare_row_the_papers():
    config = sj.SqueezeBertConfig.preset("distilbert-base-uncased")
    assert compare.param_counts(config) == transformers.DistilBertModel(
        transformers.DistilBertConfig()).num_parameters() == 66_362_880
    (row,) = [e for e in compare.ENTRIES if e.preset == "distilbert-base-uncased"]
    assert round(sj.flops(config, 128, pooler_every_token=True) / 1e9, 1) == row.published[0].gflops == 11.3
    assert abs(compare.param_counts(config) / 66e6 - 1) < 0.01


def test_a_model_dir_writes_distilbert_and_exports_to_the_lite_interpreter(tmp_path, run_cli):
    config = sj.SqueezeBertConfig.preset("distilbert-base-uncased", **OURS)
    model = sj.SqueezeBertForSequenceClassification(config, num_labels=3, rngs=nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    rc, out, err = run_cli("convert/to_pytorch.py", "--src", tmp_path / "m", "--out", tmp_path / "hf")
    assert rc == 0 and "DistilBertForSequenceClassification (model_type distilbert)" in out, err
    tm = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    ids, mask, tt = mobile.example_inputs(config, 2, 10, seed=3)
    model.eval()
    want = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits)
    with torch.no_grad():
        assert np.max(np.abs(tm(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy() - want)) <= 1e-5
    # overwrite=True over a link replaces the link, never the file it points to (written whole, then put in place)
    (tmp_path / "notes.txt").write_text("a file of the user's")
    os.symlink(tmp_path / "notes.txt", tmp_path / "d.ptl")
    res = mobile.export_lite(model, tmp_path / "d.ptl", batch=2, seq_len=10, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "a file of the user's" and not os.path.islink(tmp_path / "d.ptl")
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".partial")]
    assert res.torch_class == "DistilBertForSequenceClassification"
    got = mobile.run_torch(mobile.load_lite(res.path), ids, mask, tt)[0]
    assert np.max(np.abs(got - want)) <= 1e-4


def test_distilbert_fine_tunes_on_a_glue_task(tmp_path):
    from squeezebert_jax import finetune as ft

    tiny_init(tmp_path / "init", VOCAB, sj.SqueezeBertConfig.preset("distilbert-base-uncased", **OURS))
    write_sst2(tmp_path / "glue", n_train=64, n_dev=16)
    res = ft.finetune(glue_config("sst2", tmp_path / "init", tmp_path / "glue", num_epochs=1, learning_rate=1e-3),
                      str(tmp_path / "run"))
    assert res["best"] is not None and np.isfinite(res["history"][-1]["train_loss"])
    assert sj.load_pretrained(tmp_path / "run" / "model").config.family == "distilbert"
