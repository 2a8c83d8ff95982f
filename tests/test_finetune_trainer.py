"""Fine-tuning on the shared trainer: the mesh (1 device == 8 devices == FSDP), exact resume after kill -9 and SIGTERM,
a finished run rerun, settings and workdirs refused before anything is compiled or written."""

from __future__ import annotations

import json
import shutil
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
from squeezebert_jax import checkpointing, finetune as ft, inference, reporting, tasks
from squeezebert_jax import finetune_settings, trainer

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
    eight = ft.finetune(_config(task, num_devices=0, **kw), str(tmp_path / "eight"))
    fsdp = ft.finetune(_config(task, num_devices=0, fsdp=True, **kw), str(tmp_path / "fsdp"))
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
def test_kill_9_mid_epoch_then_resume_equals_an_uninterrupted_run(task, tmp_path, caplog):
    """A SIGKILL right after the step-3 checkpoint (mid-way through epoch 1 of 2, dropout on): the rerun on the
    workdir resumes there and ends with the uninterrupted run's losses, dev scores and parameters. The resume does not
    warn that the classifier init_from lacks is random: the checkpoint's replaces it."""
    kw = {"learning_rate": 3e-3, "num_epochs": 2, "log_every": 2, "checkpoint_every": 3, "async_checkpoints": False,
          "num_devices": 0}  # on all 8 devices: the sharded state resumes exactly
    wd = tmp_path / "killed"
    script = _KILL.format(tests=os.path.join(ROOT, "tests"), kill_at=3, init=str(task[0]), data=str(task[1]), kw=kw,
                          wd=str(wd))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert checkpointing.Checkpointer(str(wd / "checkpoints"), with_data=False).all_steps() == [3]
    assert not os.path.exists(wd / "eval_results.json")
    with caplog.at_level("INFO"):
        resumed = ft.finetune(_config(task, **kw), str(wd))
    assert "randomly initialised" not in caplog.text and "taken from the run's checkpoint" in caplog.text
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


def test_sigterm_saves_stops_and_the_rerun_resumes_exactly(task, tmp_path, monkeypatch, digest):
    """SIGTERM during step 4 (mid-epoch): the run finishes the step, checkpoints, returns ``preempted``; the rerun
    resumes at step 4, stops at stop_at_step 5 the same way, and the next ends as an uninterrupted run. A rerun of the
    finished run trains nothing."""
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
    # the checkpoint's JSON item (the epochs' results so far) read and checked with its state
    # (finetune_settings.check_meta): cut short, or a field of another type, it is a damaged checkpoint -- the only
    # one here, so the rerun is refused
    # before anything is written (it used to record its start, then fail with a traceback at the epoch's end)
    meta = wd / "checkpoints" / "4" / "meta" / "metadata"
    none = r"checkpoints at steps \[4\] but none can "
    for damage, msg in ((lambda m: m[:100], none), (lambda m: json.dumps(json.loads(m) | {"epoch_losses": "x"}), none),
                        # a stream of another type read as none: any change of the run would have resumed unchecked
                        (lambda m: json.dumps(json.loads(m) | {"stream": [1]}),
                         r"records its training stream as list")):
        bad = tmp_path / "bad"
        shutil.copytree(wd, bad)
        (bad / meta.relative_to(wd)).write_text(damage(meta.read_text()))
        before = digest(bad)
        with pytest.raises(checkpointing.UnreadableCheckpointsError, match=msg):
            ft.finetune(_config(task), str(bad))
        assert digest(bad) == before
        shutil.rmtree(bad)
    stopped = ft.finetune(_config(task, stop_at_step=5), str(wd))  # resumed, and stopped again by the config
    assert stopped["preempted"] and stopped["checkpoint_step"] == 5
    resumed = ft.finetune(_config(task), str(wd))
    ref = ft.finetune(_config(task), str(tmp_path / "ref"))
    np.testing.assert_allclose(_losses(resumed["history"]), _losses(ref["history"]), rtol=1e-6)
    _assert_close(_params(wd), _params(tmp_path / "ref"), 1e-6)
    monkeypatch.setattr(inference, "predict_batches", lambda *a, **k: pytest.fail("a finished run evaluated again"))
    again = ft.finetune(_config(task), str(wd))
    assert again["history"] == resumed["history"] and not again["preempted"]
    # the best epoch's model gone or damaged: a rerun of the finished run reported it as the result, exit 0
    (wd / "model" / "params.safetensors").write_bytes(b"\0" * 8)
    with pytest.raises(sj.errors.InputError, match=rf"{wd / 'model'}: the run's best model cannot be read \(.*\); "
                                                   r"the checkpoints hold only the last step: train again"):
        ft.finetune(_config(task), str(wd))
    shutil.rmtree(wd / "model")
    with pytest.raises(sj.errors.InputError, match=rf"{wd / 'model'}: the run's best model is missing"):
        ft.finetune(_config(task), str(wd))


