"""Slurm 22.05's option table and getopt behaviour.

Expected strings were recorded from the real sbatch/srun/salloc 22.05.8
(Debian bookworm's slurm-client) run with the same arguments.
"""
from __future__ import annotations

import pytest

from hpcnb.slurm_options import (
    EXIT_USAGE,
    OPTIONS,
    OptionError,
    command_options,
    lookup,
    parse_args,
    short_options,
    suggest,
    usage_error_text,
)

# ------------------------------------------------------------------ the table

# The short options each real command accepts (probed `cmd -X` for every
# letter/digit); ':' = requires an argument.  -k, -I, -K take an optional one.
REAL_OPTSTRINGS = {
    "sbatch": "a:b:c:d:e:hi:km:n:o:p:q:st:vw:x:A:B:C:D:F:G:HJ:L:M:N:OQS:VW",
    "srun": "b:c:d:e:hi:klm:n:o:p:q:r:st:uvw:x:A:B:C:D:EF:G:HIJ:KL:M:N:OQS:T:VW:XZ",
    "salloc": "b:c:d:hkm:n:p:q:st:vw:x:A:B:C:D:F:G:HIJ:KL:M:N:OQS:V",
}


def _optstring(command: str) -> str:
    shorts = short_options(command)
    order = sorted(shorts, key=lambda c: (c.isupper(), c))
    return "".join(c + (":" if shorts[c].arg == "required" else "") for c in order)


@pytest.mark.parametrize("command", sorted(REAL_OPTSTRINGS))
def test_short_options_match_real_slurm(command):
    assert _optstring(command) == REAL_OPTSTRINGS[command]


def test_brief_option_list_is_present():
    needed = """account array begin chdir comment constraint cpus-per-task dependency error exclusive
    export gres gpus gpus-per-node gpus-per-task hold input job-name mem mem-per-cpu mem-per-gpu nodes
    ntasks ntasks-per-node output open-mode parsable partition qos requeue no-requeue signal test-only
    time time-min wait wrap nodelist exclude kill-on-invalid-dep mail-type mail-user overcommit
    oversubscribe propagate reservation cpu-bind distribution label pty unbuffered overlap exact
    immediate quiet verbose help usage version""".split()
    missing = [n for n in needed if n not in OPTIONS]
    assert not missing


def test_table_size_per_command():
    # Counted from Slurm 22.05.8's common_options[] (aliases included).
    assert len(command_options("sbatch")) == 106
    assert len(command_options("srun")) == 131
    assert len(command_options("salloc")) == 95


@pytest.mark.parametrize(
    "name, command, known",
    [
        ("wrap", "sbatch", True), ("wrap", "srun", False), ("parsable", "sbatch", True),
        ("array", "salloc", False), ("pty", "srun", True), ("pty", "sbatch", False),
        ("label", "srun", True), ("no-shell", "salloc", True), ("bell", "sbatch", False),
        ("overlap", "srun", True), ("exact", "sbatch", False), ("cpu-bind", "sbatch", False),
        ("prefer", "srun", True), ("ntasks-per-gpu", "sbatch", True), ("kill-command", "salloc", True),
        ("environment", "sbatch", False), ("argv", "srun", False),
    ],
)
def test_option_belongs_to_commands(name, command, known):
    assert (lookup(name, command) is not None) is known


def test_wait_differs_between_sbatch_and_srun():
    assert lookup("wait", "sbatch").arg == "none"
    assert lookup("wait", "srun").arg == "required"
    assert lookup("W", "srun").long == "wait"
    assert lookup("wait", "salloc") is None


def test_optional_argument_options():
    assert OPTIONS["exclusive"].arg == "optional"
    assert OPTIONS["propagate"].arg == "optional"
    assert OPTIONS["nice"].arg == "optional"
    assert lookup("export", "sbatch").arg == "required"


# ------------------------------------------------------------------ parsing


def _pairs(opts):
    return [(spec.long, value) for spec, value in opts]


def test_long_forms_short_forms_and_bundles():
    opts, rest = parse_args(
        ["--time=10", "--partition", "debug", "-N2", "-n", "4", "-HQ", "-Jname", "job.sh", "a"], "sbatch"
    )
    assert _pairs(opts) == [
        ("time", "10"), ("partition", "debug"), ("nodes", "2"), ("ntasks", "4"),
        ("hold", None), ("quiet", None), ("job-name", "name"),
    ]
    assert rest == ["job.sh", "a"]


def test_required_argument_may_start_with_dash():
    opts, _ = parse_args(["--job-name", "--weird", "-c", "-1"], "sbatch")
    assert _pairs(opts) == [("job-name", "--weird"), ("cpus-per-task", "-1")]


def test_empty_value_after_equals_is_kept():
    opts, _ = parse_args(["--time="], "sbatch")
    assert _pairs(opts) == [("time", "")]


