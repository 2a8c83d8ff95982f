"""Issue 26, as a user meets it: one run per directory (the lock), nothing replaced without --overwrite, odd paths
named, a full disk as one line with nothing lost, a resume on other data refused, settings and override paths checked
before any work, text files with no usable line breaks warned about or refused. Each CLI case checks the exit status,
the one line on stderr and digests of what was on disk before and after."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import uuid

import pytest
from conftest import ROOT, VOCAB, losses, tiny_init, write_sst2
from test_pretrain_robust import tiny_config

from squeezebert_jax import cli, corpus, errors, files, pretrain, pretrain_data
from squeezebert_jax.tokenizer import Tokenizer

PRETRAIN = os.path.join(ROOT, "train", "pretrain.py")
FINETUNE = os.path.join(ROOT, "train", "finetune.py")
SMOKE = os.path.join(ROOT, "train", "configs", "pretrain.py") + ":smoke"
GOOD = "Anna found a key .\nShe took it home .\n\nBen ran to the park .\nThe dog ran too .\n"


def script(path, *argv):
    """A training script in its own process, as a user runs it (absl flags): (exit status, stdout, stderr)."""
    r = subprocess.run([sys.executable, path, *map(str, argv)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return r.returncode, r.stdout, r.stderr


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# -- One run per directory ----------------------------------------------------------------------------------------

def test_a_second_holder_is_refused_naming_the_first_and_the_lock_marks_the_end(tmp_path):
    with files.RunLock(tmp_path / "wd", "pretraining"):
        with pytest.raises(errors.InputError) as e:
            files.RunLock(tmp_path / "wd", "fine-tuning").acquire()
        assert f"pid {os.getpid()} on {socket.gethostname()}" in str(e.value)
        assert "in use by a running pretraining" in str(e.value)
        (tmp_path / "wd" / "metrics.jsonl").write_text("{}\n")  # the run wrote something: its lock stays
    info = files.read_lock(tmp_path / "wd")
    assert info["what"] == "pretraining" and info["pid"] == os.getpid() and "ended" in info
    with files.RunLock(tmp_path / "wd", "pretraining"):  # a finished run's lock is free: no warning, no refusal
        pass


def test_a_run_that_writes_nothing_leaves_no_lock_nor_the_directory_it_made(tmp_path):
    with pytest.raises(RuntimeError):
        with files.RunLock(tmp_path / "new", "pretraining"):
            raise RuntimeError("refused")
    assert not (tmp_path / "new").exists()


def test_a_dead_holders_lock_on_this_host_is_taken_over_with_a_warning(tmp_path, caplog):
    wd = tmp_path / "wd"
    wd.mkdir()
    pid = dead_pid()
    (wd / files.LOCK_NAME).write_text(json.dumps({"what": "pretraining", "pid": pid, "host": socket.gethostname(),
                                                  "started": "2026-01-01T00:00:00"}))
    with caplog.at_level(logging.WARNING), files.RunLock(wd, "pretraining"):
        assert files.read_lock(wd)["pid"] == os.getpid()
    assert f"no longer running (pid {pid} on {socket.gethostname()}" in caplog.text


def test_a_lock_from_another_host_is_refused_naming_the_file_to_delete(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    before = json.dumps({"what": "pretraining", "pid": 4242, "host": "tpu-host-7", "started": "2026-01-01T00:00:00"})
    (wd / files.LOCK_NAME).write_text(before)
    with pytest.raises(errors.InputError, match=r"pid 4242 on tpu-host-7.*delete that file"):
        files.RunLock(wd, "pretraining").acquire()
    assert (wd / files.LOCK_NAME).read_text() == before


def test_the_scripts_refuse_a_directory_in_use_in_one_line_and_change_nothing(tmp_path, run_cli, digest):
    """pretrain.py and finetune.py on a workdir, prepare_data.py on an --out that another run holds."""
    init = tiny_init(tmp_path / "init", VOCAB)
    write_sst2(tmp_path / "glue", n_train=16, n_dev=8)
    vocab = corpus.write_demo_vocab(tmp_path / "vocab.txt")
    (tmp_path / "ok.txt").write_text(GOOD)
    for name, log in (("pre", "log.txt"), ("ft", "log.txt"), ("prep", "prepare_log.txt")):
        (tmp_path / name).mkdir()
        (tmp_path / name / log).write_text("an earlier start\n")
    with files.RunLock(tmp_path / "pre", "pretraining"), files.RunLock(tmp_path / "ft", "fine-tuning"), \
            files.RunLock(tmp_path / "prep", "data preparation", logs=("prepare_log.txt",)):
        before = digest(tmp_path / "pre", tmp_path / "ft", tmp_path / "prep")
        rc, _, err = script(PRETRAIN, "--config", SMOKE, "--workdir", tmp_path / "pre", "--config.num_devices=1")
        assert rc == 1 and f"in use by a running pretraining (pid {os.getpid()}" in one_error_line(err)
        rc, _, err = script(FINETUNE, "--config", os.path.join(ROOT, "train", "configs", "glue.py") + ":sst2",
                            "--config.init_from", init, "--config.data_dir", tmp_path / "glue",
                            "--workdir", tmp_path / "ft")
        assert rc == 1 and f"in use by a running fine-tuning (pid {os.getpid()}" in one_error_line(err)
        rc, _, err = run_cli("train/prepare_data.py", "--input", tmp_path / "ok.txt", "--vocab", vocab,
                             "--out", tmp_path / "prep")
        assert rc == 1 and f"in use by a running data preparation (pid {os.getpid()}" in one_error_line(err)
        after = digest(tmp_path / "pre", tmp_path / "ft", tmp_path / "prep")
        for log in (tmp_path / "pre" / "log.txt", tmp_path / "ft" / "log.txt"):  # the refusal is logged there too
            assert after.pop(str(log)) != before.pop(str(log)) and "in use by" in log.read_text()
        assert after == before


# -- Run directories: odd paths, another job's, a user's files --------------------------------------------------

def test_odd_workdirs_are_named_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "checkpoints").write_text("not a directory")
    cases = [("", "--workdir is empty"), (str(a_file), "is an existing file, not a directory"),
             (str(a_file / "run"), "notes.txt is a file, not a directory"),
             (str(tmp_path / "ck"), "checkpoints is a file, not the run's checkpoint directory"),
             ("gs://bucket/run", "URL workdirs")]
    for wd, msg in cases:
        with pytest.raises(errors.InputError, match=msg):
            pretrain.train_and_evaluate(tiny_config(), wd)
    assert sorted(os.listdir(tmp_path)) == ["ck", "notes.txt"]  # no log.txt, no ./gs:, nothing made


def test_a_read_only_directory_is_named_before_any_work(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("mounting a read-only tmpfs is not permitted here")
    try:
        for check in (lambda: files.check_output_file(ro / "model.ptl"), lambda: files.check_output_dir(ro / "out"),
                      lambda: files.check_run_dir(ro / "run", "pretraining")):
            with pytest.raises(errors.InputError, match=rf"{ro} cannot be written"):
                check()
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_a_model_dir_or_another_jobs_workdir_is_not_a_run_directory(tmp_path):
    """A MODEL_DIR given as a pretraining workdir (its vocab.txt would be replaced by the demo's), a pretraining
    workdir given to fine-tuning: refused, naming what is there; --overwrite writes into the first."""
    model = tiny_init(tmp_path / "model", VOCAB)
    with pytest.raises(errors.InputError, match=r"already holds files of no pretraining run \(config.json, "
                                                r"params.safetensors, vocab.txt\).*--overwrite"):
        pretrain.check_workdir(tiny_config(), str(model))
    assert pretrain.check_workdir(tiny_config(), str(model), overwrite=True) == str(model)
    with files.RunLock(tmp_path / "pre", "pretraining"):
        (tmp_path / "pre" / "config_history.jsonl").write_text("")
    with pytest.raises(errors.InputError, match=r"holds a pretraining run, not a fine-tuning one"):
        files.check_run_dir(tmp_path / "pre", "fine-tuning", overwrite=True)
    # a demo workdir killed while writing its data (no history yet) is the same run: accepted
    (tmp_path / "demo_wd" / "data").mkdir(parents=True)
    assert pretrain.check_workdir(tiny_config(), str(tmp_path / "demo_wd"))


def test_damaged_run_and_model_files_are_named(tmp_path):
    from squeezebert_jax import pretrained, trainer

    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(errors.InputError, match=r"config.json: not valid JSON .*move it away"):
        trainer.record_config(str(tmp_path), tiny_config(), 0)
    model = tiny_init(tmp_path / "model", VOCAB)
    os.remove(model / "params.safetensors")
    with pytest.raises(FileNotFoundError, match=r"params.safetensors: no such file; .* whose weights are missing"):
        pretrained.load_pretrained(model)


# -- A full disk --------------------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 4 MB at ``tmp_path/disk`` (root only; skipped where mounting is not permitted)."""
    d = tmp_path / "disk"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    yield d
    subprocess.run(["umount", str(d)], check=True)


def fill(disk, leave: int = 0):
    """Fill ``disk`` up to ``leave`` bytes free (a filler file; delete it to free the space)."""
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


def test_prepare_data_on_a_full_disk_is_one_line_leaves_no_temp_files_and_the_rerun_works(tmp_path, small_disk,
                                                                                           run_cli):
    text = tmp_path / "corpus.txt"
    corpus.write_corpus(text, num_docs=1500, seed=0)  # ~400 KB of text: shards larger than the space left
    vocab = corpus.write_demo_vocab(tmp_path / "vocab.txt")
    filler = fill(small_disk, leave=60_000)
    out = small_disk / "prepared"
    rc, _, err = run_cli("train/prepare_data.py", "--input", text, "--vocab", vocab, "--out", out, "--num_shards", 2)
    line = one_error_line(err)
    assert rc == 1 and "no space left on the device writing" in line and str(out) in line, line
    assert "run the same command again" in line
    assert not [f for f in os.listdir(out) if f.startswith(".tmp") or f.startswith("shard-")]
    os.remove(filler)
    rc, out_text, err = run_cli("train/prepare_data.py", "--input", text, "--vocab", vocab, "--out", out,
                                "--num_shards", 2)  # the same command, no --overwrite needed
    assert rc == 0, err
    assert json.loads(out_text[out_text.index("{"):])["num_docs"] == pretrain_data.load_meta(out)["num_docs"] > 0


def test_a_full_disk_at_a_checkpoint_is_one_line_keeps_the_last_one_and_the_rerun_finishes(small_disk):
    """Through train/pretrain.py: the smoke run checkpoints step 2, the disk fills, the rerun fails saving step 4 (one
    line, exit 1, no screen of orbax / asyncio tracebacks; step 2 intact); with the space freed the same command
    resumes at step 2 and finishes, each step's metrics once."""
    wd = small_disk / "run"
    argv = ("--config", SMOKE, "--workdir", wd, "--config.num_devices=1")
    rc, out, err = script(PRETRAIN, *argv, "--config.stop_at_step=2")
    assert rc == 0 and "checkpoint of step 2 saved" in out, err[-3000:]
    filler = fill(small_disk, leave=120_000)  # room for the logs and metrics, not for a checkpoint (~420 KB)
    rc, out, err = script(PRETRAIN, *argv)
    line = one_error_line(err)
    assert rc == 1 and "no space left on the device writing" in line and str(wd) in line, line
    assert "Traceback" not in err and "Event loop is closed" not in err and len(err.splitlines()) < 15, err
    assert sorted(n for n in os.listdir(wd / "checkpoints") if n.isdigit()) == ["2"]
    os.remove(filler)
    rc, out, err = script(PRETRAIN, *argv)
    assert rc == 0 and "resuming from the checkpoint at step 2" in out and "model saved" in out, err[-3000:]
    assert sorted(losses(wd)) == [2, 4, 6, 8]


def test_a_disk_error_line_names_the_path_from_any_library(tmp_path):
    import errno

    orbax_like = ValueError('RESOURCE_EXHAUSTED: Error writing "x" at local file "/data/run/checkpoints/400.orbax-'
                            'checkpoint-tmp/state/d/abc": No space left on device')
    assert cli.disk_error_line(orbax_like).startswith("no space left on the device writing /data/run/checkpoints: ")
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded", "/home/u/run/metrics.jsonl")
        except OSError as inner:
            raise RuntimeError("the writer failed") from inner
    except RuntimeError as e:
        assert cli.disk_error_line(e).startswith("disk quota exceeded writing /home/u/run/metrics.jsonl")
    assert cli.disk_error_line(RuntimeError("a bug")) is None


# -- Resume checks what it resumes --------------------------------------------------------------------------------

def test_a_resume_on_data_prepared_again_is_refused_unless_told_to_start_the_data_over(tmp_path):
    wd = tmp_path / "run"
    pretrain.train_and_evaluate(tiny_config(stop_at_step=2), str(wd))
    ckpt = wd / "checkpoints"
    before = sorted(os.listdir(ckpt))
    shutil.rmtree(wd / "data")  # the demo data made again from fewer documents: other shards, the same vocabulary
    with pytest.raises(errors.InputError, match=r"changed since the checkpoint at step 2 .* its shards are not the "
                                                r"ones the checkpoint read .*data.start_over=True"):
        pretrain.train_and_evaluate(tiny_config(**{"data.demo_num_docs": 150}), str(wd))
    assert sorted(os.listdir(ckpt)) == before
    final = pretrain.train_and_evaluate(tiny_config(**{"data.demo_num_docs": 150, "data.start_over": True}), str(wd))
    assert final["preempted"] is False and sorted(json.loads(line)["step"] for line in open(wd / "metrics.jsonl")) \
        == [2, 4]

    other = tmp_path / "other"  # another vocabulary of the same size: refused even with start_over
    pretrain.train_and_evaluate(tiny_config(stop_at_step=2), str(other))
    vocab = (other / "data" / "vocab.txt").read_text().splitlines()
    vocab[-1], vocab[-2] = vocab[-2], vocab[-1]
    (other / "data" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    with pytest.raises(errors.InputError, match=r"another vocabulary \(token ids now mean other words\)"):
        pretrain.train_and_evaluate(tiny_config(**{"data.start_over": True}), str(other))


# -- Settings, override paths, text files -------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("dropout", 1.5, "config.dropout=1.5: a probability in [0, 1)"),
    ("distill.teacher_weight", 2.0, "config.distill.teacher_weight=2.0: a share in [0, 1]"),
    ("distill.hidden_weight", -1.0, "config.distill.hidden_weight=-1.0: a finite weight >= 0"),
    ("max_train_examples", -5, "config.max_train_examples=-5: an integer >= 0 (0: every row)"),
    ("preemption_sync_every", 0, "config.preemption_sync_every=0: an integer >= 1"),
    ("prune.target", 1.0, "config.prune.target=1.0: a sparsity in [0, 1)"),
    ("data.doc_stride", 0, "config.data.doc_stride=0: an integer >= 1"),
])
def test_finetuning_settings_are_checked_before_anything_loads(tmp_path, field, value, message):
    from conftest import glue_config

    from squeezebert_jax import finetune as ft

    c = glue_config("sst2", tmp_path / "no_model", tmp_path / "no_data")
    target, *rest = field.split(".")
    if rest:
        c[target][rest[0]] = value
    else:
        setattr(c, field, value)
    with pytest.raises(errors.InputError) as e:
        ft.finetune(c, str(tmp_path / "run"))
    assert str(e.value).startswith(message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, message", [
    ("--config.phases.0.num_steps=3", "--config.phases.0.num_steps: not a field path: write a list entry's index in "
                                      "brackets, --config.phases[0].num_steps"),
    ("--config.phases[5].num_steps=3", "--config.phases[5].num_steps: the config's list has no entry of that index"),
    ("--config.data.num_workers=-1", "config.data.num_workers=-1: an integer >= 0"),
])
def test_override_paths_and_values_are_one_line(tmp_path, override, message):
    rc, _, err = script(PRETRAIN, "--config", SMOKE, "--workdir", tmp_path / "run", override)
    assert rc in (1, 2) and message in one_error_line(err)
    assert not (tmp_path / "run").exists()


