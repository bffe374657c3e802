"""The arguments the Tensor front end normalises (layer 15, below tensor.py and its mixins): dtype names,
numpy scalars, concrete sizes, padding pairs and index tuples, and the type aliases of the public signatures.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import numpy as np

from uopgrad.dtype import DType, dtypes
from uopgrad.errors import ShapeError, UnknownDTypeError
from uopgrad.mixin import MathMixin

if TYPE_CHECKING:
    from uopgrad.dtype import ConstType
    from uopgrad.tensor import Tensor  # (the public aliases name it)
    from uopgrad.uop import sint

__all__ = ["SEQUENCES", "DTypeLike", "TensorLike", "concrete", "has_tensor_index", "index_tuple",
           "is_tensor_like", "nonnegative", "pad_pairs", "py_scalar", "to_dtype"]

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



def pad_pairs(ndim: int, padding: Sequence[object]) -> list[tuple[sint, sint] | None]:
    """(before, after) per dimension from either form: one pair (or None) per dimension, or PyTorch's
    flat (last_before, last_after, second_last_before, ...) covering the last len/2 dimensions."""
    if all(p is None or isinstance(p, (tuple, list)) for p in padding):
        return [None if p is None else (cast("sint", p[0]), cast("sint", p[1]))
                for p in cast("Sequence[Sequence[object] | None]", padding)]
    if len(padding) % 2 or len(padding) // 2 > ndim:
        raise ValueError(f"flat padding {tuple(padding)} needs an even length of at most 2 * {ndim}")
    flat = cast("Sequence[sint]", padding)
    pairs = [(flat[2 * k], flat[2 * k + 1]) for k in range(len(flat) // 2)]
    return [None] * (ndim - len(pairs)) + list(reversed(pairs))


SEQUENCES = (list, tuple, np.ndarray)  # as an index: an index tensor of their values


def is_tensor_like(i: object) -> bool:
    """Whether one index is advanced: a Tensor, or a list, tuple or array of values."""
    return (isinstance(i, MathMixin) and hasattr(i, "requires_grad")) or isinstance(i, SEQUENCES)


def index_tuple(indices: object) -> tuple[Any, ...]:
    """An index as a tuple of per-dimension indices. A list of ints is one index (an index tensor); any other
    list is a sequence of indices like a tuple (`t[[(0, 1), (1, 2)]]` is `t[(0, 1), (1, 2)]`), as in the
    reference and PyTorch."""
    if isinstance(indices, tuple):
        return indices
    if isinstance(indices, list) and not all(isinstance(i, (int, np.integer)) for i in indices):
        return tuple(indices)
    return (indices,)


def has_tensor_index(indices: object) -> bool:
    """Whether an index holds a Tensor, a list, a tuple or an array (advanced indexing)."""
    return any(is_tensor_like(i) for i in index_tuple(indices))
