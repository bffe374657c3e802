"""Hand-built linear programs (spec/kernels.md §2) and a runner, for checking a backend's renderer,
compiler and runtime on their own, without the scheduler or codegen; and REFERENCE's value of the same
elementwise op, the definition the backend must match.

The programs are loop-style (one RANGE over the elements): on a grid-style backend they run as a single
work-item, which is all an op's numerics need. Grid launches are checked through the whole pipeline.
"""

from __future__ import annotations

import numpy as np

from uopgrad import DType, GroupOp, Ops, UOp, dtypes
from uopgrad.backend import CompiledBackend, Device
from uopgrad.codegen import LinearProgram
from uopgrad.renderer import Renderer

__all__ = [
    "alu",
    "const",
    "elementwise",
    "grid_row_sums",
    "linear",
    "load",
    "out_dtype",
    "param",
    "prog",
    "reference",
    "render",
    "run",
    "special",
    "store",
]

i32 = dtypes.int32


def prog(
    name: str,
    uops: tuple[UOp, ...],
    global_size: tuple[int, int, int] | None = None,
    local_size: tuple[int, int, int] | None = None,
) -> LinearProgram:
    """codegen's LinearProgram for hand-built uops: every PARAM slot and every variable, in order."""
    slots = tuple(sorted(u.arg for u in uops if u.op is Ops.PARAM))
    return LinearProgram(
        name, uops, slots, tuple(u for u in uops if u.op is Ops.DEFINE_VAR), (), (), global_size, local_size
    )


def linear(*roots: UOp) -> tuple[UOp, ...]:
    """Sources before users: each root in turn adds what is not listed yet."""
    out: dict[UOp, None] = {}
    for root in roots:
        out.update((u, None) for u in root.toposort() if u not in out)
    return tuple(out)


def render(renderer: Renderer, name: str, *roots: UOp, local_size: tuple[int, int, int] | None = None) -> str:
    """The source `renderer` prints for the program of `roots` (in `linear`'s order)."""
    return renderer.render(prog(name, linear(*roots), None, local_size))


def const(dt: DType, v: float | int | bool) -> UOp:
    """A CONST of `v` in `dt`."""
    return UOp(Ops.CONST, dt, (), dtypes.as_const(v, dt))


def param(slot: int, dt: DType, n: int) -> UOp:
    """Buffer `slot` of `n` elements of `dt`."""
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def special(name: str, n: int) -> UOp:
    """A grid index (gidx0, lidx1, ...) that runs over `n`."""
    return UOp(Ops.SPECIAL, i32, (const(i32, n),), name)


def load(buf: UOp, idx: UOp, gate: UOp | None = None) -> UOp:
    """buf[idx] (0 where `gate` is false)."""
    return UOp(
        Ops.LOAD,
        buf.dtype.base,
        (UOp(Ops.INDEX, buf.dtype.base.ptr(), (buf, idx)), *(() if gate is None else (gate,))),
    )


def store(buf: UOp, idx: UOp, val: UOp, gate: UOp | None = None) -> UOp:
    """buf[idx] = val (only where `gate` is true)."""
    return UOp(
        Ops.STORE,
        dtypes.void,
        (UOp(Ops.INDEX, buf.dtype.base.ptr(), (buf, idx)), val, *(() if gate is None else (gate,))),
    )


def alu(op: Ops, *srcs: UOp) -> UOp:
    """A kernel-level ALU uop of its operands' dtype (bool for comparisons); no broadcasting."""
    return UOp(op, dtypes.bool if op in GroupOp.Comparison else srcs[-1].dtype, srcs)


def elementwise(op: Ops, out_dt: DType, in_dts: list[DType], n: int, name: str = "k") -> LinearProgram:
    """out[i] = op(in1[i], in2[i], ...) over one loop (op may be CAST or BITCAST)."""
    out = UOp(Ops.PARAM, out_dt.ptr(n), (), 0)
    ins = [UOp(Ops.PARAM, dt.ptr(n), (), i + 1) for i, dt in enumerate(in_dts)]
    r = UOp(Ops.RANGE, i32, (const(i32, n),), (0, "loop"))
    loads = [UOp(Ops.LOAD, p.dtype.base, (UOp(Ops.INDEX, p.dtype.base.ptr(), (p, r)),)) for p in ins]
    val = UOp(op, out_dt, tuple(loads))
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out_dt.ptr(), (out, r)), val))
    return prog(name, linear(out, *ins, st, UOp(Ops.END, dtypes.void, (r,))))


def grid_row_sums(n: UOp, rows: int = 4, size: int = 256) -> LinearProgram:
    """out[g] = sum over r < n of a[g*n + r], for each grid index g < rows: a reduce over a variable into
    a register, with slot 1 never used (a renderer golden of every grid-style dialect)."""
    out, a = param(0, dtypes.float32, rows), param(2, dtypes.float32, size)
    g = special("gidx0", rows)
    r = UOp(Ops.RANGE, i32, (n,), (1, "reduce"))
    acc = UOp(Ops.DEFINE_REG, dtypes.float32, (const(dtypes.float32, 0.0),), 0)
    cur = UOp(Ops.LOAD, dtypes.float32, (acc, r))
    upd = UOp(Ops.STORE, dtypes.void, (acc, alu(Ops.ADD, cur, load(a, alu(Ops.ADD, alu(Ops.MUL, g, n), r)))))
    e = UOp(Ops.END, dtypes.void, (r, upd))
    final = UOp(Ops.LOAD, dtypes.float32, (acc, e))
    uops = linear(out, a, n, g, acc, r, cur, upd, e, final, store(out, g, final))
    return LinearProgram(f"r_{rows}_n", uops, (0, 1, 2), (n,), (0,), (2,), (rows, 1, 1), (1, 1, 1))


def run(
    backend: CompiledBackend,
    program: LinearProgram,
    out: tuple[int, DType],
    *ins: np.ndarray,
    vals: tuple[int, ...] = (),
) -> np.ndarray:
    """Render, compile and launch `program` on `backend` as its realize would (the renderer's function
    name, the program's launch sizes); returns the contents of buffer 0."""
    src = backend.renderer.render(program)
    lib = backend.compiler.compile_cached(src)
    kernel = backend.runtime(backend.renderer.function_name(program.name), lib)
    n, dt = out
    npdt = dtypes.to_numpy(dt)
    handles = [backend.allocator.alloc(max(n, 1) * npdt.itemsize)]
    for a in ins:
        h = backend.allocator.alloc(max(a.nbytes, 1))
        backend.allocator.copyin(h, np.ascontiguousarray(a).data.cast("B"))
        handles.append(h)
    kernel(*handles, vals=vals, global_size=program.global_size, local_size=program.local_size)
    res = np.empty(n, dtype=npdt)
    backend.allocator.copyout(res.data.cast("B"), handles[0])
    return res


def reference(op: Ops, out_dt: DType, *ins: tuple[np.ndarray, DType]) -> np.ndarray:
    """REFERENCE's value of `op` on whole buffers (the definition the backend must match)."""
    ref = Device["REFERENCE"]
    bufs = []
    for arr, dt in ins:
        b = UOp.new_buffer("REFERENCE", arr.size, dt)
        ref.copyin(b, arr)
        bufs.append(b)
    out = UOp.new_buffer("REFERENCE", ins[0][0].size, out_dt)
    ref.realize(out.store(UOp(op, out_dt, tuple(bufs))).sink())
    return ref.copyout(out)


def out_dtype(op: Ops, dt: DType) -> DType:
    """The dtype `op` produces from operands of `dt`."""
    return dtypes.bool if op in GroupOp.Comparison else dt