def test_lines_cut_at_max_line_chars_are_a_warning_and_a_file_with_no_line_breaks_is_refused(tmp_path, caplog):
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    (tmp_path / "long.txt").write_text(GOOD + "x" * 300 + "\n" + GOOD)
    with caplog.at_level(logging.WARNING):
        pretrain_data.prepare([str(tmp_path / "long.txt")], tok, tmp_path / "p", progress=False, max_line_chars=200)
    assert "long.txt: 1 line longer than max_line_chars (200) cut, losing 100 of its" in caplog.text
    (tmp_path / "mac.txt").write_bytes((GOOD * 40).replace("\n", "\r").encode())  # CR-only line ends
    with pytest.raises(errors.InputError, match=r"mac.txt: 1 line longer .*its lines end in CR alone .*refused"):
        pretrain_data.prepare([str(tmp_path / "mac.txt")], tok, tmp_path / "q", progress=False, max_line_chars=200)
    assert not (tmp_path / "q").exists()


def test_a_pipe_is_read_as_a_corpus_stream(tmp_path):
    tok = Tokenizer.from_file(corpus.write_demo_vocab(tmp_path / "vocab.txt"))
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"printf '{GOOD}' > '{fifo}'"])
    meta = pretrain_data.prepare([str(fifo)], tok, tmp_path / "p", num_shards=1, progress=False)
    writer.wait()
    assert meta["num_docs"] == 2


