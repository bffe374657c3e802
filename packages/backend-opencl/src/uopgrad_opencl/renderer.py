"""The OpenCL backend's renderer: OpenCL C from core's `CStyleRenderer`, grid-style (one work-item per
output element).

The dialect differs from C99 in its tables and a few hooks: `__kernel` entry points, `__global` buffers,
OpenCL's type names (`long` is 64 bits), bools stored as `uchar` in buffers (`sizeof(bool)` is left to the
implementation, and `bool` kernel arguments are not allowed), `get_group_id`/`get_local_id`/`get_global_id`
for the grid indices, the overloaded math built-ins (`sqrt`, `exp2`, `trunc` for every float type), `as_T`
for bitcasts, and the `cl_khr_fp64` pragma when a kernel uses `double`. `#pragma OPENCL FP_CONTRACT OFF`
keeps `a*b+c` rounded twice, as REFERENCE computes it (OpenCL C lets the compiler fuse it by default).

The opt pass's vector forms (spec/opt.md §5) are OpenCL C's own vectors, through core's `VectorRenderer`:
`float16` and `long8` types, `vloadN`/`vstoreN` at any offset, `(float4)(a, b, c, d)` literals, `.s0`..`.sf`
lanes, `convert_T` conversions, comparisons that already are lane masks, and `select` for WHERE and MAX.
A device's `vector_width` (runtime.py) is one of `VECTOR_WIDTHS`; the pass makes at most 16 lanes there.

float16 never uses OpenCL's `half` type, which needs `cl_khr_fp16` (PoCL on a CPU, for one, lacks it): a
float16 buffer is `ushort` bits, a float16 value is a `float` holding a value of float16, and every op that
yields one rounds its float result to float16 (ties to even), as numpy computes float16. The conversions
are helpers in integer arithmetic, exact both ways, so loads, stores and bitcasts keep every bit pattern
(NaN payloads too) and float16 runs the same on every OpenCL device.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from uopgrad import DType, Ops, dtypes
from uopgrad.codegen import GridLimits, GridSpec, Target
from uopgrad.errors import ArgumentError, RenderError
from uopgrad.renderer import CStyleRenderer, OpTemplate
from uopgrad.renderer.vector import VectorRenderer

__all__ = ["VECTOR_WIDTHS", "OpenCLRenderer"]

# OpenCL C's vector lane counts; the opt pass makes powers of two, at most 16 on a grid target (GRID_LANES)
_CL_LANES = (2, 3, 4, 8, 16)
# the vector widths (bytes) a renderer takes: powers of two, so that every lane count the pass derives from
# one (width // itemsize, halved until it divides the loop) is a power of two; 0: no opt pass. 64 bytes
# are 16 float32 lanes, OpenCL's widest float vector (and AVX-512's register)
VECTOR_WIDTHS = frozenset({0, 8, 16, 32, 64})


def _bits(dt: DType) -> int:
    return 8 * dt.scalar().itemsize


def _shl(_r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # OpenCL masks the shift count (x << 33 is x << 1 for an int); REFERENCE gives 0 for counts outside
    # 0..bits-1, negative ones included
    return f"(((ulong)({b}))<{_bits(dt)}u?({a})<<({b}):0)"


def _shr(_r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # arithmetic for signed types; an over-wide shift gives 0, or -1 for a negative value
    fill = f"(({a})<0?-1:0)" if dt.scalar() in dtypes.sints else "0"
    return f"(((ulong)({b}))<{_bits(dt)}u?({a})>>({b}):{fill})"


def _opencl_c(code: str) -> str:
    """A core helper (written in C99) as OpenCL C: OpenCL's 64-bit type names, no static locals (a static
    function is fine: OpenCL C 1.2 allows it, and a plain `inline` one may be left undefined at link)."""
    code = code.replace("unsigned long long", "ulong").replace("long long", "long")
    return code.replace("  static const ", "  const ")


# out-of-range float -> int is undefined in OpenCL C as in C99: REFERENCE truncates and wraps modulo 2^64
# (NaN and inf give 0). The float variant runs where the device has no double; it gives the same results
# for float and half sources (fmod and the adjustments are exact).
_F2I_FLOAT = """\
static inline long __uopgrad_f2if(float x) {
  /* truncate, wrap modulo 2^64; NaN and inf give 0 */
  if (x >= -9223372036854775808.0f && x < 9223372036854775808.0f) return (long)x;
  if (!(x - x == 0.0f)) return 0;
  float r = fmod(trunc(x), 18446744073709551616.0f);
  if (r >= 9223372036854775808.0f) r -= 18446744073709551616.0f;
  if (r < -9223372036854775808.0f) r += 18446744073709551616.0f;
  return (long)r;
}"""

# float16 <-> float by bits (no `half` type): exact both ways; float -> float16 rounds to nearest even; a NaN
# keeps its sign and the top bits of its payload (numpy's rule), so bit patterns survive a load and a store
_HALF_HELPERS = {
    "__uopgrad_bits_half": """\
