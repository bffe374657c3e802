"""The CUDA backend's renderer: CUDA C++ from core's `CStyleRenderer`, grid-style (one thread per output
element, blocks of `local_size` threads).

The dialect differs from C99 in its tables and a few hooks: `extern "C" __global__` entry points with
`__launch_bounds__` of the block's size, `__restrict__` buffers, `blockIdx`/`threadIdx` for the grid
indices, C++'s `bool`, `__shared__` arrays for DEFINE_LOCAL and `__syncthreads()` for BARRIER, the
`__int_as_float` family for bitcasts and for inf/NaN (NVRTC has no <math.h> macros), and `__device__`
helpers. Every source is also valid host C++ for the emulator (emulator.py), which builds it unchanged.

Signed wrap-around is made defined in the source: NVRTC has no `-fwrapv`, and C++ leaves signed overflow
undefined, so 32- and 64-bit signed `+ - * <<` and negation are computed in the unsigned type of the same
width and converted back (modulo 2^n, as REFERENCE wraps). Narrower types are promoted to int first and
cannot overflow there.

float16 is the OpenCL backend's scheme (no `half` type, no cuda_fp16.h): a float16 buffer is `unsigned short`
bits, a float16 value is a `float` holding a value of float16, and every op that yields one rounds its float
result to float16 (ties to even), as numpy computes float16. The conversions are integer helpers, exact
both ways, so bit patterns (NaN payloads too) survive loads, stores and bitcasts, on the GPU and on the host.
bfloat16 is held the same way with core's helpers.

Tensor cores (codegen.tc, spec/opt.md §6): a WMMA element is rendered as one call per lane's fragment of a
helper (`MMA_HELPERS`) that is `mma.sync.m16n8k16` inline PTX under `__CUDA_ARCH__` and, on the host, the
stated float32 summation; the target declares the shape where the architecture has it (`tensor_core_shapes`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Protocol

from uopgrad import DType, Ops, UOp, dtypes
from uopgrad.codegen import GridLimits, GridSpec, Program
from uopgrad.codegen.target import TensorCoreShape
from uopgrad.errors import RenderError
from uopgrad.renderer import CStyleRenderer, OpTemplate

__all__ = ["CUDARenderer", "HALF_HELPERS", "MMA_HELPERS", "tensor_core_shapes"]

_BOUNDS = "__UOPGRAD_LAUNCH_BOUNDS__"  # replaced by the block's size once a kernel is rendered


def _unsigned(dt: DType) -> str | None:
    """The type a wrapping int op is computed in: the unsigned type of a 32/64-bit signed int's width,
    `unsigned int` for 8/16-bit ints (promoted to int, `uint16 * uint16` could overflow it); else None."""
    scalar = dt.scalar()
    if not dtypes.is_int(scalar) or scalar == dtypes.bool:
        return None
    if scalar.itemsize < 4:
        return "unsigned int"
    if scalar in dtypes.sints:
        return "unsigned long long" if scalar.itemsize == 8 else "unsigned int"
    return None


def _wrapping(sym: str) -> OpTemplate:
    """`a sym b`, computed in `_unsigned(dt)` where that is a type, and converted back (modulo 2^n)."""

    def template(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
        u = _unsigned(dt)
        return f"({a}{sym}{b})" if u is None else f"(({r.ctype(dt)})(({u})({a}){sym}({u})({b})))"

    return template


def _neg(r: CStyleRenderer, dt: DType, x: str) -> str:
    if dt.scalar() == dtypes.bool:
        return f"(!{x})"
    u = _unsigned(dt)
    return f"(-{x})" if u is None else f"(({r.ctype(dt)})(0u-({u})({x})))"


def _mulacc(r: CStyleRenderer, dt: DType, a: str, b: str, c: str) -> str:
    u = _unsigned(dt)
    if u is not None:
        return f"(({r.ctype(dt)})(({u})({a})*({u})({b})+({u})({c})))"
    return f"({r.round_to(dt, f'({a}*{b})')}+{c})"


def _cdiv(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # C division truncates; x/0 is 0 and INT_MIN/-1 wraps (as the C99 template, the negation defined)
    if dtypes.is_float(dt):
        return f"{r.math_fn('trunc', dt)}({r.round_to(dt, f'({a}/{b})')})"
    if dt.scalar() in dtypes.sints:
        return f"(({b})==0?0:({b})==-1?{_neg(r, dt, a)}:({a})/({b}))"
    return f"(({b})==0?0:({a})/({b}))"


def _fdiv(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    return f"({a}/{b})" if dtypes.is_float(dt) else _cdiv(r, dt, a, b)


def _shl(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # a shift by 0..bits-1 (of the unsigned bits, as `_wrapping`); any other amount gives 0
    u = _unsigned(dt)
    shifted = f"({a})<<({b})" if u is None else f"(({r.ctype(dt)})(({u})({a})<<({b})))"
    return f"(((unsigned long long)({b}))<{8 * dt.scalar().itemsize}u?{shifted}:0)"


# float16 <-> float by bits: the OpenCL backend's helpers in CUDA's spelling (exact both ways; float ->
# float16 rounds to nearest even; a NaN keeps its sign and the top bits of its payload, as numpy does)
HALF_HELPERS = {
    "__uopgrad_bits_half": """\
