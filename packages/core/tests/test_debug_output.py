"""What DEBUG=n prints, as a user sees it: a small program run in a fresh process on CPU, its stderr read.

DEBUG=1 (loggers uopgrad.kernel and uopgrad.realize): a "compiling N kernels" line before a build, a
launch size for every kernel (a CPU kernel's output loops), one summary per realize (kernels run, wall
time, compile time, disk-cache hits, kernels reused).
DEBUG=3: every pass's dump names its kernel; a pass that changed nothing says "(unchanged)".
DEBUG=4: the renderer's prelude is printed once a process. The progress bar is checked with a stand-in tqdm.
"""

import importlib.machinery
import os
import re
import subprocess
import sys
import types

import pytest

from uopgrad import Tensor, debug
from uopgrad.backend import Device

if "CPU" not in Device:
    pytest.skip("uopgrad-cpu is not installed", allow_module_level=True)

# one realize of two new kernels (an elementwise 5x6, a reduce to 5), then the same program again
PROGRAM = """
from uopgrad import Tensor
a = Tensor.arange(30, device="CPU").reshape(5, 6).float()
b, c = a * 3 + 1, (a - 2).sum(1)
Tensor.realize(b, c)
print(b.numpy().sum(), c.numpy().sum())
d = Tensor.arange(30, device="CPU").reshape(5, 6).float() * 3 + 1
d.realize()
"""
SUMMARY = re.compile(
    r"^CPU +realize: (\d+) kernels? run in [\d.]+ ms, wall [\d.]+ ms; compile ([\d.]+) ms: (\d+) built "
    r"\((\d+) from the disk cache\), (\d+) reused$"
)
KERNEL = re.compile(r"^CPU +(\S+) +(\S+) +[\d.]+ ms +[\d.]+ GFLOP/s")


def run(debug_level: int, cache, program: str = PROGRAM) -> list[str]:
    env = {**os.environ, "DEBUG": str(debug_level), "UOPGRAD_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(float(sum(range(30)) * 3 + 30)), str(float(sum(range(30)) - 60))]
    return out.stderr.splitlines()


def summaries(lines: list[str]) -> list[tuple[int, float, int, int, int]]:
    found = [SUMMARY.match(ln) for ln in lines]
    return [(int(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5])) for m in found if m]


def test_debug1_says_what_it_compiles_runs_and_reuses(tmp_path):
    lines = run(1, tmp_path)
    assert "compiling 2 kernels for CPU ..." in lines
    launches = [m.groups() for ln in lines if (m := KERNEL.match(ln))]
    names = [name for name, _ in launches]
    assert len(names) == 3 and names[0] == names[2] != names[1], lines  # the last realize: the first kernel
    assert names[0].startswith("E_") and names[1] == "r_5"
    assert all(size.startswith("loops[") for _, size in launches)  # a CPU kernel's launch: its loops
    first, second = summaries(lines)
    kernels, compile_ms, built, disk, reused = first
    assert (kernels, built, disk, reused) == (2, 2, 0, 0) and compile_ms > 0
    assert second[:1] == (1,) and second[2:] == (0, 0, 1)  # the same elementwise kernel: built before
    assert sum(1 for ln in lines if ln.startswith("compiling")) == 1

    again = summaries(run(1, tmp_path))  # a second process: both binaries come from the disk cache
    assert again[0][2:] == (2, 2, 0)


def test_debug0_prints_nothing(tmp_path):
    assert run(0, tmp_path) == []


