"""Operator sugar shared by UOp, UPat and Tensor (layer 4).

`MathMixin` turns Python operators into ALU nodes using only the primitive ops the gradient table knows
(NEG is MUL by -1, SUB is ADD of a negation, division is MUL by RECIPROCAL, `eq` is CMPNE(CMPNE(a, b), True)).
`MovementMixin` normalises the arguments of the six movement ops and returns `self` when nothing changes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from uopgrad._util import prod
from uopgrad.dtype import ConstType, DType, dtypes
from uopgrad.errors import ArgumentError, MovementError, ShapeError
from uopgrad.ops import Ops, sint

__all__ = ["MathMixin", "MovementMixin", "broadcast_shape", "concrete_size", "resolve_shape_arg"]


_M = TypeVar("_M", bound="MathMixin")


def _binary(op: Ops) -> tuple[Callable[[_M, _M | ConstType], _M], Callable[[_M, _M | ConstType], _M]]:
    """The operator that is the ALU op `op` and its reflected form (operands swapped): rows of MathMixin's
    operator table, each one call to `_binop`, as a hand-written method would make."""

    def forward(self: _M, x: _M | ConstType) -> _M:
        return self._binop(op, x, False)

    def reflected(self: _M, x: _M | ConstType) -> _M:
        return self._binop(op, x, True)

    forward.__doc__, reflected.__doc__ = f"{op.name}(self, x)", f"{op.name}(x, self)"  # what help() shows
    return forward, reflected


def _unary(op: Ops, doc: str) -> Callable[[_M], _M]:
    """The method named after the unary ALU op `op` (exp2, sqrt, ...): `self._unop(op)`."""

    def method(self: _M) -> _M:
        return self._unop(op)

    method.__name__ = op.name.lower()
    method.__qualname__ = f"MathMixin.{method.__name__}"
    method.__doc__ = doc
    return method


class MathMixin:
    """Arithmetic, comparisons, `where` and the unary math ops, built on `alu`, `const_like` and `_binop`."""

    __slots__ = ()
    dtype: Any  # a DType on UOp and Tensor; a tuple of DTypes (or None) on UPat

    # the three hooks a subclass provides
    def alu(self, op: Ops, *src: Self) -> Self:
        """The node (or pattern) `op(self, *src)`."""
        raise NotImplementedError

    def const_like(self, b: ConstType) -> Self:
        """A constant `b` like self (dtype, device, shape)."""
        raise NotImplementedError

    def ufix(self, x: Self | ConstType) -> Self:
        """A Python scalar as a constant like `self`; anything else unchanged."""
        return x if isinstance(x, MathMixin) else self.const_like(x)

    def _binop(self, op: Ops, x: Self | ConstType, reverse: bool) -> Self:
        return self.ufix(x).alu(op, self) if reverse else self.alu(op, self.ufix(x))

    def _unop(self, op: Ops) -> Self:
        return self.alu(op)

    # arithmetic
    def add(self, x: Self | ConstType, reverse: bool = False) -> Self:
        """self + x (ADD)."""
        return self._binop(Ops.ADD, x, reverse)

    def mul(self, x: Self | ConstType, reverse: bool = False) -> Self:
        """self * x (MUL)."""
        return self._binop(Ops.MUL, x, reverse)

    def sub(self, x: Self | ConstType, reverse: bool = False) -> Self:
        """self - x, built as ADD of a negation."""
        return self.ufix(x).add(-self) if reverse else self.add(-self.ufix(x))

    def div(self, x: Self | ConstType, reverse: bool = False) -> Self:
        """self / x, built as MUL by RECIPROCAL."""
        return self.ufix(x).mul(self.reciprocal()) if reverse else self.mul(self.ufix(x).reciprocal())

    def neg(self) -> Self:
        """-self: MUL by -1, or logical not for bool."""
        return self.ne(True) if self.dtype == dtypes.bool else self.mul(-1)

    def pow(self, x: Self | ConstType, reverse: bool = False) -> Self:
        """self ** x (POW)."""
        return self._binop(Ops.POW, x, reverse)

    # Operators that are one ALU op call `_binop` themselves (add, mul, pow are their named forms, with
    # `reverse`); -, / and unary - go through sub, div and neg, which Tensor overrides.
    __add__, __radd__ = _binary(Ops.ADD)
    __mul__, __rmul__ = _binary(Ops.MUL)
    __pow__, __rpow__ = _binary(Ops.POW)
    __floordiv__, __rfloordiv__ = _binary(Ops.FLOORDIV)
    __mod__, __rmod__ = _binary(Ops.FLOORMOD)
    __and__, __rand__ = _binary(Ops.AND)
    __or__, __ror__ = _binary(Ops.OR)
    __xor__, __rxor__ = _binary(Ops.XOR)
    __lshift__, __rshift__ = _binary(Ops.SHL)[0], _binary(Ops.SHR)[0]  # no reflected shifts, as before
    # comparisons (== and != stay identity on UOps: use eq/ne); a > b is b < a
    __lt__, __gt__ = _binary(Ops.CMPLT)

    def __sub__(self, x: Self | ConstType) -> Self:
        return self.sub(x)

    def __rsub__(self, x: Self | ConstType) -> Self:
        return self.sub(x, True)

    def __truediv__(self, x: Self | ConstType) -> Self:
        return self.div(x)

    def __rtruediv__(self, x: Self | ConstType) -> Self:
        return self.div(x, True)

    def __neg__(self) -> Self:
        return self.neg()

    def __ge__(self, x: Self | ConstType) -> Self:
        return (self < x).logical_not()

    def __le__(self, x: Self | ConstType) -> Self:
        return (self > x).logical_not()

    def ne(self, x: Self | ConstType) -> Self:
        """Elementwise !=, as CMPNE."""
        return self._binop(Ops.CMPNE, x, False)

    def eq(self, x: Self | ConstType) -> Self:
        """Elementwise ==, as CMPNE(CMPNE(self, x), True)."""
        return self.ne(x).ne(True)

    def logical_not(self) -> Self:
        """Boolean not, as CMPNE with True; a number is true where nonzero (NaN included), so its not is
        x == 0 (CMPNE with True would compare the number with 1)."""
        dt = self.dtype
        if isinstance(dt, DType) and dt.scalar() != dtypes.bool:
            return self.eq(0)
        return self.ne(True)

    def maximum(self, x: Self | ConstType) -> Self:
        """Elementwise max (MAX)."""
        return self._binop(Ops.MAX, x, False)

    def minimum(self, x: Self | ConstType) -> Self:
        """Elementwise min, built as -max(-a, -b)."""
        return -((-self).maximum(-self.ufix(x)))

    def where(self, x: Self | ConstType, y: Self | ConstType) -> Self:
        """`x` where self is true, else `y`; a Python branch becomes a constant like the other branch."""
        if isinstance(x, MathMixin):
            return self.alu(Ops.WHERE, x, x.ufix(y))
        if isinstance(y, MathMixin):
            return self.alu(Ops.WHERE, y.ufix(x), y)
        raise TypeError("where needs at least one branch that is not a Python scalar")

    # unary math
    exp2 = _unary(Ops.EXP2, "2 ** self.")
    log2 = _unary(Ops.LOG2, "log base 2.")
    sin = _unary(Ops.SIN, "sine.")
    sqrt = _unary(Ops.SQRT, "square root.")
    reciprocal = _unary(Ops.RECIPROCAL, "1 / self.")

    def trunc(self) -> Self:
        """Round toward zero."""
        return self.alu(Ops.TRUNC)


def resolve_shape_arg(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Accept `f(2, 3)` and `f((2, 3))` alike. Each size is an int (numpy's too), None, or a symbolic size
    (a UOp); anything else, such as 2.5, is a TypeError, never taken for a symbolic size."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    elif shape and isinstance(shape[0], (tuple, list)):  # the reference (argfix) raises ValueError here
        raise ArgumentError(f"a shape is either one sequence or sizes as arguments, not both: {shape}")
    return tuple(s if s is None or isinstance(s, MathMixin) else _size(s) for s in shape)


def _size(s: object) -> int:
    try:
        return operator.index(s)  # type: ignore[arg-type]  # anything: a TypeError says what it is
    except TypeError:
        raise TypeError(
            f"a size must be an int or a symbolic size (UOp), not {type(s).__name__} {s!r}"
        ) from None


class MovementMixin:
    """The six movement ops with argument normalisation; each returns `self` when the shape stays the same."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape (ints, or UOps for symbolic sizes)."""
        raise NotImplementedError

    def _mop(self, op: Ops, arg: object) -> Self:
        raise NotImplementedError

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def _axis(self, axis: int) -> int:
        if not -max(1, self.ndim) <= axis < max(1, self.ndim):
            raise IndexError(f"axis {axis} is out of range for shape {self.shape}")
        return axis + self.ndim if axis < 0 else axis

    def reshape(
        self, shape: sint | None | Sequence[sint | None] = (), *args: sint | None | Sequence[sint | None]
    ) -> Self:
        """View with a new shape (`reshape(2, 3)`, `reshape((2, 3))` or `reshape(shape=(2, 3))`); one
        dimension may be -1, and None keeps the old size."""
        given = resolve_shape_arg((shape, *args))
        new = [s if s is not None else self.shape[i] for i, s in enumerate(given)]
        if (holes := sum(1 for s in new if isinstance(s, int) and s == -1)) > 1:
            raise MovementError(f"reshape to {tuple(new)}: at most one dimension can be -1")
        if any(isinstance(s, int) and s < -1 for s in new):
            raise MovementError(f"reshape to {tuple(new)}: sizes must be non-negative (one -1 infers a size)")
        if holes:
            known = prod(s for s in new if not (isinstance(s, int) and s == -1))
            total = prod(self.shape)
            if isinstance(known, int) and isinstance(total, int) and (known == 0 or total % known != 0):
                raise MovementError(f"can't reshape {self.shape} to {tuple(new)}")
            new = [total // known if isinstance(s, int) and s == -1 else s for s in new]
        if tuple(new) == self.shape:
            return self
        return self._mop(Ops.RESHAPE, tuple(new))

    def expand(
        self, shape: sint | None | Sequence[sint | None] = (), *args: sint | None | Sequence[sint | None]
    ) -> Self:
        """Broadcast to `shape` (as sizes, one sequence or `shape=`; aligned on the right; -1 or None keeps a
        dimension)."""
        new = resolve_shape_arg((shape, *args))
        if len(new) < self.ndim:
            raise MovementError(f"can't expand {self.shape} to fewer dimensions {new}")
        base = self.reshape((1,) * (len(new) - self.ndim) + self.shape) if len(new) > self.ndim else self
        keep = [s is None or (isinstance(s, int) and s == -1) for s in new]
        out = tuple(b if k else s for s, b, k in zip(new, base.shape, keep))
        if out == base.shape:
            return base
        return base._mop(Ops.EXPAND, out)

    def permute(self, *order: int | Sequence[int]) -> Self:
        """Reorder dimensions; negative axes count from the end."""
        o = tuple(self._axis(int(i)) for i in resolve_shape_arg(order))
        if sorted(o) != list(range(self.ndim)):
            raise MovementError(f"permute order {o} is not a permutation of {self.ndim} axes")
        if o == tuple(range(self.ndim)):
            return self
        return self._mop(Ops.PERMUTE, o)

    def pad(self, arg: Sequence[tuple[sint, sint] | None]) -> Self:
        """Zero-pad each dimension by (before, after); None leaves a dimension alone."""
        if len(arg) != self.ndim:
            raise MovementError(f"pad {tuple(arg)} needs one entry per dimension of {self.shape}")
        a = tuple((0, 0) if p is None else (p[0], p[1]) for p in arg)
        if any(isinstance(x, int) and x < 0 for p in a for x in p):
            raise MovementError(f"pad {a} has a negative amount; use shrink to cut")
        if all(isinstance(x, int) and x == 0 for p in a for x in p):
            return self
        return self._mop(Ops.PAD, a)

    def shrink(self, arg: Sequence[tuple[sint, sint] | None]) -> Self:
        """Keep [start, end) of each dimension; None keeps the whole dimension."""
        if len(arg) != self.ndim:
            raise MovementError(f"shrink {tuple(arg)} needs one entry per dimension of {self.shape}")
        a = tuple((0, s) if p is None else (p[0], p[1]) for p, s in zip(arg, self.shape))
        if all(_same(p[0], 0) and _same(p[1], s) for p, s in zip(a, self.shape)):
            return self
        return self._mop(Ops.SHRINK, a)

    def flip(self, *axis: int | Sequence[int]) -> Self:
        """Reverse the given axes."""
        listed = [self._axis(int(i)) for i in resolve_shape_arg(axis)]
        if len(set(listed)) != len(listed):
            raise MovementError(f"flip axes {resolve_shape_arg(axis)} name a dimension of {self.shape} twice")
        axes = set(listed)
        if not axes:
            return self
        return self._mop(Ops.FLIP, tuple(i in axes for i in range(self.ndim)))


def _same(a: sint, b: sint) -> bool:
    """Equal ints, or the very same symbolic node (== on UOps is identity)."""
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


def broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    """numpy's broadcasting rule: align on the right; a dimension of 1 stretches."""
    if len(shapes) == 2:  # (the common case, no lists: an operand and a scalar-like one, an update and lr)
        a, b = shapes
        if a == b:
            return tuple(a)
        if len(a) != len(b):
            n2 = max(len(a), len(b))
            a, b = (1,) * (n2 - len(a)) + tuple(a), (1,) * (n2 - len(b)) + tuple(b)
        out2: list[sint] = []
        for x, y in zip(a, b):
            if x is y or x == y or (isinstance(y, int) and y == 1):
                out2.append(x)
            elif isinstance(x, int) and x == 1:
                out2.append(y)
            else:
                break
        else:
            return tuple(out2)
    elif shapes and all(s == shapes[0] for s in shapes):  # equal shapes (UOp sizes by identity): common
        return tuple(shapes[0])
    n = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
    out: list[sint] = []
    for dims in zip(*padded):
        non1 = [d for d in dims if not (isinstance(d, int) and d == 1)]
        if any(d is not non1[0] and d != non1[0] for d in non1[1:]):
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise MovementError(f"shapes {listed} can't be broadcast together")
        out.append(non1[0] if non1 else 1)
    return tuple(out)


def concrete_size(s: object) -> int:
    """A size as an int, for the ops that need concrete sizes (ShapeError for a symbolic one)."""
    if not isinstance(s, int):
        raise ShapeError(f"this operation needs concrete sizes, not the symbolic size {s}")
    return s