@pytest.mark.parametrize("task_name, kind, field, value, msg", [
    # a GLUE task reads its own files: your file beside it trained on GLUE's SST-2 without a word
    ("sst2", "classification", "train_file", "mine.csv", r"config.data.train_file='mine.csv': read by no run: leave "
                                                         r"it empty with task "
                                                         r"'sst2', which reads its own files \(config.data_dir\)"),
    ("mnli", "classification", "labels", "a,b,c", r"config.data.labels='a,b,c': read by no run: leave it empty with "
                                                  r"task 'mnli'"),
    ("rte", "classification", "test_file", "t.csv", r"config.data.test_file='t.csv': read by no run: leave it empty "
                                                    r"with task 'rte'"),
    # and the settings whose defaults are not empty (their files' columns, kind and QA windows)
    ("sst2", "classification", "text_columns", "review", r"config.data.text_columns='review': read by no run: leave "
                                                         r"it at its default "
                                                         r"'sentence' with task 'sst2', which reads its own files"),
    ("stsb", "regression", "kind", "regression", r"config.data.kind='regression': read by no run: leave it at its "
                                                 r"default "
                                                 r"'classification' with task 'stsb'"),
    ("qnli", "classification", "doc_stride", 64, r"config.data.doc_stride=64: read by no run: leave it at its "
                                                 r"default 32 with task "
                                                 r"'qnli'"),
    # ending columns with a kind that reads none
    ("files", "classification", "choice_columns", "a,b", r"config.data.choice_columns='a,b': read by no run: leave "
                                                         r"it empty with "
                                                         r"data.kind 'classification' \(only multiple_choice"),
    ("files", "regression", "choice_columns", "a,b", r"config.data.choice_columns='a,b': read by no run: leave it "
                                                     r"empty with data.kind "
                                                     r"'regression'"),
])
def test_settings_no_run_of_the_task_or_kind_reads_are_refused(task_name, kind, field, value, msg):
    c = glue_config(task_name, "init", "data")
    c.task, c.data.kind, c.data[field] = task_name, kind, value
    with pytest.raises(sj.errors.InputError, match="^" + msg):
        finetune_settings.check_settings(c, 1)
    c.data.kind = "classification" if task_name != "files" else kind
    c.data[field] = tasks.DATA_SETTINGS[field] if task_name != "files" else ""
    finetune_settings.check_settings(c, 1)


@pytest.mark.parametrize("path, value, msg", [
    # distillation's settings with no teacher, pruning's with pruning off, a student's layer map at init_from's depth
    ("distill.teacher_weight", 0.9, r"config.distill.teacher_weight=0.9: read by no run: leave it at its default "
                                    r"0.5 without a "
                                    r"distill.teacher \(only distillation reads it\)"),
    ("distill.layer_map", "last", r"config.distill.layer_map='last': read by no run: leave it at its default 'skip' "
                                  r"without a "
                                  r"distill.teacher"),
    ("student_layer_map", "first", r"config.student_layer_map='first': read by no run: leave it at its default "
                                   r"'skip' with "
                                   r"student_layers 0"),
    ("prune.kind", "heads", r"config.prune.kind='heads': read by no run: leave it at its default 'unstructured' "
                            r"with prune.target 0 "
                            r"\(pruning off\)"),
    ("prune.every", 5, r"config.prune.every=5: read by no run: leave it at its default 10 with prune.target 0"),
    # your own files: the QA windows read by question answering alone, and SQuAD's fields are its own
    ("data.doc_stride", 7, r"config.data.doc_stride=7: read by no run: leave it at its default 32 with data.kind "
                           r"'classification' "
                           r"\(only question_answering reads it\)"),
    ("data.null_threshold", 3.0, r"config.data.null_threshold=3.0: read by no run: leave it at its default 0.0 with "
                                 r"data.kind"),
    ("distill.cache_dir", "/tmp/cache", r"config.distill.cache_dir='/tmp/cache': read by no run: leave it empty "
                                        r"without a distill.teacher"),
    # a GLUE task's own settings beside your files
    ("data_dir", "/data/glue", r"config.data_dir='/data/glue': read by no run: leave it empty with task 'files' "
                               r"\(only a GLUE task"),
    ("skip_malformed", True, r"config.skip_malformed=True: False with task 'files' \(a malformed row of your own"),
])
def test_settings_nothing_reads_without_their_feature_are_refused(path, value, msg):
    if path == "distill.layer_map":  # with a teacher too: only the layer losses read it, every weight 0 by default
        c = glue_config("files", "init", "data")
        c.data.train_file, c.distill.teacher, c.distill.layer_map = "train.csv", "teacher", value
        with pytest.raises(sj.errors.InputError, match=r"^config.distill.layer_map='last': read by no run: leave it "
                                                       r"at its default 'skip' "
                                                       r"with every layer loss's weight 0"):
            finetune_settings.check_settings(c, 1)
        c.distill.hidden_weight = 1.0
        finetune_settings.check_settings(c, 1)
    c = glue_config("files", "init", "data")
    c.data.train_file = "train.csv"
    section, _, name = path.rpartition(".")
    (c[section] if section else c)[name] = value
    with pytest.raises(sj.errors.InputError, match="^" + msg):
        finetune_settings.check_settings(c, 1)
    c.data.kind, c.data.text_columns = "question_answering", "review"
    if path.startswith("data."):  # question answering reads its windows, and no column names
        with pytest.raises(sj.errors.InputError, match=r"^config.data.text_columns='review': read by no run: leave "
                                                       r"it at its default "
                                                       r"'sentence' with data.kind 'question_answering' \(SQuAD"):
            finetune_settings.check_settings(c, 1)
        c.data.text_columns = "sentence"
        finetune_settings.check_settings(c, 1)


def test_column_names_beside_conll_files_are_refused():
    """A CoNLL file is a word and its tag per line: text_columns and label_column name the columns of a dataset split
    (hf: or tfds:) alone, so beside CoNLL files they are refused, not ignored."""
    c = glue_config("files", "init", "data")
    c.data.kind, c.data.train_file, c.data.validation_file = "token_classification", "train.conll", "dev.conll"
    for field, value in (("label_column", "ner"), ("text_columns", "words")):
        c.data[field] = value
        with pytest.raises(sj.errors.InputError, match=rf"^config.data.{field}='{value}': read by no run: leave it "
                                                       rf"at its default "
                                                       rf"'{tasks.DATA_SETTINGS[field]}' with data.kind "
                                                       r"'token_classification' on CoNLL files"):
            finetune_settings.check_settings(c, 1)
        c.data.train_file = "hf:conll2003:train"  # a dataset split reads its words and tags by column
        finetune_settings.check_settings(c, 1)
        c.data.train_file, c.data[field] = "train.conll", tasks.DATA_SETTINGS[field]
    finetune_settings.check_settings(c, 1)


