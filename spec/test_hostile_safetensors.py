"""Hostile safetensors files (spec/errors.md): hypothesis builds valid files and breaks them, and
`uopgrad.nn.safetensors` must agree with the `safetensors` package (the format's reference reader, a test
dependency only): a file it loads we load to the same tensors and metadata, a file it rejects we reject with
a SafetensorsError naming the file and the rule, never a raw KeyError, json or numpy error. Where we reject
a file it loads, the reason must be one of the documented deliberate differences (DIFFERENCES). Files each
side writes, the other reads. `HOSTILE_STATS` counts the cases by class "safetensors"."""

from __future__ import annotations

import json
import math
import os
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from uopgrad import Tensor, dtypes
from uopgrad.errors import SafetensorsError
from uopgrad.nn.safetensors import SAFE_DTYPES, safe_load, safe_metadata, safe_save

try:
    import safetensors
    import safetensors.numpy as st_numpy
except ImportError:  # the oracle tests skip; the table of hostile files below still runs
    safetensors = None
needs_lib = pytest.mark.skipif(
    safetensors is None, reason="the safetensors package (a test oracle) is not installed"
)

HOSTILE_STATS: Counter[str] = Counter()
# the `thorough` profile (spec/conftest.py) searches longer
FAST = settings(
    max_examples=max(150, settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PER_MUTATION = settings(FAST, max_examples=max(30, settings.default.max_examples // 10))
DEV = "REFERENCE"  # loading is a copy: no compiled backend needed
# the dtypes uopgrad loads, by their size in bits (the format's widths are uopgrad's itemsizes)
BITS = {name: 8 * dt.itemsize for name, dt in SAFE_DTYPES.items()}
# what we refuse and the package loads, by a phrase of our message (nn/safetensors.py's docstring says why)
DIFFERENCES = (
    "appears twice",
    "unknown field",
    "does not begin with '{'",
    "is not a JSON string",
    "uopgrad has no such dtype",
    "numpy can't make an array",
)


# ------------------------------------------------------------------------------ building files by hand
@dataclass(frozen=True)
class Raw:
    """JSON text written as is (`2.0`, `-0`, `NaN`)."""

    text: str


class Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs, so that a key may appear twice."""


def dump(x: Any) -> str:
    if isinstance(x, Raw):
        return x.text
    if isinstance(x, Pairs):
        return "{" + ",".join(f"{dump(k)}:{dump(v)}" for k, v in x) + "}"
    if isinstance(x, dict):
        return dump(Pairs(x.items()))
    if isinstance(x, list):
        return "[" + ",".join(dump(v) for v in x) + "]"
    return json.dumps(x, ensure_ascii=False)


@dataclass
class Spec:
    """A safetensors file as parts a mutation can break: the header's pairs (tensor entries are dicts of
    dtype/shape/data_offsets, `__metadata__` a dict), the padding after the JSON, the data and, if set, a
    header length other than the header's own."""

    pairs: Pairs
    data: bytes
    pad: str = ""
    prefix: bytes = b""
    length: int | None = None
    tail: bytes = b""
    payloads: dict[str, tuple[str, list[int], bytes]] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        text = self.prefix + dump(self.pairs).encode("utf-8", "surrogateescape")  # \udcff: the byte 0xff
        text += self.pad.encode() + b" " * (-(len(text) + len(self.pad)) % 8)
        n = len(text) if self.length is None else self.length
        return struct.pack("<Q", n) + text + self.data + self.tail


@st.composite
def valid_specs(draw: st.DrawFn, min_tensors: int = 0, max_tensors: int = 5) -> Spec:
    names = draw(
        st.lists(
            st.text(max_size=6).filter(lambda s: s != "__metadata__"),
            min_size=min_tensors,
            max_size=max_tensors,
            unique=True,
        )
    )
    payloads: dict[str, tuple[str, list[int], bytes]] = {}
    for name in names:
        dt = draw(st.sampled_from(sorted(BITS)))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        nbytes = math.prod(shape) * BITS[dt] // 8
        payloads[name] = (dt, shape, draw(st.binary(min_size=nbytes, max_size=nbytes)))
    data_order = draw(st.permutations(names))  # the data's order need not be the header's
    offsets, pos = {}, 0
    for name in data_order:
        offsets[name] = [pos, pos + len(payloads[name][2])]
        pos += len(payloads[name][2])
    pairs = Pairs(
        (n, {"dtype": payloads[n][0], "shape": payloads[n][1], "data_offsets": offsets[n]}) for n in names
    )
    meta = draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)))
    if meta is not None:
        pairs.insert(draw(st.integers(0, len(pairs))), ("__metadata__", meta))
    pad = draw(st.sampled_from(["", " ", "  \n", "\t", "\r\n "]))  # JSON whitespace may pad the header
    return Spec(pairs, b"".join(payloads[n][2] for n in data_order), pad, payloads=payloads)


