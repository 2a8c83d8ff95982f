"""Config, FLOPs, dtypes, dropout and input validation of the Flax model (no torch needed)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax.flops import PAPER_GFLOPS
from squeezebert_jax.models.family import GROUP_FIELDS

TINY = dict(vocab_size=99, hidden_size=32, embedding_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=40)


def test_presets():
    sq = sj.SqueezeBertConfig.preset("squeezebert-uncased")
    assert (sq.vocab_size, sq.q_groups, sq.k_groups, sq.v_groups, sq.post_attention_groups,
            sq.intermediate_groups, sq.output_groups) == (30528, 4, 4, 4, 1, 4, 4)
    assert sj.SqueezeBertConfig.preset("bert-base-uncased").is_bert
    names = [f"bert-L{l}-H{h}" for l in (2, 4, 6, 8, 10, 12) for h in (128, 256, 512, 768)]
    assert len(names) == 24
    for n in names:
        c = sj.SqueezeBertConfig.preset(n)
        assert c.is_bert and c.num_attention_heads == c.hidden_size // 64
        assert c.intermediate_size == 4 * c.hidden_size
    assert sj.SqueezeBertConfig.preset("bert-medium") == sj.SqueezeBertConfig.preset("bert-L8-H512")
    assert sj.SqueezeBertConfig.preset("bert-tiny").num_hidden_layers == 2
    with pytest.raises(ValueError, match="unknown preset"):
        sj.SqueezeBertConfig.preset("bert-huge")
    with pytest.raises(ValueError, match="unknown BERT miniature"):
        sj.SqueezeBertConfig.preset("bert-L3-H128")


def test_config_json_round_trip_and_bert_config(tmp_path):
    c = sj.SqueezeBertConfig(**TINY, id2label={0: "neg", 1: "pos"})
    c.to_json(tmp_path / "config.json")
    assert sj.pretrained.read_model_config(tmp_path)[0] == c  # the one reader of a MODEL_DIR's config.json
    bert = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 2,
            "intermediate_size": 256, "vocab_size": 50, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
            "position_embedding_type": "absolute", "architectures": ["BertForMaskedLM"]}
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps(bert))
    b = sj.pretrained.read_model_config(tmp_path / "bert")[0]
    assert b.is_bert and b.embedding_size == 64 and b.num_hidden_layers == 3
    with pytest.raises(ValueError, match="model_type 'roberta'"):
        sj.SqueezeBertConfig.from_dict({"model_type": "roberta"})
    with pytest.raises(ValueError, match="q_groups=5 must divide"):
        sj.SqueezeBertConfig(**TINY, q_groups=5)
    # a field name no config has, in preset / replace / load_pretrained's config_overrides: one line, the nearest
    # field named (the dataclass's "__init__() got an unexpected keyword argument" named neither)
    with pytest.raises(sj.errors.InputError, match=r"^replace: 'hiden_size' is no SqueezeBertConfig field \(did you "
                                                   r"mean 'hidden_size'\?\)$"):
        c.replace(hiden_size=64)
    with pytest.raises(sj.errors.InputError, match=r"^preset\('bert-tiny'\): 'bogus' is no SqueezeBertConfig field$"):
        sj.SqueezeBertConfig.preset("bert-tiny", bogus=1)
    with pytest.raises(sj.errors.InputError, match=r"^preset name b'bert-tiny' is bytes; give a preset's name as a "
                                                   r"str"):
        sj.SqueezeBertConfig.preset(b"bert-tiny")
    # numpy's numbers are held as Python's: save_pretrained wrote the weights, then failed on config.json's JSON
    n = sj.SqueezeBertConfig(**{**TINY, "hidden_size": np.int64(32), "layer_norm_eps": np.float32(1e-6)})
    assert type(n.hidden_size) is int and type(n.layer_norm_eps) is float and n.hidden_size == 32
    model = sj.SqueezeBertForSequenceClassification(n, num_labels=np.int64(2), rngs=nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "np")
    assert sj.load_pretrained(tmp_path / "np").num_labels == 2


@pytest.mark.parametrize("name", ["squeezebert-uncased", "bert-base-uncased"])
def test_flops_match_paper_table2(name):
    got = sj.flops(sj.SqueezeBertConfig.preset(name), 128) / 1e9
    assert abs(got - PAPER_GFLOPS[name]) / PAPER_GFLOPS[name] < 0.01, got


@pytest.mark.parametrize("groups", [1, 4])
def test_flops_agree_with_xla_cost_analysis(groups):
    """XLA counts the same matmuls plus element-wise work (bias, softmax, LayerNorm, GELU) on top."""
    cfg = sj.SqueezeBertConfig.preset("squeezebert-uncased", num_hidden_layers=2, vocab_size=1000,
                                      q_groups=groups, k_groups=groups, v_groups=groups,
                                      intermediate_groups=groups, output_groups=groups,
                                      scan_layers=False)  # XLA counts a scanned layer once, not per iteration
    model = sj.SqueezeBertModel(cfg, rngs=nnx.Rngs(0))
    model.eval()
    graphdef, state = nnx.split(model)
    fwd = jax.jit(lambda s, ids: nnx.merge(graphdef, s)(ids).pooler_output)
    cost = fwd.lower(state, jnp.ones((1, 128), jnp.int32)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    ours = sj.flops(cfg, 128)
    assert ours <= cost["flops"] <= 1.08 * ours, (ours, cost["flops"])


def _tiny_inputs(batch=2, seq=10):
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(1, TINY["vocab_size"], (batch, seq)), jnp.int32)
    mask = jnp.ones((batch, seq), jnp.int32).at[1, 6:].set(0)
    return ids, mask


def test_bf16_compute_close_to_float32():
    """bfloat16 compute (float32 params, softmax and LayerNorm stats): |diff| <= 0.05 on O(1) hidden states."""
    cfg = sj.SqueezeBertConfig(**TINY)
    m32 = sj.SqueezeBertForSequenceClassification(cfg, num_labels=3, rngs=nnx.Rngs(0))
    m16 = sj.SqueezeBertForSequenceClassification(cfg, num_labels=3, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    m32.eval(), m16.eval()
    ids, mask = _tiny_inputs()
    a, b = m32(ids, mask), m16(ids, mask)
    assert b.last_hidden_state.dtype == jnp.bfloat16 and b.logits.dtype == jnp.float32
    assert jax.tree.leaves(nnx.state(m16, nnx.Param))[0].dtype == jnp.float32
    assert float(jnp.max(jnp.abs(a.last_hidden_state - b.last_hidden_state.astype(jnp.float32)))) <= 0.05
    assert float(jnp.max(jnp.abs(a.logits - b.logits))) <= 0.02


def test_dropout_only_in_train_mode():
    cfg = sj.SqueezeBertConfig(**TINY, hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    m = sj.SqueezeBertModel(cfg, rngs=nnx.Rngs(params=0, dropout=1))
    ids, mask = _tiny_inputs()
    m.eval()
    e1, e2 = m(ids, mask).last_hidden_state, m(ids, mask).last_hidden_state
    assert np.array_equal(e1, e2)
    m.train()
    t1, t2 = m(ids, mask).last_hidden_state, m(ids, mask).last_hidden_state
    assert not np.allclose(t1, t2) and not np.allclose(t1, e1)


def test_padding_does_not_change_real_tokens():
    """Extra right padding leaves the non-pad outputs unchanged (the additive mask really masks)."""
    m = sj.SqueezeBertModel(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    m.eval()
    ids, _ = _tiny_inputs(batch=1, seq=6)
    padded = jnp.concatenate([ids, jnp.zeros((1, 4), jnp.int32)], 1)
    mask = jnp.concatenate([jnp.ones((1, 6), jnp.int32), jnp.zeros((1, 4), jnp.int32)], 1)
    a = m(ids).last_hidden_state
    b = m(padded, mask).last_hidden_state[:, :6]
    assert float(jnp.max(jnp.abs(a - b))) <= 1e-5


def test_bad_inputs_give_clear_errors():
    m = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    ids, mask = _tiny_inputs()
    with pytest.raises(ValueError, match=r"input_ids values must be in \[0, 99\); got min \d+, max 99"):
        m(ids.at[0, 0].set(99))
    with pytest.raises(ValueError, match="input_ids values"):
        m(ids.at[0, 0].set(-1))
    with pytest.raises(ValueError, match=r"token_type_ids values must be in \[0, 2\)"):
        m(ids, mask, token_type_ids=jnp.full(ids.shape, 2))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 9\)"):
        m(ids, mask[:, :9])
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, seq\]"):
        m(ids[0])
    with pytest.raises(ValueError, match="max_position_embeddings 40"):
        m(jnp.ones((1, 41), jnp.int32))
    with pytest.raises(TypeError, match="integers"):
        m(ids.astype(jnp.float32))
    mc = sj.SqueezeBertForMultipleChoice(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"\[batch, choices, seq\]"):
        mc(ids)


def test_jit_of_pure_function_matches_eager():
    m = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    m.eval()
    ids, mask = _tiny_inputs()
    graphdef, state = nnx.split(m)

    @jax.jit
    def fwd(state, ids, mask):
        return nnx.merge(graphdef, state)(ids, mask).sop_logits

    assert float(jnp.max(jnp.abs(fwd(state, ids, mask) - m(ids, mask).sop_logits))) <= 1e-6


# --------------------------------------------------------------------------------------------------
# Layers under lax.scan and remat: the same numbers, the same parameter tree
# --------------------------------------------------------------------------------------------------

EXECUTIONS = ((False, "none"), (True, "none"), (True, "minimal"), (True, "lean"), (True, "dots_saveable"),
              (True, "full"), (False, "minimal"))  # (scan_layers, remat); the first is the reference


def _loss_and_grads(configs, train: bool, dtype=jnp.float32):
    """Per config: pretraining-model outputs and gradients, as pretrain.make_train_step computes them (pure-dict
    state, dropout reseeded inside). All variants in one jitted program: one XLA compile instead of one each."""
    ids, mask = _tiny_inputs()
    tt = (jnp.arange(10)[None] >= 5).astype(jnp.int32).repeat(2, 0)
    grad_fns, params = [], []
    for cfg in configs:
        m = sj.SqueezeBertForPreTraining(cfg, dtype=dtype, rngs=nnx.Rngs(params=0, dropout=1))
        m.train() if train else m.eval()
        g, p, r = nnx.split(m, nnx.Param, ...)
        r = nnx.to_pure_dict(r)

        def f(p, g=g, r=r):
            mm = nnx.merge(g, p, r)
            nnx.reseed(mm, dropout=jax.random.key(5))
            out = mm(ids, mask, tt, masked_positions=jnp.asarray([[1, 3], [2, 4]]))
            return jnp.sum(out.mlm_logits ** 2) + jnp.sum(out.sop_logits) + jnp.sum(out.pooler_output), out

        grad_fns.append(jax.value_and_grad(f, has_aux=True))
        params.append(nnx.to_pure_dict(p))
    results = jax.jit(lambda ps: [vg(p) for vg, p in zip(grad_fns, ps)])(params)
    return [(out, grads) for (_, out), grads in results]


@pytest.mark.slow
@pytest.mark.parametrize("train", [False, True])
def test_scan_and_remat_equal_the_unrolled_layers(train):
    """Every execution choice gives the unrolled loop's outputs and gradients with dropout on: the same masks (each
    layer keeps its own dropout stream under the scan, and a policy's recomputation draws them again). With dropout
    off, the scan alone and with the trainers' remat: every other policy recomputes the same deterministic ops."""
    executions = EXECUTIONS if train else EXECUTIONS[:3]
    # two layers (TINY's): enough for the scan to have to keep a dropout stream per layer
    (ref_out, ref_g), *rest = _loss_and_grads([sj.SqueezeBertConfig(**TINY, scan_layers=scan, remat=remat)
                                               for scan, remat in executions], train)
    for (scan, remat), (out, g) in zip(executions[1:], rest, strict=True):
        for a, b in ((out.last_hidden_state, ref_out.last_hidden_state), (out.mlm_logits, ref_out.mlm_logits)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * float(jnp.max(jnp.abs(b))))
        assert jax.tree.structure(g) == jax.tree.structure(ref_g)
        scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(ref_g))
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(ref_g)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * scale, err_msg=f"scan={scan} remat={remat}")