static __device__ inline float __uopgrad_bits_half(unsigned short h) {
  /* float16 bits -> float, exactly */
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16, e = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int m = (unsigned int)h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0u) return __uint_as_float(sign | __float_as_uint((float)m * 0x1p-24f));
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}""",
    "__uopgrad_half_bits": """\
static __device__ inline unsigned short __uopgrad_half_bits(float x) {
  /* float -> float16 bits, rounded to nearest even */
  unsigned int f = __float_as_uint(x), sign = (f >> 16) & 0x8000u, a = f & 0x7fffffffu;
  if (a > 0x7f800000u) {
    unsigned int m = (a & 0x7fffffu) >> 13;
    return (unsigned short)(sign | 0x7c00u | (m > 1u ? m : 1u));
  }
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a < 0x38800000u) return (unsigned short)(sign | (unsigned int)rintf(__uint_as_float(a) * 0x1p24f));
  unsigned int r = a - 0x38000000u;
  return (unsigned short)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}""",
    "__uopgrad_half": """\
static __device__ inline float __uopgrad_half(float x) {
  /* x rounded to float16 */
  return __uopgrad_bits_half(__uopgrad_half_bits(x));
}""",
    "__uopgrad_half_d": """\
static __device__ inline float __uopgrad_half_d(double x) {
  /* a double rounded to float16 once: to float rounding to odd (exact enough for a second rounding) */
  float f = __double2float_rz(x);
  if (f == f && (double)f != x) f = __uint_as_float(__float_as_uint(f) | 1u);
  return __uopgrad_bits_half(__uopgrad_half_bits(f));
}""",
}


# one warp's 16x8 tile of a[16x16] @ b[16x8] (float16 or bfloat16 tiles, as their bits, at strides (ai, ak)
# and (bk, bj); float32 results): the lane's four elements of PTX's m16n8k16 layout into d. On a GPU that is
# one mma.sync (sm_80 and later; the tensor core's own summation); on the host (the emulator), each element
# is its 16 products, exact in float, summed in float in k order from +0.0 (spec/opt.md §6), so no lane
# needs another's registers. {name}, {ptx} and {decode} make one helper per input dtype.
_MMA = """\
static __device__ inline void {name}(float* d, const unsigned short* a, int ai, int ak,
                                     const unsigned short* b, int bk, int bj, unsigned int lane) {{
  /* d[e]: element e of this lane's fragment of the tile a @ b ({ptx} inputs) */
  const unsigned int g = lane >> 2, t = lane & 3u;
#ifdef __CUDA_ARCH__
  unsigned int ra[4], rb[2];
  /* a: rows g, g+8 of columns 2t, 2t+1 (and +8); the lower index in the low half */
  for (int q = 0; q < 4; q++) {{
    const int r = (int)g + 8 * (q & 1), c = 2 * (int)t + 8 * (q >> 1);
    ra[q] = (unsigned int)a[r * ai + c * ak] | ((unsigned int)a[r * ai + (c + 1) * ak] << 16);
  }}
  for (int q = 0; q < 2; q++) {{  /* b: column g, rows 2t, 2t+1 (and +8) */
    const int r = 2 * (int)t + 8 * q;
    rb[q] = (unsigned int)b[r * bk + (int)g * bj] | ((unsigned int)b[(r + 1) * bk + (int)g * bj] << 16);
  }}
  const float z = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, "
               "{{%8,%9}}, {{%10,%10,%10,%10}};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(z));
#else
  for (int e = 0; e < 4; e++) {{
    const int r = (int)g + 8 * (e >> 1), c = 2 * (int)t + (e & 1);
    float s = 0.0f;
    for (int k = 0; k < 16; k++) s += {decode}(a[r * ai + k * ak]) * {decode}(b[k * bk + c * bj]);
    d[e] = s;
  }}
#endif
}}"""
# input dtype -> (helper, PTX type, bits -> float); the helpers follow the conversions they call
_MMA_TYPES = {
    dtypes.float16: ("__uopgrad_mma_f16", "f16", "__uopgrad_bits_half"),
    dtypes.bfloat16: ("__uopgrad_mma_bf16", "bf16", "__uopgrad_bf16_float"),
}
MMA_HELPERS = {
    name: _MMA.format(name=name, ptx=ptx, decode=decode) for name, ptx, decode in _MMA_TYPES.values()
}


# the first architecture with each tensor-core shape the renderer issues (mma.sync m16n8k16 with float16)
_TC_ARCH: dict[TensorCoreShape, int] = {(16, 8, 16): 80}


def tensor_core_shapes(arch: str | None) -> tuple[TensorCoreShape, ...]:
    """The tensor-core shapes of a GPU architecture such as "sm_90" (none for None or an older one)."""
    if arch is None:
        return ()
    number = int("".join(ch for ch in arch if ch.isdigit()) or 0)
    return tuple(shape for shape, first in _TC_ARCH.items() if number >= first)


class _RenderState(Protocol):
    """What a handler uses of the renderer's state: the names of rendered uops, fresh names, body lines."""

    names: dict[UOp, str]

    def fresh(self, prefix: str) -> str: ...

    def emit(self, line: str) -> None: ...