def _write(tmp: Path, blob: bytes) -> Path:
    fn = tmp / "case.safetensors"
    fn.write_bytes(blob)
    return fn


def _theirs(fn: Path, blob: bytes) -> tuple[dict[str, tuple[str, list[int], bytes]], dict[str, str]] | None:
    """The package's reading of the file (raw bytes per tensor, and the metadata), None if it refuses."""
    try:
        tensors = {
            k: (v["dtype"], list(v["shape"]), bytes(v["data"])) for k, v in safetensors.deserialize(blob)
        }
        with safetensors.safe_open(str(fn), framework="np") as f:
            meta = f.metadata() or {}
    except safetensors.SafetensorError:
        return None
    return tensors, meta


def _ours(fn: Path) -> tuple[dict[str, Tensor], dict[str, str]] | SafetensorsError:
    """Our reading: only a SafetensorsError may come out of a bad file (anything else fails the test)."""
    try:
        return safe_load(fn, device=DEV), safe_metadata(fn)
    except SafetensorsError as e:
        assert e.path == os.fspath(fn) and repr(os.fspath(fn)) in str(e), e
        assert e.rule and e.rule in str(e), e
        return e


def _expected(dt: str, shape: list[int], raw: bytes) -> np.ndarray:
    """The package's bytes as the values a reader should give: bits for floats (NaN payloads included),
    BOOL as numpy and torch treat its bytes (nonzero is True)."""
    if dt == "BOOL":
        return (np.frombuffer(raw, np.uint8) != 0).reshape(shape)
    if dt in ("F16", "BF16"):
        return np.frombuffer(raw, "<u2").astype(np.uint16).reshape(shape)
    np_dt = dtypes.to_numpy(SAFE_DTYPES[dt])
    if dt in ("F32", "F64"):
        return np.frombuffer(raw, f"<u{np_dt.itemsize}").astype(f"u{np_dt.itemsize}").reshape(shape)
    return np.frombuffer(raw, np_dt.newbyteorder("<")).astype(np_dt).reshape(shape)


def _as_bits(t: Tensor) -> np.ndarray:
    a = t.numpy()
    return a.view(f"u{a.dtype.itemsize}") if t.dtype in dtypes.floats else a


def _agree(tmp: Path, blob: bytes, kind: str) -> str:
    """Load `blob` both ways; assert they agree (or differ only as documented); say how it went."""
    fn = _write(tmp, blob)
    theirs, ours = _theirs(fn, blob), _ours(fn)
    if isinstance(ours, SafetensorsError):
        if theirs is not None:
            assert any(p in ours.rule for p in DIFFERENCES), f"{kind}: we refuse, the package loads: {ours}"
            HOSTILE_STATS[f"safetensors {kind}: deliberate difference"] += 1
            return "difference"
        HOSTILE_STATS[f"safetensors {kind}: both refuse"] += 1
        return "refused"
    assert theirs is not None, f"{kind}: we load a file the package refuses: {blob[:200]!r}"
    tensors, meta = ours
    want, want_meta = theirs
    assert meta == want_meta
    assert set(tensors) == set(want)
    for name, (dt, shape, raw) in want.items():
        t = tensors[name]
        assert t.dtype == SAFE_DTYPES[dt] and list(t.shape) == shape, (name, t.dtype, t.shape, dt, shape)
        np.testing.assert_array_equal(_as_bits(t), _expected(dt, shape, raw))
    HOSTILE_STATS[f"safetensors {kind}: both load"] += 1
    return "loaded"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile_safetensors")


