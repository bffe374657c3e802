"""Results: what each case is (`Case`: row, dtype, check), what happened to it, and the summary table
(row x dtype -> pass / fail / xfail / not claimed / crash, with the worst relative error) printed at the end
of a run and written as JSON (docs/conformance.md).

A case that kills its process (a segfault or abort in a kernel) must not lose the run: the processes that
run cases append a `running` line to a journal before each case, the collecting process appends each finished
case's record, and `python -m uopgrad_conformance.report --watch DIR` (a watchdog the plugin starts) builds
the table and the JSON from the journal when the test process dies, naming the case it died in.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import socket
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from uopgrad import DType
from uopgrad_conformance.numerics import ALL_DTYPES, SHORT, name

__all__ = ["DONE", "OUTCOMES", "Case", "Journal", "Record", "Recorder", "Summary", "crash_record"]


@dataclass(frozen=True)
class Case:
    """One parametrised case: the summary row it belongs to (an op or a pattern), its dtype (None for
    rows without one), the check it runs, why it does not run (None when it does) and what it runs."""

    row: str
    dtype: DType | None
    check: str
    skip: str | None = None
    payload: Any = None
    group: str = "op"  # "op" | "movement" | "reduce" | "cast" | "grad" | "function" | "program"

    @property
    def id(self) -> str:
        """The pytest id: row, dtype and check, e.g. `FLOORDIV-int32-forward`."""
        parts = [self.row.replace(" ", "_"), name(self.dtype) if self.dtype is not None else "", self.check]
        return "-".join(p for p in parts if p)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # noqa: ANN401  (hypothesis' pretty printer)
        p.text(repr(self))

    def __repr__(self) -> str:  # short in hypothesis' "Failing test case" printout
        return f"Case({self.id})"

    @property
    def column(self) -> str:
        """The summary column: the dtype's short name, or `any`."""
        return SHORT[self.dtype] if self.dtype is not None else "any"


class Recorder:
    """Handed to each case: collects the worst relative error it saw and notes for the report."""

    def __init__(self) -> None:
        self.worst: float | None = None
        self.notes: list[str] = []

    def error(self, rel: float) -> None:
        """Note a relative error (the report keeps the largest)."""
        if not math.isnan(rel):
            self.worst = rel if self.worst is None else max(self.worst, rel)

    def note(self, text: str) -> None:
        """Attach a remark to the case's report entry (e.g. a non-differentiable point that was dodged)."""
        self.notes.append(text)


# outcome -> (rank, symbol): a cell shows its worst outcome (the scoreboard ranks merged reports by it too)
OUTCOMES: dict[str, tuple[int, str]] = {
    "crashed": (7, "CRASH"),
    "failed": (6, "FAIL"),
    "xpassed": (5, "XPASS"),
    "error": (6, "ERR"),
    "xfailed": (4, "xf"),
    "skipped": (3, "skip"),
    "passed": (2, "ok"),
    "not claimed": (1, "nc"),
}


@dataclass
class Record:
    """One case's result."""

    nodeid: str
    row: str
    group: str
    column: str
    check: str
    outcome: str
    worst_rel: float | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    host: str = ""  # the machine that ran the case (under xdist over hosts, not the controller's)
    repro: str = ""  # a failure's runnable repro snippet (for the scoreboard's links)