@pytest.mark.parametrize("path, value, msg", [
    # checked whether or not a run uses them (a typo in prune.kind trained unpruned until a target was set)
    ("prune.kind", "foo", r"config.prune.kind='foo': one of unstructured, heads, ffn"),
    ("distill.layer_map", "a:b", r"layer map 'a:b': expected 'skip', 'last', 'uniform' or pairs"),
    ("student_layer_map", "zzz", r"student layer map 'zzz': expected 'skip', 'first'"),
    # a layer loss without a teacher compared with nothing: the weight did nothing
    ("distill.hidden_weight", 1.0, r"config.distill.hidden_weight=1.0: 0 without a distill.teacher"),
])
def test_settings_read_only_by_some_runs_are_checked_in_every_run(path, value, msg):
    c = glue_config("sst2", "init", "data")
    node, *rest = path.split(".")
    (c[node] if rest else c).__setitem__(rest[0] if rest else node, value)
    with pytest.raises(sj.errors.InputError, match="^" + msg):
        finetune_settings.check_settings(c, 1)


def test_a_workdir_that_is_no_path_is_named_by_both_trainers():
    """A notebook's bytes or None for the workdir: os's TypeError ("a bytes-like object is required") named nothing."""
    from conftest import smoke_config

    from squeezebert_jax import pretrain

    with pytest.raises(sj.errors.InputError, match=r"^workdir is bytes b'/tmp/w'; give a path as a str"):
        ft.finetune(glue_config("sst2", "init", "data"), b"/tmp/w")
    with pytest.raises(sj.errors.InputError, match=r"^workdir is NoneType None; give a path as a str"):
        pretrain.train_and_evaluate(smoke_config(), None)
    # overwrite="no" replaced the user's config.json in the workdir and trained (any truthy value was True)
    with pytest.raises(sj.errors.InputError, match=r"^overwrite='no': expected True or False$"):
        ft.finetune(glue_config("sst2", "init", "data"), "/tmp/w", overwrite="no")


def test_an_unknown_task_is_named_before_the_files_it_would_not_read():
    """--config.task foo with a train_file: "train_file: read by no run: leave it empty with task 'foo', which reads its
    own files" was said, though no task foo exists."""
    c = glue_config("sst2", "init", "data")
    c.task, c.data.train_file = "foo", "tr.csv"
    with pytest.raises(sj.errors.InputError, match=r"^unknown GLUE task 'foo'; known: "):
        finetune_settings.check_settings(c, 1)


def test_a_runs_workdir_given_as_init_from_names_its_model(task, tmp_path):
    """WORKDIR for WORKDIR/model (what a fine-tuning run exports): "no tokenizer file" used to be all it said."""
    shutil.copytree(task[0], tmp_path / "run" / "model")
    hint = f"; {tmp_path / 'run'} is a training run's workdir: its model is {tmp_path / 'run' / 'model'}"
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'run'}: no tokenizer file (vocab.txt or "
                                                          f"SentencePiece model){hint}")):
        ft.finetune(_config((tmp_path / "run", task[1])), str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match=re.escape(f"no config.json{hint}")):
        sj.load_pretrained(tmp_path / "run")
    (tmp_path / "run" / "config.json").write_text("{}")  # a run's own config.json (predict --model WORKDIR)
    with pytest.raises(FileNotFoundError, match=re.escape(f"no params.safetensors, model.safetensors or "
                                                          f"pytorch_model.bin{hint}")):
        sj.load_pretrained(str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "out")


def test_a_root_of_runs_given_as_a_model_names_the_models_it_holds(task, tmp_path):
    """A GLUE run's --workdir (one WORKDIR/<task>/model per task) for a model: "no config.json" was all it said."""
    for name in ("sst2", "mrpc"):
        shutil.copytree(task[0], tmp_path / "runs" / name / "model")
        (tmp_path / "runs" / name / "config.json").write_text("{}")  # the run's own config: no model
    models = f"{tmp_path / 'runs' / 'mrpc' / 'model'}, {tmp_path / 'runs' / 'sst2' / 'model'}"
    with pytest.raises(FileNotFoundError, match=re.escape(f"runs: no config.json; it holds 2 models ({models}): give "
                                                          "one of them")):
        sj.load_pretrained(tmp_path / "runs")


@pytest.mark.parametrize("setting, value, msg", [
    ("log_every", 0, r"config.log_every=0: an integer >= 1"),
    ("checkpoint_every", 0, r"config.checkpoint_every=0: an integer >= 1"),
    ("num_epochs", 0, r"config.num_epochs=0: an integer >= 1"),
    ("learning_rate", float("nan"), r"config.learning_rate=nan: a finite rate > 0"),
    ("learning_rate", -1e-3, r"config.learning_rate=-0.001: a finite rate > 0"),
    ("batch_size", 12, r"config.batch_size=12: a multiple of the 8 devices of the mesh"),
    ("keep_checkpoints", 0, r"config.keep_checkpoints=0: an integer >= 1"),
    # 2 trained on [CLS] [SEP] alone (a warning that every input was cut); predict refuses the same lengths
    ("max_seq_length", 3, r"config.max_seq_length=3: an integer >= 4 \(the special tokens and a word of each text\)"),
    ("attention", "flash", r"config.attention='flash': fused or reference"),
    ("attention_dropout", 0.1, r"config.attention_dropout=0.1: 0 or unset with attention 'fused'"),
    ("rng_impl", "RBG", r"config.rng_impl='RBG': threefry2x32 or rbg"),
    # jax's keys hold 32 bits of the seed: 2**32 + 5 drew seed 5's dropout, 2**64 was an OverflowError traceback
    ("seed", 2 ** 32 + 5, r"config.seed=4294967301: an integer in \[0, 2\*\*32\)"),
    ("seed", 2 ** 64, r"config.seed=18446744073709551616: an integer in \[0, 2\*\*32\)"),
])
def test_bad_settings_are_refused_before_anything_is_loaded_or_written(task, tmp_path, setting, value, msg):
    with pytest.raises(sj.errors.InputError, match=msg):  # on all 8 devices: the batch is checked against them
        ft.finetune(_config(task, num_devices=0, **{setting: value}), str(tmp_path / "run"))
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
    assert not wd.exists()  # the workdir made for the log file is taken away again


