"""The output of codegen (layer 11): `LinearProgram`, a linear list of kernel-level UOps; `GridLimits` for
grid-style backends; the rule tables that say which kernel-level graphs and programs are well formed.

The program form is the contract of spec/kernels.md §2: renderers print it, REFERENCE interprets it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from uopgrad.codegen.estimate import Estimates, estimate
from uopgrad.dtype import AddrSpace, PtrDType, dtypes
from uopgrad.ops import Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop import UOp
from uopgrad.verify import REDUCE_OPS, VerifyError, pm_spec_scalar, pm_spec_shared

__all__ = [
    "GridLimits",
    "GridSpec",
    "LinearProgram",
    "Program",
    "check",
    "pm_spec_kernel_ops",
    "pm_spec_lowered",
    "pm_spec_program",
    "pm_spec_vector",
]


class GridSpec(Protocol):
    """What codegen reads from a grid description (GridLimits or any object with these attributes; an optional
    `local_size` attribute sets the threads per workgroup along x, 128 when absent, and an optional
    `local_memory` the bytes of local memory a workgroup has, 0 when absent: reduces are not grouped)."""

    @property
    def global_max(self) -> tuple[int, ...]:
        """The most workgroups along x, y, z."""

    @property
    def local_max(self) -> tuple[int, ...]:
        """The most threads per workgroup along x, y, z."""

    @property
    def local_prod_max(self) -> int:
        """The most threads per workgroup."""


@dataclass(frozen=True)
class GridLimits:
    """What a grid-style backend can launch: at most `global_max[d]` workgroups and `local_max[d]` threads per
    workgroup along dimension d (x, y, z), at most `local_prod_max` threads per workgroup; `local_size` is the
    number of threads per workgroup codegen aims for along x; `local_memory` the bytes of local (shared)
    memory a workgroup has, 0 where the backend renders none (then no reduce is split over a workgroup,
    uopgrad.codegen.group)."""

    global_max: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    local_max: tuple[int, int, int] = (1024, 1024, 64)
    local_prod_max: int = 1024
    local_size: int = 128
    local_memory: int = 0


@dataclass(frozen=True, eq=False)
class LinearProgram:
    """A lowered kernel (spec/kernels.md §2). `uops` are in execution order, each after its sources; `globals`
    are the buffer slots the kernel takes, `vars` its scalar arguments (DEFINE_VARs by name), `outs`/`ins` the
    slots it stores to / loads from. Grid-style programs have `global_size` (number of workgroups) and
    `local_size` (threads per workgroup), x first; loop-style programs have None for both."""

    name: str
    uops: tuple[UOp, ...]
    globals: tuple[int, ...]
    vars: tuple[UOp, ...]
    outs: tuple[int, ...]
    ins: tuple[int, ...]
    global_size: tuple[int, int, int] | None = None
    local_size: tuple[int, int, int] | None = None

    @functools.cached_property
    def estimates(self) -> Estimates:
        """FLOPs and bytes of a launch (uopgrad.codegen.estimate), worked out once per program."""
        return estimate(self.uops, self.global_size, self.local_size)

    def var_values(self, var_vals: Mapping[str, int]) -> tuple[int, ...]:
        """The values of `vars`, in order, taken by name from `var_vals`."""
        missing = [v.arg[0] for v in self.vars if v.arg[0] not in var_vals]
        if missing:
            raise KeyError(f"kernel {self.name} needs values for the variables {missing}")
        return tuple(int(var_vals[v.arg[0]]) for v in self.vars)

    def listing(self) -> str:
        """One line per uop: position, op, dtype, source positions and arg (for debugging, golden tests)."""
        pos = {u: i for i, u in enumerate(self.uops)}
        lines = []
        for i, u in enumerate(self.uops):
            srcs = ", ".join(str(pos[s]) if s in pos else "?" for s in u.src)
            arg = "" if u.arg is None else f" {u.arg!r}"
            lines.append(f"{i:4d} {u.op.name:<11s} {u.dtype!r:<22s} ({srcs}){arg}")
        return "\n".join(lines)


# the former name (deprecated, kept one release): `uopgrad.backend.Program` is the loaded runtime kernel
Program = LinearProgram


# ---------------------------------------------------------------------- well-formedness
def _is_ptr(u: UOp) -> bool:
    return isinstance(u.dtype, PtrDType)


def _is_index(u: UOp) -> bool:
    return u.dtype.count == 1 and dtypes.is_int(u.dtype) and not _is_ptr(u)


def _range_ok(x: UOp) -> bool:
    return isinstance(x.arg, tuple) and len(x.arg) == 2 and x.arg[1] in ("loop", "reduce") and _is_index(x)


def _index_ok(x: UOp, p: UOp, off: UOp) -> bool:
    base = p.src[0] if p.op is Ops.AFTER else p
    return (
        base.op in (Ops.PARAM, Ops.DEFINE_LOCAL)
        and _is_ptr(base)
        and x.dtype == base.dtype
        and _is_index(off)
    )


def _local_ok(x: UOp) -> bool:
    """DEFINE_LOCAL: a sized pointer into local memory, numbered by its arg."""
    dt = x.dtype
    return (
        isinstance(dt, PtrDType)
        and dt.addrspace is AddrSpace.LOCAL
        and dt.size > 0
        and isinstance(x.arg, int)
    )


def _load_ok(x: UOp) -> bool:
    """LOAD(INDEX[, bool gate]) of memory, or LOAD(DEFINE_REG, *RANGE | END) of an accumulator."""
    first, rest = x.src[0], x.src[1:]
    if first.op is Ops.INDEX:
        return x.dtype == first.dtype.base and (not rest or (len(rest) == 1 and rest[0].dtype == dtypes.bool))
    if first.op is Ops.DEFINE_REG:
        return x.dtype == first.dtype and (
            all(r.op is Ops.RANGE for r in rest) or (len(rest) == 1 and rest[0].op is Ops.END)
        )
    return False


def _store_ok(x: UOp) -> bool:
    """STORE(INDEX, value[, bool gate]) to memory, or STORE(DEFINE_REG, value) to an accumulator."""
    t, v, rest = x.src[0], x.src[1], x.src[2:]
    if t.op is Ops.INDEX:
        return t.dtype.base == v.dtype and (not rest or (len(rest) == 1 and rest[0].dtype == dtypes.bool))
    return t.op is Ops.DEFINE_REG and t.dtype == v.dtype and not rest


# kernel-level ops, shared by the lowered graph (between passes) and the final program
pm_spec_kernel_ops = PatternMatcher(
    [
        (UPat(Ops.PARAM, src=(), name="x"), lambda x: _is_ptr(x) and isinstance(x.arg, int) and x.arg >= 0),
        (UPat(Ops.RANGE, src=(UPat.var("b"),), name="x"), lambda x, b: _range_ok(x) and b.dtype == x.dtype),
        (
            UPat(Ops.SPECIAL, src=(UPat(Ops.CONST),), name="x"),
            lambda x: isinstance(x.arg, str) and _is_index(x),
        ),
        (UPat(Ops.END, dtypes.void, src=(UPat(Ops.RANGE),), allow_any_len=True), lambda: True),
        (
            UPat(Ops.DEFINE_REG, src=(UPat(Ops.CONST, name="c"),), name="x"),
            lambda x, c: x.dtype == c.dtype and isinstance(x.arg, int),
        ),
        (
            UPat(
                Ops.INDEX,
                src=(UPat((Ops.PARAM, Ops.AFTER, Ops.DEFINE_LOCAL), name="p"), UPat.var("off")),
                name="x",
            ),
            _index_ok,
        ),
        (
            UPat(Ops.AFTER, src=(UPat((Ops.PARAM, Ops.DEFINE_LOCAL)),), allow_any_len=True, name="x"),
            lambda x: x.dtype == x.src[0].dtype,
        ),
        (UPat(Ops.DEFINE_LOCAL, src=(), name="x"), _local_ok),  # local memory of a workgroup (codegen.group)
        (UPat(Ops.BARRIER, dtypes.void, src=UPat(Ops.STORE)), lambda: True),  # after the stores it orders
        (UPat(Ops.LOAD, name="x"), _load_ok),
        (UPat(Ops.STORE, dtypes.void, name="x"), _store_ok),
        # an element of a warp's tile product (uopgrad.codegen.tc): WMMA(a tile, b tile, lane)
        (UPat(Ops.WMMA, dtypes.float32, src=(UPat(Ops.INDEX), UPat(Ops.INDEX), UPat())), lambda: True),
        # several stores of one thread (a tc kernel's fragment), once gpudims drops the loops around them
        (UPat(Ops.GROUP, dtypes.void, name="x"), lambda x: all(s.dtype == dtypes.void for s in x.src)),
    ]
)


def _vec(x: UOp) -> bool:
    return x.dtype.count > 1 and not _is_ptr(x)


def _mask(m: UOp, like: UOp) -> bool:
    """`m` is a lane mask (a bool vector) with as many lanes as `like`."""
    return m.dtype == dtypes.bool.vec(like.dtype.count) and like.dtype.count > 1


def _gate_ok(rest: tuple[UOp, ...]) -> bool:
    """No gate, or one scalar bool: a padded grid's bounds check (gpudims) covers a whole vector access."""
    return not rest or (len(rest) == 1 and rest[0].dtype == dtypes.bool)


