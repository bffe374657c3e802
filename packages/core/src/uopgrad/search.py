"""BEAM (layer 12, beside the pass driver): an opt-in measured search over the opt pass's register tiles.

With `BEAM=n` (tinygrad's habit) a compiled loop-style backend picks the tile shape of each new kernel by
timing it: every `opt.choices()` candidate is lowered and rendered, the distinct sources are compiled side
by side, each runs on buffers of random values (3 launches, the best kept), the `n` fastest run again (10
launches) and the fastest of those wins. The winner is kept on disk (`uopgrad.diskcache`) under the
kernel's structure, the target's op set, vector width and scratch, the renderer and the compiler's
identity (which names the host CPU), so a later process compiles nothing new for it. Every candidate gives
the same bits: a tile shape only copies stores and shares loads, and each output's reduce keeps its order
(spec/opt.md); what may reorder a reduce (unrolling it) is the heuristic's decision, not searched.
`BEAM=0`, the default, is the heuristic alone. Kernels with variables (symbolic shapes) are not searched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from uopgrad import debug, diskcache
from uopgrad.codegen import Program, Target
from uopgrad.codegen.opt import OPT, Choice, choices
from uopgrad.config import ContextVar
from uopgrad.dtype import PtrDType, dtypes
from uopgrad.ops import Ops
from uopgrad.uop import UOp

if TYPE_CHECKING:
    from uopgrad.backend import CompiledBackend
    from uopgrad.backend import Program as Runtime

__all__ = ["BEAM", "Lower", "best_choice"]

# pipeline.lower, which the backend hands in (this module sits beside the pass driver, not above it)
Lower = Callable[..., Program]

# BEAM=n: time the opt pass's tile shapes and keep the n fastest for a second, longer timing; 0: heuristic
BEAM = ContextVar("BEAM", 0)


def _digest(be: CompiledBackend, body: UOp, nargs: int, target: Target) -> str:
    # the whole target (a new knob is in the key without an edit here), the renderer and the compiler
    ident = (
        nargs,
        target.canonical(),
        type(be.renderer).__name__,
        getattr(be.compiler, "cache_key", type(be.compiler).__name__),
    )
    return hashlib.sha256(b"beam-3|" + body.key + repr(ident).encode()).hexdigest()


def best_choice(be: CompiledBackend, call: UOp, target: Target, lower: Lower) -> Choice | None:
    """The tile shape BEAM picks for kernel CALL `call` on backend `be` (whose target is `target`), lowering
    candidates with `lower` (from the disk cache when it was picked before); None where BEAM is off or does
    not apply (the heuristic's shape)."""
    if not int(BEAM) or not OPT or target.vector_width <= 0 or target.grid is not None:
        return None
    body, nargs = call.src[0], len(call.src) - 1
    digest = _digest(be, body, nargs, target)
    if (hit := diskcache.read(digest)) is not None:
        return Choice(**json.loads(hit))
    found: dict[str, tuple[Choice, Program]] = {}
    tiles = choices(target.vector_width, target.cache_sizes)
    for c in debug.track(tiles, f"BEAM={int(BEAM)} {be.name}"):  # a bar, if tqdm
        prg = lower(call, target, c)
        if prg.vars:
            return None
        found.setdefault(be.renderer.render(prg), (c, prg))
    winner = next(iter(found.values()))[0]
    if len(found) > 1:
        winner = _race(be, found, int(BEAM))
    diskcache.write(digest, json.dumps(dataclasses.asdict(winner)).encode())
    return winner


def _race(be: CompiledBackend, found: dict[str, tuple[Choice, Program]], beam: int) -> Choice:
    """The fastest candidate: all timed briefly, the `beam` best again at length."""
    srcs = list(found)
    libs = be.compiler.compile_cached_many(srcs)
    first = found[srcs[0]][1]
    bufs = _buffers(be, first)
    try:
        runs = {
            src: be.runtime(be.renderer.function_name(found[src][1].name), lib)
            for src, lib in zip(srcs, libs)
        }
        quick = sorted(srcs, key=lambda s: _time(runs[s], found[s][1], bufs, 3))
        return found[min(quick[: max(beam, 1)], key=lambda s: _time(runs[s], found[s][1], bufs, 10))][0]
    finally:
        for h, nbytes in bufs.values():
            be.allocator.free(h, nbytes)


def _buffers(be: CompiledBackend, prg: Program) -> dict[int, tuple[object, int]]:
    """Device buffers of random values for every buffer slot of `prg` (finite floats, small integers)."""
    rng = np.random.default_rng(0)
    out: dict[int, tuple[object, int]] = {}
    for p in prg.uops:
        if p.op is not Ops.PARAM or not isinstance(p.dtype, PtrDType) or p.arg in out:
            continue
        np_dt = np.dtype(dtypes.to_numpy(p.dtype.base))
        n = max(p.dtype.size, 1)
        data = (
            rng.standard_normal(n) if np_dt.kind == "f" else rng.integers(0, 2 if np_dt.kind == "b" else 7, n)
        )
        arr = np.ascontiguousarray(data.astype(np_dt))
        h = be.allocator.alloc(arr.nbytes, False)
        be.allocator.copyin(h, arr.view(np.uint8).data)
        out[p.arg] = (h, arr.nbytes)
    return out


def _time(run: Runtime, prg: Program, bufs: dict[int, tuple[object, int]], n: int) -> float:
    """The best of `n` launches, in seconds."""
    handles = [bufs[s][0] for s in prg.globals]
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        run(*handles, vals=(), global_size=prg.global_size, local_size=prg.local_size)
        best = min(best, time.perf_counter() - start)
    return best