@dataclass
class Summary:
    """Every result of a run, summarised per (row, column)."""

    backend: str
    records: list[Record] = field(default_factory=list)

    def add(self, rec: Record) -> None:
        """Add one case's result."""
        self.records.append(rec)

    def cells(self) -> dict[tuple[str, str], tuple[str, float | None]]:
        """(row, column) -> (worst outcome, worst relative error)."""
        out: dict[tuple[str, str], tuple[str, float | None]] = {}
        for r in self.records:
            key = (r.row, r.column)
            old, err = out.get(key, (r.outcome, None))
            outcome = r.outcome if OUTCOMES[r.outcome][0] > OUTCOMES[old][0] else old
            if r.worst_rel is not None:
                err = r.worst_rel if err is None else max(err, r.worst_rel)
            out[key] = (outcome, err)
        return out

    def rows(self) -> list[tuple[str, str]]:
        """(group, row) in first-seen order."""
        seen: dict[str, str] = {}
        for r in self.records:
            seen.setdefault(r.row, r.group)
        return [(g, row) for row, g in seen.items()]

    def counts(self) -> dict[str, int]:
        """Number of cases per outcome."""
        out: dict[str, int] = {}
        for r in self.records:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    def table(self) -> str:
        """The summary as text: one line per row, one column per dtype, then the row's worst error."""
        cells = self.cells()
        columns = [SHORT[d] for d in ALL_DTYPES] + ["any"]
        used = [c for c in columns if any(k[1] == c for k in cells)]
        width = max([len(row) for _, row in self.rows()] + [10])
        head = f"{'':{width}} " + " ".join(f"{c:>5}" for c in used) + "  worst rel err"
        lines = [f"uopgrad conformance summary for {self.backend}", head, "-" * len(head)]
        group = None
        for g, row in self.rows():
            if g != group and group is not None:
                lines.append("")
            group = g
            marks, worst = [], None
            for c in used:
                cell = cells.get((row, c))
                marks.append(f"{OUTCOMES[cell[0]][1] if cell else '-':>5}")
                if cell and cell[1] is not None:
                    worst = cell[1] if worst is None else max(worst, cell[1])
            lines.append(f"{row:{width}} " + " ".join(marks) + ("" if worst is None else f"  {worst:.2e}"))
        counts = ", ".join(f"{v} {k}" for k, v in sorted(self.counts().items()))
        lines += [
            "",
            "ok pass, FAIL fail, CRASH killed its test process, xf xfail (known), nc not claimed by the "
            "backend, skip skipped (reason in the JSON), - not defined for the dtype",
            f"cases: {counts}",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data: the cells and every case."""
        cells = [
            {"row": row, "column": col, "outcome": oc, "worst_rel": _finite(err)}
            for (row, col), (oc, err) in self.cells().items()
        ]
        cases = []
        for r in self.records:
            d = asdict(r)
            d["worst_rel"] = _finite(r.worst_rel)
            cases.append(d)
        return {
            "backend": self.backend,
            "host": socket.gethostname(),  # the process that wrote the report; each case names its own
            "counts": self.counts(),
            "cells": cells,
            "cases": cases,
        }

    def write(self, path: Path) -> None:
        """Write the JSON report to `path`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")


def _finite(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return str(x)


def outcome_names() -> Iterable[str]:
    """Every outcome a record can have."""
    return OUTCOMES.keys()


# ---------------------------------------------------------------------- the journal (crashes)
_RECORDS = "records.jsonl"  # written by the collecting process: one finished case per line
DONE = "done"  # what the test process sends the watchdog when it ends normally


class Journal:
    """A directory of JSON-lines files: `<runner>.jsonl` (a `running` line before each case a process
    runs, with the case's row, group, column and check) and `records.jsonl` (each finished case). Each line is
    flushed when written, so a process that dies keeps what it wrote."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _append(self, file: str, data: dict[str, Any]) -> None:
        with (self.root / file).open("a") as f:
            f.write(json.dumps(data) + "\n")

    def running(self, runner: str, rec: Record) -> None:
        """`runner` (main, gw0, ...) starts the case of `rec` (its outcome is not known yet)."""
        self._append(f"{runner}.jsonl", {"running": rec.nodeid, **_identity(rec)})

    def record(self, rec: Record) -> None:
        """A case finished (in the collecting process)."""
        self._append(_RECORDS, asdict(rec))

    def collected(self, n: int) -> None:
        """The run collected `n` cases."""
        self._append(_RECORDS, {"collected": n})

    def _lines(self, file: Path) -> list[dict[str, Any]]:
        out = []
        for line in file.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # the last line of a process killed while writing it
                continue
        return out

    def started(self, nodeid: str) -> Record | None:
        """The case `nodeid` as some runner announced it (None if none did)."""
        for file in sorted(self.root.glob("*.jsonl")):
            if file.name == _RECORDS:
                continue
            for d in self._lines(file):
                if d.get("running") == nodeid:
                    return Record(nodeid, d["row"], d["group"], d["column"], d["check"], "crashed")
        return None

    def summary(self, backend: str) -> tuple[Summary, int | None]:
        """The finished cases, plus each case a runner started and never finished, as crashed; and how
        many cases the run collected (None if unknown)."""
        summary, total = Summary(backend), None
        records = self.root / _RECORDS
        for d in self._lines(records) if records.exists() else []:
            if "collected" in d:
                total = int(d["collected"])
            else:
                summary.add(Record(**d))
        done = {r.nodeid for r in summary.records}
        for file in sorted(self.root.glob("*.jsonl")):
            if file.name == _RECORDS:
                continue
            started = [d["running"] for d in self._lines(file)]
            if started and started[-1] not in done:  # a runner stops at the case that killed it
                rec = self.started(started[-1])
                if rec is not None:
                    summary.add(crash_record(rec, f"the test process died while running {rec.nodeid}"))
        return summary, total


def _identity(rec: Record) -> dict[str, str]:
    return {"row": rec.row, "group": rec.group, "column": rec.column, "check": rec.check}


def crash_record(started: Record, reason: str) -> Record:
    """The record of a case that killed the process running it."""
    return Record(
        started.nodeid, started.row, started.group, started.column, started.check, "crashed", None, reason
    )


def after_crash(journal: Journal, backend: str, report: Path | None) -> str:
    """The text printed when the test process died: which case killed it, the table of every case that
    finished, how many did not run; the JSON report is written as at the end of a run."""
    summary, total = journal.summary(backend)
    crashed = [r.nodeid for r in summary.records if r.outcome == "crashed"]
    lines = ["", "=" * 30 + " uopgrad conformance (the test process died) " + "=" * 30]
    lines += [f"CRASH: {n} killed the test process (a segfault or abort in the backend?)" for n in crashed]
    if not crashed:
        lines.append("the test process died between cases")
    lines += ["", summary.table()]
    if total is not None:
        missing = total - len(summary.records)
        lines.append(
            f"{missing} of {total} cases did not run: skip the crashing case with --skips FILE, or run "
            "under pytest-xdist (-n 2), which restarts a crashed worker and goes on"
        )
    if report is not None:
        summary.write(report)
        lines.append(f"JSON report: {report}")
    return "\n".join(lines)


def _watch(argv: list[str] | None = None) -> int:
    """The watchdog: wait for the test process to end (its pipe on stdin closes); when it ended without
    saying `done`, print the table and write the JSON from the journal. The journal is removed either way."""
    parser = argparse.ArgumentParser(prog="python -m uopgrad_conformance.report")
    parser.add_argument("--watch", type=Path, required=True, help="the journal directory")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--report", type=Path, default=None, help="where the JSON report goes")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the test process, which then says done
    said = sys.stdin.read()
    try:
        if DONE not in said.split():
            print(after_crash(Journal(args.watch), args.backend, args.report), flush=True)
    finally:
        shutil.rmtree(args.watch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(_watch())
