"""ELECTRA's replaced-token-detection pretraining (config.objective="rtd"): the corruption (samples only at the real
masked positions; labels exactly where a sample differs from the original), the discriminator's loss against a numpy
reference, the generator and discriminator sharing one set of embeddings, and a run with a SqueezeBERT discriminator
through train_and_evaluate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from conftest import tiny_config

import squeezebert_jax as sj
from squeezebert_jax import errors, losses, pretrain
from squeezebert_jax.model import ElectraPreTraining, generator_config


def test_samples_replace_only_the_real_masked_positions_and_labels_mark_what_changed():
    b, s, p, v = 2, 8, 3, 11
    rng = np.random.default_rng(0)
    input_ids = rng.integers(5, v, (b, s))
    positions = np.array([[1, 4, 6], [2, 3, 0]])
    original = np.array([[7, 8, 9], [5, 6, 0]])
    weights = np.array([[1, 1, 1], [1, 1, 0]], np.float32)  # the last prediction of row 1 is padding
    wanted = np.array([[7, 2, 10], [3, 6, 9]])  # row 0 pos 1 and row 1 pos 3 sample their original token
    logits = np.where(np.arange(v) == wanted[..., None], 1e4, 0.0).astype(np.float32)  # argmax beats any Gumbel noise
    disc_ids, labels, sampled = jax.jit(losses.replace_with_samples)(
        jnp.asarray(input_ids), jnp.asarray(positions), jnp.asarray(original), jnp.asarray(weights),
        jnp.asarray(logits), jax.random.key(0))
    disc_ids, labels = np.asarray(disc_ids), np.asarray(labels)
    assert np.array_equal(np.asarray(sampled), wanted)
    want_ids, want_labels = input_ids.copy(), np.zeros((b, s), np.int32)
    for i in range(b):
        for j in range(p):
            if weights[i, j] > 0:
                want_ids[i, positions[i, j]] = wanted[i, j]
                want_labels[i, positions[i, j]] = int(wanted[i, j] != original[i, j])
    assert np.array_equal(disc_ids, want_ids) and np.array_equal(labels, want_labels)
    assert labels.sum() == 3 and disc_ids[1, 0] == input_ids[1, 0]  # the padding prediction wrote nothing


def test_samples_follow_the_generator_softmax():
    """Gumbel-max draws from softmax(logits): 20,000 draws over 3 tokens at probabilities 0.5/0.3/0.2."""
    probs = np.array([0.5, 0.3, 0.2])
    n = 20_000
    logits = jnp.asarray(np.log(np.tile(probs, (1, n, 1))), jnp.float32)
    _, _, sampled = losses.replace_with_samples(jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, n), jnp.int32),
                                                  jnp.zeros((1, n), jnp.int32), jnp.ones((1, n)), logits,
                                                  jax.random.key(1))
    freq = np.bincount(np.asarray(sampled).ravel(), minlength=3) / n
    assert np.allclose(freq, probs, atol=0.015), freq


def test_the_discriminator_loss_equals_a_numpy_reference():
    rng = np.random.default_rng(2)
    z = rng.standard_normal((3, 7)).astype(np.float32) * 3
    y = rng.integers(0, 2, (3, 7))
    m = (np.arange(7) < np.array([[7], [5], [2]])).astype(np.float32)
    s = losses.rtd_losses(jnp.asarray(z), jnp.asarray(y), jnp.asarray(m))
    bce = np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))
    assert np.isclose(float(s["rtd_bce_sum"]), (bce * m).sum(), rtol=1e-5)
    assert float(s["rtd_correct_sum"]) == (((z > 0) == (y > 0)) * m).sum() and float(s["rtd_tokens"]) == m.sum()
    assert float(s["rtd_replaced_sum"]) == (y * m).sum()
    final = losses.finalize_losses(s | {"mlm_nll_sum": jnp.float32(6.0), "mlm_correct_sum": jnp.float32(1.0),
                                          "mlm_weight": jnp.float32(3.0)}, rtd_weight=50.0)
    assert np.isclose(float(final["loss"]), 2.0 + 50.0 * (bce * m).sum() / m.sum(), rtol=1e-5)


def test_generator_and_discriminator_share_one_set_of_embeddings():
    cfg = sj.SqueezeBertConfig(vocab_size=40, hidden_size=32, embedding_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=32)
    pair = ElectraPreTraining(cfg, 0.25, rngs=nnx.Rngs(0))
    gen, disc = pair.generator.transformer.embeddings, pair.discriminator.transformer.embeddings
    assert gen.word_embeddings is disc.word_embeddings and gen.position_embeddings is disc.position_embeddings
    shared = (40 + 32 + 2) * 32  # word, position and token-type tables
    assert sj.count_params(pair) == sj.count_params(pair.generator) + sj.count_params(pair.discriminator) - shared
    g = generator_config(cfg, 0.25)
    assert (g.hidden_size, g.num_attention_heads, g.intermediate_size, g.factorized_embeddings) == (8, 1, 16, True)


def test_a_squeezebert_discriminator_pretrains_with_rtd_and_exports_both(tmp_path):
    c = tiny_config(objective="rtd")
    final = pretrain.train_and_evaluate(c, str(tmp_path / "run"))
    assert final["preempted"] is False and np.isfinite(final["loss"]) and "rtd_loss" in final
    assert 0 < final["replaced_share"] < 0.5 and 0 <= final["rtd_accuracy"] <= 1
    disc = sj.load_pretrained(tmp_path / "run" / "model")
    assert type(disc).__name__ == "SqueezeBertForReplacedTokenDetection" and not disc.config.is_bert  # grouped
    assert type(sj.load_pretrained(tmp_path / "run" / "generator")).__name__ == "SqueezeBertForMaskedLM"
    clf = sj.load_pretrained(tmp_path / "run" / "model", "SqueezeBertForSequenceClassification", num_labels=2)
    assert np.array_equal(np.asarray(clf.transformer.embeddings.word_embeddings.embedding[...]),
                          np.asarray(disc.transformer.embeddings.word_embeddings.embedding[...]))


@pytest.mark.parametrize("overrides, message", [
    ({"objective": "mlm"}, "config.objective='mlm': mlm_sop"),
    ({"objective": "rtd", "rtd.weight": 0.0}, "config.rtd.weight=0.0: a finite weight > 0"),
    ({"objective": "rtd", "rtd.generator_fraction": 1.5}, "config.rtd.generator_fraction=1.5: a fraction in (0, 1]"),
])
def test_rtd_settings_are_checked_before_anything_is_written(tmp_path, overrides, message):
    with pytest.raises(errors.InputError) as e:
        pretrain.train_and_evaluate(tiny_config(**overrides), str(tmp_path / "run"))
    assert str(e.value).startswith(message)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_pretraining_comparison_runs_end_to_end(tmp_path, run_cli):
    """eval/compare_pretraining.py at a few steps, for ALBERT (MLM + SOP, the shared layer) and ELECTRA (RTD): a row
    per network, each pretrained with its objective and fine-tuned (SqueezeBERT and BERT take ALBERT's path); the
    encoders' parameters are those of their families."""
    from squeezebert_jax.benchmarks import pretraining_compare as pc

    out = tmp_path / "table.md"
    rc, stdout, err = run_cli("eval/compare_pretraining.py", "--workdir", tmp_path / "w", "--steps", "2",
                              "--batch", "8", "--seq_len", "32", "--epochs", "1", "--train_rows", "32",
                              "--families", "ALBERT", "ELECTRA (RTD)", "--out", out)
    assert rc == 0, err
    lines = [ln for ln in out.read_text().splitlines() if ln.startswith("| ") and "network" not in ln]
    assert [ln.split("|")[1].strip() for ln in lines] == ["ALBERT", "ELECTRA (RTD)"]
    assert "-" == lines[0].split("|")[4].strip()  # no RTD accuracy for an MLM + SOP run
    assert "-" != lines[-1].split("|")[4].strip()  # ELECTRA's RTD accuracy
    params = {n: sj.count_params(nnx.eval_shape(lambda: sj.SqueezeBertModel(pc.encoder_config(n), rngs=nnx.Rngs(0))))
              for n in pc.FAMILIES}  # shapes only: building the seven encoders' weights took 3.9 s
    # the fewest: MobileBERT's 32-wide bottleneck, then ALBERT's one shared layer
    assert sorted(params, key=params.get)[:2] == ["MobileBERT", "ALBERT"]
    rc, _, err = run_cli("eval/compare_pretraining.py", "--workdir", tmp_path / "w", "--steps", "2")
    assert rc == 1 and "is not empty" in err  # a finished comparison is never overwritten without --overwrite


@pytest.mark.parametrize("preset", ["albert-base-v2", "distilbert-base-uncased", "electra-small-discriminator",
                                    "mobilebert-uncased"])
def test_every_family_is_an_rtd_discriminator(preset):
    """The pair builds for each family's discriminator (a DistilBERT's generator has no token types either; a
    MobileBERT's shares its word embeddings only), and the generator's MLM, the corruption and the discriminator's
    BCE run through it with finite gradients for both."""
    widths = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, vocab_size=40,
                  max_position_embeddings=16)
    widths |= dict(embedding_size=32) if preset.startswith("distilbert") else dict(embedding_size=16)
    widths |= dict(intra_bottleneck_size=16) if preset.startswith("mobilebert") else {}
    pair = ElectraPreTraining(sj.SqueezeBertConfig.preset(preset, **widths), 0.25, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    ids, mask = jnp.asarray(rng.integers(5, 40, (2, 12))), jnp.ones((2, 12), jnp.int32)
    types = jnp.zeros((2, 12), jnp.int32).at[:, 6:].set(1)
    positions, weights = jnp.asarray([[1, 4, 7], [2, 3, 9]]), jnp.ones((2, 3), jnp.float32)
    original = jnp.take_along_axis(ids, positions, 1)

    def loss(pair):
        g = pair.generator(ids, mask, types, masked_positions=positions).logits
        nll = -jnp.take_along_axis(jax.nn.log_softmax(g), original[..., None], -1).mean()
        disc_ids, labels, _ = losses.replace_with_samples(ids, positions, original, weights, g, jax.random.key(1))
        s = losses.rtd_losses(pair.discriminator(disc_ids, mask, types).logits, labels, mask)
        return nll + 50 * s["rtd_bce_sum"] / s["rtd_tokens"]

    value, grads = nnx.jit(nnx.value_and_grad(loss))(pair)  # one program: eagerly, each op compiled its own
    leaves = jax.tree.leaves(nnx.state(grads, nnx.Param))
    assert np.isfinite(float(value)) and all(np.isfinite(np.asarray(x)).all() for x in leaves)
    assert float(jnp.abs(grads.generator.cls["predictions"].bias[...]).sum()) > 0
    assert float(jnp.abs(grads.discriminator.rtd["prediction"].kernel[...]).sum()) > 0
