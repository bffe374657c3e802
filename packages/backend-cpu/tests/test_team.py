"""OpenMP team sizing (uopgrad_cpu.team): kernels get the cores other processes leave free, judged by the
last interval's load rather than libgomp's 15-minute average, and a size someone else chose is kept."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import uopgrad_cpu.team as team_mod
from uopgrad_cpu import CCompiler, CPUProgram
from uopgrad_cpu.runtime import _TEAM
from uopgrad_cpu.team import Team


class FakeOmp:
    """The five functions Team uses, with libgomp's per-thread nthreads-var."""

    def __init__(self, procs: int) -> None:
        self.procs, self.dynamic_calls = procs, []
        self._local = threading.local()
        self.omp_get_max_threads = self._Fn(lambda: getattr(self._local, "n", procs))
        self.omp_set_num_threads = self._Fn(lambda n: setattr(self._local, "n", n))
        self.omp_get_num_procs = self._Fn(lambda: procs)
        self.omp_set_dynamic = self._Fn(self.dynamic_calls.append)

    class _Fn:
        def __init__(self, f):  # a callable that takes a restype, like a ctypes function
            self.f, self.restype = f, None

        def __call__(self, *a):
            return self.f(*a)


class Clock:
    """A machine whose busy time and this process's CPU time the test advances."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now, self.machine, self.own = 100.0, 0.0, 0.0
        monkeypatch.setattr(team_mod.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(team_mod, "_machine_busy", lambda: self.machine)
        monkeypatch.setattr(team_mod, "_own_busy", lambda: self.own)

    def run(self, seconds: float, others: float, own: float) -> None:
        """`seconds` pass with `others` cores busy elsewhere and `own` busy in this process."""
        self.now += seconds
        self.machine += seconds * (others + own)
        self.own += seconds * own


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_DYNAMIC", raising=False)
    return monkeypatch


def machine(env: pytest.MonkeyPatch, cores: int) -> tuple[Clock, FakeOmp, Team]:
    """A machine of `cores` cores, its OpenMP runtime, and a Team that has had its first look."""
    clock, omp = Clock(env), FakeOmp(cores)
    env.setattr(team_mod.os, "cpu_count", lambda: cores)
    t = Team(omp)
    t.fit()
    return clock, omp, t


def test_a_busy_process_on_an_idle_machine_keeps_every_core(env):
    clock, omp, t = machine(env, 4)
    for _ in range(5):  # this process alone keeps all 4 cores busy: libgomp's load average would say 4
        clock.run(0.5, others=0.0, own=4.0)
        t.fit()
    assert omp.omp_get_max_threads() == 4 and not omp.dynamic_calls


@pytest.mark.parametrize(("others", "team"), [(1.0, 3), (2.6, 1), (3.4, 1), (7.0, 1), (0.4, 4)])
def test_the_team_is_the_cores_other_processes_leave_free(env, others, team):
    clock, omp, t = machine(env, 4)
    clock.run(0.5, others=others, own=1.0)
    t.fit()
    assert omp.omp_get_max_threads() == team
    clock.run(0.5, others=0.0, own=1.0)  # the others are done: the next look gives the cores back
    t.fit()
    assert omp.omp_get_max_threads() == 4


def test_the_load_is_looked_at_once_an_interval(env):
    clock, omp, t = machine(env, 4)
    clock.run(team_mod.INTERVAL / 4, others=4.0, own=0.0)
    t.fit()
    assert omp.omp_get_max_threads() == 4  # too soon to look again
    clock.run(team_mod.INTERVAL, others=4.0, own=0.0)
    t.fit()
    assert omp.omp_get_max_threads() == 1


def test_a_busy_spell_that_ended_long_ago_does_not_shrink_the_team(env):
    # the last look was before a long busy spell of other processes that has ended: what runs now decides
    clock, omp, t = machine(env, 4)
    running = [0]
    env.setattr(team_mod, "_others_running", lambda: running[0])
    clock.run(team_mod.STALE * 5, others=4.0, own=0.0)
    t.fit()
    assert omp.omp_get_max_threads() == 4  # an average over the spell would give 1
    running[0] = 3  # and when others do run now, the team makes room
    clock.run(team_mod.STALE * 5, others=0.0, own=0.0)
    t.fit()
    assert omp.omp_get_max_threads() == 1


def test_the_compilers_this_process_ran_are_its_own_work():
    import subprocess
    import sys

    before = team_mod._own_busy()
    subprocess.run([sys.executable, "-c", "sum(range(5_000_000))"], check=True)
    assert team_mod._own_busy() - before >= 0.05  # the child's CPU time counts as this process's


def test_others_running_reads_proc_stat():
    n = team_mod._others_running()
    if n is None:
        pytest.skip("no /proc/stat on this system")
    assert n >= 0


def test_a_size_set_by_someone_else_is_left_alone(env):
    # conformance's determinism rerun forces procs + 1 threads through the OpenMP runtime
    clock, omp, t = machine(env, 2)
    omp.omp_set_num_threads(3)
    clock.run(0.5, others=2.0, own=0.0)
    t.fit()
    assert omp.omp_get_max_threads() == 3
    omp.omp_set_num_threads(2)  # given back: sized here again
    t.fit()
    assert omp.omp_get_max_threads() == 1


def test_each_launching_thread_is_sized(env):
    clock, omp, t = machine(env, 4)
    clock.run(0.5, others=2.0, own=0.0)
    seen = []
    th = threading.Thread(target=lambda: (t.fit(), seen.append(omp.omp_get_max_threads())))
    th.start()
    th.join()
    assert seen == [2]


@pytest.mark.parametrize("var", ["OMP_NUM_THREADS", "OMP_DYNAMIC"])
def test_the_environment_decides_when_it_says(env, var):
    Clock(env)
    env.setenv(var, "1")
    omp = FakeOmp(4)
    t = Team(omp)
    omp.omp_set_num_threads(1)
    t.fit()
    assert not t.managed and omp.omp_get_max_threads() == 1 and not omp.dynamic_calls


def test_without_proc_stat_libgomp_dynamic_mode_decides(env):
    env.setattr(team_mod, "_machine_busy", lambda: None)
    omp = FakeOmp(4)
    t = Team(omp)
    t.fit()
    assert not t.managed and omp.dynamic_calls == [1]


def test_machine_busy_time_reads_proc_stat():
    first = team_mod._machine_busy()
    if first is None:
        pytest.skip("no /proc/stat on this system")
    sum(range(2_000_000))  # some CPU time passes
    assert team_mod._machine_busy() >= first > 0


def test_a_parallel_kernel_runs_on_the_team_size_of_the_moment():
    # a real OpenMP kernel reports the size of the team it ran on
    compiler = CCompiler()
    if "-fopenmp" not in compiler.flags:
        pytest.skip("the C compiler has no OpenMP")
    src = (
        "#include <omp.h>\nvoid team_probe(int* restrict out) {\n#pragma omp parallel\n"
        "{ if (omp_get_thread_num() == 0) out[0] = omp_get_num_threads(); }\n}\n"
    )
    prg = CPUProgram("team_probe", compiler.compile_cached(src))
    out = np.zeros(1, dtype=np.int32)
    prg(out)
    assert _TEAM, "the first OpenMP kernel sets up the team sizing"
    t = _TEAM[0]
    if not t.managed:
        pytest.skip("team size chosen by the environment ($OMP_NUM_THREADS / $OMP_DYNAMIC)")
    assert 1 <= out[0] <= t.cores
    old = t.size
    try:
        t.size = 1  # as a look at a busy machine would leave it
        prg(out)
        assert out[0] == 1
        t.size = t.cores
        prg(out)
        assert out[0] == t.cores
        launch = prg.bind(out)  # a captured launch is sized too
        t.size = 1
        launch()
        assert out[0] == 1
    finally:
        t.size = old
        prg(out)
