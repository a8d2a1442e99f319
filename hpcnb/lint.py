"""The job-script linter: real mistakes in ``#SBATCH`` scripts, with line numbers and fixes.

``lint_text(text, profile=None)`` returns :class:`Finding` objects; a site
profile (a :class:`hpcnb.sites.Profile` or its name) adds checks against what
that site can run and what it forbids.  ``hpcnb lint [--profile NAME] FILE...``
prints ``path:line: CODE message (fix: ...)`` and exits 1 when any finding is
an error.

Errors are things Slurm rejects or silently drops (or the site forbids);
warnings are jobs that run, but not as intended.  What depends on the Slurm
release says which releases it holds for; with a profile, only what holds for
the profile's ``slurm_version`` is reported.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcnb.jobscript import Directive, ParsedScript, parse_script
from hpcnb.sites import SLURM_VERSIONS, emulated_version, parse_slurm_version
from hpcnb.slurm.gpus import parse_gpus
from hpcnb.slurm.options import OptionError, match_long, parse_args, suggest
from hpcnb.slurm.times import TIME_FORMATS, parse_time

if TYPE_CHECKING:  # pragma: no cover
    from hpcnb.sites import Profile

__all__ = ["CODES", "OPTION_RELEASES", "Finding", "lint_file", "lint_text", "main", "report_files"]

ERROR, WARNING = "error", "warning"

#: code -> (severity, short title)
CODES: dict[str, tuple[str, str]] = {
    "SL101": (ERROR, "unknown or misspelled option"),
    "SL102": (ERROR, "ambiguous option abbreviation"),
    "SL103": (ERROR, "malformed directive"),
    "SL104": (ERROR, "#SBATCH after the first command is ignored"),
    "SL105": (WARNING, "directive-looking comment is not a directive"),
    "SL106": (ERROR, "sbatch rejects the script's form"),
    "SL107": (WARNING, "log file name without a job-id pattern"),
    "SL108": (WARNING, "no time limit"),
    "SL109": (ERROR, "invalid time"),
    "SL110": (WARNING, "abbreviated option name"),
    "SL111": (ERROR, "placeholder left in a directive"),
    "SL112": (ERROR, "#! line names no interpreter that can exist"),
    "SL113": (WARNING, "log file in a folder that does not exist"),
    "SL201": (WARNING, "multi-task job never launches its tasks with srun"),
    "SL202": (WARNING, "srun does not inherit --cpus-per-task (Slurm 22.05-23.02)"),
    "SL203": (WARNING, "fixed MASTER_PORT"),
    "SL204": (ERROR, "placeholder left in a command"),
    "SL205": (ERROR, "formatting pasted from a web page"),
    "SL206": (ERROR, "rendezvous at localhost in a multi-node job"),
    "SL207": (ERROR, "a Container Engine job on several nodes without the NCCL network hook"),
    "SL208": (WARNING, "a uenv job on several nodes that does not make NCCL use the network"),
    "SL301": (ERROR, "partition unknown at this site"),
    "SL302": (ERROR, "time limit above the partition's maximum"),
    "SL303": (ERROR, "more GPUs per node than the site's nodes have"),
    "SL304": (ERROR, "account/project directive missing"),
    "SL305": (ERROR, "required directive missing"),
    "SL306": (ERROR, "$HOME used for what the site forbids there"),
}


#: sbatch options added or dropped since Slurm 22.05 (whose option table :mod:`hpcnb.slurm.options`
#: holds): long name -> (first release that has it, first release without it), read from
#: src/common/slurm_opt.c of each release.
OPTION_RELEASES: dict[str, tuple[str | None, str | None]] = {
    "container-id": ("23.02", None), "extra": ("23.02", None), "tres-per-task": ("23.02", None),
    "tres-bind": ("23.11", None), "segment": ("24.05", None), "stepmgr": ("24.05", None),
    "oom-kill-step": ("24.11", None), "power": (None, "24.05"),
}


@dataclass(frozen=True)
class Finding:
    """One problem: where, which check, how bad, what and how to fix it."""

    lineno: int
    code: str
    severity: str  # "error" | "warning"
    message: str
    fix: str

    def format(self, path: str = "<script>") -> str:
        """``path:line: CODE message (fix: ...)``."""
        return f"{path}:{self.lineno}: {self.code} {self.message} (fix: {self.fix})"


def _f(lineno: int, code: str, message: str, fix: str, severity: str | None = None) -> Finding:
    return Finding(lineno, code, severity or CODES[code][0], message, fix)


# ------------------------------------------------------------------ helpers


def _last(parsed: ParsedScript, long: str) -> Directive | None:
    return parsed.get(long)


def _int(value: str | None) -> int | None:
    """Leading integer of a count like "2", "2-4" (min) or "4k"; None if none."""
    if value is None:
        return None
    m = re.match(r"\s*([0-9]+)", value)
    return int(m.group(1)) if m else None


def _anchor(parsed: ParsedScript) -> int:
    """Where a missing directive belongs: after the last one, else line 1."""
    return parsed.directives[-1].lineno if parsed.directives else 1


def _logical_lines(body: tuple[tuple[int, str], ...], text: str) -> list[tuple[int, str]]:
    """Body lines with backslash continuations joined; keeps the first line number."""
    lines = text.split("\n")
    if not body:
        return []
    out: list[tuple[int, str]] = []
    i = body[0][0] - 1
    while i < len(lines):
        start, buf = i + 1, lines[i]
        while buf.endswith("\\") and i + 1 < len(lines):
            i += 1
            buf = buf[:-1] + " " + lines[i]
        stripped = buf.strip()
        if stripped and not stripped.startswith("#"):
            out.append((start, buf))
        i += 1
    return out


def _words(line: str) -> list[str]:
    """Shell words of a line, comments dropped; a rough split if quoting is unbalanced."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lex.whitespace_split = True
        lex.commenters = "#"
        return list(lex)
    except ValueError:
        return line.split()


