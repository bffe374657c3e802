"""Nodes built with their facts (layer above uop): the hot paths of the Tensor front end build some graph
pieces directly, with the shape and device their rules would infer already set, so no fact walk runs for
them later. Each builds exactly the nodes of the general path (packages/core/tests/test_eager_fast_paths.py
compares them node for node and fact for fact)."""

from __future__ import annotations

import math

from uopgrad.facts import NOT_COMPUTED, infer_device
from uopgrad.ops import Ops
from uopgrad.uop import DEVICE, SHAPE, UOp, shape_vec

__all__ = ["buffer_view", "matmul_nodes", "max_nodes"]


def buffer_view(buf: UOp, shape: tuple[int, ...]) -> UOp:
    """BUFFER `buf` (of prod(shape) elements, non-negative int sizes: the caller's) seen with `shape`: what
    `buf.reshape(shape)` builds, built directly with its facts (the RESHAPE rule's result, `shape`, and the
    buffer's device): a tensor made from host data, a realize's output view."""
    if shape == (buf.arg,):
        return buf  # (reshape to the same shape is the node itself)
    view = UOp(Ops.RESHAPE, buf.dtype, (buf, shape_vec(shape)))
    if view._shape_fact is NOT_COMPUTED:
        SHAPE.put(view, shape)
    if view._device_fact is NOT_COMPUTED and (d := infer_device(view)) is not NOT_COMPUTED:
        DEVICE.put(view, d)
    return view


def _known(u: UOp, shape: tuple[int, ...], device: str) -> UOp:
    """`u` with the shape and device its rules would infer (the caller built it on sources of that shape
    and device, by the rule's own arithmetic), so that no fact walk runs for it: a known node keeps its."""
    if u._shape_fact is NOT_COMPUTED:
        SHAPE.put(u, shape)
    if u._device_fact is NOT_COMPUTED:
        DEVICE.put(u, device)
    return u


def matmul_nodes(x: UOp, w: UOp, m: int, k: int, n: int, device: str) -> UOp:
    """The nodes `Tensor.dot` builds for an (m, k) by (k, n) product of one dtype, whose sum accumulates in
    that dtype, on one device (the common case): the same nodes as the general path (x viewed (m, 1, k), w
    viewed (1, k, n) and permuted, both expanded to (m, n, k), multiplied, summed over the last axis and
    reshaped), built directly with their facts. HOT PATH (bench/step.py: a small MLP's forward pass was
    mostly its matmuls' shape checks and fact walks); test_eager_fast_paths.py checks the nodes and facts."""
    dt = w.dtype
    xr = _known(UOp(Ops.RESHAPE, x.dtype, (x, shape_vec((m, 1, k)))), (m, 1, k), device)
    wr = _known(UOp(Ops.RESHAPE, dt, (w, shape_vec((1, k, n)))), (1, k, n), device)
    wt = _known(UOp(Ops.PERMUTE, dt, (wr,), (0, 2, 1)), (1, n, k), device)
    out = (m, n, k)
    if m != 1 or n != 1:  # (the shapes differ: both broadcast to `out`, each unless it has that shape)
        if n != 1:
            xr = _known(UOp(Ops.EXPAND, xr.dtype, (xr, shape_vec(out))), out, device)
        if m != 1:
            wt = _known(UOp(Ops.EXPAND, dt, (wt, shape_vec(out))), out, device)
    total = _known(UOp(Ops.MUL, dt.base, (xr, wt)), out, device)
    if k != 1:  # a sum over a size-1 axis is no REDUCE
        total = _known(UOp(Ops.REDUCE, total.dtype, (total,), (Ops.ADD, (2,))), (m, n, 1), device)
    return _known(UOp(Ops.RESHAPE, total.dtype, (total, shape_vec((m, n)))), (m, n), device)


def max_nodes(u: UOp, axes: tuple[int, ...], keepdim: bool) -> UOp:
    """The nodes `Tensor.max` builds for a float32 or float64 `u` of concrete shape on one device (a float
    that sums in itself): the NaN sum and the maximum of the non-NaN values over `axes`, the sum where it is
    NaN (docs/semantics.md §5), built on UOps without the Tensor ops' checks (a softmax's max went from
    about 190 to 60 us of Python). The same nodes as the general path (test_eager_fast_paths.py)."""
    shape = u.shape
    out = tuple(s for i, s in enumerate(shape) if i not in axes)
    nan = u.alu(Ops.CMPNE, u)

    def reduced(x: UOp, op: Ops) -> UOp:
        r = x._rop(op, axes)
        return r if keepdim else r.reshape(out)

    nans = reduced(nan.alu(Ops.WHERE, u, UOp.const(u.dtype, 0.0, u.device, shape)), Ops.ADD)
    top = reduced(nan.alu(Ops.WHERE, UOp.const(u.dtype, -math.inf, u.device, shape), u), Ops.MAX)
    return nans.alu(Ops.CMPNE, nans).alu(Ops.WHERE, nans, top)
