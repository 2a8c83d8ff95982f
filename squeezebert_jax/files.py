"""File helpers every module may use (they import nothing heavy): whole-or-nothing writes, and output paths checked
before any work (a file the user has is never replaced without ``--overwrite``, an input never) and claimed while it
is made (two commands given one output never both succeed)."""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import logging
import math
import numbers
import os
import re
import secrets
import stat
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

import numpy as np

from squeezebert_jax.errors import DataFileError, InputError


ENV_ON, ENV_OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def env_switch(name: str) -> bool | None:
    """An on/off environment variable as people write one: True for 1, true, yes, on; False for unset, empty, 0,
    false, no, off (any case, spaces around ignored); None for anything else (the caller says what it means)."""
    value = os.environ.get(name, "").strip().lower()
    return True if value in ENV_ON else False if value in ENV_OFF else None


def env_flag(name: str) -> bool:
    """``env_switch``, and anything else refused in one line naming the variable."""
    on = env_switch(name)
    if on is None:
        raise InputError(f"{name}={os.environ[name]!r}: 1 or 0 (or true/false, yes/no, on/off)")
    return on


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
    The file gets the usual permissions (umask), not a temp file's 0600. A symlink is written through, as a shell's
    ``>`` does: its target is replaced and the link kept (renaming over the link would turn it into a file of its own
    and leave the target as it was). A path that is a directory, a pipe, a device or a socket is refused, never
    replaced. Returns ``path``."""
    path = os.fspath(path)
    d, base = os.path.split(os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path))
    target = os.path.join(d, base)
    if os.path.exists(target) and not os.path.isfile(target):  # renamed over, a device or a pipe would be gone
        raise InputError(f"{path} is {special_kind(target)}, not a regular file: it is never replaced by one")
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
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def check_output_dir(out: str | os.PathLike, src: str | os.PathLike | None = None, overwrite: bool = False,
                     what: str = "--out", ignore: tuple[str, ...] = (), entries: bool = True,
                     writes: str | None = "this command's files", job: str | None = "") -> str:
    """Refuse, before any work, an output directory that would lose something: ``src`` itself or a directory inside
    it (always: a conversion never writes into its source), an existing file, or a directory that already holds
    files other than ``ignore`` (unless ``overwrite``: then the files written replace those of the same name). An
    entry of an existing ``out`` that a write would go through to something else is refused, ``overwrite`` or not:
    a link that leads out of ``out`` (into ``src``, say: a conversion would replace its source's files), a pipe, a
    device or a socket (not with ``entries`` False: a command that names the files it writes checks those alone,
    ``claim_output_files``). A model's directory is refused, ``overwrite`` or not (``refuse_model_dir``: ``writes``
    there would leave a mix that loads as neither), but where ``writes`` is None (a model's own writer: a conversion
    replaces a model with ``overwrite``). So is the directory of a job other than ``job`` (this command's, as its
    ``RunLock`` names it): a training run's (its lock, or its ``config_history.jsonl``), whose config.json and model
    a conversion's --overwrite replaced (not with ``job`` None: a command that writes named files beside others;
    one of the directories a run writes, its tb/ say, is refused all the same: ``refuse_nested``). Returns ``out``."""
    out, overwrite = os.fspath(out), overwrite_flag(overwrite)
    if src is not None:
        if where := within(out, src):
            raise InputError(f"{what} {out} {where} the source directory {os.fspath(src)}; a conversion never writes "
                             f"into its source: choose another {what} directory")
    _refuse_broken_link(out, what)
    if os.path.exists(out) and not os.path.isdir(out):
        raise InputError(f"{what} {out} is an existing file, not a directory; choose a directory to write into")
    if os.path.isdir(out) and entries:
        _check_entries(out, what)
    if os.path.isdir(out) and writes is not None:
        refuse_model_dir(out, writes, what)
    refuse_nested(out, what, "" if job is None else job)  # a run's tb/ holds none of a writer's named files either
    if job is not None and (other := run_of(out)) and other != job:
        raise InputError(f"{what} {out} is the directory of a {other} run: its config, checkpoints and model are that "
                         f"run's, and this command's files would replace or join them, --overwrite or not; choose "
                         f"another {what}")
    if os.path.isdir(out) and not overwrite:
        present = sorted(set(os.listdir(out)) - set(ignore))
        if present:
            listed = ", ".join(present[:5]) + (f", ... ({len(present)} entries)" if len(present) > 5 else "")
            raise InputError(f"{what} {out} is not empty (it holds {listed}); pass --overwrite to replace the files "
                             "written there, or choose a new directory")
    _check_parent(out, what)
    return out


def within(path: str | os.PathLike, directory: str | os.PathLike) -> str:
    """"is" when ``path`` is ``directory``, "is inside" when it lies under it (both through their links), else ""."""
    p, d = os.path.realpath(os.fspath(path)), os.path.realpath(os.fspath(directory))
    return "is" if p == d else "is inside" if p.startswith(d.rstrip(os.sep) + os.sep) else ""


def _refuse_broken_link(out: str, what: str) -> None:
    """A directory path that is a link to nothing (or a loop of links): makedirs would fail on it after the work."""
    if os.path.islink(out) and not os.path.exists(out):
        if os.path.realpath(out) == os.path.abspath(out) or _loops(out):
            raise InputError(f"{what} {out} is a link that leads back to itself; remove it, or choose another "
                             "directory")
        raise InputError(f"{what} {out} is a link to {os.path.realpath(out)}, which does not exist; create it, "
                         "remove the link, or choose another directory")


def _loops(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def _check_entries(out: str, what: str) -> None:
    """No entry of the directory ``out`` (at any depth, links not followed) is one that a write would go through to
    something that is not ``out``'s own file: a link leading out of ``out``, a pipe, a device or a socket."""
    root = os.path.realpath(out)
    for d, dirs, names in os.walk(out):
        for name in dirs + names:
            path = os.path.join(d, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                if not within(target, root):
                    raise InputError(f"{what} {out} holds {path}, a link to {target} outside it: a file written there "
                                     "would replace the link's target; remove the link, or choose another directory")
            elif not os.path.isdir(path) and not os.path.isfile(path):
                raise InputError(f"{what} {out} holds {path}, {special_kind(path)}, which a file written there "
                                 "would replace; remove it, or choose another directory")


NAME_ROOM = 24  # what a write adds to a file's name beside it: atomic_write's ".tmpPID-HEX-" and claims' ".lock"


def _check_name_lengths(out: str, parent: str, what: str) -> None:
    """Each name along ``out`` fits the file system (NAME_MAX, usually 255 bytes, with ``NAME_ROOM`` for the
    temporary and lock files written beside the last one), and the whole path PATH_MAX: a name too long is named
    before any work, not an OSError after it."""
    try:
        name_max, path_max = os.pathconf(parent, "PC_NAME_MAX"), os.pathconf(parent, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    parts = [p for p in os.path.abspath(out).split(os.sep) if p]
    for i, part in enumerate(parts):
        room = NAME_ROOM if i == len(parts) - 1 else 0
        if len(part.encode()) + room > name_max:
            raise InputError(f"{what} {_short(out, 60)}: the name {_short(part, 40)} is {len(part.encode())} bytes, "
                             f"more than the {name_max - room} this file system allows there ({name_max}"
                             f"{f' less {room} for the files written beside it' if room else ''}); choose a shorter "
                             "name")
    if len(os.path.abspath(out).encode()) + NAME_ROOM > path_max:
        raise InputError(f"{what} {_short(out, 60)}: the path is {len(os.path.abspath(out).encode())} bytes, more than "
                         f"the {path_max - NAME_ROOM} this system allows; choose a shorter path")


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _check_parent(out: str, what: str) -> None:
    """The nearest existing ancestor of ``out`` is a directory (so that makedirs / writing can succeed), and it (or
    ``out`` itself, an existing directory) can be written: a read-only directory or file system is named before any
    work."""
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {out}: {parent} is a file, not a directory")
    _check_name_lengths(out, parent, what)
    target = out if os.path.isdir(out) else parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise InputError(f"{what} {out}: {target} cannot be written (read-only, or not this user's); choose a "
                         "writable directory")


def check_output_file(out: str | os.PathLike, overwrite: bool = False, what: str = "--out",
                      inputs: Iterable[str | os.PathLike] = ()) -> str:
    """Refuse, before any work, an output file path that cannot be this command's: an empty path; one of the command's
    ``inputs`` (always, ``--overwrite`` or not: the same path, or the same file through a symlink or a hard link), or
    a path inside an input that is a directory (a conversion's source: the model's own files); a path ending in a
    slash; a directory; an existing file unless ``overwrite``; a pipe, a device or a socket (``/dev/null``,
    ``/dev/stdout``: the output replaces a file whole, which would remove them); a path whose directory (for a
    symlink, its target's) does not exist (refused like a shell's ``> missing/x``, not created: a mistyped directory
    is named before the work instead of after it), is a file, or cannot be written. Returns ``out``. A command that
    writes ``out`` at the end of its work holds it meanwhile with ``claim_output_file``, which runs this check."""
    out, overwrite = os.fspath(out), overwrite_flag(overwrite)
    if not out.strip():
        raise InputError(f"{what} is empty; give the path of the file to write")
    if out.endswith(("/", os.sep)):
        raise InputError(f"{what} {out} ends in {out[-1]!r}, a directory's path; give the path of the file to write")
    for src in map(os.fspath, inputs):
        if _same_file(out, src):
            raise InputError(f"{what} {out} is {src}, an input of this command; an output never replaces "
                             f"an input (not even with --overwrite): choose another {what} path")
        if os.path.isdir(src) and within(out, src) == "is inside":
            raise InputError(f"{what} {out} is inside {src}, an input directory of this command; an output is "
                             f"never written among its inputs (not even with --overwrite): choose another {what} path")
    refuse_nested(out, what, "")  # nor in a model's directory, nor in a run's checkpoints, tb/, model/, ...
    if os.path.isdir(out):
        raise InputError(f"{what} {out} is a directory; give the path of the file to write (a file name inside "
                         "it, say)")
    if os.path.islink(out) and _loops(out):  # written through, the write failed after the work (ELOOP)
        raise InputError(f"{what} {out} is a link that leads back to itself; remove it, or choose another path")
    if os.path.islink(out) and not os.path.exists(out) and not overwrite:  # "already exists" hid where it writes
        raise InputError(f"{what} {out} is a symbolic link to {os.readlink(out)}, which does not exist: the output "
                         "would be written there; pass --overwrite to write through the link, or choose another path")
    if os.path.lexists(out) and not overwrite:
        raise InputError(f"{what} {out} already exists; pass --overwrite to replace it, or choose another path")
    if os.path.exists(out) and not os.path.isfile(out):  # replaced by a file, a pipe or a device would be gone
        raise InputError(f"{what} {out} is {special_kind(out)}, not a regular file; the output is written to a "
                         f"file (and replaces it whole): give the path of one")
    target = os.path.realpath(out) if os.path.islink(out) else out  # a link is written through (atomic_write)
    if target != out and not os.path.isdir(os.path.dirname(target)):
        raise InputError(f"{what} {out} is a link to {target}, whose directory does not exist; create it first, or "
                         "choose another path")
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        _check_parent(out, what)  # an ancestor that is a file, or a read-only one, is named as such
        raise InputError(f"{what} {out}: no directory {parent}; create it first (mkdir -p {parent}), or choose "
                         "another path")
    # "missing/../x.out": abspath drops "missing/.." as text, but the system walks through "missing" to write
    walked = os.path.dirname(target) or "."
    if not os.path.isdir(walked):
        gone = next(p for p in _prefixes(walked) if not os.path.isdir(p))
        raise InputError(f"{what} {out}: the path goes through {gone}, which is not a directory; give a path whose "
                         "directories exist")
    _check_parent(target, what)
    run_dir = os.path.dirname(os.path.realpath(out))
    if (os.path.basename(out) in (*RUN_FILES, ".lock") or os.path.basename(target) in (*RUN_FILES, ".lock")) and (
            owner := run_of(run_dir)):  # its record, its lock: --overwrite replaced the run's with predictions
        raise InputError(f"{what} {out} is {os.path.basename(target)} of the {owner} run in {run_dir}, which that run "
                         f"writes, --overwrite or not; choose another {what}")
    return out


def _prefixes(path: str) -> list[str]:
    """``a/b/../c`` -> ``a``, ``a/b``, ``a/b/..``, ``a/b/../c``: each directory a path walks through, as written."""
    parts = path.split(os.sep)
    return [os.sep.join(parts[:i]) or os.sep for i in range(1, len(parts) + 1) if parts[i - 1] or i == 1]


def special_kind(path: str) -> str:
    """What a path that is no regular file or directory is, in a phrase."""
    mode = os.stat(path).st_mode
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "something other than a file"


def _same_file(a: str, b: str) -> bool:
    """``a`` and ``b`` are one file: the same real path (symlinks resolved), or one inode (a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def check_lock_path(lock: str, owner: str) -> None:
    """A lock file's path (``OUT.lock``, ``WORKDIR/.lock``) holds nothing or a regular file: a symbolic link (to a
    missing file: ``open`` then fails, and the claim loop retried for ever), a directory or a pipe there is one line
    naming it, its kind and ``owner`` (what the lock is for), never an OS message or a hang."""
    try:
        mode = os.lstat(lock).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISLNK(mode):
        target = os.readlink(lock)
        kind = f"a symbolic link to {target}" + ("" if os.path.exists(lock) else ", which does not exist")
    else:
        kind = special_kind(lock)
    raise InputError(f"{lock}: {kind}, where {owner}'s lock file goes (a regular file this program makes); move it "
                     "away and run again")


CLAIM_SUFFIX = ".lock"


def claim_path(out: str | os.PathLike) -> str:
    """The lock file that ``claim_output_file`` holds next to ``out`` while a command works (``OUT.lock``)."""
    return os.fspath(out) + CLAIM_SUFFIX


@contextlib.contextmanager
def claim_output_file(out: str | os.PathLike, overwrite: bool = False, what: str = "--out",
                      inputs: Iterable[str | os.PathLike] = ()) -> Iterator[str]:
    """``with claim_output_file(args.out, args.overwrite, inputs=(args.input,)):`` -- do the work, then write ``out``
    (``atomic_write``). Two commands given one output never both succeed with one result lost: ``out`` is checked
    (``check_output_file``), then claimed for the work's duration by ``OUT.lock`` (``claim_path``), a file created
    exclusively (``O_CREAT | O_EXCL``) holding this process's pid, host and command, and ``flock``ed; a second command
    refuses, naming the holder. A lock left by a run that died (its pid gone on this host, its ``flock`` free) is taken
    over; one from another host whose ``flock`` is free is refused with the path to delete once that run is known to be
    gone. ``out`` is checked again once claimed (a run that ended meanwhile may have written it), and the lock file is
    removed at the end, whether the work succeeded or not. Yields ``out``."""
    out = check_output_file(out, overwrite, what, inputs)
    fd, lock = _claim(out, what)
    try:
        check_output_file(out, overwrite, what, inputs)
        yield out
    finally:
        _unclaim(fd, lock)


@contextlib.contextmanager
def claim_output_files(out_dir: str | os.PathLike, names: Iterable[str], overwrite: bool = False,
                       what: str = "--out", inputs: Iterable[str | os.PathLike] = ()) -> Iterator[list[str]]:
    """``claim_output_file`` for each of the files ``names`` a command writes into the directory ``out_dir``: only
    those are refused when they exist (unless ``overwrite``), other files there are left alone and are no reason to
    refuse (GLUE's server wants every task's file in one folder). ``out_dir`` is created before the work if missing
    (its files' locks live there), and removed again at the end if nothing was written into it. Yields the paths."""
    # its files: each claimed below (named, they replace none of a model's)
    out_dir = check_output_dir(out_dir, overwrite=True, what=what, entries=False, writes=None, job=None)
    missing, d = [], os.path.abspath(out_dir)
    while not os.path.exists(d):
        missing.append(d)
        d = os.path.dirname(d)
    os.makedirs(out_dir, exist_ok=True)
    inputs = tuple(inputs)
    try:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(claim_output_file(os.path.join(out_dir, n), overwrite, what, inputs))
                   for n in dict.fromkeys(names)]
    finally:
        for d in missing:  # innermost first; one that holds anything stays
            try:
                os.rmdir(d)
            except OSError:
                break


def _claim(out: str, what: str) -> tuple[int, str]:
    """Create (or take over from a dead run) and ``flock`` ``OUT.lock``; returns its descriptor and path."""
    import fcntl
    import json
    import logging
    import socket
    import sys
    import time

    lock, host = claim_path(out), socket.gethostname()
    while True:
        check_lock_path(lock, f"{what} {out}")
        try:
            fd, created = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666 & ~_umask()), True
        except FileExistsError:
            try:
                fd, created = os.open(lock, os.O_RDWR), False
            except FileNotFoundError:  # released meanwhile: try again
                continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _refuse_claimed(out, what, _read_claim(fd) or {})
            except OSError:  # a file system without flock (NFS, FUSE): the pid alone decides
                pass
            try:  # the file locked may have been released (removed) meanwhile: hold the one on disk
                st, disk = os.fstat(fd), os.stat(lock)
                same = (st.st_dev, st.st_ino) == (disk.st_dev, disk.st_ino)
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            if not created:
                info = _read_claim(fd)
                if info is None:
                    raise InputError(f"{what} {out}: {lock} exists and is no lock of this program; move it away, or "
                                     f"choose another {what}")
                pid = info.get("pid")
                if isinstance(pid, int):
                    if info.get("host", host) != host:
                        _refuse_claimed(out, what, info, f"; its lock {lock} cannot be checked from {host}: delete "
                                                         "that file if the run is no longer running")
                    if _pid_alive(pid):
                        _refuse_claimed(out, what, info)
                    logging.getLogger(__name__).warning("%s: taking over the lock of a run that is no longer "
                                                        "running (pid %d on %s)", lock, pid, host)
            record = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                      "command": " ".join(sys.argv)[:500]}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return fd, lock


