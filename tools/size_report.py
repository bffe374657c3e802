"""Size report (docs/style.md P15): code lines and tokens per code line of every module of every package.

Information, never a cap: a module above 12 tokens/line or 600 code lines gets a mark in the table.
A code line is a line on which a code token starts; comments, blank lines and docstrings are not code.
Usage: `python tools/size_report.py [DIR ...]` (default: packages/*/src and conformance/src).
"""

from __future__ import annotations

import ast
import os
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS_PER_LINE = 12.0
MAX_LINES = 600
# An f-string (or t-string) counts as one token on every Python version: 3.12+ tokenizes its inside,
# 3.11 does not. These types exist only on 3.12+/3.14+; -1 stands in where they don't.
STRING_STARTS = {getattr(tokenize, t, -1) for t in ("FSTRING_START", "TSTRING_START")}
STRING_ENDS = {getattr(tokenize, t, -1) for t in ("FSTRING_END", "TSTRING_END")}
CODE_TOKENS = {tokenize.OP, tokenize.NAME, tokenize.NUMBER, tokenize.STRING} | STRING_STARTS


@dataclass(frozen=True)
class Size:
    """Code lines and code tokens of one module (or a sum of modules)."""

    lines: int
    tokens: int

    @property
    def density(self) -> float:
        """Tokens per code line."""
        return self.tokens / self.lines if self.lines else 0.0


def docstring_starts(tree: ast.Module) -> set[tuple[int, int]]:
    """Start positions of the module, class and function docstrings in `tree`."""
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    starts.add((first.value.lineno, first.value.col_offset))
    return starts


def measure(path: Path) -> Size:
    """Count the code lines and code tokens of one Python file."""
    source = path.read_text(encoding="utf-8")
    docstrings = docstring_starts(ast.parse(source, filename=str(path)))
    lines, tokens, depth = set(), 0, 0  # depth: how many f-strings the current token is inside
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if depth > 0:  # inside an f-string, which was counted at its start
                depth += (tok.type in STRING_STARTS) - (tok.type in STRING_ENDS)
                continue
            depth = int(tok.type in STRING_STARTS)
            if tok.type in CODE_TOKENS and tok.start not in docstrings:
                lines.add(tok.start[0])
                tokens += 1
    return Size(len(lines), tokens)


def marks(size: Size) -> str:
    """Why a module stands out, if it does."""
    out = []
    if size.density > MAX_TOKENS_PER_LINE:
        out.append(f"> {MAX_TOKENS_PER_LINE:g} tok/line")
    if size.lines > MAX_LINES:
        out.append(f"> {MAX_LINES} lines")
    return ", ".join(out)


def row(name: str, width: int, size: Size, note: str = "") -> str:
    """One line of the table."""
    return f"{name:<{width}}  {size.lines:>6}  {size.tokens:>7}  {size.density:>8.1f}  {note}".rstrip()


def main(argv: list[str]) -> int:
    """Print the table for the source roots in `argv` (or every package's src/)."""
    roots = [Path(a).resolve() for a in argv] or [*ROOT.glob("packages/*/src"), ROOT / "conformance/src"]
    modules = sorted(p for root in roots if root.is_dir() for p in root.rglob("*.py"))
    if not modules:
        print("size report: no modules found under", ", ".join(str(r) for r in roots))
        return 0
    rows = [(os.path.relpath(p, ROOT), measure(p)) for p in modules]
    width = max(len(name) for name, _ in rows)
    print(f"{'module':<{width}}  {'lines':>6}  {'tokens':>7}  {'tok/line':>8}")
    for name, size in rows:
        print(row(name, width, size, marks(size)))
    print(row("total", width, Size(sum(s.lines for _, s in rows), sum(s.tokens for _, s in rows))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
