"""The uopgrad_opencl package ships its type marker and its entry point, has the four modules of every
backend, and imports no other backend."""

import ast
import importlib.resources
import subprocess
import sys

import pytest

LIST_PACKAGES = "print(sorted({m.partition('.')[0] for m in sys.modules if m.startswith('uopgrad_')}))"


def test_import_loads_no_other_uopgrad_package():
    # a fresh interpreter, so modules imported by other tests in this run cannot hide a stray import
    code = f"import sys, uopgrad_opencl; {LIST_PACKAGES}"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert ast.literal_eval(out) == ["uopgrad_opencl"]


def test_ships_py_typed():
    assert importlib.resources.files("uopgrad_opencl").joinpath("py.typed").is_file()


def test_has_the_four_modules_of_a_backend():
    files = {p.name for p in importlib.resources.files("uopgrad_opencl").iterdir()}
    assert {"__init__.py", "renderer.py", "compiler.py", "runtime.py"} <= files


def test_entry_point_names_the_backend():
    from importlib.metadata import entry_points

    from uopgrad_opencl import CLBackend

    eps = [ep for ep in entry_points(group="uopgrad.backends") if ep.name == "CL"]
    if not eps:  # running from a source tree without `pip install ./packages/backend-opencl`
        pytest.skip("uopgrad-opencl is not installed")
    assert eps[0].load() is CLBackend


def test_acceptance_one_liner():
    from importlib.metadata import entry_points

    if not any(ep.name == "CL" for ep in entry_points(group="uopgrad.backends")):
        pytest.skip("uopgrad-opencl is not installed")
    code = "from uopgrad import Tensor; print((Tensor([1.,2.,3.], device='CL')*2).sum().numpy())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "12.0"
