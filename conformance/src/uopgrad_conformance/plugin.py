"""The pytest plugin (entry point `pytest11`): `pytest --pyargs uopgrad_conformance --backend NAME`.

Options: `--backend NAME` (a device of the `uopgrad.backends` entry points), `--xfails FILE` (known
failures by test id), `--strict-xfail` (an expected failure that passes fails the run), `--skips FILE`
(cases not to run at all, e.g. ones that hang; same format), `--conformance-report PATH` (the JSON summary;
by default under pytest's cache directory). The hypothesis profiles `ci` (derandomised, bounded; the default
here), `ci-slow` (the same with fewer programs, for slow compilers) and `thorough` are chosen with
hypothesis' own `--hypothesis-profile`. Without `--backend` the plugin
does nothing, so it is harmless in other test runs: it does not even import uopgrad then (the suite's
modules are imported when a backend is named); running the suite itself without one is a usage error.

Each case's result travels as the test report's `user_properties` (row, dtype column, check, worst
relative error, notes), so it reaches the JUnit XML as properties and, under pytest-xdist, the controller,
which alone prints the table and writes the JSON report from every worker's cases.

A case that kills its process (a segfault or abort in a kernel) is reported by name as CRASH: each process
that runs cases notes the case it starts in a journal (report.Journal); under pytest-xdist the controller
turns xdist's "worker crashed" report into that case's CRASH record and the other cases run on; in a plain
run a watchdog process (`python -m uopgrad_conformance.report --watch`) prints the table and writes the JSON
of the cases that finished, with the crashed one, when the test process dies.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from uopgrad import DType
    from uopgrad_conformance.report import Case, Journal, Record, Recorder, Summary
    from uopgrad_conformance.target import Target
    from uopgrad_conformance.xfails import XfailEntry

__all__ = [
    "case_rng",
    "claimed_cases",
    "get_target",
    "parametrize_cases",
    "parametrize_suite",
    "record",
    "target",
]

# the two hypothesis profiles (docs/conformance.md): `ci` is repeatable and quick, `thorough` searches long
# (`record` is a function-scoped fixture shared by a test's examples on purpose: it keeps their worst error)
_QUIET = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.function_scoped_fixture,
    HealthCheck.data_too_large,
]
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=20,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "thorough", max_examples=400, deadline=None, print_blob=True, suppress_health_check=_QUIET
)
# `ci-slow`: `ci` with fewer programs, for backends where every new kernel is a compiler run on the CI machine
# (OpenCL on PoCL, CUDA emulated: ~0.1-0.5 s each) and CPU already runs `ci`'s programs: derandomised, so the
# same first programs (hypothesis draws 7 of these 8 among `ci`'s first 20)
settings.register_profile("ci-slow", parent=settings.get_profile("ci"), max_examples=8)

_ReportWrapper = Generator[None, pytest.TestReport, pytest.TestReport]
_TARGET = pytest.StashKey["Target"]()
_STATE = pytest.StashKey["_State"]()
_RECORDER = pytest.StashKey["Recorder"]()
SUITE_PACKAGE = "uopgrad_conformance.suite"
_COLLECTOR = "uopgrad-conformance-collector"
_XDIST_CRASH = "???"  # the `when` of the report pytest-xdist makes for a case its worker died in
_JOURNAL_KEY = "uopgrad_conformance_journal"  # the journal directory, handed to pytest-xdist's workers
_REPRO = "repro:\n"  # a Failure's message ends with its repro snippet after this line (repro.py)


@dataclass
class _State:
    summary: Summary
    xfails: list[XfailEntry] = field(default_factory=list)
    skips: list[XfailEntry] = field(default_factory=list)
    nodeids: set[str] = field(default_factory=set)  # every case reported here (xfails matched on xdist)
    report_path: Path | None = None
    journal: Journal | None = None
    runner: str = "main"  # the journal file this process notes its cases in (gw0, ... under xdist)
    watchdog: subprocess.Popen[bytes] | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    """The suite's command-line options."""
    group = parser.getgroup("uopgrad-conformance", "uopgrad conformance suite")
    group.addoption(
        "--backend",
        default=None,
        metavar="NAME",
        help="the device to check, by its uopgrad.backends entry point name (e.g. CPU)",
    )
    group.addoption(
        "--xfails",
        default=None,
        metavar="FILE",
        help="known failures: one test id (or pattern with *) per line, '# reason' after it",
    )
    group.addoption(
        "--strict-xfail",
        action="store_true",
        default=False,
        help="an expected failure (from --xfails or the suite's known core issues) that passes fails the run",
    )
    group.addoption(
        "--skips",
        default=None,
        metavar="FILE",
        help="cases not to run (e.g. ones that hang): one test id (or pattern with *) per line, "
        "'# reason' after it; they are reported as skipped",
    )
    group.addoption(
        "--conformance-report",
        default=None,
        metavar="PATH",
        help="where to write the JSON summary (default: under pytest's cache directory)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the backend, load the `ci` profile (unless another was asked for) and the xfails."""
    name = config.getoption("backend")
    if name is None:
        if _targets_suite(config):
            raise pytest.UsageError(
                "the uopgrad conformance suite needs --backend NAME: an installed device "
                "such as REFERENCE or CPU (`uopgrad devices` lists them)"
            )
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
    for option in ("xfails", "skips"):
        value = config.getoption(option)
        if value is not None:
            path = Path(value)
            if not path.is_file():
                raise pytest.UsageError(f"--{option} {value}: no such file")
            setattr(state, option, parse_xfails(path.read_text()))
    report = config.getoption("conformance_report")
    if report is not None:
        state.report_path = Path(report)
    elif (cache := getattr(config, "cache", None)) is not None:  # absent under `-p no:cacheprovider`
        state.report_path = cache.mkdir("uopgrad-conformance") / f"{target.name}.json"
    config.stash[_STATE] = state
    from uopgrad_conformance.report import Journal

    if _is_worker(config):
        workerinput = getattr(config, "workerinput", {})
        # a worker on another host (`--tx ssh=...`) does not see the controller's journal directory: it keeps
        # none (a crash there is xdist's failure report only, not a CRASH row)
        if _JOURNAL_KEY in workerinput and Path(workerinput[_JOURNAL_KEY]).is_dir():
            state.journal = Journal(Path(workerinput[_JOURNAL_KEY]))
            state.runner = str(workerinput.get("workerid", "worker"))
        return
    state.journal = Journal(Path(tempfile.mkdtemp(prefix="uopgrad-conformance-")))
    state.watchdog = _start_watchdog(config, state)
    config.pluginmanager.register(_Collector(state), _COLLECTOR)


def _start_watchdog(config: pytest.Config, state: _State) -> subprocess.Popen[bytes]:
    """The process that reports the run if this one dies: it writes to the terminal (pytest's capture of
    the output is suspended while it starts, so it inherits the real stdout)."""
    assert state.journal is not None
    cmd = [sys.executable, "-m", "uopgrad_conformance.report", "--watch", str(state.journal.root)]
    cmd += ["--backend", get_target(config).name]
    if state.report_path is not None:
        cmd += ["--report", str(state.report_path.resolve())]
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE)
    with capman.global_and_fixture_disabled():
        return subprocess.Popen(cmd, stdin=subprocess.PIPE)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run ended normally: the watchdog removes the journal and prints nothing."""
    state = config.stash.get(_STATE, None)
    if state is None or state.watchdog is None or state.watchdog.stdin is None:
        return
    from uopgrad_conformance.report import DONE

    try:
        state.watchdog.stdin.write(DONE.encode() + b"\n")
        state.watchdog.stdin.close()
        state.watchdog.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _targets_suite(config: pytest.Config) -> bool:
    """Whether this run collects the suite: `--pyargs uopgrad_conformance[.suite...]` or a path inside it."""
    spec = importlib.util.find_spec("uopgrad_conformance")  # finds the package without running it
    roots = [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
    for arg in config.args:
        target = arg.split("::")[0]
        if target == "uopgrad_conformance" or target.startswith(SUITE_PACKAGE):
            return True
        resolved = Path(target).resolve()
        if any(resolved == r or r in resolved.parents for r in roots):
            return True
    return False


def _is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker: it runs cases; the controller gathers their reports."""
    return hasattr(config, "workerinput")


