"""The compile cache (`uopgrad.diskcache`) as its callers meet it: entries in one SQLite file inside a
directory it marks as its own, bounded by deleting the rows used least recently, and one rule for read,
write, prune, info and clear. The hostile file systems are in spec/test_hostile_fs.py."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
import stat
import threading
import warnings
from pathlib import Path

import pytest

from uopgrad import diskcache
from uopgrad.backend import Compiler, compile_cache_dir
from uopgrad.errors import ConfigError


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache directory (not created yet); warnings of earlier tests do not hide this one's."""
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("UOPGRAD_CACHE_MAX_BYTES", raising=False)
    monkeypatch.setattr(diskcache, "_warned", set())
    monkeypatch.setattr(diskcache, "_refused", set())
    yield tmp_path / "cache"
    with diskcache._lock:
        diskcache._forget()


def digest(i: int) -> str:
    return f"{i:064x}"


def rows(root: Path) -> list[tuple[str, bytes, int, bytes]]:
    with sqlite3.connect(root / diskcache.DATABASE) as db:
        out = db.execute("SELECT digest, sha256, size, payload FROM entries ORDER BY digest").fetchall()
    db.close()
    return out


def test_a_write_is_read_back_and_a_miss_is_none(root):
    assert diskcache.read(digest(1)) is None
    assert not root.exists(), "a read creates nothing"
    diskcache.write(digest(1), b"kernel one")
    assert diskcache.read(digest(1)) == b"kernel one"
    assert diskcache.read(digest(2)) is None
    diskcache.write(digest(1), b"kernel 1, again")  # the same key: replaced, counted once
    assert diskcache.read(digest(1)) == b"kernel 1, again"
    assert diskcache.info()["entries"] == 1 and diskcache.info()["bytes"] == len(b"kernel 1, again")


def test_many_writes_in_one_transaction_are_each_read_back_and_bounded(root, monkeypatch):
    diskcache.write_many([])  # nothing to store: nothing created
    assert not root.exists()
    diskcache.write_many([(digest(i), f"kernel {i}".encode()) for i in range(5)])
    assert [diskcache.read(digest(i)) for i in range(5)] == [f"kernel {i}".encode() for i in range(5)]
    assert [(d, sha) for d, sha, _, p in rows(root)] == [
        (digest(i), hashlib.sha256(f"kernel {i}".encode()).digest()) for i in range(5)
    ]
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "2500")
    diskcache.write_many([(digest(10 + i), bytes(1000)) for i in range(4)])  # over the bound at once
    assert diskcache.info()["bytes"] <= 2500 and diskcache.read(digest(13)) is not None


def test_the_cache_creates_a_private_marked_directory_with_one_database(root):
    diskcache.write(digest(1), b"x")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (root / diskcache.MARKER).read_text().startswith("uopgrad compile cache")
    assert {p.name for p in root.iterdir()} <= {diskcache.MARKER, "cache.db", "cache.db-wal", "cache.db-shm"}
    assert compile_cache_dir() == root
    [(d, sha, size, payload)] = rows(root)
    assert (d, sha, size, payload) == (digest(1), hashlib.sha256(b"x").digest(), 1, b"x")


def test_an_existing_empty_directory_is_claimed(tmp_path, monkeypatch, root):
    empty = tmp_path / "made-by-mkdtemp"
    empty.mkdir(mode=0o700)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(empty))
    assert diskcache.info()["state"] == "unclaimed"
    diskcache.write(digest(1), b"x")
    assert diskcache.read(digest(1)) == b"x" and diskcache.info()["state"] == "ready"


def test_the_payloads_stay_under_the_bound_and_the_oldest_go_first(root, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "3000")
    monkeypatch.setattr(diskcache, "_TOUCH_AFTER", 0.0)  # every read records its use
    for i in range(3):
        diskcache.write(digest(i), bytes(1000))
    assert diskcache.read(digest(0)) is not None  # used again: now 1 is the least recently used
    diskcache.write(digest(3), bytes(1000))
    assert [diskcache.read(digest(i)) is not None for i in range(4)] == [True, False, True, True]
    for i in range(4, 20):
        diskcache.write(digest(i), bytes(1000))
        assert diskcache.info()["bytes"] <= 3000
    assert diskcache.read(digest(19)) == bytes(1000), "the newest entry is kept"
    assert sum(r[2] for r in rows(root)) == diskcache.info()["bytes"], "the kept total is the rows' total"


def test_an_entry_larger_than_the_bound_is_not_kept(root, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "100")
    diskcache.write(digest(1), bytes(1000))
    assert diskcache.read(digest(1)) is None and diskcache.info()["bytes"] == 0


def test_pruning_gives_the_space_back(root, monkeypatch):
    for i in range(40):
        diskcache.write(digest(i), os.urandom(50_000))
    big = diskcache.info()["file_bytes"]
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "100k")
    diskcache.write(digest(99), b"x")
    with diskcache._lock:
        diskcache._forget()  # the last connection folds the log into the file
    assert diskcache.info()["file_bytes"] < big / 4, "the freed pages went back to the file system"


