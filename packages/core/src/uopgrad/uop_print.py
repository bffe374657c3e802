"""Printing a UOp graph (below uop.py): the one-line `short`, the SSA-style listing `pretty` that
`repr` shows, and Graphviz DOT text (`to_dot`). Each reads the node's five fields and its toposort only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uopgrad.uop import UOp

__all__ = ["pretty", "short", "to_dot"]


def short(u: UOp) -> str:
    """One line: op, dtype, arg and the ops of the sources."""
    srcs = ", ".join(s.op.name for s in u.src)
    tag = "" if u.tag is None else f", tag={u.tag!r}"
    return f"UOp({u.op}, {u.dtype!r}, arg={u.arg!r}, src=({srcs})){tag}"


def pretty(root: UOp, limit: int = 60) -> str:
    """An SSA-style listing of the graph (iterative; shared nodes printed once); at most `limit` lines."""
    order = list(root.toposort())
    names = {u: f"%{i}" for i, u in enumerate(order)}
    lines = []
    for u in order[-limit:]:
        srcs = ", ".join(names[s] for s in u.src)
        tag = "" if u.tag is None else f" tag={u.tag!r}"
        arg = "" if u.arg is None else f" arg={u.arg!r}"
        lines.append(f"{names[u]} = {u.op.name} {u.dtype!r}{arg} ({srcs}){tag}")
    if len(order) > limit:
        lines.insert(0, f"... {len(order) - limit} earlier nodes")
    if len(lines) == 1:
        return f"UOp({root.op}, {root.dtype!r}, arg={root.arg!r}, src=())"
    return "\n".join(lines)


def to_dot(root: UOp) -> str:
    """The graph as Graphviz DOT text (`dot -Tsvg`): one node per UOp, edges from each source, labelled with
    the source's position. The VIZ page (uopgrad.viz) draws the same graph without graphviz."""
    order = list(root.toposort(enter_calls=False))
    ids = {u: i for i, u in enumerate(order)}
    lines = ["digraph uop {", '  node [shape=box, fontname="monospace", fontsize=10];']
    for u in order:
        text = f"{u.op.name}\n{u.dtype!r}" + ("" if u.arg is None else f"\n{u.arg!r}"[:60])
        lines.append(f'  n{ids[u]} [label="{_dot_escape(text)}"];')
        lines += [f'  n{ids[s]} -> n{ids[u]} [label="{k}"];' for k, s in enumerate(u.src) if s in ids]
    return "\n".join([*lines, "}"])


def _dot_escape(text: str) -> str:
    """A DOT string body: quotes and backslashes escaped, except the \\n line breaks made above."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