def _read_claim(fd: int) -> dict | None:
    """What a claim's lock file says: ``{"pid", "host", ...}``; ``{}`` for an empty file (its writer died at once);
    None for a file that is no lock of ours. A bare pid (``1234``) is read as one too."""
    import json

    try:
        text = os.pread(fd, 4096, 0).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text:
        return {}
    try:
        info = json.loads(text)
    except (ValueError, RecursionError):  # [[[...]]] deeper than the parser goes: no lock of ours
        return None
    if isinstance(info, int) and not isinstance(info, bool):
        return {"pid": info}
    return info if isinstance(info, dict) and isinstance(info.get("pid"), int) else None


def _refuse_claimed(out: str, what: str, info: dict, why: str = ""):
    who = ", ".join(f"{k} {info[k]}" for k in ("pid", "host", "started") if info.get(k) is not None) or "pid ?"
    raise InputError(f"{what} {out} is being written by another run ({who}"
                     + (f": {info['command']}" if info.get("command") else "") + f"){why}; wait for it to end, or "
                     f"choose another {what}")


def _unclaim(fd: int, lock: str) -> None:
    """Remove ``lock`` (if it is still the file held) and let it go."""
    try:
        st, disk = os.fstat(fd), os.stat(lock)
        if (st.st_dev, st.st_ino) == (disk.st_dev, disk.st_ino):
            os.remove(lock)
    except OSError:
        pass
    os.close(fd)


