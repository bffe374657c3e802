"""Shared setup of the spec property tests: the hypothesis profiles, and VERIFY on.

`ci` (the default) is derandomised and bounded, so a run is repeatable and quick; `thorough` searches
much longer. Choose with `HYPOTHESIS_PROFILE=thorough pytest spec`. Every pass's output is verified
(docs/style.md P6), so a rule that builds a malformed graph fails here by name.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from uopgrad.config import VERIFY

settings.register_profile(
    "ci", derandomize=True, max_examples=100, deadline=None, database=None, print_blob=True
)
settings.register_profile("thorough", max_examples=2000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
VERIFY.value = 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per class of hostile input that ran (spec/test_hostile*.py count them in HOSTILE_STATS;
    some modules share test_hostile's counter): every counted case ended in the right value or a clear error,
    else its test failed."""
    import sys
    from collections import Counter

    total: Counter[str] = Counter()
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        stats = getattr(module, "HOSTILE_STATS", None)
        if (
            name.rsplit(".", 1)[-1].startswith("test_hostile")
            and isinstance(stats, Counter)
            and id(stats) not in seen
        ):
            seen.add(id(stats))
            total.update(stats)
    if total:
        write = terminalreporter.write_line
        write(f"hostile inputs: {sum(total.values())} cases")
        for key, count in sorted(total.items()):
            write(f"  {key}: {count}")
