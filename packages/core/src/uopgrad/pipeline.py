"""The pass driver (layer 12): the named codegen passes in one list, the one loop that runs them, and the
loop that runs a schedule's items on their devices.

`run_passes` is the only place that does what every pass needs: with UOPGRAD_VERIFY=1 it checks the
output against the pass's well-formedness table, it hands the output to uopgrad.debug (logged at DEBUG>=3,
and to the VIZ tracers), it adds the time to `pass_stats()` under the pass's name and hands the output to
every function in `tracers`. `CODEGEN_PASSES` is the codegen pipeline in order (docs/ARCHITECTURE.md
§2.1); `lower` runs it over a kernel for a `Target` and caches the program. `run_schedule` launches a
schedule's items in order, each on the device its buffers live on.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypeAlias, overload

import numpy as np

from uopgrad import debug
from uopgrad._util import LRU
from uopgrad.codegen import GridSpec, Program, Target
from uopgrad.codegen.decomp import pm_decomp
from uopgrad.codegen.gpudims import add_gpudims
from uopgrad.codegen.group import group_reduces
from uopgrad.codegen.index import index_dtype, lower_indexing, pm_index_dtype
from uopgrad.codegen.linearize import linearize
from uopgrad.codegen.opt import GRID_LANES, OPT, Choice, optimize
from uopgrad.codegen.program import check, pm_spec_lowered, pm_spec_program
from uopgrad.codegen.reduce import pm_reduce, reduce_context
from uopgrad.codegen.tc import tensor_cores
from uopgrad.config import CAPTURING, VERIFY
from uopgrad.dtype import PtrDType
from uopgrad.errors import BackendError, LoweringError
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, graph_rewrite
from uopgrad.uop import KernelInfo, UOp
from uopgrad.verify import verify

__all__ = [
    "CODEGEN_PASSES",
    "HostFill",
    "LowerContext",
    "Pass",
    "clear_program_cache",
    "lower",
    "note_host_fill",
    "pass_stats",
    "program_cache_info",
    "recording",
    "rewrite_pass",
    "run_passes",
    "run_schedule",
    "set_recording",
    "tracers",
]


@dataclass
class LowerContext:
    """What the codegen passes of one kernel read and write besides the graph: the target (read) and the
    launch dimensions (written by the gpudims pass)."""

    target: Target  # what the kernel is lowered for
    choice: Choice | None = None  # the opt pass's register tiles (None: its heuristic)
    global_size: tuple[int, int, int] | None = None  # set by the gpudims pass
    local_size: tuple[int, int, int] | None = None

    @property
    def ops(self) -> frozenset[Ops]:
        """The ALU ops the target renders natively on every dtype: the opt pass vectorises only those."""
        return self.target.ops - {op for op, _ in self.target.unsupported}

    @property
    def grid(self) -> GridSpec | None:
        """The target's launch limits; None: loop-style."""
        return self.target.grid


@dataclass(frozen=True)
class Pass:
    """One named step: `run(value, ctx)` -> value. It runs when `applies(ctx)`; its output must satisfy
    `spec` (checked when VERIFY is on)."""

    name: str
    run: Callable[[Any, LowerContext], Any]
    spec: PatternMatcher | None = pm_spec_lowered
    applies: Callable[[LowerContext], bool] = lambda _ctx: True


def rewrite_pass(name: str, pm: PatternMatcher, ctx: Callable[[UOp, LowerContext], Any]) -> Pass:
    """A pass that is one `graph_rewrite` with `pm`, named once: the pass and the rewrite share `name`."""
    return Pass(name, lambda sink, c: graph_rewrite(sink, pm, ctx=ctx(sink, c), name=name))


# what flows between passes: a kernel graph, and after `linearize` the program's list of uops
Stage: TypeAlias = "UOp | tuple[UOp, ...]"
# pass name -> [runs, seconds]
_times: dict[str, list[float]] = {}
# called with (pass name, its output) after every pass: for tracing tools and tests
tracers: list[Callable[[str, Stage], None]] = []


def run_passes(sink: UOp, passes: Sequence[Pass], ctx: LowerContext, what: str = "kernel") -> Stage:
    """Run `passes` over `sink` in order: the one loop that verifies, prints, times and traces by name."""
    value: Stage = sink
    for p in passes:
        if not p.applies(ctx):
            continue
        start = time.perf_counter()
        before, value = value, p.run(value, ctx)
        elapsed = time.perf_counter() - start
        stat = _times.setdefault(p.name, [0, 0.0])
        stat[0] += 1
        stat[1] += elapsed
        if VERIFY and p.spec is not None:
            check(value, p.spec, f"{what} after the '{p.name}' pass")
        if isinstance(value, UOp):
            # DEBUG=3 (the `uopgrad.pass` logger) and the VIZ tracers
            debug.after_pass(p.name, value, unchanged=value is before)
        for trace in tracers:
            trace(p.name, value)
    return value


