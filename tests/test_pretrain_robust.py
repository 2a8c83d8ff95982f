"""The pretraining loop's failure paths on a tiny one-phase run (1 device, 4 steps): divergence, config changes,
unreadable checkpoints, multi-host preemption, resume bookkeeping, bad start-up arguments."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import ROOT, losses, smoke_config

from squeezebert_jax import checkpointing, errors, pretrain, reporting, trainer
from squeezebert_jax.tokenizer import Tokenizer


def tiny_config(**overrides):
    """The smoke config cut to one 4-step phase on one device: a run takes seconds."""
    one_phase = [dict(name="phase1", num_steps=4, seq_len=32, max_predictions_per_seq=5)]
    return smoke_config(**{"num_devices": 1, "phases": one_phase, **overrides})


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


@pytest.mark.parametrize("change", [dict(clip_norm=0.0),  # another optimizer chain: another state tree
                                    {"model.overrides": dict(smoke_config().model.overrides, intermediate_size=32)}])
def test_a_config_change_refuses_to_resume_and_keeps_the_checkpoints(tiny_run, tmp_path, change):
    wd = tmp_path / "changed"
    shutil.copytree(tiny_run[0], wd)
    before = listing(wd / "checkpoints")
    with pytest.raises(ValueError, match=r"checkpoint at step 4 .* does not match the current config"):
        pretrain.train_and_evaluate(tiny_config(**change), str(wd))
    assert listing(wd / "checkpoints") == before == ["2", "4"]


def test_a_refused_restart_leaves_config_and_history_as_they_were(tiny_run, tmp_path, digest):
    wd = tmp_path / "refused"
    shutil.copytree(tiny_run[0], wd)
    before = digest(wd)
    with pytest.raises(errors.CheckpointMismatchError):
        pretrain.train_and_evaluate(tiny_config(clip_norm=0.0), str(wd))
    assert digest(wd) == before  # config.json, config_history.jsonl, metrics, checkpoints: all as they were


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

    def initialize(coordinator_address, num_processes, process_id):
        seen.update(address=coordinator_address, num_processes=num_processes, process_id=process_id)
        raise Initialized  # stop here: this process stays single-host

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    monkeypatch.setattr(jax.config, "update", lambda *a, **k: None)
    c = tiny_config(coordinator_address="localhost:1234", num_processes=2)
    assert c.process_id == -1  # the config's default
    with pytest.raises(Initialized):
        pretrain.train_and_evaluate(c, str(tmp_path))
    assert seen == {"address": "localhost:1234", "num_processes": 2, "process_id": None}


@pytest.mark.slow
def test_the_cli_console_preemption_refused_restart_and_changed_resume(tmp_path, digest):
    """Through train/pretrain.py as a user runs it: (1) stopped early: no model announced, the console is the progress
    lines (orbax's INFO records go to WORKDIR/log.txt); (2) a restart whose optimizer state cannot match the
    checkpoints: one error line, exit 1, nothing in the workdir changed; (3) a resume with another learning rate: it
    resumes, warns old -> new, and the history keeps both starts."""
    wd = tmp_path / "cli"

    def pretrain_cli(*overrides):
        return subprocess.run([sys.executable, os.path.join(ROOT, "train", "pretrain.py"),
                               "--config", os.path.join(ROOT, "train", "configs", "pretrain.py") + ":smoke",
                               "--workdir", str(wd), "--config.num_devices=1", *overrides],
                              capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)

    r = pretrain_cli("--config.stop_at_step=2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "stopped early" in r.stdout and "model saved" not in r.stdout
    assert not os.path.exists(wd / "model")
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

    r = pretrain_cli("--config.stop_at_step=3", "--config.learning_rate=0.001")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming from the checkpoint at step 2" in r.stdout
    assert "config.learning_rate changed" in r.stderr and "0.002 -> 0.001" in r.stderr
    history = trainer.read_config_history(str(wd))
    assert [h["start_step"] for h in history] == [0, 2]
    assert history[0]["config"]["learning_rate"] == 0.002 and history[1]["config"]["learning_rate"] == 0.001
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
    ({"phases": TWO_PHASES}, "config.phases[1].seq_len=256: an integer in [5, 128] (the max_position_embeddings of "
                             "model.preset 'squeezebert-uncased'"),
    ({"phases": [dict(TWO_PHASES[0], max_predictions_per_seq=40)]},
     "config.phases[0].max_predictions_per_seq=40: an integer in [1, seq_len 32]"),
    ({"phases": [dict(TWO_PHASES[0], num_steps=0)]}, "config.phases[0].num_steps=0: an integer >= 1"),
    ({"phases": []}, "config.phases is empty"),
    ({"data.source": "wiki"}, "config.data.source='wiki': demo or prepared"),
    ({"data.source": "prepared"}, "config.data.path='': a directory written by train/prepare_data.py"),
    ({"rng_impl": "philox"}, "config.rng_impl='philox': threefry2x32 or rbg"),
    ({"model.attention": "flash"}, "config.model: attention 'flash' not supported; one of ['fused', 'reference']"),
    ({"model.remat": "some"}, "config.model: remat 'some' not supported"),
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
    trainer.record_config(str(wd), tiny_config(), 0, pretrain.run_stream(tiny_config()))
    resume = lambda c: trainer.check_stream(str(wd), pretrain.run_stream(c), True)  # noqa: E731
    resume(tiny_config(learning_rate=1e-4, log_every=1, checkpoint_every=1, stop_at_step=3, num_devices=0,
                       num_microbatches=2))
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
                                                               "(null -> 4)")):
        with pytest.raises(errors.InputError) as e:
            resume(tiny_config(**change))
        assert str(e.value).startswith(message) and "start a new --workdir" in str(e.value), str(e.value)
    trainer.check_stream(str(wd), pretrain.run_stream(tiny_config(global_batch_size=8)), False)
