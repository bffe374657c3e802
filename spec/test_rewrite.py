"""Spec of graph_rewrite's engines (fixpoint and walk), `substitute`, visit orders, guards and BottomUpGate.

Re-expresses docs/semantics.md §4.5 (the engine, substitute and bottom-up gate checks) together with §1.8-1.9.
The constant-folding check of §4.5 needs the symbolic table and lives with it.
"""

from __future__ import annotations

from typing import Any

import pytest

from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from uopgrad.rewrite import STACK_LIMIT, BottomUpGate

# float variables, so that sin/sqrt build one node each (no CAST in front)
a, b, c, d = (UOp.variable(n, 0.0, 1.0, dtypes.float) for n in "abcd")
one, two = UOp.const(dtypes.int, 1), UOp.const(dtypes.int, 2)
three, four = UOp.const(dtypes.int, 3), UOp.const(dtypes.int, 4)

pm_map = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x))])  # x -> ctx[x] (catch-all lookup)
pm_bounce = PatternMatcher(
    [
        (UPat(Ops.CONST, arg=3, name="x"), lambda x: x.const_like(4)),  # 3 -> 4
        (UPat(Ops.CONST, arg=4, name="x"), lambda x: x.const_like(3)),  # 4 -> 3
    ]
)
pm_keep_const = PatternMatcher([(UPat(Ops.CONST, name="x"), lambda x: x)])  # x -> x: "no rewrite"


def label(u: UOp) -> Any:
    """A short name for a node of the `1+2` examples: the constant's value or the op."""
    return u.arg if u.op is Ops.CONST else u.op


def recorder(log: list[Any], tag: str | None = None) -> PatternMatcher:
    """A catch-all rule that appends each node it is offered to `log` and never rewrites."""

    def note(x: UOp) -> None:
        log.append(label(x) if tag is None else (label(x), tag))

    return PatternMatcher([(UPat(name="x"), note)])


# ---------------------------------------------------------------------------------------------- substitute

SUBSTITUTE_CASES = {
    "simple": (lambda: a + 4, lambda: {a: b}, lambda: b + 4),
    "double": (lambda: (a + 4) + b, lambda: {a: c, b: c}, lambda: (c + 4) + c),
    "diamond": (lambda: (a + 4) + (a + 5), lambda: {a: b}, lambda: (b + 4) + (b + 5)),
    "sin": (lambda: a.sin().sin(), lambda: {a.sin(): b}, lambda: b.sin()),
    "sin_to_sqrt": (lambda: a.sin().sin(), lambda: {a.sin(): a.sqrt()}, lambda: a.sqrt().sin()),
    # the fixpoint goes on into the replacement: sqrt(sin(a)) has sin(a) inside, which becomes sqrt(a)
    "double_sin_to_sqrt": (
        lambda: a.sin().sin(),
        lambda: {a.sin(): a.sqrt(), a.sin().sin(): a.sin().sqrt()},
        lambda: a.sqrt().sqrt(),
    ),
    "tagged_replace": (lambda: (a + 4).rtag(1), lambda: {a: b}, lambda: (b + 4).rtag(1)),
}


@pytest.mark.parametrize("case", SUBSTITUTE_CASES)
def test_substitute_table(case):
    build, mapping, expected = SUBSTITUTE_CASES[case]
    assert build().substitute(mapping()) is expected()


def test_substitute_with_only_identity_entries_runs_nothing():
    ran = []
    extra = recorder(ran)
    u = a + 4
    assert u.substitute({a: a}, extra_pm=extra) is u
    assert ran == []


def test_substitute_fixpoint_looks_into_replacements():
    # {a: b+c, b: d}: the replacement b+c is itself substituted
    assert (a + 4).substitute({a: b + c, b: d}) is (d + c) + 4


def test_substitute_walk_does_not_look_into_replacements():
    assert (a + 4).substitute({a: b + c, b: d}, walk=True) is (b + c) + 4


