"""Saved values (layer 9, beside gradient): the forward values a backward pass will read, so that realizing a
loss can keep them in buffers (PyTorch's saved tensors) instead of the backward computing them again.

A user reads the loss before differentiating it (`loss.item()`, then `loss.backward()`). The loss's kernels
compute every layer's activations, but only the loss leaves the run; the backward's graph reads the
activations again (the relu mask reads the pre-activation, a weight's gradient reads the layer's input),
and without them it recomputes the whole forward pass. `saved_values` names those values: for each node on
a path to a tensor that requires grad, what the local gradient rule of `pm_gradient` reads for each source
on that path (`SAVED`), taken down to the computed node under its views. `Tensor._realize` computes them
in the same run and `realized.keep_value` makes each node read as its buffer from then on.

The table is a forecast, not a rule of the IR: a value the gradient does not read costs a buffer and a
store, a value it reads but the table misses is computed again, and in neither case does any result change
(a kept node is the value it denotes, computed once; spec/realize.md, "Saved values").
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from uopgrad.ops import GroupOp, Ops
from uopgrad.uop import UOp

__all__ = ["RET", "SAVED", "SAVED_REDUCE", "saved_values"]

RET = -1  # the node's own value, in the tables below
# op -> for each source index, what the local gradient of that source reads: source indices, or RET
SAVED: dict[Ops, tuple[tuple[int, ...], ...]] = {
    Ops.MUL: ((1,), (0,)),                  # d(ab) = (b, a)
    Ops.MAX: ((0, 1), (0, 1)),              # to the larger operand, ties split: compares both
    Ops.POW: ((0, 1), (0, RET)),            # e * b^(e-1); ret * log2(b) * ln 2
    Ops.WHERE: ((), (0,), (0,)),            # routed by the condition
    Ops.RECIPROCAL: ((RET,),),              # -1/x^2 as -ret*ret
    Ops.EXP2: ((RET,),),                    # 2^x ln 2
    Ops.SQRT: ((RET,),),                    # 1 / (2 sqrt x)
    Ops.SIN: ((0,),),                       # cos x
    Ops.LOG2: ((0,),),                      # 1 / (x ln 2)
}
# a REDUCE's gradient by its op: MAX compares the input with the result, MUL divides the result by the input
SAVED_REDUCE: dict[Ops, tuple[int, ...]] = {Ops.MAX: (0, RET), Ops.MUL: (0, RET)}
# nodes the walk does not enter: no gradient passes a DETACH, a realized value is a leaf (a target or not),
# and what a call's backward reads is its own business
_OPAQUE = frozenset({Ops.DETACH, Ops.AFTER, *GroupOp.Call, Ops.GETTUPLE, Ops.TUPLE})


def _walk(roots: Iterable[UOp]) -> dict[UOp, None]:
    """The nodes under `roots`, sources first, not entering opaque nodes."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(r, False) for r in roots]
    while stack:
        node, expanded = stack.pop()
        if node in out:
            continue
        if expanded or node.op in _OPAQUE:
            out[node] = None
            continue
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src) if s not in out)
    return out


def _computed(v: UOp) -> UOp | None:
    """The computed node `v` is a view of (an ALU op, a REDUCE, a CAST of concrete shape on one device), or
    None where it is a view of something already in memory (a buffer, a realized value, a constant)."""
    while v.op in GroupOp.Movement:
        v = v.src[0]
    if v.op not in GroupOp.ALU and v.op not in (Ops.REDUCE, Ops.CAST):
        return None
    shape = v._shape
    if shape is None or not all(isinstance(s, int) for s in shape) or not isinstance(v.device, str):
        return None
    return v


def saved_values(roots: Sequence[UOp], targets: set[UOp]) -> list[UOp]:
    """The computed values under `roots` that the gradient of `roots` with respect to `targets` reads."""
    order = _walk(roots)
    on_path: dict[UOp, bool] = {}
    for u in order:
        on_path[u] = u in targets or (u.op not in _OPAQUE and any(on_path.get(s, False) for s in u.src))
    out: dict[UOp, None] = {}
    for t in order:
        if not on_path[t] or t.op in _OPAQUE:  # (a target passes its gradient on, as compute_gradient does)
            continue
        if t.op is Ops.REDUCE:
            reads: tuple[tuple[int, ...], ...] = (SAVED_REDUCE.get(t.arg[0], ()),)
        else:
            reads = SAVED.get(t.op, ())
        for i, s in enumerate(t.src[:len(reads)]):
            if not on_path.get(s, False):
                continue
            for r in reads[i]:
                if (base := _computed(t if r == RET else t.src[r])) is None:
                    continue
                if base.op in GroupOp.Comparison:
                    # a mask is kept as what it compares: recomputed, it is one op fused into the kernel that
                    # reads it, where a buffer of its own would be a kernel and a launch (relu's mask)
                    out.update((b, None) for x in base.src if (b := _computed(x)) is not None)
                    if any(_computed(x) is None and x.base.op is not Ops.CONST for x in base.src):
                        out[base] = None  # it compares something that is not kept either way: keep it
                else:
                    out[base] = None
    return list(out)
