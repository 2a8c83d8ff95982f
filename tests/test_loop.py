"""squeezebert_jax.loop: the one training loop and its parts, called directly with plain hooks (its use by both
entry points, end to end: tests/test_pretrain.py and tests/test_finetune_trainer.py)."""

from __future__ import annotations

import math
import os

import pytest

from squeezebert_jax import errors, loop


class _Checkpoints:
    directory = "/runs/x/checkpoints"

    def __init__(self, steps):
        self.steps, self.waited = steps, False

    def all_steps(self):
        return self.steps

    def wait(self):
        self.waited = True


def test_the_first_non_finite_step_is_named_with_the_last_good_checkpoint():
    ck = _Checkpoints([4, 8])
    rows = [(9, {"loss": 1.0, "grad_norm": 2.0}), (10, {"loss": 1.0, "grad_norm": math.inf}),
            (11, {"loss": math.nan})]
    with pytest.raises(FloatingPointError, match=r"non-finite grad_norm inf at step 10 \(training diverged\); the last "
                                                 r"good checkpoint is step 8 in /runs/x/checkpoints"):
        loop.check_finite(rows, ("loss", "grad_norm"), ck)
    assert ck.waited  # an async save in flight is waited for before the last good one is named
    with pytest.raises(FloatingPointError, match=r"loss nan at step 1 .*no checkpoint was saved"):
        loop.check_finite([(1, {"loss": math.nan})], ("loss",), _Checkpoints([]))
    loop.check_finite([(1, {"loss": 0.5})], ("loss", "param_norm"), ck)  # a key a row lacks is not checked


def test_checkpoints_past_the_runs_end_are_refused():
    loop.check_checkpoints_within(_Checkpoints([2, 6]), 6, "whose run ends at step 6")
    with pytest.raises(errors.CheckpointMismatchError, match=r"steps \[8\] in /runs/x/checkpoints do not match the "
                                                              r"current config, whose run ends at step 6; they are left"):
        loop.check_checkpoints_within(_Checkpoints([4, 8]), 6, "whose run ends at step 6")


def test_an_empty_step_directory_past_the_end_is_named_as_no_checkpoint(tmp_path):
    (tmp_path / "99").mkdir()
    ck = _Checkpoints([2, 99])
    ck.directory = str(tmp_path)
    with pytest.raises(errors.CheckpointMismatchError, match=rf"^{tmp_path / '99'} is an empty directory, not a "
                                                              r"checkpoint; remove it"):
        loop.check_checkpoints_within(ck, 8, "whose run ends at step 8")
    (tmp_path / "99" / "junk.bin").write_bytes(b"x")  # garbage: no state/, so no run's checkpoint
    with pytest.raises(errors.CheckpointMismatchError, match=rf"^{tmp_path / '99'} is not a checkpoint \(it holds no "
                                                              r"state/: junk.bin\); remove it"):
        loop.check_checkpoints_within(ck, 8, "whose run ends at step 8")


class _Writer:
    def __init__(self):
        self.rows = []

    def write(self, step, row):
        self.rows.append((step, row))


class _Preempt:
    """A signal that arrives after step ``at`` (0: never)."""

    def __init__(self, at=0):
        self.at, self.asked = at, []

    def should_stop(self, step, boundary=False):
        self.asked.append((step, boundary))
        return bool(self.at) and step >= self.at