static inline float __uopgrad_bits_half(ushort h) {
  /* float16 bits -> float, exactly */
  uint sign = ((uint)h & 0x8000u) << 16, e = ((uint)h >> 10) & 0x1fu, m = (uint)h & 0x3ffu;
  if (e == 0x1fu) return as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0u) return as_float(sign | as_uint((float)m * 0x1p-24f));
  return as_float(sign | ((e + 112u) << 23) | (m << 13));
}""",
    "__uopgrad_half_bits": """\
static inline ushort __uopgrad_half_bits(float x) {
  /* float -> float16 bits, rounded to nearest even */
  uint f = as_uint(x), sign = (f >> 16) & 0x8000u, a = f & 0x7fffffffu;
  if (a > 0x7f800000u) return (ushort)(sign | 0x7c00u | max((a & 0x7fffffu) >> 13, 1u));
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u);
  if (a < 0x38800000u) return (ushort)(sign | (uint)rint(as_float(a) * 0x1p24f));
  uint r = a - 0x38000000u;
  return (ushort)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}""",
    "__uopgrad_half": """\
static inline float __uopgrad_half(float x) {
  /* x rounded to float16 */
  return __uopgrad_bits_half(__uopgrad_half_bits(x));
}""",
    "__uopgrad_half_d": """\
