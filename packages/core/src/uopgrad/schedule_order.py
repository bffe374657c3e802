"""The order of a schedule's items (layer 9, beside the schedule's key): what each item reads and writes,
the dependencies that follow from it, and Kahn's toposort. schedule.py builds the items and breaks what
cycles remain (`_Scheduler._snapshot`); spec/realize.md says which values a read sees."""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass

from uopgrad.uop import UOp

__all__ = ["Item", "dependencies", "toposort"]


@dataclass
class Item:
    """A schedule item with what it touches: buffers written, buffers read plainly (their contents from before
    this schedule's writes), effects waited for, earlier items it must follow, and buffers read through
    AFTERs (their contents once the effects waited for ran, and before any other write)."""

    call: UOp
    writes: tuple[UOp, ...]
    reads: tuple[UOp, ...]
    after: tuple[UOp, ...] = ()
    follows: tuple[int, ...] = ()
    after_reads: tuple[UOp, ...] = ()


def dependencies(items: list[Item], fresh: set[UOp], effects: dict[UOp, int]) -> list[set[int]]:
    """For each item, the items that must run before it: the producer of each fresh buffer it touches, the
    items of the effects it waits for, the items it follows; a plain read of a buffer comes before every
    later write of it (other than its producer's), and a read through an AFTER before every write of it that
    it does not wait for (`t.assign(t * 2); v = t + 0; t.assign(t * 2)`: v between the two writes)."""
    producer: dict[UOp, int] = {}
    writers: dict[UOp, list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        for b in it.writes:
            if b in fresh and b not in producer:
                producer[b] = i
            writers[b].append(i)
    deps: list[set[int]] = [set() for _ in items]
    for i, it in enumerate(items):
        deps[i].update(producer[b] for b in (*it.reads, *it.writes) if b in producer and producer[b] != i)
        deps[i].update(effects[e] for e in it.after if e in effects)
        deps[i].update(it.follows)
    waits = [set(d) for d in deps]  # what each item follows for the values it reads to exist
    for i, it in enumerate(items):
        before = _ancestors(waits, i) if it.after_reads else set()
        for b, plain in [*((b, True) for b in it.reads), *((b, False) for b in it.after_reads)]:
            for w in writers[b]:
                if w != i and producer.get(b) != w and (plain or w not in before):
                    deps[w].add(i)
    return deps


def _ancestors(deps: list[set[int]], i: int) -> set[int]:
    """The items that item `i` waits for, directly or through others."""
    seen: set[int] = set()
    stack = list(deps[i])
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(deps[j])
    return seen


def toposort(deps: list[set[int]]) -> tuple[list[int], list[int]]:
    """Kahn's toposort of the items, ties in creation order: (the order, the items left on a cycle)."""
    n = len(deps)
    users: list[list[int]] = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    indeg = [len(d) for d in deps]
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(i)
        for j in users[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    return out, [i for i in range(n) if indeg[i] > 0]