def test_a_workdir_of_another_task_is_refused_and_kept(task, tmp_path, digest):
    wd = tmp_path / "run"
    os.makedirs(wd)
    (wd / "config_history.jsonl").write_text(json.dumps({"start_step": 0, "config": {"task": "rte"}}) + "\n")
    before = digest(wd)
    with pytest.raises(sj.errors.InputError, match=r"holds the fine-tuning run of task 'rte', not 'sst2'"):
        ft.finetune(_config(task), str(wd))
    assert digest(wd) == before


# -- A resume checks the stream it resumes: the data's bytes and the settings that place each row at its step ---------

def _recorded_run(task, tmp_path, **kw):
    """A workdir as a killed run leaves it: its start recorded with its stream, a checkpoint at step 3 (an empty step
    directory: what ``check_stream`` asks is whether the start resumes). The GLUE data is the workdir's own copy."""
    import shutil

    data = tmp_path / "glue"
    shutil.copytree(task[1], data)
    config = glue_config("sst2", task[0], data, **kw)
    wd = tmp_path / "run"
    (wd / "checkpoints" / "3").mkdir(parents=True)
    trainer.record_config(str(wd), config, 0, finetune_settings.run_stream(config, tasks.resolve(config)))
    return wd, data, config


def _resume_check(wd, config):
    stream = finetune_settings.run_stream(config, tasks.resolve(config))
    trainer.check_stream(str(wd), stream, bool(checkpointing.steps_on_disk(str(wd / "checkpoints"))))


def _swap_labels(path):
    head, *rows = path.read_text().splitlines()
    path.write_text("\n".join([head] + [r[:-1] + str(1 - int(r[-1])) for r in rows]) + "\n")


def test_a_resume_on_changed_data_or_stream_settings_is_refused_naming_what_changed(task, tmp_path):
    wd, data, config = _recorded_run(task, tmp_path)
    train = data / "SST-2" / "train.tsv"
    _resume_check(wd, config)  # the same data and settings: resumed
    _resume_check(wd, glue_config("sst2", task[0], data, log_every=7, checkpoint_every=5, eval_batch_size=8,
                                  keep_checkpoints=4, learning_rate=1e-4))  # settings a resume may change
    os.symlink(data, tmp_path / "link")  # the same data by another spelling: a relative path, a link
    for spelling in (os.path.relpath(data), tmp_path / "link"):
        same = glue_config("sst2", task[0], spelling)
        finetune_settings.check_same_run(str(wd), same)
        _resume_check(wd, same)

    before = train.read_bytes()
    _swap_labels(train)
    with pytest.raises(sj.errors.InputError) as e:
        _resume_check(wd, config)
    line = str(e.value)
    assert re.match(rf"config.data_dir {re.escape(str(train))} changed since the run began \(sha256 [0-9a-f]{{12}}\.\. "
                    r"-> [0-9a-f]{12}\.\.\)\. The checkpoints in .* are left untouched: resume with the data and "
                    r"settings the run began with, or start a new --workdir$", line), line
    assert "\n" not in line
    train.write_bytes(before + b"".join(b"a b c d e\t1\n" for _ in range(40)))  # 40 rows appended
    with pytest.raises(sj.errors.InputError, match=rf"config.data_dir {re.escape(str(train))} changed since the run "
                                                   rf"began \(sha256 .*; {len(before)} -> {len(before) + 480} bytes\)"):
        _resume_check(wd, config)
    train.write_bytes(before)

    for setting, value, old in (("batch_size", 8, 16), ("max_seq_length", 32, 16), ("seed", 1, 0), ("num_epochs", 5, 3),
                                ("length_buckets", "none", "auto"), ("max_train_examples", 10, 0),
                                ("rng_impl", "rbg", "threefry2x32")):
        with pytest.raises(sj.errors.InputError, match=rf"^config.{setting} changed since the run began "
                                                       rf"\({json.dumps(old)} -> {json.dumps(value)}\)\. "):
            _resume_check(wd, glue_config("sst2", task[0], data, **{setting: value}))
    pruned = glue_config("sst2", task[0], data)
    pruned.prune.target = 0.5  # another saved tree (the masks): named before anything loads, not as a mismatch
    with pytest.raises(sj.errors.InputError, match=r"^config.prune.target changed since the run began \(0.0 -> 0.5\)"):
        _resume_check(wd, pruned)

    import shutil

    shutil.rmtree(wd / "checkpoints" / "3")  # no checkpoint: the run starts afresh, on whatever it is given now
    _swap_labels(train)
    _resume_check(wd, glue_config("sst2", task[0], data, batch_size=8))


