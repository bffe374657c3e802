"""One VIZ run: the directory a process's pages go into, its `index.html`, and its cap on bytes.

`enable(DIR)` (or `UOPGRAD_VIZ=DIR`) starts a run in `DIR/run-<yyyymmdd-hhmmss>-<pid>/`: two processes
never share one, and `uopgrad viz DIR` opens the index of the newest. The index lists every realize:
its page (a link), device, kernels, tensor-graph nodes, size, and whether it raised. Pages are written
until the run holds `UOPGRAD_VIZ_MAX_BYTES` (default 20 MB); from the first page that does not fit, no
page is drawn (a training loop is not slowed by pictures nobody opens) and the index says how many
realizes were left out and why.
"""

from __future__ import annotations

import html
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_MAX_BYTES", "INDEX", "Entry", "Run", "newest_index"]

DEFAULT_MAX_BYTES = 20_000_000
INDEX = "index.html"
PREFIX = "run-"


@dataclass(frozen=True)
class Entry:
    """One realize of the run: its page's name (None when left out) and what the index shows of it."""

    number: int
    device: str
    page: str | None
    kernels: int = 0
    nodes: int = 0
    size: int = 0
    error: str = ""


class Run:
    """The pages of one run and the index that lists them."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        root.mkdir(parents=True, exist_ok=True)  # a root that can't be made fails here, at enable()
        self.root, self.max_bytes, self.started = root, max_bytes, time.time()
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.started))
        self.dir = root / f"{PREFIX}{stamp}-{os.getpid()}"
        self.made = False  # made at the first realize: importing uopgrad with VIZ on leaves no empty run
        self.entries: list[Entry] = []
        self.written = 0  # bytes of the pages written
        self.full = False  # the cap was reached: no more pages are drawn

    def _make(self) -> None:
        base = self.dir.name
        for k in range(1, 1000):  # a second run of this process in the same second: a new directory
            try:
                self.dir.mkdir()
                break
            except FileExistsError:
                self.dir = self.root / f"{base}-{k}"
        self.made = True

    @property
    def index(self) -> Path:
        """The run's index page."""
        return self.dir / INDEX

    def next_name(self, device: str) -> str:
        """The file name of the next realize's page."""
        return f"{len(self.entries):04d}-{device.replace(':', '_')}.html"

    def add(self, device: str, text: str | None, kernels: int, nodes: int, error: str) -> Path | None:
        """Write a realize's page (None for `text`: not drawn, the run is full); returns its path, or None
        where it was left out."""
        if not self.made:
            self._make()
        name = self.next_name(device)
        size = len(text.encode("utf-8")) if text is not None else 0
        if text is None or self.written + size > self.max_bytes:
            self.full = True
            self.entries.append(Entry(len(self.entries), device, None, error=error))
            self.write_index()
            return None
        path = self.dir / name
        path.write_text(text, encoding="utf-8")
        self.written += size
        self.entries.append(Entry(len(self.entries), device, name, kernels, nodes, size, error))
        self.write_index()
        return path

    def write_index(self) -> None:
        """(Re)write index.html: rewritten after every realize, so it is whole whenever the run stops."""
        left = [e for e in self.entries if e.page is None]
        rows = "".join(_row(e) for e in self.entries)
        note = (
            ""
            if not left
            else f'<p class="note">{len(left)} of {len(self.entries)} realizes were left out (from realize '
            f"{left[0].number} on): this run's pages reached its cap of {_mb(self.max_bytes)} "
            f"(UOPGRAD_VIZ_MAX_BYTES; set it higher to keep more).</p>"
        )
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        title = html.escape(f"uopgrad VIZ: run {self.dir.name}")
        text = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{title}</h1>"
            f"<p>process {os.getpid()}, started {started}: {len(self.entries)} realizes, "
            f"{_mb(self.written)} of pages (cap {_mb(self.max_bytes)})</p>{note}"
            "<table><thead><tr><th>#</th><th>page</th><th>device</th><th>kernels</th><th>tensor nodes</th>"
            f"<th>size</th><th>raised</th></tr></thead><tbody>{rows}</tbody></table></body></html>\n"
        )
        tmp = self.index.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.index)  # a browser reloading it never sees half a file


_STYLE = (
    "body{font-family:sans-serif;margin:1em 2em;color:#223}td,th{padding:2px 10px;text-align:right}"
    "td:nth-child(2),td:nth-child(3),td:nth-child(7){text-align:left}.note{color:#a00}"
    "tr.left td{color:#999}"
)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def _row(e: Entry) -> str:
    err = html.escape(e.error)
    if e.page is None:
        return (
            f'<tr class="left"><td>{e.number}</td><td>(left out: over the cap)</td>'
            f"<td>{html.escape(e.device)}</td><td></td><td></td><td></td><td>{err}</td></tr>"
        )
    link = f'<a href="{html.escape(e.page)}">{html.escape(e.page)}</a>'
    return (
        f"<tr><td>{e.number}</td><td>{link}</td><td>{html.escape(e.device)}</td><td>{e.kernels}</td>"
        f"<td>{e.nodes}</td><td>{_mb(e.size)}</td><td>{err}</td></tr>"
    )


def newest_index(directory: Path) -> Path | None:
    """The index a directory names: its own (a run's directory), else that of its newest run."""
    if (directory / INDEX).is_file():
        return directory / INDEX
    runs = [p / INDEX for p in directory.glob(PREFIX + "*") if (p / INDEX).is_file()]
    return max(runs, key=lambda p: (p.stat().st_mtime, p.parent.name), default=None)
