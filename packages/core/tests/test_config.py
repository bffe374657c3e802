"""uopgrad.config: the one table of environment variables, its readers, and `ContextVar`/`Context`.

What a bad value does to a whole program (`import uopgrad`, a realize) is spec/test_hostile_env.py's."""

from __future__ import annotations

import re
import threading
import warnings
from pathlib import Path

import pytest

from uopgrad import config
from uopgrad.config import ENVIRONMENT, Context, ContextVar, EnvVar, parse_bytes
from uopgrad.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("conformance/src/**/*.py")]
# a read of the environment anywhere but config.py: os.environ.get / [...] / `in`, os.getenv, environ.get
READ = re.compile(
    r"os\.getenv\b|\benviron\s*(?:\.get\b|\[|\.items\b|\.keys\b)|\bin\s+os\.environ\b|"
    r"os\.environ\.setdefault"
)
# what may name os.environ elsewhere: a copy handed to a subprocess, a write for a child process
ALLOWED = re.compile(r"\{\*\*os\.environ|os\.environ\.copy\(\)|dict\(os\.environ\)")


@pytest.fixture
def scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Declarations and flags made by a test leave the real table and registry as they were."""
    monkeypatch.setattr(config, "ENVIRONMENT", dict(ENVIRONMENT))
    monkeypatch.setattr(ContextVar, "_registry", dict(ContextVar._registry))


def test_every_environment_read_goes_through_config():
    assert len(SOURCES) > 50  # the scan reads what it should
    stray = []
    for path in SOURCES:
        if path.name == "config.py" and path.parent.name == "uopgrad":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if READ.search(ALLOWED.sub("", line)):
                stray.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not stray, (
        "read the environment through uopgrad.config (declare the variable there):\n" + "\n".join(stray)
    )


def test_every_name_the_sources_read_is_declared():
    called = re.compile(r"getenv(?:_str|_float|_bytes|_path|_is_set)?\(\s*[\"']([A-Z_0-9]+)[\"']")
    named = {m.group(1) for p in SOURCES for m in called.finditer(p.read_text())}
    assert {"UOPGRAD_DEVICE", "CC", "UOPGRAD_CACHE_DIR", "UOPGRAD_CACHE_MAX_BYTES"} <= named
    assert not named - set(ENVIRONMENT), f"read but not declared: {sorted(named - set(ENVIRONMENT))}"
    consts = {
        "ARCH_ENV": "UOPGRAD_CUDA_ARCH",
        "EMULATE_ENV": "UOPGRAD_CUDA_EMULATE",
        "NVRTC_ENV": "UOPGRAD_NVRTC",
        "DEVICE_ENV": "UOPGRAD_CL_DEVICE",
        "GROUP_ENV": "UOPGRAD_CL_GROUP_REDUCE",
    }
    text = "\n".join(p.read_text() for p in SOURCES)
    for const, name in consts.items():
        assert f'{const} = "{name}"' in text and name in ENVIRONMENT


def test_the_docs_table_is_the_declarations():
    doc = (ROOT / "docs" / "environment.md").read_text()
    assert config.table() in doc, "docs/environment.md is stale: paste uopgrad.config.table() into it"
    readme = (ROOT / "README.md").read_text() + (ROOT / "packages/core/README.md").read_text()
    assert "docs/environment.md" in readme


def test_declarations_are_complete():
    for v in ENVIRONMENT.values():
        assert v.help and v.accepted() and v.default_text(), v.name
        if v.kind in ("int", "float"):
            assert v.lo is not None and v.hi is not None, f"{v.name} needs a range"
        if v.kind not in ("path", "presence", "str"):  # the default is itself accepted
            assert v.parse(str(v.default)) == v.default, v.name
    assert ENVIRONMENT["BEAM"].hi is not None and ENVIRONMENT["BEAM"].hi <= 1000
    assert (ENVIRONMENT["OPT"].lo, ENVIRONMENT["OPT"].hi) == (0, 1)


def test_context_vars_match_their_declarations():
    import uopgrad.codegen.opt
    import uopgrad.search  # noqa: F401  (declares nothing, makes BEAM)

    seen = set(ContextVar._registry.values())
    assert {v.key for v in seen} >= {"DEBUG", "UOPGRAD_VERIFY", "BEAM", "OPT", "UOPGRAD_KERNEL_OPS"}
    for flag in seen:
        decl = ENVIRONMENT[flag.key]
        assert decl.kind in ("int", "bool") and decl.default == flag.default, flag.key


def test_the_get_of_a_flag_read_fine_is_the_builtin():
    # hot loops call .get: a flag whose environment value was fine pays nothing for the checks
    assert type(config.DEBUG.get).__name__ == "builtin_function_or_method"
    assert type(config.TRACK_MATCH_STATS.get).__name__ == "builtin_function_or_method"


@pytest.mark.parametrize(
    ("kind", "fields", "good", "bad"),
    [
        (
            "int",
            {"lo": 0, "hi": 7},
            {"3": 3, " 7 ": 7, "+0": 0},
            ["abc", "1e9", "-1", "8", "9" * 40, "1.5", "٣", "1_0", "0x1", "nan"],
        ),
        ("bool", {}, {"1": 1, "0": 0, "TRUE": 1, "off": 0, " yes ": 1}, ["2", "-1", "maybe", "1.0", "ｙes"]),
        (
            "float",
            {"lo": 0.001, "hi": 1e6},
            {"1": 1.0, "0.5": 0.5, "1e3": 1000.0, ".25": 0.25},
            ["nan", "inf", "-1", "0", "1e9", "abc", "1,5", "1" * 40, "１"],
        ),
        (
            "size",
            {"lo": 0},
            {"1GB": 10**9, "2GiB": 2 << 30, "1073741824": 1 << 30, "1.5 k": 1500},
            ["1e9", "-1", "1XB", "9" * 40, "1" + "0" * 400, "abc", "½"],
        ),
        (
            "choice",
            {"choices": (("on", "on"), ("0", "off"))},
            {"ON": "on", "0": "off"},
            ["maybe", "2", "o n"],
        ),
        ("str", {"pattern": r"sm_[0-9]{2}"}, {"sm_90": "sm_90", " sm_80 ": "sm_80"}, ["sm90", "sm_9x", "x"]),
        ("command", {}, {"gcc -m64": "gcc -m64", "'my cc'": "'my cc'"}, ["'", '"unclosed']),
    ],
)
def test_parse_accepts_and_refuses(kind, fields, good, bad):
    var = EnvVar("UOPGRAD_X", kind, next(iter(good.values())), "a test", **fields)
    for text, want in good.items():
        assert var.parse(text) == want, text
    for text in bad:
        with pytest.raises(ValueError):  # any ValueError: EnvVar.error words the message
            var.parse(text)


def test_a_bad_value_is_a_config_error_naming_variable_value_and_form(monkeypatch, scratch):
    config.declare("UOPGRAD_TEST_N", "int", 5, "a test", lo=0, hi=9)
    monkeypatch.setenv("UOPGRAD_TEST_N", "1e9")
    with pytest.raises(ConfigError, match=r"UOPGRAD_TEST_N='1e9'.*a whole number from 0 to 9.*default: 5"):
        config.getenv("UOPGRAD_TEST_N")
    for blank in ("", "  ", "\t\n"):  # blank is unset
        monkeypatch.setenv("UOPGRAD_TEST_N", blank)
        assert config.getenv("UOPGRAD_TEST_N") == 5 and config.getenv("UOPGRAD_TEST_N", 3) == 3
    monkeypatch.setenv("UOPGRAD_TEST_N", "8")  # read when called, not cached
    assert config.getenv("UOPGRAD_TEST_N") == 8


def test_a_warn_variable_warns_and_takes_the_default(monkeypatch, scratch):
    config.declare("UOPGRAD_TEST_W", "int", 0, "a test", lo=0, hi=7, bad="warn")
    monkeypatch.setenv("UOPGRAD_TEST_W", "abc")
    with pytest.warns(RuntimeWarning, match=r"UOPGRAD_TEST_W='abc'.*using the default"):
        assert config.getenv("UOPGRAD_TEST_W") == 0


def test_readers_check_declaration_and_kind(monkeypatch):
    with pytest.raises(ConfigError, match="UOPGRAD_NOT_DECLARED is not a declared"):
        config.getenv_str("UOPGRAD_NOT_DECLARED")
    with pytest.raises(ConfigError, match="BEAM is a int variable"):
        config.getenv_str("BEAM")
    monkeypatch.setenv("UOPGRAD_VIZ", "~/pages")
    assert config.getenv_path("UOPGRAD_VIZ") == Path("~/pages").expanduser()
    monkeypatch.delenv("OMP_DYNAMIC", raising=False)
    assert not config.getenv_is_set("OMP_DYNAMIC")
    monkeypatch.setenv("OMP_DYNAMIC", "")
    assert config.getenv_is_set("OMP_DYNAMIC")  # OpenMP counts a set variable, empty or not


def test_declare_twice(scratch):
    a = config.declare("UOPGRAD_TEST_D", "bool", 0, "a test")
    assert config.declare("UOPGRAD_TEST_D", "bool", 0, "a test") == a
    with pytest.raises(ConfigError, match="already declared differently"):
        config.declare("UOPGRAD_TEST_D", "bool", 1, "a test")


def test_sizes():
    assert parse_bytes("1GB") == 10**9 and parse_bytes(" 2 GiB ") == 2 << 30 and parse_bytes("0") == 0
    for bad in ("1" + "0" * 400, "9" * 25, "1e9", "-5", "1 XB", ""):
        with pytest.raises(ValueError, match="not a size"):
            parse_bytes(bad)


def test_a_flag_with_a_bad_value_raises_where_it_is_read_until_code_sets_it(monkeypatch, scratch):
    config.declare("UOPGRAD_TEST_F", "int", 2, "a test", lo=0, hi=4)
    monkeypatch.setenv("UOPGRAD_TEST_F", "99")
    flag = ContextVar("TEST_F", 2, env="UOPGRAD_TEST_F")  # constructing it (import) does not raise
    for read in (flag.get, lambda: flag.value, lambda: bool(flag), lambda: int(flag)):
        with pytest.raises(ConfigError, match="UOPGRAD_TEST_F='99'"):
            read()
    with Context(TEST_F=3):
        assert flag.get() == 3
    with pytest.raises(ConfigError):  # leaving the Context restores the bad state
        flag.get()
    flag.value = 1
    assert flag.get() == 1 and flag.value == 1


def test_a_warn_flag_warns_once_at_construction(monkeypatch, scratch):
    config.declare("UOPGRAD_TEST_G", "int", 0, "a test", lo=0, hi=7, bad="warn")
    monkeypatch.setenv("UOPGRAD_TEST_G", "x")
    with pytest.warns(RuntimeWarning, match="UOPGRAD_TEST_G='x'"):
        flag = ContextVar("TEST_G", 0, env="UOPGRAD_TEST_G")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert flag.get() == 0 and type(flag.get).__name__ == "builtin_function_or_method"


def test_context_still_holds_per_thread_and_knows_aliases():
    seen: list[int] = []
    with Context(UOPGRAD_VERIFY=1):
        assert config.VERIFY.get() == 1
        th = threading.Thread(target=lambda: seen.append(config.VERIFY.get()))
        th.start()
        th.join()
    assert seen == [config.getenv("UOPGRAD_VERIFY")]  # another thread: the environment's value
    with pytest.raises(ConfigError, match="unknown uopgrad flag"):
        with Context(NOT_A_FLAG=1):
            pass
