"""The public facade is exactly the contract of docs/ARCHITECTURE.md §4, and importing it loads no backend."""

from __future__ import annotations

import re
import subprocess
import sys

from test_style import ROOT


def facade_in_the_doc() -> list[str]:
    """The names ARCHITECTURE.md §4 gives as `uopgrad.__all__` (the contract is written there, once)."""
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    found = re.search(r"The facade `uopgrad.__all__` is exactly:\s*`([^`]+)`", text)
    assert found, "docs/ARCHITECTURE.md §4 no longer states the facade"
    return sorted(n.strip() for n in found.group(1).split(","))


def test_facade_names_are_pinned():
    import uopgrad

    # GlobalCounters joined the contract with issue 9 (tinygrad's own tests import it from the package)
    # TinyJit with issue 13 (tinygrad's users import it from the package)
    # Variable and Context with issue 31 (tinygrad's `from tinygrad import Variable, Context`)
    assert sorted(uopgrad.__all__) == facade_in_the_doc()
    assert all(hasattr(uopgrad, n) for n in uopgrad.__all__)
    v = uopgrad.Variable("i", 1, 10)
    assert v.op is uopgrad.Ops.DEFINE_VAR and v.arg == ("i", 1, 10) and v.bind(3).op is uopgrad.Ops.BIND


def test_second_tier_names():
    from uopgrad.function import function, pm_transform_unique_const
    from uopgrad.gradient import call_gradient, compute_gradient, pm_gradient

    assert callable(function) and callable(call_gradient) and callable(compute_gradient)
    assert len(pm_gradient) > 0 and len(pm_transform_unique_const) == 1


def test_import_loads_no_backend():
    code = "import sys, uopgrad; print(sorted(m for m in sys.modules if m.startswith('uopgrad_')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
