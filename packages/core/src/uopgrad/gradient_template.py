"""Gradients by template (layer 9, over gradient): the gradient of a graph whose structure was differentiated
before is built again from what `compute_gradient` made then, not derived again.

A training loop differentiates a graph of one structure every step: new data and new weights, the same ops.
Deriving it again runs a `pm_gradient` rule per node, each building its nodes through the shape-checked
front-end methods; that was most of `backward()`. `gradients` keys the graph by structure, as the
scheduler's cache does (one tuple per node, sources as positions, so which nodes are shared is part of it;
a UNIQUE's count, the identity of a buffer, is left out), and keeps per structure the nodes the rules built:
each node's fields, with every source either a position in the graph or an earlier built node. A graph of a
known structure gets its gradients by making those nodes again over its own nodes. UOps are interned, so
the result is not just equal to what `compute_gradient` returns: it is the same nodes
(spec/gradients.md §9; `VERIFY=1` checks every hit against `compute_gradient`). The structure decides the
shape and device of every node made too: learnt at the first reuse, they are given to the nodes made at the
next ones, where `backward` asking a gradient's shape walked the whole gradient graph to infer them again.

Never cached, derived every time: a graph with a user's `grad_fxn` in it (a custom kernel's, a function's:
Python that may read state of its own, or count its calls, is called on every backward, as before), a graph
whose nodes carry metadata (the rules tag the nodes they build with their forward node's, which the key
does not hold), a graph with an arg that does not hash, and a structure whose gradient built a node with
an identity of its own (a UNIQUE or a BUFFER).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from uopgrad._util import LRU
from uopgrad.config import VERIFY
from uopgrad.errors import GradientError
from uopgrad.facts import NOT_COMPUTED
from uopgrad.gradient import compute_gradient
from uopgrad.ops import Ops
from uopgrad.realized import is_realized_call
from uopgrad.uop import DEVICE, SHAPE, CallInfo, UOp, all_metadata

__all__ = ["gradients", "template_cache_info"]

# a reference to a node of the template: its position in the graph's nodes followed by the built ones (the
# structure fixes how many nodes the graph has)
Ref = int
Fields = tuple[Ops, Any, tuple[Ref, ...], Any, Any]  # op, dtype, sources, arg, tag


@dataclass(frozen=True)
class _Template:
    """The nodes `compute_gradient` built for one structure (sources first), and each target's gradient;
    once learnt (`_learn`), each built node's shape and device, which its structure decides."""

    built: tuple[Fields, ...]
    outs: tuple[Ref | None, ...]
    facts: list[tuple[tuple[Any, Any], ...]] = field(default_factory=list, compare=False)

    def instantiate(self, nodes: list[UOp]) -> list[UOp | None]:
        pool = list(nodes)  # the graph's nodes, then each node made, at the position its Ref gives
        at = pool.__getitem__
        for op, dtype, srcs, arg, tag in self.built:
            pool.append(UOp(op, dtype, tuple(map(at, srcs)), arg, tag))
        made = pool[len(nodes) :]
        outs = [None if r is None else pool[r] for r in self.outs]
        if not self.facts:
            self._learn(made, outs)
        else:  # new nodes get their facts without a walk of the gradient graph (backward asks its shapes)
            for u, (shape, device) in zip(made, self.facts[0]):
                if u._shape_fact is NOT_COMPUTED:
                    SHAPE.put(u, shape)
                if u._device_fact is NOT_COMPUTED:
                    DEVICE.put(u, device)
        return outs

    def _learn(self, made: list[UOp], outs: list[UOp | None]) -> None:
        """Fill in the shapes and devices of `made` (they are asked of every gradient anyway; `fill` keeps a
        ShapeError on its node, it does not raise) and keep them where they are plain values: int shapes,
        device names. A symbolic size is a node of its own graph, so such a template learns nothing."""
        for o in outs:
            if o is not None and o._shape_fact is NOT_COMPUTED:
                SHAPE.fill(o)
            if o is not None and o._device_fact is NOT_COMPUTED:
                DEVICE.fill(o)
        facts = tuple((u._shape_fact, u._device_fact) for u in made)
        if all(_plain_shape(s) and _plain_device(d) for s, d in facts):
            self.facts.append(facts)


def _plain_shape(s: Any) -> bool:  # noqa: ANN401  (a fact: a shape, None, an Err or NOT_COMPUTED)
    return s is None or (type(s) is tuple and all(type(d) is int for d in s))


