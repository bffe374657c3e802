"""What a linear program costs (codegen, layer 11): FLOPs and bytes, estimated once per program.

Every ALU op counts once per execution, that is times the trip counts of the loops (and the grid) around it;
the address arithmetic of loads and stores (offsets, gates) and loop bounds are not counted. Memory is the
bytes each buffer slot is loaded or stored, capped at the buffer's size (a matmul re-reads its inputs from
cache, not from memory). Trip counts may be symbolic: `Estimates.at(var_vals)` gives the numbers for one
launch. The backends' launch counters (`uopgrad.backend.GlobalCounters`) and DEBUG output both read this.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from uopgrad._util import prod
from uopgrad.alu import cdiv, cmod
from uopgrad.dtype import PtrDType
from uopgrad.errors import LoweringError
from uopgrad.ops import GroupOp, Ops
from uopgrad.uop import UOp

__all__ = ["Estimates", "estimate"]

Trips = tuple[UOp, ...]  # the bounds of the loops (and grid dimensions) around an op


@dataclass(frozen=True)
class Estimates:
    """ALU ops and memory bytes of a program, by the loops they run in."""

    ops: tuple[tuple[Trips, int], ...]  # (loops, ALU ops per iteration)
    # per buffer slot and direction: ((loops, bytes per iteration), ...) and the cap, the buffer's bytes
    mem: tuple[tuple[tuple[tuple[Trips, int], ...], int], ...]

    @functools.cached_property
    def fixed(self) -> tuple[int, int]:
        """`at()` worked out once: the numbers of every launch of a program without variables."""
        return self.at()

    def at(self, var_vals: Mapping[str, int] | None = None) -> tuple[int, int]:
        """(FLOPs, bytes) of one launch with the variables `var_vals` (by name)."""
        vals = var_vals or {}
        ops = sum(n * _trips(t, vals) for t, n in self.ops)
        mem = sum(min(sum(b * _trips(t, vals) for t, b in acc), cap) for acc, cap in self.mem)
        return ops, mem


def _trips(bounds: Trips, var_vals: Mapping[str, int]) -> int:
    return prod(_value(b, var_vals) for b in bounds)


def _value(u: UOp, var_vals: Mapping[str, int]) -> int:
    """An integer loop bound: constants, kernel variables and integer arithmetic of them."""
    if u.op is Ops.CONST:
        return int(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return int(var_vals.get(u.arg[0], u.arg[2]))  # unknown: its upper bound
    if u.op is Ops.CAST:
        return _value(u.src[0], var_vals)
    if u.op is Ops.WHERE:  # a loop that runs only when the data asks for it (opt's exact MAX): its else
        return _value(u.src[2], var_vals)
    a = [_value(s, var_vals) for s in u.src]
    table = {
        Ops.ADD: lambda: a[0] + a[1],
        Ops.MUL: lambda: a[0] * a[1],
        Ops.MAX: lambda: max(a),
        Ops.FLOORDIV: lambda: a[0] // a[1],
        Ops.CDIV: lambda: cdiv(a[0], a[1]),
        Ops.FLOORMOD: lambda: a[0] % a[1],
        Ops.CMOD: lambda: cmod(a[0], a[1]),
    }
    if u.op not in table:
        raise LoweringError(f"can't estimate a loop bound computed by {u.op}: {u.short()}")
    return int(table[u.op]())


def _addressing(uops: Sequence[UOp]) -> set[UOp]:
    """The ALU ops whose every use is addressing: an INDEX offset, a load/store gate, a loop bound, or another
    such op."""
    uses: dict[UOp, list[tuple[UOp, int]]] = {u: [] for u in uops}
    for u in uops:
        for i, s in enumerate(u.src):
            if s in uses:
                uses[s].append((u, i))
    out: set[UOp] = set()

    def addressing(c: UOp, i: int) -> bool:
        return (
            c in out
            or (c.op is Ops.INDEX and i >= 1)
            or (c.op is Ops.LOAD and i >= 1)
            or (c.op is Ops.STORE and i >= 2)
            or c.op in (Ops.RANGE, Ops.SPECIAL)
        )

    for u in reversed(uops):  # consumers come after their sources
        if u.op in GroupOp.ALU and uses[u] and all(addressing(c, i) for c, i in uses[u]):
            out.add(u)
    return out


def estimate(
    uops: Sequence[UOp], global_size: Sequence[int] | None = None, local_size: Sequence[int] | None = None
) -> Estimates:
    """The estimates of a linear program (spec/kernels.md §2), launched on a grid of the given sizes."""
    grid = tuple(UOp(Ops.CONST, arg=n) for n in (*(global_size or ()), *(local_size or ())) if n != 1)
    skip = _addressing(uops)
    loops: list[UOp] = []
    ops: dict[Trips, int] = {}
    mem: dict[tuple[int, Ops], list[tuple[Trips, int]]] = {}
    caps: dict[tuple[int, Ops], int] = {}
    for u in uops:
        trips = grid + tuple(loops)
        if u.op is Ops.RANGE:
            loops.append(u.src[0])
        elif u.op is Ops.END:
            loops.pop()
        elif u.op in GroupOp.ALU and u not in skip:
            ops[trips] = ops.get(trips, 0) + u.dtype.count
        elif u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX:
            p = u.src[0].src[0]
            p = p.src[0] if p.op is Ops.AFTER else p
            if p.op is Ops.PARAM and isinstance(p.dtype, PtrDType):  # buffers, not local memory
                key = (int(p.arg), u.op)
                mem.setdefault(key, []).append((trips, p.dtype.base.itemsize))
                caps[key] = p.dtype.size * p.dtype.base.itemsize if p.dtype.size >= 0 else 1 << 62
    return Estimates(tuple(ops.items()), tuple((tuple(acc), caps[key]) for key, acc in mem.items()))
