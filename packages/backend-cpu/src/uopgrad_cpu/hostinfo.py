"""The host CPU's facts that the opt pass's tile choices derive from (spec/opt.md §3.1), read once.

`host_facts()` reads the vector flags of /proc/cpuinfo (avx512f, avx2, fma; NEON's asimd) and the data
caches of cpu0 in sysfs (/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}). What it cannot read
falls back to safe defaults: a width from the machine name (16 bytes on x86-64 and arm64, 0 elsewhere: the
opt pass is then off) and no cache sizes (the pass then keeps its measured constants). The readers take
their paths as arguments so that a test can hand them another machine's files.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CPUINFO", "SYSFS_CACHE", "HostFacts", "cache_sizes", "cpu_flags", "host_facts", "vector_width"]

CPUINFO = Path("/proc/cpuinfo")
SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class HostFacts:
    """What the CPU backend tells codegen about its host."""

    vector_width: int  # bytes of the widest vector register `-march=native` uses: 64, 32, 16 or 0
    fma: bool  # fused multiply-add units (read and reported; the pass never emits FMA: spec/opt.md §2)
    cache_sizes: tuple[int, ...]  # bytes of one core's L1d, L2, L3 (0 where a level is missing); () unknown


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The feature flags of the first processor in `cpuinfo` (x86 `flags`, arm `Features`); none if it
    cannot be read."""
    try:
        info = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for ln in info.splitlines():
        if ln.startswith(("flags", "Features")) and ":" in ln:
            return frozenset(ln.split(":", 1)[1].split())
    return frozenset()


def vector_width(flags: frozenset[str], machine: str = "") -> int:
    """Bytes of the widest vector register of a CPU with `flags`: AVX-512 64, AVX2 32, SSE2 or NEON 16; by
    the machine name where the flags say nothing (16 on x86-64 and arm64); else 0 (the opt pass is off)."""
    if "avx512f" in flags:
        return 64
    if "avx2" in flags:
        return 32
    if flags & {"sse2", "asimd", "neon"} or machine in ("x86_64", "AMD64", "arm64", "aarch64"):
        return 16
    return 0


def _size(text: str) -> int:
    """sysfs's cache size ("48K", "2048K", "32M") in bytes; 0 if it does not parse."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return int(digits) * scale if digits.isdigit() else 0


def cache_sizes(root: Path = SYSFS_CACHE) -> tuple[int, ...]:
    """(L1d, L2, L3) bytes of the data (or unified) caches under `root` (sysfs's cpu0/cache), 0 for a level
    that is missing; () where nothing can be read or there is no L1d or L2 (the pass's defaults apply)."""
    found: dict[int, int] = {}
    try:
        dirs = sorted(p for p in root.iterdir() if p.name.startswith("index"))
    except OSError:
        return ()
    for d in dirs:
        try:
            level = int((d / "level").read_text().strip())
            kind = (d / "type").read_text().strip()
            size = _size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0 and 1 <= level <= 3:
            found[level] = size
    if not found.get(1) or not found.get(2):
        return ()
    return (found[1], found[2], found.get(3, 0))


@functools.cache
def host_facts() -> HostFacts:
    """This host's facts, read once per process."""
    flags = cpu_flags()
    return HostFacts(vector_width(flags, platform.machine()), "fma" in flags, cache_sizes())
