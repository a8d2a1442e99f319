"""The exercise notebooks in solutions/ (nbgrader format).

For every notebook there:

* its nbgrader metadata is well formed (solution cells with BEGIN/END SOLUTION markers,
  locked test cells with points, unique grade ids, at least two graded exercises);
* the student version — each solution region replaced by ``raise NotImplementedError()`` (or
  "YOUR ANSWER HERE" in markdown) and hidden tests removed, as nbgrader's ClearSolutions and
  ClearHiddenTests do — is what ``hpcnb.course.grading generate`` writes.

That the solutions pass every graded test and the untouched student versions fail every one is
checked by running them through the autograder (tests/test_grading.py); that each graded test fails
on plausible wrong answers, by tests/test_mutants.py; that no solution cell raises, by nbval.

The student version is made with nbgrader's own preprocessors when nbgrader is installed
(the ``instructor`` extra), otherwise with the equivalent :func:`student_version` below; a
test checks that both give the same notebook.
"""
from __future__ import annotations

import ast
import copy
import re
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "solutions").glob("[0-9][0-9]*-*.ipynb"))

BEGIN_SOLUTION, END_SOLUTION = "BEGIN SOLUTION", "END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"


def grading(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_solution(cell) -> bool:
    return bool(grading(cell).get("solution"))


def is_graded_test(cell) -> bool:
    meta = grading(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _replace_region(source: str, begin: str, end: str, stub: str | None) -> tuple[str, bool]:
    """Replace every begin..end region (marker lines included) by ``stub`` (None: drop it)."""
    out: list[str] = []
    inside = found = False
    for line in source.split("\n"):
        if begin in line:
            assert not inside, f"nested {begin!r}"
            inside = found = True
            if stub is not None:
                indent = line[: len(line) - len(line.lstrip())]
                out.extend(indent + s for s in stub.split("\n"))
        elif end in line:
            assert inside, f"{end!r} without {begin!r}"
            inside = False
        elif not inside:
            out.append(line)
    assert not inside, f"{begin!r} without {end!r}"
    return "\n".join(out), found


def student_version(nb):
    """The notebook a student gets: solutions cleared, hidden tests removed, outputs cleared."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        stub = CODE_STUB if cell.cell_type == "code" else TEXT_STUB
        if is_solution(cell):
            cell.source, found = _replace_region(cell.source, BEGIN_SOLUTION, END_SOLUTION, stub)
            if not found:
                cell.source = stub
        if is_graded_test(cell):
            cell.source, _ = _replace_region(cell.source, BEGIN_HIDDEN, END_HIDDEN, None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def nbgrader_student_version(nb):
    """The same, made by nbgrader's ClearSolutions and ClearHiddenTests."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    nb = copy.deepcopy(nb)
    nb, _ = ClearSolutions().preprocess(nb, {})
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb






def label(cell) -> str:
    return grading(cell).get("grade_id", cell.get("id", "?"))


@pytest.fixture(params=NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def notebook(request) -> Path:
    return request.param


def test_there_are_exercise_notebooks():
    assert len(NOTEBOOKS) >= 3, f"expected an exercise notebook per lesson in {ROOT / 'solutions'}"


def test_nbgrader_metadata(notebook: Path):
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    ids = [label(c) for c in nb.cells if grading(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {notebook.name}"
    tests = [c for c in nb.cells if is_graded_test(c)]
    assert len(tests) >= 2, "at least two graded exercises"
    for cell in nb.cells:
        meta = grading(cell)
        if not is_solution(cell):
            assert BEGIN_SOLUTION not in cell.source, f"solution marker outside a solution cell: {cell.source[:60]!r}"
        if not meta:
            continue
        assert meta.get("schema_version") == 3 and meta.get("grade_id"), label(cell)
        if is_solution(cell):
            assert meta.get("locked") is False and meta.get("grade") is False, label(cell)
            if cell.cell_type == "code":
                assert f"### {BEGIN_SOLUTION}" in cell.source and f"### {END_SOLUTION}" in cell.source, label(cell)
        if is_graded_test(cell):
            assert meta.get("locked") is True and meta.get("points", 0) > 0, label(cell)
            assert re.search(r"^\s*assert\b", cell.source, re.MULTILINE), f"{label(cell)} has no assert"
    # every graded test follows a solution cell
    seen_solution = False
    for cell in nb.cells:
        if is_solution(cell):
            seen_solution = True
        elif is_graded_test(cell):
            assert seen_solution, f"{label(cell)} tests nothing a student writes"
            seen_solution = False


def test_student_version_matches_nbgrader(notebook: Path):
    pytest.importorskip("nbgrader")
    nb = nbformat.read(notebook, as_version=4)
    ours = [c.source for c in student_version(nb).cells]
    theirs = [c.source for c in nbgrader_student_version(nb).cells]
    assert ours == theirs




def test_student_version_clears_regions():
    """The clearing itself, on a small made-up notebook."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1\n    ### BEGIN SOLUTION\n    y = 2\n    ### END SOLUTION\nprint(y)",
                                  metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": "a",
                                                         "locked": False, "schema_version": 3}}),
        nbformat.v4.new_markdown_cell("no markers here",
                                      metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": "b",
                                                             "locked": False, "schema_version": 3}}),
        nbformat.v4.new_code_cell("assert y == 2\n### BEGIN HIDDEN TESTS\nassert y > 1\n### END HIDDEN TESTS",
                                  metadata={"nbgrader": {"solution": False, "grade": True, "grade_id": "c",
                                                         "points": 1, "locked": True, "schema_version": 3}}),
    ])
    student = student_version(nb)
    assert student.cells[0].source == "x = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\nprint(y)"
    assert student.cells[1].source == TEXT_STUB
    assert student.cells[2].source == "assert y == 2"
    if _has_nbgrader():
        assert [c.source for c in nbgrader_student_version(nb).cells] == [c.source for c in student.cells]


def _has_nbgrader() -> bool:
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------- feedback a student can act on (issue 25)

def _python(source: str) -> ast.Module:
    """A cell's code as Python (IPython's ``!cmd`` lines turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return ast.parse(TransformerManager().transform_cell(source))


def _has_text(node: ast.AST) -> bool:
    return any(isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str))
               for n in ast.walk(node))


def _student_names(cell) -> set[str]:
    """Names a solution cell's answer defines: what its regions assign at top level, and the
    functions whose body is a region (their stub raises NotImplementedError)."""
    names: set[str] = set()
    region: list[str] | None = None
    for line in cell.source.split("\n"):
        if BEGIN_SOLUTION in line:
            region = []
        elif END_SOLUTION in line and region is not None:
            tree = _python(textwrap.dedent("\n".join(region)))
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    names.add(node.name)
                names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                          and not isinstance(node, (ast.FunctionDef, ast.ClassDef))}
            region = None
        elif region is not None:
            region.append(line)
    for node in _python(cell.source).body:
        if isinstance(node, ast.FunctionDef) and BEGIN_SOLUTION in (ast.get_source_segment(cell.source, node) or ""):
            names.add(node.name)
    return names


def _answered_call(tree: ast.Module) -> ast.Call | None:
    """The cell's first statement after its imports, if it is ``answered(...)``."""
    body = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    first = body[0] if body else None
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
            and isinstance(first.value.func, ast.Name) and first.value.func.id == "answered"):
        return first.value
    return None


def test_graded_checks_name_the_mistake(notebook: Path) -> None:
    """Every assert of a graded test cell says what is wrong (no bare assert), and the cell first
    checks with answered("N.K", ...) every name of the student's answer that it reads, so that an
    unanswered exercise says so instead of failing with a NameError."""
    nb = nbformat.read(notebook, as_version=4)
    number = notebook.name.split("-")[0].lstrip("0")
    student: set[str] = set()
    exercise = 0
    for cell in nb.cells:
        if is_solution(cell) and cell.cell_type == "code":
            student |= _student_names(cell)
        if not is_graded_test(cell):
            continue
        exercise += 1
        tree = _python(cell.source)
        bare = [ast.unparse(n)[:80] for n in ast.walk(tree) if isinstance(n, ast.Assert)
                and (n.msg is None or not _has_text(n.msg))]
        assert not bare, f"{notebook.name} {label(cell)}: asserts without a message naming the mistake: {bare}"
        call = _answered_call(tree)
        assert call is not None, f"{notebook.name} {label(cell)}: start with answered(\"{number}.{exercise}\", ...)"
        listed = [a.value for a in call.args if isinstance(a, ast.Constant)]
        assert listed[0] == f"{number}.{exercise}", f"{notebook.name} {label(cell)}: answered({listed[0]!r}, ...)"
        own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        own |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments)
                for a in n.args + n.kwonlyargs + n.posonlyargs}
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unchecked = sorted((read & student) - own - set(listed[1:]))
        assert not unchecked, (f"{notebook.name} {label(cell)} reads {unchecked} from the student's answer: "
                               "name them in its answered(...) call")


def test_answered_says_unanswered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcnb.course.checks import answered, is_stub

    namespace: dict = {}
    exec(compile("def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n", "<cell>", "exec"), namespace)
    exec(compile("def g(x):\n    return x\n", "<cell>", "exec"), namespace)
    assert is_stub(namespace["f"]) and not is_stub(namespace["g"]) and not is_stub(3)
    namespace.update(answered=answered, value=1)
    monkeypatch.chdir(tmp_path)
    exec('answered("1.1", "value", "g")', namespace)
    for call, missing in [('answered("2.3", "value", "nothing")', "`nothing`"), ('answered("2.3", "f")', "`f`"),
                          ('answered("2.3", files=("ddp.py",))', "the file ddp.py")]:
        with pytest.raises(AssertionError, match=rf"^2\.3 is unanswered: .*{re.escape(missing)}"):
            exec(call, namespace)