def test_abstract_model_has_shapes_and_the_eager_models_dropout_keys():
    """``model.abstract_model`` (train/compile.py's host model): every parameter a ShapeDtypeStruct of the eager
    model's shape and dtype, every other variable (the dropout streams' keys and counts) the eager model's value."""
    construct = lambda: sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(3))  # noqa: E731
    abstract, eager = sj.model.abstract_model(construct), construct()
    a, e = dict(nnx.to_flat_state(nnx.state(abstract))), dict(nnx.to_flat_state(nnx.state(eager)))
    assert a.keys() == e.keys()
    others = 0
    for path, var in e.items():
        got, want = a[path].get_value(), var.get_value()
        if isinstance(var, nnx.Param):
            assert isinstance(got, jax.ShapeDtypeStruct) and (got.shape, got.dtype) == (want.shape, want.dtype), path
        else:
            others += 1
            if jnp.issubdtype(want.dtype, jax.dtypes.prng_key):
                got, want = jax.random.key_data(got), jax.random.key_data(want)
            np.testing.assert_array_equal(got, want, err_msg=str(path))
    assert others > 0


def test_scanned_model_keeps_per_layer_names_and_the_converter_round_trip():
    """The scan stacks the layers only inside the call: the parameter tree, the saved files' names and the
    transformers state dict are the unrolled model's."""
    from squeezebert_jax import convert

    ids, mask = _tiny_inputs()
    tt = jnp.zeros_like(ids)
    scanned = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY, scan_layers=True), rngs=nnx.Rngs(0))
    unrolled = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY, scan_layers=False), rngs=nnx.Rngs(0))
    names = lambda m: sorted(sj.pretrained.flat_params(m))  # noqa: E731
    assert names(scanned) == names(unrolled)
    assert "transformer/encoder/layers/1/attention/query/kernel" in names(scanned)
    sd = convert.to_torch_state_dict(scanned)
    assert sorted(sd) == sorted(convert.to_torch_state_dict(unrolled))
    back = sj.pretrained.from_torch_state_dict(sd, scanned.config, head="SqueezeBertForPreTraining")
    scanned.eval(), back.eval()
    assert back.config.scan_layers
    a, b = sj.pretrained.flat_params(back), sj.pretrained.flat_params(scanned)
    assert sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)  # the weights, exactly
    np.testing.assert_allclose(back(ids, mask, tt).mlm_logits, scanned(ids, mask, tt).mlm_logits, atol=1e-6)
    assert "scan_layers" not in scanned.config.to_dict() and "remat" not in scanned.config.to_dict()


