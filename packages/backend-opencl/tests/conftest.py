"""Shared fixtures: the kit's private compile cache for the whole run, and one CL backend object."""

import pytest

from uopgrad_conformance.kit import private_compile_cache  # noqa: F401  (an autouse fixture)
from uopgrad_opencl import CLBackend


@pytest.fixture(scope="session")
def cl():
    return CLBackend("CL")
