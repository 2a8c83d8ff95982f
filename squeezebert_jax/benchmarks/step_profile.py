"""Where a jitted step's device time goes: every kernel's time from a profiler trace (``jax.profiler``'s Perfetto
trace), named by the compiled program's HLO with its scope (model.py's named scopes, the pretraining heads, the
optimizer), its pass (forward, or backward: under autodiff's ``transpose``) and its kind (``hlo_census``: gemm,
attention, transpose, copy, other). ``eval/bench_train.py --profile DIR`` prints the tables and writes every kernel
to DIR/kernels.tsv and the compiled program to DIR/<model>.hlo.txt.

On a GPU the trace's device process (``/device:GPU:0``) times each kernel on its stream; elsewhere (XLA:CPU) the ops
are timed on the host's threads. Both carry the HLO instruction's name (``hlo_op``), which is what ties a time to
the program.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Callable

from squeezebert_jax.benchmarks.hlo_census import _computations, _kind
from squeezebert_jax.benchmarks.profile_table import SCOPES, trace_events

# The named scopes a step's kernels are attributed to: model.py's (profile_table.SCOPES), the heads and the update
STEP_SCOPES = tuple(k for k in SCOPES if k != "other") + ("pretraining_heads", "optimizer")


def op_times(events: list[dict], module: str | None = None) -> tuple[dict[str, list[float]], str]:
    """``({hlo_op: [microseconds of each of its events]}, where)`` of the trace's op events (those with an ``hlo_op``;
    of HLO module ``module`` when given, matched by prefix). On a device (a process named ``/device:...``) only its
    kernels count, one timeline of them: its "XLA Ops" thread where there is one, else its streams. ``where`` names
    the process and threads read."""
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = (e.get("args") or {}).get("name", "")
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = (e.get("args") or {}).get("name", "")
    ops = [e for e in events if e.get("ph") == "X" and (e.get("args") or {}).get("hlo_op")
           and (module is None or str(e["args"].get("hlo_module", "")).startswith(module))]
    device = [p for p, n in procs.items() if n.startswith("/device:") and "CPU" not in n]
    where = "host threads"
    if device:
        on_device = [e for e in ops if e["pid"] in device]
        by_thread = collections.Counter(threads.get((e["pid"], e["tid"]), "") for e in on_device)
        keep = [t for t in by_thread if t == "XLA Ops"] or [t for t in by_thread if t.startswith("Stream")] \
            or list(by_thread)
        ops = [e for e in on_device if threads.get((e["pid"], e["tid"]), "") in keep]
        where = f"{procs[device[0]]}: " + ", ".join(sorted(keep))
    times: dict[str, list[float]] = collections.defaultdict(list)
    for e in ops:
        times[e["args"]["hlo_op"]].append(float(e.get("dur", 0.0)))
    return dict(times), where


@dataclasses.dataclass(frozen=True)
class Instruction:
    scope: str  # a STEP_SCOPES name, or "other"
    backward: bool  # under autodiff's transpose (the backward pass), or remat's recomputation in it
    kind: str  # hlo_census's: gemm, attention, transpose, copy, other


def instructions(hlo_text: str) -> dict[str, Instruction]:
    """Every kernel-launching instruction of an optimized HLO module, in any computation (the layer scan's bodies
    too), with its scope, pass and kind. A fusion whose own metadata is missing is named by the ops inside it."""
    comps, _ = _computations(hlo_text)
    out = {}
    for lines in comps.values():
        for line in lines:
            m = re.match(r"(?:ROOT )?%?([^\s=]+) = ", line)
            kind = _kind(line, comps) if m else None
            if kind is None or re.search(r"\s(while|conditional|call)\(%", line):  # no kernel: what they call is
                continue
            names = re.findall(r'op_name="([^"]*)"', line)
            called = re.search(r"calls=%?([\w.\-]+)", line)
            if not names and called:
                names = [n for i in comps.get(called[1], ()) for n in re.findall(r'op_name="([^"]*)"', i)]
            parts = [c for n in names[:1] for c in re.split(r"[/()]", n)]
            scope = next((c for c in parts if c in STEP_SCOPES), "other")
            out[m[1]] = Instruction(scope, any("transpose(" in n or "rematted" in n for n in names[:1]), kind)
    return out


@dataclasses.dataclass
class StepProfile:
    """Kernel times of one step, ``rows``: (hlo_op, Instruction or None where the program has no such name,
    microseconds per step, launches per step); ``where``: which timeline of the trace was read."""

    rows: list[tuple[str, Instruction | None, float, float]]
    where: str

    @property
    def total_us(self) -> float:
        return sum(r[2] for r in self.rows)

    def by(self, key: Callable[[Instruction | None], str]) -> list[tuple[str, float, float]]:
        """(group, microseconds per step, launches per step) by ``key(instruction)``, largest first."""
        us, n = collections.Counter(), collections.Counter()
        for _, ins, t, c in self.rows:
            us[key(ins)] += t
            n[key(ins)] += c
        return [(k, us[k], n[k]) for k, _ in us.most_common()]

    def tsv(self) -> str:
        lines = ["hlo_op\tscope\tpass\tkind\tus_per_step\tlaunches_per_step"]
        for name, ins, t, c in self.rows:
            lines.append("\t".join([name, ins.scope if ins else "?", ("backward" if ins.backward else "forward")
                                    if ins else "?", ins.kind if ins else "?", f"{t:.1f}", f"{c:g}"]))
        return "\n".join(lines) + "\n"


def profile_step(run: Callable[[], Any], hlo_text: str, runs: int = 5) -> StepProfile:
    """Profile ``runs`` calls of ``run`` (one blocking step of the compiled program whose optimized HLO is
    ``hlo_text``) and attribute every kernel's time per step."""
    module = re.match(r"HloModule ([^\s,]+)", hlo_text)
    events = trace_events(run, runs)
    times, where = op_times(events, module[1] if module else None)
    if not times:  # the trace names the module otherwise: every op event
        times, where = op_times(events)
    if not times:
        raise RuntimeError("the profiler trace holds no op events of the step's module: has its format changed?")
    ins = instructions(hlo_text)
    loops = {m[1] for line in hlo_text.splitlines()  # timed with what they call
             for m in [re.match(r"\s*(?:ROOT )?%?([^\s=]+) = .*\s(?:while|conditional|call)\(%", line)] if m}
    rows = sorted(((op, ins.get(op), sum(t) / runs, len(t) / runs) for op, t in times.items() if op not in loops),
                  key=lambda r: -r[2])
    return StepProfile(rows, where)
