"""The IR's well-formedness rules as pattern tables, and `verify` (layer 8).

Each rule returns True for a valid node. A node that no rule matches, or for which a rule returns False, is
invalid. `verify(root)` checks every node under `root` (call bodies included) and that its shape can be
inferred, and raises `VerifyError` naming the first bad node in toposort order. See spec/ir.md.
"""

from __future__ import annotations

from uopgrad.dtype import DType, FloatConst, PtrDType, dtypes
from uopgrad.errors import ShapeError, VerifyError
from uopgrad.facts import Fact
from uopgrad.ops import GroupOp, Ops
from uopgrad.rewrite import PatternMatcher, UPat
from uopgrad.uop import CallInfo, Invalid, UOp

__all__ = [
    "REDUCE_OPS",
    "VerifyError",
    "pm_spec_scalar",
    "pm_spec_shared",
    "pm_spec_tensor",
    "verify",
    "verify_new",
]

REDUCE_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
# ops whose dtype may be a vector: the shape vectors of RESHAPE/EXPAND/PAD/SHRINK and PARAM
_VECTOR_OPS = frozenset({Ops.CONST, Ops.VCONST, Ops.STACK})
_INT_ONLY = frozenset({Ops.SHL, Ops.SHR})
# divisions and remainders: any number dtype (REFERENCE defines the float ones, codegen decomposes them)
_DIVISIONS = frozenset({Ops.CDIV, Ops.CMOD, Ops.FLOORDIV, Ops.FLOORMOD})
_INT_OR_BOOL = frozenset({Ops.AND, Ops.OR, Ops.XOR})
_PLAIN_BINARY = GroupOp.Binary - GroupOp.Comparison - _INT_ONLY - _INT_OR_BOOL - _DIVISIONS


# ---------------------------------------------------------------------- predicates used by the rules
# bool(...): inside `class dtypes` the annotation `-> bool` names the dtype `dtypes.bool`, so mypy can't type
# the predicates' results; wrapping them keeps this module's checks precise
def _is_int(dt: DType) -> bool:
    return bool(dtypes.is_int(dt))


def _is_float(dt: DType) -> bool:
    return bool(dtypes.is_float(dt))