def test_optional_argument_only_attached():
    opts, rest = parse_args(["--exclusive", "--exclusive=user", "-k", "x"], "sbatch")
    assert _pairs(opts) == [("exclusive", None), ("exclusive", "user"), ("no-kill", None)]
    assert rest == ["x"]
    opts, _ = parse_args(["-kyes"], "sbatch")
    assert _pairs(opts) == [("no-kill", "yes")]


def test_unique_prefix_is_accepted():
    opts, _ = parse_args(["--part=debug", "--ntasks-per-n", "2", "--tasks=3"], "sbatch")
    assert _pairs(opts) == [("partition", "debug"), ("ntasks-per-node", "2"), ("tasks-per-node", "3")]


def test_aliases_with_same_meaning_are_not_ambiguous():
    # srun: --cpu_bind and --cpu-bind share one value, so "--cpu_" is fine.
    opts, _ = parse_args(["--cpu_=cores", "--pack=0"], "srun")
    assert _pairs(opts) == [("cpu_bind", "cores"), ("pack-group", "0")]


def test_stops_at_first_non_option():
    opts, rest = parse_args(["-n2", "hostname", "--bogus", "-n", "3"], "srun")
    assert _pairs(opts) == [("ntasks", "2")]
    assert rest == ["hostname", "--bogus", "-n", "3"]


def test_double_dash_ends_options_and_lone_dash_is_an_argument():
    opts, rest = parse_args(["-N1", "--", "--foo"], "sbatch")
    assert _pairs(opts) == [("nodes", "1")] and rest == ["--foo"]
    opts, rest = parse_args(["-N1", "-", "x"], "sbatch")
    assert rest == ["-", "x"]


# Exact stderr of the real 22.05.8 commands.
REAL_ERRORS = [
    ("sbatch", ["--ntaks-per-node=2", "x"], "sbatch: unrecognized option '--ntaks-per-node=2'"),
    ("sbatch", ["--a"], "sbatch: option '--a' is ambiguous; possibilities: '--account' '--acctg-freq' '--array'"),
    ("sbatch", ["--acc"], "sbatch: option '--acc' is ambiguous; possibilities: '--account' '--acctg-freq'"),
    ("sbatch", ["--me=4G"],
     "sbatch: option '--me=4G' is ambiguous; possibilities: '--mem' '--mem-bind' '--mem-per-cpu' '--mem-per-gpu'"),
    ("sbatch", ["--cpu=2"],
     "sbatch: option '--cpu=2' is ambiguous; possibilities: '--cpu-freq' '--cpus-per-gpu' '--cpus-per-task'"),
    ("srun", ["--cpu=2"],
     "srun: option '--cpu=2' is ambiguous; possibilities: '--cpu-bind' '--cpu-freq' '--cpus-per-gpu' "
     "'--cpus-per-task'"),
    ("sbatch", ["--clust"],
     "sbatch: option '--clust' is ambiguous; possibilities: '--cluster-constraint' '--cluster' '--clusters'"),
    ("sbatch", ["--pars=x"], "sbatch: option '--parsable' doesn't allow an argument"),
    ("sbatch", ["--tas"], "sbatch: option '--tasks-per-node' requires an argument"),
    ("sbatch", ["--time"], "sbatch: option '--time' requires an argument"),
    ("sbatch", ["-Hz"], "sbatch: invalid option -- 'z'"),
    ("sbatch", ["-n"], "sbatch: option requires an argument -- 'n'"),
    ("salloc", ["--wrap=x"], "salloc: unrecognized option '--wrap=x'"),
    ("srun", ["-a", "1"], "srun: invalid option -- 'a'"),
]


@pytest.mark.parametrize("command, argv, message", REAL_ERRORS)
def test_getopt_messages_match_real_slurm(command, argv, message):
    with pytest.raises(OptionError) as info:
        parse_args(argv, command)
    assert info.value.message == message
    assert str(info.value) == message
    assert info.value.exit_code == EXIT_USAGE == 255


def test_full_stderr_text():
    with pytest.raises(OptionError) as info:
        parse_args(["--foo"], "srun")
    expected = "srun: unrecognized option '--foo'\nTry \"srun --help\" for more information\n"
    assert info.value.stderr_text() == expected == usage_error_text(info.value)


def test_unknown_command_is_refused():
    with pytest.raises(ValueError, match="unknown command"):
        parse_args([], "squeue")


# ------------------------------------------------------------------ suggest


@pytest.mark.parametrize(
    "typo, command, expected",
    [
        ("ntaks-per-node", "sbatch", "ntasks-per-node"),
        ("--partiton", "sbatch", "partition"),
        ("cpus-per-tasks=4", "srun", "cpus-per-task"),
        ("gpus-per-nodes", "salloc", "gpus-per-node"),
        ("zzzzzz", "sbatch", None),
        ("pty", "sbatch", None),
    ],
)
def test_suggest(typo, command, expected):
    assert suggest(typo, command) == expected
