"""Slurm 22.05's sbatch/srun/salloc option table and a getopt_long-faithful parser.

The table below was extracted from Slurm 22.05.8 itself (Debian bookworm's
``slurm-client`` / ``libslurmfull.so``): every ``slurm_cli_opt_t`` in
``src/common/slurm_opt.c``'s ``common_options[]`` with its long name, short
letter, ``has_arg`` and the commands that have a setter for it, kept in the
array's order (getopt lists ambiguous possibilities in that order).  It was
cross-checked by running the real ``sbatch``/``srun``/``salloc`` 22.05.8 with
every option.  The parser reproduces glibc ``getopt_long`` with Slurm's
``"+..."`` optstring: parsing stops at the first non-option argument.
"""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

__all__ = [
    "COMMANDS",
    "INPUT_VARIABLES",
    "JOB_VARIABLE_PREFIXES",
    "EXIT_USAGE",
    "OPTIONS",
    "OptionError",
    "OptionSpec",
    "UnsafeTextError",
    "check_text",
    "keyword_option",
    "command_options",
    "lookup",
    "match_long",
    "parse_args",
    "short_options",
    "suggest",
    "usage_error_text",
]

#: The prefixes of the variables a job sets for its own processes (and of the input variables).
JOB_VARIABLE_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")

#: The input environment variables a site's login environment sets for every job (sbatch(1),
#: salloc(1), srun(1) "INPUT ENVIRONMENT VARIABLES"): command -> {variable: long option}. They
#: override a script's #SBATCH lines; the command line overrides them.
INPUT_VARIABLES: dict[str, dict[str, str]] = {
    command: {f"{prefix}_{option.upper()}": option for option in ("account", "partition", "constraint")}
    for command, prefix in (("sbatch", "SBATCH"), ("salloc", "SALLOC"), ("srun", "SLURM"))
}

COMMANDS = frozenset({"sbatch", "srun", "salloc"})
#: Exit status of sbatch/srun/salloc 22.05 after a getopt error (``exit(-1)``).
EXIT_USAGE = 255


class OptionSpec(NamedTuple):
    """One Slurm command-line option."""

    long: str  # e.g. "ntasks-per-node" (no dashes)
    short: str | None  # e.g. "n"
    arg: str  # "required" | "none" | "optional"
    commands: frozenset[str]  # subset of {"sbatch", "srun", "salloc"}

    def accepts(self, command: str) -> bool:
        """True if ``command`` knows this option."""
        return command in self.commands


NONE, REQ, OPT = "none", "required", "optional"
ALL = COMMANDS


def _c(*names: str) -> frozenset[str]:
    return frozenset(names)


