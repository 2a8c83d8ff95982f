"""The eval/ benchmark scripts as a user meets them: a refused command prints one line naming what is wrong, exits 1
(argparse: 2) and changes nothing on disk -- a --models entry that is neither a preset nor a MODEL_DIR, a bad number,
an --out that exists without --overwrite, a formulation that is gone. All refused before any model is built."""

from __future__ import annotations

import pytest

SCRIPTS = ("eval/latency.py", "eval/profile_table1.py", "eval/bench_infer.py", "eval/bench_train.py")
WITH_MODELS = ("eval/latency.py", "eval/profile_table1.py")


def one_error_line(err: str, prog: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("script", WITH_MODELS)
def test_a_missing_model_dir_is_one_line(script, run_cli, tmp_path):
    missing = tmp_path / "no_such_model"
    rc, out, err = run_cli(script, "--models", "squeezebert-uncased", missing, "--tiny")
    line = one_error_line(err, script.split("/")[1])
    assert rc == 1 and f"--models {missing}: no such directory" in line and out == ""


@pytest.mark.parametrize("script", WITH_MODELS)
def test_a_directory_without_config_and_an_unknown_preset_are_one_line(script, run_cli, tmp_path):
    (tmp_path / "empty").mkdir()
    rc, _, err = run_cli(script, "--models", tmp_path / "empty")
    assert rc == 1 and "no config.json there (not a MODEL_DIR)" in one_error_line(err, script.split("/")[1])
    rc, _, err = run_cli(script, "--models", "squeezebert-uncasd")
    line = one_error_line(err, script.split("/")[1])
    assert rc == 1 and "unknown preset 'squeezebert-uncasd'" in line and "or a MODEL_DIR" in line


BAD_NUMBERS = [(s, ["--batch", v]) for s in SCRIPTS for v in ("0", "two")] + [
    (s, [flag, v]) for s in SCRIPTS[:3] for flag, v in (("--seq-len", "-1"), ("--runs", "0"), ("--warmup", "0"))] + [
    ("eval/bench_train.py", ["--steps", "0"]), ("eval/bench_train.py", ["--seq-lens", "128", "x"])]


@pytest.mark.parametrize("script,argv", BAD_NUMBERS)
def test_a_bad_number_is_a_usage_error(script, argv, run_cli):
    flag = argv[0]
    rc, out, err = run_cli(script, *argv)
    assert rc == 2 and f"argument {flag}" in err and "Traceback" not in err and out == ""


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_existing_out_is_refused_without_overwrite(script, run_cli, tmp_path, digest):
    out = tmp_path / "tables.md"
    out.write_text("an earlier run's tables\n")
    before = digest(out)
    rc, stdout, err = run_cli(script, "--tiny", "--out", out)
    line = one_error_line(err, script.split("/")[1])
    assert rc == 1 and f"--out {out} already exists; pass --overwrite" in line and stdout == ""
    assert digest(out) == before
    rc, _, err = run_cli(script, "--tiny", "--out", tmp_path)  # a directory
    assert rc == 1 and f"--out {tmp_path} is a directory" in one_error_line(err, script.split("/")[1])


def test_more_threads_than_cpus_is_one_line(run_cli):
    rc, _, err = run_cli("eval/latency.py", "--tiny", "--threads", "100000")
    assert rc == 1 and "--threads 100000: this process may use" in one_error_line(err, "latency.py")


@pytest.mark.parametrize("gone", ["conv-bmm", "core-bhsd", "conv-bmm+core-bhsd"])
def test_removed_formulations_are_refused(gone, run_cli):
    """They compiled to the same program as model.py (identical optimized HLO), so they are no longer offered."""
    rc, _, err = run_cli("eval/bench_infer.py", "--formulation", gone)
    assert rc == 2 and "invalid choice" in err and "Traceback" not in err
    rc, _, err = run_cli("eval/bench_infer.py", "--sweep", "--sweep-only", gone)
    assert rc == 2 and "invalid choice" in err


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_out_in_a_missing_directory_is_refused_before_any_work(script, run_cli, tmp_path):
    """files.check_output_file, the one output check: a mistyped directory is named before the work, not after it."""
    out = tmp_path / "no_such_dir" / "tables.md"
    rc, stdout, err = run_cli(script, "--tiny", "--out", out)
    line = one_error_line(err, script.split("/")[1])
    assert rc == 1 and f"--out {out}: no directory {out.parent}; create it first" in line and stdout == ""
    assert not out.parent.exists()
