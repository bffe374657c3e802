"""Tiny pure helpers with no uopgrad dependencies (layer 1)."""
from __future__ import annotations

import functools
import operator
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

__all__ = ["all_same", "all_int", "argsort", "dedup", "flatten", "prod", "to_tuple"]

T = TypeVar("T")
H = TypeVar("H", bound=Hashable)


def prod(xs: Iterable[T], start: T = 1) -> T:  # type: ignore[assignment]  # int start is the usual case
    """Product of an iterable (works for ints and symbolic values)."""
    return functools.reduce(operator.mul, xs, start)


def dedup(xs: Iterable[H]) -> list[H]:
    """Order-preserving removal of duplicates (by hash/equality; identity for UOps)."""
    return list(dict.fromkeys(xs))


def argsort(xs: Sequence[int]) -> tuple[int, ...]:
    """Indices that sort `xs`; for a permutation this is its inverse."""
    return tuple(sorted(range(len(xs)), key=xs.__getitem__))


def all_same(xs: Sequence[object]) -> bool:
    """True if every element equals the first (vacuously true for an empty sequence)."""
    return all(x == xs[0] for x in xs)


def all_int(xs: Iterable[object]) -> bool:
    """True if every element is a plain Python int (not a bool, not symbolic)."""
    return all(isinstance(x, int) and not isinstance(x, bool) for x in xs)


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    """One level of flattening."""
    return [x for xs in xss for x in xs]


def to_tuple(x: int | Sequence[int]) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple."""
    return (x,) if isinstance(x, int) else tuple(x)

