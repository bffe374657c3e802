"""Spec of the index tables of uopgrad.symbolic, proved with z3 (prose in spec/symbolic.md §5).

Every node met while simplifying a corpus of index expressions is offered to every row of the index tables
one at a time; wherever a row rewrites a node, z3 proves the node and its rewrite equal for every value of
the variables in their ranges (under the gates of gated indices). Sampling (test_symbolic.py) checks values;
this file checks each rule for all values. The last test asserts that every row was proved at least once.
Needs z3-solver (`pip install z3-solver`); the module is skipped without it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad.dtype import Invalid
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.symbolic import pm_laws, pm_symbolic, sym
from uopgrad.symbolic_divmod import pm_div_mod
from uopgrad.symbolic_rules import pm_commutative, pm_propagate_invalid, pm_symbolic_index, pm_symbolic_simple
from uopgrad.symbolic_valid import pm_simplify_valid

z3 = pytest.importorskip("z3", reason="z3-solver is not installed (pip install z3-solver): rules not proved")
from uopgrad.z3check import uops_to_z3  # noqa: E402  (after the skip: it needs z3)

TABLES: dict[str, PatternMatcher] = {
    "pm_propagate_invalid": pm_propagate_invalid,
    "pm_symbolic_simple": pm_symbolic_simple,
    "pm_commutative": pm_commutative,
    "pm_symbolic_index": pm_symbolic_index,
    "pm_div_mod": pm_div_mod,
    "pm_simplify_valid": pm_simplify_valid,
}
IDX = dtypes.index
V = UOp.variable
FOLD = PatternMatcher(pm_laws.patterns[:1])  # constant folding: alu(c1, ..., cn) -> c
# rows whose rewrites z3's integers can't express: a bit pattern (BITCAST) or a mask of high bits
Z3_UNMODELLED = {
    ("pm_propagate_invalid", 11): "bitcast of Invalid",
    ("pm_propagate_invalid", 12): "bitcast of a gate",
    ("pm_symbolic_simple", 13): "(x & high-bit mask) >> k",
}


# ---------------------------------------------------------------------- the corpus
def hand_written() -> list[UOp]:
    """Expressions in the shapes index code takes: strided sums, div/mod by constants and by variables,
    comparisons against bounds, gates, and casts."""
    a, b, c = V("a", 0, 8), V("b", 0, 3), V("c", 0, 1)
    n, m = V("n", -10, 10), V("m", 1, 10)
    r, g = UOp.range(16, 0), UOp.range(V("s", 1, 9), 1)
    gate = (r < 10).where(r, UOp.invalid())
    ret = [
        a * 4 + b < 32,
        (a * 4 + b) // 4,
        (a * 4 + b) % 4,
        (a * 6 + 3) // 4,
        (a * 6 + 3) % 4,
        (a + 5) // 3,
        (a * 160 + b * 5 + c * 4 + 1) // 60,
        (a * 160 + b * 5 + c * 4) % 60,
        ((a % 6) // 3) + b * 0,
        (a % 12) % 4,
        ((a + b) % 8 + c) % 4,
        (n * 3 + 7) // 3,
        (n // 2) // 3,
        (n // 2 + 1) // 5,
        n // -1,
        n % n,
        n // n,
        (n ^ 5) ^ 5,
        n ^ 0,
        n ^ n,
        n & 0,
        (n * -1) < (a * -1),
        3 * (n + 2),
        -1 * (n + b),
        (a + 2) + a * 3,
        (a * 3 + b) + a,
        (b + a) + a,
        a + a * 2,
        (a * 2 + b) + a * 5,
        a * 2 + a * 5,
        (a + 3) + b,
        (a * 3) * b,
        a * 3 < 10,
        a * -3 < -4,
        a // 4 < 2,
        3 + a < 7,
        a + b + c < 1,
        ((a + b + c) < 1).logical_not(),
        a.maximum(b + 20),
        (a + 9).maximum(a),
        a % 8 + (a // 8) * 8,
        (a % 4) * 2 + (a // 4) * 8,
        ((a // 2) % 3) * 2 + (a // 6) * 6,
        ((a // 2) % 4) * 2 + (a % 2),
        r % 16,
        r // 16,
        g % V("s", 1, 9),
        g // V("s", 1, 9),
        (a * m) // m,
        (a * m + m * 3) % m,
        (a * m * 2 + m * 4) // (m * 2),
        (a * 4 + 8) // (b * 0 + 4),
        n % m,
        (a + 4) // m,
        gate * 2,
        gate + 3,
        gate < 3,
        (gate * 0),
        UOp.invalid() * 2,
        (r < 3).where(UOp.invalid(), r),
        (a < 5).where((r < 10).where(r, UOp.invalid()), b),
        (a < 5).where(b, (r < 10).where(r, UOp.invalid())),
        (r < 10).where(r, UOp.invalid()).cast(IDX),
        (r < 8).where(r // 2 + (r < 5).cast(IDX), UOp.invalid()),
        ((r < 10) & (r < 12)),
        ((r < 10) & ((r < 3).logical_not())).where(r % 16, UOp.invalid()),
        (a < 3).where(b, b),
        (a < 3).logical_not().where(b, c),
        (a < 3).where(b, c) + (a < 3).where(b * 0 + 1, 2),
        (n + (a < 3).where(b, 1)) + (a < 3).where(c, 2),
        (a < 3).where((b < 2).where(a, c), c),
        (a < 3) | (a < 3).logical_not(),
        (a < 3).where(UOp.const(dtypes.bool, True), False),
        (a < 3).where(UOp.const(dtypes.bool, False), True),
        (a < 3).cast(IDX).ne(0),
        (a < 3).cast(IDX).ne(1),
        (a < 3).cast(IDX).ne(2),
        (a < 3) * (b < 2),
        (a < 3) + (b < 2),
        (a < 3).maximum(b < 2),
        a.cast(dtypes.bool),
        (a + 3).cast(dtypes.int32),
        n.cast(dtypes.int32).cast(IDX),
        (n & -4) >> 2,
        V("z", 0, 0) + a,
        (a * 0 + 4) // (b + 1),
        ((a * 4 + 3) // 4) * 4 + ((a * 4 + 3) % 4),
        (a // 3 + 2) // 4,
        (a * 12 + b * 4 + c) // 16,
        (a * 12 + b * 4 + c) % 16,
        ((a * 4 + b) // 2) % 2,
        (a * 2 + 1) % 2,
        (n * 4 - 3) % 4,
    ]
    # fixed-width ints and bools, in ranges that never wrap
    i, j, u = V("i", -10, 10, dtypes.int32), V("j", 1, 7, dtypes.int32), V("u", 0, 255, dtypes.uint32)
    p, q = i < 3, j < 5
    ret += [
        i ^ 0,
        (i ^ j) ^ j,
        (i % j) % j,
        i ^ i,
        i & 0,
        (u & 0xFFFFFFFC) >> 2,
        i // -1,
        j // j,
        i % i,
        p * q,
        p + q,
        p.maximum(q),
        i.cast(dtypes.int32),
        i.cast(dtypes.int64).cast(dtypes.int32),
        i.cast(dtypes.bool),
        p.where(UOp.const(dtypes.bool, True), False),
        p.cast(dtypes.int32).ne(0),
        p.where(q.where(i, j), j),
        UOp(Ops.TRUNC, dtypes.int32, (i,)),
        (p & q) & True,
        (p | q) | False,
        (i.maximum(3)).maximum(5),
        i.cast(dtypes.int64) + j.cast(dtypes.int64),
        (a + 3).cast(dtypes.int32),
        UOp.range(UOp.const(IDX, 1), 2),
        (i + 3).cast(IDX).cast(dtypes.int64),
        ((a < 3) & (b < 2)) & (c < 1),
        ((a * 2 + 1) < 1).ne(True),
        (r < 10).where(r, UOp.invalid()).cast(dtypes.int32),
        (r < 10).where(r, UOp.invalid()) * V("t", 0, 5),
        V("t", 0, 5) + (r < 10).where(r, UOp.invalid()),
        V("t", 0, 5) < (r < 10).where(r, UOp.invalid()),
        -((r < 10).where(r, UOp.invalid())),
        (a < 4).where(b, (a < 4).where(c, b)),
        (j & 7) & 3,
        (p | False) | True,
        (p & True) & True,
        ((a * 2 + b * 3) < 1).ne(True),
        (p ^ q) ^ q,
        p ^ p,
        UOp(Ops.CAST, dtypes.int32, (i,)),
        UOp(Ops.NEG, IDX, ((r < 10).where(r, UOp.invalid()),)),
        UOp(Ops.NEG, IDX, (UOp.invalid(),)),
        j.cast(dtypes.bool),
        (a < 2).where(r, UOp.invalid()) + (a < 2).where(b, UOp.invalid()),
    ]
    return ret


def generated(count: int = 300, seed: int = 0) -> list[UOp]:
    """Random index expressions over three small variables (a fixed seed: the run is repeatable)."""
    rnd = random.Random(seed)
    vs = [V("x", 0, 7), V("y", -5, 5), V("w", 1, 4)]

    def expr(depth: int) -> UOp:
        if depth == 0 or rnd.random() < 0.25:
            return rnd.choice(vs) if rnd.random() < 0.7 else UOp.const(IDX, rnd.randint(-6, 16))
        x, y, k = expr(depth - 1), expr(depth - 1), rnd.choice([2, 3, 4, 6, 8, 12, -2, -3])
        build: list[Callable[[], UOp]] = [
            lambda: x + y,
            lambda: x * y,
            lambda: x * k,
            lambda: x - y,
            lambda: x + k,
            lambda: x.maximum(y),
            lambda: x // abs(k),
            lambda: x % abs(k),
            lambda: x // k,
            lambda: x % k,
            lambda: (x < y).where(x, y),
            lambda: (x * k + y) // abs(k),
            lambda: (x < k).where(x, UOp.invalid()),
        ]
        return rnd.choice(build)()

    out = []
    for _ in range(count):
        e = expr(rnd.randint(1, 4))
        out.append(e < rnd.randint(-3, 20) if rnd.random() < 0.15 else e)
    return out


def _seen_nodes(corpus: list[UOp]) -> list[UOp]:
    """Every node the full simplifier meets on the corpus (the intermediate forms too)."""
    seen: dict[UOp, None] = {}
    spy = PatternMatcher([(UPat(name="x"), lambda x: seen.update({x: None}))])  # records, rewrites nothing
    for e in corpus:
        seen.update(dict.fromkeys(e.toposort()))  # the nodes as written, before any rewrite of their sources
        try:
            graph_rewrite(e, spy + sym, name="corpus")
        except ZeroDivisionError:
            continue
    return list(seen)


def _exact(x: UOp) -> bool:
    """z3's unbounded integers model x exactly: an index or bool node, or a fixed-width int node whose
    range lies strictly inside its dtype's (it never wraps)."""
    dt = x.dtype.scalar()
    if dt in (IDX, dtypes.bool):
        return True
    g = x.src[0] if x.op is Ops.CAST else x
    if g.op is Ops.WHERE and g.src[2].op is Ops.CONST and g.src[2].arg is Invalid:
        x = g.src[1]  # a cast of a gated index: the index where the gate holds must fit
    return dt in dtypes.ints and dtypes.min(dt) < x.vmin and x.vmax < dtypes.max(dt)


