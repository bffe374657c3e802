"""Vector types for the C-family renderers (layer 12): what the opt pass's vector forms print as.

`VectorRenderer` is a `CStyleRenderer` that prints every vector form of the opt pass (the handler table at
the end of this module) through a few spelling hooks: a vector type's name, a literal of lanes, a lane
read, a lane-wise conversion, a comparison's mask and a select. A dialect supplies those; OpenCL C's
native vectors are one (the OpenCL backend's renderer), GCC's vector extensions the other.

`GCCVectorRenderer` is the one for compilers with GCC's vector extensions (gcc, clang): a vector of n
`float`s is `__uopgrad_float_n`, a `vector_size` typedef, and lane-wise + - * / & | ^ and unary - are C's
operators on it. Vector loads and stores go through a copy of the type aligned like its element
(`..._nu`), so any element offset may start one. STACK prints a compound literal of its lanes, GEP an
element read, a vector constant its value in every lane.

A bool vector is a lane mask: a vector of signed integers, all ones where true, as GCC's (and OpenCL's)
vector comparisons make them. Its lane width is that of the values it was compared from (`mask_bytes`);
where a use needs another width (a float64 select by a float32 comparison) it is converted, which keeps
all-ones all-ones. C has no `?:` on vectors, so in C WHERE and MAX are bitwise selects by a mask on the
values' bits (a cast between vector types of one size reinterprets them): bit for bit the scalar
templates' choices.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import ClassVar

from uopgrad.codegen import Program
from uopgrad.dtype import DType, dtypes
from uopgrad.errors import RenderError
from uopgrad.ops import GroupOp, Ops
from uopgrad.renderer.cstyle import CStyleRenderer, _Handler, _State
from uopgrad.uop import UOp

__all__ = ["GCCVectorRenderer", "VectorRenderer", "mask_bytes"]

_SIGNED = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
_INFIX = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.MUL: "*",
    Ops.FDIV: "/",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.CMPEQ: "==",
}
# bool ops whose mask operands share the result's lane width
_MASK_OPS = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.NEG, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE})
_SELECT = "#define __uopgrad_vsel(T, I, m, a, b) ((T)((((I)(a))&(m))|(((I)(b))&~(m))))"
# `a > b ? a : b` on GCC's vectors is x86's maxps/maxpd exactly (a tie and a NaN b give b), which GCC and
# clang reach through their builtins; (scalar, lanes) -> (the macro that enables it, GCC's form, clang's)
_X86_MAX = {
    ("float", 4): ("__SSE__", "__builtin_ia32_maxps(a, b)", "__builtin_ia32_maxps(a, b)"),
    ("double", 2): ("__SSE2__", "__builtin_ia32_maxpd(a, b)", "__builtin_ia32_maxpd(a, b)"),
    ("float", 8): ("__AVX__", "__builtin_ia32_maxps256(a, b)", "__builtin_ia32_maxps256(a, b)"),
    ("double", 4): ("__AVX__", "__builtin_ia32_maxpd256(a, b)", "__builtin_ia32_maxpd256(a, b)"),
    ("float", 16): (
        "__AVX512F__",
        "__builtin_ia32_maxps512_mask(a, b, a, (unsigned short)-1, 4)",  # all lanes, the current rounding
        "__builtin_ia32_maxps512(a, b, 4)",
    ),
    ("double", 8): (
        "__AVX512F__",
        "__builtin_ia32_maxpd512_mask(a, b, a, (unsigned char)-1, 4)",
        "__builtin_ia32_maxpd512(a, b, 4)",
    ),
}


def _x86_max(scalar: str, n: int) -> tuple[str, str]:
    """The name and the definition of the macro for `a > b ? a : b` on `n` lanes of `scalar` (a select
    where the instruction is not there)."""
    name, (feature, gcc, clang) = f"__uopgrad_vmax_{scalar}_{n}", _X86_MAX[(scalar, n)]
    t, bits = f"__uopgrad_{scalar}_{n}", f"__uopgrad_{'int' if scalar == 'float' else 'long_long'}_{n}"
    fallback = f"#define {name}(a, b) __uopgrad_vsel({t}, {bits}, (({bits})((a)>(b))), (a), (b))"
    if gcc == clang:
        return name, f"#if defined({feature})\n#define {name}(a, b) (({t}){gcc})\n#else\n{fallback}\n#endif"
    return name, (
        f"#if defined({feature}) && defined(__clang__)\n#define {name}(a, b) (({t}){clang})\n"
        f"#elif defined({feature})\n#define {name}(a, b) (({t}){gcc})\n"
        f"#else\n{fallback}\n#endif"
    )


def _is_mask(dt: DType) -> bool:
    return dt.count > 1 and dt.scalar() == dtypes.bool


def _natural(u: UOp) -> int | None:
    """The lane width a mask gets from what makes it: a comparison or a cast from values of some width."""
    if u.op is Ops.CAST or (u.op in GroupOp.Comparison and not _is_mask(u.src[0].dtype)):
        return int(u.src[0].dtype.scalar().itemsize)
    return None


def _wanted(u: UOp, users: list[UOp], widths: dict[UOp, int]) -> int:
    """The lane width for a broadcast mask (a STACK): the first user's need that is known, else 4."""
    for c in users:
        if c.op is Ops.WHERE and c.src[0] is u and not _is_mask(c.src[1].dtype):
            return int(c.src[1].dtype.scalar().itemsize)
        if c.op in _MASK_OPS and (w := next((widths[s] for s in c.src if s in widths), None)) is not None:
            return w
    return 4


