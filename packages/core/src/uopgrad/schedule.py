"""The scheduler (layer 10): a tensor graph becomes an ordered list of kernel CALLs over BUFFERs.

Elementwise and movement ops fuse into their consumer. A kernel ends at a graph output, a CONTIGUOUS, a COPY,
an assign, a REDUCE whose result is broadcast again (read through an EXPAND) and a REDUCE that more than one
kernel reads (computed once, read from its buffer by each). FUNCTIONs are inlined,
except precompiled ones, which are scheduled as a unit of their own and reused from the schedule cache when
the same body is called again. The forms produced are the contract of spec/kernels.md §1.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from uopgrad._util import LRU, all_int, dedup, prod
from uopgrad.config import KERNEL_OPS, VERIFY
from uopgrad.dtype import dtypes
from uopgrad.errors import ScheduleError
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.schedule_key import Structure, structure
from uopgrad.schedule_order import Item, dependencies, toposort
from uopgrad.split_reduce import SplitPolicy, plan_splits, split_reduces
from uopgrad.uop import Invalid, UOp, sint
from uopgrad.verify import verify, verify_new

__all__ = ["Schedule", "clear_schedule_cache", "pm_early", "pm_kernelize", "schedule", "schedule_cache_info"]

# ops the scheduler does not handle (yet): multi-device values and buffer views
_UNSUPPORTED = frozenset({Ops.MULTI, Ops.MSELECT, Ops.MSTACK, Ops.ALLREDUCE, Ops.BUFFER_VIEW})
# consumers that end a kernel's expression: a broadcast seen beyond them does not reach their sources
_BOUNDARY = frozenset({Ops.STORE, Ops.AFTER, Ops.CALL, Ops.FUNCTION, Ops.COPY, Ops.SINK, Ops.CONTIGUOUS})
# the owner of a node that more than one kernel would compute (`_Scheduler._shared_reduces`)
_SHARED = UOp(Ops.NOOP, arg="shared")
# a nested REDUCE with this many outputs is worth a kernel (and a launch) of its own (`_big_nested`)
NESTED_OUTPUTS = 1024


@dataclass(frozen=True, eq=False)
class Schedule:
    """The result of `schedule`. `items` are CALLs in execution order: kernels
    `CALL(SINK(STORE, ...), *BUFFERs)`, copies `CALL(COPY(PARAM 1, DEVICE), dst, src)` and custom kernels.
    `outputs` maps every source of the input SINK to the view of the BUFFER holding its value afterwards;
    `var_vals` are the values of the bound variables, the kernels' scalar arguments (by name). `memo` is
    shared by every schedule made from one cache entry (the same items but for their buffers): a backend
    keeps there what it derives from the items' bodies alone (its launch plan), spec/realize.md."""

    items: tuple[UOp, ...]
    outputs: dict[UOp, UOp]
    var_vals: dict[str, int] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)

    @property
    def kernels(self) -> tuple[UOp, ...]:
        """The items that are code kernels (a SINK body): scheduled ones and custom kernels."""
        return tuple(it for it in self.items if it.src[0].op is Ops.SINK)


# ---------------------------------------------------------------------- helpers on views
def _buffer_of(u: UOp) -> tuple[UOp, list[UOp]] | None:
    """(BUFFER, effects to wait for) if `u` is a whole buffer seen through RESHAPEs and AFTERs, else None."""
    deps: list[UOp] = []
    while u.op in (Ops.RESHAPE, Ops.AFTER):
        if u.op is Ops.AFTER:
            deps.extend(u.src[1:])
        u = u.src[0]
    return (u, deps) if u.op is Ops.BUFFER else None


def _view_chain(u: UOp) -> tuple[list[UOp], UOp, list[UOp]]:
    """(movement ops from `u` down, the node under them, effects of the AFTERs passed on the way)."""
    chain: list[UOp] = []
    deps: list[UOp] = []
    while u.op in GroupOp.Movement or u.op is Ops.AFTER:
        if u.op is Ops.AFTER:
            deps.extend(u.src[1:])
        else:
            chain.append(u)
        u = u.src[0]
    return chain, u, deps


def _rebuild_chain(chain: list[UOp], base: UOp) -> UOp:
    """The movement ops of `chain` (outermost first) applied again over `base`."""
    for m in reversed(chain):
        base = m.replace(src=(base, *m.src[1:]))
    return base


def _is_value(u: UOp) -> bool:
    """A node with a tensor value (not an effect, a marker or a call)."""
    return u.op not in (Ops.STORE, Ops.SINK, Ops.CALL, Ops.FUNCTION, Ops.TUPLE, Ops.DEVICE, Ops.NOOP)


def _concrete_shape(u: UOp) -> bool:
    return all_int(u.shape)


