"""The ``hpcnb`` command: local Slurm management, the course kernel, and the linter.

  hpcnb slurm-path                        print the folder holding the local Slurm's commands
  hpcnb which-slurm                       which Slurm the course uses (local or real), and why
  hpcnb slurm [status]                    the local Slurm's state folder, profile, Slurm version, controller, jobs
  hpcnb slurm stop                        stop its controller (jobs keep running)
  hpcnb slurm reset [--profile NAME] [--slurm-version RELEASE]
                                          forget all jobs (and switch the emulated site or Slurm version)
  hpcnb slurm recover                     keep a damaged state file aside and salvage what it can
  hpcnb slurm preempt JOBID               preempt a running job (requeued unless submitted --no-requeue)
  hpcnb slurm slow-node NODE FACTOR       srun tasks on NODE run FACTOR (1-20) times slower; 1 = normal
  hpcnb check-names                       check that the virtual node names resolve
  hpcnb kernel install [--user | --sys-prefix | --prefix DIR]
                                          register the course's Jupyter kernel (default: --sys-prefix)
  hpcnb lint [--profile NAME] SCRIPT...   check job scripts (``-`` reads standard input)
  hpcnb site probe [-o FILE] [--name NAME]
                                          write a site profile from what the Slurm on PATH says
  hpcnb grading VERB ...                  the instructor's verbs (generate, check, release, collect,
                                          autograde, return): ``hpcnb.course.grading``'s own parser
  hpcnb --version | --help | COMMAND --help

Exit codes (the same for every command):

  0  done; ``lint``: no errors (warnings alone do not count)
  1  a finding or a failure: ``lint`` found an error, ``check-names`` found names that do not
     resolve, ``slurm preempt`` found the job not running, ``slurm slow-node`` got a node the
     cluster does not have, the local Slurm's state file is damaged (``hpcnb slurm recover``)
  2  usage, as argparse answers it (one message on stderr, never a traceback): an unknown command
     or option, a missing or malformed argument (a job id, a factor outside 1-20), an unknown site
     profile or Slurm version; ``lint``: a script that cannot be read

The whole grammar is here, in one parser; each command imports what it needs only when it runs,
so ``--help``, ``--version``, ``slurm-path`` and ``which-slurm`` start fast (no torch, psutil or
controller). ``python -m hpcnb.cli ...`` is the same command (tests and notebooks use it).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from hpcnb import __version__

OK, FAILED, USAGE = 0, 1, 2

_EXIT_CODES = """\
exit codes:
  0  done (lint: no errors)
  1  a finding or a failure (lint errors, names that do not resolve, a job that is
     not running, a damaged state file, ...)
  2  usage: unknown command or option, missing or malformed argument, unknown profile"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; command names and their summaries on one line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=24, width=min(100, shutil.get_terminal_size().columns - 2))

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if action.help is not argparse.SUPPRESS and isinstance(action.choices, dict):  # a command list:
            longest = max(map(len, action.choices), default=0)  # its names are indented 2 more
            self._action_max_length = max(self._action_max_length, longest + self._current_indent + 2)


