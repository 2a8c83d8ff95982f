"""What every script in train/, eval/ and convert/ shares: how errors reach the user, and where logs go.

A user's mistake (a bad argument, file, config value, data, checkpoint) prints one line naming what is wrong and what
to do, with no traceback, and the script exits 1 (argparse's usage errors: 2). ``--debug`` (or
``SQUEEZEBERT_DEBUG=1``) shows the traceback instead. Any other exception is a bug and shows its traceback as always.

Logging: the console shows WARNING and above (and the scripts' own progress bars and summaries); every INFO record
(ours, orbax's, absl's) goes to a log file in the run's directory (``WORKDIR/log.txt``).
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import logging
import math
import os
import re
import sys
import types
from typing import Callable

from squeezebert_jax import files
from squeezebert_jax.errors import InputError, MissingExtraError, StoppedEarly

# Expected: the user can fix these. OSError subclasses about paths; FloatingPointError is a diverged run, whose
# message names the step and the last good checkpoint.
EXPECTED = (InputError, MissingExtraError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
            PermissionError, FloatingPointError)
DEBUG_ENV = "SQUEEZEBERT_DEBUG"


# A full disk, a quota or a read-only file system, however a library reports it: an OSError's errno, or the C++ text
# inside orbax's ValueError("RESOURCE_EXHAUSTED: ... No space left on device"), array_record's and torch's RuntimeError.
_DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "read-only file system"}
_DISK_TEXTS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
               "Read-only file system": errno.EROFS}


def _causes(e: BaseException):
    seen, todo = set(), [e]
    while todo:
        x = todo.pop(0)
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        todo += [x.__cause__, x.__context__, *getattr(x, "exceptions", ())]


def disk_error_line(e: BaseException) -> str | None:
    """One line for an error whose cause is a full disk, a quota or a read-only file system (anywhere in its chain),
    naming the path written and what to do; None for any other error."""
    for x in _causes(e):
        code = x.errno if isinstance(x, OSError) and x.errno in _DISK_ERRNOS else None
        text = str(x)
        if code is None:
            code = next((c for t, c in _DISK_TEXTS.items() if t in text), None)
        if code is None:
            continue
        path = x.filename if isinstance(x, OSError) and x.filename else None
        if path is None:
            m = re.search(r'"(/[^"]+)"', text) or re.search(r"(?:writing|file|path) '?(/[^\s;:,']+)", text)
            path = m.group(1) if m else None
        if path:  # orbax's temporary names: the directory the user knows
            path = re.sub(r"/[^/]*\.orbax-checkpoint-tmp.*$", "", os.fspath(path))
        where = f" writing {path}" if path else ""
        if code == errno.EROFS:
            return f"{_DISK_ERRNOS[code]}{where}: choose a writable directory"
        df = f" (df -h {os.path.dirname(path) or '.'})" if path else ""
        return (f"{_DISK_ERRNOS[code]}{where}: free space there{df} and run the same command again; what was saved "
                "before (checkpoints, finished files) is kept")
    return None


def debug_requested(argv) -> bool:
    """--debug, or SQUEEZEBERT_DEBUG on (``files.env_switch``: false, no, off and 0 are off; another word is on)."""
    return "--debug" in (argv or []) or files.env_switch(DEBUG_ENV) is not False


def describe(e: BaseException) -> str:
    """One line for the user: the message, with an OSError's path and reason spelled out."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    msg = str(e.args[0]) if len(e.args) == 1 and isinstance(e.args[0], str) else str(e)
    return " ".join(msg.split()) or type(e).__name__


def report(e: BaseException, prog: str | None = None) -> None:
    """The one line on stderr; the run's log file (``setup_logging``), if any, gets it too."""
    prog = prog or os.path.basename(sys.argv[0] or "squeezebert_jax")
    line = f"{prog}: error: {describe(e)}"
    print(line, file=sys.stderr)
    record = logging.LogRecord("squeezebert_jax.cli", logging.ERROR, __file__, 0, line, None, None)
    for h in logging.getLogger().handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(record)