def test_debug3_names_the_kernel_of_every_pass_and_marks_unchanged_ones(tmp_path):
    lines = run(3, tmp_path)
    heads = [ln for ln in lines if ln.startswith("--- ")]
    assert heads and all(re.match(r"--- after [a-z ]+ of (E_\w+|r_5)( \(unchanged\))?$", h) for h in heads)
    kernels = {h.split(" of ")[1].split()[0] for h in heads}
    assert len(kernels) == 2 and "r_5" in kernels
    unchanged = [h for h in heads if h.endswith("(unchanged)")]
    assert unchanged  # e.g. `reduce` of the elementwise kernel, which has no REDUCE
    for h in unchanged:  # no dump follows a pass that changed nothing
        after = lines[lines.index(h) + 1]
        assert after.startswith(("--- ", "CPU ", "compiling")), (h, after)
    changed = [h for h in heads if not h.endswith("(unchanged)")]
    assert all(lines[lines.index(h) + 1].startswith(("%", "... ")) for h in changed)  # each: its IR


def test_debug4_prints_the_prelude_once_for_two_kernels(tmp_path):
    lines = run(4, tmp_path)
    assert sum(ln.startswith("--- source of ") for ln in lines) == 2
    assert lines.count("#define INFINITY __builtin_inff()") == 1
    assert lines.count("float sqrtf(float);") == 1
    assert any(ln.startswith("// (prelude of ") for ln in lines)
    assert any(ln.startswith("void E_") for ln in lines) and any(ln.startswith("void r_5(") for ln in lines)


class FakeBar:
    made: list["FakeBar"] = []

    def __init__(self, total, desc, **kw):
        self.total, self.desc, self.kw, self.n, self.closed = total, desc, kw, 0, False
        self.labels = [desc]
        FakeBar.made.append(self)

    def update(self, k):
        self.n += k

    def set_description(self, d):
        self.labels.append(d)

    def close(self):
        self.closed = True


class Terminal:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty

    def write(self, s):
        return len(s)

    def flush(self):
        pass


@pytest.fixture
def fake_tqdm(monkeypatch):
    mod = types.ModuleType("tqdm")
    mod.__spec__ = importlib.machinery.ModuleSpec("tqdm", None)
    mod.tqdm = FakeBar
    monkeypatch.setitem(sys.modules, "tqdm", mod)
    FakeBar.made.clear()
    return FakeBar.made


def two_new_kernels(rows: int) -> None:
    a = Tensor.arange(rows * 7, device="CPU").reshape(rows, 7).float()
    Tensor.realize(a * 5 - 1, (a + 4).max(1))


def test_a_build_shows_a_progress_bar_on_a_terminal_with_tqdm(fake_tqdm, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal(True))
    two_new_kernels(11)
    (bar,) = fake_tqdm
    assert bar.total == 2 and bar.n == 2 and bar.closed and bar.kw["file"] is sys.stderr
    assert bar.labels == ["CPU: lowering", "CPU: compiling"]
    assert bar.kw["delay"] > 0 and bar.kw["leave"] is False  # quick builds show nothing, none stays


def test_no_bar_without_a_terminal(fake_tqdm, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal(False))
    two_new_kernels(13)
    assert fake_tqdm == []


def test_track_passes_every_item_through():
    assert list(debug.track([3, 1, 2], "x")) == [3, 1, 2]


def test_a_beam_search_shows_a_bar_over_its_candidates(fake_tqdm, monkeypatch, tmp_path):
    from uopgrad.codegen.opt import choices
    from uopgrad.config import Context

    target = Device["CPU"].capabilities
    if target.vector_width <= 0:
        pytest.skip("BEAM searches only where the CPU has a vector width")
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path))  # no earlier pick on disk: it searches
    monkeypatch.setattr(sys, "stderr", Terminal(True))
    a = Tensor.arange(9 * 17, device="CPU").reshape(9, 17).float()
    with Context(BEAM=2):
        out = (a * 2).sum(1).numpy()
    assert out.tolist() == (Tensor.arange(9 * 17).reshape(9, 17).float() * 2).sum(1).numpy().tolist()
    beam = [b for b in fake_tqdm if b.desc.startswith("BEAM=2 CPU")]
    assert len(beam) == 1 and beam[0].total == len(choices(target.vector_width)), [b.desc for b in fake_tqdm]
    assert beam[0].n == beam[0].total and beam[0].closed
