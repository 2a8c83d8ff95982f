"""Sweeps (issue 13, item 1): a 2 x 2 grid on a tiny model picks the setting with the best recorded dev score; a
restart skips recorded runs and re-runs an unfinished one from a clean dir; grid parsing and its one-line errors;
Turc et al.'s miniatures preset."""

from __future__ import annotations

import json
import logging
import os
import re

import pytest
from conftest import load_script, one_error_line
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import corpus, sweep
from squeezebert_jax import finetune as ft
from squeezebert_jax import finetune_settings
from squeezebert_jax.errors import InputError


@pytest.fixture(scope="session")
def get_config():
    return load_script("train/configs/glue.py").get_config


@pytest.fixture
def model_dir(tmp_path):
    """test_finetune's whole-table model: its batch-16 step is the table's (one compile for both, XLA's cache)."""
    cfg = sj.SqueezeBertConfig(vocab_size=len(corpus.demo_vocab()), hidden_size=32, embedding_size=32,
                               num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64)
    sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0)), tmp_path / "init")
    corpus.write_demo_vocab(tmp_path / "init" / "vocab.txt")
    return str(tmp_path / "init")


def rows_of(workdir):
    return sweep.read_rows(os.path.join(workdir, sweep.RECORD))


def read_json(path):
    with open(path) as f:
        return json.load(f)


def best_by_hand(rows, grid_order):
    """The expected choice from the rows alone: the highest score, ties to the first setting of the grid."""
    top = max(r["score"] for r in rows)
    return next(s for s in grid_order for r in rows if r["settings"] == s and r["score"] == top)


# -- (a) a real 2 x 2 sweep through the script --------------------------------------------------------------------

