"""What a compiled program launches: the kernels of its entry computation and of each loop body (the layer scan's
forward and backward bodies), by kind, from XLA's optimized HLO text (``compiled.as_text()``). A host without a GPU
reads the program XLA:GPU would run (``aot.get_target("h100:1x1")``): the transposes and copies around the grouped
convs, whether attention is cuDNN's fused kernel, how many kernels a layer costs.

Kinds: ``gemm`` (cuBLAS or Triton matmul fusions and custom calls), ``attention`` (cuDNN's fused attention, forward
and backward), ``transpose`` (a fusion or op that moves data to another layout: its fused computation holds a
transpose), ``copy`` (a copy op, or a fusion of nothing but copies and bitcasts), ``other`` (element-wise and
reduction fusions, slices into the scan's stacked buffers, ...).

Traffic: the bytes each kernel reads (its operands) and writes (its result), summed. A step bound by memory traffic,
as SqueezeBERT's is on a GPU, is sped up by fewer of them; caches make the real traffic somewhat less.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re

_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{$")
_OPCODE = re.compile(r"=\s*(?:\([^=]*?\)|[\w\[\]{},:\s]+?)\s+([\w\-]+)\(")
_FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}  # no kernel of their own
_MOVES_ONLY = {"parameter", "copy", "bitcast", "tuple", "reshape"}


@dataclasses.dataclass
class Census:
    """Kernels per kind (``Counter``) of the entry computation and of each loop body, largest body first."""

    entry: collections.Counter
    loops: list[collections.Counter]
    entry_bytes: tuple[int, int] = (0, 0)  # (read, written) by the entry's kernels
    loop_bytes: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # each body's, once

    def row(self, c: collections.Counter, rw: tuple[int, int]) -> str:
        return (f"{sum(c.values())} kernels (" + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                + f"); read {rw[0] / 1e6:.1f} MB, written {rw[1] / 1e6:.1f} MB")

    def __str__(self) -> str:
        lines = [f"entry: {self.row(self.entry, self.entry_bytes)}"]
        lines += [f"loop body {i}: {self.row(c, rw)}" for i, (c, rw) in enumerate(zip(self.loops, self.loop_bytes))]
        return "\n".join(lines)


_COMMENT = re.compile(r"/\*.*?\*/")  # XLA numbers a long tuple's elements: (f32[2], ... /*index=5*/f32[2], ...)


def _computations(text: str) -> tuple[dict[str, list[str]], str]:
    """Each computation's instructions, comments dropped: an ``=`` in a long tuple's ``/*index=5*/`` read as an
    instruction's own made a tuple a kernel (the paper step for one H100: 14 tuples, 9.2 GB "read") and left the
    result of a fusion writing 5 or more arrays unmeasured."""
    comps, cur, entry = {}, None, ""
    for line in _COMMENT.sub("", text).splitlines():
        m = _COMPUTATION.match(line)
        if m and not line.startswith(" "):
            cur = m[2]
            comps[cur] = []
            entry = cur if m[1] else entry
        elif line.startswith("}"):
            cur = None
        elif cur is not None and "=" in line:
            comps[cur].append(line.strip())
    return comps, entry


def _opcode(instruction: str) -> str:
    m = _OPCODE.search(instruction)
    return m[1] if m else "?"


def _kind(instruction: str, comps: dict[str, list[str]]) -> str | None:
    op = _opcode(instruction)
    if op in _FREE:
        return None
    target = re.search(r'custom_call_target="([^"]+)"', instruction)
    if target and "fmha" in target[1]:
        return "attention"
    if (target and ("gemm" in target[1].lower() or "matmul" in target[1].lower())) or op in ("dot", "convolution"):
        return "gemm"
    if op == "transpose":
        return "transpose"
    if op == "copy":
        return "copy"
    if op == "fusion":
        called = re.search(r"calls=%?([\w.\-]+)", instruction)
        ops = collections.Counter(_opcode(i) for i in comps.get(called[1], [])) if called else collections.Counter()
        if "dot" in ops or "gemm" in instruction.split("=", 1)[0]:
            return "gemm"
        if "transpose" in ops:
            return "transpose"
        if "copy" in ops and set(ops) <= _MOVES_ONLY:
            return "copy"
    return "other"


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
          "f64": 8, "s64": 8, "u64": 8}
_ARRAY = re.compile(r"\b(" + "|".join(_BYTES) + r")\[([\d,]*)\]")
_NAME = re.compile(r"^(?:ROOT )?%?([\w.\-]+) = (\([^=]*?\)|\S+) ")


def _nbytes(shape: str) -> int:
    """The bytes of an HLO shape (an array, or a tuple of them)."""
    return sum(_BYTES[dt] * math.prod(int(d) for d in dims.split(",") if d) for dt, dims in _ARRAY.findall(shape))


def _traffic(instructions: list[str], comps: dict[str, list[str]]) -> tuple[int, int]:
    """(read, written): the bytes of the kernels' operands and results in one computation."""
    shapes = {m[1]: _nbytes(m[2]) for i in instructions for m in [_NAME.match(i)] if m}
    read = written = 0
    for i in instructions:
        m = _NAME.match(i)
        if not m or not _kind(i, comps):
            continue
        args = re.search(r"[\w\-]+\((.*?)\)(?:,|$)", i[m.end():])
        read += sum(shapes.get(o, 0) for o in re.findall(r"%([\w.\-]+)", args[1] if args else ""))
        written += shapes[m[1]]
    return read, written


def census(hlo_text: str) -> Census:
    """The kernels of ``hlo_text`` (one optimized HLO module) by kind, and the bytes they read and write: its entry
    and each while loop's body (once, not per iteration)."""
    comps, entry = _computations(hlo_text)
    bodies = [m[1] for ins in comps.values() for i in ins for m in [re.search(r"body=%?([\w.\-]+)", i)] if m]

    def count(name):
        return collections.Counter(k for i in comps[name] for k in [_kind(i, comps)] if k)

    loops = sorted(dict.fromkeys(bodies), key=lambda b: -sum(count(b).values()))
    return Census(count(entry), [count(b) for b in loops], _traffic(comps[entry], comps),
                  [_traffic(comps[b], comps) for b in loops])


def entry_kernels(hlo_text: str) -> dict[str, str]:
    """The kernels of ``hlo_text``'s entry computation (the whole step, its layers unrolled): name -> result shape
    (a tuple's ``(...)`` when the kernel writes several arrays). ``step_profile.instructions`` names their scope."""
    comps, entry = _computations(hlo_text)
    return {m[1]: m[2] for i in comps[entry] for m in [_NAME.match(i)] if m and _kind(i, comps)}
