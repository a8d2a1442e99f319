"""Reading #SBATCH directives like sbatch 22.05, and the JobScript builder.

The expected word lists are what the real sbatch 22.05.8 logged with
``sbatch -vvv`` ("Found in script, argument ...") for the same scripts.
"""
from __future__ import annotations

import stat

import pytest

from hpcnb.jobscript import JobScript, directive_args, parse_script, tokenize_directive
from hpcnb.slurm_options import OptionError, parse_args

MIXED = """#!/bin/bash
#SBATCH --time=10 # comment
#SBATCH --comment="a b"#c
#SBATCH --job-name=x#y
#SBATCH --output=LOGS/%x\\_%j.out
  #SBATCH --partition=indented
#SBATCH-N2
#sbatch --qos=lower
#SLURM --wckey=w

# plain comment
#SBATCH -J "quoted name" -c 4
echo hi
#SBATCH --mem=1G
"""


def test_directive_words_match_real_sbatch():
    parsed = parse_script(MIXED)
    assert directive_args(parsed) == [
        "--time=10", "--comment=a b", "--job-name=x", "--output=LOGS/%x_%j.out", "-N2",
        "--wckey=w", "-J", "quoted name", "-c", "4",
    ]


def test_directives_resolved_with_line_numbers():
    parsed = parse_script(MIXED)
    got = [(d.lineno, d.option, d.value, d.spec.long) for d in parsed.directives]
    assert got == [
        (2, "--time", "10", "time"), (3, "--comment", "a b", "comment"), (4, "--job-name", "x", "job-name"),
        (5, "--output", "LOGS/%x_%j.out", "output"), (7, "-N", "2", "nodes"), (9, "--wckey", "w", "wckey"),
        (12, "-J", "quoted name", "job-name"), (12, "-c", "4", "cpus-per-task"),
    ]
    assert parsed.get("job-name").value == "quoted name"  # last one wins


def test_directives_after_first_command_are_ignored():
    parsed = parse_script(MIXED)
    assert [(d.lineno, d.option, d.value) for d in parsed.ignored] == [(14, "--mem", "1G")]
    assert parsed.body_lines == ((13, "echo hi"),)
    assert parsed.shebang == "#!/bin/bash"


def test_indented_and_lowercase_directives_are_comments():
    parsed = parse_script(MIXED)
    assert [n for n, _ in parsed.inert] == [6, 8]
    assert all(d.spec.long not in ("partition", "qos") for d in parsed.directives)


def test_legacy_slurm_prefix_is_honoured_with_error():
    parsed = parse_script(MIXED)
    assert (9, "error: Change from #SLURM to #SBATCH in your script and verify the options are valid in sbatch") \
        in parsed.errors


@pytest.mark.parametrize(
    "rest, words",
    [
        (" --time=5   # limit", ["--time=5"]),
        (" --comment='it''s'", ["--comment=its"]),
        (' --comment="a # b" -N1', ["--comment=a # b", "-N1"]),
        (" --comment=a\\#b --time=5 \\", ["--comment=a#b", "--time=5"]),
        (" --comment=a\\ b", ["--comment=a", "b"]),  # an escaped space still ends the word
        (' --job-name="x\\"y"', ['--job-name=x"y']),
        (' --comment "" --time=5', ["--comment"]),  # an empty word ends the line
        ("\t--time=5", ["--time=5"]),
        ("", []),
    ],
)
def test_tokenizer_matches_sbatch(rest, words):
    assert tokenize_directive(rest) == words


def test_unmatched_quote_is_fatal_like_sbatch():
    parsed = parse_script('#!/bin/bash\n#SBATCH -J a   "--comment=x y\ntrue\n', filename="s2.sh")
    assert parsed.args == ("-J", "a")
    assert parsed.errors == ((2, 'fatal: s2.sh: line 2: Unmatched `"` in [   "--comment=x y]'),)
    # the first word's leading blanks are skipped; the name is the basename, or "stdin"
    first = parse_script('#!/bin/bash\n#SBATCH  "oops\ntrue\n', filename="/tmp/sub/job.sh")
    assert first.errors == ((2, 'fatal: job.sh: line 2: Unmatched `"` in ["oops]'),)
    assert parse_script('#!/bin/bash\n#SBATCH "oops\n').errors[0][1].startswith("fatal: stdin: line 2:")


def test_value_on_next_directive_line():
    parsed = parse_script("#!/bin/bash\n#SBATCH --time\n#SBATCH 5\ntrue\n")
    assert [(d.lineno, d.value) for d in parsed.directives] == [(2, "5")]
    opts, rest = parse_args(directive_args(parsed), "sbatch")
    assert [(s.long, v) for s, v in opts] == [("time", "5")] and rest == []


def test_stray_word_is_an_invalid_directive():
    parsed = parse_script("#!/bin/bash\n#SBATCH -J name extra --time=5\ntrue\n")
    _, rest = parse_args(directive_args(parsed), "sbatch")
    assert rest == ["extra", "--time=5"]  # sbatch: "Invalid directive found in batch script: extra"
    stray = [d for d in parsed.directives if d.spec is None]
    assert [(d.lineno, d.option) for d in stray] == [(2, "extra")]


