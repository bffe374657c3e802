"""One nox session per job. `nox` alone runs the default sessions: that is the test command CI runs.

`nox -s quick` is the check of every commit: lint, typecheck and the import contracts in one environment,
then the core unit tests except the slow files of QUICK_SLOW, spread over the cores: 3 minutes on 2 cores
with a fresh environment, tests 1.5 minutes. It is not in the default list: the default sessions run all of
it and more.

Sessions use the interpreter nox runs under and install with pip only. Extra arguments after `--` go to
the underlying tool, e.g. `nox -s tests -- -k hashcons` or `nox -s lint -- --fix`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

# CL runs on PoCL from pip, CUDA on the host emulator with every kernel also compiled by NVRTC and g++: both
# build the new kernels of a schedule together (one PoCL build, one shared object) and take the `ci-slow`
# profile (8 random programs per program test; CPU runs ci's 20). Every conformance session and the meta
# tests spread their cases over the machine's cores with pytest-xdist (`-n auto`); with those two, the
# default set takes about 30 minutes on 2 cores. `conformance_minimal` runs the whole suite on MINIMAL_CPU,
# the CPU backend rendering only the ALU ops core cannot decompose: every decomposition of codegen/decomp.py
# under the bounds native ops meet
nox.options.sessions = [
    "lint",
    "typecheck",
    "imports",
    "tests",
    "conformance(backend='REFERENCE')",
    "conformance(backend='CPU')",
    "conformance(backend='CL')",
    "conformance(backend='CUDA')",
    "conformance_external",
    "conformance_minimal",
    "conformance_meta",
]
# Reuse a session's environment when it exists: pip rebuilds and reinstalls a local directory on every
# run, so a reused environment never tests stale code. A fresh clone (as in CI) builds every environment anew.
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True

# Tool versions are pinned so that a new release cannot change what lint and typecheck report.
RUFF = "ruff==0.17.6"
MYPY = "mypy==2.4.1"
IMPORT_LINTER = "import-linter==2.17"
TEST_DEPS = ["pytest>=8", "hypothesis>=6.100", "z3-solver>=4.12.4"]  # z3: spec/test_symbolic_z3.py
XDIST = "pytest-xdist>=3"
# Oracles for the tests session only, never dependencies of a package: the Tensor ops, layers and
# optimisers are checked against PyTorch, safetensors files against the safetensors package (the tests
# skip, saying why, where they are missing). torch 2.13.0 is the CPU wheel this machine kind keeps on disk.
ORACLE_DEPS = ["torch==2.13.0", "safetensors==0.8.0"]

CORE = "./packages/core"
BACKEND_PACKAGES = {
    "CPU": "./packages/backend-cpu",
    "CL": "./packages/backend-opencl",
    "CUDA": "./packages/backend-cuda",
}
# backends whose every new kernel is a slow compile here (PoCL, NVRTC + g++): their conformance runs take the
# `ci-slow` profile, 8 random programs per program test instead of `ci`'s 20 (CPU runs those 20)
SLOW_COMPILERS = ("CL", "CUDA")
CONFORMANCE = "./conformance"
EXAMPLE_BACKEND = "./examples/out_of_tree_backend"  # the out-of-tree backend example (NUMPYVEC)
BROKEN_BACKENDS = "./conformance/meta_tests/broken_backend"  # planted bugs, for conformance_meta
PLANTED_BACKENDS = "conformance/tests/planted_backends.py"  # MINIMAL_CPU, for conformance_minimal
ALL_PACKAGES = [CORE, *BACKEND_PACKAGES.values(), CONFORMANCE]
SRC_DIRS = [f"{p.removeprefix('./')}/src" for p in ALL_PACKAGES]
# Core test files `nox -s quick` leaves to `nox -s tests`: over 1 s a test on average or over 20 s in all.
# Seconds of one serial run on 2 shared cores (pytest --durations, 2026-12-06); the other files took 90 s
# together.
QUICK_SLOW = {
    "test_cli.py": 37,  # every command in a fresh interpreter
    "test_opt.py": 23,
    "test_group.py": 20,
    "test_intern_threads.py": 20,  # threads racing the intern table
    "test_errors.py": 10,
    "test_facade.py": 8,  # `import uopgrad` in fresh interpreters
    "test_decomp_float_floor.py": 7,
    "test_tensor_registry.py": 7,
}


def require_file(session: nox.Session, path: str, why: str) -> None:
    """Fail the session with a clear message when `path` (relative to the repository root) is missing."""
    if not (ROOT / path).is_file():
        session.error(f"{path} does not exist yet: {why}")


@nox.session
def quick(session: nox.Session) -> None:
    """Lint, types, import contracts and the fast core tests, in one environment: the check of every commit.

    ruff check, ruff format --check, mypy --strict, lint-imports, then packages/core/tests but QUICK_SLOW
    with one pytest-xdist worker per core; arguments after `--` go to pytest."""
    # the oracles too: several core test modules import torch at the top
    session.install(RUFF, MYPY, IMPORT_LINTER, *TEST_DEPS, *ORACLE_DEPS, XDIST, *ALL_PACKAGES)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "--strict", *SRC_DIRS)
    session.run("lint-imports")
    skipped = [f"--ignore=packages/core/tests/{name}" for name in QUICK_SLOW]
    session.run("pytest", "packages/core/tests", *skipped, *_spread(session.posargs))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and `ruff format --check` over the whole repository, configured in pyproject.toml."""
    session.install(RUFF)
    session.run("ruff", "check", *(session.posargs or ["."]))
    session.run("ruff", "format", "--check", *(session.posargs or ["."]))


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over core first, then the other packages' sources."""
    session.install(MYPY, *ALL_PACKAGES)  # the packages bring their third-party dependencies and types
    session.run("mypy", "--strict", *(session.posargs or SRC_DIRS))


