"""Issue "Injection": no text may break out of its line in a job script or a command line.

Property-based (hypothesis) tests feed the option parser, the ``#SBATCH`` script parser, the
time parser and the linter random text: they may only fail with their documented error, phrased
the way Slurm phrases it.  A :class:`~hpcnb.jobscript.JobScript` built from safe values reads back
to the same values, and a value holding a control character is always refused, naming its field.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcnb.jobs import Job, queue, submit
from hpcnb.jobscript import (
    _BY_LONG,
    _FIELDS,
    JobScript,
    UnmatchedQuote,
    _canonical,
    parse_script,
    tokenize_directive,
)
from hpcnb.lint import CODES, lint_text
from hpcnb.slurm_options import (
    COMMANDS,
    OptionError,
    UnsafeTextError,
    check_text,
    command_options,
    format_slurm_time,
    parse_args,
    parse_slurm_time,
)
from hpcnb.lessons.tunnel import TunnelPlan
from hpcnb.localslurm import commands as local_commands
from hpcnb.localslurm import db as local_db
from hpcnb.localslurm import submit as local_submit
from hpcnb.localslurm.commands.common import open_cluster
from hpcnb.localslurm.commands.options import build_request, report
from hpcnb.localslurm.request import SubmitError, UsageError
from reliability_helpers import Slurm, make_env

FUZZ = settings(max_examples=200, deadline=None)  # a few seconds per file

# ------------------------------------------------------------------------------ strategies

SAFE_CHAR = st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"))
SAFE = st.text(SAFE_CHAR, min_size=1, max_size=12)
#: Newline, carriage return, NUL, escape, tab, NEL, U+2028 and the rest of Cc/Cs/Zl/Zp.
UNSAFE_CHAR = st.one_of(
    st.sampled_from("\n\r\x00\x1b\t\x85\u2028\x0b"),
    st.characters(categories=("Cc",)),
    st.characters(categories=("Cs", "Zl", "Zp")),
)
SBATCH = command_options("sbatch")
NAMES = sorted({s.long for s in SBATCH})
#: Text that looks like Slurm input: option names, quotes, '#', '=', blanks, digits, odd Unicode.
SLURMISH = st.text(st.sampled_from(list("-=#'\"\\ \t:,0123456789aNtJ%") + ["\xa0", "²", "١", "\u3000"]),
                   max_size=12)


@st.composite
def option_words(draw: st.DrawFn) -> str:
    """One argv word: a (possibly abbreviated) long option with or without a value, a short cluster, or noise."""
    kind = draw(st.sampled_from(["long", "short", "noise", "text"]))
    if kind == "long":
        name = draw(st.sampled_from(NAMES))
        name = name[: draw(st.integers(0, len(name)))] if draw(st.booleans()) else name
        return f"--{name}" + (f"={draw(SLURMISH)}" if draw(st.booleans()) else "")
    if kind == "short":
        return "-" + draw(st.text(st.sampled_from("AaBbcCdDeEhHiIJkKLmMnNoOpqQsStTuvVwWxXZz?1"), max_size=4))
    return draw(SLURMISH if kind == "noise" else st.text(max_size=12))


@st.composite
def directive_lines(draw: st.DrawFn) -> str:
    """A line that is, or nearly is, an ``#SBATCH`` directive."""
    prefix = draw(st.sampled_from(["#SBATCH ", "#SBATCH", "#SLURM ", " #SBATCH ", "#sbatch ", "# ", "", "\xa0#"]))
    return prefix + " ".join(draw(st.lists(st.one_of(option_words(), SLURMISH), max_size=4)))


