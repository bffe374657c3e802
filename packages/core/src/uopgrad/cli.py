"""The `uopgrad` command (top layer): `uopgrad devices`, `cache info|clear`, `viz`, `conformance`.

Installed as a console script and runnable as `python -m uopgrad`. Each subcommand is one function that
returns the exit status; `main(argv)` parses and dispatches.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from uopgrad import diskcache, viz
from uopgrad._version import __version__
from uopgrad.backend import PACKAGES, Device
from uopgrad.config import getenv_path
from uopgrad.dtype import DType, dtypes

__all__ = ["main"]


def _dtype_names(ds: frozenset[DType]) -> list[str]:
    """numpy-style names (float32, int8, ...) in the order dtypes.fields() lists them."""
    names: dict[DType, str] = {}
    for n, d in dtypes.fields().items():
        names.setdefault(d, n)  # the first name of each dtype is its sized one
    return [n for d, n in names.items() if d in ds]


def _version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return __version__ if dist == "uopgrad" else "?"  # core from a source tree, not installed


def _describe(name: str, entry: str, dist: str) -> dict[str, Any]:
    """One backend: its package, version, whether it loads (and why not), devices and claimed dtypes."""
    info: dict[str, Any] = {
        "backend": name,
        "package": dist,
        "version": _version_of(dist),
        "entry_point": entry,
        "available": False,
        "devices": [],
        "dtypes": [],
        "reason": "",
    }
    try:
        backend = Device[name]
    except Exception as e:  # a backend that can't run here (no GPU, no driver) says why
        cause = e.__cause__ if e.__cause__ is not None else e
        info["reason"] = f"{type(cause).__name__}: {cause}"
        return info
    label = repr(backend).strip("<>").removeprefix(type(backend).__name__).strip()
    info.update(available=True, devices=[label], dtypes=_dtype_names(backend.capabilities.dtypes))
    return info


def _devices(args: argparse.Namespace) -> int:
    rows = [_describe(n, *Device.plugins()[n]) for n in Device.installed()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    missing = [pkg for base, pkg in PACKAGES.items() if base not in Device.plugins()]
    print(f"uopgrad {__version__}; default device {Device.DEFAULT}")
    for r in rows:
        state = "available" if r["available"] else "unavailable"
        print(f"\n{r['backend']:<10} {r['package']} {r['version']}  {state}")
        if r["available"]:
            print(f"  devices: {', '.join(r['devices'])}")
            print(f"  dtypes:  {' '.join(r['dtypes'])}")
        else:
            print(f"  why:     {r['reason']}")
    if missing:
        print(f"\nnot installed: {', '.join(missing)} (`pip install {' '.join(missing)}` adds them)")
    return 0


def _cache(args: argparse.Namespace) -> int:
    return diskcache.command(args.action)  # the same code as `python -m uopgrad.diskcache info|clear`


def _last_page(directory: str | None) -> Path | None:
    """The newest VIZ page in `directory` (or $UOPGRAD_VIZ), else the one the last VIZ run wrote."""
    where = directory or getenv_path("UOPGRAD_VIZ")
    if where:
        pages = sorted(Path(where).expanduser().glob("*.html"), key=lambda p: p.stat().st_mtime)
        return pages[-1] if pages else None
    return viz.last_page()


def _viz(args: argparse.Namespace) -> int:
    page = _last_page(args.dir)
    if page is None:
        print("no VIZ page yet: run a program with UOPGRAD_VIZ=DIR first", file=sys.stderr)
        return 1
    print(page)
    if not args.print_only:
        webbrowser.open(page.resolve().as_uri())
    return 0


def _conformance(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("uopgrad_conformance") is None:
        print("the conformance suite is not installed: pip install uopgrad-conformance", file=sys.stderr)
        return 2
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        "uopgrad_conformance",
        "--backend",
        args.backend,
        *args.pytest_args,
    ]
    return subprocess.call(cmd)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="uopgrad", description="uopgrad: devices, caches, VIZ pages, conformance"
    )
    p.add_argument("--version", action="version", version=f"uopgrad {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("devices", help="every installed backend: package, version, devices, dtypes, status")
    d.add_argument("--json", action="store_true", help="print the list as JSON")
    d.set_defaults(run=_devices)
    c = sub.add_parser("cache", help="show or empty the compile cache")
    c.add_argument("action", choices=["info", "clear"])
    c.set_defaults(run=_cache)
    v = sub.add_parser("viz", help="open the last VIZ page in a browser")
    v.add_argument("dir", nargs="?", default=None, help="the VIZ directory (default: $UOPGRAD_VIZ)")
    v.add_argument("--print-only", action="store_true", help="print the page's path, open nothing")
    v.set_defaults(run=_viz)
    k = sub.add_parser("conformance", help="run the conformance suite on a backend (arguments go to pytest)")
    k.add_argument("backend", help="the device to check, e.g. CPU")
    k.add_argument("pytest_args", nargs=argparse.REMAINDER, help="more pytest arguments, e.g. -n 2")
    k.set_defaults(run=_conformance)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]); returns the exit status."""
    args = _parser().parse_args(argv)
    status: int = args.run(args)
    return status