@nox.session
def imports(session: nox.Session) -> None:
    """import-linter contracts: core layers point down, nothing imports a backend, backends are apart."""
    session.install(IMPORT_LINTER, *ALL_PACKAGES)
    session.run("lint-imports")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests of every package, the property tests of the core in spec/, and a run of each benchmark."""
    # ml_dtypes: the bfloat16 oracle of REFERENCE (conformance/tests/test_oracle.py)
    session.install(*TEST_DEPS, *ORACLE_DEPS, "ml_dtypes", *ALL_PACKAGES)
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    # one pytest run per test folder: the packages' test modules share basenames (test_kernels.py,
    # linear.py helpers), which one rootdir-relative import namespace cannot hold
    paths = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/tests"))
    # bench/: each benchmark script run once at its smallest size (it must not rot; nothing is timed)
    for path in [*paths, "conformance/tests", "spec", "bench"]:
        session.run("pytest", path)


@nox.session
def wheels(session: nox.Session) -> None:
    """A wheel of every package of this repository in dist/: none of them is on the package index, so
    `pip install dist/uopgrad-*.whl dist/uopgrad_cpu-*.whl` is how another environment gets them."""
    out = ROOT / "dist"
    out.mkdir(exist_ok=True)
    for package in ALL_PACKAGES:
        session.run("pip", "wheel", "--no-deps", "-w", str(out), package)
    session.log(f"wheels in {out}: " + ", ".join(sorted(p.name for p in out.glob("*.whl"))))


@nox.session(venv_backend="none")
def size(session: nox.Session) -> None:
    """Code lines and tokens per line of every module under packages/*/src (information, never a cap)."""
    session.run(sys.executable, "tools/size_report.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with numpy, PyTorch and tinygrad; print ratios, assert nothing.
    `nox -s bench -- rewrite` (or `-- kernels`, `-- step`, `-- first_step`) runs one of them."""
    # torch 2.13.0 is the CPU wheel this machine kind keeps on disk (any other version pulls GBs)
    session.install(
        "tinygrad==0.14.0", "torch==2.13.0", CORE, BACKEND_PACKAGES["CPU"], BACKEND_PACKAGES["CL"]
    )
    for name in session.posargs or ["rewrite", "kernels", "step", "first_step"]:
        session.run("python", f"bench/{name}.py")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: examples/demo.py on the default backend (first installed of CPU, CL, CUDA, REFERENCE)."""
    require_file(session, "examples/demo.py", "the demo is written by a later issue")
    device = os.environ.get("UOPGRAD_DEVICE", "CPU").partition(":")[0].upper()
    session.install(CORE, *([BACKEND_PACKAGES[device]] if device in BACKEND_PACKAGES else []))
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def digits(session: nox.Session) -> None:
    """examples/digits.py: a small CNN on scikit-learn's digits on the default backend (CPU unless
    UOPGRAD_DEVICE says otherwise); fails below 95% test accuracy, writes build/digits_loss.png."""
    device = os.environ.get("UOPGRAD_DEVICE", "CPU").partition(":")[0].upper()
    session.install(
        CORE,
        *([BACKEND_PACKAGES[device]] if device in BACKEND_PACKAGES else []),
        "scikit-learn",
        "tqdm",
        "matplotlib",
    )
    session.run("python", "examples/digits.py", *session.posargs)


@nox.session
@nox.parametrize("backend", ["REFERENCE", "CPU", "CL", "CUDA"])
def conformance(session: nox.Session, backend: str) -> None:
    """The conformance suite on one in-tree backend, found through its entry point.

    Hypothesis profile `ci` (`ci-slow` for CL and CUDA), UOPGRAD_VERIFY=1 (every pass's output is verified),
    one pytest-xdist worker per core (`-- -n 0` runs serially);
    the JSON summary goes to build/conformance/<backend>.json. CL runs on PoCL from pip (the slow one: PoCL
    compiles every kernel; the new kernels of a schedule are built as one program). CUDA runs emulated
    (UOPGRAD_CUDA_EMULATE=1, set here unless the caller set it): NVRTC compiles every kernel for sm_90, then
    the host C++ compiler builds the same source (a schedule's new kernels together); kernels go to a fresh
    compile cache, so each one is compiled by NVRTC in this run."""
    backend_package = BACKEND_PACKAGES.get(backend)  # REFERENCE ships inside core
    session.install(*TEST_DEPS, XDIST, CORE, CONFORMANCE, *([backend_package] if backend_package else []))
    if backend == "CUDA":
        session.env.setdefault("UOPGRAD_CUDA_EMULATE", os.environ.get("UOPGRAD_CUDA_EMULATE", "1"))
        session.env["UOPGRAD_CACHE_DIR"] = str(ROOT / "build" / "cache-cuda")
        shutil.rmtree(ROOT / "build" / "cache-cuda", ignore_errors=True)
    extra = list(session.posargs)
    if backend in SLOW_COMPILERS and not any(a.startswith("--hypothesis-profile") for a in extra):
        extra = ["--hypothesis-profile", "ci-slow", *extra]
    _run_conformance(session, backend, extra)


@nox.session
def conformance_external(session: nox.Session) -> None:
    """The conformance suite on an out-of-tree backend: `-- <pip spec> <NAME> [pytest args]`.

    Without arguments it checks the example in examples/out_of_tree_backend (device NUMPYVEC)."""
    args = list(session.posargs) or [EXAMPLE_BACKEND, "NUMPYVEC"]
    if len(args) < 2:
        session.error("usage: nox -s conformance_external -- <pip spec of the backend> <NAME> [pytest args]")
    spec, name, *rest = args
    session.install(*TEST_DEPS, XDIST, CORE, CONFORMANCE, spec)
    _run_conformance(session, name, rest)


@nox.session
def conformance_minimal(session: nox.Session) -> None:
    """The conformance suite on MINIMAL_CPU: the CPU backend declaring only the ALU ops that have no core
    decomposition (conformance/tests/planted_backends.py), so every op case, gradient and program runs
    core's decompositions (codegen/decomp.py) against the bounds of native ops.

    Reached as a third party's backend is: `planted_backends.py SITE` writes its entry point as a dist-info
    in build/planted-site, put on PYTHONPATH with the module; the profile and report are CPU's (`ci`,
    build/conformance/MINIMAL_CPU.json). No xfails: the OPT rows whose vector path needs an op it does not
    render are not claimed (the opt pass vectorises only ops a target renders)."""
    session.install(*TEST_DEPS, XDIST, CORE, CONFORMANCE, BACKEND_PACKAGES["CPU"])
    site = ROOT / "build" / "planted-site"
    session.run("python", PLANTED_BACKENDS, str(site))
    session.env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT / Path(PLANTED_BACKENDS).parent)])
    _run_conformance(session, "MINIMAL_CPU", list(session.posargs))


@nox.session
def conformance_meta(session: nox.Session) -> None:
    """Meta tests of the conformance harness: every planted bug is caught, with a repro.

    Installs the broken backends of conformance/meta_tests/broken_backend (NUMPYVEC and CPU variants, one
    planted bug each, and ONE_DEVICE, NUMPYVEC with a single device); REFERENCE and the out-of-tree example
    must pass. Ends with the mutation score."""
    # pytest-xdist: test_scale_out.py checks that `-n 2` reports every case a serial run does; each meta test
    # runs the suite in a subprocess, so the tests themselves spread over the cores
    # CUDA too: BROKEN_CUDA_GROUPTAIL plants a grouped-reduce bug where local memory is (CUDA, emulated)
    session.install(
        *TEST_DEPS,
        XDIST,
        CORE,
        CONFORMANCE,
        EXAMPLE_BACKEND,
        BACKEND_PACKAGES["CPU"],
        BACKEND_PACKAGES["CUDA"],
        BROKEN_BACKENDS,
    )
    session.run("pytest", "conformance/meta_tests", *_spread(session.posargs))


def _spread(args: list[str]) -> list[str]:
    """`-n auto` (one pytest-xdist worker per core) unless the caller chose: `-n 0` or `-p no:xdist` runs
    serially, e.g. to step through one case with a debugger."""
    chosen = any(a == "-n" or a.startswith(("-n", "--numprocesses")) or a == "no:xdist" for a in args)
    return args if chosen else ["-n", "auto", *args]


def _run_conformance(session: nox.Session, backend: str, extra: list[str]) -> None:
    report = ROOT / "build" / "conformance" / f"{backend}.json"
    session.run(
        "pytest",
        "--pyargs",
        "uopgrad_conformance",
        "--backend",
        backend,
        "--conformance-report",
        str(report),
        *_spread(extra),
        env={"UOPGRAD_VERIFY": "1"},
    )
