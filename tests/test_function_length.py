"""No function of the package (``simulator/``, ``workloads/``) is longer than a reader can hold at
once: 120 lines, its decorators, docstring and comments included. A longer one is split into named
helpers, the way ``simulator/outputs/export.py`` builds a run's metrics series by series group."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 120


def _functions(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            yield node.name, first, node.end_lineno - first + 1


def test_no_function_over_120_lines():
    """Every function and method in simulator/ and workloads/ spans at most 120 lines."""
    files = sorted(p for unit in ("simulator", "workloads") for p in (ROOT / unit).rglob("*.py"))
    assert len(files) > 50  # the walk found the package
    too_long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in files
        for name, line, length in _functions(path)
        if length > MAX_LINES
    ]
    assert not too_long, f"functions over {MAX_LINES} lines (split them into named helpers): {too_long}"


def test_the_check_sees_a_long_function(tmp_path):
    """The measure counts a function's whole span, so a 121-line function is caught."""
    body = "\n".join(f"    x{i} = {i}" for i in range(120))
    path = tmp_path / "long.py"
    path.write_text(f"@staticmethod\ndef f():\n{body}\n")
    assert list(_functions(path)) == [("f", 1, 122)]
