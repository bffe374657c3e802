"""What `uopgrad.program_store` hashes as "the code that lowers and renders" (the end-to-end behaviour, a
second process that lowers nothing, is in packages/backend-cpu/tests/test_program_store.py)."""

from __future__ import annotations

import sys
import types

from uopgrad import program_store


def test_a_package_is_hashed_whole_and_a_lone_module_alone(tmp_path, monkeypatch):
    pkg = tmp_path / "storepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "renderer.py").write_text("X = 1\n")
    (tmp_path / "lonemod.py").write_text("Y = 1\n")
    (tmp_path / "neighbour.py").write_text("Z = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    program_store._code_digest.cache_clear()
    before = (program_store._code_digest("storepkg"), program_store._code_digest("lonemod"))
    (pkg / "renderer.py").write_text("X = 2\n")  # an edited pass: another key
    (tmp_path / "neighbour.py").write_text("Z = 2\n")  # a file beside a lone module: not its code
    program_store._code_digest.cache_clear()
    after = (program_store._code_digest("storepkg"), program_store._code_digest("lonemod"))
    assert None not in before and before[0] != after[0] and before[1] == after[1]


def test_a_renderer_with_no_source_file_stores_nothing(monkeypatch):
    module = types.ModuleType("typed_in")  # as a class typed into an interpreter: no __file__
    monkeypatch.setitem(sys.modules, "typed_in", module)
    program_store._code_digest.cache_clear()
    assert program_store._code_digest("uopgrad", "typed_in") is None
    assert program_store._code_digest("uopgrad") is not None