# ------------------------------------------------------------------------------------ the mutations
def _tensor_names(spec: Spec) -> list[str]:
    return [k for k, _ in spec.pairs if k != "__metadata__"]


def _entry(spec: Spec, name: str) -> dict[str, Any]:
    return next(v for k, v in spec.pairs if k == name)


def _mutate(draw: st.DrawFn, spec: Spec, how: str) -> None:  # noqa: C901  (one branch a mutation)
    names = _tensor_names(spec)
    e = _entry(spec, draw(st.sampled_from(names))) if names else None
    big = st.sampled_from([2**63, 2**64 - 1, 2**64, 2**70, 10**30])
    if how == "negative shape" and e:
        e["shape"] = e["shape"] or [1]
        e["shape"][draw(st.integers(0, len(e["shape"]) - 1))] = draw(st.integers(-5, -1))
    elif how == "negative offset" and e:
        e["data_offsets"][draw(st.integers(0, 1))] = draw(st.sampled_from([-1, -8, Raw("-0")]))
    elif how == "huge offset" and e:
        e["data_offsets"][draw(st.integers(0, 1))] = draw(big)
    elif how == "huge shape" and e:
        e["shape"] = draw(st.lists(st.one_of(big, st.integers(0, 3)), min_size=1, max_size=4))
    elif how == "float number" and e:
        key = draw(st.sampled_from(["shape", "data_offsets"])) if e["shape"] else "data_offsets"
        if e[key]:
            i = draw(st.integers(0, len(e[key]) - 1))
            e[key][i] = Raw(draw(st.sampled_from([f"{e[key][i]}.0", f"{e[key][i]}e0", "NaN", "Infinity"])))
    elif how == "hole":
        k = draw(st.integers(1, 9))
        for n in names:
            _entry(spec, n)["data_offsets"] = [o + k for o in _entry(spec, n)["data_offsets"]]
        spec.data = bytes(k) + spec.data
    elif how == "overlap" and (
        later := [x for x in (_entry(spec, n) for n in names) if x["data_offsets"][0]]
    ):
        e = draw(st.sampled_from(later))
        e["data_offsets"] = [o - draw(st.integers(1, e["data_offsets"][0])) for o in e["data_offsets"]]
    elif how == "begin after end" and e:
        e["data_offsets"] = (
            e["data_offsets"][::-1]
            if e["data_offsets"][0] != e["data_offsets"][1]
            else [e["data_offsets"][0] + 1, e["data_offsets"][0]]
        )
    elif how == "shape mismatch" and e:
        grow = draw(st.booleans()) or not e["shape"] or e["shape"][-1] == 1
        e["shape"] = [*e["shape"], draw(st.sampled_from([0, 2, 3]))] if grow else e["shape"][:-1]
    elif how == "duplicate key" and spec.pairs:
        spec.pairs.insert(draw(st.integers(0, len(spec.pairs))), draw(st.sampled_from(spec.pairs)))
    elif how == "trailing bytes":
        spec.tail = draw(st.binary(min_size=1, max_size=9))
    elif how == "truncated" and spec.data:
        spec.data = spec.data[: -draw(st.integers(1, len(spec.data)))]
    elif how == "header length":
        spec.length = draw(st.one_of(st.integers(0, 300), st.sampled_from([100_000_001, 2**63, 2**64 - 1])))
    elif how in ("not UTF-8", "surrogate escape"):
        bad = (
            draw(st.sampled_from(["\udcff", "x\udcc0", "\udc80y", "\udced\udca0\udc80"]))
            if how == "not UTF-8"
            else Raw(draw(st.sampled_from(['"\\ud800"', '"x\\udc00"', '"\\ud83d\\ude00"'])))
        )  # the last is fine
        i = next((i for i, (k, _) in enumerate(spec.pairs) if k != "__metadata__"), None)
        if i is None:  # no tensor to rename: a metadata key
            spec.pairs = Pairs([p for p in spec.pairs if p[0] != "__metadata__"])
            spec.pairs.append(("__metadata__", Pairs([(bad, "v")])))
        else:
            spec.pairs[i] = (bad if isinstance(bad, Raw) else spec.pairs[i][0] + bad, spec.pairs[i][1])
    elif how == "bad dtype" and e:
        e["dtype"] = draw(st.sampled_from(["f32", "F31", "", "FLOAT", 3, None, ["F32"], {"F32": None}]))
    elif how == "dtype uopgrad lacks" and e:
        e["dtype"] = {8: "F8_E4M3", 16: "F8_E5M2", 32: "C64", 64: "C64"}[BITS[e["dtype"]]]
    elif how == "missing field" and e:
        del e[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))]
    elif how == "extra field" and e:
        e[draw(st.sampled_from(["offsets", "dtype2", "", "__metadata__"]))] = draw(
            st.sampled_from([1, "x", []])
        )
    elif how == "wrong field type" and e:
        e[draw(st.sampled_from(["shape", "data_offsets"]))] = draw(
            st.sampled_from([None, 3, "2", {"0": 1}, [1], [0, 1, 2], [True, 1], [[1]]])
        )
    elif how == "entry not an object" and e:
        i = next(i for i, (k, _) in enumerate(spec.pairs) if k != "__metadata__")
        spec.pairs[i] = (spec.pairs[i][0], draw(st.sampled_from([None, 3, "x", [1, 2]])))
    elif how == "bad metadata":
        value = draw(
            st.sampled_from(
                [
                    None,
                    1,
                    [],
                    "x",
                    {"k": 1},
                    {"k": None},
                    {"k": ["v"]},
                    {"k": {}},
                    Pairs([("k", "a"), ("k", "b")]),
                ]
            )
        )
        spec.pairs = Pairs([p for p in spec.pairs if p[0] != "__metadata__"] + [("__metadata__", value)])
    elif how == "not an object":
        spec.pairs = Pairs()
        spec.prefix = draw(st.sampled_from([b"[]", b"3", b"null", b'"x"', b"", b"{}{}", b"{,}"]))
    elif how == "padding":
        spec.pad = draw(st.sampled_from(["\x00", "\x0b", "\xa0", "x", "\u3000", "}", " \x00 "]))
    elif how == "leading whitespace":
        spec.prefix = draw(st.sampled_from([b" ", b"\n", b"\t\r\n ", b"\xef\xbb\xbf"]))
    elif how == "deep nesting":
        depth = draw(st.integers(100, 3000))
        spec.pairs.append(("deep", Raw("[" * depth + "]" * depth)))


