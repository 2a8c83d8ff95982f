"""Gradual magnitude pruning (squeezebert_jax.prune): the cubic schedule, masks reaching their sparsity, a
head-pruned model equal to transformers' really-shrunk BERT, and pruning inside a fine-tuning run."""
import json

import jax
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import prune
from squeezebert_jax.errors import InputError

TINY = dict(vocab_size=60, hidden_size=32, embedding_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=40)


def _params(groups: int = 4, seed: int = 0):
    g = dict(q_groups=groups, k_groups=groups, v_groups=groups, intermediate_groups=groups, output_groups=groups)
    model = sj.HEADS["SqueezeBertForSequenceClassification"](sj.SqueezeBertConfig(**TINY, **g), num_labels=2,
                                                             rngs=nnx.Rngs(seed))
    return model, nnx.to_pure_dict(nnx.state(model, nnx.Param))


def test_cubic_schedule():
    s = [prune.cubic_sparsity(t, 100, 0.8, begin=0.1, end=0.6) for t in range(101)]
    assert s[0] == s[10] == 0.0 and s[60] == s[100] == 0.8
    assert all(a <= b for a, b in zip(s, s[1:]))  # never decreases
    assert s[35] == pytest.approx(0.8 * (1 - 0.5 ** 3))  # halfway through the ramp: 7/8 of the way (cubic)
    assert s[20] - s[10] > s[60] - s[50]  # fast first, slow near the target


@pytest.mark.parametrize("kind, sparsity", [("unstructured", 0.5), ("unstructured", 0.9), ("heads", 0.5),
                                            ("ffn", 0.25)])
def test_masks_reach_the_sparsity(kind, sparsity):
    _, params = _params()
    masks = prune.compute_masks(params, kind, sparsity, num_heads=4)
    pruned = jax.tree.map(lambda p, m: p * m, params, masks)
    rep = prune.sparsity_report(pruned)
    per_kernel = rep["per_kernel"]
    if kind == "unstructured":
        assert rep["encoder"] == pytest.approx(sparsity, abs=0.01)
        assert all(v == pytest.approx(sparsity, abs=0.01) for v in per_kernel.values())
        assert all(v == pytest.approx(sparsity, abs=0.01) for v in rep["per_layer"].values())
    elif kind == "heads":  # 2 of 4 heads per layer: their Q/K/V columns and post-attention rows
        for k in ("attention/query", "attention/key", "attention/value", "post_attention/conv1d"):
            assert per_kernel[k] == pytest.approx(0.5)
        assert per_kernel["intermediate/conv1d"] == 0.0
        assert prune.pruned_heads(pruned, 4).keys() == {0, 1} and all(len(v) == 2 for v in
                                                                      prune.pruned_heads(pruned, 4).values())
    else:  # 16 of 64 channels per layer
        assert per_kernel["intermediate/conv1d"] == per_kernel["output/conv1d"] == pytest.approx(0.25)
        assert per_kernel["attention/query"] == 0.0
    # the smallest go first: every pruned unstructured weight is no larger than every kept one in its kernel
    if kind == "unstructured":
        w = np.asarray(params["transformer"]["encoder"]["layers"][0]["attention"]["query"]["kernel"])
        m = np.asarray(masks["transformer"]["encoder"]["layers"][0]["attention"]["query"]["kernel"])
        assert np.abs(w[m == 0]).max() <= np.abs(w[m == 1]).min()


def test_structured_pruning_keeps_a_head_and_a_channel_in_every_layer():
    """A target rounded up to every unit (0.99 of 4 heads is 4) left a layer without attention, a model that gave one
    output for every input: each layer keeps its best head, and each FFN group its best channel."""
    _, params = _params()
    for kind in ("heads", "ffn"):
        masks = prune.compute_masks(params, kind, 0.99, num_heads=4)
        layer = masks["transformer"]["encoder"]["layers"][0]
        kept = np.asarray(layer["attention"]["query"]["bias"] if kind == "heads" else
                          layer["intermediate"]["conv1d"]["bias"])
        if kind == "heads":
            assert kept.sum() == kept.size // 4, kept  # one head of four
        else:
            assert kept.sum() == 4, kept  # a channel in each of the 4 groups of 16


def test_pruner_follows_the_schedule_and_rejects_bad_settings():
    _, params = _params()
    p = prune.Pruner("unstructured", 0.6, 4, total_steps=40, begin=0.0, end=0.5, every=5)
    seen = []
    for step in range(1, 41):
        params = p(step, params)
        seen.append(prune.sparsity_report(params)["encoder"])
    assert seen[-1] == pytest.approx(0.6, abs=0.01)
    assert seen[2] < 0.6 and seen[19] == pytest.approx(0.6, abs=0.01)  # reached at end = 0.5 of the run
    for bad, match in [(dict(kind="blocks"), "prune.kind"), (dict(target=1.0), "prune.target"),
                       (dict(begin=0.8, end=0.5), "begin"), (dict(every=0), "every")]:
        args = dict(kind="unstructured", target=0.5, num_heads=4, total_steps=10) | bad
        with pytest.raises(InputError, match=match):
            prune.Pruner(**args)


@pytest.mark.parametrize("groups", [4, 1])
def test_ffn_pruned_model_shrinks_to_the_masked_models_outputs(tmp_path, groups):
    """FFN pruning cut out (shrink_ffn): a smaller intermediate_size whose logits equal the masked dense model's, in
    our model and in transformers' (SqueezeBERT for groups 4, BERT for groups 1) loaded from the exported directory."""
    import torch
    import transformers

    model, params = _params(groups=groups, seed=3)
    masks = prune.compute_masks(params, "ffn", 0.25, num_heads=4)
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, jax.tree.map(lambda p, m: p * m, params, masks))
    nnx.update(model, state)
    small = prune.shrink_ffn(model)
    assert small.config.intermediate_size == 48 and prune.sparsity_report(
        nnx.to_pure_dict(nnx.state(small, nnx.Param)))["per_kernel"]["output/conv1d"] < 0.01
    model.eval(), small.eval()
    ids = np.random.default_rng(0).integers(5, 60, (2, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    dense = np.asarray(model(ids, mask, np.zeros_like(ids)).logits)
    np.testing.assert_allclose(np.asarray(small(ids, mask, np.zeros_like(ids)).logits), dense, atol=1e-5)
    style = "squeezebert" if groups > 1 else "bert"
    sj.export_torch(small, tmp_path / "hf", style=style)
    arch = json.load(open(tmp_path / "hf" / "config.json"))["architectures"][0]
    torch_model = getattr(transformers, arch).from_pretrained(str(tmp_path / "hf")).eval()
    assert torch_model.config.intermediate_size == 48
    with torch.no_grad():
        theirs = torch_model(input_ids=torch.tensor(ids, dtype=torch.long),
                             attention_mask=torch.tensor(mask, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(theirs, dense, atol=2e-5)
    # layers pruned to different widths cannot share one intermediate_size: refused, naming the widths
    m2, p2 = _params(groups=groups)
    pruned = jax.tree.map(lambda p, m: p * m, p2, masks)
    pruned["transformer"]["encoder"]["layers"][1] = p2["transformer"]["encoder"]["layers"][1]
    s2 = nnx.state(m2, nnx.Param)
    nnx.replace_by_pure_dict(s2, pruned)
    nnx.update(m2, s2)
    with pytest.raises(InputError, match="different numbers of channels"):
        prune.shrink_ffn(m2)
