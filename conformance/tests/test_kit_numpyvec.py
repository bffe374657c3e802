"""The kit's package check on the out-of-tree example NUMPYVEC (examples/out_of_tree_backend): what the kit
demands of a backend package, the README's own example meets. The example is made importable the way
`pip install` would: its source folder and a dist-info with its entry point on the path, here and in every
interpreter the checks start."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from uopgrad_conformance.kit.package import package_tests

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "out_of_tree_backend"

if not EXAMPLE.is_dir():  # an installed conformance package without the repository around it
    pytest.skip("examples/out_of_tree_backend is not here", allow_module_level=True)


def _entry_point() -> str:
    """The example's `[project.entry-points."uopgrad.backends"]` table, as an entry_points.txt."""
    import tomllib

    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    eps = project["entry-points"]["uopgrad.backends"]
    return "[uopgrad.backends]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())


@pytest.fixture(autouse=True, scope="module")
def numpyvec_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    site = tmp_path_factory.mktemp("site")
    info = site / "uopgrad_numpyvec-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: uopgrad-numpyvec\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(_entry_point())
    paths = [str(EXAMPLE / "src"), str(site)]
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    mp.setattr(sys, "path", [*paths, *sys.path])
    yield
    mp.undo()


globals().update(package_tests("uopgrad_numpyvec", device="NUMPYVEC"))


def test_the_example_has_no_compiler_module() -> None:
    """The case the kit once failed: a backend whose compiler lives in another module."""
    assert not (EXAMPLE / "src" / "uopgrad_numpyvec" / "compiler.py").exists()
