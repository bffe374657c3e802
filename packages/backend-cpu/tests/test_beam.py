"""BEAM on the CPU (uopgrad.search): the kernel it picks by timing gives the heuristic's bits, and the pick is
kept on disk, so a second process compiles nothing new. Each run is a fresh process over one private
compile cache (a matmul with a relu epilogue and a dot-product matmul: two small kernels, ~20 candidates
in all)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from uopgrad.backend import Device

pytestmark = pytest.mark.skipif(
    Device["CPU"].capabilities.vector_width == 0,
    reason="this CPU has no vector width: the opt pass, and BEAM, are off",
)

SCRIPT = """
import json, sys, numpy as np
from uopgrad import Tensor
from uopgrad.backend import Device
rng = np.random.default_rng(0)
x, w = (rng.standard_normal(s).astype(np.float32) for s in ((8, 32), (32, 16)))
x[::3] = 0.0  # zero rows: relu ties, exact zeros
a, b = Tensor(x, device="CPU"), Tensor(w, device="CPU")
outs = [(a @ b).relu(), a @ a.T]
print(json.dumps({"out": [o.numpy().tobytes().hex() for o in outs],
                  "compiled": Device["CPU"].compiler.stats["compiled"]}))
"""


def run(cache: Path, beam: int) -> dict[str, object]:
    env = {**os.environ, "UOPGRAD_CACHE_DIR": str(cache), "BEAM": str(beam)}
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True)
    got: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return got


def test_beam_picks_a_kernel_with_the_heuristics_bits_and_a_second_run_compiles_nothing(tmp_path: Path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    first = run(cache, 2)
    assert isinstance(first["compiled"], int) and first["compiled"] > 3  # candidates were built and timed
    again = run(cache, 2)
    assert again["compiled"] == 0 and again["out"] == first["out"]  # every pick and kernel from the disk
    (tmp_path / "other").mkdir(mode=0o700)
    heuristic = run(tmp_path / "other", 0)
    assert heuristic["out"] == first["out"]  # any tile shape gives the same bits (spec/opt.md)