def test_substitute_walk_renames_simultaneously():
    p0, p1, p2 = (UOp.param(i, dtypes.float, ()) for i in range(3))
    u = p0 * p1 + p1
    assert u.substitute({p0: p1, p1: p2}, walk=True) is p1 * p2 + p2
    # the fixpoint form chains the renames: p0 -> p1 -> p2
    assert u.substitute({p0: p1, p1: p2}) is p2 * p2 + p2


def test_substitute_fixpoint_rejects_a_renaming_cycle():
    p0, p1 = UOp.param(0, dtypes.float, ()), UOp.param(1, dtypes.float, ())
    with pytest.raises(RuntimeError):
        (p0 + p1).substitute({p0: p1, p1: p0})
    assert (p0 + p1).substitute({p0: p1, p1: p0}, walk=True) is p1 + p0


# ---------------------------------------------------------------------------------------------- recursion


@pytest.mark.parametrize("bottom_up", [False, True])
@pytest.mark.parametrize("walk", [False, True])
def test_rule_returning_its_input_is_no_rewrite(bottom_up, walk):
    u = one + two
    assert graph_rewrite(u, pm_keep_const, bottom_up=bottom_up, walk=walk) is u
    # the same through a composed table (the other way this project builds matchers)
    assert graph_rewrite(u, pm_keep_const + PatternMatcher([]), bottom_up=bottom_up, walk=walk) is u


@pytest.mark.parametrize("bottom_up", [False, True])
def test_bouncing_rules_raise_in_the_fixpoint_engine(bottom_up):
    with pytest.raises(RuntimeError):
        graph_rewrite(three + one, pm_bounce, bottom_up=bottom_up)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_bouncing_rules_apply_once_in_the_walk_engine(bottom_up):
    assert graph_rewrite(three, pm_bounce, bottom_up=bottom_up, walk=True) is four
    assert graph_rewrite(three + one, pm_bounce, bottom_up=bottom_up, walk=True) is four + one


def test_stack_guard_raises_past_the_limit():
    assert STACK_LIMIT == 250_000
    calls = []

    def count_up(x: UOp) -> UOp:
        calls.append(x.arg)
        return x.const_like(x.arg + 1)

    pm_count_up = PatternMatcher([(UPat(Ops.CONST, name="x"), count_up)])  # n -> n+1, never settles
    with pytest.raises(RuntimeError, match="stack"):
        graph_rewrite(UOp.const(dtypes.int, 0), pm_count_up)
    # each top-down rewrite leaves one link entry behind, so the guard fires after about STACK_LIMIT rewrites
    assert STACK_LIMIT - 10 <= len(calls) <= STACK_LIMIT + 10


# ---------------------------------------------------------------------------------------------- visit orders


def test_bidirectional_visit_order():
    log: list[Any] = []
    graph_rewrite(one + two, recorder(log, "pm"), bpm=recorder(log, "bpm"))
    assert log == [(Ops.ADD, "bpm"), (1, "bpm"), (1, "pm"), (2, "bpm"), (2, "pm"), (Ops.ADD, "pm")]


def test_top_down_is_post_order_and_bottom_up_is_pre_order():
    post: list[Any] = []
    pre: list[Any] = []
    graph_rewrite(one + two, recorder(post))
    graph_rewrite(one + two, recorder(pre), bottom_up=True)
    assert post == [1, 2, Ops.ADD]
    assert pre == [Ops.ADD, 1, 2]


def test_observed_order_with_a_shared_source():
    # A = X*Y with X = Y+Z: Y is already on the stack when X is expanded, so X does not push it again
    y, z = UOp.variable("y", 0, 9), UOp.variable("z", 0, 9)
    x = y + z
    root = x * y
    names = {root: "A", x: "X", y: "Y", z: "Z"}
    bpm_seen: list[str] = []
    pm_seen: list[str] = []
    pm_bpm = PatternMatcher([(UPat(name="u"), lambda u: bpm_seen.append(names[u]) if u in names else None)])
    pm_pm = PatternMatcher([(UPat(name="u"), lambda u: pm_seen.append(names[u]) if u in names else None)])
    graph_rewrite(root, pm_pm, bpm=pm_bpm)
    assert bpm_seen == ["A", "X", "Z", "Y"]
    assert pm_seen == ["Z", "Y", "X", "A"]
    assert [names[u] for u in root.toposort() if u in names] == ["Y", "Z", "X", "A"]


