"""squeezebert_jax.cli: what every script shares, as a user meets it: override paths and values, and the one line a
full disk or quota gives from any library."""

from __future__ import annotations

import os
import re

import pytest
from conftest import ROOT, one_error_line, run_script

from squeezebert_jax import cli

PRETRAIN = os.path.join(ROOT, "train", "pretrain.py")
SMOKE = os.path.join(ROOT, "train", "configs", "pretrain.py") + ":smoke"


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


@pytest.mark.parametrize("override, message", [
    ("--config.phases.0.num_steps=3", "--config.phases.0.num_steps: not a field path: write a list entry's index in "
                                      "brackets, --config.phases[0].num_steps"),
    ("--config.phases[5].num_steps=3", "--config.phases[5].num_steps: the config's list has no entry of that index"),
    ("--config.data.num_workers=-1", "config.data.num_workers=-1: an integer >= 0"),
])
def test_override_paths_and_values_are_one_line(tmp_path, override, message):
    rc, _, err = run_script(PRETRAIN, "--config", SMOKE, "--workdir", tmp_path / "run", override)
    assert rc in (1, 2) and message in one_error_line(err)
    assert not (tmp_path / "run").exists()


def test_a_refused_run_takes_its_new_log_and_workdir_away_and_keeps_an_old_log(tmp_path, capsys):
    """cli.run after an error: a log file setup_logging created in directories it made, alone there, goes with them;
    a log that was there before keeps the error line; a directory holding anything else keeps everything."""
    from squeezebert_jax.errors import InputError
    from conftest import root_logging_restored

    def refused(argv):
        raise InputError("config.x=1: refused")

    cases = {"new": tmp_path / "a" / "b" / "run", "old": tmp_path / "old", "busy": tmp_path / "busy"}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "log.txt").write_text("an earlier start\n")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "checkpoints").mkdir()
    for name, wd in cases.items():
        with root_logging_restored():
            cli.setup_logging(str(wd / "log.txt"))
            assert cli.run(refused, [], prog="x") == 1
    assert "x: error: config.x=1: refused" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    assert (tmp_path / "old" / "log.txt").read_text().splitlines()[-1].endswith("x: error: config.x=1: refused")
    assert sorted(os.listdir(tmp_path / "busy")) == ["checkpoints", "log.txt"]


@pytest.mark.parametrize("argv, message", [
    (("--workdir", ""), f"flag --workdir: {cli.EMPTY_VALUE}"),
    (("--workdir", "  "), f"flag --workdir: {cli.EMPTY_VALUE}"),
    # a boolean flag's value apart from it: absl sets the flag and leaves the word over (it used to be dropped)
    (("--workdir", "W", "--overwrite", "false"), "unexpected argument 'false' after --overwrite: a flag takes its "
                                                 "value after '=' (write --overwrite=false)"),
    (("--workdir", "W", "--config.progress", "False", "--overwrite"), "unexpected argument 'False' after "
                                                                     "--config.progress"),
    (("--workdir", "W", "extra"), "unexpected argument 'extra': this script takes flags only")])
def test_an_empty_flag_or_a_stray_word_is_refused_by_name_in_absl_scripts(tmp_path, argv, message):
    """A flag given with nothing in it where leaving it out means something else (no --json written, no workdir) is
    one line naming it, before any work: it used to be read as the flag left out. So is a word no flag takes."""
    rc, _, err = run_script(PRETRAIN, "--config", SMOKE, *[str(tmp_path / a) if a == "W" else a for a in argv])
    assert rc == 2 and message in one_error_line(err)
    assert not os.listdir(tmp_path)


def test_an_empty_argument_is_refused_by_name_in_argparse_scripts(capsys):
    p = cli.ArgumentParser()
    p.add_argument("--init_from", required=True)
    p.add_argument("--data_dir", default="")  # "" is its default: given empty, it means the default
    p.add_argument("--out", default=None)
    p.add_argument("--input", nargs="+", default=None)
    assert p.parse_args(["--init_from", "m", "--data_dir", ""]).data_dir == ""
    for argv, name in ((["--init_from", ""], "--init_from"), (["--init_from", "m", "--out", " "], "--out"),
                       (["--init_from", "m", "--input", "a", ""], "--input")):
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        assert e.value.code == 2 and f"error: {name}: {cli.EMPTY_VALUE}" in capsys.readouterr().err


def test_a_config_section_given_whole_adds_to_the_files_section(monkeypatch):
    """``--config.model.overrides="{...}"`` replaced the config file's whole section in ml_collections: the smoke
    config's widths went without a word and a full-size model trained. The keys given now join the file's (replacing
    those of the same name); a key a closed section does not hold is refused by name, and one set by its path in an
    open section says how to add it."""
    from absl import flags
    from ml_collections import config_flags

    from squeezebert_jax.errors import InputError

    def parse(*overrides):
        argv = ["prog", "--config", SMOKE, *overrides]
        monkeypatch.setattr("sys.argv", argv)  # (ml_collections reads the overrides' flags from sys.argv)
        fv = flags.FlagValues()
        config_flags.DEFINE_config_file("config", None, "", flag_values=fv, lock_config=True)
        fv(argv)
        cli.merge_sections(fv)
        return fv.config

    smoke = parse().model.overrides.to_dict()
    assert smoke["hidden_size"] == 32
    assert parse("--config.model.overrides={'q_groups': 2}").model.overrides.to_dict() == smoke | {"q_groups": 2}
    assert parse("--config.model.overrides={'hidden_size': 64}").model.overrides.to_dict() == smoke | {
        "hidden_size": 64}
    # an open section given empty clears the file's keys (merged, "{}" changed nothing: the smoke widths trained)
    assert parse("--config.model.overrides={}").model.overrides.to_dict() == {}
    # a setting given twice: the later replaced the earlier without a word ({} then a dict undid the clear)
    for twice in (("--config.model.overrides={}", "--config.model.overrides={'q_groups': 2}"),
                  ("--config.stop_at_step=1", "--config.stop_at_step=2"),
                  ("--config.stop_at_step=1", "-config.stop_at_step=2")):  # absl takes one dash too
        with pytest.raises(InputError, match=rf"^{re.escape(twice[0].split('=')[0])} is given twice: give each "
                                             r"setting once"):
            parse(*twice)
    data = parse("--config.data={'num_workers': 1}").data.to_dict()
    assert data == parse().data.to_dict() | {"num_workers": 1}
    with pytest.raises(InputError, match=r"^--config.data: 'foo' is no field of config.data \(its fields: "
                                         r"demo_num_docs, .*whole_word_masking\)$"):
        parse("--config.data={'foo': 1, 'num_workers': 1}")
    argv = ["prog", "--config.model.overrides.q_groups=2"]
    with pytest.raises((AttributeError, KeyError)) as e:
        parse(argv[1])
    assert cli.flag_error_line(e.value, argv) == (
        "--config.model.overrides.q_groups=2: the config has no field 'q_groups': a key config.model.overrides does "
        "not hold yet goes in with the section, --config.model.overrides=\"{'q_groups': VALUE}\" (added to the config "
        "file's)")
