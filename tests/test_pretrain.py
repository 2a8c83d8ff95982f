"""Pretraining end to end on the embedded corpus: 1 vs 8 devices, FSDP, accumulation, resume, corruption, SIGTERM,
multiple processes, the demo recipe learning; then its failure paths on a tiny one-phase run (1 device, 4 steps):
divergence, config changes, unreadable checkpoints, multi-host preemption, resume bookkeeping, bad start-up arguments."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import COMPILE_FLAGS, ROOT, RUN_FLAGS, fill, losses, one_error_line, smoke_config, tiny_config

from squeezebert_jax import checkpointing, errors, parallel, pretrain, pretrain_settings, reporting, trainer
from squeezebert_jax.model import SqueezeBertConfig
from squeezebert_jax.tokenizer import Tokenizer

@pytest.fixture(scope="session")
def reference_run(tmp_path_factory):
    """One uninterrupted smoke run on one device (smoke_config's default; the two processes' 8 devices match it)."""
    wd = tmp_path_factory.mktemp("ref")
    final = pretrain.train_and_evaluate(smoke_config(), str(wd))
    return wd, final


def test_smoke_run_writes_metrics_and_model(reference_run):
    wd, final = reference_run
    rows = reporting.read_metrics(str(wd))
    assert [r["step"] for r in rows] == [2, 4, 6, 8]
    for key in ("loss", "mlm_loss", "sop_loss", "mlm_accuracy", "sop_accuracy", "learning_rate", "grad_norm",
                "seq_per_s", "tokens_per_s", "mfu"):
        assert key in rows[0]
    assert all(np.isfinite(r["loss"]) for r in rows)
    assert rows[-1]["phase"] == 1  # the seq-64 second phase ran
    assert os.path.exists(wd / "model" / "params.safetensors") and os.path.exists(wd / "model" / "vocab.txt")
    assert json.load(open(wd / "model" / "config.json"))["architectures"] == ["SqueezeBertForPreTraining"]
    assert os.listdir(wd / "tb")


def _train_steps(config, num_devices: int, fsdp: bool = False, num_microbatches: int = 1, steps: int = 3):
    """The losses of ``steps`` jitted train steps (``pretrain.build_phase_step``: LAMB, shardings, donation,
    accumulation, exactly what ``train_and_evaluate`` runs) on a ``num_devices`` mesh, on fixed random batches in
    which some masked predictions are padding (weight 0), and the final parameters and their shardings."""
    import jax

    from squeezebert_jax import corpus

    # the demo vocabulary, as train_and_evaluate builds it: the smoke run's 8-device step is the same program (one
    # compile between this test and the reference run when XLA's cache is on)
    model = pretrain.new_model(config, len(corpus.demo_vocab()))
    graphdef, params, rest = pretrain.split_model(model)
    mesh = parallel.make_mesh(num_devices)
    phase = dataclasses.replace(pretrain_settings.get_phases(config)[0], num_microbatches=num_microbatches)
    ps = pretrain.build_phase_step(config, phase, params, graphdef, rest, mesh, fsdp)
    state = jax.device_put(ps.init(params), ps.shardings)
    rng, b, s, p = np.random.default_rng(0), config.global_batch_size, phase.seq_len, phase.max_predictions_per_seq
    losses = []
    for i in range(steps):
        batch = {"input_ids": rng.integers(5, 64, (b, s)).astype(np.int32),
                 "token_type_ids": (np.arange(s)[None] >= s // 2).repeat(b, 0).astype(np.int32),
                 "attention_mask": (np.arange(s)[None] < rng.integers(s // 2, s + 1, (b, 1))).astype(np.int32),
                 "masked_lm_positions": np.sort(rng.integers(1, s // 2, (b, p)), 1).astype(np.int32),
                 "masked_lm_ids": rng.integers(5, 64, (b, p)).astype(np.int32),
                 "masked_lm_weights": (rng.random((b, p)) < 0.7).astype(np.float32),
                 "sop_label": rng.integers(0, 2, b).astype(np.int32)}
        state, m = ps.step_fn(state, parallel.global_batch(batch, mesh), jax.random.key(config.seed),
                              ps.learning_rates[i])
        losses.append(float(m["loss"]))
    specs = {tuple(x.sharding.spec) for x in jax.tree.leaves(state["params"])}
    return np.asarray(losses), jax.device_get(state["params"]), specs


def _assert_same_params(a, b, rtol):
    """Equal up to ``rtol`` of the largest parameter (leaves that stay ~0, e.g. untouched biases, differ by float
    noise far below that)."""
    import jax

    scale = max(float(np.max(np.abs(y))) for y in jax.tree.leaves(b))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale)


@pytest.mark.slow
def test_one_device_equals_eight_devices_and_fsdp():
    """Data parallel over 8 devices and FSDP (parameters and LAMB state sharded over them) take the 1-device steps."""
    c = smoke_config()
    one, p_one, specs_one = _train_steps(c, 1)
    eight, p_eight, specs_eight = _train_steps(c, 8)
    fsdp, p_fsdp, specs_fsdp = _train_steps(c, 8, fsdp=True)
    assert specs_one == specs_eight == {()} and any("data" in sp for sp in specs_fsdp)  # FSDP really shards
    assert one[0] != one[-1]  # the steps train
    np.testing.assert_allclose(eight, one, rtol=2e-5)
    np.testing.assert_allclose(fsdp, one, rtol=2e-5)
    _assert_same_params(p_eight, p_one, 2e-5)
    _assert_same_params(p_fsdp, p_one, 2e-5)


@pytest.mark.slow
def test_gradient_accumulation_equals_large_batch():
    """Dropout off (microbatches draw their own dropout masks): k=2 microbatches == one batch of 16, including the
    normalisation by the masked predictions of the whole batch (the microbatches hold different numbers)."""
    no_dropout = dict(smoke_config().model.overrides, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    c = smoke_config(**{"model.overrides": no_dropout})
    big, p_big, _ = _train_steps(c, 8)
    acc, p_acc, _ = _train_steps(c, 8, num_microbatches=2)
    np.testing.assert_allclose(acc, big, rtol=2e-5)
    _assert_same_params(p_acc, p_big, 2e-5)


def test_the_jitted_step_is_reused_only_for_the_same_program():
    """A second build of a phase for an equal model, optimizer and mesh (a second run in the process) returns the same
    jitted step, so jax traces it once; anything the step depends on gives another: the weight decay or clip norm,
    the microbatches, FSDP, the mesh, the dropout streams' keys (the step holds them as constants), how the model
    runs (``set_execution`` on the very model of an earlier build)."""
    from squeezebert_jax import corpus
    from squeezebert_jax.model import set_execution

    c = smoke_config()
    phase = pretrain_settings.get_phases(c)[0]

    def step(config=c, phase=phase, num_devices=8, fsdp=False, model=None):
        model = model or pretrain.new_model(config, len(corpus.demo_vocab()))
        graphdef, params, rest = pretrain.split_model(model)
        mesh = parallel.make_mesh(num_devices)
        return pretrain.build_phase_step(config, phase, params, graphdef, rest, mesh, fsdp).step_fn

    first = step()
    assert step() is first  # a new model, equal in structure and seed
    assert step(smoke_config(learning_rate=0.5)) is first  # the rate is an input of the step
    others = [step(smoke_config(weight_decay=0.0)), step(smoke_config(clip_norm=0.0)),
              step(phase=dataclasses.replace(phase, num_microbatches=2)), step(fsdp=True), step(num_devices=4),
              step(smoke_config(seed=1))]
    model = pretrain.new_model(c, len(corpus.demo_vocab()))
    assert step(model=model) is first
    others.append(step(model=set_execution(model, remat="full")))  # the same model object, run another way
    assert all(o is not first for o in others) and len({id(o) for o in others}) == len(others)


def test_the_step_cache_keeps_the_most_recently_used_steps():
    """A step used again moves to the back: the one evicted is the least recently used, not the first built (a step
    built by an earlier run and reused now must not be evicted by the next builds)."""
    from squeezebert_jax import trainer

    cache, built = trainer.StepCache(maxsize=2), []

    def get(key):
        return cache.get(key, lambda: built.append(key) or key.upper())

    assert [get("a"), get("b"), get("a"), get("c"), get("a"), get("b")] == ["A", "B", "A", "C", "A", "B"]
    assert built == ["a", "b", "c", "b"]  # "b", the least recently used, went for "c"; "a" stayed


def test_a_phase_may_set_its_own_microbatches(tmp_path):
    """A seq-512 phase needs more accumulation than a seq-128 one: a phase's num_microbatches overrides the config's,
    and a count the global batch cannot split over the devices is refused naming the phase."""
    c = smoke_config(num_microbatches=2)
    phases = pretrain_settings.get_phases(c)
    assert [pretrain_settings.microbatches(c, p) for p in phases] == [2, 2]
    phases[1] = dataclasses.replace(phases[1], num_microbatches=4)
    assert [pretrain_settings.microbatches(c, p) for p in phases] == [2, 4]
    pretrain_settings.check_batch_division(c, phases[1], 4)  # 16 rows = 4 devices x 4 microbatches x 1
    with pytest.raises(ValueError, match=r"phase2: global_batch_size 16 must divide by devices x microbatches \(8 x "
                                         r"4\)"):
        pretrain_settings.check_batch_division(c, phases[1], 8)
    wd = tmp_path / "run"  # refused before the demo data is made: nothing left behind
    with pytest.raises(ValueError, match=r"phase1: global_batch_size 16 must divide by devices x microbatches "
                                         r"\(1 x 3\)"):
        pretrain.train_and_evaluate(tiny_config(num_microbatches=3), str(wd))
    assert not wd.exists()


def test_kill_and_resume_equals_uninterrupted(reference_run, tmp_path):
    ref = losses(reference_run[0])
    wd = tmp_path / "resume"
    # stopped after step 4 (the preemption path: checkpoint, clean exit), then restarted on the same workdir
    pretrain.train_and_evaluate(smoke_config(stop_at_step=4), str(wd))
    assert checkpointing.Checkpointer(str(wd / "checkpoints"), with_data=True).all_steps()[-1] == 4
    # the metrics of the interrupted part stay; drop them so the resumed run's lines can be compared
    os.remove(wd / "metrics.jsonl")
    pretrain.train_and_evaluate(smoke_config(), str(wd))
    resumed = losses(wd)
    assert sorted(resumed) == [6, 8]
    np.testing.assert_allclose([resumed[k] for k in (6, 8)], [ref[k] for k in (6, 8)], rtol=1e-6)


@pytest.mark.slow
def test_sigterm_saves_and_exits_cleanly_then_resumes_exactly(tmp_path):
    """A real SIGTERM to a training process: it finishes the step, checkpoints, exits 0; a restart on the same
    workdir continues with exactly the losses of a run that was never stopped."""
    import signal
    import time

    long = dict(log_every=1, checkpoint_every=10**6, async_checkpoints=False,
                phases=[dict(name="phase1", num_steps=10**5, seq_len=32, max_predictions_per_seq=5)])
    script = ("import sys; sys.path.insert(0, {tests!r});"
              "from conftest import smoke_config; from squeezebert_jax import pretrain;"
              "pretrain.train_and_evaluate(smoke_config(**{long!r}), {wd!r})")
    wd = tmp_path / "preempted"
    proc = subprocess.Popen([sys.executable, "-c", script.format(tests=os.path.join(ROOT, "tests"), long=long,
                                                                 wd=str(wd))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the run is 10**5 steps long: it is still training when it has logged 3 (log_every=1)
        while not (os.path.exists(wd / "metrics.jsonl") and len(reporting.read_metrics(str(wd))) >= 3):
            assert proc.poll() is None, proc.communicate()[0][-4000:]  # it died before training
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-4000:]
    assert "saving a checkpoint" in out
    k = checkpointing.Checkpointer(str(wd / "checkpoints"), with_data=True).all_steps()[-1]
    stopped = losses(wd)
    assert sorted(stopped) == list(range(1, k + 1)) and 3 <= k < 10**5
    assert not os.path.exists(wd / "model")  # preempted: no final export
    pretrain.train_and_evaluate(smoke_config(**long, stop_at_step=k + 3), str(wd))  # restart, 3 more steps
    resumed = losses(wd)
    ref_wd = tmp_path / "uninterrupted"
    pretrain.train_and_evaluate(smoke_config(**long, stop_at_step=k + 3), str(ref_wd))
    ref = losses(ref_wd)
    assert sorted(resumed) == sorted(ref) == list(range(1, k + 4))
    np.testing.assert_allclose([resumed[s] for s in ref], [ref[s] for s in ref], rtol=1e-6)


def test_corrupt_latest_checkpoint_falls_back(reference_run, tmp_path):
    wd = tmp_path / "corrupt"
    shutil.copytree(reference_run[0], wd)
    ckpt = checkpointing.Checkpointer(str(wd / "checkpoints"))
    steps = ckpt.all_steps()
    assert steps[-2:] == [6, 8]
    # damage every file of the newest checkpoint's train state
    for root, _, files in os.walk(wd / "checkpoints" / "8" / "state"):
        for f in files:
            with open(os.path.join(root, f), "wb") as fh:
                fh.write(b"garbage")
    os.remove(wd / "metrics.jsonl")
    pretrain.train_and_evaluate(smoke_config(), str(wd))
    # step 8 was unreadable: it resumed at 6 and re-ran the last two steps of phase 2
    assert sorted(losses(wd)) == [8]
    assert any(d.startswith("corrupt-8-") for d in os.listdir(wd / "checkpoints"))  # set aside, not deleted
    np.testing.assert_allclose(losses(wd)[8], losses(reference_run[0])[8], rtol=1e-6)


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one_process(reference_run, tmp_path):
    """Two JAX processes on localhost (one CPU device each, gloo collectives) give the one-process losses (over the
    first phase: the second phase is the same code on longer sequences, which the one-process tests cover)."""
    port = _free_port()
    script = ("import sys; sys.path.insert(0, {tests!r});"
              "from conftest import smoke_config; from squeezebert_jax import pretrain;"
              "c = smoke_config(coordinator_address='localhost:{port}', num_processes=2, process_id={pid},"
              "                 num_devices=0);"
              "c.phases = c.phases[:1];"
              "pretrain.train_and_evaluate(c, {wd!r})")
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count=1 {COMPILE_FLAGS}",
           "JAX_PLATFORMS": "cpu"}
    wd = str(tmp_path / "multi")
    procs = [subprocess.Popen([sys.executable, "-c", script.format(tests=os.path.join(ROOT, "tests"), port=port,
                                                                   pid=i, wd=wd)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    ref = losses(reference_run[0])
    multi = losses(wd)
    assert sorted(multi) == [2, 4, 6]
    np.testing.assert_allclose([multi[k] for k in multi], [ref[k] for k in multi], rtol=2e-5)


@pytest.mark.slow
def test_demo_learns_mlm_and_sop(tmp_path):
    """The demo's model, data and LAMB, shortened to one 200-step phase at 4x the demo's peak learning rate: MLM loss
    falls well below ln(vocab), SOP above chance. (At the demo's 2e-3, SOP passes 0.55 only after ~300 steps: 0.542
    at step 260, 0.598 over steps 360-400; at 8e-3, 0.67 over steps 160-200 and MLM 3.74 against 4.05 at 400 steps.)
    Remat "none": what a CPU run wants, the same numbers. In its own process at LLVM -O1 (conftest.RUN_FLAGS): at the
    other tests' -O0 the steps take 3x as long. The run, its TensorBoard events and export included, never imports
    PyTorch (installed here: tensorboardX would load it)."""
    script = ("import sys; sys.path.insert(0, {tests!r}); from conftest import pretrain_config;"
              "from squeezebert_jax import pretrain;"
              "c = pretrain_config('demo'); c.phases = [dict(c.phases[0], num_steps=200)];"
              "c.learning_rate, c.model.remat = 8e-3, 'none';"
              "c.progress, c.async_checkpoints, c.checkpoint_every = False, False, 200;"
              "pretrain.train_and_evaluate(c, {wd!r});"
              "assert 'torch' not in sys.modules, 'the pretraining run imported torch'")
    wd = str(tmp_path / "demo")
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count=8 {RUN_FLAGS}"}
    p = subprocess.run([sys.executable, "-c", script.format(tests=os.path.join(ROOT, "tests"), wd=wd)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = reporting.read_metrics(wd)
    assert os.listdir(os.path.join(wd, "tb"))  # the events file
    vocab = json.load(open(os.path.join(wd, "model", "config.json")))["vocab_size"]
    assert abs(rows[0]["mlm_loss"] - np.log(vocab)) < 0.3  # starts at chance
    assert rows[-1]["mlm_loss"] < 0.8 * np.log(vocab)
    assert np.mean([r["sop_accuracy"] for r in rows[-3:]]) > 0.55


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_dropout_bits_resume_exactly_under_either_generator(impl):
    """config.rng_impl: the pretraining step run twice from one state, and once, through the host (what a checkpoint
    keeps), then again: bit-identical states and losses either way; the two generators draw different masks."""
    import jax

    from squeezebert_jax import optim, trainer

    config = smoke_config()
    model = pretrain.new_model(config, 64)
    graphdef, params, rest = pretrain.split_model(model)
    tx = optim.learning_rate_input(optim.lamb)
    step = jax.jit(pretrain.make_train_step(graphdef, rest, tx, 1))
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(5, 64, (4, 16)).astype(np.int32),
             "token_type_ids": np.zeros((4, 16), np.int32), "attention_mask": np.ones((4, 16), np.int32),
             "masked_lm_positions": np.tile(np.arange(1, 4, dtype=np.int32), (4, 1)),
             "masked_lm_ids": rng.integers(5, 64, (4, 3)).astype(np.int32),
             "masked_lm_weights": np.ones((4, 3), np.float32), "sop_label": np.array([0, 1, 0, 1], np.int32)}
    state0 = {"step": np.int32(0), "params": params, "opt_state": tx.init(params)}
    lr = np.float32(1e-3)

    def two_steps(key, through_host: bool):
        s, m1 = step(state0, batch, key, lr)
        if through_host:
            s = jax.tree.map(np.asarray, jax.device_get(s))
        s, m2 = step(s, batch, key, lr)
        return s, (float(m1["loss"]), float(m2["loss"]))

    key = trainer.run_key(config.seed, impl)
    (a, la), (b, lb) = two_steps(key, False), two_steps(key, True)
    assert la == lb
    for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"]), strict=True):
        np.testing.assert_array_equal(x, y)
    other = trainer.run_key(config.seed, "rbg" if impl == "threefry2x32" else "threefry2x32")
    assert two_steps(other, False)[1][0] != la[0]  # other masks, another loss
    with pytest.raises(ValueError, match="config.rng_impl='philox'"):
        trainer.run_key(0, "philox")


# -- Failure paths and resume bookkeeping, on a tiny one-phase run -------------------------------------------------

def listing(directory):
    return sorted(os.listdir(directory))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """An uninterrupted tiny run: metrics and checkpoints at steps 2 and 4, an exported model."""
    wd = tmp_path_factory.mktemp("tiny")
    final = pretrain.train_and_evaluate(tiny_config(), str(wd))
    return wd, final


def test_stop_at_the_last_step_is_a_finished_run(tiny_run, tmp_path):
    final = pretrain.train_and_evaluate(tiny_config(stop_at_step=4), str(tmp_path))
    assert os.path.exists(tmp_path / "model" / "params.safetensors")  # exported, as a run without stop_at_step
    assert final["preempted"] is False and tiny_run[1]["preempted"] is False
    assert checkpointing.Checkpointer(str(tmp_path / "checkpoints")).all_steps() == [2, 4]
    assert losses(tmp_path) == losses(tiny_run[0])


def test_divergence_is_never_checkpointed_and_the_error_names_the_first_bad_step(tmp_path):
    """lr 1e30 after a 1-step warmup (lr 0 at step 1): the update of step 2 blows the params up while the loss of
    step 2 (computed before that update) is still finite. Checkpoints every step, a log line only at step 4. (Clipping
    does not bound the update: Adam divides the gradient's scale out and the trust ratio makes it lr x ||w||; so the
    tiny run's own step, with no compile of its own.)"""
    wd = tmp_path / "nan"
    c = tiny_config(learning_rate=1e30, warmup_fraction=0.25, checkpoint_every=1, log_every=4)
    with pytest.raises(FloatingPointError, match=r"non-finite .*param_norm.* at step 2 .*last good checkpoint is "
                                                 r"step 1\b"):
        pretrain.train_and_evaluate(c, str(wd))
    assert checkpointing.Checkpointer(str(wd / "checkpoints")).all_steps() == [1]
    import orbax.checkpoint as ocp

    saved = ocp.StandardCheckpointer().restore(wd / "checkpoints" / "1" / "state")
    assert int(saved["step"]) == 1
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(saved["params"]))
    assert not os.path.exists(wd / "metrics.jsonl") or not reporting.read_metrics(str(wd))


