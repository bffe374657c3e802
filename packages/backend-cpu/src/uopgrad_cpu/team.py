"""How many threads a parallel kernel gets: the cores the other processes leave free.

A thread that waits for a core stalls the others at the parallel loop's closing barrier, so on a busy
machine a smaller team is faster (measured on a loaded 2-core machine: a sum over 4096x1024 took 8 ms
with 2 fixed threads, 2.4 ms with one). libgomp's own dynamic mode sizes teams by the core count less the
15-minute load average, which counts this process's own kernels and lags by a quarter of an hour: on an
idle machine after a busy spell, or one that this process alone keeps busy, every kernel ran on one thread
(measured on 2 idle cores at load average 2.1: a 512³ matmul in 4.3 ms instead of 2.5).

So the team is sized here instead, at most every `INTERVAL` seconds: the core count less the cores the
*other* processes kept busy since the last look (the machine's busy time from /proc/stat less this
process's CPU time and that of its finished children, the compilers it ran, from getrusage, over the wall
time). A last look older than `STALE` seconds says nothing about now (a busy spell that ended a second ago
would shrink the team for the next one: measured, a 512^3 matmul at 3.2 ms instead of 1.8 right after a
busy child finished), so then the team is sized by the threads runnable at this moment instead
(procs_running of /proc/stat less this process's own running threads).

The size is set with `omp_set_num_threads` in each launching thread, and only over a value set here: a
size someone else chose ($OMP_NUM_THREADS or $OMP_DYNAMIC in the environment, or a call into the OpenMP
runtime, as conformance's determinism rerun makes) is left alone. Without /proc/stat, libgomp's dynamic
mode decides, as before.
"""

from __future__ import annotations

import ctypes
import os
import resource
import threading
import time
from pathlib import Path

from uopgrad.config import getenv_is_set

__all__ = ["INTERVAL", "Team"]

INTERVAL = 0.2  # seconds between looks at the machine's load
STALE = 1.0  # a last look older than this is not averaged over: the threads running now decide
_STAT = Path("/proc/stat")
_TASKS = Path("/proc/self/task")
_TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _machine_busy() -> float | None:
    """CPU seconds the whole machine has been busy (not idle, not waiting for I/O), None if unknown."""
    try:
        fields = _STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 6:
        return None
    ticks = [int(x) for x in fields[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) * _TICK  # idle and iowait are fields 4 and 5


def _own_busy() -> float:
    """CPU seconds of this process, all its threads (the kernels' OpenMP workers too), and of the children
    it has waited for (the C compilers it ran are its own work, not another process's load)."""
    r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def _others_running() -> int | None:
    """Threads of other processes runnable at this moment (procs_running less this process's running
    threads), None if unknown."""
    try:
        line = next(ln for ln in _STAT.read_text().splitlines() if ln.startswith("procs_running "))
        mine = 0
        for task in _TASKS.iterdir():
            stat = (task / "stat").read_text()
            mine += stat[stat.rindex(")") + 2] == "R"  # the state follows the command's closing paren
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return max(0, int(line.split()[1]) - max(mine, 1))


class Team:
    """Sizes the OpenMP teams of the kernels of one OpenMP runtime (`omp`, a library that exports it)."""

    def __init__(self, omp: ctypes.CDLL) -> None:
        self._set_threads, self._max_threads = omp.omp_set_num_threads, omp.omp_get_max_threads
        self._max_threads.restype = ctypes.c_int
        self.cores = int(omp.omp_get_num_procs())
        self.machine_cores = os.cpu_count() or self.cores
        chosen = getenv_is_set("OMP_NUM_THREADS") or getenv_is_set("OMP_DYNAMIC")
        self.managed = not chosen and _machine_busy() is not None
        if not chosen and not self.managed:
            omp.omp_set_dynamic(1)  # no /proc/stat: libgomp's load average is the best there is
        self.size = self.cores
        self._lock = threading.Lock()
        self._last: tuple[float, float, float] | None = None  # (time, machine busy, own busy)
        self._local = threading.local()  # per launching thread: the size set here last

    def _look(self, now: float) -> None:
        busy = _machine_busy()
        if busy is None:
            return
        own = _own_busy()
        if self._last is not None and now - self._last[0] <= STALE:
            t0, busy0, own0 = self._last
            others = max(0.0, (busy - busy0) - (own - own0)) / max(now - t0, 1e-9)
            self.size = max(1, min(self.cores, self.machine_cores - int(others + 0.5)))
        elif self._last is not None and (running := _others_running()) is not None:
            self.size = max(1, min(self.cores, self.machine_cores - running))
        self._last = (now, busy, own)

    def fit(self) -> None:
        """Before a launch in this thread: the team size for the load now, unless another size was chosen."""
        if not self.managed:
            return
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= INTERVAL:
            with self._lock:
                if self._last is None or now - self._last[0] >= INTERVAL:
                    self._look(now)
        mine = getattr(self._local, "size", None)
        if mine == self.size:
            return
        current = int(self._max_threads())
        if current == (self.cores if mine is None else mine):  # the default, or set here: ours to change
            self._set_threads(self.size)
            self._local.size = self.size
