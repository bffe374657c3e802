"""The suite scaled out and steered as a user with a cluster does it: pytest-xdist (`-n 2`) reports every
case a serial run reports, with the same table; `--skips FILE` keeps cases from running; a missing
`--backend` is a usage error before anything runs; the worst relative error is a JUnit property. Runs on
REFERENCE only (a `-k` selection keeps each run short)."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET

import pytest
from suite_run import run_suite

SELECT = "test_alu and (ADD or CMPLT) or test_movement"


def table(out: str) -> str:
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("uopgrad conformance summary"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("cases:"))
    return "\n".join(lines[start : end + 1])


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="needs pytest-xdist installed")
def test_xdist_reports_every_case_of_a_serial_run(tmp_path):
    serial = run_suite(tmp_path, "REFERENCE", "-k", SELECT, name="serial")
    par = run_suite(tmp_path, "REFERENCE", "-k", SELECT, "-n", "2", name="parallel")
    assert serial.rc == 0 and par.rc == 0, par.stdout[-3000:]
    s, p = serial.report, par.report
    assert len(s["cases"]) > 100

    def cases(rep):
        return [(c["nodeid"], c["outcome"]) for c in rep["cases"]]

    assert cases(p) == cases(s)
    assert p["counts"] == s["counts"] and table(par.stdout) == table(serial.stdout)


def test_skips_file_keeps_cases_from_running(tmp_path):
    skips = tmp_path / "hangs.txt"
    skips.write_text(
        "# cases that hang on this device\ntest_alu[ADD-float32-forward]  # hangs the driver\n"
        "test_alu[NOSUCHOP-*]  # stale line\n"
    )
    res = run_suite(tmp_path, "REFERENCE", "-k", "test_alu and ADD and float", "--skips", str(skips))
    rep = res.report
    assert res.rc == 0, res.stdout[-3000:]
    case = next(c for c in rep["cases"] if c["nodeid"].endswith("test_alu[ADD-float32-forward]"))
    assert case["outcome"] == "skipped" and case["reason"] == "--skips: hangs the driver"
    assert all(c["outcome"] == "passed" for c in rep["cases"] if c is not case)
    assert "--skips line 3: 'test_alu[NOSUCHOP-*]' matches no collected test" in res.stdout


def test_missing_backend_is_a_usage_error_at_start_up(tmp_path):
    res = run_suite(tmp_path, None, name="none")
    assert res.rc == 4, res.stdout[-2000:]  # pytest's exit code for a usage error
    assert "needs --backend NAME" in res.stderr and not res.report["cases"]
    assert "passed" not in res.stdout and "collected" not in res.stdout


def test_worst_relative_error_is_a_junit_property(tmp_path):
    xml = tmp_path / "junit.xml"
    res = run_suite(tmp_path, "REFERENCE", "-k", "test_alu and EXP2", f"--junitxml={xml}")
    rep = res.report
    assert res.rc == 0, res.stdout[-2000:]
    props = {}
    for tc in ET.parse(xml).getroot().iter("testcase"):
        props[tc.get("name")] = {p.get("name"): p.get("value") for p in tc.iter("property")}
    worst = {c["nodeid"].split("::")[-1]: c["worst_rel"] for c in rep["cases"]}
    assert props and set(props) == set(worst)
    for name, p in props.items():
        assert p["conformance_row"] == "EXP2" and p["conformance_check"] == "forward"
        assert float(p["worst_rel"]) == pytest.approx(worst[name], rel=1e-12)
