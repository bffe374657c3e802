"""Backends that ship with core (layer 14): REFERENCE, the numpy evaluator; reach it via `uopgrad.Device`."""

from __future__ import annotations

__all__: list[str] = []
