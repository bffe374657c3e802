"""The safetensors file format: a strict reader and an atomic writer.

A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object: per tensor its dtype,
shape and data_offsets into the data section, plus an optional `__metadata__` str->str map), then the data
section, which the tensors' byte ranges must cover exactly. The reader checks every rule the `safetensors`
package (its Rust crate) checks, and a few more the format states but that package lets through, on the
header alone, before it reads any data; every failure is a `SafetensorsError` naming the file, the tensor and
the rule. The writer checks its whole input first, then writes a temporary file next to the target and
renames it over the target, so that a save that fails leaves the previous file as it was.

Deliberate differences from the `safetensors` package (0.8), each stricter: as the format's description
says, the header must begin with '{' (the package skips leading JSON whitespace) and a JSON object may not
name a key twice (the package keeps the last tensor entry or metadata value of that name); beyond it, a
tensor entry has exactly the fields dtype, shape and data_offsets (the package ignores others) and its dtype
is a JSON string (the package also takes serde's map form, `{"F32": null}`). A file with a dtype uopgrad
lacks (F8_*, F4, F6_*, C64) or an empty tensor numpy can't shape is checked whole, then refused. A BOOL byte
other than 0 reads as True, stored as 1: the package hands the raw byte on, and numpy's and torch's ops
treat it as True.
"""

from __future__ import annotations

import io
import json
import math
import os
import secrets
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from uopgrad.dtype import DType, dtypes
from uopgrad.errors import SafetensorsError
from uopgrad.tensor import Tensor

__all__ = ["HEADER_CAP", "RESERVED_NAMES", "SAFE_DTYPES", "safe_load", "safe_metadata", "safe_save"]

# safetensors' dtype names that uopgrad has a dtype for
SAFE_DTYPES: dict[str, DType] = {
    "F64": dtypes.float64,
    "F32": dtypes.float32,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "I64": dtypes.int64,
    "I32": dtypes.int32,
    "I16": dtypes.int16,
    "I8": dtypes.int8,
    "U64": dtypes.uint64,
    "U32": dtypes.uint32,
    "U16": dtypes.uint16,
    "U8": dtypes.uint8,
    "BOOL": dtypes.bool,
}
_SAFE_NAMES = {v: k for k, v in SAFE_DTYPES.items()}
# every dtype the format knows, by its size in bits: a file may hold ones uopgrad can't load, and its layout
# is still checked with their sizes (F4 packs two elements a byte)
_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
HEADER_CAP = 100_000_000  # the safetensors package refuses longer headers (a hostile length is no allocation)
RESERVED_NAMES = frozenset({"__metadata__"})  # the header key the format keeps for the metadata map
_U64_MAX = 2**64 - 1  # offsets and sizes are u64 (usize) in the reference reader
_INTP_MAX = 2**63 - 1
_FIELDS = ("dtype", "shape", "data_offsets")


@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class _BadNumber:
    """A JSON integer no u64 holds (negative, `-0`, more than 20 digits): kept as its text for the message."""

    text: str

    def __repr__(self) -> str:
        return self.text


class _HeaderError(ValueError):
    """A rule the JSON parser's hooks found broken; safe_load turns it into a SafetensorsError."""


def _parse_int(text: str) -> int | _BadNumber:
    # negative integers, -0 included, are no u64 (serde_json reads `-0` as a float); the digit cap keeps
    # int() off huge literals
    return _BadNumber(text) if text.startswith("-") or len(text) > 20 else int(text)


def _parse_constant(text: str) -> object:
    raise _HeaderError(f"{text} is not JSON")  # Python's json reads NaN and Infinity; JSON has neither


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        for s in (k, v) if isinstance(v, str) else (k,):
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape, `"\ud800"`: no UTF-8 text has one
                raise _HeaderError(f"the string {s!r} holds a lone surrogate escape") from None
        if k in out:
            raise _HeaderError(f"the key {k!r} appears twice in one JSON object")
        out[k] = v
    return out


def _u64(x: object) -> bool:
    return type(x) is int and 0 <= x <= _U64_MAX


