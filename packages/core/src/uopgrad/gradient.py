"""Reverse-mode gradients on UOps (layer 9): the local rules `pm_gradient`, `compute_gradient` and
`call_gradient` for FUNCTION/CALL nodes, exactly as specified in docs/semantics.md §3 (quirks included)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

from uopgrad._util import argsort
from uopgrad.dtype import sum_acc_dtype
from uopgrad.errors import GradientError
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from uopgrad.uop import UOp, all_metadata

__all__ = [
    "NOT_DIFFERENTIABLE",
    "call_gradient",
    "compute_gradient",
    "pm_gradient",
    "pm_transform_unique_const",
    "reduce_gradient",
]

LocalGrads = tuple[UOp | None, ...]
NOOP = UOp(Ops.NOOP)  # the placeholder for "no gradient here" (interned: every bare NOOP is this node)

# ops that are deliberately absent from pm_gradient: reaching one on a target path raises RuntimeError
NOT_DIFFERENTIABLE = frozenset(
    {
        Ops.CMPEQ,
        Ops.AND,
        Ops.OR,
        Ops.XOR,
        Ops.NEG,
        Ops.SUB,
        Ops.FDIV,
        Ops.CDIV,
        Ops.MULACC,
        Ops.THREEFRY,
        Ops.SHL,
        Ops.SHR,
        Ops.CMOD,
        Ops.FLOORDIV,
        Ops.FLOORMOD,
        Ops.MSELECT,
        Ops.MSTACK,
        Ops.ALLREDUCE,
        Ops.BUFFER_VIEW,
    }
)


# ---------------------------------------------------------------------- local rules
def reduce_gradient(g: UOp, ret: UOp, op: Ops) -> LocalGrads | None:
    """Gradient of REDUCE(op) w.r.t. its input; None for reduce ops with no rule."""
    x, axes = ret.src[0], ret.arg[1]

    def back(u: UOp) -> UOp:  # broadcast a reduced value back to the input's shape
        return u.reshape(u.shape + (1,) * (len(x.shape) - len(u.shape))).expand(x.shape)

    if op is Ops.ADD:
        return (back(g),)
    if op is Ops.MAX:
        if ret.op is not Ops.REDUCE:
            raise GradientError(f"a MAX reduce gradient needs the REDUCE node, got {ret.op}")
        mask = x.eq(back(ret)).cast(g.dtype)
        count = mask._rop(Ops.ADD, axes)
        return (mask / back(count) * back(g),)  # tied maxima share the gradient equally
    if op is Ops.MUL:
        return (back(g * ret) / x,)  # divides by x: zeros give inf/NaN, as at the reference
    return None


def _pow_grad(ctx: UOp, ret: UOp, b: UOp, e: UOp) -> LocalGrads:
    d_base = (b.eq(0) & e.eq(0)).where(e, e * b.pow(e - 1))  # 0 only at b=0,e=0; e*b^(e-1) elsewhere
    d_exp = b.eq(0).where((e < 0).where(ret.const_like(-math.inf), 0), ret * b.log2() * math.log(2.0))
    return (ctx * d_base, ctx * d_exp)


def _max_grad(ctx: UOp, x: UOp, y: UOp) -> LocalGrads:
    tie = x.eq(y).where(ctx * 0.5, 0)  # ties split the gradient equally
    return ((x > y).where(ctx, tie), (x < y).where(ctx, x.eq(y).where(ctx * 0.5, 0)))


def _expand_grad(ctx: UOp, ret: UOp) -> LocalGrads:
    axes = [i for i, (si, so) in enumerate(zip(ret.src[0].shape, ret.shape)) if si is not so and si != so]
    acc = sum_acc_dtype(ctx.dtype)
    return (ctx.cast(acc)._rop(Ops.ADD, axes).cast(ctx.dtype), None)


def _pad_grad(ctx: UOp, ret: UOp) -> LocalGrads:
    return (ctx.shrink(tuple((b, b + s) for (b, _), s in zip(ret.marg, ret.src[0].shape))), None, None)


def _shrink_grad(ctx: UOp, ret: UOp) -> LocalGrads:
    return (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.marg, ret.src[0].shape))), None, None)


def _after_call_grad(ctx: UOp, d: UOp, k: UOp) -> LocalGrads:
    pos = next(i for i, s in enumerate(k.src) if s is d) - 1  # first occurrence among k's arguments
    return (ctx, UOp.maketuple(*(ctx if i == pos else NOOP for i in range(len(k.src) - 1))))


pm_gradient = PatternMatcher(
    [
        (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),)),  # d cast(x) = cast back
        (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),  # d(1/x) = -1/x^2
        (
            UPat(Ops.SIN, name="ret"),
            lambda ctx, ret: ((math.pi / 2 - ret.src[0]).sin() * ctx,),
        ),  # d sin = cos
        (
            UPat(Ops.LOG2, name="ret"),
            lambda ctx, ret: (ctx / (ret.src[0] * math.log(2)),),
        ),  # d log2 x = 1/x ln2
        (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ret * ctx * math.log(2),)),  # d 2^x = 2^x ln2
        (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * 2),)),  # d sqrt x = 1/(2 sqrt x)
        (UPat(Ops.TRUNC), lambda ctx: (ctx.const_like(0),)),  # d trunc x = 0 (almost everywhere)
        (UPat((Ops.CMPLT, Ops.CMPNE)), lambda: (None, None)),  # comparisons have no gradient
        (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),  # d(a+b) = (1, 1)
        (UPat(Ops.POW, name="ret", src=(UPat.var("b"), UPat.var("e"))), _pow_grad),  # d b^e, guarded at b=0
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), _max_grad),  # to the larger; ties split
        (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ret.src[1] * ctx, ret.src[0] * ctx)),  # d(ab) = (b, a)
        (
            UPat(Ops.WHERE, name="ret"),
            lambda ctx, ret: (
                None,
                ret.src[0].where(ctx, ctx.const_like(0)),
                ret.src[0].where(ctx.const_like(0), ctx),
            ),
        ),  # route by c
        (UPat(Ops.REDUCE, name="ret"), lambda ctx, ret: reduce_gradient(ctx, ret, ret.arg[0])),
        (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),  # identity
        (UPat(Ops.CONTIGUOUS_BACKWARD), lambda ctx: (ctx.contiguous(),)),  # force a contiguous gradient
        (
            UPat(Ops.RESHAPE, name="ret"),
            lambda ctx, ret: (ctx.reshape(ret.src[0].shape), None),
        ),  # reshape back
        (UPat(Ops.EXPAND, name="ret"), _expand_grad),  # sum over the broadcast axes
        (UPat(Ops.PAD, name="ret"), _pad_grad),  # keep the unpadded window
        (UPat(Ops.SHRINK, name="ret"), _shrink_grad),  # zero-pad back to the input's shape
        (
            UPat(Ops.PERMUTE, name="ret"),
            lambda ctx, ret: (ctx.permute(argsort(ret.arg)),),
        ),  # inverse permutation
        (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip([i for i, f in enumerate(ret.arg) if f]),)),
        (
            UPat(Ops.COPY, name="ret"),
            lambda ctx, ret: (ctx.copy_to_device(ret.src[0].device), None),
        ),  # copy back
        # the gradient of a MULTI is the incoming gradient cut into the same shards (below a new MULTI)
        (UPat(Ops.MULTI, name="ret"), lambda ctx, ret: ctx.shard(ret.device, ret.axis).src),
        (UPat(Ops.TUPLE), lambda ctx: ctx.src),  # one entry per element
        (
            UPat(Ops.AFTER, src=(UPat.var("d"), UPat(Ops.CALL, name="k"))),
            _after_call_grad,
        ),  # one-hot to the CALL
        (
            UPat(Ops.AFTER, src=(UPat(), UPat(Ops.STORE))),
            lambda ctx: (None, ctx),
        ),  # clone/assign are transparent
        (UPat(Ops.STORE, src=(UPat(), UPat())), lambda ctx: (None, ctx)),  # to the stored value
        (UPat(Ops.BITCAST), lambda: (None,)),  # bits, not values
    ]
)

# renumber "unique" constants per body from 0 so that two traces of one function have an equal key
pm_transform_unique_const = PatternMatcher(
    [
        (
            UPat(Ops.CONST, src=(UPat(Ops.UNIQUE), UPat(Ops.DEVICE, name="d")), name="c"),
            lambda ctx, c, d: c.replace(src=(UOp(Ops.LUNIQUE, arg=next(ctx[1])), d)),
        ),  # UNIQUE -> LUNIQUE(n)
    ]
)


# ---------------------------------------------------------------------- the walk
def _target_path(root: UOp, targets: set[UOp]) -> dict[UOp, bool]:
    """node -> whether any of its sources is a target or on the path (call bodies entered), in post-order."""
    on_path: dict[UOp, bool] = {}
    root.topovisit(lambda u: any(s in targets or on_path[s] for s in u.src), on_path)
    return on_path


def _add_to_tuple(holder: UOp, grads: dict[UOp, UOp], i: int, g: UOp) -> None:
    """GETTUPLE accumulation: put g at position i of the TUPLE gradient of FUNCTION `holder`."""
    if holder.op is not Ops.FUNCTION or holder.src[0].op is not Ops.TUPLE:
        raise AssertionError(f"GETTUPLE gradient needs a FUNCTION with a TUPLE body, got {holder.op}")
    elems = list(grads[holder].src) if holder in grads else [NOOP] * len(holder.src[0].src)
    elems[i] = g if elems[i].op is Ops.NOOP else elems[i] + g
    grads[holder] = UOp.maketuple(*elems)


def _merge(old: UOp, new: UOp) -> UOp:
    if old.op is Ops.TUPLE and new.op is Ops.TUPLE:  # CALL gradients arriving through several AFTERs
        return UOp.maketuple(
            *(b if a.op is Ops.NOOP else a if b.op is Ops.NOOP else a + b for a, b in zip(old.src, new.src))
        )
    return old + new  # a NOOP here fails in dtype promotion, as at the reference


def _tag_backward(t: UOp, v: UOp, grads: dict[UOp, UOp]) -> None:
    """Copy t's forward metadata, marked backward, onto every node its gradient contribution created."""
    if not (forward := all_metadata.get(t, ())):
        return
    backward = tuple(dataclasses.replace(m, backward=True) for m in forward)
    stop = {t, *t.src, grads[t]}
    for u in v.toposort(gate=lambda x: x not in stop):
        all_metadata[u] = all_metadata.get(u, ()) + backward


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `root_grad`) for every node on a path to `targets`.
    Returns the map node -> gradient; it holds `root` and every node that received a gradient."""
    grads: dict[UOp, UOp] = {root: root_grad}
    on_path = _target_path(root, targets)
    walk = [u for u, on in on_path.items() if on and u.op is not Ops.DETACH]
    for t in reversed(walk):  # consumers before producers
        if (g := grads.get(t)) is None or g.op is Ops.NOOP:
            continue
        if t.op is Ops.GETTUPLE:
            _add_to_tuple(t.src[0], grads, t.arg, g)
            continue
        if t.op in GroupOp.Call:
            needed = {j for j, a in enumerate(t.src[1:]) if a in targets or on_path.get(a, False)}
            local: Sequence[UOp | None] | None = call_gradient(g, t, needed)
        else:
            local = pm_gradient.rewrite(t, ctx=g)
        if local is None:
            raise GradientError(f"failed to compute gradient for {t.op}\n\nin {t.short()}")
        if len(local) != len(t.src):
            raise AssertionError(f"{t.op} gradient has {len(local)} entries for {len(t.src)} sources")
        for s, v in zip(t.src, local):
            if v is None:
                continue
            old = grads.get(s)
            grads[s] = v if old is None or old.op is Ops.NOOP else _merge(old, v)
            _tag_backward(t, v, grads)
    return grads


# ---------------------------------------------------------------------- FUNCTION / CALL
def _compact_params(body: UOp, candidates: Sequence[UOp]) -> tuple[UOp, tuple[UOp, ...]]:
    """Renumber the PARAM slots `body` uses to 0..n-1 (ascending by old slot) and pick their arguments.
    Slots are collected inside nested call bodies too, but renamed only outside them (a reference quirk)."""
    by_slot = {u.arg: u for u in body.toposort() if u.op is Ops.PARAM}  # later node wins a repeated slot
    used = sorted(by_slot.items())
    renamed = body.substitute({p: p.replace(arg=new) for new, (_, p) in enumerate(used)}, walk=True)
    return renamed, tuple(candidates[old] for old, _ in used)


def _grad_fxn_call(g: UOp, k: UOp) -> LocalGrads:
    """A user grad_fxn: one real output gradient is passed as (g, k); several as (*gs, call=k)."""
    assert k.arg.grad_fxn is not None
    if g.op is not Ops.TUPLE:
        return (None, *k.arg.grad_fxn(g, k))
    real = [x for x in g.src if x.op is not Ops.NOOP]
    return (None, *(k.arg.grad_fxn(*real, call=k) if len(real) > 1 else k.arg.grad_fxn(real[0], k)))


def call_gradient(ctx: UOp, k: UOp, needed: set[int]) -> LocalGrads:
    """Local gradients of a CALL/FUNCTION `k` given its output gradient `ctx`: None for the body, then one
    GETTUPLE of a single shared backward FUNCTION per needed argument (None for the others)."""
    if k.arg.grad_fxn is not None:
        return _grad_fxn_call(ctx, k)
    body, args = k.src[0], k.src[1:]
    if body.op is not Ops.TUPLE:
        raise AssertionError(f"expected TUPLE body for gradient, got {body.op.name}")
    nargs, out_grads = len(args), ctx.src
    slot_param = {u.arg: u for u in body.toposort(enter_calls=False) if u.op is Ops.PARAM}
    # output gradient i enters the backward body as slot nargs+i
    seed = UOp.maketuple(
        *(NOOP if g.op is Ops.NOOP else g.param_like(nargs + i) for i, g in enumerate(out_grads))
    )
    inner = compute_gradient(body, seed, set(slot_param.values()))
    # precompile: forward output i is an input (slot nargs+nout+i) instead of being recomputed
    fwd_inputs: tuple[UOp, ...] = ()
    fwd_params: dict[UOp, UOp] = {}
    if k.arg.precompile:
        fwd_params = {o: o.param_like(nargs + len(out_grads) + i) for i, o in enumerate(body.src)}
        fwd_inputs = tuple(k.gettuple(i) for i in range(len(body.src)))
    kept = [(i, inner[p]) for i in needed if (p := slot_param.get(i)) is not None and p in inner]
    bwd = UOp.maketuple(*(gb for _, gb in kept)).substitute(fwd_params, walk=True)
    bwd, bwd_args = _compact_params(bwd, (*args, *out_grads, *fwd_inputs))
    bwd = graph_rewrite(bwd, pm_transform_unique_const, ctx=(None, itertools.count(0)))
    name = (k.arg.name or "") + "_backward"
    bwd_call = bwd.call(*bwd_args, name=name, precompile=k.arg.precompile_backward)
    position = {i: j for j, (i, _) in enumerate(kept)}
    return (None, *(bwd_call.gettuple(position[i]) if i in position else None for i in range(nargs)))
