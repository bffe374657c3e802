"""The CPU backend's compiler: C source -> shared object bytes, with the system C compiler.

`$CC` (default `cc`) builds with `-O2 -march=native -fPIC -shared`, and never `-ffast-math`: NaN and inf
must behave. Three flags make C's arithmetic the one REFERENCE defines: `-fwrapv` (signed overflow wraps),
`-ffp-contract=off` (no fused multiply-add: `a*b+c` rounds twice, as in numpy) and `-fno-math-errno`
(lets `sqrt` be one instruction; the value is the same). `-fno-trapping-math` changes no value either (it
says nobody reads the floating-point exception flags), but without it GCC will not evaluate a float
comparison for lanes a select does not take, so on a machine without AVX-512 masks a loop with a select
(MAX, relu, WHERE) stays scalar with a branch per element: measured on AVX2, the elementwise chain of
bench/kernels.py took 20 ms with it off and 1.4 ms with it on.

Three are added when the compiler accepts them: `-fopenmp` (the outer loop of large kernels on all cores;
only for a source that uses OpenMP), `-fvect-cost-model=dynamic` (GCC's -O2 cost model otherwise leaves
loops with a data-dependent select scalar: a branch per element, 30x slower) and `-fno-tree-slp-vectorize`:
GCC 12.2's straight-line vectoriser drops a float64 -> float32 -> float64 round trip when it pairs two of
them (`(double)(float)x` becomes `x`); loops are still vectorised.
"""

from __future__ import annotations

import functools
import platform
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from uopgrad.backend import CompileError, Compiler, run_compiler
from uopgrad.config import getenv_float, getenv_str

__all__ = ["BASE_FLAGS", "CCompiler", "OPTIONAL_FLAGS", "accepts", "compile_timeout", "openmp_available"]

# -Werror=implicit-function-declaration: kernels declare the few libm functions they call instead of
# including <math.h> (uopgrad_cpu.renderer); a call of anything else must fail to build, not return an int
BASE_FLAGS = (
    "-O2",
    "-march=native",
    "-fPIC",
    "-shared",
    "-std=gnu99",
    "-fwrapv",
    "-ffp-contract=off",
    "-fno-trapping-math",
    "-fno-math-errno",
    "-Werror=implicit-function-declaration",
)
# a source that uses OpenMP (a parallel loop, the runtime's functions): only these are built with -fopenmp,
# which costs a small kernel ~9 ms of the compiler's time (linking libgomp) and buys a serial one nothing
_OPENMP_USE = re.compile(r"#\s*pragma\s+omp\b|\bomp_\w+\s*\(|<omp\.h>")
# used when `$CC` accepts them (clang, for one, has no -fvect-cost-model and vectorises at -O2 anyway)
OPTIONAL_FLAGS = ("-fopenmp", "-fvect-cost-model=dynamic", "-fno-tree-slp-vectorize")


def compile_timeout() -> float:
    """Seconds a compile may take ($UOPGRAD_COMPILE_TIMEOUT, default 600): a hung compiler is an error."""
    return getenv_float("UOPGRAD_COMPILE_TIMEOUT")


def _run(cmd: list[str], src: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, input=src, capture_output=True, text=True, check=False, timeout=timeout)


_PROBES = {"-fopenmp": "#include <omp.h>\nint uopgrad_probe(void) { return omp_get_max_threads(); }\n"}


@functools.cache
def accepts(cc: str, flag: str) -> bool:
    """Whether `cc` builds (and links) a shared object with `flag`, warning-free."""
    probe = _PROBES.get(flag, "int uopgrad_probe(void) { return 0; }\n")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            res = _run(
                [
                    *shlex.split(cc),
                    flag,
                    "-Werror",
                    "-fPIC",
                    "-shared",
                    "-x",
                    "c",
                    "-",
                    "-o",
                    f"{tmp}/probe.so",
                ],
                probe,
                compile_timeout(),
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return res.returncode == 0


def openmp_available(cc: str) -> bool:
    """Whether `cc` compiles and links with `-fopenmp` (else kernels run on one core)."""
    return accepts(cc, "-fopenmp")


@functools.cache
def _identity(cc: str) -> str:
    """What the cache key needs to tell compilers and machines apart: the compiler's version line and, as
    `-march=native` depends on it, the CPU model and feature flags."""
    try:
        version = subprocess.run(
            [*shlex.split(cc), "--version"],
            capture_output=True,
            text=True,
            check=False,
            timeout=compile_timeout(),
        ).stdout.partition("\n")[0]
    except (OSError, subprocess.TimeoutExpired):
        version = "missing"
    cpu = platform.machine()
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        cpu += "".join(line for line in info if line.startswith(("model name", "flags", "Features")))[:4096]
    except OSError:
        pass
    return f"{cc}|{version}|{cpu}"


class CCompiler(Compiler):
    """C99 -> shared object bytes with `$CC` (default `cc`); the disk cache key holds the compiler's
    version, the flags and the host CPU."""

    def __init__(self, cc: str | None = None) -> None:
        super().__init__()
        self.cc = cc or getenv_str("CC")
        self.flags = [*BASE_FLAGS, *(f for f in OPTIONAL_FLAGS if accepts(self.cc, f))]
        self.cache_key = f"{_identity(self.cc)}|{' '.join(self.flags)}"

    def compile(self, src: str) -> bytes:
        """Build `src` into a shared object; a compiler error shows its message and the source."""
        with tempfile.TemporaryDirectory(prefix="uopgrad-cc-") as tmp:
            out = Path(tmp) / "kernel.so"
            flags = self.flags if _OPENMP_USE.search(src) else [f for f in self.flags if f != "-fopenmp"]
            cmd = [*shlex.split(self.cc), *flags, "-x", "c", "-", "-o", str(out), "-lm"]
            res = run_compiler(cmd, src, src, "C compiler", "CC")
            if res.returncode != 0:
                raise CompileError(shlex.join(cmd), res.stderr or res.stdout, src)
            return out.read_bytes()
