"""The repository's own documents: every design note the code and the READMEs cite exists in docs/, none
points outside the repository, and every package ships the repository's LICENSE in its wheel."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from test_style import ROOT, python_files

# a citation of a design note: `ARCHITECTURE.md`, `docs/semantics.md`, `style.md P7`, ...
CITED = re.compile(r"\b(ARCHITECTURE|semantics|conformance|pipeline|style)\.md\b")
OUTSIDE = re.compile(r"\.\./" + "shared|/work/" + "shared")  # in pieces, so this file does not match
PACKAGES = [
    "packages/core",
    "packages/backend-cpu",
    "packages/backend-opencl",
    "packages/backend-cuda",
    "conformance",
    "examples/out_of_tree_backend",
    "conformance/meta_tests/broken_backend",
]


def texts() -> list[Path]:
    """Python sources, READMEs, spec and docs pages, and the tool configuration."""
    roots = [ROOT / d for d in ("packages", "conformance", "spec", "bench", "examples", "tools", "docs")]
    md = [p for r in roots for p in sorted(r.rglob("*.md")) if ".egg-info" not in str(p)]
    return [*python_files(*roots), *md, ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "noxfile.py"]


def test_cited_design_notes_exist():
    cited = {m.group(1) for p in texts() for m in CITED.finditer(p.read_text())}
    assert {"ARCHITECTURE", "semantics", "style"} <= cited  # the scan reads what it should
    missing = sorted(name for name in cited if not (ROOT / "docs" / f"{name}.md").is_file())
    assert not missing, f"cited but not in docs/: {missing}"


def test_nothing_points_outside_the_repository():
    bad = [str(p.relative_to(ROOT)) for p in texts() if OUTSIDE.search(p.read_text())]
    assert not bad, f"references outside the repository: {bad}"


def test_every_package_ships_the_license():
    license_text = (ROOT / "LICENSE").read_text()
    assert "MIT License" in license_text
    for pkg in PACKAGES:
        project = tomllib.loads((ROOT / pkg / "pyproject.toml").read_text())["project"]
        assert project["license"] == "MIT", pkg
        assert project["license-files"] == ["LICENSE"], pkg
        assert (ROOT / pkg / "LICENSE").read_text() == license_text, pkg
