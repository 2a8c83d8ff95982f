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
                        "--threads", "1", "--formulation", "conv-bmm+core-bhsd", "--breakdown"]) == 0
    out = capsys.readouterr().out
    t1, t2, t3, t4 = table_rows(out)
    f = "float32, conv-bmm+core-bhsd"
    assert [(r[0], r[1]) for r in t1[2:]] == [("2", "float32"), ("2", f)]
    assert all(re.fullmatch(r"\d+\.\d\dx", r[4]) for r in t1[2:])
    assert [(r[0], r[1]) for r in t2[2:]] == [("2", v) for v in ("float32", f, "bfloat16")]
    assert [(r[0], r[1]) for r in t3[2:]] == [(n, "2") for n in ("squeezebert-uncased", "bert-base-uncased")]
    # the profile breakdown: a row per named scope, then the sum; the bound on the ratio is stated
    assert [r[0] for r in t4[2:]] == list(bench.SCOPES.values()) + ["sum of ops"]
    assert re.search(r"forward wall time .*: SqueezeBERT \d+\.\d ms, BERT-base \d+\.\d ms -> \d+\.\d\dx", out)
    assert re.search(r"position-wise matmuls .*: SqueezeBERT \d+\.\d ms, BERT-base \d+\.\d ms -> \d+\.\d\dx", out)
    assert re.search(r"SqueezeBERT >= 3x BERT-base (would need everything else <= -?\d|is out of reach)", out)


def test_op_profile_attributes_every_op_to_its_component():
    """The XLA profile sees every component of the model through its named scope: matmuls in the position-wise
    layers and the attention core, and the op times add up to (most of) the forward's wall time."""
    model = bench.build_classifier("squeezebert-uncased", tiny=True)
    prof = bench.op_profile(model, batch=2, seq_len=16, runs=2, warmup=1)
    ms = prof["ms"]
    for scope in bench.POSITION_WISE + ("attention_core",):
        assert ms.get((scope, "matmul"), 0) > 0, scope
    assert ms.get(("embedding", "other"), 0) > 0 and ms.get(("embedding", "matmul"), 0) == 0
    assert {s for s, _ in ms} <= set(bench.SCOPES)
    assert prof["ops_ms"] == pytest.approx(sum(ms.values()))
    assert 0 < prof["ops_ms"] <= prof["wall_ms"] * 1.5  # ops run inside the forward (timed in separate runs)


def test_hlo_ops_reads_scopes_and_matmuls():
    hlo = """HloModule jit_f, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{1,0}}

%inner (p: f32[2,3]) -> f32[2,3] {
  %p = f32[2,3]{1,0} parameter(0)
  ROOT %d = f32[2,3]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused (q: f32[2,3]) -> f32[2,3] {
  %q = f32[2,3]{1,0} parameter(0)
  ROOT %c = f32[2,3]{1,0} call(%q), to_apply=%inner
}

ENTRY %main.1 (x: f32[2,3]) -> f32[2,3] {
  %x = f32[2,3]{1,0} parameter(0)
  %ynn_fusion.2 = f32[2,3]{1,0} fusion(%x), kind=kCustom, calls=%fused, metadata={op_name="jit(f)/jvp(g)/qkv/dot_general"}
  %dot.5 = f32[2,3]{1,0} dot(%ynn_fusion.2, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %add.3 = f32[2,3]{1,0} add(%dot.5, %x), metadata={op_name="jit(f)/ffn_act/add"}
  ROOT %neg.4 = f32[2,3]{1,0} negate(%add.3), metadata={op_name="jit(f)/neg"}
}
"""
    module, ops = bench.hlo_ops(hlo)
    assert module == "jit_f"
    # dot.5 has no metadata: it counts where its user add.3 is
    assert ops == {"ynn_fusion.2": ("qkv", True), "dot.5": ("ffn_act", True), "add.3": ("ffn_act", False),
                   "neg.4": ("other", False)}
    with pytest.raises(ValueError, match="HloModule"):
        bench.hlo_ops("ENTRY %main {\n}")


def test_time_interleaved_counts_and_settles():
    """Exactly ``runs`` timings per callable; each round starts every callable with one untimed settling call."""
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "ab"}
    t = bench.time_interleaved(fns, runs=7, warmup=2, rounds=3)
    assert [len(v.times_ms) for v in t.values()] == [7, 7]
    assert order[:4] == ["a", "a", "b", "b"]  # warm-up
    rounds = order[4:]
    assert rounds == ["a"] * (1 + 3) + ["b"] * (1 + 3) + ["a"] * (1 + 2) + ["b"] * (1 + 2) + ["a"] * 3 + ["b"] * 3
