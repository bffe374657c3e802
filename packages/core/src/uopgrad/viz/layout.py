"""A small layered graph layout drawn as SVG (no graphviz): sources on top, consumers below.

Each node's layer is its longest path from a leaf; within a layer nodes start in toposort order and are
reordered by the barycentre of their neighbours (a few sweeps down and up, as in Sugiyama's method), which
removes most crossings of the small DAGs a kernel or a tensor program makes. Edges are cubic curves from
the bottom of a source to the top of its consumer; a consumer with several sources numbers them.

Everything drawn sits in one `<g class="view">` (the page's script zooms and pans it through its transform);
each node's `<g class="node">` carries its ops in `data-op` (the page's search reads them), and a node that
stands for several (a folded chain) holds their lines in a hidden `<g class="members">` shown on click.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Graph", "Node", "svg"]

CHAR_W, LINE_H, PAD, GAP_X, GAP_Y = 6.6, 13, 6, 18, 38
BOLD = ' font-weight="bold"'


@dataclass
class Node:
    """A box: its text lines, fill colour and sources (indices of earlier nodes, in order)."""

    lines: list[str]
    fill: str = "#e8eef7"
    srcs: list[int] = field(default_factory=list)
    shape: str = "rect"  # "rect" | "ellipse"
    ops: list[str] = field(default_factory=list)  # what search matches (the first line when empty)
    members: list[str] = field(default_factory=list)  # one line per node a folded node stands for
    x: float = 0.0
    y: float = 0.0

    @property
    def w(self) -> float:
        """Width in px."""
        return max(len(s) for s in self.lines) * CHAR_W + 2 * PAD + (16 if self.shape == "ellipse" else 0)

    @property
    def h(self) -> float:
        """Height in px."""
        return len(self.lines) * LINE_H + 2 * PAD


@dataclass
class Graph:
    """Nodes in topological order (every source before its consumer)."""

    nodes: list[Node] = field(default_factory=list)

    def add(
        self,
        lines: Sequence[str],
        srcs: Sequence[int] = (),
        fill: str = "#e8eef7",
        shape: str = "rect",
        ops: Sequence[str] = (),
        members: Sequence[str] = (),
    ) -> int:
        """Append a node; returns its index."""
        self.nodes.append(Node([s for s in lines if s], fill, list(srcs), shape, list(ops), list(members)))
        return len(self.nodes) - 1


def _layers(g: Graph) -> list[list[int]]:
    depth: list[int] = []
    for n in g.nodes:
        depth.append(1 + max((depth[s] for s in n.srcs), default=-1))
    layers: list[list[int]] = [[] for _ in range(max(depth, default=-1) + 1)]
    for i, d in enumerate(depth):
        layers[d].append(i)
    return layers


def _order(g: Graph, layers: list[list[int]], sweeps: int = 4) -> None:
    """Barycentre reordering: each layer sorted by the mean position of its neighbours."""
    users: list[list[int]] = [[] for _ in g.nodes]
    for i, n in enumerate(g.nodes):
        for s in n.srcs:
            users[s].append(i)
    pos = {i: float(k) for layer in layers for k, i in enumerate(layer)}
    for sweep in range(sweeps):
        seq = layers[1:] if sweep % 2 == 0 else layers[-2::-1]
        for layer in seq:

            def bary(i: int, down: bool = sweep % 2 == 0) -> float:
                nb = g.nodes[i].srcs if down else users[i]
                return sum(pos[j] for j in nb) / len(nb) if nb else pos[i]

            layer.sort(key=bary)
            pos.update({i: float(k) for k, i in enumerate(layer)})


def _place(g: Graph, layers: list[list[int]]) -> tuple[float, float]:
    widths = [sum(g.nodes[i].w for i in layer) + GAP_X * (len(layer) - 1) for layer in layers]
    total_w = max(widths, default=0.0)
    y = float(PAD)
    for layer, w in zip(layers, widths):
        x = PAD + (total_w - w) / 2
        h = max(g.nodes[i].h for i in layer)
        for i in layer:
            n = g.nodes[i]
            n.x, n.y = x, y + (h - n.h) / 2
            x += n.w + GAP_X
        y += h + GAP_Y
    return total_w + 2 * PAD, y - GAP_Y + PAD


def svg(g: Graph, title: str = "") -> str:
    """The graph as a standalone <svg> element (text escaped; sizes in px)."""
    if not g.nodes:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>'
    layers = _layers(g)
    _order(g, layers)
    width, height = _place(g, layers)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="11">',
        f"<title>{html.escape(title)}</title>" if title else "",
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#667"/></marker></defs><g class="view">',
    ]
    for n in g.nodes:
        for k, s in enumerate(n.srcs):
            src = g.nodes[s]
            x0, y0 = src.x + src.w / 2, src.y + src.h
            x1 = n.x + n.w * (k + 1) / (len(n.srcs) + 1)
            y1 = n.y
            mid = (y0 + y1) / 2
            out.append(
                f'<path class="edge" d="M{x0:.1f},{y0:.1f} C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} '
                f'{x1:.1f},{y1:.1f}" fill="none" stroke="#889" marker-end="url(#arrow)"/>'
            )
            if len(n.srcs) > 1:
                out.append(f'<text x="{x1 + 3:.1f}" y="{y1 - 3:.1f}" fill="#a33" font-size="9">{k}</text>')
    for i, n in enumerate(g.nodes):
        if n.shape == "ellipse":
            box = (
                f'<ellipse cx="{n.x + n.w / 2:.1f}" cy="{n.y + n.h / 2:.1f}" rx="{n.w / 2:.1f}" '
                f'ry="{n.h / 2:.1f}" fill="{n.fill}" stroke="#556"/>'
            )
        else:
            dash = ' stroke-dasharray="5 2" stroke-width="2"' if n.members else ""
            box = (
                f'<rect x="{n.x:.1f}" y="{n.y:.1f}" width="{n.w:.1f}" height="{n.h:.1f}" rx="4" '
                f'fill="{n.fill}" stroke="#556"{dash}/>'
            )
        texts = "".join(
            f'<text x="{n.x + n.w / 2:.1f}" y="{n.y + PAD + LINE_H * (k + 0.8):.1f}" '
            f'text-anchor="middle"{BOLD if k == 0 else ""}>'
            f"{html.escape(line)}</text>"
            for k, line in enumerate(n.lines)
        )
        ops = html.escape(" ".join(n.ops or n.lines[:1]), quote=True)
        fold = f' data-fold="{len(n.members)}"' if n.members else ""
        out.append(f'<g class="node" data-id="{i}" data-op="{ops}"{fold}>{box}{texts}{_members(n)}</g>')
    out.append("</g></svg>")
    return "".join(out)


def _members(n: Node) -> str:
    """A folded node's members as a hidden box beside it (the page's script shows it on a click)."""
    if not n.members:
        return ""
    x, w = n.x + n.w + 6, max(len(s) for s in n.members) * CHAR_W + 2 * PAD
    h = len(n.members) * LINE_H + 2 * PAD
    lines = "".join(
        f'<text x="{x + PAD:.1f}" y="{n.y + PAD + LINE_H * (k + 0.8):.1f}">{html.escape(line)}</text>'
        for k, line in enumerate(n.members)
    )
    return (
        f'<g class="members" display="none"><rect x="{x:.1f}" y="{n.y:.1f}" width="{w:.1f}" '
        f'height="{h:.1f}" fill="#fffff4" stroke="#556"/>{lines}</g>'
    )
