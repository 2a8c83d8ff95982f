"""LAMB against a hand-written numpy reference, masks, schedule, AdamW vs torch, gradient accumulation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from squeezebert_jax import optim


def tree():
    rng = np.random.default_rng(0)
    return {"transformer": {"encoder": {"layers": {0: {"attention": {"query": {
        "kernel": rng.normal(size=(2, 3, 4)).astype(np.float32), "bias": rng.normal(size=8).astype(np.float32)}},
        "output": {"layernorm": {"scale": (1 + 0.1 * rng.normal(size=8)).astype(np.float32),
                                 "bias": rng.normal(size=8).astype(np.float32)}}}}},
        "embeddings": {"LayerNorm": {"scale": np.ones(8, np.float32), "bias": np.zeros(8, np.float32)},
                       "word_embeddings": {"embedding": rng.normal(size=(5, 8)).astype(np.float32)}}},
        "cls": {"predictions": {"bias": rng.normal(size=5).astype(np.float32)}}}


def test_decay_mask_excludes_layernorm_and_biases():
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): v
            for path, v in jax.tree_util.tree_leaves_with_path(optim.decay_mask(tree()))}
    assert flat == {
        "transformer/encoder/layers/0/attention/query/kernel": True,
        "transformer/encoder/layers/0/attention/query/bias": False,
        "transformer/encoder/layers/0/output/layernorm/scale": False,
        "transformer/encoder/layers/0/output/layernorm/bias": False,
        "transformer/embeddings/LayerNorm/scale": False,
        "transformer/embeddings/LayerNorm/bias": False,
        "transformer/embeddings/word_embeddings/embedding": True,
        "cls/predictions/bias": False,
    }
    shapes = jax.tree.map(np.shape, tree())
    for (_, m), (_, s) in zip(jax.tree_util.tree_leaves_with_path(optim.decay_mask(tree())),
                              jax.tree_util.tree_leaves_with_path(shapes, is_leaf=lambda x: isinstance(x, tuple))):
        if not m:
            assert len(s) == 1


def reference_lamb(params, grads_seq, lr, wd, b1=0.9, b2=0.999, eps=1e-6, clip=1.0):
    """LAMB as in the BERT/LAMB reference code, in numpy float64, on flat {name: array} dicts."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, g in enumerate(grads_seq, start=1):
        g = {k: x.astype(np.float64) for k, x in g.items()}
        norm = np.sqrt(sum(np.sum(x * x) for x in g.values()))
        scale = min(1.0, clip / norm)
        for k in p:
            gk = g[k] * scale
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk * gk
            mhat, vhat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            u = mhat / (np.sqrt(vhat) + eps)
            decayed = not (k.endswith("bias") or k.endswith("scale") or "layernorm" in k.lower())
            if decayed:
                u = u + wd * p[k]
                wn, un = np.linalg.norm(p[k]), np.linalg.norm(u)
                u = u * (wn / un if wn > 0 and un > 0 else 1.0)
            p[k] = p[k] - lr * u
    return p


def _flat(t):
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
            for path, v in jax.tree_util.tree_leaves_with_path(t)}


def test_lamb_matches_numpy_reference_with_clipping():
    params = jax.tree.map(jnp.asarray, tree())
    rng = np.random.default_rng(1)
    grads_seq = [jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape) * s, jnp.float32), params)
                 for s in (0.01, 3.0, 0.5)]  # the second step's norm is > 1: clipping kicks in
    tx = optim.lamb(1e-2, weight_decay=0.01)
    state, p = tx.init(params), params
    for g in grads_seq:
        u, state = tx.update(g, state, p)
        p = jax.tree.map(lambda a, b: a + b, p, u)
    ref = reference_lamb(_flat(params), [_flat(g) for g in grads_seq], 1e-2, 0.01)
    got = _flat(p)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=2e-5, atol=1e-6, err_msg=k)


