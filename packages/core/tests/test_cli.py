"""The `uopgrad` command as a user runs it: `python -m uopgrad ...` in a fresh process, and `main()`."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import uopgrad
from uopgrad.backend import Backend, Device, _Plugin
from uopgrad.cli import main


def run_cli(*args, env=None):
    e = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "uopgrad", *args], capture_output=True, text=True, env=e, timeout=120
    )


def test_version_is_the_package_metadata_version():
    import importlib.metadata

    assert uopgrad.__version__ == importlib.metadata.version("uopgrad")
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"uopgrad {uopgrad.__version__}"


def test_version_loads_no_backend_numpy_or_compiler():
    # what `uopgrad --version` imports, as the console script runs it (the time is in the report, not here)
    code = (
        "import sys; sys.argv = ['uopgrad', '--version']\n"
        "from uopgrad.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m.partition('.')[0] for m in sys.modules))\n"
    )
    out = python_output(code)
    assert out.startswith(f"uopgrad {uopgrad.__version__}")
    loaded = set(eval(out.splitlines()[-1]))
    assert not loaded & {"numpy", "ml_dtypes", "uopgrad_cpu", "uopgrad_opencl", "uopgrad_cuda"}, loaded


def test_ml_dtypes_is_imported_only_for_bfloat16():
    # its import was most of a uopgrad process's start: a float program never loads it, a bfloat16 one does
    out = python_output(
        "import sys\nfrom uopgrad import Tensor, dtypes\n"
        "assert (Tensor([1.0, 2.0]) * 2).numpy().tolist() == [2.0, 4.0]\n"
        "print('ml_dtypes' in sys.modules)\n"
        "print(Tensor([1.5], dtype=dtypes.bfloat16).numpy().dtype.name, 'ml_dtypes' in sys.modules)\n"
    )
    assert out.split() == ["False", "bfloat16", "True"]


def python_output(code: str) -> str:
    """What `python -c code` prints, in a fresh process (which must exit 0)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_devices_lists_reference_with_package_version_and_dtypes():
    out = run_cli("devices", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["backend"]: r for r in json.loads(out.stdout)}
    ref = rows["REFERENCE"]
    assert ref["package"] == "uopgrad" and ref["version"] == uopgrad.__version__ and ref["available"]
    assert "bfloat16" in ref["dtypes"] and "float32" in ref["dtypes"]
    text = run_cli("devices").stdout
    assert "REFERENCE" in text and "available" in text


class NoGPUBackend(Backend):
    def __init__(self, device: str) -> None:
        raise RuntimeError("no CUDA driver found (libcuda.so)")


def test_devices_says_why_a_backend_is_unavailable(monkeypatch, capsys):
    plugins = dict(Device._discover())
    plugins["NOGPU"] = _Plugin("NOGPU", f"{__name__}:NoGPUBackend", "uopgrad-nogpu")
    monkeypatch.setattr(Device, "_plugins", plugins)
    assert main(["devices", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["backend"] == "NOGPU")
    assert not row["available"] and "no CUDA driver" in row["reason"] and row["package"] == "uopgrad-nogpu"
    assert main(["devices"]) == 0
    assert "unavailable" in capsys.readouterr().out


def test_missing_backend_error_names_the_package():
    with pytest.raises(RuntimeError, match="pip install .*packages/backend-cuda"):
        Device["CUDA:3"] if "CUDA" not in Device else pytest.skip("uopgrad-cuda is installed here")


def test_cache_info_and_clear_touch_only_cache_entries(tmp_path):
    env = {"UOPGRAD_CACHE_DIR": str(tmp_path)}
    code = (
        "from uopgrad.backend import Compiler\n"
        "c = Compiler(); c.compile_cached('kernel one'); c.compile_cached('kernel two')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, **env})
    (tmp_path / "notes.txt").write_text("not ours")
    info = run_cli("cache", "info", env=env)
    assert info.returncode == 0 and "2 entries" in info.stdout and str(tmp_path) in info.stdout
    clear = run_cli("cache", "clear", env=env)
    assert clear.returncode == 0 and "removed 2 entries" in clear.stdout
    assert "0 entries" in run_cli("cache", "info", env=env).stdout
    assert (tmp_path / "notes.txt").read_text() == "not ours"


def test_viz_prints_the_index_of_the_newest_run(tmp_path):
    assert run_cli("viz", "--print-only", str(tmp_path)).returncode == 1  # none yet: says so
    for i, name in enumerate(["run-20260101-000000-11", "run-20260101-000001-12"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "index.html").write_text("<html></html>")
        os.utime(tmp_path / name / "index.html", (1000 + i, 1000 + i))
    (tmp_path / "0005-CPU.html").write_text("<html></html>")  # a loose page is no run's: never opened
    out = run_cli("viz", "--print-only", env={"UOPGRAD_VIZ": str(tmp_path)})
    newest = tmp_path / "run-20260101-000001-12" / "index.html"
    assert out.returncode == 0 and out.stdout.strip() == str(newest)


@pytest.mark.skipif(
    importlib.util.find_spec("uopgrad_conformance") is None,
    reason="needs uopgrad-conformance installed (nox -s tests installs it)",
)
def test_conformance_runs_the_suite_and_passes_pytest_arguments_on():
    out = run_cli("conformance", "REFERENCE", "-k", "ADD-float32-forward", "-p", "no:cacheprovider")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "uopgrad conformance summary for REFERENCE" in out.stdout and "passed" in out.stdout


def test_unknown_subcommand_is_a_usage_error():
    out = run_cli("frobnicate")
    assert out.returncode == 2 and "invalid choice" in out.stderr