MUTATIONS = [
    "negative shape",
    "negative offset",
    "huge offset",
    "huge shape",
    "float number",
    "hole",
    "overlap",
    "begin after end",
    "shape mismatch",
    "duplicate key",
    "trailing bytes",
    "truncated",
    "header length",
    "not UTF-8",
    "surrogate escape",
    "bad dtype",
    "dtype uopgrad lacks",
    "missing field",
    "extra field",
    "wrong field type",
    "entry not an object",
    "bad metadata",
    "not an object",
    "padding",
    "leading whitespace",
    "deep nesting",
]


# ------------------------------------------------------------------------------------------- the tests
@needs_lib
@FAST
@given(spec=valid_specs())
def test_valid_files_load_as_the_package_loads_them(tmp: Path, spec: Spec) -> None:
    assert _agree(tmp, spec.to_bytes(), "valid") == "loaded"
    ours = safe_load(tmp / "case.safetensors", device=DEV)
    starts = [next(v for k, v in spec.pairs if k == n)["data_offsets"][0] for n in ours]
    assert starts == sorted(starts), "tensors come in the order of their data"


@needs_lib
@pytest.mark.parametrize("how", MUTATIONS)
@PER_MUTATION
@given(spec=valid_specs(min_tensors=1, max_tensors=3), data=st.data())
def test_broken_files_are_refused_exactly_when_the_package_refuses(
    tmp: Path, how: str, spec: Spec, data: st.DataObject
) -> None:
    _mutate(data.draw, spec, how)
    _agree(tmp, spec.to_bytes(), how)


