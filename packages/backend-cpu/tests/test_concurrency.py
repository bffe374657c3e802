"""Threads and processes compiling the same and different kernels at once (issue 14): every result is
numpy's, and a shared disk cache is never read half-written."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np

from uopgrad import Tensor

WORK = """
    import sys, threading
    import numpy as np
    from uopgrad import Tensor
    bad = []
    def work(i):
        for n in (5, 7, 5 + i % 3):  # kernels every worker shares, and kernels of its own
            got = (Tensor.ones(n, device="CPU") * (i + 2) + n).numpy()
            if not np.array_equal(got, np.full(n, i + 2 + n, dtype=np.float32)):
                bad.append((i, n))
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(len(bad))
"""


def test_threads_compile_the_same_and_different_kernels_at_once():
    bad: list[tuple[int, int]] = []

    def work(i: int) -> None:
        for n in (3, 9, 11 + i):
            got = (Tensor.arange(n, device="CPU").float() * (i + 1) - 1).numpy()
            if not np.array_equal(got, np.arange(n, dtype=np.float32) * (i + 1) - 1):
                bad.append((i, n))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert bad == []


def test_processes_share_one_disk_cache_at_once(tmp_path):
    env = {**os.environ, "UOPGRAD_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WORK)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-1000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["0", "0", "0"]
