"""VIZ (top layer): one self-contained HTML page per realize, with SVG pictures of what ran.

`UOPGRAD_VIZ=DIR` (read when uopgrad is imported) or `enable(DIR)` / `with capture(DIR):` starts a run
(`viz.run`): a directory `DIR/run-<time>-<pid>/` with an `index.html` listing every realize, and for each
realize, until the run's cap on bytes, a page `<n>-<device>.html` with
- the tensor graph that was realized;
- the schedule: kernels and copies (boxes) with the buffers they read and write (ellipses);
- each kernel's UOp graph as scheduled and after every named codegen pass, with buttons to step through
  (`page.html#kernel-0-step-3` opens a step);
- its linear program and the generated source (REFERENCE, which renders no source, shows the program).

Chains of movement ops are drawn as one box that lists them on a click. Pages need no server, network or
graphviz: the layout is `viz.layout`, the page's zoom, pan, search and stepping a short inline script
(`viz.assets`). `write_page(sink, path)` draws a graph without running it; `UOp.to_dot()` gives Graphviz
text.
"""

from __future__ import annotations

import contextlib
import html
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

from uopgrad import debug
from uopgrad.backend import Device
from uopgrad.codegen import LinearProgram
from uopgrad.config import getenv_bytes, getenv_path
from uopgrad.ops import GroupOp, Ops
from uopgrad.pipeline import clear_program_cache, lower
from uopgrad.schedule import schedule
from uopgrad.uop import UOp
from uopgrad.viz.assets import SCRIPT, STYLE, TOOLBAR
from uopgrad.viz.layout import Graph, svg
from uopgrad.viz.run import DEFAULT_MAX_BYTES, Run

__all__ = [
    "MAX_NODES",
    "capture",
    "disable",
    "enable",
    "index_page",
    "last_page",
    "page_html",
    "pages",
    "write_page",
]

MAX_NODES = 600  # a bigger graph is listed as text: a layered picture of it would not be readable
_MOVEMENT = {Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP}
_MEMORY = {Ops.BUFFER, Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE}
pages: list[Path] = []  # the pages written by this process, oldest first


def _colour(u: UOp) -> str:
    if u.op in GroupOp.ALU:
        return "#dbe8fb"
    if u.op in _MOVEMENT:
        return "#dcf2dc"
    if u.op in _MEMORY:
        return "#fde7c8"
    if u.op in (Ops.LOAD, Ops.STORE, Ops.INDEX, Ops.AFTER):
        return "#f8d7d7"
    if u.op in (Ops.CONST, Ops.VCONST):
        return "#eeeeee"
    return "#e9dcf5"


def _arg(u: UOp) -> str:
    if u.arg is None:
        return ""
    name = getattr(u.arg, "name", None)  # Ops and CallInfo args print by name
    text = name if isinstance(name, str) else repr(u.arg)
    return text if len(text) <= 28 else text[:25] + "..."


def label(u: UOp) -> list[str]:
    """A node's text: op, dtype (and shape where it has one), arg."""
    try:
        shape = u._shape
    except Exception:  # lowered IR: some nodes have no shape in the tensor sense
        shape = None
    dims = "" if not shape else "(" + ",".join(str(d) if isinstance(d, int) else "n" for d in shape) + ")"
    return [u.op.name, f"{u.dtype.name}{dims}", _arg(u)]


def _folded(u: UOp, k: int) -> bool:
    """Whether source `k` of `u` is drawn inside `u`'s box instead of as a node: a DEVICE or UNIQUE marker,
    or the constant shape operand of a movement op (its values are shown in the box)."""
    s = u.src[k]
    if s.op in (Ops.DEVICE, Ops.UNIQUE):
        return True
    return (
        u.op in _MOVEMENT
        and k > 0
        and s.op in (Ops.CONST, Ops.VCONST, Ops.STACK)
        and all(x.op in (Ops.CONST, Ops.VCONST, Ops.STACK) for x in s.toposort())
    )


def _operand(s: UOp) -> str:
    if s.op in (Ops.CONST, Ops.VCONST):
        return str(s.arg)
    return "(" + ",".join(_operand(x) for x in s.src) + ")" if s.op is Ops.STACK else s.op.name


