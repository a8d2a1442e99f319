"""The ``hpcnb`` command (hpcnb/cli.py): its grammar, help, version, exit codes and fast start.

Exit codes, as documented in hpcnb/cli.py: 0 done, 1 a finding or a failure, 2 usage (argparse's
answer on stderr, never a traceback).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hpcnb
from hpcnb import cli

ROOT = Path(__file__).resolve().parent.parent

CLEAN = "#!/bin/bash\n#SBATCH --time=00:10:00\n#SBATCH --partition=debug\nsrun hostname\n"
ERROR = "#!/bin/bash\n#SBATCH --partiton=debug\n#SBATCH --time=00:10:00\nsrun hostname\n"  # SL101
WARNING_ONLY = "#!/bin/bash\n#SBATCH -N 1\nsrun true\n"  # SL108: no --time


def hpcnb_cmd(*args: str, state: Path | None = None, input: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m hpcnb.cli ARGS`` in a fresh process (optionally on its own local Slurm state)."""
    env = dict(os.environ if env is None else env)
    if state is not None:
        env["HPCNB_STATE_DIR"] = str(state)
    return subprocess.run([sys.executable, "-m", "hpcnb.cli", *args], capture_output=True, text=True,
                          env=env, input=input, timeout=120, stdin=None if input is not None else subprocess.DEVNULL)


def _commands(parser) -> dict:
    """{name: subparser} of a parser's command list."""
    (action,) = [a for a in parser._actions if isinstance(a.choices, dict)]
    return action.choices


# ------------------------------------------------------------------------ version and help

