"""losses: the vocabulary-wide cross-entropy (a one-hot select, no scatter in its backward), against optax's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from squeezebert_jax import losses


def _case(dtype, vocab=97):
    k = jax.random.split(jax.random.key(3), 3)
    logits = (jax.random.normal(k[0], (4, 6, vocab)) * 6).astype(dtype)
    ids = jax.random.randint(k[1], (4, 6), 0, vocab)
    w = (jax.random.uniform(k[2], (4, 6)) > 0.3).astype(jnp.float32)
    return logits, ids, w


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-6), (jnp.bfloat16, 1e-2)])
def test_softmax_nll_and_its_gradient_equal_optax(dtype, tol):
    logits, ids, w = _case(dtype)
    ref = lambda x: jnp.sum(optax.softmax_cross_entropy_with_integer_labels(x.astype(jnp.float32), ids) * w)  # noqa
    ours = lambda x: jnp.sum(losses.softmax_nll(x, ids) * w)  # noqa: E731
    np.testing.assert_allclose(jax.jit(ours)(logits), ref(logits), rtol=1e-6)
    g, g_ref = jax.jit(jax.grad(ours))(logits), jax.grad(ref)(logits)
    assert g.dtype == dtype  # the gradient in the logits' own dtype
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(g_ref, np.float32), atol=tol)
    assert not np.asarray(g[w == 0]).any()  # weight 0: no gradient


def test_mlm_losses_are_weighted_sums_of_nll_and_accuracy():
    logits, ids, w = _case(jnp.float32)
    ids, w = ids.at[0, 0].set(jnp.argmax(logits[0, 0])), w.at[0, 0].set(1.0)  # one right prediction at least
    s = losses.mlm_losses(logits, {"masked_lm_ids": ids, "masked_lm_weights": w})
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, ids)
    np.testing.assert_allclose(s["mlm_nll_sum"], jnp.sum(nll * w), rtol=1e-6)
    assert float(s["mlm_correct_sum"]) == float(jnp.sum((jnp.argmax(logits, -1) == ids) * w)) >= 1
    assert float(s["mlm_weight"]) == float(w.sum())