def _chains(order: list[UOp], srcs: dict[UOp, list[UOp]]) -> dict[UOp, UOp]:
    """Each node of a movement chain (two or more movement ops, each the only user of the one before)
    mapped to the chain's last node, which stands for all of them."""
    users: dict[UOp, int] = {}
    for u in order:
        for s in srcs[u]:
            users[s] = users.get(s, 0) + 1
    tail: dict[UOp, UOp] = {}
    for u in reversed(order):  # consumers first: a chain is found from its end
        if u in tail or u.op not in _MOVEMENT:
            continue
        chain, cur = [u], u
        while len(srcs[cur]) == 1 and srcs[cur][0].op in _MOVEMENT and users.get(srcs[cur][0]) == 1:
            cur = srcs[cur][0]
            chain.append(cur)
        if len(chain) > 1:
            tail.update((c, u) for c in chain)
    return tail


def uop_svg(root: UOp, title: str = "") -> str:
    """The graph under `root` as SVG (call bodies drawn as their CALL's source), or a listing if too big.
    Shape operands of movement ops and DEVICE/UNIQUE markers are folded into the boxes that use them, and
    a chain of movement ops into one box that lists them when clicked."""
    keep: dict[UOp, None] = {}
    stack = [root]
    while stack:  # the nodes reachable through edges that are drawn
        u = stack.pop()
        if u in keep:
            continue
        keep[u] = None
        srcs = u.src[1:] if u.op in (Ops.CALL, Ops.FUNCTION) else u.src
        stack += [s for k, s in enumerate(srcs) if not _folded(u, k + len(u.src) - len(srcs))]
    order = [u for u in root.toposort(enter_calls=False) if u in keep]
    drawn = {u: [s for k, s in enumerate(u.src) if s in keep and not _folded(u, k)] for u in order}
    tail = _chains(order, drawn)
    boxes = [u for u in order if tail.get(u, u) is u]  # a chain is drawn once, as its last node
    if len(boxes) > MAX_NODES:
        return (
            f"<p>{len(boxes)} nodes: too many to draw (over {MAX_NODES}); the last ones:</p>"
            f"<pre>{html.escape(root.pretty(200))}</pre>"
        )
    members: dict[UOp, list[UOp]] = {}
    for u in order:
        if u in tail:
            members.setdefault(tail[u], []).append(u)
    index: dict[UOp, int] = {}
    g = Graph()
    for u in boxes:
        chain = members.get(u, [u])
        ins = [index[tail.get(s, s)] for s in drawn[chain[0]]]
        if len(chain) == 1:
            g.add(_lines(u), ins, _colour(u))
        else:
            names = [c.op.name for c in chain]
            lines = [
                f"{len(chain)} movement ops (click)",
                *_lines(u)[1:2],
                " ".join(n[:4] for n in names)[:40],
            ]
            g.add(lines, ins, _colour(u), ops=names, members=[" ".join(_lines(c)) for c in chain])
        index[u] = len(g.nodes) - 1
    return svg(g, title)


def _lines(u: UOp) -> list[str]:
    """A drawn node's text: its label and the operands folded into it."""
    extra = [
        _operand(s) for k, s in enumerate(u.src) if _folded(u, k) and s.op not in (Ops.DEVICE, Ops.UNIQUE)
    ]
    return label(u) + ([" ".join(extra)[:40]] if extra else [])


def graph_size(root: UOp) -> int:
    """How many nodes `root`'s graph has (what the run's index shows)."""
    return len(root.toposort(enter_calls=False))


def _schedule_svg(items: tuple[UOp, ...], programs: dict[int, LinearProgram]) -> str:
    g = Graph()
    buf_node: dict[UOp, int] = {}

    def node(b: UOp) -> int:
        if b not in buf_node:
            buf_node[b] = g.add([f"{b.device}", f"{b.dtype.base.name}[{b.arg}]"], (), "#fde7c8", "ellipse")
        return buf_node[b]

    for i, it in enumerate(items):
        body, bufs = it.src[0], it.src[1:]
        if body.op is Ops.COPY:
            reads, writes = bufs[1:], bufs[:1]
            name = "COPY"
        else:
            prg = programs.get(i)
            outs = set(prg.outs) if prg is not None else {0}
            reads = tuple(b for s, b in enumerate(bufs) if s not in outs)
            writes = tuple(b for s, b in enumerate(bufs) if s in outs)
            name = prg.name if prg is not None else debug.kernel_name(it)
        k = g.add([f"{i}: {name}"], [node(b) for b in reads], "#dbe8fb")
        for b in writes:
            buf_node[b] = g.add([f"{b.device}", f"{b.dtype.base.name}[{b.arg}]"], [k], "#fde7c8", "ellipse")
    return svg(g, "schedule")


