"""Every job the course's notebooks submit, read statically (the node-hour budget, INSTRUCTORS.md).

Each code cell is read as IPython reads it (its ``!shell`` lines and ``%%magics`` turned into
Python) and walked with :mod:`ast`: ``submit(...)`` of the job API, ``subprocess.run(["sbatch",
...])`` and the like, ``!sbatch``, ``!salloc`` and stand-alone ``!srun`` lines (split with
:mod:`shlex`, their options read by Slurm's own parser, :func:`hpcnb.slurm.options.parse_args`),
and the job scripts they name: ``%%jobscript`` and ``hpcnb.write_jobscript`` (rendered for each
site), ``%%writefile`` and ``Path(...).write_text`` (as written). An ``srun`` into a job that
exists (``--overlap``, ``--jobid``, ``SLURM_JOB_ID=``) is a step of that job, not a job.

Names bound to literals (``NODES = 2``), IPython's ``{name}`` in shell lines and loops over
literal values (``for n in (1, 2)``, ``range(3)``) are followed, one submission per value. What
is computed stays unread: the submission still counts, with the site's defaults for what could
not be read, and says so in its ``notes``. A ``%%jobscript`` that no read submission names
counts once, as written.
"""
from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

from hpcnb.jobscript import parse_script
from hpcnb.slurm.options import COMMANDS, OptionError, keyword_option, parse_args

__all__ = ["BUDGET_OPTIONS", "Script", "Submission", "read_course"]

#: The options that change what a job costs: read from the command line, else the script.
BUDGET_OPTIONS = ("nodes", "time", "array", "gpus-per-node", "gres")
_SUBMIT_SKIPPED = {"args", "cwd", "wrap"}   # submit()'s own keywords, not sbatch options
_BOUND = re.compile(r"\{([A-Za-z_]\w*)\}")
_SEPARATORS = frozenset(";&|")


@dataclass(frozen=True)
class Script:
    """A job script a notebook writes: ``site`` when the site's profile renders it (``%%jobscript``,
    ``write_jobscript``), with the GPUs per node it wants; ``text`` None where it is computed."""

    text: str | None
    gpus_wanted: int = 0
    site: bool = False


@dataclass(frozen=True)
class Submission:
    """One job a notebook submits: with which command, which script, and the options given on
    its command line (or as ``submit()`` keywords), each value as read ("{...}": not read)."""

    notebook: str
    command: str                         # "sbatch", "salloc", "srun", "submit" ("cell", "shell": not read)
    script: str | None                   # the script's file name (None: --wrap, salloc, srun)
    body: Script | None                  # what the notebook wrote there, if it did
    options: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()          # what could not be read

    @property
    def lesson(self) -> str:
        return self.notebook.split("-")[0]

    @property
    def label(self) -> str:
        if self.script:
            return "a computed script" if _unread(self.script) else self.script
        return "--wrap" if self.command in ("sbatch", "submit") else self.command

    def option(self, long: str) -> str | None:
        """The command line's value of ``long`` (the last one given), if any."""
        return next((value for key, value in reversed(self.options) if key == long), None)


def _unread(text: str) -> bool:
    return "{" in text


def _expand(text: str, env: dict[str, object]) -> str:
    """IPython's ``{name}`` of a shell line, or an f-string's, for the names bound to literals."""
    return _BOUND.sub(lambda m: str(env[m[1]]) if m[1] in env else m[0], text)


def _text(node: ast.expr, env: dict[str, object]) -> str:
    """A string expression's text; what is computed in it as ``{expression}``."""
    if isinstance(node, ast.Constant) and not isinstance(node.value, (bytes, type(None))):
        return "" if node.value is True else str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part, env) if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and any(
            isinstance(side, ast.JoinedStr) or (isinstance(side, ast.Constant) and isinstance(side.value, str))
            for side in (node.left, node.right)):
        return _text(node.left, env) + _text(node.right, env)
    return _expand("{" + ast.unparse(node) + "}", env)