def test_unknown_option_kept_for_linter_and_rejected_by_getopt():
    parsed = parse_script("#!/bin/bash\n#SBATCH --ntaks-per-node=4\n#SBATCH --time=5\ntrue\n")
    assert [(d.option, d.value, d.spec) for d in parsed.directives][0] == ("--ntaks-per-node", "4", None)
    assert parsed.directives[1].spec.long == "time"
    with pytest.raises(OptionError, match="unrecognized option '--ntaks-per-node=4'"):
        parse_args(directive_args(parsed), "sbatch")


def test_script_form_errors():
    assert parse_script("").errors == ((0, "error: Batch script is empty!"),)
    no_bang = parse_script("echo hi\n")
    assert no_bang.shebang is None
    assert no_bang.errors[0] == (1, "error: This does not look like a batch script.  The first")
    dos = parse_script("#!/bin/bash\r\n#SBATCH --time=5\r\ntrue\r\n")
    assert (0, "error: Batch script contains DOS line breaks (\\r\\n)") in dos.errors


def test_hetjob_separator_is_recorded():
    parsed = parse_script("#!/bin/bash\n#SBATCH --time=5\n#SBATCH hetjob\n#SBATCH --time=6\ntrue\n")
    assert parsed.hetjob_lines == (3,)
    assert parsed.args == ("--time=5", "--time=6")


def test_custom_prefix():
    parsed = parse_script("#!/bin/bash\n#MYJOB --time=5\n#SBATCH --nodes=2\ntrue\n", prefix="#MYJOB")
    assert parsed.args == ("--time=5",)


def test_comment_lines_do_not_end_the_header():
    text = "#!/bin/bash\n\n# resources\n#SBATCH --nodes=2\n   \n#SBATCH --time=5\nsrun true\n"
    parsed = parse_script(text)
    assert parsed.args == ("--nodes=2", "--time=5")
    assert parsed.ignored == ()


# ------------------------------------------------------------------ builder

DDP = """#!/bin/bash
#SBATCH --job-name=ddp
#SBATCH --time=00:10:00
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --output=logs/%x_%j.out
#SBATCH --requeue
#SBATCH --exclusive
#SBATCH --comment="a b#c"

export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
srun python train.py
"""


def _ddp() -> JobScript:
    return JobScript(
        name="ddp", time="00:10:00", nodes=2, ntasks_per_node=4, output="logs/%x_%j.out", requeue=True,
        extra={"exclusive": True, "comment": "a b#c"},
        commands=["export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"],
    ).add("srun python train.py")


def test_render_exact_text():
    assert _ddp().render() == DDP


def test_rendered_script_reads_back_through_sbatch_rules():
    parsed = parse_script(_ddp().render())
    assert directive_args(parsed)[-1] == "--comment=a b#c"
    opts, rest = parse_args(directive_args(parsed), "sbatch")
    assert rest == [] and ("exclusive", None) in [(s.long, v) for s, v in opts]


def test_round_trip():
    text = _ddp().render()
    again = JobScript.from_text(text)
    assert again.render() == text
    assert again.name == "ddp" and again.requeue is True and again.extra == {"exclusive": True, "comment": "a b#c"}


def test_from_text_normalises_short_and_abbreviated_options():
    job = JobScript.from_text("#!/bin/sh\n#SBATCH -N 2 -t 5 --part=debug\n#SBATCH --tasks-per-node=3\n\nsrun x\n")
    assert (job.nodes, job.time, job.partition, job.ntasks_per_node) == ("2", "5", "debug", "3")
    assert job.shell == "/bin/sh" and job.commands == ["srun x"]


def test_from_text_rejects_unknown_directive_with_suggestion():
    with pytest.raises(ValueError, match=r"line 2: .*--ntaks-per-node.*did you mean --ntasks-per-node"):
        JobScript.from_text("#!/bin/bash\n#SBATCH --ntaks-per-node=4\ntrue\n")


def test_set_accepts_several_spellings_and_validates():
    job = JobScript()
    job.set("--cpus-per-task", 8).set("gpus_per_node", "a100:2").set("-p", "gpu").set("mail-type", "END")
    assert (job.cpus_per_task, job.gpus_per_node, job.partition) == (8, "a100:2", "gpu")
    assert job.extra == {"mail-type": "END"}
    job.set("mail-type", None)
    assert job.extra == {}
    with pytest.raises(ValueError, match="did you mean --partition"):
        job.set("partiton", "gpu")
    with pytest.raises(ValueError, match="requires a value"):
        job.set("mail-user", True)
    with pytest.raises(ValueError, match="takes no value"):
        job.set("parsable", "yes")
    with pytest.raises(ValueError, match="no option"):
        job.set("pty", True)  # srun only


def test_empty_value_cannot_be_written():
    with pytest.raises(ValueError, match="empty"):
        JobScript(name="").render()


def test_write_and_from_file(tmp_path):
    path = _ddp().write(tmp_path / "job.sh")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert path.read_text() == DDP
    assert JobScript.from_file(path).render() == DDP


def test_builder_defaults():
    assert JobScript().render() == "#!/bin/bash\n\n"
    assert JobScript().commands == [] and JobScript().commands is not JobScript().commands
