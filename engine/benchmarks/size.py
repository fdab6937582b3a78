"""The engine's size in code lines, the measure of its budget: lines that hold code, not blank, comment or
docstring lines (a module's, class's or function's first string statement). The core is everything but
``runwright/commands/``; the commands (``export``, ``report``, ``lr_find``/``scale_batch_size``, ``sweep``,
``submit`` and the run rebuild they share) are the optional part.

    python engine/benchmarks/size.py            # the core, the commands, and every file
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

#: The engine's package, and the budget of each part (code lines).
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "runwright"
BUDGET = {"core": 2000, "commands": 800}


def code_lines(source: str) -> int:
    """The number of lines of ``source`` (Python) that hold code: a line with a token other than a comment,
    a newline or indentation, outside the docstrings."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skip = {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENDMARKER,
    }
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def sizes(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """``{"core": {file: lines}, "commands": {file: lines}}`` for the package's Python files."""
    parts: dict[str, dict[str, int]] = {"core": {}, "commands": {}}
    for path in sorted(package.rglob("*.py")):
        part = "commands" if "commands" in path.relative_to(package).parts else "core"
        parts[part][str(path.relative_to(package))] = code_lines(path.read_text())
    return parts


def main() -> int:
    """Print each file's code lines, each part's total against its budget; exit 1 when one is over."""
    over = False
    for part, files in sizes().items():
        for name, lines in sorted(files.items(), key=lambda item: -item[1]):
            print(f"{lines:6d}  {name}")
        total = sum(files.values())
        over |= total > BUDGET[part]
        print(f"{total:6d}  {part} (budget {BUDGET[part]})\n")
    return int(over)


if __name__ == "__main__":
    sys.exit(main())
