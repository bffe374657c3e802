"""Every benchmark script still runs: each is started as a user starts it, at its smallest size, and must exit
cleanly and print its table. Nothing here is timed or compared: a benchmark that crashes (bench/realize.py
did, for a while, after `schedule` gained an argument) is caught here rather than when someone next
measures. tinygrad is not installed in the tests session: the scripts report it missing, as they should."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent

# script and arguments (its smallest size) -> text its output must contain
SCRIPTS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("step.py", "CPU", "1"): (
        "torch eager",
        "tinygrad plain",
        "tinygrad TinyJit",
        "plain",
        "TinyJit",
        "cold gradient of a 2001-op chain",
        "cold compile of a new kernel",
    ),
    ("realize.py", "CPU", "1"): ("backward first", "read first", "torch eager"),
    ("rewrite.py", "--repeat", "1", "--terms", "200", "--chain", "1000"): (
        "toposort",
        "rewrite bottom-up",
        "ratio = ours / tinygrad",
    ),
    ("kernels.py", "--only", "chain8", "--runs", "1", "--repeat", "1"): ("chain8", "numpy"),
    ("split.py", "CPU", "50"): ("budget", "none"),
    ("soak.py", "20", "5"): ("step     20", "rss"),
    ("first_step.py", "CPU", "1"): ("transformer block", "digits CNN", "machine:", "kernels", "torch"),
    ("grid.py", "--n", "64", "--repeat", "1", "--runs", "1"): ("CL OPT=0", "ratio CL / CPU"),
    ("gpu.py", "--smoke"): ("smoke run on the CUDA emulator", "matmul f16   ok", "chain8       ok"),
    ("grid_reduce.py", "--log2", "17", "--repeat", "1", "--runs", "1"): ("CL OPT=0", "ratio CL / CPU"),
}


@pytest.mark.parametrize("argv", list(SCRIPTS), ids=lambda a: a[0])
def test_a_benchmark_script_runs_and_prints_its_table(argv: tuple[str, ...]) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    res = subprocess.run(
        [sys.executable, str(BENCH / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        cwd=BENCH.parent,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, f"{' '.join(argv)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    missing = [text for text in SCRIPTS[argv] if text not in res.stdout]
    assert not missing, f"{' '.join(argv)} printed no {missing}:\n{res.stdout[-3000:]}"
