"""Known failures: the xfails file format (`--xfails FILE`) and the suite's own list of known issues of
uopgrad's core, which every backend inherits (they are not the backend's fault). Each entry names the
issue; with `--strict-xfail` an entry that starts passing fails the run, so it gets removed."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from uopgrad.backend import Capabilities

__all__ = ["KNOWN_CORE_ISSUES", "XfailEntry", "parse_xfails"]


@dataclass
class XfailEntry:
    """One line of an xfails file: a test id pattern (`*` matches anything) and the reason after `#`."""

    pattern: str
    reason: str
    line: int = 0
    matched: int = 0
    applies: Callable[[Capabilities], bool] | None = None  # None: to every backend

    def regex(self) -> re.Pattern[str]:
        """The pattern as a regular expression over a node id, or over its part after the last `::`."""
        return re.compile("(?:.*::)?" + ".*".join(re.escape(p) for p in self.pattern.split("*")) + r"\Z")


def parse_xfails(text: str) -> list[XfailEntry]:
    """Entries of an xfails file: one test id (or `*` pattern) per line, `# reason` after it; blank lines
    and lines starting with `#` are ignored."""
    out = []
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        out.append(XfailEntry(pattern.strip(), reason.strip() or "listed in the xfails file", i))
    return out


# Issues of core (not of any backend), found by this suite; each is reported with a patch in issue 5's note.
KNOWN_CORE_ISSUES: list[XfailEntry] = [
    XfailEntry(
        "test_function[FUNCTION_implicit_input_2-d-*]",
        "core: the gradient of an implicit input that is not 1-d is silently zero: the FUNCTION "
        "captures its BUFFER, while the Tensor (the gradient target) is a RESHAPE of it, so the "
        "argument is never `needed` in call_gradient",
    ),
]
