"""Interning under threads (issue 32, item 7): threads that build the same graphs at once, while others drop
theirs and the collector runs in any of them, still get exactly one node per structure.

Each round, 8 threads start together and build the round's shared graphs (each thread in its own order),
a graph of their own on top of them, and a throwaway copy of the shared ones kept in a reference cycle, so
that those nodes die in whichever thread next runs the collector (some threads force it mid-round) while
others build the same keys. After the round: no thread raised, no weakref callback failed, every thread
holds the very same root for each shared graph, and every live node is its key's entry in the intern table
(so no second node of one structure exists). The switch interval is made tiny to interleave the threads
at nearly every bytecode.
"""

from __future__ import annotations

import gc
import random
import sys
import threading
from collections.abc import Callable
from typing import Any

from uopgrad import UOp, dtypes
from uopgrad.ops import Ops
from uopgrad.uop import UOpMetaClass

THREADS, ROUNDS, SHARED, NODES = 8, 4, 3, 1000
BINARY = (Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB)


def build(seed: int, n: int, leaves: list[UOp] | None = None, order: int = 0) -> UOp:
    """A random DAG of n int nodes over 16 constants (or the given leaves), the same for the same seed; its
    constants are built in an order that depends on `order`, so that threads meet in different places."""
    rng = random.Random(seed)
    consts = list(range(16))
    random.Random(order).shuffle(consts)
    built = {c: UOp(Ops.CONST, dtypes.int, (), seed * 100 + c, "intern_threads") for c in consts}
    nodes = list(leaves) if leaves else [built[c] for c in range(16)]
    for _ in range(n):
        a, b = rng.choice(nodes[-64:]), rng.choice(nodes)
        nodes.append(UOp(rng.choice(BINARY), dtypes.int, (a, b)))
    return UOp(Ops.SINK, dtypes.void, tuple(nodes[-8:]))


def not_interned(roots: list[UOp]) -> list[UOp]:
    """The live nodes under roots that are not their own key's entry in the intern table."""
    cache = UOpMetaClass.ucache
    return [
        u
        for r in roots
        for u in r.toposort()
        if (ref := cache.get((u.op, u.dtype, u.src, u.arg, u.tag))) is None or ref() is not u
    ]


def stress(rounds: int = ROUNDS, threads: int = THREADS) -> list[str]:
    """Run the rounds; the problems found (empty when interning held)."""
    problems: list[str] = []
    failed_callbacks: list[Any] = []
    old_hook: Callable[[Any], Any] = sys.unraisablehook
    old_interval = sys.getswitchinterval()
    sys.unraisablehook = failed_callbacks.append  # an exception in a weakref callback is reported here
    sys.setswitchinterval(1e-6)
    try:
        for rnd in range(rounds):
            start = threading.Barrier(threads)
            shared: list[list[UOp]] = [[] for _ in range(threads)]
            own: list[UOp | None] = [None] * threads
            errors: list[BaseException] = []

            def work(
                i: int,
                rnd: int = rnd,
                start: threading.Barrier = start,
                shared: list[list[UOp]] = shared,
                own: list[UOp | None] = own,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    start.wait(30)
                    seeds = [rnd * 10 + s for s in range(SHARED)]
                    random.Random(i).shuffle(seeds)
                    roots = {s: build(s, NODES, order=i) for s in seeds}
                    shared[i] = [roots[rnd * 10 + s] for s in range(SHARED)]
                    junk: list[Any] = [build(rnd * 10 + s, NODES // 2, order=i + 1) for s in range(SHARED)]
                    junk.append(junk)  # a cycle: these nodes die in whichever thread collects next
                    del junk
                    own[i] = build(1000 + rnd * 100 + i, NODES // 2, leaves=list(shared[i][0].src), order=i)
                    if i % 3 == 0:
                        gc.collect()  # callbacks run here, in this thread, while the others build
                except BaseException as e:  # reported by the main thread
                    errors.append(e)  # noqa: B023  (the round's own list, bound as a default)

            workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
            for t in workers:
                t.start()
            for t in workers:
                t.join(60)
            gc.collect()
            if any(t.is_alive() for t in workers):
                return [f"round {rnd}: a thread did not finish"]
            problems += [f"round {rnd}: {e!r}" for e in errors]
            for s in range(SHARED):
                if (roots := len({id(r[s]) for r in shared})) != 1:
                    problems.append(f"round {rnd}: shared graph {s} has {roots} roots")
            roots = [r for rs in shared for r in rs] + [r for r in own if r is not None]
            if bad := not_interned(roots):
                problems.append(f"round {rnd}: {len(bad)} live nodes are not their key's entry (duplicates)")
            if build(rnd * 10, NODES) is not shared[0][0]:
                problems.append(f"round {rnd}: building a shared graph again gives another root")
    finally:
        sys.setswitchinterval(old_interval)
        sys.unraisablehook = old_hook
    problems += [f"weakref callback failed: {u.exc_value!r}" for u in failed_callbacks]
    return problems


def test_threads_building_equal_graphs_get_one_node_per_structure() -> None:
    assert stress() == []