def test_each_node_is_offered_to_each_matcher_once():
    shared = a + 1.0
    root = (shared * shared) + shared.sin()
    pre: list[UOp] = []
    post: list[UOp] = []
    pm_pre = PatternMatcher([(UPat(name="x"), lambda x: pre.append(x))])
    pm_post = PatternMatcher([(UPat(name="x"), lambda x: post.append(x))])
    graph_rewrite(root, pm_post, bpm=pm_pre)
    assert sorted(map(id, pre)) == sorted(map(id, root.toposort()))
    assert sorted(map(id, post)) == sorted(map(id, root.toposort()))


def test_substitute_stops_at_a_replaced_node_and_tries_extra_pm_first():
    k = three + four
    kn, e = UOp.variable("kn", 0, 9, dtypes.int), UOp.variable("e", 0, 9, dtypes.int)
    seen: list[UOp] = []

    def visit(x: UOp) -> None:
        assert not (x.op is Ops.CONST and x.arg in (3, 4)), "looked inside a node that was replaced"
        seen.append(x)

    pm_visitor = PatternMatcher([(UPat(name="x"), visit)])
    assert (k + e).substitute({k: kn}, extra_pm=pm_visitor) is kn + e
    assert k in seen  # the visitor saw k before the mapping replaced it
    # extra_pm rules come before the mapping
    pm_e_to_kn = PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("e", 0, 9)), lambda: kn)])
    assert (k + e).substitute({e: three}, extra_pm=pm_e_to_kn) is k + kn


# ---------------------------------------------------------------------------------------------- walk engine


class TestWalkTopDown:
    def rw(self, u: UOp, mapping: dict[UOp, UOp]) -> UOp:
        return graph_rewrite(u, pm_map, ctx=mapping, walk=True)

    def test_simple(self):
        assert self.rw(a + 4, {a: b}) is b + 4

    def test_replacement_is_not_reentered(self):
        assert self.rw(a + 4, {a: b + c, b: d}) is (b + c) + 4
        assert (a + 4).substitute({a: b + c, b: d}) is (d + c) + 4
        assert graph_rewrite(a + 4, pm_map, ctx={a: b + c, b: d}) is (d + c) + 4

    def test_bounce_applies_once(self):
        assert graph_rewrite(three, pm_bounce, walk=True) is four
        with pytest.raises(RuntimeError):
            graph_rewrite(three, pm_bounce)

    def test_double(self):
        assert self.rw((a + 4) + (b + 5), {a: c, b: c}) is (c + 4) + (c + 5)

    def test_diamond(self):
        assert self.rw((a + 4) + (a + 5), {a: b}) is (b + 4) + (b + 5)

    def test_children_first(self):
        mapping = {a.sin(): a.sqrt(), a.sin().sin(): a.sin().sqrt()}
        assert self.rw(a.sin().sin(), mapping) is a.sqrt().sin()

    def test_self_referential_replacement(self):
        assert self.rw(a.sin() + 4, {a.sin(): a.sin().sqrt()}) is a.sin().sqrt() + 4

    def test_visit_order_is_post_order(self):
        log: list[Any] = []
        graph_rewrite(one + two, recorder(log), walk=True)
        assert log == [1, 2, Ops.ADD]


class TestWalkBottomUp:
    def rw(self, u: UOp, mapping: dict[UOp, UOp]) -> UOp:
        return graph_rewrite(u, pm_map, ctx=mapping, bottom_up=True, walk=True)

    def test_simple(self):
        assert self.rw(a + 4, {a: b}) is b + 4
        assert (a + 4).substitute({a: b}, walk=True) is b + 4

    def test_replacement_is_not_reentered(self):
        assert self.rw(a + 4, {a: b + c, b: d}) is (b + c) + 4

    def test_outermost_first(self):
        mapping = {a.sin(): a.sqrt(), a.sin().sin(): a.sin().sqrt()}
        assert self.rw(a.sin().sin(), mapping) is a.sin().sqrt()

    def test_bounce_applies_once(self):
        assert graph_rewrite(three, pm_bounce, bottom_up=True, walk=True) is four

    def test_visit_order_is_pre_order(self):
        log: list[Any] = []
        graph_rewrite(one + two, recorder(log), bottom_up=True, walk=True)
        assert log == [Ops.ADD, 1, 2]

    def test_unmatched_parent_falls_through_to_children(self):
        assert self.rw((a + 4) + (b + 5), {a: c, b: c}) is (c + 4) + (c + 5)


