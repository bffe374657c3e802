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


@pytest.fixture
def training():
    """Tensor.training is True during the test (an optimiser steps only then)."""
    old = Tensor.training
    Tensor.training = True
    yield
    Tensor.training = old


def rnd(*shape: int, seed: int = 0) -> Tensor:
    """A float32 tensor of standard normal values (seeded) on the default device."""
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# the options of torch's cross_entropy that Tensor.cross_entropy and sparse_categorical_crossentropy both
# take, each checked against torch (class indices 0..3 are valid targets and ignore_index values for both)
CROSS_ENTROPY_OPTIONS = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(ignore_index=1),
    dict(ignore_index=2),
    dict(label_smoothing=0.2),
    dict(label_smoothing=0.3),
    dict(ignore_index=0, label_smoothing=0.7, reduction="mean"),
    dict(ignore_index=3, label_smoothing=0.1, reduction="sum"),
]