def test_set_execution_and_bad_remat():
    m = sj.SqueezeBertModel(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    assert m.encoder.scan_layers and m.encoder.remat == "minimal"
    sj.model.set_execution(m, scan_layers=False, remat="minimal")
    assert (m.encoder.scan_layers, m.encoder.remat, m.config.remat) == (False, "minimal", "minimal")
    with pytest.raises(ValueError, match="remat 'some' not supported"):
        sj.SqueezeBertConfig(**TINY, remat="some")
    with pytest.raises(ValueError, match="remat 'x' not supported"):
        sj.model.set_execution(m, remat="x")


def _mask_bias(batch: int, seq: int, lengths) -> jax.Array:
    m = (jnp.arange(seq)[None] < jnp.asarray(lengths)[:, None]).astype(jnp.float32)
    return ((1.0 - m) * jnp.finfo(jnp.float32).min)[:, None, None, :]


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-6), (jnp.bfloat16, 2e-2)])
def test_the_fused_attention_call_equals_the_explicit_core(dtype, tol):
    """``layers.fused_attention`` -- the call the GPU makes to cuDNN, here with XLA's implementation of the same API
    (layout [B, S, heads, d], the padding bias turned into a boolean mask) -- equals the explicit softmax core, padded
    rows and an unmasked call included: float32 to 1e-6, bfloat16 to its precision."""
    from squeezebert_jax import layers

    att = sj.SqueezeBertModel(sj.SqueezeBertConfig(**TINY), dtype=dtype, rngs=nnx.Rngs(0)).encoder.layers[0].attention
    att.eval()
    q, k, v = (jax.random.normal(jax.random.key(i), (3, 7, 4, 8)).astype(dtype) for i in range(3))
    for mask_bias in (_mask_bias(3, 7, [7, 4, 1]), jnp.zeros((), jnp.float32)):
        ref = np.asarray(att.core(q, k, v, mask_bias)[0], np.float32)
        got = np.asarray(layers.fused_attention(q, k, v, mask_bias, implementation="xla"), np.float32)
        np.testing.assert_allclose(got, ref, atol=tol, rtol=tol)
        np.testing.assert_allclose(np.asarray(att.fused_core(q, k, v, mask_bias), np.float32), ref, atol=tol)