@pytest.mark.parametrize("change, message", [
    (dict(clip_norm=0.0), r"checkpoint at step 4 .* does not match the current config"),  # another optimizer state
    ({"model.overrides": dict(smoke_config().model.overrides, intermediate_size=32)},  # the architecture: the stream
     r"config.model.intermediate_size changed since the run began \(64 -> 32\)"),
    (dict(rng_impl="rbg"),  # other dropout bits from the resumed step on: not the run that began
     r'config.rng_impl changed since the run began \("threefry2x32" -> "rbg"\)')])
def test_a_config_change_refuses_to_resume_and_keeps_the_checkpoints(tiny_run, tmp_path, change, message):
    wd = tmp_path / "changed"
    shutil.copytree(tiny_run[0], wd)
    before = listing(wd / "checkpoints")
    with pytest.raises(ValueError, match=message):
        pretrain.train_and_evaluate(tiny_config(**change), str(wd))
    assert listing(wd / "checkpoints") == before == ["2", "4"]


def test_a_refused_restart_leaves_config_and_history_as_they_were(tiny_run, tmp_path, digest):
    wd = tmp_path / "refused"
    shutil.copytree(tiny_run[0], wd)
    before = digest(wd)
    with pytest.raises(errors.CheckpointMismatchError):
        pretrain.train_and_evaluate(tiny_config(clip_norm=0.0), str(wd))
    assert digest(wd) == before  # config.json, config_history.jsonl, metrics, checkpoints: all as they were