def _is_nat(x: object) -> bool:
    """A non-negative Python int (bools excluded)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_value_dtype(dt: DType) -> bool:
    """A scalar element type a tensor can hold: not void, not a pointer, not a vector."""
    return dt != dtypes.void and not isinstance(dt, PtrDType) and dt.count == 1


def _is_device(arg: object) -> bool:
    """A device name, or a non-empty tuple of them (a multi-device value)."""
    if isinstance(arg, tuple):
        return len(arg) > 0 and all(isinstance(d, str) and d for d in arg)
    return isinstance(arg, str) and arg != ""


def _const_value_ok(dt: DType, v: object) -> bool:
    """`v` fits a constant of dtype `dt`: a bool for bool, an int in range for ints, a float for floats."""
    s = dt.scalar()
    if s == dtypes.bool:
        return type(v) is bool
    if _is_int(s):  # exactly int: a subclass could print itself as anything in generated code
        if type(v) is not int:
            return False
        return s == dtypes.index or dtypes.min(s) <= v <= dtypes.max(s)
    return _is_float(s) and type(v) in (float, FloatConst)


def _const_ok(x: UOp) -> bool:
    return (
        not isinstance(x.dtype, PtrDType)
        and x.dtype != dtypes.void
        and (x.arg is Invalid or _const_value_ok(x.dtype, x.arg))
    )


def _vconst_ok(x: UOp) -> bool:
    if not isinstance(x.arg, tuple) or len(x.arg) != x.dtype.count:
        return False
    return all(_const_value_ok(x.dtype, a) for a in x.arg)


def _stack_ok(x: UOp) -> bool:
    """STACK of n scalars has dtype `scalar.vec(n)`; an index vector may hold any integer scalars."""
    if x.dtype == dtypes.void:
        return not x.src
    scalar = x.dtype.scalar()
    if x.dtype.count != len(x.src) or isinstance(x.dtype, PtrDType):
        return False
    if scalar == dtypes.index:
        return all(s.dtype.count == 1 and _is_int(s.dtype) for s in x.src)
    return all(s.dtype == scalar for s in x.src)


def _is_shape_vec(v: UOp) -> bool:
    """A shape vector (spec/ir.md): CONST/VCONST/STACK of an integer dtype, no negative int entries."""
    if v.op not in _VECTOR_OPS or not _is_int(v.dtype) or (v.op is not Ops.STACK and v.src):
        return False
    if v.op is Ops.CONST:
        return _is_nat(v.arg)
    if v.op is Ops.VCONST:
        return isinstance(v.arg, tuple) and all(_is_nat(d) for d in v.arg)
    return all(s.op is not Ops.CONST or _is_nat(s.arg) for s in v.src)


def _vec_len(v: UOp) -> int:
    return v.dtype.count if v.op is not Ops.CONST else 1


def _var_ok(x: UOp) -> bool:
    """DEFINE_VAR: an int (or float) dtype; arg (name, min, max), bounds of that kind, min <= max."""
    arg = x.arg
    if not (isinstance(arg, tuple) and len(arg) == 3 and isinstance(arg[0], str)):
        return False
    if not (_is_int(x.dtype) or _is_float(x.dtype)):
        return False
    lo, hi = arg[1], arg[2]
    if not all(isinstance(b, int | float) and not isinstance(b, bool) for b in (lo, hi)):
        return False
    return (_is_float(x.dtype) or all(isinstance(b, int) for b in (lo, hi))) and bool(lo <= hi)


def _bind_ok(x: UOp, v: UOp, c: UOp) -> bool:
    return x.dtype == v.dtype == c.dtype and x.arg is None and v.arg[1] <= c.arg <= v.arg[2]


def _same_dtype(x: UOp, *srcs: UOp) -> bool:
    """The output and every source share one non-void element dtype (a pointer PARAM counts as its base)."""
    return x.dtype.base != dtypes.void and all(s.dtype.base == x.dtype.base for s in srcs)


def _is_bare_noop(u: UOp) -> bool:
    return u.op is Ops.NOOP and not u.src and u.arg is None


def _param_tail_ok(x: UOp, tail: tuple[UOp, ...]) -> bool:
    """PARAM sources after (shape, device): [vmin CONST, vmax CONST] [NOOP(name)] [MULTI(axis) marker]."""
    if tail and tail[0].op is Ops.CONST:
        if len(tail) < 2 or tail[1].op is not Ops.CONST or tail[0].src or tail[1].src:
            return False
        if tail[0].dtype != x.dtype or tail[1].dtype != x.dtype.scalar():
            return False
        tail = tail[2:]
    if tail and tail[0].op is Ops.NOOP:
        if tail[0].src or not isinstance(tail[0].arg, str):
            return False
        tail = tail[1:]
    if tail and tail[0].op is Ops.MULTI:
        if tail[0].src or not _is_nat(tail[0].arg):
            return False
        tail = tail[1:]
    return not tail


def _param_ok(x: UOp) -> bool:
    """PARAM(shape vector | NOOP, DEVICE | NOOP, [vmin, vmax], [NOOP(name)], [MULTI marker]), arg = slot."""
    if not _is_nat(x.arg) or x.dtype == dtypes.void or len(x.src) < 2:
        return False
    shape, device = x.src[0], x.src[1]
    if not (_is_bare_noop(shape) or _is_shape_vec(shape)):
        return False
    if not (_is_bare_noop(device) or device.op is Ops.DEVICE):
        return False
    return _param_tail_ok(x, x.src[2:])


def _reduce_arg_ok(arg: object) -> bool:
    """REDUCE's arg: (op in ADD/MUL/MAX, tuple of distinct non-negative axes)."""
    if not (isinstance(arg, tuple) and len(arg) == 2 and arg[0] in REDUCE_OPS and isinstance(arg[1], tuple)):
        return False
    return all(_is_nat(a) for a in arg[1]) and len(set(arg[1])) == len(arg[1])