# (long, short, has_arg, commands) in the order of common_options[] in
# Slurm 22.05.8.  "wait" appears twice: sbatch's -W/--wait takes no argument,
# srun's -W/--wait=<seconds> requires one.  Aliases kept as Slurm has them:
# cpu_bind, pack-group (het-group), tasks-per-node (ntasks-per-node).
_TABLE: tuple[tuple[str, str | None, str, frozenset[str]], ...] = (
    ('accel-bind', None, REQ, _c('srun')),
    ('account', 'A', REQ, ALL),
    ('acctg-freq', None, REQ, ALL),
    ('array', 'a', REQ, _c('sbatch')),
    ('batch', None, REQ, _c('sbatch')),
    ('bcast', None, OPT, _c('srun')),
    ('bcast-exclude', None, REQ, _c('srun')),
    ('begin', 'b', REQ, ALL),
    ('bell', None, NONE, _c('salloc')),
    ('bb', None, REQ, ALL),
    ('bbf', None, REQ, ALL),
    ('cluster-constraint', None, REQ, ALL),
    ('chdir', 'D', REQ, ALL),
    ('cluster', None, REQ, ALL),
    ('clusters', 'M', REQ, ALL),
    ('comment', None, REQ, ALL),
    ('compress', None, OPT, _c('srun')),
    ('container', None, REQ, ALL),
    ('context', None, REQ, ALL),
    ('contiguous', None, NONE, ALL),
    ('constraint', 'C', REQ, ALL),
    ('core-spec', 'S', REQ, ALL),
    ('cores-per-socket', None, REQ, ALL),
    ('cpu-bind', None, REQ, _c('srun')),
    ('cpu_bind', None, REQ, _c('srun')),
    ('cpu-freq', None, REQ, ALL),
    ('cpus-per-gpu', None, REQ, ALL),
    ('cpus-per-task', 'c', REQ, ALL),
    ('deadline', None, REQ, ALL),
    ('debugger-test', None, NONE, _c('srun')),
    ('delay-boot', None, REQ, ALL),
    ('dependency', 'd', REQ, ALL),
    ('disable-status', 'X', NONE, _c('srun')),
    ('distribution', 'm', REQ, ALL),
    ('epilog', None, REQ, _c('srun')),
    ('error', 'e', REQ, _c('sbatch', 'srun')),
    ('exact', None, NONE, _c('srun')),
    ('exclude', 'x', REQ, ALL),
    ('exclusive', None, OPT, ALL),
    ('export', None, REQ, _c('sbatch', 'srun')),
    ('export-file', None, REQ, _c('sbatch')),
    ('extra-node-info', 'B', REQ, ALL),
    ('get-user-env', None, OPT, _c('salloc', 'sbatch')),
    ('gid', None, REQ, ALL),
    ('gpu-bind', None, REQ, ALL),
    ('gpu-freq', None, REQ, ALL),
    ('gpus', 'G', REQ, ALL),
    ('gpus-per-node', None, REQ, ALL),
    ('gpus-per-socket', None, REQ, ALL),
    ('gpus-per-task', None, REQ, ALL),
    ('gres', None, REQ, ALL),
    ('gres-flags', None, REQ, ALL),
    ('help', 'h', NONE, ALL),
    ('het-group', None, REQ, _c('srun')),
    ('hint', None, REQ, ALL),
    ('hold', 'H', NONE, ALL),
    ('ignore-pbs', None, NONE, _c('sbatch')),
    ('immediate', 'I', OPT, _c('salloc', 'srun')),
    ('input', 'i', REQ, _c('sbatch', 'srun')),
    ('interactive', None, NONE, _c('srun')),
    ('jobid', None, REQ, _c('srun')),
    ('job-name', 'J', REQ, ALL),
    ('kill-command', 'K', OPT, _c('salloc')),
    ('kill-on-bad-exit', 'K', OPT, _c('srun')),
    ('kill-on-invalid-dep', None, REQ, _c('sbatch')),
    ('label', 'l', NONE, _c('srun')),
    ('licenses', 'L', REQ, ALL),
    ('mail-type', None, REQ, ALL),
    ('mail-user', None, REQ, ALL),
    ('threads', 'T', REQ, _c('srun')),
    ('mcs-label', None, REQ, ALL),
    ('mem', None, REQ, ALL),
    ('mem-bind', None, REQ, ALL),
    ('mem-per-cpu', None, REQ, ALL),
    ('mem-per-gpu', None, REQ, ALL),
    ('mincpus', None, REQ, ALL),
    ('mpi', None, REQ, _c('srun')),
    ('msg-timeout', None, REQ, _c('srun')),
    ('multi-prog', None, NONE, _c('srun')),
    ('network', None, REQ, ALL),
    ('nice', None, OPT, ALL),
    ('no-allocate', 'Z', NONE, _c('srun')),
    ('no-bell', None, NONE, _c('salloc')),
    ('no-kill', 'k', OPT, ALL),
    ('no-shell', None, NONE, _c('salloc')),
    ('no-requeue', None, NONE, _c('sbatch')),
    ('nodefile', 'F', REQ, ALL),
    ('nodelist', 'w', REQ, ALL),
    ('nodes', 'N', REQ, ALL),
    ('ntasks', 'n', REQ, ALL),
    ('ntasks-per-core', None, REQ, ALL),
    ('ntasks-per-gpu', None, REQ, ALL),
    ('ntasks-per-node', None, REQ, ALL),
    ('ntasks-per-socket', None, REQ, ALL),
    ('ntasks-per-tres', None, REQ, ALL),
    ('open-mode', None, REQ, _c('sbatch', 'srun')),
    ('output', 'o', REQ, _c('sbatch', 'srun')),
    ('overcommit', 'O', NONE, ALL),
    ('overlap', None, OPT, _c('srun')),
    ('oversubscribe', 's', NONE, ALL),
    ('pack-group', None, REQ, _c('srun')),
    ('parsable', None, NONE, _c('sbatch')),
    ('partition', 'p', REQ, ALL),
    ('power', None, REQ, ALL),
    ('prefer', None, REQ, ALL),
    ('preserve-env', 'E', NONE, _c('srun')),
    ('priority', None, REQ, ALL),
    ('profile', None, REQ, ALL),
    ('prolog', None, REQ, _c('srun')),
    ('propagate', None, OPT, _c('sbatch', 'srun')),
    ('pty', None, NONE, _c('srun')),
    ('qos', 'q', REQ, ALL),
    ('quiet', 'Q', NONE, ALL),
    ('quit-on-interrupt', None, NONE, _c('srun')),
    ('reboot', None, NONE, ALL),
    ('relative', 'r', REQ, _c('srun')),
    ('requeue', None, NONE, _c('sbatch')),
    ('reservation', None, REQ, ALL),
    ('resv-ports', None, OPT, _c('srun')),
    ('send-libs', None, OPT, _c('srun')),
    ('signal', None, REQ, ALL),
    ('slurmd-debug', None, REQ, _c('srun')),
    ('sockets-per-node', None, REQ, ALL),
    ('spread-job', None, NONE, ALL),
    ('switches', None, REQ, ALL),
    ('task-epilog', None, REQ, _c('srun')),
    ('task-prolog', None, REQ, _c('srun')),
    ('tasks-per-node', None, REQ, ALL),
    ('test-only', None, NONE, _c('sbatch', 'srun')),
    ('thread-spec', None, REQ, ALL),
    ('threads-per-core', None, REQ, ALL),
    ('time', 't', REQ, ALL),
    ('time-min', None, REQ, ALL),
    ('tmp', None, REQ, ALL),
    ('uid', None, REQ, ALL),
    ('unbuffered', 'u', NONE, _c('srun')),
    ('use-min-nodes', None, NONE, ALL),
    ('verbose', 'v', NONE, ALL),
    ('version', 'V', NONE, ALL),
    ('usage', None, NONE, ALL),
    ('wait', 'W', NONE, _c('sbatch')),
    ('wait-all-nodes', None, REQ, _c('salloc', 'sbatch')),
    ('wait', 'W', REQ, _c('srun')),
    ('wckey', None, REQ, ALL),
    ('whole', None, NONE, _c('srun')),
    ('wrap', None, REQ, _c('sbatch')),
    ('x11', None, OPT, _c('salloc', 'srun')),
)