def test_version():
    done = hpcnb_cmd("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"hpcnb {hpcnb.__version__}\n", "")
    from importlib.metadata import version

    assert version("hpcnb") == hpcnb.__version__, "pyproject.toml and hpcnb.__version__ disagree"


def test_grading_verbs_have_help_and_no_internal_one():
    done = hpcnb_cmd("grading", "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: hpcnb grading ")
    for verb in ("generate", "check", "release", "collect", "autograde", "return"):
        assert re.search(rf"^\s+{verb}\s", done.stdout, re.M), verb
        shown = hpcnb_cmd("grading", verb, "--help")
        assert shown.returncode == 0 and shown.stdout.startswith(f"usage: hpcnb grading {verb} "), verb
    assert "_grade-one" not in done.stdout + done.stderr
    assert "--notebook NAME" in hpcnb_cmd("grading", "autograde", "--help").stdout
    assert "grading" in hpcnb_cmd("--help").stdout
    done = hpcnb_cmd("grading", "no-such-verb")
    assert done.returncode == 2 and "invalid choice: 'no-such-verb'" in done.stderr and "_grade-one" not in done.stderr


def test_console_script_is_the_same_command():
    script = Path(sys.executable).with_name("hpcnb")
    if not script.exists():
        pytest.skip("no hpcnb console script next to this Python (package not installed with pip)")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout == f"hpcnb {hpcnb.__version__}\n"


def test_help_lists_every_command_and_verb():
    parser = cli.build_parser()
    commands = _commands(parser)
    assert set(commands) == {"slurm-path", "which-slurm", "slurm", "check-names", "kernel", "lint", "site", "grading"}
    assert set(_commands(commands["site"])) == {"probe"}
    verbs = _commands(commands["slurm"])
    assert set(verbs) == {"status", "stop", "reset", "recover", "preempt", "slow-node"}

    top = hpcnb_cmd("--help")
    assert top.returncode == 0 and top.stderr == ""
    assert top.stdout.startswith("usage: hpcnb ")
    for name in commands:
        assert re.search(rf"^    {re.escape(name)} +\S", top.stdout, re.M), f"{name} missing from hpcnb --help"
    assert "exit codes:" in top.stdout

    slurm = hpcnb_cmd("slurm", "--help")
    assert slurm.returncode == 0
    for verb in verbs:
        assert re.search(rf"^    {re.escape(verb)} +\S", slurm.stdout, re.M), f"{verb} missing from slurm --help"
    # the module docstring (the command's documentation) names every command and verb too
    for name in [*commands, *(f"slurm {v}" for v in verbs if v != "status"), "kernel install"]:
        assert f"hpcnb {name}" in cli.__doc__, name


@pytest.mark.parametrize("words", [
    ["slurm-path"], ["which-slurm"], ["slurm"], ["slurm", "status"], ["slurm", "stop"], ["slurm", "reset"],
    ["slurm", "recover"], ["slurm", "preempt"], ["slurm", "slow-node"], ["check-names"], ["kernel"],
    ["kernel", "install"], ["lint"], ["site"], ["site", "probe"],
])
def test_every_command_has_help(words, capsys):
    assert cli.main([*words, "--help"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: hpcnb {' '.join(words)} ") and err == ""


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 0
    assert capsys.readouterr().out.startswith("usage: hpcnb ")


def test_help_and_quick_commands_start_light():
    """--help, --version, which-slurm and slurm-path import no torch, psutil or controller."""
    heavy = ("torch", "psutil", "hpcnb.localslurm.controller", "hpcnb.localslurm.admin", "jupyter_client",
             "hpcnb.lint", "hpcnb.sites")
    for args in (["--help"], ["--version"], ["which-slurm"], ["slurm-path"], ["slurm", "--help"], ["lint", "--help"]):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "hpcnb.cli", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        loaded = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
        assert "argparse" in loaded  # the -X importtime report is there
        assert not [m for m in loaded if m.startswith(heavy)], (args, sorted(m for m in loaded if m.startswith(heavy)))


# ------------------------------------------------------------------------------ usage errors

USAGE_ERRORS = [
    # (argv, the command that answers, a phrase of its answer)
    (["bogus"], "hpcnb", "invalid choice: 'bogus'"),
    (["--bogus"], "hpcnb", "unrecognized arguments: --bogus"),
    (["which-slurm", "now"], "hpcnb which-slurm", "unrecognized arguments: now"),
    (["slurm-path", "-x"], "hpcnb slurm-path", "unrecognized arguments: -x"),
    (["slurm", "bogus"], "hpcnb slurm", "invalid choice: 'bogus'"),
    (["slurm", "status", "extra"], "hpcnb slurm status", "unrecognized arguments: extra"),
    (["slurm", "reset", "--profile"], "hpcnb slurm reset", "argument --profile: expected one argument"),
    (["slurm", "reset", "--prof", "narval"], "hpcnb slurm reset", "unrecognized arguments: --prof narval"),
    (["slurm", "preempt"], "hpcnb slurm preempt", "the following arguments are required: JOBID"),
    (["slurm", "preempt", "abc"], "hpcnb slurm preempt", "not a job id: 'abc'"),
    (["slurm", "preempt", "0"], "hpcnb slurm preempt", "not a job id: '0'"),
    (["slurm", "preempt", "1", "2"], "hpcnb slurm preempt", "unrecognized arguments: 2"),
    (["slurm", "slow-node", "node1"], "hpcnb slurm slow-node", "the following arguments are required: FACTOR"),
    (["slurm", "slow-node", "node2", "fast"], "hpcnb slurm slow-node", "not a factor from 1 to 20: 'fast'"),
    (["slurm", "slow-node", "node2", "21"], "hpcnb slurm slow-node", "not a factor from 1 to 20: '21'"),
    (["slurm", "slow-node", "node2", "nan"], "hpcnb slurm slow-node", "not a factor from 1 to 20: 'nan'"),
    (["check-names", "extra"], "hpcnb check-names", "unrecognized arguments: extra"),
    (["kernel"], "hpcnb kernel", "the following arguments are required: VERB"),
    (["kernel", "uninstall"], "hpcnb kernel", "invalid choice: 'uninstall'"),
    (["kernel", "install", "--user", "--sys-prefix"], "hpcnb kernel install", "not allowed with argument --user"),
    (["kernel", "install", "--prefix"], "hpcnb kernel install", "argument --prefix: expected one argument"),
    (["lint"], "hpcnb lint", "the following arguments are required: SCRIPT"),
    (["lint", "job.sh", "--profile"], "hpcnb lint", "argument --profile: expected one argument"),
    (["lint", "--bogus", "job.sh"], "hpcnb lint", "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("argv, prog, phrase", USAGE_ERRORS, ids=[" ".join(c[0]) for c in USAGE_ERRORS])
def test_usage_error_is_exit_2_on_stderr(argv, prog, phrase, tmp_path):
    done = hpcnb_cmd(*argv, state=tmp_path / "state")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"usage: {prog} "), done.stderr
    assert f"\n{prog}: error: " in done.stderr and phrase in done.stderr, done.stderr
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir()), "a usage error did work"


def test_usage_error_in_process_returns_2(capsys):
    """cli.main returns the code instead of exiting."""
    assert cli.main(["slurm", "reset", "--profile"]) == 2
    assert cli.main(["check-names", "extra"]) == 2
    assert cli.main(["lint", "--profile"]) == 2
    err = capsys.readouterr().err
    assert "usage: hpcnb slurm reset " in err
    assert "hpcnb slurm reset: error: argument --profile: expected one argument" in err
    assert "hpcnb check-names: error: unrecognized arguments: extra" in err
    assert "hpcnb lint: error: argument --profile: expected one argument" in err


# ------------------------------------------------------------------------------ hpcnb slurm

def test_slurm_reset_profile_and_its_errors(tmp_path):
    state = tmp_path / "state"
    done = hpcnb_cmd("slurm", "reset", "--profile", "narval", state=state)
    assert (done.returncode, done.stdout) == (0, "local Slurm reset (profile narval)\n"), done.stderr
    assert "profile: narval\n" in hpcnb_cmd("slurm", state=state).stdout  # no verb: status

    missing = hpcnb_cmd("slurm", "reset", "--profile", state=state)
    assert missing.returncode == 2 and "expected one argument" in missing.stderr
    unknown = hpcnb_cmd("slurm", "reset", "--profile", "no-such-site", state=state)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert unknown.stderr.startswith("hpcnb slurm reset: error: ")
    assert "no site profile named 'no-such-site'" in unknown.stderr
    status = hpcnb_cmd("slurm", "status", state=state)
    assert status.returncode == 0 and "profile: narval\n" in status.stdout, "a refused reset forgot the state"

    done = hpcnb_cmd("slurm", "reset", f"--profile={ROOT / 'hpcnb' / 'sites' / 'local.toml'}", state=state)
    assert done.returncode == 0, done.stderr


def test_slurm_version_from_profile_environment_or_reset(tmp_path, monkeypatch):
    """The profile's slurm_version, HPCNB_SLURM_VERSION over it, fixed at first use; reset changes it.
    Any Slurm release is taken and stands for the emulated one nearest it (hpcnb.sites.emulated_version)."""
    state = tmp_path / "state"
    monkeypatch.delenv("HPCNB_SLURM_VERSION", raising=False)
    assert "slurm version: 24.11 (not started yet)\n" in hpcnb_cmd("slurm", state=state).stdout
    monkeypatch.setenv("HPCNB_PROFILE", "pizdaint")
    assert "slurm version: 24.11 (not started yet)\n" in hpcnb_cmd("slurm", state=state).stdout, "24.05 as 24.11"
    monkeypatch.delenv("HPCNB_PROFILE")
    monkeypatch.setenv("HPCNB_SLURM_VERSION", "23.02")
    assert "slurm version: 22.05 (not started yet)\n" in hpcnb_cmd("slurm", state=state).stdout
    monkeypatch.setenv("HPCNB_SLURM_VERSION", "23.2")
    bad = hpcnb_cmd("slurm", state=state)
    assert bad.returncode == 0 and "slurm version: unusable: HPCNB_SLURM_VERSION='23.2'" in bad.stdout
    from hpcnb.backend import local_bin_dir

    sinfo = subprocess.run([str(Path(local_bin_dir()) / "sinfo")], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "HPCNB_STATE_DIR": str(state)})
    assert sinfo.returncode == 1 and sinfo.stderr.startswith("sinfo: error: HPCNB_SLURM_VERSION='23.2': "), sinfo
    monkeypatch.delenv("HPCNB_SLURM_VERSION")
    done = hpcnb_cmd("slurm", "reset", "--slurm-version", "22.05", state=state)
    assert (done.returncode, done.stdout) == (0, "local Slurm reset (Slurm 22.05)\n"), done.stderr
    assert "slurm version: 22.05\n" in hpcnb_cmd("slurm", "status", state=state).stdout
    done = hpcnb_cmd("slurm", "reset", "--slurm-version", "23.11", state=state)
    assert (done.returncode, done.stdout) == (0, "local Slurm reset (Slurm 23.11, emulated as 24.11)\n"), done.stderr
    assert "slurm version: 24.11\n" in hpcnb_cmd("slurm", "status", state=state).stdout
    refused = hpcnb_cmd("slurm", "reset", "--slurm-version", "latest", state=state)
    assert refused.returncode == 2 and "emulates Slurm 22.05, 24.11" in refused.stderr, refused.stderr
    assert "slurm version: 24.11\n" in hpcnb_cmd("slurm", "status", state=state).stdout, "a refused reset reset"


def test_slurm_failures_are_exit_1(tmp_path):
    state = tmp_path / "state"
    not_running = hpcnb_cmd("slurm", "preempt", "99999", state=state)
    assert (not_running.returncode, not_running.stderr) == (1, "hpcnb: job 99999 is not running\n")
    bad_node = hpcnb_cmd("slurm", "slow-node", "node9", "2", state=state)
    assert (bad_node.returncode, bad_node.stdout) == (1, "")
    assert bad_node.stderr == "hpcnb slurm slow-node: error: no node 'node9': the nodes are node1, node2\n"
    slowed = hpcnb_cmd("slurm", "slow-node", "node2", "2.5", state=state)
    assert (slowed.returncode, slowed.stdout) == (0, "srun tasks on node2 now run 2.5x slower\n"), slowed.stderr
    slowed = hpcnb_cmd("slurm", "slow-node", "node2", "1", state=state)
    assert (slowed.returncode, slowed.stdout) == (0, "node2 runs at full speed\n")


def test_damaged_state_is_exit_1_without_traceback(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "slurm.db").write_text("not a database\n" * 100)
    for args in (["slurm", "status"], ["check-names"]):
        done = hpcnb_cmd(*args, state=state)
        assert done.returncode == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr and "damaged" in done.stderr and "hpcnb slurm recover" in done.stderr


# ------------------------------------------------------------------------- hpcnb kernel install

def _installed(folder: Path) -> dict:
    spec = json.loads((folder / "kernel.json").read_text())
    assert spec["argv"][:3] == [sys.executable, "-m", "hpcnb.course.kernel"]
    return spec


@pytest.mark.parametrize("flags", [["--sys-prefix"], []], ids=["--sys-prefix", "default"])
def test_kernel_install_sys_prefix(flags, tmp_path, monkeypatch, capsys):
    """--sys-prefix (the default) installs into sys.prefix: a temporary one here, not the real venv."""
    pytest.importorskip("jupyter_client")
    prefix = tmp_path / "env"
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user"))  # where --user would go
    assert cli.main(["kernel", "install", *flags]) == 0
    folder = prefix / "share" / "jupyter" / "kernels" / "hpcnb"
    assert capsys.readouterr().out.strip() == str(folder)
    _installed(folder)
    assert not (tmp_path / "user").exists(), "--sys-prefix ignored: the kernel went to the user's folder"


def test_kernel_install_prefix_and_user(tmp_path, monkeypatch, capsys):
    pytest.importorskip("jupyter_client")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "not-here"))
    assert cli.main(["kernel", "install", "--prefix", str(tmp_path / "other")]) == 0
    _installed(tmp_path / "other" / "share" / "jupyter" / "kernels" / "hpcnb")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user"))
    assert cli.main(["kernel", "install", "--user"]) == 0
    _installed(tmp_path / "user" / "kernels" / "hpcnb")
    assert not (tmp_path / "not-here").exists()
    capsys.readouterr()