_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "$(", "`"}


def _commands(words: list[str]) -> list[list[str]]:
    """Split a word list into simple commands at ``;``, ``&&``, ``|`` ..."""
    out: list[list[str]] = [[]]
    for w in words:
        if w in _SEPARATORS or set(w) <= set(";&|()"):
            out.append([])
        else:
            out[-1].append(w.lstrip("`").removeprefix("$("))
    return [c for c in out if c]


_PREFIX_WORDS = {"exec", "time", "nohup", "command", "env", "builtin", "then", "do", "else", "!", "{"}


def _program(cmd: list[str]) -> tuple[str, list[str]] | None:
    """(program basename, its arguments), skipping ``VAR=x`` and ``exec``/``time`` prefixes."""
    i = 0
    while i < len(cmd) and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", cmd[i]) or cmd[i] in _PREFIX_WORDS):
        i += 1
    if i >= len(cmd):
        return None
    return cmd[i].rsplit("/", 1)[-1], cmd[i + 1 :]


def _srun_sets_cpus(args: list[str]) -> bool:
    """Does this srun command line pass -c/--cpus-per-task?"""
    try:
        opts, _ = parse_args(args, "srun")
        return any(spec.long == "cpus-per-task" for spec, _ in opts)
    except OptionError:
        for a in args:
            if a == "-c" or (a.startswith("-c") and a[2:].isdigit()):
                return True
            if a.startswith("--cpus-per-task") or (a.startswith("--cpus-per-t")):
                return True
        return False


def _site_release(profile: Any) -> str | None:
    """The Slurm release a profile's site runs ("24.05"), or None without a profile."""
    return getattr(profile, "slurm_version", None) if profile is not None else None


def _release_range(since: str | None, until: str | None) -> str:
    """ "Slurm 23.11 and later", "Slurm releases before 24.05" or "Slurm 23.02 to before 24.05"."""
    if since and until:
        return f"Slurm {since} to before {until}"
    return f"Slurm {since} and later" if since else f"Slurm releases before {until}"


def _option_by_release(d: Directive, profile: Any) -> Finding | None | bool:
    """For an option Slurm added or dropped after 22.05: its finding at the profile's release (None:
    fine there), or, without a profile, a warning naming the releases; False for any other option."""
    name = d.option[2:] if d.option.startswith("--") else ""
    if name not in OPTION_RELEASES:
        return False
    since, until = OPTION_RELEASES[name]
    shown = d.option + (f"={d.value}" if d.value is not None else "")
    has = f"{d.option} exists in {_release_range(since, until)} only"
    release = _site_release(profile)
    if release is None:
        return _f(d.lineno, "SL101", f"{has}: other releases' sbatch stops with 'unrecognized option'",
                  "check your site's release (sbatch --version)", WARNING)
    key = parse_slurm_version(release)
    if (since is None or key >= parse_slurm_version(since)) and (until is None or key < parse_slurm_version(until)):
        return None
    return _f(d.lineno, "SL101", f"sbatch: unrecognized option '{shown}' ({profile.name} runs Slurm {release}; "
              f"{has})", "leave it out, or use what your site's release offers")


# ------------------------------------------------------------------ checks


def _check_directives(parsed: ParsedScript, profile: Any = None) -> list[Finding]:
    out: list[Finding] = []
    for d in parsed.directives:
        by_release = _option_by_release(d, profile)
        if by_release is not False:
            if by_release is not None:
                out.append(by_release)
            continue
        if d.spec is not None:
            if d.spec.arg == "required" and d.value is None:
                out.append(_f(d.lineno, "SL103", f"{d.option} requires an argument",
                              f"write {d.option}=VALUE"))
            elif d.spec.arg == "none" and d.value is not None and d.option.startswith("--"):
                out.append(_f(d.lineno, "SL103", f"--{d.spec.long} doesn't allow an argument",
                              f"write just --{d.spec.long}"))
            elif d.option.startswith("--") and d.option[2:] != d.spec.long:
                out.append(_f(d.lineno, "SL110", f"{d.option} is an abbreviation of --{d.spec.long}",
                              f"spell it out: --{d.spec.long}"))
            continue
        if not d.option.startswith("-") or d.option in ("-", "--"):
            out.append(_f(d.lineno, "SL103",
                          f"'{d.option}' is not an option: sbatch stops with 'Invalid directive found "
                          f"in batch script: {d.option}'",
                          "quote values that contain spaces, or start the comment with '#'"))
            continue
        name = d.option.lstrip("-")
        if d.option.startswith("--"):
            _, possible = match_long(name, "sbatch")
            if possible:
                names = ", ".join(f"--{s.long}" for s in possible)
                out.append(_f(d.lineno, "SL102", f"{d.option} is ambiguous (could be {names})",
                              "write the full option name"))
                continue
        hint = suggest(name, "sbatch") if len(name) > 1 else None
        shown = d.option + (f"={d.value}" if d.value is not None else "")
        out.append(_f(d.lineno, "SL101", f"sbatch: unrecognized option '{shown}'" if d.option.startswith("--")
                      else f"sbatch: invalid option -- '{name}'",
                      f"use --{hint}" if hint else "see `sbatch --help` for the valid options"))
    return out