@functools.lru_cache(maxsize=16)
def mask_bytes(uops: tuple[UOp, ...]) -> dict[UOp, int]:
    """The lane width in bytes of every mask (bool vector) of a program."""
    users: dict[UOp, list[UOp]] = defaultdict(list)
    for u in uops:
        for s in u.src:
            users[s].append(u)
    widths = {u: w for u in uops if _is_mask(u.dtype) and (w := _natural(u)) is not None}
    for u in uops:
        if _is_mask(u.dtype) and u not in widths:
            if u.op is Ops.STACK:
                widths[u] = _wanted(u, users[u], widths)
            else:  # a logic op on masks, or a select between them
                widths[u] = widths[u.src[1] if u.op is Ops.WHERE else u.src[0]]
    return widths


class VectorRenderer(CStyleRenderer):
    """The opt pass's vector forms for a C-family dialect: one handler per form (the table at the end of this
    module), printed through the spelling hooks below, which a dialect overrides."""

    def vector_name(self, dt: DType, unaligned: bool = False) -> str:
        """The type name of vector dtype `dt` (`unaligned`: a copy aligned like one element, where the
        dialect needs one for loads and stores at any offset)."""
        raise RenderError(f"{type(self).__name__} names no vector types: a dialect overrides `vector_name`")

    def ctype(self, dt: DType) -> str:
        """A vector dtype is its vector type; a scalar one as in CStyleRenderer."""
        return self.vector_name(dt.base) if dt.base.count > 1 else super().ctype(dt)

    def int_vector(self, width: int, count: int) -> str:
        """The vector of `count` signed integers of `width` bytes: a mask's type, the bits of a select."""
        return self.vector_name(_SIGNED[width].vec(count))

    def render_const(self, value: object, dt: DType) -> str:
        """A vector constant: the literal in every lane."""
        lane = super().render_const(value, dt.scalar())
        return lane if dt.count == 1 else self.vec_literal(self.vector_name(dt), [lane] * dt.count)

    # ------------------------------------------------------------------ the dialect's spellings
    def vec_literal(self, t: str, lanes: Sequence[str]) -> str:
        """A value of vector type `t` from its lanes' expressions."""
        raise RenderError(f"{type(self).__name__} has no vector literals: a dialect overrides `vec_literal`")

    def vec_zero(self, dt: DType) -> str:
        """The zero of vector dtype `dt`, compared with to cast to bool."""
        return self.render_const(0, dt)

    def vec_lane(self, x: str, k: int) -> str:
        """Lane `k` of vector `x`."""
        raise RenderError(f"{type(self).__name__} has no vector lanes: a dialect overrides `vec_lane`")

    def vec_convert(self, x: str, t: str) -> str:
        """Vector `x` converted lane by lane to vector type `t`, as C converts a scalar."""
        raise RenderError(
            f"{type(self).__name__} has no vector conversions: a dialect overrides `vec_convert`"
        )

    def vec_mask(self, t: str, cmp: str) -> str:
        """A lane-wise comparison `cmp` as a value of mask type `t` (the signed integers it yields)."""
        return cmp

    def vec_select(self, t: str, bits: str, m: str, a: str, b: str) -> str:
        """Lane-wise `m ? a : b` of vectors of type `t`, picking every lane's bits exactly (`bits`: the
        integer vector of `t`'s size, `m` a mask of its lane width)."""
        raise RenderError(f"{type(self).__name__} has no vector select: a dialect overrides `vec_select`")

    def vec_max(self, dt: DType, a: str, b: str) -> str:
        """Lane-wise `a > b ? a : b` of float vectors of dtype `dt` (a tie and a NaN in b keep b): MAX
        where `a` is never NaN (codegen/reduce.py `never_nan`). A select by the comparison's mask; a
        dialect may have one instruction for it."""
        bits = self.int_vector(dt.scalar().itemsize, dt.count)
        return self.vec_select(self.ctype(dt), bits, self.vec_mask(bits, f"({a}>{b})"), a, b)

    def vec_keep(self, t: str, bits: str, m: str, a: str, zero: str) -> str:
        """Lane-wise `m ? a : zero` of vectors of type `t` where `zero` has all bits zero: by default the
        select; a dialect may AND the bits with the mask."""
        return self.vec_select(t, bits, m, a, zero)

    def vec_load(self, buf: str, offset: str, dt: DType) -> str:
        """An expression reading `dt.count` elements of buffer `buf` from element `offset` on (any offset)."""
        raise RenderError(f"{type(self).__name__} has no vector loads: a dialect overrides `vec_load`")

    def vec_store(self, buf: str, offset: str, value: str, dt: DType) -> str:
        """A statement writing vector `value` to buffer `buf` from element `offset` on (any offset)."""
        raise RenderError(f"{type(self).__name__} has no vector stores: a dialect overrides `vec_store`")

    def render_load(self, buf: str, offset: str, dt: DType) -> str:
        """A scalar load as in CStyleRenderer, a vector one the dialect's `vec_load`."""
        return super().render_load(buf, offset, dt) if dt.count == 1 else self.vec_load(buf, offset, dt)

    def render_store(self, buf: str, offset: str, value: str, dt: DType) -> str:
        """A scalar store as in CStyleRenderer, a vector one the dialect's `vec_store`."""
        if dt.count == 1:
            return super().render_store(buf, offset, value, dt)
        return self.vec_store(buf, offset, value, dt)

    def _value(self, st: _State, u: UOp, prefix: str, expr: str) -> None:
        """As CStyleRenderer's, with a mask typed as its integer vector."""
        if not _is_mask(u.dtype):
            super()._value(st, u, prefix, expr)
            return
        name = st.fresh(prefix)
        st.emit(f"const {self.int_vector(mask_bytes(st.uops)[u], u.dtype.count)} {name} = {expr};")
        st.names[u] = name

    extra_handlers: ClassVar[dict[Ops, _Handler]] = {}