def _entry(path: str, name: str, info: object) -> _Entry:
    """One tensor's header entry, its fields checked for type and range."""

    def bad(rule: str) -> SafetensorsError:
        return SafetensorsError(path, rule, name)

    if not isinstance(info, dict):
        raise bad(f"its entry is {type(info).__name__} {info!r:.60}, not a JSON object")
    for f in _FIELDS:
        if f not in info:
            raise bad(f"its entry has no {f!r} field")
    if extra := [k for k in info if k not in _FIELDS]:
        raise bad(f"its entry has the unknown field {extra[0]!r} (only dtype, shape and data_offsets)")
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if type(dt) is not str:
        raise bad(f"dtype {dt!r:.60} is not a JSON string")
    if dt not in _BITS:
        raise bad(f"unknown dtype {dt!r:.60} (safetensors has {', '.join(_BITS)})")
    if type(shape) is not list or not all(_u64(d) for d in shape):
        raise bad(f"shape {shape!r:.80} is not a list of non-negative integers below 2**64")
    if type(offs) is not list or len(offs) != 2 or not all(_u64(o) for o in offs):
        raise bad(f"data_offsets {offs!r:.80} is not a pair of non-negative integers below 2**64")
    return _Entry(name, dt, tuple(shape), offs[0], offs[1])


def _check_layout(path: str, entries: list[_Entry]) -> int:
    """The tensors' byte ranges, by offset, tile the data section from 0 and each holds its shape's bytes
    (sizes overflow where the reference reader's u64 arithmetic would). Returns the data section's size."""
    pos = 0
    for e in entries:

        def bad(rule: str, name: str = e.name) -> SafetensorsError:
            return SafetensorsError(path, rule, name)

        if e.end < e.begin:
            raise bad(f"data_offsets [{e.begin}, {e.end}] end before they begin")
        if e.begin < pos:
            raise bad(f"data_offsets [{e.begin}, {e.end}] overlap the tensor before it, which ends at {pos}")
        if e.begin > pos:
            raise bad(
                f"data_offsets [{e.begin}, {e.end}] leave a hole: bytes {pos}..{e.begin} belong to no tensor"
            )
        numel = 1
        for d in e.shape:  # checked at each step, as the reference reader's checked_mul is
            numel *= d
            if numel > _U64_MAX:
                raise bad(f"shape {list(e.shape)} has more than 2**64 elements")
        bits = numel * _BITS[e.dtype]
        if bits > _U64_MAX:
            raise bad(f"shape {list(e.shape)} of {e.dtype} has more than 2**64 bits")
        if bits % 8:
            raise bad(f"shape {list(e.shape)} of {e.dtype} does not end on a byte boundary")
        if e.end - e.begin != bits // 8:
            raise bad(
                f"data_offsets [{e.begin}, {e.end}] hold {e.end - e.begin} bytes, shape "
                f"{list(e.shape)} of {e.dtype} needs {bits // 8}"
            )
        pos = e.end
    return pos