@needs_lib
@FAST
@given(spec=valid_specs(max_tensors=3), at=st.integers(0, 10**6), byte=st.integers(0, 255))
def test_a_changed_header_byte_is_judged_as_the_package_judges_it(
    tmp: Path, spec: Spec, at: int, byte: int
) -> None:
    blob = bytearray(spec.to_bytes())
    n = struct.unpack("<Q", blob[:8])[0]
    blob[at % (8 + n)] = byte  # the length or the JSON
    _agree(tmp, bytes(blob), "changed byte")


@needs_lib
@FAST
@given(
    arrays=st.dictionaries(
        st.text(max_size=6).filter(lambda s: s != "__metadata__"),
        st.tuples(
            st.sampled_from(
                [
                    "bool",
                    "uint8",
                    "int8",
                    "int16",
                    "uint16",
                    "float16",
                    "int32",
                    "uint32",
                    "float32",
                    "int64",
                    "uint64",
                    "float64",
                ]
            ),
            st.lists(st.integers(0, 3), max_size=3),
            st.integers(0, 2**32 - 1),
        ),
        max_size=4,
    ),
    meta=st.one_of(st.none(), st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2)),
)
def test_files_the_package_writes_we_read(
    tmp: Path, arrays: dict[str, tuple[str, list[int], int]], meta: dict[str, str] | None
) -> None:
    made = {
        k: np.random.default_rng(seed)
        .integers(0, 256, math.prod(shape) * np.dtype(dt).itemsize, dtype=np.uint8)
        .view(dt)
        .reshape(shape)
        for k, (dt, shape, seed) in arrays.items()
    }
    made = {k: np.asarray(a != 0) if a.dtype == np.bool_ else a for k, a in made.items()}
    fn = tmp / "theirs.safetensors"
    st_numpy.save_file(made, str(fn), metadata=meta)
    # safetensors 0.8 writes `{},"__metadata__":{}}` for no tensors and empty metadata, which it can't read
    assume(_theirs(fn, fn.read_bytes()) is not None)
    got = safe_load(fn, device=DEV)
    assert safe_metadata(fn) == (meta or {})
    assert set(got) == set(made)
    for k, a in made.items():
        assert got[k].dtype == dtypes.from_numpy(a.dtype)
        want = a.view(f"u{a.itemsize}") if a.dtype.kind == "f" else a
        np.testing.assert_array_equal(_as_bits(got[k]), want)
    HOSTILE_STATS["safetensors written by the package: read"] += 1


@needs_lib
@FAST
@given(spec=valid_specs(max_tensors=4))
def test_files_we_write_the_package_reads(tmp: Path, spec: Spec) -> None:
    tensors = {
        n: Tensor(
            _expected(dt, shape, raw).view(dtypes.to_numpy(SAFE_DTYPES[dt]))
            if dt != "BOOL"
            else _expected(dt, shape, raw),
            device=DEV,
            dtype=SAFE_DTYPES[dt],
        )
        for n, (dt, shape, raw) in spec.payloads.items()
    }
    meta = next((v for k, v in spec.pairs if k == "__metadata__"), None)
    fn = tmp / "ours.safetensors"
    safe_save(tensors, fn, metadata=meta)
    blob = fn.read_bytes()
    theirs = _theirs(fn, blob)
    assert theirs is not None
    got, got_meta = theirs
    assert got_meta == (meta or {}) and set(got) == set(tensors)
    for n, (dt, shape, raw) in spec.payloads.items():
        want = raw if dt != "BOOL" else bytes(np.frombuffer(raw, np.uint8) != 0)  # we write canonical bools
        assert got[n] == (dt, shape, want), n
    HOSTILE_STATS["safetensors written by us: read by the package"] += 1


