"""The uopgrad_cuda skeleton installs with its type marker and imports without pulling in a backend (the
kit's package checks; pass device="CUDA" once the package registers its entry point)."""

from uopgrad_conformance.kit.package import package_tests

globals().update(package_tests("uopgrad_cuda"))
