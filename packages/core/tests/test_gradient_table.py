"""The UOp-level gradient table (docs/semantics.md §4.2, §3.3): gradients of scalar expressions in float
variables, evaluated by substituting constants and folding with the symbolic simplifier."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from uopgrad import UOp, dtypes
from uopgrad.gradient import compute_gradient
from uopgrad.uop import ssimplify

X = UOp.variable("x", -math.inf, math.inf, dtypes.float)
Y = UOp.variable("y", -math.inf, math.inf, dtypes.float)
POINTS = (-5.0, -2.0, 0.0, 2.0, 5.0)


def grads(f: UOp, *wrt: UOp) -> list[UOp]:
    g = compute_gradient(f, UOp.const(dtypes.float, 1.0), set(wrt))
    return [g[w] for w in wrt]


def at(expr: UOp, **vals: float) -> float:
    mapping = {v: v.const_like(vals[v.expr]) for v in (X, Y) if v.expr in vals}
    out = ssimplify(expr.substitute(mapping))
    assert not isinstance(out, UOp), f"did not fold to a constant:\n{out}"
    return float(out)


def same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return round(a - b, 5) == 0


@pytest.mark.parametrize(
    "name,f,expected",
    [
        ("recip", lambda x: 1.0 / x, (-0.04, -0.25, -math.inf, -0.25, -0.04)),
        ("sin", lambda x: x.sin(), (0.283662, -0.416147, 1.0, -0.416147, 0.283662)),
        ("sqrt", lambda x: x.sqrt(), (math.nan, math.nan, math.inf, 0.353553, 0.223607)),
        ("log2", lambda x: x.log2(), (-0.288539, -0.721348, math.inf, 0.721348, 0.288539)),
        ("exp2", lambda x: x.exp2(), (0.021661, 0.173287, 0.693147, 2.772589, 22.18071)),
        ("chain", lambda x: x.sin().sqrt(), (0.144837, math.nan, math.inf, -0.218204, math.nan)),
    ],
)
def test_one_input(name: str, f: Callable[[UOp], UOp], expected: tuple[float, ...]):
    (dx,) = grads(f(X), X)
    got = [at(dx, x=v) for v in POINTS]
    assert all(same(g, e) for g, e in zip(got, expected)), f"{name}: {got} != {expected}"


def _grid() -> list[tuple[float, float]]:
    return [(x, y) for x in POINTS for y in POINTS]


@pytest.mark.parametrize(
    "name,f,dfdx,dfdy",
    [
        ("add", lambda x, y: x + y, lambda x, y: 1.0, lambda x, y: 1.0),
        ("mul", lambda x, y: x * y, lambda x, y: y, lambda x, y: x),
        ("chain_binop", lambda x, y: (x * y) + x * y, lambda x, y: 2 * y, lambda x, y: 2 * x),
        (
            "big_add_sin",
            lambda x, y: x.sin() + 3.0 / y,
            lambda x, y: math.cos(x),
            lambda x, y: -math.inf if y == 0 else -3 / y**2,
        ),
        ("where", lambda x, y: (x < y).where(x, y), lambda x, y: float(x < y), lambda x, y: float(not x < y)),
    ],
)
def test_two_inputs(name, f, dfdx, dfdy):
    dx, dy = grads(f(X, Y), X, Y)
    for x, y in _grid():
        assert same(at(dx, x=x, y=y), dfdx(x, y)), f"{name} d/dx at ({x}, {y})"
        assert same(at(dy, x=x, y=y), dfdy(x, y)), f"{name} d/dy at ({x}, {y})"


def test_big_chain_at_zero():
    dx, dy = grads((1.0 / X * Y) + X * Y, X, Y)
    for x, y in _grid():
        if x == 0:
            ex = math.inf if y < 0 else (math.nan if y == 0 else -math.inf)
            ey = math.inf
        else:
            ex, ey = -y / x**2 + y, 1 / x + x
        assert same(at(dx, x=x, y=y), ex) and same(at(dy, x=x, y=y), ey), (x, y)


@pytest.mark.parametrize(
    "b,e,db,de",
    [
        (0, 0, 0, 0),
        (0, 2, 0, 0),
        (0, 1, 1, 0),
        (0, 0.5, math.inf, 0),
        (0, -2, -math.inf, -math.inf),
        (2, 3, 12, 5.545177),
        (2, 0, 0, math.log(2)),
        (3, 3, 27, 29.662532),
        (-2, 2, -4, math.nan),
        (-2, 0.5, math.nan, math.nan),
    ],
)
def test_pow_at_special_points(b: float, e: float, db: float, de: float):
    gb, ge = grads(X.pow(Y), X, Y)
    assert same(at(gb, x=b, y=e), db) and same(at(ge, x=b, y=e), de)


def test_max_ties_split_equally():
    gx, gy = grads(X.maximum(Y), X, Y)
    assert (at(gx, x=1, y=1), at(gy, x=1, y=1)) == (0.5, 0.5)
    assert (at(gx, x=2, y=1), at(gy, x=2, y=1)) == (1.0, 0.0)
    gx, gy = grads(X.minimum(Y), X, Y)
    assert (at(gx, x=1, y=1), at(gy, x=1, y=1)) == (0.5, 0.5)