# ------------------------------------------------------------------------------- hpcnb lint

def test_lint_exit_codes(tmp_path):
    for name, text in (("clean.sh", CLEAN), ("error.sh", ERROR), ("warn.sh", WARNING_ONLY)):
        (tmp_path / name).write_text(text)
    clean, error, warn = (str(tmp_path / n) for n in ("clean.sh", "error.sh", "warn.sh"))

    assert (hpcnb_cmd("lint", clean).returncode, hpcnb_cmd("lint", clean).stdout) == (0, "")
    done = hpcnb_cmd("lint", clean, error)
    assert done.returncode == 1
    assert done.stdout == f"{error}:2: SL101 sbatch: unrecognized option '--partiton=debug' (fix: use --partition)\n"
    done = hpcnb_cmd("lint", warn)
    assert done.returncode == 0 and " SL108 " in done.stdout
    assert hpcnb_cmd("lint", "--profile", "local", clean).returncode == 0
    # options between the scripts, as before argparse
    done = hpcnb_cmd("lint", clean, "--profile", "local", error)
    assert done.returncode == 1 and " SL101 " in done.stdout
    # standard input
    done = hpcnb_cmd("lint", "-", input=ERROR)
    assert done.returncode == 1 and done.stdout.startswith("-:2: SL101 ")
    # 2: unknown profile, unreadable script (the others still linted)
    done = hpcnb_cmd("lint", "--profile", "no-such-site", clean)
    assert done.returncode == 2 and "no site profile named 'no-such-site'" in done.stderr
    done = hpcnb_cmd("lint", str(tmp_path / "missing.sh"), error)
    assert done.returncode == 2 and "cannot read" in done.stderr and " SL101 " in done.stdout
    bare = hpcnb_cmd("lint")
    assert bare.returncode == 2 and bare.stderr.startswith("usage: hpcnb lint ")


