"""The uopgrad_conformance package installs with its type marker and imports without pulling in a backend."""

from uopgrad_conformance.kit.package import package_tests

globals().update(package_tests("uopgrad_conformance"))