def _vload_ok(x: UOp, i: UOp) -> bool:
    return _gate_ok(x.src[1:]) and x.dtype == i.dtype.base.vec(x.dtype.count)


def _vstore_ok(x: UOp) -> bool:
    t, v = x.src[0], x.src[1]
    if t.op is Ops.INDEX:
        return _gate_ok(x.src[2:]) and v.dtype.scalar() == t.dtype.base
    return t.op is Ops.DEFINE_REG and t.dtype == v.dtype and len(x.src) == 2


# the vector forms of the opt pass (uopgrad.codegen.opt): checked before pm_spec_scalar, which rejects every
# other vector-typed node
pm_spec_vector = PatternMatcher(
    [
        (
            UPat(Ops.STACK, name="x"),
            lambda x: (
                True
                if _vec(x)
                and x.arg is None
                and x.dtype.count == len(x.src)
                and all(s.dtype == x.dtype.scalar() for s in x.src)
                else None
            ),
        ),
        (
            UPat(Ops.GEP, src=(UPat.var("v"),), name="x"),
            lambda x, v: (
                _vec(v)
                and x.dtype == v.dtype.scalar()
                and isinstance(x.arg, tuple)
                and len(x.arg) == 1
                and 0 <= x.arg[0] < v.dtype.count
            ),
        ),
        (
            UPat((Ops.ADD, Ops.MUL, Ops.SUB, Ops.FDIV, Ops.MAX, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR), name="x"),
            lambda x: True if _vec(x) and all(s.dtype == x.dtype for s in x.src) else None,
        ),
        (
            UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), src=(UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, a, b: True if _vec(x) and _mask(x, a) and a.dtype == b.dtype else None,
        ),
        (
            UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, c, a, b: True if _vec(x) and _mask(c, x) and x.dtype == a.dtype == b.dtype else None,
        ),
        (
            UPat(Ops.CAST, src=(UPat.var("y"),), name="x"),
            lambda x, y: True if _vec(x) and y.dtype.count == x.dtype.count else None,
        ),
        (
            UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="i"),), allow_any_len=True, name="x"),
            lambda x, i: True if _vec(x) and _vload_ok(x, i) else None,
        ),
        (
            UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_REG),), allow_any_len=True, name="x"),
            lambda x: True if _vec(x) and _load_ok(x) else None,
        ),
        (
            UPat(Ops.STORE, dtypes.void, src=(UPat(), UPat.var("v")), allow_any_len=True, name="x"),
            lambda x, v: True if _vec(v) and _vstore_ok(x) else None,
        ),
        (
            UPat(Ops.DEFINE_REG, src=(UPat(Ops.CONST, name="c"),), name="x"),
            lambda x, c: True if _vec(x) and x.dtype == c.dtype and isinstance(x.arg, int) else None,
        ),
        (
            UPat(Ops.CONST, src=(), name="x"),
            lambda x: True if _vec(x) and not isinstance(x.arg, tuple) else None,
        ),
        (
            UPat(Ops.REDUCE, src=(UPat.var("v"),), allow_any_len=True, name="x"),
            lambda x, v: (
                True
                if _vec(x)
                and x.arg in REDUCE_OPS
                and x.dtype == v.dtype
                and all(r.op is Ops.RANGE for r in x.src[1:])
                else None
            ),
        ),
    ]
)