def _wmma(_r: CStyleRenderer, st: _RenderState, u: UOp) -> None:
    """A WMMA element (uopgrad.codegen.tc): the first element of a pair of tiles computes the lane's whole
    fragment (the elements share their sources, hence one scope), and each element reads its entry."""
    shape, e, *strides = u.arg
    same = (u.src, shape, *strides)
    siblings = (
        n for v, n in st.names.items() if v.op is Ops.WMMA and (v.src, *v.arg[:1], *v.arg[2:]) == same
    )
    frag = next((n.partition("[")[0] for n in siblings), None)
    if frag is None:
        if shape not in _TC_ARCH:
            raise RenderError(f"CUDARenderer has no tensor-core instruction of shape {shape}: {u.short()}")
        helper = _MMA_TYPES.get(u.src[0].dtype.base.scalar(), ("",))[0]
        if not helper or u.src[1].dtype.base.scalar() != u.src[0].dtype.base.scalar():
            raise RenderError(f"CUDARenderer has no tensor-core instruction for these inputs: {u.short()}")
        frag = st.fresh("frag")
        a, b, lane = (st.names[s] for s in u.src)
        ai, ak, bk, bj = strides
        st.emit(f"float {frag}[4];")
        st.emit(f"{helper}({frag}, &{a}, {ai}, {ak}, &{b}, {bk}, {bj}, (unsigned int){lane});")
    st.names[u] = f"{frag}[{e}]"


def _cuda_cpp(code: str) -> str:
    """A core helper (C99) as CUDA C++: a `__device__` function, no static locals."""
    return code.replace("static inline ", "static __device__ inline ").replace("  static const ", "  const ")


# C++ keywords, CUDA's built-in variables, types and the device functions kernels may call (and libc's that
# NVRTC and the emulator declare): a kernel or variable name must not take one of them
_CUDA_RESERVED = frozenset(
    """alignas alignof and asm bool catch char16_t char32_t class compl constexpr
    const_cast decltype delete dynamic_cast explicit export false friend mutable namespace new noexcept not
    nullptr operator or private protected public reinterpret_cast static_assert static_cast template this
    thread_local throw true try typeid typename using virtual wchar_t xor
    threadIdx blockIdx blockDim gridDim warpSize dim3 uint3 half nv_bfloat16 __syncthreads
    atomicAdd atomicSub atomicExch atomicMin atomicMax atomicCAS atomicAnd atomicOr atomicXor
    printf malloc free memcpy memset assert abort exit min max abs rintf
    """.split()
)


# CUDA's reinterpretations of a float's bits: (float -> bits, bits -> float, the bits' type)
_FLOAT_BITS = {
    dtypes.float32: ("__float_as_uint", "__uint_as_float", "unsigned int"),
    dtypes.float64: ("__double_as_longlong", "__longlong_as_double", "long long"),
}


