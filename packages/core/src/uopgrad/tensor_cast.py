"""Casts, graph markers and devices (a mixin of Tensor, layer 15 with tensor.py, generic over `Self`): cast,
bitcast, half, double, float, long, int, short, bool, bfloat16; detach, contiguous, contiguous_backward, to
(a COPY to a device), shard, shard_like and shard_ (onto a device tuple), replace and to_ (in place: the
same object takes another graph) and clone.

Each is one node over the tensor's UOp; bitcast and detach cut the gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Self, TypeVar

from uopgrad.backend import Device
from uopgrad.dtype import DType, dtypes
from uopgrad.errors import DeviceError, ShapeError
from uopgrad.tensor_args import DTypeLike, concrete, to_dtype
from uopgrad.tensor_hooks import TensorHooks
from uopgrad.tensor_multi import canonical_devices, empty_multi

__all__ = ["CastMixin"]


_C = TypeVar("_C", bound="CastMixin")


def _shorthand(name: str, dt: DType, spelled: str) -> Callable[[_C], _C]:
    """The method `name` that casts to `dt` (torch's `half()`, `float()`, ...)."""

    def to(self: _C) -> _C:
        return self.cast(dt)

    to.__name__, to.__qualname__, to.__doc__ = name, f"CastMixin.{name}", f"Cast to {spelled}."
    return to


class CastMixin(TensorHooks):
    """Casts, device copies and the markers that shape gradients and buffers."""

    __slots__ = ()

    def cast(self, dtype: DTypeLike) -> Self:
        """Convert to `dtype` (float -> int truncates toward zero)."""
        dt = to_dtype(dtype)
        return self if dt == self.dtype else self._wrap(self.uop.cast(dt), self)

    def bitcast(self, dtype: DTypeLike) -> Self:
        """Reinterpret the bits as `dtype` (same item size)."""
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise ValueError(f"bitcast from {self.dtype} to {dt} needs equal item sizes")
        return self._from_data(self.uop.bitcast(dt), requires_grad=False)

    def detach(self) -> Self:
        """The same value, with no gradient flowing back through it."""
        return self._adopt(self.uop.detach(), False)

    def contiguous(self) -> Self:
        """Force the value into its own buffer when realized (a no-op on a buffer)."""
        return self._wrap(self.uop.contiguous(), self)

    def contiguous_backward(self) -> Self:
        """Identity forward; makes the gradient flowing back contiguous."""
        return self._wrap(self.uop.contiguous_backward(), self)

    def to(self, device: str | tuple[str, ...]) -> Self:
        """This tensor on `device` (a COPY; self when it is there already); a tuple of devices replicates it
        on each."""
        if device == self.uop.device:  # here already (a canonical name: canonicalizing changes nothing)
            return self
        if not isinstance(device, str):
            devs = canonical_devices(device)
            return self if devs == self.uop.device else self._wrap(self.uop.copy_to_device(devs), self)
        dev = Device.canonicalize(device)
        Device[dev]
        if dev == self.uop.device:
            return self
        return self._wrap(self.uop.copy_to_device(dev), self)

    def replace(self, x: Self) -> Self:
        """This tensor (same object) takes x's value, whatever its dtype and device; only the shapes must
        match. Unlike assign, nothing is written: the tensor is now x's graph."""
        if self.shape != x.shape:
            raise ShapeError(f"replace needs the same shape: {self.shape} != {x.shape}")
        self.uop = x.uop
        return self

    def to_(self, device: str | tuple[str, ...]) -> Self:
        """Move this tensor (same object) and its gradient to `device`, in place."""
        if self.grad is not None:
            self.grad.replace(self.grad.to(device))
        return self.replace(self.to(device))

    def clone(self) -> Self:
        """A copy in a fresh buffer: AFTER(view, STORE(view, self)); gradients flow through to self. A `.grad`
        is cloned with it (the reference's rule)."""
        if isinstance(dev := self.device, tuple):  # storage on every device, split as self is
            shape = tuple(concrete(d, "clone") for d in self.shape)
            view = empty_multi(shape, self.dtype, dev, self.uop.axis)
        else:
            view = self.empty(self.shape, device=self.device, dtype=self.dtype).uop
        ret = self._wrap(view.after(view.store(self.uop)), self)
        if self.grad is not None:
            ret.grad = self.grad.clone()
        return ret

    def shard(self, devices: Sequence[str], axis: int | None = None) -> Self:
        """This tensor on every device of `devices`: whole on each (axis=None) or cut into equal slices along
        `axis`, one per device in order."""
        if isinstance(self.uop.device, tuple):
            raise DeviceError(
                f"can't shard a multi-device tensor (it is on {self.uop.device}); shard the "
                "single-device value"
            )
        devs = canonical_devices(devices)
        if len(devs) == 1:
            return self.to(devs[0])
        if axis is None:
            uop = self.uop.copy_to_device(devs)
        else:
            uop = self.uop.shard(devs, self._axis(axis))
        return self._from_data(uop, requires_grad=self.requires_grad)

    def shard_like(self, y: Self) -> Self:
        """This tensor on y's device(s), split as y is (itself when it already is)."""
        if not isinstance(devs := y.device, tuple):
            return self.to(devs)
        if isinstance(self.device, tuple) and (self.device, self.uop.axis) == (devs, y.uop.axis):
            return self
        return self.shard(devs, y.uop.axis)

    def shard_(self, devices: Sequence[str], axis: int | None = None) -> Self:
        """Shard in place: this tensor becomes its sharded value (gradients are then taken for that)."""
        self.uop = self.shard(devices, axis).uop
        return self

    # the dtype shorthands (torch's names), each `cast` to one dtype; last in the class, as their names
    # (`int`, `bool`, `float`) would shadow the builtins in the annotations of the methods above
    half, double, float, long, int, short, bool, bfloat16 = (
        _shorthand(n, d, sp)
        for n, d, sp in (
            ("half", dtypes.float16, "float16"),
            ("double", dtypes.float64, "float64"),
            ("float", dtypes.float32, "float32"),
            ("long", dtypes.int64, "int64"),
            ("int", dtypes.int32, "int32"),
            ("short", dtypes.int16, "int16"),
            ("bool", dtypes.bool, "bool"),
            ("bfloat16", dtypes.bfloat16, "bfloat16"),
        )
    )
