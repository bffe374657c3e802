"""The realized form (layer 9, beside gradient): what `realize` leaves in the tensor graph.

A realized value is `AFTER(DETACH(view), CALL(SINK(STORE(P1, P0)), value, DETACH(view), UNIQUE))`:
- `view` is the buffer (view) that now holds the value; forward work reads it and nothing else, so a realized
  value is never computed again (`strip_realized`).
- `value` is the graph that computed it, kept as the CALL's argument so that gradients still flow: the
  CALL's `grad_fxn` hands the gradient of the view to `value` (call_gradient's grad_fxn path), and
  `compute_gradient` goes on into the graph as if nothing had been realized.
- The DETACH stops pm_gradient's AFTER(d, CALL) rule from also sending the gradient into the old contents
  of the storage (for an assign, `view` is a buffer that held another value before).
- The UNIQUE makes every realization its own node: hash-consing would otherwise merge two assigns of one
  interned value into one buffer, and the second would be taken for done.

The graph kept under `value` never holds a runnable effect: realize turns every assign or kernel that ran
into this form too (`realized_effect`). spec/realize.md says why gradients survive.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from typing import Any, cast

from uopgrad._util import LRU
from uopgrad.errors import GradientError
from uopgrad.facts import NOT_COMPUTED, Fact
from uopgrad.ops import GroupOp, Ops
from uopgrad.uop import DEVICE, SHAPE, CallInfo, UOp

__all__ = [
    "REALIZE",
    "buffers_read",
    "check_not_overwritten",
    "effects",
    "effects_under",
    "is_realized",
    "is_realized_after",
    "is_realized_call",
    "overwritten",
    "reads",
    "realized",
    "realized_effect",
    "realized_view",
    "settle",
    "storage_view",
    "strip_realized",
]

REALIZE = "realize"  # the CallInfo name of a realized CALL
_counter = itertools.count()
# in-place writes so far, per BUFFER; and what each realized CALL's value read, at which version: kept on the
# nodes (they die with them) rather than in weak-key dictionaries, whose lookups cost a weak reference each
_VERSION: Fact[int] = Fact("in-place writes")
_READ_AT: Fact[tuple[tuple[UOp, int], ...]] = Fact("buffers read, at their versions")


def _version(b: UOp) -> int:
    v: int = b._facts.get(_VERSION, 0)  # (the fact's dict read directly: Fact.get is a lambda, a frame)
    return v


def _realized_gradient(g: UOp, _call: UOp) -> tuple[UOp | None, ...]:
    """The gradient of the realized view is the gradient of the value that was stored into it."""
    return (g, None, None)


# the arg of every realized CALL (one value: made once, and its hash computed once)
_REALIZED_INFO = CallInfo(_realized_gradient, (), REALIZE)


def _param_key(u: UOp) -> tuple[object, ...] | None:
    """What `u.param_like(k)` is made of (None for a BIND, whose PARAM carries its variable)."""
    if u.op is Ops.BIND:
        return None
    device = u.device  # a single device has no sharding axis (the axis is the dearer fact)
    return (u.dtype, u._shape, device, u.axis if isinstance(device, tuple) else None)


# the bodies made so far, by what their PARAMs are made of: every realize of an output of one shape, dtype
# and device stands for the same body (built anew, it was an eighth of a small realize)
_bodies: LRU[tuple[object, ...], UOp] = LRU(1024)


def _store_body(value: UOp, view: UOp) -> UOp:
    """SINK(STORE(PARAM 1, PARAM 0)): the work the realized CALL stands for (it has run already)."""
    kv, kw = _param_key(value), _param_key(view)
    if kv is None or kw is None:
        return view.param_like(1).store(value.param_like(0)).sink()
    if (body := _bodies.get((kv, kw))) is None:
        body = _bodies[(kv, kw)] = view.param_like(1).store(value.param_like(0)).sink()
    return body


def realized(view: UOp, value: UOp) -> UOp:
    """The realized form: `view` holds the value of `value`, computed already."""
    if view.shape != value.shape:
        raise ValueError(f"a realized view of shape {view.shape} can't hold a value of shape {value.shape}")
    d = view.detach()
    if value.op is Ops.DETACH:
        # no gradient passes a DETACH (a value made under no_grad, or detached): what computed it is not kept,
        # so a loop that realizes each step's value from the last one holds one step's buffers, not all
        value = d
    unique = UOp(Ops.UNIQUE, arg=("realize", next(_counter)))
    call = UOp(
        Ops.CALL,
        src=(_store_body(value, view), value, d, unique),
        arg=_REALIZED_INFO,
    )
    _READ_AT.put(call, () if value is d else tuple((b, _version(b)) for b in reads(value)))
    return d.after(call)


def buffers_read(u: UOp) -> list[UOp]:
    """The BUFFERs `u` reads itself: its own, and the storage of the realized values it reads (not what
    computed them)."""
    done: list[UOp] = []

    def gate(n: UOp) -> bool:
        if is_realized_after(n):
            done.append(n)
            return False
        return True

    out = dict.fromkeys(b for b in u.toposort(gate=gate, enter_calls=False) if b.op is Ops.BUFFER)
    out.update((b, None) for n in done for b in realized_view(n).toposort() if b.op is Ops.BUFFER)
    return list(out)


_EMPTY: frozenset[UOp] = frozenset()
# Three derived facts (uopgrad.facts.Fact: an answer dies with its node), filled by this module's own walk
# (`_fill_reads_effects`), none entering realized values or call bodies: node -> the BUFFERs it reads itself
# and node -> the effects of the AFTERs under it (filled in together), and node -> the node with every
# realized value read from its buffer (_SAME where nothing under it is realized: a node whose fact held the
# node itself could only be freed by the cycle collector, and with it its buffer; a BUFFER's reads are _SELF
# for the same reason). No node's answer refers back to the node. All three are filled in by one walk: a
# realize asks the effects of its graph, then strips it, and a second walk of every new node cost as much as
# the first; the strip builds nodes only above a realized value, which a graph that is never run seldom holds.
_READS: Fact[frozenset[UOp]] = Fact("reads")
_EFFECTS: Fact[frozenset[UOp]] = Fact("effects")
_STRIPPED: Fact[UOp] = Fact("stripped")
_SAME: UOp = cast("UOp", object())
_SELF: frozenset[UOp] = cast("frozenset[UOp]", object())  # a BUFFER reads itself (not kept: a cycle)
_DONE: Any = object()  # _fill_reads_effects's stack marker: the node below it has all its sources walked


def _same_facts(stripped: UOp, node: UOp) -> None:
    """The shape and device of `node` on its stripped form, where `node` has them: a realized value's view
    has the value's shape and device, so every node above one has them too once stripped (the rules would
    give the same from the stripped sources); realize asks them of what it stores."""
    if stripped._shape_fact is NOT_COMPUTED and type(shape := node._shape_fact) is tuple:
        SHAPE.put(stripped, shape)
    if stripped._device_fact is NOT_COMPUTED and type(device := node._device_fact) is str:
        DEVICE.put(stripped, device)


def _fill_realized(node: UOp) -> None:
    """The facts of a realized AFTER: it reads its storage, not what computed it (never entered)."""
    view = realized_view(node)
    facts = node._facts
    facts[_READS] = frozenset(b for b in view.toposort() if b.op is Ops.BUFFER)
    # a view taken of a realized tensor is itself built on a realized AFTER: strip it too
    facts[_STRIPPED] = strip_realized(view)
    facts[_EFFECTS] = _EMPTY  # (last: the fact that says the node is done)


def _fill_reads_effects(u: UOp) -> None:  # noqa: C901  (the realize walk's hot loop, its fill inlined)
    """The reads, effects and stripped form of every node under `u` that lacks them, filled in, sources
    first; a realized AFTER is not entered, nor a call's body. Asking again, or about a graph grown from one
    asked about before, walks only the new nodes: a training step's graph, built on the realized weights and
    data each time, is walked once."""
    if u._facts.get(_EFFECTS, NOT_COMPUTED) is not NOT_COMPUTED:
        return
    calls, after, buffer, reads_, effects_ = GroupOp.Call, Ops.AFTER, Ops.BUFFER, _READS, _EFFECTS
    stripped, none, done = _STRIPPED, NOT_COMPUTED, _DONE
    stack: list[Any] = [u]
    pop, push, extend = stack.pop, stack.append, stack.extend
    # HOT PATH (bench/step.py, plain steps: every new node of a step's graph passes here once): one walk,
    # each node filled in where it is finished (as in UOp.toposort, a node waits under the _DONE marker while
    # its sources are walked, and sources are pushed untested: one C-level extend); a node that has the facts
    # (filled in already, or just now through another consumer) is not entered again. The facts are read
    # and written in the nodes' `_facts` dicts directly (Fact.get is a lambda: a frame per node); the
    # effects go in last, as they say that a node is done.
    while stack:
        node = pop()
        if node is done:
            node = pop()
            if node._facts.get(effects_, none) is not none:  # (reached twice before it was finished)
                continue
        elif node._facts.get(effects_, none) is not none:
            continue
        elif node.op is after and is_realized_after(node):
            _fill_realized(node)
            continue
        else:
            push(node)
            push(done)
            extend(node.src[1:] if node.op in calls else node.src)
            continue
        op, facts = node.op, node._facts
        srcs = node.src[1:] if op in calls else node.src  # a call's body (src 0) is kept as it is
        # the union of the sources' reads and of their effects, in place (no list or _union call per node:
        # most nodes have one or two sources, and no effects)
        read: frozenset[UOp] | None = None
        effects: frozenset[UOp] | None = None
        same = True
        for x in srcs:
            xf = x._facts
            if (r := xf[reads_]) is _SELF:
                r = frozenset((x,))
            if read is None or (r and not read >= r):
                read = r if read is None or read <= r else read | r
            if e := xf[effects_]:
                effects = e if effects is None or effects <= e else effects if effects >= e else effects | e
            if xf[stripped] is not _SAME:
                same = False
        facts[reads_] = _SELF if op is buffer else read or _EMPTY
        if same:
            facts[stripped] = _SAME
        else:
            new = [x if (m := x._facts[stripped]) is _SAME else m for x in srcs]
            src = (node.src[0], *new) if op in calls else tuple(new)
            facts[stripped] = m = UOp(op, node.dtype, src, node.arg, node.tag)
            _same_facts(m, node)
        if op is after:
            effects = frozenset(node.src[1:]) | effects if effects else frozenset(node.src[1:])
        facts[effects_] = effects or _EMPTY
    # end HOT PATH


def reads(u: UOp) -> frozenset[UOp]:
    """`buffers_read(u)` as a set, remembered per node (realize asks it of every live unrealized tensor)."""
    _fill_reads_effects(u)
    r = _READS.get(u)
    return frozenset((u,)) if r is _SELF else r  # (no typing.cast: a call)


def effects(u: UOp) -> frozenset[UOp]:
    """`effects_under([u])`, remembered per node."""
    _fill_reads_effects(u)
    return _EFFECTS.get(u)  # type: ignore[no-any-return]  # (no typing.cast: a call)


def overwritten(buffers: Iterable[UOp]) -> None:
    """Note an in-place write into each of `buffers` (after the values that read them were recorded)."""
    for b in buffers:
        _VERSION.put(b, _version(b) + 1)


def check_not_overwritten(graph: UOp, needed: Iterable[UOp], targets: Collection[UOp] = ()) -> None:
    """Raise if a graph that reads one of the buffers `needed` (a gradient reading forward values) was
    computed from contents that an in-place write has since replaced: the gradient would silently use the
    new contents (PyTorch raises here too). Where `targets` are given, only the realized values the gradient
    passes through count: those with a target below them other than through a DETACH (a parameter an
    optimiser replaced with a realized value is a target whose own computation no gradient enters)."""
    # the stale reads first: usually there are none, and then what the gradients read (`needed`, lazy: a
    # walk of every gradient graph) is never computed
    nodes = graph.toposort(enter_calls=False)
    stale = [
        (call, b)
        for call in nodes
        if call.op is Ops.CALL  # only realized CALLs have reads
        if (at := _READ_AT.get(call)) is not NOT_COMPUTED
        for b, version in at
        if _version(b) != version
    ]
    if not stale:
        return
    if targets:  # node -> a target lies below it, not behind a DETACH (asked only where a read is stale)
        tset = set(targets)
        through: dict[UOp, bool] = {}
        for u in nodes:
            srcs = u.src[1:] if u.op in GroupOp.Call else u.src
            through[u] = u.op is not Ops.DETACH and any(x in tset or through[x] for x in srcs)
        stale = [(call, b) for call, b in stale if through[call]]
    need = set(needed)
    for _, b in stale:
        if b in need:
            raise GradientError(
                f"a value this gradient needs was computed from a {b.dtype!r} buffer of {b.arg} elements "
                f"on {b.device} that has been overwritten in place since (an assign after the forward "
                "pass). Call backward() (or realize the gradients) before updating the tensors it reads."
            )


def is_realized_after(u: UOp) -> bool:
    """An AFTER in the realized form."""
    if u.op is not Ops.AFTER or len(u.src) != 2 or u.src[1].op is not Ops.CALL:
        return False
    return is_realized_call(u.src[1].arg)


def is_realized_call(info: CallInfo) -> bool:
    """The CallInfo of a realized form's CALL (its gradient function is this module's, not a user's)."""
    return info.name == REALIZE and info.grad_fxn is _realized_gradient