@pytest.mark.slow
def test_a_2x2_sweep_picks_the_best_recorded_dev_score(tmp_path, model_dir, run_cli):
    data = corpus.write_glue_tasks(tmp_path / "glue", num_train=16, num_dev=8, num_test=2, tasks=("rte",))
    wd = tmp_path / "sweep"
    rc, out, err = run_cli("train/glue_recipe.py", "--init_from", model_dir, "--data_dir", data, "--workdir", wd,
                           "--tasks", "rte", "--epochs", "1", "--max_seq_length", "32",
                           "--sweep", "lr=1e-3,1e-2;batch=8,16")
    assert rc == 0, err
    rows = rows_of(wd)
    grid = [{"lr": lr, "batch": b} for lr in (1e-3, 1e-2) for b in (8, 16)]
    assert [r["settings"] for r in rows] == grid and {r["seed"] for r in rows} == {0}
    for r in rows:
        assert r["metric"] == "validation/accuracy" and r["score"] == r["dev"]["validation/accuracy"]
        assert r["epoch"] == 1 and r["wall_s"] > 0 and os.path.isdir(os.path.join(r["run_dir"], "model"))
        saved = read_json(os.path.join(r["run_dir"], "eval_results.json"))
        assert saved["best"]["validation/accuracy"] == r["score"]  # the row is the run's own dev result
    want = best_by_hand(rows, grid)
    chosen = read_json(wd / "chosen.json")["rte"]
    assert chosen["settings"] == want and chosen["score"] == max(r["score"] for r in rows)
    # the console: a line per run, then Table 2 with the chosen run's score and the chosen settings beside it
    assert sum(line.startswith("[") and "] rte lr=" in line for line in out.splitlines()) == 4
    table = out[out.index("model "):]
    assert f"{100 * chosen['score']:.1f}" in table.splitlines()[1]
    assert table.splitlines()[-5].split() == ["lr", sweep.show(want["lr"])]
    assert table.splitlines()[-4].split() == ["batch", str(want["batch"])]
    assert (wd / "table.md").read_text() == out[out.index("model "):]
    log = (wd / "log.txt").read_text()
    assert "sweep: 4 runs" in log and "[4/4] rte lr=0.01,batch=16,seed=0" in log
    # a rerun keeps the recorded runs, unless a file they were trained on has changed in place since (same path)
    args = ("train/glue_recipe.py", "--init_from", model_dir, "--data_dir", data, "--workdir", wd, "--tasks", "rte",
            "--epochs", "1", "--max_seq_length", "32", "--sweep", "lr=1e-3,1e-2;batch=8,16")
    rc, out, err = run_cli(*args)
    assert rc == 0 and "4 recorded, 0 to run" in out, err
    train = os.path.join(data, "RTE", "train.tsv")
    original = open(train).read()
    with open(train, "a") as f:
        f.write(original.splitlines()[1] + "\n")  # one more row
    record = (wd / sweep.RECORD).read_bytes()
    rc, out, err = run_cli(*args)
    line = one_error_line(err)
    assert rc != 0 and line.endswith(f"{train} changed since the run began (sha256 " + line.split("(sha256 ")[1]
                                     .split(")")[0] + "), for 4 recorded run(s) (rte lr=0.001,batch=8,seed=0, rte "
                                     "lr=0.001,batch=16,seed=0, ...): their scores would be chosen beside runs on the "
                                     "files as they are now. Use another --workdir (the recorded runs are left as they "
                                     "are), or restore the files") and "config.data_dir" in line, err
    assert (wd / sweep.RECORD).read_bytes() == record
    # a recorded run whose directory (or its history) was moved away cannot be checked: refused, by name
    with open(train, "w") as f:
        f.write(original)
    first = rows_of(wd)[0]["run_dir"]
    os.rename(os.path.join(first, "config_history.jsonl"), tmp_path / "history")
    rc, out, err = run_cli(*args)
    assert rc != 0 and one_error_line(err).endswith(
        f"the recorded run rte lr=0.001,batch=8,seed=0: {first}/config_history.jsonl is gone, so neither the data it "
        "was trained on nor its model can be checked (a --predict reads that model): use another --workdir, or "
        "restore the directory"), err
    os.rename(first, tmp_path / "moved")
    rc, out, err = run_cli(*args)
    assert rc != 0 and f"its run directory {first} is gone" in one_error_line(err)
    assert (wd / sweep.RECORD).read_bytes() == record
    # --predict with the chosen run's model moved away: refused by name (a missing test file alone only warns)
    os.rename(tmp_path / "moved", first)
    os.rename(tmp_path / "history", os.path.join(first, "config_history.jsonl"))
    # a row pointing at another run's directory is named so (it was refused as data that changed)
    rows = [json.loads(line) for line in record.decode().splitlines()]
    (wd / sweep.RECORD).write_text("".join(json.dumps(r | ({"run_dir": rows[1]["run_dir"]} if i == 0 else {})) + "\n"
                                           for i, r in enumerate(rows)))
    rc, out, err = run_cli(*args)
    assert rc != 0 and (f"the recorded run rte lr=0.001,batch=8,seed=0 names {rows[1]['run_dir']} as its run "
                        "directory, but the run there has batch_size 16, not 8: the row points at another run"
                        ) in one_error_line(err), err
    # a row edited by hand, its score and dev alike, was chosen over its run's own result (eval_results.json)
    edited = dict(rows[1], score=0.9, dev={**rows[1]["dev"], rows[1]["metric"]: 0.9})
    (wd / sweep.RECORD).write_text("".join(json.dumps(edited if i == 1 else r) + "\n" for i, r in enumerate(rows)))
    rc, out, err = run_cli(*args)
    assert rc != 0 and "the recorded run rte lr=0.001,batch=16,seed=0's dev scores" in one_error_line(err) and \
        "are not its run's own" in one_error_line(err), err
    (wd / sweep.RECORD).write_bytes(record)
    chosen_dir = read_json(wd / "chosen.json")["rte"]["run_dirs"][0]
    os.rename(os.path.join(chosen_dir, "model"), tmp_path / "model_moved")
    rc, out, err = run_cli(*args, "--predict")
    assert rc != 0 and one_error_line(err).endswith(
        f"--predict: rte's chosen run has no model ({chosen_dir}/model holds no config.json): it was moved or removed; "
        "restore it, or use another --workdir"), err


