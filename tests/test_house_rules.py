"""The house rules of ARCHITECTURE.md, read from the code itself (its imports and its SQL, with ast):

- one module, ``localslurm/transitions.py``, writes every job and step state;
- the commands (``localslurm/commands/``) import no daemon module (supervisor, scheduler, allocation,
  controller), directly or through another module, at module level or inside a function;
- one parser of calendar times, in ``hpcnb/slurm/times.py``;
- no import circles between hpcnb's modules (a package's ``__init__`` re-exporting its rooms aside),
  module level or inside a function.

Each rule's reader is also fed a planted violation, so a reader that sees nothing fails too.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import hpcnb

PACKAGE = Path(hpcnb.__file__).parent
TRANSITIONS = "hpcnb.localslurm.transitions"
TIMES = "hpcnb.slurm.times"
COMMANDS = "hpcnb.localslurm.commands"
DAEMON = {"hpcnb.localslurm.supervisor", "hpcnb.localslurm.scheduler", "hpcnb.localslurm.controller",
          "hpcnb.localslurm.allocation"}


# -- the readers ---------------------------------------------------------------------------------

def package_sources(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    """Every module of hpcnb: dotted name -> (source, is a package's ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if package else parts)
        found[name] = (path.read_text(encoding="utf-8"), package)
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:`` (never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(module: str, source: str, package: bool = False) -> set[str]:
    """The dotted names a module imports anywhere (module level or in a function), relative
    imports resolved; ``from X import y`` gives both ``X`` and ``X.y``."""
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if package else 0)
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _strings(tree: ast.AST):
    """(line, text) of every string in the code but docstrings; an f-string's fields read ``{}``."""
    skip = _docstrings(tree)
    inside = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip | inside:
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


_UPDATE = re.compile(r"\bUPDATE\s+(?:OR\s+\w+\s+)?(jobs|steps)\s+SET\s+(.*?)(?:\bWHERE\b|$)", re.I | re.S)
_INSERT = re.compile(r"\b(?:INSERT|REPLACE)\s+(?:OR\s+\w+\s+)?INTO\s+(jobs|steps)\s*\(([^)]*)\)", re.I | re.S)


def state_writes(source: str) -> list[tuple[int, str]]:
    """Where a module writes a job's or a step's state: SQL that sets or inserts ``state`` (an
    insert whose columns are built at run time counts), or a record's ``.update(state="...")``."""
    tree = ast.parse(source)
    found = []
    for line, text in _strings(tree):
        for table, sets in _UPDATE.findall(text):
            if re.search(r"(?<![\w.])state\s*=", sets) or "{}" in sets:
                found.append((line, f"UPDATE {table} SET {sets.strip()}"))
        for table, cols in _INSERT.findall(text):
            if "state" in re.split(r"[\s,]+", cols) or "{}" in cols:
                found.append((line, f"INSERT INTO {table}({cols})"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            values = [k.value for k in node.keywords if k.arg == "state"]
            if values and _literal_state(values[0]):
                found.append((node.lineno, f"{ast.unparse(node.func)}(state={ast.unparse(values[0])})"))
    return sorted(found)


def _literal_state(value: ast.expr) -> bool:
    """A state set, not copied: ``"NODE_FAIL"``, ``"NODE_FAIL" if batch else "CANCELLED"``."""
    if isinstance(value, ast.IfExp):
        return _literal_state(value.body) or _literal_state(value.orelse)
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


_CALENDAR_WORDS = re.compile(r"\b(tomorrow|teatime|elevenses|fika|midnight|noon)\b", re.I)
_PARSING_CALLS = {"strptime", "fromisoformat", "parse_datetime", "isoparse"}


def time_parsers(source: str) -> list[tuple[int, str]]:
    """Where a module parses a calendar time itself: ``strptime``/``fromisoformat`` calls,
    ``dateutil``, or the words of Slurm's calendar grammar in its strings."""
    tree = ast.parse(source)
    found = [(line, f"calendar word in {text!r}") for line, text in _strings(tree) if _CALENDAR_WORDS.search(text)]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _PARSING_CALLS:
                found.append((node.lineno, f"{name}()"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(node.lineno, f"import {m}") for m in mods if m.split(".")[0] in ("dateutil", "parsedatetime")]
    return sorted(found)


def daemon_paths(sources: dict[str, tuple[str, bool]]) -> list[list[str]]:
    """Every import chain from a command module to a daemon module (through hpcnb's own modules)."""
    graph = {name: sorted(imports(name, src, pkg) & set(sources)) for name, (src, pkg) in sources.items()}
    chains = []
    for start in sorted(n for n in sources if n.startswith(COMMANDS + ".") or n == COMMANDS):
        seen, stack = {start}, [[start]]
        while stack:
            chain = stack.pop()
            for target in graph[chain[-1]]:
                if target in DAEMON:
                    chains.append(chain + [target])
                elif target not in seen:
                    seen.add(target)
                    stack.append(chain + [target])
    return chains


def import_circles(sources: dict[str, tuple[str, bool]]) -> list[list[str]]:
    """Every import circle between modules (not packages' ``__init__``): ``[a, b, a]``, each found once."""
    modules = {name for name, (_, package) in sources.items() if not package}
    graph = {name: sorted(imports(name, src, False) & modules) for name, (src, package) in sources.items()
             if not package}
    circles, done = [], set()

    def visit(name: str, path: list[str]) -> None:
        for target in graph[name]:
            if target in path:
                circles.append(path[path.index(target):] + [target])
            elif target not in done:
                visit(target, path + [target])
        done.add(name)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    return circles


# -- the readers see a planted violation ---------------------------------------------------------

PLANTED_WRITES = '''
def cancel(conn, job_id):
    """UPDATE jobs SET state='CANCELLED' (a docstring is no write)"""
    conn.execute("UPDATE jobs SET reason='None' WHERE id=? AND state='PENDING'", (job_id,))  # a guard, no write
    conn.execute(
        "UPDATE jobs SET end_time=?, "
        "state='CANCELLED' WHERE id=?", (1.0, job_id))
    conn.execute("INSERT OR REPLACE INTO steps(job_id, step, state) VALUES(?, 'batch', 'RUNNING')", (job_id,))
    conn.execute(f"INSERT INTO jobs({','.join(cols)}) VALUES(?)", values)
    record.update(state="NODE_FAIL" if batch else "CANCELLED", end_time=1.0)
    shown.update(state=record["state"])  # a row printed, not a state set
    conn.execute("INSERT INTO meta(key, value) VALUES('state', ?)", ("x",))
'''


def test_the_state_reader_finds_a_planted_write():
    found = [line for line, _ in state_writes(PLANTED_WRITES)]
    assert found == [6, 8, 9, 10], state_writes(PLANTED_WRITES)


def test_the_import_reader_finds_a_planted_daemon_import():
    sources = {
        COMMANDS: ("", True),
        f"{COMMANDS}.fake": ("from .. import db\n\ndef main():\n    from ..helper import x\n", False),
        "hpcnb.localslurm.helper": ("from .scheduler import schedule as x\n", False),
        "hpcnb.localslurm.db": ("", False),
        "hpcnb.localslurm.scheduler": ("", False),
        f"{COMMANDS}.typed": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from ..supervisor import Outcome\n", False),
    }
    assert daemon_paths(sources) == [[f"{COMMANDS}.fake", "hpcnb.localslurm.helper", "hpcnb.localslurm.scheduler"]]
    sources[f"{COMMANDS}.direct"] = ("import hpcnb.localslurm.controller\n", False)
    sources["hpcnb.localslurm.controller"] = ("", False)
    assert [f"{COMMANDS}.direct", "hpcnb.localslurm.controller"] in daemon_paths(sources)


def test_the_time_reader_finds_a_planted_parser():
    planted = ("import time\nfrom dateutil import parser\n\n"
               "def start(text):\n    if text == 'tomorrow':\n        return 86400\n"
               "    return time.mktime(time.strptime(text, '%Y-%m-%d'))\n")
    assert [line for line, _ in time_parsers(planted)] == [2, 5, 7]
    assert time_parsers("import time\nmidnight = time.mktime(time.localtime()[:3] + (0,) * 6)\n") == []


# -- the rules hold for hpcnb --------------------------------------------------------------------

SOURCES = package_sources()


def test_only_transitions_writes_a_job_or_step_state():
    writers = {name: found for name, (src, _) in SOURCES.items() if (found := state_writes(src))}
    assert TRANSITIONS in writers, "the reader sees none of transitions.py's writes: it is blind"
    del writers[TRANSITIONS]
    assert not writers, f"job/step states written outside {TRANSITIONS}: {writers}"


def test_the_commands_import_no_daemon_module():
    chains = daemon_paths(SOURCES)
    assert not chains, "commands reaching daemon code: " + "; ".join(" -> ".join(c) for c in chains)


def test_one_calendar_time_parser():
    parsers = {name: found for name, (src, _) in SOURCES.items() if (found := time_parsers(src))}
    assert TIMES in parsers, "the reader sees nothing of times.parse_calendar: it is blind"
    del parsers[TIMES]
    assert not parsers, f"calendar times parsed outside {TIMES}: {parsers}"


def test_the_circle_reader_finds_a_planted_circle():
    sources = {"hpcnb.a": ("def f():\n    from hpcnb import b\n", False), "hpcnb.b": ("from .c import x\n", False),
               "hpcnb.c": ("from . import a\n", False), "hpcnb": ("from . import a, b\n", True)}
    assert import_circles(sources) == [["hpcnb.a", "hpcnb.b", "hpcnb.c", "hpcnb.a"]]


def test_no_import_circles():
    """Each room imports only those above it (ARCHITECTURE.md); a circle means two modules share a
    concern that belongs in a third."""
    circles = import_circles(package_sources())
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)

