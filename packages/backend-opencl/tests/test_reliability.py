"""Regressions of issue 14 on OpenCL: variables above 2^31 (an OverflowError before), long custom kernel
names (PoCL aborted on 256+ characters: run in a subprocess), threads that first use the device."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from uopgrad import Tensor, UOp, dtypes


def run_script(src: str) -> subprocess.CompletedProcess[str]:
    """`src` run by a fresh Python (a process of its own: PoCL may abort it, and its device starts unused)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(src)], capture_output=True, text=True, timeout=300
    )


def test_a_variable_above_2_31_is_passed_whole():
    n = UOp.variable("n", 1, 2**40)
    x = Tensor([0, 1, 2], device="CL", dtype=dtypes.int64)
    got = (x + Tensor(n.bind(2**33 + 3), device="CL").cast(dtypes.int64)).numpy()
    np.testing.assert_equal(got, [2**33 + 3, 2**33 + 4, 2**33 + 5])


LONG_NAME = """
    import dataclasses
    import numpy as np
    from uopgrad import Device, Tensor
    from uopgrad.pipeline import lower
    from uopgrad.schedule import schedule
    cl = Device["CL"]
    t = (Tensor.ones(64, device="CL") * 3).contiguous()
    item = schedule(t.uop.sink()).items[0]
    prg = dataclasses.replace(lower(item, cl.renderer.supports, cl.renderer.grid), name="k" * 300)
    src = cl.renderer.render(prg)
    run = cl.runtime(cl.renderer.function_name(prg.name), cl.compiler.compile_cached(src))
    out = cl.allocator.alloc(4 * 64)
    run(out, global_size=prg.global_size, local_size=prg.local_size)
    res = np.empty(64, dtype=np.float32)
    cl.allocator.copyout(res.data.cast("B"), out)
    print(bool((res == 3).all()))
"""


def test_a_300_character_kernel_name_runs():
    res = run_script(LONG_NAME)
    assert res.returncode == 0 and res.stdout.strip() == "True", res.stderr[-2000:]


THREADS = """
    import threading
    import numpy as np
    from uopgrad import Tensor
    res = [None] * 4
    def work(i):
        res[i] = (Tensor.ones(8, 8, device="CL") * (i + 1)).sum(axis=1).numpy()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(sum(not np.array_equal(r, np.full(8, 8.0 * (i + 1))) for i, r in enumerate(res)))
"""


def test_threads_that_first_use_the_device_get_right_results():
    res = run_script(THREADS)
    assert res.returncode == 0 and res.stdout.strip() == "0", res.stderr[-2000:]