# the graph between codegen passes: kernel ops, kernel-level REDUCE(value, *RANGE), SINK, the index dtype
pm_spec_lowered = (
    pm_spec_vector
    + pm_spec_scalar
    + pm_spec_kernel_ops
    + PatternMatcher(
        [
            (
                UPat(Ops.REDUCE, src=(UPat.var("v"),), allow_any_len=True, name="x"),
                lambda x, v: (
                    x.arg in REDUCE_OPS and x.dtype == v.dtype and all(r.op is Ops.RANGE for r in x.src[1:])
                ),
            ),
        ]
    )
    + pm_spec_shared
)

# the final program: no SINK, no REDUCE, no index dtype (int32/int64 instead)
pm_spec_program = (
    pm_spec_vector
    + pm_spec_scalar
    + PatternMatcher(
        [
            (
                UPat(name="x"),
                lambda x: False if x.dtype.scalar() == dtypes.index or x.op is Ops.SINK else None,
            ),
        ]
    )
    + pm_spec_kernel_ops
    + pm_spec_shared
)


def check(uops: UOp | Iterable[UOp], spec: PatternMatcher, what: str = "kernel") -> None:
    """Check every node (all of `uops` in order, or the graph under one root) against `spec`'s rules; raises
    VerifyError naming the first one no rule accepts. Unlike `verify`, shapes are not checked: kernel-level
    values are scalars."""
    nodes = list(uops.toposort()) if isinstance(uops, UOp) else list(uops)
    for i, u in enumerate(nodes):
        try:
            ok = spec.rewrite(u)
        except Exception as e:  # a malformed node may break a rule's own assumptions: report, don't crash
            ok = f"a rule raised {type(e).__name__}: {e}"
        if ok is not True:
            why = ok if isinstance(ok, str) else "no rule accepts it" if ok is None else "a rule rejected it"
            srcs = "\n".join(f"    src[{j}]: {s.short()}" for j, s in enumerate(u.src))
            raise VerifyError(
                f"invalid {u.op.name} node in the {what} (#{i} of {len(nodes)}): {why}\n"
                f"  node: {u.short()}\n{srcs}",
                u,
                i,
            )
