"""The benchmarks (squeezebert_jax.benchmarks) through their eval/ scripts and on their own: the latency, Table 1
profile, inference and train-step tables on tiny configs (well-formed tables, no timing asserts), the XLA-profile attribution,
the HLO reader and the interleaved timer."""

from __future__ import annotations

import os
import re
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402

import squeezebert_jax as sj  # noqa: E402
from squeezebert_jax.benchmarks import profile_table, timing  # noqa: E402
from squeezebert_jax.benchmarks.timing import cpu_model  # noqa: E402
from conftest import load_script  # noqa: E402

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


@pytest.mark.slow
def test_latency_tiny_table(restore_threads, capsys, tmp_path):
    """Presets and a MODEL_DIR (its own weights and head) in one table; --out holds what was printed."""
    model_dir = str(tmp_path / "mlm")
    sj.save_pretrained(sj.SqueezeBertForMaskedLM(timing.tiny_config(), rngs=nnx.Rngs(0)), model_dir)
    script = load_script("eval/latency.py")
    assert script.main(["--tiny", "--runs", "1", "--warmup", "1", "--seq-len", "8",
                        "--models", "squeezebert-uncased", model_dir, "--out", str(tmp_path / "lat.md")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "lat.md").read_text() == out
    (t,) = table_rows(out)
    assert t[0][:4] == ["model", "MParams", "GFLOPs", "paper GFLOPs"] and "lite ms" in t[0] and "Flax ms" in t[0]
    # the reference is added
    assert [r[0] for r in t[2:]] == ["bert-base-uncased", "squeezebert-uncased", model_dir]
    assert t[-1][t[0].index("paper Pixel 3 ms")] == "-"
    ref = t[2]
    assert ref[t[0].index("lite speedup")] == "1.00x" and ref[t[0].index("Flax speedup")] == "1.00x"
    for r in t[2:]:
        assert float(r[t[0].index("lite ms")]) > 0 and re.fullmatch(r"\d+\.\d\dx", r[t[0].index("Flax speedup")])
    assert "lite vs Flax max |diff|" in out and os.sched_getaffinity(0).__len__() == 1
    assert f"host: {cpu_model()}" in out.splitlines()[0]  # the CPU beside the timings, in the table's title


def test_profile_tiny_table(restore_threads, capsys):
    script = load_script("eval/profile_table1.py")
    assert script.main(["--tiny", "--runs", "2", "--warmup", "1", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    tables = table_rows(out)
    assert len(tables) == 2 and out.count(f"host: {cpu_model()}") == 2  # each table's title names the CPU
    for name, t in zip(["bert-base-uncased", "squeezebert-uncased"], tables):
        assert [r[0] for r in t[2:]] == list(profile_table.COMPONENTS.values()) + ["Total (sum of components)"]
        fl = sj.flops_breakdown(timing.preset_config(name, tiny=True), 16, num_labels=2)
        shares = [float(r[1].rstrip("%")) for r in t[2:-1]]
        assert shares == pytest.approx([100 * fl[k] / sum(fl.values()) for k in profile_table.COMPONENTS], abs=0.006)
        for col in (3, 4):  # latency shares are percentages that add up to ~100
            assert sum(float(r[col].split("%")[0]) for r in t[2:-1]) == pytest.approx(100, abs=0.05)


def test_profile_of_a_model_dir_with_another_head(restore_threads, capsys, tmp_path):
    """A MODEL_DIR is profiled with its own weights and head: a masked-LM model's head counts in the last row."""
    model_dir = str(tmp_path / "mlm")
    sj.save_pretrained(sj.SqueezeBertForMaskedLM(timing.tiny_config(), rngs=nnx.Rngs(0)), model_dir)
    script = load_script("eval/profile_table1.py")
    assert script.main(["--models", model_dir, "--runs", "1", "--warmup", "1", "--seq-len", "16"]) == 0
    (t,) = table_rows(capsys.readouterr().out)
    assert [r[0] for r in t[2:]] == list(profile_table.COMPONENTS.values()) + ["Total (sum of components)"]
    for col in (1, 3, 4):
        assert sum(float(r[col].split("%")[0]) for r in t[2:-1]) == pytest.approx(100, abs=0.05)


def test_table1_flops_reproduce_the_paper_for_bert_base():
    """flops_breakdown gives the paper's BERT-base Table 1 FLOPs shares to its three significant digits."""
    fl = sj.flops_breakdown(sj.SqueezeBertConfig.preset("bert-base-uncased"), 128)
    for key, (paper_flops, _) in profile_table.PAPER_TABLE1.items():
        assert 100 * fl[key] / sum(fl.values()) == pytest.approx(paper_flops, abs=0.05), key
    assert sum(v[1] for v in profile_table.PAPER_TABLE1.values()) == pytest.approx(100, abs=0.2)


def test_bench_infer_tiny_tables(restore_threads, capsys):
    script = load_script("eval/bench_infer.py")
    assert script.main(["--tiny", "--batch", "2", "--runs", "1", "--warmup", "1", "--seq-len", "8",
                        "--threads", "1", "--formulation", "conv-loop", "--breakdown"]) == 0
    out = capsys.readouterr().out
    t1, t2, t3, t4 = table_rows(out)
    assert f"host: {cpu_model()}" in out
    f = "float32, conv-loop"
    assert [(r[0], r[1]) for r in t1[2:]] == [("2", "float32"), ("2", f)]
    assert all(re.fullmatch(r"\d+\.\d\dx", r[4]) for r in t1[2:])
    assert [(r[0], r[1]) for r in t2[2:]] == [("2", v) for v in ("float32", f, "bfloat16")]
    assert [(r[0], r[1]) for r in t3[2:]] == [(n, "2") for n in ("squeezebert-uncased", "bert-base-uncased")]
    # the profile breakdown: a row per named scope, then the sum; the bound on the ratio is stated
    assert [r[0] for r in t4[2:]] == list(profile_table.SCOPES.values()) + ["sum of ops"]
    assert re.search(r"forward wall time .*: SqueezeBERT \d+\.\d ms, BERT-base \d+\.\d ms -> \d+\.\d\dx", out)
    assert re.search(r"position-wise matmuls .*: SqueezeBERT \d+\.\d ms, BERT-base \d+\.\d ms -> \d+\.\d\dx", out)
    assert re.search(r"SqueezeBERT >= 3x BERT-base (would need everything else <= -?\d|is out of reach)", out)


def test_op_profile_attributes_every_op_to_its_component():
    """The XLA profile sees every component of the model through its named scope: matmuls in the position-wise
    layers and the attention core. (How the op times compare with the wall time is a timing, not a test: under a
    loaded CI host the two separately timed runs differ by more than any honest bound.)"""
    model = timing.build_classifier("squeezebert-uncased", tiny=True)
    prof = profile_table.op_profile(model, batch=2, seq_len=16, runs=2, warmup=1)
    ms = prof["ms"]
    for scope in profile_table.POSITION_WISE + ("attention_core",):
        assert ms.get((scope, "matmul"), 0) > 0, scope
    assert ms.get(("embedding", "other"), 0) > 0 and ms.get(("embedding", "matmul"), 0) == 0
    assert {s for s, _ in ms} <= set(profile_table.SCOPES)
    assert prof["ops_ms"] == pytest.approx(sum(ms.values()))
    assert prof["ops_ms"] > 0 and prof["wall_ms"] > 0


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
    module, ops = profile_table.hlo_ops(hlo)
    assert module == "jit_f"
    # dot.5 has no metadata: it counts where its user add.3 is
    assert ops == {"ynn_fusion.2": ("qkv", True), "dot.5": ("ffn_act", True), "add.3": ("ffn_act", False),
                   "neg.4": ("other", False)}
    with pytest.raises(ValueError, match="HloModule"):
        profile_table.hlo_ops("ENTRY %main {\n}")


def test_hlo_census_counts_kernels_and_their_bytes():
    """The kernels of an optimized HLO module by kind, and the bytes each reads (its operands) and writes (its
    result, a tuple's arrays together); free ops (parameters, tuples, bitcasts) are no kernels."""
    from squeezebert_jax.benchmarks import hlo_census

    hlo = """HloModule m

%fused_gelu (p0: bf16[4,8,16]) -> (bf16[4,8,16], bf16[4,8,16]) {
  %p0 = bf16[4,8,16]{2,1,0} parameter(0)
  %m = bf16[4,8,16]{2,1,0} multiply(%p0, %p0)
  ROOT %t = (bf16[4,8,16]{2,1,0}, bf16[4,8,16]{2,1,0}) tuple(%m, %p0)
}

%fused_t (p0: f32[8,16]) -> f32[16,8] {
  %p0 = f32[8,16]{1,0} parameter(0)
  ROOT %t = f32[16,8]{1,0} transpose(%p0), dimensions={1,0}
}

ENTRY %main (a: bf16[4,8,16], b: f32[8,16]) -> f32[16,8] {
  %a = bf16[4,8,16]{2,1,0} parameter(0)
  %b = f32[8,16]{1,0} parameter(1)
  %g = (bf16[4,8,16]{2,1,0}, bf16[4,8,16]{2,1,0}) fusion(%a), kind=kLoop, calls=%fused_gelu
  %c = bf16[4,8,16]{2,1,0} copy(%a)
  ROOT %tr = f32[16,8]{1,0} fusion(%b), kind=kLoop, calls=%fused_t
}
"""
    c = hlo_census.census(hlo)
    assert dict(c.entry) == {"other": 1, "copy": 1, "transpose": 1} and c.loops == []
    array = 4 * 8 * 16 * 2
    assert c.entry_bytes == (2 * array + 8 * 16 * 4, 3 * array + 16 * 8 * 4)
    assert str(c) == "entry: 3 kernels (copy 1, other 1, transpose 1); read 0.0 MB, written 0.0 MB"
    assert hlo_census.entry_kernels(hlo) == {"g": "(bf16[4,8,16]{2,1,0}, bf16[4,8,16]{2,1,0})",
                                             "c": "bf16[4,8,16]{2,1,0}", "tr": "f32[16,8]{1,0}"}

    # XLA numbers the elements of a tuple of more than five: a tuple stays free, a fusion's six results are written
    six = ", ".join(f"/*index={i}*/f32[2]{{0}}" if i % 5 == 0 and i else "f32[2]{0}" for i in range(6))
    long = f"""HloModule m

%fused_six (p0: f32[2]) -> ({six}) {{
  %p0 = f32[2]{{0}} parameter(0)
  ROOT %t = ({six}) tuple(%p0, %p0, %p0, %p0, %p0, %p0)
}}

ENTRY %main (a: f32[2]) -> ({six}) {{
  %a = f32[2]{{0}} parameter(0)
  %f = ({six}) fusion(%a), kind=kLoop, calls=%fused_six
  %g = f32[2]{{0}} get-tuple-element(%f), index=5
  ROOT %t = ({six}) tuple(%g, %g, %g, %g, %g, %g)
}}
"""
    assert "/*index=5*/" in long
    c = hlo_census.census(long)
    assert dict(c.entry) == {"other": 1} and c.entry_bytes == (8, 6 * 8)


def test_time_interleaved_counts_and_settles():
    """Exactly ``runs`` timings per callable; each round starts every callable with one untimed settling call."""
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "ab"}
    t = timing.time_interleaved(fns, runs=7, warmup=2, rounds=3)
    assert [len(v.times_ms) for v in t.values()] == [7, 7]
    assert order[:4] == ["a", "a", "b", "b"]  # warm-up
    rounds = order[4:]
    assert rounds == ["a"] * (1 + 3) + ["b"] * (1 + 3) + ["a"] * (1 + 2) + ["b"] * (1 + 2) + ["a"] * 3 + ["b"] * 3


@pytest.mark.slow
def test_bench_train_executions_table(capsys):
    """--executions: one row per execution choice, each a valid config, its speed relative to the default's (the
    first). Two of them run here (each is a compile: --executions NAME picks by name, the default always timed);
    every one's config is built; a name no choice holds is one line listing them."""
    mod = load_script("eval/bench_train.py")
    for _, changes in mod.EXECUTIONS + mod.GPU_EXECUTIONS:
        mod.preset("squeezebert-uncased", False, **{k: v for k, v in changes.items() if k not in ("rng_impl", "xla")})
    assert ("padding as a mask (the attention kernel reads a bias)", {"padding": "any"}) in mod.EXECUTIONS
    assert mod.preset("bert-base-uncased", True).scan_layers is False  # as the trainer runs it here (CPU: unrolled)
    with pytest.raises(sj.errors.InputError, match=r"^--executions 'flash': no execution choice here is named so; "
                                                   r"they are: default: .*; rbg dropout bits; dropout off; fused FFN "
                                                   r"kernel \(Pallas\); LayerNorm backward kernel \(Pallas\); "
                                                   r"remat none \+ LayerNorm backward kernel; padding as a mask "
                                                   r"\(the attention kernel reads a bias\)$"):
        mod.main(["--tiny", "--executions", "flash"])
    assert mod.main(["--tiny", "--executions", "RBG", "as a mask", "--batch", "8", "--steps", "1", "--seq-lens", "32",
                     "--dtype", "float32", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "execution" not in line]
    assert [r[0].strip() for r in rows] == [mod.EXECUTIONS[0][0], "rbg dropout bits",
                                            "padding as a mask (the attention kernel reads a bias)"]
    assert rows[0][4].strip() == "1.00x" and re.fullmatch(r"\d+\.\d\dx", rows[1][4].strip())
    assert all(re.fullmatch(r"\d+\.\d, \d+\.\d", r[2].strip()) for r in rows)  # --repeats 2: both runs, in turns


def test_bench_train_kernels_tables(capsys):
    """--kernels on a CPU: XLA's FFN and two tile choices of the kernel (Pallas' interpreter), each within bf16's
    error of float32, then the inference forward and BERT-base's, with the ratio."""
    mod = load_script("eval/bench_train.py")
    assert mod.main(["--tiny", "--kernels", "--batch", "4", "--steps", "1", "--seq-lens", "32"]) == 0
    out = capsys.readouterr().out
    ffn = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| XLA", "| kernel"))]
    assert [r[0].split()[0] for r in ffn] == ["XLA", "kernel", "kernel"], out
    assert all(float(r[4]) < 1e-2 for r in ffn), out
    assert "(default)" in ffn[-1][0]
    forward = [line.split("|")[1:3] for line in out.splitlines() if line.startswith(("| squeezebert", "| bert"))]
    # on a CPU the kernel does not run: its row says so rather than timing XLA's FFN under its name
    assert [(m.strip(), f.strip()) for m, f in forward] == [
        ("squeezebert-uncased", "fused: not run (bf16 on an NVIDIA GPU, at sizes kernels.fits takes)"),
        ("squeezebert-uncased", "xla"), ("bert-base-uncased", "(no grouped FFN)")]
    assert re.search(r"inference, FFN xla: SqueezeBERT / BERT-base = \d+\.\d\dx", out)
    assert "inference, FFN fused" not in out


@pytest.mark.slow
def test_bench_train_profile_names_each_kernel_by_scope_pass_and_kind(tmp_path, capsys):
    """--profile DIR: each model's step profiled (benchmarks.step_profile): its kernels' time by scope and pass (the
    model's named scopes, the heads, the optimizer), by kind, the largest kernels; every kernel in DIR/kernels.tsv and
    each compiled program in DIR/<model>.hlo.txt, whose instruction names the trace's op names are."""
    mod = load_script("eval/bench_train.py")
    d = tmp_path / "prof"
    # the tiny tables' shapes (test_bench_train_tiny_prints_tables): the same two programs, compiled once
    assert mod.main(["--tiny", "--profile", str(d), "--batch", "8", "--steps", "1", "--seq-lens", "32", "--dtype",
                     "float32", "--top", "5"]) == 0
    out = capsys.readouterr().out
    for name in ("squeezebert-uncased", "bert-base-uncased"):
        assert f"{name} step by scope" in out and f"{name}: largest kernels" in out
        hlo = (d / f"{name}.hlo.txt").read_text()
        assert hlo.startswith("HloModule")
    rows = [line.split("\t") for line in (d / "kernels.tsv").read_text().splitlines()]
    assert rows[0] == ["model", "hlo_op", "scope", "pass", "kind", "us_per_step", "launches_per_step"]
    sq = [r for r in rows[1:] if r[0] == "squeezebert-uncased"]
    named = {r[2] for r in sq} - {"other", "?"}
    assert {"qkv", "attention_core", "ffn_expand", "optimizer", "pretraining_heads"} <= named, named
    assert {r[3] for r in sq if r[2] == "qkv"} == {"forward", "backward"}
    assert {r[4] for r in sq} >= {"gemm", "other"} and all(float(r[5]) >= 0 for r in sq)
    known = sum(float(r[5]) for r in sq if r[2] != "?")  # nearly every timed op is an instruction of the program
    assert known > 0.9 * sum(float(r[5]) for r in sq)


def test_device_lock_serialises_timing_across_processes(tmp_path):
    """--lock FILE (timing.set_device_lock): every timed section holds an exclusive flock on FILE, so benchmark
    processes sharing a GPU compile side by side but time one at a time. Another process holds the lock until told:
    the warm-up runs meanwhile, no timed step does."""
    import fcntl
    import subprocess
    import sys
    import threading

    lock = tmp_path / "gpu.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.readline()",
                               str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    released, warmed, calls = threading.Event(), threading.Event(), []

    def step():
        calls.append(released.is_set())
        warmed.set()

    timing.set_device_lock(str(lock))
    try:
        timer = threading.Thread(target=timing.time_steps, args=(step, lambda: None, 2, 1))
        timer.start()
        assert warmed.wait(60)  # the warm-up ran outside the lock
        timer.join(0.3)
        assert timer.is_alive() and len(calls) == 1  # waiting for the other process's lock
        released.set()
        holder.stdin.write("go\n")
        holder.stdin.flush()
        timer.join(60)
        assert not timer.is_alive() and calls[1:] == [True] * 3  # every timed step after the release
        with open(lock) as f:  # released after timing
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        timing.set_device_lock(None)
        holder.kill()
        holder.wait()


def test_bench_train_tiny_prints_tables(tmp_path, capsys):
    """eval/bench_train.py on tiny dims: well-formed tables and ratios (no timing asserts). In float32: XLA:CPU
    compiles the bf16 steps ~1.5x slower, and bf16 compute is tested in test_model and compiled for TPU/H100 in
    test_aot."""
    mod = load_script("eval/bench_train.py")
    report = tmp_path / "train.md"
    assert mod.main(["--tiny", "--batch", "8", "--steps", "1", "--seq-lens", "32", "--dtype", "float32", "--peer",
                     "--out", str(report)]) == 0
    out = capsys.readouterr().out
    assert report.read_text() == out  # --out holds what was printed
    rows = [line.split("|")[1].strip() for line in out.splitlines()
            if line.startswith("| ") and "seq/s" not in line and "steps/s" not in line]
    assert rows == (["squeezebert-uncased", "bert-base-uncased"] + ["stories"] * 4 + ["long documents"] * 4
                    + ["squeezebert-uncased", "bert-base-uncased"] + ["synthetic", "inline", "prefetched"])
    # the peer on the same device: transformers' step eager (torch.compile skipped on tiny dims), both inferences
    peer = [line.split("|")[2:-1] for line in out.splitlines() if line.startswith("| ") and "uncased" in line][-2:]
    assert all(float(c) > 0 for r in peer for i, c in enumerate(r) if i != 2) and "skipped (--tiny)" in peer[0][2]
    assert "SqueezeBERT train: ours / transformers eager = " in out and "inference: SqueezeBERT / BERT-base = " in out
    assert "SqueezeBERT / BERT-base sequences/s = " in out and "sequences/s per core" in out
    assert "host: " in out and "cores" in out  # the CPU beside the timings
    assert "device fed: prefetched / synthetic steps/s = " in out


def test_bench_train_lock_and_profile_paths_are_checked_before_any_work(tmp_path):
    """--lock a directory and --profile an existing file failed after the host line, naming no flag."""
    mod = load_script("eval/bench_train.py")
    (tmp_path / "f.txt").write_text("mine\n")
    for argv, message in ((["--lock", str(tmp_path)], rf"^--lock {tmp_path} is a directory"),
                          (["--profile", str(tmp_path / "f.txt")], rf"^--profile {tmp_path / 'f.txt'} is an existing "
                                                                   r"file, not a directory")):
        with pytest.raises(sj.errors.InputError, match=message):
            mod.main(["--tiny", "--step-only", "--steps", "1", *argv])
    assert (tmp_path / "f.txt").read_text() == "mine\n"
