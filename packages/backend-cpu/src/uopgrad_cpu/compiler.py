"""The CPU backend's compiler: C source -> shared object bytes, with the system C compiler.

`$CC` (default `cc`) builds with `-O1 -ftree-loop-vectorize -march=native -fPIC -shared` (`-O2` where the
compiler has no `-ftree-loop-vectorize`: clang), and never `-ffast-math`: NaN and inf must behave. `-O1` with
the loop vectoriser (issue 35) costs the C compiler 24% less than `-O2` on a cold training step and makes
kernels as fast: the opt pass writes the reduces' and tiles' vector code itself, and the vectoriser keeps
elementwise loops vector (bench/README.md, the first-step table). Three flags make C's arithmetic the one
REFERENCE defines: `-fwrapv` (signed overflow wraps), `-ffp-contract=off` (no fused multiply-add: `a*b+c`
rounds twice, as in numpy) and `-fno-math-errno` (lets `sqrt` be one instruction; the value is the same).
`-fno-trapping-math` changes no value either (it says nobody reads the floating-point exception flags), but
without it GCC will not evaluate a float comparison for lanes a select does not take, so on a machine
without AVX-512 masks a loop with a select (MAX, relu, WHERE) stays scalar with a branch per element:
measured on AVX2, the elementwise chain of bench/kernels.py took 20 ms with it off and 1.4 ms with it on.

Three are added when the compiler accepts them: `-fopenmp` (the outer loop of large kernels on all cores;
only for a source that uses OpenMP), `-fvect-cost-model=dynamic` (GCC's -O2 cost model otherwise leaves
loops with a data-dependent select scalar: a branch per element, 30x slower) and `-fno-tree-slp-vectorize`:
GCC 12.2's straight-line vectoriser drops a float64 -> float32 -> float64 round trip when it pairs two of
them (`(double)(float)x` becomes `x`); loops are still vectorised.

The new kernels of one realize are built together (`compile_many`, issue 35): most of a compiler process's
~50 ms is its start, the headers and the link, not the kernel (measured on GCC 12, 2 cores: an empty
translation unit 25 ms, one kernel 52 ms, ten kernels 524 ms one by one and 131 ms as one source). The
misses go into about `os.cpu_count()` batches, each one source (core's `renderer.merge`) built as one shared
object on a thread of its own. A batch may hold kernels of one name: the merged source renames the repeats,
and such a kernel's entry carries its function's name after the shared object (runtime.py `with_symbol`);
serial and OpenMP kernels share batches (a serial kernel's machine code is the same with -fopenmp, which
only reads OpenMP pragmas), and a batch holds at most `BATCH_LIMIT` kernels: every member's disk-cache
entry is the whole batch's shared object (~14 KB of ELF plus ~1 KB a kernel, so a batch of 16 stores ~30 KB
per kernel instead of ~15 KB). A batch that does not build is built kernel by kernel, so an error names its
own source.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import re
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from uopgrad import diskcache
from uopgrad.backend import CompileError, Compiler, run_compiler
from uopgrad.config import getenv_float, getenv_str
from uopgrad.renderer.merge import merge, split
from uopgrad_cpu.runtime import with_symbol

__all__ = [
    "BASE_FLAGS",
    "BATCH_LIMIT",
    "CCompiler",
    "ENTRY_FORMAT",
    "FALLBACK_LEVEL",
    "LEVEL",
    "OPTIONAL_FLAGS",
    "accepts",
    "batches",
    "compile_timeout",
    "openmp_available",
]

# -Werror=implicit-function-declaration: kernels declare the few libm functions they call instead of
# including <math.h> (uopgrad_cpu.renderer); a call of anything else must fail to build, not return an int
BASE_FLAGS = (
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
# a generated kernel's header (CStyleRenderer: `void name(` at column 0), for merging sources
_KERNEL = re.compile(r"^void (\w+)\(", re.MULTILINE)
# the most kernels one merged shared object holds (its bytes are stored under every member's digest)
BATCH_LIMIT = 16
# the form of a cache entry (runtime.py `split_symbol`), in the cache key
ENTRY_FORMAT = "so+symbol"
# the optimisation level, where `$CC` accepts the second flag (GCC); else FALLBACK_LEVEL
LEVEL = ("-O1", "-ftree-loop-vectorize")
FALLBACK_LEVEL = ("-O2",)
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


def batches(srcs: Sequence[str], workers: int) -> list[list[int]]:
    """Indices of `srcs` in batches to build as one shared object each: at most BATCH_LIMIT kernels, about
    `workers` batches in all with about even amounts of source (a source that is not one generated kernel is
    a batch of its own). Kernels of one name may share a batch: `merge` renames the repeats (a realize's
    kernels often share names, `E_4_32_64` of several bodies, and keeping them apart took 7 compiler
    processes instead of 2 for 18 kernels). Serial and OpenMP kernels share batches: a batch with an OpenMP
    kernel is built with -fopenmp, which changes nothing in code without an OpenMP pragma (the same
    instructions, by objdump, for a transformer block's 17 serial kernels) and adds a libgomp link, ~9 ms.
    Kept apart, a block's backward was three batches on two cores, the third waiting for a core, or two of
    13 and 50 KB of source, one finishing long before the other."""
    kernels = [k for k, src in enumerate(srcs) if split(src, _KERNEL) is not None]
    share = max(1, min(workers, len(kernels)), math.ceil(len(kernels) / BATCH_LIMIT))  # (room for all)
    alone = set(range(len(srcs))).difference(kernels)
    out = [[k] for k in sorted(alone)]
    bins: list[list[int]] = [[] for _ in range(share)]
    weight = [0] * share
    for k in kernels:  # each to the lightest batch with room
        b = min((b for b, ks in enumerate(bins) if len(ks) < BATCH_LIMIT), key=weight.__getitem__)
        bins[b].append(k)
        weight[b] += len(srcs[k])
    return out + [ks for ks in bins if ks]


class CCompiler(Compiler):
    """C99 -> shared object bytes with `$CC` (default `cc`); the disk cache key holds the compiler's
    version, the flags and the host CPU."""

    overlaps_lowering = True  # the builds are compiler processes: they run while core lowers the rest

    def __init__(self, cc: str | None = None) -> None:
        super().__init__()
        self.cc = cc or getenv_str("CC")
        # the flag probes and the version are compiler processes that every process runs once: side by side
        # (0.23 - 0.33 s one after another on 2 cores)
        probes = (LEVEL[-1], *OPTIONAL_FLAGS)
        with ThreadPoolExecutor(len(probes) + 1) as pool:
            identity = pool.submit(_identity, self.cc)
            ok = dict(zip(probes, pool.map(functools.partial(accepts, self.cc), probes), strict=True))
        level = LEVEL if ok[LEVEL[-1]] else FALLBACK_LEVEL
        self.flags = [*level, *BASE_FLAGS, *(f for f in OPTIONAL_FLAGS if ok[f])]
        # `ENTRY_FORMAT`: an entry may name its function after the shared object (a renamed kernel); a build
        # that reads entries as the bare shared object would look its kernel up by name and find another
        self.cache_key = f"{identity.result()}|{' '.join(self.flags)}|{ENTRY_FORMAT}"

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

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """The sources in batches (`batches`), each merged into one source and built as one shared object,
        the batches side by side. A batch that does not build is built kernel by kernel; when a kernel does
        not build, the others are still built and stored in the disk cache, then its CompileError is raised
        (the first in `srcs` order)."""
        if len(srcs) < 2:
            return [self.compile(src) for src in srcs]
        plan = batches(srcs, os.cpu_count() or 1)
        with ThreadPoolExecutor(min(len(plan), os.cpu_count() or 1)) as pool:
            built = list(pool.map(lambda batch: self._build([srcs[k] for k in batch]), plan))
        libs: dict[int, bytes | CompileError] = {}
        for batch, results in zip(plan, built):
            libs.update(zip(batch, results))
        ordered = [libs[k] for k in range(len(srcs))]
        errors = [lib for lib in ordered if isinstance(lib, CompileError)]
        if errors:
            # keep the good kernels' work for the run after the fix
            diskcache.write_many(
                [(self._digest(s), lib) for s, lib in zip(srcs, ordered) if isinstance(lib, bytes)]
            )
            raise errors[0]
        return [lib for lib in ordered if isinstance(lib, bytes)]

    def _build(self, srcs: list[str]) -> list[bytes | CompileError]:
        """One shared object for all of `srcs` (one entry each), or each built alone when that fails."""
        merged = merge(srcs, _KERNEL) if len(srcs) > 1 else None
        if merged is not None:
            try:
                lib = self.compile(merged[0])
            except CompileError:
                pass
            else:  # a renamed kernel's entry names its function in the shared object
                names = [m[1] for m in map(_KERNEL.search, srcs) if m is not None]
                return [
                    lib if symbol == name else with_symbol(lib, symbol)
                    for name, symbol in zip(names, merged[1], strict=True)
                ]
        out: list[bytes | CompileError] = []
        for src in srcs:
            try:
                out.append(self.compile(src))
            except CompileError as e:
                out.append(e)
        return out
