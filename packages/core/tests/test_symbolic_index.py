"""Index arithmetic as a kernel author meets it: build an index expression, simplify it, read it back (render,
vmin/vmax, sym_infer), and check it against brute force over every value of its variables (the reference's
semantics: floor division, Python's %)."""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Callable

import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.errors import SymbolicDivisionError, UopgradError
from uopgrad.uop_index import sym_infer

V = UOp.variable


def brute(u: UOp) -> list[tuple[dict[str, int], int]]:
    """(assignment, value) of u for every assignment of its variables."""
    vs = u.variables()
    out = []
    for vals in itertools.product(*(range(v.arg[1], v.arg[2] + 1) for v in vs)):
        env = {v.arg[0]: x for v, x in zip(vs, vals)}
        out.append((env, sym_infer(u, env)))
    return out


CASES = [  # (expression, its simplified text) -- the reference's normal form
    (lambda a, b, c: (a * 4 + b) // 4, "a"),
    (lambda a, b, c: (a * 4 + b) % 4, "b"),
    (lambda a, b, c: a * 4 + b < 32, "(a<8)"),
    (lambda a, b, c: (a * 6 + 3) % 4, "((a+1)%2*2+1)"),
    (lambda a, b, c: (a % 4) * 2 + (a // 4) * 8, "(a*2)"),
    (lambda a, b, c: (a * 160 + b * 5 + c * 4) // 60, "(a*2+(b+a*8)//12)"),
    (lambda a, b, c: a * 2 + a * 3 + b, "(b+a*5)"),
]


@pytest.mark.parametrize("build, text", CASES)
def test_simplified_index_renders_like_the_reference_and_keeps_every_value(
    build: Callable[[UOp, UOp, UOp], UOp], text: str
) -> None:
    a, b, c = V("a", 0, 8), V("b", 0, 3), V("c", 0, 1)
    if text.startswith("(a*2+(b"):
        a, b = V("a", 0, 2), V("b", 0, 31)
    expr = build(a, b, c)
    simple = expr.simplify()
    assert simple.render(simplify=False) == text
    for env, want in brute(expr):
        assert sym_infer(simple, env) == want, env
    got = [sym_infer(simple, env) for env, _ in brute(expr)]
    assert (simple.vmin, simple.vmax) == (builtins.min(got), builtins.max(got))


@pytest.mark.parametrize(
    "lo, hi, dlo, dhi", [(-10, 0, -10, -1), (-10, 0, 1, 10), (0, 10, -10, -1), (-7, 9, 2, 2)]
)
def test_floor_div_and_mod_bounds_are_the_exact_range(lo: int, hi: int, dlo: int, dhi: int) -> None:
    x, y = V("x", lo, hi), V("y", dlo, dhi)
    for u in (x // y, x % y):
        vals = [v for _, v in brute(u)]
        assert u.vmin <= builtins.min(vals) and builtins.max(vals) <= u.vmax
    mods = [v for _, v in brute(x % y)]
    if dlo == dhi:  # a constant divisor: exactly the range
        assert ((x % y).vmin, (x % y).vmax) == (builtins.min(mods), builtins.max(mods))


def test_index_division_by_zero_raises_zero_division_error() -> None:
    a = V("a", 0, 7)
    for bad in (a // 0, a % 0, a // (a * 0)):
        with pytest.raises(ZeroDivisionError) as e:
            bad.simplify()
        assert isinstance(e.value, SymbolicDivisionError) and isinstance(e.value, UopgradError)
    # fixed-width ints keep the reference's rule: x//0 is left alone
    w = V("w", 0, 7, dtypes.int32)
    assert (w // 0).simplify() is w // 0


def test_gated_index_keeps_its_gate_through_arithmetic() -> None:
    r = UOp.range(10, 0)
    gated = (r < 5).where(r, UOp.invalid())
    assert (gated * 0).simplify() is (r < 5).where(r.const_like(0), UOp.invalid())
    assert (gated * 10).simplify() is (r < 5).where(r * 10, UOp.invalid())
    assert (UOp.invalid() + V("a", 0, 3)).simplify() is UOp.invalid()
    assert gated.get_idx() is r and gated.get_valid() is (r < 5)


def test_gcd_and_divide_exact() -> None:
    a, b = V("a", 1, 8), V("b", 1, 8)
    assert UOp.gcd(a * a * 10, b * a * 5, a * a * 5).simplify() is a * 5
    assert (a * b * 3 + a * b * b).divide_exact(a * b).simplify() is b + 3
    assert (a * 5).divide_exact(a * 10) is None and (a + 2).divide_exact(a) is None


def test_ne_builds_a_comparison_and_eq_stays_identity() -> None:
    a = V("a", 0, 10)
    assert (a != 0).op is Ops.CMPNE and a == a
    assert a.cast(dtypes.bool).simplify() is (a != 0)


def test_sym_infer_and_variables() -> None:
    a, b, c = V("a", 0, 10), V("b", 0, 10), V("c", 0, 10)
    assert sym_infer(a * b + c, {"a": 2, "b": 3, "c": 4}) == 10 and sym_infer(5, {}) == 5
    assert sym_infer(V("x", -1000, 1000) % V("y", -1000, 1000), {"x": -1, "y": -1000}) == -1
    assert sym_infer(V("s", -5, 5, dtypes.int32).bitcast(dtypes.uint32), {"s": -1}) == 0xFFFFFFFF
    assert (a % 3 + b // 5).variables() == [a, b] and (c + b + a).variables() == [a, b, c]
    assert dtypes.weakint is dtypes.index


def test_simplification_is_proved_equal_by_z3() -> None:
    z3 = pytest.importorskip("z3", reason="z3-solver is not installed (pip install z3-solver)")
    from uopgrad.z3check import uops_to_z3

    a, b = V("a", 0, 100), V("b", -7, 7)
    for expr in ((a * 12 + b + 7) // 6, (a * 12 + b + 7) % 6, (a // 3 + 2) // 4, (a * 4 + 3) // 4 < 20):
        solver = z3.Solver()
        lhs, rhs = uops_to_z3(solver, expr, expr.simplify())
        assert solver.check(lhs != rhs) == z3.unsat
    solver = z3.Solver()  # and a wrong "simplification" is refuted
    lhs, rhs = uops_to_z3(solver, (a + 1) // 2, a // 2)
    assert solver.check(lhs != rhs) == z3.sat


def test_missing_z3_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from uopgrad import z3check

    real = importlib.import_module

    def no_z3(name: str, *args: object) -> object:
        if name == "z3":
            raise ImportError("No module named 'z3'")
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib, "import_module", no_z3)
    with pytest.raises(ImportError, match="pip install z3-solver"):
        z3check.uops_to_z3(None, V("a", 0, 1))


def test_vector_constants_fold_lane_by_lane_and_invalid_lanes_stay_invalid():
    from uopgrad.dtype import Invalid

    a = UOp.const(dtypes.weakint.vec(4), (1, 1, Invalid, Invalid))
    b = UOp.const(dtypes.weakint.vec(4), (1, Invalid, 1, 1))
    assert a.op is Ops.VCONST and a.arg == (1, 1, Invalid, Invalid)
    assert (a + b).simplify() is UOp.const(dtypes.weakint.vec(4), (2, Invalid, Invalid, Invalid))
    c = UOp.const(dtypes.int.vec(3), (1, 2, 3))
    assert (c * 2).simplify() is UOp.const(dtypes.int.vec(3), (2, 4, 6))  # a scalar goes to every lane
    with pytest.raises(ValueError, match="takes 3 values"):
        UOp.const(dtypes.int.vec(3), (1, 2))