def _parse(path: str, raw: bytes) -> tuple[dict[str, str], dict[str, object]]:
    """The header's bytes as (the metadata map, the tensor entries by name), checked as text and as JSON."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError(
            path, f"the header is not UTF-8 (byte {e.start}: {raw[e.start : e.end]!r})"
        ) from None
    if not text.startswith("{"):
        raise SafetensorsError(
            path,
            "the header is empty"
            if not text
            else f"the header does not begin with '{{' but with {text[:20]!r}",
        )
    try:
        header = json.loads(
            text, object_pairs_hook=_pairs, parse_int=_parse_int, parse_constant=_parse_constant
        )
    except _HeaderError as e:
        raise SafetensorsError(path, f"the header breaks a JSON rule: {e}") from None
    except ValueError as e:  # json.JSONDecodeError; after the object, only JSON whitespace may follow
        raise SafetensorsError(path, f"the header is not valid JSON ({e})") from None
    except RecursionError:
        raise SafetensorsError(path, "the header nests JSON too deeply") from None
    assert isinstance(header, dict)  # the text begins with '{' and parsed whole
    meta = header.pop("__metadata__", None)  # null is no metadata, as in the reference reader
    if meta is not None and not isinstance(meta, dict):
        raise SafetensorsError(
            path, f"__metadata__ is {type(meta).__name__} {meta!r:.60}, not a str->str map"
        )
    for k, v in (meta or {}).items():
        if type(v) is not str:
            raise SafetensorsError(path, f"__metadata__[{k!r}] is {type(v).__name__} {v!r:.60}, not a str")
    return meta or {}, header


def _read_header(f: io.BufferedReader, path: str) -> tuple[int, dict[str, str], list[_Entry]]:
    """Check the header of the open file `f` against the whole file's size: (the data section's start,
    the metadata, the tensors in offset order). Reads nothing past the header."""
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        raise SafetensorsError(
            path,
            "the file is empty"
            if size == 0
            else f"the file is {size} bytes, shorter than the 8-byte header length",
        )
    head = f.read(8)
    if len(head) != 8:
        raise SafetensorsError(path, "the file got shorter while it was read")
    (n,) = struct.unpack("<Q", head)
    if n > HEADER_CAP:
        raise SafetensorsError(path, f"the header length {n} is over the {HEADER_CAP}-byte cap")
    if 8 + n > size:
        raise SafetensorsError(
            path, f"the header length {n} runs past the end of the {size}-byte file (truncated?)"
        )
    raw = f.read(n)
    if len(raw) != n:
        raise SafetensorsError(path, "the file got shorter while it was read")
    meta, header = _parse(path, raw)
    # in offset order; entries of equal offsets (empty tensors) keep their header order
    entries = sorted((_entry(path, k, v) for k, v in header.items()), key=lambda e: (e.begin, e.end))
    data_len = _check_layout(path, entries)
    if 8 + n + data_len > size:
        raise SafetensorsError(
            path, f"the tensors need {data_len} bytes of data, the file has {size - 8 - n} (truncated?)"
        )
    if 8 + n + data_len < size:
        raise SafetensorsError(path, f"{size - 8 - n - data_len} bytes follow the last tensor's data")
    return 8 + n, meta, entries


def _open(fn: str | os.PathLike[str]) -> tuple[str, io.BufferedReader]:
    path = os.fspath(fn)
    st = os.stat(path)  # a missing file: FileNotFoundError, which names it
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise SafetensorsError(path, f"the path is {what}")
    return path, open(path, "rb")  # the caller closes it


def safe_metadata(fn: str | os.PathLike[str]) -> dict[str, str]:
    """The `__metadata__` map of a .safetensors file ({} if it has none), after checking its whole header."""
    path, f = _open(fn)
    with f:
        return _read_header(f, path)[1]


def _array(e: _Entry, raw: memoryview) -> np.ndarray:
    """One tensor's bytes as a native-order numpy array of its uopgrad dtype's numpy type."""
    if e.dtype == "BOOL":  # any nonzero byte is True, stored as 1 so that every op sees a canonical bool
        bools: np.ndarray = np.frombuffer(raw, np.uint8) != 0
        return bools.reshape(e.shape)
    if e.dtype == "BF16":  # ml_dtypes' bfloat16 has no byte order of its own: swap as uint16
        bf16: np.ndarray = np.frombuffer(raw, "<u2").astype(np.uint16).view(dtypes.to_numpy(dtypes.bfloat16))
        return bf16.reshape(e.shape)
    arr = np.frombuffer(raw, dtypes.to_numpy(SAFE_DTYPES[e.dtype]).newbyteorder("<")).reshape(e.shape)
    out: np.ndarray = arr.astype(arr.dtype.newbyteorder("="))
    return out


def safe_load(fn: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a .safetensors file, by name in the order of their data, on `device` (the default
    device if None). The whole header is checked before any data is read; a file that breaks a rule, or
    holds a dtype uopgrad does not have, raises SafetensorsError."""
    path, f = _open(fn)
    with f:
        start, _, entries = _read_header(f, path)
        for e in entries:
            if e.dtype not in SAFE_DTYPES:
                raise SafetensorsError(
                    path, f"its dtype {e.dtype} is valid safetensors, but uopgrad has no such dtype", e.name
                )
            # only an empty tensor can be this large: numpy caps each array at 2**63-1 bytes, zero dims aside
            item = dtypes.to_numpy(SAFE_DTYPES[e.dtype]).itemsize
            if math.prod(d for d in e.shape if d) * item > _INTP_MAX:
                raise SafetensorsError(
                    path,
                    f"its shape {list(e.shape)} is valid safetensors, but numpy "
                    "can't make an array of that shape",
                    e.name,
                )
        data_len = entries[-1].end if entries else 0
        f.seek(start)
        data = bytearray(data_len)
        if f.readinto(data) != data_len:
            raise SafetensorsError(path, "the file got shorter while it was read")
    view = memoryview(data)
    return {
        e.name: Tensor(_array(e, view[e.begin : e.end]), device=device, dtype=SAFE_DTYPES[e.dtype])
        for e in entries
    }


# ------------------------------------------------------------------------------------------------ writing
def _utf8(s: str, what: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"safe_save: {what} {s!r} is not UTF-8 text (it holds a lone surrogate)") from None


