"""Tensor (layer 15): a lazy handle on a UOp, with the tinygrad/PyTorch front end users write programs with.

Operations only build UOps; `realize()` hands a SINK of STOREs to the tensor's backend and replaces each
realized tensor's `uop` by its BUFFER (reshaped). The ops come from the mixins, each generic over `Self`
and written against the hooks of tensor_hooks, which Tensor implements here (`uop`, `_wrap`, `_from_data`,
devices, assign); `where`, `div`, `minimum` and `pad` are uopgrad.mixin's with PyTorch's promotion,
broadcasting and extra arguments added here. Gradients from `compute_gradient` (docs/semantics.md §3.1).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias, cast

import numpy as np

from uopgrad import tensor_registry as registry
from uopgrad._util import all_int, dedup, prod
from uopgrad.backend import CompiledBackend, Device, reduce_split
from uopgrad.codegen import LinearProgram
from uopgrad.config import ALLOW_DEVICE_USAGE
from uopgrad.dtype import ConstType, DType, dtypes, least_upper_dtype
from uopgrad.errors import (
    ArgumentError,
    DataDTypeError,
    DeviceError,
    DTypeError,
    GradientError,
    JitError,
    NonScalarGradientError,
    ShapeError,
    UopgradError,
)
from uopgrad.gradient_template import gradients, template_cache_info
from uopgrad.mixin import MathMixin, broadcast_shape
from uopgrad.ops import Ops
from uopgrad.pipeline import lower, note_host_fill, recording
from uopgrad.realized import (
    check_not_overwritten,
    effects_under,
    is_realized_after,
    overwritten,
    reads,
    realized,
    realized_view,
    settle,
    storage_view,
    strip_realized,
)
from uopgrad.schedule import schedule
from uopgrad.tensor_args import DTypeLike, TensorLike, concrete, py_scalar, to_dtype
from uopgrad.tensor_cast import CastMixin
from uopgrad.tensor_create import CreateMixin
from uopgrad.tensor_elementwise import ElementwiseMixin
from uopgrad.tensor_grad import grad_enabled
from uopgrad.tensor_index import IndexMixin
from uopgrad.tensor_interop import InteropMixin, host_array
from uopgrad.tensor_movement import TensorMovementMixin
from uopgrad.tensor_multi import (
    device_arg,
    lower_gathers,
    merge_devices,
    per_device_roots,
    realize_multi,
    replicate,
)
from uopgrad.tensor_nn import NNMixin
from uopgrad.tensor_reduce import ReduceMixin
from uopgrad.tensor_registry import is_realized as _is_realized
from uopgrad.tensor_registry import plain_buffer as _plain_buffer
from uopgrad.tensor_registry import storage_chain as _storage_chain
from uopgrad.tensor_registry import view_of_buffer as _view_of_buffer
from uopgrad.tensor_shape import ShapeMixin
from uopgrad.uop import UOp, shape_vec, sint
from uopgrad.uop_build import buffer_view

__all__ = ["Tensor"]

TensorData: TypeAlias = "Tensor | UOp | ConstType | np.generic | np.ndarray | Sequence[Any]"
GradFxn = Callable[..., tuple[UOp | None, ...]]

_next_id = itertools.count()


def _host_dtype(dt: DType) -> np.dtype:
    return np.dtype(np.float32) if dt.base.scalar() == dtypes.bfloat16 else dtypes.to_numpy(dt.base)


def _requires_grad(ts: Iterable[Tensor]) -> bool | None:
    """True if any input requires grad; else None if any is undecided; else False."""
    out: bool | None = False
    for t in ts:  # (a loop, not any() over a list: every op's result asks this)
        if (f := t.requires_grad) is True:
            return True
        if f is None:
            out = None
    return out


def _buffer_view(u: UOp) -> bool:
    """A chain of RESHAPE/SHRINK/PERMUTE/FLIP/DETACH over a BUFFER: a view that can be written through."""
    while u.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP, Ops.DETACH):
        u = u.src[0]
    return u.op is Ops.BUFFER


def _unrealized(u: UOp) -> bool:
    return not is_realized_after(u)


def _output_buffer(u: UOp, device: str) -> tuple[UOp, UOp]:
    """(STORE of `u` into a fresh BUFFER, the view of that buffer that has `u`'s shape)."""
    shape = u.shape
    if all_int(shape):
        size = concrete(prod(shape))
        buf = UOp.new_buffer(device, size, u.dtype.base)
        # the reshapes built directly: one of `size` elements to and from a flat buffer of `size` is valid
        if shape == (size,):
            return buf.store(u), buf
        flat = UOp(Ops.RESHAPE, u.dtype, (u, shape_vec((size,))))
        return buf.store(flat), buffer_view(buf, cast("tuple[int, ...]", shape))
    # a symbolic shape: a buffer of the largest size, of which a SHRINK to the bound size is the tensor
    limits = [d if isinstance(d, int) else d.vmax for d in shape]
    if not all(isinstance(x, int) for x in limits):
        raise ShapeError(f"can't realize shape {shape}: a symbolic dimension has no finite upper bound")
    buf = UOp.new_buffer(device, int(prod(limits)), u.dtype.base)
    size_sym = prod(shape)
    region = buf.shrink(((0, size_sym),))
    return region.store(u.reshape((size_sym,))), region.reshape(shape)


def _outputs(
    todo: list[UOp], stripped: Sequence[UOp], devices: dict[UOp, str]
) -> tuple[dict[UOp, UOp], dict[str, list[UOp]], set[UOp]]:
    """Where each value of a realize ends up: (a tensor's uop -> its storage view once the graph ran, the
    effects to run on each device, the uops whose value goes into a buffer of their own)."""
    becomes: dict[UOp, UOp] = {}  # a tensor's uop -> its storage view, once the graph ran
    effects: dict[str, list[UOp]] = {}
    fresh: set[UOp] = set()  # the uops whose value goes into a buffer of their own
    for u, s in zip(todo, stripped):
        inner = s
        while inner.op is Ops.AFTER:
            inner = inner.src[0]
        if (view := _view_of_buffer(s)) is not None:  # already in a buffer: it keeps aliasing it
            becomes[u] = view
            fresh.add(u)
            continue
        if inner is not s and _buffer_view(inner):
            # an assign to (a view of) a buffer: run its effects; the tensor is that view again
            effects.setdefault(devices[u], []).append(s)
            becomes[u] = inner
            continue
        if (through := registry.view_through_afters(s)) is not None:
            # a view taken of a tensor whose assign was pending (`v = t.reshape()` after `t.assign(x)`):
            # run the assigns; it is a view of the buffer from now on, so later writes reach it too
            view, afters = through
            effects.setdefault(devices[u], []).extend(afters)
            becomes[u] = view
            fresh.add(u)
            continue
        store, view = _output_buffer(s, devices[u])
        effects.setdefault(devices[u], []).append(store)
        becomes[u] = view
        fresh.add(u)
    return becomes, effects, fresh


def _effects_of(ts: list[Tensor]) -> dict[str, list[UOp]]:
    """The graph a realize of each of `ts` alone would run, by device (`realize`'s `ahead`)."""
    out: dict[str, list[UOp]] = {}
    for u in (t.uop for t in ts if isinstance(t.device, str)):
        effects = _outputs([u], lower_gathers(strip_realized(UOp.sink(u)).src), {u: str(u.device)})[1]
        for device, srcs in merge_devices(effects).items():
            out.setdefault(device, []).append(srcs[0].sink(*srcs[1:]))
    return out


def _typed(op: Ops, u: UOp) -> UOp:
    """A bitwise node checked where it is built: on floats it has no meaning (realize would reject it)."""
    if op in (Ops.AND, Ops.OR, Ops.XOR) and not (dtypes.is_int(u.dtype) or u.dtype.scalar() == dtypes.bool):
        raise DTypeError(f"{op.name.lower()} needs int or bool tensors, not {u.dtype}; cast them first")
    return u


def _from_node(data: UOp, dt: DType | None, dev: str | tuple[str, ...] | None) -> UOp:
    """`Tensor(node, dtype, device)`: the node as it is (the reference asserts the dtype), on `dev`."""
    if dt is not None and dt != data.dtype and data.dtype != dtypes.weakint:
        raise DataDTypeError(
            f"Tensor({data.op.name} node of {data.dtype}, dtype={dt}): a node is taken as "
            f"it is; use Tensor(node).cast({dt}) for a {dt} tensor"
        )
    uop = data if dt is None else data.cast(dt)  # a symbolic int (weakint) becomes a value of dt
    if dev is not None and uop.device is not None and uop.device != dev:
        uop = uop.copy_to_device(dev)
    return uop


class Tensor(
    CreateMixin,
    ElementwiseMixin,
    ReduceMixin,
    TensorMovementMixin,
    CastMixin,
    InteropMixin,
    IndexMixin,
    ShapeMixin,
    NNMixin,
):
    """A lazy n-dimensional array: a handle on a UOp. `uop` changes when the tensor is realized or assigned.

    `Tensor(data, device=None, dtype=None, requires_grad=None)` takes a Python scalar, a (nested) list or
    tuple, a numpy array, a UOp or another Tensor."""

    # "__dict__": a tensor takes attributes of the caller's (it always has: the multi-device mixin that
    # gave it one had no __slots__)
    __slots__ = ("__dict__", "__weakref__", "_id", "_siblings", "_uop", "grad", "requires_grad")
    _siblings: registry.Siblings | None  # the gradients of one backward (tensor_registry.ahead_of)

    def __init__(
        self,
        data: TensorData | None = None,
        device: str | tuple[str, ...] | None = None,
        dtype: DTypeLike | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        dt = to_dtype(dtype) if dtype is not None else None
        devs, dev = device_arg(device)
        data = py_scalar(data)
        if isinstance(data, Tensor):  # torch.tensor(t, dtype=...) casts
            data = data.uop if dt is None or dt == data.dtype else data.uop.cast(dt)
        if isinstance(data, UOp):
            uop = _from_node(data, dt, dev)
        elif isinstance(data, (bool, int, float)):
            # a leaf of its own, as a list gets a BUFFER of its own: an interned CONST would be one node for
            # every equal scalar, one gradient target (and one buffer once realized) for all of them
            uop = UOp.const(dt or dtypes.from_py(data), data, dev or Device.DEFAULT, unique=True)
        elif data is None:
            uop = Tensor._from_numpy(np.zeros((0,)), dt or dtypes.default_float, dev)
        elif isinstance(data, (bytes, bytearray)):  # raw bytes: uint8, or the elements of `dtype` they hold
            dt = dt or dtypes.uint8
            uop = Tensor._from_numpy(np.frombuffer(bytes(data), dtype=dtypes.to_numpy(dt.base)), dt, dev)
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
            arr = host_array(data)
            uop = Tensor._from_numpy(arr, dt or dtypes.from_numpy(arr.dtype), dev)
        else:
            raise TypeError(f"can't make a Tensor from {type(data).__name__}")
        self._id, self._siblings = next(_next_id), None
        registry.register(self)
        self.uop = replicate(uop, devs)  # on a device tuple: on every device of it
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None

    @property
    def uop(self) -> UOp:
        """The graph of this tensor's value (it changes when the tensor is realized or assigned)."""
        return self._uop

    @uop.setter
    def uop(self, u: UOp) -> None:
        self._uop = u
        registry.moved(self, u)  # indexed where a realize or an assign will look for it

    @staticmethod
    def _host_values(arr: np.ndarray, dt: DType) -> np.ndarray:
        """`arr` as the flat host array a BUFFER of `dt` is filled from (a private copy)."""
        with np.errstate(invalid="ignore", over="ignore"):  # e.g. NaN -> int: numpy's conversion
            return np.ascontiguousarray(arr.astype(_host_dtype(dt))).reshape(-1)

    @staticmethod
    def _from_numpy(arr: np.ndarray, dt: DType, device: str | None) -> UOp:
        dev = device or Device.DEFAULT
        buf = UOp.new_buffer(dev, int(arr.size), dt)
        if arr.size:
            host = Tensor._host_values(arr, dt)
            Device[dev].copyin(buf, host)
            note_host_fill(buf, lambda: host)  # a TinyJit capturing refills it if its step writes it
        return buffer_view(buf, tuple(int(s) for s in arr.shape))

    @staticmethod
    def _wrap(uop: UOp, *parents: Tensor) -> Tensor:
        rg = _requires_grad(parents)
        if rg is not False and not grad_enabled():  # inside no_grad: no gradient flows back through it
            uop, rg = uop.detach(), False
        return Tensor._adopt(uop, rg)

    @staticmethod
    def _adopt(uop: UOp, rg: bool | None) -> Tensor:
        # what __init__ does with a UOp and no device or dtype, without its argument checks (every op's
        # result comes through here)
        t = object.__new__(Tensor)
        t._id, t._siblings = next(_next_id), None
        registry.register(t)
        t.uop, t.requires_grad, t.grad = uop, rg, None
        return t

    def __repr__(self) -> str:
        """PyTorch's form with the values when the tensor is realized (numpy's summary past 1000 elements):
        `Tensor([1., 2.], device='CPU', dtype=dtypes.float)`. Otherwise what it will be, computing nothing:
        `<Tensor unrealized shape=(2,) dtype=dtypes.float device='CPU' op=ADD>` (also while a TinyJit
        captures or a function is traced, where no value may be read, and on a device tuple)."""
        u, dev = self.uop, self.device
        grad = ", requires_grad=True" if self.requires_grad else ""
        values: np.ndarray | None = None
        if u.op is Ops.CONST and not self.shape:  # a scalar leaf: its value is in the node
            values = np.asarray(u.arg)
        elif isinstance(dev, str) and all_int(self.shape) and _is_realized(u):
            try:
                values = self.numpy()
            except UopgradError:  # no read allowed here (a capture, a trace): show it unread
                values = None
        if values is None:
            state = "realized" if _is_realized(u) else "unrealized"
            what = f"shape={self.shape} dtype={self.dtype!r} device={dev!r} op={u.op.name}"
            return f"<Tensor {state} {what}{grad}>"
        body = np.array2string(values, separator=", ", prefix="Tensor(")
        return f"Tensor({body}, device={dev!r}, dtype={self.dtype!r}{grad})"

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous; use .item() or compare with .numpy()")

    __hash__ = object.__hash__

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return concrete(self.shape[0], "len()")

    # ------------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape (ints, or UOps for symbolic sizes)."""
        return self._uop.shape

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self._uop.dtype

    @property
    def device(self) -> str | tuple[str, ...]:
        """The device name, e.g. "REFERENCE" (the default device for a value bound to none), or the tuple of
        devices of a sharded or replicated tensor."""
        dev = self.uop.device
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

    # ------------------------------------------------------------------ the mixin hooks
    def alu(self, op: Ops, *src: Tensor) -> Tensor:
        """A raw ALU node (broadcast, no dtype promotion)."""
        return Tensor._wrap(self.uop.alu(op, *(s.uop for s in src)), self, *src)

    def const_like(self, b: ConstType) -> Tensor:
        """A constant of this tensor's dtype, shape and device."""
        return Tensor._adopt(self.uop.const_like(py_scalar(b)), False)

    def ufix(self, x: TensorLike) -> Tensor:
        """A Python scalar as a constant like this tensor (its dtype if it can hold it, else the scalar's)."""
        if isinstance(x, Tensor):
            return x
        return Tensor._adopt(self.uop._scalar_like(py_scalar(x)), False)

    def _check_compatible(self, *others: Tensor) -> None:
        shape = self._uop.shape
        if len(others) == 1 and others[0]._uop.shape == shape:  # one operand of this shape: the common case
            self._check_devices(*others)
            return
        try:
            if any(o.shape != shape for o in others):  # equal shapes (the common case) need no broadcast
                broadcast_shape(shape, *(o.shape for o in others))
        except ValueError as e:
            raise ValueError(
                f"shapes {self.shape} and {' and '.join(str(o.shape) for o in others)} can't be "
                "broadcast together"
            ) from e
        self._check_devices(*others)

    def _check_devices(self, *others: Tensor) -> None:
        mine = self._uop.device
        if len(others) == 1:  # (no generator for the common case: one other operand, on this device)
            if others[0]._uop.device == mine:
                return
        elif all(o._uop.device == mine for o in others):  # one device (the common case)
            return
        devices = {d for d in (self.uop.device, *(o.uop.device for o in others)) if d is not None}
        if len(devices) > 1:
            names = sorted(map(str, devices))
            raise DeviceError(f"tensors are on different devices {names}; move them with .to()")

    def _binop(self, op: Ops, x: TensorLike | Sequence[Any] | np.ndarray, reverse: bool) -> Tensor:
        if type(x) is not Tensor and isinstance(x, (list, tuple, np.ndarray)):
            x = Tensor(x, device=self.device)
        if isinstance(x, Tensor):
            self._check_compatible(x)
            return Tensor._wrap(_typed(op, self.uop._binop(op, x.uop, reverse)), self, x)
        x = py_scalar(cast(ConstType, x))
        if op is Ops.POW and not reverse and dtypes.is_int(self.dtype) and type(x) is int and x < 0:
            raise DTypeError(
                f"{self.dtype} ** {x}: an int base to a negative power is not an int; cast the "
                "base to float first"
            )
        return Tensor._wrap(_typed(op, self.uop._binop(op, x, reverse)), self)

    def sub(self, x: Tensor | ConstType, reverse: bool = False) -> Tensor:
        """self - x: MathMixin's ADD of a negation, built on the nodes for a Tensor x (one Tensor, not three:
        a loss's `out - y`, every optimiser update)."""
        if type(x) is not Tensor:
            return super().sub(x, reverse)
        self._check_compatible(x)
        a, b = (x, self) if reverse else (self, x)
        return Tensor._wrap(a.uop.sub(b.uop), self, x)

    def _unop(self, op: Ops) -> Tensor:
        return Tensor._wrap(self.uop._unop(op), self)

    def _mop(self, op: Ops, arg: Any) -> Tensor:  # noqa: ANN401  (the mixin hook's signature)
        u = self.uop._mop(op, arg)
        _ = u.shape  # infer (so check) the new shape at the call that asked for it, not later at realize
        return Tensor._wrap(u, self)

    # ------------------------------------------------------------------ the Tensor forms of shared ops
    # (mixin's where, div, minimum and pad, with PyTorch's promotion, broadcasting and extra arguments)
    def minimum(self, x: TensorLike | list[Any] | tuple[Any, ...] | np.ndarray) -> Tensor:
        """Elementwise min (NaN wins, as PyTorch): the max of the order-reversed operands, reversed back,
        after both are promoted to their common dtype. Reversing first would negate a bool into its not
        before it meets a number, and -x wraps an int's lowest value (~x reverses every int's order)."""
        if isinstance(x, (list, tuple, np.ndarray)):  # as maximum takes them
            x = Tensor(x, device=self.device, requires_grad=False)
        o = self.ufix(x)
        dt = least_upper_dtype(self.dtype.base, o.dtype.base)
        return self.cast(dt)._inverse().maximum(o.cast(dt)._inverse())._inverse()

    def where(self, x: TensorLike, y: TensorLike) -> Tensor:
        """`x` where this (condition) tensor is true, else `y`, with broadcasting and dtype promotion."""
        if isinstance(x, Tensor):
            xt = x
        elif isinstance(y, Tensor):
            xt = y.ufix(x)
        else:
            xt = Tensor(py_scalar(x), device=self.device, requires_grad=False)
        yt = y if isinstance(y, Tensor) else xt.ufix(y)
        cond = self if self.dtype == dtypes.bool else self.cast(dtypes.bool)
        cond._check_compatible(xt, yt)
        dt = least_upper_dtype(xt.dtype.base, yt.dtype.base)
        xt, yt = xt.cast(dt), yt.cast(dt)
        shape = broadcast_shape(cond.shape, xt.shape, yt.shape)
        cond, xt, yt = cond.expand(shape), xt.expand(shape), yt.expand(shape)
        return self._wrap(cond.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)

    def div(self, x: TensorLike, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """self / x; rounding_mode "trunc" rounds the quotient toward zero, "floor" toward -inf (ints stay
        ints for both, as PyTorch)."""
        num, den = (self.ufix(x), self) if reverse else (self, self.ufix(x))
        if rounding_mode is None:
            return MathMixin.div(num, den)
        if rounding_mode not in ("trunc", "floor"):
            raise ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
        if dtypes.is_float(num.dtype) or dtypes.is_float(den.dtype):
            q = MathMixin.div(num, den)
            return q.trunc() if rounding_mode == "trunc" else q.floor()
        q = num // den
        if rounding_mode == "floor":
            return q
        # floor division rounds toward -inf: step back up where the signs differ and it was inexact
        inexact = (q * den).ne(num) & ((num < 0).ne(den < 0))
        return inexact.where(q + 1, q)

    def pad(
        self,
        padding: Sequence[tuple[sint, sint] | None] | Sequence[sint],
        value: ConstType = 0,
        mode: str = "constant",
    ) -> Tensor:
        """Pad each dimension by (before, after) with `value` (zero by default); also PyTorch's flat form
        (last dimension first; there a negative amount cuts) and mode "reflect", "replicate" or "circular"."""
        if (
            mode != "constant"
            or not all(p is None or isinstance(p, (tuple, list)) for p in padding)
            or any(
                isinstance(a, int) and a < 0
                for p in padding
                if p is not None
                for a in cast("tuple[sint, sint]", p)
            )
        ):
            return self._pad_mode(padding, mode, value)  # flat form, a mode, or negative amounts (they cut)
        arg = cast("Sequence[tuple[sint, sint] | None]", padding)
        ret = super().pad(arg)
        if value == 0 or ret is self:
            return ret
        inside = Tensor(UOp.const(dtypes.bool, True, self.uop.device, self.shape)).pad(arg)
        return inside.where(ret, value)

    # ------------------------------------------------------------------ assignment
    def _assignable(self, x: Tensor) -> Tensor:
        """`x` broadcast to this tensor's shape, checked for dtype and device."""
        if x.dtype != self.dtype:
            raise TypeError(f"assign of a {x.dtype} tensor into a {self.dtype} tensor; cast it first")
        if x._uop.shape == self._uop.shape:  # (an update of the same shape: nothing to broadcast)
            self._check_devices(x)
            return x
        try:
            ok = broadcast_shape(x.shape, self.shape) == self.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"can't assign a tensor of shape {x.shape} to one of shape {self.shape}")
        self._check_compatible(x)
        return x.expand(self.shape)

    def _apply_store(self, store: UOp) -> None:
        """This tensor becomes AFTER(self, store). When the store writes into a BUFFER, the live tensors that
        are storage in it are read after the write too, as in PyTorch (`tmp = t[0]; t[0] = t[1]` changes tmp):
        those the target was built on, and every other view (a slice, `detach()`, a realized view) that
        carries no gradient. One that does (a slice of a parameter) keeps its graph, so that its gradient
        still reaches the parameter: it reads the buffer when it is computed."""
        chain, base = _storage_chain(store.src[0])
        if base.op is not Ops.BUFFER:
            self.uop = self.uop.after(store)
            return
        # compared without the AFTERs on top: a tensor with a write of its own pending is the same storage
        on_path = {storage_view(u) for u in chain}
        for t in registry.views_of(base):
            if t is not self and (
                storage_view(t.uop) in on_path
                or (t.requires_grad is not True and _storage_chain(t.uop)[1] is base)
            ):
                t.uop = t.uop.after(store)
        self.uop = self.uop.after(store)

    def assign(self, x: TensorLike) -> Tensor:
        """Write `x` into this tensor (same object): AFTER(self, STORE(self, x)) when this tensor has storage
        (a buffer, or a view of one); a tensor that is still an unrealized value takes the new value."""
        value = x if isinstance(x, Tensor) else Tensor(py_scalar(x), device=self.device, dtype=self.dtype)
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
            raise DeviceError(
                "realize() is not allowed while device usage is disabled "
                "(ALLOW_DEVICE_USAGE=0, e.g. while a function is being traced)"
            )
        tensors = realize_multi(tensors, _is_realized)  # those on device tuples first; the rest are left
        todo = dedup(t.uop for t in tensors if not _is_realized(t.uop))
        if not todo:
            return
        written = registry.assigned(todo)
        todo += Tensor._run_readers_first(todo, written)  # (which adds what those readers assign into)
        devices = {u: str(u.device) for u in todo}
        stripped = lower_gathers(strip_realized(UOp.sink(*todo)).src)
        becomes, effects, fresh = _outputs(todo, stripped, devices)
        ahead = _effects_of(registry.ahead_of(list(tensors)))  # sibling gradients: built alongside
        for device, srcs in merge_devices(effects).items():
            dev, sink = Device[device], srcs[0].sink(*srcs[1:])
            if device in ahead and type(dev).realize is CompiledBackend.realize:  # (not a subclass's own)
                cast(CompiledBackend, dev).realize(sink, ahead[device])
            else:
                dev.realize(sink)
        # Every effect that ran (an assign into a buffer, a kernel writing its arguments) is done: wherever a
        # graph still holds it, it becomes the realized form, read from the buffer and never run again.
        ran = effects_under(todo)
        # a value realized under no_grad whose tensors carry no gradient keeps no history (realized() drops
        # what computed a DETACH): an inference loop that realizes each step from the last holds one step
        cut = (
            set()
            if grad_enabled()
            else {t.uop for t in tensors if t.requires_grad is False}
            - {t.uop for t in tensors if t.requires_grad is not False}
        )
        settled: dict[UOp, UOp] = {}  # one realized form per AFTER across all the graphs (`settle`)
        for u in fresh:
            value = settle(u, ran, settled)
            becomes[u] = realized(becomes[u], value.detach() if u in cut else value)
        overwritten(written)
        for t in registry.pending():
            if t.uop in becomes:
                t.uop = becomes[t.uop]
            elif ran and not _is_realized(t.uop):
                t.uop = settle(t.uop, ran, settled)

    @staticmethod
    def _run_readers_first(todo: list[UOp], written: set[UOp]) -> list[UOp]:
        """The readers of `written` (`_readers_of_overwritten`) to compute in this run, before the writes. One
        on another device (a lazy `.to()`) or on several (`.shard()`) is not ordered before the write by one
        device's schedule: it is realized first, in a run of its own."""
        readers = Tensor._readers_of_overwritten(todo, written)
        # where every written buffer is on one device, a reader on it reads none elsewhere (a training step)
        written_on = {b.device for b in written}
        one = next(iter(written_on)) if len(written_on) == 1 else None
        if early := {
            u
            for u in readers
            if isinstance(dev := u.device, tuple)
            or (dev != one and any(b.device != dev for b in reads(u) & written))
        }:
            Tensor._realize([t for t in registry.pending() if t.uop in early])
        return [u for u in readers if u not in early]

    @staticmethod
    def _readers_of_overwritten(todo: list[UOp], written: set[UOp]) -> list[UOp]:
        """`tensor_registry.readers_of_overwritten` (tensor_multi and jit ask it through Tensor)."""
        return registry.readers_of_overwritten(todo, written)

    @staticmethod
    def _realize_readers(written: Sequence[UOp]) -> None:
        """Compute the unrealized values of live tensors that read one of the `written` buffers (before a
        captured step writes into them, uopgrad.jit)."""
        if readers := set(Tensor._readers_of_overwritten([], set(written))):
            Tensor._realize([t for t in registry.pending() if t.uop in readers])

    def linear_with_vars(self, *lst: Tensor) -> tuple[UOp, dict[str, int]]:
        """The schedule of these tensors' graphs, without running it: LINEAR(*items), the kernel, copy and
        custom-kernel CALLs in execution order, and the values of the bound variables. The tensors are left
        as they are."""
        todo = dedup(t.uop for t in (self, *lst) if not _is_realized(t.uop))
        if not todo:
            return UOp(Ops.LINEAR), {}
        # a value on a device tuple is scheduled as its per-device graphs
        roots = UOp.sink(*per_device_roots(strip_realized(UOp.sink(*todo)).src))
        sched = schedule(roots, split=reduce_split)  # the items realize would run
        return UOp(Ops.LINEAR, dtypes.void, sched.items), dict(sched.var_vals)

    def schedule_linear(self, *lst: Tensor) -> UOp:
        """The schedule of these tensors' graphs as LINEAR(*items) (tinygrad's name): `linear_with_vars`
        without the variables' values."""
        return self.linear_with_vars(*lst)[0]

    def linear_programs(self, *lst: Tensor, device: str | None = None) -> list[LinearProgram]:
        """The linear program (spec/kernels.md §2) of every code kernel in these tensors' schedule, in order,
        lowered for the target (`capabilities`) of the device it runs on, or of `device`; nothing is compiled
        or run. `print(p.listing())` shows one, a line per uop. Tile shapes are the heuristic's (BEAM's pick
        is made at compile time)."""
        items, _ = self.linear_with_vars(*lst)
        kernels = [i for i in items.src if i.op is Ops.CALL and i.src[0].op is Ops.SINK]
        return [lower(k, Device[device or str(k.src[1].device)].capabilities) for k in kernels]

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (realizes first); bfloat16 as ml_dtypes' bfloat16."""
        if not all_int(self.shape):
            raise ShapeError(f"no data for the symbolic shape {self.shape}; shrink it to a concrete size")
        if recording() is not None:  # (tinygrad's rule) a replay would reuse the value read at capture
            raise JitError(
                "cannot read tensor data (numpy, item, tolist) while a TinyJit captures: the "
                "value would be baked into every replay; compute with Tensors, or read it outside "
                "the step"
            )
        # on a device tuple: realized where it lives (a pending write runs), then gathered
        if isinstance(dev := self.device, tuple):
            self.realize()
            return Tensor(self.uop.copy_to_device(dev[0]), requires_grad=False).numpy()
        self.realize()
        buf = _plain_buffer(realized_view(self.uop))
        if buf is None:  # a strided view of a buffer: copy it out through a temporary buffer
            store, view = _output_buffer(strip_realized(self.uop), dev)
            Device[dev].realize(store.sink())
            buf = _plain_buffer(view)
            assert buf is not None
        return Device[dev].copyout(buf).reshape(tuple(concrete(s) for s in self.shape))

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
        return self._gradient(targets, gradient, None)

    def _gradient(
        self, targets: Sequence[Tensor], gradient: Tensor | None, order: dict[UOp, None] | None
    ) -> list[Tensor]:
        """`gradient`, given `order`, this graph's toposort where the caller walked it already (backward)."""
        if gradient is None and self.shape != ():
            raise NonScalarGradientError(
                f"grad can be implicitly created only for scalar outputs: this tensor has shape "
                f"{self.shape}; reduce it to a scalar first (`.sum().backward()`) or pass a seed of "
                "its shape (`.backward(gradient=...)`)"
            )
        for t in (self, *targets):
            if not dtypes.is_float(t.dtype):
                raise GradientError(f"only float Tensors have gradient, not {t.dtype}")
        seed = gradient if gradient is not None else Tensor._adopt(self.uop.const_like(1.0), False)
        grads = gradients(self.uop, seed.uop, [t.uop for t in targets], order)
        # `Tensor(node)`, without its argument checks (a node, no device or dtype: taken as it is)
        out = [Tensor._adopt(t.uop.const_like(0) if g is None else g, None) for t, g in zip(targets, grads)]
        check_not_overwritten(self.uop, (b for g in out for b in reads(g.uop)), [t.uop for t in targets])
        return out

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(t) into `t.grad` for every live tensor `t` that requires grad and that self
        depends on; an existing `.grad` keeps its identity (it is assigned to)."""
        in_graph = self.uop.toposort()
        targets = [t for t in registry.all_tensors() if t.requires_grad is True and t.uop in in_graph]
        hits = template_cache_info()["hits"]
        for t, g in zip(targets, self._gradient(targets, gradient, in_graph)):
            if g.shape != t.shape:
                raise AssertionError(f"gradient shape {g.shape} does not match tensor shape {t.shape}")
            if t.grad is None:
                t.grad = g
            else:
                t.grad.assign(t.grad + g.to(t.grad.device))
        if template_cache_info()["hits"] == hits:  # derived, not a known structure: a first step
            # the gradients of realized tensors (the parameters), not of the steps between them
            grads = [t.grad for t in targets if t.grad is not None and t is not self and _is_realized(t.uop)]
            group = registry.Siblings(grads)
            for g in grads:
                g._siblings = group
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

    def custom_kernel(
        self, *lst: Tensor, fxn: Callable[..., UOp], grad_fxn: GradFxn | None = None
    ) -> list[Tensor]:
        """Run `fxn(*pointer PARAMs)` (a SINK of STOREs) as a kernel over (self, *lst); returns one
        AFTER(argument, CALL) per argument: the outputs are the arguments the kernel wrote."""
        ts = (self, *lst)
        rg = _requires_grad(ts)
        outs = UOp.custom_kernel(*(t.uop for t in ts), fxn=fxn, grad_fxn=grad_fxn)
        return [Tensor(u, requires_grad=rg) for u in outs]
