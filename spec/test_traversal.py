"""Properties of the traversals and rewrite engines over random DAGs (docs/semantics.md §1.2, §1.6, §1.8-1.9).

A graph is drawn as a *recipe*: a list of steps, each an op applied to earlier entries of a pool that starts
with leaves, so nodes are shared freely. Small graphs are checked against naive recursive references;
a 100 000-node chain checks that nothing recurses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

Builder = Callable[[UOp, UOp], UOp]

INT_OPS: dict[str, Builder] = {
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "sub": lambda x, y: x - y,  # ADD of a MUL by -1
    "max": lambda x, y: x.maximum(y),
}
ALL_OPS: dict[str, Builder] = {
    **INT_OPS,
    "sin": lambda x, y: x.sin(),
    "sqrt": lambda x, y: x.sqrt(),
    "where": lambda x, y: (x < y).where(x, y),
    "cast": lambda x, y: x.cast(dtypes.float),
}


def int_leaves() -> list[UOp]:
    return [*(UOp.variable(n, -4, 4) for n in "xyz"), *(UOp.const(dtypes.index, v) for v in range(4))]


@dataclass(frozen=True)
class Recipe:
    """Steps `(op name, i, j)` over a pool of leaves; the roots are pool indices (several -> a SINK)."""

    steps: tuple[tuple[str, int, int], ...]
    roots: tuple[int, ...]

    def build(self, leaves: Sequence[UOp], ops: dict[str, Builder]) -> UOp:
        pool = list(leaves)
        for name, i, j in self.steps:
            pool.append(ops[name](pool[i], pool[j]))
        roots = [pool[r] for r in self.roots]
        return roots[0] if len(roots) == 1 else roots[0].sink(*roots[1:])


@st.composite
def recipes(draw: st.DrawFn, ops: Sequence[str], n_leaves: int = 7, max_steps: int = 14) -> Recipe:
    steps = []
    for n in range(draw(st.integers(1, max_steps))):
        pool = n_leaves + n
        # bias operands towards recent nodes so the graphs get deep as well as wide
        i = draw(st.integers(0, pool - 1) | st.integers(max(0, pool - 3), pool - 1))
        j = draw(st.integers(0, pool - 1))
        steps.append((draw(st.sampled_from(ops)), i, j))
    last = n_leaves + len(steps) - 1
    roots = draw(st.lists(st.integers(0, last), max_size=2))
    return Recipe(tuple(steps), (last, *roots))


any_graph = recipes(sorted(ALL_OPS)).map(lambda r: r.build(int_leaves(), ALL_OPS))
int_recipe = recipes(sorted(INT_OPS))
int_graph = int_recipe.map(lambda r: r.build(int_leaves(), INT_OPS))


# ---------------------------------------------------------------------------------------------- references


def ref_postorder(u: UOp, gate: Callable[[UOp], bool] | None = None) -> list[UOp]:
    """Recursive DFS post-order, sources left to right: the order toposort must reproduce."""
    out: dict[UOp, None] = {}

    def visit(n: UOp) -> None:
        if n in out or (gate is not None and not gate(n)):
            return
        for s in n.src:
            visit(s)
        out[n] = None

    visit(u)
    return list(out)


def reachable(u: UOp) -> set[UOp]:
    seen, todo = {u}, [u]
    while todo:
        for s in todo.pop().src:
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return seen


def ref_fixpoint(pm: PatternMatcher | None, bpm: PatternMatcher | None) -> Callable[[UOp], UOp]:
    """Naive fixpoint: apply BPM until it stops, rewrite the sources and rebuild (a rebuilt node starts
    over), then apply PM and rewrite its answer again."""
    memo: dict[UOp, UOp] = {}

    def rw(u: UOp) -> UOp:
        if u not in memo:
            n = u
            while bpm is not None and (r := bpm.rewrite(n)) is not None:
                n = r
            new = n.replace(src=tuple(rw(s) for s in n.src))
            if new is not n:
                memo[u] = rw(new)
            else:
                memo[u] = n if pm is None or (r := pm.rewrite(n)) is None else rw(r)
        return memo[u]

    return rw


def ref_walk(pm: PatternMatcher | None, bpm: PatternMatcher | None) -> Callable[[UOp], UOp]:
    """Naive single pass: a BPM answer is final; otherwise rebuild from the sources and apply PM once."""
    memo: dict[UOp, UOp] = {}

    def rw(u: UOp) -> UOp:
        if u not in memo:
            if bpm is not None and (r := bpm.rewrite(u)) is not None:
                memo[u] = r
            else:
                new = u.replace(src=tuple(rw(s) for s in u.src))
                memo[u] = new if pm is None or (r := pm.rewrite(new)) is None else r
        return memo[u]

    return rw


# a terminating, confluent table over small ints
def fold(op: Ops) -> Callable[[UOp, UOp], UOp]:
    py: dict[Ops, Callable[[Any, Any], Any]] = {
        Ops.ADD: lambda p, q: p + q,
        Ops.MUL: lambda p, q: p * q,
        Ops.MAX: max,
    }
    return lambda x, y: x.const_like(py[op](x.arg, y.arg))


pm_fold_consts = PatternMatcher(
    [
        (UPat(Ops.ADD, src=(UPat.cvar("x"), UPat.cvar("y"))), fold(Ops.ADD)),  # c1+c2 -> c
        (UPat(Ops.MUL, src=(UPat.cvar("x"), UPat.cvar("y"))), fold(Ops.MUL)),  # c1*c2 -> c
        (UPat(Ops.MAX, src=(UPat.cvar("x"), UPat.cvar("y"))), fold(Ops.MAX)),  # max(c1,c2) -> c
    ]
)
pm_identities = PatternMatcher(
    [
        (UPat.var("x") + 0, lambda x: x),  # x+0 -> x
        (UPat.var("x") * 1, lambda x: x),  # x*1 -> x
    ]
)
pm_fold = pm_fold_consts + pm_identities


def is_normal(u: UOp, pm: PatternMatcher) -> bool:
    return all(pm.rewrite(n) is None for n in u.toposort())


# ---------------------------------------------------------------------------------------------- toposort


@given(any_graph)
def test_toposort_puts_sources_first_and_lists_each_node_once(u):
    order = list(u.toposort())
    position = {n: i for i, n in enumerate(order)}
    assert len(position) == len(order)
    assert set(order) == reachable(u)
    assert order[-1] is u
    assert all(position[s] < position[n] for n in order for s in n.src)


@given(any_graph)
def test_toposort_is_the_recursive_post_order(u):
    assert list(u.toposort()) == ref_postorder(u)


@given(any_graph, st.sampled_from([Ops.ADD, Ops.MUL, Ops.CAST, Ops.CMPLT, Ops.SIN]))
def test_toposort_gate_drops_the_node_and_what_only_it_reaches(u, blocked):
    def gate(n: UOp) -> bool:
        return n.op is not blocked

    assert list(u.toposort(gate=gate)) == ref_postorder(u, gate)


@given(any_graph)
def test_topovisit_fills_the_cache_in_toposort_order(u):
    cache: dict[UOp, int] = {}

    def count(n: UOp) -> int:  # number of paths to a leaf; reads the sources' entries
        return 1 if not n.src else sum(cache[s] for s in n.src)

    top = u.topovisit(count, cache)
    assert list(cache) == list(u.toposort())
    assert top == cache[u]


# ---------------------------------------------------------------------------------------------- interning


@given(int_recipe)
def test_rebuilding_a_graph_gives_the_same_objects(recipe):
    first, second = recipe.build(int_leaves(), INT_OPS), recipe.build(int_leaves(), INT_OPS)
    assert first is second
    rebuilt: dict[UOp, UOp] = {}
    for n in first.toposort():
        rebuilt[n] = UOp(n.op, n.dtype, tuple(rebuilt[s] for s in n.src), n.arg, n.tag)
        assert rebuilt[n] is n


# ---------------------------------------------------------------------------------------------- graph_rewrite


@given(int_graph)
def test_fixpoint_rewrite_is_a_fixpoint_and_matches_the_references(u):
    down = graph_rewrite(u, pm_fold)
    up = graph_rewrite(u, pm_fold, bottom_up=True)
    assert is_normal(down, pm_fold) and is_normal(up, pm_fold)
    assert graph_rewrite(down, pm_fold) is down
    assert graph_rewrite(up, pm_fold, bottom_up=True) is up
    assert down is ref_fixpoint(pm_fold, None)(u)
    assert up is ref_fixpoint(None, pm_fold)(u)
    assert down is up  # the table is confluent, so the direction does not matter


@given(int_graph)
def test_bidirectional_fixpoint_matches_the_reference(u):
    both = graph_rewrite(u, pm_fold_consts, bpm=pm_identities)
    assert both is ref_fixpoint(pm_fold_consts, pm_identities)(u)
    assert both is graph_rewrite(u, pm_fold)


@given(int_graph)
def test_walk_rewrite_matches_the_single_pass_reference(u):
    assert graph_rewrite(u, pm_fold, walk=True) is ref_walk(pm_fold, None)(u)
    assert graph_rewrite(u, pm_fold, bottom_up=True, walk=True) is ref_walk(None, pm_fold)(u)


@given(int_graph)
def test_fixpoint_rewrite_preserves_the_value(u):
    env = {"x": 3, "y": -2, "z": 1}
    assert evaluate(graph_rewrite(u, pm_fold), env) == evaluate(u, env)


def evaluate(u: UOp, env: dict[str, int]) -> int:
    py: dict[Ops, Callable[..., int]] = {
        Ops.ADD: lambda p, q: p + q,
        Ops.MUL: lambda p, q: p * q,
        Ops.MAX: max,
    }
    vals: dict[UOp, int] = {}
    for n in u.toposort():
        if n.op is Ops.CONST:
            vals[n] = n.arg
        elif n.op is Ops.DEFINE_VAR:
            vals[n] = env[n.arg[0]]
        elif n.op is Ops.SINK:
            vals[n] = hash(tuple(vals[s] for s in n.src))
        else:
            vals[n] = py[n.op](*(vals[s] for s in n.src))
    return vals[u]


# ---------------------------------------------------------------------------------------------- substitute

params = [UOp.param(i, dtypes.float, ()) for i in range(4)]
float_leaves = [*params, *(UOp.const(dtypes.float, v) for v in (0.5, 2.0, 3.0))]


@given(recipes(sorted(ALL_OPS)), st.permutations(range(4)))
def test_walk_substitute_renames_simultaneously(recipe, perm):
    u = recipe.build(float_leaves, ALL_OPS)
    renamed = [params[p] for p in perm] + float_leaves[4:]
    mapping = {params[i]: params[p] for i, p in enumerate(perm)}
    assert u.substitute(mapping, walk=True) is recipe.build(renamed, ALL_OPS)


@given(recipes(sorted(ALL_OPS)))
def test_shift_renaming_p0_p1_p2(recipe):
    u = recipe.build(float_leaves, ALL_OPS)
    shift = {params[0]: params[1], params[1]: params[2]}
    shifted = [params[1], params[2], *float_leaves[2:]]
    assert u.substitute(shift, walk=True) is recipe.build(shifted, ALL_OPS)
    chained = [params[2], params[2], *float_leaves[2:]]  # the fixpoint form follows p0 -> p1 -> p2
    assert u.substitute(shift) is recipe.build(chained, ALL_OPS)


# ---------------------------------------------------------------------------------------------- deep graphs

CHAIN = 100_000


def chain(leaf: UOp, steps: int, with_identities: bool) -> UOp:
    x = leaf
    for i in range(steps):
        x = x * 1 if with_identities and i % 2 else x + 1
    return x


def test_a_100k_chain_needs_no_recursion():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default, whatever the test runner set
    try:
        p, q = UOp.variable("p", 0, 9), UOp.variable("q", 0, 9)
        u = chain(p, CHAIN, with_identities=True)
        order = u.toposort()
        assert len(order) == CHAIN + 2  # the chain, p and one shared CONST 1
        plain = chain(p, CHAIN // 2, with_identities=False)
        pm_mul1 = PatternMatcher([(UPat.var("x") * 1, lambda x: x)])  # x*1 -> x
        assert graph_rewrite(u, pm_mul1) is plain
        assert graph_rewrite(u, pm_mul1, bottom_up=True) is plain
        assert graph_rewrite(u, pm_mul1, walk=True) is plain
        renamed = chain(q, CHAIN, with_identities=True)
        assert u.substitute({p: q}) is renamed
        assert u.substitute({p: q}, walk=True) is renamed
    finally:
        sys.setrecursionlimit(old)
