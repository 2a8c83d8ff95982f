"""ELECTRA (family "electra"): every head, the replaced-token-detection discriminator included, against transformers'
PyTorch Electra* on random weights, with and without the embedding projection; the converter both ways; the count;
a MODEL_DIR round trip through convert/to_pytorch.py and the lite-interpreter export of the discriminator."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from conftest import assert_family_head_matches, perturbed
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import mobile
from squeezebert_jax.benchmarks import compare

HEADS = {"ElectraModel": "SqueezeBertModel", "ElectraForPreTraining": "SqueezeBertForReplacedTokenDetection",
         "ElectraForMaskedLM": "SqueezeBertForMaskedLM",
         "ElectraForSequenceClassification": "SqueezeBertForSequenceClassification",
         "ElectraForTokenClassification": "SqueezeBertForTokenClassification",
         "ElectraForQuestionAnswering": "SqueezeBertForQuestionAnswering",
         "ElectraForMultipleChoice": "SqueezeBertForMultipleChoice"}
WITH_POOLER = ("ElectraForSequenceClassification", "ElectraForMultipleChoice")  # classifier.dense / summary


def tiny(embedding_size: int) -> dict:
    return dict(vocab_size=50, embedding_size=embedding_size, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)


@pytest.mark.parametrize("embedding_size", [16, 32])  # projected to hidden 32, and not
@pytest.mark.parametrize("cls", list(HEADS))
def test_every_head_equals_transformers_and_converts_back_exactly(cls, embedding_size, tmp_path):
    torch.manual_seed(0)
    tm = perturbed(getattr(transformers, cls)(transformers.ElectraConfig(**tiny(embedding_size))).eval())
    model = assert_family_head_matches(tm, tmp_path, "electra", HEADS[cls], 0 if cls in WITH_POOLER else 32 * 32 + 32)
    assert model.config.factorized_embeddings == (embedding_size != 32)


def test_the_count_and_flops_of_electra_small_and_its_compare_row():
    config = sj.SqueezeBertConfig.preset("electra-small-discriminator")
    ref = transformers.ElectraConfig(embedding_size=128, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
                                     intermediate_size=1024)
    assert compare.param_counts(config) == transformers.ElectraModel(ref).num_parameters() == 13_483_008
    (row,) = [e for e in compare.ENTRIES if e.preset == "electra-small-discriminator"]
    assert abs(sj.flops(config, 128) / 1e9 / row.published[0].gflops - 1) < 0.01  # 2.63 against 2.62
    bert_like = config.replace(family="", embedding_size=256)
    assert sj.flops(config, 128) - sj.flops(bert_like, 128) == 2 * 128 * 128 * 256  # the projection


def test_the_discriminator_writes_electra_for_pretraining_and_exports(tmp_path, run_cli):
    config = sj.SqueezeBertConfig.preset("electra-small-discriminator", **tiny(16))
    model = sj.SqueezeBertForReplacedTokenDetection(config, rngs=nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    rc, out, err = run_cli("convert/to_pytorch.py", "--src", tmp_path / "m", "--out", tmp_path / "hf")
    assert rc == 0 and "ElectraForPreTraining (model_type electra)" in out, err
    tm = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ids, mask, tt = mobile.example_inputs(config, 2, 10, seed=3)
    model.eval()
    want = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits)
    assert want.shape == (2, 10)
    with torch.no_grad():
        got = tm(torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(tt)).logits
    assert np.max(np.abs(got.numpy() - want)) <= 1e-5
    res = mobile.export_lite(model, tmp_path / "d.ptl", batch=2, seq_len=10)
    assert res.torch_class == "ElectraForPreTraining"
    assert np.max(np.abs(mobile.run_torch(mobile.load_lite(res.path), ids, mask, tt)[0] - want)) <= 1e-4


@pytest.mark.parametrize("preset, overrides", [
    ("electra-small-discriminator", dict(embedding_size=16)),  # projected to hidden 32
    ("distilbert-base-uncased", dict(embedding_size=32)),
])
def test_the_families_pretrain_with_mlm_and_sop_and_export_their_family(tmp_path, preset, overrides):
    """train/pretrain.py's objective (MLM + SOP) on an ELECTRA or DistilBERT encoder: a finite loss and a MODEL_DIR
    that keeps the family (ELECTRA's own replaced-token detection is not a pretraining objective yet)."""
    from conftest import tiny_config

    from squeezebert_jax import pretrain

    c = tiny_config(**{"model.preset": preset,
                       "model.overrides": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                               intermediate_size=64, max_position_embeddings=128, **overrides)})
    final = pretrain.train_and_evaluate(c, str(tmp_path / "run"))
    assert final["preempted"] is False and np.isfinite(final["loss"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert model.config.family == preset.split("-")[0]
    # the mobile export's PyTorch model: the MLM logits, the SOP head dropped (it was a traceback for these two)
    torch_model = mobile.to_transformers(model)
    assert type(torch_model).__name__ == {"electra": "ElectraForMaskedLM",
                                          "distilbert": "DistilBertForMaskedLM"}[model.config.family]
    ids, mask, tt = mobile.example_inputs(model.config, 2, 10, seed=3)
    model.eval()
    want = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).mlm_logits)
    types = {"token_type_ids": torch.from_numpy(tt)} if model.config.family == "electra" else {}
    with torch.no_grad():
        got = torch_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), **types).logits
    assert np.max(np.abs(got.numpy() - want)) <= 1e-4