def test_a_corpus_smaller_than_a_batch_is_named_in_a_warning(tmp_path, caplog):
    """Each example is one document's pair: 8 documents under batches of 16 repeat within every batch (it trained
    without a word). One step, on the tests' shared compiled step."""
    with caplog.at_level("WARNING"):
        pretrain.train_and_evaluate(tiny_config(stop_at_step=1, **{"data.demo_num_docs": 8}), str(tmp_path / "w"))
    assert re.search(rf"{re.escape(str(tmp_path / 'w' / 'data'))} holds \d documents, fewer than one global batch of "
                     r"16 sequences .* the 4 steps read each about \d+ times", caplog.text), caplog.text


@pytest.mark.slow
def test_a_changed_hyperparameter_resumes_with_a_warning_and_the_history_keeps_every_start(tmp_path, caplog):
    wd = tmp_path / "lr"
    pretrain.train_and_evaluate(tiny_config(stop_at_step=2), str(wd))
    first = json.loads((wd / "config.json").read_text())
    with caplog.at_level("WARNING", logger="squeezebert_jax.pretrain"):
        pretrain.train_and_evaluate(tiny_config(learning_rate=0.5 * first["learning_rate"]), str(wd))
    changed = [r.getMessage() for r in caplog.records if "changed since the last start" in r.getMessage()]
    assert sorted(m.split()[0] for m in changed) == ["config.learning_rate", "config.stop_at_step"]
    assert any(f"{first['learning_rate']} -> {0.5 * first['learning_rate']} (resuming at step 2)" in m
               for m in changed)
    history = trainer.read_config_history(str(wd))
    assert [h["start_step"] for h in history] == [0, 2]
    assert history[0]["config"] == first and history[0]["changed"] == {}
    assert history[1]["changed"] == {"learning_rate": [first["learning_rate"], 0.5 * first["learning_rate"]],
                                     "stop_at_step": [2, 0]}
    assert json.loads((wd / "config.json").read_text())["learning_rate"] == 0.5 * first["learning_rate"]


