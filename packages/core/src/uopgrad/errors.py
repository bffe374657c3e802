"""The errors uopgrad raises (layer 0), one class per kind of failure, all under `UopgradError`.

Each class also subclasses the builtin that uopgrad raised for that failure before it had its own type, and
the one docs/semantics.md §3.9 fixes where the reference pins it (shape inference: RuntimeError, invalid
movement arguments: ValueError, the rewrite engine: RuntimeError), so `except RuntimeError` and
`except ValueError` keep working. Where §3.9 fixes a bare `AssertionError` (gradient and tuple checks),
that builtin itself is raised, or a class that also subclasses it (DataDTypeError, NonScalarGradientError).
"""

from __future__ import annotations

import os
import tempfile

__all__ = [
    "ArgumentError",
    "BackendError",
    "CompileError",
    "ConfigError",
    "DTypeError",
    "DTypeMismatchError",
    "DTypeRangeError",
    "DataDTypeError",
    "DeviceError",
    "EmptyReduceError",
    "EvaluationError",
    "FunctionError",
    "GradientError",
    "JitError",
    "LoweringError",
    "MovementError",
    "NonScalarGradientError",
    "NotSupportedError",
    "OperandShapeError",
    "RenderError",
    "RewriteError",
    "SafetensorsError",
    "ScheduleError",
    "ShapeError",
    "SymbolicDivisionError",
    "TrainingError",
    "UnknownDTypeError",
    "UopgradError",
    "VerifyError",
]


class UopgradError(Exception):
    """The base of every error uopgrad raises on purpose."""


class ShapeError(UopgradError, RuntimeError):
    """Shape inference failed: mismatched elementwise shapes, a shapeless source, or a symbolic size where a
    concrete one is needed."""


class MovementError(ShapeError, ValueError):
    """A movement op's argument does not fit its source's shape (an invalid reshape, expand, pad, ...)."""


class EmptyReduceError(UopgradError, RuntimeError, IndexError):
    """A reduction with no identity (max, min, argmax, argmin) over an axis of size 0. PyTorch raises
    RuntimeError for a whole-tensor reduce and IndexError along a dim; this is both, so either catch works."""


class DTypeMismatchError(UopgradError, TypeError, RuntimeError):
    """A tensor written into one of another dtype (setitem, assign) without a cast. TypeError was uopgrad's
    builtin for it; the reference raises RuntimeError, so either catch works."""


class DataDTypeError(DTypeMismatchError, AssertionError):
    """`Tensor(node, dtype=...)` naming another dtype than the node's: a node is taken as it is (the reference
    asserts, hence AssertionError too); cast the node or the tensor instead."""


class ArgumentError(UopgradError, ValueError, RuntimeError):
    """An argument the op does not take: an unknown mode, indexing or reduce name, counts that don't pair up
    (roll's shifts and dims, a shape given both as a sequence and as sizes), a window larger than its input.
    ValueError was uopgrad's builtin for it; the reference raises RuntimeError, so either catch works."""


class OperandShapeError(ShapeError, ValueError):
    """Operands whose shapes the op can't combine: dot / matmul, gather and scatter indices, loss targets.
    ValueError was uopgrad's builtin for it; the reference raises RuntimeError, so either catch works."""


class DTypeError(UopgradError, TypeError, RuntimeError):
    """An op the operand's dtype does not support (bitwise ops on floats, an int base to a negative power,
    a scatter src of another dtype), raised where the op is built, not at realize."""


class UnknownDTypeError(UopgradError, TypeError, AttributeError):
    """A dtype name uopgrad has no dtype for. TypeError was uopgrad's builtin; the reference looks names up as
    attributes of `dtypes` and raises AttributeError, so either catch works."""


class NotSupportedError(UopgradError, NotImplementedError, ValueError):
    """An option uopgrad (like the reference) does not implement: an unknown pad mode, negative circular
    pads. ValueError was uopgrad's builtin for it; the reference raises NotImplementedError, so either catch
    works."""


class DTypeRangeError(UopgradError, OverflowError, ValueError):
    """Values that the requested dtype can't represent (an arange past int8's range)."""


class ConfigError(UopgradError, RuntimeError):
    """uopgrad is used in a way its setup does not allow: an unknown flag, a missing registration."""


