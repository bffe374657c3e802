"""Broken backends on the paths a user's training program takes (the suite's `path` rows, paths.py): the CPU
backend (and, for the grouped reduce, the CUDA backend emulated on the host, grid.py) with one planted
bug each, in the newer code that issue 37 found unchecked. BROKEN_C_JITSTALE is a bug of a backend itself;
the others are core bugs planted in one device (a core function replaced by `cbackend._patched` for that
device's graphs or target only), as `BROKEN_C_REALIZE` is: BROKEN_CUDA_GROUPTAIL's in grid.py,
BROKEN_C_DIVULP's in divide.py (its patch is not scoped to a device), the rest here.

| device                | planted bug                                                                     |
| --------------------- | ------------------------------------------------------------------------------- |
| BROKEN_C_JITSTALE     | `bind_kernel` binds a launch to the buffers it was captured with, not the ones  |
|                       | passed: a TinyJit replay reads the capture's input again (stale input)          |
| BROKEN_C_ALLREDUCE    | the all-reduce of a sharded reduce adds each device's own partial twice         |
| BROKEN_C_GRADKEY      | the gradient template cache is keyed without the targets: a structure           |
|                       | differentiated for `w1` serves the same structure differentiated for `w2`       |
| BROKEN_CUDA_GROUPTAIL | CUDA (emulated): a grouped reduce runs `n // L` steps per thread, ungated: the  |
|                       | last `n % L` elements of a reduce whose length no workgroup size divides are    |
|                       | dropped                                                                         |
| BROKEN_C_DIVULP       | (divide.py) a target without a native divide decomposes `a / b` as              |
|                       | `a * (1 / b)`: off by an ulp on about a third of the quotients                  |
| BROKEN_C_NOGRAD       | a value realized under `no_grad` keeps its graph (realize ignores no_grad): a   |
|                       | running mean updated each step holds every earlier step's buffers               |
| BROKEN_C_ADAMSTEP     | Adam's bias corrections start one step ahead: step t divides the moments by     |
|                       | 1 - b ** (t + 1), not 1 - b ** t (the step counter starts at 1, then counts)    |
| BROKEN_C_PANEL        | the opt pass's copy of a matmul's packed panel stops one reduce step short: the |
|                       | panel's last row is never copied, and the tiles read stale scratch there        |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import uopgrad.codegen.opt as opt
from uopgrad import Ops, Tensor, UOp
from uopgrad.backend import CompiledBackend
from uopgrad_broken.cbackend import _patched
from uopgrad_cpu import CPU_DTYPES, CCompiler, CPUAllocator, CPUProgram, CRenderer

__all__ = [
    "BrokenAdamStep",
    "BrokenAllreduce",
    "BrokenGradKey",
    "BrokenJitStale",
    "BrokenNoGrad",
    "BrokenPanel",
]


def _on(device: object, name: str) -> bool:
    devices = device if isinstance(device, tuple) else (device,)
    return any(isinstance(d, str) and d.startswith(name) for d in devices)


# ---------------------------------------------------------------------- backend bugs
class BrokenJitStale(CompiledBackend):
    """Binds every launch to the kernel CALL's own buffers ("they are the same buffers anyway"): a replay
    that puts this call's input where the capture's was launches on the capture's input."""

    def __init__(self, device: str) -> None:
        super().__init__(device, CRenderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

    def bind_kernel(
        self, item: UOp, var_vals: dict[str, int], bufs: Sequence[UOp] | None = None
    ) -> Callable[[], None]:
        return super().bind_kernel(item, var_vals, None)


# ---------------------------------------------------------------------- core bugs, in one device
def _allreduce_twice() -> None:
    """BROKEN_C_ALLREDUCE: each device starts its sum from its own partial, then adds every partial (its
    own again)."""
    from uopgrad.multi import Lowering

    original = Lowering.allreduce

    def allreduce(
        self: Lowering, partials: Sequence[UOp], op: Ops, devices: tuple[str, ...]
    ) -> tuple[UOp, ...]:
        if not _on(devices, "BROKEN_C_ALLREDUCE"):
            return original(self, partials, op, devices)
        out = []
        for d, own in zip(devices, partials):
            acc = own
            for x in partials:
                acc = acc.alu(op, x if x.device == d else x.copy_to_device(d))
            out.append(acc)
        return tuple(out)

    Lowering.allreduce = allreduce  # type: ignore[method-assign]


def _template_without_targets() -> None:
    """BROKEN_C_GRADKEY: the gradient template's key has the graph's structure but not which of its nodes
    are the targets."""
    import uopgrad.gradient_template as gt

    original = gt._structure

    def structure(
        root: UOp, seed: UOp, targets: Sequence[UOp], *rest: Any
    ) -> tuple[list[UOp], tuple[Any, ...] | None]:
        nodes, key = original(root, seed, targets, *rest)  # (rest: whatever else core passes on)
        if key is None or not any(_on(t.device, "BROKEN_C_GRADKEY") for t in targets):
            return nodes, key
        return nodes, (*key[:-1], ("targets", key[-1][-1]))  # the seed's position, the targets' dropped

    gt._structure = structure


def _realize_ignores_no_grad() -> None:
    """BROKEN_C_NOGRAD: realize keeps the history of every value, also one realized under no_grad (whose
    graph is needed by no gradient): an inference or running-statistics loop holds a chain of steps."""
    import uopgrad.tensor_grad as tg

    original = Tensor._realize

    def realize(tensors: Sequence[Tensor]) -> None:
        if not any(_on(t.device, "BROKEN_C_NOGRAD") for t in tensors):
            return original(tensors)
        prev, tg._GradMode.enabled = tg._GradMode.enabled, True
        try:
            original(tensors)
        finally:
            tg._GradMode.enabled = prev

    Tensor._realize = staticmethod(realize)  # type: ignore[method-assign]


def _bias_correction_a_step_ahead() -> None:
    """BROKEN_C_ADAMSTEP: LAMB (Adam, AdamW) starts its bias-correction state at step 1's values instead
    of 0, so each step has advanced it once more than it has run: m / (1 - b1 ** (t + 1)) at step t."""
    from uopgrad.nn.optim import LAMB

    original = LAMB.__init__

    def init(self: LAMB, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _on(self.device, "BROKEN_C_ADAMSTEP"):
            for c, b in ((self.c1, self.b1), (self.c2, self.b2)):
                c.assign(c + (1.0 - b)).realize()

    LAMB.__init__ = init  # type: ignore[method-assign]


# the scratch this device's renderer declares: a little more than the CPU's (which changes no packing
# decision), and it selects the broken pass, as grid.py's local memory does
PANEL_MARK = CRenderer.scratch + 64


def _panel_copy_one_step_short() -> None:
    """BROKEN_C_PANEL: the panel's copy loop (the RANGE closed under the scratch array's AFTER) runs to
    n - 1, an off-by-one in the copy, where the reduce still reads all n rows."""
    original = opt._pack

    def pack(
        ranges: list[UOp], stores: tuple[UOp, ...], scratch: int, nest: int, span: int = opt.PACK_MIN_SPAN
    ) -> tuple[UOp, ...]:
        out = original(ranges, stores, scratch, nest, span)
        if scratch != PANEL_MARK:
            return out
        nodes = [u for st in out for u in st.toposort()]
        # AFTER(scratch, END(copy loop, copies...))
        loops = {u.src[1].src[0] for u in nodes if u.op is Ops.AFTER and u.src[0].op is Ops.DEFINE_LOCAL}
        short = {p: p.replace(src=(p.src[0].replace(arg=p.src[0].arg - 1),)) for p in loops}
        return tuple(st.substitute(short, walk=True) for st in out)

    opt._pack = pack


class _PanelRenderer(CRenderer):
    scratch = PANEL_MARK


BrokenAllreduce = _patched(_allreduce_twice)
BrokenGradKey = _patched(_template_without_targets)
BrokenNoGrad = _patched(_realize_ignores_no_grad)
BrokenAdamStep = _patched(_bias_correction_a_step_ahead)
BrokenPanel = _patched(_panel_copy_one_step_short, _PanelRenderer)