def _run(start, end, final_step, *, preempt=None, losses=None, boundary_every=0, **config):
    """loop.run over a counter state with host metrics; returns what each hook saw."""
    import ml_collections

    config = ml_collections.ConfigDict({"log_every": 4, "checkpoint_every": 5, "progress": False, "stop_at_step": 0}
                                       | config)
    seen = {"saves": [], "boundaries": [], "checked": [], "rows": None}

    def step(state, i):
        loss = (losses or {}).get(i + 1, 1.0 / (i + 1))
        return state + 1, {"loss": loss, "grad_norm": 1.0, "param_norm": 2.0}, {"examples": 2}

    def log_row(done, window, dt, n):
        assert dt > 0 and n == len(window)
        return {"loss": sum(m["loss"] for m, _ in window) / n, "examples": sum(i["examples"] for _, i in window)}

    hooks = loop.Hooks(step, log_row, lambda done, state: seen["saves"].append((done, state)),
                       checked=lambda done, m: seen["checked"].append(done),
                       boundary=lambda done, state: seen["boundaries"].append(done), boundary_every=boundary_every)
    writer, ck = _Writer(), _Checkpoints([])
    state, stopped = loop.run(start, start, end, hooks, config=config, checkpointer=ck, writer=writer,
                              preempt=preempt or _Preempt(), final_step=final_step, desc="t")
    seen["rows"] = writer.rows
    return state, stopped, seen


def test_the_loop_logs_checks_evaluates_and_saves_on_its_schedule():
    """Rows every log_every steps and at the range's end (each the mean of its steps, every step checked once, in
    order); boundaries every boundary_every steps and at the end, before that step's checkpoint; checkpoints every
    checkpoint_every steps, at each boundary and at the end."""
    state, stopped, seen = _run(2, 12, 12, boundary_every=6)
    assert (state, stopped) == (12, False)
    assert [s for s, _ in seen["rows"]] == [4, 8, 12]
    assert seen["rows"][0][1] == {"loss": (1 / 3 + 1 / 4) / 2, "examples": 4}  # steps 3 and 4: resumed at 2
    assert seen["checked"] == list(range(3, 13))
    assert seen["boundaries"] == [6, 12]
    assert [s for s, _ in seen["saves"]] == [5, 6, 10, 12] and seen["saves"][-1] == (12, 12)


def test_a_signal_or_stop_at_step_stops_with_a_row_and_a_checkpoint_but_never_at_the_last_step():
    _, stopped, seen = _run(0, 20, 20, preempt=_Preempt(at=7))
    assert stopped and [s for s, _ in seen["rows"]] == [4, 7] and [s for s, _ in seen["saves"]] == [5, 7]
    _, stopped, seen = _run(0, 20, 20, stop_at_step=9)
    assert stopped and seen["saves"][-1][0] == 9
    # a phase ends at 10 of a run ending at 20: a stop there is a stop; at the run's last step the run completes
    _, stopped, seen = _run(0, 10, 20, stop_at_step=10)
    assert stopped and seen["saves"][-1][0] == 10
    _, stopped, seen = _run(0, 10, 10, stop_at_step=10)
    assert not stopped and seen["saves"][-1][0] == 10
    # resumed at or past stop_at_step: stopped before any step (it trained one step past it, and saved that)
    for start, stop_at in ((4, 4), (6, 3)):
        state, stopped, seen = _run(start, 20, 20, stop_at_step=stop_at)
        assert (state, stopped) == (start, True) and seen["saves"] == seen["rows"] == seen["checked"] == []
    # ... but a run at its last step finishes (and a range already done runs nothing)
    assert _run(20, 20, 20, stop_at_step=3)[:2] == (20, False)


def test_a_non_finite_step_stops_the_loop_before_any_row_or_checkpoint_holds_it():
    with pytest.raises(FloatingPointError, match=r"non-finite loss nan at step 3"):
        _run(0, 12, 12, losses={3: math.nan})
    with pytest.raises(FloatingPointError, match=r"non-finite loss inf at step 5 .*no checkpoint was saved"):
        _run(0, 12, 12, log_every=100, losses={5: math.inf})