def _plain_device(d: Any) -> bool:  # noqa: ANN401  (a fact: a device, None, an Err or NOT_COMPUTED)
    return d is None or type(d) is str or (type(d) is tuple and all(type(x) is str for x in d))


_UNCACHEABLE = _Template((), ())  # a structure whose gradient has a node of its own identity
# bounded: a run over ever new structures keeps the recent ones (a training loop has one or a few; a template
# holds a node per gradient node, which for a long graph is not small)
_cache: LRU[tuple[Any, ...], _Template] = LRU(64)
_stats = {"hits": 0, "misses": 0}


def _structure(
    root: UOp, seed: UOp, targets: Sequence[UOp], order: dict[UOp, None] | None
) -> tuple[list[UOp], tuple[Any, ...] | None]:
    """The nodes under `root` and `seed` (call bodies too, as `compute_gradient` walks them) and the key of
    their structure with the targets' positions (None: a user's grad_fxn is in the graph). `order`: root's
    toposort, where the caller has it (backward walked the graph for its targets)."""
    order = root.toposort() if order is None else order.copy()
    order.update(seed.toposort())
    index: dict[UOp, int] = {}
    parts: list[tuple[Any, ...]] = []
    at, add = index.__getitem__, parts.append
    for u in order:
        if u.op is Ops.UNIQUE:  # which one is identity, not structure
            part: tuple[Any, ...] = (Ops.UNIQUE,)
        else:
            arg = u.arg
            if type(arg) is CallInfo and arg.grad_fxn is not None and not is_realized_call(arg):
                return list(order), None
            part = (u.op, u.dtype, type(arg), arg, u.tag, tuple(map(at, u.src)))
        index[u] = len(parts)
        add(part)
    add(("targets", *(index.get(t, -1) for t in targets), ("seed", index[seed])))
    return list(order), tuple(parts)


def _record(nodes: list[UOp], outs: list[UOp | None]) -> _Template:
    """The template of `outs` (gradients built over `nodes`): every node under them that is not in `nodes`."""
    index = {u: i for i, u in enumerate(nodes)}
    built: dict[UOp, int] = {}
    fields: list[Fields] = []
    for out in outs:
        if out is None or out in index:
            continue
        for u in out.toposort(gate=lambda x: x not in index and x not in built):
            if u.op in (Ops.UNIQUE, Ops.BUFFER):
                return _UNCACHEABLE
            fields.append(
                (u.op, u.dtype, tuple(index[s] if s in index else built[s] for s in u.src), u.arg, u.tag)
            )
            built[u] = len(nodes) + len(fields) - 1  # its Ref: after the graph's nodes
    return _Template(
        tuple(fields), tuple(None if o is None else index[o] if o in index else built[o] for o in outs)
    )


def gradients(
    root: UOp, seed: UOp, targets: Sequence[UOp], order: dict[UOp, None] | None = None
) -> list[UOp | None]:
    """`compute_gradient(root, seed, set(targets))[t]` for each target (None where it has none), from the
    template of the graph's structure when there is one. `order`: `root.toposort()`, where the caller has
    it."""
    if len(all_metadata):
        return _derived(root, seed, targets)
    nodes, key = _structure(root, seed, targets, order)
    if key is None:
        return _derived(root, seed, targets)
    try:
        tmpl = _cache.get(key)
    except TypeError:  # an arg that does not hash (a user's CallInfo metadata, say)
        return _derived(root, seed, targets)
    if tmpl is None:
        _stats["misses"] += 1
        outs = _derived(root, seed, targets)
        _cache[key] = _record(nodes, outs)
        return outs
    if tmpl is _UNCACHEABLE:
        return _derived(root, seed, targets)
    _stats["hits"] += 1
    outs = tmpl.instantiate(nodes)
    if VERIFY:
        expected = _derived(root, seed, targets)
        if any(a is not b for a, b in zip(outs, expected)):
            raise GradientError(
                f"a gradient template built other nodes than compute_gradient: {outs} against {expected}"
            )
    return outs


def _derived(root: UOp, seed: UOp, targets: Sequence[UOp]) -> list[UOp | None]:
    grads = compute_gradient(root, seed, set(targets))
    return [grads.get(t) for t in targets]


def template_cache_info() -> dict[str, int]:
    """Hits, misses and size of the gradient template cache."""
    return {**_stats, "size": len(_cache)}
