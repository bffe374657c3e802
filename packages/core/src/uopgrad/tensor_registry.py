"""The live tensors (layer 15, below tensor): which tensors a realize or an assign has to update.

A realize leaves the tensors that held the values it computed in the realized form, and an assign changes
every tensor that aliases the storage it writes. Finding them by a scan of every live tensor made each
realize and each assign cost time in proportion to everything the program keeps (measured: 0.4 ms per
realize of a small kernel with no other tensors, 1.2 ms with 10k live ones, 12.4 ms with 100k). Two weak
indexes, kept up to date by `moved` whenever a tensor's graph changes, narrow that down:

- `pending()`: the tensors whose value is not realized. A realized tensor is never computed again and never
  reads an effect that has not run, so a realize only looks at these.
- `views_of(buffer)`: the tensors stored in `buffer` (the buffer itself, views of it, realized values in it,
  assigns into it). An assign into the buffer only looks at these.

Entries are weak references, and a tensor whose graph has moved on may stay listed where it was: the readers
check each tensor they get (`pending` drops those that are realized now, an assign tests the alias itself).
`all_tensors()` is every live tensor, in creation order (backward looks for those that require grad).
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING

from uopgrad._util import all_int
from uopgrad.ops import GroupOp, Ops
from uopgrad.realized import effects_under, is_realized_after, reads, realized_view
from uopgrad.uop import UOp

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor

__all__ = [
    "Siblings",
    "ahead_of",
    "all_tensors",
    "assigned",
    "is_realized",
    "moved",
    "pending",
    "readers_of_overwritten",
    "register",
    "storage_chain",
    "view_of_buffer",
    "view_through_afters",
    "views_of",
]

# plain weak references (no callbacks): CPython hands out one shared callback-free ref per object, so both
# indexes hold the same one, and dead entries are dropped in amortised sweeps
_all: dict[int, weakref.ReferenceType[Tensor]] = {}
_pending: dict[int, weakref.ReferenceType[Tensor]] = {}
_views: weakref.WeakKeyDictionary[UOp, dict[int, weakref.ReferenceType[Tensor]]] = weakref.WeakKeyDictionary()
_purge_at = {"all": 1024, "pending": 1024}  # the sizes at which each index drops its dead entries next
# a DETACH is a view too: `t.detach()` shares t's storage (a write through it reaches t, as in PyTorch); so
# is a MULTI: a sharded tensor is stored in the per-device buffers of the BUFFER on its device tuple
_STORAGE_OPS = (
    Ops.RESHAPE,
    Ops.EXPAND,
    Ops.PERMUTE,
    Ops.PAD,
    Ops.SHRINK,
    Ops.FLIP,
    Ops.AFTER,
    Ops.DETACH,
    Ops.MULTI,
)


def plain_buffer(u: UOp) -> UOp | None:
    """The BUFFER under a chain of RESHAPEs, or None."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def is_realized(u: UOp) -> bool:
    """Whether `u` is a value realize left: the realized form, a buffer (view), or the view of a symbolic
    shape realize makes, RESHAPE(SHRINK(BUFFER))."""
    # (asked of every tensor an op makes: the AFTER test and plain_buffer's loop inline, a frame each saved)
    if u.op is Ops.AFTER and is_realized_after(u):
        return True
    b = u
    while b.op is Ops.RESHAPE:
        b = b.src[0]
    if b.op is Ops.BUFFER:
        return True
    s = u.src[0] if u.op is Ops.RESHAPE else u
    return s.op is Ops.SHRINK and s.src[0].op is Ops.BUFFER and not all_int(u.shape)


def storage_chain(u: UOp) -> tuple[list[UOp], UOp]:
    """The nodes from `u` down through movement ops and AFTERs (realized ones too), and the node holding the
    storage."""
    chain = [u]
    while u.op in _STORAGE_OPS:
        u = realized_view(u) if u.op is Ops.AFTER and is_realized_after(u) else u.src[0]
        chain.append(u)
    return chain, u


_VIEW_OPS = (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP)


def view_of_buffer(u: UOp) -> UOp | None:
    """`u` without its DETACHes when it is a chain of movement ops and DETACHes over a BUFFER (a stripped
    graph: no AFTER), else None. Realized, such a tensor stays that view: a copy would stop it aliasing
    its base (`v = t[1:3]; v.realize(); t[1] = 9` changes v, as in tinygrad and PyTorch). On a device
    tuple the chain may pass the MULTI over the tuple's BUFFER."""
    chain: list[UOp] = []
    while u.op in _VIEW_OPS or u.op in (Ops.DETACH, Ops.MULTI):
        if u.op is not Ops.DETACH:
            chain.append(u)
        u = u.src[0]
    if u.op is not Ops.BUFFER:
        return None
    for m in reversed(chain):
        u = m if m.src[0] is u else m.replace(src=(u, *m.src[1:]))
    return u


def register(t: Tensor) -> None:
    """A new tensor (its graph is set after this, through `moved`)."""
    _all[t._id] = weakref.ref(t)
    if len(_all) >= _purge_at["all"]:
        _sweep(_all, "all")


