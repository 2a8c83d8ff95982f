"""squeezebert_jax.files, as a user meets it through the scripts: one run per directory (files.RunLock), nothing
replaced without --overwrite, odd paths and other jobs' directories named (files.check_run_dir), a full disk as one line
with nothing lost, damaged run files named. Each CLI case checks the exit status, the one line on stderr and digests of
what was on disk before and after."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import uuid

import pytest
from conftest import ROOT, VOCAB, fill, one_error_line, run_script, tiny_config, tiny_init, write_sst2

from squeezebert_jax import (corpus, errors, files, finetune_settings, pretrain, pretrain_data, pretrain_settings,
                             pretrained)

PRETRAIN = os.path.join(ROOT, "train", "pretrain.py")
FINETUNE = os.path.join(ROOT, "train", "finetune.py")
SMOKE = os.path.join(ROOT, "train", "configs", "pretrain.py") + ":smoke"
GOOD = "Anna found a key .\nShe took it home .\n\nBen ran to the park .\nThe dog ran too .\n"


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


def test_a_lock_naming_its_job_or_host_as_no_text_is_no_holder(tmp_path):
    """A .lock whose job or host is no text is damaged, as one that is no JSON: no holder (it said "holds a
    ['fine-tuning'] run, not a fine-tuning one"); one naming another job says which file says so."""
    for body in ('{"what": ["fine-tuning"], "pid": 5}', '{"what": "fine-tuning", "host": 7}'):
        (tmp_path / ".lock").write_text(body)
        assert files.read_lock(tmp_path) == {} and files.check_run_dir(tmp_path, "fine-tuning") == str(tmp_path)
    (tmp_path / ".lock").write_text('{"what": "pretraining"}')
    with pytest.raises(errors.InputError, match=r"holds a pretraining run \(its .lock says so\), not a fine-tuning"):
        files.check_run_dir(tmp_path, "fine-tuning")


@pytest.mark.parametrize("kind", ["dangling link", "link to a file", "directory", "pipe"])
def test_a_lock_path_that_is_no_regular_file_is_one_line_for_either_lock(tmp_path, kind):
    """``OUT.lock`` or ``WORKDIR/.lock`` as a symbolic link to nothing (predict's claim retried for ever: a hang), a
    link, a directory or a named pipe (an OS message, or a read that blocks): one line naming the path and its kind,
    and nothing on disk changed."""
    made = {"dangling link": lambda p: os.symlink(tmp_path / "nowhere", p),
            "link to a file": lambda p: ((tmp_path / "other").write_text("x"), os.symlink(tmp_path / "other", p)),
            "directory": os.mkdir, "pipe": os.mkfifo}[kind]
    said = {"dangling link": f"a symbolic link to {tmp_path / 'nowhere'}, which does not exist",
            "link to a file": f"a symbolic link to {tmp_path / 'other'}", "directory": "a directory",
            "pipe": r"a named pipe \(FIFO\)"}[kind]
    (tmp_path / "wd").mkdir()
    made(str(tmp_path / "out.jsonl.lock"))
    if kind == "link to a file":
        os.symlink(tmp_path / "other", tmp_path / "wd" / ".lock")
    else:
        made(str(tmp_path / "wd" / ".lock"))
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "wd"))
    with pytest.raises(errors.InputError, match=rf"^{tmp_path / 'out.jsonl.lock'}: {said}, where --out "
                                                rf"{tmp_path / 'out.jsonl'}'s lock file goes .*; move it away"):
        with files.claim_output_file(tmp_path / "out.jsonl"):
            pass
    with pytest.raises(errors.InputError, match=rf"^{tmp_path / 'wd' / '.lock'}: {said}, where the fine-tuning in "
                                                rf"{tmp_path / 'wd'}'s lock file goes"):
        files.RunLock(tmp_path / "wd", "fine-tuning").acquire()
    assert files.read_lock(tmp_path / "wd") == {}  # a pipe is not read (the read would block)
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(tmp_path / "wd"))) == before


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
    (wd / f".tmp{pid}-abcd1234-shard-00000-of-00002.array_record").write_bytes(b"half")  # what it was writing
    (wd / f".tmp{pid + 1}-abcd1234-x").write_bytes(b"another process's")  # not the dead run's: kept
    with caplog.at_level(logging.WARNING), files.RunLock(wd, "pretraining"):
        assert files.read_lock(wd)["pid"] == os.getpid()
    assert f"no longer running (pid {pid} on {socket.gethostname()}" in caplog.text
    assert "removed the 1 temporary files it left" in caplog.text
    assert sorted(p.name for p in wd.iterdir() if p.name.startswith(".tmp")) == [f".tmp{pid + 1}-abcd1234-x"]


