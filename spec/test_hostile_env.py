"""Hostile environment (spec/errors.md, docs/environment.md): every variable `uopgrad.config` declares, set
to junk text, floats such as 1e9, negatives, huge numbers, blanks, unicode and seeded random text, and then
`import uopgrad` and a tiny realize on the device that reads it. The outcome is the right result (the
value was accepted, or blank: the default), the right result with a warning naming the variable, or an
error of uopgrad's naming it, raised after the import; never a failed import, a bare traceback of
someone else's error, a hang or a crash. A value the declaration refuses must not pass unnamed.

Each case forks from a driver process that has imported numpy and ml_dtypes (the slow part of an import),
so a case costs the import of uopgrad and the realize. `HOSTILE_STATS` (spec/test_hostile.py) counts the
cases as "environment: ..."."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from test_hostile import HOSTILE_STATS

from uopgrad.config import ENVIRONMENT, EnvVar

ENV_STATS: Counter[str] = Counter()
DEVICE = {"core": "CPU", "uopgrad-cpu": "CPU", "uopgrad-cuda": "CUDA", "uopgrad-opencl": "CL"}
OWNERS = list(DEVICE)
# read only where something compiles: these cases get an empty disk cache, so that the realize compiles
COMPILING = {"CC", "CXX", "UOPGRAD_COMPILE_TIMEOUT", "UOPGRAD_NVRTC", "UOPGRAD_CACHE_MAX_BYTES"}
JUNK = ["abc", "1e9", "-1", "9" * 40, "ünïcødé ☃"]
EXTRA = {
    "command": ["'", '"unclosed'],
    "choice": ["maybe"],
    "size": ["1GB", "1 XB"],
    "path": ["afile"],
    "str": ["CPU:x"],
}
ALPHABET = "abcXYZ019 .:-_/'\"=$~\\é☃漢\u200b\t"


def values(var: EnvVar, i: int) -> list[str]:
    """The hostile values of one variable: the common junk, one blank (empty or whitespace, by turns), its
    kind's own, and one seeded random string."""
    rng = random.Random(var.name)
    return [
        *JUNK,
        "" if i % 2 else " \t ",
        *EXTRA.get(var.kind, []),
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))),
    ]


DRIVER = r"""
import json, os, sys, time, traceback, warnings
import numpy, ml_dtypes  # noqa: F401  (the slow imports, done once: every case forks from here)

def run(case):
    os.chdir(case["workdir"])
    os.environ.update(case["env"])
    stage = "import"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import uopgrad
            stage = "realize"
            got = (uopgrad.Tensor([1.0, 2.0], device=case["device"]) * 3).numpy().tolist()
            assert got == [3.0, 6.0], got
            out = {"outcome": "ok"}
        except Exception as e:
            out = {"outcome": "error", "stage": stage, "type": type(e).__name__, "module": type(e).__module__,
                   "message": str(e)[:3000], "trace": traceback.format_exc()[-4000:]}
    out["warnings"] = [str(w.message)[:1000] for w in caught]
    return out

cases, results = json.load(open(sys.argv[1])), sys.argv[2]
running, todo = {}, list(enumerate(cases))
while todo or running:
    while todo and len(running) < 2:
        i, case = todo.pop(0)
        pid = os.fork()
        if pid == 0:
            try:
                out = run(case)
            except BaseException as e:
                out = {"outcome": "driver", "message": repr(e)}
            with open(os.path.join(results, f"{i}.json"), "w") as f:
                json.dump(out, f)
            os._exit(0)
        running[pid] = (i, time.monotonic() + case["timeout"])
    time.sleep(0.01)
    for pid, (i, deadline) in list(running.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            del running[pid]
            if status != 0 or not os.path.exists(os.path.join(results, f"{i}.json")):
                with open(os.path.join(results, f"{i}.json"), "w") as f:
                    json.dump({"outcome": "crash", "message": f"wait status {status}"}, f)
        elif time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            del running[pid]
            with open(os.path.join(results, f"{i}.json"), "w") as f:
                json.dump({"outcome": "hang", "message": "killed after its timeout"}, f)
"""