def test_clear_deletes_rows_and_keeps_the_files(root):
    for i in range(5):
        diskcache.write(digest(i), b"k" * 100)
    names = {p.name for p in root.iterdir()}
    assert diskcache.clear() == 5
    assert diskcache.info()["entries"] == 0 and diskcache.read(digest(1)) is None
    assert {p.name for p in root.iterdir()} >= {diskcache.MARKER, "cache.db"}
    assert {p.name for p in root.iterdir()} <= names | {"cache.db-wal", "cache.db-shm"}
    assert diskcache.clear() == 0


def test_evict_deletes_one_entry(root):
    diskcache.write(digest(1), b"a")
    diskcache.write(digest(2), b"b")
    diskcache.evict(digest(1))
    diskcache.evict(digest(7))  # absent: nothing happens
    assert (diskcache.read(digest(1)), diskcache.read(digest(2))) == (None, b"b")


def test_info_and_clear_of_a_cache_not_created_yet_create_nothing(root):
    i = diskcache.info()
    assert (i["state"], i["entries"], i["path"]) == ("absent", 0, str(root))
    assert diskcache.clear() == 0
    assert not root.exists()


def test_a_bad_checksum_is_a_miss_and_the_row_is_deleted(root):
    diskcache.write(digest(1), b"good")
    with sqlite3.connect(root / diskcache.DATABASE) as db:
        db.execute("UPDATE entries SET payload = ?", (b"evil",))
    db.close()
    assert diskcache.read(digest(1)) is None and rows(root) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [("1GB", 10**9), ("500M", 500 * 10**6), ("2GiB", 2 << 30), ("4096", 4096), ("", diskcache.DEFAULT_LIMIT)],
)
def test_the_bound_is_read_as_users_write_it(root, monkeypatch, text, value):
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", text)
    assert diskcache.limit() == value and diskcache.info()["limit"] == value


def test_a_bad_bound_is_a_config_error_to_callers_and_one_warning_to_a_compile(root, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ConfigError, match="UOPGRAD_CACHE_MAX_BYTES='lots'"):
        diskcache.limit()
    with pytest.warns(RuntimeWarning, match="UOPGRAD_CACHE_MAX_BYTES.*default") as caught:
        assert Compiler().compile_cached("kernel") == b"kernel"
        assert Compiler().compile_cached("kernel two") == b"kernel two"
    assert len(caught) == 1
    assert diskcache.read(Compiler()._digest("kernel")) == b"kernel", "the default bound was used"
    assert "UOPGRAD_CACHE_MAX_BYTES" in diskcache.info()["limit_error"]


def test_threads_share_the_cache(root):
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(30):
                diskcache.write(digest(t * 100 + i), f"{t}:{i}".encode())
                assert diskcache.read(digest(t * 100 + i)) == f"{t}:{i}".encode()
        except BaseException as e:  # handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and diskcache.info()["entries"] == 240


def _child_writes(q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    diskcache.write(digest(2), b"from the child")
    q.put(diskcache.read(digest(1)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_opens_its_own_connection(root):
    diskcache.write(digest(1), b"from the parent")  # the parent holds an open connection
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_writes, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and got == b"from the parent"
    assert diskcache.read(digest(2)) == b"from the child" and diskcache.read(digest(1)) == b"from the parent"


def test_an_earlier_uopgrad_s_files_are_adopted_and_left_alone(root):
    old = root / "ab" / ("ab" * 32)
    old.parent.mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    old.write_bytes(b"\0" * 32 + b"old entry")
    assert diskcache.info()["state"] == "unclaimed" and diskcache.info()["old_entries"] == 1
    diskcache.write(digest(1), b"new entry")
    diskcache.clear()
    assert old.read_bytes() == b"\0" * 32 + b"old entry", "not used, not deleted"
    i = diskcache.info()
    assert (i["state"], i["old_entries"], i["old_bytes"]) == ("ready", 1, 41)


def test_a_database_of_another_format_is_refused_not_rewritten(root):
    diskcache.write(digest(1), b"x")
    with diskcache._lock:
        diskcache._forget()
    with sqlite3.connect(root / diskcache.DATABASE) as db:
        db.execute("PRAGMA user_version = 9")
    db.close()
    with pytest.warns(RuntimeWarning, match="format 9"):
        diskcache.write(digest(2), b"y")
    with pytest.raises(ConfigError, match="format 9"):
        diskcache.info()
    with sqlite3.connect(root / diskcache.DATABASE) as db:
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (1,)
    db.close()


def test_the_command_prints_info_and_clears(root, monkeypatch, capsys):
    diskcache.write(digest(1), b"x" * 2000)
    assert diskcache.command("info") == 0
    out = capsys.readouterr().out
    assert f"compile cache: {root}" in out and "1 entries" in out and "1073.74 MB" in out
    assert diskcache.command("clear") == 0 and f"removed 1 entries from {root}" in capsys.readouterr().out
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "junk")
    assert diskcache.command("info") == 1
    assert "UOPGRAD_CACHE_MAX_BYTES='junk'" in capsys.readouterr().err


def test_the_cli_runs_the_same_command(root, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(diskcache, "command", lambda action: calls.append(action) or 0)
    from uopgrad.cli import main

    assert main(["cache", "info"]) == 0 and main(["cache", "clear"]) == 0
    assert calls == ["info", "clear"]


def test_no_warning_in_ordinary_use(root):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = Compiler()
        assert c.compile_cached("k") == b"k" and Compiler().compile_cached("k") == b"k"
        c.evict("k")
        assert diskcache.info()["entries"] == 0
