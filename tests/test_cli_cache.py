"""The training scripts turn on XLA's persistent compilation cache (cli.enable_compilation_cache): where it goes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = ("from squeezebert_jax import cli; import jax; d = cli.enable_compilation_cache(); "
         "print(d, jax.config.jax_compilation_cache_dir)")


def _probe(env: dict) -> list[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("JAX_COMPILATION_CACHE_DIR", "SQUEEZEBERT_COMPILATION_CACHE")}
    r = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split()


def test_the_cache_directory_default_jax_setting_override_and_off(tmp_path):
    home = tmp_path / "cache"
    want = str(home / "squeezebert_jax" / "xla")
    assert _probe({"XDG_CACHE_HOME": str(home)}) == [want, want]  # the default
    own = str(tmp_path / "jax_own")
    assert _probe({"XDG_CACHE_HOME": str(home), "JAX_COMPILATION_CACHE_DIR": own}) == [own, own]  # jax's, kept
    ours = str(tmp_path / "ours")
    assert _probe({"JAX_COMPILATION_CACHE_DIR": own, "SQUEEZEBERT_COMPILATION_CACHE": ours}) == [ours, ours]
    assert _probe({"SQUEEZEBERT_COMPILATION_CACHE": "0"}) == ["None", "None"]  # off
    # the words people write for on and off: "false" made a cache directory named false, "yes" one named yes
    assert _probe({"SQUEEZEBERT_COMPILATION_CACHE": " False "}) == ["None", "None"]
    assert _probe({"XDG_CACHE_HOME": str(home), "SQUEEZEBERT_COMPILATION_CACHE": "yes"}) == [want, want]


def test_a_cache_setting_that_is_no_directory_is_one_line(tmp_path, monkeypatch):
    """A mistyped word ("disable") made a folder of that name where the run started; a file was a jax warning and no
    cache. Refused before jax's setting is touched."""
    from squeezebert_jax import cli
    from squeezebert_jax.errors import InputError

    (tmp_path / "afile").write_text("x")
    for value, msg in (("disable", r"'disable': an absolute directory, or 0/false/no/off \(no cache\) or "
                                   r"1/true/yes/on \(the default directory\)$"),
                       (str(tmp_path / "afile"), r".*afile is not a directory$")):
        monkeypatch.setenv("SQUEEZEBERT_COMPILATION_CACHE", value)
        with pytest.raises(InputError, match=r"^SQUEEZEBERT_COMPILATION_CACHE=" + msg):
            cli.enable_compilation_cache()
    assert sorted(os.listdir(tmp_path)) == ["afile"]
