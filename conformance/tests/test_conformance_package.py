"""The uopgrad_conformance package installs with its type marker and imports without pulling in a backend."""

import ast
import importlib.resources
import subprocess
import sys

LIST_PACKAGES = "print(sorted(m for m in sys.modules if m.startswith('uopgrad_')))"


def test_import_loads_no_other_uopgrad_package():
    # a fresh interpreter, so modules imported by other tests in this run cannot hide a stray import
    code = f"import sys, uopgrad_conformance; {LIST_PACKAGES}"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert ast.literal_eval(out) == ["uopgrad_conformance"]


def test_ships_py_typed():
    assert importlib.resources.files("uopgrad_conformance").joinpath("py.typed").is_file()