def test_a_workdir_without_history_keeps_its_config_json_as_the_first_start(tmp_path):
    import ml_collections

    (tmp_path / "config.json").write_text(json.dumps({"learning_rate": 0.1, "model": {"preset": "x"}}))
    changes = trainer.record_config(str(tmp_path), ml_collections.ConfigDict(
        {"learning_rate": 0.2, "model": {"preset": "x", "remat": "full"}}), 7)
    assert changes == {"learning_rate": (0.1, 0.2), "model.remat": (None, "full")}
    history = trainer.read_config_history(str(tmp_path))
    assert [(h["start_step"], h["config"]["learning_rate"]) for h in history] == [(None, 0.1), (7, 0.2)]


def test_checkpoints_of_which_none_can_be_read_stop_the_run(tiny_run, tmp_path):
    wd = tmp_path / "unreadable"
    shutil.copytree(tiny_run[0], wd)
    for step in ("2", "4"):
        for root, _, files in os.walk(wd / "checkpoints" / step / "state"):
            for f in files:
                with open(os.path.join(root, f), "wb") as fh:
                    fh.write(b"garbage")
    with pytest.raises(RuntimeError, match=r"checkpoints at steps \[2, 4\] but none can be read"):
        pretrain.train_and_evaluate(tiny_config(), str(wd))
    assert listing(wd / "checkpoints") == ["2", "4"]  # nothing set aside, no fresh run over them


