"""The conformance checks themselves, collected by `pytest --pyargs uopgrad_conformance --backend NAME`."""