# a table that needs no oracle: each file, and a phrase of the rule its error must state
def _file(header: str | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h) if length is None else length) + h + data


E = '{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
TABLE = [
    (b"", None, "the file is empty"),
    (b"\x01\x00", None, "shorter than the 8-byte header length"),
    (_file("{}", length=2**64 - 1), None, "over the 100000000-byte cap"),
    (_file("{}", length=50), None, "runs past the end"),
    (_file(""), None, "the header is empty"),
    (_file(' {"a":' + E + "}", bytes(8)), None, "does not begin with '{'"),
    (_file(b'{"\xff":' + E.encode() + b"}", bytes(8)), None, "not UTF-8"),
    (_file('{"a":' + E + ',"a":' + E + "}", bytes(8)), None, "appears twice"),
    (_file('{"a":' + E + "}", bytes(12)), None, "4 bytes follow the last tensor"),
    (_file('{"a":' + E + "}", bytes(4)), None, "truncated"),
    (_file('{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', bytes(8)), "a", "non-negative"),
    (_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}', bytes(8)), "a", "non-negative"),
    (_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)), "a", "leave a hole"),
    (
        _file('{"a":' + E + ',"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)),
        "b",
        "overlap",
    ),
    (_file('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)), "a", "needs 12"),
    (_file('{"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}'), "a", "2**64"),
    (_file('{"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}}', bytes(8)), "a", "unknown dtype"),
    (_file('{"a":{"dtype":"F32","shape":[2]}}', bytes(8)), "a", "no 'data_offsets' field"),
    (_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}', bytes(8)), "a", "unknown field"),
    (_file('{"__metadata__":{"k":1},"a":' + E + "}", bytes(8)), None, "__metadata__['k'] is int"),
    (_file('{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}', bytes(8)), "a", "no such dtype"),
    (_file('{"a":' + E + "}\x00", bytes(8)), None, "not valid JSON"),
    (_file('{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}}', bytes(8)), None, "NaN is not JSON"),
    (_file('{"\\ud800":' + E + "}", bytes(8)), None, "lone surrogate"),
    (_file('{"a":' + "[" * 5000 + "]" * 5000 + "}"), None, "nests JSON too deeply"),
]


@pytest.mark.parametrize(("blob", "tensor", "phrase"), TABLE, ids=[str(i) for i in range(len(TABLE))])
def test_hostile_file_table(tmp: Path, blob: bytes, tensor: str | None, phrase: str) -> None:
    fn = _write(tmp, blob)
    with pytest.raises(SafetensorsError) as info:
        safe_load(fn, device=DEV)
    assert phrase in str(info.value) and repr(str(fn)) in str(info.value), str(info.value)
    assert info.value.tensor == tensor
    assert isinstance(info.value, ValueError)
    HOSTILE_STATS["safetensors table: clear error"] += 1


def test_paths_that_are_not_files(tmp: Path) -> None:
    with pytest.raises(SafetensorsError, match="is a directory"):
        safe_load(tmp)
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        safe_load(tmp / "nope.safetensors")
    HOSTILE_STATS["safetensors table: clear error"] += 2


def test_zz_report_counts() -> None:
    print(f"\nhostile safetensors files: {sum(HOSTILE_STATS.values())}")
    for k, v in sorted(HOSTILE_STATS.items()):
        print(f"  {k}: {v}")