def test_resume_drops_the_metrics_logged_after_the_checkpoint(tiny_run, tmp_path):
    """A hard kill after step 4 was logged but before its checkpoint committed (and mid-way through a line)."""
    wd = tmp_path / "killed"
    shutil.copytree(tiny_run[0], wd)
    shutil.rmtree(wd / "checkpoints" / "4")
    shutil.rmtree(wd / "model")
    with open(wd / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "lo')
    pretrain.train_and_evaluate(tiny_config(), str(wd))  # resumes at step 2
    assert [r["step"] for r in reporting.read_metrics(str(wd))] == [2, 4]
    np.testing.assert_allclose(losses(wd)[4], losses(tiny_run[0])[4], rtol=1e-6)


def test_hosts_agree_on_when_to_stop(monkeypatch):
    """Two hosts (the gather stubbed): a signal on either stops both, only at the agreed steps."""
    from jax.experimental import multihost_utils

    other_host, gathered = [0], []

    def allgather(x):
        gathered.append(int(x))
        return np.array([int(x), other_host[0]])

    monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    flag = trainer.PreemptionFlag(sync_every=4)
    assert not flag.should_stop(3) and gathered == []  # between sync steps: no collective, no decision
    assert not flag.should_stop(4) and gathered == [0]
    other_host[0] = 1  # the other host was signalled: this one stops at the same step
    assert not flag.should_stop(5) and flag.should_stop(8) and gathered == [0, 0]
    other_host[0], flag.requested = 0, True  # signalled here only: wait for the next agreed step (or a phase end)
    assert not flag.should_stop(9) and flag.should_stop(10, boundary=True) and gathered == [0, 0, 1]
    monkeypatch.setattr(jax, "process_count", lambda: 1)
    assert flag.should_stop(11) and gathered == [0, 0, 1]  # one process: the next step, no collective


def test_a_url_workdir_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"gs://bucket/run.*not supported"):
        pretrain.train_and_evaluate(tiny_config(), "gs://bucket/run")
    assert os.listdir(tmp_path) == []  # nothing written to a local ./gs:/bucket/run


def test_a_tokenizer_larger_than_the_model_vocab_is_refused(tmp_path):
    c = tiny_config(**{"model.vocab_from_tokenizer": False,
                       "model.overrides": dict(smoke_config().model.overrides, vocab_size=50)})
    with pytest.raises(ValueError) as e:
        pretrain.train_and_evaluate(c, str(tmp_path))
    n = Tokenizer.from_dir(str(tmp_path / "data")).vocab_size
    assert n > 50 and f"has {n} ids but the model's vocab_size is 50" in str(e.value)


def test_the_default_process_id_means_auto_detect(tmp_path, monkeypatch):
    seen = {}

    class Initialized(Exception):
        pass

    def initialize(coordinator_address, num_processes, process_id, **kw):
        seen.update(address=coordinator_address, num_processes=num_processes, process_id=process_id, **kw)
        raise Initialized  # stop here: this process stays single-host

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    monkeypatch.setattr(jax.config, "update", lambda *a, **k: None)
    c = tiny_config(coordinator_address="localhost:1234", num_processes=2)
    assert c.process_id == -1  # the config's default
    with pytest.raises(Initialized):
        pretrain.train_and_evaluate(c, str(tmp_path))
    assert seen == {"address": "localhost:1234", "num_processes": 2, "process_id": None,
                    "initialization_timeout": parallel.DISTRIBUTED_TIMEOUT_S}
    # no count given and no cluster to find one in: jax's ValueError, as one line naming the settings to give
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: (_ for _ in ()).throw(
        ValueError("Number of processes must be defined.")))
    with pytest.raises(errors.InputError, match=r"^config.coordinator_address='notahost:1234': Number of processes "
                                                r"must be defined, and no cluster environment .*: set config.num_proc"):
        pretrain.train_and_evaluate(tiny_config(coordinator_address="notahost:1234"), str(tmp_path))
    # no port: jax's IndexError ("[::]:" + address.rsplit(":", 1)[1]) before, the setting named now
    for address in ("localhost", "localhost:99999"):  # no port, or none a socket has: ran on, said nothing
        with pytest.raises(errors.InputError, match=rf"config.coordinator_address='{address}': HOST:PORT"):
            pretrain.train_and_evaluate(tiny_config(coordinator_address=address, num_processes=1, process_id=0),
                                        str(tmp_path))



def test_a_coordinator_that_does_not_answer_is_one_line_not_an_abort():
    """A process other than the first waited five silent minutes for an unreachable coordinator, then jax aborted
    the process with a C++ stack trace: it now waits for the address to answer, and refuses in one line naming it."""
    import socket

    with socket.socket() as server:  # something answering, as the first process's service does
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        parallel.wait_for_coordinator(f"127.0.0.1:{port}", 1)
    # the port closed again: nothing answers there
    with pytest.raises(errors.InputError, match=rf"^config.coordinator_address='127.0.0.1:{port}': nothing answered "
                                                r"there in 0.5 s \(.+\); start the first process "
                                                r"\(config.process_id=0"):
        parallel.wait_for_coordinator(f"127.0.0.1:{port}", 0.5)