def test_a_command_writing_into_a_directory_never_holds_its_inputs_there(tmp_path):
    """``files.check_inputs_not_inside``: train/tokenizer.py and train/prepare_data.py write into --out (replacing
    and removing files there, --overwrite or not); a corpus at OUT/vocab.txt was replaced by the vocabulary trained
    on it. Refused before any work; an input beside --out is fine."""
    from squeezebert_jax.tokenizer import train_tokenizer

    (tmp_path / "t").mkdir()
    corpus = tmp_path / "t" / "vocab.txt"
    corpus.write_text("the cat sat on the mat\n" * 20)
    with pytest.raises(errors.InputError, match=rf"^{corpus} is an input inside --out {tmp_path / 't'}, which this "
                                                r"command writes into"):
        train_tokenizer([str(corpus)], str(tmp_path / "t"), 40, overwrite=True)
    assert corpus.read_text().startswith("the cat")
    files.check_inputs_not_inside(str(tmp_path / "out"), [str(corpus)])
    # nor into prepared data: its shards' token ids are the vocabulary's there (--overwrite replaced it)
    (tmp_path / "prep").mkdir()
    (tmp_path / "c.txt").write_text("the cat sat on the mat\n" * 20)
    for name in ("meta.json", "shard_00000.array_record", "vocab.txt"):
        (tmp_path / "prep" / name).write_text("{}")
    with pytest.raises(errors.InputError, match=rf"^--out {tmp_path / 'prep'} holds prepared data \(meta.json and "
                                                r"its shards\)"):
        train_tokenizer([str(tmp_path / "c.txt")], str(tmp_path / "prep"), 40, overwrite=True)
    assert (tmp_path / "prep" / "vocab.txt").read_text() == "{}"


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
        rc, _, err = run_script(PRETRAIN, "--config", SMOKE, "--workdir", tmp_path / "pre", "--config.num_devices=1")
        assert rc == 1 and f"in use by a running pretraining (pid {os.getpid()}" in one_error_line(err)
        rc, _, err = run_script(FINETUNE, "--config", os.path.join(ROOT, "train", "configs", "glue.py") + ":sst2",
                            "--config.init_from", init, "--config.data_dir", tmp_path / "glue",
                            "--workdir", tmp_path / "ft")
        assert rc == 1 and f"in use by a running fine-tuning (pid {os.getpid()}" in one_error_line(err)
        rc, _, err = run_cli("train/prepare_data.py", "--input", tmp_path / "ok.txt", "--vocab", vocab,
                             "--out", tmp_path / "prep")
        assert rc == 1 and f"in use by a running data preparation (pid {os.getpid()}" in one_error_line(err)
        after = digest(tmp_path / "pre", tmp_path / "ft", tmp_path / "prep")
        for log in (tmp_path / "pre" / "log.txt", tmp_path / "ft" / "log.txt", tmp_path / "prep" / "prepare_log.txt"):
            # the refusal is logged there too
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
             (str(tmp_path / "ck"), "checkpoints is a file, not the run's directory; move it away"),
             ("gs://bucket/run", "URL workdirs")]
    for wd, msg in cases:
        with pytest.raises(errors.InputError, match=msg):
            pretrain.train_and_evaluate(tiny_config(), wd)
    assert sorted(os.listdir(tmp_path)) == ["ck", "notes.txt"]  # no log.txt, no ./gs:, nothing made


