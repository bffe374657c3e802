"""REFERENCE (layer 14): the numpy backend, the definition other backends are checked by.

Its parts are one module each: numerics.py (the ALU table and casts every backend's numerics are defined
by), evaluator.py (tensor graphs evaluated directly) and interpreter.py (codegen's linear programs run, so
the lowering is checked without a compiler). This module is the backend class, and the names tests and
tools import from REFERENCE.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager

import numpy as np

from uopgrad import debug
from uopgrad.backend import Backend, GlobalCounters, Target
from uopgrad.backends.evaluator import Evaluator, Value, evaluate, rounding_noise, run, storage
from uopgrad.backends.interpreter import run_program, run_schedule
from uopgrad.backends.numerics import REFERENCE_OPS, cast, float32_to_bf16_bits, np_dtype
from uopgrad.config import DEBUG
from uopgrad.dtype import dtypes
from uopgrad.errors import JitError
from uopgrad.ops import GroupOp
from uopgrad.pipeline import recording
from uopgrad.uop import UOp
from uopgrad.verify import verify_new

# the numerics themselves are imported from numerics.py; these are what tests reach REFERENCE through
__all__ = [
    "REFERENCE_OPS",
    "Evaluator",
    "ReferenceBackend",
    "Value",
    "evaluate",
    "np_dtype",
    "run_program",
    "run_schedule",
]


class ReferenceBackend(Backend):
    """REFERENCE: evaluates tensor graphs with numpy. Every REFERENCE:n device shares one storage map."""

    # every op and every dtype a value can have: REFERENCE evaluates the tensor IR directly, so its target
    # is declared here, not built by a renderer (it has none)
    capabilities = Target(
        frozenset({dtypes.bool, *dtypes.ints, *dtypes.floats}), GroupOp.ALU, None, compiled=False
    )

    def copyin(self, buf: UOp, data: np.ndarray) -> None:
        """Fill `buf` (a copy of `data`, converted to the buffer's storage dtype)."""
        arr = np.array(data, copy=True).reshape(-1)
        if arr.size != buf.arg:
            raise ValueError(f"copyin of {arr.size} elements into a BUFFER of {buf.arg}")
        storage[buf] = cast(arr, buf.dtype)

    def copyout(self, buf: UOp) -> np.ndarray:
        """A copy of `buf`'s contents (zeros if nothing was ever written)."""
        arr = storage.get(buf)
        out = np.zeros((buf.arg,), dtype=np_dtype(buf.dtype)) if arr is None else np.array(arr, copy=True)
        if buf.dtype.base.scalar() == dtypes.bfloat16:
            return float32_to_bf16_bits(out).view(dtypes.to_numpy(dtypes.bfloat16))
        return out

    @staticmethod
    def rounding_noise(rng: np.random.Generator) -> AbstractContextManager[None]:
        """While open, every float rounding of REFERENCE is scaled by 1 ± up to an ulp (Monte Carlo
        arithmetic): the spread of runs estimates a program's own rounding error (conformance uses it)."""
        return rounding_noise(rng)

    def realize(self, sink: UOp) -> None:
        """Evaluate `sink` and commit its writes. REFERENCE launches no kernels: GlobalCounters get what the
        evaluation computed (each node once), and the kernels written with explicit loops it ran."""
        if recording() is not None:  # a TinyJit capturing on a compiled device: this work would be lost
            raise JitError(
                f"a TinyJit step ran work on {self.name}, which evaluates graphs without kernels, "
                "so there is nothing to capture and replay; keep the step on one compiled device "
                "(CPU, CL, CUDA), or all of it on REFERENCE (which runs it on every call)"
            )
        with debug.realizing(self.name, sink):
            verify_new(sink)  # a malformed graph is a VerifyError naming the node
            start = time.perf_counter()
            ev = run((sink,))[1]
            seconds = time.perf_counter() - start
            GlobalCounters.global_ops += ev.ops
            GlobalCounters.global_mem += ev.mem
            GlobalCounters.time_sum_s += seconds
            if DEBUG >= 1:
                debug.log(1, f"{self.name:<10} evaluated {len(sink.src)} output(s) in {seconds * 1e3:.3f} ms")
