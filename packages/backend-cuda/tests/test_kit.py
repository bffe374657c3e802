"""The conformance package's backend test kit (uopgrad_conformance.kit) on CUDA (a GPU where there is one,
else the host emulator, as conftest.py says): op x dtype kernels as hand-built linear programs, and the
whole pipeline against REFERENCE. This package's own tests are the rest of this folder."""

from uopgrad_conformance.kit import backend_tests

globals().update(backend_tests("CUDA"))