def pass_stats() -> dict[str, tuple[int, float]]:
    """Runs and total seconds of every pass, by name, since the process started."""
    return {name: (int(n), secs) for name, (n, secs) in _times.items()}


def _group(sink: UOp, ctx: LowerContext) -> UOp:
    assert ctx.grid is not None  # `applies` runs this pass for grid-style backends only
    return group_reduces(sink, ctx.grid, ctx.target.local_memory)


def _gpudims(sink: UOp, ctx: LowerContext) -> UOp:
    assert ctx.grid is not None  # `applies` runs this pass for grid-style backends only
    sink, ctx.global_size, ctx.local_size = add_gpudims(sink, ctx.grid)
    return sink


def _lanes(ctx: LowerContext) -> int:
    return GRID_LANES if ctx.grid is not None else 0  # a grid target's OpenCL C has vectors of up to 16


# the codegen pipeline, in order (docs/ARCHITECTURE.md §2.1)
CODEGEN_PASSES: tuple[Pass, ...] = (
    Pass("index", lambda sink, _ctx: lower_indexing(sink)),  # movement ops -> index arithmetic, PAD -> gates
    Pass(
        "opt",
        lambda sink, ctx: optimize(
            sink,
            ctx.target.vector_width,
            ctx.ops,
            ctx.choice,
            ctx.target.scratch,
            _lanes(ctx),
            ctx.target.cache_sizes,  # the packing threshold (spec/opt.md §3.1)
        ),
        applies=lambda ctx: ctx.target.vector_width > 0,  # loop-style and grid targets (spec/opt.md §5)
    ),
    Pass(
        "tc",
        lambda sink, ctx: tensor_cores(sink, ctx.target),  # half matmuls on tensor cores (spec/opt.md §6)
        applies=lambda ctx: bool(ctx.target.tensor_cores),
    ),
    Pass(
        "group",
        _group,  # a big reduce split over a workgroup's threads (grid backends with local memory)
        applies=lambda ctx: ctx.grid is not None and ctx.target.local_memory > 0,
    ),
    Pass("gpudims", _gpudims, applies=lambda ctx: ctx.grid is not None),  # output loops -> grid indices
    rewrite_pass("reduce", pm_reduce, lambda _sink, _ctx: reduce_context()),  # REDUCE -> accumulator
    rewrite_pass("index dtype", pm_index_dtype, lambda sink, _ctx: index_dtype(sink)),  # index -> int32/64
    rewrite_pass("decompositions", pm_decomp, lambda _sink, ctx: ctx.target),  # ops the backend lacks
    Pass("linearize", lambda sink, _ctx: linearize(sink), spec=pm_spec_program),  # graph -> list of uops
)

# bounded: a long run over ever new shapes must not keep every program it lowered
_cache: LRU[tuple[bytes, int, Target, Choice | None], Program] = LRU(4096)
_stats = {"hits": 0, "misses": 0}


def _choice(choice: Choice | None = None) -> Choice | None:
    return choice


def _legacy(
    ops: frozenset[Ops],
    grid: GridSpec | None = None,
    vector_width: int = 0,
    choice: Choice | None = None,
    scratch: int = 0,
) -> tuple[Target, Choice | None]:
    """The former arguments `(ops, grid, vector_width, choice, scratch)` as a target and a choice."""
    return Target.for_ops(ops, grid, vector_width, scratch), choice