def test_lamb_with_the_rate_as_input_equals_the_schedule_inside_one_compile():
    """What the train steps run: LAMB whose rate each update takes as an input (``learning_rate_input``) gives the
    updates of LAMB with the schedule inside; two runs at other rates reuse the one compiled update."""
    params = jax.tree.map(jnp.asarray, tree())
    rng = np.random.default_rng(4)
    grads_seq = [jax.tree.map(lambda x, s=s: jnp.asarray(rng.normal(size=x.shape) * s, jnp.float32), params)
                 for s in (0.01, 3.0, 0.5, 0.2)]
    tx = optim.learning_rate_input(optim.lamb, weight_decay=0.01)
    update = jax.jit(lambda g, st, p, lr: tx.update(g, optim.set_learning_rate(st, lr), p))
    for peak in (1e-2, 3e-3, 5e-2):  # a sweep
        schedule = optim.warmup_polynomial_decay(peak, 6, 0.34)
        ref_tx, rates = optim.lamb(schedule, weight_decay=0.01), optim.schedule_values(schedule, 6)
        assert rates[0] == 0.0 and rates[2] == np.float32(peak)
        st, ref_st, p, ref_p = tx.init(params), ref_tx.init(params), params, params
        for i, g in enumerate(grads_seq):
            u, st = update(g, st, p, rates[i])
            ref_u, ref_st = ref_tx.update(g, ref_st, ref_p)
            p, ref_p = optax.apply_updates(p, u), optax.apply_updates(ref_p, ref_u)
        for k, v in _flat(ref_p).items():
            np.testing.assert_allclose(_flat(p)[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
    assert update._cache_size() == 1


def test_schedule_warmup_then_polynomial_decay():
    s = optim.warmup_polynomial_decay(2.5e-3, 1000, 0.28, power=1.0)
    assert float(s(0)) == 0.0
    assert abs(float(s(140)) - 1.25e-3) < 1e-9
    assert abs(float(s(280)) - 2.5e-3) < 1e-9
    assert abs(float(s(640)) - 1.25e-3) < 1e-8
    assert abs(float(s(1000))) < 1e-9
    s2 = optim.warmup_polynomial_decay(1.0, 100, 0.0, power=2.0)
    assert abs(float(s2(50)) - 0.25) < 1e-6


def test_adamw_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    grads = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(3)]
    tx, rates = optim.adamw_finetune(1e-2, 1000, warmup_fraction=0.0, eps=1e-6, weight_decay=0.01)
    np.testing.assert_allclose(rates[:3], [1e-2, 1e-2 * 0.999, 1e-2 * 0.998], rtol=1e-6)
    params, state = {"w": jnp.asarray(w0)}, tx.init({"w": jnp.asarray(w0)})
    tw = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.AdamW([tw], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / 1000)
    for i, g in enumerate(grads):
        u, state = tx.update({"w": jnp.asarray(g)}, optim.set_learning_rate(state, rates[i]), params)
        params = {"w": params["w"] + u["w"]}
        tw.grad = torch.tensor(g)
        opt.step()
        sched.step()
    np.testing.assert_allclose(np.asarray(params["w"]), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_accumulation_equals_big_batch_for_masked_weighted_mean(k):
    """A weighted mean over predictions whose count differs per microbatch: sums accumulate exactly."""
    rng = np.random.default_rng(3)
    batch = {"x": jnp.asarray(rng.normal(size=(8, 5)), jnp.float32),
             "y": jnp.asarray(rng.normal(size=(8,)), jnp.float32),
             "w": jnp.asarray([1, 1, 1, 0, 1, 0, 0, 1], jnp.float32)}
    params = {"a": jnp.asarray(rng.normal(size=5), jnp.float32), "b": jnp.zeros(())}
    total_w = jnp.sum(batch["w"])

    def loss_fn(p, mb, rng):
        err = jnp.square(mb["x"] @ p["a"] + p["b"] - mb["y"])
        return jnp.sum(err * mb["w"]) / total_w, {"count": jnp.sum(mb["w"])}

    big_loss, big_grads = jax.value_and_grad(lambda p: loss_fn(p, batch, None)[0])(params)
    loss, aux, grads = optim.accumulate_gradients(loss_fn, params, batch, k, jax.random.key(0))
    assert abs(float(loss) - float(big_loss)) < 1e-6 and float(aux["count"]) == 5.0
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(big_grads)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_accumulation_indivisible_batch_is_an_error():
    batch = {"x": jnp.ones((6, 2))}
    with pytest.raises(ValueError, match=r"batch\['x'\] has 6 rows, not divisible into 4"):
        optim.accumulate_gradients(lambda p, mb, r: (jnp.sum(mb["x"] * p), {}), jnp.ones(()), batch, 4,
                                   jax.random.key(0))


def test_lamb_updates_layer_stacked_with_the_per_layer_numbers_and_state():
    """optim.lamb runs layer-stacked (optim.by_layer: one kernel per parameter kind, not per layer) and gives the
    per-layer chain's updates (optax's own trust ratio, leaf by leaf) over steps, with a state of the same structure
    (checkpoints are unchanged). stack_layers only stacks ``layers`` dicts of identical layers, and undoes exactly."""
    from conftest import smoke_config

    from squeezebert_jax import pretrain

    model = pretrain.new_model(smoke_config(), 64)
    _, params, _ = pretrain.split_model(model)
    params = jax.tree.map(np.asarray, params)
    stacked = optim.stack_layers(params)
    layers = stacked["transformer"]["encoder"]["layers"][optim.STACKED]
    n = len(params["transformer"]["encoder"]["layers"])
    assert n >= 2 and all(x.shape[0] == n for x in jax.tree.leaves(layers))
    jax.tree.map(np.testing.assert_array_equal, optim.unstack_layers(stacked, params), params)
    odd = {"layers": {0: {"w": np.ones(2)}, 1: {"w": np.ones(3)}},
           "blocks": {0: {"w": np.ones(2)}, 1: {"w": np.ones(2)}}}
    assert optim.stack_layers(odd) is not odd and set(optim.stack_layers(odd)["layers"]) == {0, 1}  # shapes differ
    assert set(optim.stack_layers(odd)["blocks"]) == {0, 1}  # only a dict named layers
    named = {"layers": {"first": {"w": np.ones(2)}, "second": {"w": np.ones(2)}}}
    assert set(optim.stack_layers(named)["layers"]) == {"first", "second"}  # keyed 0..L-1 only

    def per_layer(learning_rate):
        return optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam(eps=1e-6),
                           optax.add_decayed_weights(0.01, mask=optim.decay_mask),
                           optax.masked(optax.scale_by_trust_ratio(), optim.decay_mask),
                           optax.scale_by_learning_rate(learning_rate))

    ours, ref = optim.lamb(1e-2), per_layer(1e-2)
    s_ours, s_ref = ours.init(params), ref.init(params)
    assert jax.tree.structure(s_ours) == jax.tree.structure(s_ref)
    rng = np.random.default_rng(0)
    p_ours = p_ref = params
    step = jax.jit(lambda tx_update, g, s, p: tx_update(g, s, p), static_argnums=0)
    for _ in range(3):
        g = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32) * 0.1, params)
        u_ours, s_ours = step(ours.update, g, s_ours, p_ours)
        u_ref, s_ref = step(ref.update, g, s_ref, p_ref)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-9), u_ours, u_ref)
        p_ours, p_ref = optax.apply_updates(p_ours, u_ours), optax.apply_updates(p_ref, u_ref)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8), s_ours, s_ref)