class TestWalkBidirectional:
    def test_visit_order(self):
        log: list[Any] = []
        graph_rewrite(one + two, recorder(log, "pm"), bpm=recorder(log, "bpm"), walk=True)
        assert log == [(Ops.ADD, "bpm"), (1, "bpm"), (1, "pm"), (2, "bpm"), (2, "pm"), (Ops.ADD, "pm")]

    def test_bpm_result_is_final_and_hidden_from_pm(self):
        ten = UOp.const(dtypes.int, 10)
        pm_seen: list[Any] = []
        pm_one_to_ten = PatternMatcher([(UPat(Ops.CONST, arg=1), lambda: ten)])  # 1 -> 10
        out = graph_rewrite(one + two, recorder(pm_seen), bpm=pm_one_to_ten, walk=True)
        assert out is ten + two
        assert 1 not in pm_seen and 10 not in pm_seen
        assert pm_seen == [2, Ops.ADD]


# ---------------------------------------------------------------------------------------------- ctx


@pytest.mark.parametrize("walk", [False, True])
def test_ctx_reaches_both_matchers(walk):
    ctx = {"pre": 0, "post": 0}
    seen_plain: list[Any] = []

    def pre(ctx: dict[str, int], x: UOp) -> None:
        ctx["pre"] += 1

    def post(ctx: dict[str, int], x: UOp) -> None:
        ctx["post"] += 1

    def plain(x: UOp) -> None:  # no ctx parameter: called with the bindings only
        seen_plain.append(x)

    pm_post = PatternMatcher([(UPat(name="x"), post), (UPat(name="x"), plain)])
    pm_pre = PatternMatcher([(UPat(name="x"), pre)])
    graph_rewrite(one + two, pm_post, ctx=ctx, bpm=pm_pre, walk=walk)
    assert ctx == {"pre": 3, "post": 3}
    assert len(seen_plain) == 3


# ---------------------------------------------------------------------------------------------- enter_calls

x_arg = UOp.variable("xa", 0.0, 1.0, dtypes.float)
p0 = UOp.param(0, dtypes.float, ())
c3f, c4f = UOp.const(dtypes.float, 3.0), UOp.const(dtypes.float, 4.0)
body = p0 + c3f
fn = body.call(x_arg + c3f)
fn_out = fn.gettuple(0)
pm_3_to_4 = PatternMatcher([(UPat(Ops.CONST, arg=3, name="x"), lambda x: x.const_like(4))])  # 3 -> 4


def body_of(out: UOp) -> UOp:
    """The value inside the body TUPLE of the FUNCTION under a GETTUPLE."""
    return out.src[0].src[0].src[0]


@pytest.mark.parametrize("bottom_up", [False, True])
@pytest.mark.parametrize("walk", [False, True])
def test_function_bodies_are_pinned_by_default(bottom_up, walk):
    out = graph_rewrite(fn_out, pm_3_to_4, bottom_up=bottom_up, walk=walk)
    assert body_of(out) is body
    assert out.src[0].src[1] is x_arg + c4f  # the arguments are ordinary dataflow


@pytest.mark.parametrize("bottom_up", [False, True])
@pytest.mark.parametrize("walk", [False, True])
def test_enter_calls_rewrites_bodies(bottom_up, walk):
    out = graph_rewrite(fn_out, pm_3_to_4, bottom_up=bottom_up, walk=walk, enter_calls=True)
    assert body_of(out) is p0 + c4f
    assert out.src[0].src[1] is x_arg + c4f


