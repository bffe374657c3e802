"""Lowered kernels kept on disk (layer 12, over the pass driver and BEAM, under the backend): a process that
needs a kernel some process lowered before skips lowering and rendering it, not only compiling it.

The compile cache (`Compiler.compile_cached`) is keyed by the source, and only lowering makes the source: a
fresh process lowered every kernel again to look its binary up. A transformer block's first step with every
binary on disk took 0.65 s, 0.39 s of it lowering 42 kernels (bench/first_step.py's block, run twice).

Here the lowered program and its source are kept under what makes them: the kernel body's structure
(`UOp.key`, the same in every process) and argument count, the whole target, the tile choice, OPT, the
renderer's and the compiler's identity, and a digest of the code that lowers and renders them (every module
of uopgrad and of the renderer's and the compiler's packages), so that a pass edited or upgraded never
reads what an older one wrote. An entry is a pickle of the program, whose uops load as the same interned
nodes lowering makes, and of the source; `diskcache` checks each entry's SHA-256 and stores it only in a
directory no one else can write, the one whose shared objects the CPU backend loads and runs.

Not read where the passes are watched (DEBUG>=3 dumps each pass of each kernel lowered, a tracer such as
VIZ draws them) or `ENABLED` is False (a pass or renderer patched at run time): those lower every kernel.
Not used for a backend whose renderer or compiler has no source file (typed into an interpreter or a
notebook: nothing tells its versions apart). An entry that does not load is a miss; only the programs of
kernels that built and loaded are stored.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from uopgrad import debug, diskcache
from uopgrad.codegen import LinearProgram, Target
from uopgrad.codegen.opt import OPT, Choice
from uopgrad.config import DEBUG
from uopgrad.pipeline import lower
from uopgrad.pipeline import tracers as pipeline_tracers
from uopgrad.search import best_choice
from uopgrad.uop import UOp

if TYPE_CHECKING:
    from uopgrad.backend import CompiledBackend

__all__ = ["ENABLED", "Lowered", "lowered", "store"]

# False: every kernel is lowered and rendered, and nothing is stored. For code that patches a pass or a
# renderer at run time (a test planting a bug, the kit's `recorded_sources`): the digest reads the files on
# disk, so such a patch would not be told apart from the code it replaces
ENABLED = True

# (the program, its source, the digest to store it under: None when it came from the disk)
Lowered = tuple[LinearProgram, str, str | None]
_FORMAT = b"program-1|"


@functools.cache
def _code_digest(*packages: str) -> bytes | None:
    """A digest of every module of `packages` (their text, by relative path): the code that lowers and
    renders. Read once a process (about 100 small files). None where one has no file to read (a renderer
    typed into an interpreter or a notebook) or one can't be read: nothing tells its versions apart, so
    nothing is stored."""
    h = hashlib.sha256()
    for name in sorted(set(packages)):
        module = importlib.import_module(name)
        if (file := getattr(module, "__file__", None)) is None:
            return None
        # a package: its tree; a module on its own (a backend in one file): only that file, never the
        # directory it sits in (a project's, or site-packages)
        root = Path(file).parent
        try:
            files = sorted(root.rglob("*.py")) if hasattr(module, "__path__") else [Path(file)]
            for path in files:
                h.update(f"{name}/{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
        except OSError:  # a file that went away or can't be read: no digest, nothing stored
            return None
    return h.digest()


def _digest(
    body: UOp, nargs: int, target: Target, choice: Choice | None, renderer: object, compiler: object
) -> str | None:
    packages = ("uopgrad", type(renderer).__module__.split(".")[0], type(compiler).__module__.split(".")[0])
    if (code := _code_digest(*packages)) is None:
        return None
    ident = (
        nargs,
        target.canonical(),
        None if choice is None else sorted(dataclasses.asdict(choice).items()),
        int(OPT),
        f"{type(renderer).__module__}.{type(renderer).__qualname__}",
        getattr(compiler, "cache_key", type(compiler).__qualname__),
    )
    return hashlib.sha256(_FORMAT + body.key + code + repr(ident).encode()).hexdigest()


def lowered(be: CompiledBackend, call: UOp, target: Target) -> Lowered:
    """Kernel CALL `call`'s program and source on backend `be` for `target` (with BEAM's tile choice, where
    it searches): from the disk where a process stored them, else lowered and rendered, with the digest
    `store` keeps them under."""
    choice = best_choice(be, call, target, lower)
    digest = None
    if ENABLED and DEBUG.value < 3 and not debug.traced() and not pipeline_tracers:
        digest = _digest(call.src[0], len(call.src) - 1, target, choice, be.renderer, be.compiler)
        if digest is not None and (blob := diskcache.read(digest)) is not None:
            try:
                program, src = pickle.loads(blob)
            except Exception:  # written by a build this digest does not tell apart: lowered again
                pass
            else:
                if isinstance(program, LinearProgram) and isinstance(src, str):
                    return program, src, None
    program = lower(call, target, choice)
    return program, be.renderer.render(program), digest


def store(done: Sequence[Lowered]) -> None:
    """Keep the programs of `done` that were lowered here (one transaction for all). One that does not
    pickle (an arg of a type pickle refuses, a graph deeper than the recursion limit) is not kept."""
    entries = []
    for program, src, digest in done:
        if digest is not None:
            try:
                entries.append((digest, pickle.dumps((program, src), protocol=pickle.HIGHEST_PROTOCOL)))
            except Exception:  # lowered again next time: only time is lost
                continue
    diskcache.write_many(entries)
