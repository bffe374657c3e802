"""Every environment variable uopgrad and its in-tree backends read, in one place (layer 1), plus `Context`
to override the integer flags in code.

`ENVIRONMENT` is the table: each `EnvVar` has its type, the values it accepts, its default and what it
does (docs/environment.md is `table()`'s rendering of it). Code reads a variable only through a reader
here (`getenv`, `getenv_str`, `getenv_float`, `getenv_bytes`, `getenv_path`, `getenv_is_set`, or a
`ContextVar`), never `os.environ` itself; a backend outside this repository declares its own with
`declare` (core never imports a backend, so the in-tree ones are declared here).

The rule for a value, the same for every variable:
- unset, empty or only whitespace: the default;
- a value the declaration does not accept (not a number, out of range, not one of the choices, ...):
  `bad="warn"` variables (the debugging aids DEBUG, TRACK_MATCH_STATS, UOPGRAD_VIZ, which must never
  break the program they watch) give a RuntimeWarning naming the variable, the value and the accepted
  form, and then the default; every other one is a `ConfigError` saying the same, raised where the value
  is used (the first realize, the device's start, the first compile), never by `import uopgrad`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
import shlex
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from uopgrad.errors import ConfigError

__all__ = [
    "ALLOW_DEVICE_USAGE",
    "CAPTURING",
    "ENVIRONMENT",
    "JIT",
    "KERNEL_OPS",
    "Context",
    "ContextVar",
    "DEBUG",
    "EnvVar",
    "TRACK_MATCH_STATS",
    "VERIFY",
    "declare",
    "getenv",
    "getenv_bytes",
    "getenv_float",
    "getenv_is_set",
    "getenv_path",
    "getenv_str",
    "parse_bytes",
    "table",
]

Kind = Literal["int", "bool", "float", "size", "choice", "str", "path", "command", "presence"]
Value = int | float | str

_INT = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only: int() would also take "٣" and "1_0"
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")
_BOOL = {"1": 1, "true": 1, "yes": 1, "on": 1, "0": 0, "false": 0, "no": 0, "off": 0}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_bytes(text: str) -> int:
    """A size as users write it: `1073741824`, `1GB`, `500M`, `1.5 GiB` (decimal units: k, M, G, T with or
    without B; binary: KiB, MiB, GiB, TiB). Raises ValueError for anything else."""
    m = re.fullmatch(r"\s*([0-9]{1,30}(?:\.[0-9]{0,30})?)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r}")
    size = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not math.isfinite(size) or size >= 2**63:
        raise ValueError(f"not a size below 2**63 bytes: {text!r}")
    return int(size)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class EnvVar:
    """One environment variable: how its text becomes a value, its default, and what it does.

    kind: int / bool (0 or 1; also true/false, yes/no, on/off) / float / size (bytes, parse_bytes) /
    choice (`choices`: accepted spelling -> value) / str (matching `pattern` when given) / path / command
    (a command line, split like a shell) / presence (another program's: only whether it is set counts)."""

    name: str
    kind: Kind
    default: Value
    help: str
    owner: str = "core"  # who reads it: core or a backend package
    lo: float | None = None  # int, float, size: the range accepted, both ends included
    hi: float | None = None
    choices: tuple[tuple[str, str], ...] = ()
    pattern: str = ""
    form: str = ""  # how the accepted values read in errors and docs, if not derived
    default_doc: str = ""  # the default in words, where the value alone does not say it
    bad_doc: str = ""  # what a bad value gives, where the reader decides it (a path)
    bad: Literal["error", "warn"] = "error"  # what a value it does not accept gives (module docstring)
    foreign: bool = False  # another program's variable (the C compiler, OpenMP, XDG)

    def accepted(self) -> str:
        """The values it accepts, in words."""
        if self.form:
            return self.form
        span = "" if self.lo is None or self.hi is None else f" from {_number(self.lo)} to {_number(self.hi)}"
        return {
            "int": f"a whole number{span}",
            "bool": "1 or 0 (or true/false, yes/no, on/off)",
            "float": f"a number{span}",
            "size": f"a size in bytes{span}: a whole number or one with a unit, e.g. 1073741824, 1GB, "
            "500M or 2GiB",
            "choice": "one of " + ", ".join(k for k, _ in self.choices),
            "str": f"text matching {self.pattern}" if self.pattern else "any text",
            "path": "a path",
            "command": "a command line (quoted like a shell's)",
            "presence": "anything (only whether it is set counts here)",
        }[self.kind]

    def default_text(self) -> str:
        """The default, in words."""
        return self.default_doc or str(self.default)

    def parse(self, text: str) -> Value:
        """The value `text` (not blank) stands for; ValueError when the declaration does not accept it."""
        s = text.strip()
        if self.kind in ("int", "float", "size"):
            return self._number(s)
        if self.kind == "command" and not shlex.split(text):  # shlex: ValueError on an unbalanced quote
            raise ValueError("no command")
        if self.kind == "str" and self.pattern and re.fullmatch(self.pattern, s) is None:
            raise ValueError("not of the form")
        lookup: dict[str, Value] | None = (
            dict(self.choices) if self.kind == "choice" else dict(_BOOL) if self.kind == "bool" else None
        )
        if lookup is not None:
            if s.lower() not in lookup:
                raise ValueError("not one of the choices")
            return lookup[s.lower()]
        return s if self.kind == "str" else text  # a path or command as given

    def _number(self, s: str) -> int | float:
        value: int | float
        if self.kind == "size":
            value = parse_bytes(s)
        elif (_INT if self.kind == "int" else _FLOAT).fullmatch(s) is None:
            raise ValueError("not a number")
        else:
            value = int(s) if self.kind == "int" else float(s)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise ValueError("out of range")
        return value

    def error(self, text: str) -> ConfigError:
        """The error of `text`, a value it does not accept: the variable, the value, the accepted form."""
        return ConfigError(
            f"environment variable {self.name}={text!r} is not valid: {self.name} takes "
            f"{self.accepted()} (unset, the default: {self.default_text()})"
        )

    def resolve(self, default: Value | None = None, stacklevel: int = 4) -> tuple[Value, ConfigError | None]:
        """The value from the environment now (`default`, else the declared one, when blank) and the
        ConfigError a value it does not accept gives; a `bad="warn"` variable warns instead and takes the
        default."""
        fallback = self.default if default is None else default
        text = os.environ.get(self.name, "")
        if not text.strip():
            return fallback, None
        try:
            return self.parse(text), None
        except ValueError:
            err = self.error(text)
        if self.bad == "warn":
            warnings.warn(f"{err}; using the default", RuntimeWarning, stacklevel=stacklevel)
            return fallback, None
        return fallback, err

    def read(self, default: Value | None = None) -> Value:
        """The value from the environment now; raises the ConfigError of a value it does not accept."""
        value, err = self.resolve(default)
        if err is not None:
            raise err
        return value


ENVIRONMENT: dict[str, EnvVar] = {}


def declare(name: str, kind: Kind, default: Value, help: str, **fields: object) -> EnvVar:
    """Add a variable to `ENVIRONMENT` (a backend outside this repository declares its own at import); the
    same declaration twice is a no-op, a different one for a declared name a ConfigError."""
    var = EnvVar(name, kind, default, help, **fields)  # type: ignore[arg-type]
    if ENVIRONMENT.setdefault(name, var) != var:
        raise ConfigError(f"environment variable {name} is already declared differently: {ENVIRONMENT[name]}")
    return var


_INT_KINDS = ("int", "bool")
_BOOLISH = (
    ("0", "off"),
    ("false", "off"),
    ("no", "off"),
    ("off", "off"),
    ("1", "on"),
    ("true", "on"),
    ("yes", "on"),
    ("on", "on"),
)

# ---------------------------------------------------------------------- the table (docs/environment.md)
# core: the flags `Context` overrides (int, bool) are read once, at import; the others where they are used
declare(
    "DEBUG",
    "int",
    0,
    "log what the pipeline does: 1 kernels run, 2 schedules, 3 IR after each pass, "
    "4 kernel sources, 5 rewrite sizes (README: Tools)",
    lo=0,
    hi=7,
    bad="warn",
)
declare("UOPGRAD_VERIFY", "bool", 0, "verify the graph after every named pass (`Context(VERIFY=1)`)")
declare(
    "TRACK_MATCH_STATS",
    "bool",
    0,
    "count rule hits per PatternMatcher row (`rewrite.match_stats`)",
    bad="warn",
)
declare("ALLOW_DEVICE_USAGE", "bool", 1, "0: realize is an error (set while a `function` is traced)")
declare(
    "UOPGRAD_KERNEL_OPS",
    "int",
    4096,
    "the most ops one scheduled kernel's expression may hold before "
    "the scheduler cuts it; 0: never cut (`Context(KERNEL_OPS=n)`)",
    lo=0,
    hi=1_000_000,
)
declare(
    "JIT",
    "int",
    1,
    "0: a TinyJit runs its function on every call and captures nothing; 1 and 2 "
    "(tinygrad's no-graph) both replay the captured launches one by one (`Context(JIT=0)`)",
    lo=0,
    hi=2,
    bad="warn",
)
declare(
    "CAPTURING",
    "bool",
    1,
    "0: what runs is kept out of the capture of a TinyJit capturing in this "
    "thread (`with Context(CAPTURING=0):` around one-off work in a step)",
    bad="warn",
)
declare(
    "BEAM",
    "int",
    0,
    "time the opt pass's tile shapes of each new kernel and keep the n fastest for a "
    "longer second timing; 0: the heuristic's shape (spec/opt.md §3)",
    lo=0,
    hi=100,
)
declare(
    "OPT",
    "int",
    1,
    "0: no optimisation pass (the plain kernels of spec/opt.md); 1: the heuristic",
    lo=0,
    hi=1,
)
declare(
    "UOPGRAD_DEVICE",
    "str",
    "",
    "the default device",
    pattern=r"[A-Za-z][A-Za-z0-9_]*(?::[0-9]{1,6})?",
    form="a device name such as CPU, CL:1 or REFERENCE (an installed backend)",
    default_doc="the first installed of CPU, CL, CUDA, REFERENCE",
)
declare(
    "UOPGRAD_VIZ",
    "path",
    "",
    "a directory to write one VIZ page per realize into; one that can't be used is a warning and no pages",
    form="a directory (created if missing)",
    default_doc="no pages",
    bad="warn",
)
declare(
    "UOPGRAD_VIZ_MAX_BYTES",
    "size",
    20_000_000,
    "the most bytes of pages one VIZ run writes; the realizes after are listed in its index as left out",
    lo=0,
    default_doc="20MB",
    bad="warn",
)
declare(
    "UOPGRAD_CACHE_DIR",
    "path",
    "",
    "the disk cache of compiled kernels, their lowered programs, matcher code and BEAM picks",
    form="a directory (created if missing)",
    default_doc="`$XDG_CACHE_HOME/uopgrad`, else `~/.cache/uopgrad`",
    bad_doc="one that can't be used: one RuntimeWarning, no disk cache (spec/errors.md)",
)
declare(
    "UOPGRAD_CACHE_MAX_BYTES",
    "size",
    1 << 30,
    "the disk cache's size limit (least recently used entries go first)",
    lo=0,
    default_doc="1GiB",
    bad_doc="during a compile one RuntimeWarning and the default; `uopgrad cache info` exits 1 naming it",
)
declare(
    "XDG_CACHE_HOME",
    "path",
    "",
    "where the disk cache goes when UOPGRAD_CACHE_DIR is unset",
    default_doc="`~/.cache`",
    bad_doc="a relative path is ignored (the XDG rule)",
    foreign=True,
)
declare(
    "UOPGRAD_COMPILE_TIMEOUT",
    "float",
    600,
    "seconds a run of the C compiler (CPU) or the host C++ "
    "compiler (CUDA emulation) may take before it is a CompileError",
    owner="uopgrad-cpu, uopgrad-cuda",
    lo=0.001,
    hi=1_000_000,
)
# backend-cpu
declare(
    "CC",
    "command",
    "cc",
    "the C compiler the CPU backend builds kernels with",
    owner="uopgrad-cpu",
    foreign=True,
)
declare(
    "OMP_NUM_THREADS",
    "presence",
    "",
    "set: OpenMP's own thread count rules and the CPU backend does not size its teams",
    owner="uopgrad-cpu",
    default_doc="unset",
    bad_doc="OpenMP's to judge",
    foreign=True,
)
declare(
    "OMP_DYNAMIC",
    "presence",
    "",
    "set: as OMP_NUM_THREADS",
    owner="uopgrad-cpu",
    default_doc="unset",
    bad_doc="OpenMP's to judge",
    foreign=True,
)
# backend-cuda
declare(
    "UOPGRAD_CUDA_EMULATE",
    "choice",
    "off",
    "run CUDA kernels on the host (NVRTC still compiles each): "
    "on, or reverse (blocks and threads last to first)",
    owner="uopgrad-cuda",
    choices=(*_BOOLISH, ("forward", "on"), ("reverse", "reverse"), ("reversed", "reverse")),
)
declare(
    "UOPGRAD_CUDA_ARCH",
    "str",
    "sm_90",
    "the GPU architecture NVRTC compiles for when emulating",
    owner="uopgrad-cuda",
    pattern=r"(?:sm|compute)_[0-9]{2,3}[a-z]?",
    form="an NVRTC architecture such as sm_90 or compute_80",
)
declare(
    "UOPGRAD_NVRTC",
    "path",
    "",
    "the NVRTC library to compile with",
    owner="uopgrad-cuda",
    form="the path of a libnvrtc.so",
    default_doc="the newest found",
    bad_doc="ConfigError where it does not load",
)
declare(
    "CXX", "command", "g++", "the host C++ compiler of the CUDA emulation", owner="uopgrad-cuda", foreign=True
)
# backend-opencl
declare(
    "UOPGRAD_CL_DEVICE",
    "str",
    "",
    'the OpenCL device `CL` is: a number, or text its "platform: device" name contains',
    owner="uopgrad-opencl",
    form="a device number or part of a device name",
    default_doc="the first device",
    bad_doc="BackendError listing the devices",
)
declare(
    "UOPGRAD_CL_GROUP_REDUCE",
    "choice",
    "auto",
    "split big reduces over a work-group",
    owner="uopgrad-opencl",
    choices=(*_BOOLISH, ("auto", "auto")),
    default_doc="auto: on every device but a CPU",
)


# ---------------------------------------------------------------------- readers
def _declared(key: str, kinds: tuple[str, ...]) -> EnvVar:
    var = ENVIRONMENT.get(key)
    if var is None:
        raise ConfigError(
            f"{key} is not a declared environment variable; declare it in uopgrad.config "
            f"(or with uopgrad.config.declare)"
        )
    if var.kind not in kinds:
        raise ConfigError(f"{key} is a {var.kind} variable, not read as {'/'.join(kinds)}")
    return var


def getenv(key: str, default: int | None = None) -> int:
    """An int or bool variable's value (`default`, else the declared one, when unset)."""
    return cast(int, _declared(key, _INT_KINDS).read(default))


def getenv_float(key: str, default: float | None = None) -> float:
    """A float variable's value."""
    return float(_declared(key, ("float",)).read(default))


def getenv_str(key: str, default: str | None = None) -> str:
    """A text variable's value: str (stripped), choice (the canonical value), path or command (as given)."""
    return cast(str, _declared(key, ("str", "choice", "path", "command")).read(default))


def getenv_path(key: str) -> Path | None:
    """A path variable's value, `~` expanded; None when unset (the default is then the reader's to pick)."""
    text = cast(str, _declared(key, ("path",)).read())
    return Path(text).expanduser() if text else None


def getenv_bytes(key: str, default: int) -> int:
    """A size variable (see parse_bytes); empty or missing -> default. A bad value is a ConfigError naming
    the variable and the accepted forms."""
    return cast(int, _declared(key, ("size",)).read(default))


def getenv_is_set(key: str) -> bool:
    """Whether a presence variable is set at all (even to nothing), as the program it belongs to sees it."""
    _declared(key, ("presence",))
    return key in os.environ


def table() -> str:
    """`ENVIRONMENT` as a markdown table (docs/environment.md holds it)."""
    rows = [
        "| variable | read by | accepts | default | on a bad value | what it does |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for v in ENVIRONMENT.values():
        bad = v.bad_doc or ("RuntimeWarning, the default" if v.bad == "warn" else "ConfigError where used")
        owner = v.owner + (" (another program's)" if v.foreign else "")
        rows.append(f"| `{v.name}` | {owner} | {v.accepted()} | {v.default_text()} | {bad} | {v.help} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------- flags overridable in code
class ContextVar:
    """An integer flag initialised from the environment variable `env` (default: its name, which
    `ENVIRONMENT` must declare as int or bool) and overridable with `Context` under its name, e.g.
    `VERIFY`, or under the environment variable, `UOPGRAD_VERIFY`.

    An override holds in the thread (and asyncio task) that made it, like PyTorch's grad mode: tracing a
    `function` in one thread (ALLOW_DEVICE_USAGE=0) must not forbid realize() in the others.

    A value the declaration does not accept warns at import (bad="warn") or makes every read raise its
    ConfigError until code sets the flag (bad="error"): import itself never fails."""

    _registry: dict[str, ContextVar] = {}

    def __init__(self, name: str, default: int, env: str | None = None) -> None:
        self.key = env or name
        self.default = default
        initial, self._error = _declared(self.key, _INT_KINDS).resolve(default, stacklevel=3)
        # None stands for "the environment's value was bad": only then is `get` more than the builtin
        self._var: contextvars.ContextVar[int | None] = contextvars.ContextVar(
            f"uopgrad.{self.key}", default=None if self._error is not None else cast(int, initial)
        )
        # the value, as a builtin call where the environment was fine (hot loops call it)
        self.get: Callable[[], int] = (
            cast(Callable[[], int], self._var.get) if self._error is None else self._checked
        )
        ContextVar._registry[name] = ContextVar._registry[self.key] = self

    def _checked(self) -> int:
        v = self._var.get()
        if v is None:
            raise ConfigError(str(self._error))
        return v

    @property
    def value(self) -> int:
        """The flag's value in the current thread."""
        return self.get()

    @value.setter
    def value(self, v: int) -> None:
        self._var.set(v)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return self.value

    def __ge__(self, other: int) -> bool:
        return self.value >= other

    def __gt__(self, other: int) -> bool:
        return self.value > other


@contextlib.contextmanager
def Context(**flags: int) -> Iterator[None]:
    """Temporarily set flags in this thread, e.g. `with Context(VERIFY=1): ...`; restores them even on
    error. Other threads keep their own values."""
    unknown = [k for k in flags if k not in ContextVar._registry]
    if unknown:
        raise ConfigError(f"unknown uopgrad flag(s) {unknown}; known: {sorted(ContextVar._registry)}")
    # the raw values (None where the environment's was bad), so that leaving restores even those
    old = {k: ContextVar._registry[k]._var.get() for k in flags}  # an alias given twice is restored in order
    try:
        for k, v in flags.items():
            ContextVar._registry[k].value = v
        yield
    finally:
        for k, o in old.items():
            ContextVar._registry[k]._var.set(o)


DEBUG = ContextVar("DEBUG", 0)  # >0 prints what the pipeline does
VERIFY = ContextVar("VERIFY", 0, env="UOPGRAD_VERIFY")  # run verify() after every named pass
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 0)  # count rule hits per PatternMatcher row
ALLOW_DEVICE_USAGE = ContextVar("ALLOW_DEVICE_USAGE", 1)  # 0 while tracing a function: realize is an error
# the most ops one scheduled kernel's expression may hold before the scheduler cuts it (0: never cut)
KERNEL_OPS = ContextVar("KERNEL_OPS", 4096, env="UOPGRAD_KERNEL_OPS")
JIT = ContextVar("JIT", 1)  # 0: TinyJit runs the function on every call
CAPTURING = ContextVar("CAPTURING", 1)  # 0: a TinyJit capturing here does not record