def _literal(node: ast.expr, env: dict[str, object]) -> list[object] | None:
    """The values a ``for`` loop runs over, where they are literal (or ``range`` of one)."""
    if isinstance(node, ast.Name) and isinstance(env.get(node.id), (list, tuple)):
        return list(env[node.id])  # type: ignore[arg-type]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
            and not node.keywords):
        bounds = [_value(arg, env) for arg in node.args]
        return list(range(*bounds)) if all(isinstance(b, int) for b in bounds) else None  # type: ignore[arg-type]
    if isinstance(node, (ast.List, ast.Tuple)):   # its length is known, its computed values not
        return [tuple(_value(e, env) for e in element.elts) if isinstance(element, (ast.Tuple, ast.List))
                else _value(element, env) for element in node.elts]
    value = _value(node, env)
    return list(value) if isinstance(value, (list, tuple)) else None


def _value(node: ast.expr, env: dict[str, object]) -> object:
    """A literal's value, or a name's bound to one, or an f-string's text; None when computed."""
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.JoinedStr):
        return _text(node, env)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _bind(target: ast.expr, value: object, env: dict[str, object]) -> None:
    """Bind a loop's or assignment's names to ``value`` (forget them where it is not literal)."""
    if isinstance(target, ast.Name):
        env.pop(target.id, None)
        if value is not None:
            env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values = list(value) if isinstance(value, (list, tuple)) and len(value) == len(target.elts) else None
        for i, element in enumerate(target.elts):
            _bind(element, None if values is None else values[i], env)


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _ipython(call: ast.Call, *methods: str) -> bool:
    """``get_ipython().METHOD(...)``: what IPython turns ``!line`` and ``%%magic`` into."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in methods and isinstance(func.value, ast.Call)
            and _name(func.value.func) == "get_ipython")


class _Reader:
    """Reads one lesson's notebooks in order: the scripts they write, the jobs they submit."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.submitted: set[str] = set()
        self.found: list[Submission] = []
        self.notebook = ""

    def notebook_cells(self, path: Path) -> None:
        self.notebook = path.name
        env: dict[str, object] = {}
        for number, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code":
                continue
            try:
                tree = ast.parse(TransformerManager().transform_cell(source))
            except SyntaxError:
                if re.search(r"\b(sbatch|salloc|srun|submit)\b", source):
                    self._add("cell", None, [], [f"cell {number} is not Python: not read"])
                continue
            self.statements(tree.body, env, ())

    def statements(self, body: list[ast.stmt], env: dict[str, object], notes: tuple[str, ...]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                values = _literal(stmt.iter, env)
                if values is None:
                    self.nested(stmt.body, env, stmt.target, None,
                                (*notes, f"in a loop over `{ast.unparse(stmt.iter)}`: counted once"))
                for value in values or ():
                    self.nested(stmt.body, env, stmt.target, value, notes)
                self.statements(stmt.orelse, env, notes)
            elif isinstance(stmt, ast.While):
                self.calls(stmt.test, env, notes)
                self.nested(stmt.body, env, None, None, (*notes, "in a while loop: counted once"))
            elif any(isinstance(v, list) and v and isinstance(v[0], ast.stmt) for _, v in ast.iter_fields(stmt)):
                self.compound(stmt, env, notes)
            else:
                self.calls(stmt, env, notes)
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        _bind(target, _value(stmt.value, env), env)
                elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
                    _bind(stmt.target, None, env)

    def nested(self, body: list[ast.stmt], env: dict[str, object], target: ast.expr | None, value: object,
               notes: tuple[str, ...]) -> None:
        """A loop's body (or a block's) in its own scope: what it assigns is forgotten after it."""
        inner = dict(env)
        if target is not None:
            _bind(target, value, inner)
        self.statements(body, inner, notes)
        for node in ast.walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                env.pop(node.id, None)

    def compound(self, stmt: ast.stmt, env: dict[str, object], notes: tuple[str, ...]) -> None:
        """``if``, ``with``, ``try``: their headers' calls, then each block in turn; a ``def``'s body
        once, without the names its parameters hide."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            hidden = {arg.arg for arg in ast.walk(stmt.args) if isinstance(arg, ast.arg)}
            self.statements(stmt.body, {k: v for k, v in env.items() if k not in hidden},
                            (*notes, f"in `def {stmt.name}`: counted once"))
            env.pop(stmt.name, None)
            return
        for _, value in ast.iter_fields(stmt):
            items = value if isinstance(value, list) else [value]
            if items and isinstance(items[0], ast.stmt):
                self.nested(items, env, None, None, notes)
            elif items and isinstance(items[0], ast.excepthandler):
                for handler in items:
                    self.nested(handler.body, env, None, None, notes)
            else:
                for item in items:
                    if isinstance(item, ast.AST) and not isinstance(item, (ast.arguments, ast.expr_context)):
                        self.calls(item, env, notes)

    def calls(self, node: ast.AST, env: dict[str, object], notes: tuple[str, ...]) -> None:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            first = call.args[0] if call.args else None
            if _ipython(call, "system", "getoutput") and first is not None:
                self.shell(_text(first, env), env, notes)
            elif _ipython(call, "run_cell_magic") and len(call.args) == 3:
                self.magic(*(_text(arg, {}) for arg in call.args), env, notes)
            elif isinstance(first, (ast.List, ast.Tuple)) and first.elts and _text(first.elts[0], {}) in COMMANDS:
                words = [("{*" + ast.unparse(e.value) + "}") if isinstance(e, ast.Starred) else _expand(_text(e, env), env)
                         for e in first.elts]
                self.command(words[0], words[1:], notes)
            elif _name(call.func) == "submit" and (isinstance(call.func, ast.Name) or (
                    isinstance(call.func.value, ast.Name) and call.func.value.id in ("jobs", "hpcnb"))):
                self.submit(call, env, notes)
            elif _name(call.func) == "write_jobscript" and len(call.args) == 2:
                gpus = next((_value(k.value, env) for k in call.keywords if k.arg == "gpus_per_node"), 0)
                self.write(_text(call.args[0], env), _text(call.args[1], env), gpus if isinstance(gpus, int) else 0,
                           site=True)
            elif (_name(call.func) == "write_text" and isinstance(call.func, ast.Attribute) and call.args
                  and isinstance(call.func.value, ast.Call) and _name(call.func.value.func) == "Path"
                  and call.func.value.args):
                self.write(_text(call.func.value.args[0], env), _text(call.args[0], env), 0, site=False)

    def write(self, name: str, text: str, gpus: int, *, site: bool) -> None:
        if not _unread(name):
            self.scripts[name] = Script(None if _unread(text.split("\n", 1)[0]) else text, gpus, site)

    def magic(self, magic: str, line: str, body: str, env: dict[str, object], notes: tuple[str, ...]) -> None:
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        if magic == "jobscript" and words:
            gpus = int(words[words.index("--gpus-per-node") + 1]) if "--gpus-per-node" in words else 0
            self.write(words[0], body, gpus, site=True)
        elif magic == "writefile" and words:
            self.write(words[-1], body, 0, site=False)
        elif magic in ("bash", "sh"):
            for shell_line in body.replace("\\\n", " ").splitlines():
                self.shell(shell_line, env, notes)

    def shell(self, text: str, env: dict[str, object], notes: tuple[str, ...]) -> None:
        """A shell line: each of its commands that is sbatch, salloc or srun."""
        lexer = shlex.shlex(_expand(text, env), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError as error:
            if re.search(r"\b(sbatch|salloc|srun)\b", text):
                self._add("shell", None, [], [*notes, f"`{text.strip()}`: {error}"])
            return
        command: list[str] = []
        for word in [*words, ";"]:
            if set(word) <= _SEPARATORS:
                lead = next((i for i, w in enumerate(command) if not re.match(r"\w+=", w)), len(command))
                assigned, rest = command[:lead], command[lead:]   # VAR=value words before the command
                if rest and Path(rest[0]).name in COMMANDS and not any(a.startswith("SLURM_JOB") for a in assigned):
                    self.command(Path(rest[0]).name, rest[1:], notes)
                command = []
            else:
                command.append(word)

    def command(self, command: str, argv: list[str], notes: tuple[str, ...]) -> None:
        """``sbatch``/``salloc``/``srun`` with ``argv``, read by Slurm's own option parser; a computed
        word before the script may be options: noted, and passed over."""
        found, todo, said, passed = [], list(argv), list(notes), None
        while True:
            try:
                options, rest = parse_args(todo, command)
            except OptionError as error:
                said.append(error.message)
                options, rest = [], []
            found += [(spec.long, value or "") for spec, value in options]
            if rest and rest[0].startswith("{") and rest[0].endswith("}"):
                said.append(f"`{rest[0]}`")
                passed, todo = rest[0], rest[1:]
                continue
            break
        names = {long for long, _ in found}
        if command == "srun" and names & {"overlap", "jobid"}:
            return   # a step of a job that is already there
        script = (rest[0] if rest else passed) if command == "sbatch" and "wrap" not in names else None
        if script is not None and script == passed:
            said.remove(f"`{passed}`")   # the computed word was the script: said so once, below
        self._add(command, script, found, said)

    def submit(self, call: ast.Call, env: dict[str, object], notes: tuple[str, ...]) -> None:
        """``submit(script or wrap=..., **sbatch options)`` of the job API."""
        said, options, script = list(notes), [], None
        if call.args:
            script = _expand(_text(call.args[0], env), env)
            if script.startswith("#!"):
                self.scripts[script] = Script(script)
        for keyword in call.keywords:
            if keyword.arg is None:
                inner = keyword.value
                if isinstance(inner, ast.Call) and _name(inner.func) == "gpu_options" and inner.args:
                    options.append(("gpus-per-node", _expand(_text(inner.args[0], env), env)))
                else:
                    said.append(f"`**{ast.unparse(inner)}`")
            elif keyword.arg not in _SUBMIT_SKIPPED:
                options.append((keyword_option(keyword.arg), _expand(_text(keyword.value, env), env)))
        self._add("submit", script, options, said)

    def _add(self, command: str, script: str | None, options: list[tuple[str, str]], notes: list[str]) -> None:
        said = list(notes)
        said += [f"--{long}={value}" for long, value in options if long in BUDGET_OPTIONS and _unread(value)]
        body = self.scripts.get(script) if script else None
        if script and _unread(script):
            said.append(f"script `{script}`")
        elif script and body is None:
            said.append("not written by the notebook")
        elif body is not None and body.text is None:
            said.append("its text is computed")
        elif body is not None:
            said += [f"#SBATCH --{long}={d.value}" for long in BUDGET_OPTIONS
                     if (d := parse_script(body.text).get(long)) and d.value and _unread(d.value)]
        if script:
            self.submitted.add(script)
        self.found.append(Submission(self.notebook, command, script, body, tuple(options), tuple(said)))

    def unsubmitted(self) -> None:
        """A ``%%jobscript`` that no read submission names counts once, as written."""
        for name, body in self.scripts.items():
            if body.site and name not in self.submitted:
                self.found.append(Submission(self.notebook, "sbatch", name, body, ()))


def read_course(folders: Iterable[Path]) -> list[Submission]:
    """Every job the numbered notebooks of ``folders`` submit, lesson by lesson: a lesson's
    exercises see the scripts its notebook wrote."""
    by_lesson: dict[str, list[Path]] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("[0-9]*.ipynb")):
            by_lesson.setdefault(path.name.split("-")[0], []).append(path)
    found: list[Submission] = []
    for lesson in sorted(by_lesson):
        reader = _Reader()
        for path in by_lesson[lesson]:
            reader.notebook_cells(path)
        reader.unsubmitted()
        found += reader.found
    return found
