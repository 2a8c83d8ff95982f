"""Fine-tuning on the shared trainer: the mesh (1 device == 8 devices == FSDP), exact resume after kill -9 and SIGTERM,
a finished run rerun, settings and workdirs refused before anything is compiled or written."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import ROOT, VOCAB, glue_config, write_sst2
from squeezebert_jax import checkpointing, finetune as ft, inference, reporting
from squeezebert_jax import trainer

import squeezebert_jax as sj
from flax import nnx


def _init_dir(path, seed=0):
    cfg = sj.SqueezeBertConfig(vocab_size=len(VOCAB), hidden_size=32, embedding_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(seed)), path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return path


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    d = tmp_path_factory.mktemp("ft_trainer")
    write_sst2(d / "glue", n_train=96, n_dev=32)
    return _init_dir(d / "init"), d / "glue"


def _config(task, **kw):
    init, data = task
    kw = {"learning_rate": 3e-3, "num_epochs": 2, "log_every": 2, **kw}
    return glue_config("sst2", init, data, **kw)


def _params(run_dir):
    return load_file(str(run_dir / "model" / "params.safetensors"))


def _assert_close(a: dict, b: dict, rtol: float):
    assert a.keys() == b.keys()
    for k in a:  # atol: some tensors barely move from ~0 (their float error is relative to the others')
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=1e-6, err_msg=k)


def _losses(history):
    return [h["train_loss"] for h in history]


@pytest.mark.slow
def test_eight_devices_and_fsdp_take_the_one_device_steps(task, tmp_path, monkeypatch):
    """Dropout off: data parallel over 8 devices and FSDP (parameters and AdamW state sharded) give the 1-device
    run's losses, dev scores and final parameters."""
    specs, jit = [], trainer.jit_train_step
    monkeypatch.setattr(trainer, "jit_train_step", lambda step, shardings, mesh, **kw: specs.append(
        {s.spec for s in jax.tree.leaves(shardings)}) or jit(step, shardings, mesh, **kw))
    kw = {"dropout": 0.0, "attention_dropout": 0.0, "num_epochs": 1}
    one = ft.finetune(_config(task, num_devices=1, **kw), str(tmp_path / "one"))
    eight = ft.finetune(_config(task, **kw), str(tmp_path / "eight"))
    fsdp = ft.finetune(_config(task, fsdp=True, **kw), str(tmp_path / "fsdp"))
    assert specs[0] == specs[1] == {jax.sharding.PartitionSpec()}
    assert jax.sharding.PartitionSpec("data") in specs[2] or any("data" in s for s in specs[2])  # FSDP shards
    for run in (eight, fsdp):
        np.testing.assert_allclose(_losses(run["history"]), _losses(one["history"]), rtol=2e-5)
        assert run["best"]["score"] == one["best"]["score"]
    _assert_close(_params(tmp_path / "eight"), _params(tmp_path / "one"), 2e-5)
    _assert_close(_params(tmp_path / "fsdp"), _params(tmp_path / "one"), 2e-5)
    rows = reporting.read_metrics(str(tmp_path / "eight"))
    train_rows = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train_rows] == [2, 4, 6]  # every log_every=2 of the 6 steps
    assert all(r["tokens_per_s"] > 0 and r["examples_per_s"] > 0 and r["grad_norm"] > 0 for r in train_rows)
    assert [r["step"] for r in rows if "score" in r] == [6]  # the epoch's evaluation


_KILL = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from conftest import glue_config
from squeezebert_jax import checkpointing, finetune as ft
save = checkpointing.Checkpointer.save
def save_then_die(self, step, *args, **kwargs):
    out = save(self, step, *args, **kwargs)
    if step == {kill_at}:
        self.wait()
        os.kill(os.getpid(), signal.SIGKILL)
    return out
checkpointing.Checkpointer.save = save_then_die
ft.finetune(glue_config("sst2", {init!r}, {data!r}, **{kw!r}), {wd!r})
"""


@pytest.mark.slow
def test_kill_9_mid_epoch_then_resume_equals_an_uninterrupted_run(task, tmp_path):
    """A SIGKILL right after the step-3 checkpoint (mid-way through epoch 1 of 2, dropout on): the rerun on the
    workdir resumes there and ends with the uninterrupted run's losses, dev scores and parameters."""
    kw = {"learning_rate": 3e-3, "num_epochs": 2, "log_every": 2, "checkpoint_every": 3, "async_checkpoints": False}
    wd = tmp_path / "killed"
    script = _KILL.format(tests=os.path.join(ROOT, "tests"), kill_at=3, init=str(task[0]), data=str(task[1]), kw=kw,
                          wd=str(wd))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert checkpointing.Checkpointer(str(wd / "checkpoints"), with_data=False).all_steps() == [3]
    assert not os.path.exists(wd / "eval_results.json")
    resumed = ft.finetune(_config(task, **kw), str(wd))
    ref = ft.finetune(_config(task, **kw), str(tmp_path / "uninterrupted"))
    assert [h["step"] for h in resumed["history"]] == [h["step"] for h in ref["history"]] == [6, 12]
    np.testing.assert_allclose(_losses(resumed["history"]), _losses(ref["history"]), rtol=1e-6)
    assert [h["score"] for h in resumed["history"]] == [h["score"] for h in ref["history"]]
    _assert_close(_params(wd), _params(tmp_path / "uninterrupted"), 1e-6)
    # the metrics: the killed run's rows up to its checkpoint, then the resumed run's, each step once
    steps = [r["step"] for r in reporting.read_metrics(str(wd)) if "loss" in r]
    assert steps == [2, 4, 6, 8, 10, 12]
    history = trainer.read_config_history(str(wd))
    assert [h["start_step"] for h in history] == [0, 3]