def test_settings_refuse_each_training_setting_with_one_line():
    import ml_collections

    good = {"learning_rate": 1e-3, "warmup_fraction": 0.1, "weight_decay": 0.0, "rng_impl": "threefry2x32",
            "compute_dtype": "bfloat16", "log_every": 1, "checkpoint_every": 1, "preemption_sync_every": 1,
            "keep_checkpoints": 1,
            "stop_at_step": 0, "num_devices": 0, "seed": 0, "phases": [{"seq_len": 8}]}
    loop.Settings(ml_collections.ConfigDict(good)).check_training()
    for name, bad, valid in (("learning_rate", 0, "a finite rate > 0"), ("learning_rate", math.nan, "finite"),
                             ("warmup_fraction", 1.5, r"\[0, 1\]"), ("weight_decay", True, "decay >= 0"),
                             ("rng_impl", "philox", "threefry2x32 or rbg"), ("log_every", 0, ">= 1"),
                             ("compute_dtype", "float8", "bfloat16 or float32"),
                             ("checkpoint_every", 2.0, ">= 1"), ("keep_checkpoints", 0, "0 would delete"),
                             ("stop_at_step", -1, ">= 0"), ("preemption_sync_every", None, ">= 1"),
                             ("seed", -1, r"an integer in \[0, 2\*\*32\)"),
                             ("seed", 1.5, r"an integer in \[0, 2\*\*32\)"), ("seed", 2 ** 32, r"an integer in \[0, 2")):
        with pytest.raises(errors.InputError, match=rf"^config\.{name}={bad!r}: .*{valid}"):
            loop.Settings(ml_collections.ConfigDict(good | {name: bad})).check_training()
    settings = loop.Settings(ml_collections.ConfigDict(good | {"phases": [{"seq_len": 3}]}))
    with pytest.raises(errors.InputError, match=r"^config\.phases\[0\]\.seq_len=3: an integer >= 5$"):
        settings.need(settings.integer("phases[0].seq_len", 5), "phases[0].seq_len", "an integer >= 5")

    # a notebook's numpy numbers are numbers (``np.int64`` was "an integer >= 1", and ml_collections' to_json refused
    # the config record after the run began); the config then holds the Python numbers, the float's shortest form
    import jax.numpy as jnp
    import numpy as np
    # a section set to None or replaced without a key (a TypeError or KeyError), a count past int32 (10**30 epochs
    # passed, then failed in the step's compile)
    for config, msg in ((good | {"phases": None}, r"config.phases=None: a section of settings \(a dict\)"),
                        (good | {"phases": [{}]}, r"config.phases.0.seq_len is missing: the config file's section"),
                        (good | {"log_every": 2 ** 40}, r"config.log_every=1099511627776: at most 2,147,483,647")):
        settings = loop.Settings(ml_collections.ConfigDict(config))
        with pytest.raises(errors.InputError, match="^" + msg):
            settings.need(settings.integer("phases[0].seq_len", 5), "phases[0].seq_len", "an integer >= 5")
            settings.check_training()
    assert loop.Settings(ml_collections.ConfigDict(good | {"seed": 2 ** 32 - 1})).check_training() is None
    settings = loop.Settings(ml_collections.ConfigDict(good | {"data": None}))  # a flag's section set to None
    with pytest.raises(errors.InputError, match=r"^config.data=None: a section of settings"):
        settings.flags("data.start_over")
    # a flag given as a string ("no" was read as true), or a number; numpy's bool is a bool
    for bad, valid in (("no", r"true or false \(a bool; the string 'no' read as true\)"), (1, "true or false$")):
        with pytest.raises(errors.InputError, match=rf"^config\.fsdp={bad!r}: {valid}"):
            loop.Settings(ml_collections.ConfigDict(good | {"fsdp": bad})).check_training()
    loop.Settings(ml_collections.ConfigDict(good | {"fsdp": np.bool_(True), "progress": False})).check_training()
    config = ml_collections.ConfigDict(good | {"learning_rate": np.float32(1e-4), "log_every": np.int64(5),
                                               "seed": jnp.uint32(7), "warmup_fraction": np.array(0.25),
                                               "phases": [{"seq_len": np.int16(8), "sizes": (np.int8(2), 3)}]})
    config.lock()
    loop.Settings(config).check_training()
    assert config.to_dict() == good | {"learning_rate": 1e-4, "log_every": 5, "seed": 7, "warmup_fraction": 0.25,
                                       "phases": [{"seq_len": 8, "sizes": (2, 3)}]}
    assert [type(config[k]) for k in ("learning_rate", "log_every", "seed")] == [float, int, int]
    assert config.to_json()  # a numpy number anywhere was a TypeError here
    with pytest.raises(errors.InputError, match=r"^config\.log_every=array\(\[5\]\): an integer >= 1"):
        loop.Settings(ml_collections.ConfigDict(good | {"log_every": np.array([5])})).check_training()


