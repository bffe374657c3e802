"""Facts derived from a UOp (layer 5): `Fact`, the one way any module keeps what it derives from a node on
the node, and the node's own facts (shape, device, sharding axis, structural key, value range), each as one
rule per op in a table.

A rule computes one node's fact from its own fields and its sources' facts, which `Fact` has computed
before it (sources first, in one iterative post-order pass). `SHAPE_RULES` and `MOVEMENT_SHAPE_RULES` give
every op its shape rule; `VALUE_RANGE_RULES` and `INT_RANGE_RULES` the ops whose vmin/vmax are tighter than
their dtype's bounds (`DTYPE_RANGE_OPS` are the rest, by name). A failed shape rule raises ShapeError
(MovementError for a bad movement argument), which the node keeps and raises again only where the shape is
needed. Most rules only read the graph; symbolic sizes are the exception: a PAD's, SHRINK's or MULTI's
size, a sharded RESHAPE's axis and a call's sizes in terms of its arguments are new index expressions,
built (and simplified) through the operators and methods of the size nodes themselves. So this module
still sits below uop.py (UOp is named only for the type checker).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeGuard, TypeVar, cast

from uopgrad._util import all_int, prod
from uopgrad.alu import cdiv
from uopgrad.dtype import ConstType, Invalid, PtrDType, dtypes
from uopgrad.errors import MovementError, ShapeError
from uopgrad.ops import DEVICE_NUM, GroupOp, Ops, sint

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = [
    "AXIS",
    "DTYPE_RANGE_OPS",
    "INT_RANGE_RULES",
    "KEY",
    "MINMAX",
    "MOVEMENT_SHAPE_RULES",
    "NOT_COMPUTED",
    "SHAPE_RULES",
    "VALUE_RANGE_RULES",
    "Err",
    "Fact",
    "infer_axis",
    "infer_device",
    "infer_key",
    "infer_min_max",
    "infer_shape",
    "vec_values",
]

Shape: TypeAlias = "tuple[sint, ...]"
Bounds: TypeAlias = tuple[ConstType, ConstType]
T = TypeVar("T")


class Err:
    """A derived fact that failed: raised again only when something actually needs it."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class _NotComputed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_COMPUTED"


NOT_COMPUTED: Any = _NotComputed()  # a fact not computed yet (None is a fact: a shapeless node's shape)


class Fact(Generic[T]):
    """A fact derived from nodes and kept on each node it was computed for, so it dies with the node. Every
    module that keeps something per node declares a Fact for it at import, `READS = Fact("reads", rule)`.

    `FACT(u)` is the fact of `u`: `rule` computes it for `u` and for every node under it that lacks it,
    sources first in one iterative pass (so a rule reads its sources' facts with `FACT.get`, never asks them
    again); a ShapeError a rule raises is kept on the node and raised wherever the fact is asked. A module
    that fills a graph by a walk of its own (one that stops at some nodes, or fills two facts at once) uses
    `get`, which gives NOT_COMPUTED for a node without the fact, `known` and `put`. The facts asked of
    nearly every node, the shape and the device, are kept in a slot of their own (`slot`, the member
    descriptor, uopgrad.uop declares them); the others share the node's fact dict, keyed by the Fact. A rule
    that reads only the sources that decide it (the device: the first source that has one) may be `partial`:
    it is tried on the node alone first and returns NOT_COMPUTED where such a source lacks the fact.
    """

    __slots__ = ("name", "rule", "get", "put", "partial")

    def __init__(
        self,
        name: str,
        rule: Callable[[UOp], T] | None = None,
        slot: Any = None,  # noqa: ANN401
        partial: bool = False,
    ) -> None:
        self.name, self.rule, self.partial = name, rule, partial
        self.get: Callable[[UOp], Any]  # the fact (T or Err), or NOT_COMPUTED
        self.put: Callable[[UOp, T | Err], None]
        if slot is not None:
            self.get, self.put = slot.__get__, slot.__set__
        else:
            self.get = lambda u: u._facts.get(self, NOT_COMPUTED)
            self.put = lambda u, value: u._facts.__setitem__(self, value)

    def __repr__(self) -> str:
        return f"Fact({self.name!r})"

    def known(self, u: UOp) -> bool:
        """Whether `u` holds this fact (computed already, or failed)."""
        return self.get(u) is not NOT_COMPUTED

    def __call__(self, u: UOp) -> T:
        """The fact of `u`, computed where it is missing; raises the error its rule raised."""
        ret = self.get(u)
        if ret is NOT_COMPUTED:
            ret = self.fill(u)
        if type(ret) is Err:
            raise ret.exc
        fact: T = ret  # (annotated, not typing.cast: a cast is a call, and facts are asked of every node)
        return fact

    def fill(self, u: UOp) -> T | Err:
        """Compute the fact for `u` and for every node under it that lacks it, sources first; the fact of
        `u`, or the Err that holds its rule's ShapeError."""
        get, put, rule = self.get, self.put, self.rule
        if rule is None:
            raise TypeError(f"{self} has no rule: its module fills it with put()")
        if self.partial and (ret := rule(u)) is not NOT_COMPUTED:  # decided by sources that have the fact
            put(u, ret)
            return ret
        nodes: Iterable[UOp] = (u,)  # a node built on known sources (the common case) needs no walk
        for s in u.src:
            if get(s) is NOT_COMPUTED:
                nodes = _lacking(u, get)
                break
        for n in nodes:
            try:
                put(n, rule(n))
            except ShapeError as e:
                put(n, Err(e))
        fact: T | Err = get(u)  # (not the last node computed: another thread may have filled `u`)
        return fact


