"""The hooks the Tensor op families are written against (layer 15, below the families).

Each family (tensor_elementwise, tensor_reduce, ...) is a mixin generic over `Self`: it builds its results
from `self` with the operators of uopgrad.mixin and the hooks declared here, and never names Tensor. A hook
is Tensor's own (its graph `uop`, `_wrap` for a result built on a UOp, `_from_data` for one built from data,
devices, realize, assign, gradients) or an op of another family: the families call each other only through
these declarations, so none imports another. The declarations exist for the type checker only; at run time
this class adds nothing, and each name is defined once, in tensor.py or in one family (the docstring names
which).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from uopgrad.mixin import MathMixin, MovementMixin

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TypedDict, Unpack

    import numpy as np

    from uopgrad.dtype import ConstType, DType
    from uopgrad.tensor_args import DTypeLike
    from uopgrad.uop import UOp, sint

__all__ = ["TensorHooks"]

if TYPE_CHECKING:
    # The keywords the creators take, declared once: the creators of a `*shape` (zeros, rand, uniform, ...)
    # take them as `**kw` (as tinygrad passes **kwargs on), those with positional parameters (full, arange,
    # eye, ...) spell them out. Explicit keywords of these types override a `**kw` of them.
    class _Typed(TypedDict, total=False):
        dtype: DTypeLike | None
        requires_grad: bool | None

    class _OnDevice(_Typed, total=False):
        device: str | None

    class _Placed(_Typed, total=False):
        device: str | tuple[str, ...] | None

    # pad's amounts: (before, after) or None per dimension, or PyTorch's flat form
    _Padding = Sequence[tuple[sint, sint] | None] | Sequence[sint]


class TensorHooks(MathMixin, MovementMixin):
    """The state and the ops every family may use, declared (each is defined in Tensor or one family)."""

    __slots__ = ()

    if TYPE_CHECKING:
        # tensor.py: the state (properties here, so that the families may set them: Tensor's are slots)
        @property
        def uop(self) -> UOp:
            """tensor: the graph of the value (realize and assign change it)."""

        @uop.setter
        def uop(self, u: UOp) -> None:
            """tensor."""

        @property
        def grad(self) -> Self | None:
            """tensor."""

        @grad.setter
        def grad(self, g: Self | None) -> None:
            """tensor."""

        @property
        def requires_grad(self) -> bool | None:
            """tensor."""

        @requires_grad.setter
        def requires_grad(self, rg: bool | None) -> None:
            """tensor."""

        @property
        def device(self) -> str | tuple[str, ...]:
            """tensor."""

        def _wrap(self, u: UOp, *parents: Self) -> Self:
            """tensor: a result on `u`, grad as its parents."""

        def _adopt(self, u: UOp, rg: bool | None) -> Self:
            """tensor: a result on graph `u`."""

        def __init__(self, data: Any = None, **kw: Unpack[_Placed]) -> None:  # noqa: ANN401
            """tensor: `Tensor(data, ...)` (a UOp, a scalar, a list, an array)."""

        @classmethod
        def _from_data(cls, data: Any, **kw: Unpack[_Placed]) -> Self:  # noqa: ANN401
            """tensor_create: `cls(data, ...)`, for the families, which may not name Tensor."""

        def div(self, x: Self | ConstType, reverse: bool = False, rounding_mode: str | None = None) -> Self:
            """tensor."""

        def pad(self, padding: _Padding, value: ConstType = 0, mode: str = "constant") -> Self:
            """tensor."""

        def __getitem__(self, indices: object) -> Self:
            """tensor_movement."""

        def __matmul__(self, x: Self) -> Self:
            """tensor_reduce."""

        # tensor.py: its own ops the families call
        def _apply_store(self, store: UOp) -> None:
            """tensor."""

        def _assignable(self, x: Self) -> Self:
            """tensor."""

        def _check_devices(self, *others: Self) -> None:
            """tensor."""

        @staticmethod
        def _host_values(arr: np.ndarray, dt: DType) -> np.ndarray:
            """tensor."""

        def assign(self, x: Self | ConstType) -> Self:
            """tensor."""

        def element_size(self) -> int:
            """tensor."""

        def item(self) -> ConstType:
            """tensor."""

        def numel(self) -> sint:
            """tensor."""

        def numpy(self) -> np.ndarray:
            """tensor."""

        # tensor_cast.py
        def cast(self, dtype: DTypeLike) -> Self:
            """tensor_cast."""

        def contiguous(self) -> Self:
            """tensor_cast."""

        def detach(self) -> Self:
            """tensor_cast."""

        def shard(self, devices: Sequence[str], axis: int | None = None) -> Self:
            """tensor_cast."""

        def to(self, device: str | tuple[str, ...]) -> Self:
            """tensor_cast."""

        # tensor_create.py
        @classmethod
        def arange(
            cls, start: float, stop: float | None = None, step: float = 1, **kw: Unpack[_Placed]
        ) -> Self:
            """tensor_create."""

        @classmethod
        def empty(cls, *shape: sint | Sequence[sint], **kw: Unpack[_Placed]) -> Self:
            """tensor_create."""

        @classmethod
        def eye(cls, n: int, m: int | None = None, **kw: Unpack[_Placed]) -> Self:
            """tensor_create."""

        @classmethod
        def full(cls, shape: sint | Sequence[sint], fill_value: ConstType, **kw: Unpack[_Placed]) -> Self:
            """tensor_create."""

        def full_like(self, fill_value: ConstType, **kw: Unpack[_Typed]) -> Self:
            """tensor_create."""

        @classmethod
        def normal(
            cls, *shape: int | Sequence[int], mean: float = 0.0, std: float = 1.0, **kw: Unpack[_OnDevice]
        ) -> Self:
            """tensor_create."""

        @classmethod
        def ones(cls, *shape: sint | Sequence[sint], **kw: Unpack[_Placed]) -> Self:
            """tensor_create."""

        def ones_like(self, **kw: Unpack[_Typed]) -> Self:
            """tensor_create."""

        @classmethod
        def rand(cls, *shape: int | Sequence[int], **kw: Unpack[_Placed]) -> Self:
            """tensor_create."""

        @classmethod
        def randn(cls, *shape: int | Sequence[int], **kw: Unpack[_Placed]) -> Self:
            """tensor_create."""

        @classmethod
        def uniform(
            cls, *shape: int | Sequence[int], low: float = 0.0, high: float = 1.0, **kw: Unpack[_OnDevice]
        ) -> Self:
            """tensor_create."""

        # tensor_elementwise.py
        def _inverse(self) -> Self:
            """tensor_elementwise."""

        def _to_float(self) -> Self:
            """tensor_elementwise."""

        def abs(self) -> Self:
            """tensor_elementwise."""

        def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
            """tensor_elementwise."""

        def clip(self, min_: Self | ConstType | None = None, max_: Self | ConstType | None = None) -> Self:
            """tensor_elementwise."""

        def exp(self) -> Self:
            """tensor_elementwise."""

        def floor(self) -> Self:
            """tensor_elementwise."""

        def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
            """tensor_elementwise."""

        def isnan(self) -> Self:
            """tensor_elementwise."""

        def log(self) -> Self:
            """tensor_elementwise."""

        def logaddexp(self, other: Self | ConstType) -> Self:
            """tensor_elementwise."""

        def logsigmoid(self) -> Self:
            """tensor_elementwise."""

        def rsqrt(self) -> Self:
            """tensor_elementwise."""

        def square(self) -> Self:
            """tensor_elementwise."""

        # tensor_index.py
        def _getitem_tensor(self, indices: object) -> Self:
            """tensor_index."""

        def _one_hot_along_dim(self, num_classes: int, dim: int = -1) -> Self:
            """tensor_index."""

        def _setitem_tensor(self, indices: object, v: Self) -> tuple[tuple[Any, ...], Self]:
            """tensor_index."""

        def gather(self, dim: int, index: Self) -> Self:
            """tensor_index."""

        # tensor_movement.py
        def _normalize_index(self, indices: object) -> list[Any]:
            """tensor_movement."""

        def cat(self, *args: Self, dim: int = 0) -> Self:
            """tensor_movement."""

        def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
            """tensor_movement."""

        def squeeze(self, dim: int | None = None) -> Self:
            """tensor_movement."""

        def stack(self, *args: Self, dim: int = 0) -> Self:
            """tensor_movement."""

        def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
            """tensor_movement."""

        def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
            """tensor_movement."""

        def unsqueeze(self, dim: int) -> Self:
            """tensor_movement."""

        # tensor_nn.py
        def _pool(
            self, k_: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1
        ) -> Self:
            """tensor_nn."""

        # tensor_reduce.py
        def _max(self, axis: int | Sequence[int] | None, keepdim: bool) -> Self:
            """tensor_reduce."""

        def log_softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
            """tensor_reduce."""

        def matmul(self, x: Self, reverse: bool = False, dtype: DTypeLike | None = None) -> Self:
            """tensor_reduce."""

        def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
            """tensor_reduce."""

        def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
            """tensor_reduce."""

        def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
            """tensor_reduce."""

        def softmax(self, axis: int = -1, dtype: DTypeLike | None = None) -> Self:
            """tensor_reduce."""

        def std(
            self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1
        ) -> Self:
            """tensor_reduce."""

        def sum(
            self,
            axis: int | Sequence[int] | None = None,
            keepdim: bool = False,
            dtype: DTypeLike | None = None,
        ) -> Self:
            """tensor_reduce."""

        prod = sum  # the same arguments (tensor_reduce)

        var = std  # the same arguments (tensor_reduce)

        # tensor_shape.py
        def _pad_mode(self, padding: Sequence[object], mode: str, value: ConstType) -> Self:
            """tensor_shape."""

        def rand_like(self, **kw: Unpack[_OnDevice]) -> Self:
            """tensor_shape."""

        def repeat(self, repeats: Sequence[int] | int, *more: int) -> Self:
            """tensor_shape."""

        def repeat_interleave(self, repeats: int, dim: int | None = None) -> Self:
            """tensor_shape."""

        def tril(self, diagonal: int = 0) -> Self:
            """tensor_shape."""