@pytest.mark.slow
def test_the_cli_console_preemption_refused_restart_full_disk_and_changed_resume(disk, digest):
    """Through train/pretrain.py as a user runs it, on a 4 MB disk (a tmpfs where mounting is permitted): (1) stopped
    early: no model announced, the console is the progress lines (orbax's INFO records go to WORKDIR/log.txt); (2) a
    restart whose optimizer state cannot match the checkpoints: one error line, exit 1, nothing in the workdir changed;
    (3) a resume with another learning rate on a full disk: it resumes at step 2, warns old -> new, and fails saving
    step 4 in one line, exit 1, no screen of orbax / asyncio tracebacks, step 2 intact; (4) with the space freed the
    same command resumes at step 2 and finishes, each step's metrics once, and the history keeps every start."""
    disk, mounted = disk
    wd = disk / "cli"

    def pretrain_cli(*overrides):
        return subprocess.run([sys.executable, os.path.join(ROOT, "train", "pretrain.py"),
                               "--config", os.path.join(ROOT, "train", "configs", "pretrain.py") + ":smoke",
                               "--workdir", str(wd), "--config.num_devices=1", *overrides],
                              capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)

    r = pretrain_cli("--config.stop_at_step=2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stopped early" in r.stdout and "model saved" not in r.stdout
    assert "checkpoint of step 2 saved" in r.stdout and not os.path.exists(wd / "model")
    assert "step 2/" in r.stdout  # the line of the log interval that ended at the stop
    # (the CUDA plugin of the gpu-aot extra prints its own C++ lines at import; absl's Python INFO lines are ours)
    assert not re.search(r"^I\d{4} [\d:.]+ +\d+ \w+\.py:\d+\]", r.stderr, re.M), r.stderr[-2000:]
    assert "orbax" not in r.stderr.lower() and "Traceback" not in r.stderr
    assert "Saving checkpoint at step 2" in (wd / "log.txt").read_text()

    before = digest(wd)
    r = pretrain_cli("--config.stop_at_step=3", "--config.clip_norm=0.0")  # no clipping: another optimizer state
    assert r.returncode == 1
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and "does not match the current config" in err[0] and "Traceback" not in r.stderr
    after = digest(wd)
    log_txt = str(wd / "log.txt")
    assert after.pop(log_txt) != before.pop(log_txt) and after == before  # the log only grew; nothing else changed
    assert "does not match the current config" in (wd / "log.txt").read_text().splitlines()[-1]

    changed = ("--config.learning_rate=0.001",)
    starts = [0, 2]
    if mounted:  # room for the logs and metrics, not for a checkpoint (~420 KB)
        filler = fill(disk, leave=120_000)
        r = pretrain_cli(*changed)
        line = one_error_line(r.stderr)
        assert r.returncode == 1 and "no space left on the device writing" in line and str(wd) in line, line
        assert "resuming from the checkpoint at step 2" in r.stdout
        assert "config.learning_rate changed" in r.stderr and "0.002 -> 0.001" in r.stderr
        assert "Traceback" not in r.stderr and "Event loop is closed" not in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) < 15, r.stderr
        assert sorted(n for n in os.listdir(wd / "checkpoints") if n.isdigit()) == ["2"]
        os.remove(filler)
        starts.append(2)
    r = pretrain_cli(*changed)
    assert r.returncode == 0 and "model saved" in r.stdout, r.stderr[-3000:]
    assert "resuming from the checkpoint at step 2" in r.stdout
    if not mounted:
        assert "config.learning_rate changed" in r.stderr and "0.002 -> 0.001" in r.stderr
    assert sorted(losses(wd)) == [2, 4, 6, 8]
    history = trainer.read_config_history(str(wd))
    assert [h["start_step"] for h in history] == starts
    assert history[0]["config"]["learning_rate"] == 0.002 and history[-1]["config"]["learning_rate"] == 0.001
    assert history[1]["changed"]["learning_rate"] == [0.002, 0.001]


TWO_PHASES = [dict(name="phase1", num_steps=4, seq_len=32, max_predictions_per_seq=5),
              dict(name="phase2", num_steps=2, seq_len=256, max_predictions_per_seq=8)]


