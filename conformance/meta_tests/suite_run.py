"""The suite run as a backend author runs it, for the meta tests: in a fresh process, by the `uopgrad
conformance NAME` command (or plain pytest where no backend is named), in a directory of the test's own,
with the JSON report read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    report: dict

    @property
    def out(self) -> str:
        """stdout and stderr together."""
        return self.stdout + self.stderr

    def outcome(self, test_id: str) -> str:
        """The outcome of the case whose node id ends with `test_id`."""
        found = [c["outcome"] for c in self.report["cases"] if c["nodeid"].endswith(test_id)]
        assert len(found) == 1, f"{test_id}: {found} among {[c['nodeid'] for c in self.report['cases']][:5]}"
        return found[0]

    def failed(self) -> set[str]:
        return {c["nodeid"].split("::")[-1] for c in self.report["cases"] if c["outcome"] == "failed"}


def run_suite(tmp_path: Path, backend: str | None, *args: str, name: str = "", timeout: int = 1800) -> Run:
    """The suite on `backend` (None: no --backend at all) with extra pytest arguments, run in `tmp_path` with
    a kernel cache of its own; its report is `tmp_path`/`name or backend`.json."""
    report = tmp_path / f"{name or backend or 'none'}.json"
    if backend is None:
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "uopgrad_conformance"]
    else:
        cmd = [sys.executable, "-m", "uopgrad", "conformance", backend]
    cmd += ["-p", "no:cacheprovider", "--conformance-report", str(report), "-q", *args]
    env = {**os.environ, "UOPGRAD_CACHE_DIR": str(tmp_path / "kernels")}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=timeout)
    data = json.loads(report.read_text()) if report.exists() else {"cases": []}
    return Run(res.returncode, res.stdout, res.stderr, data)


def run_repro(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """A repro snippet run on its own, as a user pastes it into a file."""
    script = tmp_path / "repro.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
