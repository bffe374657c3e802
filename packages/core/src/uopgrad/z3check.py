"""Integer UOps as z3 terms: `uops_to_z3` translates index/int/bool expressions so a solver can prove two of
them equal (the spec proves every symbolic law this way) or an index in bounds.

z3 is an optional dependency (`pip install z3-solver`, or the `uopgrad[z3]` extra); it is imported when first
used. Integers are mathematical here (no wrap-around): the translation fits `index`, and fixed-width ints
only as long as nothing overflows.
"""

# ruff: noqa: ANN401  (z3 ships no type hints: its terms are Any)
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from uopgrad.dtype import Invalid, dtypes
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop import UOp

__all__ = ["load_z3", "uops_to_z3"]

_INTS = (*dtypes.ints, dtypes.index)


def load_z3() -> Any:
    """The z3 module, or ImportError saying how to install it."""
    try:
        z3 = importlib.import_module("z3")
    except ImportError as e:
        raise ImportError(
            "proving UOp expressions needs z3: pip install z3-solver (or pip install 'uopgrad[z3]')"
        ) from e
    if z3.get_version() < (4, 12, 4, 0):
        raise ImportError("uopgrad needs z3 >= 4.12.4: pip install -U 'z3-solver>=4.12.4'")
    return z3


def _alu(z3: Any) -> dict[Ops, Callable[..., Any]]:
    """z3 meaning of each integer/bool op (floor division and modulo as in Python)."""

    def floordiv(a: Any, b: Any) -> Any:  # z3's `/` is Euclidean: it floors only for b > 0
        return z3.If(b > 0, a / b, (-a) / (-b))

    def cdiv(a: Any, b: Any) -> Any:  # toward zero
        return z3.If(a < 0, z3.If(b > 0, (a + (b - 1)) / b, (a - (b + 1)) / b), a / b)

    def xor(a: Any, b: Any) -> Any:
        if z3.is_bool(a):
            return z3.Xor(a, b)
        for x, y in ((a, b), (b, a)):
            if z3.is_int_value(y) and y.as_long() in (0, -1):
                return x if y.as_long() == 0 else -(x + 1)  # x ^ 0 is x, x ^ -1 is ~x
        raise NotImplementedError(f"z3 integer XOR is only translated with -1, not {a} ^ {b}")

    def and_(a: Any, b: Any) -> Any:
        if z3.is_bool(a):
            return z3.And(a, b)
        if z3.is_int_value(b) and (m := b.as_long()) >= 0 and (m + 1) & m == 0:
            return a % (m + 1)  # a mask of low bits is a modulo
        raise NotImplementedError(f"z3 integer AND is only translated with a low-bit mask, not {a} & {b}")

    def or_(a: Any, b: Any) -> Any:
        if z3.is_bool(a):
            return z3.Or(a, b)
        raise NotImplementedError("z3 integer OR is not translated")

    return {
        # bool ADD/MAX are OR and MUL is AND (a bool result is truncated to True/False)
        Ops.ADD: lambda a, b: z3.Or(a, b) if z3.is_bool(a) else a + b,
        Ops.SUB: lambda a, b: a - b,
        Ops.MUL: lambda a, b: z3.And(a, b) if z3.is_bool(a) else a * b,
        Ops.NEG: lambda a: z3.Not(a) if z3.is_bool(a) else -a,
        Ops.TRUNC: lambda a: a,
        Ops.CMPLT: lambda a, b: a < b,
        Ops.CMPNE: lambda a, b: a != b,
        Ops.CMPEQ: lambda a, b: a == b,
        Ops.MAX: lambda a, b: z3.Or(a, b) if z3.is_bool(a) else z3.If(a < b, b, a),
        Ops.WHERE: z3.If,
        Ops.FLOORDIV: floordiv,
        Ops.FLOORMOD: lambda a, b: a - floordiv(a, b) * b,
        Ops.CDIV: cdiv,
        Ops.CMOD: lambda a, b: a - cdiv(a, b) * b,
        Ops.SHL: lambda a, b: a * (2 ** b.as_long()),
        Ops.SHR: lambda a, b: floordiv(a, 2 ** b.as_long()),
        Ops.AND: and_,
        Ops.OR: or_,
        Ops.XOR: xor,
    }


Ctx = tuple[Any, dict[UOp, Any], dict[Ops, Any]]  # (z3 context, terms so far, the op table)