class GCCVectorRenderer(VectorRenderer):
    """C with GCC vector extensions for the vector forms of uopgrad.codegen.opt."""

    helpers: ClassVar[dict[str, str]] = {
        **CStyleRenderer.helpers,
        "__uopgrad_vsel": _SELECT,
        **dict(_x86_max(scalar, n) for scalar, n in _X86_MAX),  # after the select they fall back on
    }

    def vector_name(self, dt: DType, unaligned: bool = False) -> str:
        """The typedef of vector dtype `dt` (`unaligned`: the copy aligned like one element)."""
        scalar = re.sub(r"\W", "_", self.type_map[dt.scalar()])
        return f"__uopgrad_{scalar}_{dt.count}" + ("u" if unaligned else "")

    def vec_literal(self, t: str, lanes: Sequence[str]) -> str:
        """A compound literal."""
        return f"(({t}){{{', '.join(lanes)}}})"

    def vec_zero(self, dt: DType) -> str:
        """A compound literal of one 0 (the other lanes are zero-initialised)."""
        return f"({self.ctype(dt)}){{0}}"

    def vec_lane(self, x: str, k: int) -> str:
        """GCC vectors are subscripted like arrays."""
        return f"{x}[{k}]"

    def vec_convert(self, x: str, t: str) -> str:
        """`__builtin_convertvector`: C's scalar conversion in every lane."""
        return f"__builtin_convertvector({x}, {t})"

    def vec_mask(self, t: str, cmp: str) -> str:
        """A cast: GCC's comparison already yields that type (spelled differently)."""
        return f"(({t}){cmp})"

    def vec_select(self, t: str, bits: str, m: str, a: str, b: str) -> str:
        """C has no `?:` on vectors: a bitwise select on the values' bits (a cast between vector types of
        one size reinterprets them)."""
        return f"__uopgrad_vsel({t}, {bits}, {m}, {a}, {b})"

    def vec_keep(self, t: str, bits: str, m: str, a: str, zero: str) -> str:
        """`a`'s bits AND the mask (one instruction where the select takes two or a blend)."""
        return f"(({t})((({bits})({a}))&({m})))"

    def vec_max(self, dt: DType, a: str, b: str) -> str:
        """x86's max instruction where the target has it (a macro that tests), else the select."""
        scalar = self.type_map[dt.scalar()]
        if (scalar, dt.count) in _X86_MAX:
            return f"__uopgrad_vmax_{scalar}_{dt.count}({a}, {b})"
        return super().vec_max(dt, a, b)

    def vec_load(self, buf: str, offset: str, dt: DType) -> str:
        """A vector load reads `dt.count` elements from `offset` on, at any alignment."""
        return f"(*(const {self.vector_name(dt, True)}*)({buf}+{offset}))"

    def vec_store(self, buf: str, offset: str, value: str, dt: DType) -> str:
        """A vector store writes `dt.count` elements from `offset` on, at any alignment."""
        return f"*({self.vector_name(dt, True)}*)({buf}+{offset}) = {value};"

    def render(self, program: Program) -> str:
        """The source, after the typedefs of the vector types the program uses (and the integer vectors
        its masks and selects are made of)."""
        src = super().render(program)
        vecs = {u.dtype.base for u in program.uops if u.dtype.base.count > 1 and not _is_mask(u.dtype)}
        vecs |= {
            _SIGNED[u.dtype.scalar().itemsize].vec(u.dtype.count)
            for u in program.uops  # select bits
            if u.op in (Ops.WHERE, Ops.MAX) and u.dtype.count > 1 and not _is_mask(u.dtype)
        }
        vecs |= {_SIGNED[w].vec(u.dtype.count) for u, w in mask_bytes(program.uops).items()}
        lines = []
        for dt in sorted(vecs, key=repr):
            size, scalar = dt.count * dt.scalar().itemsize, self.type_map[dt.scalar()]
            lines.append(f"typedef {scalar} {self.vector_name(dt)} __attribute__((vector_size({size})));")
            lines.append(
                f"typedef {scalar} {self.vector_name(dt, True)} "
                f"__attribute__((vector_size({size}), aligned({dt.scalar().itemsize})));"
            )
        return "\n".join([*lines, src]) if lines else src


