"""Hostile file systems for the compile cache (spec/errors.md): $UOPGRAD_CACHE_DIR pointed at a project,
symbolic links to a victim, a file or another user's directory where the cache should be, damaged or full
databases, two processes at once, sizes as users write them. Whatever the case, nothing the cache did not
write is changed or deleted, a compile still works (an unusable cache costs time and one warning), and
`info`/`clear` refuse a directory that is not the cache with a ConfigError naming it. All in temporary
directories. `HOSTILE_STATS` (spec/test_hostile.py) counts the cases by class "filesystem"."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_hostile import HOSTILE_STATS

from uopgrad import diskcache
from uopgrad.backend import Compiler
from uopgrad.errors import ConfigError

CASES: Counter[str] = Counter()  # the filesystem cases by kind, for the report


def case(kind: str) -> None:
    HOSTILE_STATS["filesystem"] += 1
    CASES[kind] += 1


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch):
    """Each case warns afresh and leaves no connection open."""
    monkeypatch.setattr(diskcache, "_warned", set())
    monkeypatch.setattr(diskcache, "_refused", set())
    monkeypatch.delenv("UOPGRAD_CACHE_MAX_BYTES", raising=False)
    yield
    with diskcache._lock:
        diskcache._forget()


def snapshot(top: Path) -> dict[str, tuple[str, str]]:
    """Every path under `top` (links not followed) with its kind and content (or link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(top))] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p.relative_to(top))] = ("dir", oct(p.stat().st_mode))
            else:
                out[str(p.relative_to(top))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def project(top: Path) -> Path:
    """A user's project directory: sources, a database, hex-named folders, a git directory."""
    for rel, text in {
        "js/app.js": "console.log(1)",
        "db/data.sqlite": "SQLite format 3\0rows",
        "README.md": "# mine",
        "ab/notes.txt": "not a cache entry",
        ".git/config": "[core]",
        "cd/" + "cd" * 32: "looks like an entry, is in a project",
    }.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    return top


def victim(home: Path) -> Path:
    """~/victim: files that must survive whatever the cache does."""
    v = home / "victim"
    v.mkdir(parents=True)
    (v / "thesis.tex").write_text("years of work")
    (v / ("ee" * 32)).write_bytes(b"\0" * 32 + b"named like an entry")
    return v


def compile_some(n: int = 5, tag: str = "") -> None:
    """What a realize does: compile through the cache (the base Compiler's `compile` is the identity)."""
    for i in range(n):
        src = f"kernel {tag} {i} {os.urandom(4).hex()}"
        assert Compiler().compile_cached(src) == src.encode()


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def assert_refused_everywhere(root: Path, why: str) -> None:
    """A compile works with one warning; info and clear (API, `uopgrad cache`, `python -m
    uopgrad.diskcache`) refuse with a message naming the directory."""
    with pytest.warns(RuntimeWarning, match=why) as caught:
        compile_some(3)
        compile_some(2)
    assert len(caught) == 1, [str(w.message) for w in caught]
    for fn in (diskcache.info, diskcache.clear):
        with pytest.raises(ConfigError, match=why):
            fn()
    env = {"UOPGRAD_CACHE_DIR": str(root), "UOPGRAD_CACHE_MAX_BYTES": "1"}
    for args in (
        ("-m", "uopgrad", "cache", "clear"),
        ("-m", "uopgrad.diskcache", "clear"),
        ("-m", "uopgrad", "cache", "info"),
    ):
        out = cli(*args, env=env)
        assert out.returncode == 1 and str(root) in out.stderr and "removed" not in out.stdout, out


def test_a_project_directory_is_refused_and_nothing_of_it_is_deleted(tmp_path, monkeypatch):
    root = project(tmp_path / "myproject")
    before = snapshot(root)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "1")  # over the bound at every write
    assert_refused_everywhere(root, "not uopgrad's cache")
    assert snapshot(root) == before
    case("project directory as the cache")