def _base_env(owner: str, tmp: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}  # none of the table from outside
    env.update(HOME=str(tmp / "home"), UOPGRAD_CACHE_DIR=str(cache), OPENBLAS_NUM_THREADS="1")
    if owner == "uopgrad-cuda":
        env["UOPGRAD_CUDA_EMULATE"] = "1"  # the machine has no GPU to be sure of: every variable then is read
    return env


def _cases(owner: str, tmp: Path) -> list[dict[str, object]]:
    """A baseline (nothing set) and every hostile value of every variable `owner` reads."""
    shared = tmp / "cache"
    cases: list[dict[str, object]] = [{"var": None, "value": None, "env": {}}]
    for i, var in enumerate(v for v in ENVIRONMENT.values() if v.owner.partition(",")[0] == owner):
        for value in values(var, i):
            cases.append({"var": var.name, "value": value, "env": {var.name: value}})
    for n, case in enumerate(cases):
        work = tmp / f"case{n}"
        (work / "home").mkdir(parents=True)
        (work / "afile").write_text("a file, not a directory\n")
        env = _base_env(owner, work, shared)
        if case["var"] in COMPILING:
            env["UOPGRAD_CACHE_DIR"] = str(work / "fresh-cache")
        if case["var"] == "XDG_CACHE_HOME":
            del env["UOPGRAD_CACHE_DIR"]
        if case["var"] == "UOPGRAD_VIZ_MAX_BYTES":
            env["UOPGRAD_VIZ"] = str(work / "viz")  # the cap is read only where VIZ writes pages
        case.update(
            env={**env, **case["env"]},
            workdir=str(work),
            device=DEVICE[owner],
            timeout=120 if owner == "uopgrad-cuda" else 60,
        )
    return cases


def _run(cases: list[dict[str, object]], tmp: Path) -> list[dict[str, object]]:
    (tmp / "cases.json").write_text(json.dumps(cases))
    (tmp / "results").mkdir()
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVER), str(tmp / "cases.json"), str(tmp / "results")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, f"the driver failed: {res.stderr[-3000:]}"
    return [json.loads((tmp / "results" / f"{i}.json").read_text()) for i in range(len(cases))]


def _refused(var: EnvVar, value: str) -> bool:
    """Whether the declaration itself refuses `value` (then the variable must be named in the outcome)."""
    if not value.strip() or var.kind in ("path", "presence", "str"):
        return False
    try:
        var.parse(value)
    except ValueError:
        return True
    return False


def test_every_variable_has_a_device_to_try_it_on():
    assert {v.owner.partition(",")[0] for v in ENVIRONMENT.values()} <= set(OWNERS)


@pytest.mark.parametrize("owner", OWNERS)
def test_every_variable_with_hostile_values(owner: str, tmp_path: Path) -> None:
    cases = _cases(owner, tmp_path)
    results = _run(cases, tmp_path)
    base = results[0]
    if base["outcome"] != "ok":
        if owner == "core":
            pytest.fail(f"the baseline realize failed: {base}")
        pytest.skip(f"{DEVICE[owner]} does not run here: {base.get('message', base)}")
    bad = []
    for case, out in zip(cases[1:], results[1:]):
        name, value = str(case["var"]), str(case["value"])
        named = [w for w in out["warnings"] if name in w]
        if out["outcome"] == "ok":
            kind = "warning" if named else "accepted or default"
            if not named and _refused(ENVIRONMENT[name], value):
                bad.append(f"{name}={value!r}: refused by its declaration, yet nothing named it")
        elif (
            out["outcome"] == "error"
            and out["stage"] == "realize"
            and name in out["message"]
            and str(out["module"]).startswith("uopgrad")
        ):
            kind = "clear error"
        else:
            bad.append(
                f"{name}={value!r}: {out['outcome']} {out.get('stage', '')} "
                f"{out.get('type', '')}: {out.get('message', '')}\n{out.get('trace', '')}"
            )
            continue
        ENV_STATS[kind] += 1
        HOSTILE_STATS[f"environment: {kind}"] += 1
    assert not bad, f"{len(bad)} of {len(cases) - 1} cases:\n" + "\n".join(bad)


def test_zz_report_environment_counts():
    print(f"\nhostile environment: {sum(ENV_STATS.values())} cases, {dict(ENV_STATS)}")