class RewriteError(UopgradError, RuntimeError):
    """The rewrite engine gave up: its stack passed the limit, or a bottom-up rewrite loops."""


class SymbolicDivisionError(UopgradError, ZeroDivisionError, RuntimeError):
    """Simplifying an index expression met a division or modulo by a divisor that is always zero."""


class VerifyError(UopgradError, RuntimeError):
    """A node breaks the IR's rules. `.uop` is the node, `.index` its position in toposort order (-1 where a
    check names no position)."""

    def __init__(self, message: str, uop: object = None, index: int = -1) -> None:
        super().__init__(message)
        self.uop = uop
        self.index = index


class GradientError(UopgradError, RuntimeError):
    """A gradient can't be built: an op on the path has no rule, or a loss or target is not float."""


class NonScalarGradientError(GradientError, AssertionError):
    """backward() or gradient() of a non-scalar tensor without a seed gradient. PyTorch raises RuntimeError
    (through GradientError) and the reference asserts, so either catch works."""


class TrainingError(UopgradError, RuntimeError):
    """An optimiser stepped while `Tensor.training` is False (the reference raises RuntimeError)."""


class FunctionError(UopgradError, RuntimeError):
    """The `function` decorator can't trace the function (what it returns, what it captures)."""


class ScheduleError(UopgradError, RuntimeError):
    """The scheduler can't turn a graph into kernels (a device it can't realize, an unbounded size, a
    cycle of assigns)."""


class LoweringError(UopgradError, RuntimeError):
    """Codegen can't lower a kernel: an op that does not belong in a kernel body, a grid that does not
    fit."""


class RenderError(UopgradError, RuntimeError):
    """A renderer can't print a program: an op, dtype or form the dialect has no text for."""


class CompileError(UopgradError, RuntimeError):
    """The compiler rejected generated source. The message stays short (the compiler's output up to 8 KB,
    the source when it is under 80 lines); the whole source goes to a file the message names, `.src_path`."""

    MAX_OUTPUT = 8192
    MAX_INLINE_LINES = 80

    def __init__(self, compiler: str, message: str, src: str) -> None:
        self.message, self.src = message, src
        numbered = "\n".join(f"{i:4d}  {line}" for i, line in enumerate(src.splitlines(), 1))
        self.src_path: str | None = None
        try:
            fd, self.src_path = tempfile.mkstemp(prefix="uopgrad-failed-", suffix=".src")
            with os.fdopen(fd, "w") as f:
                f.write(src)
        except OSError:
            pass
        out = message.rstrip()
        if len(out) > self.MAX_OUTPUT:
            out = out[: self.MAX_OUTPUT] + f"\n... ({len(message) - self.MAX_OUTPUT} more characters)"
        where = (
            f"the generated source is in {self.src_path}"
            if self.src_path
            else "the generated source could not be saved"
        )
        text = f"{compiler[:500]} failed:\n{out}\n--- {where}"
        if len(src.splitlines()) <= self.MAX_INLINE_LINES and len(numbered) <= self.MAX_OUTPUT:
            text += f"\n--- generated source ---\n{numbered}"
        super().__init__(text)


class BackendError(UopgradError, RuntimeError):
    """A backend can't be found, loaded or run: an unknown device, a broken plugin, a missing driver."""


class DeviceError(UopgradError, RuntimeError):
    """Tensors on devices that don't fit together, or device use while it is disabled."""


class EvaluationError(UopgradError, RuntimeError):
    """REFERENCE can't evaluate a node or a linear program (an unbound variable, a missing argument, ...)."""


class SafetensorsError(UopgradError, ValueError):
    """A file that is not a valid safetensors file (or one uopgrad has no dtype for). `.path` is the file,
    `.tensor` the tensor the broken rule is about (None where the rule is about the whole file), `.rule` the
    rule."""

    def __init__(self, path: str, rule: str, tensor: str | None = None) -> None:
        self.path, self.rule, self.tensor = path, rule, tensor
        where = f"tensor {tensor!r}: " if tensor is not None else ""
        super().__init__(f"{path!r} is not a valid safetensors file: {where}{rule}")


class JitError(UopgradError, RuntimeError):
    """A TinyJit that can't capture its function, a captured one called with other inputs than it took
    (another shape, dtype, device or argument), or one called again while it runs (recursion)."""
