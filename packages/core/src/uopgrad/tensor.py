"""Tensor (layer 15): a lazy handle on a UOp, with the tinygrad/PyTorch front end users write programs with.

Operations only build UOps; `realize()` hands a SINK of STOREs to the tensor's backend and replaces each
realized tensor's `uop` by its BUFFER (reshaped). Arithmetic and movement come from the shared mixins;
gradients from `compute_gradient` (docs/semantics.md §3.1).
"""
from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TypeAlias, TypeVar, cast

import numpy as np

from uopgrad._util import all_int, dedup, prod
from uopgrad.backend import Device
from uopgrad.config import ALLOW_DEVICE_USAGE
from uopgrad.dtype import ConstType, DType, dtypes, least_upper_dtype, sum_acc_dtype
from uopgrad.errors import DeviceError, GradientError, ShapeError
from uopgrad.gradient import compute_gradient
from uopgrad.mixin import MathMixin, MovementMixin, broadcast_shape, resolve_shape_arg
from uopgrad.ops import Ops
from uopgrad.realized import (
    buffers_read,
    check_not_overwritten,
    effects_under,
    is_realized_after,
    overwritten,
    realized,
    realized_view,
    settle,
    strip_realized,
)
from uopgrad.schedule import schedule
from uopgrad.tensor_elementwise import ElementwiseMixin
from uopgrad.tensor_index import IndexMixin, has_tensor_index
from uopgrad.tensor_nn import NNMixin, grad_enabled
from uopgrad.tensor_shape import ShapeMixin
from uopgrad.uop import UOp, sint

__all__ = ["Tensor"]

DTypeLike: TypeAlias = "DType | str"
Scalar: TypeAlias = "ConstType | np.generic"
TensorLike: TypeAlias = "Tensor | ConstType"
TensorData: TypeAlias = "Tensor | UOp | ConstType | np.generic | np.ndarray | Sequence[Any]"
T = TypeVar("T")
GradFxn = Callable[..., tuple[UOp | None, ...]]

# every live Tensor, in creation order (backward() looks for the ones that require grad; assign and
# realize update the tensors that alias what they change)
_all_tensors: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_next_id = itertools.count()


def to_dtype(dt: DTypeLike) -> DType:
    """A DType from a DType or one of its tinygrad names ("float32", "half", "int", ...)."""
    if isinstance(dt, DType):
        return dt
    names = dtypes.fields()
    if dt not in names:
        raise TypeError(f"unknown dtype {dt!r}; known: {', '.join(sorted(names))}")
    return names[dt]


def _host_dtype(dt: DType) -> np.dtype:
    return np.dtype(np.float32) if dt.base.scalar() == dtypes.bfloat16 else dtypes.to_numpy(dt.base)


def _host_array(x: Any) -> np.ndarray:  # noqa: ANN401  (any array-like: torch, jax, cupy, ...)
    """A host numpy array of an array-like: through DLPack when it offers host memory, else `__array__`. A
    torch tensor that requires grad is detached first (only its values are taken)."""
    if hasattr(x, "detach") and callable(x.detach):
        x = x.detach()
    try:
        return np.from_dlpack(x)
    except (TypeError, BufferError, RuntimeError, AttributeError):
        try:
            return np.asarray(x)
        except Exception as e:
            raise TypeError(f"can't make a Tensor from {type(x).__name__}: its memory is not host-visible "
                            f"and it has no usable __array__ ({e}); copy it to the host first") from e


def _py(x: T) -> T:
    """numpy scalars as Python scalars."""
    return cast(T, x.item()) if isinstance(x, np.generic) else x


def _concrete(s: sint, what: str = "this operation") -> int:
    """A size as an int; symbolic sizes are an error."""
    if not isinstance(s, int):
        raise ShapeError(f"{what} needs a concrete size, not the symbolic {s.short()}")
    return s


def _requires_grad(ts: Iterable[Tensor]) -> bool | None:
    """True if any input requires grad; else None if any is undecided; else False."""
    flags = [t.requires_grad for t in ts]
    return True if any(f is True for f in flags) else None if any(f is None for f in flags) else False


