"""Style rules that ruff cannot check (docs/style.md P1, P2, P4, P8, P14), run over whatever files exist.

Each rule is a small function of one source text; the `test_rule_*` tests pin what each rule catches
and lets through, so a rule that silently matches nothing cannot pass as a green repository check.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CORE_SRC = ROOT / "packages/core/src"
# function-local imports of uopgrad are allowed only here (paths relative to CORE_SRC): the plugin loader
# imports entry points lazily, and the command line imports what each command runs, so that `--version`
# loads nothing of the compiler; nothing else needs to import upward (docs/style.md P2)
LOCAL_IMPORT_ALLOWLIST = {"uopgrad/backend.py", "uopgrad/cli.py"}
TRACKED_DIRS = ["packages", "conformance", "spec", "bench", "examples", "tools", ".ci"]
SKIPPED_DIRS = {".git", ".nox", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".hypothesis"}
MARKER = "TO" + "DO"  # spelled in two halves so this file does not flag itself
MARKER_RE, ISSUE_RE = re.compile(rf"\b{MARKER}\b"), re.compile(r"#\d+")


def python_files(*roots: Path) -> Iterator[Path]:
    """Every .py file under `roots`, skipping build and cache folders."""
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else []:
            if not SKIPPED_DIRS.intersection(path.relative_to(root).parts) and ".egg-info" not in str(path):
                yield path


def source_files() -> list[Path]:
    """The `src/` modules of every package: packages/*/src/**/*.py and conformance/src/**/*.py."""
    return list(python_files(*sorted(ROOT.glob("packages/*/src")), ROOT / "conformance/src"))


def core_modules() -> list[Path]:
    """The modules of the core package."""
    return list(python_files(CORE_SRC / "uopgrad"))


def rel(path: Path) -> str:
    """`path` relative to the repository root, for messages."""
    return str(path.relative_to(ROOT))


# --- the rules: each returns what it objects to, empty when the source is fine --------------------------


def has_module_docstring(source: str) -> bool:
    """The module starts with a non-empty docstring."""
    return bool((ast.get_docstring(ast.parse(source)) or "").strip())


def untracked_markers(text: str) -> list[int]:
    """Line numbers of to-do markers without an issue number (`#123`) on the same line."""
    lines = enumerate(text.splitlines(), 1)
    return [i for i, line in lines if MARKER_RE.search(line) and not ISSUE_RE.search(line)]


def _is_matcher(node: ast.expr, matchers: set[str]) -> bool:
    """`PatternMatcher(...)`, a name already bound to one, or a `+` of such."""
    if isinstance(node, ast.Call):
        func = node.func
        return (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) == "PatternMatcher"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_matcher(node.left, matchers) or _is_matcher(node.right, matchers)
    return isinstance(node, ast.Name) and node.id in matchers


def misnamed_matchers(source: str) -> list[str]:
    """Module-level names bound to a PatternMatcher that are neither `pm_*` nor `sym`."""
    matchers: set[str] = set()
    bad = []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign):
            targets, value, annotated = stmt.targets, stmt.value, False
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
            annotated = ast.unparse(stmt.annotation).strip("'\"").endswith("PatternMatcher")
        else:
            continue
        if not (annotated or _is_matcher(value, matchers)):
            continue
        for target in (t for t in targets if isinstance(t, ast.Name)):
            matchers.add(target.id)
            if not (target.id.startswith("pm_") or target.id == "sym"):
                bad.append(target.id)
    return bad


def declares_all(source: str) -> bool:
    """The module binds `__all__` at module level."""
    for stmt in ast.parse(source).body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def _imports_uopgrad(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "uopgrad" or a.name.startswith("uopgrad.") for a in node.names)
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return node.level > 0 or module == "uopgrad" or module.startswith("uopgrad.")
    return False


def local_uopgrad_imports(source: str) -> list[int]:
    """Line numbers of imports of uopgrad (absolute or relative) inside a function body."""
    lines = set()
    for func in ast.walk(ast.parse(source)):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            lines |= {n.lineno for n in ast.walk(func) if isinstance(n, ast.stmt) and _imports_uopgrad(n)}
    return sorted(lines)


# --- the rules, run over the repository ------------------------------------------------------------------


def test_every_src_module_has_a_docstring():
    missing = [rel(p) for p in source_files() if not has_module_docstring(p.read_text())]
    assert not missing, f"modules without a module docstring (docs/style.md P1): {missing}"


def test_every_marker_names_an_issue():
    files = [*python_files(*(ROOT / d for d in TRACKED_DIRS)), ROOT / "noxfile.py", ROOT / ".ci/run"]
    bad = [f"{rel(p)}:{n}" for p in files if p.is_file() for n in untracked_markers(p.read_text())]
    assert not bad, f"{MARKER} without an issue number (#123) (docs/style.md P14): {bad}"


def test_module_level_pattern_matchers_are_named_pm_or_sym():
    bad = [f"{rel(p)}: {name}" for p in core_modules() for name in misnamed_matchers(p.read_text())]
    assert not bad, f"PatternMatcher tables must be named pm_<purpose> or sym (docs/style.md P4): {bad}"


def test_every_core_module_declares_all():
    missing = [rel(p) for p in core_modules() if not declares_all(p.read_text())]
    assert not missing, f"core modules without __all__ (docs/style.md P8): {missing}"


def test_no_function_local_uopgrad_imports():
    bad = [
        f"{rel(p)}:{n}"
        for p in core_modules()
        if p.relative_to(CORE_SRC).as_posix() not in LOCAL_IMPORT_ALLOWLIST
        for n in local_uopgrad_imports(p.read_text())
    ]
    assert not bad, f"function-local imports of uopgrad point up the layers (docs/style.md P2): {bad}"


def test_the_checks_see_the_repository():
    # the skeleton packages are always there; an empty walk would make every check above vacuous
    names = {rel(p) for p in source_files()}
    assert "packages/backend-cpu/src/uopgrad_cpu/__init__.py" in names
    assert "conformance/src/uopgrad_conformance/__init__.py" in names


# --- what each rule catches and lets through -------------------------------------------------------------


def test_rule_module_docstring():
    assert has_module_docstring('"""What this is."""\nx = 1\n')
    assert not has_module_docstring("x = 1\n")
    assert not has_module_docstring("")
    assert not has_module_docstring("# a comment is not a docstring\nx = 1\n")


def test_rule_markers():
    text = f"a = 1  # {MARKER}: tracked in #12\n# {MARKER} later\nb = '{MARKER}S is a word'\n# #7: {MARKER}\n"
    assert untracked_markers(text) == [2]


def test_rule_matcher_names():
    source = (
        "sym = PatternMatcher([])\n"
        "pm_a = PatternMatcher([])\n"
        "pm_b = pm_a + sym\n"
        "pm_c: PatternMatcher = make()\n"
        "rules = pm_a + PatternMatcher([])\n"
        "other = rewrite.PatternMatcher([])\n"
        "combined = pm_a + sym\n"
        "typed: PatternMatcher = make()\n"
        "registry: dict[int, PatternMatcher] = {}\n"
        "x = compute(PatternMatcher)\n"
        "def f():\n    local = PatternMatcher([])\n"
    )
    assert misnamed_matchers(source) == ["rules", "other", "combined", "typed"]


def test_rule_all():
    assert declares_all("__all__ = ['x']\n")
    assert declares_all("__all__: list[str] = []\n")
    assert not declares_all("def f():\n    __all__ = []\n")
    assert not declares_all("x = 1\n")


def test_rule_local_imports():
    source = (
        "import uopgrad.dtype\n"
        "from uopgrad import ops\n"
        "def f():\n"
        "    import numpy\n"
        "    from uopgrad.tensor import Tensor\n"
        "    from . import schedule\n"
        "    import uopgrad_cpu\n"
        "class C:\n"
        "    def m(self):\n"
        "        def inner():\n"
        "            import uopgrad\n"
    )
    assert local_uopgrad_imports(source) == [5, 6, 11]