def forget_refused_run_log() -> None:
    """After an error: the log file ``setup_logging`` created, when its directory holds nothing else (the run was
    refused before it wrote anything; the error line was on the console), is removed with the directories made for
    it, so that a refused command leaves the disk as it was. A log that was there before keeps the error line."""
    path = _RUN_LOG.get("path")
    if not path or _RUN_LOG.get("existed") or not os.path.isfile(path):
        return
    try:
        if os.listdir(os.path.dirname(path)) != [os.path.basename(path)]:
            return
        for h in list(logging.getLogger().handlers):
            if isinstance(h, logging.FileHandler) and os.path.abspath(h.baseFilename) == path:
                logging.getLogger().removeHandler(h)
                h.close()
        os.remove(path)
        for d in _RUN_LOG["made"]:
            os.rmdir(d)
    except OSError:  # something else appeared there meanwhile: keep it all
        pass
    _RUN_LOG.clear()


def run(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None, prog: str | None = None,
        debug: bool | None = None) -> int:
    """Call ``main(argv)`` and turn its outcome into an exit status: its return value (None: 0); an expected error:
    one line on stderr, 1 (re-raised with ``--debug``); a training stopped early (``StoppedEarly``): its line, 0 with
    a checkpoint to resume from (on stdout), else 1; Ctrl-C: 130.
    ``if __name__ == "__main__": sys.exit(cli.run(main))``."""
    if debug is None:
        debug = debug_requested(sys.argv[1:] if argv is None else argv)
    try:
        rc = main(argv)
    except StoppedEarly as e:
        if e.resumable:
            print(str(e))
            return 0
        report(e, prog)
        return 1
    except EXPECTED as e:
        if debug:
            raise
        report(e, prog)
        forget_refused_run_log()
        return 1
    except Exception as e:
        line = disk_error_line(e)
        if debug or line is None:
            raise
        logging.getLogger(__name__).info("the full error", exc_info=e)  # the traceback, in the run's log file only
        report(InputError(line), prog)
        forget_refused_run_log()
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def run_absl(main: Callable[[list[str]], int | None]) -> None:
    """``absl.app.run(main)`` with the same error handling as ``run`` (and a ``--debug`` flag)."""
    from absl import app, flags

    if "debug" not in flags.FLAGS:
        flags.DEFINE_bool("debug", False, f"show the traceback of an error (or set {DEBUG_ENV}=1)")

    def main_with_exit(argv):
        sys.exit(run(main, argv, debug=flags.FLAGS.debug or debug_requested([])))

    def parse_flags(argv):  # absl's own parser prints "FATAL Flags parsing error" and a config file's traceback
        try:
            rest = flags.FLAGS(argv)
            merge_sections(flags.FLAGS)
            if rest[1:]:  # none of the scripts takes a positional argument: a stray value is a flag misspelt
                raise flags.Error(stray_argument_line(rest[1], argv))
            for name in flags.FLAGS:  # a config file that failed to load raises only when first read: read it now
                value = flags.FLAGS[name].value
                if type(value).__name__ == "_ErrorConfig":
                    raise flags.Error(f"flag --{name}: cannot load the config file: {_last_line(value._error)}")
                flag = flags.FLAGS[name]
                if flag.present and isinstance(value, str) and not value.strip() and flag.default != "":
                    raise flags.Error(f"flag --{name}: {EMPTY_VALUE}")
            return rest
        except (flags.Error, AttributeError, KeyError, SyntaxError, ValueError, IndexError, InputError) as e:
            if debug_requested(argv[1:]):
                raise
            prog = os.path.basename(argv[0] or "squeezebert_jax")
            hint = " (--helpshort lists the flags)" if isinstance(e, flags.Error) else ""
            print(f"{prog}: error: {flag_error_line(e, argv)}{hint}", file=sys.stderr)
            sys.exit(2)

    app.run(main_with_exit, flags_parser=parse_flags)


# The config sections whose keys are the user's to choose (the model fields the preset's values are overridden with);
# every other section holds its config file's keys only.
OPEN_SECTIONS = ("model.overrides",)


def file_config(spec: str):
    """The config ``--config PATH:VARIANT`` names, as its file makes it (no command-line override applied)."""
    path, _, variant = spec.partition(":")
    module = config_module(path)
    return module.get_config(variant) if variant else module.get_config()