def _plain_buffer(u: UOp) -> UOp | None:
    """The BUFFER under a chain of RESHAPEs, or None."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def _buffer_view(u: UOp) -> bool:
    """A chain of RESHAPE/SHRINK/PERMUTE/FLIP over a BUFFER: a view that can be written through."""
    while u.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP):
        u = u.src[0]
    return u.op is Ops.BUFFER


def _is_realized(u: UOp) -> bool:
    if is_realized_after(u) or _plain_buffer(u) is not None:
        return True
    # the view realize() makes for a symbolic shape: RESHAPE(SHRINK(BUFFER))
    s = u.src[0] if u.op is Ops.RESHAPE else u
    return s.op is Ops.SHRINK and s.src[0].op is Ops.BUFFER and not all_int(u.shape)


def _unrealized(u: UOp) -> bool:
    return not is_realized_after(u)


def _storage_chain(u: UOp) -> tuple[list[UOp], UOp]:
    """The nodes from `u` down through movement ops and AFTERs (realized ones too), and the node holding the
    storage."""
    chain = [u]
    while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.AFTER):
        u = realized_view(u) if is_realized_after(u) else u.src[0]
        chain.append(u)
    return chain, u


def _output_buffer(u: UOp, device: str) -> tuple[UOp, UOp]:
    """(STORE of `u` into a fresh BUFFER, the view of that buffer that has `u`'s shape)."""
    shape = u.shape
    if all_int(shape):
        size = _concrete(prod(shape))
        buf = UOp.new_buffer(device, size, u.dtype.base)
        return buf.store(u.reshape((size,))), buf.reshape(shape)
    # a symbolic shape: a buffer of the largest size, of which a SHRINK to the bound size is the tensor
    limits = [d if isinstance(d, int) else d.vmax for d in shape]
    if not all(isinstance(x, int) for x in limits):
        raise ShapeError(f"can't realize shape {shape}: a symbolic dimension has no finite upper bound")
    buf = UOp.new_buffer(device, int(prod(limits)), u.dtype.base)
    size_sym = prod(shape)
    region = buf.shrink(((0, size_sym),))
    return region.store(u.reshape((size_sym,))), region.reshape(shape)


class Tensor(ElementwiseMixin, IndexMixin, ShapeMixin, NNMixin, MathMixin, MovementMixin):
    """A lazy n-dimensional array: a handle on a UOp. `uop` changes when the tensor is realized or assigned.

    `Tensor(data, device=None, dtype=None, requires_grad=None)` takes a Python scalar, a (nested) list or
    tuple, a numpy array, a UOp or another Tensor."""

    __slots__ = ("__weakref__", "_id", "grad", "requires_grad", "uop")
    _rng: ClassVar[np.random.Generator] = np.random.default_rng(0)

    def __init__(self, data: TensorData | None = None, device: str | None = None,
                 dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> None:
        dt = to_dtype(dtype) if dtype is not None else None
        dev = Device.canonicalize(device) if device is not None else None
        data = _py(data)
        if isinstance(data, Tensor):
            data = data.uop
        if isinstance(data, UOp):
            uop = data if dt is None else data.cast(dt)
            if dev is not None and uop.device is not None and uop.device != dev:
                uop = uop.copy_to_device(dev)
        elif isinstance(data, (bool, int, float)):
            # a requires-grad scalar is a unique constant, so that it is a gradient target of its own
            unique = requires_grad is True
            uop = UOp.const(dt or dtypes.from_py(data), data, dev or Device.DEFAULT, unique=unique)
        elif data is None:
            uop = Tensor._from_numpy(np.zeros((0,)), dt or dtypes.default_float, dev)
        elif isinstance(data, (list, tuple)):
            dt = dt or dtypes.from_py(data)
            try:
                arr = np.array(data)
            except ValueError as e:
                raise ValueError("Tensor data must be a rectangular (nested) list of numbers") from e
            if arr.dtype == object:
                raise ValueError("Tensor data must be a rectangular (nested) list of numbers")
            uop = Tensor._from_numpy(arr, dt, dev)
        elif isinstance(data, np.ndarray):
            uop = Tensor._from_numpy(data, dt or dtypes.from_numpy(data.dtype), dev)
        elif hasattr(data, "__dlpack__") or hasattr(data, "__array__"):  # torch, jax, cupy, array-likes
            arr = _host_array(data)
            uop = Tensor._from_numpy(arr, dt or dtypes.from_numpy(arr.dtype), dev)
        else:
            raise TypeError(f"can't make a Tensor from {type(data).__name__}")
        self.uop: UOp = uop
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None
        self._id = next(_next_id)
        _all_tensors[self._id] = self

    @staticmethod
    def _from_numpy(arr: np.ndarray, dt: DType, device: str | None) -> UOp:
        dev = device or Device.DEFAULT
        buf = UOp.new_buffer(dev, int(arr.size), dt)
        if arr.size:
            with np.errstate(invalid="ignore", over="ignore"):  # e.g. NaN -> int: numpy's conversion
                host = np.ascontiguousarray(arr.astype(_host_dtype(dt))).reshape(-1)
            Device[dev].copyin(buf, host)
        return buf.reshape(arr.shape)

    @staticmethod
    def _wrap(uop: UOp, *parents: Tensor) -> Tensor:
        rg = _requires_grad(parents)
        if rg is not False and not grad_enabled():  # inside no_grad: no gradient flows back through it
            return Tensor(uop.detach(), requires_grad=False)
        return Tensor(uop, requires_grad=rg)

    def __repr__(self) -> str:
        return f"<Tensor {self.uop.op.name} shape={self.shape} dtype={self.dtype!r} device={self.device!r}>"

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous; use .item() or compare with .numpy()")

    __hash__ = object.__hash__

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return _concrete(self.shape[0], "len()")

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape (ints, or UOps for symbolic sizes)."""
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.uop.dtype

    @property
    def device(self) -> str:
        """The device name, e.g. "REFERENCE" (the default device for a value bound to none)."""
        dev = self.uop.device
        if isinstance(dev, tuple):
            raise DeviceError(f"multi-device tensors are not supported yet (devices {dev})")
        return dev if dev is not None else Device.DEFAULT

    def numel(self) -> sint:
        """Number of elements."""
        return prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set `requires_grad` in place; returns self."""
        self.requires_grad = requires_grad
        return self

    # ------------------------------------------------------------------ creation
    @staticmethod
    def empty(*shape: sint | Sequence[sint], device: str | None = None, dtype: DTypeLike | None = None,
              requires_grad: bool | None = None) -> Tensor:
        """An uninitialised tensor: a fresh BUFFER (REFERENCE reads one never written as zeros)."""
        shp = resolve_shape_arg(shape)
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        size = _concrete(prod(shp), "empty")
        return Tensor(UOp.new_buffer(dev, size, dt).reshape(shp), requires_grad=requires_grad)

    @staticmethod
    def invalids(*shape: sint | Sequence[sint], device: str | None = None, dtype: DTypeLike | None = None,
                 requires_grad: bool | None = None) -> Tensor:
        """An uninitialised tensor that is a value, not a buffer (so a function body may make one): realized,
        it is a buffer that no kernel fills; read, its elements may be anything (REFERENCE gives zeros)."""
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        return Tensor(UOp.invalids(dt, dev, resolve_shape_arg(shape)), requires_grad=requires_grad)

    @staticmethod
    def full(shape: sint | Sequence[sint], fill_value: ConstType, device: str | None = None,
             dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Tensor:
        """A tensor of `fill_value`: a unique constant broadcast to `shape`."""
        shp = resolve_shape_arg((shape,))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(_py(fill_value))
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        return Tensor(UOp.const(dt, _py(fill_value), dev, shp, unique=True), requires_grad=requires_grad)

    @staticmethod
    def zeros(*shape: sint | Sequence[sint], device: str | None = None, dtype: DTypeLike | None = None,
              requires_grad: bool | None = None) -> Tensor:
        """A tensor of zeros (float32 unless `dtype` says otherwise)."""
        return Tensor.full(resolve_shape_arg(shape), 0.0, device, dtype or dtypes.float32, requires_grad)

    @staticmethod
    def ones(*shape: sint | Sequence[sint], device: str | None = None, dtype: DTypeLike | None = None,
             requires_grad: bool | None = None) -> Tensor:
        """A tensor of ones (float32 unless `dtype` says otherwise)."""
        return Tensor.full(resolve_shape_arg(shape), 1.0, device, dtype or dtypes.float32, requires_grad)

    def full_like(self, fill_value: ConstType, dtype: DTypeLike | None = None,
                  requires_grad: bool | None = None) -> Tensor:
        """`fill_value` in this tensor's shape and device (and dtype, unless given)."""
        return Tensor.full(self.shape, fill_value, self.device, dtype or self.dtype, requires_grad)

    def zeros_like(self, dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Tensor:
        """Zeros like this tensor."""
        return self.full_like(0, dtype, requires_grad)

    def ones_like(self, dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Tensor:
        """Ones like this tensor."""
        return self.full_like(1, dtype, requires_grad)

    @staticmethod
    def _iota(n: int, device: str) -> Tensor:
        """0, 1, ..., n-1 as int32, built lazily by doubling: a(2k) = cat(a(k), a(k) + k)."""
        a = Tensor(UOp.const(dtypes.int32, 0, device, (1,)))
        while (k := _concrete(a.shape[0])) < n:
            a = a.pad(((0, k),)) + (a + k).pad(((k, 0),))
        return a.shrink(((0, n),)) if k != n else a

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               device: str | None = None, dtype: DTypeLike | None = None,
               requires_grad: bool | None = None) -> Tensor:
        """start, start+step, ... up to (not including) stop; int32 for int arguments, else float32."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must not be zero")
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
        n = max(0, math.ceil((stop - start) / step))
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if n == 0:
            return Tensor.empty(0, device=dev, dtype=dt, requires_grad=requires_grad)
        i = Tensor._iota(n, dev)
        ints = isinstance(start, int) and isinstance(step, int)
        ret = i * step + start if ints else i.float() * step + start
        return Tensor(ret.cast(dt).uop, requires_grad=requires_grad)

    @staticmethod
    def eye(n: int, m: int | None = None, device: str | None = None, dtype: DTypeLike | None = None,
            requires_grad: bool | None = None) -> Tensor:
        """The identity matrix (n x m), built lazily: a padded column of ones, reshaped onto the diagonal."""
        k = max(n, m if m is not None else n)
        ones = Tensor.ones(k, 1, device=device, dtype=dtype)
        diag = ones.pad(((0, 0), (0, k))).flatten().shrink(((0, k * k),)).reshape(k, k)
        ret = diag.shrink(((0, n), (0, m if m is not None else n)))
        return Tensor(ret.uop, requires_grad=requires_grad)

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed the host-side generator behind rand/randn/uniform/normal/randint."""
        Tensor._rng = np.random.default_rng(seed)

    @staticmethod
    def _random(values: np.ndarray, device: str | None, dtype: DTypeLike | None,
                requires_grad: bool | None) -> Tensor:
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        return Tensor(values, device=device, dtype=dt, requires_grad=requires_grad)

    @staticmethod
    def rand(*shape: int | Sequence[int], device: str | None = None, dtype: DTypeLike | None = None,
             requires_grad: bool | None = None) -> Tensor:
        """Uniform random values in [0, 1)."""
        return Tensor._random(Tensor._rng.random(resolve_shape_arg(shape)), device, dtype, requires_grad)

    @staticmethod
    def randn(*shape: int | Sequence[int], device: str | None = None, dtype: DTypeLike | None = None,
              requires_grad: bool | None = None) -> Tensor:
        """Standard normal random values."""
        values = Tensor._rng.standard_normal(resolve_shape_arg(shape))
        return Tensor._random(values, device, dtype, requires_grad)

    @staticmethod
    def uniform(*shape: int | Sequence[int], low: float = 0.0, high: float = 1.0, device: str | None = None,
                dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Tensor:
        """Uniform random values in [low, high)."""
        values = Tensor._rng.uniform(low, high, resolve_shape_arg(shape))
        return Tensor._random(values, device, dtype, requires_grad)

    @staticmethod
    def normal(*shape: int | Sequence[int], mean: float = 0.0, std: float = 1.0, device: str | None = None,
               dtype: DTypeLike | None = None, requires_grad: bool | None = None) -> Tensor:
        """Normal random values with the given mean and standard deviation."""
        values = Tensor._rng.normal(mean, std, resolve_shape_arg(shape))
        return Tensor._random(values, device, dtype, requires_grad)

    @staticmethod
    def randint(*shape: int | Sequence[int], low: int = 0, high: int = 10, device: str | None = None,
                dtype: DTypeLike | None = None) -> Tensor:
        """Random integers in [low, high)."""
        values = Tensor._rng.integers(low, high, resolve_shape_arg(shape))
        return Tensor(values, device=device, dtype=to_dtype(dtype) if dtype is not None else dtypes.int32)

    @staticmethod
    def scaled_uniform(*shape: int | Sequence[int], device: str | None = None, dtype: DTypeLike | None = None,
                       requires_grad: bool | None = None) -> Tensor:
        """Uniform in [-1, 1) scaled by 1/sqrt(numel), a common weight initialisation."""
        shp = resolve_shape_arg(shape)
        values = Tensor._rng.uniform(-1.0, 1.0, shp) * prod(shp) ** -0.5
        return Tensor._random(values, device, dtype, requires_grad)

    @staticmethod
    def glorot_uniform(*shape: int | Sequence[int], device: str | None = None, dtype: DTypeLike | None = None,
                       requires_grad: bool | None = None) -> Tensor:
        """Glorot/Xavier uniform initialisation."""
        shp = resolve_shape_arg(shape)
        bound = math.sqrt(6 / (shp[0] + prod(shp[1:])))
        return Tensor._random(Tensor._rng.uniform(-bound, bound, shp), device, dtype, requires_grad)

    # ------------------------------------------------------------------ the mixin hooks
    def alu(self, op: Ops, *src: Tensor) -> Tensor:
        """A raw ALU node (broadcast, no dtype promotion)."""
        return Tensor._wrap(self.uop.alu(op, *(s.uop for s in src)), self, *src)

    def const_like(self, b: ConstType) -> Tensor:
        """A constant of this tensor's dtype, shape and device."""
        return Tensor(self.uop.const_like(_py(b)), requires_grad=False)

    def ufix(self, x: TensorLike) -> Tensor:
        """A Python scalar as a constant like this tensor (its dtype if it can hold it, else the scalar's)."""
        if isinstance(x, Tensor):
            return x
        return Tensor(self.uop._scalar_like(_py(x)), requires_grad=False)

    def _check_compatible(self, *others: Tensor) -> None:
        try:
            broadcast_shape(self.shape, *(o.shape for o in others))
        except ValueError as e:
            raise ValueError(f"shapes {self.shape} and {' and '.join(str(o.shape) for o in others)} can't be "
                             "broadcast together") from e
        self._check_devices(*others)

    def _check_devices(self, *others: Tensor) -> None:
        devices = {d for d in (self.uop.device, *(o.uop.device for o in others)) if d is not None}
        if len(devices) > 1:
            names = sorted(map(str, devices))
            raise DeviceError(f"tensors are on different devices {names}; move them with .to()")

    def _binop(self, op: Ops, x: TensorLike | Sequence[Any] | np.ndarray, reverse: bool) -> Tensor:
        if isinstance(x, (list, tuple, np.ndarray)):
            x = Tensor(x, device=self.device)
        if isinstance(x, Tensor):
            self._check_compatible(x)
            return Tensor._wrap(self.uop._binop(op, x.uop, reverse), self, x)
        return Tensor._wrap(self.uop._binop(op, _py(cast(ConstType, x)), reverse), self)

    def _unop(self, op: Ops) -> Tensor:
        return Tensor._wrap(self.uop._unop(op), self)

    def _mop(self, op: Ops, arg: Any) -> Tensor:  # noqa: ANN401  (the mixin hook's signature)
        return Tensor._wrap(self.uop._mop(op, arg), self)

    # ------------------------------------------------------------------ elementwise
    def __eq__(self, x: object) -> Tensor:  # type: ignore[override]  # elementwise, as in numpy and PyTorch
        return self.eq(x)  # type: ignore[arg-type]

    def __ne__(self, x: object) -> Tensor:  # type: ignore[override]
        return self.ne(x)  # type: ignore[arg-type]

    def __invert__(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"~ needs an int or bool tensor, not {self.dtype}")
        return self ^ -1

    def _inverse(self) -> Tensor:
        """An order-reversing map: -x for floats, ~x for ints, not x for bools."""
        return -self if dtypes.is_float(self.dtype) else ~self

    def _to_float(self) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        """`x` where this (condition) tensor is true, else `y`, with broadcasting and dtype promotion."""
        if not isinstance(x, Tensor) and not isinstance(y, Tensor):
            x = Tensor(_py(x), device=self.device, requires_grad=False)
        xt = x if isinstance(x, Tensor) else y.ufix(x)  # type: ignore[union-attr]
        yt = y if isinstance(y, Tensor) else xt.ufix(y)
        cond = self if self.dtype == dtypes.bool else self.cast(dtypes.bool)
        cond._check_compatible(xt, yt)
        dt = least_upper_dtype(xt.dtype.base, yt.dtype.base)
        xt, yt = xt.cast(dt), yt.cast(dt)
        shape = broadcast_shape(cond.shape, xt.shape, yt.shape)
        cond, xt, yt = cond.expand(shape), xt.expand(shape), yt.expand(shape)
        return Tensor._wrap(cond.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)

    def exp(self) -> Tensor:
        """e ** self."""
        return (self._to_float() * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        """Natural logarithm."""
        return self.log2() * math.log(2)

    def cos(self) -> Tensor:
        """cosine, as sin(pi/2 - x)."""
        return ((math.pi / 2) - self._to_float()).sin()

    def tan(self) -> Tensor:
        """tangent."""
        return self.sin() / self.cos()

    def rsqrt(self) -> Tensor:
        """1 / sqrt(self)."""
        return self.sqrt().reciprocal()

    def square(self) -> Tensor:
        """self * self."""
        return self * self

    def sign(self) -> Tensor:
        """-1, 0 or 1 (NaN stays NaN); its gradient is zero."""
        s = self.ne(0).where((self < 0).where(self.const_like(-1), self.const_like(1)), self.const_like(0))
        return self.ne(self).where(self, s) if dtypes.is_float(self.dtype) else s

    def abs(self) -> Tensor:
        """|self|, as self * sign(self) (gradient 0 at 0)."""
        return self * self.sign()

    def relu(self) -> Tensor:
        """max(self, 0), with gradient 0 at 0."""
        return (self > 0).where(self, 0)

    def sigmoid(self) -> Tensor:
        """1 / (1 + e ** -self)."""
        return (1 + (self._to_float() * (-1 / math.log(2))).exp2()).reciprocal()

    def tanh(self) -> Tensor:
        """Hyperbolic tangent, as 2 * sigmoid(2x) - 1."""
        return 2.0 * (2.0 * self).sigmoid() - 1.0

    def gelu(self, approximate: str = "tanh") -> Tensor:
        """GELU: the tanh approximation (as tinygrad), or the exact x * Phi(x) with approximate="none"."""
        if approximate == "none":
            return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
        if approximate != "tanh":
            raise ValueError(f"gelu approximate must be 'tanh' or 'none', not {approximate!r}")
        return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())

    def softplus(self, beta: float = 1.0) -> Tensor:
        """log(1 + e ** (beta * x)) / beta; linear above beta * x = 20, like PyTorch."""
        bx = self._to_float() * beta
        smooth = (1 + bx.minimum(20).exp()).log() * (1 / beta)
        return (bx > 20).where(self._to_float(), smooth)

    def clip(self, min_: TensorLike | None = None, max_: TensorLike | None = None) -> Tensor:
        """Clamp into [min_, max_] (either bound may be None)."""
        ret = self if min_ is None else self.maximum(min_)
        return ret if max_ is None else ret.minimum(max_)

    clamp = clip

    # ------------------------------------------------------------------ reductions
    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        if self.ndim == 0:
            if any(a not in (0, -1) for a in axes):
                raise IndexError(f"axis {axis} is out of range for a 0-d tensor")
            return ()
        norm = [self._axis(a) for a in axes]
        if len(set(norm)) != len(norm):
            raise ValueError(f"axis {axis} names a dimension more than once (shape {self.shape})")
        return tuple(sorted(norm))

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = self._axes(axis)
        ret = Tensor._wrap(self.uop._rop(op, axes), self)
        return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DTypeLike | None = None) -> Tensor:
        """Sum over `axis` (all by default), accumulated in `sum_acc_dtype`; half/bfloat16 cast back."""
        acc = sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        low_float = self.dtype in (dtypes.float16, dtypes.bfloat16)
        return ret.cast(self.dtype) if dtype is None and low_float else ret

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DTypeLike | None = None) -> Tensor:
        """Product over `axis`."""
        return self.cast(to_dtype(dtype) if dtype is not None else self.dtype)._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Maximum over `axis` (NaN propagates; tied maxima share the gradient)."""
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Minimum over `axis`."""
        return self._inverse().max(axis, keepdim)._inverse()

    def _count(self, axis: int | Sequence[int] | None) -> int:
        return _concrete(prod(self.shape[i] for i in self._axes(axis)), "mean/var")

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Mean over `axis` (a float result for int input)."""
        out = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
        total = self.cast(sum_acc_dtype(self.dtype)).sum(axis, keepdim)
        return (total / self._count(axis)).cast(out)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int = 1) -> Tensor:
        """Variance over `axis` with Bessel's `correction` (1 by default, as PyTorch)."""
        squares = (self - self.mean(axis, keepdim=True)).square()
        return squares.sum(axis, keepdim) / max(0, self._count(axis) - correction)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            correction: int = 1) -> Tensor:
        """Standard deviation over `axis`."""
        return self.var(axis, keepdim, correction).sqrt()

    def _softmax(self, axis: int) -> tuple[Tensor, Tensor, Tensor]:
        m = self - self.max(axis, keepdim=True).detach()  # the shift changes neither value nor gradient
        e = m.exp()
        return m, e, e.sum(axis, keepdim=True)

    def softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """e ** x / sum(e ** x) along `axis` (computed in `dtype` when given)."""
        _, e, ss = (self if dtype is None else self.cast(dtype))._softmax(axis)
        return e / ss

    def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """log(softmax(x)) along `axis`, computed stably (in `dtype` when given)."""
        m, _, ss = (self if dtype is None else self.cast(dtype))._softmax(axis)
        return m - ss.log()

    def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """log(sum(e ** x)) over `axis`, computed stably."""
        m = self.max(axis, keepdim=True).detach()
        ret = (self - m).exp().sum(axis, keepdim).log()
        return ret + m.reshape(ret.shape)

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first maximum along `axis` (of the flattened tensor when None), as int32."""
        if axis is None:
            return self.flatten().argmax(0)
        ax = self._axis(axis)
        n = _concrete(self.shape[ax], "argmax")
        if n == 0:  # no element has an index: PyTorch raises here too
            raise IndexError(f"argmax/argmin along axis {axis} of shape {self.shape}: the dimension is empty")
        is_max = self == self.max(ax, keepdim=True)
        countdown = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
        return (n - (is_max * countdown).max(ax, keepdim)).cast(dtypes.int32)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first minimum along `axis`, as int32."""
        return self._inverse().argmax(axis, keepdim)

    def one_hot(self, num_classes: int) -> Tensor:
        """An int tensor of class indices as one-hot int32 rows (a new last dimension of `num_classes`)."""
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot needs integer class indices, not {self.dtype}")
        classes = Tensor.arange(num_classes, device=self.device)
        return (self.unsqueeze(-1) == classes).where(1, 0)

    def sparse_categorical_crossentropy(self, y: Tensor) -> Tensor:
        """Mean cross-entropy of these logits (classes on the last axis) against int class indices `y`."""
        picked = self.log_softmax(-1) * y.one_hot(_concrete(self.shape[-1], "crossentropy")).cast(self.dtype)
        return -picked.sum(-1).mean()

    # ------------------------------------------------------------------ movement
    def pad(self, arg: Sequence[tuple[sint, sint] | None] | Sequence[sint], value: ConstType = 0,
            mode: str = "constant") -> Tensor:
        """Pad each dimension by (before, after) with `value` (zero by default); also PyTorch's flat form
        (last dimension first; there a negative amount cuts) and mode "reflect", "replicate" or "circular"."""
        if mode != "constant" or not all(p is None or isinstance(p, (tuple, list)) for p in arg):
            return self._pad_mode(arg, mode, value)
        arg = cast("Sequence[tuple[sint, sint] | None]", arg)
        ret = MovementMixin.pad(self, arg)
        if value == 0 or ret is self:
            return ret
        inside = Tensor(UOp.const(dtypes.bool, True, self.uop.device, self.shape)).pad(arg)
        return inside.where(ret, value)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dimensions."""
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        """All dimensions reversed."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dimensions start_dim..end_dim into one."""
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dimension `dim` into `sizes`."""
        d = self._axis(dim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def squeeze(self, dim: int | None = None) -> Tensor:
        """Drop size-1 dimensions (only `dim`, if given and of size 1)."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if not (isinstance(s, int) and s == 1)))
        if self.ndim == 0:
            return self
        d = self._axis(dim)
        return self.reshape(self.shape[:d] + self.shape[d + 1:]) if self.shape[d] == 1 else self

    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a size-1 dimension at `dim`."""
        d = dim + self.ndim + 1 if dim < 0 else dim
        if not 0 <= d <= self.ndim:
            raise IndexError(f"unsqueeze dim {dim} is out of range for shape {self.shape}")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def cat(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Concatenate along `dim` (each tensor is zero-padded into place and the results summed)."""
        ts = (self, *args)
        d = self._axis(dim)
        for t in args:
            mismatch = any(i != d and a != b for i, (a, b) in enumerate(zip(self.shape, t.shape)))
            if t.ndim != self.ndim or mismatch:
                raise ValueError(f"cat along dim {d}: shapes {self.shape} and {t.shape} differ elsewhere")
        self._check_devices(*args)
        dt = least_upper_dtype(*(t.dtype for t in ts))
        sizes = [_concrete(t.shape[d], "cat") for t in ts]
        total = sum(sizes)
        parts, offset = [], 0
        for t, size in zip(ts, sizes):
            pads: list[tuple[sint, sint] | None] = [None] * self.ndim
            pads[d] = (offset, total - offset - size)
            parts.append(t.cast(dt).pad(pads))
            offset += size
        return functools.reduce(Tensor.add, parts)

    def stack(self, *args: Tensor, dim: int = 0) -> Tensor:
        """Stack tensors of one shape along a new dimension `dim`."""
        return Tensor.cat(*(t.unsqueeze(dim) for t in (self, *args)), dim=dim)

    def _stride(self, dim: int, step: int, n: int) -> Tensor:
        """Every `step`-th element along `dim`, keeping `n` (the dimension has at least (n-1)*step+1)."""
        size = _concrete(self.shape[dim])
        x = self
        if size < n * step:
            pads: list[tuple[sint, sint] | None] = [None] * self.ndim
            pads[dim] = (0, n * step - size)
            x = x.pad(pads)
        elif size > n * step:
            x = x.shrink(tuple((0, n * step) if i == dim else None for i in range(self.ndim)))
        shp = x.shape
        x = x.reshape(shp[:dim] + (n, step) + shp[dim + 1:])
        x = x.shrink(tuple((0, 1) if i == dim + 1 else None for i in range(x.ndim)))
        return x.reshape(shp[:dim] + (n,) + shp[dim + 1:])

    def _normalize_index(self, indices: object) -> list[Any]:
        idx = list(indices) if isinstance(indices, tuple) else [indices]
        for i in idx:
            if isinstance(i, (Tensor, list, np.ndarray)) or isinstance(i, bool):
                raise TypeError(f"indexing with {type(i).__name__} (advanced indexing) is not supported")
            if not (i is None or i is Ellipsis or isinstance(i, (int, slice, UOp, np.integer))):
                raise TypeError(f"can't index a Tensor with {type(i).__name__}")
        if sum(1 for i in idx if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis (...)")
        consuming = sum(1 for i in idx if i is not None and i is not Ellipsis)
        if consuming > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim}: {indices!r}")
        fill = [slice(None)] * (self.ndim - consuming)
        if Ellipsis in [i for i in idx if not isinstance(i, UOp)]:
            e = next(j for j, i in enumerate(idx) if i is Ellipsis)
            return idx[:e] + fill + idx[e + 1:]
        return idx + fill

    def __getitem__(self, indices: object) -> Tensor:  # noqa: C901  (plus one dispatch to tensor indices)
        """Basic indexing: ints (negative count from the end), slices (any step), None and Ellipsis;
        an int may be a bound symbolic variable and a slice end a symbolic size; int tensors (and lists)
        index as in numpy's advanced indexing."""
        if has_tensor_index(indices):
            return self._getitem_tensor(indices)
        shrinks: list[tuple[sint, sint]] = []
        flips: list[int] = []
        strides: list[tuple[int, int, int]] = []  # (dim, step, count)
        out_shape: list[sint] = []
        dim = 0
        for i in self._normalize_index(indices):
            if i is None:
                out_shape.append(1)
                continue
            size = self.shape[dim]
            if isinstance(i, UOp):
                shrinks.append((i, i + 1))
            elif isinstance(i, (int, np.integer)):
                j = int(i) + size if i < 0 else int(i)
                if isinstance(j, int) and isinstance(size, int) and not 0 <= j < size:
                    raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
                shrinks.append((j, j + 1))
            elif isinstance(i.start, UOp) or isinstance(i.stop, UOp) or not isinstance(size, int):
                if i.step not in (None, 1):
                    raise IndexError("a symbolic slice can't have a step")
                start, stop = 0 if i.start is None else i.start, size if i.stop is None else i.stop
                shrinks.append((start, stop))
                out_shape.append(stop if isinstance(start, int) and start == 0 else stop - start)
            else:
                r = range(*i.indices(size))
                if len(r) == 0:
                    shrinks.append((0, 0))
                else:
                    lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
                    shrinks.append((lo, hi))
                    if r.step < 0:
                        flips.append(dim)
                    if abs(r.step) > 1:
                        strides.append((dim, abs(r.step), len(r)))
                out_shape.append(len(r))
            dim += 1
        x = self.shrink(shrinks).flip(flips)
        for d, step, n in strides:
            x = x._stride(d, step, n)
        return x.reshape(tuple(out_shape))

    def __setitem__(self, indices: object, v: TensorLike) -> None:
        if has_tensor_index(indices):
            return self._setitem_tensor(indices, v)
        view = self[indices]
        if isinstance(v, Tensor):
            value = v.cast(self.dtype)
        else:
            value = Tensor(_py(v), device=self.device, dtype=self.dtype)
        value = view._assignable(value)
        self._apply_store(view.uop.store(value.uop))

    # ------------------------------------------------------------------ matmul
    def dot(self, w: Tensor, dtype: DTypeLike | None = None) -> Tensor:
        """Matrix product (numpy's matmul broadcasting), as a sum over a broadcast multiply."""
        n1, n2 = self.ndim, w.ndim
        if n1 == 0 or n2 == 0:
            raise ValueError(f"matmul needs at least 1 dimension on both sides: {self.shape} and {w.shape}")
        if self.shape[-1] != w.shape[-min(n2, 2)]:
            raise ValueError(f"shapes {self.shape} and {w.shape} can't be multiplied "
                             f"({self.shape[-1]} != {w.shape[-min(n2, 2)]})")
        ones = (1,) * min(n1 - 1, n2 - 1, 1)
        x = self.reshape(self.shape[:-1] + ones + self.shape[-1:])
        wt = w.reshape(w.shape[:-2] + ones + w.shape[-min(n2, 2):]).transpose(-1, -min(n2, 2))
        out = least_upper_dtype(x.dtype, wt.dtype) if dtype is None else to_dtype(dtype)
        return (x * wt).sum(-1, dtype=dtype).cast(out)

    def matmul(self, x: Tensor, reverse: bool = False, dtype: DTypeLike | None = None) -> Tensor:
        """self @ x (or x @ self when reverse)."""
        return x.dot(self, dtype) if reverse else self.dot(x, dtype)

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x)

    def __rmatmul__(self, x: Tensor) -> Tensor:
        return self.matmul(x, True)

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """self @ weight + bias, with weight of shape (in, out) (a 1-d weight scales elementwise)."""
        x = self * weight if weight.ndim == 1 else self.dot(weight)
        return x if bias is None else x + bias

    # ------------------------------------------------------------------ casts and graph markers
    def cast(self, dtype: DTypeLike) -> Tensor:
        """Convert to `dtype` (float -> int truncates toward zero)."""
        dt = to_dtype(dtype)
        return self if dt == self.dtype else Tensor._wrap(self.uop.cast(dt), self)

    def bitcast(self, dtype: DTypeLike) -> Tensor:
        """Reinterpret the bits as `dtype` (same item size)."""
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise ValueError(f"bitcast from {self.dtype} to {dt} needs equal item sizes")
        return Tensor(self.uop.bitcast(dt), requires_grad=False)

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
        return Tensor(self.uop.detach(), requires_grad=False)

    def contiguous(self) -> Tensor:
        """Force the value into its own buffer when realized (a no-op on a buffer)."""
        return Tensor._wrap(self.uop.contiguous(), self)

    def contiguous_backward(self) -> Tensor:
        """Identity forward; makes the gradient flowing back contiguous."""
        return Tensor._wrap(self.uop.contiguous_backward(), self)

    def to(self, device: str) -> Tensor:
        """This tensor on `device` (a COPY; self when it is there already)."""
        dev = Device.canonicalize(device)
        Device[dev]
        if dev == self.uop.device:
            return self
        return Tensor._wrap(self.uop.copy_to_device(dev), self)

    def clone(self) -> Tensor:
        """A copy in a fresh buffer: AFTER(view, STORE(view, self)); gradients flow through to self."""
        view = Tensor.empty(self.shape, device=self.device, dtype=self.dtype).uop
        return Tensor._wrap(view.after(view.store(self.uop)), self)

    # ------------------------------------------------------------------ assignment
    def _assignable(self, x: Tensor) -> Tensor:
        """`x` broadcast to this tensor's shape, checked for dtype and device."""
        if x.dtype != self.dtype:
            raise TypeError(f"assign of a {x.dtype} tensor into a {self.dtype} tensor; cast it first")
        try:
            ok = broadcast_shape(x.shape, self.shape) == self.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"can't assign a tensor of shape {x.shape} to one of shape {self.shape}")
        self._check_compatible(x)
        return x.expand(self.shape)

    def _apply_store(self, store: UOp) -> None:
        """This tensor becomes AFTER(self, store). When the store writes into a BUFFER, every tensor that is
        a view of that buffer on the way down to it sees the write too (they alias the same storage)."""
        chain, base = _storage_chain(store.src[0])
        aliases = set(chain) if base.op is Ops.BUFFER else set()
        for t in list(_all_tensors.values()):
            if t is not self and (t.uop in aliases or realized_view(t.uop) in aliases):
                t.uop = t.uop.after(store)
        self.uop = self.uop.after(store)

    def assign(self, x: TensorLike) -> Tensor:
        """Write `x` into this tensor (same object): AFTER(self, STORE(self, x)) when this tensor has storage
        (a buffer, or a view of one); a tensor that is still an unrealized value takes the new value."""
        value = x if isinstance(x, Tensor) else Tensor(_py(x), device=self.device, dtype=self.dtype)
        if value.uop is self.uop:
            return self
        value = self._assignable(value)
        if _storage_chain(self.uop)[1].op is not Ops.BUFFER:
            self.uop = value.uop
            return self
        self._apply_store(self.uop.store(value.uop))
        return self

    def __iadd__(self, x: TensorLike) -> Tensor:
        return self.assign(self + x)

    def __isub__(self, x: TensorLike) -> Tensor:
        return self.assign(self - x)

    def __imul__(self, x: TensorLike) -> Tensor:
        return self.assign(self * x)

    def __itruediv__(self, x: TensorLike) -> Tensor:
        return self.assign(self / x)

    # ------------------------------------------------------------------ realization
    def realize(self, *lst: Tensor) -> Tensor:
        """Compute this tensor (and `lst`, in the same run) into buffers on its device; returns self."""
        Tensor._realize((self, *lst))
        return self

    @staticmethod
    def _realize(tensors: Sequence[Tensor]) -> None:
        """Run the graphs of `tensors` (one backend call per device) and leave each tensor in the realized
        form (uopgrad.realized): AFTER(buffer view, CALL of the graph that computed it). The backends see the
        graphs with every realized value read from its buffer; gradients still see the whole graph."""
        if not ALLOW_DEVICE_USAGE:
            raise DeviceError("realize() is not allowed while device usage is disabled "
                               "(ALLOW_DEVICE_USAGE=0, e.g. while a function is being traced)")
        todo = dedup(t.uop for t in tensors if not _is_realized(t.uop))
        if not todo:
            return
        written = {b for e in effects_under(todo) if e.op is Ops.STORE
                   and (b := _storage_chain(e.src[0])[1]).op is Ops.BUFFER}
        todo += Tensor._readers_of_overwritten(todo, written)
        devices = {u: str(u.device) for u in todo}
        stripped = strip_realized(UOp.sink(*todo)).src
        becomes: dict[UOp, UOp] = {}   # a tensor's uop -> its storage view, once the graph ran
        effects: dict[str, list[UOp]] = {}
        fresh: set[UOp] = set()         # the uops whose value goes into a buffer of their own
        for u, s in zip(todo, stripped):
            inner = s
            while inner.op is Ops.AFTER:
                inner = inner.src[0]
            if _plain_buffer(s) is not None:  # already in a buffer (e.g. a reshape of a realized value)
                becomes[u] = s
                fresh.add(u)
                continue
            if inner is not s and _buffer_view(inner):
                # an assign to (a view of) a buffer: run its effects; the tensor is that view again
                effects.setdefault(devices[u], []).append(s)
                becomes[u] = inner
                continue
            store, view = _output_buffer(s, devices[u])
            effects.setdefault(devices[u], []).append(store)
            becomes[u] = view
            fresh.add(u)
        for device, srcs in effects.items():
            Device[device].realize(srcs[0].sink(*srcs[1:]))
        # Every effect that ran (an assign into a buffer, a kernel writing its arguments) is done: wherever a
        # graph still holds it, it becomes the realized form, read from the buffer and never run again.
        ran = effects_under(todo)
        for u in fresh:
            becomes[u] = realized(becomes[u], settle(u, ran))
        overwritten(written)
        for t in list(_all_tensors.values()):
            if t.uop in becomes:
                t.uop = becomes[t.uop]
            elif ran and not _is_realized(t.uop):
                t.uop = settle(t.uop, ran)

    @staticmethod
    def _readers_of_overwritten(todo: list[UOp], written: set[UOp]) -> list[UOp]:
        """The unrealized values of live tensors that read a buffer `todo` assigns into: they are computed in
        the same run, before the write, so they keep the contents they were built on (PyTorch's order). A
        tensor that is a view of the written buffer is not among them: it sees the write."""
        if not written:
            return []
        seen, out = set(todo), []
        for t in list(_all_tensors.values()):
            u = t.uop
            if u in seen or _is_realized(u) or _storage_chain(u)[1].op is Ops.BUFFER:
                continue
            if any(n in written for n in u.toposort(gate=_unrealized, enter_calls=False)):
                seen.add(u)
                out.append(u)
        return out

    def linear_with_vars(self, *lst: Tensor) -> tuple[UOp, dict[str, int]]:
        """The schedule of these tensors' graphs, without running it: LINEAR(*items), the kernel, copy and
        custom-kernel CALLs in execution order, and the values of the bound variables. The tensors are left
        as they are."""
        todo = dedup(t.uop for t in (self, *lst) if not _is_realized(t.uop))
        if not todo:
            return UOp(Ops.LINEAR), {}
        sched = schedule(strip_realized(UOp.sink(*todo)))
        return UOp(Ops.LINEAR, dtypes.void, sched.items), dict(sched.var_vals)

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (realizes first); bfloat16 as ml_dtypes' bfloat16."""
        if not all_int(self.shape):
            raise ShapeError(f"no data for the symbolic shape {self.shape}; shrink it to a concrete size")
        self.realize()
        buf = _plain_buffer(realized_view(self.uop))
        if buf is None:  # a strided view of a buffer: copy it out through a temporary buffer
            store, view = _output_buffer(strip_realized(self.uop), self.device)
            Device[self.device].realize(store.sink())
            buf = _plain_buffer(view)
            assert buf is not None
        return Device[self.device].copyout(buf).reshape(tuple(_concrete(s) for s in self.shape))

    def tolist(self) -> ConstType | list[Any]:
        """The values as (nested) Python lists."""
        return cast("ConstType | list[Any]", self.numpy().tolist())

    def item(self) -> ConstType:
        """The single value of a one-element tensor, as a Python scalar."""
        if self.numel() != 1:
            raise ValueError(f"item() needs exactly one element, not shape {self.shape}")
        return self.numpy().reshape(()).item()  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ gradients
    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target, seeded with `gradient` (1.0 for a scalar self); a target that
        self does not depend on gets zeros."""
        if gradient is None and self.shape != ():
            raise AssertionError(f"gradient of a non-scalar tensor of shape {self.shape} needs gradient=")
        for t in (self, *targets):
            if not dtypes.is_float(t.dtype):
                raise GradientError(f"only float Tensors have gradient, not {t.dtype}")
        seed = gradient if gradient is not None else Tensor(1.0, device=self.device, dtype=self.dtype)
        grads = compute_gradient(self.uop, seed.uop, {t.uop for t in targets})
        out = [Tensor(grads[t.uop] if t.uop in grads else t.uop.const_like(0)) for t in targets]
        check_not_overwritten(self.uop, (b for g in out for b in buffers_read(g.uop)))
        return out

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(t) into `t.grad` for every live tensor `t` that requires grad and that self
        depends on; an existing `.grad` keeps its identity (it is assigned to)."""
        in_graph = self.uop.toposort()
        targets = [t for t in list(_all_tensors.values()) if t.requires_grad is True and t.uop in in_graph]
        for t, g in zip(targets, self.gradient(*targets, gradient=gradient)):
            if g.shape != t.shape:
                raise AssertionError(f"gradient shape {g.shape} does not match tensor shape {t.shape}")
            if t.grad is None:
                t.grad = g
            else:
                t.grad.assign(t.grad + g.to(t.grad.device))
        return self

    # ------------------------------------------------------------------ calls
    def call(self, *lst: Tensor, fxn: Tensor | UOp, grad_fxn: GradFxn | None = None) -> Tensor:
        """Call `fxn` (a body built on PARAMs) on (self, *lst): output 0 of the resulting FUNCTION."""
        body = fxn.uop if isinstance(fxn, Tensor) else fxn
        k = body.call(*(t.uop for t in (self, *lst)), grad_fxn=grad_fxn)
        return Tensor._wrap(k.gettuple(0), self, *lst)

    def as_param(self, slot: int) -> Tensor:
        """The PARAM standing for this tensor in a call body (a MULTI of a per-shard PARAM when sharded)."""
        axis, dev = self.uop.axis, self.uop.device
        if axis is None or not isinstance(dev, tuple):
            return Tensor(UOp.param(slot, self.dtype, self.shape, self.uop.device))
        shard = tuple(s // len(dev) if i == axis else s for i, s in enumerate(self.shape))
        return Tensor(UOp(Ops.MULTI, self.dtype, (UOp.param(slot, self.dtype, shard, dev),), axis))

    def custom_kernel(self, *lst: Tensor, fxn: Callable[..., UOp],
                      grad_fxn: GradFxn | None = None) -> list[Tensor]:
        """Run `fxn(*pointer PARAMs)` (a SINK of STOREs) as a kernel over (self, *lst); returns one
        AFTER(argument, CALL) per argument: the outputs are the arguments the kernel wrote."""
        ts = (self, *lst)
        rg = _requires_grad(ts)
        outs = UOp.custom_kernel(*(t.uop for t in ts), fxn=fxn, grad_fxn=grad_fxn)
        return [Tensor(u, requires_grad=rg) for u in outs]

    # ------------------------------------------------------------------ numpy / DLPack interop
    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        """`np.asarray(t)`: the values (realized and copied to the host, so `copy=False` is an error)."""
        if copy is False:
            raise ValueError("a Tensor's values are always copied to the host; np.asarray(t) with copy=False "
                             "is not possible")
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,  # noqa: ANN401
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:  # noqa: ANN401
        """A DLPack capsule of the values (the array-API exchange, e.g. `torch.from_dlpack(t)`): a host copy,
        as for `numpy()`, whatever the device, so the consumer never aliases device memory."""
        if copy is False:
            raise BufferError("a Tensor exports a host copy of its values; copy=False is not possible")
        arr = self.numpy()
        if max_version is None:  # a consumer of the first protocol version: no keywords
            return arr.__dlpack__()
        return arr.__dlpack__(max_version=max_version, dl_device=dl_device)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCPU, 0): exported values live in host memory."""
        return (1, 0)

    @staticmethod
    def from_dlpack(x: Any, device: str | None = None) -> Tensor:  # noqa: ANN401  (any DLPack producer)
        """A Tensor on `device` with the values of a DLPack producer (torch, jax, numpy, ...) whose memory is
        host-visible."""
        return Tensor(_host_array(x), device=device)

    # These three shadow builtins inside the class body, so they come last (mypy resolves annotations in the
    # class scope).
    def float(self) -> Tensor:
        """Cast to float32."""
        return self.cast(dtypes.float32)

    def int(self) -> Tensor:
        """Cast to int32."""
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        """Cast to bool."""
        return self.cast(dtypes.bool)
