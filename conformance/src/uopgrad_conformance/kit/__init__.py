"""The backend test kit: program-level checks every compiled backend runs from its own test folder.

The conformance suite (`pytest --pyargs uopgrad_conformance --backend NAME`) checks a backend through the
Tensor front end. The kit checks the parts below it: hand-built linear programs of every ALU op x dtype,
cast and bitcast rendered, compiled and launched on their own (`kernels.py`, on the edge values of each
dtype, bit for bit against REFERENCE), and the whole pipeline on tensor programs (`pipeline.py`: ops x
dtypes, reductions, movement, grids of many shapes, training, copies to every other device). A backend
package runs it with one test module, the way ONNX's `BackendTest(backend)` is used:

    # packages/backend-xyz/tests/test_kit.py
    from uopgrad_conformance.kit import backend_tests
    globals().update(backend_tests("XYZ"))

Dtypes the backend does not claim, and op x dtype pairs its target declines (`Target.unsupported`), are
skipped with the reason. What is a backend's own (compiler flags,
runtime quirks, renderer goldens) stays in its own tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from uopgrad_conformance.kit import kernels, pipeline

__all__ = ["backend_tests", "private_compile_cache"]


@pytest.fixture(autouse=True, scope="session")
def private_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Kernels compiled by the tests go to a fresh directory, never the user's ~/.cache/uopgrad (a backend's
    conftest imports this fixture for its own tests too)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("UOPGRAD_CACHE_DIR", str(tmp_path_factory.mktemp("uopgrad-cache")))
    yield
    mp.undo()


def backend_tests(device: str) -> dict[str, Any]:
    """The kit's tests and fixtures for `device`, to put in a test module's globals."""

    def kit_device() -> str:
        return device

    found: dict[str, Callable[..., Any]] = {
        name: fn
        for mod in (kernels, pipeline)
        for name, fn in vars(mod).items()
        if name.startswith("test_") and callable(fn)
    }
    return {
        **found,
        "kit_device": pytest.fixture(scope="session")(kit_device),
        "private_compile_cache": private_compile_cache,
    }