def _check_form(parsed: ParsedScript) -> list[Finding]:
    out: list[Finding] = []
    for lineno, msg in parsed.errors:
        text = msg.split(": ", 1)[1] if ": " in msg else msg
        if "DOS line breaks" in text:
            out.append(_f(max(lineno, 1), "SL106", "the script has DOS line breaks (\\r\\n); sbatch refuses it",
                          "convert it with `dos2unix` or `sed -i 's/\\r$//'`"))
        elif "does not look like a batch script" in text:
            out.append(_f(1, "SL106", "the first line must start with #! (e.g. #!/bin/bash)",
                          "add a shebang line such as #!/bin/bash"))
        elif "Unmatched" in text:
            out.append(_f(lineno, "SL106", text.split(": ", 2)[-1], "close the quote"))
        elif "Change from #SLURM" in text:
            out.append(_f(lineno, "SL106", "#SLURM is a legacy prefix; sbatch warns about it",
                          "write #SBATCH", WARNING))
        elif "empty" in text:
            out.append(_f(1, "SL106", "the script is empty", "add a shebang, directives and commands"))
    # dedupe messages that share a cause (DOS break lines come in pairs)
    seen: set[tuple[int, str]] = set()
    return [f for f in out if (f.lineno, f.message) not in seen and not seen.add((f.lineno, f.message))]


def _check_placement(parsed: ParsedScript) -> list[Finding]:
    out: list[Finding] = []
    first_cmd = parsed.body_lines[0] if parsed.body_lines else None
    seen: set[int] = set()
    for d in parsed.ignored:
        if d.lineno in seen:
            continue
        seen.add(d.lineno)
        where = f"line {first_cmd[0]} ('{first_cmd[1].strip()[:40]}')" if first_cmd else "the first command"
        out.append(_f(d.lineno, "SL104",
                      f"'#SBATCH {d.option}{'' if d.value is None else '=' + d.value}' comes after the first "
                      f"command at {where}; sbatch ignores it",
                      "move all #SBATCH lines above the first command"))
    for lineno, line in parsed.inert:
        out.append(_f(lineno, "SL105", f"'{line.strip()}' is a plain comment to sbatch",
                      "write '#SBATCH' in capitals at the very start of the line"))
    return out


# ------------------------------------------------------- copied from a guide

#: Characters that web pages and word processors put where sbatch and the shell need ASCII.
_TYPOGRAPHIC = {"\u00a0": "a non-breaking space (U+00A0)", "\u2013": "an en dash (U+2013)",
                "\u2014": "an em dash (U+2014)", "\u2212": "a minus sign (U+2212)",
                "\u201c": "a curly quote (U+201C)", "\u201d": "a curly quote (U+201D)"}


def _pasted_characters(text: str) -> str | None:
    """The typographic characters in ``text``, named ("a non-breaking space (U+00A0)"), or None."""
    return " and ".join(name for ch, name in _TYPOGRAPHIC.items() if ch in text) or None