class _Page:
    """Builds one page; each section catches its own errors so a page is written for any program."""

    def __init__(self, device: str, sink: UOp, error: BaseException | None = None) -> None:
        self.device, self.sink, self.error = device, sink, error
        self.parts: list[str] = []
        self.kernels = 0  # what the run's index shows of the page

    def section(self, title: str, body: str) -> None:
        anchor = "-".join(title.split(":")[0].split("(")[0].split())  # #tensor-graph, #schedule, #kernel-3
        self.parts.append(
            f'<section id="{html.escape(anchor)}"><h2>{html.escape(title)}</h2>{body}</section>'
        )

    def build(self, tracer: _Tracer | None) -> str:
        self.section("tensor graph", f'<div class="pic">{uop_svg(self.sink, "tensor graph")}</div>')
        try:
            items = schedule(self.sink).items
        except Exception as e:  # e.g. multi-device graphs, which the scheduler does not take yet
            self.section("schedule", f"<p>no schedule: {html.escape(f'{type(e).__name__}: {e}')}</p>")
            return self.html()
        kernels = {i: it for i, it in enumerate(items) if it.src[0].op is Ops.SINK}
        self.kernels = len(kernels)
        traced = {i: self.trace(it, tracer) for i, it in kernels.items()}
        programs = {i: t[0] for i, t in traced.items() if t[0] is not None}
        self.section(
            f"schedule ({len(items)} items)", f'<div class="pic">{_schedule_svg(items, programs)}</div>'
        )
        for i, (prg, steps, src) in traced.items():
            self.kernel(i, kernels[i], prg, steps, src)
        return self.html()

    def trace(
        self, call: UOp, tracer: _Tracer | None
    ) -> tuple[LinearProgram | None, list[tuple[str, UOp]], str]:
        """(program, [(step, graph)], source) of one kernel, lowered here with the passes captured."""
        steps: list[tuple[str, UOp]] = [("as scheduled", call.src[0])]
        device = str(call.src[1].device) if len(call.src) > 1 else self.device
        try:
            backend = Device[device]
            caps = backend.capabilities
            captured: list[tuple[str, UOp]] = []
            with _capturing(tracer, captured):
                prg = lower(call, caps)  # as the backend runs it: its target
                if not captured:  # lowered before VIZ looked (lowering is cached): lower it again
                    clear_program_cache()
                    prg = lower(call, caps)  # as the backend runs it: its target
            steps += [(f"after '{name}'", g) for name, g in captured]
            renderer = getattr(backend, "renderer", None)
            src = (
                renderer.render(prg)
                if renderer is not None
                else "\n".join(f"{i:4d} {u.op.name} {u.dtype.name} {_arg(u)}" for i, u in enumerate(prg.uops))
            )
            return prg, steps, src
        except Exception as e:  # show what there is, and why the rest is missing
            return None, steps, f"(not lowered: {type(e).__name__}: {e})"

    def kernel(
        self, i: int, call: UOp, prg: LinearProgram | None, steps: list[tuple[str, UOp]], src: str
    ) -> None:
        name = prg.name if prg is not None else debug.kernel_name(call)
        figs = "".join(
            f'<figure class="step" data-step="{k}"{"" if k == 0 else " hidden"}>'
            f"<figcaption>step {k + 1}/{len(steps)}: {html.escape(title)}</figcaption>"
            + (
                "<p>(unchanged: the graph of the step before)</p>"  # hash-consed: the same UOp
                if k > 0 and g is steps[k - 1][1]
                else f'<div class="pic">{uop_svg(g, f"{name} {title}")}</div>'
            )
            + "</figure>"
            for k, (title, g) in enumerate(steps)
        )
        controls = (
            '<div class="controls"><button class="prev">&larr; before</button> '
            f'<input type="range" min="0" max="{len(steps) - 1}" value="0"> '
            '<button class="next">after &rarr;</button></div>'
        )
        launch = (
            ""
            if prg is None or prg.global_size is None
            else f" global {prg.global_size} local {prg.local_size}"
        )
        self.section(
            f"kernel {i}: {name}{launch}",
            f'<div class="stepper">{controls}{figs}</div><h3>source</h3>'
            f'<pre class="source">{html.escape(src)}</pre>',
        )

    def html(self) -> str:
        err = (
            ""
            if self.error is None
            else f'<p class="error">the realize raised {html.escape(type(self.error).__name__)}: '
            f"{html.escape(str(self.error))}</p>"
        )
        title = html.escape(f"uopgrad VIZ: realize on {self.device}")
        return (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{STYLE}</style></head>\n<body>{TOOLBAR}<h1>{title}</h1>{err}{''.join(self.parts)}"
            f"<script>{SCRIPT}</script></body></html>\n"
        )