_DONE: Any = object()  # _lacking's stack marker: the node below it has all its sources walked


def _lacking(u: UOp, get: Callable[[UOp], Any]) -> dict[UOp, None]:
    """The nodes under `u` (and `u`) whose fact `get` gives NOT_COMPUTED, sources first, left to right."""
    out: dict[UOp, None] = {}
    stack: list[Any] = [u]
    pop, push, extend, none, done = stack.pop, stack.append, stack.extend, NOT_COMPUTED, _DONE
    # HOT PATH (bench/step.py, plain steps: new nodes on new sources, a fresh constant or buffer): as in
    # UOp.toposort, a node waits under the _DONE marker while its sources are walked; no gate callback, a
    # frame per node, as toposort(gate=...) would call
    while stack:
        node = pop()
        if node is done:
            out[pop()] = None
        elif node not in out and get(node) is none:
            push(node)
            push(done)
            extend(node.src[::-1])
    # end HOT PATH
    return out


def vec_values(v: UOp) -> tuple[sint, ...]:
    """Decode a shape vector (CONST, VCONST or STACK of index)."""
    if v.op is Ops.CONST:
        return (v.arg,) * v.dtype.count
    if v.op is Ops.VCONST:
        return tuple(v.arg)
    if v.op is Ops.STACK:
        return tuple(s.arg if s.op is Ops.CONST else s for s in v.src)
    raise MovementError(f"not a shape vector: {v.short()}")


def _symbolic(x: object) -> TypeGuard[UOp]:
    """A symbolic size (a UOp: the only sizes with an `op`), not a number."""
    return hasattr(x, "op")


def _is(a: sint, b: sint) -> bool:
    if a is b:  # the same object: the same size (sizes are ints and UOps, never NaN)
        return True
    return False if _symbolic(a) or _symbolic(b) else a == b


def _shape_of(u: UOp) -> Shape | None:
    s: Shape | None | Err = u._shape_fact  # (annotated, not typing.cast: a call per rule)
    if isinstance(s, Err):
        raise s.exc
    return s


def _need_shape(u: UOp, consumer: UOp) -> Shape:
    if (s := _shape_of(u)) is None:
        raise ShapeError(f"{consumer.op} needs a shaped source; {u.op} has no shape: {consumer.short()}")
    return s


# ---------------------------------------------------------------------- shape: one rule per op
ShapeRule: TypeAlias = "Callable[[UOp], Shape | None]"


