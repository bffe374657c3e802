"""Codegen (layer 11): a kernel (spec/kernels.md §1) becomes a linear program (§2), for one backend.

`lower(kernel, ops, grid)` runs the passes listed in its body, in order (each a named graph_rewrite or a
named function), then linearizes; with UOPGRAD_VERIFY=1 the graph is checked after every pass. `ops` are
the ALU ops the backend renders natively (everything else is decomposed); `grid` is given for grid-style
backends (GPUs) and maps the output loops onto launch dimensions. Programs are cached by the kernel's
structure, the op set and the grid.
"""
from __future__ import annotations

from uopgrad import debug
from uopgrad.codegen.decomp import pm_decomp
from uopgrad.codegen.gpudims import add_gpudims
from uopgrad.codegen.index import index_dtype, lower_indexing, pm_index_dtype
from uopgrad.codegen.linearize import linearize
from uopgrad.codegen.program import GridLimits, GridSpec, Program, check, pm_spec_lowered, pm_spec_program
from uopgrad.codegen.reduce import pm_reduce, reduce_context
from uopgrad.config import VERIFY
from uopgrad.dtype import PtrDType
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import graph_rewrite
from uopgrad.uop import UOp
from uopgrad.verify import verify

__all__ = ["GridLimits", "GridSpec", "Program", "clear_program_cache", "lower", "program_cache_info"]

_cache: dict[tuple[bytes, int, frozenset[Ops], GridSpec | None], Program] = {}
_stats = {"hits": 0, "misses": 0}


def _checked(name: str, sink: UOp) -> UOp:
    if VERIFY:
        check(sink, pm_spec_lowered, f"kernel after the '{name}' pass")
    debug.after_pass(name, sink)
    return sink


def lower(kernel: UOp, ops: frozenset[Ops], grid: GridSpec | None = None) -> Program:
    """The linear program of `kernel` (a kernel CALL, or its SINK body) for a backend that renders `ops`."""
    body = kernel.src[0] if kernel.op is Ops.CALL else kernel
    nargs = len(kernel.src) - 1 if kernel.op is Ops.CALL else 0
    key = (body.key, nargs, ops, grid)
    if (prg := _cache.get(key)) is not None:
        _stats["hits"] += 1
        return prg
    _stats["misses"] += 1
    if VERIFY:
        verify(kernel)
    sink = _checked("index", lower_indexing(body))  # movement ops -> index arithmetic, loop nests, PAD gates
    global_size = local_size = None
    if grid is not None:  # output loops -> grid indices
        sink, global_size, local_size = add_gpudims(sink, grid)
        sink = _checked("gpudims", sink)
    sink = _checked("reduce", graph_rewrite(sink, pm_reduce, ctx=reduce_context(), name="codegen: reduce"))
    sink = _checked("index dtype", graph_rewrite(sink, pm_index_dtype, ctx=index_dtype(sink),
                                                 name="codegen: index dtype"))  # index -> int32 / int64
    sink = _checked("decompositions", graph_rewrite(sink, pm_decomp, ctx=ops, name="codegen: decompositions"))
    uops = _with_all_params(linearize(sink), body, nargs)
    if VERIFY:
        check(uops, pm_spec_program, "program")
    if missing := sorted({u.op.name for u in uops if u.op in GroupOp.ALU and u.op not in ops}):
        raise NotImplementedError(f"the backend does not render {missing}, and codegen can't decompose them")
    prg = Program(_name(kernel, body), uops, tuple(u.arg for u in uops if u.op is Ops.PARAM),
                  tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0])),
                  _slots(uops, Ops.STORE), _slots(uops, Ops.LOAD), global_size, local_size)
    _cache[key] = prg
    return prg


def _with_all_params(uops: tuple[UOp, ...], body: UOp, nargs: int) -> tuple[UOp, ...]:
    """Every buffer slot of the kernel as a PARAM, in slot order, first (unused ones too)."""
    params = {u.arg: u for u in uops if u.op is Ops.PARAM}
    for u in body.toposort():
        if u.op is Ops.PARAM and isinstance(u.dtype, PtrDType) and u.arg not in params:
            params[u.arg] = UOp(Ops.PARAM, u.dtype, (), u.arg)
    if missing := [s for s in range(nargs) if s not in params]:
        raise RuntimeError(f"kernel buffer slots {missing} have no PARAM in the body")
    return (*(params[s] for s in sorted(params)), *(u for u in uops if u.op is not Ops.PARAM))


def _slots(uops: tuple[UOp, ...], op: Ops) -> tuple[int, ...]:
    found = set()
    for u in uops:
        if u.op is op and u.src[0].op is Ops.INDEX:
            p = u.src[0].src[0]
            found.add((p.src[0] if p.op is Ops.AFTER else p).arg)
    return tuple(sorted(found))


def _name(kernel: UOp, body: UOp) -> str:
    """`E_<shape>` for an elementwise kernel, `r_<shape>` for one with a reduce, or a custom kernel's name."""
    if kernel.op is Ops.CALL and kernel.arg.name:
        return str(kernel.arg.name)
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