def _permute_ok(x: UOp, y: UOp) -> bool:
    arg = x.arg
    if not (isinstance(arg, tuple) and all(_is_nat(a) for a in arg)):
        return False
    return _same_dtype(x, y) and sorted(arg) == list(range(len(arg)))


def _flip_ok(x: UOp, y: UOp) -> bool:
    return _same_dtype(x, y) and isinstance(x.arg, tuple) and all(type(f) is bool for f in x.arg)


def _gettuple_ok(x: UOp, k: UOp) -> bool:
    """GETTUPLE(FUNCTION | TUPLE, arg=i): i indexes the TUPLE, and the dtype is that element's dtype."""
    holder = k.src[0] if k.op is Ops.FUNCTION else k
    if holder.op is not Ops.TUPLE or not _is_nat(x.arg) or x.arg >= len(holder.src):
        return False
    element: UOp = holder.src[x.arg]
    return x.dtype == element.dtype


def _call_ok(x: UOp) -> bool:
    """CALL/FUNCTION: a CallInfo arg; each body PARAM has a slot < #args and the dtype of its argument."""
    if not isinstance(x.arg, CallInfo):
        return False
    args = x.src[1:]
    for p in x.src[0].toposort(enter_calls=False):
        if p.op is Ops.PARAM and _is_nat(p.arg):
            if p.arg >= len(args) or p.dtype.base != args[p.arg].dtype.base:
                return False
    return True


def _index_ok(x: UOp) -> bool:
    """INDEX(view of a pointer PARAM, one integer index per dimension), of the pointer's element dtype."""
    view, idx = x.src[0], x.src[1:]
    return (
        isinstance(view.base.dtype, PtrDType)
        and x.dtype == view.dtype.base
        and len(idx) == len(view.shape)
        and all(_is_int(i.dtype) for i in idx)
    )


# ---------------------------------------------------------------------- the tables
# vector dtypes only appear in shape vectors; every spec starts with this row (it rejects, never accepts)
pm_spec_scalar = PatternMatcher(
    [
        (UPat(name="x"), lambda x: False if x.dtype.count != 1 and x.op not in _VECTOR_OPS else None),
    ]
)

