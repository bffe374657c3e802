"""Debug output and tracing hooks (layer 9): what the pipeline ran, through the `uopgrad` logger.

`DEBUG=n` picks what is logged (each level adds to the ones below it):

| level | logger              | what                                                               |
| ----- | ------------------- | ------------------------------------------------------------------ |
| 1     | `uopgrad.kernel`    | each kernel run: name, device, launch size, time, GFLOP/s, GB/s     |
| 1     | `uopgrad.realize`   | "compiling N kernels" before a build; one summary line per realize  |
| 2     | `uopgrad.schedule`  | the schedule of each realize: kernels and copies with their buffers |
| 3     | `uopgrad.pass`      | the IR of each kernel after each named pass ("(unchanged)": as before) |
| 4     | `uopgrad.source`    | the generated source of each kernel (the prelude once a process)    |

Messages go to the `uopgrad` logger at INFO; when neither it nor the root logger has a handler, one that
writes to stderr is attached on first use, so `DEBUG=2 python prog.py` prints without any set-up.

The pipeline calls these functions (`realizing`, `compiling`, `schedule_made`, `after_pass`, `source`,
`kernel_ran`, `track`); tracers (`add_tracer`, e.g. the VIZ page writer) see the same events, whatever DEBUG
is. A long build or BEAM search shows a progress bar at any DEBUG level where tqdm is importable and stderr
is a terminal (tqdm is never a dependency); without one, DEBUG>=1 has the "compiling" line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from uopgrad.config import DEBUG
from uopgrad.ops import Ops

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = [
    "Tracer",
    "add_tracer",
    "Compiling",
    "after_pass",
    "compiling",
    "kernel_name",
    "kernel_ran",
    "lowering",
    "log",
    "logger",
    "realizing",
    "remove_tracer",
    "schedule_made",
    "source",
    "track",
    "traced",
]

logger = logging.getLogger("uopgrad")
_LEVEL_LOGGERS = {1: "kernel", 2: "schedule", 3: "pass", 4: "source"}
T = TypeVar("T")


class Tracer(Protocol):
    """Receives the pipeline's events (every method is called; return values are ignored)."""

    def realize_begin(self, device: str, sink: UOp) -> None:
        """A realize of `sink` on `device` starts (not called for realizes nested in another)."""

    def realize_end(self, device: str, sink: UOp, error: BaseException | None) -> None:
        """That realize finished (`error` is what it raised, if anything)."""

    def after_pass(self, name: str, sink: UOp) -> None:
        """A named codegen pass produced `sink`."""


_tracers: list[Tracer] = []
_depth = 0


def add_tracer(t: Tracer) -> None:
    """Send the pipeline's events to `t` too."""
    _tracers.append(t)


def traced() -> bool:
    """Whether a tracer is attached (it sees each pass of each kernel lowered)."""
    return bool(_tracers)


def remove_tracer(t: Tracer) -> None:
    """Stop sending events to `t`."""
    if t in _tracers:
        _tracers.remove(t)


