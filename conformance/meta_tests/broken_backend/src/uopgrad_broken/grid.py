"""BROKEN_CUDA_GROUPTAIL: the CUDA backend, emulated on the host (UOPGRAD_CUDA_EMULATE=1), whose grouped
reduces drop their tail. A grouped reduce (uopgrad.codegen.group) splits a reduce of `n` elements over `L`
threads of a workgroup; each thread here runs `n // L` steps with no gate, written as if `L` always divided
`n`: the last `n % L` elements are never read (1037 over 128 threads: 13 of them).

The bug is in codegen's group pass, planted for this device only: its target declares 16 bytes less local
memory than CUDA's (which changes no workgroup size: the partials may take 16 KB), and the pass drops the
tail for a target of that size. Needs uopgrad-cuda and NVRTC (the meta test skips without them)."""

from __future__ import annotations

import dataclasses
from math import prod

import uopgrad.pipeline as pipeline
from uopgrad import Ops, UOp, dtypes
from uopgrad.codegen.group import (
    LAYOUTS,
    MAX_OUTPUTS,
    MIN_REDUCE,
    _grouped_dtype,
    _idx,
    _tree,
    group_reduces,
    group_size,
)
from uopgrad.codegen.program import GridSpec
from uopgrad.codegen.reduce import exact_max, renumber
from uopgrad_cuda import CUDABackend

__all__ = ["MARK", "BrokenGroupTail"]

MARK = 48 * 1024 - 16  # the local memory this device's target declares (it selects the broken pass)


def _group_without_tail(sink: UOp, grid: GridSpec, local_memory: int) -> UOp:
    """uopgrad.codegen.group.group_reduces with `steps = n // size` and no gate on the last step."""
    nodes = sink.toposort()
    reds = [u for u in nodes if u.op is Ops.REDUCE]
    ranges = [u for u in nodes if u.op is Ops.RANGE]
    stores = [u for u in nodes if u.op is Ops.STORE]
    if (
        len(stores) != 1
        or len(reds) != 1
        or any(r.src[0].op is not Ops.CONST for r in ranges)
        or any(u.op in (Ops.SPECIAL, Ops.DEFINE_LOCAL) for u in nodes)
    ):
        return sink
    red = reds[0]
    op, dt, rr = red.arg, red.dtype, list(red.src[1:])
    chunked = LAYOUTS.get((op, dtypes.is_float(dt)))
    n = prod(int(r.src[0].arg) for r in rr)
    outs = prod(int(r.src[0].arg) for r in ranges if r not in rr)
    if chunked is None or not _grouped_dtype(dt) or n < MIN_REDUCE or outs > MAX_OUTPUTS:
        return sink
    size = group_size(n, dt, grid, local_memory)
    if size < 2:
        return sink
    lid = UOp(Ops.SPECIAL, dtypes.index, (_idx(size),), "lidx0")
    steps = n // size  # the bug: "L divides n" (the remainder loop was never written)
    j = UOp(Ops.RANGE, dtypes.index, (_idx(steps),), (max(r.arg[0] for r in ranges) + 1, "reduce"))
    flat = lid * steps + j if chunked else j * size + lid
    mapping, inner = {}, 1
    for r in reversed(rr):
        q = flat // inner if inner != 1 else flat
        q = q % int(r.src[0].arg) if r is not rr[0] else q
        mapping[r] = q  # (left for the later passes to simplify)
        inner *= int(r.src[0].arg)
    part = UOp(Ops.REDUCE, dt, (red.src[0].substitute(mapping), j), op)
    total = _tree(part, lid, size, op, dt)
    first = UOp(Ops.CMPEQ, dtypes.bool, (lid, _idx(0)))
    if op is Ops.MAX and dtypes.is_float(dt) and not chunked:
        total = exact_max(red, total, first)
    store = stores[0].substitute({red: total})
    store = store.replace(
        src=(
            *store.src[:2],
            first if len(store.src) < 3 else UOp(Ops.AND, dtypes.bool, (store.src[2], first)),
        )
    )
    return renumber(sink.substitute({stores[0]: store}))


_original = group_reduces


def _group(sink: UOp, grid: GridSpec, local_memory: int) -> UOp:
    if local_memory == MARK:
        return _group_without_tail(sink, grid, local_memory)
    return _original(sink, grid, local_memory)


pipeline.group_reduces = _group  # type: ignore[attr-defined]


class BrokenGroupTail(CUDABackend):
    """CUDA (emulated) whose grouped reduces drop the last `n % L` elements."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.capabilities = dataclasses.replace(self.capabilities, local_memory=MARK)