def _first_source(u: UOp) -> Shape | None:
    return _shape_of(u.src[0]) if u.src else None


def _param(u: UOp) -> Shape | None:
    if isinstance(u.dtype, PtrDType):
        return (u.dtype.size,)
    if u.src[0].op is Ops.NOOP:
        raise ShapeError(f"PARAM slot {u.arg} has an unknown shape")
    return vec_values(u.src[0])


def _gettuple(u: UOp) -> Shape | None:
    k = u.src[0]
    holder = k.src[0] if k.op is Ops.FUNCTION else k
    shape = _shape_of(holder.src[u.arg])
    if shape is None or k.op is not Ops.FUNCTION or all_int(shape):
        return shape
    args = k.src[1:]
    out: list[sint] = []
    for d in shape:
        if _symbolic(d):  # a symbolic size in the body's PARAMs: in terms of the call's arguments
            params = {p: args[p.arg] for p in d.toposort() if p.op is Ops.PARAM and p.arg < len(args)}
            d = d.substitute(params, walk=True)
        out.append(d)
    return tuple(out)


def _elementwise(u: UOp) -> Shape | None:
    shapes = [_shape_of(s) for s in u.src]
    first = shapes[0]
    if first is not None:
        for s in shapes:  # the same tuple (shapes are shared between nodes) needs no look at its sizes
            if s is not first and (
                s is None or len(s) != len(first) or not all(_is(a, b) for a, b in zip(s, first))
            ):
                break
        else:
            return first
    raise ShapeError(f"shape mismatch in {u.op}: source shapes {shapes}: {u.short()}")


def _movement(u: UOp) -> Shape:
    return MOVEMENT_SHAPE_RULES[u.op](u, _need_shape(u.src[0], u))


def _reduce(u: UOp) -> Shape:
    if not isinstance(u.arg, tuple):  # a kernel-level REDUCE(value, *ranges) (codegen): a scalar
        return ()
    return _movement(u) if u.arg[1] else _need_shape(u.src[0], u)


# ---------------------------------------------------------------------- movement shapes (and REDUCE, MULTI)
def _reshape(u: UOp, src: Shape) -> Shape:
    new = vec_values(u.src[1])
    if any(isinstance(s, int) and s < 0 for s in new):
        raise MovementError(f"RESHAPE to {new}: dimensions must be non-negative")
    if all_int(new) and all_int(src) and prod(new) != prod(src):
        raise MovementError(f"RESHAPE from {src} to {new}: the number of elements differs")
    return new


def _expand(u: UOp, src: Shape) -> Shape:
    new = vec_values(u.src[1])
    if any(isinstance(n, int) and n < 0 for n in new):
        raise MovementError(f"EXPAND to {new}: dimensions must be non-negative")
    grows = [not _is(s, n) and not (isinstance(s, int) and s == 1) for s, n in zip(src, new)]
    if len(new) != len(src) or any(grows):
        raise MovementError(f"EXPAND from {src} to {new}: only size-1 dimensions can grow, rank must match")
    return new


def _permute(u: UOp, src: Shape) -> Shape:
    if sorted(u.arg) != list(range(len(src))):
        raise MovementError(f"PERMUTE {u.arg} is not a permutation of {len(src)} axes")
    return tuple(src[i] for i in u.arg)


def _pairs(u: UOp, src: Shape) -> tuple[tuple[sint, ...], tuple[sint, ...]]:
    b, e = vec_values(u.src[1]), vec_values(u.src[2])
    if len(b) != len(src) or len(e) != len(src):
        raise MovementError(f"{u.op.name} {tuple(zip(b, e))} needs one pair per dimension of {src}")
    return b, e


def _pad(u: UOp, src: Shape) -> Shape:
    b, e = _pairs(u, src)
    if any(isinstance(x, int) and x < 0 for x in b + e):
        raise MovementError(f"PAD {tuple(zip(b, e))} must be non-negative")
    return tuple(_simplified(_sadd(_sadd(s, bb), ee)) for s, bb, ee in zip(src, b, e))


