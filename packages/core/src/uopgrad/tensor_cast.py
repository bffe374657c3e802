"""Casts and graph markers (a mixin of Tensor, layer 15 with tensor.py): cast, bitcast, half, double,
long, float, int, bool; detach, contiguous, contiguous_backward, to (a COPY to a device), replace and to_
(in place: the same object takes another graph) and clone.

Each is one node over the tensor's UOp; bitcast and detach cut the gradient.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from uopgrad.backend import Device
from uopgrad.dtype import dtypes
from uopgrad.errors import ShapeError
from uopgrad.tensor_args import DTypeLike, concrete, to_dtype
from uopgrad.tensor_args import self_tensor as _t
from uopgrad.tensor_multi import canonical_devices, empty_multi

if TYPE_CHECKING:
    from uopgrad.tensor import Tensor

__all__ = ["CastMixin"]


class CastMixin:
    """Casts, device copies and the markers that shape gradients and buffers."""

    __slots__ = ()

    def cast(self, dtype: DTypeLike) -> Tensor:
        """Convert to `dtype` (float -> int truncates toward zero)."""
        x = _t(self)
        dt = to_dtype(dtype)
        return x if dt == x.dtype else type(x)._wrap(x.uop.cast(dt), x)

    def bitcast(self, dtype: DTypeLike) -> Tensor:
        """Reinterpret the bits as `dtype` (same item size)."""
        x = _t(self)
        dt = to_dtype(dtype)
        if dt.itemsize != x.dtype.itemsize:
            raise ValueError(f"bitcast from {x.dtype} to {dt} needs equal item sizes")
        return type(x)(x.uop.bitcast(dt), requires_grad=False)

    def half(self) -> Tensor:
        """Cast to float16."""
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        """Cast to float64."""
        return self.cast(dtypes.float64)

    def long(self) -> Tensor:
        """Cast to int64."""
        return self.cast(dtypes.int64)

    def detach(self) -> Tensor:
        """The same value, with no gradient flowing back through it."""
        x = _t(self)
        return type(x)._adopt(x.uop.detach(), False)

    def contiguous(self) -> Tensor:
        """Force the value into its own buffer when realized (a no-op on a buffer)."""
        x = _t(self)
        return type(x)._wrap(x.uop.contiguous(), x)

    def contiguous_backward(self) -> Tensor:
        """Identity forward; makes the gradient flowing back contiguous."""
        x = _t(self)
        return type(x)._wrap(x.uop.contiguous_backward(), x)

    def to(self, device: str | tuple[str, ...]) -> Tensor:
        """This tensor on `device` (a COPY; self when it is there already); a tuple of devices replicates it
        on each."""
        x = _t(self)
        if not isinstance(device, str):
            devs = canonical_devices(device)
            return x if devs == x.uop.device else type(x)._wrap(x.uop.copy_to_device(devs), x)
        dev = Device.canonicalize(device)
        Device[dev]
        if dev == x.uop.device:
            return x
        return type(x)._wrap(x.uop.copy_to_device(dev), x)

    def replace(self, x: Tensor) -> Tensor:
        """This tensor (same object) takes x's value, whatever its dtype and device; only the shapes must
        match. Unlike assign, nothing is written: the tensor is now x's graph."""
        me = _t(self)
        if me.shape != x.shape:
            raise ShapeError(f"replace needs the same shape: {me.shape} != {x.shape}")
        me.uop = x.uop
        return me

    def to_(self, device: str | tuple[str, ...]) -> Tensor:
        """Move this tensor (same object) and its gradient to `device`, in place."""
        me = _t(self)
        if me.grad is not None:
            me.grad.replace(me.grad.to(device))
        return me.replace(me.to(device))

    def clone(self) -> Tensor:
        """A copy in a fresh buffer: AFTER(view, STORE(view, self)); gradients flow through to self. A `.grad`
        is cloned with it (the reference's rule)."""
        x = _t(self)
        if isinstance(x.device, tuple):  # storage on every device, split as x is
            view = empty_multi(tuple(concrete(d, 'clone') for d in x.shape), x.dtype, x.device, x.uop.axis)
        else:
            view = type(x).empty(x.shape, device=x.device, dtype=x.dtype).uop
        ret = type(x)._wrap(view.after(view.store(x.uop)), x)
        if x.grad is not None:
            ret.grad = x.grad.clone()
        return ret

    def float(self) -> Tensor:
        """Cast to float32."""
        return self.cast(dtypes.float32)

    def int(self) -> Tensor:
        """Cast to int32."""
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """Cast to bool."""
        return self.cast(dtypes.bool)
