"""The on-disk cache of compiled kernels (layer 1): checked entries in a private, bounded directory.

Where: $UOPGRAD_CACHE_DIR, else $XDG_CACHE_HOME/uopgrad, else ~/.cache/uopgrad. An entry is a file named by
the digest of what it was compiled from, holding a SHA-256 of its payload and the payload; it is written to a
temporary file and renamed into place, so a reader never sees half an entry. The cache is only used when the
directory belongs to this user and nobody else can write to it: another user's entry would be loaded and
run. Its total size is kept under $UOPGRAD_CACHE_MAX_BYTES (default 1 GiB) by removing the entries used
least recently (checked every 64th write of a process, and at its first one when no process checked within
ten minutes). `python -m uopgrad.diskcache [info|clear]` shows or empties it.
"""
from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

__all__ = ["DEFAULT_LIMIT", "cache_dir", "clear", "evict", "info", "limit", "read", "write"]

DEFAULT_LIMIT = 1 << 30
_PRUNE_EVERY = 64  # writes between two size checks (a check lists the whole directory)
# a process's first write checks the size only when no check ran for this long: listing a big cache costs
# seconds, which a short process that compiles one kernel would otherwise pay every time. The time of the
# last check is a stamp file beside the cache (inside it there are checked entries only).
_PRUNE_AGE = 600.0
_state = {"writes": 0}
_warned: set[str] = set()
_lock = threading.Lock()


def cache_dir() -> Path:
    """The cache directory: $UOPGRAD_CACHE_DIR, else $XDG_CACHE_HOME/uopgrad, else ~/.cache/uopgrad."""
    if env := os.environ.get("UOPGRAD_CACHE_DIR"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "uopgrad"


def limit() -> int:
    """The size bound in bytes ($UOPGRAD_CACHE_MAX_BYTES)."""
    env = os.environ.get("UOPGRAD_CACHE_MAX_BYTES", "")
    return int(env) if env.strip() else DEFAULT_LIMIT


def _private(path: Path) -> bool:
    """Whether `path` is a directory of this user that no one else may write to (warns once if not)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False  # a file in the way: the cache is unwritable, which only costs time
    bad = (f"is owned by uid {st.st_uid}, not this user" if st.st_uid != os.geteuid() else
           "can be written by other users" if st.st_mode & 0o022 else "")
    if bad and str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(f"uopgrad: not using the kernel cache {path}: it {bad} (a kernel read from it would "
                      f"run in this process); fix its owner or mode (chmod go-w), or set UOPGRAD_CACHE_DIR",
                      RuntimeWarning, stacklevel=3)
    return not bad


def _shard(digest: str, create: bool) -> Path | None:
    """The directory of `digest`'s entry, or None when the cache may not be used."""
    root = cache_dir()
    if create:
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return None
    if not _private(root):
        return None
    shard = root / digest[:2]
    if create:
        try:
            shard.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return None
    return shard if shard.is_dir() and _private(shard) else None


def read(digest: str) -> bytes | None:
    """The payload stored under `digest`, or None (missing, unusable cache, or a bad checksum: removed)."""
    shard = _shard(digest, create=False)
    if shard is None:
        return None
    path = shard / digest
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if blob[:32] != hashlib.sha256(blob[32:]).digest():
        evict(digest)
        return None
    try:
        os.utime(path)  # recently used: the size bound removes the oldest entries first
    except OSError:
        pass
    return blob[32:]


def write(digest: str, payload: bytes) -> None:
    """Store `payload` under `digest` (atomically; an unwritable cache only costs time)."""
    shard = _shard(digest, create=True)
    if shard is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=shard, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, shard / digest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        return
    with _lock:
        _state["writes"] += 1
        first = _state["writes"] == 1
        due = (_state["writes"] - 1) % _PRUNE_EVERY == 0  # the first write of a process, then every 64th
    stamp = shard.parent.with_name(shard.parent.name + "-pruned")
    if due and (not first or _stale(stamp)):
        _prune(limit())
        try:
            stamp.touch()
        except OSError:
            pass


def _stale(stamp: Path) -> bool:
    """Whether the size was last checked more than _PRUNE_AGE seconds ago (or never)."""
    try:
        return time.time() - stamp.stat().st_mtime > _PRUNE_AGE
    except OSError:
        return True


def evict(digest: str) -> None:
    """Remove the entry of `digest` (one that failed to load is compiled again)."""
    try:
        (cache_dir() / digest[:2] / digest).unlink()
    except OSError:
        pass


def _entries() -> list[tuple[float, int, Path]]:
    root = cache_dir()
    out = []
    for shard in root.iterdir() if root.is_dir() else ():
        for path in shard.iterdir() if shard.is_dir() and len(shard.name) == 2 else ():
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((st.st_mtime, st.st_size, path))
    return out


def _prune(max_bytes: int) -> None:
    """Remove the least recently used entries until the cache holds at most `max_bytes`."""
    entries = sorted(_entries())
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= max_bytes:
            break
        try:
            path.unlink()
            total -= size
        except OSError:
            continue


def info() -> dict[str, object]:
    """Where the cache is, whether it is used, how many entries and bytes it holds, and its bound."""
    root = cache_dir()
    entries = _entries()
    return {"path": str(root), "usable": not root.exists() or _private(root), "entries": len(entries),
            "bytes": sum(size for _, size, _ in entries), "limit": limit()}


def clear() -> int:
    """Remove every entry; returns how many there were."""
    entries = _entries()
    for _, _, path in entries:
        try:
            path.unlink()
        except OSError:
            pass
    return len(entries)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "info"
    if command == "clear":
        print(f"removed {clear()} entries from {cache_dir()}")
    elif command == "info":
        for key, value in info().items():
            print(f"{key}: {value}")
    else:
        sys.exit("usage: python -m uopgrad.diskcache [info|clear]")
