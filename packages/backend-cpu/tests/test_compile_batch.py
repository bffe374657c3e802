"""The new kernels of one realize built together (`CCompiler.compile_many`, issue 35): fewer C compiler
processes than kernels, the same results, one disk-cache entry per kernel that a fresh process loads without
compiling, and a kernel that does not build named by its own error while the others are still built."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from uopgrad.backend import CompileError
from uopgrad_cpu import CCompiler, CPUProgram
from uopgrad_cpu.compiler import BATCH_LIMIT, batches
from uopgrad_cpu.runtime import split_symbol, with_symbol

# a user's realize of several outputs at once (each a kernel of its own: different shapes, so different
# names), on a two-core machine: the batching follows os.cpu_count()
SCRIPT = """
import json, os, sys
os.cpu_count = lambda: 2
import numpy as np
from uopgrad import Tensor
from uopgrad.backend import Device
rng = np.random.default_rng(int(sys.argv[1]))
x = rng.standard_normal((9, 13)).astype(np.float32)
a = Tensor(x, device="CPU")
outs = [(a[:k] * 1.5 + k).exp2() for k in range(1, 9)] + [a.sum(1), a.max(0)]
outs[0].realize(*outs[1:])
print(json.dumps({"out": [o.numpy().tolist() for o in outs], "stats": dict(Device["CPU"].compiler.stats)}))
"""


def expected(seed: int) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((9, 13)).astype(np.float32)
    return [np.exp2(x[:k] * np.float32(1.5) + np.float32(k)) for k in range(1, 9)] + [x.sum(1), x.max(0)]


def run_step(cache: Path, cc_log: Path, seed: int) -> dict[str, object]:
    """SCRIPT in a fresh process over the disk cache `cache`, with `$CC` a wrapper that logs each build to
    `cc_log` (one wrapper path for all runs: the compiler's name is part of the cache key)."""
    wrapper = cache.parent / "cc.sh"
    wrapper.write_text('#!/bin/sh\necho "$@" >> "$CC_LOG"\nexec cc "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "UOPGRAD_CACHE_DIR": str(cache), "CC": str(wrapper), "CC_LOG": str(cc_log)}
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(seed)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return got


def kernel_builds(cc_log: Path) -> int:
    """Compiler processes that built kernels (not the probes of the flags and the version)."""
    lines = cc_log.read_text().splitlines() if cc_log.exists() else []
    return sum("kernel.so" in line for line in lines)


def test_a_realize_builds_its_kernels_in_fewer_processes_and_a_fresh_process_compiles_none(tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")  # sources no earlier run compiled (constants differ)
    first = run_step(tmp_path / "cache", tmp_path / "first.log", seed)
    compiled = first["stats"]["compiled"]  # type: ignore[index]
    assert compiled >= 10 and "disk_hit" not in first["stats"]  # type: ignore[operator]
    assert 0 < kernel_builds(tmp_path / "first.log") < compiled
    for got, want in zip(first["out"], expected(seed), strict=True):  # type: ignore[arg-type]
        # the row sums may add in another order than numpy's (spec/opt.md §2): a few ulps of 13 terms
        np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=1e-5, atol=1e-6)

    second = run_step(tmp_path / "cache", tmp_path / "second.log", seed)
    assert second["stats"] == {"disk_hit": compiled}
    assert kernel_builds(tmp_path / "second.log") == 0
    assert second["out"] == first["out"]  # the same shared objects: the same bits


def kernel(name: str, body: str) -> str:
    """A source in the form the CPU renderer writes: declarations, then one kernel."""
    return f"float sqrtf(float);\n\nvoid {name}(float* restrict data0) {{\n  data0[0] = {body};\n}}\n"


def run_kernel(name: str, lib: bytes) -> float:
    out = np.zeros(4, np.float32)
    CPUProgram(name, lib)(out.view(np.uint8))
    return float(out[0])


def test_a_kernel_that_does_not_build_is_named_and_the_others_are_built_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one batch: the merged build fails, then one by one
    tag = os.urandom(4).hex()
    good = [kernel(f"k{i}_{tag}", f"sqrtf({i * i}.0f)") for i in range(5)]
    bad = kernel(f"broken_{tag}", "no_such_function(1.0f)")
    with pytest.raises(CompileError) as err:
        CCompiler().compile_many([*good[:2], bad, *good[2:]])
    assert err.value.src == bad and "no_such_function" in err.value.message

    again = CCompiler()  # the run after the fix: the good kernels come from the disk cache
    libs = again.compile_cached_many(good)
    assert again.stats == {"disk_hit": len(good)}
    assert [run_kernel(f"k{i}_{tag}", lib) for i, lib in enumerate(libs)] == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's memory mappings")
def test_the_kernels_of_one_shared_object_load_it_once(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one batch
    tag = os.urandom(4).hex()
    names = [f"once{i}_{tag}" for i in range(4)]
    libs = CCompiler().compile_many([kernel(n, f"{i}.5f") for i, n in enumerate(names)])
    assert len(set(libs)) == 1  # one shared object, stored under each kernel's own entry
    progs = [CPUProgram(n, lib) for n, lib in zip(names, libs)]
    maps = {
        word
        for line in Path("/proc/self/maps").read_text().splitlines()
        for word in line.split()
        if tag in word
    }
    assert len(maps) == 1, maps
    out = np.zeros((4, 4), np.float32)
    for p, row in zip(progs, out):
        p(row.view(np.uint8))
    assert out[:, 0].tolist() == [0.5, 1.5, 2.5, 3.5]


def test_kernels_of_one_name_share_a_shared_object_and_each_runs_its_own_body(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one batch
    name = f"same_{os.urandom(4).hex()}"
    srcs = [kernel(name, f"{i}.25f") for i in range(3)]
    libs = CCompiler().compile_many(srcs)
    assert libs[0] != libs[1] != libs[2]  # the repeats name their renamed function
    assert len({split_symbol(lib, name)[0] for lib in libs}) == 1  # in one shared object
    assert [run_kernel(name, lib) for lib in libs] == [0.25, 1.25, 2.25]


def test_a_kernel_entry_is_a_plain_shared_object_unless_renamed():
    lib = CCompiler().compile(kernel("plain_k", "1.0f"))
    assert split_symbol(lib, "plain_k") == (lib, "plain_k")
    assert split_symbol(with_symbol(lib, "plain_k_m2"), "plain_k") == (lib, "plain_k_m2")


def parallel_kernel(name: str, value: str) -> str:
    return textwrap.dedent(f"""\
    void {name}(float* restrict data0) {{
      #pragma omp parallel for
      for (int i = 0; i < 4; i++) data0[i] = {value};
    }}
    """)


def test_batches_are_bounded_and_even():
    serial = [kernel(f"k{i % 3}", f"{i}.0f") for i in range(40)]  # three names, repeated
    parallel = [parallel_kernel(f"p{i}", f"{i}.0f") for i in range(24)]
    srcs = [*serial, *parallel, "int not_a_kernel(void) { return 0; }\n"]
    plan = batches(srcs, 4)
    assert sorted(k for b in plan for k in b) == list(range(len(srcs)))
    for b in plan:  # names may repeat in a batch: the merged source renames them
        assert len(b) <= BATCH_LIMIT
    assert [len(b) for b in plan if b[0] == len(srcs) - 1] == [1]  # not one kernel: alone
    assert len(plan) == 1 + 4  # 64 kernels: four batches of 16
    sizes = [sum(len(srcs[k]) for k in b) for b in plan if len(b) > 1]
    assert max(sizes) - min(sizes) <= max(len(s) for s in srcs)
    assert len(batches(srcs[:5], 8)) == 5  # no more batches than kernels


def test_serial_kernels_join_openmp_ones_rather_than_wait_for_a_core(monkeypatch):
    """A realize's new kernels on two cores: kept apart, 5 serial and 16 parallel ones were three compiler
    processes, the third waiting for a core (a transformer block's backward). A serial kernel built with
    -fopenmp is the same machine code, so they share batches instead; every kernel still computes its own
    values."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    tag = os.urandom(4).hex()
    names = [f"s{i}_{tag}" for i in range(5)] + [f"p{i}_{tag}" for i in range(16)]
    srcs = [kernel(n, f"{i}.5f") for i, n in enumerate(names[:5])]
    srcs += [parallel_kernel(n, f"{i + 5}.5f") for i, n in enumerate(names[5:])]
    plan = batches(srcs, 2)
    assert len(plan) == 2 and sorted(k for b in plan for k in b) == list(range(21))
    assert all(any(k < 5 for k in b) for b in plan)  # the serial kernels spread over both
    libs = CCompiler().compile_many(srcs)
    assert len({split_symbol(lib, n)[0] for lib, n in zip(libs, names)}) == 2  # two shared objects
    assert [run_kernel(n, lib) for n, lib in zip(names, libs)] == [i + 0.5 for i in range(21)]


def test_the_first_part_is_looked_up_on_the_lowering_thread(monkeypatch):
    """While Python lowers the rest of a realize's kernels, the first part is compiled on a thread. Its
    disk-cache lookups are Python: on that thread each one waited for the GIL behind the lowering (10-20
    ms apiece, a digits step's first compiles started 170 ms late), so they are made before it starts."""
    import threading

    from uopgrad import Tensor
    from uopgrad.backend import Compiler

    threads: list[str] = []
    look_up = Compiler.look_up

    def noted(self, srcs):
        threads.append(threading.current_thread().name)
        return look_up(self, srcs)

    monkeypatch.setattr(Compiler, "look_up", noted)
    rng = np.random.default_rng(7)
    a = Tensor(rng.standard_normal((5, 23)).astype(np.float32), device="CPU")
    outs = [(a[:k] * 2.5 - k).exp2() for k in range(1, 6)] + [a.sum(0) * 3.5, a.max(1) - 0.25]
    outs[0].realize(*outs[1:])
    assert len(threads) >= 2, "the kernels were built in two parts"
    assert set(threads) == {threading.main_thread().name}
    for k, o in enumerate(outs[:5], start=1):
        np.testing.assert_allclose(o.numpy(), np.exp2(a.numpy()[:k] * 2.5 - k), rtol=1e-6)