BOM = b"\xef\xbb\xbf"


def make_dirs(path: str | os.PathLike) -> list[str]:
    """``os.makedirs(path, exist_ok=True)``, returning the directories it created, the deepest first: what a refused
    command takes away again (``os.rmdir`` each while empty) to leave the disk as it was."""
    made, d = [], os.path.abspath(path)
    while not os.path.exists(d):
        made.append(d)
        d = os.path.dirname(d)
    os.makedirs(path, exist_ok=True)
    return made


def check_input_file(path: str, what: str, hint: str = "") -> str:
    """An input that must be a regular file: missing is a ``FileNotFoundError`` (``WHAT PATH: no such file``); a
    directory, a device (``/dev/null``), a pipe or a socket is named as what it is (``WHAT PATH is a directory, not a
    file...``), ``hint`` saying what to give. Returns ``path``."""
    if not os.path.lexists(path) or (os.path.islink(path) and not os.path.exists(path)):
        raise FileNotFoundError(f"{what}{path}: {no_such_file(path)}")
    if not os.path.isfile(path):
        raise InputError(f"{what}{path} is {special_kind(path)}, not a file{hint}")
    return path


def no_such_file(path: str) -> str:
    """Why ``path``, which does not exist as a file, does not: "no such file", or the link it is that leads nowhere
    or back to itself (a loop said "no such file" of a name the user sees listed)."""
    if not os.path.islink(path):
        return "no such file"
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link that leads back to itself (a loop of links)"
    return f"a symbolic link to {os.readlink(path)}, which does not exist"


def check_inputs_not_inside(out_dir: str, inputs: Iterable[str], what: str = "--out") -> None:
    """A command that writes into the directory ``out_dir`` (replacing and removing its files) never holds its own
    inputs there, ``--overwrite`` or not: a corpus at OUT/vocab.txt would be replaced by the vocabulary trained on
    it."""
    for path in inputs:
        if within(path, out_dir):
            raise InputError(f"{path} is an input inside {what} {out_dir}, which this command writes into (its "
                             f"files replaced or removed, --overwrite or not); move the input out, or choose another "
                             f"{what}")


