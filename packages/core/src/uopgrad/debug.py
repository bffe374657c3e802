"""Debug output and tracing hooks (layer 9): what the pipeline ran, through the `uopgrad` logger.

`DEBUG=n` picks what is logged (each level adds to the ones below it):

| level | logger              | what                                                               |
| ----- | ------------------- | ------------------------------------------------------------------ |
| 1     | `uopgrad.kernel`    | each kernel run: name, device, launch size, time, GFLOP/s, GB/s     |
| 2     | `uopgrad.schedule`  | the schedule of each realize: kernels and copies with their buffers |
| 3     | `uopgrad.pass`      | the IR after each named pass                                        |
| 4     | `uopgrad.source`    | the generated source of each kernel                                 |

Messages go to the `uopgrad` logger at INFO; when neither it nor the root logger has a handler, one that
writes to stderr is attached on first use, so `DEBUG=2 python prog.py` prints without any set-up.

The pipeline calls these functions (`realizing`, `schedule_made`, `after_pass`, `source`, `kernel_ran`);
tracers (`add_tracer`, e.g. the VIZ page writer) see the same events, whatever DEBUG is.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from uopgrad.config import DEBUG
from uopgrad.ops import Ops

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = [
    "Tracer",
    "add_tracer",
    "after_pass",
    "kernel_name",
    "kernel_ran",
    "log",
    "logger",
    "realizing",
    "remove_tracer",
    "schedule_made",
    "source",
]

logger = logging.getLogger("uopgrad")
_LEVEL_LOGGERS = {1: "kernel", 2: "schedule", 3: "pass", 4: "source"}


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


def remove_tracer(t: Tracer) -> None:
    """Stop sending events to `t`."""
    if t in _tracers:
        _tracers.remove(t)


def log(level: int, msg: str) -> None:
    """Log `msg` on the logger of DEBUG level `level` (the caller checks DEBUG)."""
    if not (logger.handlers or logging.getLogger().handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logging.getLogger(f"uopgrad.{_LEVEL_LOGGERS[level]}").info(msg)


@contextlib.contextmanager
def realizing(device: str, sink: UOp) -> Iterator[None]:
    """Around a backend's realize: tracers see where one starts and ends (the outermost one only)."""
    global _depth
    _depth += 1
    outer = _depth == 1
    if outer:
        for t in list(_tracers):
            t.realize_begin(device, sink)
    error: BaseException | None = None
    try:
        yield
    except BaseException as e:
        error = e
        raise
    finally:
        _depth -= 1
        if outer:
            for t in list(_tracers):
                t.realize_end(device, sink, error)


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


def after_pass(name: str, sink: UOp) -> None:
    """DEBUG=3: the IR after the codegen pass `name`; tracers see it at any level."""
    for t in list(_tracers):
        t.after_pass(name, sink)
    if DEBUG >= 3:
        log(3, f"--- after {name}\n{sink.pretty(200)}")


def source(name: str, src: str) -> None:
    """DEBUG=4: the generated source of kernel `name`."""
    if DEBUG >= 4:
        log(4, f"--- source of {name}\n{src}")


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
) -> None:
    """DEBUG=1: one line for a kernel that ran: name, device, launch size, time, GFLOP/s and GB/s (from the
    program's estimates, uopgrad.codegen.estimate)."""
    if DEBUG.value < 1:
        return
    launch = "" if global_size is None else f"[{','.join(map(str, global_size))}]"
    if local_size is not None:
        launch += f"[{','.join(map(str, local_size))}]"
    rate = max(seconds, 1e-9)
    log(
        1,
        f"{device:<10} {name:<28} {launch:<18} {seconds * 1e3:9.3f} ms "
        f"{flops / rate / 1e9:9.2f} GFLOP/s {nbytes / rate / 1e9:9.2f} GB/s",
    )
