"""The C-family renderer toolkit (layer 12): a linear program printed as C-like source, driven by tables.

A dialect (C99 for the CPU, OpenCL C, CUDA C) subclasses `CStyleRenderer` and overrides tables and hooks:
`type_map` (dtype -> type name), `code_for_op` (one template per ALU op; its keys are what the backend
claims natively), `helpers` (support functions emitted when a kernel uses them), and the hooks for
constants, casts, bitcasts, buffer loads and stores, math functions, special indices, the kernel prefix,
parameter qualifiers, and local memory and barriers (DEFINE_LOCAL, BARRIER) where the dialect has them.

Every value gets its own SSA-style temporary (`const float alu3 = (alu1+alu2);`): a kernel that fuses
thousands of ops is thousands of short statements, never one expression nested thousands deep (C
compilers refuse bracket nesting past a few hundred levels). Constants, buffer indices and loop variables
are written inline. The numerics are REFERENCE's (spec/reference.md): where C leaves a case undefined
(integer division by zero, `INT_MIN / -1`, over-wide shifts, out-of-range float -> int) the templates
guard it and give REFERENCE's answer; a guard on a constant operand folds away in the C compiler.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from uopgrad.codegen import LinearProgram
from uopgrad.codegen.reduce import never_nan
from uopgrad.dtype import DType, dtypes
from uopgrad.errors import RenderError
from uopgrad.ops import GroupOp, Ops
from uopgrad.renderer import OpTemplate, Renderer
from uopgrad.uop import UOp

__all__ = ["CStyleRenderer", "RenderError"]


# ---------------------------------------------------------------------- templates shared by the dialects
def _infix(sym: str) -> OpTemplate:
    return lambda r, dt, a, b: f"({a}{sym}{b})"


def _math(name: str) -> OpTemplate:
    """A call of the dialect's math function `name` for the operand dtype (`sqrtf`, `sqrt`, ...)."""
    return lambda r, dt, *xs: f"{r.math_fn(name, dt)}({', '.join(xs)})"


def _bits(dt: DType) -> int:
    return 8 * dt.scalar().itemsize


def _signed_int(dt: DType) -> bool:
    return dt.scalar() in dtypes.sints