def _build() -> tuple[dict[str, tuple[OptionSpec, ...]], dict[str, OptionSpec]]:
    per_cmd: dict[str, list[OptionSpec]] = {c: [] for c in COMMANDS}
    merged: dict[str, OptionSpec] = {}
    for long, short, arg, cmds in _TABLE:
        spec = OptionSpec(long, short, arg, cmds)
        for c in cmds:
            per_cmd[c].append(spec)
        # OPTIONS keeps the first spec of a name (sbatch's --wait).
        merged.setdefault(long, spec)
    return {c: tuple(v) for c, v in per_cmd.items()}, merged


_PER_COMMAND, OPTIONS = _build()
#: Every long option sbatch/srun/salloc 22.05 accept, by name.  The one name
#: whose meaning differs by command is "wait" (sbatch's spec is kept here; use
#: :func:`command_options` or :func:`lookup` for srun's).
OPTIONS: dict[str, OptionSpec]


#: Python keywords (``submit(name=...)``, ``JobScript(name=...)``) for options named otherwise.
_KEYWORD_OPTIONS = {"name": "job-name"}


def keyword_option(key: str) -> str:
    """The long option a Python keyword stands for: ``ntasks_per_node`` -> ``ntasks-per-node``,
    ``name`` -> ``job-name``."""
    return _KEYWORD_OPTIONS.get(key, key).replace("_", "-")