class _Parser(argparse.ArgumentParser):
    """argparse, with ``intermixed=True`` for commands whose options may come between their
    positional arguments (``hpcnb lint a.sh --profile narval b.sh``, as the old hand parser took)."""

    def __init__(self, *args, intermixed: bool = False, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self._intermixed = intermixed
        self._inside = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if not self._intermixed or self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True  # parse_known_intermixed_args calls back here on some Python versions
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def _job_id(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"not a job id: {text!r}")
    return int(text)


def _factor(text: str) -> float:
    try:
        factor = float(text)
    except ValueError:
        factor = 0.0
    if not 1 <= factor <= 20:  # NaN too
        raise argparse.ArgumentTypeError(f"not a factor from 1 to 20: {text!r}")
    return factor


# ------------------------------------------------------------------------------ the commands

def _slurm_path(args: argparse.Namespace) -> int:
    from hpcnb.backend import local_bin_dir

    print(local_bin_dir())
    return OK


def _which_slurm(args: argparse.Namespace) -> int:
    from hpcnb.backend import choose_slurm

    choice = choose_slurm()
    print(choice.slurm)
    print(f"  why: {choice.why}")
    return OK


def _on_local_state(prog: str, action: Callable[[], int]) -> int:
    """Run ``action``; a damaged or unreadable state (file or directory) is one message and exit 1."""
    import sqlite3

    from hpcnb.localslurm import db

    try:
        return action()
    except db.StateError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
    except sqlite3.Error as err:
        print(f"{prog}: error: {db.state_error(err)}", file=sys.stderr)
    except BrokenPipeError:  # the reader left (| head -1): main ends as the shell's tools do
        raise
    except OSError as err:  # an unreadable or refused state directory: one line, never a traceback
        where = f" ({err.filename})" if err.filename else ""
        print(f"{prog}: error: {err.strerror or err}{where}", file=sys.stderr)
    return FAILED


def _admin(verb: Callable[[ModuleType, argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int]:
    """An ``hpcnb slurm`` verb: ``verb(hpcnb.localslurm.admin, args)``, imported only when it runs (None = 0)."""

    def run(args: argparse.Namespace) -> int:
        from hpcnb.localslurm import admin

        return _on_local_state(args.parser.prog, lambda: verb(admin, args) or OK)

    return run


def _check_names(args: argparse.Namespace) -> int:
    from hpcnb.localslurm import names

    return _on_local_state(args.parser.prog, names.check)


def _kernel_install(args: argparse.Namespace) -> int:
    try:
        from hpcnb.course.kernel import install

        folder = install(user=True) if args.user else install(prefix=args.prefix or sys.prefix)
    except ImportError as err:  # jupyter_client: the 'lab' extra
        print(f"hpcnb kernel install: error: {err} (pip install 'hpcnb[lab]')", file=sys.stderr)
        return FAILED
    print(folder)
    return OK


def _lint(args: argparse.Namespace) -> int:
    """Print each script's findings (``-`` is standard input); 1 if any is an error, 2 if a script
    cannot be read or the profile is unknown."""
    from pathlib import Path

    from hpcnb.lint import ERROR, lint_text
    from hpcnb.sites import ProfileError, load_profile

    try:
        profile = load_profile(args.profile) if args.profile else None
    except ProfileError as exc:
        print(f"hpcnb lint: {exc}", file=sys.stderr)
        return USAGE
    status = OK
    for path in args.scripts:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            print(f"hpcnb lint: cannot read {path}: {exc.strerror}", file=sys.stderr)
            status = USAGE
            continue
        for finding in lint_text(text, profile, Path.cwd()):
            print(finding.format(path))
            if finding.severity == ERROR and status == OK:
                status = FAILED
    return status


def _site_probe(args: argparse.Namespace) -> int:
    """Write the profile of the Slurm on PATH (``-o FILE``, else standard output); 1 if it would not load."""
    from pathlib import Path

    from hpcnb.sites import ProfileError, load_profile
    from hpcnb.sites.probe import probe_site, profile_name, render_toml

    out = Path(args.output) if args.output else None
    stem = out.stem if out and out.suffix == ".toml" else None
    if out and stem is None:
        print(f"hpcnb site probe: error: {out}: the profile file must end in .toml", file=sys.stderr)
        return USAGE
    name = args.name or stem
    if stem and name != stem or (name and profile_name(name) != name):
        print(f"hpcnb site probe: error: the name {name!r} must be a profile name (a-z, 0-9, '-', '_') and "
              f"match the file name{f' ({stem!r})' if stem else ''}", file=sys.stderr)
        return USAGE
    text = render_toml(probe_site(name))
    if out is None:
        print(text, end="")
        return OK
    try:
        out.write_text(text, encoding="utf-8")
        load_profile(out.resolve())
    except OSError as err:
        print(f"hpcnb site probe: error: cannot write {out}: {err.strerror}", file=sys.stderr)
        return FAILED
    except ProfileError as err:
        print(f"hpcnb site probe: {out} written, but it does not load yet: {err}", file=sys.stderr)
        return FAILED
    print(f"{out} written: use it with HPCNB_PROFILE={out.resolve()} (answer its QUESTION lines first)",
          file=sys.stderr)
    return OK


def _grading(argv: Sequence[str]) -> int:
    """``hpcnb grading ARGS``: ``hpcnb.course.grading``'s parser and verbs, under this command's name."""
    from hpcnb.course import grading

    try:
        return grading.main(list(argv), prog="hpcnb grading")
    except SystemExit as stop:  # its --help (0) or a usage error (2), already printed
        return stop.code if isinstance(stop.code, int) else USAGE


# -------------------------------------------------------------------------------- the grammar

def build_parser() -> argparse.ArgumentParser:
    """The whole ``hpcnb`` grammar (builds without importing any command's module)."""
    parser = _Parser(prog="hpcnb", description="Local Slurm management, the course kernel, and the job-script linter.",
                     epilog=_EXIT_CODES)
    parser.add_argument("--version", action="version", version=f"hpcnb {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def command(name: str, summary: str, run: Callable[[argparse.Namespace], int], *, parent=commands,
                description: str | None = None, **kwargs) -> argparse.ArgumentParser:
        sub = parent.add_parser(name, help=summary, description=description or summary, **kwargs)
        sub.set_defaults(run=run, parser=sub)  # the innermost command's defaults win
        return sub

    command("slurm-path", "print the folder holding the local Slurm's commands", _slurm_path,
            description="Print the folder holding the local Slurm's commands (sbatch, squeue, ...):\n"
                        '  export PATH="$(hpcnb slurm-path):$PATH"')
    command("which-slurm", "say which Slurm the course uses (local or real), and why", _which_slurm,
            description="Say which Slurm the course uses (HPCNB_SLURM=local|real|auto), and why.")

    status = _admin(lambda admin, args: admin.show_status())
    slurm = command("slurm", "manage the local Slurm (status, stop, reset, recover, preempt, slow-node)", status,
                    description="Manage the embedded local Slurm. Without a verb: status.", epilog=_EXIT_CODES)
    verbs = slurm.add_subparsers(dest="verb", metavar="VERB", title="verbs")
    command("status", "state folder, profile, Slurm version, controller, job counts", status, parent=verbs)
    command("stop", "stop the controller (jobs keep running; it restarts on demand)",
            _admin(lambda admin, args: admin.stop()), parent=verbs)
    reset = command("reset", "cancel everything, forget all jobs, optionally emulate another site",
                    _admin(lambda admin, args: admin.reset_command(args.profile, args.slurm_version)), parent=verbs)
    reset.add_argument("--profile", metavar="NAME",
                       help="the site profile to emulate from now on (local, narval, ..., or a .toml path)")
    reset.add_argument("--slurm-version", metavar="VERSION",
                       help="behave as this Slurm from now on: 22.05 or 24.11, or any release YY.MM, emulated as "
                            "the nearer of the two (default: $HPCNB_SLURM_VERSION, else the profile's slurm_version)")
    command("recover", 'after "state file is damaged": keep a copy, salvage what can be read',
            _admin(lambda admin, args: print(admin.recover())), parent=verbs)
    preempt = command("preempt", "preempt a running job (requeued unless it was submitted with --no-requeue)",
                      _admin(lambda admin, args: admin.preempt(args.job_id)), parent=verbs)
    preempt.add_argument("job_id", metavar="JOBID", type=_job_id, help="a running job's id")
    slow = command("slow-node", "make srun tasks on one virtual node run FACTOR times slower (1 = normal)",
                   _admin(lambda admin, args: admin.slow_node(args.node, args.factor)), parent=verbs)
    slow.add_argument("node", metavar="NODE", help="a virtual node, e.g. node2")
    slow.add_argument("factor", metavar="FACTOR", type=_factor, help="from 1 (full speed) to 20")

    command("check-names", "check that the virtual node names resolve (frameworks need it)", _check_names)

    kernel = command("kernel", "the course's Jupyter kernel (kernel install: register it)", None,
                     description="The course's Jupyter kernel (an ipykernel whose PATH finds the chosen Slurm).")
    kernel_verbs = kernel.add_subparsers(dest="verb", metavar="VERB", title="verbs", required=True)
    install = command("install", "register the kernel with Jupyter", _kernel_install, parent=kernel_verbs,
                      description="Register the course's kernel ('hpcnb') with Jupyter; prints where it went.")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="into your own Jupyter folder (~/.local/share/jupyter)")
    where.add_argument("--sys-prefix", action="store_true",
                       help=f"into this Python environment's prefix ({sys.prefix}); the default")
    where.add_argument("--prefix", metavar="DIR", help="into DIR/share/jupyter/kernels")

    lint = command("lint", "find the usual job-script mistakes", _lint, intermixed=True,
                   description="Check job scripts; prints path:line: CODE message (fix: ...).",
                   epilog="exit codes: 0 no errors (warnings alone do not count), 1 an error found,\n"
                          "2 usage, an unknown profile, or a script that cannot be read")
    lint.add_argument("--profile", metavar="NAME", help="also check against a site profile (narval, ...)")
    lint.add_argument("scripts", metavar="SCRIPT", nargs="+", help="a job script; - reads standard input")

    site = command("site", "site profiles (site probe: a profile made from the Slurm on PATH)", None,
                   description="Site profiles: what a cluster looks like to the course.")
    site_verbs = site.add_subparsers(dest="verb", metavar="VERB", title="verbs", required=True)
    probe = command("probe", "write a site profile from what the Slurm on PATH says", _site_probe,
                    parent=site_verbs,
                    description="Write a site profile (TOML) from what this Slurm's commands say (scontrol show config,\n"
                                "partition, node, reservation; sacctmgr; srun --help) and the environment; each value with\n"
                                "its source, open questions marked '# QUESTION:'. Run it on a login node or inside a job.")
    probe.add_argument("-o", "--output", metavar="FILE", help="write to FILE (NAME.toml) instead of standard output")
    probe.add_argument("--name", metavar="NAME", help="the profile's name (default: FILE's name, else the cluster's)")

    grading = command("grading", "the instructor's verbs: generate, check, release, collect, autograde, return",
                      lambda args: _grading(args.rest), add_help=False)
    grading.add_argument("rest", nargs=argparse.REMAINDER)  # main() hands them to grading's own parser
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hpcnb ARGS`` (``sys.argv[1:]`` by default); returns the exit code instead of exiting."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["grading"]:  # its own grammar, help and exit codes (hpcnb.course.grading)
        return _grading(args_list[1:])
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(args_list)
        if extra:  # answered by the command they were given to, with its usage line
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as stop:  # --help, --version (0) or a usage error (2), already printed
        return stop.code if isinstance(stop.code, int) else USAGE
    if args.command is None:
        parser.print_help()
        return OK
    from hpcnb.backend import SettingError, check_settings
    from hpcnb.localslurm import settings

    try:
        check_settings()
        if args.command == "slurm":  # the local Slurm's own settings (its controller reads them)
            settings.check()
        code = args.run(args)
        sys.stdout.flush()  # here, not at exit: a reader that left is a broken pipe caught below
        return code
    except (SettingError, settings.SettingError) as err:  # a bad HPCNB_* value: one line, as a usage error
        print(f"hpcnb: error: {err}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:  # `hpcnb slurm status | head -1`: killed by SIGPIPE without a word
        from hpcnb.localslurm.commands import end_on_broken_pipe

        return end_on_broken_pipe()


if __name__ == "__main__":
    sys.exit(main())
