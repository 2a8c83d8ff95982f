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
    """The nearest existing ancestor of ``out`` is a directory (so that makedirs / writing can succeed), and it (or
    ``out`` itself, an existing directory) can be written: a read-only directory or file system is named before any
    work."""
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {out}: {parent} is a file, not a directory")
    target = out if os.path.isdir(out) else parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise InputError(f"{what} {out}: {target} cannot be written (read-only, or not this user's); choose a "
                         "writable directory")


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


LOCK_NAME = ".lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def read_lock(directory: str | os.PathLike) -> dict:
    """What ``DIR/.lock`` says of the run that holds or last held the directory (``{}``: none, or unreadable)."""
    import json

    try:
        with open(os.path.join(os.fspath(directory), LOCK_NAME), encoding="utf-8") as f:
            info = json.load(f)
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


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
        who = (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {info.get('started', '?')}"
               + (f": {info['command']}" if info.get("command") else ""))
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
                    self._refuse(info)
                logging.getLogger(__name__).warning(
                    "%s: taking over the lock of a %s that is no longer running (pid %d on %s, started %s)",
                    self.directory, info.get("what", "job"), pid, host, info.get("started", "?"))
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


def check_run_dir(workdir: str | os.PathLike, what: str, overwrite: bool = False, ours: tuple[str, ...] = (),
                  what_flag: str = "--workdir") -> str:
    """Refuse, before anything is written, a run directory that cannot be this run's: an empty path, a URL, an
    existing file, a path under a file or an unwritable one, a ``checkpoints`` entry that is not a directory, a
    directory another kind of job ran in (its ``.lock``), or a directory holding files of no run at all (a
    MODEL_DIR, say) unless ``overwrite``. A directory of the same job is accepted (the job resumes or refuses by its
    own rules); so is one holding only ``log.txt``, ``.lock`` and the names in ``ours``. Returns the path."""
    workdir = os.fspath(workdir) if workdir is not None else ""
    if not workdir.strip():
        raise InputError(f"{what_flag} is empty; give the run's directory (e.g. {what_flag} runs/my_run)")
    if "://" in workdir:
        raise InputError(f"{what_flag} {workdir!r}: URL workdirs (gs://, s3://, ...) are not supported; use a local "
                         "or mounted path (e.g. a bucket mounted with gcsfuse)")
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise InputError(f"{what_flag} {workdir} is an existing file, not a directory; choose a directory for the run")
    _check_parent(workdir, what_flag)
    ckpt = os.path.join(workdir, "checkpoints")
    if os.path.lexists(ckpt) and not os.path.isdir(ckpt):
        raise InputError(f"{ckpt} is a file, not the run's checkpoint directory; move it away or choose another "
                         f"{what_flag}")
    if not os.path.isdir(workdir):
        return workdir
    owner = read_lock(workdir).get("what")
    if owner and owner != what:
        raise InputError(f"{what_flag} {workdir} holds a {owner} run, not a {what} one: choose another directory "
                         "(its files are left as they are)")
    if owner or os.path.exists(os.path.join(workdir, "config_history.jsonl")) or overwrite:
        return workdir
    present = sorted(set(os.listdir(workdir)) - {"log.txt", LOCK_NAME, *ours})
    if present:
        listed = ", ".join(present[:5]) + (f", ... ({len(present)} entries)" if len(present) > 5 else "")
        raise InputError(f"{what_flag} {workdir} already holds files of no {what} run ({listed}); choose a new "
                         "directory, or pass --overwrite to write the run there (files of the same names are replaced)")
    return workdir