def _precompiled_output(u: UOp) -> bool:
    """An output of a precompiled FUNCTION (every other GETTUPLE was inlined): its unit gives it a buffer."""
    return u.op is Ops.GETTUPLE and u.src[0].op is Ops.FUNCTION


# ---------------------------------------------------------------------- pass 1: inline functions
class _Inliner:
    """Binds the PARAMs of each FUNCTION body to its arguments once (memoised per FUNCTION node)."""

    def __init__(self) -> None:
        self.bodies: dict[UOp, UOp] = {}

    def element(self, g: UOp, k: UOp) -> UOp | None:
        args = k.src[1:]
        if k.arg.precompile and all(_is_value(a) and (a.op is Ops.BIND or _concrete_shape(a)) for a in args):
            return None  # scheduled as a unit of its own
        if k not in self.bodies:
            params = {p: args[p.arg] for p in k.src[0].toposort(enter_calls=False) if p.op is Ops.PARAM}
            self.bodies[k] = k.src[0].substitute(params, walk=True)
        element: UOp = self.bodies[k].src[g.arg]
        return element


pm_early = PatternMatcher(
    [
        (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("x"),)), lambda x: x),  # detach(x) -> x
        (
            UPat(Ops.GETTUPLE, src=(UPat(Ops.TUPLE, name="t"),), name="g"),
            lambda g, t: t.src[g.arg],
        ),  # (a, b)[0] -> a
        (
            UPat(Ops.GETTUPLE, src=(UPat(Ops.FUNCTION, name="k"),), name="g"),
            lambda ctx, g, k: ctx.element(g, k),
        ),  # f(args)[i] -> body[i], PARAMs := args (unless precompiled)
    ]
)


# ---------------------------------------------------------------------- pass 2: kernel bodies
class _KernelCtx:
    """State of one kernel's rewrite: the realized views, the PARAM of each buffer (slot 0 the output)."""

    def __init__(self, views: dict[UOp, UOp], root: UOp | None, out: UOp) -> None:
        self.views, self.root = views, root
        self.params: dict[UOp, UOp] = {}
        self.after: list[UOp] = []  # effects this kernel waits for
        self.after_bufs: set[UOp] = set()  # buffers read through those AFTERs
        self.param(out)

    def param(self, buf: UOp) -> UOp:
        if buf not in self.params:
            self.params[buf] = UOp.param(len(self.params), buf.dtype.base.ptr(int(buf.arg)))
        return self.params[buf]

    def realized(self, x: UOp) -> UOp | None:
        return None if x is self.root else self.views.get(x)

    def strip_after(self, x: UOp) -> UOp:
        self.after.extend(x.src[1:])
        b = _view_chain(x.src[0])[1]
        if b in self.views:  # an assign into a realized value: it is read from that value's buffer
            b = _view_chain(self.views[b])[1]
        if b.op is Ops.BUFFER:
            self.after_bufs.add(b)
        return x.src[0]


def _plain_const(c: UOp) -> UOp:
    """A kernel's constant has no sources; an uninitialised element (Invalid) reads as zero."""
    return c.replace(src=(), arg=dtypes.as_const(0, c.dtype) if c.arg is Invalid else c.arg)