_PLACEHOLDER = re.compile(r"<[^<>\s]+>|X{3,}|(?<![A-Za-z])x{3,}(?![A-Za-z])")
_GPU_COUNTED = {"gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "tres-per-task"}


def _placeholder(d: Directive) -> str | None:
    """The guide's placeholder left in a directive's value ("<project>", "NAISSXXXX", "gpu:N"), or None."""
    if d.value is None or d.spec is None or d.spec.long == "job-name":
        return None
    m = _PLACEHOLDER.search(d.value)
    if m:
        return m.group(0)
    if d.spec.long in _GPU_COUNTED:
        for item in d.value.split(","):
            head, _, count = item.rpartition(":")
            if head and re.fullmatch(r"[A-Z]", count):
                return count
    return None


def _check_placeholders(parsed: ParsedScript) -> list[Finding]:
    out: list[Finding] = []
    for d in parsed.directives:
        found = _placeholder(d)
        if found is not None:
            out.append(_f(d.lineno, "SL111", f"--{d.spec.long}={d.value} still holds the placeholder '{found}': "
                          "sbatch passes it on as it is, and Slurm rejects the job (or the job fails)",
                          f"put your own value in place of '{found}'"))
    return out


def _check_shebang(parsed: ParsedScript) -> list[Finding]:
    """The kernel runs the script with the #! line's first word (split at spaces and tabs only)."""
    if parsed.shebang is None:
        return []
    interpreter = re.split(r"[ \t]+", parsed.shebang[2:].strip(" \t"))[0]
    if not interpreter.startswith("/"):
        why = "is not an absolute path" if interpreter else "is missing"
    elif "\\" in interpreter or not interpreter.isascii():
        why = "holds " + (_pasted_characters(interpreter) or "a backslash") + ", which no program's path has"
    else:
        return []
    return [_f(1, "SL112", f"the #! interpreter '{interpreter}' {why}: the job fails as soon as it starts "
               "(execve: No such file or directory)", "write the full path of a shell, e.g. #!/bin/bash")]


#: (pattern, what it is, fix) for web-page formatting that lands in a command.
_MARKUP: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"(?:^|(?<=\s))\*\*(?=[-\w])|(?<=[\w-])\*\*(?=\s|$)"), "'**' bold markers",
     "delete the '**'"),
    (re.compile(r"(?:^|(?<=\s))[\u2013\u2014\u2212]"), "a typographic dash where an option needs '--'",
     "type two ASCII hyphens"),
    (re.compile("[\u201c\u201d]"), "curly quotes, which the shell keeps as text", "use straight quotes"),
    (re.compile("\u00a0"), "a non-breaking space, which the shell does not split words at",
     "retype the space"),
    (re.compile(r"&(?:lt|gt|amp|quot|nbsp|#\d+|#x[0-9A-Fa-f]+);"),
     "an HTML entity, whose '&' the shell reads as 'run in the background'",
     "write the character itself (&lt; is <, &gt; is >, &amp; is &)"),
)
_END_PLACEHOLDER = re.compile(r"(?:^|(?<=[\s;&|(]))<([A-Za-z_][\w.-]*)>\s*(?=$|[;&|)])")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")


def _unquoted(line: str, quote: str) -> tuple[str, str]:
    """The line's shell code with quoted text blanked to '_' and a trailing comment cut, and the quote
    still open at its end ('' if none): a quote opened on an earlier line continues here."""
    kept: list[str] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
            kept.append("_")
        elif ch == "\\":
            kept.append(line[i : i + 2])
            i += 1
        elif ch in "'\"":
            quote = ch
            kept.append("_")
        elif ch == "#" and (not kept or kept[-1] in " \t;&|("):
            break
        else:
            kept.append(ch)
        i += 1
    return "".join(kept), quote


def _shell_code(parsed: ParsedScript, text: str) -> list[tuple[int, str]]:
    """(line, unquoted code) of each body line the shell parses: here-document bodies left out."""
    out: list[tuple[int, str]] = []
    quote, heredoc = "", None
    for lineno, line in _logical_lines(parsed.body_lines, text):
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        code, quote = _unquoted(line, quote)
        out.append((lineno, code))
        m = _HEREDOC.search(line) if "<<" in code else None
        heredoc = m.group(2) if m else None
    return out


def _check_copied_text(parsed: ParsedScript, text: str) -> list[Finding]:
    """Placeholders and web-page formatting that a reader pasted into the commands."""
    out: list[Finding] = []
    for lineno, code in _shell_code(parsed, text):
        m = _END_PLACEHOLDER.search(code)
        if m:
            out.append(_f(lineno, "SL204", f"'<{m.group(1)}>' is a placeholder: bash reads '<' and '>' as "
                          "redirections and stops with \"syntax error near unexpected token `newline'\"",
                          f"put your real {m.group(1).lower()} in its place, or delete it"))
        hits = [(what, fix) for pattern, what, fix in _MARKUP if pattern.search(code)]
        if hits:
            words = re.split(r"[ \t]+", code.strip())
            word = next((w for w in words if any(p.search(w) for p, _, _ in _MARKUP)), code.strip())
            out.append(_f(lineno, "SL205", f"'{word}' holds {' and '.join(w for w, _ in hits)}, pasted from a "
                          "formatted web page: the command gets words it cannot use",
                          "; ".join(fix for _, fix in hits)))
    return out


_PATTERN = re.compile(r"%%|%(\d*)([A-Za-z])")


def _check_log_names(parsed: ParsedScript) -> list[Finding]:
    out: list[Finding] = []
    is_array = _last(parsed, "array") is not None
    for long in ("output", "error"):
        d = _last(parsed, long)
        if d is None or d.value is None or d.value.startswith("/dev/"):
            continue
        letters = {m.group(2) for m in _PATTERN.finditer(d.value) if m.group(2)}
        hint = ""
        if re.search(r"(?<![%A-Za-z0-9])[jJ](?![A-Za-z0-9])", d.value.replace("%%", "")):
            hint = " ('J' without '%' is a literal letter)"
        if is_array:
            if letters & {"a", "j", "J"}:
                continue
            if "A" in letters:
                out.append(_f(d.lineno, "SL107",
                              f"--{long}={d.value} uses %A but not %a: every array task writes the same file",
                              f"use --{long}=...%A_%a.{'out' if long == 'output' else 'err'}"))
                continue
            out.append(_f(d.lineno, "SL107", f"--{long}={d.value} has no %A_%a or %j{hint}: array tasks "
                          "overwrite each other's log",
                          f"use --{long}=...%A_%a.{'out' if long == 'output' else 'err'}"))
        elif not letters & {"j", "J", "A"}:
            out.append(_f(d.lineno, "SL107", f"--{long}={d.value} has no %j{hint}: every run of the job "
                          "writes the same file",
                          f"use --{long}=...%x_%j.{'out' if long == 'output' else 'err'}"))
    return out