def _fused_vs_reference(cfg, dtype, train: bool):
    """MLM logits (float32 numpy) and gradients of a tiny pretraining model under attention "fused" and "reference"."""
    results = _loss_and_grads([cfg.replace(attention=a) for a in ("fused", "reference")], train, dtype)
    return [(np.asarray(out.mlm_logits, np.float32), grads) for out, grads in results]


@pytest.mark.parametrize("groups", [{}, {"q_groups": 2, "output_groups": 1}, dict.fromkeys(GROUP_FIELDS, 1)])
def test_fused_and_reference_attention_agree_without_dropout(groups):
    """With dropout off the two attention paths are the same network: logits and every gradient equal in float32;
    in bfloat16 the logits agree to bf16's precision. SqueezeBERT's groups (Q/K/V one matmul, the FFN group-major),
    groups that differ (three convs, two channels-last convs) and BERT's."""
    cfg = sj.SqueezeBertConfig(**TINY, **groups)
    (a, ga), (b, gb) = _fused_vs_reference(cfg, jnp.float32, train=False)
    np.testing.assert_allclose(a, b, atol=1e-5 * np.abs(b).max())
    for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5 * max(1.0, float(np.abs(y).max())))
    (a16, _), _ = _fused_vs_reference(cfg, jnp.bfloat16, train=False)
    assert np.abs(a16 - b).max() <= 0.05 * np.abs(b).max()


