"""Results: what each case is (`Case`: row, dtype, check), what happened to it, and the summary table
(row x dtype -> pass / fail / xfail / not claimed, with the worst relative error) printed at the end of a
run and written as JSON (docs/conformance.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from uopgrad import DType
from uopgrad_conformance.numerics import ALL_DTYPES, SHORT, name

__all__ = ["Case", "Record", "Recorder", "Summary"]


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


# outcome -> (rank, symbol): a cell shows its worst outcome
_OUTCOMES: dict[str, tuple[int, str]] = {
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
            outcome = r.outcome if _OUTCOMES[r.outcome][0] > _OUTCOMES[old][0] else old
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
                marks.append(f"{_OUTCOMES[cell[0]][1] if cell else '-':>5}")
                if cell and cell[1] is not None:
                    worst = cell[1] if worst is None else max(worst, cell[1])
            lines.append(f"{row:{width}} " + " ".join(marks) + ("" if worst is None else f"  {worst:.2e}"))
        counts = ", ".join(f"{v} {k}" for k, v in sorted(self.counts().items()))
        lines += [
            "",
            "ok pass, FAIL fail, xf xfail (known), nc not claimed by the backend, skip skipped "
            "(reason in the JSON), - not defined for the dtype",
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
        return {"backend": self.backend, "counts": self.counts(), "cells": cells, "cases": cases}

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
    return _OUTCOMES.keys()