#: Resource directives with number-like values ("²".isdigit() is True, but int("²") fails).
RESOURCE_LINES = st.builds(
    "#SBATCH --{}={}{}".format,
    st.sampled_from(["gpus", "gres", "gpus-per-node", "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "time"]),
    st.sampled_from(["", "gpu:", "a100:", "gpu:a100:"]),
    st.text(st.sampled_from("012²١:,"), min_size=1, max_size=3),
)


@st.composite
def scripts(draw: st.DrawFn) -> str:
    """Random scripts: a shebang (usually), directive-ish lines, commands, random text."""
    head = draw(st.sampled_from(["#!/bin/bash\n", "#!/bin/sh\r\n", "", "echo\n"]))
    lines = draw(st.lists(st.one_of(directive_lines(), RESOURCE_LINES, st.text(max_size=20),
                                    st.sampled_from(["srun python train.py", "", "torchrun t.py"])),
                          max_size=8))
    return head + "\n".join(lines) + draw(st.sampled_from(["\n", ""]))


# --------------------------------------------------------------------- parsers: no tracebacks

GETOPT_FORMS = re.compile(
    r"(?P<cmd>\w+): (unrecognized option '--.*'|option '--.*' is ambiguous; possibilities: ('--[\w-]+' ?)+"
    r"|option '--[\w-]+' doesn't allow an argument|option '--[\w-]+' requires an argument"
    r"|invalid option -- '.'|option requires an argument -- '.')",
    re.S,
)


@FUZZ
@given(st.lists(option_words(), max_size=6), st.sampled_from(sorted(COMMANDS)))
def test_option_parser_fails_only_with_getopts_messages(argv: list[str], command: str) -> None:
    try:
        found, rest = parse_args(argv, command)
    except OptionError as err:
        match = GETOPT_FORMS.fullmatch(err.message)
        assert match and match["cmd"] == command, err.message
        assert err.exit_code == 255
        assert err.stderr_text() == f'{err.message}\nTry "{command} --help" for more information\n'
        return
    assert len(rest) <= len(argv) and (not rest or argv[-len(rest):] == rest)
    assert all(spec.accepts(command) for spec, _ in found)


@FUZZ
@given(st.one_of(st.text(max_size=12), SLURMISH))
def test_time_parser_fails_only_with_value_error(text: str) -> None:
    try:
        seconds = parse_slurm_time(text)
    except ValueError as err:
        assert "Slurm time" in str(err)
        return
    assert seconds is None or seconds >= 0


@FUZZ
@given(st.integers(0, 10**8))
def test_formatted_times_parse_back(seconds: int) -> None:
    assert parse_slurm_time(format_slurm_time(seconds)) == seconds


@FUZZ
@given(st.one_of(SLURMISH, st.text(max_size=20), st.builds(" ".join, st.lists(option_words(), max_size=4))))
def test_directive_tokenizer_fails_only_on_an_unmatched_quote(rest: str) -> None:
    try:
        words = tokenize_directive(rest)
    except UnmatchedQuote as err:
        assert re.fullmatch(r"Unmatched `[\"']` in \[.*\]", str(err), re.S), str(err)
        return
    assert all(words)


@FUZZ
@given(scripts())
def test_script_parser_reports_like_sbatch_and_never_raises(text: str) -> None:
    parsed = parse_script(text, filename="/tmp/job.sh")
    for lineno, message in parsed.errors:  # sbatch prints them after "sbatch: "
        assert re.match(r"sbatch: (error: |fatal: job\.sh: line \d+: Unmatched )", f"sbatch: {message}"), message
        assert 0 <= lineno <= text.count("\n") + 1
    first_command = parsed.body_lines[0][0] if parsed.body_lines else float("inf")
    assert all(d.lineno < first_command for d in parsed.directives)
    try:  # what sbatch then does with the words
        parse_args(list(parsed.args), "sbatch")
    except OptionError as err:
        assert GETOPT_FORMS.fullmatch(err.message), err.message


@FUZZ
@given(scripts())
def test_jobscript_from_text_fails_only_with_value_error(text: str) -> None:
    try:
        job = JobScript.from_text(text)
        job.render()  # what it accepted, it can write (an empty value, which sbatch takes, cannot be)
    except ValueError:
        return


@FUZZ
@given(scripts(), st.sampled_from([None, "local"]))
def test_linter_never_raises(text: str, profile: str | None) -> None:
    for finding in lint_text(text, profile):
        assert finding.code in CODES and finding.lineno >= 0


@FUZZ
@given(st.lists(RESOURCE_LINES, min_size=1, max_size=3))
def test_linter_reads_any_resource_value_against_a_site(lines: list[str]) -> None:
    lint_text("#!/bin/bash\n" + "\n".join(lines) + "\nsrun true\n", "local")


# ------------------------------------------------------------------------- builder: round trip

FIELD_NAMES = [f for f in _FIELDS if f != "requeue"]
EXTRA_NAMES = sorted({s.long for s in SBATCH if _canonical(s.long) not in _BY_LONG})
ARG = {s.long: s.arg for s in SBATCH}
ONE_LINE = st.text(SAFE_CHAR, max_size=12)


@st.composite
def extras(draw: st.DrawFn) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in draw(st.lists(st.sampled_from(EXTRA_NAMES), max_size=4, unique=True)):
        flag = ARG[name] == "none" or (ARG[name] == "optional" and draw(st.booleans()))
        out[name] = True if flag else draw(SAFE)
    return out


@st.composite
def safe_jobs(draw: st.DrawFn) -> JobScript:
    fields = draw(st.dictionaries(st.sampled_from(FIELD_NAMES), st.one_of(SAFE, st.integers(0, 99)), max_size=6))
    body = st.text(SAFE_CHAR | st.sampled_from("\n\t"), max_size=30)
    commands = [f"srun {draw(ONE_LINE)}", *draw(st.lists(body, max_size=3))]
    shells = st.sampled_from(["/bin/bash", "/bin/sh", "/usr/bin/env bash"]) | ONE_LINE.filter(lambda s: s == s.strip())
    shell = draw(shells)
    return JobScript(**fields, requeue=draw(st.booleans()), extra=draw(extras()), shell=shell, commands=commands)


@FUZZ
@given(safe_jobs())
def test_rendered_jobscript_parses_back_to_the_same_fields(job: JobScript) -> None:
    text = job.render()
    again = JobScript.from_text(text)
    assert again.options() == job.options(), text
    assert again.shell == job.shell
    assert again.commands == "\n".join(job.commands).split("\n")
    assert again.render() == text
    opts, rest = parse_args(list(parse_script(text).args), "sbatch")  # sbatch agrees, word for word
    assert rest == [] and [(s.long, v) for s, v in opts] == job.options()


# ------------------------------------------------------------- builder: control characters refused

@st.composite
def unsafe(draw: st.DrawFn, multiline: bool = False) -> str:
    """Safe text with one unsafe character put in somewhere."""
    char = draw(UNSAFE_CHAR.filter(lambda c: not multiline or c not in "\n\t"))
    text = draw(ONE_LINE)
    at = draw(st.integers(0, len(text)))
    return text[:at] + char + text[at:]


def _refused(field: str, call: Callable[[], object]) -> UnsafeTextError:
    """``call()`` raises the one control-character error, naming ``field`` first."""
    with pytest.raises(UnsafeTextError) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"{field}: ") and info.value.field == field
    return info.value


@FUZZ
@given(st.sampled_from(FIELD_NAMES), unsafe())
def test_field_with_a_control_character_is_refused(attr: str, value: str) -> None:
    _refused(f"JobScript.{attr}", lambda: JobScript(**{attr: value}))
    _refused(f"JobScript.{attr}", lambda: JobScript().set(attr, value))
    job = JobScript()
    setattr(job, attr, value)  # set behind the builder's back: render still refuses
    _refused(f"JobScript.{attr}", job.render)


@FUZZ
@given(st.sampled_from([n for n in EXTRA_NAMES if ARG[n] != "none"]), unsafe())
def test_extra_option_with_a_control_character_is_refused(name: str, value: str) -> None:
    _refused(f"JobScript.extra[{name!r}]", lambda: JobScript(extra={name: value}))


@FUZZ
@given(unsafe(), unsafe(multiline=True))
def test_shell_and_commands_with_control_characters_are_refused(shell: str, command: str) -> None:
    _refused("JobScript.shell", lambda: JobScript(shell=shell))
    _refused("JobScript.commands[1]", lambda: JobScript(commands=["true", command]))
    _refused("JobScript.commands[1]", lambda: JobScript().add("true", command))


@FUZZ
@given(st.sampled_from(["job_name", "time", "comment", "partition", "J"]), unsafe())
def test_submit_option_with_a_control_character_is_refused(key: str, value: str) -> None:
    _refused(f"submit({key}=...)", lambda: submit(wrap="true", **{key: value}))  # before sbatch runs


@FUZZ
@given(st.text(SAFE_CHAR, max_size=8), UNSAFE_CHAR)
def test_check_text_is_the_one_rule(text: str, char: str) -> None:
    assert check_text(text, "f") == text
    _refused("f", lambda: check_text(text + char, "f"))
    if char in "\n\t":
        assert check_text(text + char, "f", multiline=True) == text + char
    else:
        _refused("f", lambda: check_text(text + char, "f", multiline=True))


# ------------------------------------------------------------------------------- examples

def test_the_reported_injection_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    err = _refused("JobScript.name", lambda: JobScript(name="a\ntouch /tmp/pwned\n#"))
    assert str(err) == "JobScript.name: newline not allowed (a job script line would end here)"
    job = JobScript(name="a", time="5")
    job.name = "a\ntouch /tmp/pwned\n#"
    _refused("JobScript.name", lambda: job.write(tmp_path / "job.sh"))
    _refused("JobScript.name", lambda: submit(job, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value, message", [
    ("a\rb", "JobScript.extra['comment']: carriage return not allowed (a job script line would end here)"),
    ("a\x00b", "JobScript.extra['comment']: NUL character not allowed in a job script line"),
    ("\x1b[31m", "JobScript.extra['comment']: escape character not allowed in a job script line"),
    ("a\tb", "JobScript.extra['comment']: tab not allowed in a job script line"),
    ("a\u2028b", "JobScript.extra['comment']: line separator not allowed (a job script line would end here)"),
])
def test_messages_name_the_field_and_the_character(value: str, message: str) -> None:
    assert str(_refused("JobScript.extra['comment']", lambda: JobScript(extra={"comment": value}))) == message


def test_a_multi_line_body_is_fine_but_not_a_dos_one() -> None:
    job = JobScript(name="loop").add("for i in 1 2; do\n\techo $i\ndone")
    assert job.render().endswith("\nfor i in 1 2; do\n\techo $i\ndone\n")
    err = _refused("JobScript.commands[1]", lambda: job.add("true\r"))
    assert str(err) == "JobScript.commands[1]: carriage return not allowed in the job script"


def test_flag_and_value_mismatches_are_refused_like_for_extras() -> None:
    with pytest.raises(ValueError, match="--time requires a value"):
        JobScript().set("time", True)
    with pytest.raises(ValueError, match="--time requires a value"):
        JobScript.from_text("#!/bin/bash\n#SBATCH --time\n")
    with pytest.raises(ValueError, match="--requeue takes no value"):
        JobScript.from_text("#!/bin/bash\n#SBATCH --requeue=yes\n")
    with pytest.raises(ValueError, match="--parsable takes no value"):
        JobScript().set("parsable", 1)


def test_unicode_spaces_are_word_characters_to_sbatch() -> None:
    """C's isspace() in sbatch: U+00A0 and U+3000 neither split words nor indent a comment."""
    assert tokenize_directive(" --job-name=a\xa0b --comment=x\u3000y") == ["--job-name=a\xa0b", "--comment=x\u3000y"]
    parsed = parse_script("#!/bin/bash\n\xa0# not a comment to sbatch\n#SBATCH --time=5\n")
    assert parsed.args == () and parsed.body_lines[0][0] == 2
    assert JobScript.from_text(JobScript(name="a\xa0b").render()).name == "a\xa0b"


def test_linter_reads_superscript_digits_as_text() -> None:
    for line in ("--gpus=²", "--gres=gpu:²", "--gpus-per-node=a100:²"):
        lint_text(f"#!/bin/bash\n#SBATCH {line}\n#SBATCH --time=5\nsrun true\n", "local")


def test_command_line_fields_are_refused_before_slurm_runs(tmp_path: Path) -> None:
    _refused("submit(args[1])", lambda: submit("job.sh", args=["ok", "a\nb"], cwd=tmp_path))
    _refused("submit(script)", lambda: submit("job\n.sh", cwd=tmp_path))
    _refused("submit(wrap=...)", lambda: submit(wrap="true\r", cwd=tmp_path))
    _refused("queue(user)", lambda: queue(user="alice\n"))
    with pytest.raises(ValueError, match="not an sbatch option name"):
        submit(wrap="true", cwd=tmp_path, **{"time=1 --x": "5"})
    with pytest.raises(ValueError, match="a job id is a number"):
        Job("١٢")  # Arabic-Indic digits are no Slurm job id


@pytest.mark.parametrize("field, kw", [
    ("user", {"user": "alice\n"}),
    ("login_host", {"login_host": "login\x1b"}),
    ("node", {"node": "cn01\r"}),
    ("identity_file", {"identity_file": "~/.ssh/id\x00"}),
    ("ssh_options['UserKnownHostsFile']", {"ssh_options": {"UserKnownHostsFile": "/tmp/kh\tx"}}),
])
def test_tunnel_fields_share_the_rule(field: str, kw: dict[str, object]) -> None:
    values: dict[str, object] = dict(user="alice", login_host="login.example.org", node="cn01",
                                     remote_port=34567, local_port=8888)
    _refused(field, lambda: TunnelPlan(**{**values, **kw}))  # type: ignore[arg-type]


# ------------------------------------------- the local Slurm's commands: Slurm's errors, never a traceback

#: Numbers at and past Slurm's bounds (uint32 ids, NO_VAL, 64 bits, thousands of digits) and their neighbours.
HUGE_NUMBERS = ["9" * 20, str(2**64), str(2**32 - 1), str(2**32 - 2), str(2**31), str(2**31 - 1), "-" + "9" * 20,
                "9" * 5000, "0", "-1", "1e99", "0x10"]
HUGE = st.sampled_from(HUGE_NUMBERS)
PREFIXED_HUGE = st.builds("{}{}".format, st.sampled_from(["", "now+", "now-", "afterok:", "0-3%", "0-", "1_", "1-",
                                                         "1:", "singleton,afterany:"]), HUGE)
#: Any argument a command can get: huge numbers, random text and bytes (as Python decodes argv), newlines, NUL.
VALUES = st.one_of(PREFIXED_HUGE, SLURMISH, st.text(st.characters(exclude_categories=("Cs",)), max_size=10),
                   st.sampled_from("\n\r\x00\x1b\t\x85\u2028\x0b"), st.binary(max_size=8).map(os.fsdecode))
VALUED = sorted(s.long for s in SBATCH if s.arg != "none" and s.long != "wrap")
PYTHON_ERROR = re.compile(r"^(Traceback|\w+(Error|Exception)\b)", re.M)


@pytest.fixture(scope="module")
def private_slurm(tmp_path_factory: pytest.TempPathFactory):
    """A local Slurm of its own (the fuzzing cancels jobs) and one held job to update."""
    state = tmp_path_factory.mktemp("fuzz") / "state"
    instance = Slurm(state, make_env(state))
    saved = os.environ.get("HPCNB_STATE_DIR")
    os.environ["HPCNB_STATE_DIR"] = str(state)
    try:
        yield instance
    finally:
        os.environ["HPCNB_STATE_DIR"] = saved or ""
        instance.stop_everything()


def command(name: str, *argv: str) -> tuple[int, str, str]:
    """Run a local command in this process (fast enough to fuzz); its exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = local_commands.run(name, list(argv))
        except SystemExit as leave:  # getopt's errors
            code = leave.code if isinstance(leave.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def held_job() -> str:
    code, out, err = command("sbatch", "--parsable", "--hold", "--wrap", "true")
    assert code == 0, err
    return out.strip()


def assert_slurm_answer(code: int, err: str, *asked: str) -> None:
    assert not PYTHON_ERROR.search(err), (asked, err)
    assert code == 0 or err.strip(), f"{asked}: exit {code} with nothing said"


def assert_controller_answers(slurm: Slurm) -> None:
    job = held_job()
    assert command("squeue", "-h", "-j", job, "-o", "%i")[1].strip() == job
    assert slurm.wait_controller()  # the controller holds the state, alive
    assert command("scancel", job)[0] == 0


@FUZZ
@given(st.sampled_from(VALUED), VALUES)
def test_sbatch_any_value_of_any_option(private_slurm: Slurm, option: str, value: str) -> None:
    code, out, err = command("sbatch", "--parsable", "--hold", f"--{option}={value}", "--wrap", "true")
    assert_slurm_answer(code, err)
    if code == 0:
        job = out.strip().split(";")[0]
        for name, argv in (("squeue", ["-j", job]), ("sacct", ["-j", job]), ("scontrol", ["show", "job", job])):
            assert_slurm_answer(*command(name, *argv)[::2])
        assert command("scancel", job)[0] == 0


QUERIES = [("squeue", "-j"), ("squeue", "-o"), ("squeue", "-t"), ("squeue", "-u"), ("squeue", "-p"),
           ("sacct", "-j"), ("sacct", "-S"), ("sacct", "-E"), ("sacct", "-o"), ("sacct", "-s"), ("sinfo", "-p"),
           ("sinfo", "-o"), ("scancel", "--signal=USR1"), ("scancel", "--name"), ("scancel", "--state"),
           ("scontrol", "show job"), ("scontrol", "hold"), ("scontrol", "release"), ("scontrol", "requeue"),
           ("scontrol", "update JobId="), ("scontrol", "show hostnames")]


@FUZZ
@given(st.sampled_from(QUERIES), VALUES)
def test_query_commands_with_any_value(private_slurm: Slurm, query: tuple[str, str], value: str) -> None:
    name, option = query
    words = option.split()
    argv = [*words[:-1], words[-1] + value] if option.endswith("=") else [*words, value]
    assert_slurm_answer(*command(name, *argv)[::2])


@FUZZ
@given(st.sampled_from(["StartTime", "TimeLimit", "JobName", "Name", "Comment"]), VALUES)
def test_scontrol_update_of_any_field(private_slurm: Slurm, field: str, value: str) -> None:
    job = held_job()
    assert_slurm_answer(*command("scontrol", "update", f"JobId={job}", f"{field}={value}")[::2])
    for name, argv in (("squeue", ["-j", job]), ("sacct", ["-j", job]), ("scontrol", ["show", "job", job])):
        assert_slurm_answer(*command(name, *argv)[::2])
    assert command("scancel", job)[0] == 0


def srun_or_salloc_request(name: str, argv: list[str]) -> tuple[int, str]:
    """What srun and salloc do with their options before they wait for resources: parse them
    (command line and environment), then have the controller check the request, as ``sbatch
    --test-only`` does. (Exit code, stderr); run in this process, so nothing is queued or started."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            req, _ = build_request(name, argv)
            conn, cluster = open_cluster()
            local_submit.base_request_fields(req, dict(os.environ), cluster)
            with local_db.transaction(conn):
                local_submit.finalize(req, cluster, conn)
            code = 0
        except (OptionError, UsageError, SubmitError) as refused:
            code = report(name, refused)
        except SystemExit as leave:
            code = leave.code if isinstance(leave.code, int) else 1
    return code, err.getvalue()


@FUZZ
@given(st.sampled_from(["srun", "salloc"]), st.data())
def test_srun_and_salloc_any_value_of_any_option(private_slurm: Slurm, name: str, data: st.DataObject) -> None:
    option = data.draw(st.sampled_from(sorted(s.long for s in command_options(name) if s.arg != "none")))
    value = data.draw(VALUES)
    assert_slurm_answer(*srun_or_salloc_request(name, [f"--{option}={value}", "true"]))


@pytest.mark.parametrize("name", ["srun", "salloc"])
def test_srun_and_salloc_every_option_with_every_huge_number(private_slurm: Slurm, name: str) -> None:
    """Not left to chance: each of their options with each number at or past Slurm's bounds."""
    for option in sorted(s.long for s in command_options(name) if s.arg != "none"):
        for value in HUGE_NUMBERS:
            assert_slurm_answer(*srun_or_salloc_request(name, [f"--{option}={value}", "true"]), option, value)


def test_the_controller_answers_after_the_fuzzing(private_slurm: Slurm) -> None:
    assert_controller_answers(private_slurm)