def test_the_same_files_moved_elsewhere_resume_and_other_bytes_are_named(task, tmp_path):
    """A run's own files moved or copied (the same bytes at another path) were refused: "holds the fine-tuning run of
    data.validation_file A, not B". The same bytes are the same run's data; other bytes are still refused."""
    import shutil

    rows = "text,label\n" + "".join(f"{w} film,{y}\n" for w, y in (("good", "pos"), ("bad", "neg")) * 4)
    (tmp_path / "a").mkdir()
    for name in ("train.csv", "dev.csv"):
        (tmp_path / "a" / name).write_text(rows)

    def config(d):
        c = glue_config("sst2", task[0], "")
        c.task, c.data.text_columns = "files", "text"
        c.data.train_file, c.data.validation_file = str(d / "train.csv"), str(d / "dev.csv")
        return c

    wd = tmp_path / "run"
    (wd / "checkpoints" / "3").mkdir(parents=True)
    trainer.record_config(str(wd), config(tmp_path / "a"), 0, finetune_settings.run_stream(config(tmp_path / "a"),
                                                                             tasks.resolve(config(tmp_path / "a"))))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    finetune_settings.check_same_run(str(wd), config(tmp_path / "b"))
    _resume_check(wd, config(tmp_path / "b"))
    (tmp_path / "b" / "dev.csv").write_text(rows + "fine film,pos\n")
    a, b = tmp_path / "a" / "dev.csv", tmp_path / "b" / "dev.csv"
    with pytest.raises(sj.errors.InputError, match=rf"holds the fine-tuning run of data.validation_file '{a}', not "
                                                   rf"'{b}' \(it holds other data than the run recorded\): use"):
        finetune_settings.check_same_run(str(wd), config(tmp_path / "b"))


def test_a_changed_list_in_a_resume_refusal_is_cut_to_its_first_items():
    """A label column read as texts (the text and label columns swapped on resume) names its first 8 labels and
    their number, not every text on one line."""
    labels = [f"review {i}" for i in range(64)]
    (line,) = trainer.stream_changes({"task labels": ["neg", "pos"]}, {"task labels": labels})
    assert line == ('task labels changed since the run began (["neg", "pos"] -> ["review 0", "review 1", "review 2", '
                    '"review 3", "review 4", "review 5", "review 6", "review 7", ... (64 in all)])')


def test_a_model_directorys_identity_is_its_model_files_named_one_by_one(tmp_path):
    """init_from and a teacher are compared on resume by the files that make the model: predictions or a README
    written beside it are none of them (any new file blocked the resume, naming no file); a changed, added or
    removed model file is named. A directory recorded before its identity named its files is compared by path."""
    d = tmp_path / "m"
    d.mkdir()
    for name, text in (("config.json", "{}"), ("params.safetensors", "w"), ("vocab.txt", "[PAD]\n")):
        (d / name).write_text(text)
    old = trainer.source_identity(str(d))
    assert sorted(old["files"]) == ["config.json", "params.safetensors", "vocab.txt"]
    (d / "predictions.jsonl").write_text("{}\n")
    (d / "README.md").write_text("notes")
    assert trainer.stream_changes({"config.init_from": old}, {"config.init_from": trainer.source_identity(str(d))}) \
        == []
    (d / "config.json").write_text('{"hidden_size": 8}')
    (d / "task.json").write_text("{}")
    (d / "vocab.txt").unlink()
    assert trainer.stream_changes({"config.init_from": old}, {"config.init_from": trainer.source_identity(str(d))}) \
        == [f"config.init_from {d} changed since the run began (config.json changed, task.json added, vocab.txt "
            "removed)"]
    legacy = {k: v for k, v in old.items() if k != "files"} | {"sha256": "0" * 64}  # every file hashed, as before
    assert trainer.stream_changes({"config.init_from": legacy}, {"config.init_from": trainer.source_identity(str(d))}) \
        == []


def test_a_saved_datasets_identity_is_its_data_too_through_links(tmp_path):
    """hf:DIR (save_to_disk's layout): new rows under the old metadata (an .arrow file copied over), or a split's
    directory linked to other rows, resumed without a word when only the JSON metadata was hashed, and os.walk did
    not follow the link. datasets' cache files of a later map() are none of the data; a record made before the
    identity named its files is compared by its spec."""
    rows, other = tmp_path / "rows", tmp_path / "other"
    for d, data in ((rows, b"arrow rows"), (other, b"arrow other")):
        d.mkdir()
        (d / "data-00000-of-00001.arrow").write_bytes(data)
        (d / "state.json").write_text('{"_fingerprint": "f"}')
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "dataset_dict.json").write_text('{"splits": ["train"]}')
    os.symlink(rows, saved / "train")
    spec = f"hf:{saved}:train"
    old = trainer.source_identity(spec)
    assert sorted(old["files"]) == ["dataset_dict.json", "train/data-00000-of-00001.arrow", "train/state.json"]
    (rows / "cache-0a1b.arrow").write_bytes(b"a later map")
    (saved / "README.md").write_text("notes")  # beside the splits, and another split saved again: not train's rows
    (saved / "test").mkdir()
    (saved / "test" / "data-00000-of-00001.arrow").write_bytes(b"test rows")
    assert trainer.stream_changes({"config.data.train_file": old},
                                  {"config.data.train_file": trainer.source_identity(spec)}) == []
    os.unlink(saved / "train")
    os.symlink(other, saved / "train")
    assert trainer.stream_changes({"config.data.train_file": old},
                                  {"config.data.train_file": trainer.source_identity(spec)}) == [
        f"config.data.train_file {spec} changed since the run began (train/data-00000-of-00001.arrow changed)"]
    legacy = {k: v for k, v in old.items() if k != "files"}
    assert trainer.stream_changes({"config.data.train_file": legacy},
                                  {"config.data.train_file": trainer.source_identity(spec)}) == []