@pytest.mark.parametrize("walk", [False, True])
def test_pinned_bodies_are_never_visited(walk):
    seen: list[UOp] = []
    pm_seen = PatternMatcher([(UPat(name="u"), lambda u: seen.append(u))])
    graph_rewrite(fn_out, pm_seen, bpm=pm_seen, walk=walk)
    inside = set(fn.src[0].toposort()) - set(fn.src[1].toposort())
    assert inside and not inside & set(seen)


@pytest.mark.parametrize("walk", [False, True])
def test_substitute_never_enters_bodies(walk):
    assert body_of(fn_out.substitute({c3f: c4f}, walk=walk)) is body
    assert body_of(fn_out.substitute({p0: x_arg}, walk=walk)) is body
    assert fn_out.substitute({x_arg: p0}, walk=walk).src[0].src[1] is p0 + c3f


def test_pinning_overwrites_an_earlier_result_for_the_body():
    # the body TUPLE is reached as a plain source first and rewritten, then pinned when the FUNCTION is
    # expanded: the pin wins, so the SINK sees the body unchanged as well
    out = graph_rewrite(fn.src[0].sink(fn), pm_3_to_4)
    assert out.src[0] is fn.src[0]
    assert out.src[1].src[1] is x_arg + c4f


@pytest.mark.parametrize("bottom_up", [False, True])
def test_a_consumer_waiting_on_a_body_resumes_when_the_body_is_pinned(bottom_up):
    # SINK(q, fn, body) with q = SINK(body): q waits on the body (already on the stack), then fn pins it.
    # The reference (and tinygrad 0.14) lose q's waiting entry here and fail with KeyError; we release it.
    q = fn.src[0].sink()
    out = graph_rewrite(q.sink(fn, fn.src[0]), pm_3_to_4, bottom_up=bottom_up)
    assert out.src[0] is q and out.src[2] is fn.src[0]
    assert out.src[1].src[1] is x_arg + c4f


def test_walk_pins_late_too():
    # the walk engine has no waiting: q is rebuilt before fn pins the body, so only later readers see the pin
    q = fn.src[0].sink()
    out = graph_rewrite(q.sink(fn, fn.src[0]), pm_3_to_4, walk=True)
    assert out.src[0] is UOp.maketuple(p0 + c4f).sink()
    assert out.src[2] is fn.src[0]


# ---------------------------------------------------------------------------------------------- gate


def test_gate_on_a_parent_keeps_the_rule_below_from_running():
    k = UOp.variable("k", 0, 9)
    ran: list[UOp] = []

    def gate() -> None:
        raise BottomUpGate

    pm_gated = PatternMatcher(
        [
            (UPat(Ops.ADD), gate),
            (UPat(Ops.MUL, name="m"), lambda m: ran.append(m)),
        ]
    )
    u = (k * 2) + 1
    assert graph_rewrite(u, pm_gated, bottom_up=True) is u
    assert ran == []


def test_gate_fires_on_the_rewritten_node():
    k = UOp.variable("k", 0, 9)
    ran: list[UOp] = []

    def gate(m: UOp) -> None:
        raise BottomUpGate

    pm_gated = PatternMatcher(
        [
            (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2),  # x+x -> x*2
            (UPat(Ops.MUL, name="m"), gate),
            (UPat(Ops.CONST, name="n"), lambda n: ran.append(n)),
        ]
    )
    assert graph_rewrite(k + k, pm_gated, bottom_up=True) is k * 2
    assert ran == []


def test_gate_below_the_root_still_rebuilds_the_parents():
    k = UOp.variable("k", 0, 9)

    def gate(m: UOp) -> None:
        raise BottomUpGate

    pm_gated = PatternMatcher(
        [
            (UPat(Ops.MUL, name="m"), gate),
            (UPat(Ops.CONST, arg=1), lambda: UOp.const(dtypes.index, 5)),  # 1 -> 5
        ]
    )
    assert graph_rewrite((k * 1) + 1, pm_gated, bottom_up=True) is (k * 1) + 5