def get_target(config: pytest.Config) -> Target:
    """The backend under test (a usage error when `--backend` was not given)."""
    if _TARGET not in config.stash:
        raise pytest.UsageError(
            "the uopgrad conformance suite needs --backend NAME (an installed device, e.g. REFERENCE or CPU)"
        )
    return config.stash[_TARGET]


def parametrize_cases(metafunc: pytest.Metafunc, cases: list[Case]) -> None:
    """The test's `case` argument over `cases`, each under its id; one the target doesn't claim is skipped,
    saying why."""
    metafunc.parametrize(
        "case",
        [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip else []) for c in cases],
    )


def parametrize_suite(metafunc: pytest.Metafunc, cases: Callable[[Target, str], list[Case]]) -> None:
    """A suite module's `pytest_generate_tests`: each test that takes a `case` runs over the cases that
    `cases(backend under test, test name)` builds."""
    if "case" in metafunc.fixturenames:
        parametrize_cases(metafunc, cases(get_target(metafunc.config), metafunc.function.__name__))


def claimed_cases(
    target: Target, rows: Mapping[str, Any], dts: Iterable[DType], check: str, group: str
) -> list[Case]:
    """A case per row (name -> payload) and dtype, skipped where the target does not claim the dtype."""
    from uopgrad_conformance.report import Case

    return [
        Case(row, dt, check, target.not_claimed(dt), payload, group)
        for row, payload in rows.items()
        for dt in dts
    ]


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
    """Skip the cases of the skips file; mark those of the xfails file (and the suite's own known core
    issues) as xfail."""
    if _STATE not in config.stash:
        return
    from uopgrad_conformance.xfails import KNOWN_CORE_ISSUES

    state = config.stash[_STATE]
    skips = [(e, e.regex()) for e in state.skips]
    for item in items:
        for entry, rx in skips:
            if rx.match(item.nodeid):
                entry.matched += 1
                item.add_marker(pytest.mark.skip(reason=f"--skips: {entry.reason}"))
                break
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
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Note the case in the journal before it runs: if it kills the process, the journal names it."""
    state = item.config.stash.get(_STATE, None)
    case = _case_of(item) if state is not None and state.journal is not None else None
    if state is not None and state.journal is not None and case is not None:
        from uopgrad_conformance.report import Record

        rec = Record(item.nodeid, case.row, case.group, case.column, case.check, "running")
        state.journal.running(state.runner, rec)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> _ReportWrapper:
    """Attach each case's row, column, check, worst relative error, notes, host and a failure's repro to its
    report (once: at its call, or at a setup that did not pass), and to the item, whose teardown report
    carries them to JUnit."""
    report: pytest.TestReport = yield
    if _STATE not in item.config.stash:
        return report
    case = _case_of(item)
    if case is None:
        return report
    if report.when == "call" or (report.when == "setup" and not report.passed):
        from uopgrad_conformance.report import Recorder

        rec = item.stash.get(_RECORDER, Recorder())
        props: list[tuple[str, object]] = [
            ("conformance_row", case.row),
            ("conformance_group", case.group),
            ("conformance_column", case.column),
            ("conformance_check", case.check),
        ]
        if rec.worst is not None:
            props.append(("worst_rel", rec.worst))
        if rec.notes:
            props.append(("conformance_notes", json.dumps(rec.notes)))
        props.append(("conformance_host", socket.gethostname()))  # this worker's: xdist may run it elsewhere
        if call.excinfo is not None and _REPRO in (text := str(call.excinfo.value)):
            props.append(("conformance_repro", text[text.rindex(_REPRO) + len(_REPRO) :].strip("\n")))
        report.user_properties.extend(props)
        item.user_properties.extend(props)
    return report


class _Collector:
    """Adds each case's report to the summary: in a serial run, and on the pytest-xdist controller, which
    receives every worker's reports (workers register none, so each case is counted once)."""

    def __init__(self, state: _State) -> None:
        self.state = state
        self.order: dict[str, int] = {}  # collection order, from the xdist workers

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        """A worker collected `ids` (every worker collects the same, in the same order)."""
        if not self.order:
            self.order = {nodeid: i for i, nodeid in enumerate(ids)}
            if self.state.journal is not None:
                self.state.journal.collected(len(ids))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A serial run collected its cases (the xdist controller collects none: its workers say)."""
        if session.items and self.state.journal is not None:
            self.state.journal.collected(len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: object) -> None:
        """Hand a starting pytest-xdist worker the journal directory."""
        workerinput = getattr(node, "workerinput", None)
        if isinstance(workerinput, dict) and self.state.journal is not None:
            workerinput[_JOURNAL_KEY] = str(self.state.journal.root)

    def sort(self) -> None:
        """Put the records in collection order, as a serial run has them (workers finish in any order)."""
        if self.order:
            self.state.summary.records.sort(key=lambda r: self.order.get(r.nodeid, len(self.order)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A phase of a test finished: record it if it is a case's result."""
        props = dict(report.user_properties)
        if str(report.when) == _XDIST_CRASH and report.failed and "conformance_row" not in props:
            self._crashed(report)  # pytest-xdist: a worker died in this case
            return
        if report.when == "teardown" or "conformance_row" not in props:
            return
        from uopgrad_conformance.report import Record

        outcome, reason = _outcome(report)
        worst = props.get("worst_rel")
        notes = json.loads(str(props["conformance_notes"])) if "conformance_notes" in props else []
        rec = Record(
            report.nodeid,
            str(props["conformance_row"]),
            str(props["conformance_group"]),
            str(props["conformance_column"]),
            str(props["conformance_check"]),
            outcome,
            None if worst is None else float(str(worst)),
            reason,
            notes,
            str(props.get("conformance_host", "")),
            str(props.get("conformance_repro", "")),
        )
        self._add(rec)

    def _add(self, rec: Record) -> None:
        self.state.nodeids.add(rec.nodeid)
        self.state.summary.add(rec)
        if self.state.journal is not None:
            self.state.journal.record(rec)

    def _crashed(self, report: pytest.TestReport) -> None:
        """The CRASH record of the case a worker died in (its row and column from the worker's journal)."""
        from uopgrad_conformance.report import crash_record

        started = None if self.state.journal is None else self.state.journal.started(report.nodeid)
        if started is not None and report.nodeid not in self.state.nodeids:
            self._add(crash_record(started, str(report.longrepr)))


def _outcome(report: pytest.TestReport) -> tuple[str, str]:
    if hasattr(report, "wasxfail"):
        return ("xfailed", str(report.wasxfail)) if report.skipped else ("xpassed", str(report.wasxfail))
    if report.skipped:
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, (tuple, list)) else str(longrepr)
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
    collector = config.pluginmanager.get_plugin(_COLLECTOR)
    if isinstance(collector, _Collector):
        collector.sort()
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
    for option, entries in (("xfails", state.xfails), ("skips", state.skips)):
        for e in entries:
            rx = e.regex()  # matched on this process's collection, or (xdist) against the reported cases
            if e.matched == 0 and not any(rx.match(n) for n in state.nodeids):
                tr.write_line(f"warning: --{option} line {e.line}: {e.pattern!r} matches no collected test")
    if state.report_path is not None:
        state.summary.write(state.report_path)
        tr.write_line(f"JSON report: {state.report_path}")