def test_fused_attention_drops_nothing_from_the_probabilities():
    """attention_probs_dropout_prob acts only under "reference": with hidden dropout 0, a fused model in train mode
    gives its eval outputs; the reference model's differ (its attention probabilities were dropped)."""
    cfg = sj.SqueezeBertConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.3)
    (fused_train, _), (ref_train, _) = _fused_vs_reference(cfg, jnp.float32, train=True)
    (fused_eval, _), _ = _fused_vs_reference(cfg, jnp.float32, train=False)
    scale = np.abs(fused_eval).max()
    np.testing.assert_allclose(fused_train, fused_eval, atol=1e-6 * scale)
    assert np.abs(ref_train - fused_eval).max() > 1e-4 * scale  # 100x the tolerance the fused model meets


def test_tpu_layouts_equal_the_group_major_ones():
    """The TPU branches (Q/K/V one einsum in place, the FFN's convs as einsums into and out of the group-major form)
    compute what the CPU/GPU group-major branches do: the compiled CPU program holds only the latter, so they are
    called directly here."""
    layer = sj.SqueezeBertModel(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0)).encoder.layers[0]
    x = jax.random.normal(jax.random.key(1), (2, 5, TINY["hidden_size"]))
    for a, b in zip(layer.attention._qkv_in_place(x), layer.attention._qkv_group_major(x), strict=True):
        assert a.shape == (2, 5, 4, 8)
        np.testing.assert_allclose(a, b, atol=1e-6)
    from squeezebert_jax.layers import from_groups, to_groups

    c1, c2 = layer.intermediate["conv1d"], layer.output.conv1d
    h = c1.group_major(to_groups(x, c1.groups))
    np.testing.assert_allclose(c1.in_place_to_groups(x), h, atol=1e-6)
    np.testing.assert_allclose(c2.in_place_from_groups(h, (2, 5)), from_groups(c2.group_major(h), (2, 5)), atol=1e-6)
    np.testing.assert_allclose(from_groups(h, (2, 5)), c1(x), atol=1e-6)  # the channels-last conv's output
    ref = [m(x).reshape(2, 5, 4, 8) for m in (layer.attention.query, layer.attention.key, layer.attention.value)]
    for a, b in zip(layer.attention._qkv_group_major(x), ref, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_set_execution_attention_and_bad_values():
    m = sj.SqueezeBertModel(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    assert m.config.attention == "fused" and m.encoder.layers[0].attention.fused
    sj.model.set_execution(m, attention="reference")
    assert m.config.attention == "reference" and not m.encoder.layers[1].attention.fused
    assert "attention" not in m.config.to_dict()  # how it runs, not what: config.json keeps no such field
    with pytest.raises(ValueError, match="attention 'flash' not supported"):
        sj.SqueezeBertConfig(**TINY, attention="flash")
    with pytest.raises(ValueError, match="attention 'x' not supported"):
        sj.model.set_execution(m, attention="x")


def _names_inside_branches(jaxpr, inside: bool = False) -> list[str]:
    """The remat names (``checkpoint_name``) applied inside a cond's branches (``lax.platform_dependent``), anywhere
    in ``jaxpr``."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "name" and inside:
            found.append(eqn.params["name"])
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (list, tuple)) else [p]):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    found += _names_inside_branches(sub, inside or eqn.primitive.name == "cond")
    return found


@pytest.mark.parametrize("family", ["squeezebert-uncased", "bert-base-uncased", "mobilebert-uncased"])
def test_remat_names_stay_outside_platform_branches(family):
    """Every value remat keeps by name is named outside ``lax.platform_dependent``'s branches: a name inside one
    branch makes the scanned step keep a zero-filled residual for the other platform's branch as well (compiled for a
    v5e, the paper step moved 786 GB per chip against 767 GB with the name outside; docs/results.md)."""
    cfg = sj.SqueezeBertConfig.preset(family, num_hidden_layers=2, vocab_size=99)
    model = sj.SqueezeBertForPreTraining(cfg, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    ids, mask = _tiny_inputs()
    g, p, r = nnx.split(model, nnx.Param, ...)
    r = nnx.to_pure_dict(r)
    jaxpr = jax.make_jaxpr(jax.grad(lambda p: jnp.sum(nnx.merge(g, p, r)(ids, mask).mlm_logits.astype(jnp.float32))))(
        nnx.to_pure_dict(p))
    assert _names_inside_branches(jaxpr.jaxpr) == []
    assert "ffn_expand" in str(jaxpr) or family == "mobilebert-uncased"  # the walk sees the names


def test_right_padding_goes_to_the_fused_kernel_as_key_counts():
    """``padding="right"`` (what the trainers set): the fused call takes each row's key count instead of a mask, and
    gives the explicit core's outputs for right-padded rows and an unmasked call (XLA's implementation of the cuDNN
    call's API; cuDNN's own kernel ran on one H200). The choice is an execution field: set_execution switches every
    attention, config.json keeps no such field, and other values are refused."""
    from squeezebert_jax import layers

    m = sj.SqueezeBertModel(sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    att = m.encoder.layers[0].attention
    assert m.config.padding == "any" and not att.right_padded
    q, k, v = (jax.random.normal(jax.random.key(i), (3, 7, 4, 8)) for i in range(3))
    for mask_bias in (_mask_bias(3, 7, [7, 4, 1]), jnp.zeros((), jnp.float32)):
        ref = np.asarray(att.core(q, k, v, mask_bias)[0])
        got = layers.fused_attention(q, k, v, mask_bias, implementation="xla", right_padded=True)
        np.testing.assert_allclose(np.asarray(got), ref, atol=1e-6)
    # a mask that is not right padding reads otherwise as key counts: why "any" stays the default for a user's masks
    left = jnp.flip(_mask_bias(3, 7, [7, 4, 1]), -1)
    ref = np.asarray(att.core(q, k, v, left)[0])
    np.testing.assert_allclose(np.asarray(layers.fused_attention(q, k, v, left, "xla")), ref, atol=1e-6)
    assert np.abs(np.asarray(layers.fused_attention(q, k, v, left, "xla", right_padded=True)) - ref).max() > 0.1
    sj.model.set_execution(m, padding="right")
    assert m.config.padding == "right" and all(layer.attention.right_padded for layer in m.encoder.layers)
    for family in ("mobilebert-uncased", "bert-base-uncased"):  # every family's attention takes the choice
        cfg = sj.SqueezeBertConfig.preset(family, num_hidden_layers=1, vocab_size=99, padding="right")
        attentions = [a for _, a in nnx.iter_graph(sj.SqueezeBertModel(cfg, rngs=nnx.Rngs(0)))
                      if isinstance(a, layers.SelfAttention)]
        assert attentions and all(a.right_padded and a.fused for a in attentions), family
    assert "padding" not in m.config.to_dict()
    with pytest.raises(ValueError, match="padding 'left' not supported"):
        sj.SqueezeBertConfig(**TINY, padding="left")
    with pytest.raises(ValueError, match="padding 'x' not supported"):
        sj.model.set_execution(m, padding="x")


def test_dropout_draws_four_16_bit_masks_per_hash():
    """``layers.Dropout``: one threefry hash per four elements. Over 786k elements at rate 0.1 the dropped share is
    round(0.1 * 65536) / 65536 within 5 standard deviations, the kept elements are scaled by the inverse of the exact
    keep probability, the four draws of one hash drop together as independent draws would (p^2 for two of them), the
    same key draws the same mask and the next key another. Keys other than threefry ("rbg") and a last axis that is
    not a multiple of 4 draw exactly as nnx.Dropout does; deterministic (eval) mode returns the input."""
    from squeezebert_jax import layers

    d = layers.Dropout(0.1, rngs=nnx.Rngs(dropout=0))
    x = jnp.ones((8, 128, 768), jnp.float32)
    key = jax.random.key(7)
    y = np.asarray(d(x, rngs=key))
    keep = y != 0
    p = 6554 / 65536
    assert abs((1 - keep.mean()) - p) < 5 * np.sqrt(p * (1 - p) / keep.size)
    np.testing.assert_allclose(np.unique(y[keep]), [1 / (1 - p)], rtol=1e-7)
    for i, j in ((0, 1), (1, 2), (0, 3)):  # draws of one hash: the low and high halves of its two words
        both = (~keep[..., i::4] & ~keep[..., j::4]).mean()
        assert abs(both - p * p) < 5 * np.sqrt(p * p / keep[..., ::4].size), (i, j, both)
    np.testing.assert_array_equal(np.asarray(d(x, rngs=key)), y)
    assert (np.asarray(d(x, rngs=jax.random.key(8))) != y).mean() > 0.1
    assert (np.asarray(d(x)) != np.asarray(d(x))).any()  # the module's stream moves on
    rbg = jax.random.key(7, impl="rbg")
    np.testing.assert_array_equal(np.asarray(d(x, rngs=rbg)), np.asarray(nnx.Dropout(0.1)(x, rngs=rbg)))
    odd = jnp.ones((8, 6))
    np.testing.assert_array_equal(np.asarray(d(odd, rngs=key)), np.asarray(nnx.Dropout(0.1)(odd, rngs=key)))
    d.eval()
    np.testing.assert_array_equal(np.asarray(d(x)), np.asarray(x))


def test_dropout_masks_are_the_same_on_any_mesh():
    """A dropout mask depends only on the key and each element's index: sharded over the batch on 8 devices, the
    jitted draw equals the single-device one bit for bit (and, under remat, the backward draws the forward's mask:
    the gradient is the mask times the scale)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from squeezebert_jax import layers

    key = jax.random.key(3)
    x = jax.random.normal(jax.random.key(0), (16, 8, 32))
    whole = np.asarray(jax.jit(lambda x: layers.Dropout(0.25)(x, rngs=key))(x))
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    sharded = jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: layers.Dropout(0.25)(x, rngs=key))(sharded)), whole)
    grad = jax.grad(jax.checkpoint(lambda x: jnp.sum(layers.Dropout(0.25)(x, rngs=key))))(x)
    np.testing.assert_allclose(np.asarray(grad), np.where(whole != 0, 1 / (1 - 16384 / 65536), 0.0), rtol=1e-6)
