"""The mutation score: how many of the planted bugs the suite caught, printed at the end of the meta run."""

from __future__ import annotations

import pytest

_PLANTED = ("test_planted_bug_is_caught", "test_planted_c_bug_is_caught")
_caught: dict[str, bool | None] = {}  # None: not run (skipped, with its reason in pytest's summary)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record each planted-bug test's outcome (caught when the test passed)."""
    name = report.nodeid.split("::")[-1]
    if name.startswith(_PLANTED) and (report.when == "call" or report.skipped):
        _caught[name] = None if report.skipped else report.passed


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """`mutation score: caught of planted`, and which were missed or not run."""
    if not _caught:
        return
    tr = terminalreporter
    ran = {k: v for k, v in _caught.items() if v is not None}
    tr.section("conformance mutation score")
    tr.write_line(
        f"mutation score: {sum(ran.values())} of {len(ran)} planted bugs caught"
        + (f" ({len(_caught) - len(ran)} not run, see the skip reasons)" if len(ran) < len(_caught) else "")
    )
    for name, ok in sorted(_caught.items()):
        if ok is not True:
            tr.write_line(f"  {'missed' if ok is False else 'not run'}: {name}")