def _bounded(ctx: Ctx, name: str, lo: Any, hi: Any) -> tuple[Any, Any]:
    """A fresh integer named `name` and the constraint lo <= it <= hi."""
    z3 = load_z3()
    s = z3.Int(name, ctx=ctx[0])
    return s, z3.And(lo <= s, s <= hi)


def _fresh(ctx: Ctx, kind: str, x: UOp) -> tuple[Any, Any]:
    """A fresh integer for a value z3 can't see into (a load, a cast from a float), bounded by x's dtype."""
    return _bounded(ctx, f"{kind}{len(ctx[1])}", dtypes.min(x.dtype), dtypes.max(x.dtype))


def _term(make: Callable[[Any], Any]) -> tuple[Any, None]:
    """A term built with the z3 module, with no constraint."""
    return make(load_z3()), None


_invalid_gate = UPat.var("cond").where(UPat.var("x"), UPat(Ops.CONST, arg=Invalid))
# each rule returns (term, constraint or None)
pm_z3 = PatternMatcher(
    [
        (_invalid_gate, lambda ctx, x, cond: (ctx[1][x], ctx[1][cond])),  # a gated index: its gate must hold
        (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: _bounded(ctx, x.arg, 0, ctx[1][x.src[0]] - 1)),
        (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: _bounded(ctx, x.arg[0], x.arg[1], x.arg[2])),
        (
            UPat(Ops.RANGE, name="x"),
            lambda ctx, x: _bounded(ctx, x.render(simplify=False), 0, ctx[1][x.src[0]] - 1),
        ),
        (UPat(Ops.BIND, name="x"), lambda ctx, x: (ctx[1][x.src[0]], None)),
        # a loaded value is any value of its dtype (a non-pointer INDEX is a load)
        (UPat((Ops.LOAD, Ops.INDEX), _INTS, name="x"), lambda ctx, x: _fresh(ctx, "load", x)),
        (
            UPat((Ops.LOAD, Ops.INDEX), dtypes.bool),
            lambda ctx: _term(lambda z3: z3.Bool(f"load{len(ctx[1])}", ctx=ctx[0])),
        ),
        (UPat(Ops.CONST, arg=Invalid), lambda ctx: _term(lambda z3: z3.Int("Invalid", ctx=ctx[0]))),
        (UPat(Ops.CONST, _INTS, name="x"), lambda ctx, x: _term(lambda z3: z3.IntVal(x.arg, ctx=ctx[0]))),
        (
            UPat(Ops.CONST, dtypes.bool, name="x"),
            lambda ctx, x: _term(lambda z3: z3.BoolVal(x.arg, ctx=ctx[0])),
        ),
        # a float becomes opaque: its cast to an int, or a comparison of floats, is a fresh variable
        (
            UPat(Ops.CAST, _INTS, src=(UPat(dtype=dtypes.floats),), name="x"),
            lambda ctx, x: _fresh(ctx, "cast", x),
        ),
        (
            UPat(GroupOp.Comparison, src=UPat(dtype=dtypes.floats)),
            lambda ctx: _term(lambda z3: z3.Bool(f"float_cmp{len(ctx[1])}", ctx=ctx[0])),
        ),
        (
            UPat(Ops.CAST, _INTS, src=(UPat.var("x", dtypes.bool),)),
            lambda ctx, x: _term(lambda z3: z3.If(ctx[1][x], 1, 0)),
        ),
        (UPat(Ops.CAST, _INTS, src=(UPat.var("x", _INTS),)), lambda ctx, x: (ctx[1][x], None)),
        (UPat(Ops.CAST, dtypes.bool, name="x"), lambda ctx, x: (ctx[1][x.src[0]] != 0, None)),
        (UPat(GroupOp.ALU, name="x"), lambda ctx, x: (ctx[2][x.op](*(ctx[1][s] for s in x.src)), None)),
    ]
)


def uops_to_z3(solver: Any, *uops: UOp) -> list[Any]:
    """z3 terms of `uops` (int, index or bool expressions); variable ranges are added to `solver`."""
    z3 = load_z3()
    keep = (*_INTS, dtypes.bool)
    order = list(UOp.sink(*uops).toposort(gate=lambda x: x.dtype.scalar() in keep or x.op is Ops.SINK))[:-1]
    terms: dict[UOp, Any] = {}
    ctx: Ctx = (solver.ctx, terms, _alu(z3))
    for u in order:
        if (ret := pm_z3.rewrite(u, ctx=ctx)) is None:
            raise NotImplementedError(f"{u.op} is not translated to z3")
        term, constraint = ret
        if constraint is not None:
            solver.add(constraint)
        terms[u] = term
    return [terms[u] for u in uops]