static inline float __uopgrad_half_d(double x) {
  /* a double rounded to float16 once: to float rounding to odd (exact enough for a second rounding) */
  float f = convert_float_rtz(x);
  if (f == f && (double)f != x) f = as_float(as_uint(f) | 1u);
  return __uopgrad_bits_half(__uopgrad_half_bits(f));
}""",
}

# OpenCL C keywords, types and built-in functions (those the renderer calls among them) a kernel or
# variable name must not take
_CL_RESERVED = frozenset(
    """__kernel kernel __global global __local local __constant constant __private
    private __read_only read_only __write_only write_only __read_write read_write bool char uchar short ushort
    int uint long ulong half float double size_t ptrdiff_t intptr_t uintptr_t void event_t sampler_t image1d_t
    image2d_t image3d_t complex imaginary abs abs_diff add_sat all any barrier bitselect clamp clz cross
    degrees distance dot fast_distance fast_length fast_normalize hadd length mad mad24 mad_hi mad_sat max min
    mix mul24 mul_hi normalize popcount printf radians rhadd rotate select sign smoothstep step sub_sat
    upsample fract isequal isfinite isgreater isinf isless isnan isnormal isordered isunordered signbit
    mem_fence prefetch get_group_id get_local_id get_global_id rint sqrt exp2 log2 sin trunc fmod pow
    convert_float_rtz""".split()
)
_CL_RESERVED |= {f"as_{t}" for t in "char uchar short ushort int uint long ulong float double".split()}
_CL_RESERVED_PREFIXES = (
    "get_",
    "as_",
    "convert_",
    "vload",
    "vstore",
    "atomic",
    "atom_",
    "async_",
    "read_image",
    "write_image",
    "native_",
    "half_",
    "work_group_",
    "sub_group_",
)


class OpenCLRenderer(VectorRenderer):
    """OpenCL C for one device: grid-style, one `__kernel` per program, launched through pyopencl."""

    device = "CL"
    # the types of values (registers); buffers of bool are uchar, buffers of float16 ushort (`storage`)
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "bool",
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.int16: "short",
        dtypes.uint16: "ushort",
        dtypes.int32: "int",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
        dtypes.float16: "float",
        dtypes.bfloat16: "float",
        dtypes.float32: "float",
        dtypes.float64: "double",
    }
    storage: ClassVar[dict[DType, DType]] = {
        dtypes.bool: dtypes.uint8,
        dtypes.float16: dtypes.uint16,
        dtypes.bfloat16: dtypes.uint16,
    }
    # float16 values live in buffers as their bits (_HALF_HELPERS convert)
    bits_codec: ClassVar[dict[DType, tuple[str, str]]] = {
        **CStyleRenderer.bits_codec,
        dtypes.float16: ("__uopgrad_bits_half", "__uopgrad_half_bits"),
    }
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {
        **CStyleRenderer.code_for_op,
        Ops.SHL: _shl,
        Ops.SHR: _shr,
    }
    helpers: ClassVar[dict[str, str]] = {
        **{name: _opencl_c(code) for name, code in CStyleRenderer.helpers.items()},
        "__uopgrad_f2if": _F2I_FLOAT,
        **_HALF_HELPERS,
    }
    keywords: ClassVar[frozenset[str]] = CStyleRenderer.keywords | _CL_RESERVED
    prefix_lines: ClassVar[tuple[str, ...]] = ("#pragma OPENCL FP_CONTRACT OFF",)
    kernel_prefix = "__kernel void"
    local_qualifier = "__local"
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"  # it also orders local memory
    buffer_qualifier = "__global "
    special_index: ClassVar[dict[str, str]] = {
        "gidx": "get_group_id({0})",
        "lidx": "get_local_id({0})",
        "idx": "get_global_id({0})",
    }
    half_via_float = True  # float16 ops are computed in float and rounded once, as numpy does

    def __init__(self, grid: GridSpec | None = None, vector_width: int = 0) -> None:
        self.grid = grid if grid is not None else GridLimits()
        if vector_width not in VECTOR_WIDTHS:
            raise ArgumentError(
                f"OpenCLRenderer(vector_width={vector_width}): OpenCL's vectors take one of "
                f"{sorted(VECTOR_WIDTHS)} bytes (0: no opt pass)"
            )
        self.vector_width = vector_width

    def target(self, dtypes: frozenset[DType]) -> Target:
        """Core's target, with no vector width where work-groups split reduces (local memory): the group
        pass splits a scalar reduce over work-items, which the opt pass's vector accumulators would keep in
        one work-item."""
        t = super().target(dtypes)
        return replace(t, vector_width=0) if t.local_memory > 0 else t

    # ------------------------------------------------------------------ vector forms (spec/opt.md §5)
    def vector_name(self, dt: DType, unaligned: bool = False) -> str:
        """OpenCL's own vector types: `float4`, `long8`, `uchar16` (any alignment is vload's business)."""
        if dt.count not in _CL_LANES:
            raise RenderError(f"OpenCL C has no vector of {dt.count} lanes ({dt}); it has {_CL_LANES}")
        return f"{self.type_map[dt.scalar()]}{dt.count}"

    def vec_literal(self, t: str, lanes: Sequence[str]) -> str:
        """A vector literal `(float4)(a, b, c, d)`; `(float4)(a)` where every lane is `a` (a broadcast)."""
        return f"(({t})({lanes[0] if len(set(lanes)) == 1 else ', '.join(lanes)}))"

    def vec_lane(self, x: str, k: int) -> str:
        """Lane k is `.s0` ... `.sf`."""
        return f"{x}.s{k:x}"

    def vec_convert(self, x: str, t: str) -> str:
        """`convert_T`, whose default rounding is C's (to nearest for int -> float and double -> float)."""
        return f"convert_{t}({x})"

    def vec_select(self, t: str, bits: str, m: str, a: str, b: str) -> str:
        """`select(b, a, m)` takes a where the top bit of m's lane is set: the lane's bits, exactly."""
        return f"select({b}, {a}, {m})"

    def vec_load(self, buf: str, offset: str, dt: DType) -> str:
        """A vector load is `vloadN`, which reads at any element offset."""
        return f"vload{dt.count}(0, {buf}+{offset})"

    def vec_store(self, buf: str, offset: str, value: str, dt: DType) -> str:
        """A vector store is `vstoreN`, which writes at any element offset."""
        return f"vstore{dt.count}({value}, 0, {buf}+{offset});"

    # ------------------------------------------------------------------ dialect hooks
    def function_name(self, name: str) -> str:
        """C's rules with OpenCL's keywords (`keywords`), and no prefix of a family of built-ins."""
        ident = super().function_name(name)
        return f"k_{ident}" if ident.startswith(_CL_RESERVED_PREFIXES) else ident

    def math_fn(self, name: str, dt: DType) -> str:
        """OpenCL's math built-ins are overloaded for float, double and half: one name for all."""
        return name

    def render_int(self, v: int, dt: DType) -> str:
        """C's literals with OpenCL's suffixes: `long` is 64 bits (`l`, `ul`); `ll` is not OpenCL C."""
        text = super().render_int(v, dt)
        return text.replace("ull", "ul").replace("ll", "l")

    def round_to(self, dt: DType, expr: str) -> str:
        """`expr` (a float) rounded to float16 where `dt` is float16."""
        return f"__uopgrad_half({expr})" if dt.scalar() == dtypes.float16 else expr

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        """C's casts; float -> int through the float helper unless the source is a double; to float16 by
        rounding (a double directly, never through float)."""
        if dst.scalar() == dtypes.float16:
            return (
                f"__uopgrad_half_d({x})" if src.scalar() == dtypes.float64 else f"__uopgrad_half((float){x})"
            )
        if dtypes.is_float(src) and dtypes.is_int(dst) and src.scalar() != dtypes.float64:
            return f"(({self.ctype(dst)})__uopgrad_f2if((float){x}))"
        return super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """`as_T(x)`; float16 through its bits; bool has no `as_` function, and its bits are 0 or 1: a
        conversion is the same."""
        if dst.scalar() == dtypes.bool:
            return f"({x}!=0)"
        if src.scalar() == dtypes.bool:
            return f"(({self.ctype(dst)}){x})"
        if dtypes.bfloat16 in (src.scalar(), dst.scalar()):  # through its bits (core's helpers)
            return super().render_bitcast(x, src, dst)
        if src.scalar() == dtypes.float16:
            return f"(({self.ctype(dst)})__uopgrad_half_bits({x}))"
        if dst.scalar() == dtypes.float16:
            return f"__uopgrad_bits_half((ushort){x})"
        return f"as_{self.ctype(dst)}(({self.ctype(src)}){x})"

    def render_kernel(
        self, name: str, params: Sequence[str], body: Sequence[str], prefix: Sequence[str]
    ) -> str:
        """The source, with cl_khr_fp64 enabled where the kernel uses double."""
        lines = list(prefix)
        if re.search(r"\bdouble\b", "\n".join([*params, *body, *lines])):
            lines.insert(0, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return super().render_kernel(name, params, body, lines)
