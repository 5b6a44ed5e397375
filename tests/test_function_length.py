"""Issue 31: no function in ``specnsys/`` is longer than 80 lines (signature, docstring and
body), so that each says one thing and can be read whole; a longer one is split into named
parts (``attribution/lanes.py``'s ``_lanes`` was 203 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specnsys"
LIMIT = 80


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LIMIT:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines})")
    assert not long, long
