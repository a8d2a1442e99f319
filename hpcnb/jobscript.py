"""Batch job scripts: read ``#SBATCH`` directives the way sbatch 22.05 does, and build scripts.

sbatch's rules (``_opt_batch_script``/``_get_argument`` in ``src/sbatch/opt.c``,
checked against the real sbatch 22.05.8 with ``sbatch -vvv``):

* Directives are lines that *start* with ``#SBATCH`` in column 0 (``#SLURM``
  is honoured too, with an error message; ``#sbatch``, ``# SBATCH`` and an
  indented ``#SBATCH`` are plain comments).  No space is needed after it.
* Reading stops at the first line that is neither blank nor a comment; later
  ``#SBATCH`` lines are ignored.
* Each directive line is split into words at (ASCII) whitespace; ``'`` and ``"``
  quote (``--comment="a b"`` gives ``--comment=a b``), a backslash makes the
  next character literal (but an escaped space still ends the word), and an
  unquoted, unescaped ``#`` ends the line: ``--job-name=x#y`` gives ``x``.
  An empty word (``""``) ends the line too.  An unmatched quote is fatal.
* All words from all directive lines form one argv that getopt parses, so an
  option's value may even sit on the next ``#SBATCH`` line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcnb.slurm.options import (
    OPTIONS,
    OptionSpec,
    check_text,
    keyword_option,
    lookup,
    match_long,
    short_options,
    suggest,
)

__all__ = [
    "Directive",
    "JobScript",
    "ParsedScript",
    "directive_args",
    "parse_script",
    "tokenize_directive",
]

_LEGACY_PREFIX = "#SLURM"
_LEGACY_MESSAGE = (
    "error: Change from #SLURM to #SBATCH in your script and verify the options are valid in sbatch"
)
#: C's isspace() as sbatch uses it: Unicode spaces such as U+00A0 are word characters to sbatch.
_BLANKS = " \t\n\v\f\r"


@dataclass(frozen=True)
class Directive:
    """One option found on a directive line.

    ``option`` is as written, without ``=value`` (``--time``, ``-t``, ``--part``);
    ``spec`` is what getopt resolves it to, None for an unknown, ambiguous or
    non-option word.
    """

    lineno: int
    text: str
    option: str
    value: str | None
    spec: OptionSpec | None


@dataclass(frozen=True)
class ParsedScript:
    """A job script split the way sbatch reads it.

    ``args`` are the honoured directive words in order (what sbatch hands to
    getopt); ``errors`` are (lineno, text) messages sbatch itself prints while
    reading the script (after ``sbatch: ``), e.g. an unmatched quote;
    ``inert`` are lines before the first command that look like directives but
    that sbatch treats as comments; ``hetjob_lines`` mark ``#SBATCH hetjob``
    separators (heterogeneous jobs are not modelled further).
    """

    shebang: str | None
    directives: tuple[Directive, ...]
    ignored: tuple[Directive, ...]
    body_lines: tuple[tuple[int, str], ...]
    args: tuple[str, ...] = ()
    errors: tuple[tuple[int, str], ...] = ()
    inert: tuple[tuple[int, str], ...] = ()
    hetjob_lines: tuple[int, ...] = ()

    def get(self, long: str) -> Directive | None:
        """The honoured directive that sets ``long`` last (Slurm: last one wins)."""
        for d in reversed(self.directives):
            if d.spec is not None and _canonical(d.spec.long) == _canonical(long):
                return d
        return None


class UnmatchedQuote(ValueError):
    """A directive line with an unterminated quote (sbatch exits: fatal)."""

    def __init__(self, quote: str, rest: str, words: list[str]) -> None:
        super().__init__(f"Unmatched `{quote}` in [{rest}]")
        self.quote, self.rest, self.words = quote, rest, words


def tokenize_directive(rest: str) -> list[str]:
    """Split the text after ``#SBATCH`` into words like sbatch's ``_get_argument``.

    Raises :class:`UnmatchedQuote` (carrying the words read so far).
    """
    words: list[str] = []
    pos, n = 0, len(rest)
    while True:
        start = pos
        while pos < n and rest[pos] in _BLANKS:
            pos += 1
        if pos >= n:
            return words
        if not words:
            start = pos  # sbatch skips the blanks after the prefix before reading words
        out: list[str] = []
        quote = ""
        escape = False
        while pos < n and (quote or rest[pos] not in _BLANKS):
            ch = rest[pos]
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
                pos += 1
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    pos += 1
                    continue
            elif ch in "\"'":
                quote = ch
                pos += 1
                continue
            elif ch == "#":
                break
            out.append(ch)
            pos += 1
        if quote:
            raise UnmatchedQuote(quote, rest[start:], words)
        if not out:
            return words  # "#..." or an empty word ends the line
        words.append("".join(out))


def _is_command(line: str) -> bool:
    stripped = line.lstrip(_BLANKS)
    return bool(stripped) and not stripped.startswith("#")


def _looks_like_directive(line: str, prefix: str) -> bool:
    """A comment that a reader may take for a directive but sbatch does not."""
    s = line.strip()
    if not s.startswith("#"):
        return False
    compact = "#" + s[1:].lstrip()
    return compact.upper().startswith(prefix.upper()) or compact.upper().startswith(_LEGACY_PREFIX)


def _canonical(long: str) -> str:
    return {"tasks-per-node": "ntasks-per-node", "pack-group": "het-group", "cpu_bind": "cpu-bind"}.get(
        long, long
    )


def _directives_from_words(words: list[tuple[int, str, str]], command: str = "sbatch") -> list[Directive]:
    """Resolve (lineno, line text, word) triples into Directives, getopt-style but tolerant.

    Unknown options are kept with ``spec=None`` and parsing goes on, so a
    linter sees every problem; sbatch would stop at the first.
    """
    shorts = short_options(command)
    out: list[Directive] = []
    i = 0
    while i < len(words):
        lineno, text, word = words[i]
        i += 1
        if word == "--" or not word.startswith("-") or word == "-":
            out.append(Directive(lineno, text, word, None, None))
            continue
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            spec, _ = match_long(name, command)
            val: str | None = value if eq else None
            if spec is not None and spec.arg == "required" and not eq and i < len(words):
                val = words[i][2]
                i += 1
            out.append(Directive(lineno, text, "--" + name, val, spec))
            continue
        j = 1
        while j < len(word):
            ch = word[j]
            spec = shorts.get(ch)
            rest = word[j + 1 :]
            if spec is None or spec.arg == "none":
                out.append(Directive(lineno, text, "-" + ch, None, spec))
                j += 1
                continue
            val = rest or None
            if not rest and spec.arg == "required" and i < len(words):
                val = words[i][2]
                i += 1
            out.append(Directive(lineno, text, "-" + ch, val, spec))
            break
    return out


def parse_script(text: str, prefix: str = "#SBATCH", filename: str | None = None) -> ParsedScript:
    """Split a job script into honoured directives, ignored ones and the body.

    ``filename`` only appears in sbatch's messages, as its basename
    ("stdin" when the script came from standard input, the default).
    """
    shown = os.path.basename(filename) if filename else "stdin"
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    errors: list[tuple[int, str]] = []
    if not text:
        errors.append((0, "error: Batch script is empty!"))
    elif not text.startswith("#!"):
        errors += [
            (1, "error: This does not look like a batch script.  The first"),
            (1, "error: line must start with #! followed by the path to an interpreter."),
            (1, "error: For instance: #!/bin/sh"),
        ]
    if "\r\n" in text:
        errors += [
            (0, "error: Batch script contains DOS line breaks (\\r\\n)"),
            (0, "error: instead of expected UNIX line breaks (\\n)."),
        ]
    shebang = lines[0] if lines and lines[0].startswith("#!") else None
    legacy = prefix == "#SBATCH"
    head_words: list[tuple[int, str, str]] = []
    tail_words: list[tuple[int, str, str]] = []
    body: list[tuple[int, str]] = []
    inert: list[tuple[int, str]] = []
    hetjob: list[int] = []
    in_body = False
    warned = False
    for lineno, line in enumerate(lines, start=1):
        if line.startswith(prefix):
            rest = line[len(prefix) :]
        elif legacy and line.startswith(_LEGACY_PREFIX):
            rest = line[len(_LEGACY_PREFIX) :]
            if not in_body and not warned:
                errors.append((lineno, _LEGACY_MESSAGE))
                warned = True
        else:
            if _is_command(line):
                in_body = True
                body.append((lineno, line))
            elif not in_body and lineno > 1 and _looks_like_directive(line, prefix):
                inert.append((lineno, line))
            continue
        try:
            words = tokenize_directive(rest)
        except UnmatchedQuote as exc:
            words = exc.words
            if not in_body:
                errors.append((lineno, f"fatal: {shown}: line {lineno}: {exc}"))
        if words and words[0] in ("hetjob", "packjob"):
            hetjob.append(lineno)
            continue
        target = tail_words if in_body else head_words
        target.extend((lineno, line, w) for w in words)
    return ParsedScript(
        shebang=shebang,
        directives=tuple(_directives_from_words(head_words)),
        ignored=tuple(_directives_from_words(tail_words)),
        body_lines=tuple(body),
        args=tuple(w for _, _, w in head_words),
        errors=tuple(errors),
        inert=tuple(inert),
        hetjob_lines=tuple(hetjob),
    )


def directive_args(parsed: ParsedScript) -> list[str]:
    """The honoured directives as the argv sbatch parses, e.g. ``["--time=10", "-N", "2"]``.

    Feed it to :func:`hpcnb.slurm.options.parse_args` for sbatch's exact
    errors; a non-option left over is sbatch's
    ``error: Invalid directive found in batch script: <word>``.
    """
    return list(parsed.args)


# ---------------------------------------------------------------- builder

# Builder keyword -> long option, in render order.
_FIELDS: dict[str, str] = {key: keyword_option(key) for key in (
    "name", "time", "nodes", "ntasks", "ntasks_per_node", "cpus_per_task", "gpus_per_node", "gres", "mem",
    "partition", "output", "error", "account", "array", "dependency", "signal", "requeue",
)}
_BY_LONG = {v: k for k, v in _FIELDS.items()}
_NEEDS_QUOTES = set(" \t\"'#\\")


def _spec_for(option: str) -> OptionSpec:
    """The sbatch spec for ``option`` ("--ntasks-per-node", "ntasks_per_node", "-N")."""
    raw = option.strip()
    if raw.startswith("-") and not raw.startswith("--") and len(raw) == 2:
        spec = lookup(raw[1], "sbatch")
    else:
        name = keyword_option(raw.lstrip("-").replace("-", "_"))
        spec = lookup(name, "sbatch")
    if spec is None:
        hint = suggest(raw.lstrip("-").replace("_", "-"), "sbatch")
        extra = f" (did you mean --{hint}?)" if hint else ""
        raise ValueError(f"sbatch has no option {option!r}{extra}")
    return spec


def _field_name(long: str) -> str:
    """How messages name the field behind option ``long``: ``JobScript.name``, ``JobScript.extra['comment']``."""
    attr = _BY_LONG.get(long)
    return f"JobScript.{attr}" if attr else f"JobScript.extra[{long!r}]"


def _check_command(index: int, command: str) -> None:
    """A body command may span lines, but carries no other control character."""
    check_text(command, f"JobScript.commands[{index}]", multiline=True, where="the job script")


def _quote(value: str) -> str:
    if value == "":
        raise ValueError("sbatch cannot read an empty directive value")
    if not any(c in _NEEDS_QUOTES for c in value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@dataclass
class JobScript:
    """Build a batch script: ``JobScript(name="train", time="00:10:00").add("srun python train.py")``."""

    name: str | None = None
    time: str | None = None
    nodes: int | str | None = None
    ntasks: int | str | None = None
    ntasks_per_node: int | str | None = None
    cpus_per_task: int | str | None = None
    gpus_per_node: int | str | None = None
    gres: str | None = None
    mem: str | None = None
    partition: str | None = None
    output: str | None = None
    error: str | None = None
    account: str | None = None
    array: str | None = None
    dependency: str | None = None
    signal: str | None = None
    requeue: bool = False
    extra: dict[str, Any] | None = None
    shell: str = "/bin/bash"
    commands: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        extra, self.extra = self.extra or {}, {}
        for option, value in extra.items():
            self.set(option, value)
        self.validate()

    def set(self, option: str, value: Any) -> JobScript:
        """Set any sbatch option; ``True`` for a flag, ``None``/``False`` removes it."""
        spec = _spec_for(option)
        long = _canonical(spec.long)
        attr = _BY_LONG.get(long)
        if value is True and spec.arg == "required":
            raise ValueError(f"--{long} requires a value")
        if value is not None and not isinstance(value, bool):
            if spec.arg == "none":
                raise ValueError(f"--{long} takes no value")
            check_text(value, _field_name(long))
        if attr is not None:
            setattr(self, attr, bool(value) if attr == "requeue" else (None if value is False else value))
            return self
        assert self.extra is not None
        if value is None or value is False:
            self.extra.pop(long, None)
        else:
            self.extra[long] = value
        return self

    def add(self, *commands: str) -> JobScript:
        """Append command lines to the body (a command may span several lines)."""
        for i, command in enumerate(commands, start=len(self.commands)):
            _check_command(i, command)
        self.commands.extend(commands)
        return self

    def validate(self) -> None:
        """Refuse values that would break out of their line: see :func:`~hpcnb.slurm.options.check_text`."""
        check_text(self.shell, "JobScript.shell", where="the #! line")
        for long, value in self.options():
            if value is not None:
                check_text(value, _field_name(long))
        for i, command in enumerate(self.commands):
            _check_command(i, command)

    def options(self) -> list[tuple[str, str | None]]:
        """(long option, value or None for a flag) in render order."""
        out: list[tuple[str, str | None]] = []
        for attr, long in _FIELDS.items():
            value = getattr(self, attr)
            if attr == "requeue":
                if value:
                    out.append((long, None))
            elif value is not None:
                out.append((long, str(value)))
        for long, value in (self.extra or {}).items():
            out.append((long, None if value is True else str(value)))
        return out

    def render(self) -> str:
        """The script text: shebang, one ``#SBATCH --opt=value`` per option, blank line, commands.

        Raises :class:`~hpcnb.slurm.options.UnsafeTextError` (a ValueError) naming the field
        whose value holds a newline or another control character.
        """
        self.validate()
        lines = [f"#!{self.shell}"]
        for long, value in self.options():
            lines.append(f"#SBATCH --{long}" if value is None else f"#SBATCH --{long}={_quote(value)}")
        lines.append("")
        lines.extend(self.commands)
        return "\n".join(lines) + "\n"

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the script, executable (mode 0o755)."""
        p = Path(path)
        p.write_text(self.render())
        p.chmod(0o755)
        return p

    @classmethod
    def from_text(cls, text: str) -> JobScript:
        """Rebuild from a script; comments in the header are dropped.

        Raises ValueError for directives sbatch would reject.
        """
        parsed = parse_script(text)
        shell = "/bin/bash"
        if parsed.shebang:
            shell = parsed.shebang[2:].strip()
        job = cls(shell=shell)
        for d in parsed.directives:
            if d.spec is None:
                hint = suggest(d.option, "sbatch") if d.option.startswith("-") else None
                tip = f" (did you mean --{hint}?)" if hint else ""
                raise ValueError(f"line {d.lineno}: not an sbatch option: {d.option!r}{tip}")
            job.set(d.spec.long, True if d.value is None else d.value)
        if parsed.body_lines:
            all_lines = text.split("\n")
            if all_lines and all_lines[-1] == "":
                all_lines.pop()
            job.commands = all_lines[parsed.body_lines[0][0] - 1 :]
        job.validate()
        return job

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> JobScript:
        """Rebuild from a script file."""
        return cls.from_text(Path(path).read_text())


assert set(_FIELDS.values()) <= set(OPTIONS)