def _check_command(command: str) -> None:
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; expected one of {sorted(COMMANDS)}")


def command_options(command: str) -> tuple[OptionSpec, ...]:
    """The options ``command`` accepts, in Slurm's table order."""
    _check_command(command)
    return _PER_COMMAND[command]


def lookup(name: str, command: str) -> OptionSpec | None:
    """The spec ``command`` uses for the exact long ``name`` (or short letter)."""
    _check_command(command)
    name = name.lstrip("-")
    for spec in _PER_COMMAND[command]:
        if spec.long == name or (len(name) == 1 and spec.short == name):
            return spec
    return None


def short_options(command: str) -> dict[str, OptionSpec]:
    """Short letter -> spec for ``command`` (its getopt optstring)."""
    return {s.short: s for s in command_options(command) if s.short}


class OptionError(Exception):
    """A getopt error, with the exact text getopt prints (program name first)."""

    def __init__(self, message: str, command: str, option: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.command = command
        self.option = option
        self.exit_code = EXIT_USAGE

    def stderr_text(self) -> str:
        """Everything Slurm writes to stderr for this error."""
        return usage_error_text(self)


def usage_error_text(err: OptionError) -> str:
    """getopt's line plus Slurm's ``Try "<cmd> --help"`` line, as printed."""
    return f'{err.message}\nTry "{err.command} --help" for more information\n'


class UnsafeTextError(ValueError):
    """A value holds a character that has no place in a job script or on a command line."""

    def __init__(self, field: str, char: str, where: str, ends_line: bool = False) -> None:
        if ends_line:
            message = f"{field}: {_char_name(char)} not allowed ({where} would end here)"
        else:
            message = f"{field}: {_char_name(char)} not allowed in {where}"
        super().__init__(message)
        self.field, self.char = field, char


_CHAR_NAMES = {"\n": "newline", "\r": "carriage return", "\t": "tab", "\0": "NUL character",
               "\x1b": "escape character", "\u2028": "line separator", "\u2029": "paragraph separator"}
#: What ``str.splitlines`` ends a line at: none of it may hide in a one-line value.
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_UNSAFE = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, lone surrogates, line/paragraph separators


def _char_name(char: str) -> str:
    kind = "lone surrogate" if unicodedata.category(char) == "Cs" else "control character"
    return _CHAR_NAMES.get(char, f"{kind} U+{ord(char):04X}")


def check_text(value: object, field: str, *, multiline: bool = False, where: str = "a job script line") -> str:
    """``str(value)`` if it is safe to write into a job script or onto a command line.

    Control characters (tab included), Unicode line/paragraph separators and lone
    surrogates raise :class:`UnsafeTextError` naming ``field``; ``multiline`` text
    (a script body) may hold newlines and tabs.  Every writer of Slurm input calls this.
    """
    text = str(value)
    allowed = "\n\t" if multiline else ""
    for char in text:
        if char not in allowed and unicodedata.category(char) in _UNSAFE:
            raise UnsafeTextError(field, char, where, ends_line=not multiline and char in _LINE_BREAKS)
    return text


def match_long(
    name: str, command: str
) -> tuple[OptionSpec | None, list[OptionSpec]]:
    """Resolve a long option name (no dashes) as glibc getopt_long does.

    Exact match first, else a unique abbreviation.

    Returns (spec, []) on success, (None, possibilities) when ambiguous and
    (None, []) when unknown.  Like glibc, later abbreviation matches that have
    the same has_arg and value as the first one are not ambiguous.
    """
    table = _PER_COMMAND[command]
    for spec in table:
        if spec.long == name:
            return spec, []
    first: OptionSpec | None = None
    ambiguous: list[OptionSpec] = []
    for spec in table:
        if not spec.long.startswith(name):
            continue
        if first is None:
            first = spec
        elif (spec.arg, _val(spec)) != (first.arg, _val(first)):
            if not ambiguous:
                ambiguous.append(first)
            ambiguous.append(spec)
    if ambiguous:
        return None, ambiguous
    return first, []


_ALIASES = {"cpu_bind": "cpu-bind", "pack-group": "het-group", "tasks-per-node": "ntasks-per-node"}


def _val(spec: OptionSpec) -> str:
    """Stand-in for getopt's ``val``: aliases share their target's value."""
    return spec.short or _ALIASES.get(spec.long, spec.long)


def parse_args(
    argv: list[str], command: str
) -> tuple[list[tuple[OptionSpec, str | None]], list[str]]:
    """Parse ``argv`` (without the program name) like Slurm's getopt_long loop.

    Returns the recognised options in order, each with its argument (None when
    none was given), and the remaining arguments: the script/executable and its
    own arguments.  Raises :class:`OptionError` with getopt's message.
    """
    _check_command(command)
    shorts = short_options(command)
    found: list[tuple[OptionSpec, str | None]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return found, list(argv[i + 1 :])
        if not arg.startswith("-") or arg == "-":
            break  # "+" in the optstring: stop at the first non-option
        i += 1
        if arg.startswith("--"):
            body = arg[2:]
            name, eq, value = body.partition("=")
            spec, possible = match_long(name, command)
            if possible:
                choices = " ".join(f"'--{s.long}'" for s in possible)
                raise OptionError(
                    f"{command}: option '--{body}' is ambiguous; possibilities: {choices}",
                    command,
                    name,
                )
            if spec is None:
                raise OptionError(f"{command}: unrecognized option '--{body}'", command, name)
            if eq:
                if spec.arg == NONE:
                    raise OptionError(
                        f"{command}: option '--{spec.long}' doesn't allow an argument",
                        command,
                        spec.long,
                    )
                found.append((spec, value))
            elif spec.arg == REQ:
                if i >= len(argv):
                    raise OptionError(
                        f"{command}: option '--{spec.long}' requires an argument",
                        command,
                        spec.long,
                    )
                found.append((spec, argv[i]))
                i += 1
            else:
                found.append((spec, None))
            continue
        # A cluster of short options: -HQ, -n2, -n 2, -kfoo.
        j = 1
        while j < len(arg):
            ch = arg[j]
            spec = shorts.get(ch)
            if spec is None:
                raise OptionError(f"{command}: invalid option -- '{ch}'", command, ch)
            rest = arg[j + 1 :]
            if spec.arg == NONE:
                found.append((spec, None))
                j += 1
                continue
            if rest:
                found.append((spec, rest))
            elif spec.arg == REQ:
                if i >= len(argv):
                    raise OptionError(
                        f"{command}: option requires an argument -- '{ch}'", command, ch
                    )
                found.append((spec, argv[i]))
                i += 1
            else:
                found.append((spec, None))
            break
    return found, list(argv[i:])


def suggest(name: str, command: str) -> str | None:
    """The closest real long option to a misspelled ``name`` (no dashes), if any."""
    _check_command(command)
    name = name.lstrip("-").partition("=")[0]
    names = [s.long for s in _PER_COMMAND[command] if s.long not in _ALIASES]
    import difflib

    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return close[0] if close else None
