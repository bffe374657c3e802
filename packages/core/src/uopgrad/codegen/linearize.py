"""The linearizer (codegen, layer 11): a kernel graph becomes a flat list of uops inside RANGE ... END.

Every node lives in a scope: the innermost loop among the RANGEs it depends on (an END closes its range, so
a value read after END is outside that loop). That places each op in the innermost loop it needs, which hoists
loop-invariant work for free. An accumulator (DEFINE_REG) lives where its result is read, so it is
re-initialised for every iteration of the loops around its reduce. The loops form a tree (a range's parent is
the innermost range around its END); each scope is ordered by a toposort in which a nested loop is one item,
and the list is that tree, flattened.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from uopgrad.dtype import dtypes
from uopgrad.errors import LoweringError
from uopgrad.ops import Ops
from uopgrad.uop import UOp

__all__ = ["linearize"]

Scope = UOp | None  # a RANGE (its loop body) or None (the kernel's top level)
_PRIORITY = {
    Ops.PARAM: -20,
    Ops.DEFINE_VAR: -19,
    Ops.SPECIAL: -18,
    Ops.CONST: -17,
    Ops.DEFINE_LOCAL: -16,
    Ops.DEFINE_REG: -16,
    Ops.LOAD: -1,
    Ops.STORE: 1,
}


def _deepest(ranges: frozenset[UOp]) -> Scope:
    """The innermost of a set of nested ranges: ranges are numbered outside-in as they are made."""
    return max(ranges, key=lambda r: r.arg[0]) if ranges else None


class _Scopes:
    """The range each node depends on (`rset`), the loop tree (`parent`) and each node's scope (`home`)."""

    def __init__(self, nodes: list[UOp]) -> None:
        empty: frozenset[UOp] = frozenset()
        self.rset: dict[UOp, frozenset[UOp]] = {}
        self.ends: dict[UOp, UOp] = {}
        for u in nodes:
            s = empty.union(*(self.rset[x] for x in u.src)) if u.src else empty
            if u.op is Ops.RANGE:
                s = s | {u}
            elif u.op is Ops.END:
                s = s - {u.src[0]}
                self.ends[u.src[0]] = u
            self.rset[u] = s
        self.parent: dict[UOp, Scope] = {}
        for u in nodes:
            if u.op is Ops.RANGE:
                outer = self.rset[self.ends[u]] if u in self.ends else self.rset[u] - {u}
                self.parent[u] = _deepest(outer)
        self.home: dict[UOp, Scope] = {u: _deepest(self.rset[u]) for u in nodes}
        for u in nodes:  # an accumulator lives where its final value (the read after END) is
            if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_REG and u.src[-1].op is Ops.END:
                self.home[u.src[0]] = self.home[u]
        self.paths: dict[Scope, tuple[UOp, ...]] = {None: ()}

    def path(self, scope: Scope) -> tuple[UOp, ...]:
        """The loops from the outermost to `scope` (iterative; memoised)."""
        todo: list[UOp] = []
        s = scope
        while s not in self.paths:
            assert s is not None
            todo.append(s)
            s = self.parent[s]
        for r in reversed(todo):
            self.paths[r] = (*self.paths[self.parent[r]], r)
        return self.paths[scope]

    def place(self, u: UOp) -> tuple[tuple[UOp, ...], UOp]:
        """(the loops around the item `u` belongs to, that item); a RANGE and its END are their loop."""
        if u.op in (Ops.RANGE, Ops.END):
            r = u if u.op is Ops.RANGE else u.src[0]
            return self.path(self.parent[r]), r
        path = self.path(self.home[u])
        if not self.rset[u] <= set(path):
            raise LoweringError(f"the loops of {u.short()} are not nested in one another")
        return path, u


def _accumulating(end: UOp) -> bool:
    """Whether a loop only updates registers: its END closes stores into DEFINE_REGs, or the ENDs of loops
    nested in it that do only that (a reduce over several axes: a max of a whole matrix)."""
    return all(
        (s.op is Ops.STORE and s.src[0].op is Ops.DEFINE_REG) or (s.op is Ops.END and _accumulating(s))
        for s in end.src[1:]
    )


def fuse_loops(sink: UOp) -> UOp:
    """Reduce loops of one trip count in one scope that do not depend on each other become one loop (a
    max's NaN sum and its maximum read each row once). Each register still takes its own values in its own
    order, so every result keeps its bits: only the bodies' instructions interleave. The fused loop has one
    END, of all the registers' stores. Nested loops fuse outside-in: fusing two outer loops puts the loops
    inside them in one scope, where they fuse in the next round."""
    while (fused := _fuse_once(sink)) is not sink:
        sink = fused
    return sink