def is_realized(u: UOp) -> bool:
    """The value lives in a buffer: a view of a BUFFER, in the realized form or not (tinygrad's
    `uop.is_realized`; a realized value sharded over a device tuple too)."""
    u = realized_view(u)
    if u.op is Ops.MULTI and u.src:  # the shards of a BUFFER on a device tuple
        u = u.src[0]
    return u.base.op is Ops.BUFFER


def realized_view(u: UOp) -> UOp:
    """The view holding a realized value (`u` itself for anything else)."""
    return u.src[0].src[0] if is_realized_after(u) else u


def storage_view(u: UOp) -> UOp:
    """`u` through its AFTERs (plain and realized): the view of the storage it is read from."""
    while u.op is Ops.AFTER:
        u = realized_view(u) if is_realized_after(u) else u.src[0]
    return u


def realized_effect(after: UOp) -> UOp:
    """The realized form of an effect that ran, AFTER(target, effect): the target's storage now holds the
    value. Its gradient is that of the stored value for an assign (AFTER+STORE is transparent to
    gradients), and that of the AFTER itself for a custom kernel (its grad_fxn)."""
    storage = storage_view(after)
    effect = after.src[1] if len(after.src) == 2 else None
    if effect is None or effect.op is not Ops.STORE:
        return realized(storage, after)
    # a write through another view of the same buffer (an alias) leaves no gradient path
    return realized(storage, effect.src[1] if effect.src[0] is after.src[0] else storage.detach())