@pytest.mark.parametrize("overrides, message", [
    ({"learning_rate": -1e-3}, "config.learning_rate=-0.001: a finite rate > 0"),
    ({"learning_rate": float("nan")}, "config.learning_rate=nan: a finite rate > 0"),
    ({"keep_checkpoints": 0}, "config.keep_checkpoints=0: an integer >= 1 (the newest this many are kept; 0 would "
                              "delete every checkpoint)"),
    ({"log_every": 0}, "config.log_every=0: an integer >= 1"),
    ({"checkpoint_every": 0}, "config.checkpoint_every=0: an integer >= 1"),
    ({"warmup_fraction": 1.5}, "config.warmup_fraction=1.5: a fraction in [0, 1]"),
    # the 128 positions are model.overrides' (squeezebert-uncased has 512): the message used to credit the preset
    ({"phases": TWO_PHASES}, "config.phases[1].seq_len=256: an integer in [5, 128] (the max_position_embeddings of "
                             "model.overrides"),
    ({"phases": [TWO_PHASES[0], dict(TWO_PHASES[0], num_steps=1)]}, "config.phases[1].name='phase1': a name no other "
                                                                    "phase has (phases[0] is 'phase1'"),
    ({"stop_at_step": 100}, "config.stop_at_step=100: an integer in [0, 4]: the run's steps end at 4 (0: off)"),
    ({"phases": [dict(TWO_PHASES[0], max_predictions_per_seq=40)]},
     "config.phases[0].max_predictions_per_seq=40: an integer in [1, seq_len 32]"),
    ({"phases": [dict(TWO_PHASES[0], num_steps=0)]}, "config.phases[0].num_steps=0: an integer >= 1"),
    ({"phases": []}, "config.phases is empty"),
    # a phase's structure and types (a KeyError, a TypeError, 2.5 microbatches read as 2, True as 1, a name that is
    # no file name: compile.py's --hlo wrote ../x), model.overrides of another type (a TypeError)
    ({"phases": [{"name": "p", "num_steps": 4, "max_predictions_per_seq": 5}]}, "config.phases[0]: no seq_len; a "
                                                                                  "phase has name"),
    ({"phases": [5]}, "config.phases[0]=5: not a phase (a dict)"),
    ({"phases": [dict(TWO_PHASES[0], num_steps=2 ** 31 - 1), dict(TWO_PHASES[0], name="p2", num_steps=4)]},
     "config.phases[1].num_steps=4: the phases' steps end at 2,147,483,651, past 2,147,483,647"),
    ({"phases": [dict(TWO_PHASES[0], num_microbatches=2.5)]}, "config.phases[0].num_microbatches=2.5: an integer >= 1"),
    ({"phases": [dict(TWO_PHASES[0], max_predictions_per_seq=True)]},
     "config.phases[0].max_predictions_per_seq=True: an integer in [1, seq_len 32]"),
    ({"phases": [dict(TWO_PHASES[0], name="../x")]}, "config.phases[0].name='../x': a name of letters, digits"),
    ({"phases": [dict(TWO_PHASES[0], name="")]}, "config.phases[0].name='': a name of letters"),
    ({"model.overrides": None}, "config.model.overrides=None: a dict of model fields"),
    ({"data.source": "wiki"}, "config.data.source='wiki': demo or prepared"),
    ({"data.source": "prepared"}, "config.data.path='': a directory written by train/prepare_data.py"),
    ({"data.source": "prepared", "data.path": "no_such_dir"}, "config.data.path='no_such_dir': a directory written by"),
    ({"data.source": "prepared", "data.path": "."}, "config.data.path='.': a finished train/prepare_data.py output: "
                                                     "this directory has no meta.json"),
    ({"data.demo_seed": -1}, "config.data.demo_seed=-1: an integer >= 0"),
    ({"global_batch_size": 2 ** 31 - 1}, "config.global_batch_size=2147483647: one batch of phase phase1 (seq 32) "
                                         "would take 953.5 GB, more than half of this host's"),
    ({"global_batch_size": 8 * 10 ** 10}, "config.global_batch_size=80000000000: at most 2,147,483,647"),
    ({"data.num_shards": 10 ** 7}, "config.data.num_shards=10000000: an integer in [1, "),
    ({"data.demo_num_docs": 10 ** 9}, "config.data.demo_num_docs=1000000000: the demo corpus (~2 KB a document) "
                                      "would take 2,000.0 GB"),
    ({"num_processes": -1}, "config.num_processes=-1: an integer >= 0"),
    ({"num_processes": 2, "process_id": 5}, "config.process_id=5: an integer in [0, num_processes 2)"),
    # settings nothing reads: the processes without a coordinator, the RTD block beside MLM + SOP (its NaN was written
    # into config.json), a data.path beside the demo corpus, a model field no model has
    ({"num_processes": 2, "process_id": 1}, "config.num_processes=2: left at 0 without coordinator_address"),
    ({"rtd.weight": float("nan")}, "config.rtd.weight=nan: read by no run: leave it at its default 50.0 with "
                                   "objective 'mlm_sop' (only "
                                   "objective=rtd reads it)"),
    ({"rtd.generator_fraction": 7.0}, "config.rtd.generator_fraction=7.0: read by no run: leave it at its default "
                                      "0.25"),
    ({"data.path": "/data/corpus"}, "config.data.path='/data/corpus': read by no run: leave it empty with "
                                    "data.source=demo"),
    ({"model.overrides": {"bogus_field": 1}}, "config.model.overrides: 'bogus_field' is no model field"),
    ({"rng_impl": "philox"}, "config.rng_impl='philox': threefry2x32 or rbg"),
    ({"model.attention": "flash"}, "config.model: attention 'flash' not supported; one of ['fused', 'reference']"),
    ({"model.remat": "some"}, "config.model: remat 'some' not supported"),
    ({"model.layers": "fast"}, "config.model: layers='fast': auto, scan or unrolled"),
    ({"num_devices": -1}, "config.num_devices=-1: an integer >= 0 (0: all devices)"),
    ({"num_devices": 9}, "config.num_devices=9: more devices than there are (8 devices (cpu)); set "
                         "config.num_devices <= 8, or 0 for all of them"),
])
def test_a_setting_out_of_range_is_refused_before_anything_is_written(tmp_path, overrides, message):
    """Issue 26 class 5: one line naming the setting, its value and the valid range; no workdir made, no compile."""
    with pytest.raises(errors.InputError) as e:
        pretrain.train_and_evaluate(tiny_config(**overrides), str(tmp_path / "run"))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_model_overrides_beside_init_from_are_refused_unless_they_say_how_it_runs(tmp_path):
    """A pretraining run from init_from builds init_from's model (its config.json): an override of what the model is
    (hidden_size, a dropout rate) would not be read, so it is refused; how it runs (remat, attention, ffn, layernorm,
    scan_layers, padding) is read. Checked before anything is written."""
    model = tmp_path / "model"
    model.mkdir()
    SqueezeBertConfig.preset("squeezebert-uncased", num_hidden_layers=2, vocab_size=99).to_json(model / "config.json")
    for overrides in ({"hidden_size": 64, "remat": "none"}, {"hidden_dropout_prob": 0.0}):
        with pytest.raises(errors.InputError) as e:
            pretrain.train_and_evaluate(tiny_config(init_from=str(model), **{"model.overrides": overrides}),
                                        str(tmp_path / "run"))
        shape = ", ".join(k for k in overrides if k != "remat")
        assert str(e.value) == (f"config.model.overrides={overrides!r}: only how the model runs (scan_layers, "
                                f"remat, attention, ffn, layernorm, padding) with init_from: the model is "
                                f"init_from's, as its config.json describes it, so {shape} would not be read")
    assert not (tmp_path / "run").exists()
    pretrain_settings.check_settings(tiny_config(init_from=str(model), **{"model.overrides": {"remat": "none"},
                                                                           "model.remat": "none"}), data=False)
    # the same field as config.model.remat and in model.overrides, two values: which one runs is not for us to pick
    with pytest.raises(errors.InputError, match=r"^config.model.overrides sets remat 'none', and config.model.remat "
                                                r"is 'minimal': set it in one place \(config.model.remat\)$"):
        pretrain_settings.check_settings(tiny_config(**{"model.overrides": {"remat": "none"},
                                                        "model.remat": "minimal"}), data=False)
    with pytest.raises(errors.InputError, match=r"^config.model.overrides sets scan_layers True, and "
                                                r"config.model.layers is 'unrolled': set it in one place"):
        pretrain_settings.check_settings(tiny_config(**{"model.overrides": {"scan_layers": True},
                                                        "model.layers": "unrolled"}), data=False)
    # a vocab_size of one's own beside vocab_from_tokenizer (the demo's): the tokenizer's replaced it without a word
    with pytest.raises(errors.InputError, match=r"^config.model.overrides sets vocab_size 10, and config.model."
                                                r"vocab_from_tokenizer=True takes the tokenizer's"):
        pretrain_settings.check_settings(tiny_config(**{"model.overrides": {"vocab_size": 10},
                                                        "model.vocab_from_tokenizer": True}), data=False)
    # the values of how it runs are checked there too (a bad one was refused only after the data was tokenized)
    for changes, message in (({"model.overrides": {"layernorm": "bogus"}}, "layernorm 'bogus' not supported"),
                             ({"model.overrides": {}, "model.remat": None}, "remat")):
        with pytest.raises(errors.InputError, match=rf"^config.model: .*{message}"):
            pretrain_settings.check_settings(tiny_config(init_from=str(model), **changes), data=False)


