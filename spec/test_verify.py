"""Spec of `uopgrad.verify` (spec/ir.md): well-formed graphs pass, malformed ones name the offending node.

Valid graphs come from random tensor-level programs built with the operator sugar (which only builds valid
nodes); malformed ones come from a table of examples and from mutating one node of a random program.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uopgrad import GroupOp, Ops, UOp, dtypes
from uopgrad.config import Context
from uopgrad.dtype import DType
from uopgrad.mixin import broadcast_shape
from uopgrad.uop import CallInfo, KernelInfo, shape_vec
from uopgrad.verify import VerifyError, pm_spec_tensor, verify

DEV = "CPU"
VALUE_DTYPES = (dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8, dtypes.bool)
SAME_WIDTH = {
    4: (dtypes.float32, dtypes.int32, dtypes.uint32),
    2: (dtypes.float16, dtypes.int16),
    1: (dtypes.int8, dtypes.uint8, dtypes.bool),
}


def buffer(*shape: int, dtype: DType = dtypes.float, device: str = DEV) -> UOp:
    """A fresh BUFFER viewed with `shape`."""
    size = math.prod(shape)
    b = UOp.new_buffer(device, size, dtype)
    return b.reshape(shape) if shape != (size,) else b


# ---------------------------------------------------------------------- random tensor-level programs

# ranks 2 and 3 are drawn more often, so that permute/flip/reduce have axes to work on
shapes = st.sampled_from([0, 1, 2, 2, 3, 3]).flatmap(lambda rank: st.tuples(*[st.integers(1, 4)] * rank))


def value_of(draw: st.DrawFn, dt: DType) -> Any:
    if dt == dtypes.bool:
        return draw(st.booleans())
    if dtypes.is_int(dt):
        return draw(st.integers(-5, 5))
    return draw(st.sampled_from([0.0, -0.0, 1.5, -2.0, math.inf, math.nan]))


@st.composite
def leaf(draw: st.DrawFn) -> UOp:
    shape, dt = draw(shapes), draw(st.sampled_from(VALUE_DTYPES))
    kind = draw(st.sampled_from(["buffer", "const", "unique"]))
    if kind == "buffer":
        return buffer(*shape, dtype=dt)
    return UOp.const(dt, value_of(draw, dt), DEV, shape, unique=kind == "unique")


def is_float(u: UOp) -> bool:
    return dtypes.is_float(u.dtype)


def is_int(u: UOp) -> bool:
    return dtypes.is_int(u.dtype)


def partner(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp | float | int | bool:
    """Another pool value that broadcasts with `x`, or a Python scalar."""
    y = draw(st.sampled_from(pool))
    try:
        broadcast_shape(x.shape, y.shape)
    except ValueError:
        return value_of(draw, x.dtype)
    return y


def binary(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    y = partner(draw, x, pool)
    ydt = y.dtype if isinstance(y, UOp) else dtypes.from_py(y)
    both_int = dtypes.is_int(x.dtype) and dtypes.is_int(ydt)
    no_float = not dtypes.is_float(x.dtype) and not dtypes.is_float(ydt)
    ops: dict[str, Callable[[], UOp]] = {
        "+": lambda: x + y,
        "-": lambda: x - y,
        "*": lambda: x * y,
        "/": lambda: x / y,
        "max": lambda: x.maximum(y),
        "min": lambda: x.minimum(y),
        "<": lambda: x < y,
        ">": lambda: x > y,
        "ne": lambda: x.ne(y),
        "eq": lambda: x.eq(y),
        "pow": lambda: x.pow(y),
        "radd": lambda: y + x,
    }
    if no_float:
        ops.update({"&": lambda: x & y, "|": lambda: x | y, "^": lambda: x ^ y})
    if both_int:
        ops.update({"//": lambda: x // y, "%": lambda: x % y, "<<": lambda: x << y})
    return ops[draw(st.sampled_from(sorted(ops)))]()


def unary(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    ops: dict[str, Callable[[], UOp]] = {
        "sin": x.sin,
        "sqrt": x.sqrt,
        "exp2": x.exp2,
        "log2": x.log2,
        "reciprocal": x.reciprocal,
        "neg": x.neg,
        "trunc": x.trunc,
        "detach": x.detach,
        "contiguous": x.contiguous,
        "contiguous_backward": x.contiguous_backward,
        "copy": lambda: x.copy_to_device("CPU:1"),
        "cast": lambda: x.cast(draw(st.sampled_from(VALUE_DTYPES))),
        "bitcast": lambda: x.bitcast(draw(st.sampled_from(SAME_WIDTH[x.dtype.itemsize]))),
    }
    return ops[draw(st.sampled_from(sorted(ops)))]()


def where(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    y = partner(draw, x, pool)
    cond = x < y
    other = y.cast(x.dtype) if isinstance(y, UOp) else y
    return cond.where(x, other) if draw(st.booleans()) else cond.where(other, x)


def movement(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    shape = x.shape
    kind = draw(st.sampled_from(["reshape", "expand", "permute", "pad", "shrink", "flip"]))
    if kind == "reshape":
        i = draw(st.integers(0, len(shape)))
        return x.reshape(draw(st.sampled_from([(math.prod(shape),), shape[:i] + (1,) + shape[i:]])))
    if kind == "expand":
        i = draw(st.integers(0, len(shape)))
        k = draw(st.integers(1, 3))
        return x.reshape(shape[:i] + (1,) + shape[i:]).expand(shape[:i] + (k,) + shape[i:])
    if kind == "permute":
        return x.permute(draw(st.permutations(range(len(shape)))))
    if kind == "pad":
        return x.pad([(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape])
    if kind == "shrink":
        starts = [draw(st.integers(0, s - 1)) for s in shape]
        return x.shrink([(b, draw(st.integers(b + 1, s))) for b, s in zip(starts, shape)])
    axes = draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), max_size=len(shape), unique=True))
    return x.flip(axes)


def reduce(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    axes = draw(st.lists(st.integers(0, max(len(x.shape) - 1, 0)), max_size=len(x.shape), unique=True))
    return x._rop(draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX])), axes if x.shape else [])


def function_call(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    """A FUNCTION over one or two pool values whose body is built by a few random steps over PARAMs."""
    args = [x, *draw(st.lists(st.sampled_from(pool), max_size=1))]
    params = [a.param_like(i) for i, a in enumerate(args)]
    body_pool = list(params)
    for _ in range(draw(st.integers(1, 3))):
        body_pool.append(step(draw, body_pool, calls=False))
    outs = draw(st.lists(st.sampled_from(body_pool[len(params) :]), min_size=1, max_size=2))
    f = UOp.maketuple(*outs).call(*args, name="f")
    return f.gettuple(draw(st.integers(0, len(outs) - 1)))


def effect(draw: st.DrawFn, x: UOp, pool: list[UOp]) -> UOp:
    """A clone (AFTER(view, STORE(view, x))) or a custom kernel (AFTER(out, CALL(SINK(STORE...))))."""
    out = buffer(*x.shape, dtype=x.dtype)
    if draw(st.booleans()):
        return out.after(out.store(x))
    p_out, p_in = out.param_like(0), x.param_like(1)
    kernel = p_out.store(p_in.sin().cast(x.dtype)).sink().call(out, x)
    return out.after(kernel)


Step = Callable[[st.DrawFn, UOp, list[UOp]], UOp]
# weighted towards the op families with the most rules; calls and effects nest a whole sub-program
STEPS: list[Step] = [binary, binary, binary, unary, unary, movement, movement, movement, where, reduce]
CALL_STEPS: list[Step] = [function_call, effect]


def step(draw: st.DrawFn, pool: list[UOp], calls: bool = True) -> UOp:
    x = draw(st.sampled_from(pool[-4:] if draw(st.booleans()) else pool))
    kind = draw(st.sampled_from(STEPS + CALL_STEPS if calls else STEPS))
    return kind(draw, x, pool)


@st.composite
def programs(draw: st.DrawFn) -> UOp:
    pool = [draw(leaf()) for _ in range(draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(3, 12))):
        pool.append(step(draw, pool))
    outs = [pool[-1], *draw(st.lists(st.sampled_from(pool), max_size=2))]
    return outs[0] if len(outs) == 1 else outs[0].sink(*outs[1:])


@given(programs())
def test_random_programs_verify(root):
    assert verify(root) is None


# ---------------------------------------------------------------------- mutating one node of a random program

FIXED_ARITY = (
    GroupOp.ALU
    | GroupOp.Movement
    | {
        Ops.CAST,
        Ops.BITCAST,
        Ops.REDUCE,
        Ops.CONTIGUOUS,
        Ops.DETACH,
        Ops.CONTIGUOUS_BACKWARD,
        Ops.COPY,
        Ops.GETTUPLE,
        Ops.STORE,
    }
)


def mutate(draw: st.DrawFn, root: UOp, ops: frozenset[Ops], how: Callable[[UOp], UOp]) -> tuple[UOp, UOp]:
    """(new root, bad node): one node (outside call bodies) with an op in `ops` replaced by `how(node)`."""
    candidates = [u for u in root.toposort(enter_calls=False) if u.op in ops]
    if not candidates:
        root = root + 1 if root.op is not Ops.SINK else root.src[0] + 1
        candidates = [root]
    node = draw(st.sampled_from(candidates))
    bad = how(node)
    return root.substitute({node: bad}), bad


def assert_names(e: VerifyError, bad: UOp) -> None:
    msg = str(e)
    assert e.uop is bad, msg
    assert f"invalid {bad.op.name} node" in msg and repr(bad.dtype) in msg and "expected:" in msg, msg
    assert isinstance(e, RuntimeError)


@given(programs(), st.data())
def test_a_wrong_alu_dtype_is_named(root, data):
    new_dtype = data.draw(st.sampled_from(VALUE_DTYPES))

    def retype(u: UOp) -> UOp:
        return u.replace(dtype=new_dtype if new_dtype != u.dtype else dtypes.int64)

    new_root, bad = mutate(data.draw, root, GroupOp.ALU, retype)
    with pytest.raises(VerifyError) as ei:
        verify(new_root)
    assert_names(ei.value, bad)


@given(programs(), st.data())
def test_a_missing_source_is_named(root, data):
    new_root, bad = mutate(data.draw, root, FIXED_ARITY, lambda u: u.replace(src=u.src[:-1]))
    with pytest.raises(VerifyError) as ei:
        verify(new_root)
    assert_names(ei.value, bad)
    assert f"sources:  {len(bad.src)}" in str(ei.value)


@given(programs(), st.data())
def test_an_extra_source_is_named(root, data):
    new_root, bad = mutate(data.draw, root, FIXED_ARITY, lambda u: u.replace(src=(*u.src, u.src[0])))
    with pytest.raises(VerifyError) as ei:
        verify(new_root)
    assert_names(ei.value, bad)


# ---------------------------------------------------------------------- valid examples


def valid_examples() -> dict[str, UOp]:
    x, v = buffer(2, 3), UOp.variable("n", 1, 8)
    bound = v.bind(3)
    n = bound.param_like(1)
    p0 = UOp.param(0, dtypes.float, (n, 3), DEV)
    shard = UOp.new_buffer(("CPU", "CPU:1"), 4, dtypes.float).reshape(2, 2)
    sharded = UOp(Ops.MULTI, dtypes.float, (shard,), 0)
    out, dev = buffer(2, 3), UOp(Ops.DEVICE, arg=DEV)
    p_out, p_in, px = out.param_like(0), x.param_like(1), x.param_like(0)
    q_out, q_in = (UOp.param(k, dtypes.float.ptr(6), device=DEV).reshape((2, 3)) for k in (0, 1))
    i, j = UOp.range(2, 0), UOp.range(3, 1)
    both = UOp.group(q_out[i, j].store(q_in[i, j] * 2.0), q_out[i, 0].store(q_in[i, j]))
    loops = both.end(i, j).sink(arg=KernelInfo("loops"))
    return {
        "const": UOp.const(dtypes.int, 3),
        "const on a device": UOp.const(dtypes.float, 1.0, DEV),
        "unique const": UOp.const(dtypes.float, 1.0, DEV, unique=True),
        "lunique const": UOp(Ops.CONST, dtypes.float, (UOp(Ops.LUNIQUE, arg=0), dev), 1.5),
        "special float consts": UOp.const(dtypes.float, math.nan, DEV).sink(UOp.const(dtypes.half, -1e9)),
        "shape vectors": UOp.sink(shape_vec(()), shape_vec((3,)), shape_vec((2, 3)), shape_vec((bound, 3))),
        "float variable": UOp.variable("f", 0.0, 1.0, dtypes.float),
        "bind": bound,
        "symbolic shape": x.shrink(((0, bound), (0, 3))) + 1,
        "param of unknown shape": UOp.param(0, dtypes.int),
        "pointer param": UOp.param(0, dtypes.float.ptr(6)),
        "variable param": n,
        "sharded param": sharded.param_like(0),
        "multi": sharded + 1,
        "function": (px * 2).call(x).gettuple(0),
        "symbolic function": (p0 * 2).call(x.shrink(((0, bound), (0, 3))), bound).gettuple(0),
        "multi-output function": UOp.maketuple(px.sin(), px < 1).call(x).gettuple(1),
        "nested function": ((px + 1).call(px).gettuple(0) * 2).call(x).gettuple(0),
        "custom kernel": out.after(p_out.store(p_in.sqrt()).sink().call(out, x)),
        "custom kernel with explicit loops": out.after(loops.call(out, x)),
        "clone": out.after(out.store(x)),
        "empty tuple": UOp.maketuple(),
        "gradient-style tuple": UOp.maketuple(x, UOp(Ops.NOOP)).gettuple(0),
        "named noop": UOp(Ops.NOOP, arg="name"),
        "noop of a value": UOp(Ops.NOOP, dtypes.float, (x,)),
        "every movement op": x.reshape(3, 2)
        .permute(1, 0)
        .pad(((1, 0), (0, 2)))
        .shrink(((0, 2), (1, 3)))
        .flip(0)
        .reshape(2, 1, 2)
        .expand(2, 5, 2)
        ._rop(Ops.MAX, (1,)),
        "copy": x.copy_to_device("CPU:1").contiguous().detach().contiguous_backward(),
        "where": (x < 1).where(x, 0.0).bitcast(dtypes.int32).cast(dtypes.bool),
        "ints": (buffer(4, dtype=dtypes.int) // 3 % 2 << 1 & 7) ^ 1,
        "call with no args": UOp.maketuple(UOp.const(dtypes.float, 1.0, DEV)).call(),
        "mulacc": UOp(Ops.MULACC, dtypes.float, (x, x, x)),
    }


@pytest.mark.parametrize("name", sorted(valid_examples()))
def test_valid_examples(name):
    assert verify(valid_examples()[name]) is None


def test_a_deep_chain_verifies_without_recursion():
    u = buffer(1)
    for _ in range(100_000):
        u = UOp(Ops.NEG, dtypes.float, (u,))
    assert verify(u) is None


# ---------------------------------------------------------------------- malformed examples


def bad_function_body() -> UOp:
    x = buffer(3)
    p = x.param_like(0)
    return UOp(Ops.ADD, dtypes.float, (p, p.cast(dtypes.int))).call(x).gettuple(0)


def invalid_examples() -> dict[str, tuple[UOp, Ops, str]]:
    """name -> (root, op of the node that must be named, a fragment the message must contain)."""
    x, i = buffer(2, 3), buffer(2, 3, dtype=dtypes.int)
    y = buffer(6)
    f32, dev = dtypes.float, UOp(Ops.DEVICE, arg=DEV)
    sv = shape_vec
    p = x.param_like(0)
    v = UOp.variable("n", 1, 8)
    T = UOp.maketuple
    return {
        # source counts
        "ADD with one source": (UOp(Ops.ADD, f32, (x,)), Ops.ADD, "no rule accepts"),
        "SIN with two sources": (UOp(Ops.SIN, f32, (x, x)), Ops.SIN, "1 source"),
        "WHERE with two sources": (UOp(Ops.WHERE, f32, (x < 1, x)), Ops.WHERE, "3 sources"),
        "RESHAPE without its shape": (UOp(Ops.RESHAPE, f32, (x,)), Ops.RESHAPE, "shape vector"),
        "PAD with one vector": (UOp(Ops.PAD, f32, (x, sv((0, 0)))), Ops.PAD, "begins vector"),
        "PERMUTE with a source vector": (
            UOp(Ops.PERMUTE, f32, (x, sv((1, 0))), (1, 0)),
            Ops.PERMUTE,
            "1 source",
        ),
        "CAST without a source": (UOp(Ops.CAST, f32), Ops.CAST, "1 source"),
        # dtypes
        "ADD of float and int": (UOp(Ops.ADD, f32, (x, i)), Ops.ADD, "one dtype"),
        "ADD output of another dtype": (UOp(Ops.ADD, dtypes.int, (x, x)), Ops.ADD, "rejected"),
        "CMPLT that is not bool": (UOp(Ops.CMPLT, f32, (x, x)), Ops.CMPLT, "bool"),
        "CMPNE of two dtypes": (UOp(Ops.CMPNE, dtypes.bool, (x, i)), Ops.CMPNE, "bool"),
        "WHERE with a float condition": (UOp(Ops.WHERE, f32, (x, x, x)), Ops.WHERE, "bool condition"),
        "WHERE with mixed branches": (UOp(Ops.WHERE, f32, (x < 1, x, i)), Ops.WHERE, "share one dtype"),
        "SQRT changing dtype": (UOp(Ops.SQRT, dtypes.half, (x,)), Ops.SQRT, "output dtype"),
        "AND on floats": (UOp(Ops.AND, f32, (x, x)), Ops.AND, "integer or bool"),
        "SHL on floats": (UOp(Ops.SHL, f32, (x, x)), Ops.SHL, "integer"),
        "FLOORDIV on bools": (UOp(Ops.FLOORDIV, dtypes.bool, (x < 1, x < 1)), Ops.FLOORDIV, "not bool"),
        "CAST to void": (UOp(Ops.CAST, dtypes.void, (x,)), Ops.CAST, "void"),
        "BITCAST changing width": (UOp(Ops.BITCAST, dtypes.int8, (x,)), Ops.BITCAST, "itemsize"),
        "DETACH changing dtype": (UOp(Ops.DETACH, dtypes.int, (x,)), Ops.DETACH, "source dtype"),
        "REDUCE changing dtype": (
            UOp(Ops.REDUCE, dtypes.int, (x,), (Ops.ADD, (0,))),
            Ops.REDUCE,
            "source dtype",
        ),
        "vector ALU": (UOp(Ops.ADD, f32.vec(2), (x.cast(f32.vec(2)),) * 2), Ops.CAST, "rejected"),
        "STORE of another dtype": (x.store(i), Ops.STORE, "element dtype"),
        "STORE with a dtype": (UOp(Ops.STORE, f32, (x, x)), Ops.STORE, "dtype void"),
        # shapes of elementwise ops
        "ADD of mismatched shapes": (UOp(Ops.ADD, f32, (x, y)), Ops.ADD, "shape mismatch"),
        "WHERE of mismatched shapes": (UOp(Ops.WHERE, f32, (y < 1, x, x)), Ops.WHERE, "shape mismatch"),
        "MUL with a source of unknown shape": (
            UOp(Ops.MUL, f32, (x, UOp.param(0, f32))),
            Ops.MUL,
            "unknown shape",
        ),
        # movement arguments
        "RESHAPE changing the size": (
            UOp(Ops.RESHAPE, f32, (x, sv((4,)))),
            Ops.RESHAPE,
            "number of elements",
        ),
        "RESHAPE to a negative size": (UOp(Ops.RESHAPE, f32, (x, sv((-6,)))), Ops.RESHAPE, "rejected"),
        "RESHAPE by a float vector": (
            UOp(Ops.RESHAPE, f32, (x, UOp.const(f32, 6.0))),
            Ops.RESHAPE,
            "shape vector",
        ),
        "EXPAND of a non-1 dim": (UOp(Ops.EXPAND, f32, (x, sv((4, 3)))), Ops.EXPAND, "size 1"),
        "EXPAND to a negative size": (
            UOp(Ops.EXPAND, f32, (x.reshape(2, 3, 1), sv((2, 3, -1)))),
            Ops.EXPAND,
            "shape vector",
        ),
        "PERMUTE repeating an axis": (UOp(Ops.PERMUTE, f32, (x,), (0, 0)), Ops.PERMUTE, "permutation"),
        "PERMUTE of the wrong rank": (UOp(Ops.PERMUTE, f32, (x,), (0,)), Ops.PERMUTE, "permutes exactly"),
        "PERMUTE without an order": (UOp(Ops.PERMUTE, f32, (y,)), Ops.PERMUTE, "tuple"),
        "FLIP with ints": (UOp(Ops.FLIP, f32, (x,), (1, 0)), Ops.FLIP, "bool per dimension"),
        "FLIP of the wrong rank": (UOp(Ops.FLIP, f32, (x,), (True,)), Ops.FLIP, "one flag per dimension"),
        "PAD negative": (UOp(Ops.PAD, f32, (x, sv((0, -1)), sv((0, 0)))), Ops.PAD, "rejected"),
        "PAD of the wrong rank": (UOp(Ops.PAD, f32, (x, sv((1,)), sv((1,)))), Ops.PAD, "pair per dimension"),
        "PAD vectors of two lengths": (UOp(Ops.PAD, f32, (x, sv((1,)), sv((1, 1)))), Ops.PAD, "rejected"),
        "SHRINK out of bounds": (
            UOp(Ops.SHRINK, f32, (x, sv((0, 0)), sv((2, 4)))),
            Ops.SHRINK,
            "start <= end",
        ),
        "SHRINK backwards": (UOp(Ops.SHRINK, f32, (x, sv((1, 0)), sv((0, 3)))), Ops.SHRINK, "out of bounds"),
        "REDUCE by SUB": (UOp(Ops.REDUCE, f32, (x,), (Ops.SUB, (0,))), Ops.REDUCE, "ADD|MUL|MAX"),
        "REDUCE with an int axis": (
            UOp(Ops.REDUCE, f32, (x,), (Ops.ADD, 0)),
            Ops.REDUCE,
            "tuple of distinct",
        ),
        "REDUCE axis out of range": (UOp(Ops.REDUCE, f32, (x,), (Ops.ADD, (2,))), Ops.REDUCE, "out of range"),
        "movement of an unknown shape": (
            UOp(Ops.PERMUTE, f32, (UOp.param(0, f32),), ()),
            Ops.PERMUTE,
            "shape",
        ),
        # leaves
        "CONST with an int for a float": (UOp(Ops.CONST, f32, (), 1), Ops.CONST, "a value of the dtype"),
        "CONST with a float for an int": (UOp(Ops.CONST, dtypes.int, (), 1.5), Ops.CONST, "rejected"),
        "CONST out of its dtype's range": (UOp(Ops.CONST, dtypes.int8, (), 300), Ops.CONST, "rejected"),
        "CONST with a void dtype": (UOp(Ops.CONST, dtypes.void, (), 1), Ops.CONST, "rejected"),
        "CONST on (DEVICE, UNIQUE)": (
            UOp(Ops.CONST, f32, (dev, UOp(Ops.UNIQUE, arg=1)), 1.0),
            Ops.CONST,
            "(UNIQUE, DEVICE)",
        ),
        "CONST on a BUFFER": (UOp(Ops.CONST, f32, (y,), 1.0), Ops.CONST, "no rule"),
        "VCONST of the wrong length": (
            UOp(Ops.VCONST, dtypes.index.vec(2), (), (1, 2, 3)),
            Ops.VCONST,
            "count",
        ),
        "STACK of the wrong dtype": (UOp(Ops.STACK, dtypes.index.vec(2), (v,)), Ops.STACK, "scalar.vec(n)"),
        "DEVICE named by an int": (UOp(Ops.DEVICE, arg=0), Ops.DEVICE, "device name"),
        "UNIQUE named by a str": (UOp(Ops.UNIQUE, arg="u"), Ops.UNIQUE, "non-negative int"),
        "BUFFER without a device": (UOp(Ops.BUFFER, f32, (UOp(Ops.UNIQUE, arg=5),), 6), Ops.BUFFER, "DEVICE"),
        "BUFFER of negative size": (UOp(Ops.BUFFER, f32, y.src, -1), Ops.BUFFER, "element count"),
        "DEFINE_VAR with min > max": (
            UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 5, 1)),
            Ops.DEFINE_VAR,
            "min <=",
        ),
        "DEFINE_VAR of bool": (
            UOp(Ops.DEFINE_VAR, dtypes.bool, (), ("n", False, True)),
            Ops.DEFINE_VAR,
            "int",
        ),
        "BIND out of range": (
            UOp(Ops.BIND, dtypes.index, (v, UOp.const(dtypes.index, 9))),
            Ops.BIND,
            "range",
        ),
        "BIND of a CONST": (
            UOp(Ops.BIND, dtypes.index, (UOp.const(dtypes.index, 1),) * 2),
            Ops.BIND,
            "DEFINE_VAR",
        ),
        "NOOP with a dtype": (UOp(Ops.NOOP, f32), Ops.NOOP, "dtype void"),
        # PARAM layout
        "PARAM with a negative slot": (UOp(Ops.PARAM, f32, p.src, -1), Ops.PARAM, "slot"),
        "PARAM with one source": (UOp(Ops.PARAM, f32, p.src[:1], 0), Ops.PARAM, "DEVICE|NOOP"),
        "PARAM shaped by a float": (
            UOp(Ops.PARAM, f32, (UOp.const(f32, 2.0), dev), 0),
            Ops.PARAM,
            "shape vector",
        ),
        "PARAM on a CONST device": (
            UOp(Ops.PARAM, f32, (sv((2,)), UOp.const(f32, 2.0)), 0),
            Ops.PARAM,
            "DEVICE",
        ),
        "PARAM with only vmin": (UOp(Ops.PARAM, f32, (*p.src, UOp.const(f32, 0.0)), 0), Ops.PARAM, "vmax"),
        "PARAM with an int name": (
            UOp(Ops.PARAM, f32, (*p.src, UOp(Ops.NOOP, arg=3)), 0),
            Ops.NOOP,
            "a name",
        ),
        "PARAM with a trailing value": (UOp(Ops.PARAM, f32, (*p.src, x), 0), Ops.PARAM, "MULTI(axis)"),
        # function machinery
        "GETTUPLE out of range": (UOp(Ops.GETTUPLE, f32, (T(x),), 1), Ops.GETTUPLE, "index into the TUPLE"),
        "GETTUPLE of another dtype": (
            UOp(Ops.GETTUPLE, dtypes.int, (T(x),), 0),
            Ops.GETTUPLE,
            "element's dtype",
        ),
        "GETTUPLE of a CALL": (
            UOp(Ops.GETTUPLE, f32, (p.store(p).sink().call(x),), 0),
            Ops.GETTUPLE,
            "FUNCTION|TUPLE",
        ),
        "GETTUPLE of a value": (UOp(Ops.GETTUPLE, f32, (x,), 0), Ops.GETTUPLE, "no rule"),
        "FUNCTION with a value body": (
            UOp(Ops.FUNCTION, dtypes.void, (p + 1, x), CallInfo()),
            Ops.FUNCTION,
            "TUPLE",
        ),
        "FUNCTION without CallInfo": (
            UOp(Ops.FUNCTION, dtypes.void, (T(p), x), "f"),
            Ops.FUNCTION,
            "CallInfo",
        ),
        "FUNCTION missing an argument": ((p + 1).call(), Ops.FUNCTION, "slot i < #args"),
        "FUNCTION argument of another dtype": ((p + 1).call(i), Ops.FUNCTION, "args[i]'s dtype"),
        "FUNCTION with a dtype": (UOp(Ops.FUNCTION, f32, (T(p), x), CallInfo()), Ops.FUNCTION, "dtype void"),
        "CALL of a TUPLE body": (UOp(Ops.CALL, dtypes.void, (T(p), x), CallInfo()), Ops.CALL, "SINK|PROGRAM"),
        "bad node inside a FUNCTION body": (bad_function_body(), Ops.ADD, "one dtype"),
        "COPY without a DEVICE": (UOp(Ops.COPY, f32, (x, x)), Ops.COPY, "src (x, DEVICE)"),
        "AFTER of another dtype": (UOp(Ops.AFTER, dtypes.int, (x, x.store(x))), Ops.AFTER, "value's dtype"),
        "MULTI axis not an int": (UOp(Ops.MULTI, f32, (x,), "0"), Ops.MULTI, "axis"),
        "TUPLE with a dtype": (UOp(Ops.TUPLE, f32, (x,)), Ops.TUPLE, "dtype void"),
        "SINK with a dtype": (UOp(Ops.SINK, f32, (x,)), Ops.SINK, "dtype void"),
        # a custom kernel's loop needs (axis_id, "loop"); LOAD is not tensor-level
        "RANGE": (UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), 0), Ops.RANGE, "axis_id"),
        "LOAD": (UOp(Ops.LOAD, f32, (x,)), Ops.LOAD, "not part of"),
    }


INVALID = invalid_examples()


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_examples_name_the_node(name):
    root, op, fragment = invalid_examples()[name]
    with pytest.raises(VerifyError) as ei:
        verify(root.sink(UOp.const(dtypes.int, 0)))  # under a SINK: the error must find the node inside
    e, msg = ei.value, str(ei.value)
    assert e.uop.op is op, msg
    assert f"invalid {op.name} node" in msg and repr(e.uop.dtype) in msg and f"arg={e.uop.arg!r}" in msg, msg
    assert fragment in msg, msg
    for k, s in enumerate(e.uop.src):  # every source is listed with its op, dtype and shape
        assert f"src[{k}]: {s.op} {s.dtype!r}" in msg, msg
    assert list(root.sink(UOp.const(dtypes.int, 0)).toposort())[e.index] is e.uop


def test_verify_error_message_layout():
    x = buffer(2, 3)
    bad = UOp(Ops.ADD, dtypes.float, (x, buffer(2, 3, dtype=dtypes.int)))
    with pytest.raises(VerifyError) as ei:
        verify(bad)
    lines = str(ei.value).splitlines()
    assert lines[0].startswith("invalid ADD node (#") and "a rule rejected this node" in lines[0]
    assert lines[1] == "  node:     Ops.ADD dtypes.float arg=None"
    assert lines[2] == "  sources:  2"
    assert lines[3] == "    src[0]: Ops.RESHAPE dtypes.float arg=None shape=(2, 3)"
    assert lines[4] == "    src[1]: Ops.RESHAPE dtypes.int arg=None shape=(2, 3)"
    assert lines[5].startswith("  expected: ADD: 2 sources of one dtype")


def test_the_first_bad_node_in_toposort_order_is_named():
    x = buffer(4)
    inner = UOp(Ops.SIN, dtypes.half, (x,))  # bad dtype
    outer = UOp(Ops.ADD, dtypes.float, (inner, x))  # bad too, because of inner
    with pytest.raises(VerifyError) as ei:
        verify(outer)
    assert ei.value.uop is inner


def test_every_rule_of_the_tensor_spec_is_exercised():
    with Context(TRACK_MATCH_STATS=1):
        before = list(pm_spec_tensor.stats.hits)
        for root in valid_examples().values():
            verify(root)
        for root, _, _ in invalid_examples().values():
            with pytest.raises(VerifyError):
                verify(root)
    hits = [after - b for after, b in zip(pm_spec_tensor.stats.hits, before)]
    unused = [str(pat) for (pat, _), n in zip(pm_spec_tensor.patterns, hits) if n == 0]
    assert not unused, f"rules no example reaches: {unused}"
