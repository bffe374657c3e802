"""The install hints a user reads (a missing backend, `uopgrad devices`, `uopgrad conformance`) are commands
pip accepts: each is parsed out of the message and handed to this environment's pip, as a user would paste it.

No uopgrad package is on the package index, so every hint names a directory of this repository."""

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from uopgrad import backend
from uopgrad.backend import SOURCES, DeviceRegistry, checkout, install_hint
from uopgrad.cli import main
from uopgrad.errors import BackendError

ROOT = Path(__file__).resolve().parents[3]


def pip_accepts(command: str, cwd: Path = ROOT) -> str:
    """Run the hint's `pip install <target>` with this interpreter's pip, resolving nothing from an index."""
    words = shlex.split(command)
    assert words[:2] == ["pip", "install"] and len(words) == 3, command
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index"]
        + ["--no-build-isolation", words[2]],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def quoted_command(message: str) -> str:
    found = re.search(r"`(pip install [^`]+)`", message)
    assert found, message
    return found.group(1)


def registry_without(name: str) -> DeviceRegistry:
    reg = DeviceRegistry()
    reg._plugins = {n: p for n, p in reg._discover().items() if n != name}
    return reg


def test_every_source_directory_builds_the_distribution_it_names():
    for dist, where in SOURCES.items():
        project = tomllib.loads((ROOT / where / "pyproject.toml").read_text())["project"]
        assert project["name"] == dist


@pytest.fixture
def from_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Core as an editable install of this checkout (nox installs it from a built wheel instead)."""
    monkeypatch.setattr(backend, "checkout", lambda: ROOT)


def test_the_checkout_is_found_only_for_a_source_install():
    import uopgrad

    # (nox's environments live under the checkout too, in .nox/: only the source tree itself counts)
    editable = Path(uopgrad.__file__).resolve().parent == ROOT / "packages/core/src/uopgrad"
    assert checkout() == (ROOT if editable else None)


def test_missing_backend_hint_is_a_command_pip_accepts(from_checkout: None) -> None:
    with pytest.raises(BackendError) as e:
        registry_without("CL")["CL"]
    command = quoted_command(str(e.value))
    assert command == f"pip install {ROOT / 'packages/backend-opencl'}"
    assert "Would install uopgrad-opencl" in pip_accepts(command, cwd=Path("/"))  # absolute: from anywhere


def test_cuda_extra_hint_is_a_command_pip_accepts():
    command = install_hint("uopgrad-cuda", "cuda13")
    assert "Would install uopgrad-cuda" in pip_accepts(command)


def test_hint_without_a_checkout_is_relative_to_the_repository_root(monkeypatch):
    monkeypatch.setattr(backend, "checkout", lambda: None)
    with pytest.raises(BackendError) as e:
        registry_without("CUDA")["CUDA"]
    message = str(e.value)
    assert "nox -s wheels" in message
    command = quoted_command(message)
    assert command == "pip install ./packages/backend-cuda"
    assert "Would install uopgrad-cuda" in pip_accepts(command, cwd=ROOT)


def test_devices_lists_each_missing_backend_with_its_command(monkeypatch, capsys):
    monkeypatch.setattr(backend, "Device", registry_without("CL"))
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("CL "))
    assert "uopgrad-opencl" in line
    pip_accepts(quoted_command(line))


def test_conformance_hint_when_the_suite_is_missing(from_checkout, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "uopgrad_conformance" else real(name, *a),
    )
    assert main(["conformance", "CPU"]) == 2
    command = quoted_command(capsys.readouterr().err)
    assert command == f"pip install {ROOT / 'conformance'}"
    assert "Would install uopgrad-conformance" in pip_accepts(command)


def test_the_hint_works_in_a_fresh_venv(from_checkout: None, tmp_path: Path) -> None:
    """The user's case: a new virtual environment with nothing but pip, the hint pasted into it (dry run,
    without dependencies: the point is that pip finds and builds the distribution the hint names)."""
    with pytest.raises(BackendError) as e:
        registry_without("CL")["CL"]
    words = shlex.split(quoted_command(str(e.value)))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", *words, "--dry-run", "--no-deps"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    if out.returncode != 0 and "setuptools" in out.stdout + out.stderr and "No matching" in out.stderr:
        pytest.skip("a fresh venv cannot fetch setuptools (no package index here) to build the package")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Would install uopgrad-opencl" in out.stdout