def test_a_duplicated_test_index_is_named_by_file_and_line(tmp_path):
    from squeezebert_jax import glue

    (tmp_path / "test.tsv").write_text("index\tsentence\n0\ta fine film\n1\ta bad film\n0\tagain\n")
    with pytest.raises(errors.InputError, match=r"test.tsv:4: index 0 appears twice \(also at line 2\)"):
        glue.read_glue_tsv(str(tmp_path / "test.tsv"), "sst2", "test")


def test_a_tokenizer_of_the_other_kind_is_not_left_beside_a_new_one(tmp_path, run_cli, digest):
    """A SentencePiece model trained into a MODEL_DIR holding vocab.txt: refused; with --overwrite the directory ends
    with the new tokenizer alone (Tokenizer.from_dir would otherwise go on reading the old vocab.txt)."""
    text = corpus.write_corpus(tmp_path / "corpus.txt", num_docs=300, seed=0)
    out = tmp_path / "model"
    out.mkdir()
    (out / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    before = digest(out)
    rc, _, err = run_cli("train/tokenizer.py", "--input", text, "--out", out, "--vocab_size", "150",
                         "--kind", "sentencepiece")
    assert rc == 1 and f"{out / 'vocab.txt'} already exists" in one_error_line(err) and digest(out) == before
    rc, _, err = run_cli("train/tokenizer.py", "--input", text, "--out", out, "--vocab_size", "150",
                         "--kind", "sentencepiece", "--overwrite")
    assert rc == 0, err
    assert "vocab.txt" not in os.listdir(out) and Tokenizer.from_dir(out).kind == "sentencepiece"
