"""The compiled matchers' code on disk (uopgrad.rewrite `_code`, spec/rewrite.md): a new process loads the
code objects an earlier one compiled instead of compiling their sources again; a payload that is not such a
code object is compiled over; `CODE_CACHE = False` compiles every source and stores nothing."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from uopgrad import diskcache, rewrite

# a process that realizes a small graph on REFERENCE and prints how many matcher sources it compiled
CHILD = """
import json, sys
from uopgrad import Tensor, rewrite
count = [0]
def counting(*args, **kwargs):
    count[0] += 1
    return compile(*args, **kwargs)
rewrite.compile = counting  # the module's own name: what _code calls
rewrite.CODE_CACHE = sys.argv[1] == "on"
x = Tensor([[1.0, -2.0], [3.0, 0.5]], device="REFERENCE")
out = ((x * 2.0 + 1.0).relu().sum(axis=1) - x.max()).tolist()
print(json.dumps({"compiled": count[0], "out": out}))
"""


def child(cache: Path, mode: str = "on") -> dict[str, object]:
    env = {**os.environ, "UOPGRAD_CACHE_DIR": str(cache)}
    res = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True, env=env, timeout=120
    )
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_a_new_process_loads_the_matchers_an_earlier_one_compiled(tmp_path: Path):
    first = child(tmp_path / "cache")
    second = child(tmp_path / "cache")
    assert first["compiled"] and second["compiled"] == 0
    assert second["out"] == first["out"] == [0.0, 6.0]  # (3 + 0) - 3, (7 + 2) - 3


def test_with_the_code_cache_off_every_source_is_compiled_and_nothing_is_stored(tmp_path: Path):
    first = child(tmp_path / "cache", "off")
    second = child(tmp_path / "cache", "off")
    assert first["compiled"] == second["compiled"] > 0
    assert not (tmp_path / "cache").exists() or diskcache_entries(tmp_path / "cache") == 0


def diskcache_entries(root: Path) -> int:
    old = os.environ.get("UOPGRAD_CACHE_DIR")
    os.environ["UOPGRAD_CACHE_DIR"] = str(root)
    try:
        return diskcache.info()["entries"]
    finally:
        if old is None:
            del os.environ["UOPGRAD_CACHE_DIR"]
        else:
            os.environ["UOPGRAD_CACHE_DIR"] = old


@pytest.mark.parametrize("payload", [b"not marshal data", marshal.dumps(42), "code of another name"])
def test_a_payload_that_is_not_the_sources_code_object_is_compiled_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload: bytes | str
):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(rewrite, "_NEW_CODES", [])
    source, name = "def make():\n    return 7\n", "<rules of a test>"
    if isinstance(payload, str):
        payload = marshal.dumps(compile(source, "<elsewhere>", "exec"))
    digest = rewrite._code_digest(source, name)
    diskcache.write(digest, payload)
    code = rewrite._cached_code(source, name)
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert code.co_filename == name and namespace["make"]() == 7  # type: ignore[operator]
    assert [d for d, _ in rewrite._NEW_CODES] == [digest]  # compiled here, to be stored at exit
    rewrite.store_codes()
    assert rewrite._NEW_CODES == [] and marshal.loads(diskcache.read(digest) or b"").co_filename == name


def test_without_a_cache_directory_the_source_is_compiled(monkeypatch: pytest.MonkeyPatch):
    def nowhere() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(diskcache, "cache_dir", nowhere)
    monkeypatch.setattr(rewrite, "_NEW_CODES", [])
    code = rewrite._cached_code("def make():\n    return 8\n", "<rules of a homeless test>")
    namespace: dict[str, object] = {}
    exec(code, namespace)
    assert namespace["make"]() == 8  # type: ignore[operator]
    rewrite.store_codes()  # nothing to write to: kept nowhere, and no error
    assert rewrite._NEW_CODES == []