def test_an_atomic_write_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    """As a shell's ``>``: the link stays a link (renaming over it made it a file and left the target as it was);
    a dangling link's target is created; no temp file is left in either directory."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.jsonl").write_text("old\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(tmp_path / "real" / "out.jsonl")
    files.atomic_write(link, "new\n")
    assert link.is_symlink() and (tmp_path / "real" / "out.jsonl").read_text() == "new\n"
    dangling = tmp_path / "later.jsonl"
    dangling.symlink_to(tmp_path / "real" / "later.jsonl")
    files.atomic_write(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "real" / "later.jsonl").read_bytes() == b"made"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["later.jsonl", "later.jsonl", "out.jsonl", "out.jsonl",
                                                            "real"]


def test_a_pipe_a_device_or_a_link_into_no_directory_is_never_an_output_file(tmp_path):
    """files.check_output_file (every --out) and files.atomic_write (every writer): a FIFO or /dev/null (or
    /dev/stdout on a terminal or a pipe) is refused before any work, --overwrite or not (replaced by a file, it would
    be gone: as root, /dev/null itself);
    a symlink whose target's directory does not exist is named before the work, not after it."""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for out, kind in ((fifo, "a named pipe"), ("/dev/null", "a character device")):
        with pytest.raises(errors.InputError, match=rf"^--out {out} is {kind}.*, not a regular file"):
            files.check_output_file(out, overwrite=True)
        with pytest.raises(errors.InputError, match=rf"{out} is {kind}.*it is never replaced"):
            files.atomic_write(out, "x\n")
    assert fifo.exists() and not fifo.is_file() and not os.path.isfile("/dev/null")
    link = tmp_path / "d.jsonl"
    link.symlink_to(tmp_path / "missing" / "x.jsonl")
    with pytest.raises(errors.InputError, match=rf"--out {link} is a link to .*missing/x.jsonl, whose directory does "
                                                r"not exist"):
        files.check_output_file(link, overwrite=True)
    # a link to a file yet to be written: where the output would go is said ("already exists" was), and --overwrite
    # writes through it
    link = tmp_path / "e.jsonl"
    link.symlink_to(tmp_path / "not_yet.jsonl")
    with pytest.raises(errors.InputError, match=rf"^--out {link} is a symbolic link to {tmp_path / 'not_yet.jsonl'}, "
                                                r"which does not exist: the output would be written there; pass "
                                                r"--overwrite"):
        files.check_output_file(link)
    assert files.check_output_file(link, overwrite=True) == str(link)
    # a link that leads back to itself, directly or through another: the write failed after the work (ELOOP)
    (tmp_path / "self.jsonl").symlink_to("self.jsonl")
    (tmp_path / "p.jsonl").symlink_to("q.jsonl")
    (tmp_path / "q.jsonl").symlink_to("p.jsonl")
    for looped in ("self.jsonl", "p.jsonl"):
        with pytest.raises(errors.InputError, match=rf"^--out {tmp_path / looped} is a link that leads back to "
                                                    r"itself; remove it"):
            files.check_output_file(tmp_path / looped, overwrite=True)
    assert files.has_text("a\ufffd") and not files.has_text("\ufffd \u200b")  # U+FFFD alone: BERT drops it
    assert not files.has_text("\u3164\uffa0\u115f\u1160\u2800")  # Hangul fillers, the Braille blank: nothing drawn
    # an output directory (a conversion's --out): an entry a write would go through is refused, --overwrite or not
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "config.json").write_text("{}")
    for entry, msg in ((lambda p: p.symlink_to(src / "config.json"), r"a link to .*src/config.json outside it"),
                       (os.mkfifo, r"a named pipe \(FIFO\), which a file written there would replace")):
        out.mkdir()
        (out / "sub").mkdir()
        entry(out / "sub" / "config.json")  # at any depth
        for overwrite in (False, True):
            with pytest.raises(errors.InputError, match=rf"^--out {out} holds {out}/sub/config.json, {msg}"):
                files.check_output_dir(out, src, overwrite)
        shutil.rmtree(out)
    assert (src / "config.json").read_text() == "{}"


