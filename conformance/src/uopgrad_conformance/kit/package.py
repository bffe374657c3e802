"""Checks of how a uopgrad package is built, for its own test folder: it imports no other uopgrad package,
ships its type marker, and (for a backend) registers its entry point, has the parts core calls (a `Backend`
subclass; a `CompiledBackend` also its renderer, compiler, allocator and runtime, of the base classes of
`uopgrad.backend`), runs the README's one-liner in a fresh interpreter, builds its target (`capabilities`)
through its renderer, and is listed as available, with its package and dtypes, by `uopgrad devices`. How
the package splits its modules is its own choice (NUMPYVEC has no `compiler.py`).

    # packages/backend-xyz/tests/test_xyz_package.py
    from uopgrad_conformance.kit.package import package_tests
    globals().update(package_tests("uopgrad_xyz", device="XYZ"))
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.resources
import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from uopgrad.backend import ENTRY_POINT_GROUP, Backend

__all__ = ["package_tests"]

LIST_PACKAGES = "print(sorted({m.partition('.')[0] for m in sys.modules if m.startswith('uopgrad_')}))"
# what core calls on a backend (uopgrad.backend): prints the parts that are missing or of the wrong kind
PARTS = """
from uopgrad import Device
from uopgrad.backend import Allocator, Backend, CompiledBackend, Compiler, Program
from uopgrad.renderer import Renderer
b = Device[{device!r}]
bad = [] if isinstance(b, Backend) else ["Backend"]
if isinstance(b, CompiledBackend):
    parts = {{"renderer": (b.renderer, Renderer), "compiler": (b.compiler, Compiler),
             "allocator": (b.allocator, Allocator)}}
    bad += [f"{{k}}: {{type(v).__name__}} is no {{c.__name__}}"
            for k, (v, c) in parts.items() if not isinstance(v, c)]
    if not (isinstance(b.runtime, type) and issubclass(b.runtime, Program)):
        bad.append(f"runtime: {{b.runtime!r}} is no Program subclass")
print(bad)
"""


def _python(code: str) -> str:
    """stdout of `code` in a fresh interpreter (modules other tests imported can't hide anything there)."""
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout


def _normalized(dist: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def package_tests(module: str, device: str | None = None) -> dict[str, Callable[..., Any]]:
    """Tests of the package `module`; `device` names the backend its entry point registers, if any."""

    def test_import_loads_no_other_uopgrad_package() -> None:
        assert ast.literal_eval(_python(f"import sys, {module}; {LIST_PACKAGES}")) == [module]

    def test_ships_py_typed() -> None:
        assert importlib.resources.files(module).joinpath("py.typed").is_file()

    tests: dict[str, Callable[..., Any]] = {
        f.__name__: f for f in (test_import_loads_no_other_uopgrad_package, test_ships_py_typed)
    }
    if device is None:
        return tests

    def entry_point() -> importlib.metadata.EntryPoint:
        eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == device]
        if not eps:  # running from a source tree without `pip install` of the package
            pytest.skip(f"the package of {module} is not installed")
        return eps[0]

    def test_entry_point_names_the_backend() -> None:
        cls = entry_point().load()
        assert isinstance(cls, type) and issubclass(cls, Backend)
        assert cls.__module__.startswith(module)

    def test_has_the_parts_of_a_backend() -> None:
        entry_point()
        assert _python(PARTS.format(device=device)).strip() == "[]"

    def test_acceptance_one_liner() -> None:
        entry_point()
        t = f"Tensor([1., 2., 3.], device={device!r})"
        code = f"from uopgrad import Tensor; print(({t} * 2).sum().numpy())"
        assert _python(code).strip() == "12.0"

    def test_the_target_is_built_by_the_renderer() -> None:
        entry_point()
        code = (
            f"from uopgrad import Device; b = Device[{device!r}]; t = b.capabilities; "
            "print(t == b.renderer.target(t.dtypes) and hash(t) == hash(b.renderer.target(t.dtypes)))"
        )
        assert _python(code).strip() == "True"

    def test_devices_lists_the_backend_with_its_package_and_dtypes() -> None:
        dist = entry_point().dist
        out = subprocess.run(
            [sys.executable, "-m", "uopgrad", "devices", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        rows = {r["backend"]: r for r in json.loads(out.stdout)}
        row = rows[device]
        assert row["available"] and "float32" in row["dtypes"] and "REFERENCE" in rows, row
        if dist is not None:
            assert _normalized(row["package"]) == _normalized(dist.name), row

    backend = (
        test_entry_point_names_the_backend,
        test_has_the_parts_of_a_backend,
        test_acceptance_one_liner,
        test_the_target_is_built_by_the_renderer,
        test_devices_lists_the_backend_with_its_package_and_dtypes,
    )
    return {**tests, **{f.__name__: f for f in backend}}
