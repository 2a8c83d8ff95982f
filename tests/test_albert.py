"""ALBERT (family "albert"): every head against transformers' PyTorch Albert* on random weights, the converter both
ways, one shared set of layer weights whose gradient sums over its uses (against torch autograd), the parameter and
FLOP counts, a MODEL_DIR round trip, the lite-interpreter export, and a pretraining run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from conftest import assert_family_head_matches, perturbed
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import convert, mobile, pretrained
from squeezebert_jax.benchmarks import compare
from squeezebert_jax.errors import InputError

TINY = dict(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
HEADS = {"AlbertModel": "SqueezeBertModel", "AlbertForPreTraining": "SqueezeBertForPreTraining",
         "AlbertForMaskedLM": "SqueezeBertForMaskedLM",
         "AlbertForSequenceClassification": "SqueezeBertForSequenceClassification",
         "AlbertForTokenClassification": "SqueezeBertForTokenClassification",
         "AlbertForQuestionAnswering": "SqueezeBertForQuestionAnswering",
         "AlbertForMultipleChoice": "SqueezeBertForMultipleChoice"}


def inputs(shape=(2, 10), seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, TINY["vocab_size"], shape)
    mask = np.ones(shape, np.int64)
    mask[1, 7:] = 0  # padding in the second row (multiple choice: its every choice)
    tt = np.zeros(shape, np.int64)
    tt[..., 5:] = 1
    return ids, mask, tt


def torch_albert(cls: str, seed: int = 0):
    torch.manual_seed(seed)
    return perturbed(getattr(transformers, cls)(transformers.AlbertConfig(**TINY)).eval())


@pytest.mark.parametrize("cls", list(HEADS))
def test_every_head_equals_transformers_and_converts_back_exactly(cls, tmp_path):
    pooler = 32 * 32 + 32 if cls in ("AlbertForMaskedLM", "AlbertForTokenClassification",
                                     "AlbertForQuestionAnswering") else 0  # built without one by transformers
    assert_family_head_matches(torch_albert(cls), tmp_path, "albert", HEADS[cls], pooler)


def test_the_shared_layer_is_one_set_of_weights_and_its_gradient_sums_over_the_layers():
    """The parameter count does not grow with depth (one set), and the gradient of the shared weights equals torch
    autograd's, which accumulates it over the 3 uses (a per-layer gradient would be a third or less of it)."""
    one = sj.SqueezeBertModel(sj.SqueezeBertConfig.preset("albert-base-v2", **{**TINY, "num_hidden_layers": 1}),
                              rngs=nnx.Rngs(0))
    assert sj.count_params(one) == transformers.AlbertModel(transformers.AlbertConfig(**TINY)).num_parameters()
    tm = torch_albert("AlbertModel")
    model = pretrained.from_torch_state_dict({k: v.numpy() for k, v in tm.state_dict().items()},
                                     sj.SqueezeBertConfig.preset("albert-base-v2", **TINY))
    assert sj.count_params(model) == sj.count_params(one) and len(model.encoder.layers) == 1
    ids, mask, tt = inputs()
    weights = np.random.default_rng(1).standard_normal((2, 10, 32)).astype(np.float32)
    out = tm(torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(tt))
    (out.last_hidden_state * torch.tensor(weights)).sum().backward()
    layer = "encoder.albert_layer_groups.0.albert_layers.0."
    model.eval()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params, rest = nnx.to_pure_dict(params), nnx.to_pure_dict(rest)

    def loss(p):  # as the train steps build the model from its parameters (finetune.build_step)
        m = nnx.merge(graphdef, p, rest)
        nnx.reseed(m, dropout=jax.random.key(0), default=jax.random.key(0))
        return jnp.sum(m(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).last_hidden_state * weights)

    grads = jax.jit(jax.grad(loss))(params)
    g = grads["encoder"]["layers"][0]
    for ours, theirs in ((g["attention"]["query"]["kernel"], layer + "attention.query.weight"),
                         (g["intermediate"]["conv1d"]["kernel"], layer + "ffn.weight")):
        want = dict(tm.named_parameters())[theirs].grad.numpy()
        got = np.asarray(ours)[0].T  # [G=1, in, out] -> torch's [out, in]
        assert np.allclose(got, want, rtol=1e-4, atol=1e-6), np.max(np.abs(got - want))


def test_counts_flops_and_the_compare_row():
    config = sj.SqueezeBertConfig.preset("albert-base-v2")
    ref = transformers.AlbertConfig(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                                    num_attention_heads=12, intermediate_size=3072)
    assert compare.param_counts(config) == transformers.AlbertModel(ref).num_parameters() == 11_683_584
    bert = sj.SqueezeBertConfig.preset("bert-base-uncased")
    assert sj.flops(config, 128) - sj.flops(bert, 128) == 2 * 128 * 128 * 768  # the projection, nothing else
    (row,) = [e for e in compare.ENTRIES if e.preset == "albert-base-v2"]
    assert round(sj.flops(config, 128, pooler_every_token=True) / 1e9, 1) == row.published[0].gflops == 22.5


