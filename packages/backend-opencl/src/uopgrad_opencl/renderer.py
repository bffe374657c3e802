"""The OpenCL backend's renderer: OpenCL C from core's `CStyleRenderer`, grid-style (one work-item per
output element).

The dialect differs from C99 in its tables and a few hooks: `__kernel` entry points, `__global` buffers,
OpenCL's type names (`long` is 64 bits), bools stored as `uchar` in buffers (`sizeof(bool)` is left to the
implementation, and `bool` kernel arguments are not allowed), `get_group_id`/`get_local_id`/`get_global_id`
for the grid indices, the overloaded math built-ins (`sqrt`, `exp2`, `trunc` for every float type), `as_T`
for bitcasts, and the `cl_khr_fp16`/`cl_khr_fp64` pragmas emitted when a kernel uses `half`/`double`.
`#pragma OPENCL FP_CONTRACT OFF` keeps `a*b+c` rounded twice, as REFERENCE computes it (OpenCL C lets the
compiler fuse it by default).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from uopgrad import DType, Ops, dtypes
from uopgrad.codegen import GridLimits, GridSpec
from uopgrad.renderer import CStyleRenderer, OpTemplate

__all__ = ["OpenCLRenderer"]


def _bits(dt: DType) -> int:
    return 8 * dt.scalar().itemsize


def _shl(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # OpenCL masks the shift count (x << 33 is x << 1 for an int); REFERENCE gives 0 for counts outside
    # 0..bits-1, negative ones included
    return f"(((ulong)({b}))<{_bits(dt)}u?({a})<<({b}):0)"


def _shr(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # arithmetic for signed types; an over-wide shift gives 0, or -1 for a negative value
    fill = f"(({a})<0?-1:0)" if dt.scalar() in dtypes.sints else "0"
    return f"(((ulong)({b}))<{_bits(dt)}u?({a})>>({b}):{fill})"


def _opencl_c(code: str) -> str:
    """A core helper (written in C99) as OpenCL C: OpenCL's 64-bit type names, no static locals."""
    code = code.replace("unsigned long long", "ulong").replace("long long", "long")
    return code.replace("static inline ", "inline ").replace("static const ", "const ")


# out-of-range float -> int is undefined in OpenCL C as in C99: REFERENCE truncates and wraps modulo 2^64
# (NaN and inf give 0). The float variant runs where the device has no double; it gives the same results
# for float and half sources (fmod and the adjustments are exact).
_F2I_FLOAT = """\
inline long __uopgrad_f2if(float x) {
  /* truncate, wrap modulo 2^64; NaN and inf give 0 */
  if (x >= -9223372036854775808.0f && x < 9223372036854775808.0f) return (long)x;
  if (!(x - x == 0.0f)) return 0;
  float r = fmod(trunc(x), 18446744073709551616.0f);
  if (r >= 9223372036854775808.0f) r -= 18446744073709551616.0f;
  if (r < -9223372036854775808.0f) r += 18446744073709551616.0f;
  return (long)r;
}"""

# OpenCL C keywords, types and built-in functions a kernel or variable name must not take
_CL_RESERVED = frozenset("""__kernel kernel __global global __local local __constant constant __private
    private __read_only read_only __write_only write_only __read_write read_write bool char uchar short ushort
    int uint long ulong half float double size_t ptrdiff_t intptr_t uintptr_t void event_t sampler_t image1d_t
    image2d_t image3d_t complex imaginary abs abs_diff add_sat all any barrier bitselect clamp clz cross
    degrees distance dot fast_distance fast_length fast_normalize hadd length mad mad24 mad_hi mad_sat max min
    mix mul24 mul_hi normalize popcount printf radians rhadd rotate select sign smoothstep step sub_sat
    upsample fract isequal isfinite isgreater isinf isless isnan isnormal isordered isunordered signbit
    mem_fence prefetch""".split())
_CL_RESERVED_PREFIXES = ("get_", "as_", "convert_", "vload", "vstore", "atomic", "atom_", "async_",
                         "read_image", "write_image", "native_", "half_", "work_group_", "sub_group_")


class OpenCLRenderer(CStyleRenderer):
    """OpenCL C for one device: grid-style, one `__kernel` per program, launched through pyopencl."""

    device = "CL"
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
        dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
        dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double",
    }
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {**CStyleRenderer.code_for_op, Ops.SHL: _shl,
                                                    Ops.SHR: _shr}
    helpers: ClassVar[dict[str, str]] = {
        **{name: _opencl_c(code) for name, code in CStyleRenderer.helpers.items()},
        "__uopgrad_f2if": _F2I_FLOAT,
    }
    prefix_lines: ClassVar[tuple[str, ...]] = ("#pragma OPENCL FP_CONTRACT OFF",)
    kernel_prefix = "__kernel void"
    buffer_qualifier = "__global "
    special_index: ClassVar[dict[str, str]] = {
        "gidx": "get_group_id({0})", "lidx": "get_local_id({0})", "idx": "get_global_id({0})",
    }
    # half arithmetic is done in float and rounded once per op, as numpy does (also where cl_khr_fp16 has
    # native half ALU: its results are the same for + - * / sqrt, and transcendental ones would differ)
    half_via_float = True

    def __init__(self, grid: GridSpec | None = None) -> None:
        self.grid = grid if grid is not None else GridLimits()

    # ------------------------------------------------------------------ dialect hooks
    def function_name(self, name: str) -> str:
        """C's rules, plus OpenCL's keywords and built-in function names."""
        ident = super().function_name(name)
        return f"k_{ident}" if ident in _CL_RESERVED or ident.startswith(_CL_RESERVED_PREFIXES) else ident

    def math_fn(self, name: str, dt: DType) -> str:
        """OpenCL's math built-ins are overloaded for float, double and half: one name for all."""
        return name

    def render_int(self, v: int, dt: DType) -> str:
        """C's literals with OpenCL's suffixes: `long` is 64 bits (`l`, `ul`); `ll` is not OpenCL C."""
        text = super().render_int(v, dt)
        return text.replace("ull", "ul").replace("ll", "l")

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        """C's casts; float -> int through the float helper unless the source is a double."""
        if dtypes.is_float(src) and dtypes.is_int(dst) and src.scalar() != dtypes.float64:
            return f"(({self.ctype(dst)})__uopgrad_f2if((float){x}))"
        return super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """`as_T(x)`; bool has no `as_` function, and its bits are 0 or 1: a conversion is the same."""
        if dst.scalar() == dtypes.bool:
            return f"({x}!=0)"
        if src.scalar() == dtypes.bool:
            return f"(({self.ctype(dst)}){x})"
        return f"as_{self.ctype(dst)}(({self.ctype(src)}){x})"

    def render_param(self, slot: int, dt: DType, writable: bool) -> str:
        """`__global float* restrict data0`; bool buffers are `uchar` (0 or 1 per element)."""
        if dt.base.scalar() == dtypes.bool:
            return super().render_param(slot, dtypes.uint8, writable)
        return super().render_param(slot, dt, writable)

    def render_kernel(self, name: str, params: Sequence[str], body: Sequence[str],
                      prefix: Sequence[str]) -> str:
        """The source, with the extension pragmas for the float types the kernel names."""
        text = "\n".join([*params, *body, *prefix])
        exts = [f"#pragma OPENCL EXTENSION {ext} : enable" for ext, word in
                (("cl_khr_fp64", "double"), ("cl_khr_fp16", "half")) if re.search(rf"\b{word}\b", text)]
        return super().render_kernel(name, params, body, [*exts, *prefix])
