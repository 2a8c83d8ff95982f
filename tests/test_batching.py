"""Length buckets (squeezebert_jax.batching): batches cut to their bucket give fixed padding's logits and loss, every
row once per epoch, at most one compiled program per bucket, and the padding share in the metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from conftest import WORDS, glue_config
from squeezebert_jax import batching, inference, losses, parallel, reporting, trainer
from squeezebert_jax import finetune as ft


def _arrays(n, width, seed=0, vocab=23):
    """Rows of random lengths 3..width (padding after), as encode_examples makes them."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, width + 1, n)
    mask = (np.arange(width)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, vocab, (n, width)).astype(np.int32) * mask
    types = ((np.arange(width)[None] >= lengths[:, None] // 2) * mask).astype(np.int32)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
            "labels": rng.integers(0, 3, n).astype(np.int32)}


def test_bucket_widths():
    assert batching.length_buckets("auto", 128) == (32, 64, 96, 128)
    assert batching.length_buckets("none", 128) == batching.length_buckets("", 128) == (128,)
    assert batching.length_buckets("48,16", 64) == (16, 48, 64)
    with pytest.raises(sj.errors.InputError, match=r"length_buckets='32,200': widths \[200\] outside 1..max_seq_length"):
        batching.length_buckets("32,200", 128)
    with pytest.raises(sj.errors.InputError, match="'auto', 'auto:K', 'none' or widths"):
        batching.length_buckets("short", 128)


def test_an_epoch_plan_holds_every_row_once_each_in_a_batch_as_wide_as_it_needs():
    arrays, buckets = _arrays(203, 32), (8, 16, 24, 32)
    plan = batching.epoch_plan(arrays, 16, buckets, seed=3)
    rows = np.concatenate([idx for idx, _ in plan])
    assert sorted(rows.tolist()) == list(range(203)) and len(plan) == batching.steps_per_epoch(arrays, 16, buckets)
    lengths = batching.lengths(arrays)
    for idx, width in plan:
        assert len(idx) <= 16 and set(np.searchsorted(buckets, lengths[idx]).tolist()) == {buckets.index(width)}
    assert [i.tolist() for i, _ in plan] == [i.tolist() for i, _ in batching.epoch_plan(arrays, 16, buckets, seed=3)]
    assert [i.tolist() for i, _ in plan] != [i.tolist() for i, _ in batching.epoch_plan(arrays, 16, buckets, seed=4)]


def _classifier(num_labels):
    cfg = sj.SqueezeBertConfig(vocab_size=23, hidden_size=24, embedding_size=24, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=48, max_position_embeddings=32,
                               q_groups=2, k_groups=2, v_groups=2, post_attention_groups=1, intermediate_groups=2,
                               output_groups=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return sj.SqueezeBertForSequenceClassification(cfg, num_labels=num_labels, rngs=nnx.Rngs(0))


def test_bucketed_logits_equal_fixed_padding_with_one_program_per_bucket():
    model, arrays = _classifier(7), _arrays(70, 32)  # 7 labels: a structure no other test compiles
    before = inference.eval_logits._cache_size()
    fixed = inference.predict_logits(model, arrays, batch_size=16, buckets=(32,))
    bucketed = inference.predict_logits(model, arrays, batch_size=16, buckets=(8, 16, 24, 32))
    np.testing.assert_allclose(bucketed, fixed, rtol=1e-5, atol=1e-5)
    assert inference.eval_logits._cache_size() - before <= 4  # the widths 8, 16, 24 and 32 (32 shared with fixed)


def test_a_train_step_on_a_cut_batch_equals_the_full_width_step():
    """The same rows at their bucket's width and at max_seq_length: the same loss, gradient norm and new parameters."""
    model, arrays = _classifier(3), _arrays(16, 32, seed=1)
    arrays["input_ids"][:, 12:] = 0
    arrays["attention_mask"][:, 12:] = 0
    arrays["token_type_ids"][:, 12:] = 0
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    c = glue_config("mnli", "", "", learning_rate=1e-3)
    mesh = parallel.make_mesh(1)
    fs = ft.build_step(c, graphdef, nnx.to_pure_dict(rest), {"model": nnx.to_pure_dict(params)}, 10, mesh,
                       losses.LOSSES["cross_entropy"])
    out = {}
    for width in (16, 32):
        fresh = jax.tree.map(jnp.copy, nnx.to_pure_dict(params))  # the step donates its state
        state = jax.device_put(fs.init({"model": fresh}), fs.shardings)
        b = batching.assemble(arrays, np.arange(16), 16, width)
        new, metrics = fs.step_fn(state, parallel.shard_batch(b, mesh), jax.random.key(0), jnp.float32(1e-3))
        out[width] = (jax.device_get(metrics), jax.device_get(new["params"]))
    for k in ("loss", "grad_norm", "update_norm"):
        np.testing.assert_allclose(out[16][0][k], out[32][0][k], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(out[16][1]), jax.tree.leaves(out[32][1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_finetuning_compiles_at_most_one_step_per_bucket_and_reports_the_padding(tmp_path, monkeypatch):
    from test_tasks import _init_dir

    rng = np.random.default_rng(0)
    (tmp_path / "data").mkdir()
    for split, n in (("train", 128), ("dev", 32)):
        rows = ["text,label"]
        for _ in range(n):
            y = int(rng.integers(0, 2))
            k = int(rng.integers(1, 12))  # 4..15 tokens with [CLS] and [SEP]: three of the four buckets of 32
            rows.append(" ".join([rng.choice(WORDS[:3] if y else WORDS[3:6]), *rng.choice(WORDS[6:], k)]) + f",{y}")
        (tmp_path / "data" / f"{split}.csv").write_text("\n".join(rows) + "\n")
    init = _init_dir(tmp_path / "init")
    steps, jit = [], trainer.jit_train_step
    monkeypatch.setattr(trainer, "jit_train_step", lambda *a, **k: steps.append(jit(*a, **k)) or steps[-1])

    def run(buckets, name):
        c = glue_config("rte", init, "", learning_rate=3e-3, num_epochs=2, max_seq_length=32, length_buckets=buckets)
        c.task, c.data.text_columns = "files", "text"
        c.data.train_file, c.data.validation_file = str(tmp_path / "data" / "train.csv"), str(tmp_path / "data" /
                                                                                               "dev.csv")
        c.weight_decay = 1e-4 if buckets == "auto" else 2e-4  # a step of its own, whose compiles are counted here
        return ft.finetune(c, str(tmp_path / name))

    auto, fixed = run("auto", "auto"), run("none", "fixed")
    assert steps[0]._cache_size() <= 4 and steps[1]._cache_size() == 1
    assert len(auto["history"]) == 2 and auto["history"][0]["train_padding_share"] < 0.5
    assert fixed["history"][0]["train_padding_share"] > 0.6  # 4..15 tokens in 32 positions
    epochs = [r for r in reporting.read_metrics(str(tmp_path / "auto")) if "train_padding_share" in r]
    assert [r["train_padding_share"] for r in epochs] == [h["train_padding_share"] for h in auto["history"]]


def test_auto_widths_pad_least_as_a_brute_force_search_finds():
    import itertools

    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.gamma(4.0, 7.0, 300).astype(int) + 3, 128)
    cands = sorted({min(128, -(-int(x) // 8) * 8) for x in lengths})

    def cost(widths):
        w = np.asarray(sorted(widths))
        return int(w[np.searchsorted(w, lengths)].sum())

    for k in (1, 2, 3, 4):
        best = min((c for r in range(1, k + 1) for c in itertools.combinations(cands, r) if max(c) == cands[-1]),
                   key=cost)
        got = batching.best_widths(lengths, 128, k)
        assert cost(got) == cost(best) and len(got) <= k and all(w % 8 == 0 for w in got)
    assert set(batching.length_buckets("auto", 128, lengths)) == set(batching.best_widths(lengths, 128, 4)) | {128}
    assert len(batching.length_buckets("auto:2", 128, lengths)) <= 3
    with pytest.raises(sj.errors.InputError, match="auto:K needs a number of widths K >= 1"):
        batching.length_buckets("auto:x", 128)


def test_training_batches_must_be_right_padded():
    """The trainers' models read each attention mask row as its count of leading tokens (``padding="right"``), so
    every batch that goes to the devices is checked: right padding ([B, S] and [B, choices, S]) passes; a row with a
    gap, left padding or no token at all is refused, naming the row."""
    from squeezebert_jax import parallel
    from squeezebert_jax.errors import InputError

    good = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    parallel.check_right_padding({"attention_mask": good})
    parallel.check_right_padding({"attention_mask": np.stack([good, good])})
    parallel.check_right_padding({"input_ids": good})  # no mask: nothing to check
    for bad, row in (([[1, 1, 1, 1], [1, 0, 1, 0]], 1), ([[0, 0, 1, 1]], 0), ([[1, 1], [0, 0]], 1)):
        with pytest.raises(InputError, match=f"attention_mask row {row} is not right padding"):
            parallel.check_right_padding({"attention_mask": np.array(bad)})
    mesh = parallel.make_mesh()
    with pytest.raises(InputError, match="row 0 is not right padding"):
        parallel.shard_batch({"attention_mask": np.array([[0, 1]] * 8)}, mesh)
