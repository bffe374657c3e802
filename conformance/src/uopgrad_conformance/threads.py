"""Determinism runs: a compiled program run a second time, with another thread count where the backend has
one. The suite cannot import a backend, so it looks for the thread pool a backend may have loaded into
this process: an OpenMP runtime (libgomp, LLVM's libomp, Intel's libiomp5), found in the process's memory
map once a kernel has run. Without one the second run is a plain rerun (a race still shows there, less
often).

The second run forces a fixed team of `procs + 1` threads with OpenMP's dynamic adjustment off: a backend
that sizes its teams by the machine's load (the CPU backend does) may well run the first time on one
thread, so only a forced, oversubscribed team makes a racing loop interleave."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["openmp_runtime", "other_thread_count"]

_OPENMP = re.compile(r"/lib(gomp|omp|iomp5)[\w.-]*\.so[\d.]*$")


def openmp_runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime loaded into this process (by a backend's kernels), or None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if _OPENMP.search(path):
            try:
                lib = ctypes.CDLL(path)  # the same library object: its settings are the kernels' settings
            except OSError:
                return None
            if all(
                hasattr(lib, f)
                for f in (
                    "omp_set_num_threads",
                    "omp_get_max_threads",
                    "omp_set_dynamic",
                    "omp_get_dynamic",
                    "omp_get_num_procs",
                )
            ):
                return lib
    return None


@contextmanager
def other_thread_count() -> Iterator[str]:
    """Within the block, kernels run on a fixed team of another size (restored after); yields what was
    set, for the failure message ("3 OpenMP threads", or "no thread pool found: a plain rerun")."""
    lib = openmp_runtime()
    if lib is None:
        yield "a plain rerun (no thread pool found in the process)"
        return
    old_n, old_dynamic = int(lib.omp_get_max_threads()), int(lib.omp_get_dynamic())
    n = int(lib.omp_get_num_procs()) + 1
    lib.omp_set_dynamic(0)
    lib.omp_set_num_threads(n)
    try:
        yield f"a fixed team of {n} OpenMP threads (dynamic adjustment off)"
    finally:
        lib.omp_set_num_threads(old_n)
        lib.omp_set_dynamic(old_dynamic)
