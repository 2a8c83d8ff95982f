"""Our Flax model vs transformers' PyTorch SqueezeBERT / BERT with the same random weights."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import squeezebert_jax as sj  # noqa: E402
from squeezebert_jax import convert  # noqa: E402
from squeezebert_jax.model import GroupedConv1x1  # noqa: E402

TOL = 1e-5
TINY = dict(vocab_size=99, hidden_size=32, embedding_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=40, type_vocab_size=3, q_groups=4, k_groups=2,
            v_groups=4, post_attention_groups=1, intermediate_groups=4, output_groups=2, layer_norm_eps=1e-7)


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights everywhere, LayerNorm scales/biases and biases included (not the identity init)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1 and ("LayerNorm" in name or "layernorm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    return module.eval()


def torch_sd(module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def inputs(cfg, batch=3, seq=12, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, cfg.vocab_size, (batch, seq))
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 4:] = 0  # right padding
    mask[2, seq - 1:] = 0
    ids[mask == 0] = 0
    tt = np.zeros((batch, seq), np.int64)
    tt[:, seq // 2:] = 1
    tt[0, -1] = cfg.type_vocab_size - 1
    return ids, mask, tt


def run_torch(tm, ids, mask, tt):
    with torch.no_grad():
        return tm(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(tt))


def maxdiff(a, b, mask=None):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)))


HEAD_CASES = [
    ("SqueezeBertModel", {}),
    ("SqueezeBertForMaskedLM", {}),
    ("SqueezeBertForSequenceClassification", {"num_labels": 3}),
    ("SqueezeBertForSequenceClassification", {"num_labels": 1}),
    ("SqueezeBertForTokenClassification", {"num_labels": 5}),
    ("SqueezeBertForQuestionAnswering", {}),
    ("SqueezeBertForMultipleChoice", {}),
]


def build_pair(head, extra, cfg_kwargs, seed=0):
    tcfg = transformers.SqueezeBertConfig(**cfg_kwargs, **extra)
    tm = randomize(getattr(transformers, head)(tcfg), seed)
    cfg = sj.SqueezeBertConfig.from_dict(tcfg.to_dict())
    fm = sj.pretrained.from_torch_state_dict(torch_sd(tm), cfg, head, architectures=[head])
    fm.eval()
    return tm, fm, cfg


@pytest.mark.parametrize("head,extra", HEAD_CASES, ids=lambda x: str(x))
def test_heads_match_pytorch_tiny(head, extra):
    tm, fm, cfg = build_pair(head, extra, TINY)
    ids, mask, tt = inputs(cfg)
    if head == "SqueezeBertForMultipleChoice":
        ids, mask, tt = (np.stack([x, x[::-1]], 1) for x in (ids, mask, tt))
    t = run_torch(tm, ids, mask, tt)
    f = fm(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt))
    if head == "SqueezeBertModel":
        assert maxdiff(f.last_hidden_state, t.last_hidden_state) <= TOL
        assert maxdiff(f.pooler_output, t.pooler_output) <= TOL
    elif head == "SqueezeBertForQuestionAnswering":
        assert maxdiff(f.start_logits, t.start_logits) <= TOL
        assert maxdiff(f.end_logits, t.end_logits) <= TOL
    else:
        assert f.logits.shape == tuple(t.logits.shape)
        assert maxdiff(f.logits, t.logits) <= TOL


def test_pretraining_head_matches_pytorch():
    """MLM logits as SqueezeBertForMaskedLM, SOP logits as cls.seq_relationship on the pooled output."""
    tcfg = transformers.SqueezeBertConfig(**TINY)
    tm = randomize(transformers.SqueezeBertForMaskedLM(tcfg))
    sop = torch.nn.Linear(TINY["hidden_size"], 2)
    torch.nn.init.normal_(sop.weight, std=0.3)
    sd = torch_sd(tm) | {"cls.seq_relationship.weight": sop.weight.detach().numpy(),
                         "cls.seq_relationship.bias": sop.bias.detach().numpy()}
    cfg = sj.SqueezeBertConfig(**TINY)
    fm = sj.pretrained.from_torch_state_dict(sd, cfg)
    assert type(fm) is sj.SqueezeBertForPreTraining
    fm.eval()
    ids, mask, tt = inputs(cfg)
    with torch.no_grad():
        t = tm(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(tt),
               output_hidden_states=True)
        pooled = tm.transformer.pooler(t.hidden_states[-1])
        t_sop = sop(pooled).numpy()
    f = fm(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt))
    assert maxdiff(f.mlm_logits, t.logits) <= TOL
    assert maxdiff(f.sop_logits, t_sop) <= TOL
    positions = np.array([[1, 3], [0, 5], [2, 2]])
    g = fm(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt), masked_positions=jnp.asarray(positions))
    expect = np.take_along_axis(t.logits.numpy(), positions[..., None], axis=1)
    assert maxdiff(g.mlm_logits, expect) <= TOL


@pytest.mark.parametrize("head", ["SqueezeBertModel", "SqueezeBertForSequenceClassification"])
def test_default_config_matches_pytorch(head):
    """The released architecture (12 x 768, groups 4/4/4/1/4/4) at float32."""
    tcfg = transformers.SqueezeBertConfig(vocab_size=30528)
    tm = randomize(getattr(transformers, head)(tcfg), seed=1)
    cfg = sj.SqueezeBertConfig.preset("squeezebert-uncased")
    fm = sj.pretrained.from_torch_state_dict(torch_sd(tm), cfg, head)
    fm.eval()
    ids, mask, tt = inputs(cfg, batch=3, seq=24)
    t = run_torch(tm, ids, mask, tt)
    f = fm(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt))
    if head == "SqueezeBertModel":
        assert maxdiff(f.last_hidden_state, t.last_hidden_state) <= TOL
        assert maxdiff(f.pooler_output, t.pooler_output) <= TOL
    else:
        assert maxdiff(f.logits, t.logits) <= TOL


@pytest.mark.parametrize("bert_cls,head", [("BertModel", "SqueezeBertModel"),
                                           ("BertForMaskedLM", "SqueezeBertForMaskedLM"),
                                           ("BertForSequenceClassification", "SqueezeBertForSequenceClassification")])
def test_bert_checkpoint_gives_bert_outputs(bert_cls, head):
    bcfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=40, num_labels=4)
    tm = randomize(getattr(transformers, bert_cls)(bcfg), seed=2)
    cfg = sj.SqueezeBertConfig.from_dict(bcfg.to_dict())
    assert cfg.is_bert
    fm = sj.pretrained.from_torch_state_dict(torch_sd(tm), cfg, architectures=[bert_cls], allow_new_heads=True)
    assert type(fm).__name__ == head
    fm.eval()
    ids, mask, tt = inputs(cfg)
    t = run_torch(tm, ids, mask, tt)
    f = fm(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt))
    if bert_cls == "BertModel":
        assert maxdiff(f.last_hidden_state, t.last_hidden_state) <= TOL
        assert maxdiff(f.pooler_output, t.pooler_output) <= TOL
    else:
        assert maxdiff(f.logits, t.logits) <= TOL
    if bert_cls == "BertForMaskedLM":  # BertForMaskedLM has no pooler: reported, not silently random
        assert set(fm.newly_initialized) == {"bert.pooler.dense.weight", "bert.pooler.dense.bias"}


@pytest.mark.parametrize("groups,cin,cout", [(1, 8, 12), (4, 16, 8), (4, 8, 32), (2, 6, 4)])
def test_grouped_einsum_equals_torch_conv1d(groups, cin, cout):
    conv = torch.nn.Conv1d(cin, cout, kernel_size=1, groups=groups)
    x = np.random.default_rng(0).standard_normal((3, 7, cin)).astype(np.float32)
    with torch.no_grad():
        ref = conv(torch.tensor(x).permute(0, 2, 1)).permute(0, 2, 1).numpy()
    layer = GroupedConv1x1(cin, cout, groups, init_std=0.02, rngs=nnx.Rngs(0))
    layer.kernel.set_value(convert._to_flax(conv.weight.detach().numpy(), "conv", groups))
    layer.bias.set_value(conv.bias.detach().numpy())
    assert layer.kernel.shape == (groups, cin // groups, cout // groups)
    assert maxdiff(layer(jnp.asarray(x)), ref) <= 1e-6


def test_gelu_equals_torch_gelu_and_its_gradient():
    """model.gelu (erf form, faster on XLA:CPU) is torch's exact GELU to float32 rounding, tails included, and
    its gradient is jax.nn.gelu's (the erfc form) -- so training is unchanged."""
    import jax

    from squeezebert_jax.model import gelu

    x = np.concatenate([np.linspace(-12, 12, 20001), [-1e4, -40.0, -1e-30, 0.0, 1e-30, 40.0, 1e4]]).astype(np.float32)
    ref64 = torch.nn.functional.gelu(torch.tensor(x, dtype=torch.float64)).numpy()
    ours = np.asarray(gelu(jnp.asarray(x)))
    theirs32 = torch.nn.functional.gelu(torch.tensor(x)).numpy()
    assert np.all(np.isfinite(ours))
    assert np.max(np.abs(ours - ref64) / np.maximum(np.abs(ref64), 1.0)) <= 2e-6
    assert np.max(np.abs(ours - theirs32) / np.maximum(np.abs(theirs32), 1.0)) <= 2e-6
    g = np.asarray(jax.vmap(jax.grad(gelu))(jnp.asarray(x)))
    g_ref = np.asarray(jax.vmap(jax.grad(lambda v: jax.nn.gelu(v, approximate=False)))(jnp.asarray(x)))
    assert np.max(np.abs(g - g_ref)) <= 2e-6


def test_param_count_equals_reference():
    """Full-size models, both sides built without their weights (shapes only: torch's meta device, nnx.eval_shape)."""
    def ours(preset):
        return sj.count_params(nnx.eval_shape(lambda: sj.SqueezeBertModel(sj.SqueezeBertConfig.preset(preset),
                                                                          rngs=nnx.Rngs(0))))

    with torch.device("meta"):
        tm = transformers.SqueezeBertModel(transformers.SqueezeBertConfig(vocab_size=30528))
        bert = transformers.BertModel(transformers.BertConfig())
    assert ours("squeezebert-uncased") == tm.num_parameters() == 51_094_272  # paper: 51.1M
    assert ours("bert-base-uncased") == bert.num_parameters() == 109_482_240  # paper: 109M