@overload
def lower(kernel: UOp, target: Target, choice: Choice | None = None) -> Program: ...
@overload
def lower(
    kernel: UOp,
    target: frozenset[Ops],
    grid: GridSpec | None = None,
    vector_width: int = 0,
    choice: Choice | None = None,
    scratch: int = 0,
) -> Program: ...  # deprecated: kept one release
def lower(kernel: UOp, target: Target | frozenset[Ops], *args: Any, **kwargs: Any) -> Program:
    """`lower(kernel, target, choice=None)`: the linear program of `kernel` (a kernel CALL, or its SINK
    body) for `target`. Every ALU op outside `target.ops` is decomposed; the opt pass runs where the target
    is loop-style with a vector width and OPT is not 0, `choice` its tile shape (BEAM's pick; None: the
    heuristic); the gpudims pass (and, with local memory, the group pass) where it has a grid. Programs are
    cached by kernel structure, target and choice. The former `lower(kernel, ops, grid, vector_width,
    choice, scratch)` still works (deprecated, kept for one release: `Target.for_ops` makes the target it
    stands for)."""
    target, choice = (
        (target, _choice(*args, **kwargs)) if isinstance(target, Target) else _legacy(target, *args, **kwargs)
    )
    if not OPT and (target.vector_width or target.tensor_cores):
        target = replace(target, vector_width=0, tensor_cores=())  # OPT=0: the unoptimised kernel
    body = kernel.src[0] if kernel.op is Ops.CALL else kernel
    nargs = len(kernel.src) - 1 if kernel.op is Ops.CALL else 0
    key = (body.key, nargs, target, choice)
    if (prg := _cache.get(key)) is not None:
        _stats["hits"] += 1
        return prg
    _stats["misses"] += 1
    if VERIFY:
        verify(kernel)
    ctx = LowerContext(target, choice)
    with debug.lowering(_name(kernel, body)):  # DEBUG=3 names the kernel in each pass's dump
        linear = run_passes(body, CODEGEN_PASSES, ctx)
    assert isinstance(linear, tuple)  # the last pass linearizes
    uops = _with_all_params(linear, body, nargs)
    # an op the target lacks (for its operands' dtype; WHERE's last operand is a value), not decomposed
    if missing := sorted(
        {
            u.op.name if u.op not in target.ops else f"{u.op.name} on {u.src[-1].dtype.scalar().name}"
            for u in uops
            if u.op in GroupOp.ALU and not target.supports(u.op, u.src[-1].dtype)
        }
    ):
        raise LoweringError(f"the backend does not render {missing}, and codegen can't decompose them")
    prg = Program(
        _name(kernel, body),
        uops,
        tuple(u.arg for u in uops if u.op is Ops.PARAM),
        tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])),
        _slots(uops, Ops.STORE),
        _slots(uops, Ops.LOAD),
        ctx.global_size,
        ctx.local_size,
    )
    _cache[key] = prg
    return prg


def _with_all_params(uops: tuple[UOp, ...], body: UOp, nargs: int) -> tuple[UOp, ...]:
    """Every buffer slot of the kernel as a PARAM, in slot order, first (unused ones too)."""
    params = {u.arg: u for u in uops if u.op is Ops.PARAM}
    for u in body.toposort():
        if u.op is Ops.PARAM and isinstance(u.dtype, PtrDType) and u.arg not in params:
            params[u.arg] = UOp(Ops.PARAM, u.dtype, (), u.arg)
    if missing := [s for s in range(nargs) if s not in params]:
        raise LoweringError(f"kernel buffer slots {missing} have no PARAM in the body")
    return (*(params[s] for s in sorted(params)), *(u for u in uops if u.op is not Ops.PARAM))


def _slots(uops: tuple[UOp, ...], op: Ops) -> tuple[int, ...]:
    found = set()
    for u in uops:
        if u.op is op and u.src[0].op is Ops.INDEX:
            p = u.src[0].src[0]
            p = p.src[0] if p.op is Ops.AFTER else p
            if p.op is Ops.PARAM:  # a buffer slot, not local memory
                found.add(p.arg)
    return tuple(sorted(found))


def _name(kernel: UOp, body: UOp) -> str:
    """`E_<shape>` for an elementwise kernel, `r_<shape>` for one with a reduce, or a custom kernel's name."""
    if kernel.op is Ops.CALL and kernel.arg.name:
        return str(kernel.arg.name)
    if isinstance(body.arg, KernelInfo):
        return body.arg.name
    kind = "r" if any(u.op is Ops.REDUCE for u in body.toposort()) else "E"
    shape = body.src[0].src[0].shape if body.src and body.src[0].op is Ops.STORE else ()
    return "_".join([kind, *(str(d) if isinstance(d, int) else "n" for d in shape)])


def program_cache_info() -> dict[str, int]:
    """Hits, misses and size of the program cache."""
    return {**_stats, "size": len(_cache)}


def clear_program_cache() -> None:
    """Forget every lowered program (the counters too)."""
    _cache.clear()
    _stats.update(hits=0, misses=0)


