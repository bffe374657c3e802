"""Broken C backends for the conformance classes about state and limits (setitem, TinyJit replays, unary ops
at extreme inputs, zero-size reductions, equal-valued leaves): the CPU backend with one planted bug each.
Two are runtime bugs of the backend itself; three are front-end bugs planted in one device, as
`BROKEN_C_REALIZE` is (a Tensor method replaced for tensors on that device only): uopgrad had each of them
before issue 31, and a backend that wraps the Tensor API could bring any of them back.

| device            | planted bug                                                                        |
| ----------------- | ---------------------------------------------------------------------------------- |
| BROKEN_C_SETITEM  | a setitem with duplicate indices keeps the first write (the entries are scattered  |
|                   | from the last one back)                                                            |
| BROKEN_C_REUPLOAD | an upload into a buffer that already holds uploaded data is skipped ("weights are  |
|                   | uploaded once"): a TinyJit replay reuses the random draw of its capture            |
| BROKEN_C_SIGMOID  | the textbook sigmoid 1 / (1 + e^-x): its gradient is 0 * inf = NaN below x = -88   |
|                   | in float32 (and at -inf in float64), and silu's, quick_gelu's with it              |
| BROKEN_C_EMPTY    | a kernel whose schedule item names an empty buffer is not launched ("nothing to    |
|                   | do"): a reduction over an empty axis leaves its output zeroed (prod 0, all False)  |
| BROKEN_C_LEAVES   | a Python scalar becomes an interned constant unless requires_grad is given at      |
|                   | construction: two equal leaves are one node and share one gradient                 |
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from uopgrad import Ops, Tensor, UOp
from uopgrad.backend import CompiledBackend
from uopgrad_broken.cbackend import _backend, _patched
from uopgrad_cpu import CPU_DTYPES, CCompiler, CPUAllocator, CPUProgram, CRenderer

__all__ = [
    "BrokenEmpty",
    "BrokenLeaves",
    "BrokenReupload",
    "BrokenSetitem",
    "BrokenSigmoid",
]


def _on(t: Tensor, device: str) -> bool:
    return isinstance(t.device, str) and t.device.startswith(device)


# ---------------------------------------------------------------------- runtime bugs
class _UploadOnce(CPUAllocator):
    """Skips an upload into a live buffer it has uploaded into before (meant for weights, uploaded once):
    refilling a buffer, as a TinyJit replay does with each random draw, keeps the old contents."""

    def __init__(self) -> None:
        super().__init__()
        self._filled: dict[int, weakref.ReferenceType[np.ndarray]] = {}

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        seen = self._filled.get(id(handle))
        if seen is not None and seen() is handle:
            return
        self._filled[id(handle)] = weakref.ref(handle)
        super().copyin(handle, src)

    def free(self, handle: np.ndarray, nbytes: int) -> None:
        self._filled.pop(id(handle), None)  # a buffer given back is fresh for its next owner
        super().free(handle, nbytes)


BrokenReupload = _backend(allocator=_UploadOnce)


def _touches_empty(item: UOp, bufs: Sequence[UOp] | None) -> bool:
    return any(b.op is Ops.BUFFER and int(b.arg) == 0 for b in (item.src[1:] if bufs is None else bufs))


class BrokenEmpty(CompiledBackend):
    """Does not launch a kernel whose schedule item names an empty buffer: "there is nothing to do" -- but
    a reduction over an empty axis still has to write its identity (the kernel stores the constant)."""

    def __init__(self, device: str) -> None:
        super().__init__(device, CRenderer(), CCompiler(), CPUAllocator(), CPUProgram, CPU_DTYPES)

    def run_kernel(self, item: UOp, var_vals: dict[str, int]) -> None:
        if not _touches_empty(item, None):
            super().run_kernel(item, var_vals)

    def bind_kernel(self, item: UOp, *args: Any, **kwargs: Any) -> Callable[[], None]:
        bufs = kwargs.get("bufs", args[1] if len(args) > 1 else None)  # (var_vals, bufs) as core passes them
        if _touches_empty(item, bufs):
            return lambda: None
        return super().bind_kernel(item, *args, **kwargs)


# ---------------------------------------------------------------------- front-end bugs, in one device
def _first_write_wins() -> None:
    """BROKEN_C_SETITEM: `t[[1, 3, 1]] = v` scatters the entries from the last one back, so of duplicate
    indices the first write stays (numpy, PyTorch and uopgrad keep the last)."""
    original = Tensor.__setitem__

    def setitem(self: Tensor, indices: Any, v: Any) -> None:
        if _on(self, "BROKEN_C_SETITEM"):
            idx = indices if isinstance(indices, tuple) else (indices,)
            lead = [i.tolist() if isinstance(i, Tensor) else i for i in idx]
            n = next((k for k, i in enumerate(lead) if not isinstance(i, list)), len(lead))
            if n:
                shape = self[indices].shape
                indices = tuple(cast("list[int]", i)[::-1] if k < n else i for k, i in enumerate(lead))
                if isinstance(v, Tensor):
                    v = v.expand(shape).flip(0)
        original(self, indices, v)

    Tensor.__setitem__ = setitem  # type: ignore[method-assign, assignment]


def _textbook_sigmoid() -> None:
    """BROKEN_C_SIGMOID: sigmoid as 1 / (1 + e^-x), which overflows to 1 / inf = 0 (right) with the gradient
    0 * inf (NaN) where e^-x is inf."""
    original = Tensor.sigmoid

    def sigmoid(self: Tensor) -> Tensor:
        if _on(self, "BROKEN_C_SIGMOID"):
            return (1 + (-self).exp()).reciprocal()
        return original(self)

    Tensor.sigmoid = sigmoid  # type: ignore[method-assign, assignment]


def _interned_leaves() -> None:
    """BROKEN_C_LEAVES: `Tensor(3.0)` is the hash-consed CONST 3.0 unless requires_grad=True is passed, so
    `a, b = Tensor(3.0), Tensor(3.0)` with requires_grad set later are one gradient target."""
    original = Tensor.__init__

    def init(
        self: Tensor,
        data: Any = None,
        device: Any = None,
        dtype: Any = None,
        requires_grad: bool | None = None,
    ) -> None:
        original(self, data, device, dtype, requires_grad)
        value = data.item() if isinstance(data, np.generic) else data
        interned = isinstance(value, (bool, int, float)) and requires_grad is not True
        if interned and _on(self, "BROKEN_C_LEAVES"):
            self.uop = UOp.const(self.dtype, value, self.device)

    Tensor.__init__ = init  # type: ignore[method-assign]


BrokenSetitem = _patched(_first_write_wins)
BrokenSigmoid = _patched(_textbook_sigmoid)
BrokenLeaves = _patched(_interned_leaves)
