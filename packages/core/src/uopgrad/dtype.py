"""Data types (layer 2): `DType`, `PtrDType`, the `dtypes` namespace, promotion and value truncation."""

from __future__ import annotations

import builtins
import importlib
import math
import struct
import sys
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from enum import Enum, auto
from typing import ClassVar, Final, cast

import numpy as np

__all__ = [
    "Invalid",
    "DTYPES_DICT",
    "AddrSpace",
    "ConstType",
    "DType",
    "FloatConst",
    "PtrDType",
    "dtypes",
    "least_upper_dtype",
    "sum_acc_dtype",
    "truncate",
]

ConstType = float | int | bool


class AddrSpace(Enum):
    """Where a pointer points: device memory, workgroup-shared memory or registers."""

    GLOBAL = auto()
    LOCAL = auto()
    REG = auto()


_VECS: dict[tuple[DType, int], DType] = {}  # (scalar, width) -> its vector dtype


class _Interned(type):
    """Interns DTypes: constructing one with the fields of an existing one returns that object. So `==`
    and `hash` can be identity (C slots): a dtype is in the key of every interned node, and compared
    everywhere."""

    _cache: ClassVar[dict[tuple[object, ...], object]] = {}

    def __call__(cls, *args: object, **kwargs: object) -> object:
        # the key holds every field, however the call spelled them (positional, keyword, defaulted)
        fs = fields(cast(type, cls))
        if len(args) > len(fs):
            raise TypeError(f"{cls.__name__}() takes at most {len(fs)} fields, got {len(args)}")
        rest = [kwargs.pop(f.name) if f.name in kwargs else f.default for f in fs[len(args) :]]
        if kwargs:
            raise TypeError(f"{cls.__name__}() got unknown field(s) {sorted(kwargs)}")
        if any(r is MISSING for r in rest):
            missing = [f.name for f in fs[len(args) :] if f.default is MISSING]
            raise TypeError(f"{cls.__name__}() is missing field(s) {missing}")
        key = (cls, *args, *rest)
        if (hit := _Interned._cache.get(key)) is None:
            hit = _Interned._cache[key] = super().__call__(*key[1:])
        return hit


