"""Broken backends for the conformance meta tests: the out-of-tree NUMPYVEC backend with one planted bug
each, each bug in the backend's own computation (its renderer or its graph pass), the way a real backend
gets it wrong. The conformance suite must catch every one, with a repro snippet. `cbackend.py` holds the
CPU backend (generated C) with one planted bug per case class of the suite (devices `BROKEN_C_*`).

| device          | planted bug                                                                      |
| --------------- | -------------------------------------------------------------------------------- |
| BROKEN_FLIP     | a VJP that forgets to flip: a graph pass meant to push FLIP(a * b) onto a and b  |
|                 | drops the FLIP when a is computed (the shape of every gradient through a flip)   |
| BROKEN_PAD      | a missing PAD gate: gated loads ignore the gate and read a clamped address (and  |
|                 | a peephole drops the WHERE that would zero them)                                 |
| BROKEN_FLOORDIV | a truncating //: FLOORDIV rendered as C division                                 |
| BROKEN_MAXID    | a wrong MAX identity: reduce registers start at 0 instead of -inf / the minimum  |
| BROKEN_SUB      | a swapped operand order: SUB rendered natively as b - a                          |

`ONE_DEVICE` is no planted bug: NUMPYVEC with a single device (`ONE_DEVICE:1` does not open), for the
cases that need a second device, which must be reported as not claimed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from uopgrad_numpyvec import NumpyRenderer, NumpyVecBackend

from uopgrad import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

__all__ = ["ForgetsToFlip", "NoPadGate", "OneDevice", "SwappedSub", "TruncatingFloorDiv", "WrongMaxIdentity"]


def _loaded(u: UOp) -> bool:
    """A view of a buffer (what a kernel loads directly)."""
    while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE):
        u = u.src[0]
    return u.op is Ops.BUFFER


# meant: FLIP(a * b) -> FLIP(a) * FLIP(b), pushing the flip onto the operands (into their loads); for a
# computed left operand it forgets to flip at all. Backward graphs are full of these: the gradient of a flip
# is the flip of (local derivative * incoming gradient).
pm_fold_flip = PatternMatcher(
    [
        (UPat(Ops.FLIP, src=(UPat(Ops.MUL, name="m"),)), lambda m: None if _loaded(m.src[0]) else m),
    ]
)


class ForgetsToFlip(NumpyVecBackend):
    """BROKEN_FLIP: drops FLIP(computed * b): the shape of a gradient flowing back through a flip."""

    def realize(self, sink: UOp) -> None:
        """Run the broken graph pass, then the kernels."""
        super().realize(graph_rewrite(sink, pm_fold_flip))


class _PeepholeRenderer(NumpyRenderer):
    """NUMPYVEC's renderer whose `_peephole` may render a uop first: a line, "" for none, None to leave the
    uop to the renderer."""

    def _line(self, u: UOp, i: int, names: dict[UOp, str], depth: int, *rest: Any) -> tuple[str | None, int]:
        line = self._peephole(u, i, names)
        return super()._line(u, i, names, depth, *rest) if line is None else (line or None, depth)

    def _peephole(self, u: UOp, i: int, names: dict[UOp, str]) -> str | None:
        return None


class _NoGateRenderer(_PeepholeRenderer):
    def _peephole(self, u: UOp, i: int, names: dict[UOp, str]) -> str | None:
        # a peephole that is right on its own: WHERE(g, LOAD(idx, g), 0) is the gated load itself...
        if (
            u.op is Ops.WHERE
            and u.src[1].op is Ops.LOAD
            and len(u.src[1].src) > 1
            and u.src[1].src[1] is u.src[0]
            and u.src[2].op is Ops.CONST
            and u.src[2].arg == 0
        ):
            names[u] = names[u.src[1]]
            return ""
        return None

    def _memory(self, u: UOp, name: str, src: list[str]) -> str:
        # ...but the gated load is rendered without its gate: a clamped address, never 0
        if u.op is Ops.LOAD and len(u.src) > 1 and u.src[0].op is Ops.INDEX:
            buf, off = src[0].split("\0")
            return f"{name} = {buf}[np.clip({off}, 0, max({buf}.size - 1, 0))] if {buf}.size else {buf}[:0]"
        return super()._memory(u, name, src)


class NoPadGate(NumpyVecBackend):
    """BROKEN_PAD: padded reads return a neighbouring element instead of 0."""

    renderer_class = _NoGateRenderer


class _TruncRenderer(NumpyRenderer):
    code_for_op: ClassVar = {**NumpyRenderer.code_for_op, Ops.FLOORDIV: lambda a, b: f"cdiv({a}, {b})"}


class TruncatingFloorDiv(NumpyVecBackend):
    """BROKEN_FLOORDIV: a // b rounds toward zero."""

    renderer_class = _TruncRenderer


class _ZeroIdentityRenderer(_PeepholeRenderer):
    def _peephole(self, u: UOp, i: int, names: dict[UOp, str]) -> str | None:
        init = u.src[0] if u.op is Ops.DEFINE_REG and u.src else None
        if (
            init is not None
            and init.op is Ops.CONST
            and init.arg == dtypes.min(init.dtype)
            and init.dtype != dtypes.bool
        ):
            names[u] = f"v{i}"
            return f"v{i} = np.zeros((1,), dtype=np.{_np(init)})"
        return None


def _np(c: UOp) -> str:
    import numpy as np

    return np.dtype(dtypes.to_numpy(c.dtype)).name


class WrongMaxIdentity(NumpyVecBackend):
    """BROKEN_MAXID: a MAX reduce starts from 0, so a row of negative numbers reduces to 0."""

    renderer_class = _ZeroIdentityRenderer


def _swapped_sub(a: str, b: str) -> str:
    return f"(np.not_equal({b}, {a}) if {a}.dtype == np.bool_ else np.subtract({b}, {a}))"


class _SwappedSubRenderer(NumpyRenderer):
    code_for_op: ClassVar = {**NumpyRenderer.code_for_op, Ops.SUB: _swapped_sub}


class SwappedSub(NumpyVecBackend):
    """BROKEN_SUB: renders SUB natively, with its operands swapped."""

    renderer_class = _SwappedSubRenderer


class OneDevice(NumpyVecBackend):
    """ONE_DEVICE: NUMPYVEC with one device, as a machine with one accelerator (`ONE_DEVICE:1` fails)."""

    def __init__(self, device: str) -> None:
        if device.partition(":")[2] not in ("", "0"):
            raise RuntimeError(f"{device}: ONE_DEVICE has one device, ONE_DEVICE:0")
        super().__init__(device)