def _mask_as(r: VectorRenderer, st: _State, m: UOp, width: int) -> str:
    """Mask `m` with lanes of `width` bytes (converted where it has another width)."""
    if mask_bytes(st.uops)[m] == width:
        return st.names[m]
    return r.vec_convert(st.names[m], r.int_vector(width, m.dtype.count))


def _stack(r: CStyleRenderer, st: _State, u: UOp) -> None:
    assert isinstance(r, VectorRenderer)
    lanes = [f"-({st.names[s]})" if _is_mask(u.dtype) else st.names[s] for s in u.src]
    r._value(st, u, "vec", r.vec_literal(_type(r, st, u), lanes))


def _type(r: VectorRenderer, st: _State, u: UOp) -> str:
    return r.int_vector(mask_bytes(st.uops)[u], u.dtype.count) if _is_mask(u.dtype) else r.ctype(u.dtype)


def _gep(r: CStyleRenderer, st: _State, u: UOp) -> None:
    assert isinstance(r, VectorRenderer)
    r._value(st, u, "alu", r.vec_lane(st.names[u.src[0]], int(u.arg[0])))


def _select(r: VectorRenderer, st: _State, u: UOp, mask: str, a: str, b: str) -> str:
    """Lane-wise `mask ? a : b` on the bits of a and b (values of u's dtype)."""
    t = _type(r, st, u)
    bits = t if _is_mask(u.dtype) else r.int_vector(u.dtype.scalar().itemsize, u.dtype.count)
    return r.vec_select(t, bits, mask, a, b)