@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
    """A scalar or vector element type. `priority` orders promotion; `count` > 1 makes a vector. Interned:
    equal fields give the same object, so equality and hashing are by identity."""

    priority: int
    itemsize: int
    name: str
    fmt: str | None
    count: int = 1
    _scalar: DType | None = None

    def __reduce__(self) -> tuple[object, ...]:
        # pickle and copy rebuild through the constructor, which returns the interned object
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    def __repr__(self) -> str:
        return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.count) < (
            other.priority,
            other.itemsize,
            other.name,
            other.count,
        )

    @property
    def base(self) -> DType:
        """The dtype without pointer-ness (identity for plain dtypes)."""
        return self

    @property
    def min(self) -> ConstType:
        """The smallest value of this dtype (-inf for floats, False for bool): `dtypes.min(self)`."""
        return dtypes.min(self)

    @property
    def max(self) -> ConstType:
        """The largest value of this dtype (inf for floats, True for bool): `dtypes.max(self)`."""
        return dtypes.max(self)

    def scalar(self) -> DType:
        """The element type of a vector (itself for a scalar)."""
        return self._scalar if self._scalar is not None else self

    def vec(self, n: int) -> DType:
        """The `n`-wide vector of this scalar type (n == 1 gives the scalar)."""
        if self.count != 1:
            raise ValueError(f"can't vectorise the vector dtype {self}")
        if n == 1 or self == dtypes.void:
            return self
        if (v := _VECS.get((self, n))) is None:  # a shortcut past the interning key
            v = _VECS[(self, n)] = DType(self.priority, self.itemsize * n, f"{self.name}{n}", None, n, self)
        return v

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to `size` elements of this type."""
        return PtrDType(
            self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, size, addrspace
        )

    def const(self, value: ConstType) -> ConstType:
        """`value` canonicalised for a CONST of this dtype (see `dtypes.as_const`)."""
        return dtypes.as_const(value, self)


@dataclass(frozen=True, eq=False)  # interned like DType: identity equality and hash
class PtrDType(DType):
    """A pointer dtype: the element type `_base`, an element count (-1 unknown) and an address space."""

    _base: DType = None  # type: ignore[assignment]  # always set by DType.ptr
    size: int = -1
    addrspace: AddrSpace = AddrSpace.GLOBAL

    @property
    def base(self) -> DType:
        """The element type pointed to."""
        return self._base

    def __repr__(self) -> str:
        space = "" if self.addrspace is AddrSpace.GLOBAL else f", {self.addrspace}"
        return f"{self._base!r}.ptr({self.size}{space})"


class FloatConst(float):
    """A float constant that hashes and compares by bit pattern: 0.0 and -0.0 differ, NaN equals NaN."""

    __slots__ = ()

    def _bits(
        self,
        pack: Callable[..., bytes] = struct.pack,
        isnan: Callable[[float], bool] = math.isnan,
        nan: float = math.nan,
    ) -> bytes:
        # the defaults bind what it needs: a node's key is hashed by a weakref callback at interpreter exit,
        # after module globals are cleared
        return pack("<d", nan if isnan(self) else float(self))

    def __hash__(self) -> int:
        return hash(self._bits())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, float):
            return self._bits() == FloatConst(other)._bits()
        return float.__eq__(self, other)  # ints compare by value; other types get NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __repr__(self) -> str:
        return float.__repr__(self)


class dtypes:
    """The dtype namespace: `dtypes.float32`, aliases like `dtypes.float`, and predicates."""

    void: Final = DType(-1, 0, "void", None)
    index: Final = DType(-1, 8, "index", None)  # abstract integer of shapes and indices (int64 width)
    weakint: Final = index  # the reference's later name for `index`
    bool: Final = DType(0, 1, "bool", "?")
    int8: Final = DType(1, 1, "char", "b")
    uint8: Final = DType(2, 1, "uchar", "B")
    int16: Final = DType(3, 2, "short", "h")
    uint16: Final = DType(4, 2, "ushort", "H")
    int32: Final = DType(5, 4, "int", "i")
    uint32: Final = DType(6, 4, "uint", "I")
    int64: Final = DType(7, 8, "long", "q")
    uint64: Final = DType(8, 8, "ulong", "Q")
    float16: Final = DType(11, 2, "half", "e")
    bfloat16: Final = DType(12, 2, "__bf16", None)
    float32: Final = DType(13, 4, "float", "f")
    float64: Final = DType(14, 8, "double", "d")

    # aliases, as in tinygrad and C
    half = float16
    float = float32
    double = float64
    char = int8
    uchar = uint8
    short = int16
    ushort = uint16
    int = int32
    uint = uint32
    long = int64
    ulong = uint64

    default_float: DType = float32
    default_int: DType = int32

    floats: Final = (float16, bfloat16, float32, float64)
    uints: Final = (uint8, uint16, uint32, uint64)
    sints: Final = (int8, int16, int32, int64)
    ints: Final = uints + sints

    @staticmethod
    def is_float(x: DType) -> builtins.bool:
        """True for floating-point dtypes (and vectors of them)."""
        return x.scalar() in _FLOATS

    @staticmethod
    def is_int(x: DType) -> builtins.bool:
        """True for integer dtypes, including the abstract `index`."""
        return x.scalar() in _INTS_INDEX

    @staticmethod
    def is_unsigned(x: DType) -> builtins.bool:
        """True for unsigned integer dtypes."""
        return x.scalar() in _UINTS

    @staticmethod
    def is_bool(x: DType) -> builtins.bool:
        """True for bool (and vectors of bool)."""
        return x.scalar() == dtypes.bool

    @staticmethod
    def from_py(x: object) -> DType:
        """The natural dtype of a Python value (bool, int -> default_int, float -> default_float); numpy
        arrays and scalars in a list count by their kind (an int64 array as int, a float64 one as float)."""
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind in "biuf":  # numpy values in a list
            return {"b": dtypes.bool, "f": dtypes.default_float}.get(x.dtype.kind, dtypes.default_int)
        if isinstance(x, (list, tuple)) and len(x) > 0:
            return max(dtypes.from_py(e) for e in x)
        if isinstance(x, (list, tuple)):
            return dtypes.default_float
        raise TypeError(f"no dtype for Python value {x!r} of type {type(x).__name__}")

    @staticmethod
    def as_const(value: ConstType, dtype: DType) -> ConstType:
        """Canonical constant of `dtype`: FloatConst for floats, int for ints (wrapped), bool for bool;
        `Invalid` (a gated index's false branch) stays itself in every dtype."""
        if cast(object, value) is Invalid:  # typed ConstType, but an index's gate may carry Invalid
            return value
        dt = dtype.scalar()
        if dtypes.is_float(dt):
            return FloatConst(truncate(dt, float(value)))
        if dt == dtypes.bool:
            return bool(value)
        if dtypes.is_int(dt):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"can't make an {dt} constant from {value}")
            return int(truncate(dt, int(value)))
        raise TypeError(f"can't make a constant of dtype {dtype}")

    @staticmethod
    def exact_const(value: object, dtype: DType) -> ConstType:
        """`value` as the exact Python type of a constant of `dtype` (bool, int or float), or TypeError /
        ValueError. A renderer prints only what this returns: a subclass of int with its own `__format__`,
        or a str where an int belongs, must never reach generated source as text."""
        dt = dtype.scalar()
        kind = type(value)
        # exact builtin types only; a 0/1 int for bool and a bool for an int are the same value (codegen
        # builds some such constants directly)
        if dt == dtypes.bool:
            if kind is not builtins.bool and not (kind is builtins.int and value in (0, 1)):
                raise TypeError(f"a {dtype} constant must be a bool, not {kind.__name__}")
            return builtins.bool(value)
        if dtypes.is_int(dt):
            if kind not in (builtins.int, builtins.bool):
                raise TypeError(f"a {dtype} constant must be an int, not {kind.__name__}")
            v = builtins.int(cast(builtins.int, value))
            if dt != dtypes.index and not dtypes.min(dt) <= v <= dtypes.max(dt):
                raise ValueError(f"{v} is out of the range of {dtype} [{dtypes.min(dt)}, {dtypes.max(dt)}]")
            return v
        if dtypes.is_float(dt):
            if kind not in (builtins.float, FloatConst, builtins.int):
                raise TypeError(f"a {dtype} constant must be a float, not {kind.__name__}")
            return builtins.float(cast(builtins.float, value))
        raise TypeError(f"{dtype} has no constants")

    @staticmethod
    def min(dtype: DType) -> ConstType:
        """The smallest value of `dtype` (-inf for floats)."""
        dt = dtype.scalar()
        if dtypes.is_float(dt):
            return -math.inf
        if dt == dtypes.bool:
            return False
        if dtypes.is_unsigned(dt):
            return 0
        return -(1 << (8 * dt.itemsize - 1))

    @staticmethod
    def max(dtype: DType) -> ConstType:
        """The largest value of `dtype` (inf for floats)."""
        dt = dtype.scalar()
        if dtypes.is_float(dt):
            return math.inf
        if dt == dtypes.bool:
            return True
        if dtypes.is_unsigned(dt):
            return (1 << (8 * dt.itemsize)) - 1
        return (1 << (8 * dt.itemsize - 1)) - 1

    @staticmethod
    def fields() -> dict[str, DType]:
        """Every public name of a dtype (aliases included) -> DType."""
        return {
            k: v
            for k, v in vars(dtypes).items()
            if isinstance(v, DType) and not k.startswith("default") and k != "weakint"
        }

    @staticmethod
    def to_numpy(dtype: DType) -> np.dtype:
        """The numpy dtype with the same layout (bfloat16: ml_dtypes' bfloat16, as JAX and ONNX use)."""
        if dtype.scalar() == dtypes.index:
            return np.dtype(np.int64)
        if dtype.scalar() == dtypes.bfloat16:
            bf16: np.dtype = np.dtype(importlib.import_module("ml_dtypes").bfloat16)
            return bf16
        if dtype.scalar().fmt is None:
            raise TypeError(f"{dtype} has no numpy equivalent")
        return np.dtype(dtype.scalar().fmt)

    @staticmethod
    def from_numpy(npdtype: np.dtype) -> DType:
        """The DType for a numpy dtype (ml_dtypes' bfloat16 too)."""
        # ml_dtypes is imported only where bfloat16 is used (its import is most of `import uopgrad`'s time):
        # a numpy array of its bfloat16 exists only once something imported it
        if (ml := sys.modules.get("ml_dtypes")) is not None and npdtype == np.dtype(ml.bfloat16):
            return dtypes.bfloat16
        for dt in (dtypes.bool, *dtypes.ints, dtypes.float16, dtypes.float32, dtypes.float64):
            if dt.fmt is not None and np.dtype(dt.fmt) == npdtype:
                return dt
        raise TypeError(f"numpy dtype {npdtype} is not supported")


