"""The `uopgrad` command (top layer): `uopgrad devices`, `cache info|clear`, `viz`, `conformance`.

Installed as a console script and runnable as `python -m uopgrad`. Each subcommand is one function that
returns the exit status; `main(argv)` parses and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from uopgrad._version import __version__

# Each command imports what it needs when it runs: `uopgrad --version` and `--help` load no backend, no
# numpy and no compiler (0.1 s instead of 1.2 s, measured on 2 shared cores).
if TYPE_CHECKING:
    from uopgrad.dtype import DType

__all__ = ["main"]


def _dtype_names(ds: frozenset[DType]) -> list[str]:
    """numpy-style names (float32, int8, ...) in the order dtypes.fields() lists them."""
    from uopgrad.dtype import dtypes

    names: dict[DType, str] = {}
    for n, d in dtypes.fields().items():
        names.setdefault(d, n)  # the first name of each dtype is its sized one
    return [n for d, n in names.items() if d in ds]


def _version_of(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return __version__ if dist == "uopgrad" else "?"  # core from a source tree, not installed


def _describe(name: str, entry: str, dist: str) -> dict[str, Any]:
    """One backend: its package, version, whether it loads (and why not), devices and claimed dtypes."""
    from uopgrad.backend import Device

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
    import json

    from uopgrad.backend import PACKAGES, Device, install_advice

    rows = [_describe(n, *Device.plugins()[n]) for n in Device.installed()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    missing = {base: pkg for base, pkg in PACKAGES.items() if base not in Device.plugins()}
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
        print("\nnot installed:")
        for base, pkg in missing.items():
            print(f"  {base:<10} {pkg}: {install_advice(pkg)}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from uopgrad import diskcache

    return diskcache.command(args.action)  # the same code as `python -m uopgrad.diskcache info|clear`


def _viz_index(directory: str | None) -> tuple[Path | None, str]:
    """The index page `uopgrad viz` opens: that of the run directory given, or of the newest run in the
    VIZ directory given (or $UOPGRAD_VIZ); never a page found through anything but the directory named.
    Returns (index, why there is none)."""
    from uopgrad.config import getenv_path
    from uopgrad.viz.run import newest_index

    where = Path(directory).expanduser() if directory else getenv_path("UOPGRAD_VIZ")
    if where is None:
        return None, "no VIZ directory: give one (uopgrad viz DIR) or set UOPGRAD_VIZ"
    index = newest_index(where)
    if index is None:
        return None, f"no VIZ run in {where}: run a program with UOPGRAD_VIZ={where} first"
    return index, ""


def _viz(args: argparse.Namespace) -> int:
    import webbrowser

    index, why = _viz_index(args.dir)
    if index is None:
        print(why, file=sys.stderr)
        return 1
    print(index)
    if not args.print_only:
        webbrowser.open(index.resolve().as_uri())
    return 0


def _conformance(args: argparse.Namespace) -> int:
    import importlib.util
    import subprocess

    if importlib.util.find_spec("uopgrad_conformance") is None:
        from uopgrad.backend import install_advice

        advice = install_advice("uopgrad-conformance")
        print(f"the conformance suite is not installed: {advice} adds it", file=sys.stderr)
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
    v = sub.add_parser("viz", help="open the index of a VIZ run in a browser")
    where = "a run's directory, or a VIZ directory: its newest run (default: $UOPGRAD_VIZ)"
    v.add_argument("dir", nargs="?", default=None, help=where)
    v.add_argument("--print-only", action="store_true", help="print the index's path, open nothing")
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
