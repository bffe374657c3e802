"""The scoreboard (scoreboard.py): JSON reports of real small runs (REFERENCE; CPU with an expected failure
that passes; CPU on a copy of core with a planted opt-pass bug, whose OPT=1 bits differ from OPT=0's) merged
into one table whose cells are right and link to their repros; the HTML page well-formed, self-contained and
escaped; reports without the newer fields still merge."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from uopgrad import Device
from uopgrad_conformance.scoreboard import Board, load, main, merge, to_html, to_markdown

SELECT = "test_alu and (ADD-float32-forward or ADD-int32-forward) or opt_bits and int_sum"
# a planted opt-pass bug, in a copy of core (never the checkout): the unrolled float MAX reduce without its
# exact fallback, so a row whose maximum is a tie of zeros (or two NaNs) keeps another zero (or NaN)
MUTATION = ("codegen/opt.py", "return exact_max(red, fast) if float_max else fast", "return fast")


def _suite(tmp: Path, backend: str, select: str, *args: str, env: dict[str, str] | None = None) -> Path:
    report = tmp / f"{backend}-{len(list(tmp.glob('*.json')))}.json"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "uopgrad_conformance", "--backend", backend, "-q"]
    cmd += ["-p", "no:cacheprovider", "--conformance-report", str(report), "-k", select, *args]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=600)
    assert report.exists(), res.stdout[-3000:] + res.stderr[-3000:]
    return report


def _has_opt_cpu() -> bool:
    try:
        return Device["CPU"].capabilities.vector_width > 0
    except Exception:  # the CPU backend is not installed
        return False


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("scoreboard")
    # REFERENCE's run spread over two workers by gateway specs, as over hosts (`--tx ssh=...`): each case
    # comes back with the host of the worker that ran it
    spread = ("-d", "--tx", f"2*popen//python={sys.executable}") if importlib.util.find_spec("xdist") else ()
    out = {"REFERENCE": _suite(tmp, "REFERENCE", SELECT, *spread)}
    if _has_opt_cpu():
        xfails = tmp / "xfails.txt"
        xfails.write_text(
            "suite/test_forward.py::test_alu[ADD-int32-forward]  # known to fail (it does not)\n"
        )
        out["CPU"] = _suite(tmp, "CPU", SELECT, "--xfails", str(xfails))
        core = Path(__import__("uopgrad").__file__).parent
        mutant = tmp / "mutant" / "uopgrad"
        shutil.copytree(core, mutant)
        path, old, new = MUTATION
        text = (mutant / path).read_text()
        assert text.count(old) == 1, f"the planted bug's line is gone from {path}: update MUTATION"
        (mutant / path).write_text(text.replace(old, new))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(mutant.parent), os.environ.get("PYTHONPATH", "")]),
        }
        env["UOPGRAD_CACHE_DIR"] = str(tmp / "cache")  # the mutant's kernels stay out of the shared cache
        out["mutant"] = _suite(tmp, "CPU", "opt_bits and max_reduce and float32", env=env)
    return out


def _board(reports: dict[str, Path]) -> Board:
    return merge((name, load(path)) for name, path in reports.items())


def test_real_runs_merge_into_one_table(reports: dict[str, Path]) -> None:
    board = _board(reports)
    cell = board.cells
    assert cell[("ADD", "f32", "REFERENCE")].outcome == "passed"
    assert cell[("OPT int sum", "i32", "REFERENCE")].outcome == "not claimed"
    assert {c["host"] for c in load(reports["REFERENCE"])["cases"]} == {socket.gethostname()}
    if "CPU" not in reports:
        pytest.skip("the CPU backend is not installed or has no vector width: REFERENCE's report only")
    assert board.backends == ["REFERENCE", "CPU"]
    assert cell[("ADD", "f32", "CPU")].outcome == "passed"
    assert cell[("ADD", "f32", "CPU")].worst_rel == 0.0
    assert cell[("OPT int sum", "i64", "CPU")].outcome == "passed"
    xpass = cell[("ADD", "i32", "CPU")]
    assert xpass.outcome == "xpassed" and xpass.entry is not None
    assert xpass.entry.reason == "known to fail (it does not)"
    # the mutant's run is the same backend: its float MAX reduce fails, merged into CPU's column
    failed = cell[("OPT max reduce", "f32", "CPU")]
    assert failed.outcome == "failed" and failed.entry is not None
    assert failed.entry.nodeid.endswith("test_opt_bits[OPT_max_reduce-float32-opt bits]")
    assert (
        "with Context(OPT=0):" in failed.entry.repro
        and "got.tobytes() == want.tobytes()" in failed.entry.repro
    )
    host = json.loads(reports["CPU"].read_text())["host"]
    assert failed.hosts == {host} and host
    md = to_markdown(board)
    assert f"[FAIL](#{failed.entry.anchor})" in md and f"[XPASS 0.00e+00](#{xpass.entry.anchor})" in md
    assert f'<a id="{failed.entry.anchor}"></a>' in md
    page = to_html(board)
    assert f'href="#{failed.entry.anchor}"' in page and f'id="{failed.entry.anchor}"' in page
    assert "with Context(OPT=0):" in page
    _check_html(page)


def test_the_repro_of_a_real_failure_runs_on_its_own(reports: dict[str, Path]) -> None:
    """The mutant's repro, run against the unmutated core, passes (so it is exactly the failing program)."""
    if "mutant" not in reports:
        pytest.skip("the CPU backend is not installed or has no vector width")
    case = next(c for c in load(reports["mutant"])["cases"] if c["outcome"] == "failed")
    res = subprocess.run([sys.executable, "-c", case["repro"]], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


class _Checker(HTMLParser):
    """Balanced tags (void ones aside), and every reference to a resource: none may leave the page."""

    VOID = frozenset({"meta", "br", "hr", "img", "link", "input"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.refs: list[str] = []
        self.ids: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("href", "src") and v is not None:
                self.refs.append(v)
            if k == "id" and v is not None:
                self.ids.add(v)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _check_html(page: str) -> _Checker:
    p = _Checker()
    p.feed(page)
    p.close()
    assert not p.stack, f"unclosed: {p.stack}"
    assert "script" not in p.tags and "link" not in p.tags and "img" not in p.tags
    assert all(ref.startswith("#") and ref[1:] in p.ids for ref in p.refs), p.refs
    return p


NASTY = '<script>alert("x")</script> & | `code` **b**'


def _report(backend: str, cases: list[dict[str, Any]], host: str | None = "h1") -> dict[str, Any]:
    out: dict[str, Any] = {"backend": backend, "counts": {}, "cells": [], "cases": cases}
    if host is not None:
        out["host"] = host
    return out


def _case(row: str, column: str, outcome: str, **kw: Any) -> dict[str, Any]:
    return {
        "nodeid": f"t[{row}-{column}]",
        "row": row,
        "group": "op",
        "column": column,
        "check": "forward",
        "outcome": outcome,
        "worst_rel": None,
        "reason": "",
        "notes": [],
        **kw,
    }


def test_html_is_well_formed_self_contained_and_escaped() -> None:
    bad = _case(NASTY, "f32", "failed", repro=f"x = 1  # {NASTY}\n```\n", reason=NASTY, worst_rel="inf")
    board = merge([(f"r{NASTY}.json", _report(f"B{NASTY}", [bad, _case("ADD", "f32", "passed")]))])
    page = to_html(board)
    p = _check_html(page)
    assert "<script>" not in page and NASTY not in page
    assert "".join(p.text).count(NASTY) >= 4  # row, backend, reason, repro, source: shown, as text
    assert board.cells[(NASTY, "f32", f"B{NASTY}")].worst_rel == float("inf")


def test_markdown_escapes_cells_and_fences_repros() -> None:
    bad = _case("A|B", "f32", "crashed", repro="s = '````'\n", reason="died | here")
    md = to_markdown(merge([("r.json", _report("CPU", [bad]))]))
    row = next(line for line in md.splitlines() if line.startswith("| A"))
    assert row.startswith("| A\\|B | f32 | [CRASH](#repro-1) |")
    assert "`````python\ns = '````'\n`````" in md  # a fence longer than the repro's backticks
    assert "died \\| here" in md


def test_worst_outcome_and_error_across_hosts_and_old_reports() -> None:
    """Two hosts' runs of one backend merge into one column: the worst outcome, the largest error, every
    host; a report from before `host` and `repro` existed merges, its cases on an unknown host."""
    a = _report("CPU", [_case("ADD", "f32", "passed", worst_rel=1e-7, host="h1")])
    b = _report("CPU", [_case("ADD", "f32", "failed", worst_rel=0.5, host="h2")])
    old = _report("CPU", [_case("MUL", "f32", "passed")], host=None)
    board = merge([("a", a), ("b", b), ("old", old)])
    cell = board.cells[("ADD", "f32", "CPU")]
    assert (cell.outcome, cell.worst_rel, cell.hosts, cell.cases) == ("failed", 0.5, {"h1", "h2"}, 2)
    assert cell.entry is not None and cell.entry.host == "h2" and cell.entry.source == "b"
    assert board.cells[("MUL", "f32", "CPU")].hosts == {"?"}


def test_the_command_writes_both_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r1, r2 = tmp_path / "a.json", tmp_path / "b.json"
    r1.write_text(json.dumps(_report("REFERENCE", [_case("ADD", "f32", "passed")])))
    r2.write_text(json.dumps(_report("CPU", [_case("ADD", "f32", "passed")])))
    assert main([str(r1), str(r2), "--md", str(tmp_path / "o.md"), "--html", str(tmp_path / "o.html")]) == 0
    assert "| ADD | f32 | ok | ok |" in (tmp_path / "o.md").read_text()
    _check_html((tmp_path / "o.html").read_text())
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "junk.json")])
    assert "not a conformance JSON report" in capsys.readouterr().err