def _check_time(parsed: ParsedScript) -> tuple[list[Finding], int | None, bool]:
    """Findings, the limit in seconds (None = unlimited/absent) and whether it was given."""
    d = _last(parsed, "time")
    if d is None:
        return [_f(_anchor(parsed), "SL108", "no --time: the job gets the partition's default limit",
                   "add e.g. #SBATCH --time=01:00:00; a realistic limit also starts sooner")], None, False
    try:
        return [], parse_time(d.value or ""), True
    except ValueError:
        pasted = _pasted_characters(d.value or "")
        why = f" (it holds {pasted}, pasted from a web page)" if pasted else ""
        return [_f(d.lineno, "SL109", f"sbatch: error: Invalid --time specification ('{d.value}'){why}",
                   f"use {TIME_FORMATS}" + (
                       f"; retype it without {pasted}" if pasted else ""))], None, True


_LAUNCH_OK = {"srun", "mpirun", "mpiexec"}
_NEEDS_SRUN = {"torchrun", "horovodrun", "deepspeed", "accelerate"}


def _task_counts(parsed: ParsedScript) -> tuple[bool, int]:
    """(multi-task?, line of the directive that makes it so)."""
    for long in ("ntasks", "ntasks-per-node", "nodes"):
        d = _last(parsed, long)
        n = _int(d.value) if d else None
        if d is not None and n is not None and n > 1:
            return True, d.lineno
    return False, 0


def _srun_inherits_cpus(profile: Any) -> bool:
    """Does the profile's site run a release whose srun inherits --cpus-per-task (all but 22.05 to
    23.02)? Without a profile nobody knows: False, so that the warning names those releases."""
    release = _site_release(profile)
    return release is not None and emulated_version(release) != SLURM_VERSIONS[0]


def _sl202(lineno: int, cpt: Directive, profile: Any) -> Finding:
    release = _site_release(profile)
    where = (f"{profile.name} runs Slurm {release}, whose srun" if release is not None
             else "on Slurm 22.05 to 23.02 srun")
    return _f(lineno, "SL202",
              f"{where} gives each task 1 CPU here, not --cpus-per-task={cpt.value}: the srun of 22.05 to "
              "23.02 does not inherit it from the job (earlier releases' did, 23.11 and later inherit it again)",
              "pass -c $SLURM_CPUS_PER_TASK to srun (right on every version), or export "
              "SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK before srun (read by 22.05-23.02)")


def _check_body(parsed: ParsedScript, text: str, profile: Any = None) -> list[Finding]:
    out: list[Finding] = []
    logical = _logical_lines(parsed.body_lines, text)
    cpt = None if _srun_inherits_cpus(profile) else _last(parsed, "cpus-per-task")
    cpt_n = _int(cpt.value) if cpt else None
    srun_cpus_exported = False
    launched = False
    bare_launchers: list[tuple[int, str]] = []
    for lineno, line in logical:
        if re.search(r"\bSRUN_CPUS_PER_TASK=", line):
            srun_cpus_exported = True
        for cmd in _commands(_words(line)):
            prog = _program(cmd)
            if prog is None:
                continue
            name, args = prog
            if name in _LAUNCH_OK:
                launched = True
            elif name in _NEEDS_SRUN or (name.startswith("python") and "torch.distributed.run" in args):
                bare_launchers.append((lineno, name))
            if name == "srun" and cpt is not None and (cpt_n is None or cpt_n > 1):
                if not srun_cpus_exported and not _srun_sets_cpus(args):
                    out.append(_sl202(lineno, cpt, profile))
        for m in re.finditer(r"\bMASTER_PORT=[\"']?(\d+)\b|--master[_-]port[= ]+[\"']?(\d+)\b", line):
            port = m.group(1) or m.group(2)
            out.append(_f(lineno, "SL203",
                          f"fixed port {port}: two jobs sharing a node will clash on it",
                          "derive it from the job id, e.g. export MASTER_PORT=$((16000 + SLURM_JOB_ID % 16000))"))
    out += _check_local_rendezvous(parsed, logical)
    multi, where = _task_counts(parsed)
    if multi and not launched:
        if bare_launchers:
            lineno, name = bare_launchers[0]
            why = ("starts its remote workers over ssh, outside Slurm (no task accounting or cleanup, "
                   "and many sites block ssh to compute nodes)" if name == "horovodrun"
                   else "without srun starts processes only on the job's first node")
            idle = "" if name == "horovodrun" else "; the job's other tasks sit idle"
            out.append(_f(lineno, "SL201", f"{name} {why}{idle}",
                          f"launch one process per task with srun (e.g. srun python train.py), "
                          f"or run {name} under srun with one task per node"))
        else:
            out.append(_f(where, "SL201",
                          "the job asks for several tasks but no line launches them with srun: "
                          "the script runs once, on the first node, and the rest sit idle",
                          "start the parallel part with srun (e.g. srun python train.py)"))
    return out


