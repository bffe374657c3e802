"""BROKEN_CUDA_GROUPTAIL: the CUDA backend, emulated on the host (UOPGRAD_CUDA_EMULATE=1), whose grouped
reduces drop their tail. A grouped reduce (uopgrad.codegen.group) splits a reduce of `n` elements over `L`
threads of a workgroup, thread `t` folding `t, t+L, t+2L, ...` in `ceil(n / L)` steps, the last one gated;
here the step loop stops one step short (`j < steps - 1`, written as if `L` always divided `n`): the last
`n % L` elements are never read (1037 over 128 threads: 13 of them).

The bug is in codegen's group pass, planted for this device only: its target declares 16 bytes less local
memory than CUDA's (which changes no workgroup size: the partials may take 16 KB), and the pass's result is
shortened for a target of that size. Needs uopgrad-cuda and NVRTC (the meta test skips without them)."""

from __future__ import annotations

import dataclasses
from math import prod

import uopgrad.pipeline as pipeline
from uopgrad import Ops, UOp
from uopgrad.codegen.group import group_reduces
from uopgrad.codegen.program import GridSpec
from uopgrad_cuda import CUDABackend

__all__ = ["MARK", "BrokenGroupTail"]

MARK = 48 * 1024 - 16  # the local memory this device's target declares (it selects the broken pass)


def _group(sink: UOp, grid: GridSpec, local_memory: int) -> UOp:
    """uopgrad.codegen.group.group_reduces, whose step loop runs one step fewer where `L` does not divide
    `n` (the gated last step) on the marked target."""
    out = group_reduces(sink, grid, local_memory)
    if local_memory != MARK or out is sink:
        return out
    n = prod(int(r.src[0].arg) for u in sink.toposort() if u.op is Ops.REDUCE for r in u.src[1:])
    nodes = out.toposort()
    steps = next(u.src[1] for u in nodes if u.op is Ops.REDUCE)  # the grouped reduce's own loop
    size = next(int(u.src[0].arg) for u in nodes if u.op is Ops.SPECIAL and u.arg == "lidx0")
    count = int(steps.src[0].arg)
    if count * size == n:
        return out
    return out.substitute({steps: steps.replace(src=(steps.src[0].replace(arg=count - 1),))}, walk=True)


pipeline.group_reduces = _group  # type: ignore[attr-defined]


class BrokenGroupTail(CUDABackend):
    """CUDA (emulated) whose grouped reduces drop the last `n % L` elements."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.capabilities = dataclasses.replace(self.capabilities, local_memory=MARK)
