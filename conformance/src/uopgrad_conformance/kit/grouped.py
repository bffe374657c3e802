"""Data and probes for a grid backend's tests of grouped reductions (uopgrad.codegen.group, spec/opt.md §4):
the reference bits of an unoptimised float MAX, rows that stress them (ties of ±0, NaN payloads), the
exactness policy's check of a sum, and the sources a renderer printed during a test. Shared by the OpenCL
and CUDA backends' `test_group_reduce.py`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from uopgrad import Device, Ops, Tensor, program_store
from uopgrad.pipeline import lower
from uopgrad.renderer import Renderer

__all__ = [
    "assert_sum_policy",
    "floats",
    "launches",
    "recorded_sources",
    "sequential_max",
    "tricky_rows",
]


def floats(n: int, seed: int = 0) -> np.ndarray:
    """`n` standard-normal float32 values, the same for the same seed."""
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def sequential_max(a: np.ndarray) -> np.ndarray:
    """The bits of the unoptimised `acc = max(acc, x)` along the last axis: the first NaN wins, else the
    last of the elements equal to the maximum (so the sign of a zero is that of the last zero)."""
    out = np.empty(a.shape[:-1], dtype=a.dtype)
    for i in np.ndindex(*a.shape[:-1]):
        row = a[i]
        nans = np.flatnonzero(np.isnan(row))
        out[i] = row[nans[0]] if nans.size else row[np.flatnonzero(row == row.max())[-1]]
    return out


def assert_sum_policy(device: str, a: np.ndarray, axis: int | None = None) -> None:
    """The sum of `a` (over `axis`, or all of it) on `device` keeps the exactness policy, whatever order a
    split reduce adds in: an int32 sum is numpy's, wrapped as a sequential sum wraps; a float32 sum is within
    2·n·eps·Σ|a| of the exact sum of its n elements."""
    got = Tensor(a, device=device).sum(axis=axis).numpy()
    if a.dtype == np.int32:
        want = a.sum(axis=axis, dtype=np.int32)
        assert got.dtype == np.int32 and np.array_equal(got, want), (got, want)
        return
    exact = a.astype(np.float64).sum(axis=axis)
    n = a.size if axis is None else a.shape[axis]
    bound = 2 * n * np.finfo(np.float32).eps * np.abs(a).astype(np.float64).sum(axis=axis)
    assert np.all(np.abs(got - exact) <= bound), (got, exact, bound)


def tricky_rows(n: int) -> np.ndarray:
    """Rows whose maximum is a tie of 0.0 and -0.0 (in both orders), rows with two NaNs of different
    payloads and signs, and a plain row."""
    rows = np.stack([-np.abs(floats(n, s)) for s in range(5)])
    rows[0, n // 3], rows[0, (2 * n) // 3] = 0.0, -0.0
    rows[1, n // 3], rows[1, (2 * n) // 3] = -0.0, 0.0
    bits = rows.view(np.uint32)
    bits[2, n // 2], bits[2, n - 1] = 0xFFC00001, 0x7FC00002
    bits[3, 0], bits[3, n // 2] = 0x7FA00003, 0xFFC00004  # a signalling-payload NaN first
    rows[4] = floats(n, 9)
    return rows


def recorded_sources(monkeypatch: pytest.MonkeyPatch, renderer: type[Renderer]) -> list[str]:
    """A list that collects every source `renderer.render` prints until the test ends (kernels stored on
    disk by an earlier process are rendered again meanwhile: `program_store.ENABLED` is off)."""
    seen: list[str] = []
    monkeypatch.setattr(program_store, "ENABLED", False)
    real: Callable[..., str] = renderer.render

    def recording(self: Renderer, program: object) -> str:
        src = real(self, program)
        seen.append(src)
        return src

    monkeypatch.setattr(renderer, "render", recording)
    return seen


def launches(t: Tensor) -> list[int]:
    """The threads (work-items) each kernel of `t`'s schedule launches on its device, in order: what a split
    or grouped reduce spreads over (lowered for the device's target; nothing is compiled or run)."""
    items, _ = t.linear_with_vars()
    out = []
    for it in items.src:
        if it.src[0].op is Ops.SINK:
            prg = lower(it, Device[str(it.src[1].device)].capabilities)
            out.append(int(np.prod(prg.global_size or (1,))) * int(np.prod(prg.local_size or (1,))))
    return out