def _max(_r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # numpy's maximum, bit for bit: a NaN in a wins, then a NaN in b (a > NaN is false). On a tie (0.0 and
    # -0.0) numpy's float32/float64 loops keep b, its float16 loop keeps a.
    if not dtypes.is_float(dt):
        return f"(({a}>{b})?{a}:{b})"
    ge = ">=" if dt.scalar() == dtypes.float16 else ">"
    return f"((({a}!={a})||({a}{ge}{b}))?{a}:{b})"


def _max_of_number(_r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # _max where a is never NaN (codegen/reduce.py `never_nan`): the same choice without the dead NaN
    # test; for float32/float64 the form compilers emit as one max instruction (x86 maxss: a > b ? a : b)
    ge = ">=" if dt.scalar() == dtypes.float16 else ">"
    return f"(({a}{ge}{b})?{a}:{b})"


def _int_guarded(on_floats: OpTemplate, signed: str, unsigned: str) -> OpTemplate:
    """A C division-like template: `on_floats` for floats, else the guarded integer form (`{a}`, `{b}` are
    the operand expressions), signed or unsigned."""

    def template(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
        if dtypes.is_float(dt):
            return str(on_floats(r, dt, a, b))
        return (signed if _signed_int(dt) else unsigned).format(a=a, b=b)

    return template


# C division truncates; x/0 is defined as 0 and INT_MIN/-1 wraps (the hardware traps on both)
_cdiv = _int_guarded(
    lambda r, dt, a, b: f"{r.math_fn('trunc', dt)}({r.round_to(dt, f'({a}/{b})')})",
    "(({b})==0?0:({b})==-1?-({a}):({a})/({b}))",
    "(({b})==0?0:({a})/({b}))",
)
# the sign of the dividend; x%0 and x%-1 are 0 (INT_MIN%-1 traps in hardware)
_cmod = _int_guarded(
    lambda r, dt, a, b: f"{r.math_fn('fmod', dt)}({a}, {b})",
    "((({b})==0||({b})==-1)?0:({a})%({b}))",
    "(({b})==0?0:({a})%({b}))",
)


def _fdiv(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    return f"({a}/{b})" if dtypes.is_float(dt) else _cdiv(r, dt, a, b)


def _shl(_r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # a shift by 0..bits-1 as in C; by any other amount (negative ones included) it is 0
    return f"(((unsigned long long)({b}))<{_bits(dt)}u?({a})<<({b}):0)"


def _shr(_r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    # arithmetic for signed types; an over-wide shift gives 0, or -1 for a negative value
    fill = f"(({a})<0?-1:0)" if _signed_int(dt) else "0"
    return f"(((unsigned long long)({b}))<{_bits(dt)}u?({a})>>({b}):{fill})"


def _pow(r: CStyleRenderer, dt: DType, a: str, b: str) -> str:
    if dtypes.is_float(dt):
        return f"{r.math_fn('pow', dt)}({a}, {b})"
    return f"__uopgrad_{'u' if dtypes.is_unsigned(dt) else 'i'}pow({a}, {b})"


def _mulacc(r: CStyleRenderer, dt: DType, a: str, b: str, c: str) -> str:
    # rounded twice, as REFERENCE computes it (the C compiler is told not to contract it into an fma)
    return f"({r.round_to(dt, f'({a}*{b})')}+{c})"


def _neg(_r: CStyleRenderer, dt: DType, x: str) -> str:
    return f"(!{x})" if dt.scalar() == dtypes.bool else f"(-{x})"


def _trunc(r: CStyleRenderer, dt: DType, x: str) -> str:
    return f"{r.math_fn('trunc', dt)}({x})" if dtypes.is_float(dt) else x


# support functions, emitted before a kernel that mentions their name
# bfloat16 has no C type: a buffer holds its bits (`unsigned short`), a value is a float holding a bfloat16
# value, and every op that yields one rounds its float result to bfloat16 (ties to even), as REFERENCE
# computes it (in float32, rounded after every op). Loads and bitcasts are exact; a NaN stays a NaN.
_BF16_HELPERS: dict[str, str] = {
    "__uopgrad_bf16_float": """\
static inline float __uopgrad_bf16_float(unsigned short h) {
  /* bfloat16 bits -> float, exactly (they are the high half of a float32) */
  union { unsigned int u; float f; } v;
  v.u = ((unsigned int)h) << 16;
  return v.f;
}""",
    "__uopgrad_bf16_bits": """\
static inline unsigned short __uopgrad_bf16_bits(float x) {
  /* float -> bfloat16 bits, rounded to nearest even; a NaN keeps the payload of its high half (quiet
     bit set where that is empty, so it stays a NaN), as REFERENCE stores it */
  union { float f; unsigned int u; } v;
  v.f = x;
  if ((v.u & 0x7fffffffu) > 0x7f800000u)
    return (unsigned short)((v.u >> 16) | ((v.u & 0x007f0000u) ? 0u : 0x40u));
  return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}""",
    "__uopgrad_bf16": """\
static inline float __uopgrad_bf16(float x) {
  /* x rounded to bfloat16, kept in a float; inf and NaN unchanged */
  union { float f; unsigned int u; } v;
  v.f = x;
  if ((v.u & 0x7fffffffu) >= 0x7f800000u) return x;
  v.u = ((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16) << 16;
  return v.f;
}""",
}
_HELPERS: dict[str, str] = {
    "__uopgrad_f2i": """\
static inline long long __uopgrad_f2i(double x) {
  /* C leaves out-of-range float -> int undefined: truncate, wrap modulo 2^64; NaN and inf give 0 */
  if (x >= -9223372036854775808.0 && x < 9223372036854775808.0) return (long long)x;
  if (!(x - x == 0.0)) return 0;
  double r = fmod(trunc(x), 18446744073709551616.0);
  if (r >= 9223372036854775808.0) r -= 18446744073709551616.0;
  if (r < -9223372036854775808.0) r += 18446744073709551616.0;
  return (long long)r;
}""",
    "__uopgrad_ipow": """\
static inline long long __uopgrad_ipow(long long a, long long b) {
  /* wrapping repeated multiplication; a negative exponent gives the truncated real result */
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  unsigned long long r = 1, x = (unsigned long long)a;
  for (; b; b >>= 1, x *= x) if (b & 1) r *= x;
  return (long long)r;
}""",
    "__uopgrad_upow": """\
static inline unsigned long long __uopgrad_upow(unsigned long long a, unsigned long long b) {
  unsigned long long r = 1;
  for (; b; b >>= 1, a *= a) if (b & 1) r *= a;
  return r;
}""",
    "__uopgrad_threefry": """\
static inline unsigned long long __uopgrad_threefry(unsigned long long x, unsigned long long key) {
  /* Threefry-2x32, 20 rounds, of the two 32-bit halves of x under key (tinygrad's decomposition) */
  static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
  unsigned int ks[3] = {k1, k0 ^ k1 ^ 0x1BD11BDAu, k0};
  unsigned int lo = (unsigned int)x + ks[2], hi = (unsigned int)(x >> 32) + ks[0];
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 4; j++) {
      int s = rot[i % 2][j];
      unsigned int sum = lo + hi;
      hi = sum ^ ((hi << s) | (hi >> (32 - s)));
      lo = sum;
    }
    lo += ks[i % 3];
    hi += ks[(i + 1) % 3] + (unsigned int)(i + 1);
  }
  return ((unsigned long long)hi << 32) | lo;
}""",
}


# ---------------------------------------------------------------------- the render state
@dataclass
class _State:
    """What one render() call builds: a name (or inline expression) per uop, and the body lines."""

    uops: tuple[UOp, ...]
    names: dict[UOp, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    depth: int = 1
    counters: Counter[str] = field(default_factory=Counter)
    locals: list[str] = field(default_factory=list)  # the DEFINE_LOCALs declared so far
    numbers: frozenset[UOp] | None = None  # the uops never NaN (`never_nan`), found at the first MAX

    def never_nan(self, u: UOp) -> bool:
        """Whether `u` is never NaN (codegen/reduce.py `never_nan`, over the whole program once)."""
        if self.numbers is None:
            self.numbers = never_nan(self.uops)
        return u in self.numbers

    def fresh(self, prefix: str) -> str:
        n = self.counters[prefix]
        self.counters[prefix] += 1
        return f"{prefix}{n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)


_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# the kernel names codegen makes (`E_4_4`, `r_16_n`): the only ones a kernel's symbol takes as they are
_OWN_NAME = re.compile(r"[Er](_(\d+|n))*")
# names the renderer itself writes: a variable may not take one of them
_RESERVED = re.compile(r"(data|ridx|acc|alu|val|cast|gidx|lidx|idx|temp)\d+|__uopgrad_\w*")
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for "
    "goto if inline int long register restrict return short signed sizeof static struct "
    "switch typedef union unsigned void volatile while".split()
)


class CStyleRenderer(Renderer):
    """C-family source from a linear program. The class attributes are the dialect's tables and hooks."""

    # ------------------------------------------------------------------ dialect tables and hooks
    type_map: ClassVar[dict[DType, str]] = {
        dtypes.bool: "_Bool",
        dtypes.int8: "signed char",
        dtypes.uint8: "unsigned char",
        dtypes.int16: "short",
        dtypes.uint16: "unsigned short",
        dtypes.int32: "int",
        dtypes.uint32: "unsigned int",
        dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long",
        dtypes.float16: "_Float16",
        dtypes.bfloat16: "float",
        dtypes.float32: "float",
        dtypes.float64: "double",
    }
    code_for_op: ClassVar[dict[Ops, OpTemplate]] = {
        Ops.NEG: _neg,
        Ops.RECIPROCAL: lambda r, dt, x: f"(1/{x})",
        Ops.TRUNC: _trunc,
        Ops.SQRT: _math("sqrt"),
        Ops.EXP2: _math("exp2"),
        Ops.LOG2: _math("log2"),
        Ops.SIN: _math("sin"),
        Ops.ADD: _infix("+"),
        Ops.SUB: _infix("-"),
        Ops.MUL: _infix("*"),
        Ops.MAX: _max,
        Ops.FDIV: _fdiv,
        Ops.CDIV: _cdiv,
        Ops.CMOD: _cmod,
        Ops.POW: _pow,
        Ops.CMPLT: _infix("<"),
        Ops.CMPNE: _infix("!="),
        Ops.CMPEQ: _infix("=="),
        Ops.AND: _infix("&"),
        Ops.OR: _infix("|"),
        Ops.XOR: _infix("^"),
        Ops.SHL: _shl,
        Ops.SHR: _shr,
        Ops.WHERE: lambda r, dt, c, a, b: f"({c}?{a}:{b})",
        Ops.MULACC: _mulacc,
        Ops.THREEFRY: lambda r, dt, x, key: f"__uopgrad_threefry({x}, {key})",
    }
    helpers: ClassVar[dict[str, str]] = {**_HELPERS, **_BF16_HELPERS}
    # dtypes whose buffers hold another type's bits (bfloat16: `unsigned short`); see _BF16_HELPERS
    storage: ClassVar[dict[DType, DType]] = {dtypes.bfloat16: dtypes.uint16}
    # the helpers a load and a store of such a dtype go through: (bits -> value, value -> bits)
    bits_codec: ClassVar[dict[DType, tuple[str, str]]] = {
        dtypes.bfloat16: ("__uopgrad_bf16_float", "__uopgrad_bf16_bits")
    }
    # lines before the kernel (includes, pragmas, typedefs)
    prefix_lines: ClassVar[tuple[str, ...]] = ("#include <math.h>",)
    kernel_prefix = "void"
    buffer_qualifier = ""  # an address space, e.g. OpenCL's "__global "
    restrict = "restrict"  # buffers never alias inside one launch
    infinity = "INFINITY"
    nan = "NAN"
    local_qualifier = ""  # of a workgroup's shared array, e.g. CUDA's "__shared__"; "" = none
    barrier = ""  # the workgroup barrier statement, e.g. "__syncthreads();"; "" = none
    # SPECIAL name prefix -> expression template with {0} the dimension, e.g. {"gidx": "blockIdx.{0}"}
    special_index: ClassVar[dict[str, str]] = {}
    # float16 ALU is computed in float and rounded back once per op (no native half arithmetic)
    half_via_float = True
    # "#pragma omp parallel for" (or similar) put on the outermost loop of a large loop nest; None: never
    parallel_pragma: str | None = None
    # element iterations of the whole nest (its loop iterations, times the lanes of its widest vector) below
    # which a loop runs serially. Loop iterations alone kept vectorised kernels serial: a 64x256 @ 256x256
    # matmul's tiled nest has 16k iterations of 16-lane ops (0.25 ms on one core). ALU ops are not
    # counted: a long elementwise chain over 1k elements is a few microseconds of vector code, and OpenMP
    # tripled its compile time (measured: 0.07 -> 0.25 s per kernel of a split 2001-op backward)
    parallel_min_work = 1 << 15
    # words a kernel or variable name may not be (a dialect adds its own keywords and built-in names)
    keywords: ClassVar[frozenset[str]] = _C_KEYWORDS
    # op -> handler(renderer, state, uop) for ops a dialect adds (vector forms: uopgrad.renderer.vector)
    extra_handlers: ClassVar[dict[Ops, _Handler]] = {}

    # ------------------------------------------------------------------ small hooks
    def function_name(self, name: str) -> str:
        """The kernel's function name. codegen's own names (`E_4_4`, `r_8_n`) are kept; any other (a custom
        kernel may be called anything, `omp_set_dynamic` or 300 characters long) becomes `k_`, its first
        32 characters as a C identifier, and a hash of the whole name: a symbol that is always ours, of
        bounded length, that shadows no keyword, math function or library symbol (libgomp's, for one)."""
        if _OWN_NAME.fullmatch(name) and len(name) <= 64:
            return name
        ident = re.sub(r"[^A-Za-z0-9_]", "_", name[:32])
        return f"k_{ident}_{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"

    def ctype(self, dt: DType) -> str:
        """The type name of `dt` (a pointer's element type for pointer dtypes)."""
        scalar = dt.base.scalar()
        if scalar not in self.type_map:
            raise RenderError(f"{type(self).__name__} has no type for {dt}")
        return self.type_map[scalar]

    def math_fn(self, name: str, dt: DType) -> str:
        """The math function for dtype `dt`: C's `sqrtf` for float (and float16, computed in float)."""
        return name if dt.scalar() == dtypes.float64 else f"{name}f"

    def round_to(self, dt: DType, expr: str) -> str:
        """`expr` (computed in float for float16) rounded to `dt` and read back, where an op that REFERENCE
        computes as two rounded steps (MULACC, float CDIV) needs the intermediate rounding."""
        if self.half_via_float and dt.scalar() == dtypes.float16:
            return f"((float)({self.ctype(dt)}){expr})"
        return expr  # bfloat16: REFERENCE computes each op in float32 and rounds its result once

    def render_const(self, value: object, dt: DType) -> str:
        """A literal of `dt`: ±inf and NaN by name, -0.0 kept, integers with C's suffixes."""
        scalar = dt.scalar()
        try:  # only a value of the exact Python type is printed (never user text, never under python -O)
            value = dtypes.exact_const(value, scalar)
        except (TypeError, ValueError) as e:
            raise RenderError(f"{type(self).__name__} can't print the constant {value!r} of {dt}: {e}") from e
        if dtypes.is_float(scalar):
            v = float(value)
            if math.isnan(v):
                text = f"(-{self.nan})" if math.copysign(1.0, v) < 0 else self.nan
            elif math.isinf(v):
                text = self.infinity if v > 0 else f"(-{self.infinity})"
            else:
                text = repr(v) + ("" if scalar == dtypes.float64 else "f")  # exact: v is a value of dt
                text = f"({text})" if text.startswith("-") else text
            return text if scalar in (dtypes.float32, dtypes.float64) else f"(({self.ctype(dt)}){text})"
        if scalar == dtypes.bool:
            return "1" if value else "0"
        return self.render_int(int(value), scalar)

    def render_int(self, v: int, dt: DType) -> str:
        """An integer literal of `dt`; the minimum of a signed type is written as `(-MAX-1)`."""
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dt, "")
        if dt in dtypes.sints and v == dtypes.min(dt) and dt.itemsize >= 4:
            return f"(-{-v - 1}{suffix}-1)"
        text = f"{v}{suffix}"
        if dt.itemsize < 4:  # no literal of its own: a cast keeps the temporaries' types exact
            return f"(({self.ctype(dt)}){text})"
        return f"({text})" if v < 0 else text

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        """CAST: to bool is `!= 0`; float -> int truncates and wraps (never C's undefined conversion)."""
        if dst.scalar() == dtypes.bool:
            return f"({x}!=0)"
        if dst.scalar() == dtypes.bfloat16:  # through float32, as REFERENCE converts
            return f"__uopgrad_bf16((float){x})"
        if dtypes.is_float(src) and dtypes.is_int(dst):
            return f"(({self.ctype(dst)})__uopgrad_f2i((double){x}))"
        return f"(({self.ctype(dst)}){x})"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """BITCAST through a union (defined in C99, unlike a pointer cast); bfloat16 through its bits."""
        if src.scalar() == dtypes.bfloat16:
            return self.render_bitcast(f"__uopgrad_bf16_bits({x})", dtypes.uint16, dst)
        if dst.scalar() == dtypes.bfloat16:
            return f"__uopgrad_bf16_float({self.render_bitcast(x, src, dtypes.uint16)})"
        if src.scalar() == dst.scalar():
            return x
        return f"((union {{ {self.ctype(src)} s; {self.ctype(dst)} d; }}){{ .s = {x} }}).d"

    def render_special(self, name: str) -> str:
        """The expression of a SPECIAL (a grid index such as `gidx0`)."""
        m = re.fullmatch(r"([a-z]+)(\d)", name)
        if m is None or m.group(1) not in self.special_index:
            raise RenderError(f"{type(self).__name__} has no grid index {name!r} (is it loop-style?)")
        return self.special_index[m.group(1)].format(int(m.group(2)), "xyz"[int(m.group(2))])

    def render_load(self, buf: str, offset: str, dt: DType) -> str:
        """An expression reading element `offset` of buffer `buf`, a value of `dt` (from its bits, for a
        dtype in `bits_codec`)."""
        codec = self.bits_codec.get(dt.scalar())
        return f"{buf}[{offset}]" if codec is None else f"{codec[0]}({buf}[{offset}])"

    def render_store(self, buf: str, offset: str, value: str, dt: DType) -> str:
        """A statement writing `value`, of `dt`, to element `offset` of buffer `buf` (as its bits, for a
        dtype in `bits_codec`)."""
        codec = self.bits_codec.get(dt.scalar())
        return f"{buf}[{offset}] = {value if codec is None else f'{codec[1]}({value})'};"

    def render_param(self, slot: int, dt: DType, writable: bool) -> str:
        """One buffer parameter: `float* restrict data0`; read-only buffers are `const`."""
        const = "" if writable else "const "
        elem = self.ctype(self.storage.get(dt.base.scalar(), dt))
        return " ".join(
            x for x in (f"{self.buffer_qualifier}{const}{elem}*", self.restrict, f"data{slot}") if x
        )

    def render_local(self, name: str, dt: DType, size: int) -> str:
        """The declaration of a DEFINE_LOCAL: `size` elements of `dt` shared by a workgroup's threads, under
        `local_qualifier` (a float16 as its bits, as in buffers)."""
        if not self.local_qualifier:
            raise RenderError(f"{type(self).__name__} has no local memory (DEFINE_LOCAL {name})")
        elem = self.ctype(self.storage.get(dt.scalar(), dt.scalar()))
        return f"{self.local_qualifier} {elem} {name}[{size}];"

    def render_barrier(self) -> str:
        """The statement of a BARRIER, `barrier`: every thread of the workgroup waits there for the others."""
        if not self.barrier:
            raise RenderError(f"{type(self).__name__} has no workgroup barrier (BARRIER)")
        return self.barrier

    def render_var(self, name: str, dt: DType) -> str:
        """One scalar parameter (a DEFINE_VAR). Integer ones are 64-bit at the call boundary whatever the
        variable's dtype, so a runtime passes every value the same way; an int32 variable's value fits
        int32 (core checks at launch), and C's conversions give int32 arithmetic the same results."""
        return f"const {self.ctype(dtypes.int64 if dtypes.is_int(dt) else dt)} {name}"

    def render_kernel(
        self, name: str, params: Sequence[str], body: Sequence[str], prefix: Sequence[str]
    ) -> str:
        """Assemble the source: prefix lines, then `kernel_prefix name(params) { body }`."""
        head = "\n".join(prefix)
        sig = f"{self.kernel_prefix} {name}({', '.join(params)})"
        return (f"{head}\n\n" if head else "") + sig + " {\n" + "\n".join(body) + "\n}\n"

    # ------------------------------------------------------------------ the walk
    def render(self, program: LinearProgram) -> str:
        """C source of `program`: one function named after it, SSA temporaries, loops for RANGE/END."""
        uops = tuple(program.uops)
        st = _State(uops)
        self._plan(uops, st)
        for u in uops:
            handler = self.extra_handlers.get(u.op) or _HANDLERS.get(u.op)
            if handler is None and u.op in GroupOp.ALU:
                handler = CStyleRenderer._alu
            if handler is None:
                raise RenderError(f"{type(self).__name__} can't render {u.op}: {u.short()}")
            handler(self, st, u)
        if st.depth != 1:
            raise RenderError(f"{st.depth - 1} RANGE(s) are never closed by an END")
        params = self._signature(program, uops, st)
        used = self._helpers_for("\n".join(st.lines))
        return self.render_kernel(
            self.function_name(program.name), params, st.lines, [*self.prefix_lines, *used]
        )

    def _helpers_for(self, text: str) -> list[str]:
        """The helpers `text` calls and those they call, in table order (callees come first there)."""
        used: set[str] = set()
        todo = [text]
        while todo:
            caller = todo.pop()
            for name, code in self.helpers.items():
                if name not in used and name + "(" in caller:
                    used.add(name)
                    todo.append(code)
        return [code for name, code in self.helpers.items() if name in used]

    def _plan(self, uops: tuple[UOp, ...], st: _State) -> None:
        """Name the arguments before the walk: buffers `data<slot>`, variables by their own names; constants
        are inline literals (also those a program uses without listing them)."""
        taken: set[str] = set()
        for u in uops:
            for c in u.src:
                if c.op is Ops.CONST:
                    st.names[c] = self.render_const(c.arg, c.dtype)
            if u.op is Ops.PARAM:
                st.names[u] = f"data{u.arg}"
            elif u.op is Ops.DEFINE_VAR and u not in st.names:
                name = str(u.arg[0])
                ok = _IDENT.fullmatch(name) and not _RESERVED.fullmatch(name) and name not in self.keywords
                st.names[u] = name if ok and name not in taken else st.fresh("var")
                taken.add(st.names[u])

    def _signature(self, program: LinearProgram, uops: tuple[UOp, ...], st: _State) -> list[str]:
        """Buffers in `program.globals` order, then scalars in `program.vars` order (as they are passed)."""
        params = {u.arg: u for u in uops if u.op is Ops.PARAM}
        written = {
            b.arg
            for s in uops
            if s.op is Ops.STORE and s.src[0].op is Ops.INDEX and (b := _buffer(s.src[0])).op is Ops.PARAM
        }
        out = []
        for slot in program.globals:
            if slot in params:
                out.append(self.render_param(slot, params[slot].dtype, slot in written))
            else:  # a buffer argument the kernel never touches keeps its place in the signature
                out.append(f"{self.buffer_qualifier}const void* data{slot}")
        return out + [self.render_var(st.names[v], v.dtype) for v in program.vars]

    # ------------------------------------------------------------------ one handler per op family
    def _value(self, st: _State, u: UOp, prefix: str, expr: str) -> None:
        """Bind `u` to a fresh SSA temporary holding `expr`."""
        name = st.fresh(prefix)
        st.emit(f"const {self.ctype(u.dtype)} {name} = {expr};")
        st.names[u] = name

    def _alu(self, st: _State, u: UOp) -> None:
        template = self.code_for_op.get(u.op)
        if template is None:
            raise RenderError(
                f"{type(self).__name__} does not render {u.op} (codegen decomposes ops outside "
                f"`supports`): {u.short()}"
            )
        dt = u.src[1].dtype if u.op is Ops.WHERE else u.src[0].dtype
        if template is _max and dtypes.is_float(dt) and st.never_nan(u.src[0]):
            template = _max_of_number
        via_float = self.half_via_float and dt.scalar() == dtypes.float16
        xs = [
            f"((float){st.names[s]})" if via_float and s.dtype.scalar() == dtypes.float16 else st.names[s]
            for s in u.src
        ]
        expr = template(self, dt, *xs)
        if via_float and u.dtype.scalar() == dtypes.float16:  # the float result rounded back to half
            expr = self.render_cast(expr, dtypes.float32, u.dtype)
        elif u.dtype.scalar() == dtypes.bfloat16 and u.op is not Ops.WHERE:  # computed in float: round
            expr = f"__uopgrad_bf16({expr})"
        self._value(st, u, "alu", expr)

    def _name(self, st: _State, u: UOp) -> None:  # PARAM, DEFINE_VAR: named in _plan
        pass

    def _const(self, st: _State, u: UOp) -> None:
        st.names[u] = self.render_const(u.arg, u.dtype)

    def _alias(self, st: _State, u: UOp) -> None:  # AFTER: the value of its first source
        st.names[u] = st.names[u.src[0]]

    def _skip(self, st: _State, u: UOp) -> None:  # SINK, NOOP, GROUP: no code
        pass

    def _special(self, st: _State, u: UOp) -> None:
        st.names[u] = str(u.arg)
        st.emit(f"const {self.ctype(u.dtype)} {u.arg} = {self.render_special(str(u.arg))};")

    def _range(self, st: _State, u: UOp) -> None:
        name = f"ridx{u.arg[0] if isinstance(u.arg, tuple) else u.arg}"
        st.names[u] = name
        pragma = self.parallel_pragma
        if pragma is not None and st.depth == 1 and _parallel_ok(u, st.uops, self.parallel_min_work):
            # a loop-style kernel's local memory is its thread's scratch: each thread gets its own copy
            st.emit(f"{pragma} private({', '.join(st.locals)})" if st.locals else pragma)
        t = self.ctype(u.dtype)
        st.emit(f"for ({t} {name} = 0; {name} < {st.names[u.src[0]]}; {name}++) {{")
        st.depth += 1

    def _end(self, st: _State, u: UOp) -> None:
        st.depth -= 1
        if st.depth < 1:
            raise RenderError(f"END without an open RANGE: {u.short()}")
        st.emit("}")

    def _if(self, st: _State, u: UOp) -> None:
        st.emit(f"if ({st.names[u.src[0]]}) {{")
        st.depth += 1

    def _define_reg(self, st: _State, u: UOp) -> None:
        name = f"acc{u.arg}"
        st.names[u] = name
        init = st.names[u.src[0]] if u.src else self.render_const(0, u.dtype.base)
        st.emit(f"{self.ctype(u.dtype)} {name} = {init};")

    def _define_local(self, st: _State, u: UOp) -> None:
        name = st.names[u] = f"temp{u.arg}"
        size = getattr(u.dtype, "size", -1)
        if not isinstance(size, int) or size < 1:
            raise RenderError(f"DEFINE_LOCAL needs a pointer dtype with a size: {u.short()}")
        st.emit(self.render_local(name, u.dtype.base, size))
        st.locals.append(name)

    def _barrier(self, st: _State, u: UOp) -> None:
        st.emit(self.render_barrier())

    def _index(self, st: _State, u: UOp) -> None:
        st.names[u] = f"{st.names[u.src[0]]}[{st.names[u.src[1]]}]"

    def _load(self, st: _State, u: UOp) -> None:
        idx = u.src[0]
        if idx.op is not Ops.INDEX:  # a register
            self._value(st, u, "val", st.names[idx])
            return
        src = self.render_load(st.names[idx.src[0]], st.names[idx.src[1]], u.dtype)
        if len(u.src) > 1:  # a gated load reads 0 where the gate is false
            src = f"({st.names[u.src[1]]}?{src}:{self.render_const(0, u.dtype)})"
        self._value(st, u, "val", src)

    def _store(self, st: _State, u: UOp) -> None:
        idx, value = u.src[0], st.names[u.src[1]]
        if idx.op is Ops.INDEX:
            line = self.render_store(st.names[idx.src[0]], st.names[idx.src[1]], value, u.src[1].dtype)
        else:  # a register
            line = f"{st.names[idx]} = {value};"
        st.emit(f"if ({st.names[u.src[2]]}) {line}" if len(u.src) > 2 else line)

    def _cast(self, st: _State, u: UOp) -> None:
        self._value(st, u, "cast", self.render_cast(st.names[u.src[0]], u.src[0].dtype, u.dtype))

    def _bitcast(self, st: _State, u: UOp) -> None:
        if u.dtype.itemsize != u.src[0].dtype.itemsize:
            raise RenderError(f"BITCAST between sizes {u.src[0].dtype} -> {u.dtype}: {u.short()}")
        self._value(st, u, "cast", self.render_bitcast(st.names[u.src[0]], u.src[0].dtype, u.dtype))


def _buffer(index: UOp) -> UOp:
    """The PARAM an INDEX points into (through the AFTERs that order it after other writes)."""
    buf = index.src[0]
    while buf.op is Ops.AFTER:
        buf = buf.src[0]
    return buf


def _bound(r: UOp) -> int:
    """The trip count of RANGE `r`, or its upper bound when it is a variable."""
    b = r.src[0]
    return int(b.arg) if b.op is Ops.CONST else int(b.vmax)


def _parallel_ok(loop: UOp, uops: tuple[UOp, ...], min_work: int) -> bool:
    """Whether the iterations of `loop`, an outermost RANGE, may run on several threads: it is an output
    loop, every register it updates lives inside it, every buffer store's index depends on it (so two
    iterations never write one element; a store into local memory, which each thread has its own copy of,
    need not), and the nest does at least `min_work` element iterations."""
    if not (isinstance(loop.arg, tuple) and loop.arg[-1] == "loop"):
        return False
    start = uops.index(loop)
    end = next((i for i in range(start, len(uops)) if uops[i].op is Ops.END and uops[i].src[0] is loop), None)
    if end is None:
        return False
    body = uops[start + 1 : end]
    inside = set(body)
    work, lanes = _bound(loop), 1
    for u in body:
        if u.op is Ops.RANGE:
            work *= _bound(u)
        elif u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_REG and u.src[0] not in inside:
            return False
        elif (
            u.op is Ops.STORE
            and u.src[0].op is Ops.INDEX
            and _buffer(u.src[0]).op is not Ops.DEFINE_LOCAL
            and loop not in u.src[0].src[1].toposort()
        ):
            return False
        lanes = max(lanes, u.dtype.count)
    return work * lanes >= min_work


_Handler = Callable[[CStyleRenderer, _State, UOp], None]
# how each non-ALU op is printed (ALU ops go through `code_for_op`)
_HANDLERS: dict[Ops, _Handler] = {
    Ops.PARAM: CStyleRenderer._name,
    Ops.DEFINE_VAR: CStyleRenderer._name,
    Ops.CONST: CStyleRenderer._const,
    Ops.SPECIAL: CStyleRenderer._special,
    Ops.RANGE: CStyleRenderer._range,
    Ops.END: CStyleRenderer._end,
    Ops.IF: CStyleRenderer._if,
    Ops.ENDIF: CStyleRenderer._end,
    Ops.DEFINE_REG: CStyleRenderer._define_reg,
    Ops.INDEX: CStyleRenderer._index,
    Ops.LOAD: CStyleRenderer._load,
    Ops.STORE: CStyleRenderer._store,
    Ops.CAST: CStyleRenderer._cast,
    Ops.BITCAST: CStyleRenderer._bitcast,
    Ops.AFTER: CStyleRenderer._alias,
    Ops.SINK: CStyleRenderer._skip,
    Ops.NOOP: CStyleRenderer._skip,
    Ops.GROUP: CStyleRenderer._skip,
    Ops.DEFINE_LOCAL: CStyleRenderer._define_local,
    Ops.BARRIER: CStyleRenderer._barrier,
}