def test_an_output_file_path_ending_in_a_slash_is_named_as_such(tmp_path):
    for out in (tmp_path / "new", tmp_path):  # a directory yet to make, or one there: never "new/.lock" in a message
        with pytest.raises(errors.InputError, match=rf"^--out {out}/ ends in '/', a directory's path; give the path"):
            files.check_output_file(f"{out}/")
    assert os.listdir(tmp_path) == []


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
    workdir given to fine-tuning: refused, naming what is there. --overwrite writes into a directory of other files,
    never into a model's (the run's config.json would replace the model's: it would load no more), by either
    trainer, and leaves the model as it was."""
    from conftest import glue_config

    model = tiny_init(tmp_path / "model", VOCAB)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    for overwrite in (False, True):
        with pytest.raises(errors.InputError, match=r"^--workdir .*model holds a model \(config.json, "
                                                    r"params.safetensors\): a pretraining run there would replace"):
            pretrain_settings.check_workdir(tiny_config(), str(model), overwrite=overwrite)
    c = glue_config("files", tmp_path / "other_model", "")
    with pytest.raises(errors.InputError, match=r"holds a model .*: a fine-tuning run there .*--overwrite or not"):
        finetune_settings.check_workdir(c, str(model), overwrite=True)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(errors.InputError, match=r"already holds files of no pretraining run \(a.txt\).*--overwrite"):
        pretrain_settings.check_workdir(tiny_config(), str(tmp_path / "notes"))
    assert pretrain_settings.check_workdir(tiny_config(), str(tmp_path / "notes"), overwrite=True)
    with files.RunLock(tmp_path / "pre", "pretraining"):
        (tmp_path / "pre" / "config_history.jsonl").write_text("")
    with pytest.raises(errors.InputError,
                       match=r"holds a pretraining run \(its .lock says so\), not a fine-tuning one"):
        files.check_run_dir(tmp_path / "pre", "fine-tuning", overwrite=True)
    # a demo workdir killed while writing its data (no history yet) is the same run: accepted
    (tmp_path / "demo_wd" / "data").mkdir(parents=True)
    assert pretrain_settings.check_workdir(tiny_config(), str(tmp_path / "demo_wd"))


def test_a_run_never_writes_over_its_inputs_even_with_overwrite(tmp_path):
    """``files.check_inputs_outside`` (the run-directory check of both trainers): a workdir that is init_from, or lies
    inside it, would replace the model's config.json and weights; init_from at WORKDIR/model would be replaced by the
    export, a test file at WORKDIR/predictions_test.jsonl by its own predictions. Refused with --overwrite too, and
    the model left as it was; an input in a folder of the workdir that no run writes, and a dataset split, are fine."""
    from conftest import glue_config

    from squeezebert_jax import finetune

    model = tiny_init(tmp_path / "model", VOCAB)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    c = glue_config("files", model, "")
    c.data.train_file, c.data.text_columns = str(tmp_path / "t.csv"), "text"
    (tmp_path / "t.csv").write_text("text,label\na good film,pos\na bad film,neg\n")
    for workdir, message in ((model, rf"^--workdir {model} is config.init_from {model}: a run never writes into what "
                                     r"it reads \(not even with --overwrite\)"),
                             (model / "sub", rf"^--workdir {model}/sub is inside config.init_from {model}")):
        with pytest.raises(errors.InputError, match=message):
            finetune.finetune(c, str(workdir), overwrite=True)
    # what each script runs before its log.txt (finetune.py wrote one)
    for check in (pretrain_settings.check_workdir, finetune_settings.check_workdir):
        config = tiny_config(init_from=str(model)) if check is pretrain_settings.check_workdir else c
        with pytest.raises(errors.InputError, match=rf"^--workdir {model} is config.init_from {model}: a run never"):
            check(config, str(model), overwrite=True)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    # a pretraining's workdir inside the prepared data it reads (its data/ and checkpoints among the shards)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    with pytest.raises(errors.InputError, match=rf"^--workdir {prepared}/run is inside config.data.path {prepared}"):
        pretrain_settings.check_workdir(tiny_config(**{"data.source": "prepared", "data.path": str(prepared)}),
                                        str(prepared / "run"))
    run = tmp_path / "run"
    for name, path, entry in (("data.test_file", run / "predictions_test.jsonl", "predictions_test.jsonl"),
                              ("init_from", run / "model", "model"),
                              ("data.train_file", run / "checkpoints" / "t.csv", "checkpoints")):
        inputs = {name: str(path)}
        with pytest.raises(errors.InputError, match=rf"^config.{name} {path} is in {run / entry}, which the run in "
                                                    rf"--workdir {run} writes \(not even --overwrite"):
            files.check_run_dir(run, "fine-tuning", overwrite=True, inputs=inputs)
    files.check_run_dir(run, "fine-tuning", inputs={"data.train_file": str(run / "mine" / "t.csv"),
                                                    "data.test_file": str(run / "data" / "t.csv"),  # no fine-tuning
                                                    "init_from": "", "data.validation_file": "hf:glue:validation"})


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
    assert not out.exists()  # the refused preparation's new --out (its log alone) taken away again, as it was
    os.remove(filler)
    rc, out_text, err = run_cli("train/prepare_data.py", "--input", text, "--vocab", vocab, "--out", out,
                                "--num_shards", 2)  # the same command, no --overwrite needed
    assert rc == 0, err
    assert json.loads(out_text[out_text.index("{"):])["num_docs"] == pretrain_data.load_meta(out)["num_docs"] > 0


@pytest.mark.parametrize("name", ["config.json", "metrics.jsonl", "config_history.jsonl", "model", "tb"])
def test_a_run_entry_of_the_wrong_kind_is_refused_before_the_run(tmp_path, name):
    """files.RUN_FILES and RUN_DIRS, by class: anything but a file where a run writes one (a directory, a pipe, a
    dangling link), or anything but a directory where it writes into one (a file: the export at the very end), is
    refused by check_run_dir before the run records a line (a config.json directory used to fail after
    config_history.jsonl had its row)."""
    want = "directory" if name in files.RUN_DIRS else "file"
    makers = [(os.mkfifo, r"a named pipe \(FIFO\)"),
              (lambda p: os.symlink(tmp_path / "nowhere", p), "a link to nothing")]
    makers.append((lambda p: p.write_text("x"), "a file") if want == "directory" else (os.mkdir, "a directory"))
    for make, kind in makers:
        wd = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
        wd.mkdir()
        make(wd / name)
        for what in ("pretraining", "fine-tuning"):
            with pytest.raises(errors.InputError, match=rf"^{wd / name} is {kind}, not the run's {want}; move it "
                                                        r"away or choose another --workdir$"):
                files.check_run_dir(wd, what, overwrite=True)
        assert sorted(os.listdir(wd)) == [name]


def test_result_files_are_standard_json_without_nan():
    """A score or loss that is not a number is written null in the result files (eval_results.json,
    final_metrics.json, a model's extra files, predictions): Python's json would write the bare word NaN, which strict
    readers (jq, JavaScript) refuse. Nested values too; numbers and booleans otherwise unchanged."""
    from squeezebert_jax.files import json_text

    nan, inf = float("nan"), float("inf")
    results = {"dev": {"pearson": nan, "spearman": 0.5, "loss": inf}, "runs": [1, True, -inf], "pair": (2.0, nan)}
    text = json_text(results, indent=2)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"dev": {"pearson": None, "spearman": 0.5, "loss": None}, "runs": [1, True, None],
                                "pair": [2.0, None]}

    def strict(constant):  # what a strict reader does with NaN and Infinity
        raise ValueError(constant)

    json.loads(text, parse_constant=strict)
    with pytest.raises(ValueError, match="NaN"):
        json.loads(json.dumps(results), parse_constant=strict)


def test_metrics_rows_are_standard_json_without_nan(tmp_path):
    """metrics.jsonl through reporting.MetricsWriter: a validation Pearson of a constant prediction (NaN) is written
    null, and a row an older version wrote with a bare NaN comes back null when a resume rewrites the file."""
    from squeezebert_jax import reporting

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": NaN}\n{"step": 9, "loss": 1.0}\n')
    writer = reporting.MetricsWriter(str(tmp_path))
    assert writer.drop_after(4) == 1
    writer.write(5, {"loss": 0.5, "validation/pearson": float("nan")})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert "NaN" not in "".join(lines)
    assert [json.loads(line) for line in lines] == [{"step": 1, "loss": None},
                                                     {"step": 5, "loss": 0.5, "validation/pearson": None}]


def test_on_off_environment_variables_read_as_people_write_them(monkeypatch):
    """files.env_switch / env_flag: SQUEEZEBERT_DEBUG=false turned tracebacks on (anything but "0" was on), and
    SQUEEZEBERT_AUTO_DISTRIBUTED=true was ignored (only "1" was on): each host trained alone."""
    from squeezebert_jax import cli, parallel
    from squeezebert_jax.errors import InputError
    from squeezebert_jax.files import env_flag, env_switch

    for value, on in (("1", True), ("true", True), (" Yes ", True), ("ON", True), ("0", False), ("false", False),
                      ("No", False), ("off", False), ("", False), ("maybe", None)):
        monkeypatch.setenv("SQB_PROBE", value)
        assert env_switch("SQB_PROBE") is on, value
    with pytest.raises(InputError, match=r"^SQB_PROBE='maybe': 1 or 0 \(or true/false, yes/no, on/off\)$"):
        env_flag("SQB_PROBE")
    monkeypatch.delenv("SQB_PROBE")
    assert env_switch("SQB_PROBE") is False and env_flag("SQB_PROBE") is False
    for value, debug in (("false", False), ("0", False), ("1", True), ("verbose", True)):
        monkeypatch.setenv(cli.DEBUG_ENV, value)
        assert cli.debug_requested([]) is debug, value
    monkeypatch.setenv("SQUEEZEBERT_AUTO_DISTRIBUTED", "sure")
    with pytest.raises(InputError, match=r"^SQUEEZEBERT_AUTO_DISTRIBUTED='sure': 1 or 0"):
        parallel.maybe_initialize_distributed()


def test_an_input_that_is_no_regular_file_is_named_as_what_it_is(tmp_path):
    """``files.check_input_file`` (predict's --input, distillation's transfer text) and the data-file check: a
    device such as /dev/null is named as one, not as a directory or a missing file."""
    from squeezebert_jax import tasks

    (tmp_path / "ok.txt").write_text("a\n")
    assert files.check_input_file(str(tmp_path / "ok.txt"), "") == str(tmp_path / "ok.txt")
    with pytest.raises(FileNotFoundError, match=rf"^--input {tmp_path}/no.txt: no such file"):
        files.check_input_file(str(tmp_path / "no.txt"), "--input ")
    for path, kind in ((tmp_path, "a directory"), ("/dev/null", "a character device")):
        with pytest.raises(errors.InputError, match=rf"^--input {path} is {kind}, not a file of inputs"):
            files.check_input_file(str(path), "--input ", " of inputs")
        with pytest.raises(errors.InputError, match=rf"^config.data.validation_file='{path}' is {kind}, not a data"):
            tasks._check_data_file(str(path), "config.data.validation_file", "classification")


def test_a_name_too_long_for_the_file_system_is_named_before_any_work(tmp_path):
    """Every output check (a file, a directory, a run's workdir) names a name past NAME_MAX (or one that leaves no
    room for the temporary and lock files written beside it), instead of an OSError after the work."""
    long = "c" * 240  # fits alone, not with ".tmpPID-HEX-" in front of it
    for check in (lambda p: files.check_output_file(p), lambda p: files.check_output_dir(p),
                  lambda p: files.check_run_dir(p, "fine-tuning")):
        with pytest.raises(errors.InputError, match=r"is 240 bytes, more than the 231 this file system allows there "
                                                    r"\(255 less 24 for the files written beside it\)"):
            check(str(tmp_path / long))
        with pytest.raises(errors.InputError, match=r"is 300 bytes, more than the 255"):
            check(str(tmp_path / ("d" * 300) / "out.jsonl"))
    assert files.check_output_file(str(tmp_path / ("c" * 200))) == str(tmp_path / ("c" * 200))


def test_an_output_directory_that_is_a_broken_link_is_named_before_any_work(tmp_path):
    """A --out or --workdir that is a link to nothing, or a loop of links: named before the work (makedirs used to
    fail on it after a conversion, "File exists")."""
    os.symlink(tmp_path / "nothing", tmp_path / "dangling")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    for check in (lambda p: files.check_output_dir(p), lambda p: files.check_run_dir(p, "fine-tuning")):
        with pytest.raises(errors.InputError, match=rf" {tmp_path}/dangling is a link to {tmp_path}/nothing, which "
                                                    r"does not exist"):
            check(str(tmp_path / "dangling"))
        with pytest.raises(errors.InputError, match=r"loop is a link that leads back to itself"):
            check(str(tmp_path / "loop"))


def test_no_command_writes_its_outputs_into_a_models_directory(tmp_path):
    """``files.check_output_dir`` (every script's output directory: compile.py's --hlo, the eval scripts' workdirs,
    bench_train's --profile, prepared data): a model's directory is refused, --overwrite or not; a model's own writer
    (a conversion, ``writes=None``) replaces a model with --overwrite."""
    model = tiny_init(tmp_path / "model", VOCAB)
    for overwrite in (False, True):
        with pytest.raises(errors.InputError, match=rf"^--hlo {model} holds a model \(config.json, "
                                                    r"params.safetensors\): the compiled programs there would "
                                                    r"replace or join its files"):
            files.check_output_dir(model, overwrite=overwrite, what="--hlo", writes="the compiled programs")
    with pytest.raises(errors.InputError, match=r"holds a model .*: this command's files there"):
        files.check_output_dir(model, overwrite=True)
    assert files.check_output_dir(model, overwrite=True, writes=None) == str(model)


def test_a_corpus_pattern_the_shell_did_not_expand_is_named_as_such(tmp_path):
    """A quoted --input 'dir/*.txt' arrives as itself: it said "a pattern that matched no file" where two did."""
    (tmp_path / "a.txt").write_text("x\n")
    (tmp_path / "b.txt").write_text("y\n")
    with pytest.raises(FileNotFoundError, match=r"a pattern the shell did not expand \(it was quoted\), which matches "
                                                r"2 files: leave it unquoted"):
        files.check_text_files([str(tmp_path / "*.txt")])
    with pytest.raises(FileNotFoundError, match=r"no such corpus file: a pattern that matched no file"):
        files.check_text_files([str(tmp_path / "*.md")])
    assert files.check_text_files([str(tmp_path / "a.txt")]) == [str(tmp_path / "a.txt")]
    # a device is no corpus: /dev/zero never ends (the tokenizer trainer read it until killed), a terminal waits
    with pytest.raises(errors.InputError, match=r"^/dev/zero is a character device, not a regular file or a pipe"):
        files.check_text_files(["/dev/zero"])
    os.mkfifo(tmp_path / "pipe")  # a pipe (<(zcat corpus.gz)) is read once, as a stream
    assert files.check_text_files([str(tmp_path / "pipe")]) == [str(tmp_path / "pipe")]


def test_no_command_writes_into_a_training_runs_directory(tmp_path):
    """A conversion's --out (a model's own writer) that is a fine-tuning run's workdir: its --overwrite replaced the
    run's config.json with the model's, leaving a directory that is neither. Refused for every command, --overwrite
    or not, the run recognised by its lock or its config history; a command's own job's directory is its to rewrite."""
    run, old = tmp_path / "run", tmp_path / "old"
    run.mkdir()
    old.mkdir()
    (old / "config_history.jsonl").write_text("{}\n")  # a finished run: its lock is gone, its history stays
    with files.RunLock(run, "fine-tuning"):  # a run going on
        for directory, kind in ((run, "fine-tuning"), (old, "training")):
            for writes in (None, "this command's files"):
                with pytest.raises(errors.InputError, match=rf"^--out {directory} is the directory of a {kind} run: "
                                                            r"its config, checkpoints and model are that run's"):
                    files.check_output_dir(directory, overwrite=True, writes=writes)
        assert files.check_output_dir(run, overwrite=True, job="fine-tuning") == str(run)


def test_nothing_is_written_inside_a_model_or_a_runs_checkpoints(tmp_path):
    """``files.refuse_nested``, for every output and run directory: inside a model's directory (a run there travelled
    with the model), or a run's checkpoints directory or below it (a fine-tuning run went there with --overwrite),
    however deep and through a link, --overwrite or not. Beside them, in the run's own directory, is fine."""
    model = tiny_init(tmp_path / "model", VOCAB)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config_history.jsonl").write_text("{}\n")
    os.symlink(run / "checkpoints", tmp_path / "ckpt_link")
    for target, msg in ((model / "sub", rf"is inside the model directory {model} \(config.json, "
                                        r"params.safetensors\)"),
                        (model / "a" / "b", r"is inside the model directory"),
                        (run / "checkpoints", rf"is the checkpoints directory of the run in {run}, which"),
                        (run / "checkpoints" / "x", rf"is inside the checkpoints directory of the run in {run}"),
                        (tmp_path / "ckpt_link" / "x", r"is inside the checkpoints directory")):
        with pytest.raises(errors.InputError, match=rf"^--workdir {target} {msg}"):
            files.check_run_dir(target, "fine-tuning", overwrite=True)
        with pytest.raises(errors.InputError, match=rf"^--out {target} {msg}"):
            files.check_output_dir(target, overwrite=True, writes=None)
    assert files.check_run_dir(run / "sweep_child", "fine-tuning") == str(run / "sweep_child")
    # an output file alike: predictions among a run's checkpoints (a step's name taken: the resume was blocked), or
    # inside another model's directory
    for target, msg in ((run / "checkpoints" / "4", r"is inside the checkpoints directory of the run in"),
                        (model / "preds.jsonl", r"is inside the model directory")):
        with pytest.raises(errors.InputError, match=rf"^--out {target} {msg}"):
            files.check_output_file(target)
    # a directory another job's run writes: its tb/ (a fine-tuning ran there), its model/ (a tokenizer trained into a
    # pretraining run's model/ before its export was replaced by the export); the run's own job may
    (run / ".lock").write_text('{"what": "pretraining"}')
    for target in (run / "tb" / "ft", run / "model"):
        with pytest.raises(errors.InputError, match=rf"^--workdir {target} is (inside )?(tb|model)/ of the pretraining "
                                                    rf"run in {run}, which that run writes"):
            files.check_run_dir(target, "fine-tuning")
    # an output file alike (predict's --out, a TorchScript export): not into a run's tb/, nor over its record or lock
    (run / "predictions").mkdir()
    for target, msg in ((run / "predictions" / "p.jsonl", r"is inside predictions/ of the pretraining run in"),
                        (run / "config_history.jsonl", r"is config_history.jsonl of the pretraining run in"),
                        (run / ".lock", r"is .lock of the pretraining run in")):
        with pytest.raises(errors.InputError, match=rf"^--out {target} {msg}"):
            files.check_output_file(target, overwrite=True)
    assert files.check_output_file(run / "preds.jsonl") == str(run / "preds.jsonl")  # beside them: the user's
    # a link on the way that leads back to itself: makedirs' ELOOP after the work
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(errors.InputError, match=rf"^--out {tmp_path}/loop/sub: {tmp_path}/loop is a link that leads "
                                                r"back to itself"):
        files.check_output_dir(tmp_path / "loop" / "sub")
    # a path starting with '~' that no shell expanded (--out=~/x): every writer, through refuse_nested
    for check in (files.check_output_file, files.check_output_dir,
                  lambda p: files.check_run_dir(p, "fine-tuning"), lambda p: pretrained.check_model_dir(p, (), [])):
        with pytest.raises(errors.InputError, match=r"~/x starts with '~', which no shell expands after '='"):
            check("~/x")
    # a command writing named files (GLUE's server files) beside others: into a run's directory, but not its tb/
    assert files.check_output_dir(run, overwrite=True, entries=False, writes=None, job=None) == str(run)
    with pytest.raises(errors.InputError, match=rf"^--out {run / 'tb' / 'sub'} is inside tb/ of the pretraining run"):
        with files.claim_output_files(run / "tb" / "sub", ["CoLA.tsv"]):
            pass
    assert not (run / "tb").exists()
    # ... its own job's too: a second fine-tuning in a stopped run's model/ had its files replaced by that export
    with pytest.raises(errors.InputError, match=r"is model/ of the pretraining run in"):
        files.refuse_nested(str(run / "model"), "--workdir", "pretraining")
    # a transformers checkpoint of another layout (sharded) is a model: a run's config.json replaced its own
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for name in ("config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"):
        (sharded / name).write_text("{}")
    with pytest.raises(errors.InputError, match=r"sharded holds a model \(config.json, model.safetensors.index.json\)"):
        files.check_run_dir(sharded, "fine-tuning", overwrite=True)
    # the API's writers alike: a model saved inside a model, prepared data into a model, a tokenizer into a run's
    # model/, with overwrite given as no bool
    model_copy = tiny_init(tmp_path / "model_copy", VOCAB)
    with pytest.raises(errors.InputError, match=r"^the model directory .*model/sub is inside the model directory"):
        pretrained.save_pretrained(pretrained.load_pretrained(str(model)), str(model / "sub"))
    # ... nor into a run's tb/ or its own directory (the run's config.json replaced by a model's), with overwrite
    loaded = pretrained.load_pretrained(str(model))
    for target, msg in ((run / "tb" / "m", r"is inside tb/ of the pretraining run in"),
                        (run, r"is the directory of a pretraining run: its config.json holds the run's settings")):
        with pytest.raises(errors.InputError, match=rf"^the model directory {target} {msg}"):
            pretrained.save_pretrained(loaded, str(target), overwrite=True)
        with pytest.raises(errors.InputError, match=rf"^the model directory {target} {msg}"):
            pretrained.export_torch(loaded, str(target), overwrite=True)
    assert not (run / "tb").exists() and not (run / "model.safetensors").exists()
    with pytest.raises(errors.InputError, match=r"^out_dir .*model_copy holds a model \(config.json, "):
        pretrain_data.prepare([str(tmp_path / "c.txt")], None, str(model_copy), 2)
    for bad in (2.0, "2", True):
        with pytest.raises(errors.InputError, match=rf"^num_shards={bad!r}: an integer in"):
            pretrain_data.prepare([str(tmp_path / "c.txt")], None, str(tmp_path / "p"), bad)
    # prepared data in a run's model/ (its export then replaced the vocabulary); its demo data is the run's own
    with pytest.raises(errors.InputError, match=r"^out_dir .*run/model is model/ of the pretraining run in"):
        pretrain_data.prepare([str(tmp_path / "c.txt")], None, str(run / "model"), 2)
    assert files.refuse_nested(str(run / "data"), "out_dir", "", mine=files.DEMO_DIRS) is None
    # load_pretrained's other arguments: jax's "Invalid rng value", a TypeError of **
    for kw, msg in (({"seed": "0"}, r"seed='0': an integer"), ({"seed": 2 ** 70}, r"seed=1180591620717411303424: "
                                                                                  r"an integer in \[0, 2\*\*32\)"),
                    ({"config_overrides": [("remat", "full")]},
                                                                r"config_overrides=\[\('remat', 'full'\)\]: a dict")):
        with pytest.raises(errors.InputError, match=rf"^{msg}"):
            pretrained.load_pretrained(str(model), **kw)
    # a run's directory given as a MODEL_DIR: its config.json is the run's settings, not a model's
    with pytest.raises(errors.InputError, match=rf"^{run} is a pretraining run's directory, not a MODEL_DIR \(its "
                                                rf"config.json holds the run's settings\): it writes its model to "
                                                rf"{run / 'model'} \(none there yet\)"):
        (run / "config.json").write_text("{}")
        pretrained.read_model_config(run)


def test_json_nested_past_the_parser_is_one_line_in_every_reader(tmp_path):
    """Lists inside each other 100,000 deep: a RecursionError traceback from the JSON readers and the locks."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(errors.DataFileError, match=r"^f.json: JSON nested deeper than a parser goes"):
        files.parse_json(deep, "f.json")
    with pytest.raises(errors.DataFileError, match=r"^f.jsonl:1: JSON nested deeper than a parser goes"):
        list(files.json_lines("f.jsonl", [(1, deep)]))
    (tmp_path / ".lock").write_text(deep)  # damaged: no holder
    assert files.read_lock(tmp_path) == {} and files.check_run_dir(tmp_path, "fine-tuning") == str(tmp_path)