_LOCAL_RENDEZVOUS = re.compile(r"(?:\bMASTER_ADDR=|--master[_-]addr[= ]+|--rdzv[_-]endpoint[= ]+)[\"']?"
                               r"(localhost|127(?:\.\d+){3}|\[?::1\]?)(?![\w.-])")


def _check_local_rendezvous(parsed: ParsedScript, logical: list[tuple[int, str]]) -> list[Finding]:
    """SL206: on several nodes, ``localhost`` is each node itself: every node waits at its own."""
    nodes = _last(parsed, "nodes")
    fewest = _int(nodes.value.split("-")[0]) if nodes and nodes.value else None
    if not fewest or fewest < 2:
        return []
    return [_f(lineno, "SL206",
               f"the rendezvous is at {m.group(1)} on {fewest} nodes: {m.group(1)} on each node is that node "
               "itself, so each node waits at its own until the timeout",
               'use the first node\'s name: MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)')
            for lineno, line in logical for m in _LOCAL_RENDEZVOUS.finditer(line)]


# ------------------------------------------------ CSCS Alps: NCCL over Slingshot

_NCCL_HOOK = '[annotations] com.hooks.aws_ofi_nccl.enabled = "true" and com.hooks.aws_ofi_nccl.variant = "cuda-dl"'


def _step_nodes(args: list[str], job_nodes: int) -> int:
    """The fewest nodes an srun step runs on: its own -N/--nodes, else the job's."""
    for i, word in enumerate(args):
        value = None
        if word in ("-N", "--nodes") and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith("--nodes=") or (word.startswith("-N") and len(word) > 2):
            value = word.removeprefix("--nodes=").removeprefix("-N")
        if value is not None:
            return _int(value) or job_nodes
    return job_nodes


def _option_value(args: list[str], long: str) -> str | None:
    """The value of srun's ``--long=VALUE`` or ``--long VALUE``, None if absent."""
    for i, word in enumerate(args):
        if word.startswith(f"--{long}="):
            return word.split("=", 1)[1]
        if word == f"--{long}" and i + 1 < len(args):
            return args[i + 1]
    return None


def _edf_file(name: str, workdir: Path | None) -> Path | None:
    """Where the Container Engine finds ``--environment=NAME``: a path (absolute, relative, or ending
    in .toml) as given, from the folder the job starts in; a bare name as NAME.toml in $EDF_PATH's
    folders, then in ~/.edf (CSCS docs, container-engine/run.md). None if not found."""
    if "/" in name or name.endswith(".toml"):
        path = Path(os.path.expandvars(os.path.expanduser(name)))
        if not path.is_absolute():
            path = workdir / path if workdir is not None else path
        return path if path.is_file() else None
    folders = [*os.environ.get("EDF_PATH", "").split(":"), str(Path.home() / ".edf")]
    return next((Path(f) / f"{name}.toml" for f in folders if f and (Path(f) / f"{name}.toml").is_file()), None)