def host_memory_bytes() -> int | None:
    """This host's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def overwrite_flag(value, what: str = "overwrite") -> bool:
    """``overwrite`` as the API takes it: True or False (numpy's bools too). Any other value is refused: "no", 0.0 or
    "false" read as true would replace a user's files (``predict_file(..., overwrite="no")`` did)."""
    if not isinstance(value, bool) and not (type(value).__module__ == "numpy" and type(value).__name__ in ("bool_",
                                                                                                          "bool")):
        raise InputError(f"{what}={value!r}: expected True or False")
    return bool(value)


def path_argument(name: str, path) -> str:
    """A path a function of the Python API takes (a MODEL_DIR, an input or output file), as a str: bytes, a list or
    a number is one line naming ``name`` (os's own errors, "Can't mix strings and bytes in path components" or
    "expected str, bytes or os.PathLike object, not list", named neither)."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise InputError(f"{name} is {type(path).__name__} {path!r}; give a path as a str (or a pathlib.Path)")
    return str(os.fspath(path))  # numpy's str_ as a str (os.listdir on one gave bytes names)


def check_text_files(paths: Sequence[str | os.PathLike]) -> list[str]:
    """The corpus files, each checked to be an existing file before anything is written, and each given once (the
    same file twice, by another path or a link too, would double its documents without a word); a shell pattern that
    matched nothing arrives here as itself and is named as such."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out, seen, by_size = [], {}, {}
    for p in map(os.fspath, paths):
        if os.path.isdir(p):
            raise InputError(f"{p} is a directory; give the text files in it (e.g. {os.path.join(p, '*.txt')})")
        if not os.path.exists(p):
            hint = ""
            if any(c in p for c in "*?["):  # the shell expands a pattern; quoted, it arrives as itself
                matches = len(glob.glob(p))
                hint = (f": a pattern the shell did not expand (it was quoted), which matches {matches} file"
                        f"{'s' * (matches != 1)}: leave it unquoted" if matches else ": a pattern that matched no file")
            raise FileNotFoundError(2, f"no such corpus file{hint}", p)
        st = os.stat(p)
        mode = st.st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a device: /dev/zero never ends, a terminal waits
            raise InputError(f"{p} is {special_kind(p)}, not a regular file or a pipe; give the corpus as text files "
                             "(a pipe such as <(zcat corpus.txt.gz) is read once, as a stream)")
        if (st.st_dev, st.st_ino) in seen:
            raise InputError(f"{p} is {seen[st.st_dev, st.st_ino]}, given before: each corpus file once (twice, its "
                             "documents would count twice)")
        seen[st.st_dev, st.st_ino] = p
        out.append(p)
        if stat.S_ISREG(mode):  # a copy under another name doubles its documents too: the same bytes twice
            by_size.setdefault(st.st_size, []).append(p)
    if not out:
        raise InputError("no corpus files given")
    for same_size in (ps for size, ps in by_size.items() if len(ps) > 1 and size):  # only those need reading
        first: dict[str, str] = {}
        for p in same_size:
            digest = file_sha256(p)
            if digest in first:  # a copy made on purpose weights its documents: said, not refused
                logging.getLogger(__name__).warning("%s holds the same bytes as %s, given before: its documents count "
                                                    "twice (remove it, unless the copy is there to weight them)",
                                                    p, first[digest])
            first.setdefault(digest, p)
    return out


def text_lines(path: str | os.PathLike, what: str = "") -> Iterator[tuple[int, str]]:
    """(line number, text) for every line of a UTF-8 text file, the line end kept (``\n``, ``\r\n``): the one reader of
    a user's text files, so that every one of them reads alike. Byte-order marks before the first line are dropped
    (invisible, they would otherwise glue themselves to the first column's name or word); a line that is not UTF-8 is
    named by line and column (``FILE:LINE:COL: not UTF-8 text (byte 0xe9)``); a missing path or a directory is named.
    ``what`` prefixes the path in messages (e.g. ``--input``)."""
    path = os.fspath(path)
    name = f"{what} {path}" if what else path
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{name} is a directory, not a text file")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            while lineno == 1 and raw.startswith(BOM):  # a file saved twice with a mark: every one of them
                raw = raw.removeprefix(BOM)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFileError(f"{name}:{lineno}:{len(raw[:e.start].decode('utf-8')) + 1}: not UTF-8 text (byte "
                                    f"0x{raw[e.start]:02x}); save the file as UTF-8") from None
            if problem := line_problem(line.removesuffix("\n").removesuffix("\r"), lineno):
                col, what = problem
                raise DataFileError(f"{name}:{lineno}:{col}: {what}{LINE_ADVICE[what]}")
            yield lineno, line


LINE_ADVICE = {"a NUL byte": ", which text never holds (a UTF-16 or binary file?); save the file as UTF-8 text",
               "a byte-order mark inside the file": " (two files joined?); remove it",
               "a carriage return that ends no line":
                   " (old Mac line ends?); save the file with \\n or \\r\\n line ends"}


def line_problem(line: str, lineno: int) -> tuple[int, str] | None:
    """What a line of text (its end taken off) may not hold, as (column, what), or None: a NUL byte (text never holds
    one: a UTF-16 or binary file read as bytes), a byte-order mark after the first line (invisible, it would glue
    itself to the first field), a carriage return (old Mac line ends glue lines together). ``text_lines`` and
    GLUE's TSV reader (``glue.read_glue_tsv``) alike."""
    if "\0" in line:
        return line.index("\0") + 1, "a NUL byte"
    if lineno > 1 and line.startswith("\ufeff"):
        return 1, "a byte-order mark inside the file"
    if "\r" in line:
        return line.index("\r") + 1, "a carriage return that ends no line"
    return None


class _DuplicateKey(ValueError):
    def __str__(self):
        return f"the key {self.args[0]!r} appears twice in one object"


class _HugeNumber(ValueError):
    def __str__(self):
        return f"the number {self.args[0][:40]}{'...' if len(self.args[0]) > 40 else ''} {self.args[1]}"


_BEYOND = "is beyond a float's range (|x| < 1.8e308)"


def _json_float(text: str) -> float:
    """A JSON number as Python reads it, except one beyond a float's range (``1e400``: json makes it inf, and the
    message would then name an inf the file does not hold) or below it (``1e-400``: json makes it 0, a label "0"
    or a score 0 the file does not hold)."""
    value = float(text)
    if math.isinf(value):
        raise _HugeNumber(text, _BEYOND)
    if value == 0 and reads_as_zero(text):  # (every float of a file passes here: the check only for a 0)
        raise _HugeNumber(text, "is below a float's range (it reads as 0; |x| >= 4.9e-324 or 0)")
    return value


def reads_as_zero(text: str) -> bool:
    """A number written with a digit other than 0 that a float reads as 0 (``1e-400``: a label "0", a score 0 the
    file does not hold)."""
    text = text.strip().replace("\u2212", "-")  # U+2212, the minus sign, as number_value reads it
    try:
        return float(text) == 0 and bool(re.search(r"[1-9]", re.split(r"[eE]", text)[0]))
    except ValueError:
        return False


def _json_int(text: str) -> int:
    """A JSON integer, except one beyond a float's range (a label, an offset or a size that long is no value any
    reader here takes; Python refuses past 4,300 digits with a message naming no line)."""
    if len(text.lstrip("-")) > 308:
        raise _HugeNumber(text, _BEYOND)
    return int(text)


def json_cell(text: str):
    """A JSON value written inside a cell (a multilabel row's ``["comedy", 7]``), read as every reader of a user's
    JSON reads it (``_json_loads``); a ``ValueError`` whose message says what is wrong otherwise."""
    try:
        return _json_loads(text)
    except RecursionError:
        raise ValueError("JSON nested deeper than a parser goes") from None


def _json_loads(text: str):
    """``json.loads`` as every reader of a user's JSON calls it: a key named twice in one object raises
    ``_DuplicateKey``, a number beyond or below a float's range ``_HugeNumber``."""
    return json.loads(text, object_pairs_hook=_json_object, parse_float=_json_float, parse_int=_json_int)


def _json_object(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, read in 1 MiB pieces (a prepared shard's: no text hash beside it)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256s(path: str | os.PathLike) -> tuple[str, str]:
    """(the sha256 of a file's bytes, the sha256 of its text as ``text_lines`` reads it: its line ends as ``\n``
    whether written ``\r\n`` or ``\n``, a byte-order mark before the first line dropped, the last line ended
    whether its end was written or not), in one pass of 1 MiB pieces. The second is the same for a file saved again
    with other line ends (by Excel, say)."""
    import codecs
    import hashlib

    raw, text, carry, first, last = hashlib.sha256(), hashlib.sha256(), b"", True, b"\n"
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            raw.update(chunk)
            piece, first = (carry + chunk).removeprefix(codecs.BOM_UTF8 if first else b""), False
            carry = b"\r" if piece.endswith(b"\r") else b""  # a \r\n may straddle two pieces
            piece = piece[:len(piece) - len(carry)].replace(b"\r\n", b"\n")
            text.update(piece)
            last = piece[-1:] or last
    text.update(carry)
    if (carry or last) != b"\n":
        text.update(b"\n")
    return raw.hexdigest(), text.hexdigest()


def parse_json(text: str, where: str):
    """``json.loads`` for a file a user gives or keeps (config.json, task.json, a SQuAD JSON, tokenizer files): a key
    named twice in one object is refused (``json`` keeps the last value without a word), and a syntax error names its
    line and column. ``DataFileError`` ("WHERE:LINE:COL: ...")."""
    try:
        return _json_loads(text)
    except RecursionError:
        raise DataFileError(f"{where}: JSON nested deeper than a parser goes (lists or objects inside each other "
                            "thousands deep): no file this library reads is so") from None
    except _DuplicateKey as e:
        raise DataFileError(f"{where}: the key {e.args[0]!r} appears twice in one object (json would keep the last "
                            "without a word); keep one") from None
    except _HugeNumber as e:
        at = text.find(e.args[0])
        line, col = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        raise DataFileError(f"{where}:{line}:{col}: {e}") from None
    except json.JSONDecodeError as e:
        raise DataFileError(f"{where}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


def read_json(path: str | os.PathLike, what: str = ""):
    """``parse_json`` of a UTF-8 file (``read_text``)."""
    return parse_json(read_text(path, what), os.fspath(path))


def json_lines(path: str, lines: Iterable[tuple[int, str]], hint: str = "") -> Iterator[tuple[int, dict]]:
    """(line, object) for every non-blank line of a JSON Lines file (``lines``: ``text_lines``'s pairs): each must be
    one JSON object naming each key once (``json`` would keep a doubled key's last value without a word); ``hint``
    follows the message of a line that is no JSON."""
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            row = _json_loads(line)
        except RecursionError:
            raise DataFileError(f"{path}:{lineno}: JSON nested deeper than a parser goes (lists or objects inside "
                                "each other thousands deep)") from None
        except _DuplicateKey as e:
            raise DataFileError(f"{path}:{lineno}: the key {e.args[0]!r} appears twice in one object (which one is "
                                f"meant?)") from None
        except _HugeNumber as e:
            raise DataFileError(f"{path}:{lineno}: {e}") from None
        except json.JSONDecodeError as e:
            whole = "; the file is one JSON array or object across lines: JSON Lines holds one object per line" \
                if lineno == 1 and line.strip() in ("[", "{") and not hint else ""
            if lineno == 1 and not line.lstrip().startswith(("{", "[")) and ("," in line or "\t" in line):
                whole += ("; the line reads as a CSV or TSV header: name the file .csv or .tsv" if not hint else "")
            raise DataFileError(f"{path}:{lineno}: not a JSON object ({e.msg}{hint}{whole})") from None
        if not isinstance(row, dict):
            rows = ("; the line is a JSON array of rows: JSON Lines holds one object per line, not an array"
                    if isinstance(row, list) and row and all(isinstance(r, dict) for r in row) else "")
            raise DataFileError(f"{path}:{lineno}: {json_type(row)} ({json_repr(row)}), not a JSON object{rows}")
        if isinstance(row.get("data"), list) and any(isinstance(a, dict) and "paragraphs" in a for a in row["data"]):
            raise DataFileError(f"{path}:{lineno}: a SQuAD file (articles of paragraphs under \"data\"), where one "
                                "row per line is read: a question-answering run trains on it "
                                "(config.data.kind=question_answering); predict reads a JSON Lines file of "
                                "{\"question\": ..., \"context\": ...} objects, one per line")
        if row and all(isinstance(v, dict) for v in row.values()) or len(row) > 1 and all(
                isinstance(v, list) for v in row.values()):  # {"text": {"0": ...}, "label": {"0": ...}}: one table
            raise DataFileError(f"{path}:{lineno}: one object of columns ({', '.join(map(repr, list(row)[:3]))}"
                                f"{', ...' if len(row) > 3 else ''} each holding every row: pandas' to_json default), "
                                "but a row per line is read (JSON Lines: df.to_json(path, orient='records', "
                                "lines=True))")
        yield lineno, row


# letters and symbols that draw nothing (Unicode's default-ignorable Hangul fillers, Khmer's inherent vowels, the
# Braille blank) and U+FFFD, the mark a decoder leaves for bad bytes, which BERT's normalizer drops
BLANK_CHARS = frozenset("\u115f\u1160\u3164\uffa0\u17b4\u17b5\u2800\ufffd")


def invisible(ch: str) -> bool:
    """A character that shows nothing: white space, a control or format character (a zero-width space), a combining
    mark on its own, or one of ``BLANK_CHARS``."""
    return unicodedata.category(ch)[0] in "ZCM" or ch in BLANK_CHARS


def drop_invisible(text: str) -> str:
    """``text`` without its format characters (a zero-width space, a soft hyphen, a BOM) and ``BLANK_CHARS``: a
    name as it reads (``tasks.Row``'s column names, ``tasks.check_one_form``'s labels)."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf" and ch not in BLANK_CHARS)


# a decimal number as data files write one, in ASCII digits (Python's float() also reads "1_000", "\uff11" and
# Devanagari digits, which no data file means as a score); "nan" and "inf" are numbers, refused where they count
_NUMBER_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf|infinity)", re.IGNORECASE)


def number_value(raw) -> float:
    """A score cell's number: a JSON number, or text that ``_NUMBER_TEXT`` reads (white space around it dropped); a
    ValueError for anything else (a boolean, text such as ``0_5`` or ``1,5``). The one reader of a score: your own
    regression files and GLUE's STS-B alike."""
    if isinstance(raw, str):
        raw = raw.strip().replace("\u2212", "-")  # U+2212, the minus sign: -1.5 typeset
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)) or (
            isinstance(raw, str) and not _NUMBER_TEXT.fullmatch(raw)):
        raise ValueError(f"{raw!r} is not a number")
    try:
        return float(raw)
    except OverflowError:  # a JSON integer of hundreds of digits
        return math.inf


def text_problem(text: str) -> str:
    """What a text given to a model (a JSON cell's ``"\u0000"`` or ``"\udc80"``, a Python string) may not hold, as a
    phrase, or "": a NUL, which no text holds (a text file holding one is refused by line: ``line_problem``),
    and a lone surrogate, which is no character (JSON's escape of half a pair; the tokenizers cannot encode it)."""
    if "\0" in text:
        return f"holds a NUL character at character {text.index(chr(0)) + 1}, which no text holds"
    try:
        text.encode("utf-8")  # at C speed: every row's text passes here
    except UnicodeEncodeError as e:
        return (f"holds a lone surrogate {text[e.start]!r} at character {e.start + 1}, which is not a character (half "
                "of a JSON escape pair such as \\ud83d\\ude00); write the text in valid Unicode")
    return ""


def has_text(value: str) -> bool:
    """Whether a text holds something to read: a character that is not ``invisible`` (a zero-width space alone is no
    text, nor an accent on nothing, which an uncased tokenizer strips, nor a Hangul filler, nor the replacement
    character). The one test of an empty text: the task loaders, GLUE's files, transfer text, SQuAD and predict."""
    return not all(map(invisible, value))


def read_text(path: str | os.PathLike, what: str = "") -> str:
    """A whole UTF-8 text file through ``text_lines`` (a BOM dropped, a bad byte named by line and column)."""
    return "".join(line for _, line in text_lines(path, what))


LOCK_NAME = ".lock"


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host; a lock's pid that is no process id (not an integer >= 1 that
    fits one, e.g. -1, which ``os.kill`` takes as every process) runs nothing."""
    if not is_int(pid) or not 0 < pid < 2 ** 31:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def run_of(directory: str | os.PathLike) -> str:
    """The job whose directory ``directory`` is: its lock's (``RunLock``: a job going on, or one that died), else
    "training" where a training run's start is recorded (``config_history.jsonl``: a run that ended), else ""."""
    if not os.path.isdir(directory):
        return ""
    return read_lock(directory).get("what") or (
        "training" if os.path.isfile(os.path.join(os.fspath(directory), "config_history.jsonl")) else "")


def read_lock(directory: str | os.PathLike) -> dict:
    """What ``DIR/.lock`` says of the run that holds or last held the directory (``{}``: none, unreadable, or no regular
    file: a pipe there would block the read; ``RunLock`` refuses it by name)."""
    import json

    path = os.path.join(os.fspath(directory), LOCK_NAME)
    if os.path.islink(path) or not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(info, dict) or any(k in info and (not isinstance(info[k], str) or not info[k].strip())
                                         for k in ("what", "host")):
        return {}  # damaged as a whole: no holder (a job named ["fine-tuning"] was "a ['fine-tuning'] run")
    return info


class RunLock:
    """One run per directory. ``with RunLock(workdir, "pretraining"):`` holds ``DIR/.lock`` for the run's life: the
    file names the job, the process (pid, host, start time, command), and it is ``flock``ed, so a second run refuses,
    naming the holder. A run that died (kill -9, a crash) releases the ``flock`` at once on a local disk; its lock
    (a dead pid on this host) is taken over with a warning. A lock from another host whose ``flock`` is free cannot
    be judged from here: it is refused, with the path to delete once that run is known to be gone. When the run ends
    the file stays, marked ended, if the run wrote anything: it tells later runs which job owns the directory
    (``check_run_dir``)."""

    def __init__(self, directory: str | os.PathLike, what: str, logs: tuple[str, ...] = ("log.txt",)):
        self.directory, self.what, self.logs = os.fspath(directory), what, logs
        self.path = os.path.join(self.directory, LOCK_NAME)
        self._fd: int | None = None

    def _refuse(self, info: dict, why: str = ""):
        command = str(info.get("command") or "")
        who = (f"pid {info.get('pid', '?')} on {str(info.get('host', '?'))[:100]}, started "
               f"{str(info.get('started', '?'))[:40]}" + (f": {command[:300]}{'...' * (len(command) > 300)}"
                                                          if command else ""))
        raise InputError(f"{self.directory} is in use by a running {info.get('what', 'job')} ({who}){why}; one run "
                         "per directory: wait for it to end, or choose another directory")

    def _write(self, fd: int, record: dict) -> None:
        import json

        data = (json.dumps(record) + "\n").encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as e:
            raise OSError(e.errno, e.strerror, self.path) from None

    def acquire(self) -> "RunLock":
        import fcntl
        import logging
        import socket
        import sys
        import time

        self._created = not os.path.isdir(self.directory)
        os.makedirs(self.directory, exist_ok=True)
        host = socket.gethostname()
        while True:
            check_lock_path(self.path, f"the {self.what} in {self.directory}")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._refuse(read_lock(self.directory))
            except BaseException:
                os.close(fd)
                raise
            try:  # the file locked may have been replaced meanwhile: hold the one on disk
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            info = self._previous = read_lock(self.directory)
            pid = info.get("pid")
            if isinstance(pid, int) and pid != os.getpid() and not info.get("ended"):
                if info.get("host") != host:
                    self._refuse(info, f"; its lock {self.path} cannot be checked from {host}: delete that file if "
                                       "the run is no longer running")
                if _pid_alive(pid):  # its flock is free, yet it lives: a filesystem without flock (NFS, FUSE)
                    self._refuse(info, f"; its lock {self.path} is locked by no process: if pid {pid} is not that "
                                       "run (its number reused), delete the file")
                stale = [n for n in os.listdir(self.directory) if n.startswith(f".tmp{pid}-")]
                for name in stale:  # atomic_write's temporary files the dead run was writing: never anyone's output
                    os.remove(os.path.join(self.directory, name))
                logging.getLogger(__name__).warning(
                    "%s: taking over the lock of a %s that is no longer running (pid %d on %s, started %s)%s",
                    self.directory, info.get("what", "job"), pid, host, info.get("started", "?"),
                    f"; removed the {len(stale)} temporary files it left" if stale else "")
            self._record = {"what": self.what, "pid": os.getpid(), "host": host,
                            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)[:500]}
            self._write(fd, self._record)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self, failed: bool = False) -> None:
        """Unlock. The file is marked ended; a run that ``failed`` (a refused restart, say) puts back what the file
        said before it, and one that wrote nothing leaves no file (nor the directory, if the lock made it)."""
        import time

        if self._fd is None:
            return
        try:
            if set(os.listdir(self.directory)) <= {LOCK_NAME, *self.logs}:
                os.remove(self.path)
                if self._created and not os.listdir(self.directory):
                    os.rmdir(self.directory)
            elif failed and self._previous.get("ended"):
                self._write(self._fd, self._previous)
            else:
                self._write(self._fd, self._record | {"ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        except OSError:  # a full disk: the flock's release is what matters
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.release(failed=exc_type is not None)


# The files a run writes at the top of its directory (trainer.record_config, reporting.MetricsWriter, the exports'
# metrics, a sweep's tables): check_run_dir refuses anything else in their place before the run writes a line
RUN_FILES = ("config.json", "config_history.jsonl", "metrics.jsonl", "eval_results.json", "final_metrics.json",
             "log.txt", "sweep.jsonl", "table.md", "results.json", "chosen.json")
# ... and the directories it writes into (the export, TensorBoard's events, the demo data, a distillation's caches)
RUN_DIRS = ("checkpoints", "model", "generator", "tb", "data", "demo", "predictions", "teacher_cache", "student_init")
DEMO_DIRS = ("data", "demo")  # what pretraining's demo source writes into a workdir before its first checkpoint


MODEL_WEIGHTS = ("params.safetensors", "model.safetensors", "pytorch_model.bin")  # a MODEL_DIR's (pretrained.py)


# the weights of a checkpoint this library does not read but must not write into: sharded, TensorFlow's, Flax's
OTHER_WEIGHTS = ("model.safetensors.index.json", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


def holds_model(directory: str) -> str:
    """The weights file of the model ``directory`` holds (its config.json beside it), or "": this library's, or a
    transformers checkpoint's of any layout (``OTHER_WEIGHTS``: its config.json was replaced by a run's)."""
    weights = [n for n in MODEL_WEIGHTS + OTHER_WEIGHTS if os.path.isfile(os.path.join(directory, n))]
    return weights[0] if weights and os.path.isfile(os.path.join(directory, "config.json")) else ""


def refuse_nested(out: str, what: str, job: str | None = None, mine: tuple[str, ...] = ()) -> None:
    """A directory to write that lies inside a model's directory (a model is copied, shipped and converted whole:
    a run or outputs inside it travel with it, and its writer's --overwrite would meet them), or is or lies inside a
    run's ``checkpoints`` (the run's checkpoint manager keeps its steps there), however deep and through links:
    refused, ``--overwrite`` or not. Given the writer's ``job`` ("" for none), so is one of the directories another
    job's run writes (``RUN_DIRS``: its model/, a tokenizer there was replaced by the run's export; its tb/) but
    those the writer makes for that run (``mine``: pretraining's demo data). A path that starts with ``~`` is
    refused too: no shell expands it after ``=`` (``--out=~/x`` made a directory named ``~`` here)."""
    if os.fspath(out).startswith("~"):
        raise InputError(f"{what} {out} starts with '~', which no shell expands after '=' (a directory named '~' "
                         f"would be made here): write the full path, or $HOME/{os.fspath(out)[2:]}")
    if looped := next((p for p in (*_prefixes(os.fspath(out)), os.fspath(out)) if os.path.islink(p) and _loops(p)),
                      None):
        at = "" if looped == os.fspath(out) else f": {looped}"
        raise InputError(f"{what} {out}{at} is a link that leads back to itself; remove it, or choose another path")
    path = os.path.realpath(out)
    at = path
    while (up := os.path.dirname(at)) != at:
        inside = "" if at == path else "inside "
        if os.path.basename(at) == "checkpoints" and run_of(up):
            raise InputError(f"{what} {out} is {inside}the checkpoints directory of the run in {up}, which that run's "
                             f"checkpoint manager keeps, --overwrite or not; choose another {what}")
        if job is not None and os.path.basename(at) in set(RUN_DIRS) - set(mine) and (owner := run_of(up)):
            raise InputError(f"{what} {out} is {inside}{os.path.basename(at)}/ of the {owner} run in {up}, which that "
                             f"run writes, --overwrite or not; choose another {what}")
        if weights := holds_model(up):
            raise InputError(f"{what} {out} is inside the model directory {up} (config.json, {weights}): a model is "
                             f"copied and converted whole, and what is written there would travel with it, --overwrite "
                             f"or not; choose another {what}")
        at = up


def refuse_model_dir(directory: str, what: str, flag: str) -> None:
    """A directory holding a model (its config.json beside its weights) is no place for ``what`` (prepared data, a
    training run, a tokenizer, a command's outputs), ``--overwrite`` or not: the data's vocabulary or the run's
    config.json would replace the model's and leave a mix of two things that loads as neither."""
    if weights := holds_model(directory):
        raise InputError(f"{flag} {directory} holds a model (config.json, {weights}): {what} there would replace "
                         f"or join its files and leave a mix that loads as neither, --overwrite or not; choose another "
                         f"{flag}")


def check_run_dir(workdir: str | os.PathLike, what: str, overwrite: bool = False, ours: tuple[str, ...] = (),
                  what_flag: str = "--workdir", inputs: dict[str, str] | None = None) -> str:
    """Refuse, before anything is written, a run directory that cannot be this run's: an empty path, a URL, an
    existing file, a path under a file or an unwritable one, a ``checkpoints`` entry that is not a directory, a
    directory another kind of job ran in (its ``.lock``), or a directory holding files of no run at all unless
    ``overwrite``; and, ``overwrite`` or not, a model's directory (the run's config.json would replace the model's:
    ``refuse_model_dir``) and one that would write over the run's ``inputs`` (``{setting: path}``,
    ``check_inputs_outside``). A directory of the same job is accepted (the job resumes or
    refuses by its own rules); so is one holding only ``log.txt``, ``.lock`` and the names in ``ours``. Returns the
    path."""
    workdir, overwrite = os.fspath(workdir) if workdir is not None else "", overwrite_flag(overwrite)
    if not workdir.strip():
        raise InputError(f"{what_flag} is empty; give the run's directory (e.g. {what_flag} runs/my_run)")
    if "://" in workdir:
        raise InputError(f"{what_flag} {workdir!r}: URL workdirs (gs://, s3://, ...) are not supported; use a local "
                         "or mounted path (e.g. a bucket mounted with gcsfuse)")
    # what a run writes there: the demo corpus's entries only where the caller writes them (``ours``)
    writes = {*RUN_FILES, *RUN_DIRS, *ours} - ({*DEMO_DIRS} - {*ours})
    check_inputs_outside(workdir, inputs or {}, what_flag, writes)
    _refuse_broken_link(workdir, what_flag)
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise InputError(f"{what_flag} {workdir} is an existing file, not a directory; choose a directory for the run")
    _check_parent(workdir, what_flag)
    refuse_nested(workdir, what_flag, what)
    # what the run writes as files, and as directories: anything else in their place fails only once it has begun
    for names, ok, want in ((RUN_FILES, os.path.isfile, "file"), (RUN_DIRS, os.path.isdir, "directory")):
        for name in names:
            path = os.path.join(workdir, name)
            if os.path.lexists(path) and not ok(path):
                kind = ("a link to nothing" if not os.path.exists(path) else "a file" if os.path.isfile(path)
                        else special_kind(path))
                raise InputError(f"{path} is {kind}, not the run's {want}; move it away or choose another "
                                 f"{what_flag}")
    if not os.path.isdir(workdir):
        return workdir
    owner = read_lock(workdir).get("what")
    if owner and owner != what:
        raise InputError(f"{what_flag} {workdir} holds a {owner} run (its {LOCK_NAME} says so), not a {what} one: "
                         "choose another directory (its files are left as they are)")
    if run_of(workdir):  # this job's (the check above), locked or with a history
        return workdir
    refuse_model_dir(workdir, f"a {what} run", what_flag)
    present = sorted(set(os.listdir(workdir)) - {"log.txt", LOCK_NAME, *ours})
    if present and not overwrite:
        listed = ", ".join(present[:5]) + (f", ... ({len(present)} entries)" if len(present) > 5 else "")
        raise InputError(f"{what_flag} {workdir} already holds files of no {what} run ({listed}); choose a new "
                         "directory, or pass --overwrite to write the run there (files of the same names are "
                         "replaced)")
    return workdir


def check_inputs_outside(workdir: str, inputs: dict[str, str], what_flag: str = "--workdir",
                         writes: Collection[str] = ()) -> None:
    """A run never writes over what it reads, ``--overwrite`` or not: the workdir may not be an input (a MODEL_DIR
    to start from, say) or lie inside an input directory, and an input inside the workdir may not be one of the
    entries a run writes there (``writes``, and ``predictions_*``: a test file at WORKDIR/predictions_test.jsonl would
    be replaced by its own predictions). ``inputs``: ``{setting: path}``; empty paths and dataset splits (``hf:``,
    ``tfds:``) are skipped."""
    for name, path in inputs.items():
        if not isinstance(path, str) or not path.strip() or re.match(r"^(hf|tfds):", path):
            continue
        if where := within(workdir, path):
            raise InputError(f"{what_flag} {workdir} {where} config.{name} {path}: a run never writes into what it "
                             f"reads (not even with --overwrite); choose another {what_flag}")
        if within(path, workdir) == "is inside":
            entry = os.path.relpath(os.path.realpath(path), os.path.realpath(workdir)).split(os.sep)[0]
            if entry in writes or entry.startswith("predictions_"):
                raise InputError(f"config.{name} {path} is in {os.path.join(workdir, entry)}, which the run in "
                                 f"{what_flag} {workdir} writes (not even --overwrite replaces an input): move it "
                                 f"out, or choose another {what_flag}")


def python_scalar(v):
    """The Python number a numpy or jax scalar (or 0-d array) holds, a float by its shortest form (float32's 1e-4, not
    9.99999975e-05); ``v`` itself where it is none (a Python number, a string, a list)."""
    if hasattr(v, "dtype") and np.ndim(v) == 0:
        n = np.asarray(v)[()]
        if n.dtype.kind in "biu":
            return n.item()
        if n.dtype.kind == "f":
            return float(str(n))
    return v


def is_int(v) -> bool:
    """An integer value, never a boolean (JSON's ``true`` is no 1)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def is_number(v, finite: bool = True) -> bool:
    """A real number, never a boolean; finite unless ``finite`` is False."""
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and (not finite or math.isfinite(v))


def json_type(v) -> str:
    """How JSON names the type of ``v`` (a value read from config.json or a JSON Lines row): "a string", "a
    boolean", "null", "a list", "an object", ..."""
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, numbers.Integral):
        return "an integer"
    if isinstance(v, numbers.Real):
        return "a decimal number" if math.isfinite(v) else "not a finite number"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _finite(v):
    """``v`` with every float that is not finite (NaN, inf) as None, in nested dicts, lists and tuples."""
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and not math.isfinite(float(v)):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def json_text(v, **kwargs) -> str:
    """``json.dumps(v, **kwargs)`` as standard JSON, which has no NaN or Infinity: a score or loss that is not a
    number is written null (Python's json would write the bare word NaN, which jq, JavaScript and strict readers
    refuse). For the result files a run or a prediction writes."""
    return json.dumps(_finite(v), allow_nan=False, **kwargs)


def json_repr(v, limit: int = 40) -> str:
    """``v`` as JSON writes it ("32", true, [1, 2]), cut to ``limit`` characters."""
    try:
        r = json.dumps(v, ensure_ascii=True)
    except (TypeError, ValueError):
        r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def json_value(v, limit: int = 40) -> str:
    """``v`` named for a message about a JSON value: its type and its value ("a boolean true", "a list [1, 2]",
    "null")."""
    return "null" if v is None else f"{json_type(v)} {json_repr(v, limit)}"


# a missing value as spreadsheets, pandas (its default na_values) and databases write one: no class's name; a label
# that merely reads so ("none", "NA") is a class, named in config.data.labels
MISSING_MARKERS = frozenset(m.casefold() for m in (
    "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NULL", "NaT", "None", "NA",
    "nil", "undefined", "\\N",  # MySQL's and PostgreSQL's NULL in a dump
    "(blank)", "n.a.", "n/a.",  # a pivot table's empty cell; n.a. as typed
    "#VALUE!", "#REF!", "#DIV/0!", "#NAME?", "#NUM!", "#NULL!", "#SPILL!", "#CALC!"))  # a spreadsheet's error cells
TEXT_MARKERS = MISSING_MARKERS | {"nan", "-nan"}  # a text column's: pandas' str() of a missing text is "nan"


_MARKER_PATTERNS = re.compile(r"#\S{1,12}[!?]"  # a spreadsheet's error cell in any locale: #VALUE! #WERT! #NOM?
                              r"|#n/?[a-z]{1,2}"  # #N/A and its translations (#NV, #N/D)
                              r"|err:\d{3}"  # LibreOffice's
                              r"|[.?]"  # SAS's, Stata's and SPSS's missing value; ARFF's and UCI's
                              r"|[(<\[{]null[)>\]}]"  # (null), <null>, [null]
                              r"|[-+]?1\.#(inf|ind|qnan)"  # MSVC's printf of inf and NaN
                              r"|#{2,}|-{2,}|[\u2013\u2014\u2015]+"  # a column too narrow to show it; dashes
                              r"|\{\}|\(\)")  # an empty object or tuple written out (a lone "-" may be a class)


# ... also with spaces inside: an empty pair of brackets or one holding blank/empty/null/none, n.a., a run of dashes of
# any kind (a lone hyphen may be a class: + and -), an ellipsis
_SPACED_MARKERS = re.compile(r"[(\[{<](blank|empty|null|none|n/?a)?[)\]}>]|n\.?a\.?|n/an/a"
                             r"|[-\u2010-\u2015\u2212\u2e3a\u2e3b]{2,}|[\u2013-\u2015\u2e3a\u2e3b]|\.{2,}|\u2026")


def is_missing_marker(text: str, texts: bool = False) -> bool:
    """Whether ``text`` is how a spreadsheet, pandas or a database dump writes a missing value (``MISSING_MARKERS``,
    in any width or quoted, or ``_MARKER_PATTERNS``); ``texts``: a text column's too (pandas' "nan")."""
    if len(text) > 40:  # every row's text passes here: a marker is a short one
        return False
    key = unicodedata.normalize("NFKC", text).strip().strip("'\"").strip().casefold()
    if not key and text.strip():  # '' or "": an empty string written out
        return True
    tight = re.sub(r"\s+", "", key)  # ( ), n. a., – –
    return (key in (TEXT_MARKERS if texts else MISSING_MARKERS) or bool(_MARKER_PATTERNS.fullmatch(key))
            or bool(_SPACED_MARKERS.fullmatch(tight)))


# BERT's special tokens, which its tokenizer (and transformers' BertTokenizerFast) reads as those tokens in any text
SPECIAL_TEXTS = ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]")


def warn_texts(path: str, rows: list[tuple[int | str, tuple[str, ...]]]) -> None:
    """The one check of the texts a file gives a model (``rows``: line, its texts; training and predict alike), each
    kind a warning counting the rows, naming the first: a text that is a missing-value marker (``TEXT_MARKERS``:
    pandas' ``astype(str)`` writes a missing text as "nan"), read as the word itself, which may be meant; and a text
    holding a special token written out (``SPECIAL_TEXTS``: "question [SEP] answer", a pair joined by hand), which
    the tokenizer reads as that token, as transformers' does, where the text may have meant the characters."""
    log = logging.getLogger(__name__)
    markers = [(n, m) for n, texts in rows if (m := marker_text(texts))]
    specials = [(n, tok) for n, texts in rows if (tok := next((tok for t in texts if "[" in t for tok in SPECIAL_TEXTS
                                                              if tok in t), None))]
    if markers:
        log.warning("%s: %d of %d rows have a text that is how pandas or a spreadsheet writes a missing value (%r at "
                    "line %s): each is read as that word; fill or remove the rows if the text is missing", path,
                    len(markers), len(rows), markers[0][1], markers[0][0])
    if specials:
        log.warning("%s: %d of %d rows have a text holding a special token written out (%s at line %s): the "
                    "tokenizer reads it as that token, as transformers' does, not as characters; a pair of texts "
                    "belongs in two text columns", path, len(specials), len(rows), specials[0][1], specials[0][0])


def marker_text(texts) -> str:
    """The first of ``texts`` that is a missing-value marker (``TEXT_MARKERS``), or ""."""
    return next((t for t in texts if is_missing_marker(t, texts=True)), "")