# -- (b) restart ------------------------------------------------------------------------------------------------

class FakeFinetune:
    """finetune() with a score read from the settings; counts its calls and notes which found their run dir holding an
    interrupted run's files (to resume from). ``crash_at``: the call that dies after writing into its run dir (an
    interrupted run: files, no row)."""

    def __init__(self, scores, crash_at=None):
        self.scores, self.crash_at, self.calls, self.sources, self.resumed = scores, crash_at, [], {}, []

    def __call__(self, config, workdir):
        self.resumed.append(os.path.exists(os.path.join(workdir, "half_written")))
        os.makedirs(workdir, exist_ok=True)
        open(os.path.join(workdir, "half_written"), "w").close()
        # the start's record, as fine-tuning writes it: what the sweep checks a recorded run's data against
        sj.trainer.record_config(workdir, config, 0, finetune_settings.run_stream(config, sj.tasks.resolve(config)))
        self.calls.append((config.task, config.learning_rate, config.dropout, config.seed))
        self.sources[(config.task, config.dropout)] = (config.init_from, config.distill.teacher)
        if len(self.calls) == self.crash_at:
            raise KeyboardInterrupt
        m, mm = self.scores[(config.learning_rate, config.dropout)]
        best = {"epoch": 2, "score": (m + mm) / 2}
        if config.task == "mnli":
            best.update({"validation_matched/accuracy": m, "validation_mismatched/accuracy": mm})
        else:
            best[sweep.selection_metric(config.task)] = m
        return {"best": best}


def recipe_configs(get_config, tmp_path):
    def make_config(task):
        c = get_config(task)
        c.init_from, c.progress = str(tmp_path / "init"), False
        return c
    return make_config