def _nccl_hook_enabled(edf: Path) -> bool | None:
    """Whether an environment definition file enables the AWS OFI NCCL hook; None if unreadable."""
    try:
        annotations = tomllib.loads(edf.read_text(encoding="utf-8")).get("annotations", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    value: Any = annotations.get("com.hooks.aws_ofi_nccl.enabled")  # a quoted key stays flat
    if value is None:  # dotted keys nest: com -> hooks -> aws_ofi_nccl -> enabled
        value = annotations
        for key in ("com", "hooks", "aws_ofi_nccl", "enabled"):
            value = value.get(key) if isinstance(value, dict) else None
    return str(value).lower() == "true"


def _sl207(lineno: int, name: str, nodes: int, workdir: Path | None) -> Finding | None:
    edf = _edf_file(name, workdir)
    enabled = _nccl_hook_enabled(edf) if edf is not None else None
    if enabled:
        return None
    if enabled is None:
        return _f(lineno, "SL207", f"--environment={name} on {nodes} nodes: its environment file cannot be read "
                  "here, so whether it enables the AWS OFI NCCL hook is not known (without it NCCL between "
                  "nodes falls back to TCP sockets, or fails)",
                  f"check that the file has {_NCCL_HOOK}", severity=WARNING)
    return _f(lineno, "SL207", f"--environment={name} on {nodes} nodes without the AWS OFI NCCL hook: "
              "NCCL between the nodes falls back to TCP sockets instead of the Slingshot network, or fails",
              f"add {_NCCL_HOOK} to {edf.name}")


def _check_alps_network(parsed: ParsedScript, text: str, workdir: Path | None) -> list[Finding]:
    """SL207/SL208: on Alps, NCCL reaches the other nodes over Slingshot only through the AWS OFI
    NCCL plugin: a Container Engine environment enables it with the hook's annotations (which also
    set NCCL's variables); under a uenv the job sets ``NCCL_NET="AWS Libfabric"`` itself, so that
    NCCL fails instead of falling back to TCP (CSCS docs, software/communication/nccl.md)."""
    nodes = _last(parsed, "nodes")
    job_nodes = (_int(nodes.value.split("-")[0]) if nodes and nodes.value else None) or 1
    nccl_net_set = re.search(r"\bNCCL_NET=", text) is not None
    out: list[Finding] = []
    for lineno, line in _logical_lines(parsed.body_lines, text):
        for cmd in _commands(_words(line)):
            prog = _program(cmd)
            if prog is None or prog[0] != "srun":
                continue
            step_nodes = _step_nodes(prog[1], job_nodes)
            environment, uenv = _option_value(prog[1], "environment"), _option_value(prog[1], "uenv")
            if step_nodes < 2:
                continue
            if environment:
                finding = _sl207(lineno, environment, step_nodes, workdir)
                out += [finding] if finding else []
            elif uenv and not nccl_net_set:
                out.append(_f(lineno, "SL208", f"--uenv={uenv} on {step_nodes} nodes without NCCL_NET: a uenv sets "
                              "none of NCCL's variables, and NCCL falls back to TCP sockets without a word "
                              "(if the job uses NCCL)",
                              'export NCCL_NET="AWS Libfabric" (and the other variables of CSCS\'s NCCL page) '
                              "before srun"))
    return out


# ------------------------------------------------------------ site profile

_HOME = r"(?:~|\$HOME|\$\{HOME\}|/home/[^/\s]+)(?=/|\s|$|[\"'])"
_HOME_RULES: dict[str, tuple[re.Pattern[str], str]] = {
    "venv": (
        re.compile(rf"(?:(?:-m\s+venv|\bvirtualenv|\bconda\s+create\b[^\n]*?(?:-p|--prefix))\s+(?:-\S+\s+)*[\"']?{_HOME}"
                   rf"|\bsource\s+[\"']?{_HOME}\S*/bin/activate)"),
        "a virtual environment under $HOME",
    ),
    "cache": (
        re.compile(rf"(?:\b(?:XDG_CACHE_HOME|HF_HOME|HF_DATASETS_CACHE|TRANSFORMERS_CACHE|TORCH_HOME|"
                   rf"PIP_CACHE_DIR|TORCH_EXTENSIONS_DIR|TRITON_CACHE_DIR|WANDB_DIR)=[\"']?{_HOME}"
                   rf"|{_HOME}/\.cache\b)"),
        "a cache under $HOME",
    ),
    "data": (
        re.compile(rf"(?:--[\w-]*data[\w-]*[= ]+[\"']?{_HOME}|{_HOME}/[^\s\"']*data)", re.IGNORECASE),
        "data under $HOME",
    ),
}


def _gpu_request(value: str | None, option: str) -> tuple[int, str | None] | None:
    """(count, type) of a GPU option's value as Slurm reads it; None when it is no GPU request."""
    try:
        return parse_gpus(value, option) if value else None
    except ValueError:
        return None


def _gpus_per_node(parsed: ParsedScript) -> tuple[int, int, str | None] | None:
    """(GPUs per node requested, line, GPU type) from --gpus-per-node, --gres, --gpus."""
    nodes = _int(_last(parsed, "nodes").value) if _last(parsed, "nodes") else None
    d = _last(parsed, "gpus-per-node")
    if d and (req := _gpu_request(d.value, "--gpus-per-node")):
        return req[0], d.lineno, req[1]
    d = _last(parsed, "gres")
    for item in (d.value or "").split(",") if d else ():
        if req := _gpu_request(item, "--gres"):
            return req[0], d.lineno, req[1]
    d = _last(parsed, "gpus")
    if d and (req := _gpu_request(d.value, "--gpus")):
        return math.ceil(req[0] / max(nodes or 1, 1)), d.lineno, req[1]
    return None


def _site_gpu_limit(profile: Any, typ: str | None) -> int | None:
    types = getattr(profile, "gpu_types", ()) or ()
    if typ:
        for g in types:
            if g.name.lower() == typ.lower() and g.per_node:
                return int(g.per_node)
    known = [int(g.per_node) for g in types if getattr(g, "per_node", None)]
    if known:
        return max(known)
    if not types:  # no real GPU data: the nodes the profile describes are the site
        gpus = [int(getattr(n, "gpus", 0) or 0) for n in getattr(profile, "nodes", ())]
        return max(gpus) if gpus else None
    return None


def _split_directive(text: str) -> tuple[str, str | None]:
    """"--account=<project>" -> ("account", "<project>") using sbatch's own parser."""
    try:
        opts, _ = parse_args(shlex.split(text), "sbatch")
    except (OptionError, ValueError):
        return text.lstrip("-").partition("=")[0], None
    if not opts:
        return text.lstrip("-").partition("=")[0], None
    spec, value = opts[0]
    return spec.long, value


def _check_profile(parsed: ParsedScript, text: str, profile: Any, limit: int | None, timed: bool) -> list[Finding]:
    out: list[Finding] = []
    site = getattr(profile, "name", "this site")
    # partition and its time limit
    d = _last(parsed, "partition")
    part = None
    if d is not None and d.value:
        known = [p.name for p in profile.partitions]
        for name in d.value.split(","):
            if name not in known:
                out.append(_f(d.lineno, "SL301", f"partition '{name}' does not exist at {site}",
                              f"use one of: {', '.join(known)}"))
            elif part is None:
                part = next(p for p in profile.partitions if p.name == name)
    elif d is None:
        part = next((p for p in profile.partitions if p.default), None)
    if part is not None and timed and limit is not None:
        max_s = parse_time(part.max_time)
        if max_s is not None and limit > max_s:
            t = _last(parsed, "time")
            out.append(_f(t.lineno if t else 1, "SL302",
                          f"--time={t.value if t else '?'} exceeds partition '{part.name}' maximum of "
                          f"{part.max_time}: the job pends forever (PartitionTimeLimit)",
                          f"ask for at most {part.max_time}, and checkpoint to continue in a new job"))
    # GPUs per node
    req = _gpus_per_node(parsed)
    if req is not None:
        count, lineno, typ = req
        cap = _site_gpu_limit(profile, typ)
        if cap is not None and count > cap:
            out.append(_f(lineno, "SL303", f"{count} GPUs per node requested, but {site}'s nodes have {cap}",
                          f"ask for at most {cap} GPUs per node and add nodes (--nodes) instead"))
    # account / required directives
    if getattr(profile, "account_required", False):
        directive = getattr(profile, "account_directive", None) or "--account=<project>"
        long, _ = _split_directive(directive)
        if _last(parsed, long) is None:
            out.append(_f(_anchor(parsed), "SL304", f"{site} requires every job to name its project with --{long}",
                          f"add #SBATCH {directive}"))
    for req_text in getattr(profile, "required_directives", ()) or ():
        long, want = _split_directive(req_text)
        have = _last(parsed, long)
        if have is None:
            out.append(_f(_anchor(parsed), "SL305", f"{site} requires {req_text}", f"add #SBATCH {req_text}"))
        elif want and "<" not in want and have.value is not None and want not in re.split(r"[&|,]", have.value):
            out.append(_f(have.lineno, "SL305", f"{site} requires {req_text}, not --{long}={have.value}",
                          f"use #SBATCH {req_text}"))
    # $HOME rules
    forbidden = tuple(getattr(profile, "home_forbidden_for", ()) or ())
    for lineno, line in _logical_lines(parsed.body_lines, text):
        for kind in forbidden:
            rule = _HOME_RULES.get(kind)
            if rule and rule[0].search(line):
                out.append(_f(lineno, "SL306", f"{rule[1]}: {site} forbids keeping {kind} in the home directory",
                              f"put it on the site's scratch/project storage instead of $HOME"))
    return out


# ------------------------------------------------------------------ entry points


def _check_log_folders(parsed: ParsedScript, workdir: Path) -> list[Finding]:
    """--output/--error into a folder that does not exist where the job starts (``workdir``, or
    --chdir): sbatch accepts the job, slurmstepd cannot open the file, and the job fails with no output
    at all (Slurm never creates the folder). Folders with a ``%`` pattern are not checked."""
    chdir = _last(parsed, "chdir")
    if chdir is not None and chdir.value and "%" in chdir.value:
        return []
    start = workdir / chdir.value if chdir is not None and chdir.value else workdir
    out: list[Finding] = []
    for long in ("output", "error"):
        d = _last(parsed, long)
        folder = os.path.dirname(d.value) if d is not None and d.value else ""
        if not folder or "%" in folder or (start / folder).is_dir():
            continue
        out.append(_f(d.lineno, "SL113", f"--{long}={d.value}: the folder '{folder}' does not exist in {start}: "
                      "the job would fail with no output at all (Slurm does not create it)",
                      f"mkdir -p {folder} before sbatch"))
    return out


def _resolve_profile(profile: Any) -> Any:
    if profile is None or not isinstance(profile, str):
        return profile
    from hpcnb.sites import load_profile

    return load_profile(profile)


def lint_text(text: str, profile: Profile | str | None = None, workdir: str | Path | None = None) -> list[Finding]:
    """Lint a job script's text; ``profile`` is a site Profile, its name, or None. With ``workdir``
    (where it would be submitted) the folders of its log files are checked too."""
    prof = _resolve_profile(profile)
    parsed = parse_script(text)
    found = _check_form(parsed) + _check_shebang(parsed) + _check_directives(parsed, prof)
    found += _check_placement(parsed) + _check_placeholders(parsed) + _check_log_names(parsed)
    if workdir is not None:
        found += _check_log_folders(parsed, Path(workdir))
    found += _check_alps_network(parsed, text, Path(workdir) if workdir is not None else None)
    time_findings, limit, timed = _check_time(parsed)
    found += time_findings + _check_body(parsed, text, prof) + _check_copied_text(parsed, text)
    if prof is not None:
        found += _check_profile(parsed, text, prof, limit, timed)
    return sorted(found, key=lambda f: (f.lineno, f.code))


def lint_file(path: str | Path, profile: Profile | str | None = None,
              workdir: str | Path | None = None) -> list[Finding]:
    """Lint a job script file, to be submitted from ``workdir`` (default: the current folder)."""
    text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    return lint_text(text, profile, Path.cwd() if workdir is None else workdir)
