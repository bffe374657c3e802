"""The uopgrad_cpu package ships its type marker, its entry point, and imports no other backend."""

import ast
import importlib.resources
import subprocess
import sys

import pytest

LIST_PACKAGES = "print(sorted({m.partition('.')[0] for m in sys.modules if m.startswith('uopgrad_')}))"


def test_import_loads_no_other_uopgrad_package():
    # a fresh interpreter, so modules imported by other tests in this run cannot hide a stray import
    code = f"import sys, uopgrad_cpu; {LIST_PACKAGES}"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert ast.literal_eval(out) == ["uopgrad_cpu"]


def test_ships_py_typed():
    assert importlib.resources.files("uopgrad_cpu").joinpath("py.typed").is_file()


def test_entry_point_names_the_backend():
    from importlib.metadata import entry_points

    from uopgrad_cpu import CPUBackend

    eps = [ep for ep in entry_points(group="uopgrad.backends") if ep.name == "CPU"]
    if not eps:  # running from a source tree without `pip install ./packages/backend-cpu`
        pytest.skip("uopgrad-cpu is not installed")
    assert eps[0].load() is CPUBackend
