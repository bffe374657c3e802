"""Honest packaging, checked on the repository's package definitions: one version (each package's
_version.py, which its pyproject.toml reads), backends and the suite on core of that minor version, a LICENSE
(the repository's text) and a readme in every package, classifiers, and the console script."""

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = {
    "packages/core": "uopgrad",
    "packages/backend-cpu": "uopgrad_cpu",
    "packages/backend-opencl": "uopgrad_opencl",
    "packages/backend-cuda": "uopgrad_cuda",
    "conformance": "uopgrad_conformance",
}


def version_of(directory: str, module: str) -> str:
    tree = ast.parse((ROOT / directory / "src" / module / "_version.py").read_text())
    return next(
        n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__version__"
    )  # type: ignore[attr-defined]


@pytest.mark.parametrize("directory,module", PACKAGES.items())
def test_package_metadata(directory, module):
    meta = tomllib.loads((ROOT / directory / "pyproject.toml").read_text())
    project = meta["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": f"{module}._version.__version__"}
    core = version_of("packages/core", "uopgrad")
    assert version_of(directory, module) == core, "every package is released with core's version"
    major, minor, _ = core.split(".")
    for dep in project["dependencies"]:
        if re.match(r"uopgrad\b(?![-_])", dep):
            assert dep == f"uopgrad~={major}.{minor}.0", f"{directory}: {dep} is not core's minor version"
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / directory / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert (ROOT / directory / project["readme"]).is_file()
    assert "Typing :: Typed" in project["classifiers"] and not any(
        c.startswith("License ::") for c in project["classifiers"]
    )  # the SPDX expression says it


def test_core_has_the_console_script():
    meta = tomllib.loads((ROOT / "packages/core/pyproject.toml").read_text())
    assert meta["project"]["scripts"] == {"uopgrad": "uopgrad.cli:main"}
