"""Creating tensors (a mixin of Tensor, layer 15 with tensor.py): empty, invalids, full, zeros, ones and
their `*_like` forms, arange, eye, and the seeded host-side random creators (rand, randn, uniform, normal,
randint, randperm, scaled_uniform, glorot_uniform). Their values come from the reference's counter-based
Threefry stream (`RandomStream`), drawn on the host: after the same `manual_seed`, `rand` gives the
reference's values bit for bit, and the creators built on it (randn, uniform, randint, randperm) its
formulas.

A creator makes a BUFFER (copied in from the host for random values) or a lazy constant graph: arange
doubles a padded constant, eye reshapes a padded column of ones onto the diagonal.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from uopgrad._util import prod
from uopgrad.backend import CompiledBackend, Device, HostAllocator
from uopgrad.backends.numerics import reference_alu
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import DeviceError, DTypeRangeError
from uopgrad.mixin import resolve_shape_arg
from uopgrad.ops import Ops
from uopgrad.pipeline import note_host_fill, recording
from uopgrad.tensor_args import DTypeLike, concrete, nonnegative, py_scalar, to_dtype
from uopgrad.tensor_hooks import TensorHooks
from uopgrad.tensor_multi import canonical_devices
from uopgrad.tensor_registry import plain_buffer
from uopgrad.uop import UOp

if TYPE_CHECKING:
    from typing import Unpack

    from uopgrad.tensor_hooks import _OnDevice, _Placed
    from uopgrad.uop import sint

__all__ = ["CreateMixin", "RandomStream", "Threefry"]

_M32 = 0xFFFFFFFF
_MANTISSA = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23, dtypes.float64: 52}


def _threefry_words(x: np.ndarray, key: int) -> np.ndarray:
    """THREEFRY (REFERENCE's definition of the op) of each uint64 of `x` under `key`: the low 32-bit words of
    the results, then the high ones."""
    y = reference_alu[Ops.THREEFRY](x, np.full(x.shape, key, np.uint64))
    return np.concatenate([(y & np.uint64(_M32)).astype(np.uint32), (y >> np.uint64(32)).astype(np.uint32)])


class RandomStream:
    """One device's random numbers, as the reference makes them: its key is the seed and a hash of the
    device's place among the devices drawn on since the seed was set, and a draw of `num` words takes the
    next `num` counts (a draw on another device leaves this one where it is). Each draw keys Threefry anew
    from its first count, then hashes 0 .. num/2 - 1. Methods are named as numpy's Generator's."""

    def __init__(self, seed: int, index: int) -> None:
        place = int.from_bytes(hashlib.sha256(index.to_bytes(4, "big")).digest(), "big")
        self.key = ((seed & _M32) << 32) | (place & _M32)
        self.counter = 0

    def bits(self, num: int) -> np.ndarray:
        """The next `num` random uint32 words."""
        start, self.counter = self.counter, (self.counter + num) % 2**64
        out = [np.zeros(0, np.uint32)]
        for i in range(0, num, _M32):  # chunks of at most 2**32 - 1 words, each under a key of its own
            n = min(num - i, _M32)
            half = (n + 1) // 2
            k = _threefry_words(np.array([(start + i) % 2**64], np.uint64), self.key)
            lo = np.arange(half, dtype=np.uint64)
            counts = ((lo + np.uint64(half)) << np.uint64(32)) | lo
            out.append(_threefry_words(counts, (int(k[1]) << 32) | int(k[0]))[:n])
        return np.concatenate(out)

    def random(self, shape: tuple[int, ...], dtype: DType | None = None) -> np.ndarray:
        """Uniform in [0, 1): the top mantissa bits of a random word of `dtype` per value (`dtype` a float,
        else default_float), as float64 (each value exactly one of `dtype`). Nothing drawn when empty."""
        dt = dtype if dtype in _MANTISSA else dtypes.default_float
        n, size = prod(shape), dt.itemsize
        if n == 0:
            return np.zeros(shape)
        words = self.bits((n * size + 3) // 4).view(f"<u{size}")[:n]
        mantissa: np.ndarray = (words >> np.array(8 * size - _MANTISSA[dt], words.dtype)).astype(np.float64)
        return (mantissa * 2.0 ** -_MANTISSA[dt]).reshape(shape)

    def _scaled(self, low: float, high: float, shape: tuple[int, ...]) -> np.ndarray:
        """(high - low) * random, rounded once to default_float as the reference computes it."""
        npdt = dtypes.to_numpy(dtypes.default_float)
        return np.asarray(npdt.type(high - low) * self.random(shape).astype(npdt), np.float64)

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Box-Muller of two float32 uniforms per value: cos(2 pi u0) * sqrt(-2 log(1 - u1))."""
        u = self.random((2, *shape), dtypes.float32).astype(np.float32)
        return np.asarray(np.cos(u[0] * np.float32(2 * math.pi)) * np.sqrt(np.log(1 - u[1]) * np.float32(-2)))

    def uniform(self, low: float, high: float, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform in [low, high)."""
        return np.asarray(self._scaled(low, high, shape) + low)

    def normal(self, mean: float, std: float, shape: tuple[int, ...]) -> np.ndarray:
        """Normal with this mean and standard deviation."""
        return np.asarray(std * self.standard_normal(shape).astype(np.float64) + mean)

    def integers(self, low: int, high: int, shape: tuple[int, ...]) -> np.ndarray:
        """Integers in [low, high): the truncated uniform (never `high`, where rounding would reach it)."""
        steps = np.minimum(np.trunc(self._scaled(low, high, shape)), high - low - 1)
        return np.asarray(steps.astype(np.int64) + low)

    def permutation(self, n: int) -> np.ndarray:
        """A random permutation of 0 .. n-1: the order that sorts n uniforms."""
        return np.argsort(self.random((n,)), kind="stable")


class Threefry:
    """The random state `Tensor.manual_seed` sets: a seed and the RandomStream of each device drawn on."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.streams: dict[str, RandomStream] = {}

    def on(self, device: str) -> RandomStream:
        """The stream of `device` (the next index for a device not drawn on yet)."""
        if (stream := self.streams.get(device)) is None:
            stream = self.streams[device] = RandomStream(self.seed, len(self.streams))
        return stream


def _float32_unless_given(kw: _Placed) -> _Placed:
    """zeros' and ones' keywords, float32 where no dtype is given."""
    return {**kw, "dtype": kw.get("dtype") or dtypes.float32}


class CreateMixin(TensorHooks):
    """Creation classmethods and the `*_like` constructors. The creators of a `*shape` (but empty, invalids
    and randint) take `device`, `dtype` and `requires_grad` as keywords typed by tensor_hooks' `_Placed` (a
    device tuple allowed) or `_OnDevice`; each absent or None is the default device, the creator's default
    dtype, and no gradient preference."""

    __slots__ = ()
    _rng: ClassVar[Threefry] = Threefry(0)  # rand & co.; Tensor.manual_seed sets it

    @classmethod
    def _from_data(cls, data: Any, **kw: Unpack[_Placed]) -> Self:  # noqa: ANN401
        """`Tensor(data, ...)`: the families' hook for a value made from data (tensor_hooks)."""
        return cls(data, **kw)

    @classmethod
    def empty(
        cls,
        *shape: sint | Sequence[sint],
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """An uninitialised tensor: a fresh BUFFER (REFERENCE reads one never written as zeros)."""
        if isinstance(device, tuple):
            return cls.empty(*shape, device=device[0], dtype=dtype, requires_grad=requires_grad).to(device)
        shp = resolve_shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        size = concrete(prod(shp), "empty")
        return cls._from_data(UOp.new_buffer(dev, size, dt).reshape(shp), requires_grad=requires_grad)

    @classmethod
    def invalids(
        cls,
        *shape: sint | Sequence[sint],
        device: str | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """An uninitialised tensor that is a value, not a buffer (so a function body may make one): realized,
        it is a buffer that no kernel fills; read, its elements may be anything (REFERENCE gives zeros)."""
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        return cls._from_data(UOp.invalids(dt, dev, resolve_shape_arg(shape)), requires_grad=requires_grad)

    @classmethod
    def full(
        cls,
        shape: sint | Sequence[sint],
        fill_value: ConstType,
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """A tensor of `fill_value`: a unique constant broadcast to `shape` (on every device of a tuple)."""
        shp = nonnegative(resolve_shape_arg((shape,)), "full")
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(py_scalar(fill_value))
        dev: str | tuple[str, ...] = (
            canonical_devices(device)
            if isinstance(device, tuple)
            else Device.canonicalize(device)
            if device is not None
            else Device.DEFAULT
        )
        return cls._from_data(
            UOp.const(dt, py_scalar(fill_value), dev, shp, unique=True), requires_grad=requires_grad
        )

    @classmethod
    def zeros(cls, *shape: sint | Sequence[sint], **kw: Unpack[_Placed]) -> Self:
        """A tensor of zeros (float32 unless `dtype` says otherwise)."""
        return cls.full(resolve_shape_arg(shape), 0.0, **_float32_unless_given(kw))

    @classmethod
    def ones(cls, *shape: sint | Sequence[sint], **kw: Unpack[_Placed]) -> Self:
        """A tensor of ones (float32 unless `dtype` says otherwise)."""
        return cls.full(resolve_shape_arg(shape), 1.0, **_float32_unless_given(kw))

    def full_like(
        self, fill_value: ConstType, dtype: DTypeLike | None = None, requires_grad: bool | None = None
    ) -> Self:
        """`fill_value` in this tensor's shape and device (and dtype, unless given); sharded like it."""
        if (axis := self.uop.axis) is not None and isinstance(devs := self.device, tuple):
            out = self.full(self.shape, fill_value, devs[0], dtype or self.dtype).shard(devs, axis)
            out.requires_grad = requires_grad
            return out
        return self.full(self.shape, fill_value, self.device, dtype or self.dtype, requires_grad)

    def zeros_like(self, dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Self:
        """Zeros like this tensor."""
        return self.full_like(0, dtype, requires_grad)

    def ones_like(self, dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Self:
        """Ones like this tensor."""
        return self.full_like(1, dtype, requires_grad)

    @classmethod
    def _iota(cls, n: int, device: str) -> Self:
        """0, 1, ..., n-1 as int32, built lazily by doubling: a(2k) = cat(a(k), a(k) + k)."""
        a = cls._from_data(UOp.const(dtypes.int32, 0, device, (1,)))
        while (k := concrete(a.shape[0])) < n:
            a = a.pad(((0, k),)) + (a + k).pad(((k, 0),))
        return a.shrink(((0, n),)) if k != n else a

    @classmethod
    def arange(
        cls,
        start: int | float,
        stop: int | float | None = None,
        step: int | float = 1,
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """start, start+step, ... up to (not including) stop; int32 for int arguments, else float32."""
        if isinstance(device, tuple):
            return cls.arange(start, stop, step, device[0], dtype, requires_grad).to(device)
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        lo, hi = (start, stop - step) if step > 0 else (stop - step, start)  # the reference's bounds check
        if lo < dtypes.min(dt) or hi > dtypes.max(dt):
            raise DTypeRangeError(
                f"arange({start}, {stop}, {step}) has values {dt} can't hold; pick a wider dtype"
            )
        n = max(0, math.ceil((stop - start) / step))
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if n == 0:
            return cls.empty(0, device=dev, dtype=dt, requires_grad=requires_grad)
        i = cls._iota(n, dev)
        ints = isinstance(start, int) and isinstance(step, int)
        ret = i * step + start if ints else i.cast(dtypes.float32) * step + start
        return cls._from_data(ret.cast(dt).uop, requires_grad=requires_grad)

    @classmethod
    def eye(
        cls,
        n: int,
        m: int | None = None,
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """The identity matrix (n x m), built lazily: a padded column of ones, reshaped onto the diagonal."""
        if n < 0 or (m is not None and m < 0):
            raise ValueError(f"eye({n}, {m}): sizes must be non-negative")
        k = max(n, m if m is not None else n)
        ones = cls.ones(k, 1, device=device, dtype=dtype)
        diag = ones.pad(((0, 0), (0, k))).flatten().shrink(((0, k * k),)).reshape(k, k)
        ret = diag.shrink(((0, n), (0, m if m is not None else n)))
        return cls._from_data(ret.uop, requires_grad=requires_grad)

    @classmethod
    def from_blob(
        cls,
        ptr: int,
        shape: Sequence[int],
        dtype: DTypeLike | None = None,
        device: str | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """A tensor over the host memory at address `ptr` (say a numpy array's or a CPU torch tensor's data),
        without copying or owning it: writes through the pointer show in the tensor and the tensor's writes in
        the memory, so the memory must outlive the tensor. Devices whose memory is host memory only."""
        t = cls.empty(*shape, device=device, dtype=dtype, requires_grad=requires_grad)
        buf, dev = plain_buffer(t.uop), str(t.uop.device)
        backend = Device[dev]
        if (
            buf is None
            or not isinstance(backend, CompiledBackend)
            or not isinstance(backend.allocator, HostAllocator)
        ):
            raise DeviceError(f"from_blob: {dev} has no host memory to wrap a pointer in")
        nbytes = max(int(buf.arg), 1) * buf.dtype.base.itemsize
        backend.adopt(buf, np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr)))
        return t

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        """Seed the host-side random state behind rand/randn/uniform/normal/randint/randperm (every device's
        stream starts again)."""
        cls._rng = Threefry(seed)

    @classmethod
    def _random(
        cls,
        draw: Callable[[RandomStream], np.ndarray],
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
        default: DType | None = None,
    ) -> Self:
        """A tensor of `draw(stream)`'s values, from the device's stream. While a TinyJit captures, the draw
        is noted so that each replay draws anew from the stream of its moment: the random state is an input
        of the step, so jitted and plain calls give the same values after the same manual_seed (tinygrad's
        rule)."""
        if isinstance(device, tuple):  # the reference's rule: draw on one device, then shard or copy
            raise ValueError(f"random values are drawn on a single device, not {device}; shard them after")
        dt = to_dtype(dtype) if dtype is not None else default or dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        ret = cls._from_data(draw(cls._rng.on(dev)), device=dev, dtype=dt, requires_grad=requires_grad)
        if recording() is not None and (buf := ret.uop.base).op is Ops.BUFFER:
            note_host_fill(buf, lambda: cls._host_values(draw(cls._rng.on(dev)), dt), fresh=True)
        return ret

    @classmethod
    def rand(cls, *shape: int | Sequence[int], **kw: Unpack[_Placed]) -> Self:
        """Uniform random values in [0, 1) (the reference's, bit for bit, after the same manual_seed)."""
        shp = nonnegative(resolve_shape_arg(shape), "rand")
        dtype = kw.get("dtype")
        kw["dtype"] = dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return cls._random(lambda g: g.random(shp, dt), **kw)

    @classmethod
    def randn(cls, *shape: int | Sequence[int], **kw: Unpack[_Placed]) -> Self:
        """Standard normal random values."""
        shp = nonnegative(resolve_shape_arg(shape), "randn")
        return cls._random(lambda g: g.standard_normal(shp), **kw)

    @classmethod
    def uniform(
        cls, *shape: int | Sequence[int], low: float = 0.0, high: float = 1.0, **kw: Unpack[_OnDevice]
    ) -> Self:
        """Uniform random values in [low, high), as the reference draws them: low + (high - low) * u for u
        drawn as `rand` draws default floats, the product rounded once to the default float."""
        shp = nonnegative(resolve_shape_arg(shape), "uniform")
        return cls._random(lambda g: g.uniform(low, high, shp), **kw)

    @classmethod
    def normal(
        cls, *shape: int | Sequence[int], mean: float = 0.0, std: float = 1.0, **kw: Unpack[_OnDevice]
    ) -> Self:
        """Normal random values with the given mean and standard deviation: mean + std * z for z drawn as
        `randn` draws it (Box-Muller of float32 uniforms), computed in float64 before the cast to `dtype`."""
        shp = nonnegative(resolve_shape_arg(shape), "normal")
        return cls._random(lambda g: g.normal(mean, std, shp), **kw)

    @classmethod
    def randint(
        cls,
        *shape: int | Sequence[int],
        low: int = 0,
        high: int = 10,
        device: str | None = None,
        dtype: DTypeLike | None = None,
    ) -> Self:
        """Random integers in [low, high)."""
        shp = nonnegative(resolve_shape_arg(shape), "randint")
        return cls._random(lambda g: g.integers(low, high, shp), device, dtype, None, dtypes.int32)

    @classmethod
    def randperm(
        cls,
        n: int,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> Self:
        """A random permutation of 0 .. n-1 (int32 unless `dtype` says otherwise)."""
        return cls._random(lambda g: g.permutation(n), device, dtype, requires_grad, dtypes.int32)

    @classmethod
    def scaled_uniform(cls, *shape: int | Sequence[int], **kw: Unpack[_OnDevice]) -> Self:
        """Uniform in [-1, 1) scaled by 1/sqrt(numel), a common weight initialisation."""
        shp = nonnegative(resolve_shape_arg(shape), "scaled_uniform")
        scale = prod(shp) ** -0.5
        return cls._random(lambda g: g.uniform(-1.0, 1.0, shp) * scale, **kw)

    @classmethod
    def glorot_uniform(cls, *shape: int | Sequence[int], **kw: Unpack[_OnDevice]) -> Self:
        """Glorot/Xavier uniform initialisation."""
        shp = nonnegative(resolve_shape_arg(shape), "glorot_uniform")
        bound = math.sqrt(6 / (shp[0] + prod(shp[1:])))
        return cls._random(lambda g: g.uniform(-bound, bound, shp), **kw)