# ops that tensor graphs and kernels share; a spec is pm_spec_scalar + its own rows + pm_spec_shared
pm_spec_shared = PatternMatcher(
    [
        (UPat(Ops.SINK, dtypes.void), lambda: True),  # SINK(*outputs)
        (UPat(Ops.NOOP, dtypes.void, src=(), name="x"), lambda x: x.arg is None or isinstance(x.arg, str)),
        (UPat(Ops.NOOP, src=(UPat.var("y"),), name="x"), lambda x, y: x.dtype in (dtypes.void, y.dtype)),
        (UPat(Ops.CONST, src=(), name="x"), _const_ok),
        (UPat(Ops.VCONST, src=(), name="x"), _vconst_ok),
        (UPat(Ops.STACK, name="x"), lambda x: x.arg is None and _stack_ok(x)),
        (UPat(Ops.DEFINE_VAR, src=(), name="x"), _var_ok),
        # ALU: sources and output share a dtype, except comparisons (bool out) and WHERE (bool condition)
        (
            UPat(GroupOp.Unary, src=(UPat.var("y"),), name="x"),
            lambda x, y: x.arg is None and _same_dtype(x, y),
        ),
        (
            UPat(GroupOp.Comparison, src=(UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, a, b: x.dtype == dtypes.bool and a.dtype.base == b.dtype.base != dtypes.void,
        ),
        (
            UPat(_INT_ONLY, src=(UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, a, b: _same_dtype(x, a, b) and _is_int(x.dtype.base),
        ),
        (
            UPat(_DIVISIONS, src=(UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, a, b: _same_dtype(x, a, b) and x.dtype.base != dtypes.bool,
        ),
        (
            UPat(_INT_OR_BOOL, src=(UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, a, b: _same_dtype(x, a, b) and (_is_int(x.dtype.base) or x.dtype.base == dtypes.bool),
        ),
        (
            UPat(_PLAIN_BINARY, src=(UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, a, b: _same_dtype(x, a, b),
        ),
        (
            UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("b")), name="x"),
            lambda x, c, a, b: c.dtype.base == dtypes.bool and _same_dtype(x, a, b),
        ),
        (
            UPat(Ops.MULACC, src=(UPat.var("a"), UPat.var("b"), UPat.var("c")), name="x"),
            lambda x, a, b, c: _same_dtype(x, a, b, c),
        ),
        # CAST converts values; BITCAST reinterprets bits, so the widths must agree
        (
            UPat(Ops.CAST, src=(UPat.var("y"),), name="x"),
            lambda x, y: x.arg is None and dtypes.void not in (x.dtype, y.dtype),
        ),
        (
            UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"),
            lambda x, y: (
                x.arg is None
                and dtypes.void not in (x.dtype, y.dtype)
                and x.dtype.itemsize == y.dtype.itemsize
            ),
        ),
        # STORE(target, value) writes value into target
        (
            UPat(Ops.STORE, dtypes.void, src=(UPat.var("t"), UPat.var("v"))),
            lambda t, v: t.dtype.base == v.dtype.base,
        ),
        # AFTER(value, *effects) is value, once the effects happened
        (
            UPat(Ops.AFTER, src=(UPat.var("y"),), allow_any_len=True, name="x"),
            lambda x, y: x.dtype == y.dtype,
        ),
    ]
)

# ops that live only in tensor graphs (devices, buffers, movement, REDUCE, calls), plus the shared ones
pm_spec_tensor = (
    pm_spec_scalar
    + PatternMatcher(
        [
            (UPat(Ops.DEVICE, dtypes.void, src=(), name="x"), lambda x: _is_device(x.arg)),
            # a realize CALL's identity is ("realize", n) (realized.py), apart from the user's UNIQUE numbers
            (
                UPat((Ops.UNIQUE, Ops.LUNIQUE), dtypes.void, src=(), name="x"),
                lambda x: (
                    _is_nat(x.arg)
                    or (
                        isinstance(x.arg, tuple)
                        and len(x.arg) == 2
                        and x.arg[0] == "realize"
                        and _is_nat(x.arg[1])
                    )
                ),
            ),
            # CONST on a device, optionally unique: CONST(DEVICE) or CONST(UNIQUE|LUNIQUE, DEVICE)
            (UPat(Ops.CONST, src=(UPat(Ops.DEVICE),), name="x"), _const_ok),
            (UPat(Ops.CONST, src=(UPat((Ops.UNIQUE, Ops.LUNIQUE)), UPat(Ops.DEVICE)), name="x"), _const_ok),
            (
                UPat(Ops.BUFFER, src=(UPat((Ops.UNIQUE, Ops.LUNIQUE)), UPat(Ops.DEVICE)), name="x"),
                lambda x: _is_nat(x.arg) and _is_value_dtype(x.dtype),
            ),
            (UPat(Ops.PARAM, name="x"), _param_ok),
            (
                UPat(
                    Ops.BIND,
                    src=(UPat(Ops.DEFINE_VAR, name="v"), UPat(Ops.CONST, src=(), name="c")),
                    name="x",
                ),
                _bind_ok,
            ),
            # movement: target shape / begins / ends are shape vectors in src, PERMUTE/FLIP keep theirs in arg
            (
                UPat((Ops.RESHAPE, Ops.EXPAND), src=(UPat.var("y"), UPat.var("s")), name="x"),
                lambda x, y, s: x.arg is None and _same_dtype(x, y) and _is_shape_vec(s),
            ),
            (
                UPat((Ops.PAD, Ops.SHRINK), src=(UPat.var("y"), UPat.var("b"), UPat.var("e")), name="x"),
                lambda x, y, b, e: (
                    x.arg is None
                    and _same_dtype(x, y)
                    and _is_shape_vec(b)
                    and _is_shape_vec(e)
                    and _vec_len(b) == _vec_len(e)
                ),
            ),
            (UPat(Ops.PERMUTE, src=(UPat.var("y"),), name="x"), _permute_ok),
            (UPat(Ops.FLIP, src=(UPat.var("y"),), name="x"), _flip_ok),
            (
                UPat(Ops.REDUCE, src=(UPat.var("y"),), name="x"),
                lambda x, y: _same_dtype(x, y) and _reduce_arg_ok(x.arg),
            ),
            # value-preserving wrappers
            (
                UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH), src=(UPat.var("y"),), name="x"),
                lambda x, y: x.arg is None and _same_dtype(x, y),
            ),
            (
                UPat(Ops.COPY, src=(UPat.var("y"), UPat(Ops.DEVICE)), name="x"),
                lambda x, y: x.arg is None and _same_dtype(x, y),
            ),
            # multi-device: a real MULTI(value, arg=axis), or the source-less marker at the end of a PARAM
            (
                UPat(Ops.MULTI, src=(UPat.var("y"),), name="x"),
                lambda x, y: _same_dtype(x, y) and _is_nat(x.arg),
            ),
            (UPat(Ops.MULTI, dtypes.void, src=(), name="x"), lambda x: _is_nat(x.arg)),
            # function machinery
            (UPat(Ops.TUPLE, dtypes.void, name="x"), lambda x: x.arg is None),
            (UPat(Ops.GETTUPLE, src=(UPat((Ops.FUNCTION, Ops.TUPLE), name="k"),), name="x"), _gettuple_ok),
            (UPat(Ops.FUNCTION, dtypes.void, src=(UPat(Ops.TUPLE),), allow_any_len=True, name="x"), _call_ok),
            (
                UPat(Ops.CALL, dtypes.void, src=(UPat(GroupOp.OpaqueBody),), allow_any_len=True, name="x"),
                _call_ok,
            ),
            # custom-kernel bodies with explicit loops: view[i, ...] (INDEX), loops (RANGE), END, GROUP
            (
                UPat(Ops.RANGE, dtypes.index, src=(UPat.var("b"),), name="x"),
                lambda x, b: (
                    b.dtype == dtypes.index
                    and isinstance(x.arg, tuple)
                    and len(x.arg) == 2
                    and _is_nat(x.arg[0])
                    and x.arg[1] == "loop"
                ),
            ),
            (UPat(Ops.INDEX, name="x"), _index_ok),
            (
                UPat(Ops.END, dtypes.void, name="x"),
                lambda x: len(x.src) >= 2 and all(r.op is Ops.RANGE for r in x.src[1:]),
            ),
            (UPat(Ops.GROUP, dtypes.void), lambda: True),
        ]
    )
    + pm_spec_shared
)


# ---------------------------------------------------------------------- what each op should look like
_EXPECT: dict[Ops, str] = {
    **dict.fromkeys(GroupOp.Unary, "1 source; output dtype = source dtype; arg None"),
    **dict.fromkeys(GroupOp.Comparison, "2 sources of one dtype; output dtype bool"),
    **dict.fromkeys(_INT_ONLY, "2 sources of one integer dtype; output dtype = that dtype"),
    **dict.fromkeys(_DIVISIONS, "2 sources of one number dtype (not bool); output dtype = that dtype"),
    **dict.fromkeys(_INT_OR_BOOL, "2 sources of one integer or bool dtype; output dtype = that dtype"),
    **dict.fromkeys(_PLAIN_BINARY, "2 sources of one dtype; output dtype = that dtype"),
    Ops.WHERE: "3 sources (bool condition, a, b); a, b and the output share one dtype",
    Ops.MULACC: "3 sources; all sources and the output share one dtype",
    Ops.CAST: "1 source; arg None; neither dtype void",
    Ops.BITCAST: "1 source; arg None; source and output dtypes of equal itemsize",
    Ops.CONST: "src (), (DEVICE,), (UNIQUE, DEVICE) or (LUNIQUE, DEVICE); arg a value of the dtype",
    Ops.VCONST: "no sources; arg a tuple of dtype.count values of the scalar dtype",
    Ops.STACK: "n scalar sources of one dtype; dtype scalar.vec(n) (an index vector takes any integers)",
    Ops.DEVICE: "no sources; dtype void; arg a device name or a non-empty tuple of names",
    **dict.fromkeys(
        (Ops.UNIQUE, Ops.LUNIQUE),
        'no sources; dtype void; arg a non-negative int (or a realize\'s ("realize", n))',
    ),
    Ops.BUFFER: "src (UNIQUE|LUNIQUE, DEVICE); arg the element count; a scalar non-void dtype",
    Ops.PARAM: (
        "arg the slot (int >= 0); src (shape vector|NOOP, DEVICE|NOOP[, vmin CONST, vmax CONST]"
        "[, NOOP(name)][, MULTI(axis)])"
    ),
    Ops.NOOP: "dtype void and no sources (arg None or a name), or one source with its dtype",
    Ops.DEFINE_VAR: "no sources; an int (or float) dtype; arg (name, min, max) with min <= max",
    Ops.BIND: "src (DEFINE_VAR, CONST) of one dtype, the CONST within the variable's range",
    **dict.fromkeys(
        (Ops.RESHAPE, Ops.EXPAND),
        "src (x, shape vector of the new shape); output dtype = x's dtype; arg None",
    ),
    **dict.fromkeys(
        (Ops.PAD, Ops.SHRINK),
        "src (x, begins vector, ends vector), an entry per dimension; dtype = x's dtype",
    ),
    Ops.PERMUTE: "1 source; arg a tuple that is a permutation of range(ndim); dtype = source dtype",
    Ops.FLIP: "1 source; arg a tuple of one bool per dimension; dtype = source dtype",
    Ops.REDUCE: "1 source; arg (ADD|MUL|MAX, tuple of distinct axes < ndim); dtype = source dtype",
    **dict.fromkeys(
        (Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH), "1 source; arg None; dtype = source dtype"
    ),
    Ops.COPY: "src (x, DEVICE); arg None; dtype = x's dtype",
    Ops.AFTER: "src (value, *effects); dtype = value's dtype",
    Ops.STORE: "src (target, value) with one element dtype; dtype void",
    Ops.SINK: "dtype void; any sources",
    Ops.TUPLE: "dtype void; arg None; any sources",
    Ops.GETTUPLE: "src (FUNCTION|TUPLE,); arg an index into the TUPLE; dtype = that element's dtype",
    Ops.FUNCTION: (
        "dtype void; src (TUPLE body, *args); arg a CallInfo; body PARAM slot i < #args with args[i]'s dtype"
    ),
    Ops.CALL: (
        "dtype void; src (SINK|PROGRAM|LINEAR|COPY|BUFFER_VIEW|CUSTOM_FUNCTION body, *args); "
        "arg a CallInfo; body PARAM slot i < #args with args[i]'s dtype"
    ),
    Ops.MULTI: "src (x,) with x's dtype, or no sources and dtype void (PARAM marker); arg the axis",
    Ops.RANGE: "in a custom kernel: src (index bound,); dtype index; arg (axis_id >= 0, 'loop')",
    Ops.INDEX: (
        "in a custom kernel: src (view of a pointer PARAM, one integer index per dimension); "
        "dtype the pointer's element dtype"
    ),
    Ops.END: "in a custom kernel: src (effect, RANGE, ...); dtype void",
    Ops.GROUP: "in a custom kernel: effects that happen together; dtype void",
}


def _shape_text(u: UOp) -> str:
    try:
        s = u._shape
    except ShapeError:
        return "<shape error>"
    return "-" if s is None else str(tuple(d if isinstance(d, int) else f"<{d.op.name}>" for d in s))


def _node_text(u: UOp) -> str:
    tag = "" if u.tag is None else f" tag={u.tag!r}"
    return f"{u.op} {u.dtype!r} arg={u.arg!r} shape={_shape_text(u)}{tag}"


_SHAPE_EXPECT: dict[Ops, str] = {
    **dict.fromkeys(
        GroupOp.Elementwise | {Ops.STORE}, "shaped sources, all of one shape (broadcast when building)"
    ),
    Ops.RESHAPE: "a shaped source; a non-negative new shape with the same number of elements",
    Ops.EXPAND: "a shaped source of the same rank; only dimensions of size 1 may grow",
    Ops.PERMUTE: "a shaped source; the order permutes exactly its axes",
    Ops.PAD: "a shaped source; one non-negative (begin, end) pair per dimension",
    Ops.SHRINK: "a shaped source; one (start, end) pair per dimension with 0 <= start <= end <= size",
    Ops.FLIP: "a shaped source; one flag per dimension",
    Ops.REDUCE: "a shaped source; every axis < its rank",
    Ops.GETTUPLE: "the selected TUPLE element has a shape that can be inferred",
}


def _message(u: UOp, index: int, total: int, problem: str, expect: str) -> str:
    lines = [
        f"invalid {u.op.name} node (#{index} of {total} in toposort order): {problem}",
        f"  node:     {u.op} {u.dtype!r} arg={u.arg!r}" + ("" if u.tag is None else f" tag={u.tag!r}"),
        f"  sources:  {len(u.src)}" + ("" if u.src else " (none)"),
    ]
    lines += [f"    src[{i}]: {_node_text(s)}" for i, s in enumerate(u.src)]
    lines.append(f"  expected: {u.op.name}: {expect}")
    return "\n".join(lines)


def _check_rules(u: UOp, spec: PatternMatcher) -> str | None:
    """None if a rule accepts `u`, else why not."""
    try:
        ret = spec.rewrite(u)
    except Exception as e:  # a malformed node may break a rule's own assumptions: report, don't crash
        return f"a rule raised {type(e).__name__}: {e}"
    if ret is True:
        return None
    return "no rule accepts this node" if ret is None else "a rule rejected this node"


def _check_shape(u: UOp) -> str | None:
    """None if shape inference succeeds for `u` (a PARAM of unknown shape is exempt), else the error."""
    if u.op is Ops.PARAM and u.src and u.src[0].op is Ops.NOOP:
        return None
    try:
        _ = u._shape
    except ShapeError as e:
        return f"shape inference failed: {type(e).__name__}: {e}"
    return None


def verify(root: UOp, spec: PatternMatcher = pm_spec_tensor) -> None:
    """Check every node under `root` (sources first, call bodies included) against `spec` and shape inference.
    Raises VerifyError naming the first invalid node; returns None if the graph is well formed."""
    nodes = list(root.toposort())
    for i, u in enumerate(nodes):
        if (problem := _check_rules(u, spec)) is not None:
            expect = _EXPECT.get(u.op, "this op is not part of the tensor-level IR")
        elif (problem := _check_shape(u)) is not None:
            expect = _SHAPE_EXPECT.get(u.op, "sources with a shape wherever this op needs one")
        else:
            continue
        raise VerifyError(_message(u, i, len(nodes), problem, expect), u, i)


def verify_new(root: UOp) -> None:
    """The rules of `verify(root)` for the nodes no earlier `verify_new` passed: the check at the door of
    realize, where a step repeated in a training loop costs a walk over its new nodes only. Shapes are left
    to shape inference, which raises its own error when a kernel needs one (and keeps symbolic sizes that
    are equal but not yet simplified apart from wrong ones). Passed nodes are marked with a fact
    (`_VERIFIED`), so the mark dies with the node."""
    nodes = list(root.toposort(gate=lambda u: not _VERIFIED.known(u)))
    for i, u in enumerate(nodes):
        if (problem := _check_rules(u, pm_spec_tensor)) is not None:
            expect = _EXPECT.get(u.op, "this op is not part of the tensor-level IR")
            raise VerifyError(_message(u, i, len(nodes), problem, expect), u, i)
    for u in nodes:
        _VERIFIED.put(u, True)


_VERIFIED: Fact[bool] = Fact("verified")  # filled by verify_new's own walk
