"""The on-disk cache of compiled kernels (layer 1): checked rows of one SQLite file in a directory it owns.
Beside the kernels' binaries it keeps their lowered programs (`program_store`) and the code objects of the
compiled pattern matchers (`rewrite`), under keys of their own.

Where: $UOPGRAD_CACHE_DIR, else $XDG_CACHE_HOME/uopgrad, else ~/.cache/uopgrad. The cache claims that
directory by writing a marker file into it (only when it is new, empty, or holds nothing but the
`<2 hex>/<64 hex>` files of an earlier uopgrad) and keeps every entry as a row of `cache.db` there: the
digest of what it was compiled from, a SHA-256 of the payload, its size, its last use and the payload.
SQLite makes each write atomic and safe across processes and threads. Pruning and `clear` delete rows;
the only files the cache ever deletes are its own database's, when SQLite finds it damaged.

One rule decides whether a directory is the cache, for read, write, prune, info and clear alike
(docs/decisions/0007-compile-cache-store.md): it is a real directory (not a symbolic link) of this user
that no one else may write to, it holds the marker, and the marker and the SQLite files are regular files
of this user. A kernel read from the cache runs in this process, so anything else is refused: quietly, with
one warning, in a realize (an unusable cache only costs time), and as a ConfigError from `info` and
`clear`. The payload bytes are kept under $UOPGRAD_CACHE_MAX_BYTES (default 1 GiB; `1GB`, `500M`, `2GiB`
are accepted) by deleting the rows used least recently. `uopgrad cache info|clear` and
`python -m uopgrad.diskcache info|clear` run `command`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypedDict

from uopgrad.config import getenv_bytes, getenv_path
from uopgrad.errors import ConfigError

__all__ = [
    "DATABASE",
    "DEFAULT_LIMIT",
    "MARKER",
    "Info",
    "cache_dir",
    "clear",
    "command",
    "evict",
    "info",
    "limit",
    "read",
    "write",
    "write_many",
]

DEFAULT_LIMIT = 1 << 30
MARKER = "OWNED-BY-UOPGRAD"  # the file that says the directory is the cache (its name tells a user why)
DATABASE = "cache.db"
_MAGIC = (
    b"uopgrad compile cache, format 1\n"
    b"This directory is uopgrad's cache of compiled kernels: they are rows of cache.db here.\n"
    b"uopgrad changes nothing else in it. `uopgrad cache info|clear` shows or empties it.\n"
)
_SQLITE_FILES = (DATABASE, DATABASE + "-wal", DATABASE + "-shm", DATABASE + "-journal")
_FORMAT = 1  # PRAGMA user_version of the database
_TOUCH_AFTER = 60.0  # a read records its use when the last one is older: LRU to the minute, few writes
_BUSY_TIMEOUT = 30.0  # seconds a process waits for another one's write
_HEX = frozenset("0123456789abcdef")
# SQLite's result codes for a file that is not (or no longer) a database
_DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB

_lock = threading.RLock()  # one connection per process, used by one thread at a time
# (database path, its (device, inode), pid, connection): at most one
_conn: list[tuple[str, tuple[int, int], int, sqlite3.Connection]] = []
_inherited: list[sqlite3.Connection] = []  # a forked parent's connection: never used, never closed here
_warned: set[str] = set()
# directories refused in this process: read, write and evict skip them without listing them again (a project
# or home directory can hold many files); `info` and `clear` check afresh
_refused: set[str] = set()


class _Refused(Exception):
    """The directory is not one the cache may use; the message says why and what to do."""


def cache_dir() -> Path:
    """The cache directory: $UOPGRAD_CACHE_DIR, else $XDG_CACHE_HOME/uopgrad, else ~/.cache/uopgrad."""
    if (env := getenv_path("UOPGRAD_CACHE_DIR")) is not None:
        return env
    xdg = getenv_path("XDG_CACHE_HOME")
    return (xdg if xdg is not None and xdg.is_absolute() else Path.home() / ".cache") / "uopgrad"


def limit() -> int:
    """The size bound in bytes ($UOPGRAD_CACHE_MAX_BYTES); a bad value is a ConfigError naming it."""
    return getenv_bytes("UOPGRAD_CACHE_MAX_BYTES", DEFAULT_LIMIT)


# ---------------------------------------------------------------------- the one rule
# Paths are strings here: these checks run at every read and write, and pathlib costs more than the lstat.
def _check_dir(root: str) -> None:
    """Raises _Refused unless `root` is a real directory of this user that no one else may write to
    (FileNotFoundError where it does not exist)."""
    st = os.lstat(root)
    fix = "set UOPGRAD_CACHE_DIR to a new or empty directory of your own"
    if stat.S_ISLNK(st.st_mode):
        raise _Refused(f"{root} is a symbolic link (the cache follows none); {fix}, or to the link's target")
    if not stat.S_ISDIR(st.st_mode):
        raise _Refused(f"{root} is not a directory; remove it or {fix}")
    if st.st_uid != os.geteuid():
        raise _Refused(
            f"{root} is owned by uid {st.st_uid}, not this user (a kernel read from it would run "
            f"in this process); {fix}"
        )
    if st.st_mode & 0o022:
        raise _Refused(
            f"{root} can be written by other users (a kernel read from it would run in this "
            f"process); run `chmod go-w {root}` or {fix}"
        )


def _check_file(root: str, name: str) -> os.stat_result | None:
    """The cache's own file `name` in `root` (None where it does not exist); raises _Refused where it is
    anything but a regular file of this user (a symbolic link is never followed)."""
    try:
        st = os.lstat(os.path.join(root, name))
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        what = (
            "a symbolic link"
            if stat.S_ISLNK(st.st_mode)
            else "not a regular file"
            if not stat.S_ISREG(st.st_mode)
            else f"owned by uid {st.st_uid}"
        )
        raise _Refused(
            f"{os.path.join(root, name)} is {what}, so the cache in {root} is not used (it "
            f"follows no link and writes no file it did not create); remove {name} or set "
            f"UOPGRAD_CACHE_DIR to a new or empty directory"
        )
    return st


_marker_ok: set[tuple[int, int, int, int]] = set()  # markers already read: (device, inode, mtime, size)


def _marked(root: str) -> bool:
    """Whether `root` holds the cache's marker; raises _Refused for a marker the cache did not write."""
    if (st := _check_file(root, MARKER)) is None:
        return False
    if (ident := (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)) in _marker_ok:
        return True
    path = os.path.join(root, MARKER)
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
        if f.read(len(_MAGIC) + 1) != _MAGIC:
            raise _Refused(
                f"{path} was not written by this uopgrad (a newer format, or a file of yours); "
                f"set UOPGRAD_CACHE_DIR to a new or empty directory"
            )
    _marker_ok.add(ident)
    return True