def log(level: int, msg: str, name: str | None = None) -> None:
    """Log `msg` on the logger of DEBUG level `level`, or on `uopgrad.<name>` (the caller checks DEBUG)."""
    if not (logger.handlers or logging.getLogger().handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logging.getLogger(f"uopgrad.{name or _LEVEL_LOGGERS[level]}").info(msg)


@dataclasses.dataclass
class _Tally:
    """What one realize (with the realizes nested in it, on this thread) ran and built: its summary line."""

    start: float
    kernels: int = 0  # launches
    kernel_s: float = 0.0
    built: int = 0  # kernels lowered and compiled for this realize
    reused: int = 0  # kernels this process had built before
    disk_hits: int = 0  # of `built`, binaries read from the compile cache
    compile_s: float = 0.0


class _Thread(threading.local):
    tally: _Tally | None = None
    kernel: str = ""  # the kernel whose passes run now (DEBUG=3 names it)


_here = _Thread()
_prelude_lines: set[str] = set()  # DEBUG=4: source lines before a kernel's function, printed once a process


@contextlib.contextmanager
def realizing(device: str, sink: UOp) -> Iterator[None]:
    """Around a backend's realize: tracers see where one starts and ends (the outermost one only); at
    DEBUG>=1 the outermost one on this thread ends with a summary line."""
    global _depth
    _depth += 1
    outer = _depth == 1
    if outer:
        for t in list(_tracers):
            t.realize_begin(device, sink)
    tally = None
    if _here.tally is None and DEBUG.value >= 1:
        tally = _here.tally = _Tally(time.perf_counter())
    error: BaseException | None = None
    try:
        yield
    except BaseException as e:
        error = e
        raise
    finally:
        _depth -= 1
        if tally is not None:
            _here.tally = None
            _summary(device, tally, error)
        if outer:
            for t in list(_tracers):
                t.realize_end(device, sink, error)


def _summary(device: str, t: _Tally, error: BaseException | None) -> None:
    if not (
        t.kernels or t.built or t.reused or error
    ):  # no kernels (REFERENCE, copies): its own lines say it
        return
    wall = time.perf_counter() - t.start
    failed = f" FAILED ({type(error).__name__})" if error is not None else ""
    log(
        1,
        f"{device:<10} realize{failed}: {_count(t.kernels, 'kernel')} run in {t.kernel_s * 1e3:.3f} ms, "
        f"wall {wall * 1e3:.3f} ms; compile {t.compile_s * 1e3:.3f} ms: {t.built} built "
        f"({t.disk_hits} from the disk cache), {t.reused} reused",
        "realize",
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


class Compiling:
    """One build of new kernels (`compiling`): `track` their lowering, `phase` names the step now running."""

    def __init__(self, device: str, n: int) -> None:
        self.device, self.n = device, n
        self._bar = _progress_bar(n, f"{device}: lowering") if n else None

    def track(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, each one a step of the progress bar once it is done."""
        for item in items:
            yield item
            if self._bar is not None:
                self._bar.update(1)

    def phase(self, what: str) -> None:
        """The bar's label from now on (e.g. "compiling" once every kernel is lowered)."""
        if self._bar is not None:
            self._bar.set_description(f"{self.device}: {what}")

    def close(self) -> None:
        """Take the bar off the terminal."""
        if self._bar is not None:
            self._bar.close()


@contextlib.contextmanager
def compiling(device: str, n: int, reused: int, stats: Mapping[str, int]) -> Iterator[Compiling]:
    """Around the build of `n` new kernels of a realize (`reused` were built before; `stats` is the
    compiler's counter, read before and after for the disk cache's hits): a line at DEBUG>=1, a progress
    bar where tqdm can draw one, and the time and counts for the realize's summary."""
    if n and DEBUG.value >= 1:
        log(1, f"compiling {_count(n, 'kernel')} for {device} ...", "realize")
    hits0, start = stats.get("disk_hit", 0), time.perf_counter()
    c = Compiling(device, n)
    try:
        yield c
    finally:
        c.close()
        if (t := _here.tally) is not None:
            t.built += n
            t.reused += reused
            t.disk_hits += max(stats.get("disk_hit", 0) - hits0, 0)
            t.compile_s += time.perf_counter() - start if n else 0.0


def track(items: Sequence[T], what: str) -> Iterator[T]:
    """`items` with a progress bar labelled `what` where tqdm can draw one (a BEAM search's candidates)."""
    bar = _progress_bar(len(items), what)
    try:
        for item in items:
            yield item
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _progress_bar(total: int, what: str) -> Any:  # noqa: ANN401 (tqdm is optional: no type to name)
    """A tqdm bar on stderr, shown only once the work took a second; None without tqdm or a terminal."""
    if total < 2 or not _can_draw():
        return None
    from tqdm import tqdm  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return tqdm(total=total, desc=what, unit="kernel", delay=1.0, leave=False, file=sys.stderr)


def _can_draw() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) and importlib.util.find_spec("tqdm") is not None


@contextlib.contextmanager
def lowering(name: str) -> Iterator[None]:
    """Around the codegen passes of kernel `name`: DEBUG=3 names it in every pass's dump."""
    before, _here.kernel = _here.kernel, name
    try:
        yield
    finally:
        _here.kernel = before


def _buf(b: UOp) -> str:
    return f"{b.device}:{b.dtype.base.name}[{b.arg}]" if b.op is Ops.BUFFER else b.op.name


def schedule_made(items: Sequence[UOp], device: str) -> None:
    """DEBUG=2: the schedule, one line per kernel or copy with the buffers it reads and writes."""
    if DEBUG.value < 2:
        return
    lines = [f"schedule on {device}: {len(items)} item(s)"]
    for i, it in enumerate(items):
        body = it.src[0]
        what = "copy" if body.op is Ops.COPY else kernel_name(it)
        lines.append(f"  {i:3d} {what:<24} " + " ".join(_buf(b) for b in it.src[1:]))
    log(2, "\n".join(lines))


def after_pass(name: str, sink: UOp, unchanged: bool = False) -> None:
    """DEBUG=3: the IR after the codegen pass `name`, under the kernel's name (`lowering`), or "(unchanged)"
    where the pass returned its input; tracers see it at any level."""
    for t in list(_tracers):
        t.after_pass(name, sink)
    if DEBUG >= 3:
        head = f"--- after {name} of {_here.kernel or 'a kernel'}"
        log(3, f"{head} (unchanged)" if unchanged else f"{head}\n{sink.pretty(200)}")


def source(name: str, src: str) -> None:
    """DEBUG=4: the generated source of kernel `name`. The lines before its function (the renderer's
    prelude: types, declarations, macros) are printed the first time only."""
    if DEBUG.value < 4:
        return
    lines = src.splitlines()
    start = next((i for i, ln in enumerate(lines) if f"{name}(" in ln), 0)
    while start > 0 and lines[start - 1].strip() and not lines[start - 1].rstrip().endswith((";", "}")):
        start -= 1  # an attribute or `extern "C"` line just above the signature belongs to the kernel
    prelude = [ln for ln in lines[:start] if ln.strip()]
    new = [ln for ln in prelude if ln not in _prelude_lines]
    _prelude_lines.update(prelude)
    shown = new + [f"// (prelude of {len(prelude) - len(new)} lines as printed before)"] * (
        len(new) < len(prelude)
    )
    log(4, "\n".join([f"--- source of {name}", *shown, *lines[start:]]))


def kernel_name(call: UOp) -> str:
    """A kernel CALL's name: a custom kernel's own, else `E_<shape>` / `r_<shape>` (r: it reduces)."""
    body = call.src[0]
    if call.op is Ops.CALL and getattr(call.arg, "name", None):
        return str(call.arg.name)
    kind = "r" if any(u.op is Ops.REDUCE for u in body.toposort()) else "E"
    shape = body.src[0].src[0].shape if body.src and body.src[0].op is Ops.STORE else ()
    return "_".join([kind, *(str(d) if isinstance(d, int) else "n" for d in shape)])


def kernel_ran(
    device: str,
    name: str,
    seconds: float,
    flops: int,
    nbytes: int,
    global_size: Sequence[int] | None = None,
    local_size: Sequence[int] | None = None,
    uops: tuple[UOp, ...] = (),
) -> None:
    """DEBUG=1: one line for a kernel that ran: name, device, launch size (a grid's global and local sizes,
    a loop-style kernel's output loops from `uops`), time, GFLOP/s and GB/s (from the program's estimates,
    uopgrad.codegen.estimate)."""
    if DEBUG.value < 1:
        return
    if (t := _here.tally) is not None:
        t.kernels += 1
        t.kernel_s += seconds
    if global_size is not None:
        launch = f"[{','.join(map(str, global_size))}]"
    else:
        launch = f"loops[{','.join(_loops(uops))}]" if uops else ""
    if local_size is not None:
        launch += f"[{','.join(map(str, local_size))}]"
    rate = max(seconds, 1e-9)
    log(
        1,
        f"{device:<10} {name:<28} {launch:<18} {seconds * 1e3:9.3f} ms "
        f"{flops / rate / 1e9:9.2f} GFLOP/s {nbytes / rate / 1e9:9.2f} GB/s",
    )


@functools.lru_cache(maxsize=256)
def _loops(uops: tuple[UOp, ...]) -> tuple[str, ...]:
    """The trip counts of a loop-style program's output loops ("n": a variable's), outermost first."""
    loops = sorted((u for u in uops if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg[0])
    return tuple(str(r.src[0].arg) if r.src[0].op is Ops.CONST else "n" for r in loops)
