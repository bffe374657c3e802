"""Core tests need no compiled backend (docs/style.md P12): they run on REFERENCE, also where a backend
package such as uopgrad-cpu is installed and would otherwise be the default device. Set UOPGRAD_DEVICE to
run them elsewhere; modules that must run on REFERENCE whatever the environment use `reference_default`."""

import os

import numpy as np
import pytest

os.environ.setdefault("UOPGRAD_DEVICE", "REFERENCE")

from uopgrad import Device, Tensor


@pytest.fixture
def reference_default():
    """Device.DEFAULT is REFERENCE during the test."""
    old = Device.DEFAULT
    Device.DEFAULT = "REFERENCE"
    yield
    Device.DEFAULT = old


def rnd(*shape: int, seed: int = 0) -> Tensor:
    """A float32 tensor of standard normal values (seeded) on the default device."""
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
