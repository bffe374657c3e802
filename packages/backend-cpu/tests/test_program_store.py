"""Lowered kernels kept on disk (`uopgrad.program_store`): a second process running the same training step
over the same cache directory lowers nothing and compiles nothing, and gets the same bits; what would make
an entry stale (other code, a damaged entry) makes it lower again; DEBUG=3 still dumps every pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# a PyTorch-style first step in a fresh process: forward, the loss printed, backward, the gradients read;
# argv[2] = "other-code" stands for another build of uopgrad, "bad-entries" for entries that do not load
SCRIPT = """
import json, pickle, sys
import numpy as np
from uopgrad import Tensor
from uopgrad import program_store
from uopgrad.backend import Device
from uopgrad.pipeline import program_cache_info
if sys.argv[2] == "other-code":
    program_store._code_digest = lambda *packages: b"another build of uopgrad"
if sys.argv[2] == "bad-entries":
    program_store.pickle = type("P", (), {"loads": staticmethod(lambda b: 1 / 0), "dumps": pickle.dumps,
                                          "HIGHEST_PROTOCOL": pickle.HIGHEST_PROTOCOL})
rng = np.random.default_rng(int(sys.argv[1]))
x = Tensor(rng.standard_normal((16, 24)).astype(np.float32), device="CPU")
w1 = Tensor(rng.standard_normal((24, 32)).astype(np.float32) * 0.2, device="CPU", requires_grad=True)
w2 = Tensor(rng.standard_normal((32, 8)).astype(np.float32) * 0.2, device="CPU", requires_grad=True)
loss = ((x @ w1).relu() @ w2).softmax(-1).square().mean()
value = loss.item()
loss.backward()
grads = [w.grad.numpy() for w in (w1, w2)]
print(json.dumps({
    "loss": value.hex(),
    "grads": [g.tobytes().hex() for g in grads],
    "lowered": program_cache_info()["misses"],
    "compiled": Device["CPU"].compiler.stats.get("compiled", 0),
}))
"""


def run(cache: Path, seed: int, mode: str = "plain", debug: str = "0") -> dict[str, object]:
    env = {**os.environ, "UOPGRAD_CACHE_DIR": str(cache), "DEBUG": debug}
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(seed), mode], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    got["stderr"] = res.stderr
    return got


@pytest.fixture
def seed() -> int:
    return int.from_bytes(os.urandom(4), "little")  # kernels no earlier run stored (other constants)


def same_bits(a: dict[str, object], b: dict[str, object]) -> bool:
    return a["loss"] == b["loss"] and a["grads"] == b["grads"]


def test_a_second_process_lowers_and_compiles_nothing_and_gets_the_same_bits(tmp_path, seed):
    first = run(tmp_path, seed)
    assert first["lowered"] >= 5 and first["compiled"] >= 5  # type: ignore[operator]
    second = run(tmp_path, seed)
    assert second["lowered"] == 0 and second["compiled"] == 0
    assert same_bits(first, second)


def test_another_build_of_the_code_lowers_again(tmp_path, seed):
    first = run(tmp_path, seed)
    other = run(tmp_path, seed, "other-code")
    assert other["lowered"] == first["lowered"]  # every kernel lowered again: no entry of the other build
    assert other["compiled"] == 0  # the same sources: their binaries are still on disk
    assert same_bits(first, other)


def test_an_entry_that_does_not_load_is_lowered_again(tmp_path, seed):
    first = run(tmp_path, seed)
    bad = run(tmp_path, seed, "bad-entries")
    assert bad["lowered"] == first["lowered"] and same_bits(first, bad)


def test_debug_3_still_dumps_every_pass_of_a_stored_kernel(tmp_path, seed):
    first = run(tmp_path, seed)
    dumped = run(tmp_path, seed, debug="3")
    assert dumped["lowered"] == first["lowered"]
    assert "--- after opt of" in str(dumped["stderr"])
    assert same_bits(first, dumped)