def test_a_file_in_a_checkpoints_place_is_refused_a_stray_file_ignored(tmp_path):
    """checkpoints/2 replaced by a file would otherwise make the run start over from step 0 beside it."""
    from squeezebert_jax import checkpointing

    ck = tmp_path / "checkpoints"
    (ck / "4").mkdir(parents=True)
    (ck / "notes.txt").write_text("mine")
    assert checkpointing.steps_on_disk(str(ck)) == [4]
    (ck / "2").write_text("{}")
    with pytest.raises(errors.InputError, match=rf"^{ck / '2'} is a file, not the checkpoint of step 2"):
        checkpointing.steps_on_disk(str(ck))


def test_a_training_stopped_early_ends_the_job_it_is_part_of_with_one_line(tmp_path, monkeypatch, run_cli, capsys):
    """loop.require_finished: a training stopped early (SIGTERM, stop_at_step) inside a larger job is named with its
    checkpoint, and the job stops there (a sweep read its missing scores: a TypeError; the real-text kinds their
    missing model), exiting 0 when a checkpoint is on disk to resume from, 1 when none is. The sweep records no row
    for the stopped run, so that its rerun resumes it."""
    from squeezebert_jax import cli, corpus, sweep
    from squeezebert_jax import finetune as ft

    finished = {"preempted": False, "best": {"epoch": 1}}
    assert loop.require_finished(finished, str(tmp_path)) is finished
    with pytest.raises(errors.StoppedEarly, match=rf"^the rte run stopped early \(signal or stop_at_step\): checkpoint "
                                                  rf"of step 3 saved in {tmp_path}/checkpoints, no model exported; "
                                                  "run the same command again to resume$") as e:
        loop.require_finished({"preempted": True, "checkpoint_step": 3}, str(tmp_path), "the rte run")
    assert e.value.resumable

    def stopped(main):
        return cli.run(lambda argv: main(), [], prog="job.py")

    def resumable():
        raise errors.StoppedEarly("stopped, resumable", resumable=True)

    def lost():
        raise errors.StoppedEarly("stopped, nothing saved", resumable=False)

    assert stopped(resumable) == 0 and capsys.readouterr().out == "stopped, resumable\n"
    assert stopped(lost) == 1 and capsys.readouterr().err == "job.py: error: stopped, nothing saved\n"

    data = corpus.write_glue_tasks(tmp_path / "glue", num_train=4, num_dev=2, num_test=2, tasks=("rte",))
    monkeypatch.setattr(ft, "finetune", lambda c, run_dir: {"preempted": True, "checkpoint_step": 2})
    wd = tmp_path / "sweep"
    rc, out, err = run_cli("train/glue_recipe.py", "--init_from", tmp_path, "--data_dir", data, "--workdir", wd,
                           "--tasks", "rte", "--epochs", "1", "--sweep", "lr=1e-3,1e-2")
    assert rc == 0 and f"the sweep's run {wd}/rte/lr=0.001,seed=0 stopped early" in out, err
    assert "checkpoint of step 2" in out and sweep.read_rows(os.path.join(wd, sweep.RECORD)) == []