def strip_realized(u: UOp) -> UOp:
    """`u` with every realized value read from its buffer: the graph a backend runs. A realized AFTER
    becomes its view and what computed it is never entered; call bodies are kept as they are. Remembered
    per node, like `reads`, and filled in by the same walk (a walk of the whole graph was a sixth of a
    small realize)."""
    _fill_reads_effects(u)
    r = _STRIPPED.get(u)
    return u if r is _SAME else r  # (no typing.cast: a call)


def _not_realized(u: UOp) -> bool:
    return not is_realized_after(u)


def effects_under(roots: Iterable[UOp]) -> set[UOp]:
    """The effects (assign STOREs, kernel CALLs) of every AFTER under `roots`, not entering realized values:
    what running `roots` runs."""
    out: set[UOp] = set()
    for r in roots:
        out.update(effects(r))
    return out


def _writes_buffer(after: UOp) -> bool:
    u = storage_view(after)
    # a write through `t.detach()` writes t's buffer, one through a MULTI the buffer on its device tuple; one
    # into a view of a tensor whose own assign was pending (`v = t.reshape(..)` after `t.assign(..)`, then
    # `t += 1`) goes through that assign's AFTER to the same buffer
    while u.op in GroupOp.Movement or u.op in (Ops.DETACH, Ops.MULTI, Ops.AFTER):
        u = realized_view(u) if is_realized_after(u) else u.src[0]
    return u.op is Ops.BUFFER


def settle(u: UOp, ran: Collection[UOp], memo: dict[UOp, UOp] | None = None) -> UOp:
    """`u` with each AFTER whose effects all ran (and that writes a buffer) in the realized form. Sources
    first, so the value an assign stored is settled before it is kept; realized values and call bodies are not
    entered. One realize settles every live graph with one `memo`: an AFTER they share gets one realized
    form, so an assign still pending on top of it (`t.assign(x); v = t.reshape(..); t += 1` holds the
    second write in both t and v) stays one node, and runs once, whichever of them is read first."""
    if not ran or effects(u).isdisjoint(ran):
        return u  # nothing under `u` ran: nothing to settle
    new: dict[UOp, UOp] = {} if memo is None else memo
    for n in u.toposort(gate=_not_realized, enter_calls=False):
        if n in new:
            continue
        src = tuple(new.get(x, x) for x in n.src)
        m = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
        done = n.op is Ops.AFTER and all(d in ran for d in n.src[1:]) and _writes_buffer(n)
        new[n] = realized_effect(m) if done else m
    return new.get(u, u)