def merge_sections(flag_values) -> None:
    """A config section given whole on the command line (``--config.model.overrides="{'q_groups': 2}"``) is added to
    the config file's section, the keys given replacing the file's: ml_collections replaced the section, so the file's
    other keys went without a word (the smoke config's widths: a full-size model trained). A key the file's section
    does not hold is refused, but in ``OPEN_SECTIONS``; there ``{}`` clears the file's keys (the preset's own model:
    merged, it changed nothing without a word)."""
    from ml_collections import ConfigDict
    from ml_collections.config_flags import config_flags, config_path

    seen = set()  # a setting given twice: ml_collections kept the later without a word ({} then a dict, say)
    for arg in sys.argv[1:]:
        m = re.match(r"--?([A-Za-z_]\w*)\.([^=\s]+)", arg)  # absl takes -config.x too
        if m and m[1] in flag_values and config_flags.is_config_flag(flag_values[m[1]]):
            if (key := f"{m[1]}.{m[2]}") in seen:
                raise InputError(f"--{key} is given twice: give each setting once (the later value replaced the "
                                 "earlier without a word)")
            seen.add(key)
    for name in flag_values:
        flag = flag_values[name]
        if not config_flags.is_config_flag(flag) or flag.value is None or not flag.present:
            continue
        given = {p: v for p, v in config_flags.get_override_values(flag).items() if isinstance(v, (dict, ConfigDict))}
        base = file_config(config_flags.get_config_filename(flag)) if given else None
        for path in given:
            was, now = config_path.get_value(path, base), config_path.get_value(path, flag.value)
            if not isinstance(was, (dict, ConfigDict)) or not isinstance(now, (dict, ConfigDict)):
                continue
            # the section as the overrides left it (the dict, and any key set by its path after it), over the file's
            was, now = ({**(x.to_dict() if isinstance(x, ConfigDict) else x)} for x in (was, now))
            new = sorted(set(now) - set(was))
            if new and path not in OPEN_SECTIONS:
                raise InputError(f"--{name}.{path}: {', '.join(map(repr, new))} is no field of {name}.{path} (its "
                                 f"fields: {', '.join(sorted(was)) or 'none'})")
            cleared = path in OPEN_SECTIONS and not given[path]  # "{}": none of the file's (else no way to clear)
            config_path.set_value(path, flag.value, now if cleared else was | now)


def stray_argument_line(value: str, argv: list[str]) -> str:
    """The error for a word an absl script was given outside any flag: most often a boolean flag's value written
    apart from it (``--overwrite false`` sets --overwrite and leaves ``false`` over), which would be silently lost."""
    i = argv.index(value) if value in argv else -1
    before = argv[i - 1] if i > 0 else ""
    if before.startswith("-") and "=" not in before:
        return (f"unexpected argument {value!r} after {before}: a flag takes its value after '=' "
                f"(write {before}={value})")
    return f"unexpected argument {value!r}: this script takes flags only (--name=value)"