def test_a_restart_skips_recorded_runs_and_resumes_an_unfinished_one(tmp_path, get_config, monkeypatch, caplog,
                                                                      digest):
    scores = {(1e-5, 0.0): (0.5, 0.5), (1e-5, 0.1): (0.7, 0.6), (2e-5, 0.0): (0.6, 0.9), (2e-5, 0.1): (0.7, 0.6)}
    grid = sweep.parse_grid("lr=1e-5,2e-5;dropout=0.0,0.1", get_config("rte"))
    make_config, wd = recipe_configs(get_config, tmp_path), str(tmp_path / "sweep")
    fake = FakeFinetune(scores, crash_at=3)
    monkeypatch.setattr(ft, "finetune", fake)
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(make_config, grid, wd, ["rte"], echo=lambda s: None)
    assert len(fake.calls) == 3 and len(rows_of(wd)) == 2
    unfinished = os.path.join(wd, "rte", "lr=2e-05,dropout=0.0,seed=0")
    assert os.path.exists(os.path.join(unfinished, "half_written"))

    fake = FakeFinetune(scores)
    monkeypatch.setattr(ft, "finetune", fake)
    lines = []
    sweep.run_sweep(make_config, grid, wd, ["rte"], echo=lines.append)
    assert fake.calls == [("rte", 2e-5, 0.0, 0), ("rte", 2e-5, 0.1, 0)]  # the two recorded runs skipped
    assert fake.resumed == [True, False]  # the interrupted run's dir is kept: fine-tuning resumes from its checkpoints
    assert lines[0].startswith("sweep: 4 runs (1 task(s) x 4 settings), 2 recorded, 2 to run")
    assert len(lines) == 3 and lines[1].startswith("[1/2] rte lr=2e-05,dropout=0.0,seed=0: validation/accuracy 60.0")
    rows = rows_of(wd)
    assert len(rows) == 4 and len({sweep.run_key(r["task"], r["settings"], r["seed"]) for r in rows}) == 4
    # 0.7 twice: the tie goes to the setting first in the grid
    chosen = read_json(os.path.join(wd, "chosen.json"))["rte"]
    assert chosen["settings"] == {"lr": 1e-5, "dropout": 0.1} == best_by_hand(rows, sweep.expand(grid))

    fake = FakeFinetune(scores)  # all recorded: nothing runs, the same table
    monkeypatch.setattr(ft, "finetune", fake)
    table = sweep.run_sweep(make_config, grid, wd, ["rte"], echo=lambda s: None)
    assert fake.calls == [] and "70.0" in table
    assert rows[0]["config"]["learning_rate"] == 1e-5 and rows[0]["config"]["num_epochs"] == 3

    def five_epochs(task):  # a setting outside the grid that changes what a run computes: the recorded runs' results
        return sweep.apply(make_config(task), {"epochs": 5})  # would stand for this command's (it only warned)

    before = digest(wd)
    with pytest.raises(InputError, match=r"sweep.jsonl: recorded runs of this grid were made with other values "
                                         r"outside it \(num_epochs: 3 -> 5\), so their results would stand for this "
                                         r"command's: give the values they were run with, or another --workdir$"):
        sweep.run_sweep(five_epochs, grid, wd, ["rte"], echo=lambda s: None)
    assert fake.calls == [] and digest(wd) == before

    def other_model(task):  # another --init_from: the recorded runs are another model's
        c = make_config(task)
        c.init_from = str(tmp_path / "init_1l")
        return c

    with pytest.raises(InputError, match=rf"\(init_from: {tmp_path / 'init'} -> {tmp_path / 'init_1l'}\)"):
        sweep.run_sweep(other_model, grid, wd, ["rte"], echo=lambda s: None)

    def quiet(task):  # a setting that changes no run's numbers (how often it logs): kept and skipped, with a warning
        c = make_config(task)
        c.log_every = 7
        return c

    with caplog.at_level("WARNING", logger="squeezebert_jax.sweep"):
        sweep.run_sweep(quiet, grid, wd, ["rte"], echo=lambda s: None)
    assert fake.calls == [] and "other values outside the grid (log_every: " in caplog.text
    # --transfer with no MNLI run here or in --tasks: it trained from init_from under the "(S)" label
    with pytest.raises(InputError, match=r"--transfer starts each task from the MNLI run, and .* has none: add mnli"):
        sweep.run_sweep(make_config, grid, str(tmp_path / "t"), ["rte"], transfer=True, echo=lambda s: None)
    assert not (tmp_path / "t").exists()


def test_mnli_is_chosen_by_matched_accuracy_and_seeds_are_averaged(tmp_path, get_config, monkeypatch, caplog):
    scores = {(1e-5, 0.0): (0.6, 0.9), (1e-5, 0.1): (0.7, 0.5)}  # by (m + mm) / 2 the first would win
    monkeypatch.setattr(ft, "finetune", FakeFinetune(scores))
    grid = sweep.parse_grid("lr=1e-5;dropout=0.0,0.1;seed=0,1", get_config("mnli"))
    table = sweep.run_sweep(recipe_configs(get_config, tmp_path), grid, str(tmp_path / "w"), ["mnli"],
                            echo=lambda s: None)
    chosen = sweep.choose(rows_of(tmp_path / "w"), sweep.expand(grid))["mnli"]
    assert chosen.settings == {"lr": 1e-5, "dropout": 0.1} and len(chosen.rows) == 2 and chosen.num_runs == 4
    assert {r["seed"] for r in chosen.rows} == {0, 1}
    lines = table.splitlines()
    assert lines[1].split()[3:5] == ["70.0", "50.0"]  # MNLI-m, MNLI-mm of the chosen setting
    assert lines[-3].split() == ["best", "epoch", "2/2"] and lines[-1].split() == ["runs", "4"]
    # another task swept later into the same workdir: the summary files are this sweep's, and the warning says so
    rte = sweep.parse_grid("lr=1e-5;dropout=0.0,0.1", get_config("rte"))
    with caplog.at_level("WARNING", logger="squeezebert_jax.sweep"):
        sweep.run_sweep(recipe_configs(get_config, tmp_path), rte, str(tmp_path / "w"), ["rte"], echo=lambda s: None)
    assert "also holds runs of mnli (an earlier sweep in this workdir): table.md, results.json and chosen.json " \
           "summarise this sweep's tasks (rte) alone" in caplog.text
    assert list(read_json(os.path.join(tmp_path / "w", "chosen.json"))) == ["rte"]


