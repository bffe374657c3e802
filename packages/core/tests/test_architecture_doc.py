"""docs/ARCHITECTURE.md §2 and docs/where-to-add.md held to the code, so that they cannot drift.

The layer table has one row per row of the import-linter `layers` contract in pyproject.toml, in the same
order and with the same modules; every module of `uopgrad` on disk is in both, every module of a subpackage
is named on the page, and a module whose docstring names its layer names the table's number. Every failure
says which module is missing from which place. Also here: the files docs/where-to-add.md names exist, and
.pre-commit-config.yaml runs the tool versions noxfile.py pins. The `test_rule_*` tests pin the parsers on
small inputs, so a parser that silently reads nothing cannot pass as a green repository check.
"""

from __future__ import annotations

import ast
import difflib
import re
import tomllib
from pathlib import Path

import pytest
from test_style import ROOT

PACKAGE = ROOT / "packages/core/src/uopgrad"
ARCHITECTURE = ROOT / "docs/ARCHITECTURE.md"
WHERE_TO_ADD = ROOT / "docs/where-to-add.md"
CONTRACT_NAME = "core imports only point down"  # the start of the layers contract's name
FACADE = "__init__"  # the package itself: a row of the table, outside the contract (a container is no layer)
CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a table cell boundary; `\|` inside a cell is text
LAYER_IN_DOCSTRING = re.compile(r"\blayer (\d+)\b")
KINDS = ("source", "doc", "test")


# --- the parsers: each is a function of one text ---------------------------------------------------------


