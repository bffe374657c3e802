"""Shared setup of the spec property tests: the hypothesis profiles, and VERIFY on.

`ci` (the default) is derandomised and bounded, so a run is repeatable and quick; `thorough` searches
much longer. Choose with `HYPOTHESIS_PROFILE=thorough pytest spec`. Every pass's output is verified
(docs/style.md P6), so a rule that builds a malformed graph fails here by name.
"""
from __future__ import annotations

import os

from hypothesis import settings

from uopgrad.config import VERIFY

settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None, database=None,
                          print_blob=True)
settings.register_profile("thorough", max_examples=2000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
VERIFY.value = 1
