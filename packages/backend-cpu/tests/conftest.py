"""Shared fixtures: the kit's private compile cache for the whole run, and one CPU backend object."""

import pytest

from uopgrad_conformance.kit import private_compile_cache  # noqa: F401  (an autouse fixture)
from uopgrad_cpu import CPUBackend


@pytest.fixture(scope="session")
def cpu():
    return CPUBackend("CPU")
