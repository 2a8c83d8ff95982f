"""File helpers every module may use (they import nothing heavy): whole-or-nothing writes, and output paths checked
before any work (a file the user has is never replaced without ``--overwrite``)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable

from squeezebert_jax.errors import InputError


def _umask() -> int:
    """The process's umask (read by setting it and putting it back: os has no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, data: str | bytes | Callable[[str], None]) -> str:
    """Write ``path`` whole or not at all: into a temp file in the same directory, flushed to disk, then renamed over
    ``path`` (``os.replace``), so a reader or a crash never sees a half-written file. ``data`` is text (UTF-8, ``\\n``
    line ends), bytes, or a function that writes the file at the path it is given (e.g.
    ``lambda tmp: np.save(tmp, x)``; the temp name ends with ``path``'s name, so its extension is kept).
    The file gets the usual permissions (umask), not a temp file's 0600. Returns ``path``."""
    path = os.fspath(path)
    d, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(d, f".tmp{os.getpid()}-{secrets.token_hex(4)}-{base}")
    try:
        if callable(data):
            data(tmp)
        else:
            with open(tmp, "w" if isinstance(data, str) else "wb",
                      **({"encoding": "utf-8", "newline": "\n"} if isinstance(data, str) else {})) as f:
                f.write(data)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # a writer such as safetensors' makes its file 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def check_output_dir(out: str | os.PathLike, src: str | os.PathLike | None = None, overwrite: bool = False,
                     what: str = "--out", ignore: tuple[str, ...] = ()) -> str:
    """Refuse, before any work, an output directory that would lose something: ``src`` itself or a directory inside
    it (always: a conversion never writes into its source), an existing file, or a directory that already holds
    files other than ``ignore`` (unless ``overwrite``: then the files written replace those of the same name).
    Returns ``out``."""
    out = os.fspath(out)
    if src is not None:
        s, o = os.path.realpath(os.fspath(src)), os.path.realpath(out)
        if o == s or o.startswith(s.rstrip(os.sep) + os.sep):
            where = "is" if o == s else "is inside"
            raise InputError(f"{what} {out} {where} the source directory {os.fspath(src)}; a conversion never writes "
                             f"into its source: choose another {what} directory")
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{what} {out} is an existing file, not a directory; choose a directory to write into")
    if os.path.isdir(out) and not overwrite:
        present = sorted(set(os.listdir(out)) - set(ignore))
        if present:
            listed = ", ".join(present[:5]) + (f", ... ({len(present)} entries)" if len(present) > 5 else "")
            raise InputError(f"{what} {out} is not empty (it holds {listed}); pass --overwrite to replace the files "
                             "written there, or choose a new directory")
    _check_parent(out, what)
    return out


def _check_parent(out: str, what: str) -> None:
    """The nearest existing ancestor of ``out`` is a directory (so that makedirs / writing can succeed)."""
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {out}: {parent} is a file, not a directory")


def check_output_file(out: str | os.PathLike, overwrite: bool = False, what: str = "--out") -> str:
    """Refuse, before any work, an output file path that is a directory, or an existing file unless ``overwrite``."""
    out = os.fspath(out)
    if os.path.isdir(out):
        raise InputError(f"{what} {out} is a directory; give the path of the file to write, "
                         f"e.g. {os.path.join(out, 'model.ptl')}")
    if os.path.exists(out) and not overwrite:
        raise InputError(f"{what} {out} already exists; pass --overwrite to replace it, or choose another path")
    _check_parent(out, what)
    return out
