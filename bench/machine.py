"""The machine line every benchmark prints first: ratios are only worth quoting with the CPU they ran on,
its vector extensions and how busy it was."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _cpuinfo() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo ({} where there is none)."""
    try:
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block.splitlines())}


def cpu_model() -> str:
    """The CPU's model name, its widest x86 vector extension and the core count."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    flags = set(info.get("flags", "").split())
    vec = next((v for v in ("avx512f", "avx2", "avx", "sse2") if v in flags), "")
    return f"{name}{f' ({vec.upper()})' if vec else ''}, {os.cpu_count()} cores"


def machine_line() -> str:
    """`machine: <model> (<vector ISA>), N cores, load L` (the 1-minute load average, where there is one)."""
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"machine: {cpu_model()}{load}"