def _uninitialised(u: UOp) -> bool:
    """A view of `Tensor.invalids`: realizing it needs a buffer but no kernel."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u.op is Ops.CONST and u.arg is Invalid


# run bottom-up (parents first), so a realized node is replaced before its sources are visited
pm_kernelize = PatternMatcher(
    [
        (UPat(name="x"), lambda ctx, x: ctx.realized(x)),  # a realized node -> a read of its buffer's view
        (UPat(Ops.BUFFER, name="x"), lambda ctx, x: ctx.param(x)),  # BUFFER -> PARAM(slot, dtype.ptr(size))
        (UPat(Ops.AFTER, name="x"), lambda ctx, x: ctx.strip_after(x)),  # AFTER(x, effects) -> x, after them
        (UPat(Ops.CONST, name="x"), lambda x: _plain_const(x) if x.src else None),  # CONST(DEVICE) -> CONST
        (UPat(Ops.BIND, src=(UPat.var("v"), UPat())), lambda v: v),  # BIND(var, c) -> var (a kernel argument)
    ]
)


def _access(call: UOp) -> tuple[tuple[UOp, ...], tuple[UOp, ...]]:
    """(buffers written, buffers read) by an item: a kernel's STORE targets and sources, a copy's dst, src."""
    args = call.src[1:]
    if call.src[0].op is Ops.COPY:
        return (args[0],), (args[1],)
    stores = [st for st in call.src[0].toposort(enter_calls=False) if st.op is Ops.STORE]
    # a target is a view of a PARAM, or an element of one (INDEX, in a kernel written with explicit loops)
    targets = [st.src[0].src[0] if st.src[0].op is Ops.INDEX else st.src[0] for st in stores]
    written = {_view_chain(t)[1].arg for t in targets}
    reads = {p.arg for st in stores for p in st.src[1].toposort(enter_calls=False) if p.op is Ops.PARAM}
    return tuple(dedup(args[s] for s in sorted(written))), tuple(dedup(args[s] for s in sorted(reads)))


def _owner(consumers: list[UOp], owner: dict[UOp, UOp | None], r: dict[UOp, None]) -> UOp | None:
    """The one kernel root a node with these consumers is fused into, _SHARED for several, None for none:
    a realized consumer (not a COPY, which moves a realized source) or a STORE is a root, an AFTER passes
    its value on, other boundaries end the expression."""
    found: set[UOp] = set()
    for c in consumers:
        if (c in r and c.op is not Ops.COPY) or c.op is Ops.STORE:
            found.add(c)
        elif (c.op not in _BOUNDARY or c.op is Ops.AFTER) and (o := owner.get(c)) is not None:
            found.add(o)
    return None if not found else next(iter(found)) if len(found) == 1 else _SHARED


def _big_nested(red: UOp) -> bool:
    """A REDUCE with at least NESTED_OUTPUTS outputs that another REDUCE of its kernel reduces (the matmul
    under a mean-squared-error loss): fused, the outer reduce's loop runs it one output at a time, with no
    vector lanes or threads over its outputs; realized, it is a kernel of its own that has them."""
    return (
        isinstance(red.device, str) and _concrete_shape(red) and cast(int, prod(red.shape)) >= NESTED_OUTPUTS
    )


def _index_math(nodes: list[UOp], r: dict[UOp, None]) -> dict[UOp, frozenset[UOp] | None]:
    """For each node (sources first), the loads of its fused expression if that is integer or bool math
    (ALU ops, casts, views and constants; a realized or boundary node, a BUFFER or PARAM is one load), else
    None."""
    out: dict[UOp, frozenset[UOp] | None] = {}
    for u in nodes:
        if u in r or u.op in _BOUNDARY or u.op in (Ops.BUFFER, Ops.PARAM):
            out[u] = frozenset((u,))
        elif u.op in (Ops.CONST, Ops.VCONST):
            out[u] = frozenset()
        elif u.op in GroupOp.Movement:
            out[u] = out.get(u.src[0])
        elif (
            (u.op in GroupOp.ALU or u.op is Ops.CAST)
            and not dtypes.is_float(u.dtype)
            and all(out.get(s) is not None for s in u.src)
        ):
            out[u] = frozenset().union(*(cast(frozenset[UOp], out[s]) for s in u.src))
        else:
            out[u] = None
    return out


def _in_place_ok(target: UOp, value: UOp) -> bool:
    """A kernel may read the buffer it writes (PARAM 0) only elementwise through the target's own view: not
    through another view, and not inside a REDUCE (which reads other elements)."""
    reads_out: dict[UOp, bool] = {}
    for u in value.toposort():
        reads_out[u] = (u.op is Ops.PARAM and u.arg == 0) or any(reads_out[s] for s in u.src)
        if u.op is Ops.REDUCE and reads_out[u]:
            return False
        if u.op not in GroupOp.Movement and any(
            reads_out[s] and s.base.op is Ops.PARAM and s is not target for s in u.src
        ):
            return False
    return not (reads_out[value] and value.base.op is Ops.PARAM and value is not target)


class _Scheduler:
    """Schedules one (early-rewritten) graph: decides the realized nodes, builds the items, orders them."""

    def __init__(self, sink: UOp, split: SplitPolicy | None = None) -> None:
        self.sink = graph_rewrite(sink, pm_early, ctx=_Inliner(), name="schedule: inline functions")
        if split is not None:  # big reduces on grid targets in two stages (split_reduce.py)
            self.sink = split_reduces(self.sink, split)
        self.split = split
        self.nodes = list(self.sink.toposort(enter_calls=False))
        if bad := {u.op for u in self.nodes} & _UNSUPPORTED:
            raise NotImplementedError(f"the scheduler does not handle {sorted(o.name for o in bad)} yet")
        self.var_vals = {u.src[0].arg[0]: u.src[1].arg for u in self.sink.toposort() if u.op is Ops.BIND}
        self.views: dict[UOp, UOp] = {}  # realized node -> the view of its buffer
        self.items: list[Item] = []
        self.effects: dict[UOp, int] = {}  # STORE/CALL effect -> its item
        self.fresh: set[UOp] = set()  # buffers this schedule allocates

    # -------------------------------------------------------------- which nodes get a buffer
    def realize_points(self) -> dict[UOp, None]:
        r: dict[UOp, None] = {}
        for s in self.sink.src:
            _, base, deps = _view_chain(s)
            if _is_value(s) and base.op is not Ops.BUFFER and not deps:
                r[s] = None  # a graph output (an assign into a value is read from that value's buffer)
        for u in self.nodes:
            if u.op in (Ops.CONTIGUOUS, Ops.COPY):
                r[u] = None
            if u.op is Ops.COPY and _buffer_of(u.src[0]) is None:
                r[u.src[0]] = None  # a copy moves a whole buffer
            if u.op is Ops.STORE and (base := _view_chain(u.src[0])[1]).op is not Ops.BUFFER:
                r[base] = None  # an assign into a value: the value gets a buffer first
            if u.op is Ops.CALL or (u.op is Ops.FUNCTION and u.arg.precompile):
                r.update((a, None) for a in u.src[1:] if a.op is not Ops.BIND and _buffer_of(a) is None)
        self._broadcast_reduces(r)
        self._cut_large_kernels(r)
        self._shared_reduces(r)
        return {u: None for u in r if not _precompiled_output(u)}

    def _cut_large_kernels(self, r: dict[UOp, None]) -> None:
        """Fusion that stops: a value whose fused expression would pass KERNEL_OPS ops is realized, so no
        kernel's source grows with the graph and compile time stays about linear in its size.

        A node's size is 1 plus its sources' sizes (views and constants are free, a realized value is one
        load): an upper bound, as a shared node counts once per use. So no kernel passes (sources + 1) x
        budget. A shared node over an eighth of the budget is realized too: it is computed once, not counted
        (and recomputed) in every consumer, which keeps the bound from cutting a backward graph too often."""
        if (budget := int(KERNEL_OPS)) <= 0:
            return
        fanout: dict[UOp, int] = defaultdict(int)
        for u in self.nodes:
            for x in dict.fromkeys(u.src):
                fanout[x] += 1
        cost: dict[UOp, int] = {}
        for u in self.nodes:
            if u in r or u.op in _BOUNDARY or u.op is Ops.BUFFER:
                cost[u] = 1
            elif u.op in (Ops.CONST, Ops.VCONST):
                cost[u] = 0
            elif u.op in GroupOp.Movement:
                cost[u] = cost.get(u.src[0], 1)
            else:
                cost[u] = c = 1 + sum(cost.get(x, 1) for x in dict.fromkeys(u.src))
                if (
                    (c > budget or (fanout[u] > 1 and 8 * c > budget))
                    and (u.op in GroupOp.ALU or u.op in (Ops.REDUCE, Ops.CAST))
                    and isinstance(u.device, str)
                    and _concrete_shape(u)
                ):
                    r[u] = None
                    cost[u] = 1

    def _shared_reduces(self, r: dict[UOp, None]) -> None:
        """A REDUCE whose value would be computed inside more than one kernel is realized once and read by
        each (as tinygrad does): the forward matmul that a backward kernel reads again, a gradient that both
        `w.grad` and the optimiser's update read. Walking consumers first, each node gets the one kernel it
        is fused into (the realized node or STORE at its root), or _SHARED when there are several."""
        consumers = self._consumers()
        owner: dict[UOp, UOp | None] = {}
        for u in reversed(self.nodes):
            owner[u] = u if u in r or u.op is Ops.STORE else _owner(consumers[u], owner, r)
            if (
                owner[u] is _SHARED
                and u.op is Ops.REDUCE
                and isinstance(u.device, str)
                and _concrete_shape(u)
            ):
                # realized in the layout its readers see it in, where they all see it through one chain of
                # reshapes and permutes (a weight's gradient, read transposed): no copy to transpose it
                top = u
                while (
                    len(cs := consumers[top]) == 1
                    and cs[0].op in (Ops.RESHAPE, Ops.PERMUTE)
                    and cs[0] not in r
                    and owner.get(cs[0]) is _SHARED
                ):
                    top = cs[0]
                r[top] = None
                owner[u] = top

    def _consumers(self) -> dict[UOp, list[UOp]]:
        """Each node's consumers (a call's arguments, not its body)."""
        consumers: dict[UOp, list[UOp]] = defaultdict(list)
        for u in self.nodes:
            for s in u.src[1:] if u.op in GroupOp.Call else u.src:
                consumers[s].append(u)
        return consumers

    def _broadcast_reduces(self, r: dict[UOp, None]) -> None:
        """A REDUCE whose value reaches an EXPAND (before a kernel boundary) is realized, not recomputed; so
        is computed work (an ALU op right under movement ops) that is broadcast into a REDUCE, which would
        otherwise run again for every element reduced (the elementwise operand of a matmul). Integer and
        bool index math that reads at most one buffer stays fused, as in the reference (which keeps such a
        value unless it reads more than three buffers): the one-hot mask `arange == idx` of an embedding or
        a gather is a compare per element, cheaper to compute again than to store and load."""
        consumers = self._consumers()
        index_math = _index_math(self.nodes, r)
        expanded: dict[UOp, bool] = {}
        reduced: dict[UOp, bool] = {}  # the value flows into a REDUCE of this kernel
        into_reduce: dict[UOp, bool] = {}  # ... through an EXPAND
        for u in reversed(self.nodes):
            fused = [c for c in consumers[u] if c not in r and c.op not in _BOUNDARY]
            expanded[u] = any(c.op is Ops.EXPAND for c in consumers[u]) or any(expanded[c] for c in fused)
            reduced[u] = any(c.op is Ops.REDUCE for c in consumers[u]) or any(reduced[c] for c in fused)
            into_reduce[u] = any(c.op is Ops.EXPAND and reduced[c] for c in consumers[u]) or any(
                into_reduce[c] for c in fused
            )
            if u.op is Ops.REDUCE and (expanded[u] or (reduced[u] and _big_nested(u))):
                r[u] = None
            elif (
                u.op in GroupOp.ALU
                and into_reduce[u]
                and any(c.op in GroupOp.Movement for c in fused)
                and not ((reads := index_math.get(u)) is not None and len(reads) <= 1)
            ):
                r[u] = None

    def allocate(self, u: UOp) -> UOp:
        """A fresh buffer for the realized node `u`; returns its view, which has `u`'s shape."""
        if not isinstance(u.device, str):
            raise ScheduleError(f"can't realize a value with device {u.device!r}: {u.short()}")
        shape = u.shape
        size: sint = prod(shape)
        limit = size if isinstance(size, int) else size.vmax
        if not isinstance(limit, int):
            raise ScheduleError(
                f"can't realize shape {shape}: a symbolic dimension has no finite upper bound"
            )
        buf = UOp.new_buffer(u.device, limit, u.dtype.base)
        self.fresh.add(buf)
        view = buf if isinstance(size, int) else buf.shrink(((0, size),))
        self.views[u] = view.reshape(shape)
        return self.views[u]

    # -------------------------------------------------------------- items
    def buffer_for(self, u: UOp) -> tuple[UOp, list[UOp]]:
        """The buffer holding the whole value `u` (a realized node or a plain view of a buffer), and the
        effects a read of it waits for."""
        if u in self.views:
            return _view_chain(self.views[u])[1], []
        if (found := _buffer_of(u)) is None:
            raise ScheduleError(f"no buffer holds {u.short()}")
        return found

    def add(self, call: UOp, after: list[UOp], after_bufs: set[UOp], follows: tuple[int, ...] = ()) -> int:
        """Append an item; buffers in `after_bufs` are read through AFTERs, every other read is plain."""
        writes, reads = _access(call)
        plain = tuple(b for b in reads if b not in after_bufs)
        later = tuple(b for b in reads if b in after_bufs)
        self.items.append(Item(call, writes, plain, tuple(dedup(after)), follows, later))
        return len(self.items) - 1

    def kernel(self, target: UOp, value: UOp, root: UOp | None) -> int:
        """The kernel STORE(target, value), realized sources read from their buffers. `root` is the realized
        node this kernel computes (it is not replaced by its own buffer)."""
        _, out, waits = _view_chain(target)
        if out.op is not Ops.BUFFER:
            out = _view_chain(self.views[out])[1]
        if waits and value not in self.views and self._reads_other_state(value, target, out, root):
            # the target waits for earlier writes of its buffer, the value reads what the buffer held at
            # another point (`v = t * 1; t.assign(t * 2); t.assign(v)`): one kernel can't do both, so the
            # value is computed into a buffer of its own first, where its read belongs
            self.kernel(self.allocate(value), value, value)
            return self.kernel(target, value, root)
        ctx = _KernelCtx(self.views, root, out)
        body = graph_rewrite(
            target.store(value).sink(), pm_kernelize, ctx=ctx, bottom_up=True, name="schedule: kernelize"
        )
        st = body.src[0]
        if not _in_place_ok(st.src[0], st.src[1]):
            # the value reads the written buffer at other elements: compute it into a buffer of its own first
            self.kernel(self.allocate(value), value, value)
            return self.kernel(target, value, root)
        call = body.call(*ctx.params)
        if VERIFY:
            verify(call)
        return self.add(call, ctx.after, ctx.after_bufs)

    def _reads_other_state(self, value: UOp, target: UOp, buf: UOp, root: UOp | None) -> bool:
        """Whether `value` reads `buf` other than through the target's own last AFTER (the contents the
        write follows): plainly (the contents before this schedule) or through an earlier AFTER. A value
        realized elsewhere is read from its own buffer, and only an AFTER's view is followed, not its
        effects."""
        current = target
        while current.op in GroupOp.Movement:
            current = current.src[0]
        stack, seen = [value], {current}
        while stack:
            n = stack.pop()
            if n in seen or (n is not root and n in self.views) or n.op in GroupOp.Call:
                continue
            seen.add(n)
            if n is buf:
                return True
            stack.extend(n.src[:1] if n.op is Ops.AFTER else n.src)
        return False

    def copy(self, u: UOp) -> None:
        src, deps = self.buffer_for(u.src[0])
        dst = _view_chain(self.views[u])[1]
        body = UOp(Ops.COPY, u.dtype, (UOp.param(1, src.dtype.base.ptr(int(src.arg))), u.src[1]))
        self.add(body.call(dst, src), deps, {src} if deps else set())

    def custom_kernel(self, k: UOp) -> None:
        bufs, deps, after_bufs = [], [], set()
        for a in k.src[1:]:
            b, d = self.buffer_for(a)
            bufs.append(b)
            deps.extend(d)
            if d:
                after_bufs.add(b)
        self.effects[k] = self.add(k.src[0].call(*bufs, name=k.arg.name), deps, after_bufs)

    def precompiled(self, k: UOp) -> None:
        """A precompiled FUNCTION: its body is scheduled on its own (a cache hit when the same body was
        scheduled before) over the buffers of its arguments, and its items are spliced in, in their order."""
        args, deps, bound = k.src[1:], [], {}
        after_bufs: set[UOp] = set()
        for p in k.src[0].toposort(enter_calls=False):
            if p.op is not Ops.PARAM:
                continue
            a = args[p.arg]
            if a.op is Ops.BIND:
                bound[p] = a
                continue
            b, d = self.buffer_for(a)
            deps.extend(d)
            if d:
                after_bufs.add(b)
            bound[p] = b.reshape(p.shape)
        body = UOp(Ops.SINK, dtypes.void, k.src[0].src).substitute(bound, walk=True)
        sub = schedule(body, split=self.split)
        self.var_vals.update(sub.var_vals)
        inputs = {b for v in bound.values() for b in v.toposort() if b.op is Ops.BUFFER}
        prev: tuple[int, ...] = ()
        for it in sub.items:
            self.fresh.update(b for b in it.src[1:] if b not in inputs)
            writes, reads = _access(it)
            plain = tuple(b for b in reads if b in inputs and b not in after_bufs)
            later = tuple(b for b in reads if b in inputs and b in after_bufs)
            self.items.append(Item(it, writes, plain, tuple(dedup(deps)), prev, later))
            prev = (len(self.items) - 1,)
        for i, out in enumerate(body.src):
            self.views[k.gettuple(i)] = sub.outputs[out]

    def build(self) -> tuple[list[UOp], list[UOp | None]]:
        """Allocate the realized nodes, make every item (sources first), and order them."""
        points = self.realize_points()
        into = self._stored_whole(points)
        for u in points:
            if u in into:
                buf = cast("tuple[UOp, list[UOp]]", _buffer_of(into[u].src[0]))[0]
                self.fresh.add(buf)  # its kernel is its producer: every reader waits for it
                self.views[u] = buf.reshape(u.shape)
            else:
                self.allocate(u)
        made: dict[UOp, int] = {}  # realized node -> the kernel computing it
        for u in self.nodes:
            if u.op is Ops.FUNCTION and u.arg.precompile:
                self.precompiled(u)
            elif u.op is Ops.CALL:
                self.custom_kernel(u)
            elif u.op is Ops.STORE:
                v = u.src[1]
                while v not in made and v.op is Ops.RESHAPE:
                    v = v.src[0]
                self.effects[u] = made[v] if into.get(v) is u else self.kernel(u.src[0], u.src[1], None)
            elif u.op is Ops.COPY and u in self.views:
                self.copy(u)
            elif (
                u in self.views
                and not _precompiled_output(u)
                and not _uninitialised(u.src[0] if u.op is Ops.CONTIGUOUS else u)
            ):
                made[u] = self.kernel(self.views[u], u.src[0] if u.op is Ops.CONTIGUOUS else u, u)
        return self.order(), self.outputs()

    def _stored_whole(self, points: dict[UOp, None]) -> dict[UOp, UOp]:
        """Realized values that a STORE then copies, whole, into a buffer that nothing else in the graph
        touches (a realize output that a second reader made a shared reduce): computed into that buffer
        directly, the STORE is their kernel and the copy is not made. Value -> STORE."""
        uses: dict[UOp, int] = defaultdict(int)
        for u in self.nodes:
            for x in u.src:
                uses[x] += 1
        into: dict[UOp, UOp] = {}
        for st in self.nodes:
            if st.op is not Ops.STORE:
                continue
            v = st.src[1]
            while v not in points and v.op is Ops.RESHAPE:  # a reshape of a contiguous buffer is free
                v = v.src[0]
            if (
                v not in points
                or v in into
                or v.op is Ops.COPY
                or _precompiled_output(v)
                or _uninitialised(v.src[0] if v.op is Ops.CONTIGUOUS else v)
            ):
                continue
            t = st.src[0]
            if (found := _buffer_of(t)) is None or found[1] or not _concrete_shape(v):
                continue
            buf, chain = found[0], t
            if not isinstance(buf.arg, int) or prod(v.shape) != buf.arg or uses[buf] != 1:
                continue
            while chain is not buf and uses[chain] == 1:  # the view is only written (read, it would see
                chain = chain.src[0]  # the new contents before the STORE's turn)
            if chain is buf:
                into[v] = st
        return into

    def outputs(self) -> list[UOp | None]:
        """For each source of the SINK (by position): the view of the buffer that holds its value."""
        out: list[UOp | None] = []
        for s in self.sink.src:
            if s in self.views:
                out.append(self.views[s])
            elif s.op is Ops.STORE:
                out.append(self.view_of(s.src[0]))
            else:
                out.append(self.view_of(s) if _is_value(s) else None)
        return out

    def view_of(self, u: UOp) -> UOp:
        """`u` (a view over a buffer or a realized node, through AFTERs) as a view over a BUFFER."""
        chain, base, _ = _view_chain(u)
        if base.op is not Ops.BUFFER:
            base = self.views[base]
        return _rebuild_chain(chain, base)

    # -------------------------------------------------------------- order
    def order(self) -> list[UOp]:
        """The items in Kahn's toposort of their dependencies (schedule_order.py), ties in creation order.
        Where items read each other's buffers before writing them (`a.assign(a + b); b.assign(a * 2)`: each
        must run before the other's write), one read is taken from a copy of the buffer made first
        (`_snapshot`), until none is left."""
        while True:
            out, stuck = toposort(dependencies(self.items, self.fresh, self.effects))
            if not stuck:
                return [self.items[i].call for i in out]
            if not self._snapshot(stuck):
                raise ScheduleError(
                    "the schedule has a cycle: items wait for each other's effects before writing"
                )

    def _snapshot(self, stuck: list[int]) -> bool:
        """Break one cycle among the `stuck` items: the first read of a buffer (not this schedule's own, not
        written by the reader) that another stuck item writes reads a copy of it instead, made at the
        read's point: before any write for a plain read, after the writes it waits for for a read through
        an AFTER. A read must come before the writes it does not see, so two such reads in opposite
        directions wait for each other; the copy waits only for what the read waited for. False: no such
        read."""
        for i in stuck:
            it = self.items[i]
            for w in (*it.reads, *it.after_reads):
                if w in self.fresh or w in it.writes or not any(w in self.items[j].writes for j in stuck):
                    continue
                n = int(w.arg)
                # the copy reads w as the item did: before this schedule's writes, or after the writes of w
                # that the item waits for
                state = tuple(
                    e for e in it.after if e in self.effects and w in self.items[self.effects[e]].writes
                )
                source = UOp(Ops.AFTER, w.dtype, (w.reshape((n,)), *state)) if w in it.after_reads else w
                copy = UOp.new_buffer(str(w.src[1].arg), n, w.dtype)
                self.fresh.add(copy)
                self.kernel(copy.reshape((n,)), source.reshape((n,)) if source is w else source, None)
                args = tuple(copy if b is w else b for b in it.call.src[1:])
                it.call = it.call.replace(src=(it.call.src[0], *args))
                it.reads = tuple(copy if b is w else b for b in it.reads)
                it.after_reads = tuple(b for b in it.after_reads if b is not w)
                if w not in it.reads and copy not in it.reads:
                    it.reads = (*it.reads, copy)
                return True
        return False