@pytest.mark.parametrize("setting, says", [
    ("HPCNB_SLURM=bogus", "hpcnb: error: HPCNB_SLURM='bogus' is not valid: use local, real or auto"),
    ("HPCNB_PROFILE=bogus", "hpcnb: error: HPCNB_PROFILE='bogus': "),
    ("HPCNB_STATE_DIR={file}", "hpcnb: error: HPCNB_STATE_DIR='{file}' is not a folder"),
    ("HPCNB_RESERVATION=my course", "hpcnb: error: HPCNB_RESERVATION='my course' is not a reservation name"),
])
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, setting: str, says: str) -> None:
    """A bad HPCNB_* value: every command says which and why in one line, exits 2, starts nothing."""
    file = tmp_path / "a-file"
    file.write_text("")
    name, _, value = setting.format(file=file).partition("=")
    for command in (["which-slurm"], ["slurm", "status"], ["lint", "-"]):
        done = hpcnb_cmd(*command, input="", env={**os.environ, name: value})
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.startswith(says.format(file=file)) and done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stderr


def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path: Path) -> None:
    """``hpcnb slurm status | head -1`` ends as the shell's tools do: killed by SIGPIPE, no word."""
    env = {**os.environ, "HPCNB_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run(["bash", "-c", f"'{sys.executable}' -m hpcnb.cli slurm status | true; "
                                         'echo "exit ${PIPESTATUS[0]}"'],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.stderr == "" and done.stdout == "exit 141\n", (done.stdout, done.stderr)