def test_a_tfds_datasets_identity_is_its_prepared_files_under_tfds_data_dir(tmp_path, monkeypatch):
    """tfds:NAME read from another $TFDS_DATA_DIR (other rows by the same name) resumed on the spec alone; the same
    files under another directory are the same data."""
    for root, data in (("a", b"rows"), ("b", b"other rows"), ("c", b"rows")):
        d = tmp_path / root / "imdb_reviews" / "plain_text" / "1.0.0"
        d.mkdir(parents=True)
        (d / "imdb_reviews-train.tfrecord-00000-of-00001").write_bytes(data)
    spec = "tfds:imdb_reviews:train"
    identity = {}
    for root in "abc":
        monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / root))
        identity[root] = trainer.source_identity(spec)
    key = "config.data.train_file"
    assert trainer.stream_changes({key: identity["a"]}, {key: identity["b"]}) == [
        f"{key} {spec} changed since the run began (plain_text/1.0.0/imdb_reviews-train.tfrecord-00000-of-00001 "
        "changed)"]
    assert trainer.stream_changes({key: identity["a"]}, {key: identity["c"]}) == []
    # a version named (tfds:NAME/CONFIG:VERSION) is that version's directory: its files were none (glue/sst2:1.0.0 is
    # no directory), so other rows resumed
    spec = "tfds:imdb_reviews/plain_text:1.0.0:train"
    for root in "ab":
        monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / root))
        identity[root] = trainer.source_identity(spec)
    assert identity["a"]["files"] and trainer.stream_changes({key: identity["a"]}, {key: identity["b"]}) == [
        f"{key} {spec} changed since the run began (imdb_reviews-train.tfrecord-00000-of-00001 changed)"]


def test_a_data_file_saved_again_with_other_line_ends_is_the_same_data(tmp_path):
    """A training file saved again with CRLF line ends, a byte-order mark or no end to its last line holds the rows it
    held, as every reader reads it: a resume takes it (it was refused as changed data). Other bytes still change the
    data; a record made before identities held the text's sha256 compares the bytes alone."""
    f = tmp_path / "train.csv"
    f.write_bytes(b"text,label\ngood film,pos\nbad film,neg\n")
    old = trainer.source_identity(str(f))
    f.write_bytes(b"\xef\xbb\xbftext,label\r\ngood film,pos\r\nbad film,neg\r\n")
    new = trainer.source_identity(str(f))
    assert new["sha256"] != old["sha256"] and new["text_sha256"] == old["text_sha256"]
    assert list(tasks.read_rows(str(f))) == [(2, {"text": "good film", "label": "pos"}),
                                            (3, {"text": "bad film", "label": "neg"})]
    assert trainer.stream_changes({"config.data.train_file": old}, {"config.data.train_file": new}) == []
    f.write_bytes(b"text,label\ngood film,pos\nbad film,neg")
    assert trainer.source_identity(str(f))["text_sha256"] == old["text_sha256"]
    legacy = {k: v for k, v in old.items() if k != "text_sha256"}
    assert trainer.stream_changes({"config.data.train_file": legacy}, {"config.data.train_file": new})
    for changed in (b"text,label\r\ngood film,neg\r\nbad film,neg\r\n", b"text,label\rgood film,pos\rbad film,neg\r"):
        f.write_bytes(changed)  # a label changed; lone CRs (lines the readers refuse)
        assert trainer.stream_changes({"config.data.train_file": old},
                                      {"config.data.train_file": trainer.source_identity(str(f))}), changed


def test_a_resume_of_a_files_task_checks_its_files_columns_and_label_names(task, tmp_path):
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    rows = ["text,label"] + [f"{w} x y,{'pos' if i % 2 else 'neg'}" for i, w in enumerate(VOCAB[5:25])]
    train.write_text("\n".join(rows) + "\n")
    dev.write_text("\n".join(rows[:9]) + "\n")

    def cfg(data=None):
        c = glue_config("files", task[0], "")
        c.data.train_file, c.data.validation_file, c.data.text_columns = str(train), str(dev), "text"
        for k, v in (data or {}).items():
            c.data[k] = v
        return c

    wd = tmp_path / "run"
    (wd / "checkpoints" / "6").mkdir(parents=True)
    trainer.record_config(str(wd), cfg(), 0, finetune_settings.run_stream(cfg(), tasks.resolve(cfg())))
    _resume_check(wd, cfg())
    with pytest.raises(sj.errors.InputError, match=r"^task labels changed since the run began "
                                                   r"\(\[\"neg\", \"pos\"\] -> \[\"pos\", \"neg\"\]\)"):
        _resume_check(wd, cfg(data={"labels": "pos,neg"}))
    _resume_check(wd, cfg(data={"labels": "neg,pos"}))  # the labels its file holds, named in their order: the same
    dev.write_text("\n".join(rows[:9] + ["extra x y,pos"]) + "\n")  # the dev file: the epochs' scores, the best
    with pytest.raises(sj.errors.InputError, match=rf"config.data.validation_file {re.escape(str(dev))} changed"):
        _resume_check(wd, cfg())
    dev.write_text("\n".join(rows[:9]) + "\n")
    train.write_text("\n".join(rows[:1] + [r.replace(",pos", ",tmp").replace(",neg", ",pos").replace(",tmp", ",neg")
                                            for r in rows[1:]]) + "\n")  # every label swapped
    with pytest.raises(sj.errors.InputError, match=rf"^config.data.train_file {re.escape(str(train))} changed since "
                                                   r"the run began \(sha256 "):
        _resume_check(wd, cfg())


def test_a_run_without_a_recorded_stream_resumes_with_a_warning(task, tmp_path, caplog):
    wd = tmp_path / "old"
    (wd / "checkpoints" / "3").mkdir(parents=True)
    (wd / "config_history.jsonl").write_text(json.dumps({"start_step": 0, "config": {"task": "sst2"}}) + "\n")
    with caplog.at_level("WARNING", logger="squeezebert_jax.trainer"):
        _resume_check(wd, _config(task))
    assert "records no training stream" in caplog.text