def _shrink(u: UOp, src: Shape) -> Shape:
    b, e = _pairs(u, src)
    for s, bb, ee in zip(src, b, e):
        if isinstance(s, int) and isinstance(bb, int) and isinstance(ee, int) and not 0 <= bb <= ee <= s:
            raise MovementError(f"SHRINK {tuple(zip(b, e))} is out of bounds for shape {src}")
    return tuple(ee if isinstance(bb, int) and bb == 0 else _ssub(ee, bb) for bb, ee in zip(b, e))


def _flip(u: UOp, src: Shape) -> Shape:
    if len(u.arg) != len(src):
        raise MovementError(f"FLIP {u.arg} needs one flag per dimension of {src}")
    return src


def _reduce_axes(u: UOp, src: Shape) -> Shape:
    if any(not 0 <= a < len(src) for a in u.arg[1]):
        raise MovementError(f"REDUCE axes {u.arg[1]} out of range for shape {src}")
    return tuple(1 if i in u.arg[1] else s for i, s in enumerate(src))


def _multi(u: UOp, src: Shape) -> Shape:
    ndev = len(u.device) if isinstance(u.device, tuple) else 1
    return tuple(s * ndev if i == u.arg else s for i, s in enumerate(src))


def _sadd(a: sint, b: sint) -> sint:
    if isinstance(b, int) and b == 0:
        return a
    return _same_on_every_device(a + b)


_EVAL: dict[Ops, Callable[[int, int], int]] = {Ops.ADD: lambda x, y: x + y, Ops.MUL: lambda x, y: x * y}


def _at(x: UOp, i: int) -> int | None:
    """`x`, an index expression of constants and the shard index, at shard index `i` (None: another form)."""
    if x.op is Ops.CONST and isinstance(x.arg, int):
        return x.arg
    if x.op is Ops.DEFINE_VAR and x.arg[0] == DEVICE_NUM:
        return i
    if x.op in _EVAL and len(x.src) == 2:
        a, b = _at(x.src[0], i), _at(x.src[1], i)
        return None if a is None or b is None else _EVAL[x.op](a, b)
    return None


def _same_on_every_device(x: sint) -> sint:
    """A size that depends on the shard index only through a shard's bounds (the pads of a shard's gradient)
    is the same number on every device: fold it to that number."""
    if isinstance(x, int) or x.op not in _EVAL:
        return x
    dvars = [v for v in x.toposort() if v.op is Ops.DEFINE_VAR]
    if not dvars or any(v.arg[0] != DEVICE_NUM for v in dvars):
        return x
    vals = {_at(x, i) for i in range(int(dvars[0].arg[1]), int(dvars[0].arg[2]) + 1)}
    return next(iter(vals)) if len(vals) == 1 and None not in vals else x  # type: ignore[return-value]


def _simplified(x: sint) -> sint:
    """A symbolic size simplified (so a pad of a width-2 window by (v, 5-(v+2)) has size 5, not a sum)."""
    if isinstance(x, int):
        return x
    s = x.simplify()
    return cast("sint", s.arg) if s.op is Ops.CONST else s


