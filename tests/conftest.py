"""Test setup: CPU only, 8 simulated devices, float32 matmuls at full precision."""
import os
import tempfile

# LLVM -O0 for the machine code of the programs the tests compile (XLA:CPU's default is -O3). XLA's own HLO passes all
# run as usual, so the programs are the ones users run, with less optimised machine code: measured, 24-30% less compile
# time (most of this suite's time), and tiny steps that run ~3x slower, which only matters where a test runs many
# steps: test_demo_learns_mlm_and_sop runs its own process at RUN_FLAGS (-O1: as fast as the default -O3 on the demo
# step, 17% less compile time). Subprocesses that set their own XLA_FLAGS add COMPILE_FLAGS too.
# The 8 simulated devices' collectives wait up to 10 minutes for each other (XLA:CPU aborts the process after 40 s by
# default): on a 2-core machine compiling for the other xdist worker, a device thread can lag that long, and the
# notebook's kernel died so ("Termination timeout for all reduce") in a clean-clone run.
PATIENT_COLLECTIVES = ("--xla_cpu_collective_call_warn_stuck_timeout_seconds=120 "
                       "--xla_cpu_collective_call_terminate_timeout_seconds=600")
# XLA:CPU's older loop emitters for element-wise fusions instead of its MLIR fusion emitters: measured on the smoke
# pretraining step (8 devices, -O0), the compile takes 2.9 s instead of 5.6 s and a step 178 ms instead of 138 ms, so
# a program run fewer than ~65 times is done sooner; the suite's ~90 train-step compiles mostly run a few steps each.
# XLA:CPU's machine code in one LLVM module per program, not split into parallel ones: both cores are busy with the two
# xdist workers, so the split only adds work. Measured alone on the smoke pretraining step (2-core Xeon, three runs
# each, no compilation cache): 1.14 s of XLA compile against 1.33, the same loss and step time.
ONE_MODULE = "--xla_cpu_parallel_codegen_split_count=1"
COMPILE_FLAGS = (f"--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false {ONE_MODULE} "
                 f"{PATIENT_COLLECTIVES}")
RUN_FLAGS = f"--xla_backend_optimization_level=1 {ONE_MODULE} {PATIENT_COLLECTIVES}"
os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {COMPILE_FLAGS}")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# float32 matmuls at full precision, through the environment so that the subprocesses the tests start (the notebook's
# kernel, the scripts) compile the same programs as the tests: XLA's cache below then shares them
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# XLA's persistent compilation cache, shared by the xdist workers and the subprocesses the tests start: many tests
# compile the same tiny steps (the smoke run's two phases, resumed, on other meshes); the second compile of a
# program is a file read. Cold on a fresh machine (CI), so the suite's time there includes every compile once.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "squeezebert_jax_test_xla_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import contextlib  # noqa: E402
import gc  # noqa: E402
import hashlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import importlib.util  # noqa: E402
import types  # noqa: E402

import pytest  # noqa: E402

# Each xdist worker on its own share of the CPUs (worker i of n takes every n-th allowed CPU; on 2 cores, one each),
# pinned before jax starts its threads (threads inherit the affinity of the thread that starts them). Unpinned on the
# 2-core VM, from about the sixth minute of a whole run the CPU sat 30-45% idle while both workers had runnable threads
# (each worker's main thread and XLA's pool threads handing work to each other); pinned, it stays busy: the whole suite
# took 7:33 pinned against 10:37 unpinned, run back to back (`vmstat 10` beside each: 0-5% idle against 30-45%).
# SQUEEZEBERT_TEST_PIN=0 leaves the workers unpinned. The subprocesses a test starts share its worker's CPUs.
def _pin_xdist_worker() -> None:
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if (os.environ.get("SQUEEZEBERT_TEST_PIN") == "0" or not worker.startswith("gw") or not count.isdigit()
            or not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task")):  # Linux only
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < int(count):
        return
    share = set(cpus[int(worker[2:]) % int(count)::int(count)])
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), share)


_pin_xdist_worker()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Python's cyclic garbage collector, less often: at its default thresholds (700, 10, 10) a worker ran ~4,500
# collections over test_finetune/test_distill/test_parity (tracing allocates millions of short-lived objects) and each
# older-generation one walked the ~1.2M long-lived objects of jax, flax, torch and transformers: 5.3 s of 47 CPU-s.
# Cycles are still collected, 70x less often (1.5 s); the imported modules are frozen out of the walks after collection.
gc.set_threshold(50_000, 20, 20)


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()