def test_a_killed_run_resumed_on_changed_data_is_refused_and_its_workdir_kept(task, tmp_path, monkeypatch, digest):
    """End to end: SIGTERM at step 2 leaves a checkpoint; the training file's labels are swapped; the rerun refuses
    before anything is loaded, naming the file, and changes nothing in the workdir."""
    import shutil

    data = tmp_path / "glue"
    shutil.copytree(task[1], data)
    write = reporting.MetricsWriter.write

    def write_and_signal(self, step, metrics):
        write(self, step, metrics)
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    wd = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(reporting.MetricsWriter, "write", write_and_signal)
        first = ft.finetune(glue_config("sst2", task[0], data, num_epochs=1, log_every=2, async_checkpoints=False),
                            str(wd))
    assert first["preempted"] and checkpointing.steps_on_disk(str(wd / "checkpoints")) == [2]
    assert trainer.read_config_history(str(wd))[0]["stream"]["config.batch_size"] == 16
    _swap_labels(data / "SST-2" / "train.tsv")
    before = digest(wd)
    monkeypatch.setattr(ft, "load_pretrained", lambda *a, **k: pytest.fail("a refused resume loaded the model"))
    with pytest.raises(sj.errors.InputError, match=r"SST-2/train.tsv changed since the run began \(sha256 "):
        ft.finetune(glue_config("sst2", task[0], data, num_epochs=1, log_every=2), str(wd))
    assert digest(wd) == before
    # the checkpoint holds the stream too: a history emptied (or moved away, as its damage message advises) still
    # finds the change
    (wd / "config_history.jsonl").write_text("")
    before = digest(wd)
    with pytest.raises(sj.errors.InputError, match=r"SST-2/train.tsv changed since the run began \(sha256 "):
        ft.finetune(glue_config("sst2", task[0], data, num_epochs=1, log_every=2), str(wd))
    assert digest(wd) == before


# -- The run's own logs, damaged ---------------------------------------------------------------------------------------

def _history_lines(n=2):
    return [json.dumps({"start_step": i, "config": {"task": "sst2"}}) for i in range(n)]


@pytest.mark.parametrize("content, message", [
    ((_history_lines()[0] + "\n").encode() + b'{"start_step": 3, "config": {"task": "sst\xe92"}}\n'
     + (_history_lines()[1] + "\n").encode(), r"config_history.jsonl:2:\d+: not UTF-8 text \(byte 0xe9\); the run's "
                                              r"config history is damaged: move it away"),
    ("\n".join(_history_lines() + ["[1, 2]", _history_lines()[0]]) + "\n",
     r"config_history.jsonl:3: a list, not a JSON object; the run's config history is damaged"),
    ("\n".join([_history_lines()[0], '{"start_step": 1, "conf', _history_lines()[1]]) + "\n",
     r"config_history.jsonl:2: not a JSON object \(Unterminated string starting at, column 19\); the run's config "
     r"history is damaged"),
    ("\n".join(_history_lines() + ['{"start_step": 4}']) + "\n",
     r"config_history.jsonl:3: a row without the start's config"),
])
def test_a_damaged_config_history_is_one_line_naming_file_and_line(task, tmp_path, content, message):
    wd = tmp_path / "run"
    wd.mkdir()
    path = wd / "config_history.jsonl"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(sj.errors.InputError, match=message) as e:
        ft.finetune(_config(task), str(wd))
    assert "\n" not in str(e.value) and str(path) in str(e.value)


@pytest.mark.parametrize("tail, why", [(b'{"start_step": 9, "config": {"ta', "not JSON"),
                                       (b'{"start_step": 9, "config": {"task": "\xc3', "a character cut in two"),
                                       (b"\x00\x00\x00", "NUL bytes, as a crash leaves a file padded")])
def test_a_history_line_torn_by_a_crash_is_dropped_with_a_warning_and_mended(tmp_path, caplog, tail, why):
    path = tmp_path / "config_history.jsonl"
    good = "".join(line + "\n" for line in _history_lines())
    path.write_bytes(good.encode() + tail)
    with caplog.at_level("WARNING", logger="squeezebert_jax.reporting"):
        assert [r["start_step"] for r in trainer.read_config_history(str(tmp_path))] == [0, 1]
    assert f"config_history.jsonl:3: the last line is cut short ({why};" in caplog.text
    import ml_collections

    trainer.record_config(str(tmp_path), ml_collections.ConfigDict({"task": "sst2"}), 5)
    assert path.read_text().startswith(good) and path.read_bytes().endswith(b"\n")  # the torn line gone, not glued
    assert [r["start_step"] for r in trainer.read_config_history(str(tmp_path))] == [0, 1, 5]


