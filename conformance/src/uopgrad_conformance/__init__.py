"""uopgrad_conformance: the conformance suite every uopgrad backend runs, as a pytest plugin.

`pytest --pyargs uopgrad_conformance --backend NAME` checks the device NAME (found through the
`uopgrad.backends` entry points, never imported) against REFERENCE: every op x dtype it claims, gradients by
finite differences, FUNCTION/CALL patterns and random programs (docs/conformance.md, README.md here). The
plugin is `uopgrad_conformance.plugin`; `uopgrad_conformance.strategies` has the program strategies.
"""

__all__: list[str] = []