def test_transfer_starts_tasks_from_mnlis_chosen_run_and_teachers_come_from_the_root(tmp_path, get_config,
                                                                                        monkeypatch):
    scores = {(1e-5, 0.0): (0.6, 0.6), (1e-5, 0.1): (0.8, 0.6)}
    fake = FakeFinetune(scores)
    monkeypatch.setattr(ft, "finetune", fake)
    (tmp_path / "teachers" / "rte").mkdir(parents=True)
    grid = sweep.parse_grid("lr=1e-5;dropout=0.0,0.1", get_config("rte"))
    wd = str(tmp_path / "w")
    sweep.run_sweep(recipe_configs(get_config, tmp_path), grid, wd, ["rte", "cola", "mnli"], transfer=True,
                    teacher_root=str(tmp_path / "teachers"), echo=lambda s: None)
    assert [t for t, *_ in fake.calls] == ["mnli", "mnli", "rte", "rte", "cola", "cola"]
    mnli_model = os.path.join(wd, "mnli", "lr=1e-05,dropout=0.1,seed=0", "model")
    assert fake.sources[("rte", 0.0)] == (mnli_model, str(tmp_path / "teachers" / "rte"))
    assert fake.sources[("cola", 0.0)] == (str(tmp_path / "init"), "")  # as the paper: CoLA not from MNLI; no teacher dir


def test_a_teacher_root_that_is_missing_or_holds_no_task_is_refused_before_any_run(tmp_path, get_config, monkeypatch,
                                                                                 caplog):
    fake = FakeFinetune({(1e-5, 0.0): (0.6, 0.6)})
    monkeypatch.setattr(ft, "finetune", fake)
    grid, configs = sweep.parse_grid("lr=1e-5;dropout=0.0", get_config("rte")), recipe_configs(get_config, tmp_path)
    root = tmp_path / "teachers"
    with pytest.raises(InputError, match=rf"^--teacher_root {re.escape(str(root))}: no such directory"):
        sweep.run_sweep(configs, grid, str(tmp_path / "w"), ["rte"], teacher_root=str(root), echo=lambda s: None)
    (root / "mnli").mkdir(parents=True)  # a teacher, but not for the task swept
    with pytest.raises(InputError, match=r"holds a teacher for none of the tasks \(a MODEL_DIR .*rte for "):
        sweep.run_sweep(configs, grid, str(tmp_path / "w"), ["rte"], teacher_root=str(root), echo=lambda s: None)
    assert not fake.calls and not (tmp_path / "w").exists()
    with caplog.at_level(logging.WARNING):
        sweep.run_sweep(configs, grid, str(tmp_path / "w"), ["rte", "mnli"], teacher_root=str(root),
                        echo=lambda s: None)
    assert "has no teacher for rte: it is trained without distillation" in caplog.text


def test_a_nan_score_never_wins():
    rows = [{"task": "stsb", "settings": {"lr": lr}, "seed": 0, "score": s, "dev": {}}
            for lr, s in ((1e-5, float("nan")), (2e-5, 0.1), (3e-5, float("nan")))]
    assert sweep.choose(rows)["stsb"].settings == {"lr": 2e-5}