# ---------------------------------------------------------------------- the cache (keyed by structure)
@dataclass(frozen=True, eq=False)
class _Template:
    """A schedule with placeholder buffers: `inputs` stand for the graph's buffers, `fresh` for new ones."""

    items: tuple[UOp, ...]
    outputs: tuple[UOp | None, ...]
    inputs: tuple[UOp, ...]
    fresh: tuple[UOp, ...]
    memo: dict[Any, Any] = field(default_factory=dict)  # the Schedules' memo

    @functools.cached_property
    def _output_nodes(self) -> tuple[tuple[UOp, tuple[UOp, ...]] | None, ...]:
        """Each output view (a few movement ops over a buffer) and, in toposort order, its nodes that an
        instance changes: a placeholder buffer, a BIND, and every node above one (the rest, shape vectors and
        devices, are the same nodes in every instance)."""
        keys = {*self.inputs, *self.fresh}
        out: list[tuple[UOp, tuple[UOp, ...]] | None] = []
        for v in self.outputs:
            if v is None:
                out.append(None)
                continue
            live: dict[UOp, None] = {}
            for u in v.toposort():
                if u in keys or u.op is Ops.BIND or any(x in live for x in u.src):
                    live[u] = None
            out.append((v, tuple(live)))
        return tuple(out)

    def instantiate(self, sink: UOp, graph: Structure) -> Schedule:
        """This schedule for `sink`: its buffers, fresh buffers for the new ones, its bound values."""
        mapping = dict(zip(self.inputs, graph.buffers))
        mapping.update((f, UOp.new_buffer(str(f.src[1].arg), int(f.arg), f.dtype)) for f in self.fresh)
        outputs = {}
        for s, view in zip(sink.src, self._output_nodes):
            if view is not None:
                v, nodes = view
                if graph.binds:  # symbolic sizes: this graph's values
                    binds = {b: graph.binds[b.src[0]] for b in nodes if b.op is Ops.BIND}
                    outputs[s] = _rebuilt(v, nodes, {**mapping, **binds})
                else:
                    outputs[s] = _rebuilt(v, nodes, mapping)
        return Schedule(tuple(_rebind(it, mapping) for it in self.items), outputs, graph.var_vals, self.memo)


