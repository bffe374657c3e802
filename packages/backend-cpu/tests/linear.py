"""Hand-built linear programs (spec/kernels.md §2) and a runner, for testing the CPU backend's renderer,
compiler and runtime on their own; and the REFERENCE value of the same elementwise op, for comparison."""

from __future__ import annotations

import numpy as np

from uopgrad import DType, GroupOp, Ops, UOp, dtypes
from uopgrad.backend import CompiledBackend, Device
from uopgrad.codegen import Program

i32 = dtypes.int32


def prog(name: str, uops: tuple[UOp, ...]) -> Program:
    """codegen's Program for hand-built uops: every PARAM slot and every variable, in order."""
    slots = tuple(sorted(u.arg for u in uops if u.op is Ops.PARAM))
    return Program(name, uops, slots, tuple(u for u in uops if u.op is Ops.DEFINE_VAR), (), ())


def linear(*roots: UOp) -> tuple[UOp, ...]:
    """Sources before users: each root in turn adds what is not listed yet."""
    out: dict[UOp, None] = {}
    for root in roots:
        out.update((u, None) for u in root.toposort() if u not in out)
    return tuple(out)


def const(dt: DType, v: float | int | bool) -> UOp:
    return UOp(Ops.CONST, dt, (), dtypes.as_const(v, dt))


def elementwise(op: Ops, out_dt: DType, in_dts: list[DType], n: int, name: str = "k") -> Program:
    """out[i] = op(in1[i], in2[i], ...) over one loop (op may be CAST or BITCAST)."""
    out = UOp(Ops.PARAM, out_dt.ptr(n), (), 0)
    ins = [UOp(Ops.PARAM, dt.ptr(n), (), i + 1) for i, dt in enumerate(in_dts)]
    r = UOp(Ops.RANGE, i32, (const(i32, n),), (0, "loop"))
    loads = [UOp(Ops.LOAD, p.dtype.base, (UOp(Ops.INDEX, p.dtype.base.ptr(), (p, r)),)) for p in ins]
    val = UOp(op, out_dt, tuple(loads))
    st = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out_dt.ptr(), (out, r)), val))
    return prog(name, linear(out, *ins, st, UOp(Ops.END, dtypes.void, (r,))))


def run(backend: CompiledBackend, prog: Program, out: tuple[int, DType], *ins: np.ndarray,
        vals: tuple[int, ...] = ()) -> np.ndarray:
    """Render, compile and launch `prog` on `backend`; returns the contents of buffer 0."""
    src = backend.renderer.render(prog)
    kernel = backend.runtime(backend.renderer.function_name(prog.name), backend.compiler.compile_cached(src))
    n, dt = out
    npdt = dtypes.to_numpy(dt)
    handles = [backend.allocator.alloc(max(n, 1) * npdt.itemsize)]
    for a in ins:
        h = backend.allocator.alloc(max(a.nbytes, 1))
        backend.allocator.copyin(h, np.ascontiguousarray(a).data.cast("B"))
        handles.append(h)
    kernel(*handles, vals=vals)
    res = np.empty(n, dtype=npdt)
    backend.allocator.copyout(res.data.cast("B"), handles[0])
    return res


def reference(op: Ops, out_dt: DType, *ins: tuple[np.ndarray, DType]) -> np.ndarray:
    """REFERENCE's value of `op` on whole buffers (the definition the CPU must match)."""
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
    return dtypes.bool if op in GroupOp.Comparison else dt