def _fuse_once(sink: UOp) -> UOp:
    """One round of `fuse_loops`: `sink` itself where no two loops fuse."""
    nodes = list(sink.toposort())
    ends: dict[UOp, list[UOp]] = defaultdict(list)
    for u in nodes:
        if u.op is Ops.END and u.src[0].op is Ops.RANGE:
            ends[u.src[0]].append(u)
    loops = [
        r
        for r, es in ends.items()
        if isinstance(r.arg, tuple) and r.arg[-1] == "reduce" and all(_accumulating(e) for e in es)
    ]
    if len(loops) < 2:
        return sink
    sc = _Scopes(nodes)
    groups: dict[tuple[UOp, frozenset[UOp]], list[UOp]] = defaultdict(list)
    for r in sorted(loops, key=lambda r: r.arg[0]):  # by trip count and the loops around
        groups[(r.src[0], frozenset().union(*(sc.rset[e] for e in ends[r])))].append(r)
    below = {
        r: set().union(*(e.toposort() for e in ends[r])) for rs in groups.values() if len(rs) > 1 for r in rs
    }
    sub: dict[UOp, UOp] = {}
    for rs in groups.values():
        while len(rs) > 1:
            first, rest = rs[0], rs[1:]
            merged, before = [first], set(below[first])
            for r in rest:  # not where one loop's values feed the other, even through other nodes
                if not set(ends[r]) & before and not any(e in below[r] for m in merged for e in ends[m]):
                    merged.append(r)
                    before |= below[r]
            sub.update({r: first for r in merged[1:]})
            rs = [r for r in rest if r not in merged]
    if not sub:
        return sink
    sink = sink.substitute(sub, walk=True)
    kept = set(sub.values())
    closing: dict[UOp, list[UOp]] = defaultdict(list)  # a fused loop -> its ENDs, to become one
    for u in sink.toposort():
        if u.op is Ops.END and u.src[0] in kept:
            closing[u.src[0]].append(u)
    one = {
        r: UOp(Ops.END, dtypes.void, (r, *(s for e in es for s in e.src[1:]))) for r, es in closing.items()
    }
    return sink.substitute({e: one[r] for r, es in closing.items() for e in es}, walk=True)


def linearize(sink: UOp) -> tuple[UOp, ...]:
    """The uops under `sink` (without it) in execution order: each loop a contiguous RANGE ... END, the
    sources of the SINK in their order; independent reduce loops of one trip count fused first."""
    sink = fuse_loops(sink)
    order = {u: i for i, u in enumerate(sink.toposort())}
    nodes = [u for u in order if u is not sink]
    sc = _Scopes(nodes)
    items: dict[Scope, dict[UOp, None]] = defaultdict(dict)  # scope -> its items (nodes, or RANGEs: loops)
    deps: dict[UOp, set[UOp]] = defaultdict(set)  # item -> the items of its scope it waits for
    edges = [(s, u) for u in nodes for s in u.src]
    edges += [(a, b) for a, b in zip(sink.src, sink.src[1:])]  # the SINK's sources run in order
    for u in nodes:
        path, item = sc.place(u)
        items[path[-1] if path else None][item] = None
    for s, u in edges:
        (pu, iu), (ps, is_) = sc.place(u), sc.place(s)
        c = 0
        while c < len(pu) and c < len(ps) and pu[c] is ps[c]:
            c += 1
        a = pu[c] if c < len(pu) else iu
        b = ps[c] if c < len(ps) else is_
        if a is not b:
            deps[a].add(b)
    out: list[UOp] = []
    stack: list[tuple[Scope, list[UOp]]] = [(None, _toposort(items[None], deps, order))]
    while stack:
        scope, todo = stack[-1]
        if not todo:
            stack.pop()
            if scope is not None:
                out.append(sc.ends[scope] if scope in sc.ends else UOp(Ops.END, dtypes.void, (scope,)))
            continue
        item = todo.pop()
        out.append(item)
        if item.op is Ops.RANGE:
            stack.append((item, _toposort(items[item], deps, order)))
    return tuple(out)


def _toposort(items: dict[UOp, None], deps: dict[UOp, set[UOp]], order: dict[UOp, int]) -> list[UOp]:
    """`items` in dependency order, ties broken by op priority and then by graph order; returned reversed
    (the caller pops from the end)."""

    def key(u: UOp) -> tuple[int, int, int]:
        prio = 0 if u.op is Ops.RANGE else _PRIORITY.get(u.op, 0)
        return (prio, u.arg if u.op is Ops.PARAM else 0, order[u])

    users: dict[UOp, list[UOp]] = defaultdict(list)
    indeg: dict[UOp, int] = {}
    for u in items:
        ds = [d for d in deps.get(u, ()) if d in items]
        indeg[u] = len(ds)
        for d in ds:
            users[d].append(u)
    ready = [(key(u), u) for u in items if indeg[u] == 0]
    heapq.heapify(ready)
    out: list[UOp] = []
    while ready:
        _, u = heapq.heappop(ready)
        out.append(u)
        for v in users[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (key(v), v))
    if len(out) != len(items):
        raise LoweringError("the kernel's scopes depend on each other in a cycle")
    return out[::-1]