def _ssub(a: sint, b: sint) -> sint:
    """a - b, simplified when symbolic (so `x[sp:sp+1]` has width 1, not `(sp+1)-sp`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if not isinstance(a, int) and a.op is Ops.ADD and a.src[0] is b and a.src[1].op is Ops.CONST:
        return cast("sint", a.src[1].arg)  # (b + c) - b, e.g. a shard's bounds (i*sz, i*sz + sz)
    return _simplified(a - b)


MOVEMENT_SHAPE_RULES: dict[Ops, Callable[[UOp, Shape], Shape]] = {
    Ops.RESHAPE: _reshape,
    Ops.EXPAND: _expand,
    Ops.PERMUTE: _permute,
    Ops.PAD: _pad,
    Ops.SHRINK: _shrink,
    Ops.FLIP: _flip,
    Ops.REDUCE: _reduce_axes,
    Ops.MULTI: _multi,
}

_OWN_SHAPE_RULES: dict[Ops, ShapeRule] = {
    **dict.fromkeys(GroupOp.Shapeless, lambda _u: None),
    # scalars (an INDEX of a custom kernel's buffer is one element)
    **dict.fromkeys((Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.RANGE, Ops.SPECIAL, Ops.INDEX), lambda _u: ()),
    Ops.NOOP: _first_source,  # a bare NOOP has none; NOOP(x) is x's
    Ops.MULTI: lambda u: _movement(u) if u.src else None,
    Ops.BUFFER: lambda u: (u.arg,),
    Ops.PARAM: _param,
    # the shape of the (shaped) source
    **dict.fromkeys(
        (
            Ops.DETACH,
            Ops.CONTIGUOUS,
            Ops.CONTIGUOUS_BACKWARD,
            Ops.COPY,
            Ops.ALLREDUCE,
            Ops.MSTACK,
            Ops.MSELECT,
            Ops.LOAD,
            Ops.PATCH,
        ),
        lambda u: _need_shape(u.src[0], u),
    ),
    Ops.AFTER: lambda u: _shape_of(u.src[0]),
    Ops.REDUCE: _reduce,
    Ops.GETTUPLE: _gettuple,
    **dict.fromkeys(GroupOp.Movement, _movement),
    **dict.fromkeys(GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.STORE, Ops.GROUP}, _elementwise),
}
# every other op's shape is its first source's (or none without sources): markers, loads, loops' bodies, ...
FIRST_SOURCE_SHAPE = frozenset(Ops) - _OWN_SHAPE_RULES.keys()
SHAPE_RULES: dict[Ops, ShapeRule] = {**_OWN_SHAPE_RULES, **dict.fromkeys(FIRST_SOURCE_SHAPE, _first_source)}


def infer_shape(u: UOp) -> Shape | None:
    """The shape of `u` by its op's rule, or None for shapeless nodes."""
    return SHAPE_RULES[u.op](u)


# ---------------------------------------------------------------------- device, axis, key
def infer_device(u: UOp) -> str | tuple[str, ...] | None:
    """The device a value lives on: a DEVICE's arg, a COPY's/BUFFER's target, else its first source's
    (a partial rule: NOT_COMPUTED where the source that decides it has no device fact yet)."""
    # the slots and the arg are Any: annotated, not typing.cast (a call, on nearly every new node)
    d: str | tuple[str, ...] | None
    op = u.op
    if op is Ops.DEVICE:
        d = u.arg
    elif op is Ops.COPY or op is Ops.BUFFER or op is Ops.ALLREDUCE:
        d = u.src[1]._device_fact
    elif op is Ops.AFTER:
        d = u.src[0]._device_fact
    else:  # the first source with a device (NOT_COMPUTED, not None, where that source lacks the fact)
        d = None
        for s in u.src:
            if s._device_fact is not None:
                d = s._device_fact
                break
    return d


def _axis_of(u: UOp) -> int | None:
    a = AXIS.get(u)
    return None if a is NOT_COMPUTED or isinstance(a, Err) else cast("int | None", a)


def infer_axis(u: UOp) -> int | None:
    """The sharding axis of a multi-device value, followed through movement ops and reduces."""
    op = u.op
    if op is Ops.MULTI:
        return cast("int", u.arg)
    if op is Ops.COPY or not u.src:
        return None
    if op is Ops.GETTUPLE:
        k = u.src[0]
        return _axis_of((k.src[0] if k.op is Ops.FUNCTION else k).src[u.arg])
    if op is Ops.PARAM:
        return next((s.arg for s in u.src if s.op is Ops.MULTI and not s.src), None)
    if op in GroupOp.ALU:
        axes = [a for s in u.src if (a := _axis_of(s)) is not None]
        return axes[-1] if axes else None
    axis = _axis_of(u.src[0])
    if axis is None or (op is Ops.REDUCE and axis in u.arg[1]):
        return None
    if op is Ops.PERMUTE:
        return cast("int", u.arg.index(axis))
    if op is Ops.RESHAPE:
        return _reshape_axis(u, axis)
    if op is Ops.PAD and u.marg[axis] != (0, 0) or op is Ops.FLIP and u.arg[axis]:
        return None  # it works across the shards: the result is whole on every device
    if op is Ops.SHRINK:
        s0 = _shape_of(u.src[0])
        return axis if s0 is not None and _is(u.marg[axis][1] - u.marg[axis][0], s0[axis]) else None
    return axis


