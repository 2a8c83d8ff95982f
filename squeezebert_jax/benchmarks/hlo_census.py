"""What a compiled program launches: the kernels of its entry computation and of each loop body (the layer scan's
forward and backward bodies), by kind, from XLA's optimized HLO text (``compiled.as_text()``). A host without a GPU
reads the program XLA:GPU would run (``aot.get_target("h100:1x1")``): the transposes and copies around the grouped
convs, whether attention is cuDNN's fused kernel, how many kernels a layer costs.

Kinds: ``gemm`` (cuBLAS or Triton matmul fusions and custom calls), ``attention`` (cuDNN's fused attention, forward
and backward), ``transpose`` (a fusion or op that moves data to another layout: its fused computation holds a
transpose), ``copy`` (a copy op, or a fusion of nothing but copies and bitcasts), ``other`` (element-wise and
reduction fusions, slices into the scan's stacked buffers, ...).
"""

from __future__ import annotations

import collections
import dataclasses
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

    def row(self, c: collections.Counter) -> str:
        return f"{sum(c.values())} kernels (" + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + ")"

    def __str__(self) -> str:
        lines = [f"entry: {self.row(self.entry)}"]
        lines += [f"loop body {i}: {self.row(c)}" for i, c in enumerate(self.loops)]
        return "\n".join(lines)


def _computations(text: str) -> tuple[dict[str, list[str]], str]:
    comps, cur, entry = {}, None, ""
    for line in text.splitlines():
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


def census(hlo_text: str) -> Census:
    """The kernels of ``hlo_text`` (one optimized HLO module) by kind: its entry and each while loop's body."""
    comps, entry = _computations(hlo_text)
    bodies = [m[1] for ins in comps.values() for i in ins for m in [re.search(r"body=%?([\w.\-]+)", i)] if m]

    def count(name):
        return collections.Counter(k for i in comps[name] for k in [_kind(i, comps)] if k)

    loops = sorted((count(b) for b in dict.fromkeys(bodies)), key=lambda c: -sum(c.values()))
    return Census(count(entry), loops)
