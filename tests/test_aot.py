"""Ahead-of-time compilation for accelerators from this CPU host (train/compile.py, squeezebert_jax.aot).

The smoke config's real pretraining step (tiny model) is compiled for a TPU v5e 2x2 topology (libtpu, the `tpu`
extra) and for two H100s described by the shipped target config (the CUDA PJRT plugin, the `gpu-aot` extra): XLA's
memory analysis and FLOPs, and an oversized batch reported as not fitting with exit status 1. Skipped, with the
reason, where the extra is not installed.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import one_error_line

from squeezebert_jax import aot, chips, cli, parallel, pretrain_settings
from squeezebert_jax.benchmarks import hlo_census, step_profile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "train", "configs", "pretrain.py")


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


needs_tpu = pytest.mark.skipif(not _have("libtpu"), reason="needs the tpu extra (libtpu)")
needs_gpu_plugin = pytest.mark.skipif(not _have("jax_plugins.xla_cuda12"), reason="needs the gpu-aot extra")


def _compile(tmp_path, *args, variant="smoke", timeout=900) -> tuple[int, str, str, list[dict]]:
    out = str(tmp_path / "rows.jsonl")
    # the accelerator programs at the default matmul precision, as users compile them (not the tests' "highest"); the
    # tests' XLA flags (8 host devices), so that the model's initialisation on the host is the tests' compiled programs
    env = {k: v for k, v in os.environ.items() if k != "JAX_DEFAULT_MATMUL_PRECISION"}
    if os.path.exists(out):  # compile.py refuses to replace an existing --json file
        os.remove(out)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "train", "compile.py"), "--config", f"{CONFIGS}:{variant}", "--json",
                        out,
                        *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
    return p.returncode, p.stdout, p.stderr, rows


def test_projections_use_the_mfu_measured_on_that_chip_for_the_step_timed():
    """compile.py's "h at measured MFU": chips.MEASURED_MFU where the step compiled is the one bench_train timed (a
    preset as it is, bf16, remat minimal, fused attention); None for any other step or an unmeasured chip or seq."""
    import types

    config = cli.config_module(CONFIGS).get_config("paper")
    phase = types.SimpleNamespace(seq_len=128)
    h100, a100 = (types.SimpleNamespace(key=k) for k in ("h100", "a100"))
    assert aot._measured_mfu(config, phase, h100) == chips.MEASURED_MFU["h100", "squeezebert-uncased", 128] > 0.1
    assert aot._measured_mfu(config, phase, a100) is None
    assert aot._measured_mfu(config, types.SimpleNamespace(seq_len=512), h100) is None  # not timed on an H100
    for key, value in (("remat", "none"), ("attention", "reference"), ("overrides", {"num_hidden_layers": 3}),
                       ("layers", "scan"), ("ffn", "fused"), ("layernorm", "fused")):
        changed = config.copy_and_resolve_references()
        changed.model[key] = value
        assert aot._measured_mfu(changed, phase, h100) is None, key
    changed = config.copy_and_resolve_references()
    changed.compute_dtype = "float32"
    assert aot._measured_mfu(changed, phase, h100) is None
    gib = dict(argument_gib=1.0, output_gib=1.0, alias_gib=1.0, temp_gib=1.0, code_gib=0.0, peak_gib=1.0, hbm_gib=79.1)
    report = aot.PhaseReport(phase="phase1", seq_len=128, global_batch=8192, per_chip_batch=1024, microbatches=1, **gib,
                             xla_flops=None, analytic_flops=6.4e15, bytes_accessed=None, compile_s=1.0,
                             num_steps=56_000, chip=chips.CHIPS["h100"], num_chips=8, measured_mfu=0.127)
    cells = dict(zip(aot.REPORT_HEADERS, aot.report_row(report)))
    assert cells["h at measured MFU"] == f"{report.hours_at_mfu(0.127):.1f} (12.7%)"
    assert float(cells["h at 35% MFU"]) < report.hours_at_mfu(0.127)

def test_parse_topology_and_chip_table():
    assert aot.parse_topology("v5e:2x4") == ("v5e", (2, 4))
    assert aot.parse_topology("h100:1x8") == ("h100", (1, 8))
    for bad in ("v5litepod-8", "tpu:2x2", "v5e", "v5e:2x2x2x2"):
        with pytest.raises(aot.TopologyError, match="expected CHIP:AxB"):
            aot.parse_topology(bad)
    # MFU (trainer) and the roofline (aot) read one table
    assert chips.PEAK_FLOPS["TPU v5 lite"] == chips.CHIPS["v5e"].peak_bf16 == 197e12
    assert chips.CHIPS["h100"].hbm_gbs == 3350.0


@pytest.mark.parametrize("topology, message", [
    ("v5e:2x2x2", r"'v5e:2x2x2': expected CHIP:AxB\[xC\]; v5e is 2-D, 3 dimensions given: v5e:AxB \(e.g. v5e:2x4\)"),
    ("v6e:2x2x1", r"v6e is 2-D, 3 dimensions given: v6e:AxB"),
    ("v4:2x2", r"'v4:2x2': expected CHIP:AxB\[xC\]; v4 is 3-D, 2 dimensions given: v4:AxBxC \(e.g. v4:2x2x1\)"),
    ("v5p:8", r"v5p is 3-D, 1 dimension given: v5p:AxBxC"),
    ("h100:8", r"h100 is 2-D, 1 dimension given: h100:HOSTSxGPUS \(e.g. h100:1x8\)"),
    ("h100:1x1x8", r"h100 is 2-D, 3 dimensions given"),
    ("v5e:0x4", r"'v5e:0x4': every dimension is a positive integer .*v5e:AxB"),
    ("v4:2x0x1", r"every dimension is a positive integer .*v4:AxBxC"),
    ("a100:1x0", r"every dimension is a positive integer"),
    ("v5e:3x3", r"'v5e:3x3': no v5e slice has that shape; v5e slices are 1x1, 2x2, 2x4, 4x4"),
    # v4 and v5p: 2x2x1 to 2x4x4, then every dimension a multiple of 4
    ("v4:1x1x2", r"'v4:1x1x2': no v4 slice has that shape; v4 slices are 2x2x1, 2x2x2, 2x2x4 and 2x4x4, then"),
    ("v4:2x2x3", r"no v4 slice has that shape"), ("v4:4x4x5", r"no v4 slice has that shape"),
    ("v5p:1x1x1", r"no v5p slice has that shape"), ("v5p:2x2x8", r"no v5p slice has that shape"),
    ("h100:1x1000", r"'h100:1x1000': 1000 GPUs on one host; a host holds 1 to 8 \(h100:HOSTSxGPUS"),
    ("h100:99999999999999999999x1", r"99,999,999,999,999,999,999 chips; at most 16,384"),
    ("v4:64x64x64", r"262,144 chips; at most 16,384"),
    ("v5e:2x-4", r"expected CHIP:AxB\[xC\] .*; a v5e topology is v5e:AxB"),
    ("v5e:2x4.0", r"expected CHIP:AxB\[xC\]"),
    ("v7x:2x2", r"expected CHIP:AxB\[xC\] with CHIP one of v4, v5e"),
    ("", r"expected CHIP:AxB"),
])
def test_a_topology_of_the_wrong_form_for_its_chip_is_refused(topology, message):
    """v5e:2x2x2 went to libtpu, which described 8 chips of a 3-D v5e, and the report said 0.0 h: each chip's own
    form (rank, positive dimensions, a slice it has) is checked before anything is compiled."""
    with pytest.raises(aot.TopologyError, match=message) as e:
        aot.parse_topology(topology)
    assert str(e.value).startswith(f"--topology {topology!r}") and "\n" not in str(e.value)
    for good in ("v5e:1x1", "v5e:2x4", "v6e:16x16", "v4:2x2x1", "v5p:2x2x2", "v4:2x4x4", "v4:4x4x4", "v5p:4x8x8",
                 "v4:8x8x12", "h100:1x8", "a100:2x8"):
        assert aot.parse_topology(good)[1] == tuple(int(d) for d in good.split(":")[1].split("x"))
    with pytest.raises(aot.TopologyError, match=r"^--num_slices 65: 65 slices of 256 chips are 16,640 chips; at most "
                                                r"16,384 in all"):
        aot.get_target("v5e:16x16", num_slices=65)  # before libtpu is asked (4294967296 slices aborted it)


def test_compile_refuses_a_3d_v5e_in_one_line_exit_2(tmp_path):
    rc, out, err, rows = _compile(tmp_path, "--topology", "v5e:2x2x2")
    assert rc == 2 and "v5e is 2-D" in err and "Traceback" not in err and rows == [] and " h " not in out


@pytest.mark.parametrize("n, msg", [("16", "config.num_devices=16: this compiles for every chip of --topology v5e:2x2 "
                                              "(4); leave config.num_devices at 0, or give a topology of 16 chips"),
                                     ("2", "config.num_devices=2: this compiles for every chip"),
                                     ("-1", "config.num_devices=-1: an integer >= 0")])
def test_compile_refuses_a_device_count_the_topology_does_not_have(tmp_path, n, msg):
    rc, out, err, rows = _compile(tmp_path, "--topology", "v5e:2x2", f"--config.num_devices={n}")
    assert rc == 2 and msg in err and "Traceback" not in err and rows == [], err[-2000:]


def test_fewest_microbatches():
    assert aot.fewest_microbatches(8192, 8, 1024) == 1
    assert aot.fewest_microbatches(8192, 8, 300) == 4  # 1024 per chip -> 4 x 256
    assert aot.fewest_microbatches(8192, 8, 0) is None


def test_roofline_bound_and_hours():
    chip = chips.CHIPS["v5e"]
    r = aot.PhaseReport("p", 128, 1024, 256, 1, 1, 1, 1, 1, 0.01, 3.0, chip.hbm_gib, 4 * 197e12, 4 * 197e12 * 0.5,
                        819e9 * 2, 10.0, 3600, chip, 4)
    assert r.fits
    assert r.flop_bound_s == pytest.approx(1.0) and r.bytes_bound_s == pytest.approx(2.0)
    assert r.roofline_s == pytest.approx(2.0)  # bytes-bound: 2 s of HBM traffic > 1 s of FLOPs
    assert r.hours_at_mfu(0.5) == pytest.approx(3600 * 0.5 / 0.5 / 3600)


@pytest.mark.slow
@needs_tpu
def test_compile_demo_step_for_tpu_v5e_and_an_oversized_batch(tmp_path):
    """The demo model (hidden 128): at the smoke config's hidden 32 element-wise work (LayerNorm, softmax, GELU)
    is 36% of the FLOPs, which the analytic (matmul) count leaves out; at 128 it is 8%, at full size 2%.
    --phase: the demo's second phase only (seq 128; two TPU compiles: the step, and the 2 layers unrolled for XLA's
    bytes); the oversized batch below reports every phase."""
    # remat=none: the analytic count has no recomputation in it (the default "minimal" adds ~12% at this width)
    rc, out, err, rows = _compile(tmp_path, "--topology", "v5e:2x2", "--config.model.remat=none", "--phase", "phase2",
                                  "--bytes", variant="demo")
    assert rc == 0, err[-3000:]
    assert "4 x TPU v5 lite" in out and "cores" in out  # the chips, and the host that compiled
    assert [r["phase"] for r in rows] == ["phase2"]
    for r in rows:
        assert r["fits"] and 0 < r["peak_gib"] < chips.CHIPS["v5e"].hbm_gib
        for k in ("argument_gib", "output_gib", "temp_gib", "code_gib", "bytes_accessed", "roofline_s"):
            assert r[k] > 0, (k, r)
        assert abs(r["xla_flops"] / r["analytic_flops"] - 1) <= 0.15, r  # XLA's HLO FLOPs vs the analytic count
        assert r["per chip"] == 8 and r["micro"] == 1 and r["seq"] == r["seq_len"]  # the cells: numbers as numbers
        assert isinstance(r["XLA/analytic"], float) and r["h at measured MFU"] is None and r["fits"] is True
    # an oversized batch: one line per phase with what XLA asked for, exit 1 (in this test, so that the suite's TPU
    # compiles run one after the other, not on both xdist workers at once)
    rc, out, err, rows = _compile(tmp_path, "--topology", "v5e:2x2", "--config.global_batch_size=1048576")
    assert rc == 1, (out, err[-2000:])
    assert "does not fit" in err and "XLA needs" in err and "GiB" in err and "Traceback" not in err
    assert [ln.split()[3] for ln in err.splitlines() if ln.startswith("does not fit: ")] == ["phase1", "phase2"]




LAYER_SCOPES = ("qkv", "attention_core", "post_attention", "ffn_expand", "ffn_act", "ffn_contract")


@pytest.mark.slow
@needs_gpu_plugin
@pytest.mark.parametrize("family", [None, pytest.param("mobilebert-uncased", marks=pytest.mark.slow),
                                    pytest.param("albert-base-v2", marks=pytest.mark.slow)])
def test_compile_smoke_step_for_h100_target(tmp_path, family):
    """The smoke config's first phase (every phase: the TPU test's oversized batch) compiled for H100s.

    The compared families whose layers are their own (MobileBERT's bottlenecks, ALBERT's one shared layer), data
    parallel on two: their XLA FLOPs are 0.9 to 1.3 times the analytic count (squeezebert_jax.flops).

    SqueezeBERT (3 layers, unrolled as GPUs run them) in bf16 on one, read kernel by kernel from the program
    (--hlo; benchmarks.hlo_census and step_profile name each kernel's scope and pass): each layer's forward runs
    attention as one cuDNN kernel and its backward as cuDNN's backward alone (remat keeps the forward's output and
    softmax statistics: it used to run the forward again) and takes the padding as key counts, reading no bias; Q/K/V
    are one matmul (4 in the forward, 8 in the backward); the FFN stays group-major between its convs (2 transposes
    a pass); GELU's kernel writes the activation alone (when the saved expansion held its bias, it wrote the sum
    too: 2.4 GB more per paper step); the MLM loss's backward writes no scatter over the vocabulary (3.1 GB fewer
    per paper step); the optimizer updates the layers stacked. The counts are today's, as upper bounds: the
    explicit attention core with transposes around every grouped conv compiled to 53 forward and 94 backward
    kernels per layer under the layer scan at full size (6 and 7 of them transposes), against 18 and 35 unrolled
    now; the step outside the layers' scopes to 1,671 kernels at full size, against 822 now (318 at 3 layers)."""
    if family:
        args = ("--topology", "h100:1x2", "--config.model.preset=" + family)
    else:
        args = ("--topology", "h100:1x1", "--census", "--hlo", str(tmp_path / "hlo"),
                "--config.compute_dtype=bfloat16", "--config.model.overrides.num_hidden_layers=3")
    rc, out, err, rows = _compile(tmp_path, "--phase", "phase1", *args)
    assert rc == 0, err[-3000:]
    assert "NVIDIA H100 80GB HBM3" in out and (family or "squeezebert-uncased") in out
    assert [r["phase"] for r in rows] == ["phase1"] and all(r["fits"] and r["peak_gib"] > 0 for r in rows)
    if family:  # their whole-step counts (MobileBERT 1.08 here; SqueezeBERT's grouped smoke model: 1.63)
        assert 0.9 < rows[0]["xla_flops"] / rows[0]["analytic_flops"] < 1.3
        return
    assert "phase1 kernels (the program XLA compiled for h100:1x1):" in out and "loop body" not in out  # unrolled
    hlo = (tmp_path / "hlo" / "phase1.hlo.txt").read_text()
    scopes, kernels = step_profile.instructions(hlo), hlo_census.entry_kernels(hlo)
    layers = collections.Counter()
    for name in kernels:
        i = scopes[name]
        where = ("bwd" if i.backward else "fwd") if i.scope in LAYER_SCOPES else "outside"
        layers[where, i.kind] += 1
        layers[where, "all"] += 1
        if i.scope == "ffn_act" and not i.backward:
            assert not kernels[name].startswith("("), (name, kernels[name])  # one array written, not a tuple
        if "scatter" in name and i.scope != "embedding" and kernels[name].startswith("f32"):
            # the MLM loss's backward (losses.softmax_nll) scatters no labels into a [B, P, vocab] array: only
            # the sentence-order loss's [B, 2] does
            assert re.match(r"f32\[\d+,2\]", kernels[name]), (name, kernels[name])
    per_layer = {k: v / 3 for k, v in layers.items()}
    assert (per_layer["fwd", "attention"], per_layer["bwd", "attention"]) == (1, 1), layers
    assert (per_layer["fwd", "gemm"], per_layer["bwd", "gemm"]) == (4, 8), layers
    for p in ("fwd", "bwd"):
        assert per_layer.get((p, "transpose"), 0) + per_layer.get((p, "copy"), 0) <= 2, layers
    # each dropout mask's hashes are a kernel of their own (layers.Dropout: a quarter of bernoulli's hashes, written
    # once and read by the dropout's kernel; the H200 step 1.03x faster), about 2 a layer in each pass
    assert per_layer["fwd", "all"] <= 18 and per_layer["bwd", "all"] <= 35, layers
    # the trainers' masks are right padding: cuDNN takes key counts (mask_type PADDING), reading no [B, 1, S, S] bias
    fmha = [line for line in hlo.splitlines() if 'custom_call_target="__cudnn$fmha' in line]
    assert len(fmha) == 6 and all('"mask_type": "PADDING"' in f and "Bias" not in f for f in fmha), fmha[:1]
    # the step outside the layers: the optimizer updates the layers stacked (optim.by_layer; without it, 1,131 kernels
    # against 818 for 12 layers under the scan, about 26 more per layer)
    assert layers["outside", "all"] <= 320, layers


