"""Hyper-parameter sweeps over GLUE fine-tuning: a grid per task, one JSON line per run, the best dev setting per task.

A grid is ``"lr=1e-5,2e-5;dropout=0.0,0.1;batch=16,32"``: fields of train/configs/glue.py (short aliases ``lr``,
``dropout``, ``batch``, ``epochs``, ``seed``; dotted names such as ``distill.teacher_weight``), each with its values;
every combination runs on every task (the first field outermost). Presets: ``miniatures`` is Turc et al.'s grid (batch
8/16/32/64/128 x lr 3e-4/1e-4/5e-5/3e-5, 4 epochs).

Every finished run is one row of ``WORKDIR/sweep.jsonl`` (task, settings, seed, the best epoch's dev metrics, the
selection score, wall time, run dir), written whole or not at all. A restarted sweep skips the runs whose key (task +
settings + seed) has a row; a run without a row (interrupted) resumes from its checkpoints.

Selection, per task: the setting with the highest dev score in the task's main metric (``glue.TaskSpec.main_metric``,
on the task's first eval split, so MNLI is chosen by matched accuracy), averaged over seeds when seeds are swept.
Ties go to the setting that comes first in the grid; a NaN score never wins.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

import ml_collections
from tqdm.auto import tqdm

from squeezebert_jax import distill, evaluation, files, finetune_settings, glue, loop, trainer
from squeezebert_jax import finetune as ft
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import atomic_write
from squeezebert_jax.tasks import resolve as resolve_task
from squeezebert_jax.trainer import config_changes

log = logging.getLogger(__name__)

ALIASES = {"lr": "learning_rate", "dropout": "dropout", "batch": "batch_size", "epochs": "num_epochs", "seed": "seed"}
SHORT = {field: alias for alias, field in ALIASES.items()}
PRESETS = {"miniatures": "batch=8,16,32,64,128;lr=3e-4,1e-4,5e-5,3e-5;epochs=4"}  # Turc et al.'s miniatures grid
NOT_SWEPT = {"task": "--tasks picks the tasks", "init_from": "--init_from", "data_dir": "--data_dir",
             "distill.teacher": "--teacher_root: a teacher MODEL_DIR per task"}
_POSITIVE = {"learning_rate", "batch_size", "num_epochs"}
_FRACTION = {"dropout", "attention_dropout", "warmup_fraction", "weight_decay", "distill.teacher_weight"}
RECORD = "sweep.jsonl"
RUN_KIND = "GLUE sweep"  # what a sweep's run lock (files.RunLock) and run-directory check call it
_PER_RUN = {"seed", "init_from", "progress", "distill.teacher", "distill.cache_dir"}  # not compared on a restart


# --------------------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------------------

def parse_grid(text: str, config: ml_collections.ConfigDict, preset: str = "") -> dict[str, list]:
    """``"lr=1e-5,2e-5;dropout=0.0,0.1"`` -> ``{"lr": [1e-5, 2e-5], "dropout": [0.0, 0.1]}`` (names as ``SHORT``
    gives them, else the dotted field name; values of the field's type in ``config``). ``preset``'s grid comes first;
    a field that ``text`` names again takes ``text``'s values. InputError names the bad part."""
    if preset and preset not in PRESETS:
        raise InputError(f"--preset: unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    grid = _parse(PRESETS[preset], config) if preset else {}
    if text is not None:
        if not text.strip():
            raise InputError("--sweep: empty grid; e.g. --sweep \"lr=1e-5,2e-5;dropout=0.0,0.1\"")
        grid.update(_parse(text, config))
    return grid


def _parse(text: str, config: ml_collections.ConfigDict) -> dict[str, list]:
    grid = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue  # a trailing ";"
        key, eq, values = (s.strip() for s in part.partition("="))
        if not eq or not key:
            raise InputError(f"--sweep: {part!r} is not FIELD=V1,V2,... (e.g. lr=1e-5,2e-5)")
        field = ALIASES.get(key, key)
        name = SHORT.get(field, field)
        if name in grid:
            raise InputError(f"--sweep: {key!r} is named twice")
        kind = field_type(config, field, part)
        items = [v.strip() for v in values.split(",")]
        if not values.strip() or "" in items:
            raise InputError(f"--sweep: {part!r}: an empty value; give {key}=V1,V2,...")
        parsed = [_value(v, kind, field, part) for v in items]
        if len(set(parsed)) != len(parsed):
            raise InputError(f"--sweep: {part!r} repeats a value")
        grid[name] = parsed
    if not grid:
        raise InputError("--sweep: empty grid; e.g. --sweep \"lr=1e-5,2e-5;dropout=0.0,0.1\"")
    return grid


def field_type(config: ml_collections.ConfigDict, field: str, part: str) -> type:
    """The type of ``config``'s dotted ``field``; InputError for one it does not have, a group, or a field that
    is not swept."""
    if field in NOT_SWEPT:
        raise InputError(f"--sweep: {part!r}: {field} is not swept ({NOT_SWEPT[field]})")
    node, *path, last = [config, *field.split(".")]
    for p in path:
        if not isinstance(node, ml_collections.ConfigDict) or p not in node:
            node = None
            break
        node = node[p]
    if not isinstance(node, ml_collections.ConfigDict) or last not in node:
        raise InputError(f"--sweep: {part!r}: the glue config has no field {field!r} (aliases: "
                         f"{', '.join(f'{a}={f}' for a, f in ALIASES.items() if a != f)}; dotted names such as "
                         f"distill.teacher_weight; train/configs/glue.py lists the fields)")
    kind = node.get_type(last)
    if kind is ml_collections.ConfigDict:
        raise InputError(f"--sweep: {part!r}: {field} is a group; name one of its fields "
                         f"({', '.join(f'{field}.{k}' for k in node[last])})")
    return kind


def _value(text: str, kind: type, field: str, part: str):
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            value = text.lower() in ("true", "1")
        else:
            value = kind(text)
    except ValueError:
        raise InputError(f"--sweep: {part!r}: {text!r} is not {'an' if kind is int else 'a'} {kind.__name__} "
                         f"({field})") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"--sweep: {part!r}: {text!r} is not a finite number ({field})")
    if field in _POSITIVE and value <= 0:
        raise InputError(f"--sweep: {part!r}: {field} must be > 0, not {text}")
    if field in _FRACTION and not 0 <= value <= 1:
        raise InputError(f"--sweep: {part!r}: {field} must lie in [0, 1], not {text}")
    return value


def expand(grid: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination, the first field outermost: [{"lr": 1e-5, "dropout": 0.0}, {"lr": 1e-5, "dropout": 0.1}, ...]."""
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def apply(config: ml_collections.ConfigDict, settings: dict[str, Any]) -> ml_collections.ConfigDict:
    """``config`` with ``settings`` (names as in a grid) set in place; returns it."""
    for name, value in settings.items():
        node, *path, last = [config, *ALIASES.get(name, name).split(".")]
        for p in path:
            node = node[p]
        node[last] = value
    return config


def show(value) -> str:
    """A setting's value as written in run dir names and tables: repr for numbers (exact: 1e-05, 0.1), else str."""
    return json.dumps(value) if isinstance(value, (bool, int, float)) else str(value)


def run_name(settings: dict[str, Any], seed: int) -> str:
    """``lr=1e-05,dropout=0.1,seed=0``: the run dir under WORKDIR/<task>/ (a swept seed is named once, as ``seed``)."""
    parts = [f"{k}={show(v)}" for k, v in settings.items() if k != "seed"] + [f"seed={seed}"]
    return ",".join(parts).replace(os.sep, "_").replace(" ", "_")


# --------------------------------------------------------------------------------------------------
# The record: WORKDIR/sweep.jsonl
# --------------------------------------------------------------------------------------------------

def run_key(task: str, settings: dict[str, Any], seed: int) -> str:
    """What makes two runs the same run: the task, the settings (in any order) and the seed."""
    return json.dumps([task, sorted(settings.items()), int(seed)])


def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a sweep record (none when it does not exist), read through ``files.text_lines`` (a bad byte
    named by line). A line that is not a JSON row with each field a run writes, of its type (``row_problem``), is an
    InputError naming ``path:line`` (the file is only ever rewritten whole, so it is not a crash's leftover)."""
    if not os.path.exists(path):
        return []
    rows = []
    for lineno, line in files.text_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            problem = f"not JSON: {e}"
        else:
            problem = row_problem(row)
        if problem:
            raise InputError(f"{path}:{lineno}: not a sweep row ({problem}); move the file away to start afresh, or "
                             f"delete that line to re-run its run")
        rows.append(row)
    return rows


# the fields a finished run's row holds (``_run_sweep``), each with its test and what it should be
_ROW_FIELDS = {
    "task": (lambda v: isinstance(v, str), "a task name"),
    "settings": (lambda v: isinstance(v, dict), "an object of settings"),
    "seed": (files.is_int, "an integer"),
    "score": (lambda v: files.is_number(v, finite=False), "a number"),  # NaN: a run that diverged
    "dev": (lambda v: isinstance(v, dict) and all(files.is_number(x, finite=False) for x in v.values()),
            "an object of numbers"),
    "epoch": (files.is_int, "an integer"),
    "run_dir": (lambda v: isinstance(v, str), "a path"),
}


def row_problem(row) -> str | None:
    """What is wrong with a sweep record's row, in a phrase (None: nothing)."""
    if not isinstance(row, dict):
        return f"{files.json_type(row)}, not a JSON object"
    for name, (ok, want) in _ROW_FIELDS.items():
        if name not in row:
            return f"no {name!r}"
        if not ok(row[name]):
            return f"{name!r} is {files.json_value(row[name])}, not {want}"
    if row.get("config") is not None and not isinstance(row["config"], dict):  # the run's config, when recorded
        return f"'config' is {files.json_value(row['config'])}, not an object"
    metric = row.get("metric")
    if metric is not None and not (isinstance(metric, str) and metric in row["dev"]):
        return f"'metric' is {files.json_value(metric)}, not one of its 'dev' scores ({', '.join(row['dev'])})"
    if metric is not None and not _same_score(row["score"], row["dev"][metric]):  # the score it is chosen by
        return (f"'score' is {files.json_value(row['score'])}, but its 'dev' {metric} is "
                f"{files.json_value(row['dev'][metric])} (the score is that dev metric)")
    return None


def _same_score(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def append_row(path: str, row: dict[str, Any]) -> None:
    """Add one row to the record, atomically: the whole file is rewritten with the row and renamed into place
    (files.atomic_write), so a crash leaves the record with or without the row, never half of it."""
    old = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
    if old and not old.endswith("\n"):
        old += "\n"
    atomic_write(path, old + files.json_text(row) + "\n")


# --------------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------------

def selection_metric(task: str) -> str:
    """The dev metric a task's setting is chosen by: its main metric on its first eval split (MNLI: matched)."""
    spec = glue.get_task(task)
    return f"{spec.eval_splits[0]}/{spec.main_metric}"


@dataclasses.dataclass
class Choice:
    """The chosen setting of one task: its settings, mean score over its seeds, rows, and the task's run count."""
    task: str
    settings: dict[str, Any]
    score: float
    rows: list[dict[str, Any]]
    num_runs: int


def choose(rows: list[dict[str, Any]], grid_order: list[dict[str, Any]] | None = None) -> dict[str, Choice]:
    """{task: Choice}: per task the setting with the highest mean score over its seeds; ties (and all-NaN tasks) go
    to the setting first in ``grid_order`` (else first recorded); a NaN score never wins."""
    order: dict[str, int] = {}
    for s in grid_order or []:  # a row's settings leave its seed out
        order.setdefault(run_key("", {k: v for k, v in s.items() if k != "seed"}, 0), len(order))
    out = {}
    for task in dict.fromkeys(r["task"] for r in rows):
        groups: dict[str, list] = {}
        for r in rows:
            if r["task"] == task:
                groups.setdefault(run_key("", r["settings"], 0), []).append(r)
        ranked = sorted(groups.items(), key=lambda kv: order.get(kv[0], len(order)))  # stable: recorded order after
        best = None
        for _, rs in ranked:
            score = sum(r["score"] for r in rs) / len(rs)
            if best is None or (not math.isnan(score) and (math.isnan(best.score) or score > best.score)):
                best = Choice(task, rs[0]["settings"], score, rs, sum(len(g) for g in groups.values()))
        out[task] = best
    return out


def settings_table(choices: dict[str, Choice]) -> str:
    """The paper's appendix form (its Table 5): a row per swept setting, a column per task, the chosen values; then
    the best epoch (per seed), the chosen setting's dev score (percent, main metric; MNLI matched) and the runs."""
    tasks = [t for t in glue.RECIPE_ORDER if t in choices] + [t for t in choices if t not in glue.RECIPE_ORDER]
    names = list(dict.fromkeys(k for t in tasks for k in choices[t].settings))
    lines = [["setting"] + [glue.get_task(t).glue_dir for t in tasks]]
    for name in names:
        lines.append([name] + [show(choices[t].settings[name]) if name in choices[t].settings else "-" for t in tasks])
    lines.append(["best epoch"] + ["/".join(str(r["epoch"]) for r in choices[t].rows) for t in tasks])
    lines.append(["dev score"] + [f"{100 * choices[t].score:.1f}" for t in tasks])
    lines.append(["runs"] + [str(choices[t].num_runs) for t in tasks])
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in lines)


def chosen_metrics(choices: dict[str, Choice]) -> dict[str, dict[str, dict[str, float]]]:
    """{task: {split: {metric: value}}}: the chosen settings' dev metrics, averaged over their seeds."""
    per_task = {}
    for task, c in choices.items():
        splits: dict[str, dict[str, float]] = {}
        for k in c.rows[0]["dev"]:
            split, metric = k.split("/")
            splits.setdefault(split, {})[metric] = sum(r["dev"][k] for r in c.rows) / len(c.rows)
        per_task[task] = splits
    return per_task


def results_table(choices: dict[str, Choice], name: str = "best of sweep") -> str:
    """The Table 2 form of the chosen settings' dev metrics (mean over seeds), then the chosen settings (a sweep of
    one point, the recipe, has none to show)."""
    text = glue.table(glue.table_results(chosen_metrics(choices)), name=name)
    if any(c.settings or c.num_runs > 1 for c in choices.values()):
        text += "\n\nchosen settings (best dev main metric; MNLI: matched accuracy)\n" + settings_table(choices)
    return text


# --------------------------------------------------------------------------------------------------
# Running a sweep
# --------------------------------------------------------------------------------------------------

def run_sweep(make_config: Callable[[str], ml_collections.ConfigDict], grid: dict[str, list], workdir: str,
              tasks=None, transfer: bool = False, teacher_root: str = "", predict: bool = False,
              echo: Callable[[str], None] = tqdm.write) -> str:
    """Fine-tune every setting of ``grid`` on every task (MNLI first), record each run in WORKDIR/sweep.jsonl,
    skip runs already recorded, and return the results table with the chosen settings (also WORKDIR/table.md, the
    chosen runs' dev metrics in WORKDIR/results.json).

    ``make_config(task)`` gives each task's base config (train/configs/glue.py plus the script's flags; its
    ``init_from`` set); the grid's settings go on top. Teachers come from ``teacher_root/<task>``; with ``transfer``
    every task but CoLA starts from MNLI's chosen model (the paper's bells and whistles). The grid ``{}`` is one point:
    the whole-table recipe, each task's run in WORKDIR/<task>. A run recorded in the record is skipped; one that was
    interrupted resumes from its checkpoints. ``predict``: GLUE-server files of the chosen runs in
    WORKDIR/predictions (AX from MNLI's). ``echo`` gets one line per finished run (task, settings, score, elapsed /
    ETA). One sweep per workdir at a time (``files.RunLock``)."""
    check_points(make_config, grid, tasks or glue.RECIPE_ORDER, teacher_root)
    check_teachers(teacher_root, tasks or glue.RECIPE_ORDER)
    with files.RunLock(workdir, RUN_KIND):
        return _run_sweep(make_config, grid, workdir, tasks, transfer, teacher_root, predict, echo)


def check_teachers(teacher_root: str, tasks) -> None:
    """With ``teacher_root``, the tasks' teacher MODEL_DIRs are ``teacher_root/<task>``. A root that is no directory,
    or holds a teacher for none of ``tasks``, is refused before anything is written (every run would train
    undistilled under a table marked (D)); the tasks without one are named in a warning (the paper distils CoLA
    too, but a user may have teachers for some tasks only)."""
    if not teacher_root:
        return
    if not os.path.isdir(teacher_root):
        raise InputError(f"--teacher_root {teacher_root}: no such directory (one teacher MODEL_DIR per task inside)")
    tasks = list(tasks)
    missing = [t for t in tasks if not os.path.isdir(os.path.join(teacher_root, t))]
    if len(missing) == len(tasks):
        raise InputError(f"--teacher_root {teacher_root} holds a teacher for none of the tasks (a MODEL_DIR "
                         f"{os.path.join(teacher_root, missing[0])} for {missing[0]}, ...)")
    if missing:
        log.warning("--teacher_root %s has no teacher for %s: %s trained without distillation", teacher_root,
                    ", ".join(missing), "it is" if len(missing) == 1 else "they are")


def with_teacher(c: ml_collections.ConfigDict, teacher_root: str, task: str) -> ml_collections.ConfigDict:
    """``c`` distilled from ``teacher_root/<task>`` where that teacher is there; a task without one trains
    undistilled (``check_teachers`` warned of it), its teacher's share back at the default."""
    teacher = os.path.join(teacher_root, task) if teacher_root else ""
    c.distill.teacher = teacher if teacher and os.path.isdir(teacher) else ""
    if not c.distill.teacher:
        c.distill.teacher_weight = distill.SETTINGS["teacher_weight"]
    return c


def check_points(make_config: Callable[[str], ml_collections.ConfigDict], grid: dict[str, list], tasks,
                 teacher_root: str = "") -> None:
    """Every point's settings through fine-tuning's validator before anything is written or run, the point named
    in the one-line refusal (the devices' count is checked as each run starts: here is one device). A grid over
    distillation's settings with no teacher is refused: each point would train alike (the setting put back)."""
    if not teacher_root and (swept := [k for k in grid if k.startswith("distill.")]):
        raise InputError(f"--sweep {swept[0]}: a distillation setting, which no run reads without --teacher_root "
                         "(every point would train alike)")
    for task in tasks:
        for s in expand(grid):
            c = with_teacher(apply(make_config(task), s), teacher_root, task)
            try:
                finetune_settings.check_settings(c, num_devices=1)
            except InputError as e:
                raise InputError(f"sweep point {task} {run_name(s, int(c.seed))}: {e}") from None


def _run_sweep(make_config, grid, workdir, tasks, transfer, teacher_root, predict, echo) -> str:
    tasks = list(tasks or glue.RECIPE_ORDER)
    if transfer and "mnli" in tasks:
        tasks.insert(0, tasks.pop(tasks.index("mnli")))
    settings_list = expand(grid)
    record = os.path.join(workdir, RECORD)
    if transfer and "mnli" not in tasks and any(t not in ("mnli", "cola") for t in tasks) and not any(
            r["task"] == "mnli" for r in read_rows(record)):  # it trained from --init_from, labelled "(S)"
        raise InputError(f"--transfer starts each task from the MNLI run, and {workdir} has none: add mnli to "
                         "--tasks, or run it into this --workdir first")
    os.makedirs(workdir, exist_ok=True)
    done = {run_key(r["task"], r["settings"], r["seed"]): r for r in read_rows(record)}
    plan, drift, refused, recorded = [], {}, {}, []
    for task in tasks:
        for s in settings_list:
            c = with_teacher(apply(make_config(task), s), teacher_root, task)
            plan.append((task, {k: v for k, v in s.items() if k != "seed"}, int(c.seed)))
            row = done.get(run_key(*plan[-1]))
            if row:
                recorded.append((task, f"{task} {run_name(*plan[-1][1:])}", row, c))
            for name, (was, now) in (config_changes(row["config"], c.to_dict()).items()
                                     if row and row.get("config") else ()):
                if name not in _PER_RUN:  # what changes the run's meaning (fine-tuning's resume refuses it) or not
                    kind = refused if name in finetune_settings.RUN_SETTINGS else drift
                    kind[f"{name}: {show(was)} -> {show(now)}"] = None
            # the model it starts from and its teacher, per run (with --transfer, MNLI's model: its own record)
            now = {"init_from": None if transfer and task not in ("mnli", "cola") else c.init_from,
                   "teacher": c.distill.teacher}
            for name, value in now.items():
                if row and value is not None and row.get(name) is not None and row[name] != value:
                    refused[f"{name}: {show(row[name])} -> {show(value)}"] = None
    if refused:  # the key is task + settings + seed: its recorded result would stand for another run's
        raise InputError(f"{record}: recorded runs of this grid were made with other values outside it "
                         f"({'; '.join(refused)}), so their results would stand for this command's: give the values "
                         "they were run with, or another --workdir")
    _check_recorded_sources(record, recorded, transfer)
    if drift:  # settings that do not change what a run computes (its logging, say), as fine-tuning's resume takes
        log.warning("%s: recorded runs were made with other values outside the grid (%s); they are kept and "
                    "skipped: use another --workdir to run them again", record, "; ".join(drift))
    todo = [p for p in plan if run_key(*p) not in done]
    line = (f"sweep: {len(plan)} runs ({len(tasks)} task(s) x {len(settings_list)} settings), "
            f"{len(plan) - len(todo)} recorded, {len(todo)} to run; record {record}")
    echo(line)
    log.info("%s; grid %s", line, grid)
    start, finished = time.time(), 0
    for task in tasks:
        for s, seed in ((s, seed) for t, s, seed in plan if t == task):
            if run_key(task, s, seed) in done:
                continue
            c = apply(make_config(task), {**s, "seed": seed})
            if transfer and task not in ("mnli", "cola"):
                mnli = choose([r for r in read_rows(record) if r["task"] == "mnli"], settings_list).get("mnli")
                if mnli is not None:  # MNLI swept first, here or in an earlier sweep of this workdir
                    c.init_from = os.path.join(mnli.rows[0]["run_dir"], "model")
            c = with_teacher(c, teacher_root, task)
            if c.distill.teacher:  # the teacher's logits, computed once for every run of the sweep
                c.distill.cache_dir = os.path.join(workdir, "teacher_cache")
            run_dir = os.path.join(workdir, task) if not grid else os.path.join(workdir, task, run_name(s, seed))
            if os.path.exists(run_dir):  # a run that did not finish (no row): it resumes from its checkpoints
                log.info("%s has no row in %s: resuming it", run_dir, record)
            t0 = time.time()
            res = loop.require_finished(ft.finetune(c, run_dir), run_dir, f"the sweep's run {run_dir}")
            wall = time.time() - t0
            metric = selection_metric(task)
            dev = {k: v for k, v in res["best"].items() if "/" in k}
            row = {"task": task, "settings": s, "seed": seed, "score": dev[metric], "metric": metric, "dev": dev,
                   "epoch": res["best"]["epoch"], "wall_s": round(wall, 2), "run_dir": run_dir,
                   "init_from": c.init_from, "teacher": c.distill.teacher, "config": c.to_dict()}
            append_row(record, row)
            finished += 1
            elapsed = time.time() - start
            eta = elapsed / finished * (len(todo) - finished)
            line = (f"[{finished}/{len(todo)}] {task} {run_name(s, seed)}: {metric} {100 * dev[metric]:.1f} "
                    f"({wall:.0f} s; elapsed {_clock(elapsed)}, ETA {_clock(eta)})")
            echo(line)
            log.info(line)
    recorded = read_rows(record)
    rows = [r for r in recorded if r["task"] in tasks and run_key(r["task"], r["settings"], r["seed"]) in
            {run_key(*p) for p in plan}]
    if others := sorted({r["task"] for r in recorded} - set(tasks)):  # an earlier sweep's tasks: their rows stay
        log.warning("%s also holds runs of %s (an earlier sweep in this workdir): table.md, results.json and "
                    "chosen.json summarise this sweep's tasks (%s) alone; sweep those tasks again here to summarise "
                    "them too (their recorded runs are not trained again)", record, ", ".join(others),
                    ", ".join(tasks))
    choices = choose(rows, settings_list)
    label = ("this run" if not grid else "best of sweep") + (" (D)" if teacher_root else "") + \
        (" (S)" if transfer else "")
    text = results_table(choices, label)
    atomic_write(os.path.join(workdir, "table.md"), text + "\n")
    atomic_write(os.path.join(workdir, "results.json"), files.json_text(chosen_metrics(choices), indent=2) + "\n")
    atomic_write(os.path.join(workdir, "chosen.json"), files.json_text(
        {t: {"settings": c.settings, "score": c.score, "metric": selection_metric(t),
             "run_dirs": [r["run_dir"] for r in c.rows]} for t, c in choices.items()}, indent=2) + "\n")
    if predict:
        for task, c in choices.items():
            if glue.get_task(task).test_splits:
                base = make_config(task)
                model_dir = os.path.join(c.rows[0]["run_dir"], "model")
                if not os.path.isfile(os.path.join(model_dir, "config.json")):  # a missing test file only warns
                    raise InputError(f"--predict: {task}'s chosen run has no model ({model_dir} holds no "
                                     "config.json): it was moved or removed; restore it, or use another --workdir")
                try:
                    for t in (task, "ax") if task == "mnli" else (task,):
                        evaluation.predict_test(model_dir, t, base.data_dir or None, os.path.join(workdir, "predictions"),
                                        base.max_seq_length)
                except FileNotFoundError as e:
                    log.warning("no test predictions for %s: %s", task, e)
    return text


def _check_recorded_sources(record: str, recorded: list, transfer: bool) -> None:
    """Refuse to keep recorded runs whose data or models changed in place since they ran (a training file edited, the
    --init_from model retrained into the same directory): their scores would be chosen beside runs on what the files
    hold now. ``recorded``: (task, name, row, config) per recorded run of the plan. Each run's start (its
    ``config_history.jsonl`` stream) against the same run's stream now (``trainer.source_changes``); each file hashed,
    and each task's files read, once. With --transfer a task's start is MNLI's model, checked by MNLI's own runs."""
    memo: dict[str, dict] = {}
    specs: dict[str, Any] = {}  # a task's spec per data settings: your own data's is read from its training file

    def identity(source: str) -> dict:
        if source not in memo:
            memo[source] = trainer.source_identity(source)
        return memo[source]

    def spec_of(c: ml_collections.ConfigDict):
        key = json.dumps([c.task, c.data_dir, c.data.to_dict()], sort_keys=True, default=str)
        if key not in specs:
            specs[key] = resolve_task(c)
        return specs[key]

    changes: dict[str, list[str]] = {}  # what changed -> the recorded runs it concerns
    for task, name, row, c in recorded:
        run_dir = row.get("run_dir")
        history = os.path.join(str(run_dir), "config_history.jsonl")
        if not isinstance(run_dir, str) or not os.path.isfile(history):  # moved away: nothing to check it against
            gone = f"its run directory {run_dir} is gone" if not isinstance(run_dir, str) or not os.path.isdir(
                run_dir) else f"{history} is gone"
            raise InputError(f"{record}: the recorded run {name}: {gone}, so neither the data it was trained on nor "
                             "its model can be checked (a --predict reads that model): use another --workdir, or "
                             "restore the directory")
        results = os.path.join(run_dir, "eval_results.json")
        if os.path.isfile(results):  # the row's scores are its run's own (a hand-edited row was chosen over them)
            doc = files.read_json(results)
            best = doc.get("best") if isinstance(doc, dict) else None
            own = {k: v for k, v in best.items() if "/" in k} if isinstance(best, dict) else {}
            if set(own) != set(row["dev"]) or not all(_same_score(row["dev"][k], own[k]) for k in own
                                                      if files.is_number(own[k], finite=False)):
                raise InputError(f"{record}: the recorded run {name}'s dev scores {json.dumps(row['dev'])[:120]} are "
                                 f"not its run's own ({results}: {json.dumps(own)[:120]}); delete the row to take the "
                                 "run's, or restore it")
        then = trainer.recorded_stream(run_dir)
        if then is None:
            continue
        now = finetune_settings.run_stream(c, spec_of(c), identity)
        # the row's own settings were checked against this command's above (refused): a setting of the directory's
        # run that differs is the row pointing at another run (reported as "the labels changed": the wrong cause)
        other = next((k for k, v in then.items() if k.startswith("config.") and k in now and v != now[k]
                      and not isinstance(v, (dict, list))), None)
        if other:
            raise InputError(f"{record}: the recorded run {name} names {run_dir} as its run directory, but the run "
                             f"there has {other.removeprefix('config.')} {then[other]!r}, not {now[other]!r}: the row "
                             "points at another run; restore its run_dir, or delete the row to run it again")
        if transfer and task not in ("mnli", "cola"):
            now.pop("config.init_from", None)
        for phrase in trainer.source_changes(then, now):
            changes.setdefault(phrase, []).append(name)
    if changes:
        (phrase, runs), *rest = changes.items()
        more = f" and {len(rest)} more change(s)" if rest else ""
        raise InputError(f"{record}: {phrase}{more}, for {len(runs)} recorded run(s) ({', '.join(runs[:2])}"
                         f"{', ...' if len(runs) > 2 else ''}): their scores would be chosen beside runs on the files "
                         "as they are now. Use another --workdir (the recorded runs are left as they are), or restore "
                         "the files")


def _clock(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"