def contract_layers(pyproject: str) -> list[frozenset[str]]:
    """The rows of the core `layers` contract, top first; `a | b` (independent) and `a : b` are one row,
    `(a)` (an optional layer) is `a`."""
    contracts = tomllib.loads(pyproject)["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c["name"].startswith(CONTRACT_NAME)]
    return [frozenset(n.strip().strip("()") for n in re.split(r"[|:]", row)) for row in layers["layers"]]


def table_rows(markdown: str, heading: str) -> list[list[str]]:
    """The cells of every row of the first table after `heading` (a line of the page), header excluded."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#") and rows:
            break
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([c.strip() for c in CELL_SPLIT.split(line.strip()[1:-1])])
    assert len(rows) > 2, f"no table after {heading!r}"
    return rows[2:]  # the header and the |---| line


def named_modules(cell: str) -> list[tuple[str, str]]:
    """(name, how it is written) of each backticked module of a cell: `x.py` is a module, `x/` a package."""
    out = []
    for token in re.findall(r"`([^`]+)`", cell):
        if token.endswith(".py"):
            out.append((token.removesuffix(".py"), "module"))
        elif token.endswith("/"):
            out.append((token.removesuffix("/"), "package"))
        else:
            raise AssertionError(f"{token!r}: a layer row names `module.py` or `package/`")
    return out


def layer_table(markdown: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(layer, modules) of each row of ARCHITECTURE.md §2's table, top first."""
    rows = table_rows(markdown, "## 2. Core, layer by layer")
    return [(cells[0], named_modules(cells[1])) for cells in rows]


def docstring_layer(source: str) -> int | None:
    """The layer number the module docstring's first paragraph names (`... (layer 7): ...`), if any."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    m = LAYER_IN_DOCSTRING.search(doc.split("\n\n")[0])
    return int(m.group(1)) if m else None


def existing_path(path: str) -> Path:
    """The part of a repository path that must exist: all of it, or the folder before a `<name>` part."""
    parts = path.split("/")
    fixed = next((i for i, p in enumerate(parts) if "<" in p), None)
    return ROOT.joinpath(*parts) if fixed is None else ROOT.joinpath(*parts[:fixed])


# --- what the repository holds -----------------------------------------------------------------------------


def modules_on_disk() -> dict[str, str]:
    """Each top-level module of `uopgrad` -> `module` or `package` (a folder with an `__init__.py`)."""
    found = {p.stem: "module" for p in PACKAGE.glob("*.py")}
    found.update({p.name: "package" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()})
    return found


def submodules_on_disk() -> list[str]:
    """`package/module.py` of every module inside a subpackage (its `__init__.py` is the package's row)."""
    return sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.glob("*/**/*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def contract() -> list[frozenset[str]]:
    return contract_layers((ROOT / "pyproject.toml").read_text())


def table() -> list[tuple[str, list[tuple[str, str]]]]:
    return layer_table(ARCHITECTURE.read_text())


def table_layers() -> list[frozenset[str]]:
    """The table's rows below the facade, as the contract writes them."""
    return [frozenset(name for name, _ in modules) for _, modules in table()[1:]]


def row_of(name: str, rows: list[frozenset[str]]) -> str:
    """Where `name` sits in `rows`, for messages: `between "a" and "b"` or `in "a | b"`."""
    text = [" | ".join(sorted(r)) for r in rows]
    for i, row in enumerate(rows):
        if name in row:
            return f'in the contract row "{text[i]}" (row {i + 1} from the top)'
    return "in no contract row yet"


# --- the checks ---------------------------------------------------------------------------------------------


def test_every_module_is_in_the_contract():
    rows = contract()
    in_contract = [n for r in rows for n in r]
    disk = set(modules_on_disk()) - {FACADE}
    missing = sorted(disk - set(in_contract))
    assert not missing, (
        f"modules of uopgrad in no row of the import-linter layers in pyproject.toml: "
        f"{missing} (add each to the row of its layer)"
    )
    ghosts = sorted(set(in_contract) - disk)
    assert not ghosts, f"the import-linter layers in pyproject.toml name modules that do not exist: {ghosts}"
    twice = sorted({n for n in in_contract if in_contract.count(n) > 1})
    assert not twice, f"modules in more than one row of the import-linter layers: {twice}"


def test_every_module_has_a_row_in_the_architecture_table():
    named = {name for _, modules in table() for name, _ in modules}
    missing = sorted(set(modules_on_disk()) - named)
    rows = contract()
    hints = [f"{m} ({row_of(m, rows)})" for m in missing]
    assert not missing, f"modules of uopgrad without a row in docs/ARCHITECTURE.md §2: {hints}"


def test_the_architecture_table_names_only_modules_that_exist():
    disk = modules_on_disk()
    written = [(name, how) for _, modules in table() for name, how in modules]
    ghosts = sorted(name for name, _ in written if name not in disk)
    assert not ghosts, f"docs/ARCHITECTURE.md §2 names modules that do not exist: {ghosts}"
    wrong = sorted(
        f"{name}: write `{name}{'/' if disk[name] == 'package' else '.py'}`"
        for name, how in written
        if disk[name] != how
    )
    assert not wrong, f"docs/ARCHITECTURE.md §2 writes a module as a package or the reverse: {wrong}"


def test_the_architecture_rows_are_the_contract_rows_in_order():
    rows = table()
    assert rows[0] == ("facade", [(FACADE, "module")]), "the table's first row is the facade `__init__.py`"
    want = [" | ".join(sorted(r)) for r in contract()]
    got = [" | ".join(sorted(r)) for r in table_layers()]
    diff = "\n".join(
        difflib.unified_diff(want, got, "pyproject.toml layers", "docs/ARCHITECTURE.md §2", lineterm="", n=1)
    )
    assert got == want, f"the rows of docs/ARCHITECTURE.md §2 differ from the contract's (top first):\n{diff}"


def test_layer_numbers_descend_to_zero():
    numbers = [layer for layer, _ in table()[1:]]
    assert all(n.isdigit() for n in numbers), f"a layer is a number below the facade row: {numbers}"
    values = [int(n) for n in numbers]
    assert values == sorted(values, reverse=True) and values[-1] == 0, f"layers go down to 0: {values}"


def test_every_module_of_a_subpackage_is_named_on_the_page():
    text = ARCHITECTURE.read_text()
    missing = [m for m in submodules_on_disk() if m not in text]
    assert not missing, f"modules not named in docs/ARCHITECTURE.md (write `package/module.py`): {missing}"


def test_docstring_layers_are_the_table_layers():
    number = {name: int(layer) for layer, modules in table()[1:] for name, _ in modules}
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        said = docstring_layer(path.read_text())
        if said is not None and top in number and said != number[top]:
            wrong.append(f"{path.relative_to(PACKAGE)} says layer {said}, the table {number[top]}")
    assert not wrong, f"module docstrings that name another layer than docs/ARCHITECTURE.md §2: {wrong}"


def where_to_add() -> tuple[list[list[str]], dict[str, list[list[str]]]]:
    """The summary rows and, by section number, the file rows of docs/where-to-add.md."""
    text = WHERE_TO_ADD.read_text()
    summary = table_rows(text, "# Where to add X")
    sections = {m.group(1): table_rows(text, m.group(0)) for m in re.finditer(r"^## (\d+)\. .*$", text, re.M)}
    return summary, sections


def test_where_to_add_names_files_that_exist():
    _, sections = where_to_add()
    missing = []
    for number, rows in sections.items():
        for cells in rows:
            (path,) = re.findall(r"`([^`]+)`", cells[0])
            if not existing_path(path).exists():
                missing.append(f"§{number}: {path}")
    assert not missing, f"docs/where-to-add.md names files that do not exist: {missing}"


@pytest.mark.parametrize("kind", ["files", *KINDS])
def test_where_to_add_counts_are_its_rows(kind):
    summary, sections = where_to_add()
    assert len(summary) == len(sections) == 6
    for cells in summary:
        number = re.findall(r"\[(\d+)\]", cells[-1])[0]
        rows = sections[number]
        counted = len(rows) if kind == "files" else sum(cells_[1] == kind for cells_ in rows)
        column = ["files", *KINDS].index(kind) + 1
        assert int(cells[column]) == counted, f"{cells[0]}: {kind} {cells[column]}, §{number} has {counted}"
    assert all(cells[1] in KINDS for rows in sections.values() for cells in rows)


def test_where_to_add_is_linked():
    for page in (ARCHITECTURE, ROOT / "README.md"):
        assert "where-to-add.md" in page.read_text(), page


def nox_pins() -> dict[str, str]:
    """The tool pins of noxfile.py (`RUFF = "ruff==0.17.6"`, ...): name -> requirement."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    return {
        n.targets[0].id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
        and "==" in n.value.value
    }


def test_pre_commit_runs_the_versions_nox_pins():
    pins, config = nox_pins(), (ROOT / ".pre-commit-config.yaml").read_text()
    assert {"RUFF", "MYPY", "IMPORT_LINTER"} <= set(pins), pins
    ruff = pins["RUFF"].partition("==")[2]
    assert f"rev: v{ruff}" in config, f"ruff-pre-commit's rev is not v{ruff} (noxfile.py RUFF)"
    for name in ("MYPY", "IMPORT_LINTER"):
        assert pins[name] in config, f".pre-commit-config.yaml does not name {pins[name]} (noxfile.py {name})"


# --- the parsers on small inputs ---------------------------------------------------------------------------


def test_rule_contract_layers():
    toml = (
        '[[tool.importlinter.contracts]]\nname = "other"\ntype = "forbidden"\n'
        f'[[tool.importlinter.contracts]]\nname = "{CONTRACT_NAME} (x)"\ntype = "layers"\n'
        'layers = ["cli", "a | b", "c : (d)", "e"]\n'
    )
    assert contract_layers(toml) == [{"cli"}, {"a", "b"}, {"c", "d"}, {"e"}]


def test_rule_layer_table():
    page = (
        "# t\n\n## 2. Core, layer by layer\n\ntext\n\n| layer | module | what |\n|---|---|---|\n"
        "| facade | `__init__.py` | the facade |\n| 1 | `a.py` \\| `b/` | a \\| b, with `x\\|y` |\n"
        "| 0 | `c.py` | c |\n\n### 2.1 next\n\n| layer | module | what |\n|---|---|---|\n| 9 | `z.py` | z |\n"
    )
    assert layer_table(page) == [
        ("facade", [("__init__", "module")]),
        ("1", [("a", "module"), ("b", "package")]),
        ("0", [("c", "module")]),
    ]
    with pytest.raises(AssertionError, match="names `module.py`"):
        named_modules("`symbolic`")


def test_rule_docstring_layer():
    assert docstring_layer('"""The IR node (layer 6): UOp."""\n') == 6
    assert docstring_layer('"""A mixin of Tensor, layer 15 with\ntensor.py."""\n') == 15
    assert docstring_layer('"""VIZ (top layer).\n\nlayer 3 in a later paragraph."""\n') is None
    assert docstring_layer("x = 1\n") is None


def test_rule_existing_path():
    assert existing_path("packages/backend-<name>/src/x.py") == ROOT / "packages"
    assert existing_path("docs/where-to-add.md") == WHERE_TO_ADD
