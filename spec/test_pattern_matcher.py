"""Spec of UPat matching and PatternMatcher rule selection (docs/semantics.md §1.7, §4.5).

`hit(pat, u)` asks a one-rule PatternMatcher, so early reject and rule order are part of every check;
`UPat.match` is used where the list of binding dicts itself is the subject. `UPat.match` is the model of
matching (an interpreter); the last section holds the compiled matcher that rule tables run to it, over
random patterns and graphs.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

a, b = UOp.variable("a", 0, 9), UOp.variable("b", 0, 9)
HIT = "hit"


def k(v: Any, dtype: Any = dtypes.int) -> UOp:
    return UOp.const(dtype, v)


def hit(pat: UPat, u: UOp) -> bool:
    """Whether a one-rule table (answering HIT whatever the bindings) rewrites `u`."""
    return PatternMatcher([(pat, lambda **_: HIT)]).rewrite(u) == HIT


# ---------------------------------------------------------------------------------------------- basics


def test_dtype_filter():
    pat = UPat(Ops.CONST, dtype=dtypes.float)
    assert hit(pat, k(1.0, dtypes.float))
    assert not hit(pat, k(1))


def test_any():
    pat = UPat.any(UPat(Ops.CONST, arg=1), UPat(Ops.CONST, arg=2))
    assert hit(pat, k(1)) and hit(pat, k(2))
    assert not hit(pat, k(3))


def test_any_concatenates_the_alternatives():
    pat = UPat.any(UPat(Ops.ADD, name="x"), UPat(name="x"))
    assert len(pat.match(a + b, {})) == 2
    assert len(pat.match(a, {})) == 1


def test_allow_any_len_with_two_sources():
    pat = UPat(Ops.SINK, src=(UPat(Ops.NOOP), UPat(Ops.NOOP)), allow_any_len=True)
    noop = UOp(Ops.NOOP)
    assert hit(pat, noop.sink(noop))
    assert hit(pat, noop.sink(noop, noop))
    assert not hit(pat, noop.sink())


def test_ctx_rule_fires_once():
    fired: list[UOp] = []

    def add_device(ctx: str, c: UOp) -> UOp:
        fired.append(c)
        return c.replace(src=(UOp(Ops.DEVICE, arg=ctx),))

    pm_device = PatternMatcher([(UPat(Ops.CONST, src=(), name="c"), add_device)])  # CONST() -> CONST(DEVICE)
    out = graph_rewrite(k(1), pm_device, ctx="CPU")
    assert out is UOp(Ops.CONST, dtypes.int, (UOp(Ops.DEVICE, arg="CPU"),), 1)
    assert len(fired) == 1
    assert pm_device.rewrite(out, "CPU") is None
    assert graph_rewrite(out, pm_device, ctx="CPU") is out and len(fired) == 1


def test_op_set():
    pat = UPat((Ops.ADD, Ops.MAX))
    assert hit(pat, a + b) and hit(pat, a.maximum(b))
    assert not hit(pat, a * b)


def test_arg_compares_with_python_equality():
    assert hit(UPat(Ops.CONST, arg=0), k(0.0, dtypes.float))
    assert hit(UPat(Ops.CONST, arg=False), k(False, dtypes.bool))
    assert hit(UPat(Ops.CONST, arg=0), k(False, dtypes.bool))
    assert not hit(UPat(Ops.CONST, arg=1), k(0))


def test_arg_none_means_any_arg():
    # a pattern can't ask for `arg is None`: None is "not inspected"
    assert hit(UPat(Ops.CONST, arg=None), k(7))


def test_max_matches():
    pat = UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y")))
    assert hit(pat, a.maximum(b))


# ---------------------------------------------------------------------------------------------- source forms


def test_permutation_list_source():
    def one_or_minus_one(c: UOp) -> str | None:
        return HIT if c.arg in (1, -1) else None

    pm_perm = PatternMatcher(
        [(UPat(Ops.MUL, src=[UPat(Ops.CONST, name="c"), UPat(Ops.CONST, arg=2)]), one_or_minus_one)]
    )
    for u in (k(1) * k(2), k(2) * k(1), k(-1) * k(2), k(2) * k(-1)):
        assert pm_perm.rewrite(u) == HIT
    assert pm_perm.rewrite(k(2) * k(2)) is None


def test_permutation_list_gives_one_binding_per_order():
    pat = UPat(Ops.ADD, src=[UPat.var("p"), UPat.var("q")])
    got = [(m["p"], m["q"]) for m in pat.match(a + b, {})]
    assert got == [(a, b), (b, a)]


def test_list_of_one_repeated_pattern_tries_one_order():
    x = UPat.var("x")
    assert UPat.var("x") is x  # memoised
    assert len(UPat(Ops.ADD, src=[x, x]).match(a + a, {})) == 1


def test_duplicate_name_requires_the_same_node():
    pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
    assert hit(pat, a + a)
    assert not hit(pat, a + b)
    assert hit(pat, UOp.const(dtypes.int, 3) + UOp.const(dtypes.int, 3))  # interned: one node


def test_single_dtype_and_dtype_set():
    f32 = UPat(dtype=dtypes.float32)
    assert hit(f32, k(1.0, dtypes.float32))
    assert not hit(f32, k(1.0, dtypes.float16))
    both = UPat(dtype=(dtypes.float16, dtypes.float32))
    assert hit(both, k(1.0, dtypes.float32)) and hit(both, k(1.0, dtypes.float16))
    assert not hit(both, k(1))


def test_dtype_matches_the_scalar_of_a_vector():
    assert hit(UPat(dtype=dtypes.float), UOp(Ops.VCONST, dtypes.float.vec(2), (), (1.0, 2.0)))


def test_tuple_source_needs_the_exact_length():
    assert not hit(UPat(Ops.ADD, src=(UPat.var("x"),)), a + b)
    assert hit(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), a + b)


def test_repeat_source_applies_to_every_source():
    pat = UPat(Ops.SINK, src=UPat(Ops.CONST))
    assert hit(pat, k(1).sink(k(2), k(3)))
    assert not hit(pat, k(1).sink(a))


def test_allow_any_len_with_a_one_element_prefix():
    pat = UPat(Ops.SINK, src=(UPat(Ops.CONST, name="first"),), allow_any_len=True)
    [m] = pat.match(k(1).sink(a, b), {})
    assert m["first"] is k(1)
    assert not hit(pat, a.sink(k(1)))


def test_nested_permutations_with_a_shared_name():
    pat = UPat(Ops.ADD, src=[UPat(Ops.ADD, src=[UPat.cvar("x"), UPat.cvar("y")]), UPat.cvar("y")])
    assert hit(pat, (k(1) + k(2)) + k(1))
    assert hit(pat, (k(2) + k(1)) + k(1))
    assert hit(pat, k(1) + (k(2) + k(1)))
    assert not hit(pat, (k(1) + k(2)) + k(3))


def test_plain_variables_fit_last_with_the_same_result():
    # a plain variable and a node that names the same variable inside: one binding, whichever comes first
    pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c")))))
    assert hit(pat, a + a * 2)
    assert not hit(pat, a + b * 2)
    assert not hit(pat, a + (a + 2))
    [m] = pat.match(a + a * 2, {})
    assert m == {"x": a, "c": k(2, dtypes.index)}
    assert PatternMatcher([(pat, lambda **kw: kw)]).rewrite(a + a * 2) == m
    plus0 = UPat.var("x") + 0  # both orders of a permutation, the variable first in one of them
    assert PatternMatcher([(plus0, lambda x: x)]).rewrite(a + 0) is a
    assert PatternMatcher([(plus0, lambda x: x)]).rewrite(k(0, dtypes.index) + b) is b
    assert not hit(plus0, a + 1)


def test_src_none_does_not_inspect_sources():
    assert hit(UPat(Ops.ADD), a + b)
    assert hit(UPat(Ops.SINK), UOp(Ops.SINK))


# ---------------------------------------------------------------------------------------------- helpers


def test_cvar_matches_const_and_vconst():
    assert hit(UPat.cvar("c"), k(1))
    assert hit(UPat.cvar("c"), UOp(Ops.VCONST, dtypes.int.vec(2), (), (1, 2)))
    assert not hit(UPat.cvar("c"), a)


def test_named_and_or_casted():
    pat = UPat(Ops.DEFINE_VAR).or_casted("v")
    assert hit(pat, a) and hit(pat, a.cast(dtypes.int))
    assert [m["v"] for m in UPat(Ops.DEFINE_VAR).named("v").match(a, {})] == [a]


def test_pattern_arithmetic_builds_alu_patterns():
    x = UPat.var("x")
    add0 = x + 0
    assert add0.op == {Ops.ADD} and isinstance(add0.src, list)  # commutative: both orders
    assert hit(add0, a + 0) and hit(add0, 0 + a)
    assert (x < UPat.var("y")).dtype == {dtypes.bool}
    sub = x - 1
    assert hit(sub, a - 1)  # a - 1 is a + (1 * -1): the pattern is built the same way


def test_ctx_is_not_a_pattern_name():
    with pytest.raises(ValueError):
        UPat(name="ctx")


# ---------------------------------------------------------------------------------------------- rule choice


def test_earlier_rules_win_and_add_concatenates():
    pm_first = PatternMatcher([(UPat(Ops.CONST), lambda: "first")])
    pm_second = PatternMatcher([(UPat(Ops.CONST), lambda: "second")])
    assert (pm_first + pm_second).rewrite(k(1)) == "first"
    assert (pm_second + pm_first).rewrite(k(1)) == "second"
    assert len(pm_first + pm_second) == 2


def test_none_tries_the_next_binding_then_the_next_rule():
    calls: list[tuple[UOp, UOp]] = []

    def second_order_only(p: UOp, q: UOp) -> str | None:
        calls.append((p, q))
        return "rule1" if p is b else None

    pm_two = PatternMatcher(
        [
            (UPat(Ops.ADD, src=[UPat.var("p"), UPat.var("q")]), second_order_only),
            (UPat(Ops.ADD), lambda: "rule2"),
        ]
    )
    assert pm_two.rewrite(a + b) == "rule1"
    assert calls == [(a, b), (b, a)]
    assert pm_two.rewrite(a + a) == "rule2"


def test_returning_the_input_is_no_rewrite_and_the_next_rule_runs():
    u = a + b
    calls: list[UOp] = []

    def give_back(p: UOp, q: UOp) -> UOp:
        calls.append(p)
        return u

    pm_self = PatternMatcher(
        [
            (UPat(Ops.ADD, src=[UPat.var("p"), UPat.var("q")]), give_back),
            (UPat(Ops.ADD), lambda: "next"),
        ]
    )
    assert pm_self.rewrite(u) == "next"
    assert calls == [a]  # the rule was decided by its first binding: the second order is not tried
    assert PatternMatcher(pm_self.patterns[:1]).rewrite(u) is None


def test_any_python_value_can_be_returned():
    pm_tuple = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: (c, None))])
    assert pm_tuple.rewrite(k(1)) == (k(1), None)


def test_fn_gets_every_binding_and_ctx_only_if_it_asks():
    got: dict[str, Any] = {}

    def with_ctx(ctx: Any, x: UOp, y: UOp) -> None:
        got.update(ctx=ctx, x=x, y=y)

    PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), with_ctx)]).rewrite(a + b, ctx=42)
    assert got == {"ctx": 42, "x": a, "y": b}

    def missing_y(x: UOp) -> None:
        return None

    with pytest.raises(TypeError):
        PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("y"))), missing_y)]).rewrite(a + b)


def test_no_rule_for_the_op_gives_none():
    assert PatternMatcher([(UPat(Ops.MUL), lambda: HIT)]).rewrite(a + b) is None
    assert PatternMatcher([]).rewrite(a) is None


def test_early_reject_quirk_with_a_repeat_source():
    pat = UPat(Ops.SINK, src=UPat(Ops.CONST), name="x")
    empty = UOp(Ops.SINK)
    assert pat.match(empty, {}) == [{"x": empty}]  # the bare matcher accepts zero sources
    assert not hit(pat, empty)  # but the matcher requires a CONST among the sources first
    assert hit(pat, k(1).sink())


def test_early_reject_is_a_set_test_so_permutations_still_match():
    # the required ops {CONST, DEFINE_VAR} are compared as a set with the ops of the node's sources
    pat = UPat(Ops.ADD, src=[UPat(Ops.CONST), UPat(Ops.DEFINE_VAR)])
    one = k(1, dtypes.index)
    assert hit(pat, one + a) and hit(pat, a + one)
    assert not hit(pat, a + b)


def test_a_repeated_source_pattern_that_binds_is_refused_by_the_compiled_matcher():
    # the number of ways would depend on the number of sources: `match` models it, tables refuse it
    pat = UPat(Ops.SINK, src=UPat(Ops.CONST, name="c"))
    assert pat.match(k(1).sink(k(1)), {}) == [{"c": k(1)}]
    with pytest.raises(ValueError, match="repeated source"):
        PatternMatcher([(pat, lambda c: c)])


def test_names_that_are_no_identifiers_are_passed_as_keywords():
    pat = UPat(Ops.ADD, src=(UPat.var("if"), UPat.var("a b")))
    assert PatternMatcher([(pat, lambda **kw: kw)]).rewrite(a + b) == {"if": a, "a b": b}


# ---------------------------------------------------------------------------------------------- the oracle
# random graphs over a few ops, and random patterns (some cut from those graphs, so that they fit)

_NAMES = ("x", "y", "z", "if")
_DTYPES = (dtypes.int, dtypes.float, dtypes.bool, dtypes.int.vec(2))
_leaf = st.one_of(st.sampled_from([a, b]), st.builds(k, st.integers(0, 2), st.sampled_from(_DTYPES)))


def _node(op: Ops, dtype: Any, src: tuple[UOp, ...]) -> UOp:
    return UOp(op, dtype, src)


graphs = st.recursive(
    _leaf,
    lambda kids: st.builds(
        _node,
        st.sampled_from([Ops.ADD, Ops.MUL, Ops.WHERE, Ops.CAST, Ops.SINK]),
        st.sampled_from(_DTYPES),
        st.lists(kids, max_size=3).map(tuple),
    ),
    max_leaves=8,
)


@st.composite
def patterns(draw: st.DrawFn, u: UOp | None = None, depth: int = 0) -> UPat:
    """A pattern; where `u` is given, mostly one that fits `u` (cut from it, with shuffled or loosened
    parts), sometimes a random one."""
    name = draw(st.none() | st.sampled_from(_NAMES))
    kinds = ["var", "node", "node", "list", "any", "rep"] if depth < 3 else ["var", "node"]
    kind = draw(st.sampled_from(kinds))
    fit = u is not None and draw(st.integers(0, 5)) > 0
    op = u.op if fit else draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.CONST, Ops.SINK, Ops.DEFINE_VAR]))
    ops = draw(st.sampled_from([None, op, (op, Ops.CAST)]))
    dtype = draw(st.none() | st.just(u.dtype.scalar() if fit else dtypes.int) | st.sampled_from(_DTYPES))
    arg = u.arg if fit and u.op is Ops.CONST and draw(st.booleans()) else None
    srcs = u.src if fit else tuple(None for _ in range(draw(st.integers(0, 2))))
    kids = tuple(draw(patterns(s, depth + 1)) for s in srcs)
    if kind == "var":
        return UPat.var(name)
    if kind == "list":
        return UPat(ops, dtype, list(kids), arg, name)
    if kind == "any":
        return (
            UPat.any(UPat(ops, dtype, kids, arg), draw(patterns(u, depth + 1))).named(name)
            if name
            else UPat.any(UPat(ops, dtype, kids, arg), draw(patterns(u, depth + 1)))
        )
    if kind == "rep":  # one way and no names: what the compiled matcher takes
        rep = UPat(draw(st.sampled_from([None, Ops.CONST, (Ops.CONST, Ops.ADD)])))
        return UPat(ops, dtype, rep, arg, name)
    any_len = draw(st.booleans()) and len(kids) > 0
    return UPat(ops, dtype, kids[:-1] if any_len else kids, arg, name, allow_any_len=any_len)


def _quirk(pat: UPat, u: UOp) -> bool:
    """The early reject of a repeated source pattern of one op on a node without sources (spec §2)."""
    rep = pat.src
    return (
        isinstance(rep, UPat) and rep.op is not None and len(rep.op) == 1 and not u.src and pat.any_of is None
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[UPat, UOp]:
    u = draw(graphs)
    return draw(patterns(draw(st.sampled_from(list(u.toposort()))) if draw(st.booleans()) else u)), u


@given(cases())
def test_the_compiled_matcher_finds_what_match_finds_in_the_same_order(case: tuple[UPat, UOp]) -> None:
    pat, u = case
    seen: list[dict[str, UOp]] = []
    pm = PatternMatcher([(pat, lambda **kw: seen.append(kw))])  # None: on to the next way
    for n in u.toposort():
        seen.clear()
        pm.rewrite(n)
        assert seen == ([] if _quirk(pat, n) else pat.match(n, {})), (pat, n)