# every public name of a dtype the reference's DTYPES_DICT has (aliases included): no void, no index
DTYPES_DICT: dict[str, DType] = {k: v for k, v in dtypes.fields().items() if k not in ("void", "index")}

# the predicates' sets: one hash and an identity hit instead of an equality test per member
_FLOATS: frozenset[DType] = frozenset(dtypes.floats)
_UINTS: frozenset[DType] = frozenset(dtypes.uints)
_INTS_INDEX: frozenset[DType] = frozenset((*dtypes.ints, dtypes.index))


# promotion lattice: each dtype lists the dtypes it promotes to directly (as in tinygrad and JAX)
_PROMO_LATTICE: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
}


def _parents(dt: DType) -> set[DType]:
    out, todo = {dt}, [dt]
    while todo:
        for p in _PROMO_LATTICE.get(todo.pop(), ()):
            if p not in out:
                out.add(p)
                todo.append(p)
    return out


def least_upper_dtype(*ds: DType) -> DType:
    """The smallest dtype every one of `ds` promotes to (index only joins with itself)."""
    scalars = {d.scalar() for d in ds}
    if len(scalars) == 1:
        return ds[0]
    if dtypes.index in scalars:
        rest = scalars - {dtypes.index}
        if all(dtypes.is_int(d) or d == dtypes.bool for d in rest):
            return dtypes.index
        scalars = rest
    if dtypes.void in scalars:
        raise KeyError(f"void does not promote with {sorted(scalars - {dtypes.void})}")
    common = set.intersection(*(_parents(d) for d in scalars))
    if not common:
        raise TypeError(f"dtypes {sorted(scalars)} have no common dtype")
    return min(common)