# bounded: a run over ever new shapes keeps the recent ones
_cache: LRU[tuple[tuple[Any, ...], ...], _Template] = LRU(4096)
_stats = {"hits": 0, "misses": 0}


def _rebind(item: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """A schedule item with its buffer arguments replaced (kernel bodies hold no buffers)."""
    get = mapping.get
    return UOp(item.op, item.dtype, (item.src[0], *[get(b, b) for b in item.src[1:]]), item.arg, item.tag)


def _rebuilt(root: UOp, nodes: Sequence[UOp], mapping: dict[UOp, UOp]) -> UOp:
    """`root` (a view: a few movement ops over a buffer) with `mapping` applied, where `nodes` are those of
    its nodes that it changes, in toposort order (`_Template._output_nodes`): `substitute` without a rewrite
    engine's setup, which cost more than these few nodes."""
    new: dict[UOp, UOp] = {}
    get = new.get
    for u in nodes:
        if (m := mapping.get(u)) is None:
            m = UOp(u.op, u.dtype, tuple([get(x, x) for x in u.src]), u.arg, u.tag)
        new[u] = m
    return get(root, root)


def _placeholder(b: UOp, n: int) -> UOp:
    return UOp(Ops.BUFFER, b.dtype, (UOp(Ops.LUNIQUE, arg=n), b.src[1]), b.arg)


def _template(sink: UOp, inputs: list[UOp], split: SplitPolicy | None) -> _Template:
    sched = _Scheduler(sink, split)
    items, outputs = sched.build()
    known = set(inputs)
    used = dedup(
        [b for it in items for b in it.src[1:]]
        + [b for v in outputs if v is not None for b in v.toposort() if b.op is Ops.BUFFER]
    )
    fresh = [b for b in used if b not in known]
    mapping = {b: _placeholder(b, i) for i, b in enumerate([*inputs, *fresh])}
    return _Template(
        tuple(_rebind(it, mapping) for it in items),
        tuple(None if v is None else v.substitute(mapping) for v in outputs),
        tuple(mapping[b] for b in inputs),
        tuple(mapping[b] for b in fresh),
    )


def schedule(sink: UOp, check: bool = False, split: SplitPolicy | None = None) -> Schedule:
    """Schedule the tensor graph under `sink` (a SINK of values, STOREs and AFTERs) into kernel CALLs over
    BUFFERs. Graphs of the same structure (buffers and bound values aside) share one cached schedule.

    `check` verifies the graph first (`verify_new`, VerifyError naming a malformed node): on a cache miss
    only, as a graph of a cached structure has every field the rules look at equal to one that passed
    them (a training step's graph, the same each step, is checked once, not on every step).

    `split` (the backend layer's, which knows each device's target) says how many partials each big REDUCE
    gets: those it gives more than one run as two kernels (uopgrad.split_reduce); its answers are keyed."""
    if sink.op is not Ops.SINK:
        sink = UOp(Ops.SINK, dtypes.void, (sink,))
    try:
        graph = structure(sink)
    except Exception:
        if check:  # a graph too malformed to key: the verifier names the node
            verify_new(sink)
        raise
    key = (*graph.key, ("KERNEL_OPS", int(KERNEL_OPS)))  # the budget changes the cuts
    if split is not None:
        key = (*key, ("split", plan_splits(sink, split, graph.reduces)))
    if (tmpl := _cache.get(key)) is None:
        if check:
            verify_new(sink)
        _stats["misses"] += 1
        tmpl = _cache[key] = _template(sink, graph.buffers, split)
    else:
        _stats["hits"] += 1
    return tmpl.instantiate(sink, graph)


def schedule_cache_info() -> dict[str, int]:
    """Hits, misses and size of the schedule cache."""
    return {**_stats, "size": len(_cache)}


def clear_schedule_cache() -> None:
    """Forget every cached schedule (the counters too)."""
    _cache.clear()
    _stats.update(hits=0, misses=0)