def _zero_bits(u: UOp) -> bool:
    """Whether `u` is a constant whose every lane has all bits zero (0, +0.0; not -0.0)."""
    lanes = u.src if u.op is Ops.STACK else (u,)
    return all(x.op is Ops.CONST and x.arg == 0 and math.copysign(1.0, float(x.arg)) > 0 for x in lanes)


def _vector_alu(r: VectorRenderer, st: _State, u: UOp) -> str:
    """The vector form of ALU op `u` (as the scalar template computes it in each lane)."""
    xs = [st.names[s] for s in u.src]
    if _is_mask(u.dtype) and u.op in _MASK_OPS:  # masks of one width in, a mask out
        w = mask_bytes(st.uops)[u]
        xs = [_mask_as(r, st, s, w) if _is_mask(s.dtype) else st.names[s] for s in u.src]
    if u.op is Ops.WHERE:
        width = mask_bytes(st.uops)[u] if _is_mask(u.dtype) else u.dtype.scalar().itemsize
        m = _mask_as(r, st, u.src[0], width)
        if not _is_mask(u.dtype) and _zero_bits(u.src[2]):  # m ? a : 0
            return r.vec_keep(r.ctype(u.dtype), r.int_vector(width, u.dtype.count), m, xs[1], xs[2])
        if not _is_mask(u.dtype) and _zero_bits(u.src[1]):  # m ? 0 : b, that is ~m ? b : 0
            return r.vec_keep(r.ctype(u.dtype), r.int_vector(width, u.dtype.count), f"(~{m})", xs[2], xs[1])
        return _select(r, st, u, m, xs[1], xs[2])
    if u.op is Ops.NEG:
        return f"(~{xs[0]})" if _is_mask(u.dtype) else f"(-{xs[0]})"
    if u.op is Ops.MAX:  # the scalar template: a if a is NaN or a > b, else b
        if dtypes.is_float(u.dtype) and st.never_nan(u.src[0]):
            return r.vec_max(u.dtype, xs[0], xs[1])  # a > b ? a : b, the same choice
        m = f"(({xs[0]}!={xs[0]})|({xs[0]}>{xs[1]}))" if dtypes.is_float(u.dtype) else f"({xs[0]}>{xs[1]})"
        bits = r.int_vector(u.dtype.scalar().itemsize, u.dtype.count)
        return _select(r, st, u, r.vec_mask(bits, m), xs[0], xs[1])
    expr = f"({xs[0]}{_INFIX[u.op]}{xs[1]})"
    return r.vec_mask(_type(r, st, u), expr) if u.op in GroupOp.Comparison else expr


def _alu(r: CStyleRenderer, st: _State, u: UOp) -> None:
    if u.dtype.count == 1:
        CStyleRenderer._alu(r, st, u)
        return
    assert isinstance(r, VectorRenderer)
    r._value(st, u, "alu", _vector_alu(r, st, u))


def _cast(r: CStyleRenderer, st: _State, u: UOp) -> None:
    if u.dtype.count == 1:
        CStyleRenderer._cast(r, st, u)
        return
    assert isinstance(r, VectorRenderer)
    x, src = st.names[u.src[0]], u.src[0].dtype
    if _is_mask(u.dtype):  # x != 0, as the scalar form
        expr = r.vec_mask(_type(r, st, u), f"({x}!={r.vec_zero(src)})")
    elif _is_mask(src):  # all-ones lanes -> 1: then the C conversion
        expr = r.vec_convert(f"-({x})", r.ctype(u.dtype))
    else:
        expr = r.vec_convert(x, r.ctype(u.dtype))
    r._value(st, u, "cast", expr)


# how each vector form is printed, through the dialect's spellings
VectorRenderer.extra_handlers = {
    Ops.STACK: _stack,
    Ops.GEP: _gep,
    Ops.CAST: _cast,
    **{op: _alu for op in (*_INFIX, Ops.NEG, Ops.MAX, Ops.WHERE)},
}