@needs_gpu_plugin
def test_the_inference_forward_for_an_h100_writes_q_k_v_without_a_transpose():
    """The bf16 forward in eval mode (what mobile.make_flax_forward and evaluation run), SqueezeBERT's width at 2
    layers, batch 256 x 128, compiled for one H100: per layer Q/K/V are three grouped matmuls, each written
    channels-last by the matmul itself, with no transpose or copy kernel in the qkv scope (before: one matmul of the
    concatenated kernels, then a transpose of its [G, N, 3H/G] output to heads, 151 MB read and written a layer).
    The training step keeps the one matmul (test_compile_smoke_step_for_h100_target)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import squeezebert_jax as sj
    from squeezebert_jax.model import set_execution
    from squeezebert_jax.pretrained import cast_compute_dtype

    target = aot.get_target("h100:1x1")
    replicated = NamedSharding(Mesh(np.array(target.devices), ("data",)), PartitionSpec())
    cfg = sj.SqueezeBertConfig.preset("squeezebert-uncased", num_hidden_layers=2)
    model = nnx.eval_shape(lambda: sj.SqueezeBertForSequenceClassification(cfg, num_labels=2, rngs=nnx.Rngs(0)))
    model.eval()
    set_execution(model, scan_layers=False, remat="none")
    cast_compute_dtype(model, jnp.bfloat16)
    graphdef, state = nnx.split(model)
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        x.shape, jnp.bfloat16 if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype, sharding=replicated), state)
    ids = jax.ShapeDtypeStruct((256, 128), jnp.int32, sharding=replicated)
    forward = jax.jit(lambda s, i, m, t: nnx.merge(graphdef, s)(i, m, t).logits)
    with jax.default_matmul_precision("default"):  # as users compile it (the tests' processes run "highest")
        hlo = forward.lower(state, ids, ids, ids).compile().as_text()
    scopes, kernels = step_profile.instructions(hlo), hlo_census.entry_kernels(hlo)
    qkv = collections.Counter(scopes[name].kind for name in kernels if scopes[name].scope == "qkv")
    assert qkv == {"gemm": 3 * 2}, qkv
    for name in kernels:
        if scopes[name].scope == "qkv":
            assert re.match(r"bf16\[32768,4,192\]", kernels[name]), (name, kernels[name])  # channels-last: [N, G, H/G]


def _compile_finetune(tmp_path, *args):
    import squeezebert_jax as sj
    from flax import nnx

    cfg = sj.SqueezeBertConfig(vocab_size=64, hidden_size=32, embedding_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    if not (tmp_path / "student").exists():
        sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0)), tmp_path / "student")
        wide = cfg.replace(hidden_size=64, embedding_size=64, intermediate_size=128, num_hidden_layers=4)
        sj.save_pretrained(sj.SqueezeBertForSequenceClassification(wide, num_labels=3, rngs=nnx.Rngs(0)),
                           tmp_path / "teacher")
    out = tmp_path / "rows.jsonl"
    if out.exists():
        out.unlink()
    env = {k: v for k, v in os.environ.items() if k != "JAX_DEFAULT_MATMUL_PRECISION"}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "train", "compile.py"), "--config",
                        os.path.join(ROOT, "train", "configs", "glue.py") + ":mnli", "--json", str(out),
                        f"--config.init_from={tmp_path / 'student'}", "--config.max_seq_length=32", *args],
                       capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    rows = [json.loads(line) for line in open(out)] if out.exists() else []
    return p.returncode, p.stdout, p.stderr, rows


@pytest.mark.slow
@needs_tpu
def test_compile_the_finetuning_step_with_a_teacher_for_tpu(tmp_path):
    """train/finetune.py's step for v5e:2x2: with a teacher's logits (and the teacher's logits pass compiled too), and
    with layer distillation (the teacher's forward inside the step: its FLOPs counted)."""
    teacher = f"--config.distill.teacher={tmp_path / 'teacher'}"
    rc, out, err, rows = _compile_finetune(tmp_path, "--topology", "v5e:2x2", teacher)
    assert rc == 0, err[-3000:]
    assert "fine-tuning mnli (392702 examples x 3 epochs = 73632 steps of batch 16, seq 32)" in out
    assert [r["phase"] for r in rows] == ["finetune mnli + teacher", "teacher logits"]
    assert all(r["fits"] and r["peak_gib"] > 0 for r in rows)
    assert rows[0]["per chip"] == 4 and rows[0]["num_steps"] == 73632 and rows[1]["num_steps"] == -(-392702 // 64)
    rc, out, err, layer = _compile_finetune(tmp_path, "--topology", "v5e:2x2", teacher, "--config.distill.hidden_weight=1",
                                            "--config.distill.layer_map=uniform")
    assert rc == 0, err[-3000:]
    assert [r["phase"] for r in layer] == ["finetune mnli + teacher"]  # the teacher runs inside the step
    assert layer[0]["analytic_flops"] > 2 * rows[0]["analytic_flops"]  # + the 4-layer, 2x wider teacher's forward
    assert layer[0]["xla_flops"] > 2 * rows[0]["xla_flops"]  # XLA counts it too (unrolled, every teacher layer)


def test_pretraining_flags_on_a_finetuning_config_are_one_line(tmp_path):
    rc, out, err, _ = _compile_finetune(tmp_path, "--topology", "v5e:2x2", "--fit")
    assert rc == 2 and "--fit: for pretraining configs" in err and "Traceback" not in err
    rc, out, err, _ = _compile_finetune(tmp_path, "--topology", "v5e:2x2", "--census", "--hlo", str(tmp_path / "h"))
    assert rc == 2 and "--census, --hlo: for pretraining configs only" in err and not (tmp_path / "h").exists()
    # an architecture named twice: the directory's was taken, the preset ignored without a word
    rc, out, err, _ = _compile_finetune(tmp_path, "--topology", "v5e:2x2", "--preset", "bert-base-uncased")
    assert rc == 1 and "--preset bert-base-uncased beside --config.init_from=" in err and "give one of them" in err
    rc, out, err, _ = _compile_finetune(tmp_path, "--topology", "v5e:2x2", "--teacher_preset", "bert-bogus")
    assert rc == 1 and "--teacher_preset: unknown preset 'bert-bogus'; known: " in err and "compiled" not in out
    rc, out, err, _ = _compile_finetune(tmp_path, "--topology", "v5e:2x2", "--config.task=files")  # your own data
    assert rc == 1 and "config.task 'files': compile.py compiles the fine-tuning step of a GLUE task" in err, err
    # --bytes for a GPU target: XLA:GPU reports none (two compiles spent, "0.0 h at the roofline" claimed)
    rc, out, err, _ = _compile(tmp_path, "--topology", "h100:1x1", "--bytes")
    assert rc == 2 and "--bytes: XLA reports bytes accessed for TPU targets only" in err and "compiled" not in out


def test_unknown_topology_is_one_line_exit_2(tmp_path):
    rc, out, err, _ = _compile(tmp_path, "--topology", "v5litepod-8")
    assert rc == 2 and "expected CHIP:AxB" in err and "Traceback" not in err


def test_existing_json_and_config_typos_are_one_line(tmp_path):
    """Refused before any compile: an existing --json file (unchanged after), a config variant typo, an override of a
    field the config does not have -- each one line, no traceback (absl's "FATAL Flags parsing error" block before)."""
    out = tmp_path / "rows.jsonl"
    out.write_text("earlier rows\n")
    def run(*args):  # refused before any compile: the tests' environment as it is
        p = subprocess.run([sys.executable, os.path.join(ROOT, "train", "compile.py"), *args], capture_output=True,
                           text=True, timeout=600, cwd=ROOT)
        err = [ln for ln in p.stderr.splitlines() if "compile.py" in ln or "Traceback" in ln or "FATAL" in ln]
        return p.returncode, err

    rc, err = run("--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--json", str(out))
    assert rc == 1 and len(err) == 1 and "already exists; pass --overwrite" in err[0], err
    assert out.read_text() == "earlier rows\n"
    rc, err = run("--config", f"{CONFIGS}:smoek", "--topology", "v5e:2x2")
    assert rc == 2 and len(err) == 1 and "unknown variant 'smoek'" in err[0] and "smoke" in err[0], err
    rc, err = run("--config", f"{CONFIGS}:smoke", "--config.learnig_rate=0.1", "--topology", "v5e:2x2")
    assert rc == 2 and len(err) == 1 and "--config.learnig_rate=0.1: the config has no field 'learnig_rate'" in err[0]
    rc, err = run("--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--phase", "phase3")
    assert rc == 2 and len(err) == 1 and "--phase phase3: the config's phases are phase1, phase2" in err[0], err
    (tmp_path / "hlo").mkdir()
    (tmp_path / "hlo" / "phase1.hlo.txt").write_text("an earlier program\n")
    rc, err = run("--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--hlo", str(tmp_path / "hlo"))
    assert rc == 1 and len(err) == 1 and "phase1.hlo.txt already exists; pass --overwrite" in err[0], err
    assert (tmp_path / "hlo" / "phase1.hlo.txt").read_text() == "an earlier program\n"
    rc, err = run("--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--hlo", str(out))
    assert rc == 1 and len(err) == 1 and "is not a directory; give a directory" in err[0], err
    rc, err = run("--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--hlo", str(out / "sub"))  # under a file
    assert rc == 1 and len(err) == 1 and f"--hlo {out}/sub: {out} is a file, not a directory" in err[0], err
    both = tmp_path / "both"  # the rows' file as the programs' directory (it was found after the compiles)
    rc, err = run("--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--hlo", str(both), "--json",
                  str(tmp_path / "hlo" / ".." / "both"))
    assert rc == 1 and len(err) == 1 and "give each its own path" in err[0] and not both.exists(), err
    # an output is never an input, --overwrite or not: the config file, or a file of the MODEL_DIR it starts from
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    for json_out, extra in ((CONFIGS, ()), (model / "config.json", (f"--config.init_from={model}",))):
        rc, err = run("--config", f"{CONFIGS}:smoke", *extra, "--topology", "v5e:2x2", "--json", str(json_out),
                      "--overwrite")
        assert rc == 1 and len(err) == 1 and "of this command; an output" in err[0], err
    assert (model / "config.json").read_text() == "{}\n"


def test_fit_finds_the_fewest_microbatches(monkeypatch):
    """--fit: a phase that does not fit is compiled again with more microbatches (a jump sized from XLA's figure,
    then doubling) until it fits; the table row is the step that fits. Compiles simulated: memory = 2 + 64 / k GiB."""
    import importlib.util

    import ml_collections

    spec = importlib.util.spec_from_file_location("compile_cli", os.path.join(ROOT, "train", "compile.py"))
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    chip = chips.CHIPS["v5e"]
    target = aot.Target(chip, "v5e", "v5e:2x2", tuple(range(4)), 1)
    calls = []

    def fake_compile(config, phase, target, model, **kw):
        k = phase.num_microbatches
        calls.append(k)
        need = 2 + 64 / k
        if need > chip.hbm_gib:
            raise aot.DoesNotFit("RESOURCE_EXHAUSTED", need)
        return aot.PhaseReport(phase.name, 128, 1024, 256, k, 1, 0, 0, need - 1, 0, need, chip.hbm_gib, None,
                               1e12, None, 1.0, 10, chip, 4)

    monkeypatch.setattr(aot, "compile_or_oom", fake_compile)
    config = ml_collections.ConfigDict({"global_batch_size": 1024, "num_microbatches": 1})
    phase = pretrain_settings.Phase("phase1", 0, 0, 10, 128, 20)
    cli.flags.FLAGS(["compile.py", "--config", f"{CONFIGS}:smoke", "--topology", "v5e:2x2", "--fit"])
    bad = []
    r, k = cli._compile_phase(config, phase, target, None, bad)
    assert (k, r.microbatches, bad) == (8, 8, []) and r.fits  # 66 GiB -> jump x8 (66/15.75 -> 2^3): 10 GiB fits
    assert calls == [1, 8, 4]  # and 4 (18 GiB) is tried: the jump must not overshoot the fewest that fit
    calls.clear()
    cli.flags.FLAGS.fit = False  # without --fit: reported, not retried
    r, k = cli._compile_phase(config, phase, target, None, bad)
    assert r is None and calls == [1] and "66.00 GiB" in bad[0] and "1 microbatches" in bad[0]
    cli.flags.FLAGS.unparse_flags()


@needs_gpu_plugin
def test_a_gpu_topology_models_its_hosts():
    """h100:HOSTSxGPUS: the GPUs of each host are that host's process (h100:2x2 compiled as h100:1x4 before: one
    NVLink domain of four), so a multi-host mesh and its collectives are the ones a run of that many hosts has."""
    for topology, hosts in (("h100:2x2", [0, 0, 1, 1]), ("h100:1x4", [0, 0, 0, 0])):
        assert [d.process_index for d in aot.get_target(topology).devices] == hosts, topology


@needs_tpu
def test_topology_meshes_physical_order_and_slices():
    """make_mesh orders compile-only TPU devices as real runs get them: mesh_utils' physical order over the 2x4 torus
    (not the id order), and over two slices (counted from slice_index, as on a multi-slice run) a hybrid mesh whose
    data axis runs slice by slice."""
    from jax.experimental import mesh_utils

    t = aot.get_target("v5e:2x4")
    order = [d.id for d in parallel.make_mesh(devices=t.devices).devices.flat]
    assert sorted(order) == sorted(d.id for d in t.devices)
    assert order == [d.id for d in mesh_utils.create_device_mesh((8,), list(t.devices)).flat]
    two = aot.get_target("v5e:2x2", num_slices=2)
    mesh = parallel.make_mesh(devices=two.devices)  # num_slices read off the devices
    assert [d.slice_index for d in mesh.devices.flat] == [0] * 4 + [1] * 4
    assert parallel.make_mesh(devices=two.devices, num_slices=1).devices.size == 8


def test_required_gib_reads_xla_oom_messages():
    msg = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (314.60G) "
           "exceeds available HBM (30.75G).")
    assert aot.required_gib(msg) == pytest.approx(314.60)
    assert aot.required_gib("RESOURCE_EXHAUSTED: Used 17.52G of 15.75G hbm. Exceeded hbm capacity by 1.77G.") == \
        pytest.approx(17.52)
    assert aot.required_gib("RESOURCE_EXHAUSTED: Used 900.5M of 512M") == pytest.approx(900.5 / 1024)
    assert aot.required_gib("RESOURCE_EXHAUSTED: out of memory") is None


@pytest.mark.parametrize("refuses", [True, False])
def test_max_per_chip_batch_finds_the_largest_that_fits(monkeypatch, refuses):
    """--max-batch: compiles simulated with peak = 1 + 0.04 x batch GiB on a 15.75 GiB chip (the largest multiple of
    8 that fits: 368), XLA refusing what does not fit (TPU) or compiling it with a peak over HBM (GPU)."""
    import ml_collections

    chip = chips.CHIPS["v5e"]
    target = aot.Target(chip, "v5e", "v5e:2x2", tuple(range(4)), 1)

    def fake_compile(config, phase, target, model, costs):
        b = config.global_batch_size // 4
        assert phase.num_microbatches == 1 and not costs
        peak = 1 + 0.04 * b
        if refuses and peak > chip.hbm_gib:
            raise aot.DoesNotFit("RESOURCE_EXHAUSTED", peak)
        return aot.PhaseReport("p", 128, b * 4, b, 1, 1, 0, 0, peak - 1, 0, peak, chip.hbm_gib, None, 1.0, None,
                               1.0, 10, chip, 4)

    monkeypatch.setattr(aot, "compile_or_oom", fake_compile)
    config = ml_collections.ConfigDict({"global_batch_size": 8192, "num_microbatches": 4})
    phase = pretrain_settings.Phase("p", 0, 0, 10, 128, 20, num_microbatches=4)
    b, tried = aot.max_per_chip_batch(config, phase, target)
    assert b == 368 and len(tried) <= 6, tried
    assert aot.fewest_microbatches(8192, 4, b) == 8  # 2048 per chip -> 8 x 256


def test_max_per_chip_batch_tries_no_batch_past_its_token_cap(monkeypatch):
    """A tiny model's peak barely grows with the batch: the line's crossing with HBM was a per-chip batch of 1.6e10,
    whose shapes overflowed XLA's (a C++ abort of the process). No batch past 2^24 tokens a chip is compiled; the cap
    is the answer when it fits."""
    import ml_collections

    chip = chips.CHIPS["v5e"]
    target = aot.Target(chip, "v5e", "v5e:2x2", tuple(range(4)), 1)
    seen = []

    def fake_compile(config, phase, target, model, costs):
        b = config.global_batch_size // 4
        seen.append(b)
        assert b * phase.seq_len <= aot.MAX_TOKENS_PER_CHIP, b
        return aot.PhaseReport("p", 32, b * 4, b, 1, 1, 0, 0, 1e-3, 0, 1e-3 + 1e-12 * b, chip.hbm_gib, None, 1.0,
                               None, 1.0, 10, chip, 4)

    monkeypatch.setattr(aot, "compile_or_oom", fake_compile)
    config = ml_collections.ConfigDict({"global_batch_size": 16, "num_microbatches": 1})
    b, tried = aot.max_per_chip_batch(config, pretrain_settings.Phase("p", 0, 0, 10, 32, 5), target)
    assert b == aot.MAX_TOKENS_PER_CHIP // 32 == max(seen) and len(tried) <= 6, tried


@needs_tpu
def test_compile_refuses_what_the_run_would_refuse_before_compiling(tmp_path):
    """compile.py runs each training's own settings validator (pretraining's without asking for data): a setting the
    run would refuse is one line, exit 1, before the minutes of compiling."""
    rc, out, err, rows = _compile(tmp_path, "--topology", "v5e:2x2", "--config.decay_power=-1", variant="paper")
    assert rc == 1 and "config.decay_power=-1.0: a finite power > 0" in one_error_line(err) and not rows
    assert "compiled" not in out
    rc, out, err, rows = _compile_finetune(tmp_path, "--topology", "v5e:2x2", "--config.batch_size=6")
    assert rc == 1 and "config.batch_size=6: a multiple of the 4 devices of the mesh" in one_error_line(err)
    assert not rows