def sum_acc_dtype(dt: DType) -> DType:
    """Accumulation dtype of a sum: uint32+ for unsigned, int32+ for signed and bool, float32+ for floats."""
    if dtypes.is_unsigned(dt):
        return least_upper_dtype(dt, dtypes.uint32)
    if dtypes.is_int(dt) or dt == dtypes.bool:
        return least_upper_dtype(dt, dtypes.int32)
    return least_upper_dtype(dt, dtypes.default_float)


def truncate(dtype: DType, value: ConstType) -> ConstType:
    """`value` as it would be stored in `dtype`: ints wrap (two's complement), floats round."""
    dt = dtype.scalar()
    if dt == dtypes.bool:
        return bool(value)
    if dt == dtypes.index:
        return int(value)
    if dtypes.is_int(dt):
        bits = 8 * dt.itemsize
        v = int(value) & ((1 << bits) - 1)
        return v - (1 << bits) if not dtypes.is_unsigned(dt) and v >= (1 << (bits - 1)) else v
    if dt == dtypes.float64:
        return float(value)
    if dt == dtypes.float32:
        f = float(value)
        if math.isfinite(f) and abs(f) > 3.4028235677973366e38:
            return math.copysign(math.inf, f)
        return struct.unpack("<f", struct.pack("<f", f))[0] if math.isfinite(f) else f
    if dt == dtypes.float16:
        with np.errstate(over="ignore"):
            return float(np.float16(value))
    if dt == dtypes.bfloat16:
        f = float(np.float32(value))
        if not math.isfinite(f):
            return f
        bits = struct.unpack("<I", struct.pack("<f", f))[0]
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # round to nearest even
        return float(struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0])
    raise TypeError(f"can't truncate to {dtype}")


class _InvalidType:
    """The value of an uninitialised element (`Tensor.invalids`): any value of the dtype may be read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Invalid"

    def __reduce__(self) -> str:
        return "Invalid"


Invalid = _InvalidType()