def test_damaged_metrics_and_config_json_are_named_and_a_torn_metrics_row_dropped(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 2, "loss": 1.0}\n{"step": 4, "lo\xffss": 1.0}\n{"step": 6, "loss": 1.0}\n')
    with pytest.raises(sj.errors.InputError, match=r"metrics.jsonl:2:\d+: not UTF-8 text \(byte 0xff\); the run's "
                                                   r"metrics log is damaged: move it away"):
        reporting.MetricsWriter(str(tmp_path)).drop_after(4)
    with pytest.raises(sj.errors.InputError, match=r"metrics.jsonl:2:"):
        reporting.read_metrics(str(tmp_path))
    path.write_bytes(b'{"step": 2, "loss": 1.0}\n{"step": 4, "loss": 1.0}\n{"step": 6, "lo')
    with caplog.at_level("WARNING", logger="squeezebert_jax.reporting"):
        assert reporting.MetricsWriter(str(tmp_path)).drop_after(4) == 0
    assert "metrics.jsonl:3: the last line is cut short" in caplog.text
    assert [r["step"] for r in reporting.read_metrics(str(tmp_path))] == [2, 4] and path.read_bytes().endswith(b"\n")
    # a line cut short mid-file (not the last: a damaged log, not a crash's torn tail) is named at its column, not 1
    path.write_text('{"step": 2, "loss": 1.0}\n{"step": 8, "loss": \n{"step": 9, "loss": 1.0}\n')
    with pytest.raises(sj.errors.InputError, match=r"metrics.jsonl:2: not a JSON object \(Expecting value, column "
                                                   r"21\); the run's metrics log is damaged"):
        reporting.read_metrics(str(tmp_path))
    path.write_text('{"step": 2}\n{"loss": 1.0}\n')
    with pytest.raises(sj.errors.InputError, match=r'metrics.jsonl:2: a metrics row without an integer step \(no key '
                                                   r'"step"\)'):
        reporting.MetricsWriter(str(tmp_path)).drop_after(4)
    path.write_text('{"step": 2}\n{"step": null, "loss": true}\n')
    with pytest.raises(sj.errors.InputError, match=r"metrics.jsonl:2: a metrics row without an integer step \(null\)"):
        reporting.MetricsWriter(str(tmp_path)).drop_after(4)

    import ml_collections

    (tmp_path / "config.json").write_bytes(b'{"task": "sst\xe92"}')
    with pytest.raises(sj.errors.InputError, match=r"config.json:1:\d+: not UTF-8 text \(byte 0xe9\); the run's config "
                                                   r"file is damaged: move it away"):
        trainer.record_config(str(tmp_path), ml_collections.ConfigDict({"task": "sst2"}), 0)


# -- num_devices against the devices there are ---------------------------------------------------------------------

@pytest.mark.parametrize("value, message", [
    (9, r"^config.num_devices=9: more devices than there are \(8 devices \(cpu\)\); set config.num_devices <= 8, "
        r"or 0 for all of them$"),
    (-1, r"^config.num_devices=-1: an integer >= 0 \(0: all devices\)$"),
])
def test_num_devices_beyond_the_host_is_refused_before_anything_is_written(task, tmp_path, value, message):
    with pytest.raises(sj.errors.InputError, match=message):
        ft.finetune(_config(task, num_devices=value), str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_a_damaged_lock_file_is_no_owner(tmp_path):
    """``.lock`` is the run's own JSON too: bytes that are not UTF-8 or not JSON read as no holder
    (``files.read_lock``), so the directory is taken, not a traceback."""
    from squeezebert_jax import files

    wd = tmp_path / "run"
    wd.mkdir()
    for damage in (b'{"what": "fine-tuning", "pid": \xff}', b'{"what": "fine-t', b"[1, 2]"):
        (wd / files.LOCK_NAME).write_bytes(damage)
        assert files.read_lock(wd) == {}
        assert files.check_run_dir(wd, "fine-tuning") == str(wd)
        with files.RunLock(wd, "fine-tuning"):
            assert files.read_lock(wd)["what"] == "fine-tuning"
    # a pid that is no process id (-1: os.kill takes it as every process; one past a C long: OverflowError) holds
    # nothing: the lock is taken over with a warning, not refused nor a traceback
    import socket

    for pid in (-1, 0, 10 ** 20, True):
        (wd / files.LOCK_NAME).write_text(json.dumps({"what": "fine-tuning", "pid": pid, "host": socket.gethostname()}))
        with files.RunLock(wd, "fine-tuning"):
            assert files.read_lock(wd)["pid"] == os.getpid()


def test_a_stop_at_step_past_the_runs_end_is_refused(task, tmp_path):
    """stop_at_step=10**9 never stopped the run, silently (pretraining refuses it in its validator; fine-tuning's run
    length is known once its rows are read, so it is refused there, before any step or checkpoint)."""
    with pytest.raises(sj.errors.InputError, match=r"^config.stop_at_step=1000000000: past the run's end at step 12 "
                                                   r"\(2 epochs of 6 steps\), so it would never stop early"):
        ft.finetune(_config(task, stop_at_step=10 ** 9), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()  # nothing written


def test_a_distillation_cache_dir_is_never_a_model_nor_a_runs_checkpoints(tmp_path):
    """config.distill.cache_dir was never checked: the teacher's logits were written into the teacher's MODEL_DIR or
    another run's checkpoints/. Refused before anything is written, as a workdir is; a transfer_text of another type
    was a TypeError."""
    from conftest import tiny_init

    model = tiny_init(tmp_path / "teacher", VOCAB)
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / "config_history.jsonl").write_text("{}\n")
    c = glue_config("files", str(model), "data")
    c.distill.teacher = str(model)
    for cache, msg in ((model, r"holds a model \(config.json, params.safetensors\): the teacher's logits there"),
                       (other / "checkpoints" / "t", r"is inside the checkpoints directory of the run in"),
                       (model / "cache", r"is inside the model directory"),
                       (other / "tb" / "t", r"is inside tb/ of the training run in"),
                       (other, r"is the directory of a training run")):
        c.distill.cache_dir = str(cache)
        with pytest.raises(sj.errors.InputError, match=rf"^config.distill.cache_dir {cache} {msg}"):
            finetune_settings.check_workdir(c, str(tmp_path / "run"))
    c.distill.cache_dir = str(tmp_path / "shared_cache")  # a cache of one's own, shared by runs
    assert finetune_settings.check_workdir(c, str(tmp_path / "run")) == str(tmp_path / "run")
    with c.distill.ignore_type():
        c.distill.transfer_text = 3
    with pytest.raises(sj.errors.InputError, match=r"^config.distill.transfer_text=3: text files' paths"):
        finetune_settings.check_workdir(c, str(tmp_path / "run"))