def _check_input(tensors: Mapping[str, Tensor], metadata: Mapping[str, str] | None) -> None:
    """Refuse, before anything is written, what no valid file can hold."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"safe_save: tensors is {type(tensors).__name__}, not a mapping of names to Tensors")
    entries: list[tuple[object, object]] = list(tensors.items())
    for name, t in entries:
        if not isinstance(name, str):
            raise TypeError(f"safe_save: the name {name!r} is {type(name).__name__}, not str")
        _utf8(name, "the name")
        if name in RESERVED_NAMES:
            raise ValueError(
                f"safe_save: {name!r} is reserved by the safetensors format for its metadata "
                "map; name the tensor otherwise"
            )
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: {name!r} is {type(t).__name__}, not a Tensor")
        if t.dtype not in _SAFE_NAMES:
            raise TypeError(f"safe_save: {name!r} has dtype {t.dtype}, which safetensors can't store")
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise TypeError(f"safe_save: metadata is {type(metadata).__name__}, not a str->str mapping")
    items: list[tuple[object, object]] = list(metadata.items())  # typed str->str, but any may come
    for k, v in items:
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"safe_save: metadata[{k!r}] = {v!r:.60}: metadata maps str to str")
        _utf8(k, "the metadata key")
        _utf8(v, f"metadata[{k!r}]")


def _encode(
    tensors: Mapping[str, Tensor], metadata: Mapping[str, str] | None
) -> tuple[bytes, list[np.ndarray]]:
    """The header (length prefix included, padded so the data starts 8-aligned) and each tensor's bytes."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: list[np.ndarray] = []
    offset = 0
    for name, t in tensors.items():
        arr = t.numpy()
        # bfloat16 comes as ml_dtypes' bfloat16, which has no byte order of its own: write its bits
        little = (
            arr.view(np.uint16).astype("<u2")
            if t.dtype == dtypes.bfloat16
            else arr.astype(arr.dtype.newbyteorder("<"))
        )
        raw = np.ascontiguousarray(little).reshape(-1).view(np.uint8)
        header[str(name)] = {
            "dtype": _SAFE_NAMES[t.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + raw.size],
        }
        blobs.append(raw)
        offset += raw.size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    if len(text) > HEADER_CAP:
        raise ValueError(
            f"safe_save: the header would be {len(text)} bytes, over the {HEADER_CAP}-byte cap "
            "readers hold to (too many tensors, or too much metadata)"
        )
    return struct.pack("<Q", len(text)) + text, blobs


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:  # os.write may write less than it was given
        view = view[os.write(fd, view) :]


def _create_temp(target: str) -> tuple[str, int]:
    """A new file next to `target`, open for writing: mode 0o666 less the umask, as open() would make."""
    d, base = os.path.split(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(d, f".{base[:200]}.{secrets.token_hex(6)}.tmp")  # within a 255-byte file name
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        except OSError as e:  # name the checkpoint, not the temporary file nobody asked for
            raise type(e)(
                e.errno, f"safe_save: can't write {target!r}: {e.strerror} (creating a file in {d!r})"
            ) from e


def _fsync_dir(d: str) -> None:
    """Make the rename durable; where a directory can't be opened or synced (Windows), skip it."""
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def safe_save(
    tensors: Mapping[str, Tensor], fn: str | os.PathLike[str], metadata: Mapping[str, str] | None = None
) -> None:
    """Write `tensors` (realized first) to a .safetensors file, in their order, with `metadata` as its
    `__metadata__` map.

    The input is checked whole first (names are str and not `__metadata__`, values are Tensors of a dtype
    the format has, metadata maps str to str). The file is written to a temporary file in the target's
    directory, synced, and renamed over the target: a save that fails or is interrupted removes the
    temporary file and leaves the previous file byte for byte. An existing target keeps its permission
    bits; a symlink is followed and its target replaced; a directory or other non-regular target is refused.
    """
    _check_input(tensors, metadata)
    path = os.fspath(fn)
    target = os.path.realpath(path)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise (IsADirectoryError if stat.S_ISDIR(st.st_mode) else ValueError)(
            f"safe_save: {path!r} is {what}; refusing to replace it with a checkpoint"
        )
    head, blobs = _encode(tensors, metadata)
    tmp, fd = "", -1
    try:
        tmp, fd = _create_temp(target)
        if st is not None and hasattr(os, "fchmod"):
            try:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            except OSError:  # e.g. a set-group-ID bit this user may not set: keep the default mode
                pass
        _write_all(fd, head)
        for b in blobs:
            _write_all(fd, b.data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException:  # KeyboardInterrupt too: never leave a half-written temporary behind
        if fd >= 0:
            os.close(fd)
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    _fsync_dir(os.path.dirname(target) or ".")