# -- (c) grid parsing and the script's one-line errors --------------------------------------------------------------

def test_grid_parsing(get_config):
    c = get_config("rte")
    grid = sweep.parse_grid(" learning_rate = 1e-5, 2E-5 ; batch=16;distill.teacher_weight=0.5,1;progress=false;",
                            c)
    assert grid == {"lr": [1e-5, 2e-5], "batch": [16], "distill.teacher_weight": [0.5, 1.0], "progress": [False]}
    assert type(grid["batch"][0]) is int and type(grid["distill.teacher_weight"][1]) is float
    s = sweep.expand(grid)
    assert len(s) == 4 and s[1] == {"lr": 1e-5, "batch": 16, "distill.teacher_weight": 1.0, "progress": False}
    sweep.apply(c, {**s[1], "dropout": 0.1})
    assert (c.learning_rate, c.batch_size, c.distill.teacher_weight, c.progress, c.dropout) == (1e-5, 16, 1.0, False,
                                                                                                  0.1)
    assert sweep.run_name({"lr": 1e-5, "dropout": 0.0}, 3) == "lr=1e-05,dropout=0.0,seed=3"
    assert sweep.run_name({"lr": 1e-5, "seed": 3}, 3) == "lr=1e-05,seed=3"  # a swept seed named once
    assert sweep.run_key("rte", {"lr": 1e-5, "batch": 8}, 0) == sweep.run_key("rte", {"batch": 8, "lr": 1e-5}, 0)


@pytest.mark.parametrize("text,msg", [
    ("lr=abc", "'lr=abc': 'abc' is not a float (learning_rate)"),
    ("batch=16,1.5", "'batch=16,1.5': '1.5' is not an int (batch_size)"),
    ("lrr=1e-5", "'lrr=1e-5': the glue config has no field 'lrr' (aliases: lr=learning_rate"),
    ("distill.nope=1", "no field 'distill.nope'"),
    ("distill=1", "distill is a group; name one of its fields (distill.attention_weight, distill.cache_dir, "),
    ("lr=", "'lr=': an empty value"),
    ("lr=1e-5,,2e-5", "an empty value"),
    ("lr", "'lr' is not FIELD=V1,V2,..."),
    ("=1", "'=1' is not FIELD=V1,V2,..."),
    ("", "empty grid"),
    (" ; ", "empty grid"),
    ("lr=1e-5;learning_rate=2e-5", "'learning_rate' is named twice"),
    ("lr=1e-5,1e-5", "repeats a value"),
    ("batch=0", "batch_size must be > 0"),
    ("dropout=1.5", "dropout must lie in [0, 1]"),
    ("lr=nan", "not a finite number"),
    ("task=rte", "task is not swept (--tasks picks the tasks)"),
    ("distill.teacher=/m", "distill.teacher is not swept (--teacher_root: a teacher MODEL_DIR per task)"),
    ("progress=maybe", "'maybe' is not a bool"),
])
def test_malformed_grids_name_the_bad_part(get_config, text, msg):
    with pytest.raises(InputError, match="^--sweep: ") as e:
        sweep.parse_grid(text, get_config("rte"))
    assert msg in str(e.value)


@pytest.mark.parametrize("text,point,msg", [
    ("attention_dropout=0.0,0.1", "attention_dropout=0.1,seed=0", "config.attention_dropout=0.1: 0 or unset"),
    ("max_seq_length=128,1", "max_seq_length=1,seed=0", "config.max_seq_length=1: an integer >= 4"),
])
def test_a_point_the_validator_refuses_stops_the_sweep_before_anything_is_written(get_config, tmp_path, text, point,
                                                                                 msg):
    """Each grid point goes through fine-tuning's settings validator before the first run: a later point that it
    refuses is one line naming the point, and no workdir, lock or record is written."""
    workdir = tmp_path / "sweep"
    with pytest.raises(InputError) as e:
        sweep.run_sweep(get_config, sweep.parse_grid(text, get_config("rte")), str(workdir), tasks=["rte"])
    assert str(e.value).startswith(f"sweep point rte {point}: {msg}")
    assert not workdir.exists()