def moved(t: Tensor, u: UOp) -> None:
    """Tensor `t` now holds graph `u`: index it where a realize or an assign will look for it."""
    if not is_realized(u):
        _pending[t._id] = weakref.ref(t)
        if len(_pending) >= _purge_at["pending"]:  # tensors built and dropped without a realize
            _sweep(_pending, "pending")
    if u.op in _STORAGE_OPS or u.op is Ops.BUFFER:
        base = storage_chain(u)[1]
        if base.op is Ops.BUFFER:
            views = _views.get(base)
            if views is None:
                views = _views[base] = {}
            if t._id not in views:  # a view per step of a weight read forever: the entry leaves with it
                views[t._id] = weakref.ref(t, functools.partial(_forget, views, t._id))


def _sweep(index: dict[int, weakref.ReferenceType[Tensor]], name: str) -> None:
    """Forget the dead tensors of `index`; the next sweep comes when it has doubled."""
    for k, ref in list(index.items()):  # a copy taken at once: other threads may add tensors meanwhile
        if ref() is None:
            index.pop(k, None)
    _purge_at[name] = max(1024, 2 * len(index))


def _forget(
    views: dict[int, weakref.ReferenceType[Tensor]], key: int, _ref: weakref.ReferenceType[Tensor]
) -> None:
    views.pop(key, None)


def pending() -> list[Tensor]:
    """The live tensors whose value is not realized, in creation order; the rest leave the index."""
    out: list[Tensor] = []
    for k in sorted(_pending):
        t = _pending[k]()
        if t is None or is_realized(t.uop):
            del _pending[k]
        else:
            out.append(t)
    return out


def views_of(buffer: UOp) -> list[Tensor]:
    """The live tensors that were stored in `buffer` (some may hold other graphs by now)."""
    views = _views.get(buffer)
    if not views:
        return []
    out: list[Tensor] = []
    for k, ref in list(views.items()):
        if (t := ref()) is None:
            del views[k]
        else:
            out.append(t)
    return out


def all_tensors() -> list[Tensor]:
    """Every live tensor, in creation order."""
    out = [t for ref in list(_all.values()) if (t := ref()) is not None]
    _sweep(_all, "all")
    return out


# ---------------------------------------------------------------------- what comes next
class Siblings:
    """The gradients one `backward()` made, where it derived them (a structure not seen before: a first
    step). Users read them one after another (`[p.grad.numpy() for p in params]`); each read is a realize of
    its own, whose new kernels were one compiler batch each. The first read builds the others' kernels with
    its own instead (`ahead_of`), once: their realizes then find them built."""

    __slots__ = ("done", "refs")

    def __init__(self, tensors: list[Tensor]) -> None:
        self.refs = tuple(weakref.ref(t) for t in tensors)
        self.done = False


def ahead_of(tensors: list[Tensor]) -> list[Tensor]:
    """The tensors whose kernels a realize of `tensors` builds too: the live, unrealized siblings of those
    with a group not used yet (each group is used once)."""
    out: list[Tensor] = []
    for t in tensors:
        if (group := getattr(t, "_siblings", None)) is None or group.done:
            continue
        group.done = True
        out += [
            s
            for r in group.refs
            if (s := r()) is not None and all(s is not x for x in tensors) and not is_realized(s.uop)
        ]
    return out


# ---------------------------------------------------------------------- PyTorch's order of values
def assigned(roots: list[UOp]) -> set[UOp]:
    """The BUFFERs the graphs under `roots` assign into (their STOREs' storage)."""
    return {
        b
        for e in effects_under(roots)
        if e.op is Ops.STORE and (b := storage_chain(e.src[0])[1]).op is Ops.BUFFER
    }


def readers_of_overwritten(todo: list[UOp], written: set[UOp]) -> list[UOp]:
    """The unrealized values of live tensors that read a buffer `todo` assigns into: they are computed in
    the same run, before the write, so they keep the contents they were built on (PyTorch's order); a
    pending assign into another buffer is one of them, and then so are the readers of that buffer, and so on
    (`written` grows by the buffers they assign into). A view of a written buffer is not: it sees the write;
    unless an assign of its own, not in this run, is pending on it (`t1.assign(t0 * 2)` after `t0`'s assign
    and before `t0`'s next one)."""
    seen, out = set(todo), []
    running = effects_under(todo)
    while written:
        grown: set[UOp] = set()
        for t in pending():
            u = t.uop
            if u in seen or is_realized(u):
                continue
            if storage_chain(u)[1] in written and effects_under([u]) <= running:
                continue  # a view of written storage with nothing pending of its own: it sees the write
            if not reads(u).isdisjoint(written):
                seen.add(u)
                out.append(u)
                grown.update(assigned([u]) - written)
                running |= effects_under([u])
        if not grown:
            break
        written |= grown
    return out


def view_through_afters(u: UOp) -> tuple[UOp, list[UOp]] | None:
    """For movement ops over AFTERs of a buffer view (in a stripped graph: a view taken of a tensor whose
    assign was pending): the same movement ops over the buffer, and the AFTERs whose effects the value
    waits for; None for anything else."""
    chain: list[UOp] = []
    afters: list[UOp] = []
    while u.op in GroupOp.Movement or u.op in (Ops.AFTER, Ops.DETACH):
        if u.op is Ops.AFTER:
            afters.append(u)
        elif u.op is not Ops.DETACH:
            chain.append(u)
        u = u.src[0]
    if not afters or u.op is not Ops.BUFFER:
        return None
    for m in reversed(chain):
        u = m.replace(src=(u, *m.src[1:]))
    return (u, afters) if view_of_buffer(u) is not None else None
