"""The mutation score: how many of the planted bugs the suite caught, printed at the end of the meta run."""
from __future__ import annotations

import pytest

_PLANTED = ("test_planted_bug_is_caught", "test_planted_c_bug_is_caught")
_caught: dict[str, bool] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record each planted-bug test's outcome (caught when the test passed)."""
    name = report.nodeid.split("::")[-1]
    if report.when == "call" and name.startswith(_PLANTED):
        _caught[name] = report.passed


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """`mutation score: caught / planted`, and which were missed."""
    if not _caught:
        return
    tr = terminalreporter
    tr.section("conformance mutation score")
    tr.write_line(f"mutation score: {sum(_caught.values())} of {len(_caught)} planted bugs caught")
    for name, ok in sorted(_caught.items()):
        if not ok:
            tr.write_line(f"  missed: {name}")