@pytest.mark.parametrize("argv,msg", [
    (["--sweep", "lr=abc"], "--sweep: 'lr=abc': 'abc' is not a float (learning_rate)"),
    (["--sweep", "lr=1e-5;dropout="], "--sweep: 'dropout=': an empty value"),
    (["--sweep", "colour=red"], "the glue config has no field 'colour'"),
    # a setting fine-tuning refuses: named before the log file is written (it used to leave WORKDIR/log.txt)
    (["--max_train_examples", "-1"], "max_train_examples"),
])
def test_the_script_prints_one_line_and_writes_nothing(tmp_path, run_cli, argv, msg):
    rc, out, err = run_cli("train/glue_recipe.py", "--init_from", tmp_path, "--workdir", tmp_path / "runs", *argv)
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("glue_recipe.py: error: ") and msg in lines[0], err
    assert out == "" and not (tmp_path / "runs").exists()


def test_the_workdir_is_checked_as_every_run_directory_is(tmp_path, run_cli, digest):
    """files.check_run_dir before anything is written: a MODEL_DIR (never, --overwrite or not), a file."""
    model = tmp_path / "model"
    sj.save_pretrained(sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(
        vocab_size=16, hidden_size=32, embedding_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32), rngs=nnx.Rngs(0)), model)
    (tmp_path / "file").write_text("x")
    before = digest(tmp_path)
    for workdir, msg in ((model, "holds a model (config.json, params.safetensors): a GLUE sweep run there would"),
                         (tmp_path / "file", "is an existing file")):
        rc, out, err = run_cli("train/glue_recipe.py", "--init_from", model, "--workdir", workdir, "--tasks", "rte")
        lines = err.strip().splitlines()
        assert rc == 1 and len(lines) == 1 and msg in lines[0], err
    assert digest(tmp_path) == before


def test_an_unknown_preset_is_a_usage_error(tmp_path, run_cli):
    rc, _, err = run_cli("train/glue_recipe.py", "--init_from", tmp_path, "--workdir", tmp_path / "runs",
                         "--preset", "tiny")
    assert rc == 2 and "invalid choice: 'tiny'" in err


@pytest.mark.parametrize("line, why", [
    (b'{"task": "rte"}', r"no 'settings'"),
    (b'{"task": "rte", "settings": "lr", "seed": 0}', r"'settings' is a string \"lr\", not an object of settings"),
    (b'{"task": "rte", "settings": {}, "seed": "x"}', r"'seed' is a string \"x\", not an integer"),
    (b'{"task": "rte", "settings": {}, "seed": 0, "score": 0.5, "dev": {"a": "x"}}', r"'dev' is an object"),
    (b'[1, 2]', r"a list, not a JSON object"),
    (b'{"task": "rte", "settings": {}, "seed": 0, "score": 0.5, "dev": {}, "epoch": 1, "run_dir": "r", "config": 3}',
     r"'config' is an integer 3, not an object"),
    (b'{"task": "r\xe9te"}', r":12: not UTF-8 text \(byte 0xe9\)"),
    # a score edited by hand became the chosen setting's and the table's (99.0: "9900.0"), beside its own dev 0.25
    (b'{"task": "rte", "settings": {}, "seed": 0, "score": 99.0, "metric": "validation/accuracy", "dev": '
     b'{"validation/accuracy": 0.25}, "epoch": 1, "run_dir": "r"}', r"'score' is a decimal number 99.0, but its 'dev' "
                                                                     r"validation/accuracy is a decimal number 0.25"),
    (b'{"task": "rte", "settings": {}, "seed": 0, "score": 0.25, "metric": "f1", "dev": '
     b'{"validation/accuracy": 0.25}, "epoch": 1, "run_dir": "r"}', r"'metric' is a string \"f1\", not one of its "
                                                                     r"'dev' scores \(validation/accuracy\)"),
])
def test_a_record_line_that_is_not_a_row_is_named(tmp_path, line, why):
    """sweep.jsonl, read through files.text_lines: each row a JSON object holding each field a run writes, of its
    type (sweep.row_problem); otherwise one line naming the file and line, not a traceback at its first use."""
    path = tmp_path / sweep.RECORD
    sweep.append_row(str(path), {"task": "rte", "settings": {"lr": 1e-5}, "seed": 0, "score": 0.5,
                                 "metric": "validation/accuracy", "dev": {"validation/accuracy": 0.5}, "epoch": 1,
                                 "run_dir": "r"})
    with open(path, "ab") as f:
        f.write(line + b"\n")
    with pytest.raises(InputError, match=rf"{path}:2.*{why}"):
        sweep.read_rows(str(path))


