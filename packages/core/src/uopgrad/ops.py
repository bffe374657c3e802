"""The op vocabulary of the IR (layer 3): `Ops` (declaration order = toposort tie-breaks) and `GroupOp`, and
the two names every layer above shares about sizes: `sint` and `DEVICE_NUM`."""

from __future__ import annotations

from enum import Enum, auto
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = ["DEVICE_NUM", "GroupOp", "Ops", "sint"]

sint: TypeAlias = "int | UOp"  # a size: a number, or a symbolic index expression
DEVICE_NUM = "_device_num"  # the name of the variable that stands for a shard's device index (0 .. devices-1)


class Ops(Enum):
    """Every op a UOp can have. The order is the reference's: values auto-increment in declaration order."""

    DEFINE_VAR = auto()
    BIND = auto()
    SPECIAL = auto()
    DEFINE_LOCAL = auto()
    DEFINE_REG = auto()
    NOOP = auto()
    REWRITE_ERROR = auto()
    PARAM = auto()
    FUNCTION = auto()
    CALL = auto()
    PATCH = auto()
    PROGRAM = auto()
    LINEAR = auto()
    SOURCE = auto()
    BINARY = auto()
    SINK = auto()
    AFTER = auto()
    GROUP = auto()
    GEP = auto()
    STACK = auto()
    TUPLE = auto()
    GETTUPLE = auto()
    INDEX = auto()
    LOAD = auto()
    STORE = auto()
    WMMA = auto()
    SHAPED_WMMA = auto()
    CAST = auto()
    BITCAST = auto()
    # unary ALU
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIPROCAL = auto()
    NEG = auto()
    TRUNC = auto()
    # binary ALU
    ADD = auto()
    MUL = auto()
    SHL = auto()
    SHR = auto()
    CDIV = auto()
    MAX = auto()
    CMOD = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    THREEFRY = auto()
    SUB = auto()
    FDIV = auto()
    POW = auto()
    FLOORDIV = auto()
    FLOORMOD = auto()
    # ternary ALU
    WHERE = auto()
    MULACC = auto()
    BARRIER = auto()
    RANGE = auto()
    IF = auto()
    END = auto()
    ENDIF = auto()
    WAIT = auto()
    VCONST = auto()
    CONST = auto()
    CUSTOM = auto()
    CUSTOMI = auto()
    INS = auto()
    UNIQUE = auto()
    DEVICE = auto()
    LUNIQUE = auto()
    CONTIGUOUS = auto()
    CONTIGUOUS_BACKWARD = auto()
    DETACH = auto()
    STAGE = auto()
    COPY = auto()
    BUFFER = auto()
    BUFFER_VIEW = auto()
    MSELECT = auto()
    MSTACK = auto()
    CUSTOM_FUNCTION = auto()
    # movement
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()
    MULTI = auto()
    REDUCE = auto()
    ALLREDUCE = auto()
    UNROLL = auto()
    CONTRACT = auto()
    VCAT = auto()
    PTRCAT = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"


# members are singletons compared by identity: hash them the same way (Enum's default hashes the name in
# Python code, which shows up in every rewrite's profile)
Ops.__hash__ = object.__hash__  # type: ignore[method-assign]  # a C slot, equal semantics


class GroupOp:
    """Named sets of ops used by patterns, shape inference and the tables' completeness checks."""

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset(
        {
            Ops.ADD,
            Ops.MUL,
            Ops.CDIV,
            Ops.MAX,
            Ops.CMOD,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.CMPEQ,
            Ops.XOR,
            Ops.SHL,
            Ops.SHR,
            Ops.OR,
            Ops.AND,
            Ops.THREEFRY,
            Ops.SUB,
            Ops.FDIV,
            Ops.POW,
            Ops.FLOORDIV,
            Ops.FLOORMOD,
        }
    )
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    # bodies of calls that are kernels or effects, not values: they make CALL, everything else FUNCTION
    OpaqueBody = frozenset(
        {Ops.SINK, Ops.PROGRAM, Ops.LINEAR, Ops.COPY, Ops.BUFFER_VIEW, Ops.CUSTOM_FUNCTION}
    )
    Call = frozenset({Ops.CALL, Ops.FUNCTION})
    # ops whose result has no shape at the tensor level
    Shapeless = frozenset(
        {
            Ops.UNIQUE,
            Ops.LUNIQUE,
            Ops.DEVICE,
            Ops.SINK,
            Ops.TUPLE,
            Ops.CALL,
            Ops.FUNCTION,
            Ops.PROGRAM,
            Ops.LINEAR,
            Ops.SOURCE,
            Ops.BINARY,
        }
    )