# ---------------------------------------------------------------------- running a schedule
class GlobalCounters:
    """What the kernels run since the last `reset()` cost: their number, the FLOPs and bytes estimated from
    their lowered programs (uopgrad.codegen.estimate) and the seconds they ran. Copies between devices add
    their bytes. REFERENCE, which evaluates graphs without kernels, counts the kernels a schedule of the same
    graph would launch, and the time of its evaluation. `mem_used` (and `mem_used_per_device`, by device
    name) is the device memory the buffers of compiled backends hold now: added when a buffer gets its
    memory, taken off when it is freed; `reset()` leaves it (tinygrad's counter of the same name)."""

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    kernel_count: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    mem_used: ClassVar[int] = 0
    mem_used_per_device: ClassVar[defaultdict[str, int]] = defaultdict(int)

    @staticmethod
    def reset() -> None:
        """Set every counter of the kernels run back to zero (not `mem_used`, which is a state)."""
        GlobalCounters.global_ops = GlobalCounters.global_mem = GlobalCounters.kernel_count = 0
        GlobalCounters.time_sum_s = 0.0


def count_kernel(device: str, prg: Program, var_vals: dict[str, int], seconds: float | None) -> None:
    """Count one launch of `prg` (with `seconds` of run time, if measured); its DEBUG=1 line."""
    ops, mem = prg.estimates.at(var_vals) if prg.vars else prg.estimates.fixed
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem
    GlobalCounters.time_sum_s += seconds or 0.0
    debug.kernel_ran(device, prg.name, seconds or 0.0, ops, mem, prg.global_size, prg.local_size, prg.uops)


class Runner(Protocol):
    """What `run_schedule` needs of a device: its name, host copies, and a way to run one kernel item."""

    name: str

    def copyin(self, buf: UOp, data: np.ndarray) -> None:
        """Fill BUFFER `buf` with host data."""

    def copyout(self, buf: UOp) -> np.ndarray:
        """The contents of BUFFER `buf`."""

    def run_kernel(self, item: UOp, var_vals: dict[str, int]) -> None:
        """Launch the kernel CALL `item` (its buffers live on this device)."""


@dataclass(frozen=True)
class HostFill:
    """Host values copied into a fresh BUFFER while this thread records: `values()` makes them again (a
    random draw draws anew from the generator of that moment), so that a replay refills the buffer as the
    step would. `fresh`: the values differ from call to call (random), not a constant."""

    buf: UOp
    values: Callable[[], np.ndarray]
    fresh: bool


Recorded: TypeAlias = "tuple[UOp, dict[str, int], Callable[[str], Runner]] | HostFill"


class _Recording(threading.local):
    items: list[Recorded] | None = None


_recording = _Recording()  # per thread: a capture sees only the launches of the thread that captures


def recording() -> list[Recorded] | None:
    """The list `run_schedule` appends each item it runs to (with its variable values and its device
    lookup), and `note_host_fill` each buffer made from host values, while this thread captures
    (uopgrad.jit); None otherwise."""
    return _recording.items


def set_recording(items: list[Recorded] | None) -> None:
    """Start (a list) or stop (None) recording this thread's schedule items and host fills."""
    _recording.items = items


def note_host_fill(buf: UOp, values: Callable[[], np.ndarray], fresh: bool = False) -> None:
    """While this thread records, note that BUFFER `buf` was just filled from the host with `values()`; a
    later note for the same buffer (a random creator's, after the copy's) says how to make them again."""
    if (rec := _recording.items) is not None and CAPTURING:
        rec.append(HostFill(buf, values, fresh))


def run_schedule(
    items: Sequence[UOp],
    var_vals: dict[str, int],
    device: Callable[[str], Runner],
    launches: Sequence[Callable[[UOp, dict[str, int]], None] | None] = (),
) -> None:
    """Run scheduled CALLs in order: a kernel on the device its buffers live on (`device(name)`), a COPY
    from its source's device to its destination's. `launches` (a backend's plan, by position; None or
    absent: look the item up) runs an item that its device's kernel lookup would run the same way. While
    this thread records (`recording()`), every item is noted too."""
    if (rec := _recording.items) is not None and CAPTURING:  # Context(CAPTURING=0): one-off work
        rec.extend((it, var_vals, device) for it in items)
    for i, item in enumerate(items):
        if i < len(launches) and (launch := launches[i]) is not None:
            launch(item, var_vals)
            continue
        body, bufs = item.src[0], item.src[1:]
        if body.op is Ops.COPY:
            dst, src = bufs[0], bufs[1]
            device(str(dst.device)).copyin(dst, device(str(src.device)).copyout(src))
            GlobalCounters.global_mem += int(dst.arg) * dst.dtype.base.itemsize
        elif body.op is Ops.SINK:
            device(str(bufs[0].device) if bufs else "").run_kernel(item, var_vals)
        else:
            raise BackendError(
                f"a schedule item is a CALL of a kernel SINK or a COPY, not of {body.op}: {item.short()}"
            )