# -- (d) Turc et al.'s grid -------------------------------------------------------------------------------------

def test_preset_miniatures_is_turc_et_als_20_setting_grid(get_config):
    c = get_config("rte")
    settings = sweep.expand(sweep.parse_grid(None, c, "miniatures"))
    assert len(settings) == 20 and all(s["epochs"] == 4 for s in settings)
    assert {(s["batch"], s["lr"]) for s in settings} == {(b, lr) for b in (8, 16, 32, 64, 128)
                                                         for lr in (3e-4, 1e-4, 5e-5, 3e-5)}
    assert sweep.apply(c, settings[-1]).num_epochs == 4 and c.batch_size == 128 and c.learning_rate == 3e-5
    # --sweep on top adds a field, or replaces the preset's values of one
    more = sweep.parse_grid("seed=0,1;epochs=2", c, "miniatures")
    assert more["epochs"] == [2] and len(sweep.expand(more)) == 40


def test_a_recipe_flag_and_the_grid_setting_one_field_are_refused(tmp_path):
    """--epochs 1 beside a grid of epochs=2,3: the grid's values replaced the flag's without a word. Refused before
    anything is written, naming both (in-process)."""
    from conftest import load_script

    mod = load_script("train/glue_recipe.py")
    for flag, grid, message in ((["--epochs", "1"], "epochs=2,3", r"^--epochs 1 and the grid's epochs=2,3 both set "
                                                                  r"num_epochs: give it in one of them"),
                                (["--max_seq_length", "64"], "max_seq_length=32,48",
                                 r"^--max_seq_length 64 and the grid's max_seq_length=32,48 both set max_seq_length")):
        with pytest.raises(sj.errors.InputError, match=message):
            mod.main(["--init_from", str(tmp_path / "model"), "--workdir", str(tmp_path / "runs"), "--tasks", "rte",
                      *flag, "--sweep", grid])
    with pytest.raises(sj.errors.InputError, match=r"config.compute_dtype='float8': bfloat16 or float32"):
        mod.main(["--init_from", str(tmp_path / "model"), "--workdir", str(tmp_path / "runs"), "--tasks", "rte",
                  "--sweep", "compute_dtype=float8"])  # a grid's value: refused before the workdir is made
    assert not (tmp_path / "runs").exists()
    # a distillation setting swept with no teacher: each point trained alike, the grid's value recorded
    with pytest.raises(sj.errors.InputError, match=r"^--sweep distill.teacher_weight: a distillation setting, which "
                                                   r"no run reads without --teacher_root"):
        mod.main(["--init_from", str(tmp_path / "model"), "--workdir", str(tmp_path / "runs"), "--tasks", "rte",
                  "--sweep", "distill.teacher_weight=0.3,0.6"])
    assert not (tmp_path / "runs").exists()