def _is_old_entry(e: os.DirEntry[str]) -> bool:
    return e.is_file(follow_symlinks=False) and (
        (len(e.name) == 64 and set(e.name) <= _HEX) or e.name.startswith(".tmp-")
    )


def _is_shard(e: os.DirEntry[str]) -> bool:
    return len(e.name) == 2 and set(e.name) <= _HEX and e.is_dir(follow_symlinks=False)


def _old_shards(root: str) -> Iterator[tuple[str, list[os.DirEntry[str]]]]:
    """The `<2 hex>` directories of `root` (links not followed) with their entries."""
    with os.scandir(root) as top:
        shards = [e for e in top if _is_shard(e)]
    for shard in shards:
        with os.scandir(shard.path) as files:
            yield shard.name, list(files)


def _old_entries(root: str) -> list[os.DirEntry[str]]:
    """The files an earlier uopgrad's cache left in `root` (`<2 hex>/<64 hex>`, `.tmp-*`)."""
    return [f for _, files in _old_shards(root) for f in files if _is_old_entry(f)]


def _foreign(root: str) -> str | None:
    """A name in the unmarked `root` that the cache did not write (None: it holds nothing, or only an
    earlier uopgrad's entries, so the cache may claim it)."""
    for name, files in _old_shards(root):
        if (bad := next((f.name for f in files if not _is_old_entry(f)), None)) is not None:
            return f"{name}/{bad}"
    with os.scandir(root) as top:
        for e in top:  # `.MARKER.*`: another process claiming it right now
            if not (e.name.startswith("." + MARKER) or _is_shard(e)):
                return e.name
    return None


def _claim(root: str) -> None:
    """Write the marker into `root` (all at once, so another process never reads half of it)."""
    tmp = os.path.join(root, f".{MARKER}.{os.getpid()}.{threading.get_ident()}")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb") as f:
        f.write(_MAGIC)
    os.replace(tmp, os.path.join(root, MARKER))  # racing claimers write the same bytes