def _reshape_axis(u: UOp, axis: int) -> int:
    """The sharded axis after a reshape: the last new axis with as many elements before it as the old one had
    (each device keeps whole rows); a reshape that would move elements between devices raises."""
    s0, new = u.src[0].shape, u.marg
    before = [1]
    for s in new:
        before.append(before[-1] * s)
    want: sint = 1
    for s in s0[:axis]:
        want = want * s
    n = len(u.src[0].device) if isinstance(u.src[0].device, tuple) else 1
    if want not in before:
        raise ShapeError(f"reshape {s0} -> {tuple(new)} moves elements between the shards of axis {axis}")
    new_axis = len(before) - 1 - before[::-1].index(cast(int, want))  # `in before`: a size, not symbolic
    if new_axis >= len(new) or new[new_axis] % n:
        raise ShapeError(f"reshape {s0} -> {tuple(new)} moves elements between the shards of axis {axis}")
    return new_axis


def infer_key(u: UOp) -> bytes:
    """A content hash of the graph under `u`: equal for equal structure, across processes."""
    h = hashlib.sha256(f"{u.op}|{u.dtype!r}|{u.arg!r}|{u.tag!r}".encode())
    for s in u.src:
        h.update(KEY.get(s))
    return h.digest()


# ---------------------------------------------------------------------- value ranges (vmin, vmax)
RangeRule: TypeAlias = "Callable[[UOp, list[Bounds]], Bounds | None]"


def _safe_mul(a: ConstType, b: ConstType) -> ConstType:
    return 0 if a == 0 or b == 0 else a * b


def _div_bound(a: ConstType, c: ConstType) -> ConstType:
    """a // c (c > 0) for a bound that may be infinite (an unbounded index): inf // c would be NaN."""
    return a if isinstance(a, float) and math.isinf(a) else a // c


def _maybe_nan(u: UOp) -> bool:
    # float bounds leave out NaN, which makes CMPLT False and CMPNE True: for floats decide only that way
    return bool(u.src) and u.src[0].dtype.scalar() in dtypes.floats


def _cmplt(u: UOp, mm: list[Bounds]) -> Bounds:
    if mm[0][1] < mm[1][0] and not _maybe_nan(u):
        return (True, True)
    return (False, False) if mm[0][0] >= mm[1][1] else (False, True)


def _cmpne(u: UOp, mm: list[Bounds]) -> Bounds:
    if mm[0][1] < mm[1][0] or mm[0][0] > mm[1][1]:
        return (True, True)
    same = mm[0][0] == mm[0][1] == mm[1][0] == mm[1][1] and not _maybe_nan(u)
    return (False, False) if same else (False, True)


def _dtype_bounds(u: UOp) -> Bounds:
    return (dtypes.min(u.dtype.scalar()), dtypes.max(u.dtype.scalar()))


def _param_range(u: UOp, _mm: list[Bounds]) -> Bounds | None:
    if len(u.src) >= 4 and u.src[2].op is Ops.CONST and u.src[3].op is Ops.CONST:
        return (u.src[2].arg, u.src[3].arg)
    return None


def _cast_range(u: UOp, mm: list[Bounds]) -> Bounds | None:
    dt = u.dtype.scalar()
    src = u.src[0].dtype.scalar()
    if not ((dtypes.is_int(dt) or dt == dtypes.bool) and (dtypes.is_int(src) or src == dtypes.bool)):
        return None
    if src == dtypes.bool and dt != dtypes.bool:  # False/True become 0/1
        return (int(mm[0][0]), int(mm[0][1]))
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    return (max(lo, mm[0][0]), min(hi, mm[0][1])) if lo <= mm[0][0] and mm[0][1] <= hi else (lo, hi)


