"""The arguments the Tensor front end normalises (layer 15, below tensor.py and its mixins): dtype names,
numpy scalars, concrete sizes, padding pairs and index tuples, and the type aliases of the public signatures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeAlias, TypeVar, cast

import numpy as np

from uopgrad.dtype import DType, dtypes
from uopgrad.errors import ArgumentError, ShapeError, UnknownDTypeError
from uopgrad.mixin import MathMixin

if TYPE_CHECKING:
    from uopgrad.dtype import ConstType
    from uopgrad.tensor import Tensor  # (the public aliases name it)
    from uopgrad.uop import sint

__all__ = [
    "SEQUENCES",
    "DTypeLike",
    "TensorLike",
    "concrete",
    "dim_alias",
    "has_tensor_index",
    "index_tuple",
    "no_dim",
    "is_tensor_like",
    "nonnegative",
    "pad_pairs",
    "py_scalar",
    "tensor_sequence",
    "to_dtype",
]

DTypeLike: TypeAlias = "DType | str"
TensorLike: TypeAlias = "Tensor | ConstType"
T = TypeVar("T")
P = ParamSpec("P")


def to_dtype(dt: DTypeLike) -> DType:
    """A DType from a DType or one of its tinygrad names ("float32", "half", "int", ...)."""
    if isinstance(dt, DType):
        return dt
    names = dtypes.fields()
    if not isinstance(cast(object, dt), str) or dt not in names:  # any object a caller passes
        raise UnknownDTypeError(
            f"unknown dtype {dt!r}: give a DType (dtypes.float32) or one of the names "
            f"{', '.join(sorted(names))}"
        )
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
        return [
            None if p is None else (cast("sint", p[0]), cast("sint", p[1]))
            for p in cast("Sequence[Sequence[object] | None]", padding)
        ]
    if len(padding) % 2 or len(padding) // 2 > ndim:
        raise ValueError(f"flat padding {tuple(padding)} needs an even length of at most 2 * {ndim}")
    flat = cast("Sequence[sint]", padding)
    pairs = [(flat[2 * k], flat[2 * k + 1]) for k in range(len(flat) // 2)]
    return [None] * (ndim - len(pairs)) + list(reversed(pairs))


def _as_tuple(axis: object) -> object:
    return tuple(axis) if isinstance(axis, list) else axis


def dim_alias(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` (a method whose first argument after self is `axis`) also taking PyTorch's keyword `dim=` for
    `axis`, so `x.sum(dim=1, keepdim=True)` reads as in PyTorch; `axis` stays the parameter's name."""

    @functools.wraps(fn)
    def with_dim(*args: P.args, **kwargs: P.kwargs) -> T:
        if "dim" not in kwargs:  # the common path: one dict lookup
            return fn(*args, **kwargs)
        dim = kwargs.pop("dim")
        given = args[1] if len(args) > 1 else kwargs.get("axis", dim)
        if _as_tuple(given) != _as_tuple(dim):
            raise TypeError(
                f"{fn.__name__}() got axis={given!r} and dim={dim!r}: they name the same "
                "parameter (dim is PyTorch's spelling of axis), pass one"
            )
        if len(args) < 2:
            kwargs["axis"] = dim
        return fn(*args, **kwargs)

    return with_dim


def no_dim(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` (max, min) refusing PyTorch's `dim=` with what to write instead: PyTorch's max(dim=) returns
    (values, indices), the reference's max(axis=) the values; `x.max(dim=1)[0]` would silently be a row."""

    @functools.wraps(fn)
    def refusing(*args: P.args, **kwargs: P.kwargs) -> T:
        if "dim" in kwargs:
            name, dim = fn.__name__, kwargs["dim"]
            raise TypeError(
                f"{name}() takes axis=, not dim=: it returns the values, where PyTorch's "
                f"{name}(dim=) returns (values, indices); write x.{name}(axis={dim!r}) for the "
                f"values and x.arg{name}(axis={dim!r}) for the indices"
            )
        return fn(*args, **kwargs)

    return refusing


def tensor_sequence(first: object, rest: tuple[T, ...], op: str) -> tuple[T, ...]:
    """The tensors of `op` (cat, stack) from either spelling: the reference's `a.cat(b, c)` (first is a
    tensor) or PyTorch's `Tensor.cat([a, b, c])` (called on the class, first is the sequence)."""
    if not isinstance(first, (tuple, list)):
        return (cast(T, first), *rest)
    if rest:
        raise ArgumentError(
            f"{op} takes its tensors either as one sequence or as arguments, not both (got a "
            f"{type(first).__name__} and {len(rest)} more)"
        )
    if not first:
        raise ArgumentError(f"{op} of an empty {type(first).__name__}: give at least one tensor")
    return tuple(cast("Sequence[T]", first))


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
