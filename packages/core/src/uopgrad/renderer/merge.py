"""Several rendered C-family kernels as one source, for compilers whose every invocation costs far more than
the kernel it builds (PoCL ~0.45 s a build, a host C++ compiler per shared object).

A source `CStyleRenderer.render_kernel` writes is its prefix items (pragmas, `#include`s and helper
functions, each starting at column 0 and ending before the next such line) followed by one kernel whose
header `header` matches. A merged source holds every pragma and include first, each helper once (helpers
come from one table, so one name is one text; were two to differ, the merged source would not compile and
the caller builds the sources one by one), then the kernels in order. Kernel names must be distinct in one
source: `merge` renames a repeated one (`r_1` -> `r_1_m3`) and says so; `groups` instead splits the sources
into groups of distinct names, for a caller that cannot rename.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["groups", "merge", "split"]


def split(src: str, header: re.Pattern[str]) -> tuple[list[str], str, str] | None:
    """(the prefix items, the kernel's name, the kernel from its header on), or None when `src` is not one
    generated kernel. `header`'s group 1 is the name."""
    found = list(header.finditer(src))
    if len(found) != 1:
        return None
    items: list[list[str]] = []
    for line in src[: found[0].start()].splitlines():
        if not items or (line and not line[0].isspace() and not line.startswith("}")):
            items.append([line])
        else:
            items[-1].append(line)
    texts = ["\n".join(lines).strip() for lines in items]
    return [t for t in texts if t], found[0][1], src[found[0].start() :]


def merge(srcs: Sequence[str], header: re.Pattern[str]) -> tuple[str, list[str]] | None:
    """One source for all of `srcs` and each kernel's name in it, or None when one of them is not one
    generated kernel."""
    parts = [split(src, header) for src in srcs]
    items: dict[str, None] = {}
    kernels: list[str] = []
    names: list[str] = []
    for k, p in enumerate(parts):
        if p is None:
            return None
        items.update(dict.fromkeys(p[0]))
        name = p[1] if p[1] not in names else f"{p[1]}_m{k}"
        m = header.match(p[2])
        assert m is not None  # split found the header at the kernel's start
        kernels.append(p[2][: m.start(1)] + name + p[2][m.end(1) :])
        names.append(name)
    first = [i for i in items if i.startswith("#")]
    return "\n".join([*first, *(i for i in items if not i.startswith("#")), "", *kernels]), names


def groups(srcs: Sequence[str], header: re.Pattern[str]) -> list[list[int]]:
    """Indices of `srcs` in groups whose kernels have distinct names (a source that is not one generated
    kernel is a group of its own)."""
    out: list[tuple[list[int], set[str] | None]] = []
    for k, src in enumerate(srcs):
        p = split(src, header)
        group = None if p is None else next((g for g in out if g[1] is not None and p[1] not in g[1]), None)
        if p is None or group is None or group[1] is None:
            out.append(([k], None if p is None else {p[1]}))
        else:
            group[0].append(k)
            group[1].add(p[1])
    return [g[0] for g in out]