def _integer_only(u: UOp) -> bool:
    """u is an integer/bool expression on nothing else, and exactly modelled by z3."""
    return all(_exact(x) for x in u.toposort())


def prove_equal(before: UOp, after: UOp) -> None:
    """before == after wherever `before` is defined (an integer division by zero has no value: spec §1)."""
    if after.op is Ops.CONST and after.arg is Invalid:
        assert any(x.arg is Invalid for x in before.toposort() if x.op is Ops.CONST), "Invalid from nothing"
        return  # a value computed from Invalid has none: any result refines it
    solver = z3.Solver()
    divisors = [u.src[1] for u in before.toposort() if u.op in (Ops.FLOORDIV, Ops.FLOORMOD)]
    lhs, rhs, *zdiv = uops_to_z3(solver, before, after, *divisors)
    solver.add(*[d != 0 for d in zdiv])
    assert solver.check(lhs != rhs) == z3.unsat, (
        f"not equal:\n{before.render(simplify=False)}\n"
        f"{after.render(simplify=False)}\ncounterexample: {solver.model()}"
    )


@functools.cache
def corpus_nodes() -> tuple[UOp, ...]:
    return tuple(u for u in _seen_nodes(hand_written() + generated()) if _integer_only(u))


@functools.cache
def proved_rows(table: str) -> dict[int, int]:
    """Row -> how many rewrites of the corpus it made, each proved (a failed proof raises). Cached, so the
    last test needs no state from the others (it works under pytest-xdist too)."""
    rows = [PatternMatcher([row]) for row in TABLES[table].patterns]
    proved: dict[int, int] = {}
    for u in corpus_nodes():
        for i, row in enumerate(rows):
            try:
                after = row.rewrite(u)
            except ZeroDivisionError:
                continue
            if after is None or not isinstance(after, UOp):
                continue
            after = graph_rewrite(after, FOLD)  # a rewrite may leave c1 op c2 to constant folding
            if not _integer_only(after):
                continue
            try:
                prove_equal(u, after)
            except NotImplementedError:  # an op z3 has no integer form of (x ^ 5): not provable here
                continue
            proved[i] = proved.get(i, 0) + 1
    return proved


@pytest.mark.parametrize("table", list(TABLES))
def test_every_rewrite_of_the_table_is_proved_by_z3(table: str) -> None:
    assert proved_rows(table), f"no row of {table} rewrote the corpus"


def test_simplify_of_the_corpus_is_proved_by_z3() -> None:
    """Whole simplifications, not just single steps: the simplified corpus equals the corpus."""
    for e in hand_written() + generated(60, seed=1):
        if _integer_only(e) and not any(x.op in (Ops.XOR, Ops.SHR) for x in e.toposort()):  # no z3 form
            prove_equal(e, graph_rewrite(e, pm_symbolic))


def test_every_row_was_proved() -> None:
    """Each row of the index tables rewrote some node of the corpus, and z3 proved the rewrite."""
    dead = [
        f"{t} row {i}: {TABLES[t].patterns[i][0]!r}"[:200]
        for t in TABLES
        for i in range(len(TABLES[t].patterns))
        if i not in proved_rows(t) and (t, i) not in Z3_UNMODELLED
    ]
    assert not dead, f"{len(dead)} rows never proved:\n" + "\n".join(dead)