def test_a_directory_of_only_hex_folders_with_other_files_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "looks-old"
    (root / "ab").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    (root / "ab" / ("ab" * 32)).write_bytes(b"an old entry")
    (root / "ab" / "data.csv").write_text("1,2,3")
    before = snapshot(root)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    assert_refused_everywhere(root, "data.csv")
    assert snapshot(root) == before
    case("old-looking tree with a user file")


@pytest.mark.parametrize("target", ["victim", "a real cache"])
def test_a_symlinked_root_is_refused(tmp_path, monkeypatch, target):
    v = victim(tmp_path / "home")
    if target == "a real cache":  # even a link to a good cache: links are never followed
        monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(v))
        with pytest.warns(RuntimeWarning, match="not uopgrad's cache"):
            compile_some(1)
        v = tmp_path / "real-cache"
        monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(v))
        compile_some(2)
        with diskcache._lock:
            diskcache._forget()
    before = snapshot(v)
    link = tmp_path / "cache-link"
    link.symlink_to(v, target_is_directory=True)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(link))
    monkeypatch.setattr(diskcache, "_warned", set())
    monkeypatch.setattr(diskcache, "_refused", set())
    assert_refused_everywhere(link, "symbolic link")
    assert snapshot(v) == before
    case(f"symlinked root to {target}")


def test_symlinked_shards_and_entries_inside_the_cache_are_never_followed(tmp_path, monkeypatch):
    v = victim(tmp_path / "home")
    secret = tmp_path / "home" / "secret.key"
    secret.write_text("private")
    before = snapshot(tmp_path / "home")
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    compile_some(2)
    (root / "zz").symlink_to(v, target_is_directory=True)  # the review's case
    (root / "ee").symlink_to(v, target_is_directory=True)
    (root / "ab").mkdir(mode=0o700)
    (root / "ab" / ("ab" * 32)).symlink_to(secret)
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "10")
    compile_some(20)  # pruning all the way
    i = diskcache.info()
    assert i["bytes"] <= 10 and i["old_entries"] == 0, "a link is no entry"
    assert diskcache.clear() >= 0
    assert cli("-m", "uopgrad", "cache", "clear", env={"UOPGRAD_CACHE_DIR": str(root)}).returncode == 0
    assert snapshot(tmp_path / "home") == before
    assert (root / "zz").is_symlink() and (root / "ab" / ("ab" * 32)).is_symlink()
    case("symlinked shard and entry inside the cache")


def test_a_symlinked_entry_in_an_unclaimed_tree_is_refused(tmp_path, monkeypatch):
    secret = tmp_path / "secret.key"
    secret.write_text("private")
    root = tmp_path / "cache"
    (root / "ab").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    (root / "ab" / ("ab" * 32)).symlink_to(secret)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    assert_refused_everywhere(root, "not uopgrad's cache")
    assert secret.read_text() == "private" and (root / "ab" / ("ab" * 32)).is_symlink()
    case("symlinked entry in an unclaimed tree")


@pytest.mark.parametrize(
    "name", [diskcache.DATABASE, diskcache.DATABASE + "-wal", diskcache.DATABASE + "-shm", diskcache.MARKER]
)
def test_a_symlinked_database_file_or_marker_is_refused(tmp_path, monkeypatch, name):
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    compile_some(2)
    with diskcache._lock:
        diskcache._forget()  # the database is closed: its log and shared memory files are gone
    target = tmp_path / "victim.db"
    target.write_bytes((root / name).read_bytes() if (root / name).exists() else b"my data")
    (root / name).unlink(missing_ok=True)
    (root / name).symlink_to(target)
    before = target.read_bytes()
    assert_refused_everywhere(root, "symbolic link")
    assert target.read_bytes() == before and (root / name).is_symlink()
    case(f"symlinked {name}")


def test_a_file_where_the_cache_should_be_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.write_text("my notes")
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    assert_refused_everywhere(root, "not a directory")
    assert root.read_text() == "my notes"
    case("a file where the root should be")