def _own(root: str, create: bool) -> bool:
    """The rule, part 1: whether `root` is the cache's directory (creating and claiming it when `create`);
    False where it is absent or not claimed yet. Raises _Refused for a directory the cache may not use."""
    try:
        _check_dir(root)
    except FileNotFoundError:
        if not create:
            return False
        try:
            os.makedirs(os.path.dirname(root) or ".", exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(root, 0o700)
        except OSError as e:
            raise _Refused(
                f"{root} can't be created ({e.strerror}); set UOPGRAD_CACHE_DIR to a writable directory"
            ) from None
        _check_dir(root)
    if _marked(root):
        return True
    # marked again: a racing claimer writes the marker before the database
    if (name := _foreign(root)) is not None and not _marked(root):
        raise _Refused(
            f"{root} is not uopgrad's cache: it has no {MARKER} file and holds {name!r}, "
            f"which uopgrad did not write (it deletes nothing of yours); set "
            f"UOPGRAD_CACHE_DIR to a new or empty directory"
        )
    if not create:
        return False
    _claim(root)
    return _marked(root)


def _database(root: str) -> os.stat_result | None:
    """The rule, part 2 (in a directory `_own` accepted): the database and its journals are regular files of
    this user; returns the database's stat (None: not created yet)."""
    for name in _SQLITE_FILES[1:]:
        _check_file(root, name)
    return _check_file(root, DATABASE)


# ---------------------------------------------------------------------- the database
def _connect(root: str, create: bool) -> sqlite3.Connection | None:
    """The connection to `root`'s database after checking the rule (None: no cache there yet)."""
    if not _own(root, create):
        return None
    db = os.path.join(root, DATABASE)
    if (st := _database(root)) is None:
        if not create:
            return None
        with contextlib.suppress(FileExistsError):
            os.close(os.open(db, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        if (st := _database(root)) is None:
            return None
    ident = (st.st_dev, st.st_ino)  # a database replaced since (damaged, deleted) is opened anew
    for key, known, pid, conn in _conn:
        if key == db and known == ident and pid == os.getpid():
            return conn
    _forget()
    conn = sqlite3.connect(db, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
    try:
        _init(conn)
    except BaseException:
        conn.close()
        raise
    _conn.append((db, ident, os.getpid(), conn))
    return conn


def _forget() -> None:
    """Drop the open connection (a forked child keeps its parent's one alive but never touches it)."""
    for _, _, pid, conn in _conn:
        if pid == os.getpid():
            conn.close()
        else:
            _inherited.append(conn)
    _conn.clear()


_SCHEMA = (
    "CREATE TABLE entries (digest TEXT PRIMARY KEY, sha256 BLOB NOT NULL, size INTEGER NOT NULL, "
    "used REAL NOT NULL, payload BLOB NOT NULL)",
    "CREATE INDEX entries_used ON entries (used)",
    # the payloads' total, kept by triggers in the writer's transaction: checking the bound costs one row
    "CREATE TABLE total (bytes INTEGER NOT NULL)",
    "INSERT INTO total VALUES (0)",
    "CREATE TRIGGER entries_add AFTER INSERT ON entries BEGIN UPDATE total SET bytes = bytes + new.size; END",
    "CREATE TRIGGER entries_del AFTER DELETE ON entries BEGIN UPDATE total SET bytes = bytes - old.size; END",
    "CREATE TRIGGER entries_upd AFTER UPDATE OF size ON entries "
    "BEGIN UPDATE total SET bytes = bytes - old.size + new.size; END",
    f"PRAGMA user_version = {_FORMAT}",
)


def _init(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA synchronous = NORMAL")  # a power cut may lose the last entries, never corrupt
    conn.execute("PRAGMA journal_size_limit = 4194304")
    if (version := conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table: pruned pages go back
        with contextlib.suppress(sqlite3.OperationalError):  # e.g. a network file system: no shared memory
            conn.execute("PRAGMA journal_mode = WAL").fetchone()  # readers never wait for a writer (kept)
        with _transaction(conn):
            if (version := conn.execute("PRAGMA user_version").fetchone()[0]) == 0:  # no one was quicker
                for statement in _SCHEMA:  # one by one: executescript would commit half way
                    conn.execute(statement)
                version = _FORMAT
    if version != _FORMAT:
        raise _Refused(
            f"{DATABASE} has format {version}, not {_FORMAT}: another uopgrad version writes it; "
            f"set UOPGRAD_CACHE_DIR to use a cache of your own for this one"
        )


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken at once so two processes never both wait to upgrade a read lock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"uopgrad: {message}", RuntimeWarning, stacklevel=4)


def _damaged(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    return code in _DAMAGED if code is not None else "malformed" in str(e) or "not a database" in str(e)


def _trouble(root: str, e: Exception) -> None:
    """An operation failed: warn once; a damaged database is deleted (its own files only, checked by the
    rule), so the next write starts a new one."""
    _forget()
    if isinstance(e, _Refused):
        _refused.add(root)
        _warn_once(root, f"not using the compile cache: {e}")
        return
    if isinstance(e, sqlite3.Error) and _damaged(e):
        with contextlib.suppress(_Refused, OSError):
            if _own(root, create=False) and _database(root) is not None:  # the rule: its own regular files
                for name in _SQLITE_FILES:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(root, name))
        _warn_once(
            f"{root}:damaged",
            f"the compile cache {os.path.join(root, DATABASE)} was damaged ({e}); "
            f"it is deleted and a new one is started (nothing else in {root} is "
            f"touched)",
        )
        return
    _warn_once(
        f"{root}:error",
        f"the compile cache in {root} failed ({type(e).__name__}: {e}); kernels are "
        f"compiled again until it works (check the disk, or set UOPGRAD_CACHE_DIR)",
    )


def _bound() -> int:
    """limit(), or the default with one warning: a bad value must not stop a compile."""
    try:
        return limit()
    except ConfigError as e:
        _warn_once("UOPGRAD_CACHE_MAX_BYTES", f"{e}; using the default {DEFAULT_LIMIT} bytes")
        return DEFAULT_LIMIT


# ---------------------------------------------------------------------- what other modules call
def read(digest: str) -> bytes | None:
    """The payload stored under `digest`, or None (missing, unusable cache, or a bad checksum: deleted)."""
    root = str(cache_dir())
    with _lock:
        try:
            conn = None if root in _refused else _connect(root, create=False)
            if conn is None:
                return None
            row = conn.execute(
                "SELECT sha256, used, payload FROM entries WHERE digest = ?", (digest,)
            ).fetchone()
            if row is None:
                return None
            sha, used, payload = row
            if hashlib.sha256(payload).digest() != sha:
                conn.execute("DELETE FROM entries WHERE digest = ?", (digest,))
                return None
            if (now := time.time()) - used > _TOUCH_AFTER:  # recently used: pruning deletes the oldest first
                conn.execute("UPDATE entries SET used = ? WHERE digest = ?", (now, digest))
            return bytes(payload)
        except (_Refused, OSError, sqlite3.Error) as e:
            _trouble(root, e)
            return None


def write(digest: str, payload: bytes) -> None:
    """Store `payload` under `digest` and keep the cache under its bound (an unusable cache only costs
    time)."""
    write_many([(digest, payload)])


def write_many(entries: Sequence[tuple[str, bytes]]) -> None:
    """`write` of each (digest, payload) in one transaction: a realize's new kernels are stored at once (one
    commit, not one per kernel: 42 kernels took 58 ms one by one)."""
    if not entries:
        return
    root, bound = str(cache_dir()), _bound()
    with _lock:
        try:
            conn = None if root in _refused else _connect(root, create=True)
            if conn is None:
                return
            now = time.time()
            with _transaction(conn):
                conn.executemany(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO UPDATE SET "
                    "sha256 = excluded.sha256, size = excluded.size, used = excluded.used, "
                    "payload = excluded.payload",
                    [(d, hashlib.sha256(p).digest(), len(p), now, p) for d, p in entries],
                )
                pruned = _prune(conn, bound)
            if pruned:
                _vacuum(conn)
        except (_Refused, OSError, sqlite3.Error) as e:
            _trouble(root, e)


def _prune(conn: sqlite3.Connection, bound: int) -> bool:
    """Delete the rows used least recently until the payloads total at most `bound` bytes (in the caller's
    transaction); whether any went."""
    excess = conn.execute("SELECT bytes FROM total").fetchone()[0] - bound
    if excess <= 0:
        return False
    doomed = []
    for digest, size in conn.execute("SELECT digest, size FROM entries ORDER BY used, digest"):
        if excess <= 0:
            break
        doomed.append((digest,))
        excess -= size
    conn.executemany("DELETE FROM entries WHERE digest = ?", doomed)
    return True


def _vacuum(conn: sqlite3.Connection) -> None:
    """Give the pages of deleted rows back to the file system (outside a transaction: `execute` of this
    pragma frees one page per call, `executescript` all of them)."""
    conn.executescript("PRAGMA incremental_vacuum;")


def evict(digest: str) -> None:
    """Delete the entry of `digest` (one that failed to load is compiled again)."""
    root = str(cache_dir())
    with _lock:
        try:
            if root not in _refused and (conn := _connect(root, create=False)) is not None:
                conn.execute("DELETE FROM entries WHERE digest = ?", (digest,))
        except (_Refused, OSError, sqlite3.Error) as e:
            _trouble(root, e)


class Info(TypedDict):
    """What `info` reports."""

    path: str
    state: str  # "absent", "unclaimed" (a directory the cache may claim at its first write), "ready"
    entries: int
    bytes: int  # the payloads' total, kept under `limit`
    file_bytes: int  # the database's files on disk
    limit: int
    limit_error: str  # why $UOPGRAD_CACHE_MAX_BYTES is not a size ("" when it is): the default is used
    old_entries: int  # files an earlier uopgrad left in `<2 hex>/` directories (not used, not deleted)
    old_bytes: int


@contextlib.contextmanager
def _for_user(root: str, what: str) -> Iterator[None]:
    """Under the lock; a refusal or failure of `what` (the CLI's info or clear) is a ConfigError saying so."""
    with _lock:
        try:
            yield
        except _Refused as e:
            raise ConfigError(f"not {what} the compile cache: {e}") from None
        except (OSError, sqlite3.Error) as e:
            _forget()
            raise ConfigError(
                f"{what} the compile cache in {root} failed ({type(e).__name__}: {e}); set "
                f"UOPGRAD_CACHE_DIR to use another directory"
            ) from None


def info() -> Info:
    """Where the cache is, its state, entries, sizes and bound. Raises ConfigError for a directory it may
    not use."""
    root = str(cache_dir())
    try:
        bound, bound_error = limit(), ""
    except ConfigError as e:
        bound, bound_error = DEFAULT_LIMIT, str(e)
    out = Info(
        path=root,
        state="absent",
        entries=0,
        bytes=0,
        file_bytes=0,
        limit=bound,
        limit_error=bound_error,
        old_entries=0,
        old_bytes=0,
    )
    with _for_user(root, "reading"):
        if _own(root, create=False):
            out["state"] = "ready"
            if (conn := _connect(root, create=False)) is not None:
                out["entries"] = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
                out["bytes"] = conn.execute("SELECT bytes FROM total").fetchone()[0]
                out["file_bytes"] = sum(
                    st.st_size for n in _SQLITE_FILES if (st := _check_file(root, n)) is not None
                )
        elif os.path.isdir(root):
            out["state"] = "unclaimed"
        if out["state"] != "absent":
            old = [e.stat(follow_symlinks=False).st_size for e in _old_entries(root)]
            out["old_entries"], out["old_bytes"] = len(old), sum(old)
    return out


def clear() -> int:
    """Delete every entry (rows: no file is removed); returns how many there were. Raises ConfigError for a
    directory the cache may not use."""
    root = str(cache_dir())
    with _for_user(root, "clearing"):
        if (conn := _connect(root, create=False)) is None:
            return 0
        with _transaction(conn):
            n: int = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
            conn.execute("DELETE FROM entries")
        _vacuum(conn)
        with contextlib.suppress(sqlite3.OperationalError):  # busy readers: the log shrinks later
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return n


# ---------------------------------------------------------------------- the command line
def command(action: str) -> int:
    """`uopgrad cache info|clear` and `python -m uopgrad.diskcache info|clear`: print, return the status."""
    try:
        if action == "clear":
            print(f"removed {clear()} entries from {cache_dir()}")
            return 0
        i = info()
    except ConfigError as e:
        print(f"uopgrad: {e}", file=sys.stderr)
        return 1
    note = {"absent": " (not created yet)", "unclaimed": " (not used yet)"}.get(i["state"], "")
    print(f"compile cache: {i['path']}{note}")
    print(
        f"  {i['entries']} entries, {i['bytes'] / 1e6:.2f} MB of at most {i['limit'] / 1e6:.2f} MB "
        f"({DATABASE}: {i['file_bytes'] / 1e6:.2f} MB on disk)"
    )
    if i["old_entries"]:
        print(
            f"  {i['old_entries']} files ({i['old_bytes'] / 1e6:.2f} MB) of an earlier uopgrad in its "
            f"<2 hex>/ directories: not used, and not deleted by uopgrad; remove them by hand"
        )
    print(
        "  set UOPGRAD_CACHE_DIR to move it, UOPGRAD_CACHE_MAX_BYTES to bound it; `uopgrad cache clear` "
        "empties it"
    )
    if i["limit_error"]:
        print(f"uopgrad: {i['limit_error']} (the default {DEFAULT_LIMIT} bytes is used)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 or (sys.argv[1:] or ["info"])[0] not in ("info", "clear"):
        sys.exit("usage: python -m uopgrad.diskcache [info|clear]")
    from uopgrad.diskcache import command as _command  # the module the rest of uopgrad uses, not this copy

    sys.exit(_command((sys.argv[1:] or ["info"])[0]))
