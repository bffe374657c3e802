"""Core tests need no compiled backend (docs/style.md P12): they run on REFERENCE, also where a backend
package such as uopgrad-cpu is installed and would otherwise be the default device. Set UOPGRAD_DEVICE to
run them elsewhere."""

import os

os.environ.setdefault("UOPGRAD_DEVICE", "REFERENCE")
