"""Mobile export (.ptl through the lite interpreter) and the latency / profile / inference benchmark tables."""

from __future__ import annotations

import importlib.util
import os
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import squeezebert_jax as sj  # noqa: E402
from squeezebert_jax import bench, mobile  # noqa: E402

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


@pytest.fixture
def restore_threads():
    """The scripts pin this process (affinity, torch threads); undo it for the tests that follow."""
    cpus, n = os.sched_getaffinity(0), torch.get_num_threads()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="set_threads")
        yield
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(n)


def table_rows(text: str) -> list[list[str]]:
    """Cells of every Markdown table line; asserts the separator and a constant cell count per table."""
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            assert line.endswith("|"), line
            cur.append([c.strip() for c in line.strip("|").split("|")])
        elif cur:
            tables.append(cur)
            cur = []
    for t in tables:
        assert len(t) >= 3 and set("".join(t[1])) <= {"-"}, t[:2]
        assert all(len(r) == len(t[0]) for r in t), t
    return tables


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
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), num_labels=2, rngs=nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    real = mobile.flax_outputs
    monkeypatch.setattr(mobile, "flax_outputs", lambda *a: [x + 1e-3 for x in real(*a)])
    script = load_script("convert", "to_torchscript.py")
    assert script.main(["--src", str(tmp_path / "m"), "--out", str(tmp_path / "x.ptl"), "--seq-len", "8"]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_latency_tiny_table(restore_threads, capsys):
    script = load_script("eval", "latency.py")
    assert script.main(["--tiny", "--runs", "1", "--warmup", "1", "--seq-len", "8",
                        "--models", "squeezebert-uncased"]) == 0
    out = capsys.readouterr().out
    (t,) = table_rows(out)
    assert t[0][:4] == ["model", "MParams", "GFLOPs", "paper GFLOPs"] and "lite ms" in t[0] and "Flax ms" in t[0]
    assert [r[0] for r in t[2:]] == ["bert-base-uncased", "squeezebert-uncased"]  # the reference is added
    ref = t[2]
    assert ref[t[0].index("lite speedup")] == "1.00x" and ref[t[0].index("Flax speedup")] == "1.00x"
    for r in t[2:]:
        assert float(r[t[0].index("lite ms")]) > 0 and re.fullmatch(r"\d+\.\d\dx", r[t[0].index("Flax speedup")])
    assert "lite vs Flax max |diff|" in out and os.sched_getaffinity(0).__len__() == 1


def test_profile_tiny_table(restore_threads, capsys):
    script = load_script("eval", "profile.py")
    assert script.main(["--tiny", "--runs", "2", "--warmup", "1", "--seq-len", "16"]) == 0
    tables = table_rows(capsys.readouterr().out)
    assert len(tables) == 2
    for name, t in zip(["bert-base-uncased", "squeezebert-uncased"], tables):
        assert [r[0] for r in t[2:]] == list(bench.COMPONENTS.values()) + ["Total (sum of components)"]
        fl = sj.flops_breakdown(bench.model_config(name, tiny=True), 16, num_labels=2)
        shares = [float(r[1].rstrip("%")) for r in t[2:-1]]
        assert shares == pytest.approx([100 * fl[k] / sum(fl.values()) for k in bench.COMPONENTS], abs=0.006)
        for col in (3, 4):  # latency shares are percentages that add up to ~100
            assert sum(float(r[col].split("%")[0]) for r in t[2:-1]) == pytest.approx(100, abs=0.05)


def test_table1_flops_reproduce_the_paper_for_bert_base():
    """flops_breakdown gives the paper's BERT-base Table 1 FLOPs shares to its three significant digits."""
    fl = sj.flops_breakdown(sj.SqueezeBertConfig.preset("bert-base-uncased"), 128)
    for key, (paper_flops, _) in bench.PAPER_TABLE1.items():
        assert 100 * fl[key] / sum(fl.values()) == pytest.approx(paper_flops, abs=0.05), key
    assert sum(v[1] for v in bench.PAPER_TABLE1.values()) == pytest.approx(100, abs=0.2)


def test_bench_infer_tiny_tables(restore_threads, capsys):
    script = load_script("eval", "bench_infer.py")
    assert script.main(["--tiny", "--batch", "2", "--runs", "1", "--warmup", "1", "--seq-len", "8",
                        "--threads", "1", "--formulation", "conv-bmm+core-bhsd", "--matmuls"]) == 0
    out = capsys.readouterr().out
    t1, t2, t3, t4 = table_rows(out)
    f = "float32, conv-bmm+core-bhsd"
    assert [(r[0], r[1]) for r in t1[2:]] == [("2", "float32"), ("2", f)]
    assert all(re.fullmatch(r"\d+\.\d\dx", r[4]) for r in t1[2:])
    assert [(r[0], r[1]) for r in t2[2:]] == [("2", v) for v in ("float32", f, "bfloat16")]
    assert [(r[0], r[1]) for r in t3[2:]] == [(n, "2") for n in ("squeezebert-uncased", "bert-base-uncased")]
    # the matmul table: four layers per model, group counts as the presets; the cap line per framework
    assert [(r[0], r[2].split()[0]) for r in t4[2:]] == [
        ("squeezebert-uncased", g) for g in ("G=4", "G=1", "G=4", "G=4")] + [("bert-base-uncased", "G=1")] * 4
    assert len(re.findall(r"-> at most \d+\.\d\dx \((XLA|PyTorch) kernels", out)) == 2


def test_sweep_table_and_bad_formulation():
    text = bench.formulation_sweep(tiny=True, batches=(1,), seq_len=8, runs=1, formulations=["core-bhsd"])
    (t,) = table_rows(text)
    assert [r[1] for r in t[2:]] == ["model", "core-bhsd"] and t[2][3] == "1.00x"
    assert all(float(r[-1]) <= 1e-5 for r in t[2:])
    with pytest.raises(ValueError, match="unknown formulations"):
        bench.formulation_sweep(tiny=True, formulations=["nope"])


@pytest.mark.slow
def test_formulations_are_exact(monkeypatch):
    """Every formulation in the sweep computes model.py's outputs (so the lead can swap one in). Eager calls."""
    from squeezebert_jax import model as M

    # Unequal Q/K/V groups (Q's 8 groups split heads of 8 channels) and FFN groups: the fallback paths; then
    # the released layout (equal Q/K/V groups holding whole heads, equal FFN groups): the fused paths.
    for extra in ({"q_groups": 8}, {"k_groups": 4, "output_groups": 4}):
        cfg = sj.SqueezeBertConfig(**{**TINY, **extra, "num_hidden_layers": 1})
        model = sj.SqueezeBertForSequenceClassification(cfg, num_labels=3, rngs=nnx.Rngs(2))
        model.eval()
        ids, mask, tt = (jnp.asarray(a) for a in mobile.example_inputs(model.config, 2, 12, seed=1))
        ref = np.asarray(model(ids, mask, tt).logits)
        for name, (_, patches) in bench.FORMULATIONS.items():
            with monkeypatch.context() as m:
                for cls, fn in zip((M.GroupedConv1x1, M.SelfAttention, M.SqueezeBertLayer), patches):
                    if fn is not None:
                        m.setattr(cls, "__call__", fn)
                out = np.asarray(model(ids, mask, tt).logits)
            assert np.max(np.abs(out - ref)) <= 1e-5, (name, extra)


def test_patched_forward_restores_model_methods():
    from squeezebert_jax.model import GroupedConv1x1, SelfAttention, SqueezeBertLayer

    before = (GroupedConv1x1.__call__, SelfAttention.__call__, SqueezeBertLayer.__call__)
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), num_labels=2, rngs=nnx.Rngs(0))
    patches = bench.FORMULATIONS["conv-bmm+core-bhsd"][1]
    bench._patched_forward(model, patches, *mobile.example_inputs(model.config, 1, 8))
    assert (GroupedConv1x1.__call__, SelfAttention.__call__, SqueezeBertLayer.__call__) == before
