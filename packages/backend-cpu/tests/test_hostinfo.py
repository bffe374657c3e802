"""The host facts the CPU backend reads once (hostinfo.py): a fake sysfs and /proc/cpuinfo stand in for other
machines; the real host's facts reach the target record."""

from __future__ import annotations

from pathlib import Path

import pytest

from uopgrad import dtypes
from uopgrad_cpu.hostinfo import cache_sizes, cpu_flags, host_facts, vector_width
from uopgrad_cpu.renderer import CRenderer, host_vector_width


def fake_sysfs(root: Path, levels: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(levels):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_the_data_caches_are_read_from_sysfs_and_instruction_caches_skipped(tmp_path: Path):
    zen3 = [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "512K"), (3, "Unified", "32768K")]
    assert cache_sizes(fake_sysfs(tmp_path / "zen3", zen3)) == (32 << 10, 512 << 10, 32 << 20)
    xeon = [(1, "Data", "48K"), (1, "Instruction", "64K"), (2, "Unified", "2048K"), (3, "Unified", "480M")]
    assert cache_sizes(fake_sysfs(tmp_path / "xeon", xeon)) == (48 << 10, 2 << 20, 480 << 20)
    no_l3 = [(1, "Data", "64K"), (2, "Unified", "4M")]
    assert cache_sizes(fake_sysfs(tmp_path / "no_l3", no_l3)) == (64 << 10, 4 << 20, 0)


@pytest.mark.parametrize(
    "levels",
    [[], [(1, "Data", "32K")], [(1, "Data", "?"), (2, "Unified", "1M")], [(2, "Unified", "1M")]],
)
def test_unreadable_or_partial_caches_give_no_sizes(tmp_path: Path, levels: list[tuple[int, str, str]]):
    assert cache_sizes(fake_sysfs(tmp_path / "c", levels)) == ()
    assert cache_sizes(tmp_path / "missing") == ()


def test_the_vector_width_and_fma_come_from_the_cpu_flags(tmp_path: Path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2\n\nprocessor\t: 1\nflags\t: avx512f\n")
    flags = cpu_flags(info)
    assert {"fma", "avx2"} <= flags and "avx512f" not in flags  # the first processor's line
    assert vector_width(flags) == 32 and vector_width(flags | {"avx512f"}) == 64
    assert vector_width(frozenset({"asimd"})) == 16 and vector_width(frozenset(), "x86_64") == 16
    assert vector_width(frozenset(), "riscv64") == 0
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_the_hosts_facts_reach_the_target_record():
    facts = host_facts()
    assert host_vector_width() == facts.vector_width
    target = CRenderer().target(frozenset({dtypes.float32}))
    assert target.cache_sizes == facts.cache_sizes and target.vector_width == facts.vector_width
    assert facts.cache_sizes == () or (len(facts.cache_sizes) == 3 and min(facts.cache_sizes[:2]) > 0)
