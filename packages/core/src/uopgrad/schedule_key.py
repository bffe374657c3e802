"""The schedule cache's key (layer 9): `structure(sink)` says what makes a graph's schedule, so that graphs
which differ only in the buffers they use and in the values of their BINDs share one cached schedule
(schedule.py; spec/kernels.md's Cache section says why a hit is exact)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from uopgrad.ops import Ops
from uopgrad.uop import CallInfo, UOp

__all__ = ["Structure", "structure"]


@dataclass
class Structure:
    """What makes a graph's schedule: `key`, equal for graphs that differ only in which buffers they use and
    in the values of their BINDs; the graph's BUFFERs in order of first use; its BINDs (by variable)."""

    key: tuple[tuple[Any, ...], ...]
    buffers: list[UOp]
    binds: dict[UOp, UOp]
    reduces: list[UOp]  # in toposort order: the split policy's questions (`plan_splits`)

    @property
    def var_vals(self) -> dict[str, int]:
        """Each variable's bound value."""
        return {v.arg[0]: b.src[1].arg for v, b in self.binds.items()}


_DONE: Any = object()  # _structure's stack marker: the node below it has all its sources indexed


def structure(sink: UOp) -> Structure:
    """The key is one tuple per node in toposort order: its fields, with sources as positions in that order
    (so which nodes are shared is part of it) and BUFFERs and UNIQUEs without their identity. Tuples compare
    exactly: float constants are bit-pattern floats (uopgrad.dtype), and the arg's type is in the tuple."""
    index: dict[UOp, int] = {}
    parts: list[tuple[Any, ...]] = []
    buffers: list[UOp] = []
    binds: dict[UOp, UOp] = {}
    reduces: list[UOp] = []
    add = parts.append
    buffer, unique, reduce, call_info = Ops.BUFFER, Ops.UNIQUE, Ops.REDUCE, CallInfo  # (locals: the hot loop)
    special = (buffer, unique, Ops.BIND)
    stack: list[Any] = [sink]
    pop, push, extend, done = stack.pop, stack.append, stack.extend, _DONE
    # HOT PATH (bench/step.py, plain steps: every node of both realizes of a step passes here): UOp.toposort's
    # walk (the same order: a node waits under the _DONE marker while its sources are walked, the first one at
    # once) with each node's part made where toposort would add it, so the graph is walked once, not twice;
    # a node's position is its index, and its sources' positions follow its fields in one flat tuple (the
    # fields are fixed in number, so the sources stay apart)
    while stack:
        u = pop()
        if u is done:
            u = pop()
        else:
            while u not in index and (src := u.src):
                push(u)
                push(done)
                if len(src) == 2:
                    push(src[1])
                else:
                    extend(src[:0:-1])
                u = src[0]
            if u in index:
                continue
        op = u.op
        if op not in special:
            arg = u.arg
            t = type(arg)
            if t is call_info:  # the gradient function and metadata do not change the schedule
                arg = (arg.name, arg.precompile, arg.precompile_backward)
            elif op is reduce:
                reduces.append(u)
            src = u.src
            if len(src) == 2:  # most nodes (no generator for their two positions)
                add((op, u.dtype, t, arg, u.tag, index[src[0]], index[src[1]]))
            else:
                add((op, u.dtype, t, arg, u.tag, *[index[x] for x in src]))
        elif op is buffer:
            buffers.append(u)
            add((op, u.dtype, u.arg, u.src[1].arg))
        elif op is unique:  # which one is identity; that it is a valid one (a count) is structure
            add((op, type(u.arg) is int and u.arg >= 0))
        else:
            binds[u.src[0]] = u
            add((op, u.dtype, index[u.src[0]]))
        index[u] = len(index)
    # end HOT PATH
    return Structure(tuple(parts), buffers, binds, reduces)
