"""Index algebra on UOps (below uopgrad.symbolic): the term-level helpers the symbolic rules read
(`split_uop`, `const_factor`, `divides`, `gcd`, `divide_exact`, ...), gated index values (`invalid`, `valid`,
`get_idx`, `get_valid`), and the two ways to read an expression back: `render` (Python-like text, the form
tests compare) and `sym_infer` (its value for an assignment of its variables).

`UOp` inherits `IndexMixin`; nothing here builds a node except through `UOp` itself.
"""

from __future__ import annotations

import collections
import functools
import math
import operator
import struct
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from uopgrad.alu import exec_alu
from uopgrad.dtype import ConstType, DType, Invalid, dtypes
from uopgrad.facts import Fact
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = ["IndexMixin", "pm_render", "sym_infer"]

Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})


class IndexMixin:
    """The index-algebra methods of `UOp` (see the module docstring)."""

    __slots__ = ()

    def __ne__(self: UOp, x: object) -> UOp:  # type: ignore[misc, override]
        """`a != b` builds CMPNE, as in the reference (== stays identity)."""
        return self.ne(x)  # type: ignore[arg-type]

    @property
    def _min_max(self: UOp) -> tuple[ConstType, ConstType]:  # type: ignore[misc]
        """(vmin, vmax): the reference's name for the pair."""
        return self.vmin, self.vmax

    # ------------------------------------------------------------------ structure
    @property
    def tuplize(self: UOp) -> tuple[Any, ...]:  # type: ignore[misc]
        """A total order key of the graph under this node (op, arg, dtype, then the sources'), kept."""
        return _TUPLIZE(self)

    def split_uop(self: UOp, sep: Ops) -> Iterator[UOp]:  # type: ignore[misc]
        """The operands of a chain of `sep` (a+b+c -> a, b, c), left to right."""
        stack = [self]
        while stack:
            u = stack.pop()
            if u.op is sep:
                stack.extend(reversed(u.src))
            else:
                yield u

    def usum(self: UOp, *others: UOp) -> UOp:  # type: ignore[misc]
        """self + others... (OR for bool), folded left to right."""
        op = operator.or_ if self.dtype == dtypes.bool else operator.add
        return functools.reduce(op, others, self)

    def uprod(self: UOp, *others: UOp) -> UOp:  # type: ignore[misc]
        """self * others... (AND for bool), folded left to right."""
        op = operator.and_ if self.dtype == dtypes.bool else operator.mul
        return functools.reduce(op, others, self)

    def variables(self: UOp) -> list[UOp]:  # type: ignore[misc]
        """The DEFINE_VARs under this node, sorted by (name, min, max)."""
        return sorted({x for x in self.toposort() if x.op is Ops.DEFINE_VAR}, key=lambda v: v.arg)

    @property
    def ranges(self: UOp) -> dict[UOp, None]:  # type: ignore[misc]
        """The RANGEs this value depends on (including itself)."""
        return {x: None for x in self.toposort() if x.op is Ops.RANGE}

    def overflows(self: UOp, dtype: DType) -> bool:  # type: ignore[misc]
        """Some value of this node is outside `dtype`'s range."""
        return bool(self.vmin < dtypes.min(dtype) or dtypes.max(dtype) < self.vmax)

    # ------------------------------------------------------------------ factors
    def const_factor(self: UOp) -> int:  # type: ignore[misc]
        """A known int that divides every value (the largest for sums and products of positive terms)."""
        if self.op is Ops.CONST:
            return 1 if self.arg is Invalid else cast(int, self.arg)  # Invalid is no number: no known factor
        if self.op is Ops.VCONST:
            return 1 if Invalid in self.arg else math.gcd(*self.arg)
        if self.op is Ops.ADD:
            return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
        if self.op is Ops.MUL:
            for s in self.src:
                if s.op is Ops.CONST:
                    return cast(int, s.arg)
        return 1

    def divides(self: UOp, v: int) -> UOp | None:  # type: ignore[misc]
        """self / v when v is known to divide self exactly (by the structure), else None."""
        if v == 1:
            return self
        if v == 0:
            return None
        if self.op is Ops.CONST:
            return self.const_like(self.arg // v) if self.arg % v == 0 else None
        if self.op is Ops.VCONST:
            ok = all(x % v == 0 for x in self.arg)
            return self.const_like(cast(Any, tuple(x // v for x in self.arg))) if ok else None
        if self.op is Ops.ADD:
            d0, d1 = self.src[0].divides(v), self.src[1].divides(v)
            return None if d0 is None or d1 is None else d0 + d1
        if self.op is Ops.MUL:
            if (d0 := self.src[0].divides(v)) is not None:
                return d0 * self.src[1]
            if (d1 := self.src[1].divides(v)) is not None:
                return self.src[0] * d1
        return None

    def pop_const(self: UOp, op: Ops = Ops.ADD) -> tuple[UOp, ConstType]:  # type: ignore[misc]
        """(x, c) for `x op c` with a constant c; else (self, the identity of op)."""
        if self.op is op and self.src[1].op is Ops.CONST:
            return self.src[0], self.src[1].arg
        return self, {Ops.ADD: 0, Ops.MUL: 1}[op]

    @staticmethod
    def gcd(*uops: UOp) -> UOp:
        """The common factor of terms: their shared product factors times the gcd of their constants."""
        # a zero constant factor (the term 0) divides nothing: the term stands for itself
        terms, factors = zip(*[(u.divides(f) if (f := u.const_factor()) else u, f) for u in uops])
        count = functools.reduce(operator.and_, [collections.Counter(t.split_uop(Ops.MUL)) for t in terms])
        ret = math.prod([*count.elements(), terms[0].const_like(math.gcd(*factors))])  # the constant on top
        return cast("UOp", ret)

    def divide_exact(self: UOp, v: UOp) -> UOp | None:  # type: ignore[misc]
        """self / v where v is structurally a factor of self, else None."""
        if self is v:
            return self.const_like(1)
        if v.op is Ops.CONST:
            return self.divides(v.arg)
        if self.op is Ops.ADD:
            s0, s1 = self.src[0].divide_exact(v), self.src[1].divide_exact(v)
            return None if s0 is None or s1 is None else s0 + s1
        if self.op is Ops.MUL:
            (fac, const), (div_fac, div_const) = self.pop_const(Ops.MUL), v.pop_const(Ops.MUL)
            left = collections.Counter(fac.split_uop(Ops.MUL))
            left.subtract(div_fac.split_uop(Ops.MUL))
            if const % div_const == 0 and all(n >= 0 for n in left.values()):
                return math.prod(left.elements(), start=self.const_like(const // div_const))
        return None

    def is_increasing(self: UOp) -> bool:  # type: ignore[misc]
        """Known to be monotonically non-decreasing in its variables (False when unsure)."""
        if self.op in Irreducible:
            return True
        if self.op is Ops.ADD:
            return self.src[0].is_increasing() and self.src[1].is_increasing()
        if (
            self.op in (Ops.MUL, Ops.CDIV, Ops.FLOORDIV)
            and self.src[1].op is Ops.CONST
            and self.src[1].arg >= 0
        ):
            return self.src[0].is_increasing()
        return False

    # ------------------------------------------------------------------ gated index values
    @classmethod
    def invalid(cls, count: int = 1) -> UOp:
        """The index of no element: a CONST `Invalid` of the index dtype (a gate's false branch)."""
        dt = dtypes.index.vec(count) if count > 1 else dtypes.index
        return cast("UOp", cast(Any, cls)(Ops.CONST, dt, (), Invalid))

    def valid(self: UOp, cond: UOp) -> UOp:  # type: ignore[misc]
        """This index where `cond` holds, else Invalid."""
        return cond.where(self.cast(dtypes.index), type(self).invalid(self.dtype.count))

    def get_idx(self: UOp) -> UOp:  # type: ignore[misc]
        """The index of a gated index (itself if ungated)."""
        return self.src[1] if self.op is Ops.WHERE and self.src[2].arg is Invalid else self

    def get_valid(self: UOp) -> UOp:  # type: ignore[misc]
        """The gate of a gated index (True if ungated, False for a bare Invalid)."""
        if self.op is Ops.WHERE and self.src[2].arg is Invalid:
            return self.src[0]
        return type(self).const(dtypes.bool, self.arg is not Invalid)

    def index(self: UOp, *srcs: UOp | None, ptr: bool = False, dtype: DType | None = None) -> UOp:  # type: ignore[misc]
        """INDEX(self, *srcs): an element of a buffer (a pointer to it with `ptr`)."""
        dt = dtype if dtype is not None else (self.dtype if ptr else self.dtype.base)
        return type(self)(Ops.INDEX, dt, (self, *(s for s in srcs if s is not None)))

    def load(self: UOp, *srcs: UOp) -> UOp:  # type: ignore[misc]
        """LOAD from this INDEX (extra sources: an alternative value, ordering dependencies)."""
        return type(self)(Ops.LOAD, self.dtype.base, (self, *srcs))

    # ------------------------------------------------------------------ reading an expression back
    def render(self: UOp, simplify: bool = True, pm: PatternMatcher | None = None) -> str:  # type: ignore[misc]
        """Python-like text of this expression (simplified first unless `simplify=False`)."""
        s = self.simplify() if simplify else self
        ctx: dict[UOp, str] = {}
        table = pm_render if pm is None else pm
        for u in s.toposort():
            ctx[u] = cast(str, table.rewrite(u, ctx=ctx))
        return ctx[s]

    def sym_infer(self: UOp, var_vals: Mapping[str, int]) -> ConstType:  # type: ignore[misc]
        """The value of this expression with its variables (by name) set to `var_vals`."""
        vals: dict[UOp, Any] = {}
        for u in self.toposort():
            if u.op is Ops.DEFINE_VAR:
                vals[u] = var_vals[u.arg[0]]
            elif u.op is Ops.BIND:
                vals[u] = vals[u.src[0]]
            elif u.op is Ops.CONST:
                vals[u] = u.arg
            elif u.op is Ops.CAST:
                vals[u] = dtypes.as_const(vals[u.src[0]], u.dtype)
            elif u.op is Ops.BITCAST:
                vals[u] = _bitcast(vals[u.src[0]], u.src[0].dtype, u.dtype)
            elif u.op in GroupOp.ALU:
                # index arithmetic is unbounded: compute in index, then wrap to the node's dtype
                vals[u] = exec_alu(u.op, u.dtype, [vals[s] for s in u.src])
            else:
                raise NotImplementedError(f"sym_infer can't evaluate {u.op}")
        return cast(ConstType, vals[self])


def sym_infer(u: UOp | ConstType, var_vals: Mapping[str, int]) -> ConstType:
    """`u.sym_infer(var_vals)` for a UOp; a Python number is its own value."""
    return u if not hasattr(u, "sym_infer") else u.sym_infer(var_vals)


def _bitcast(v: ConstType, src: DType, dst: DType) -> ConstType:
    fmt_from, fmt_to = src.scalar().fmt, dst.scalar().fmt
    if fmt_from is None or fmt_to is None:
        raise NotImplementedError(f"can't bitcast {src} to {dst}")
    return cast(ConstType, struct.unpack(fmt_to, struct.pack(fmt_from, v))[0])


def _arg_key(arg: Any) -> Any:  # noqa: ANN401  (an arg is any value: docs/style.md P13)
    # constants order by value, Invalid after every number (it compares with nothing)
    return (1,) if arg is Invalid else (0, arg) if isinstance(arg, (int, float)) else arg


def _tuplize(u: UOp) -> tuple[Any, ...]:
    return (
        u.op.value,
        _arg_key(u.arg),
        u.dtype.priority,
        u.dtype.count,
        u.dtype.name,
        *(_TUPLIZE.get(s) for s in u.src),
    )


_TUPLIZE: Fact[tuple[Any, ...]] = Fact("tuplize", _tuplize)


# ---------------------------------------------------------------------- the text form
_SYMS = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.FLOORDIV: "//",
    Ops.FLOORMOD: "%",
    Ops.SHL: "<<",
    Ops.SHR: ">>",
    Ops.MUL: "*",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
}
# binding strength of left-associative operators (comparisons chain in Python, so they are always bracketed)
_PRECEDENCE = {
    Ops.MUL: 1,
    Ops.FLOORDIV: 1,
    Ops.FLOORMOD: 1,
    Ops.ADD: 2,
    Ops.SUB: 2,
    Ops.SHL: 3,
    Ops.SHR: 3,
    Ops.AND: 4,
    Ops.XOR: 5,
    Ops.OR: 6,
}


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def strip_parens(s: str) -> str:
    """`s` without one pair of enclosing brackets, when they enclose all of it."""
    return s[1:-1] if s[:1] == "(" and s[-1:] == ")" and _balanced(s[1:-1]) else s


def _binary(ctx: dict[UOp, str], x: UOp) -> str:
    left, right = ctx[x.src[0]], ctx[x.src[1]]
    if (p := _PRECEDENCE.get(x.op)) is not None:
        if _PRECEDENCE.get(x.src[0].op, 99) <= p:
            left = strip_parens(left)
        if _PRECEDENCE.get(x.src[1].op, 99) < p:
            right = strip_parens(right)
    return f"({left}{_SYMS[x.op]}{right})"


def _range_name(x: UOp) -> str:
    return "r" + "_".join(str(a) if a >= 0 else f"m{-a}" for a in x.arg[:-1])


def _cast_name(dt: DType) -> str:
    return dt.name if dt != dtypes.index else "weakint"


pm_render = PatternMatcher(
    [
        (UPat(Ops.DEFINE_VAR, name="x"), lambda x: x.arg[0]),
        (UPat(Ops.SPECIAL, name="x"), lambda x: x.arg),
        (UPat(Ops.RANGE, name="x"), _range_name),
        (UPat((Ops.CONST, Ops.VCONST), name="x"), lambda x: str(x.arg)),
        (UPat(Ops.CAST, name="x"), lambda ctx, x: f"({_cast_name(x.dtype)})({ctx[x.src[0]]})"),
        (UPat(Ops.BIND, name="x"), lambda ctx, x: ctx[x.src[0]]),
        (UPat(Ops.NEG, name="x"), lambda ctx, x: f"(-{ctx[x.src[0]]})"),
        (UPat(Ops.RECIPROCAL, name="x"), lambda ctx, x: f"(1/{ctx[x.src[0]]})"),
        (UPat(Ops.MAX, name="x"), lambda ctx, x: f"max({ctx[x.src[0]]}, {ctx[x.src[1]]})"),
        (UPat(Ops.MULACC, name="x"), lambda ctx, x: f"({ctx[x.src[0]]}*{ctx[x.src[1]]}+{ctx[x.src[2]]})"),
        (
            UPat(Ops.WHERE, name="x"),
            lambda ctx, x: f"({ctx[x.src[1]]} if {ctx[x.src[0]]} else {ctx[x.src[2]]})",
        ),
        (UPat(Ops.CDIV, name="x"), lambda ctx, x: f"cdiv({ctx[x.src[0]]}, {ctx[x.src[1]]})"),
        (UPat(Ops.CMOD, name="x"), lambda ctx, x: f"cmod({ctx[x.src[0]]}, {ctx[x.src[1]]})"),
        (UPat(tuple(_SYMS), name="x"), _binary),
        (
            UPat((Ops.INDEX, Ops.STAGE), name="x"),
            lambda ctx, x: "".join(f"[{strip_parens(ctx[y])}]" for y in x.src[1:]),
        ),
        (
            UPat(Ops.STACK, name="x"),
            lambda ctx, x: (
                "{" + ",".join(ctx[y] for y in x.src) + "}"
                if not x.src or len(set(x.src)) > 1
                else f"{{{ctx[x.src[0]]}, ...}}"
            ),
        ),
        (UPat(name="x"), lambda x: x.short()),
    ]
)
