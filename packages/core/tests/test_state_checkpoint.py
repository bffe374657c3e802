"""Checkpoints that survive failure, used as a PyTorch user uses them: train a little, save, train more, save
again and have that save fail (disk full, Ctrl-C, a failed sync or rename), then load and find the first
checkpoint byte for byte, with no temporary file left. Also what safe_save refuses before it writes, and the
errors of safe_load and load_state_dict on bad input (the hostile-file comparison with the safetensors
package is spec/test_hostile_safetensors.py)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from uopgrad import Tensor, dtypes
from uopgrad.errors import SafetensorsError
from uopgrad.nn import Linear
from uopgrad.nn.optim import SGD
from uopgrad.nn.state import (
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_metadata,
    safe_save,
)


class Net:
    def __init__(self) -> None:
        self.l1, self.l2 = Linear(3, 8), Linear(8, 2)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


@Tensor.train()
def _train(net: Net, opt: SGD, steps: int) -> None:
    rng = np.random.default_rng(steps)
    x = Tensor(rng.standard_normal((16, 3)).astype(np.float32))
    y = Tensor(rng.standard_normal((16, 2)).astype(np.float32))
    for _ in range(steps):
        opt.zero_grad()
        loss = (net(x) - y).square().mean()
        loss.backward()
        opt.step()


@pytest.fixture
def trained(tmp_path: Path) -> tuple[Net, SGD, Path, bytes, dict[str, np.ndarray]]:
    """A net trained 3 steps and checkpointed, then trained 2 more: (net, opt, checkpoint, its bytes, the
    values it holds)."""
    net = Net()
    opt = SGD(get_parameters(net), lr=0.1)
    _train(net, opt, 3)
    ckpt = tmp_path / "model.safetensors"
    safe_save(get_state_dict(net), ckpt, metadata={"step": "3"})
    saved = {k: v.numpy().copy() for k, v in get_state_dict(net).items()}
    _train(net, opt, 2)
    assert not np.array_equal(net.l1.weight.numpy(), saved["l1.weight"]), "training moved the weights"
    return net, opt, ckpt, ckpt.read_bytes(), saved


def _assert_intact(ckpt: Path, before: bytes, saved: dict[str, np.ndarray]) -> None:
    assert ckpt.read_bytes() == before, "the previous checkpoint changed"
    assert sorted(p.name for p in ckpt.parent.iterdir()) == [ckpt.name], "a temporary file was left behind"
    fresh = Net()
    load_state_dict(fresh, safe_load(ckpt))
    for k, v in get_state_dict(fresh).items():
        np.testing.assert_array_equal(v.numpy(), saved[k])
    assert safe_metadata(ckpt) == {"step": "3"}


def _failing_write(after: int, exc: BaseException) -> Callable[[int, Any], int]:
    """os.write that writes `after` bytes in all, then raises `exc` (a disk that fills up midway)."""
    real, written = os.write, [0]

    def write(fd: int, data: Any) -> int:
        room = after - written[0]
        if room <= 0:
            raise exc
        n = real(fd, memoryview(data)[:room])
        written[0] += n
        return n

    return write


@pytest.mark.parametrize(
    "exc",
    [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()],
    ids=["disk full", "Ctrl-C"],
)
@pytest.mark.parametrize("after", [0, 5, 100, 400])
def test_a_save_that_fails_midway_keeps_the_last_checkpoint(
    trained: Any, monkeypatch: pytest.MonkeyPatch, exc: BaseException, after: int
) -> None:
    net, _, ckpt, before, saved = trained
    with monkeypatch.context() as m:
        m.setattr(os, "write", _failing_write(after, exc))
        with pytest.raises(type(exc)):
            safe_save(get_state_dict(net), ckpt, metadata={"step": "5"})
    _assert_intact(ckpt, before, saved)


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_failed_sync_or_rename_keeps_the_last_checkpoint(
    trained: Any, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    net, _, ckpt, before, saved = trained

    def fail(*args: Any) -> None:
        raise OSError(errno.EIO, f"{step} failed")

    with monkeypatch.context() as m:
        m.setattr(os, step, fail)
        with pytest.raises(OSError, match=f"{step} failed"):
            safe_save(get_state_dict(net), ckpt)
    _assert_intact(ckpt, before, saved)


def test_a_successful_save_replaces_the_checkpoint_and_loads_back(trained: Any) -> None:
    net, _, ckpt, before, _ = trained
    safe_save(get_state_dict(net), ckpt, metadata={"step": "5"})
    assert ckpt.read_bytes() != before and safe_metadata(ckpt) == {"step": "5"}
    assert [p.name for p in ckpt.parent.iterdir()] == [ckpt.name]
    fresh = Net()
    load_state_dict(fresh, safe_load(ckpt))
    for k, v in get_state_dict(net).items():
        np.testing.assert_array_equal(get_state_dict(fresh)[k].numpy(), v.numpy())


BAD_INPUT = [
    ({"__metadata__": Tensor([1.0])}, None, ValueError, "reserved"),
    ({1: Tensor([1.0])}, None, TypeError, "not str"),
    ({"w": np.ones(2)}, None, TypeError, "not a Tensor"),
    ({"x\ud800": Tensor([1.0])}, None, ValueError, "lone surrogate"),
    ({"w": Tensor([1.0])}, {"step": 5}, TypeError, "maps str to str"),
    ({"w": Tensor([1.0])}, {3: "x"}, TypeError, "maps str to str"),
    ({"w": Tensor([1.0])}, ["step"], TypeError, "not a str->str mapping"),
    ([Tensor([1.0])], None, TypeError, "not a mapping"),
]


@pytest.mark.parametrize(("tensors", "metadata", "err", "phrase"), BAD_INPUT, ids=[b[3] for b in BAD_INPUT])
def test_bad_input_is_refused_before_anything_is_written(
    trained: Any, tensors: Any, metadata: Any, err: type[Exception], phrase: str
) -> None:
    _, _, ckpt, before, saved = trained
    good = {"ok": Tensor(np.arange(3, dtype=np.float32))}  # the bad entry comes last: all is checked first
    with pytest.raises(err, match=phrase):
        safe_save({**good, **tensors} if isinstance(tensors, dict) else tensors, ckpt, metadata=metadata)
    _assert_intact(ckpt, before, saved)


def test_targets_that_are_not_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="is a directory"):
        safe_save({"w": Tensor([1.0])}, tmp_path)
    assert list(tmp_path.iterdir()) == []
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe")
        with pytest.raises(ValueError, match="not a regular file"):
            safe_save({"w": Tensor([1.0])}, tmp_path / "pipe")
        assert [p.name for p in tmp_path.iterdir()] == ["pipe"]
    with pytest.raises(FileNotFoundError, match="can't write .*no_such_dir/m.safetensors"):
        safe_save({"w": Tensor([1.0])}, tmp_path / "no_such_dir" / "m.safetensors")


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="permission bits are POSIX")
def test_permissions_are_kept_and_new_files_follow_the_umask(tmp_path: Path) -> None:
    fn = tmp_path / "m.safetensors"
    old = os.umask(0o027)
    try:
        safe_save({"w": Tensor([1.0])}, fn)
        assert stat.S_IMODE(fn.stat().st_mode) == 0o640  # 0o666 less the umask, as open() makes files
        fn.chmod(0o604)
        safe_save({"w": Tensor([2.0])}, fn)
        assert stat.S_IMODE(fn.stat().st_mode) == 0o604
    finally:
        os.umask(old)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_a_symlinked_checkpoint_is_replaced_through_the_link(tmp_path: Path) -> None:
    real, link = tmp_path / "run1.safetensors", tmp_path / "latest.safetensors"
    safe_save({"w": Tensor([1.0])}, real)
    link.symlink_to(real.name)
    safe_save({"w": Tensor([2.0])}, link)
    assert link.is_symlink() and safe_load(real)["w"].numpy().tolist() == [2.0]


def test_every_dtype_and_odd_shapes_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "f32": Tensor(rng.standard_normal((3, 4)).astype(np.float32)),
        "empty": Tensor(np.zeros((0, 5))),
        "scalar": Tensor(np.float64(2.5)),
        "bf16": Tensor([1.0, -2.5, float("nan")], dtype=dtypes.bfloat16),
        "bool": Tensor(np.array([True, False])),
        "u64": Tensor(np.array([2**64 - 1], np.uint64)),
        "f16": Tensor(np.array([65504, -0.0], np.float16)),
        "i8": Tensor(np.array([-128], np.int8)),
    }
    fn = tmp_path / "all.safetensors"
    safe_save(tensors, fn)
    back = safe_load(fn)
    assert list(back) == list(tensors)
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        np.testing.assert_array_equal(back[k].numpy(), t.numpy())


def test_bool_bytes_other_than_0_and_1_read_as_true(tmp_path: Path) -> None:
    fn = tmp_path / "b.safetensors"
    safe_save({"b": Tensor(np.array([False, True, True]))}, fn)
    blob = bytearray(fn.read_bytes())
    blob[-2:] = b"\x02\xff"  # another writer's idea of True
    fn.write_bytes(bytes(blob))
    b = safe_load(fn)["b"]
    assert b.numpy().tolist() == [False, True, True]
    assert b.logical_not().numpy().tolist() == [True, False, False]
    assert b.cast(dtypes.int32).numpy().tolist() == [0, 1, 1]


def test_truncated_empty_and_missing_files_get_clear_errors(trained: Any) -> None:
    _, _, ckpt, before, _ = trained
    cut = ckpt.parent / "cut.safetensors"
    cut.write_bytes(before[:-10])
    with pytest.raises(SafetensorsError, match="truncated") as info:
        safe_load(cut)
    assert info.value.path == str(cut) and str(cut) in str(info.value)
    cut.write_bytes(b"")
    with pytest.raises(SafetensorsError, match="the file is empty"):
        safe_load(cut)
    with pytest.raises(FileNotFoundError, match="gone.safetensors"):
        safe_load(ckpt.parent / "gone.safetensors")
    with pytest.raises(SafetensorsError, match="is a directory"):
        safe_load(ckpt.parent)


def test_load_state_dict_names_the_key_and_changes_nothing_on_error(trained: Any) -> None:
    net, _, ckpt, _, _ = trained
    state = safe_load(ckpt)
    before = {k: v.numpy().copy() for k, v in get_state_dict(net).items()}
    bad_shape = {**state, "l2.weight": Tensor(np.zeros((3, 8), np.float32))}
    with pytest.raises(ValueError, match=r"layer `l2.weight`: Expected shape \(2, 8\), but found \(3, 8\)"):
        load_state_dict(net, bad_shape)
    with pytest.raises(TypeError, match="l2.bias is ndarray in the dict, not a Tensor"):
        load_state_dict(net, {**state, "l2.bias": np.zeros(2, np.float32)})
    with pytest.raises(KeyError, match=r"missing \['l2.bias'\]"):
        load_state_dict(net, {k: v for k, v in state.items() if k != "l2.bias"})
    for k, v in get_state_dict(net).items():  # l1 came before the bad entry and was not assigned either
        np.testing.assert_array_equal(v.numpy(), before[k])
    half = {k: v.cast(dtypes.float16) for k, v in state.items()}  # another dtype casts, as torch's copy_ does
    load_state_dict(net, half)
    assert net.l1.weight.dtype == dtypes.float32
    np.testing.assert_array_equal(net.l1.weight.numpy(), state["l1.weight"].numpy().astype(np.float16))