def flag_error_line(e: BaseException, argv: list[str] = ()) -> str:
    """absl's flag error as one line. A config file whose ``get_config`` raised (an unknown variant, a typo in an
    override) arrives as ml_collections' message with the traceback inside; keep the flag and the exception's own
    message: ``flag --config=train/configs/glue.py:rtee: unknown GLUE task 'rtee'; one of cola, ...``. An override of
    a field the config does not have (ml_collections: a bare AttributeError) names the argument; a config file that is
    not Python names its file and line."""
    if isinstance(e, SyntaxError):
        return f"{e.filename}:{e.lineno}: {e.msg} (a config file must be Python defining get_config)"
    if isinstance(e, (ValueError, IndexError)) and not isinstance(e, KeyError):
        # ml_collections' override paths: a list entry is config.phases[0].x; "phases.0.x" does not parse
        m = re.search(r"Could not parse '([^']+)'", str(e))
        if m:
            path = m.group(1)
            fixed = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)
            hint = f": write a list entry's index in brackets, --config.{fixed}" if fixed != path else ""
            return f"--config.{path}: not a field path{hint}"
        if isinstance(e, IndexError):
            given = [a.split("=", 1)[0] for a in argv[1:] if re.search(r"\[\d+\]", a.split("=", 1)[0])]
            return (f"{', '.join(given) or 'an override'}: the config's list has no entry of that index "
                    "(indices count from 0)")
    if isinstance(e, (AttributeError, KeyError)):
        inner = e
        while inner.args and isinstance(inner.args[0], BaseException):  # ml_collections nests KeyError in it
            inner = inner.args[0]
        text = str(inner.args[0]) if inner.args else str(inner)
        m = re.search(r"([A-Za-z_][\w-]*)", text)
        key = m.group(1) if m else text
        given = [a for a in argv[1:] if a.startswith("--") and key in a.split("=", 1)[0].split(".")[1:]]
        alt = re.search(r'Did you mean "([^"]+)"', text)
        hint = f"; did you mean {alt.group(1)!r}?" if alt else " (its config file lists the fields)"
        flag, _, section = given[0].split("=", 1)[0].lstrip("-").rpartition(f".{key}")[0].partition(".") if given \
            else ("", "", "")
        if section in OPEN_SECTIONS:  # a key the file's section does not hold yet: added with the section given whole
            hint = (f": a key {flag}.{section} does not hold yet goes in with the section, "
                    f"--{flag}.{section}=\"{{'{key}': VALUE}}\" (added to the config file's)")
        return f"{given[0] if given else key}: the config has no field {key!r}{hint}"
    msg = str(e)
    if "Traceback (most recent call last)" in msg:
        head = msg.strip().splitlines()[0]
        flag = head.split(": Error whilst", 1)[0] if ": Error whilst" in head else head.rstrip(":")
        last = re.sub(r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\w*: ", "", _last_line(msg))
        return f"{flag}: {last}"
    return " ".join(msg.split())


def _last_line(msg) -> str:
    lines = [ln.strip() for ln in str(msg).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# A flag given with nothing in it (``--json ""``, ``--init_from " "``) where leaving it out means something else:
# refused by every script's parser, rather than read as the flag left out (an output silently not written) or as ""
EMPTY_VALUE = "an empty value: give one, or leave the flag out"


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the scripts' shared ``--debug`` flag and the docstring shown as written; a string argument given
    empty or blank where its default is not "" is refused (``EMPTY_VALUE``), by name."""

    def __init__(self, description: str | None = None, **kw):
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(description=description, **kw)
        self.add_argument("--debug", action="store_true", help=f"show the traceback of an error (or {DEBUG_ENV}=1)")

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(ns, action.dest, None)
            values = value if isinstance(value, list) else [value]
            if action.default != "" and any(isinstance(v, str) and not v.strip() for v in values):
                self.error(f"{'/'.join(action.option_strings) or action.metavar or action.dest}: {EMPTY_VALUE}")
        return ns, rest


def config_module(path: str) -> types.ModuleType:
    """A config file (``train/configs/pretrain.py``, ``glue.py``: ``get_config(variant)``) loaded as a module, the file
    ``--config PATH:VARIANT`` names; the scripts that build configs themselves read them through this."""
    name = os.path.splitext(os.path.basename(path))[0] + "_config"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positive_int(s: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def _finite_float(s: str, low: float, low_open: bool) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not (math.isfinite(v) and (v > low if low_open else v >= low)):
        raise argparse.ArgumentTypeError(f"{v} must be a finite number {'>' if low_open else '>='} {low:g}")
    return v


def nonnegative_float(s: str) -> float:
    """argparse type: a finite number >= 0."""
    return _finite_float(s, 0.0, low_open=False)


def positive_float(s: str) -> float:
    """argparse type: a finite number > 0."""
    return _finite_float(s, 0.0, low_open=True)


class _ConsoleHandler(logging.StreamHandler):
    """WARNING and above on stderr, written through tqdm so that a progress bar on the screen is not torn. With a log
    file, another library's record is one line here (its traceback goes to the log file only), and one about a full
    disk is left to the script's own error line."""

    def __init__(self, with_log_file: bool):
        super().__init__()
        self.with_log_file = with_log_file

    def emit(self, record):
        try:
            from tqdm import tqdm

            if self.with_log_file and not record.name.startswith("squeezebert_jax"):
                text = record.getMessage()
                if any(t in text for t in _DISK_TEXTS):
                    return
                if record.exc_info or record.exc_text or "\n" in text:
                    record = logging.makeLogRecord(record.__dict__ | {
                        "msg": text.strip().splitlines()[0] + " (details in the log file)" if text.strip() else text,
                        "args": None, "exc_info": None, "exc_text": None, "stack_info": None})
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 -- logging must never raise
            self.handleError(record)


class _FileHandler(logging.FileHandler):
    """The run's log file. A record that cannot be written (a full disk) is dropped: the console would otherwise get
    logging's own traceback for each one, while the run's error line already says what happened."""

    def handleError(self, record):
        pass


_RUN_LOG: dict = {}  # the log file setup_logging opened: its path, whether it was there, the directories it made


def setup_logging(log_file: str | None = None, console_level: int = logging.WARNING) -> None:
    """Root logging for a script: ``console_level`` and above on the console, INFO and above to ``log_file`` (appended;
    its directory is created). Replaces the root handlers, absl's included, so that orbax's and absl's INFO records
    (object reprs, per-save chatter) stay out of the console. A run refused before it wrote anything else takes its
    new log file (and the directories made for it) away again (``forget_refused_run_log``)."""
    _RUN_LOG.clear()
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    console = _ConsoleHandler(with_log_file=bool(log_file))
    console.setLevel(console_level)
    console.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root.addHandler(console)
    if log_file:
        made = files.make_dirs(os.path.dirname(os.path.abspath(log_file)))
        _RUN_LOG.update(path=os.path.abspath(log_file), existed=os.path.exists(log_file), made=made)
        fh = _FileHandler(log_file, mode="a", encoding="utf-8")
        fh.setLevel(logging.INFO)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(fh)
    root.setLevel(logging.INFO if log_file else console_level)
    try:  # absl logs through the "absl" logger; keep its own level from filtering INFO before our handlers see it
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.INFO if log_file else absl_logging.WARNING)
        absl_logging.get_absl_handler().setLevel(console_level)
    except ImportError:
        pass


CACHE_ENV = "SQUEEZEBERT_COMPILATION_CACHE"


def enable_compilation_cache() -> str | None:
    """XLA's persistent compilation cache for the training scripts (train/pretrain.py, train/finetune.py,
    train/glue_recipe.py): a restart after a preemption, and the runs of a sweep or of the GLUE tasks (the learning
    rate is an input of the step, ``optim.learning_rate_input``), read the compiled step back instead of compiling it
    again (the paper step: about a minute on a TPU). The directory is ``$SQUEEZEBERT_COMPILATION_CACHE`` if set (``0``,
    ``false``, ``no`` or ``off`` turn the cache off; ``1``, ``true``, ``yes`` or ``on`` take the default), else jax's
    own ``JAX_COMPILATION_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/squeezebert_jax/xla`` (``~/.cache/...``). jax
    keeps programs that took over a second to compile.
    Returns the directory (None: off)."""
    import jax

    setting = os.environ.get(CACHE_ENV, "").strip()
    switch = files.env_switch(CACHE_ENV)
    if switch is False and setting:  # 0, false, no, off
        return None
    if switch:  # 1, true, yes, on: the default directory (not one named "true")
        setting = ""
    if setting:  # a directory: absolute (or ~), so that a mistyped word ("disable") is no folder where the run starts
        setting = os.path.expanduser(setting)
        if not os.path.isabs(setting):
            raise InputError(f"{CACHE_ENV}={os.environ[CACHE_ENV]!r}: an absolute directory, or 0/false/no/off (no "
                             "cache) or 1/true/yes/on (the default directory)")
        if os.path.exists(setting) and not os.path.isdir(setting):
            raise InputError(f"{CACHE_ENV}={os.environ[CACHE_ENV]!r}: {setting} is not a directory")
    if not setting and jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    path = setting or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser(os.path.join("~", ".cache")),
                                   "squeezebert_jax", "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    return path
