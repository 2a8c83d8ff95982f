"""Mobile export: .ptl through the lite interpreter, checked against Flax (the benchmarks: tests/test_benchmarks.py)."""

from __future__ import annotations

import importlib.util
import os
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import squeezebert_jax as sj  # noqa: E402
from squeezebert_jax import mobile  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-4
# Tiny, with the released group structure but uneven groups per layer type, to catch layout mistakes.
TINY = dict(vocab_size=99, hidden_size=32, embedding_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=40, type_vocab_size=3, q_groups=4, k_groups=2,
            v_groups=4, post_attention_groups=1, intermediate_groups=4, output_groups=2)


def load_script(*parts):
    path = os.path.join(ROOT, *parts)
    spec = importlib.util.spec_from_file_location(os.path.splitext(parts[-1])[0], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_traced_length_defaults_to_what_the_model_reads(tmp_path, monkeypatch, capsys):
    """Without --seq-len, a model of 64 positions was refused ("--seq-len 128 > ... 64"): it is traced at 64; a
    model of more, at 128."""
    script = load_script("convert", "to_torchscript.py")
    seen = []
    monkeypatch.setattr(script, "export_lite", lambda model, out, **kw: seen.append(kw["seq_len"]) or
                        types.SimpleNamespace(summary=lambda: "traced"))
    for positions, want in ((64, 64), (512, 128)):
        model = sj.SqueezeBertModel(sj.SqueezeBertConfig(**{**TINY, "max_position_embeddings": positions}),
                                    rngs=nnx.Rngs(1))
        sj.save_pretrained(model, tmp_path / f"m{positions}")
        assert script.main(["--src", str(tmp_path / f"m{positions}"), "--out", str(tmp_path / "x.ptl")]) == 0
        assert seen[-1] == want
    assert script.main(["--src", str(tmp_path / "m64"), "--out", str(tmp_path / "x.ptl"), "--seq-len", "32"]) == 0
    assert seen[-1] == 32


@pytest.mark.parametrize("head,kw", [("SqueezeBertModel", {}),
                                     ("SqueezeBertForSequenceClassification", {"num_labels": 3})])
def test_ptl_loads_in_lite_interpreter_and_matches_flax(head, kw, tmp_path, capsys):
    model = sj.HEADS[head](sj.SqueezeBertConfig(**TINY), rngs=nnx.Rngs(1), **kw)
    # non-trivial LayerNorm and bias values, so nothing passes by being an identity or a zero
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path[-1] in ("bias", "scale"):
            var.set_value(var.get_value() + 0.1 * np.random.default_rng(len(path)).standard_normal(var.shape))
    sj.save_pretrained(model, tmp_path / "m")
    script = load_script("convert", "to_torchscript.py")
    out = tmp_path / "model.ptl"
    assert script.main(["--src", str(tmp_path / "m"), "--out", str(out), "--seq-len", "12", "--batch", "3"]) == 0
    msg = capsys.readouterr().out
    assert msg.startswith("OK ") and "max |diff|" in msg
    assert ("optimize_for_mobile applied" in msg) == mobile.xnnpack_available()

    lite = torch.jit.mobile._load_for_lite_interpreter(str(out))
    ids, mask, tt = mobile.example_inputs(model.config, batch=3, seq_len=12, seed=7)
    assert (mask == 0).any() and (mask.sum(-1) < 12).sum() >= 1
    cases = [(ids, mask, tt), (ids, np.ones_like(mask), tt)]  # padded, and no padding at all
    model.eval()
    graphdef, state = nnx.split(model)
    fwd = jax.jit(lambda st, *a: nnx.merge(graphdef, st)(*a))
    for i, m, t in cases:
        got = lite(torch.from_numpy(i), torch.from_numpy(m), torch.from_numpy(t))
        got = got if isinstance(got, tuple) else (got,)
        f = fwd(state, jnp.asarray(i), jnp.asarray(m), jnp.asarray(t))
        want = (f.last_hidden_state, f.pooler_output) if head == "SqueezeBertModel" else (f.logits,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert tuple(g.shape) == w.shape
            assert np.max(np.abs(g.numpy() - np.asarray(w))) <= TOL


def test_pretraining_exports_mlm_logits_of_bert_layout(tmp_path):
    """All groups 1 -> BertForMaskedLM; a pretraining model exports its MLM logits only."""
    cfg = sj.SqueezeBertConfig(**{**TINY, **dict.fromkeys(
        ("q_groups", "k_groups", "v_groups", "intermediate_groups", "output_groups"), 1)})
    model = sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0))
    res = mobile.export_lite(model, tmp_path / "p.ptl", batch=2, seq_len=10)
    assert res.torch_class == "BertForMaskedLM" and res.outputs == ("mlm_logits",)
    ids, mask, tt = mobile.example_inputs(cfg, 2, 10, seed=3)
    got = mobile.run_torch(mobile.load_lite(res.path), ids, mask, tt)[0]
    assert got.shape == (2, 10, cfg.vocab_size)
    want = model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).mlm_logits
    assert np.max(np.abs(got - np.asarray(want))) <= TOL


def test_parity_failure_exits_nonzero(tmp_path, monkeypatch, capsys):
    """A failed check exits 1 and keeps the export for inspection; with --overwrite, the earlier good file stays in
    place until a new export passes (it was replaced before the check) and the failed one goes beside it."""
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), num_labels=2, rngs=nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    real = mobile.flax_outputs
    script = load_script("convert", "to_torchscript.py")
    good = tmp_path / "good.ptl"
    assert script.main(["--src", str(tmp_path / "m"), "--out", str(good), "--seq-len", "8"]) == 0
    before = good.read_bytes()
    monkeypatch.setattr(mobile, "flax_outputs", lambda *a: [x + 1e-3 for x in real(*a)])
    assert script.main(["--src", str(tmp_path / "m"), "--out", str(tmp_path / "x.ptl"), "--seq-len", "8"]) == 1
    assert "FAILED" in capsys.readouterr().err and (tmp_path / "x.ptl").exists()
    assert script.main(["--src", str(tmp_path / "m"), "--out", str(good), "--seq-len", "8", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert f"the earlier {good} is left as it was; the new export is kept for inspection at {good}.failed" in err
    assert good.read_bytes() == before and (tmp_path / "good.ptl.failed").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.ptl", "good.ptl.failed", "m", "x.ptl"]