class CUDARenderer(CStyleRenderer):
    """CUDA C++ for NVRTC (and the host emulator): grid-style, one `extern "C" __global__` per program."""

    device = "CUDA"
    type_map: ClassVar[dict[DType, str]] = {
        **CStyleRenderer.type_map,
        dtypes.bool: "bool",
        dtypes.float16: "float",
    }
    storage: ClassVar[dict[DType, DType]] = {**CStyleRenderer.storage, dtypes.float16: dtypes.uint16}
    # float16 and bfloat16 values live in buffers as their bits (HALF_HELPERS and core's helpers convert)
    bits_codec: ClassVar[dict[DType, tuple[str, str]]] = {
        **CStyleRenderer.bits_codec,
        dtypes.float16: ("__uopgrad_bits_half", "__uopgrad_half_bits"),
    }
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {
        **CStyleRenderer.code_for_op,
        Ops.ADD: _wrapping("+"),
        Ops.SUB: _wrapping("-"),
        Ops.MUL: _wrapping("*"),
        Ops.NEG: _neg,
        Ops.MULACC: _mulacc,
        Ops.CDIV: _cdiv,
        Ops.FDIV: _fdiv,
        Ops.SHL: _shl,
    }
    helpers: ClassVar[dict[str, str]] = {
        **{name: _cuda_cpp(code) for name, code in CStyleRenderer.helpers.items()},
        **HALF_HELPERS,
        **MMA_HELPERS,  # after the float16 helpers they call
    }
    extra_handlers: ClassVar[dict[Ops, Any]] = {**CStyleRenderer.extra_handlers, Ops.WMMA: _wmma}
    keywords: ClassVar[frozenset[str]] = CStyleRenderer.keywords | _CUDA_RESERVED
    prefix_lines: ClassVar[tuple[str, ...]] = ()
    kernel_prefix = f'extern "C" __global__ void __launch_bounds__({_BOUNDS})'
    local_qualifier = "__shared__"
    barrier = "__syncthreads();"  # it also orders local memory
    restrict = "__restrict__"
    infinity = "__int_as_float(0x7f800000)"
    nan = "__int_as_float(0x7fc00000)"
    special_index: ClassVar[dict[str, str]] = {
        "gidx": "blockIdx.{1}",
        "lidx": "threadIdx.{1}",
        "idx": "(blockIdx.{1}*blockDim.{1}+threadIdx.{1})",
    }
    half_via_float = True
    warp_size = 32  # every NVIDIA GPU so far (the target records it; codegen does not use it yet)

    def __init__(self, grid: GridSpec | None = None, arch: str | None = None) -> None:
        self.grid = grid if grid is not None else GridLimits()
        # tensor cores where the architecture has the instruction (codegen.tc: float16 matmuls)
        self.tensor_cores = tensor_core_shapes(arch)

    # ------------------------------------------------------------------ dialect hooks
    def render(self, program: Program) -> str:
        """core's walk; `__launch_bounds__` is the block's size (threads per block)."""
        threads = math.prod(program.local_size) if program.local_size else 1
        return super().render(program).replace(_BOUNDS, str(threads), 1)

    def function_name(self, name: str) -> str:
        """C's rules with CUDA's reserved words (`keywords`)."""
        ident = super().function_name(name)
        return f"k_{ident}" if ident in self.keywords else ident

    def round_to(self, dt: DType, expr: str) -> str:
        """`expr` (a float) rounded to float16 where `dt` is float16."""
        return f"__uopgrad_half({expr})" if dt.scalar() == dtypes.float16 else expr

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        """C's casts; to float16 by rounding (a double directly, never through float)."""
        if dst.scalar() == dtypes.float16:
            return (
                f"__uopgrad_half_d({x})" if src.scalar() == dtypes.float64 else f"__uopgrad_half((float){x})"
            )
        return super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """CUDA's `__float_as_int` family; float16 through its bits; integers of one size by conversion
        (modulo 2^n); bool's bits are 0 or 1."""
        s, d = src.scalar(), dst.scalar()
        if s == dtypes.bfloat16 and d != s:  # through its bits, as core's template
            return self.render_bitcast(f"__uopgrad_bf16_bits({x})", dtypes.uint16, dst)
        if d == dtypes.bfloat16 and s != d:
            return f"__uopgrad_bf16_float({self.render_bitcast(x, src, dtypes.uint16)})"
        if d == dtypes.bool:
            return f"({x}!=0)"
        if s == dtypes.float16:
            return f"(({self.ctype(dst)})__uopgrad_half_bits({x}))"
        if d == dtypes.float16:
            return f"__uopgrad_bits_half((unsigned short){x})"
        if s in _FLOAT_BITS:
            return f"(({self.ctype(dst)}){_FLOAT_BITS[s][0]}({x}))"
        if d in _FLOAT_BITS:
            _, from_bits, bits_type = _FLOAT_BITS[d]
            return f"{from_bits}(({bits_type}){x})"
        return f"(({self.ctype(dst)}){x})"
