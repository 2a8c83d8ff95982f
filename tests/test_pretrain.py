"""The pretraining loop end to end on the embedded corpus: devices, FSDP, resume, corruption, NaN, multi-process."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from squeezebert_jax import pretrain, trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def smoke_config(**overrides):
    spec = importlib.util.spec_from_file_location("pretrain_cfg", os.path.join(ROOT, "train", "configs", "pretrain.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config("smoke")
    for k, v in overrides.items():
        node = c
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return c


def losses(workdir):
    return {m["step"]: m["loss"] for m in trainer.read_metrics(str(workdir))}


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """One uninterrupted smoke run on all 8 simulated devices (data parallel)."""
    wd = tmp_path_factory.mktemp("ref")
    final = pretrain.train_and_evaluate(smoke_config(), str(wd))
    return wd, final


def test_smoke_run_writes_metrics_and_model(reference_run):
    wd, final = reference_run
    rows = trainer.read_metrics(str(wd))
    assert [r["step"] for r in rows] == [2, 4, 6, 8]
    for key in ("loss", "mlm_loss", "sop_loss", "mlm_accuracy", "sop_accuracy", "learning_rate", "grad_norm",
                "seq_per_s", "tokens_per_s", "mfu"):
        assert key in rows[0]
    assert all(np.isfinite(r["loss"]) for r in rows)
    assert rows[-1]["phase"] == 1  # the seq-64 second phase ran
    assert os.path.exists(wd / "model" / "params.safetensors") and os.path.exists(wd / "model" / "vocab.txt")
    assert json.load(open(wd / "model" / "config.json"))["architectures"] == ["SqueezeBertForPreTraining"]
    assert os.listdir(wd / "tb")


def test_one_device_equals_eight_devices_and_fsdp(reference_run, tmp_path):
    ref = losses(reference_run[0])
    one = pretrain.train_and_evaluate(smoke_config(num_devices=1), str(tmp_path / "one"))
    fsdp = pretrain.train_and_evaluate(smoke_config(fsdp=True), str(tmp_path / "fsdp"))
    del one, fsdp
    for other in (losses(tmp_path / "one"), losses(tmp_path / "fsdp")):
        assert other.keys() == ref.keys()
        np.testing.assert_allclose([other[k] for k in ref], [ref[k] for k in ref], rtol=2e-5)


def test_gradient_accumulation_equals_large_batch(tmp_path):
    """Dropout off (microbatches draw their own dropout masks): k=2 microbatches == one batch of 16."""
    no_dropout = dict(smoke_config().model.overrides, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    pretrain.train_and_evaluate(smoke_config(**{"model.overrides": no_dropout}), str(tmp_path / "big"))
    pretrain.train_and_evaluate(smoke_config(num_microbatches=2, **{"model.overrides": no_dropout}),
                                str(tmp_path / "acc"))
    ref, acc = losses(tmp_path / "big"), losses(tmp_path / "acc")
    np.testing.assert_allclose([acc[k] for k in ref], [ref[k] for k in ref], rtol=2e-5)


def test_a_phase_may_set_its_own_microbatches():
    """A seq-512 phase needs more accumulation than a seq-128 one: a phase's num_microbatches overrides the config's,
    and a count the global batch cannot split over the devices is refused naming the phase."""
    c = smoke_config(num_microbatches=2)
    phases = pretrain.get_phases(c)
    assert [pretrain.microbatches(c, p) for p in phases] == [2, 2]
    phases[1] = dataclasses.replace(phases[1], num_microbatches=4)
    assert [pretrain.microbatches(c, p) for p in phases] == [2, 4]
    pretrain.check_batch_division(c, phases[1], 4)  # 16 rows = 4 devices x 4 microbatches x 1
    with pytest.raises(ValueError, match=r"phase2: global_batch_size 16 must divide by devices x microbatches \(8 x 4\)"):
        pretrain.check_batch_division(c, phases[1], 8)


def test_kill_and_resume_equals_uninterrupted(reference_run, tmp_path):
    ref = losses(reference_run[0])
    wd = tmp_path / "resume"
    # stopped after step 4 (the preemption path: checkpoint, clean exit), then restarted on the same workdir
    pretrain.train_and_evaluate(smoke_config(stop_at_step=4), str(wd))
    assert trainer.Checkpointer(str(wd / "checkpoints"), with_data=True).all_steps()[-1] == 4
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
    script = ("import sys; sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r}); import jax;"
              "jax.config.update('jax_default_matmul_precision', 'highest');"
              "from test_pretrain import smoke_config; from squeezebert_jax import pretrain;"
              "pretrain.train_and_evaluate(smoke_config(**{long!r}), {wd!r})")
    wd = tmp_path / "preempted"
    proc = subprocess.Popen([sys.executable, "-c", script.format(root=ROOT, tests=os.path.join(ROOT, "tests"),
                                                                 long=long, wd=str(wd))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the run is 10**5 steps long: it is still training when it has logged 3 (log_every=1)
        while not (os.path.exists(wd / "metrics.jsonl") and len(trainer.read_metrics(str(wd))) >= 3):
            assert proc.poll() is None, proc.communicate()[0][-4000:]  # it died before training
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-4000:]
    assert "saving a checkpoint" in out
    k = trainer.Checkpointer(str(wd / "checkpoints"), with_data=True).all_steps()[-1]
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
    ckpt = trainer.Checkpointer(str(wd / "checkpoints"))
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


def test_non_finite_loss_stops_with_step(tmp_path):
    c = smoke_config(learning_rate=1e30, clip_norm=1e30)
    with pytest.raises(FloatingPointError, match=r"non-finite .* at step \d+"):
        pretrain.train_and_evaluate(c, str(tmp_path / "nan"))


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one_process(reference_run, tmp_path):
    """Two JAX processes on localhost (4 CPU devices each, gloo collectives) give the one-process losses."""
    port = _free_port()
    script = ("import sys; sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r});"
              "from test_pretrain import smoke_config; from squeezebert_jax import pretrain;"
              "c = smoke_config(coordinator_address='localhost:{port}', num_processes=2, process_id={pid});"
              "pretrain.train_and_evaluate(c, {wd!r})")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    wd = str(tmp_path / "multi")
    procs = [subprocess.Popen([sys.executable, "-c", script.format(root=ROOT, tests=os.path.join(ROOT, "tests"),
                                                                   port=port, pid=i, wd=wd)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
    ref = losses(reference_run[0])
    multi = losses(wd)
    np.testing.assert_allclose([multi[k] for k in ref], [ref[k] for k in ref], rtol=2e-5)


@pytest.mark.slow
def test_demo_learns_mlm_and_sop(tmp_path):
    """The demo recipe, shortened to one 400-step phase: MLM loss falls well below ln(vocab), SOP above chance."""
    spec = importlib.util.spec_from_file_location("pretrain_cfg", os.path.join(ROOT, "train", "configs", "pretrain.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config("demo")
    c.phases = [dict(c.phases[0], num_steps=400)]
    c.progress, c.async_checkpoints, c.checkpoint_every = False, False, 400
    pretrain.train_and_evaluate(c, str(tmp_path / "demo"))
    rows = trainer.read_metrics(str(tmp_path / "demo"))
    vocab = json.load(open(tmp_path / "demo" / "model" / "config.json"))["vocab_size"]
    assert abs(rows[0]["mlm_loss"] - np.log(vocab)) < 0.3  # starts at chance
    assert rows[-1]["mlm_loss"] < 0.8 * np.log(vocab)
    assert np.mean([r["sop_accuracy"] for r in rows[-3:]]) > 0.55
