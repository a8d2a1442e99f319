"""Wrong answers planted in solution notebooks, for the tests: an answer that runs but is wrong
must not score full marks (tests/test_grading.py)."""
from __future__ import annotations

import ast
import textwrap
from typing import Any

__all__ = ["plant_wrong_answer"]


def _wrong_code(code: str) -> str:
    """Code that defines the same names as ``code`` with wrong values (None), keeping imports."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return "pass"
    lines: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines.append(f"def {node.name}(*args, **kwargs):\n    return None")
        elif isinstance(node, ast.ClassDef):
            lines.append(f"class {node.name}:\n    pass")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        lines.append(f"{name.id} = None")
        elif isinstance(node, ast.Return):
            lines.append("return None")
    return "\n".join(lines) or "pass"


def plant_wrong_answer(nb: Any, cell_index: int) -> Any:
    """A copy of solution notebook ``nb`` whose answer in cell ``cell_index`` is wrong but runs:
    every name it defines is None (functions return None); the markers stay, as in a submission."""
    import copy

    nb = copy.deepcopy(nb)
    cell = nb.cells[cell_index]
    source = cell.source
    if "BEGIN SOLUTION" not in source:
        cell.source = _wrong_code(source)
        return nb
    out, region, indent = [], None, ""
    for line in source.splitlines():
        if "BEGIN SOLUTION" in line:
            region, indent = [], line[: len(line) - len(line.lstrip())]
        elif "END SOLUTION" in line and region is not None:
            out += [indent + wrong if wrong else wrong for wrong in _wrong_code("\n".join(region)).splitlines()]
            region = None
        elif region is not None:
            region.append(line)
        else:
            out.append(line)
    cell.source = "\n".join(out)
    return nb
