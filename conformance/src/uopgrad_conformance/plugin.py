"""The pytest plugin (entry point `pytest11`): `pytest --pyargs uopgrad_conformance --backend NAME`.

Options: `--backend NAME` (a device of the `uopgrad.backends` entry points), `--xfails FILE` (known
failures by test id), `--strict-xfail` (an expected failure that passes fails the run),
`--conformance-report PATH` (the JSON summary; by default under pytest's cache directory). The hypothesis
profiles `ci` (derandomised, bounded; the default here) and `thorough` are chosen with hypothesis' own
`--hypothesis-profile`. Without `--backend` the plugin does nothing, so it is harmless in other test runs:
it does not even import uopgrad then (the suite's modules are imported when a backend is named).
"""
from __future__ import annotations

import zlib
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from uopgrad_conformance.report import Case, Recorder, Summary
    from uopgrad_conformance.target import Target
    from uopgrad_conformance.xfails import XfailEntry

__all__ = ["case_rng", "get_target", "record", "target"]

# the two hypothesis profiles (docs/conformance.md): `ci` is repeatable and quick, `thorough` searches long
# (`record` is a function-scoped fixture shared by a test's examples on purpose: it keeps their worst error)
_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture,
          HealthCheck.data_too_large]
settings.register_profile("ci", derandomize=True, max_examples=20, deadline=None, database=None,
                          print_blob=True, suppress_health_check=_QUIET)
settings.register_profile("thorough", max_examples=400, deadline=None, print_blob=True,
                          suppress_health_check=_QUIET)

_ReportWrapper = Generator[None, pytest.TestReport, pytest.TestReport]
_TARGET = pytest.StashKey["Target"]()
_STATE = pytest.StashKey["_State"]()
_RECORDER = pytest.StashKey["Recorder"]()
SUITE_PACKAGE = "uopgrad_conformance.suite"


@dataclass
class _State:
    summary: Summary
    xfails: list[XfailEntry] = field(default_factory=list)
    report_path: Path | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    """The suite's command-line options."""
    group = parser.getgroup("uopgrad-conformance", "uopgrad conformance suite")
    group.addoption("--backend", default=None, metavar="NAME",
                    help="the device to check, by its uopgrad.backends entry point name (e.g. CPU)")
    group.addoption("--xfails", default=None, metavar="FILE",
                    help="known failures: one test id (or pattern with *) per line, '# reason' after it")
    group.addoption("--strict-xfail", action="store_true", default=False,
                    help="an expected failure (from --xfails or the suite's known core issues) that passes "
                         "fails the run")
    group.addoption("--conformance-report", default=None, metavar="PATH",
                    help="where to write the JSON summary (default: under pytest's cache directory)")


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the backend, load the `ci` profile (unless another was asked for) and the xfails."""
    name = config.getoption("backend")
    if name is None:
        return
    from uopgrad_conformance.report import Summary
    from uopgrad_conformance.target import Target
    from uopgrad_conformance.xfails import parse_xfails
    try:
        target = Target.load(name)
    except RuntimeError as e:
        raise pytest.UsageError(f"--backend {name}: {e}") from e
    config.stash[_TARGET] = target
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile("ci")
    state = _State(Summary(target.name))
    xfails = config.getoption("xfails")
    if xfails is not None:
        path = Path(xfails)
        if not path.is_file():
            raise pytest.UsageError(f"--xfails {xfails}: no such file")
        state.xfails = parse_xfails(path.read_text())
    report = config.getoption("conformance_report")
    if report is not None:
        state.report_path = Path(report)
    elif (cache := getattr(config, "cache", None)) is not None:  # absent under `-p no:cacheprovider`
        state.report_path = cache.mkdir("uopgrad-conformance") / f"{target.name}.json"
    config.stash[_STATE] = state


def get_target(config: pytest.Config) -> Target:
    """The backend under test (a usage error when `--backend` was not given)."""
    if _TARGET not in config.stash:
        raise pytest.UsageError("the uopgrad conformance suite needs --backend NAME (an installed device, "
                                "e.g. REFERENCE or CPU)")
    return config.stash[_TARGET]


def case_rng(case: Case, salt: str = "") -> np.random.Generator:
    """A generator seeded by the case's id: every run of a case sees the same values."""
    return np.random.default_rng(zlib.crc32((case.id + salt).encode()))


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Target:
    """The backend under test."""
    return get_target(request.config)


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Recorder:
    """Collects the case's worst relative error and notes for the report."""
    from uopgrad_conformance.report import Recorder
    rec = Recorder()
    request.node.stash[_RECORDER] = rec
    return rec


def _case_of(item: pytest.Item) -> Case | None:
    from uopgrad_conformance.report import Case
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    return next((v for v in callspec.params.values() if isinstance(v, Case)), None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the cases listed in the xfails file (and the suite's own known core issues) as xfail."""
    if _STATE not in config.stash:
        return
    from uopgrad_conformance.xfails import KNOWN_CORE_ISSUES
    state = config.stash[_STATE]
    strict = bool(config.getoption("strict_xfail"))
    caps = get_target(config).backend.capabilities
    entries = [*state.xfails, *(e for e in KNOWN_CORE_ISSUES if e.applies is None or e.applies(caps))]
    patterns = [(e, e.regex()) for e in entries]
    for item in items:
        for entry, rx in patterns:
            if rx.match(item.nodeid):
                entry.matched += 1
                item.add_marker(pytest.mark.xfail(reason=entry.reason, strict=strict))
                break


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> _ReportWrapper:
    """Record each case's outcome (once: at its call, or at a setup that did not pass)."""
    report: pytest.TestReport = yield
    state = item.config.stash.get(_STATE, None)
    if state is None:
        return report
    case = _case_of(item)
    if case is None:
        return report
    if report.when == "call" or (report.when == "setup" and not report.passed):
        from uopgrad_conformance.report import Record, Recorder
        rec = item.stash.get(_RECORDER, Recorder())
        outcome, reason = _outcome(report)
        state.summary.add(Record(item.nodeid, case.row, case.group, case.column, case.check, outcome,
                                 rec.worst, reason, rec.notes))
    return report


def _outcome(report: pytest.TestReport) -> tuple[str, str]:
    if hasattr(report, "wasxfail"):
        return ("xfailed", str(report.wasxfail)) if report.skipped else ("xpassed", str(report.wasxfail))
    if report.skipped:
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        return ("not claimed" if reason.startswith("not claimed") else "skipped"), reason
    if report.failed:
        return ("failed" if report.when == "call" else "error"), ""
    return "passed", ""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Print the summary table, the skip reasons and unmatched xfails; write the JSON report."""
    state = config.stash.get(_STATE, None)
    if state is None or not state.summary.records:
        return
    tr = terminalreporter
    tr.section("uopgrad conformance")
    tr.write_line(state.summary.table())
    reasons: dict[str, int] = {}
    for r in state.summary.records:
        if r.outcome in ("skipped", "not claimed"):
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
    if reasons:
        tr.write_line("")
        tr.write_line("skipped cases, by reason:")
        for reason, n in sorted(reasons.items()):
            tr.write_line(f"  {n:4d}  {reason}")
    unmatched = [e for e in state.xfails if e.matched == 0]
    for e in unmatched:
        msg = f"--xfails line {e.line}: {e.pattern!r} matches no collected test"
        tr.write_line(f"warning: {msg}")
    if state.report_path is not None:
        state.summary.write(state.report_path)
        tr.write_line(f"JSON report: {state.report_path}")
