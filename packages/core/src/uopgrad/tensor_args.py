"""The arguments the Tensor front end normalises (layer 15, below tensor.py and its mixins): dtype names,
numpy scalars and concrete sizes, and the type aliases of the public signatures.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

import numpy as np

from uopgrad.dtype import DType, dtypes
from uopgrad.errors import ShapeError, UnknownDTypeError

if TYPE_CHECKING:
    from uopgrad.dtype import ConstType
    from uopgrad.tensor import Tensor
    from uopgrad.uop import sint

__all__ = ["DTypeLike", "TensorLike", "concrete", "nonnegative", "py_scalar", "self_tensor", "tensor_type",
           "to_dtype"]

DTypeLike: TypeAlias = "DType | str"
TensorLike: TypeAlias = "Tensor | ConstType"
T = TypeVar("T")


def to_dtype(dt: DTypeLike) -> DType:
    """A DType from a DType or one of its tinygrad names ("float32", "half", "int", ...)."""
    if isinstance(dt, DType):
        return dt
    names = dtypes.fields()
    if not isinstance(cast(object, dt), str) or dt not in names:  # any object a caller passes
        raise UnknownDTypeError(f"unknown dtype {dt!r}: give a DType (dtypes.float32) or one of the names "
                                f"{', '.join(sorted(names))}")
    return names[dt]


def nonnegative(shape: tuple[T, ...], what: str) -> tuple[T, ...]:
    """`shape` unchanged, or a ValueError naming `what` if a concrete size in it is negative."""
    if any(isinstance(s, int) and s < 0 for s in shape):
        raise ValueError(f"{what} of shape {shape}: sizes must be non-negative")
    return shape


def py_scalar(x: T) -> T:
    """numpy scalars as Python scalars."""
    return cast(T, x.item()) if isinstance(x, np.generic) else x


def concrete(s: sint, what: str = "this operation") -> int:
    """A size as an int; symbolic sizes are an error."""
    if not isinstance(s, int):
        raise ShapeError(f"{what} needs a concrete size, not the symbolic {s.short()}")
    return s


def self_tensor(x: object) -> Tensor:
    """A mixin's self as the Tensor it is (the Tensor mixins are only ever bases of Tensor)."""
    return cast("Tensor", x)


def tensor_type(c: object) -> type[Tensor]:
    """A mixin classmethod's cls as the Tensor class it is."""
    return cast("type[Tensor]", c)