def test_a_model_dir_keeps_the_family_and_to_pytorch_writes_albert(tmp_path, run_cli):
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig.preset("albert-base-v2", **TINY),
                                                    num_labels=3, rngs=nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    again = sj.load_pretrained(tmp_path / "m")
    assert again.config.family == "albert" and again.num_labels == 3
    ids, mask, tt = inputs()
    model.eval(), again.eval()
    assert np.array_equal(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits,
                          again(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits)
    rc, out, err = run_cli("convert/to_pytorch.py", "--src", tmp_path / "m", "--out", tmp_path / "hf")
    assert rc == 0 and "AlbertForSequenceClassification (model_type albert)" in out, err
    tm = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        t = tm(torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(tt)).logits
    assert np.max(np.abs(t.numpy() - np.asarray(again(jnp.asarray(ids), jnp.asarray(mask),
                                                      jnp.asarray(tt)).logits))) <= 1e-5
    with pytest.raises(InputError, match="cannot be written as bert"):
        convert.to_torch_state_dict(model, style="bert")


def test_the_lite_interpreter_export_equals_flax(tmp_path):
    model = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig.preset("albert-base-v2", **TINY), rngs=nnx.Rngs(0))
    res = mobile.export_lite(model, tmp_path / "a.ptl", batch=2, seq_len=10)
    assert res.torch_class == "AlbertForMaskedLM" and res.outputs == ("mlm_logits",)
    ids, mask, tt = mobile.example_inputs(model.config, 2, 10, seed=3)
    got = mobile.run_torch(mobile.load_lite(res.path), ids, mask, tt)[0]
    want = model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).mlm_logits
    assert np.max(np.abs(got - np.asarray(want))) <= 1e-4


def test_albert_pretrains_with_mlm_and_sop(tmp_path):
    from conftest import tiny_config

    from squeezebert_jax import pretrain

    c = tiny_config(**{"model.preset": "albert-base-v2",
                       "model.overrides": dict(hidden_size=32, embedding_size=16, num_hidden_layers=3,
                                               num_attention_heads=2, intermediate_size=64,
                                               max_position_embeddings=128)})
    final = pretrain.train_and_evaluate(c, str(tmp_path / "run"))
    assert final["preempted"] is False and np.isfinite(final["loss"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert model.config.family == "albert" and len(model.transformer.encoder.layers) == 1


def test_a_shallower_albert_student_runs_the_shared_layer_fewer_times():
    from squeezebert_jax import distill

    teacher = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig.preset("albert-base-v2", **TINY),
                                                      num_labels=2, rngs=nnx.Rngs(0))
    student = distill.init_student_from_teacher(teacher, 2)
    assert student.config.num_hidden_layers == 2 and sj.count_params(student) == sj.count_params(teacher)
    got, want = convert.flat_params(student), convert.flat_params(teacher)
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("kind, sparsity", [("unstructured", 0.5), ("heads", 0.5), ("ffn", 0.25)])
def test_pruning_albert_prunes_its_one_shared_layer_for_every_run(kind, sparsity, tmp_path):
    """The pruner sees one layer (the shared one): its masks reach the sparsity there, and the pruned weights are
    the ones every one of the num_hidden_layers runs uses; a fine-tuning run with pruning exports it pruned."""
    from conftest import VOCAB, glue_config, tiny_init, write_sst2

    from squeezebert_jax import finetune as ft
    from squeezebert_jax import prune

    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig.preset("albert-base-v2", **TINY),
                                                    num_labels=2, rngs=nnx.Rngs(0))
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    masks = prune.compute_masks(params, kind, sparsity, num_heads=4)
    rep = prune.sparsity_report(jax.tree.map(lambda p, m: p * m, params, masks), num_heads=4)
    assert set(rep["per_layer"]) == {"0"} and rep["encoder"] > 0
    if kind == "unstructured":
        assert rep["encoder"] == pytest.approx(sparsity, abs=0.01)
    if kind != "unstructured":  # the run: the exported model holds the masked shared layer
        return
    tiny_init(tmp_path / "init", VOCAB, sj.SqueezeBertConfig.preset("albert-base-v2", **TINY))
    write_sst2(tmp_path / "glue", n_train=64, n_dev=16)
    cfg = glue_config("sst2", tmp_path / "init", tmp_path / "glue", num_epochs=2, learning_rate=1e-3)
    cfg.prune.target, cfg.prune.end = sparsity, 0.5
    res = ft.finetune(cfg, str(tmp_path / "run"))
    assert res["history"][-1]["sparsity"] == pytest.approx(sparsity, abs=0.01)
    out = nnx.to_pure_dict(nnx.state(sj.load_pretrained(tmp_path / "run" / "model"), nnx.Param))
    assert prune.sparsity_report(out)["encoder"] == pytest.approx(sparsity, abs=0.01)