def _someone_else(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` another user's: chown where we may (root), else this process pretends another uid."""
    try:
        os.chown(path, os.geteuid() + 4242, -1, follow_symlinks=False)
    except PermissionError:
        uid = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: uid + 4242)


@pytest.mark.parametrize(
    "how",
    [
        "another user's root",
        "group-writable root",
        "world-writable root",
        "another user's marker",
        "another user's database",
    ],
)
def test_a_cache_others_can_change_is_refused(tmp_path, monkeypatch, how):
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    compile_some(2)
    with diskcache._lock:
        diskcache._forget()
    if how == "group-writable root":
        root.chmod(0o770)
    elif how == "world-writable root":
        root.chmod(0o777)
    else:
        target = {
            "another user's root": root,
            "another user's marker": root / diskcache.MARKER,
            "another user's database": root / diskcache.DATABASE,
        }[how]
        if target != root and os.geteuid() != 0:
            pytest.skip("only root can give one file away")
        _someone_else(target, monkeypatch)
    before = snapshot(root)
    assert_refused_everywhere(root, "owned by uid|can be written by other users")
    assert snapshot(root) == before
    case(how)


def _writer(root: str, seed: int, n: int) -> None:
    os.environ["UOPGRAD_CACHE_DIR"] = root
    os.environ["UOPGRAD_CACHE_MAX_BYTES"] = "60k"
    for i in range(n):
        diskcache.write(f"{seed:02d}{i:062x}", os.urandom(2000 + 100 * (i % 7)))
        diskcache.read(f"{(seed + 1) % 2:02d}{i:062x}")


def test_two_processes_writing_and_pruning_at_once_keep_the_cache_whole(tmp_path):
    root = tmp_path / "cache"
    (tmp_path / "mine.txt").write_text("beside the cache")
    ctx = multiprocessing.get_context("spawn")  # separate interpreters, as pytest-xdist workers are
    procs = [ctx.Process(target=_writer, args=(str(root), k, 150)) for k in range(2)]
    [p.start() for p in procs]
    [p.join(300) for p in procs]
    assert [p.exitcode for p in procs] == [0, 0]
    with sqlite3.connect(root / diskcache.DATABASE) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = db.execute("SELECT sha256, size, payload FROM entries").fetchall()
        total = db.execute("SELECT bytes FROM total").fetchone()[0]
    db.close()
    assert all(sha == hashlib.sha256(p).digest() and size == len(p) for sha, size, p in rows)
    assert total == sum(size for _, size, _ in rows) <= 60_000 and rows
    assert (root / diskcache.DATABASE).stat().st_size < 400_000, "the file stays near the bound"
    assert (tmp_path / "mine.txt").read_text() == "beside the cache"
    case("two processes writing and pruning")


@pytest.mark.parametrize("damage", ["junk", "truncated", "emptied header"])
def test_a_damaged_database_is_a_miss_and_is_recreated(tmp_path, monkeypatch, damage):
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    for i in range(30):
        diskcache.write(f"{i:064x}", os.urandom(5000))
    with diskcache._lock:
        diskcache._forget()
    (root / "mine.txt").write_text("a user file in the cache directory")
    db = root / diskcache.DATABASE
    if damage == "junk":
        with open(db, "r+b") as f:
            f.write(os.urandom(8192))
    elif damage == "truncated":
        os.truncate(db, db.stat().st_size // 2)
    else:
        with open(db, "r+b") as f:
            f.write(b"\0" * 100)
    with pytest.warns(RuntimeWarning, match="damaged") as caught:
        assert all(diskcache.read(f"{i:064x}") is None for i in (3, 28))
        compile_some(3)
    assert len(caught) == 1
    assert diskcache.info()["entries"] == 3 and (root / "mine.txt").read_text().startswith("a user file")
    case(f"{damage} database")


def test_a_damaged_entry_is_a_miss_and_only_its_row_goes(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    diskcache.write("aa" * 32, b"good")
    diskcache.write("bb" * 32, b"also good")
    with sqlite3.connect(root / diskcache.DATABASE) as db:
        db.execute("UPDATE entries SET payload = substr(payload, 1, 2) WHERE digest = ?", ("aa" * 32,))
    db.close()
    assert diskcache.read("aa" * 32) is None and diskcache.read("bb" * 32) == b"also good"
    assert diskcache.info()["entries"] == 1
    case("damaged entry")


@pytest.mark.parametrize(
    ("text", "value"), [("1GB", 10**9), ("500M", 500 * 10**6), ("2GiB", 2 << 30), ("1.5 GiB", 3 << 29)]
)
def test_sizes_as_users_write_them_do_not_break_a_compile(tmp_path, monkeypatch, text, value):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", text)
    compile_some(2)  # no warning: the filter turns one into an error
    assert diskcache.info()["limit"] == value and diskcache.info()["entries"] == 2
    case(f"UOPGRAD_CACHE_MAX_BYTES={text}")


@pytest.mark.parametrize("junk", ["lots", "-5", "1 GBB", "0x10"])
def test_a_junk_size_warns_once_and_the_compile_goes_on(tmp_path, monkeypatch, junk):
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", junk)
    with pytest.warns(RuntimeWarning, match="UOPGRAD_CACHE_MAX_BYTES") as caught:
        compile_some(3)
    assert len(caught) == 1 and diskcache.info()["limit"] == diskcache.DEFAULT_LIMIT
    env = {"UOPGRAD_CACHE_DIR": str(root), "UOPGRAD_CACHE_MAX_BYTES": junk}
    out = cli("-m", "uopgrad", "cache", "info", env=env)
    assert out.returncode == 1 and "UOPGRAD_CACHE_MAX_BYTES" in out.stderr and "3 entries" in out.stdout
    case(f"UOPGRAD_CACHE_MAX_BYTES={junk!r}")


def test_a_junk_size_does_not_break_a_real_realize(tmp_path, monkeypatch):
    cpu = pytest.importorskip("uopgrad_cpu")
    import numpy as np

    from uopgrad import Device, Tensor

    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UOPGRAD_CACHE_MAX_BYTES", "1GBB")
    monkeypatch.setitem(Device._instances, "CPU:77", cpu.CPUBackend("CPU:77"))
    with pytest.warns(RuntimeWarning, match="UOPGRAD_CACHE_MAX_BYTES"):
        got = (Tensor([1.0, 2.0], device="CPU:77") * 3 + 0.25).numpy()
    np.testing.assert_equal(got, [3.25, 6.25])
    case("junk size in a CPU realize")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_only_costs_time(tmp_path, monkeypatch):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(parent / "cache"))
    try:
        with pytest.warns(RuntimeWarning, match="can't be created"):
            compile_some(2)
    finally:
        parent.chmod(0o700)
    case("read-only parent directory")


def test_a_directory_that_cannot_be_created_only_costs_time(tmp_path, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "ro" / "cache"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")  # what a read-only parent answers

    monkeypatch.setattr(os, "makedirs", refuse)
    with pytest.warns(RuntimeWarning, match="can't be created"):
        compile_some(2)
    assert not (tmp_path / "ro").exists()
    case("read-only parent (simulated)")


def test_a_full_disk_only_costs_time_and_keeps_what_was_written(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(root))
    diskcache.write("aa" * 32, b"kept")
    with diskcache._lock:
        [(_, _, _, conn)] = diskcache._conn
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # SQLite's own "database or disk is full"
    with pytest.warns(RuntimeWarning, match="full") as caught:
        diskcache.write("bb" * 32, os.urandom(200_000))
        diskcache.write("cc" * 32, os.urandom(200_000))
    assert len(caught) == 1
    assert diskcache.read("aa" * 32) == b"kept" and diskcache.read("bb" * 32) is None
    assert {p.name for p in root.iterdir()} >= {diskcache.MARKER, diskcache.DATABASE}
    case("disk full")


def test_a_failing_os_write_only_costs_time(tmp_path, monkeypatch):
    monkeypatch.setenv("UOPGRAD_CACHE_DIR", str(tmp_path / "cache"))

    def full(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "open", full)  # the marker and the database file can't be created
    with pytest.warns(RuntimeWarning, match="No space left"):
        compile_some(2)
    case("disk full at creation (simulated)")


def test_zz_report_counts():
    print(f"\nhostile filesystem cases: {HOSTILE_STATS['filesystem']}, {dict(CASES)}")
    assert HOSTILE_STATS["filesystem"] > 0
