"""Codegen (layer 11): the passes that turn a kernel (spec/kernels.md §1) into a linear program (§2).

Each submodule is one pass or the forms they produce: `index` (movement ops -> index arithmetic), `group`
(a big reduce split over a workgroup), `gpudims` (output loops -> launch dimensions), `reduce` (REDUCE ->
accumulators), `decomp` (ops a backend lacks), `linearize` (graph -> list), `program` (`LinearProgram` and the
well-formedness tables of the lowered forms) and `target` (`Target`, what a kernel is lowered for). The
pass list and the loop that runs it are the driver's: `uopgrad.pipeline.CODEGEN_PASSES` and
`uopgrad.pipeline.lower`.
"""

from __future__ import annotations

from uopgrad.codegen.program import GridLimits, GridSpec, LinearProgram, Program
from uopgrad.codegen.target import Target

__all__ = [
    "GridLimits",
    "GridSpec",
    "LinearProgram",
    "Program",
    "Target",
]  # Program: LinearProgram's former name
