"""One scoreboard from many runs: the JSON reports of conformance runs (other backends, other hosts, the
controller of a pytest-xdist run over several machines) merged into one table, a row per op (or pattern)
and dtype, a column per backend, each cell the worst outcome of every case of that row, dtype and backend
in every report, its worst relative error, and a link to the repro of the case that made it worst.

    python -m uopgrad_conformance.scoreboard build/conformance/*.json --md board.md --html board.html

(also `uopgrad-conformance-scoreboard`). The HTML page is one self-contained file (inline style, no script,
nothing fetched); every value from a report is escaped, in HTML and in markdown. Reports written before
cases had a `host` and a `repro` merge too: a case without a host takes its report's, else `?`.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uopgrad_conformance.numerics import ALL_DTYPES, SHORT
from uopgrad_conformance.report import OUTCOMES

__all__ = ["Board", "Cell", "Entry", "load", "main", "merge", "to_html", "to_markdown"]

_BAD = frozenset({"crashed", "failed", "error", "xpassed"})  # outcomes whose case gets a repro entry
_COLUMN_ORDER = {c: i for i, c in enumerate([*(SHORT[d] for d in ALL_DTYPES), "any"])}


@dataclass
class Entry:
    """A case that made a cell bad: what to look at (its test id, host, report, reason, repro)."""

    anchor: str
    backend: str
    host: str
    nodeid: str
    outcome: str
    reason: str
    repro: str
    source: str


@dataclass
class Cell:
    """Every case of one (row, dtype, backend) in all the reports."""

    outcome: str
    worst_rel: float | None = None
    cases: int = 0
    hosts: set[str] = field(default_factory=set)
    entry: Entry | None = None  # the first case with the cell's (bad) outcome


@dataclass
class Board:
    """The merged table: (row, column) x backend -> Cell, rows and backends in first-seen order."""

    rows: list[tuple[str, str]] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str, str], Cell] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


def _float(x: object) -> float | None:
    """A worst error as the report writes it (a number, or 'inf' / 'nan' as text)."""
    if x is None:
        return None
    try:
        return float(str(x)) if not isinstance(x, (int, float)) else float(x)
    except ValueError:
        return None


def load(path: Path) -> dict[str, Any]:
    """One JSON report (a ValueError naming the file when it is not one)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a conformance JSON report ({e})") from e
    if not isinstance(data, dict) or "backend" not in data or not isinstance(data.get("cases"), list):
        raise ValueError(f"{path}: not a conformance JSON report (no backend and cases)")
    return data


def merge(reports: Iterable[tuple[str, dict[str, Any]]]) -> Board:
    """Merge (source name, report) pairs case by case (the reports' own cells are summaries of the same)."""
    board = Board()
    seen_rows: dict[tuple[str, str], None] = {}
    for source, rep in reports:
        board.sources.append(source)
        backend = str(rep["backend"])
        if backend not in board.backends:
            board.backends.append(backend)
        for c in rep["cases"]:
            outcome = str(c.get("outcome", "error"))
            outcome = outcome if outcome in OUTCOMES else "error"
            key = (str(c.get("row", "?")), str(c.get("column", "any")))
            seen_rows.setdefault(key, None)
            host = str(c.get("host") or rep.get("host") or "?")
            cell = board.cells.setdefault((*key, backend), Cell(outcome))
            cell.cases += 1
            cell.hosts.add(host)
            if (err := _float(c.get("worst_rel"))) is not None and not math.isnan(err):
                cell.worst_rel = err if cell.worst_rel is None else max(cell.worst_rel, err)
            worse = OUTCOMES[outcome][0] > OUTCOMES[cell.outcome][0]
            if worse:
                cell.outcome, cell.entry = outcome, None
            if outcome == cell.outcome and outcome in _BAD and cell.entry is None:
                cell.entry = Entry(
                    f"repro-{len(board.entries) + 1}",
                    backend,
                    host,
                    str(c.get("nodeid", "")),
                    outcome,
                    str(c.get("reason") or ""),
                    str(c.get("repro") or ""),
                    source,
                )
                board.entries.append(cell.entry)
    board.rows = _ordered(list(seen_rows))
    board.entries = [e for e in board.entries if any(c.entry is e for c in board.cells.values())]
    for i, e in enumerate(board.entries):  # entries a worse case displaced leave no gaps
        e.anchor = f"repro-{i + 1}"
    return board


