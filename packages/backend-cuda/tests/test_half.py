"""The float16 helpers of the CUDA renderer, bit-exact against numpy on every one of the 65536 float16 bit
patterns: bits -> float, float16 -> float16 through float (NaN payloads kept), float -> float16 rounding of
every float16 and the floats next to each midpoint between two of them, and double -> float16 rounding once.
The kernels are built by NVRTC and run by the emulator."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad_cuda.renderer import HALF_HELPERS

HELPERS = "\n".join(HALF_HELPERS.values())
# name: (output type, input type, the value stored from in[i]); each one thread per element
CONVERSIONS = {
    "to_float": ("unsigned int", "unsigned short", "__float_as_uint(__uopgrad_bits_half(in[i]))"),
    "to_half": ("unsigned short", "float", "__uopgrad_half_bits(in[i])"),
    "round_trip": ("unsigned short", "unsigned short", "__uopgrad_half_bits(__uopgrad_bits_half(in[i]))"),
    "from_double": ("unsigned short", "double", "__uopgrad_half_bits(__uopgrad_half_d(in[i]))"),
}
KERNELS = (
    HELPERS
    + "".join(
        f"""
extern "C" __global__ void __launch_bounds__(256) {name}({out}* __restrict__ out,
                                                  const {inp}* __restrict__ in) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = {value};
}}"""
        for name, (out, inp, value) in CONVERSIONS.items()
    )
    + "\n"
)
BITS = np.arange(65536, dtype=np.uint32).astype(np.uint16)
HALVES = BITS.view(np.float16)


def run(launch, name, out_dtype, x):
    n = -(-x.size // 256) * 256
    padded = np.concatenate([x, np.zeros(n - x.size, x.dtype)])
    out, _ = launch(KERNELS, name, (n // 256, 1, 1), (256, 1, 1), np.zeros(n, out_dtype), padded)
    return out[: x.size]


def test_bits_to_float_is_numpys_conversion_for_every_pattern(launch):
    got = run(launch, "to_float", np.uint32, BITS)
    np.testing.assert_array_equal(got, HALVES.astype(np.float32).view(np.uint32))


def test_every_pattern_survives_a_round_trip_through_float(launch):
    np.testing.assert_array_equal(run(launch, "round_trip", np.uint16, BITS), BITS)


def _around_midpoints() -> np.ndarray:
    """Every float16 as a float, and each midpoint between neighbours with the floats just below and above."""
    finite = np.sort(HALVES[np.isfinite(HALVES)].astype(np.float64))
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)  # exact: a midpoint has 12 bits
    near = [mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))]
    big = np.array([65504, 65519.996, 65520, 1e6, np.inf, -np.inf, 3e38, 1e-8, 6e-8, -6e-8], np.float32)
    nans = np.array([0x7FC00000, 0x7F800001, 0xFFC01234, 0x7FFFE000, 0x7F802000], np.uint32).view(np.float32)
    return np.concatenate([HALVES.astype(np.float32), *near, big, nans])


def test_float_to_half_rounds_to_nearest_even_as_numpy(launch):
    x = _around_midpoints()
    got = run(launch, "to_half", np.uint16, x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(x.view(np.uint32)[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("offset", [0.0, 1e-12, -1e-12])
def test_double_to_half_rounds_once(launch, offset):
    # a double just off a midpoint rounds by its side, which float's rounding would lose (it rounds to odd)
    finite = np.sort(HALVES[np.isfinite(HALVES)].astype(np.float64))
    mids = (finite[1:] + finite[:-1]) / 2
    x = mids + offset * np.maximum(np.abs(mids), 1e-3)
    got = run(launch, "from_double", np.uint16, x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(got, want)
