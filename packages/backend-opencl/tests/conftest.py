"""Shared fixtures: a private compile cache for the whole run, and the CL backend object."""

import pytest

from uopgrad_opencl import CLBackend


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    # kernels built by the tests go to a fresh directory, never the user's ~/.cache/uopgrad
    mp = pytest.MonkeyPatch()
    mp.setenv("UOPGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("uopgrad-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def cl():
    return CLBackend("CL")
