"""The typed errors of `uopgrad.errors`: each failure raises its own class, which is also the builtin that
docs/semantics.md §3.9 fixes (so `except RuntimeError` / `except ValueError` keep working), and no module
raises a bare RuntimeError or an AssertionError the spec does not ask for."""

from __future__ import annotations

import re

import pytest
from test_style import core_modules

from uopgrad import Device, PatternMatcher, Tensor, UOp, UPat, dtypes, errors, graph_rewrite
from uopgrad.ops import Ops

# the AssertionErrors semantics §3.9 fixes, by a word of their message
SPEC_ASSERTIONS = {"gradient.py": 3, "uop.py": 1, "tensor.py": 1}


def test_every_error_is_a_uopgrad_error_and_a_builtin():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.UopgradError), name
        if cls is not errors.UopgradError:
            # the builtin a user's `except` names: RuntimeError/ValueError mostly; TypeError and
            # AttributeError where the reference raises those (an unknown dtype name is both, as
            # getattr(dtypes, name) is)
            assert issubclass(cls, (RuntimeError, ValueError, TypeError, ArithmeticError)), name
    assert issubclass(errors.MovementError, ValueError)
    assert issubclass(errors.MovementError, errors.ShapeError)


def test_shape_mismatch_is_a_shape_error_and_a_runtime_error():
    a = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, arg=0), UOp(Ops.DEVICE, arg="REFERENCE")), 6)
    bad = UOp(Ops.ADD, dtypes.float32, (a.reshape((2, 3)), a.reshape((3, 2))))
    with pytest.raises(errors.ShapeError, match="shape mismatch in Ops.ADD") as info:
        _ = bad.shape
    assert isinstance(info.value, RuntimeError)


def test_bad_movement_argument_is_a_movement_error_and_a_value_error():
    with pytest.raises(errors.MovementError, match="not a permutation") as info:
        Tensor.ones(2, 3).permute(0, 0)
    assert isinstance(info.value, ValueError)


def test_a_looping_rewrite_is_a_rewrite_error():
    x = UOp.const(dtypes.int32, 1)
    loop = PatternMatcher([(UPat(Ops.CONST, name="c"), lambda c: c.replace(arg=c.arg + 1))])  # c -> c+1
    with pytest.raises(errors.RewriteError) as info:
        graph_rewrite(x, loop)
    assert isinstance(info.value, RuntimeError)


def test_an_unknown_device_is_a_backend_error():
    with pytest.raises(errors.BackendError, match="unknown device 'NOPE'"):
        Device["NOPE"]


def test_no_bare_runtime_errors_and_only_the_spec_assertions():
    counts: dict[str, int] = {}
    for path in core_modules():
        text = path.read_text()
        assert not re.search(r"raise RuntimeError\b", text), f"{path.name} raises a bare RuntimeError"
        if n := len(re.findall(r"raise AssertionError\b", text)):
            counts[path.name] = n
    assert counts == SPEC_ASSERTIONS


def test_context_takes_a_flag_by_its_name_or_its_environment_variable():
    from uopgrad.config import VERIFY, Context

    before = VERIFY.value
    with Context(VERIFY=1):
        assert VERIFY.value == 1
        with Context(UOPGRAD_VERIFY=0):
            assert VERIFY.value == 0
        assert VERIFY.value == 1
    assert VERIFY.value == before
    with pytest.raises(errors.ConfigError, match="unknown uopgrad flag"), Context(NOT_A_FLAG=1):
        pass
