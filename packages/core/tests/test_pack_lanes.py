"""Lane copies of index expressions (codegen/pack.py `_lane_index`): where the split range is a plain term
of the expression, lane k is lane 0 with its constant moved, not a new simplification. That shortcut must
give the very node the full simplification gives (UOps are interned, so `is`), or the generated source would
change with it; checked on generated expressions of the index pass's normal form."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import Ops, UOp
from uopgrad.codegen.pack import _divmods, _lane_index, simplify_index, split, stride
from uopgrad.dtype import dtypes

IDX = dtypes.index


def rng(i: int, n: int) -> UOp:
    return UOp(Ops.RANGE, IDX, (UOp(Ops.CONST, IDX, (), n),), (i, "loop"))


def const(c: int) -> UOp:
    return UOp(Ops.CONST, IDX, (), c)


def slow(u: UOp, r: UOp, exprs: tuple[UOp, ...], k: int) -> UOp:
    return simplify_index(u.substitute({r: exprs[k]}, walk=True))


# a term: coefficient * (a range, or a range divided or taken modulo a constant, or a product of two ranges)
term = st.tuples(
    st.integers(-5, 40),
    st.sampled_from(["r", "a", "b", "a//", "a%", "b//", "ab"]),
    st.integers(2, 9),
)


@settings(max_examples=300, deadline=None)
@given(
    terms=st.lists(term, min_size=1, max_size=5),
    offset=st.integers(-70, 70),
    amt=st.sampled_from([2, 4, 8, 16]),
    trips=st.integers(1, 6),
)
def test_a_lane_copy_is_lane_zero_with_its_constant_moved(
    terms: list[tuple[int, str, int]], offset: int, amt: int, trips: int
) -> None:
    r, a, b = rng(0, amt * trips), rng(1, 7), rng(2, 12)
    leaves = {"r": r, "a": a, "b": b, "a//": a // const(3), "a%": a % const(3), "b//": b // const(5)}
    u = const(offset)
    for coef, leaf, _ in terms:
        node = a * b if leaf == "ab" else leaves[leaf]
        u = u + node * const(coef)
    u = u + r  # the split range is always a term
    u = simplify_index(u)  # the index pass hands the opt pass simplified expressions
    _, exprs = split(r, amt)
    exprs_t = tuple(exprs)
    for k in range(amt):
        assert _lane_index(u, r, exprs_t, k) is slow(u, r, exprs_t, k), (u, k)
    assert stride(u, r) is not None  # the shortcut's case (else both are the full simplification)


def test_lanes_of_a_range_under_a_division_take_the_full_simplification() -> None:
    r, a = rng(0, 64), rng(1, 4)
    u = simplify_index(r // const(16) * const(64) + r % const(16) + a * const(1024))
    _, exprs = split(r, 8)
    assert stride(u, r) is None  # not the shortcut's case: every lane is simplified in full
    for k in range(8):
        want = simplify_index(u.substitute({**_divmods(u, r, tuple(exprs), k), r: exprs[k]}, walk=True))
        assert _lane_index(u, r, tuple(exprs), k) is want
        # r = o*8 + k, k < 8 divides 16: r // 16 is o // 2 and r % 16 is (o % 2)*8 + k, lane k adds k
        assert want is simplify_index(u.substitute({r: exprs[k]}, walk=True))