def _ordered(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Rows in first-seen order, each row's dtype columns in the dtype order of the terminal table."""
    first = {row: i for i, (row, _) in reversed(list(enumerate(rows)))}
    return sorted(rows, key=lambda k: (first[k[0]], _COLUMN_ORDER.get(k[1], len(_COLUMN_ORDER)), k[1]))


def _cell_text(cell: Cell | None) -> tuple[str, str]:
    """(outcome symbol, worst error) of a cell; '-' where the backend has no case of it."""
    if cell is None:
        return "-", ""
    return OUTCOMES[cell.outcome][1], "" if cell.worst_rel is None else f"{cell.worst_rel:.2e}"


def _counts(board: Board) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {b: {} for b in board.backends}
    for (_, _, backend), cell in board.cells.items():
        sym = OUTCOMES[cell.outcome][1]
        out[backend][sym] = out[backend].get(sym, 0) + 1
    return out


# ---------------------------------------------------------------------- markdown
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def md_escape(text: str) -> str:
    """Text as literal markdown (a table cell too: `|` and line breaks cannot end it)."""
    return _MD_SPECIAL.sub(r"\\\1", text).replace("\r", " ").replace("\n", " ")


def _fence(code: str) -> str:
    """A fence longer than any run of backticks in `code`, so the code cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def to_markdown(board: Board) -> str:
    """The board as a markdown page: the table, then one section per bad cell with its repro."""
    lines = ["# uopgrad conformance scoreboard", ""]
    lines.append("Reports: " + ", ".join(md_escape(s) for s in board.sources))
    lines += ["", "| row | dtype | " + " | ".join(md_escape(b) for b in board.backends) + " |"]
    lines.append("| --- | --- | " + " | ".join("---" for _ in board.backends) + " |")
    for row, col in board.rows:
        marks = []
        for b in board.backends:
            cell = board.cells.get((row, col, b))
            sym, err = _cell_text(cell)
            text = f"{sym} {err}".strip()
            if cell is not None and cell.entry is not None:
                text = f"[{text}](#{cell.entry.anchor})"
            marks.append(text)
        lines.append(f"| {md_escape(row)} | {md_escape(col)} | " + " | ".join(marks) + " |")
    lines += ["", _legend(), ""]
    for b, counts in _counts(board).items():
        lines.append(f"- {md_escape(b)}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if board.entries:
        lines += ["", "## Repros"]
    for e in board.entries:
        lines += ["", f'<a id="{e.anchor}"></a>', f"### {e.anchor}: {md_escape(e.nodeid)}", ""]
        lines.append(
            f"{OUTCOMES[e.outcome][1]} on {md_escape(e.backend)}, host {md_escape(e.host)} "
            f"(report {md_escape(e.source)})"
        )
        if e.reason:
            lines += ["", md_escape(e.reason)]
        if e.repro:
            fence = _fence(e.repro)
            lines += ["", f"{fence}python", e.repro.rstrip("\n"), fence]
    return "\n".join(lines) + "\n"


def _legend() -> str:
    return (
        "ok pass, FAIL fail, ERR error, CRASH killed its test process, XPASS an expected failure passed, "
        "xf xfail (known), nc not claimed by the backend, skip skipped, - no such case on that backend; "
        "the number is the worst relative error; a bad cell links to its repro"
    )


# ---------------------------------------------------------------------- HTML
_STYLE = """
body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; white-space: nowrap; }
td.ok { background: #e6f4e6; } td.bad { background: #f8d0d0; } td.xf { background: #fff4d0; }
td.nc, td.none { color: #888; }
pre { background: #f4f4f4; padding: 8px; overflow-x: auto; }
"""
_CLASS = {"ok": "ok", "xf": "xf", "nc": "nc", "skip": "nc", "-": "none"}


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def to_html(board: Board) -> str:
    """The board as one self-contained HTML page (inline style, no script, no external resource)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        "<title>uopgrad conformance scoreboard</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<h1>uopgrad conformance scoreboard</h1>",
        "<p>Reports: " + ", ".join(f"<code>{_esc(s)}</code>" for s in board.sources) + "</p>",
        "<table>",
        "<thead><tr><th>row</th><th>dtype</th>"
        + "".join(f"<th>{_esc(b)}</th>" for b in board.backends)
        + "</tr></thead>",
        "<tbody>",
    ]
    for row, col in board.rows:
        tds = []
        for b in board.backends:
            cell = board.cells.get((row, col, b))
            sym, err = _cell_text(cell)
            text = _esc(f"{sym} {err}".strip())
            if cell is not None and cell.entry is not None:
                text = f'<a href="#{_esc(cell.entry.anchor)}">{text}</a>'
            title = "" if cell is None else f' title="{_esc("hosts: " + ", ".join(sorted(cell.hosts)))}"'
            tds.append(f'<td class="{_CLASS.get(sym, "bad")}"{title}>{text}</td>')
        out.append(f"<tr><td>{_esc(row)}</td><td>{_esc(col)}</td>{''.join(tds)}</tr>")
    out += ["</tbody>", "</table>", f"<p>{_esc(_legend())}</p>", "<ul>"]
    for b, counts in _counts(board).items():
        out.append(
            f"<li>{_esc(b)}: " + _esc(", ".join(f"{v} {k}" for k, v in sorted(counts.items()))) + "</li>"
        )
    out.append("</ul>")
    if board.entries:
        out.append("<h2>Repros</h2>")
    for e in board.entries:
        out.append(f'<section id="{_esc(e.anchor)}">')
        out.append(f"<h3>{_esc(e.anchor)}: <code>{_esc(e.nodeid)}</code></h3>")
        out.append(
            f"<p>{_esc(OUTCOMES[e.outcome][1])} on {_esc(e.backend)}, host {_esc(e.host)} "
            f"(report <code>{_esc(e.source)}</code>)</p>"
        )
        if e.reason:
            out.append(f"<p>{_esc(e.reason)}</p>")
        if e.repro:
            out.append(f"<pre><code>{_esc(e.repro)}</code></pre>")
        out.append("</section>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m uopgrad_conformance.scoreboard REPORT.json ... [--md FILE] [--html FILE]`: without either,
    the markdown goes to stdout."""
    parser = argparse.ArgumentParser(
        prog="uopgrad-conformance-scoreboard",
        description="merge conformance JSON reports into one op x dtype x backend table",
    )
    parser.add_argument("reports", nargs="+", type=Path, help="JSON reports (--conformance-report)")
    parser.add_argument("--md", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("--html", type=Path, default=None, help="write the HTML page here")
    args = parser.parse_args(argv)
    try:
        board = merge((str(p), load(p)) for p in args.reports)
    except ValueError as e:
        parser.exit(2, f"error: {e}\n")
    if args.md is None and args.html is None:
        sys.stdout.write(to_markdown(board))
    for path, render in ((args.md, to_markdown), (args.html, to_html)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(board))
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