def test_sigterm_saves_stops_and_the_rerun_resumes_exactly(task, tmp_path, monkeypatch):
    """SIGTERM during step 4 (mid-epoch): the run finishes the step, checkpoints, returns ``preempted``; the rerun
    resumes at step 4 and ends as an uninterrupted run. A rerun of the finished run trains nothing."""
    write = reporting.MetricsWriter.write

    def write_and_signal(self, step, metrics):
        write(self, step, metrics)
        if step == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    wd = tmp_path / "term"
    with monkeypatch.context() as m:
        m.setattr(reporting.MetricsWriter, "write", write_and_signal)
        first = ft.finetune(_config(task, async_checkpoints=False), str(wd))
    assert first["preempted"] and first["history"] == []
    assert checkpointing.Checkpointer(str(wd / "checkpoints"), with_data=False).all_steps() == [4]
    resumed = ft.finetune(_config(task), str(wd))
    ref = ft.finetune(_config(task), str(tmp_path / "ref"))
    np.testing.assert_allclose(_losses(resumed["history"]), _losses(ref["history"]), rtol=1e-6)
    _assert_close(_params(wd), _params(tmp_path / "ref"), 1e-6)
    monkeypatch.setattr(inference, "predict_batches", lambda *a, **k: pytest.fail("a finished run evaluated again"))
    again = ft.finetune(_config(task), str(wd))
    assert again["history"] == resumed["history"] and not again["preempted"]


@pytest.mark.parametrize("setting, value, msg", [
    ("log_every", 0, r"config.log_every=0: an integer >= 1"),
    ("checkpoint_every", 0, r"config.checkpoint_every=0: an integer >= 1"),
    ("num_epochs", 0, r"config.num_epochs=0: an integer >= 1"),
    ("learning_rate", float("nan"), r"config.learning_rate=nan: a finite rate > 0"),
    ("learning_rate", -1e-3, r"config.learning_rate=-0.001: a finite rate > 0"),
    ("batch_size", 12, r"config.batch_size=12: a multiple of the 8 devices of the mesh"),
    ("keep_checkpoints", 0, r"config.keep_checkpoints=0: an integer >= 1"),
    ("attention", "flash", r"config.attention='flash': fused or reference"),
    ("attention_dropout", 0.1, r"config.attention_dropout=0.1: 0 or unset with attention 'fused'"),
    ("rng_impl", "RBG", r"config.rng_impl='RBG': threefry2x32 or rbg"),
])
def test_bad_settings_are_refused_before_anything_is_loaded_or_written(task, tmp_path, setting, value, msg):
    with pytest.raises(sj.errors.InputError, match=msg):
        ft.finetune(_config(task, **{setting: value}), str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_the_cli_prints_a_bad_setting_as_one_line(task, tmp_path):
    from test_cli_convert import one_error_line

    wd = tmp_path / "run"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train", "finetune.py"),
                        "--config", os.path.join(ROOT, "train", "configs", "glue.py") + ":sst2",
                        f"--config.init_from={task[0]}", f"--config.data_dir={task[1]}", "--config.log_every=0",
                        "--workdir", str(wd)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    native = r"^(WARNING: All log messages before absl::InitializeLog\(\) is called.*|[IWE]\d{4} [\d:.]+ +\d+ \S+\] .*)\n"
    line = one_error_line(re.sub(native, "", r.stderr, flags=re.M), "finetune.py")
    assert "config.log_every=0: an integer >= 1" in line
    assert os.listdir(wd) == ["log.txt"]


def test_a_workdir_of_another_task_is_refused_and_kept(task, tmp_path, digest):
    wd = tmp_path / "run"
    os.makedirs(wd)
    (wd / "config_history.jsonl").write_text(json.dumps({"start_step": 0, "config": {"task": "rte"}}) + "\n")
    before = digest(wd)
    with pytest.raises(sj.errors.InputError, match=r"holds the fine-tuning run of task 'rte', not 'sst2'"):
        ft.finetune(_config(task), str(wd))
    assert digest(wd) == before