def _max(_u: UOp, mm: list[Bounds]) -> Bounds:
    return (max(mm[0][0], mm[1][0]), max(mm[0][1], mm[1][1]))


def _const_divisor(mm: list[Bounds]) -> bool:
    return mm[1][0] == mm[1][1] and mm[1][0] > 0


def _ints(mm: list[Bounds]) -> bool:
    return all(type(b) is int for m in mm for b in m)


def _floordiv(_u: UOp, mm: list[Bounds]) -> Bounds | None:
    if _const_divisor(mm):  # a positive constant divisor keeps infinite bounds infinite
        return (_div_bound(mm[0][0], mm[1][0]), _div_bound(mm[0][1], mm[1][0]))
    if not _ints(mm):
        return None
    (a0, a1), (b0, b1) = mm
    if a0 > a1:
        return (0, 0)  # an empty numerator range (a RANGE with end 0)
    if b0 * b1 > 0:  # the divisor keeps one sign: the extremes are at the corners
        corners = (a0 // b0, a0 // b1, a1 // b0, a1 // b1)
        return (min(corners), max(corners))
    return None


def _floormod(_u: UOp, mm: list[Bounds]) -> Bounds | None:
    if not _ints(mm):
        return (0, mm[1][0] - 1) if _const_divisor(mm) and type(mm[1][0]) is int else None
    (a0, a1), (b0, b1) = mm
    if a0 > a1:
        return (0, 0)
    if b0 == b1 != 0:
        c = b0
        if a0 // c == a1 // c:
            return (a0 % c, a1 % c)
        return (0, c - 1) if c > 0 else (c + 1, 0)
    if b0 > 0:
        return (0, b1 - 1)
    if b1 < 0:
        return (b0 + 1, 0)
    return None


def _cdiv(_u: UOp, mm: list[Bounds]) -> Bounds | None:
    if not _ints(mm) or mm[1][0] * mm[1][1] <= 0:
        return None
    (a0, a1), (b0, b1) = mm
    corners = [cdiv(int(a), int(b)) for a in (a0, a1) for b in (b0, b1)]  # ints: _ints(mm)
    return (min(corners), max(corners))


def _cmod(_u: UOp, mm: list[Bounds]) -> Bounds | None:
    if not _ints(mm):
        return None
    (a0, a1), (b0, b1) = mm
    if (c := b0) == b1 > 0:
        lo = 0 if a0 > 0 else a0 if 0 >= a0 > -c else -(b1 - 1)
        return (lo, 0 if a1 < 0 else a1 if 0 <= a1 < c else c - 1)
    m = b1 - 1 if b0 > 0 else -b0 - 1 if b1 < 0 else None
    if m is None:
        return None
    return (0, m) if a0 >= 0 else (-m, 0) if a1 <= 0 else (-m, m)


def _and(u: UOp, mm: list[Bounds]) -> Bounds | None:
    if u.dtype.scalar() == dtypes.bool:
        return (mm[0][0] and mm[1][0], mm[0][1] and mm[1][1])
    if mm[1][0] == mm[1][1] and type(mm[1][0]) is int and mm[1][0] >= 0:  # a non-negative mask
        return (0, mm[1][1] if not (type(mm[0][0]) is int and mm[0][0] >= 0) else min(mm[0][1], mm[1][1]))
    return None


def _or(u: UOp, mm: list[Bounds]) -> Bounds | None:
    return (mm[0][0] or mm[1][0], mm[0][1] or mm[1][1]) if u.dtype.scalar() == dtypes.bool else None


def _shift(u: UOp, mm: list[Bounds]) -> Bounds | None:
    if not _ints(mm) or mm[1][0] != mm[1][1] or mm[1][0] < 0:
        return None
    (lo, hi), k = (int(b) for b in mm[0]), int(mm[1][0])
    return (lo << k, hi << k) if u.op is Ops.SHL else (lo >> k, hi >> k)


def _xor(_u: UOp, mm: list[Bounds]) -> Bounds | None:
    if mm[1][0] == mm[1][1] == -1 and _ints(mm[:1]):
        return (~int(mm[0][1]), ~int(mm[0][0]))  # x ^ -1 is ~x, which reverses the order
    return None


def _mul(_u: UOp, mm: list[Bounds]) -> Bounds:
    corners = [_safe_mul(a, b) for a in mm[0] for b in mm[1]]
    return (min(corners), max(corners))


# ops whose range is known whatever their dtype
VALUE_RANGE_RULES: dict[Ops, RangeRule] = {
    Ops.CONST: lambda u, _mm: _dtype_bounds(u) if u.arg is Invalid else (u.arg, u.arg),  # Invalid: any value
    Ops.VCONST: lambda u, _mm: (min(u.arg), max(u.arg)),
    Ops.DEFINE_VAR: lambda u, _mm: (u.arg[1], u.arg[2]),
    Ops.PARAM: _param_range,  # a symbolic size's declared bounds
    Ops.BIND: lambda _u, mm: mm[0],
    Ops.RANGE: lambda _u, mm: (0, mm[0][1] - 1),
    Ops.SPECIAL: lambda _u, mm: (0, mm[0][1] - 1),
    Ops.CAST: _cast_range,  # int -> int keeps what fits
    Ops.WHERE: lambda _u, mm: (min(mm[1][0], mm[2][0]), max(mm[1][1], mm[2][1])),
    Ops.CMPLT: _cmplt,
    Ops.CMPNE: _cmpne,
    Ops.AND: _and,
    Ops.OR: _or,
}
# integer arithmetic: the result's range, unless it leaves the dtype's (then the dtype's bounds: it wraps)
INT_RANGE_RULES: dict[Ops, RangeRule] = {
    Ops.ADD: lambda _u, mm: (mm[0][0] + mm[1][0], mm[0][1] + mm[1][1]),
    Ops.MUL: _mul,
    Ops.NEG: lambda _u, mm: (-mm[0][1], -mm[0][0]),
    Ops.TRUNC: lambda _u, mm: mm[0],  # the identity on integers
    Ops.MAX: _max,
    Ops.FLOORDIV: _floordiv,
    Ops.FLOORMOD: _floormod,
    Ops.CDIV: _cdiv,
    Ops.CMOD: _cmod,
    Ops.SHL: _shift,
    Ops.SHR: _shift,
    Ops.XOR: _xor,
}
# every other op: its dtype's bounds (unbounded for `index`)
DTYPE_RANGE_OPS = frozenset(Ops) - set(VALUE_RANGE_RULES) - set(INT_RANGE_RULES)


def infer_min_max(u: UOp) -> Bounds:
    """Bounds of every value `u` can take, from its op's rule and its sources' bounds."""
    dt = u.dtype.scalar()
    if dt == dtypes.void:  # effects and markers hold no value: unbounded, so no law can use their bounds
        return (-math.inf, math.inf)
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    mm = [cast(Bounds, MINMAX.get(s)) for s in u.src]
    if (rule := VALUE_RANGE_RULES.get(u.op)) is not None and (known := rule(u, mm)) is not None:
        return known
    if not dtypes.is_int(dt):
        return _max(u, mm) if u.op is Ops.MAX else (lo, hi)
    ret = rule(u, mm) if (rule := INT_RANGE_RULES.get(u.op)) is not None else None
    if ret is None or (dt != dtypes.index and (ret[0] < lo or ret[1] > hi)):
        return (lo, hi) if dt != dtypes.index else (-math.inf, math.inf)
    return ret


# the node's facts kept in its fact dict (shape and device have slots: uopgrad.uop declares those two)
AXIS: Fact[int | None] = Fact("axis", infer_axis)
KEY: Fact[bytes] = Fact("key", infer_key)
MINMAX: Fact[Bounds] = Fact("minmax", infer_min_max)
