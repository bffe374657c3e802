"""The uopgrad_cpu package ships its type marker, its entry point and the four modules of a backend,
imports no other backend, runs the README's one-liner and is listed by `uopgrad devices` (the kit's
package checks)."""

from uopgrad_conformance.kit.package import package_tests

globals().update(package_tests("uopgrad_cpu", device="CPU"))