@contextlib.contextmanager
def _capturing(tracer: _Tracer | None, into: list[tuple[str, UOp]]) -> Iterator[None]:
    t = tracer if tracer is not None else _Tracer(None)
    if tracer is None:
        debug.add_tracer(t)
    t.capture = into
    try:
        yield
    finally:
        t.capture = None
        if tracer is None:
            debug.remove_tracer(t)


def page_html(sink: UOp, device: str | None = None, error: BaseException | None = None) -> str:
    """The VIZ page of `sink` (a SINK, or any UOp) as HTML text; nothing runs."""
    return _Page(device or Device.DEFAULT, sink, error).build(_active)


def write_page(
    sink: UOp, path: str | os.PathLike[str], device: str | None = None, error: BaseException | None = None
) -> Path:
    """Write the VIZ page of `sink` to `path` (outside any run); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page_html(sink, device, error), encoding="utf-8")
    pages.append(out)
    return out


def last_page() -> Path | None:
    """The last page this process wrote (never another process's: those are found through their run)."""
    return pages[-1] if pages else None


def index_page() -> Path | None:
    """The index of this process's current run, if VIZ is on."""
    return _active.run.index if _active is not None and _active.run is not None else None


class _Tracer:
    """The debug tracer: writes a page at the end of every (outermost) realize into its run."""

    def __init__(self, run: Run | None) -> None:
        self.run = run
        self.capture: list[tuple[str, UOp]] | None = None

    def realize_begin(self, device: str, sink: UOp) -> None:
        """Nothing to do before: the page is drawn from the sink once it ran."""

    def realize_end(self, device: str, sink: UOp, error: BaseException | None) -> None:
        """Write this realize's page (or, once the run is full, note it in the index only)."""
        if self.run is None:
            return
        raised = "" if error is None else f"{type(error).__name__}: {error}"[:200]
        try:
            text, kernels = None, 0
            if not self.run.full:
                page = _Page(device, sink, error)
                text, kernels = page.build(self), page.kernels
            out = self.run.add(device, text, kernels, graph_size(sink), raised)
            if out is not None:
                pages.append(out)
        except Exception as e:  # VIZ must never break the program it watches
            debug.logger.warning("VIZ: no page for this realize on %s: %s: %s", device, type(e).__name__, e)

    def after_pass(self, name: str, sink: UOp) -> None:
        """Keep the pass's graph while a kernel is being traced."""
        if self.capture is not None:
            self.capture.append((name, sink))


_active: _Tracer | None = None


def enable(directory: str | os.PathLike[str], max_bytes: int | None = None) -> Path:
    """Start a run in `directory` (created if needed): a page per realize from now on, until the run's
    pages hold `max_bytes` (default $UOPGRAD_VIZ_MAX_BYTES, 20 MB). Returns the run's index page."""
    global _active
    disable()
    cap = getenv_bytes("UOPGRAD_VIZ_MAX_BYTES", DEFAULT_MAX_BYTES) if max_bytes is None else max_bytes
    run = Run(Path(directory).expanduser(), cap)
    _active = _Tracer(run)
    debug.add_tracer(_active)
    return run.index


def enable_from_environment() -> None:
    """`enable($UOPGRAD_VIZ)`, at import: a directory that can't be made or written into (a file, no
    permission) is a warning naming the variable and no pages, never a failed import."""
    where = getenv_path("UOPGRAD_VIZ")
    if where is None:
        return
    try:
        enable(where)
        if not os.access(where, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except (OSError, ValueError) as e:
        disable()
        warnings.warn(
            f"environment variable UOPGRAD_VIZ={str(where)!r} is not valid: UOPGRAD_VIZ takes a "
            f"directory uopgrad can write pages into ({type(e).__name__}: {e}); no VIZ pages",
            RuntimeWarning,
            stacklevel=3,
        )


def disable() -> None:
    """Stop writing pages."""
    global _active
    if _active is not None:
        debug.remove_tracer(_active)
        _active = None


@contextlib.contextmanager
def capture(directory: str | os.PathLike[str]) -> Iterator[list[Path]]:
    """`with viz.capture(DIR) as written:` pages for the realizes inside; `written` lists them."""
    before = len(pages)
    enable(directory)
    written: list[Path] = []
    try:
        yield written
    finally:
        disable()
        written += pages[before:]