# SQUEEZEBERT_TEST_COMPILE_LOG=FILE: every trace and XLA compile in the test processes (not the scripts they start),
# one line each: test, event, function, seconds. With a fresh JAX_COMPILATION_CACHE_DIR it says where a clean
# clone's compile time goes (`python tests/compile_log.py FILE` sums it by test).
_CURRENT_TEST = ["(collection)"]
if os.environ.get("SQUEEZEBERT_TEST_COMPILE_LOG"):
    import jax.monitoring

    _COMPILE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
                       "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
                       "/jax/core/compile/backend_compile_duration": "compile"}

    def _log_compile(event, secs, fun_name="?", **_):
        if event in _COMPILE_EVENTS:
            with open(os.environ["SQUEEZEBERT_TEST_COMPILE_LOG"], "a") as f:
                f.write(f"{_CURRENT_TEST[0]}\t{_COMPILE_EVENTS[event]}\t{fun_name}\t{secs:.4f}\n")

    jax.monitoring.register_event_duration_secs_listener(_log_compile)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _CURRENT_TEST[0] = item.nodeid


def load_script(relpath: str) -> types.ModuleType:
    """A script of train/, eval/ or convert/ as a module (its ``main`` not run)."""
    path = os.path.join(ROOT, relpath)
    spec = importlib.util.spec_from_file_location("script_" + relpath.replace("/", "_")[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pretrain_config(variant: str):
    """A variant of train/configs/pretrain.py (demo, smoke, paper, bert-base)."""
    from squeezebert_jax import cli

    return cli.config_module(os.path.join(ROOT, "train", "configs", "pretrain.py")).get_config(variant)


def smoke_config(**overrides):
    """train/configs/pretrain.py:smoke (two phases of 6 + 2 steps, hidden 32, the embedded corpus) on one device, with
    overrides by dotted name: ``smoke_config(num_devices=0, **{"model.overrides": {...}})`` (0: all 8). One device:
    a cold smoke run took 7.2 s against 11.3 s on 8 (compiles are most of it); the tests of what 8 devices, FSDP,
    microbatches and two processes change name their devices (test_pretrain.py)."""
    c = pretrain_config("smoke")
    c.num_devices = 1
    for k, v in overrides.items():
        node = c
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return c


def losses(workdir) -> dict[int, float]:
    """{step: loss} of a run's metrics.jsonl."""
    from squeezebert_jax import reporting

    return {m["step"]: m["loss"] for m in reporting.read_metrics(str(workdir))}


# GLUE fine-tuning helpers (tests/test_finetune.py, tests/test_distill.py): a 13-word vocabulary, a separable task
WORDS = ["good", "great", "fine", "bad", "awful", "poor", "the", "movie", "was", "a", "plot", "very", "truly"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def write_sst2(d, n_train=384, n_dev=32, seed=0):
    """A separable SST-2 in GLUE's file layout: the label is which of two word sets the sentence holds."""
    import numpy as np

    rng = np.random.default_rng(seed)
    os.makedirs(d / "SST-2", exist_ok=True)

    def rows(n):
        out = []
        for _ in range(n):
            y = int(rng.integers(0, 2))
            word = rng.choice(WORDS[:3] if y else WORDS[3:6])
            filler = " ".join(rng.choice(WORDS[6:], 3))
            out.append(f"{filler} {word} {filler}\t{y}")
        return out

    for split, n in (("train", n_train), ("dev", n_dev)):
        (d / "SST-2" / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows(n)) + "\n")
    (d / "SST-2" / "test.tsv").write_text("index\tsentence\n" + "\n".join(
        f"{i}\t{r.split(chr(9))[0]}" for i, r in enumerate(rows(8))) + "\n")


def tiny_init(path, vocab, config=None):
    """A MODEL_DIR at ``path``: a random pretraining model of ``config`` (default: 2 layers of hidden 32) with the
    vocabulary size of ``vocab``, and ``vocab`` as its vocab.txt."""
    import squeezebert_jax as sj
    from flax import nnx

    cfg = config or sj.SqueezeBertConfig(hidden_size=32, embedding_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    cfg = cfg.replace(vocab_size=len(vocab))
    sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0)), path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return path


def glue_config(task, init_from, data_dir, **kw):
    """train/configs/glue.py's config for ``task`` on a MODEL_DIR and GLUE_DIR, seq 16, no progress bar, on one device
    (``num_devices=0``: all 8). The tests that check what a fine-tuning run learns or writes run on one device, 20% less
    time than on 8 (measured, warm cache); that 8 devices and FSDP take the one-device steps is checked by
    test_finetune_trainer.py, and every kind of task trains on all 8 in test_real_text.py and the GLUE table."""
    c = load_script("train/configs/glue.py").get_config(task)
    c.init_from, c.progress, c.max_seq_length = str(init_from), False, 16
    c.data_dir = str(data_dir) if task != "files" else ""  # your own files read no GLUE_DIR (refused beside them)
    c.num_devices = 1
    for k, v in kw.items():
        setattr(c, k, v)
    return c


@pytest.fixture
def run_cli(capsys):
    """``run_cli("convert/to_pytorch.py", "--src", ...) -> (exit status, stdout, stderr)``: the script's ``main`` through
    ``squeezebert_jax.cli.run``, exactly the path ``python SCRIPT ...`` takes (argparse exits become statuses)."""
    from squeezebert_jax import cli

    def run(relpath: str, *argv: str):
        mod = load_script(relpath)
        capsys.readouterr()
        with root_logging_restored():  # as if each run were its own process: its log file handlers end with it
            try:
                rc = cli.run(mod.main, [str(a) for a in argv], prog=os.path.basename(relpath))
            except SystemExit as e:  # argparse usage errors
                rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def tree_digest(*paths) -> dict[str, str]:
    """{file: sha256} of every file under ``paths`` (files or directories): compare before and after a refused
    command to show nothing on disk changed."""
    out = {}
    for p in map(str, paths):
        files = [p] if os.path.isfile(p) else [os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs]
        for f in sorted(files):
            with open(f, "rb") as fh:
                out[f] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture
def digest():
    return tree_digest


@contextlib.contextmanager
def root_logging_restored():
    """The scripts' cli.setup_logging replaces the root handlers: put the earlier ones back (and close our log
    files) on exit."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


@pytest.fixture(autouse=True)
def _restore_root_logging():
    with root_logging_restored():
        yield


# --------------------------------------------------------------------------------------------------
# Scheduling under xdist (-n 2): the slow tests first, handed out one test at a time (--maxschedchunk=1 in
# pyproject.toml), so that the long ones run side by side at the start instead of one of them keeping a worker busy
# after the other has finished. Fixtures that build something (a smoke run, a corpus) are session-scoped: with tests of
# different modules interleaved on a worker, a module-scoped one would be built again each time its module came back.
# --------------------------------------------------------------------------------------------------


# the session fixtures that train (test_pretrain.py's smoke run and tiny run: 15-40 s each on a
# fresh machine): their first users go right after the slow tests, so that with `-m "not slow"` they are built at the
# start and not in the last minute while the other worker idles
TRAINING_FIXTURES = {"reference_run", "tiny_run"}


def pytest_collection_modifyitems(config, items):
    def rank(item):
        if item.get_closest_marker("slow"):
            return 0
        return 1 if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())) else 2

    items.sort(key=rank)  # stable: the order within each group stays


def assert_converts_back_exactly(model, torch_model, out_dir, pooler_params: int = 0):
    """``model`` (read from ``torch_model``'s checkpoint) has its parameter count, less a pooler transformers builds
    the head without (``pooler_params``), and written back through ``pretrained.export_torch`` it loads in the same
    transformers class with every tensor equal to the original's."""
    import torch
    import transformers

    import squeezebert_jax as sj
    from squeezebert_jax import pretrained

    assert sj.count_params(model) - pooler_params == torch_model.num_parameters()
    pretrained.export_torch(model, out_dir)
    back = getattr(transformers, type(torch_model).__name__).from_pretrained(out_dir)
    want, got = torch_model.state_dict(), back.state_dict()
    assert set(want) == set(got) and all(torch.equal(want[k], got[k]) for k in want)


def assert_outputs_match(cls: str, torch_out, ours, tol: float = 1e-5) -> None:
    """The outputs of transformers' ``cls`` (a class name) and of our model of that head agree within ``tol``: the
    base model's hidden states (and pooled output where it has one), a pretraining head's MLM and SOP logits, QA's
    start and end logits, any other head's logits."""
    import numpy as np

    t, f = torch_out, ours
    if cls.endswith("Model"):
        pairs = [(t.last_hidden_state, f.last_hidden_state)]
        if getattr(t, "pooler_output", None) is not None:
            pairs.append((t.pooler_output, f.pooler_output))
    elif hasattr(t, "prediction_logits"):  # MLM + SOP (ELECTRA's ForPreTraining has logits only)
        sop = t.sop_logits if hasattr(t, "sop_logits") else t.seq_relationship_logits  # ALBERT's name, BERT's
        pairs = [(t.prediction_logits, f.mlm_logits), (sop, f.sop_logits)]
    elif cls.endswith("QuestionAnswering"):
        pairs = [(t.start_logits, f.start_logits), (t.end_logits, f.end_logits)]
    else:
        pairs = [(t.logits, f.logits)]
    for a, b in pairs:
        assert a.shape == b.shape and np.max(np.abs(a.numpy() - np.asarray(b))) <= tol


def assert_family_head_matches(torch_model, out_dir, family: str, ours: str, pooler_params: int = 0,
                               vocab_size: int = 50, token_types: bool = True):
    """A family's transformers head ``torch_model``, saved to ``out_dir`` and read by ``load_pretrained``: our head
    class ``ours`` of ``family``, with the same outputs on padded inputs with two token types (``token_types``
    False: a family that takes none, our model given them and ignoring them), written back exactly
    (``assert_converts_back_exactly``). Returns our model."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    import squeezebert_jax as sj

    cls = type(torch_model).__name__
    torch_model.save_pretrained(out_dir / "hf")
    model = sj.load_pretrained(out_dir / "hf")
    assert type(model).__name__ == ours and model.config.family == family
    model.eval()
    shape = (2, 3, 10) if cls.endswith("ForMultipleChoice") else (2, 10)
    rng = np.random.default_rng(0)
    ids, mask, tt = rng.integers(0, vocab_size, shape), np.ones(shape, np.int64), np.zeros(shape, np.int64)
    mask[1, ..., 7:] = 0
    tt[..., 5:] = 1
    with torch.no_grad():
        t = torch_model(torch.tensor(ids), attention_mask=torch.tensor(mask),
                        **({"token_type_ids": torch.tensor(tt)} if token_types else {}))
    assert_outputs_match(cls, t, model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)))
    assert_converts_back_exactly(model, torch_model, out_dir / "back", pooler_params)
    return model


def perturbed(torch_model):
    """``torch_model`` with every bias and norm parameter moved off its initial value (zeros, ones: LayerNorm and
    MobileBERT's NoNorm would start as identities), so that each one matters to the outputs compared."""
    import torch

    with torch.no_grad():
        for name, p in torch_model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower():
                p.add_(0.1 * torch.randn_like(p))
    return torch_model


def tiny_config(**overrides):
    """The smoke config cut to one 4-step phase on one device: a run takes seconds."""
    one_phase = [dict(name="phase1", num_steps=4, seq_len=32, max_predictions_per_seq=5)]
    return smoke_config(**{"num_devices": 1, "phases": one_phase, **overrides})


def run_script(path, *argv):
    """A training script in its own process, as a user runs it (absl flags): (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, path, *map(str, argv)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return r.returncode, r.stdout, r.stderr


@pytest.fixture
def disk(tmp_path):
    """``(tmp_path/disk, mounted)``: a tmpfs of 4 MB where mounting is permitted (root), else a plain directory."""
    d = tmp_path / "disk"
    d.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)],
                             capture_output=True).returncode == 0
    yield d, mounted
    if mounted:
        subprocess.run(["umount", str(d)], check=True)


@pytest.fixture
def small_disk(disk):
    """A tmpfs of 4 MB at ``tmp_path/disk`` (root only; skipped where mounting is not permitted)."""
    d, mounted = disk
    if not mounted:
        pytest.skip("mounting a tmpfs is not permitted here")
    return d


def fill(disk, leave: int = 0):
    """Fill ``disk`` up to ``leave`` bytes free (a filler file; delete it to free the space)."""
    import shutil
    import uuid

    path = disk / f"filler-{uuid.uuid4().hex}"
    with open(path, "wb") as f:
        free = shutil.disk_usage(disk).free - leave
        while free > 0:
            try:
                f.write(b"\0" * min(free, 1 << 16))
                f.flush()
            except OSError:
                break
            free = shutil.disk_usage(disk).free - leave
    return path


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]