def test_num_devices_is_checked_in_one_place_against_the_devices_there_are():
    """``parallel.check_num_devices``: what make_mesh and both settings validators call (the tests' 8 CPU devices)."""
    from squeezebert_jax import parallel

    assert parallel.make_mesh(0).devices.size == parallel.make_mesh(None).devices.size == 8
    assert parallel.make_mesh(3).devices.size == 3
    assert parallel.check_num_devices(5, jax.devices()[:8]) == 5
    for bad, message in ((9, r"^config.num_devices=9: more devices than there are \(8 devices"),
                         (-2, r"^config.num_devices=-2: an integer >= 0"), (True, r"^config.num_devices=True: an "),
                         ("4", r"^config.num_devices='4': an integer >= 0")):
        with pytest.raises(errors.InputError, match=message):
            parallel.make_mesh(bad)
    with pytest.raises(errors.InputError, match=r"^--num_devices=3: more devices than there are \(2 devices"):
        parallel.check_num_devices(3, jax.devices()[:2], what="--num_devices")
    assert parallel.check_num_devices(99, count=False) == 0  # the value alone: before jax.distributed starts
    with pytest.raises(errors.InputError, match=r"config.num_devices=-1"):
        parallel.check_num_devices(-1, count=False)


def test_a_resume_on_another_stream_is_refused_and_other_settings_may_change(tmp_path):
    """The stream check pretraining shares with fine-tuning (``trainer.check_stream``): the batch, seed, masking and
    each phase's steps, length and predictions are the run's; learning rate, logging, stop_at_step and the mesh are
    not. No checkpoint yet: nothing is a resume."""
    wd = tmp_path / "run"
    (wd / "checkpoints" / "2").mkdir(parents=True)
    trainer.record_config(str(wd), tiny_config(), 0, pretrain_settings.run_stream(tiny_config()))
    resume = lambda c: trainer.check_stream(str(wd), pretrain_settings.run_stream(c), True)  # noqa: E731
    resume(tiny_config(learning_rate=1e-4, log_every=1, checkpoint_every=1, stop_at_step=3, num_devices=0,
                       num_microbatches=2, **{"model.overrides": {**tiny_config().model.overrides,
                                                                  "hidden_dropout_prob": 0.0}}))
    phase = dict(name="phase1", num_steps=4, seq_len=32, max_predictions_per_seq=5)
    for change, message in (
            (dict(global_batch_size=8), "config.global_batch_size changed since the run began (16 -> 8)"),
            (dict(seed=3), "config.seed changed since the run began (0 -> 3)"),
            ({"data.whole_word_masking": True}, "config.data.whole_word_masking changed since the run began (false "
                                                "-> true)"),
            (dict(phases=[dict(phase, num_steps=6)]),
             "config.phases[0].num_steps changed since the run began (4 -> 6)"),
            (dict(phases=[dict(phase, seq_len=64, max_predictions_per_seq=8)]),
             "config.phases[0].seq_len changed since the run began (32 -> 64); "
             "config.phases[0].max_predictions_per_seq changed since the run began (5 -> 8)"),
            (dict(phases=[phase, dict(phase, name="phase2")]), "config.phases[1].num_steps changed since the run began "
                                                               "(null -> 4)"),
            ({"model.overrides": {**tiny_config().model.overrides, "num_attention_heads": 4}},
             "config.model.num_attention_heads changed since the run began (2 -> 4)"),
            ({"model.overrides": {**tiny_config().model.overrides, "hidden_act": "relu"}},
             "config.model.hidden_act changed since the run began (\"gelu\" -> \"relu\")"),
            # another preset: named first, then the fields it resolves to (it named q_groups, ... alone)
            ({"model.preset": "bert-base-uncased"}, "config.model.preset changed since the run began "
                                                    "(\"squeezebert-uncased\" -> \"bert-base-uncased\"); "
                                                    "config.model.q_groups changed")):
        with pytest.raises(errors.InputError) as e:
            resume(tiny_config(**change))
        assert str(e.value).startswith(message) and "start a new --workdir" in str(e.value), str(e.value)
    trainer.check_stream(str(wd), pretrain_settings.run_stream(tiny_config(global_batch_size=8)), False)
    # RTD's generator width and loss weight are the run's (an MLM + SOP run has neither: its rtd block may change)
    resume(tiny_config(**{"rtd.weight": 5.0, "rtd.generator_fraction": 0.5}))
    rtd = tmp_path / "rtd"
    (rtd / "checkpoints" / "2").mkdir(parents=True)
    trainer.record_config(str(rtd), tiny_config(objective="rtd"), 0,
                          pretrain_settings.run_stream(tiny_config(objective="rtd")))
    for change, message in (({"rtd.weight": 5.0}, "config.rtd.weight changed since the run began (50.0 -> 5.0)"),
                            ({"rtd.generator_fraction": 0.5},
                             "config.rtd.generator_fraction changed since the run began (0.25 -> 0.5)")):
        with pytest.raises(errors.InputError) as e:
            trainer.check_stream(str(rtd), pretrain_settings.run_stream(tiny_config(objective="rtd", **change)), True)
        assert str(e.value).startswith(message), str(e.value)
    # the stream each checkpoint holds (Checkpointer.newest_stream) is checked when the history is gone
    (wd / "config_history.jsonl").unlink()
    with pytest.raises(errors.InputError, match=r"^config.seed changed since the run began \(0 -> 3\)"):
        trainer.check_stream(str(wd), pretrain_settings.run_stream(tiny_config(seed=3)), True,
                             pretrain_settings.run_stream(tiny_config()))
