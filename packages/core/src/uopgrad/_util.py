"""Tiny pure helpers with no uopgrad dependencies (layer 1)."""

from __future__ import annotations

import functools
import operator
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["LRU", "all_same", "all_int", "argsort", "dedup", "flatten", "prod", "to_tuple"]

T = TypeVar("T")
H = TypeVar("H", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[H, V]):
    """A mapping that keeps the `maxsize` entries used most recently (a cache that a long run over ever new
    shapes can not grow without bound). Safe to use from several threads."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[H, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: H) -> V | None:
        """The value of `key` (now the most recently used), or None."""
        data = self._data
        try:  # no lock: one lookup and one move are each atomic; an entry evicted in between is a miss
            value = data[key]
            data.move_to_end(key)
        except KeyError:
            return None
        return value

    def __setitem__(self, key: H, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def __getitem__(self, key: H) -> V:
        if (value := self.get(key)) is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._data.clear()


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
