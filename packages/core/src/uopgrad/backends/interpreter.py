"""REFERENCE's linear-program interpreter (layer 14): codegen's programs (spec/kernels.md §2) run with numpy,
so codegen is tested end to end without a compiler.

A program runs once over "lanes": one lane for a loop-style program, one per thread of the whole grid for a
grid-style one (all threads in lockstep: a value is an array over the lanes, SPECIALs give each lane its
indices). In lockstep every thread has done every earlier uop, so a BARRIER has nothing to wait for; local
memory (DEFINE_LOCAL) is one array per workgroup, side by side, each lane indexing its workgroup's. Loops
step one iteration at a time; ALU ops are numerics.py's table, on those arrays. Values are never 0-d: numpy
computes some ops on 0-d arrays by another code path than on arrays (float32 pow).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from uopgrad.backend import Device
from uopgrad.backends.evaluator import Evaluator, _Frame, _is_reference, register_loop_runner, storage
from uopgrad.backends.numerics import REFERENCE_OPS, Array, bitcast, cast, finish, np_dtype, reference_alu
from uopgrad.codegen import GridLimits, LinearProgram, Target
from uopgrad.dtype import PtrDType
from uopgrad.errors import EvaluationError
from uopgrad.ops import GroupOp, Ops
from uopgrad.pipeline import count_kernel, lower
from uopgrad.schedule import Schedule
from uopgrad.uop import UOp

__all__ = ["LOOPS_TARGET", "run_program", "run_schedule"]

# what a kernel written with explicit loops is lowered for: every ALU op, loop-style, no opt pass
LOOPS_TARGET = Target.for_ops(REFERENCE_OPS)


def _lane_indices(prg: LinearProgram) -> tuple[int, dict[str, Array]]:
    """The number of lanes and the value of each SPECIAL (`gidx<d>`, `lidx<d>`) in every lane."""
    if prg.global_size is None or prg.local_size is None:
        return 1, {}
    sizes = [*prg.local_size, *prg.global_size]
    ids = np.arange(int(np.prod(sizes)), dtype=np.int64)
    out: dict[str, Array] = {}
    for k, (name, n) in enumerate(zip(["lidx0", "lidx1", "lidx2", "gidx0", "gidx1", "gidx2"], sizes)):
        if k == 3:
            out[_GROUP] = ids  # each lane's workgroup, x fastest (for local memory)
        out[name], ids = ids % n, ids // n
    return int(np.prod(sizes)), out


_GROUP = "group"  # not a SPECIAL's name (those are gidx<d>/lidx<d>)


def _groups(special: Mapping[str, Array]) -> int:
    return int(np.max(special[_GROUP])) + 1 if _GROUP in special else 1


def _scalar(v: Array, what: UOp) -> int:
    flat = np.asarray(v).reshape(-1)
    if flat.size > 1 and not np.all(flat == flat[0]):
        raise EvaluationError(f"a loop bound differs between threads: {what.short()}")
    return int(flat[0])


def _memory(prg: LinearProgram, u: UOp, index: tuple[Array, Array], gate: Array | None) -> tuple[Array, ...]:
    """(buffer, offsets, lanes that access memory) of a LOAD/STORE; an offset out of bounds in a lane that
    accesses memory is an error (it names the kernel and the uop)."""
    buf, off = index
    g = np.asarray(True) if gate is None else np.asarray(gate, dtype=np.bool_)
    off, g = np.broadcast_arrays(np.asarray(off).astype(np.int64), g)
    bad = g & ((off < 0) | (off >= buf.size))
    if np.any(bad):
        raise IndexError(
            f"kernel {prg.name}: {u.op.name} at offset {int(off[bad].reshape(-1)[0])} of a "
            f"buffer of {buf.size} elements: {u.short()}"
        )
    return buf, np.where(g, off, 0), g


def run_program(
    prg: LinearProgram, buffers: Sequence[Array], var_vals: Mapping[str, int] | None = None
) -> None:
    """Run `prg` on flat arrays (`buffers[slot]`, in each buffer's storage dtype), writing them in place;
    `var_vals` gives the DEFINE_VARs by name."""
    uops = prg.uops
    pos = {u: i for i, u in enumerate(uops)}
    srcs = [tuple(pos[s] for s in u.src) for u in uops]
    ends = {srcs[i][0]: i for i, u in enumerate(uops) if u.op is Ops.END}
    lanes, special = _lane_indices(prg)
    vals: list[Any] = [None] * len(uops)
    regs: dict[int, Array] = {}
    bounds: dict[int, int] = {}
    pc = 0
    with np.errstate(all="ignore"):
        while pc < len(uops):
            u, s = uops[pc], srcs[pc]
            op = u.op
            if op in GroupOp.ALU:
                vals[pc] = finish(reference_alu[op](*(np.asarray(vals[i]) for i in s)), u.dtype)
            elif op is Ops.RANGE:
                bounds[pc] = _scalar(vals[s[0]], u)
                if bounds[pc] <= 0:
                    pc = ends[pc] + 1
                    continue
                vals[pc] = np.zeros((1,), dtype=np_dtype(u.dtype))
            elif op is Ops.END:
                r = s[0]
                nxt = int(vals[r][0]) + 1
                if nxt < bounds[r]:
                    vals[r] = np.full((1,), nxt, dtype=np_dtype(uops[r].dtype))
                    pc = r + 1
                    continue
            elif op is Ops.LOAD and uops[s[0]].op is Ops.DEFINE_REG:
                vals[pc] = regs[s[0]]
            elif op is Ops.LOAD:
                buf, off, g = _memory(prg, u, vals[s[0]], vals[s[1]] if len(s) > 1 else None)
                got = buf[off] if buf.size else np.zeros(off.shape, dtype=buf.dtype)
                vals[pc] = got if len(s) == 1 else np.where(g, got, np.zeros((), dtype=buf.dtype))
            elif op is Ops.STORE and uops[s[0]].op is Ops.DEFINE_REG:
                regs[s[0]] = vals[s[1]]
            elif op is Ops.STORE:
                buf, off, g = _memory(prg, u, vals[s[0]], vals[s[2]] if len(s) > 2 else None)
                value, off, g = np.broadcast_arrays(np.asarray(vals[s[1]], dtype=buf.dtype), off, g)
                buf[off[g]] = value[g]
            else:
                vals[pc] = _linear_leaf(u, s, vals, buffers, var_vals or {}, special, regs, pc)
            pc += 1


def _linear_leaf(
    u: UOp,
    s: tuple[int, ...],
    vals: list[Any],
    buffers: Sequence[Array],
    var_vals: Mapping[str, int],
    special: Mapping[str, Array],
    regs: dict[int, Array],
    pc: int,
) -> object:
    """The value of a non-ALU, non-control uop of a linear program."""
    op = u.op
    if op is Ops.CONST:
        return finish(np.array([u.arg]).astype(np_dtype(u.dtype)), u.dtype)
    if op is Ops.PARAM:
        return buffers[u.arg]
    if op is Ops.DEFINE_VAR:
        if u.arg[0] not in var_vals:
            raise EvaluationError(f"no value for the variable {u.arg[0]!r}")
        return np.full((1,), var_vals[u.arg[0]], dtype=np_dtype(u.dtype))
    if op is Ops.SPECIAL:
        return special[u.arg].astype(np_dtype(u.dtype))
    if op is Ops.INDEX:
        return _index(u, vals[s[0]], vals[s[1]], special)
    if op is Ops.AFTER:
        return vals[s[0]]
    if op in (Ops.DEFINE_LOCAL, Ops.BARRIER):
        return _local(u, special)
    if op is Ops.DEFINE_REG:
        regs[pc] = vals[s[0]]
        return None
    if op is Ops.CAST:
        return cast(np.asarray(vals[s[0]]), u.dtype)
    if op is Ops.BITCAST:
        x = np.asarray(vals[s[0]])
        return bitcast(x, u.src[0].dtype, u.dtype).reshape(x.shape)
    raise EvaluationError(f"REFERENCE can't run {u.op} in a linear program: {u.short()}")


def _index(u: UOp, buf: Array, off: Array, special: Mapping[str, Array]) -> tuple[Array, Array]:
    """(buffer, offsets) of an INDEX; into local memory, each lane's offsets are into its workgroup's copy."""
    base = u.src[0].src[0] if u.src[0].op is Ops.AFTER else u.src[0]
    if base.op is not Ops.DEFINE_LOCAL:
        return buf, off
    group = special.get(_GROUP, np.zeros((1,), dtype=np.int64))
    return buf, np.asarray(off) + group * (buf.size // _groups(special))


def _local(u: UOp, special: Mapping[str, Array]) -> Array | None:
    """DEFINE_LOCAL: every workgroup's copy, side by side; BARRIER: nothing (in lockstep every lane is
    there already)."""
    if u.op is Ops.BARRIER:
        return None
    assert isinstance(u.dtype, PtrDType)  # pm_spec_program
    return np.zeros(u.dtype.size * _groups(special), dtype=np_dtype(u.dtype.base))


def _read(buf: UOp) -> Array:
    """The current contents of a BUFFER, on any device (fresh REFERENCE buffers read as zeros)."""
    if not _is_reference(buf.device):
        return np.asarray(Device[str(buf.device)].copyout(buf))
    arr = storage.get(buf)
    return np.zeros((buf.arg,), dtype=np_dtype(buf.dtype)) if arr is None else arr


def _write(buf: UOp, arr: Array) -> None:
    if _is_reference(buf.device):
        storage[buf] = arr
    else:
        Device[str(buf.device)].copyin(buf, arr)


def run_schedule(
    sched: Schedule,
    lower_kernels: bool = True,
    ops: frozenset[Ops] = REFERENCE_OPS,
    grid: GridLimits | None = None,
) -> None:
    """Run a schedule's items in order on REFERENCE storage: copies copy; kernels are lowered for the target
    of `ops` (and `grid`) and run as linear programs, or, with `lower_kernels=False`, evaluated as custom
    kernels."""
    target = Target.for_ops(ops, grid)
    for item in sched.items:
        body, bufs = item.src[0], item.src[1:]
        if body.op is Ops.COPY:
            _write(bufs[0], cast(np.array(_read(bufs[1]), copy=True), bufs[0].dtype))
        elif lower_kernels:
            prg = lower(item, target)
            arrays = [np.array(_read(b), copy=True) for b in bufs]
            run_program(prg, arrays, sched.var_vals)
            for slot in prg.outs:
                _write(bufs[slot], arrays[slot])
        else:
            ev = Evaluator(())
            variables = [u for u in body.toposort() if u.op is Ops.DEFINE_VAR]
            ev.var_vals.update({u: sched.var_vals[u.arg[0]] for u in variables})
            with np.errstate(all="ignore"):
                ev.evaluate(item, _Frame(()))
            ev.commit()


def _run_loops(
    call: UOp, arrays: list[Array], var_vals: dict[str, int]
) -> tuple[list[Array], tuple[int, ...]]:
    """A custom kernel written with explicit loops: its linear program run on the argument arrays, counted as
    one launch."""
    prg = lower(call, LOOPS_TARGET)
    start = time.perf_counter()
    run_program(prg, arrays, var_vals)
    count_kernel(
        str(call.src[1].device) if len(call.src) > 1 else "REFERENCE",
        prg,
        var_vals,
        time.perf_counter() - start,
    )
    return arrays, prg.outs


register_loop_runner(_run_loops)
