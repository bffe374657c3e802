"""uopgrad_conformance: the conformance suite every uopgrad backend runs, as a pytest plugin.

A skeleton for now: the `--backend` option, the case tables, gradient checks and random programs are
filled in by a later issue (docs/conformance.md). It reaches backends only through the plugin registry.
"""

__all__: list[str] = []
