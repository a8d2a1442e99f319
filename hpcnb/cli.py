"""The ``hpcnb`` command: local Slurm management, the course kernel, and the linter.

  hpcnb slurm-path                 print the folder holding the local Slurm's commands
  hpcnb which-slurm                which Slurm the course uses (local or real), and why
  hpcnb slurm status|stop          the local Slurm's controller
  hpcnb slurm reset [--profile P]  forget all jobs (and switch the emulated site)
  hpcnb slurm recover              keep a damaged state file aside and start a fresh one
  hpcnb slurm preempt JOBID        preempt a running job (requeued unless --no-requeue)
  hpcnb check-names                check that the virtual node names resolve
  hpcnb kernel install [--user]    register the course's Jupyter kernel
  hpcnb lint [--profile P] FILE..  check job scripts
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    command, rest = args[0], args[1:]
    if command == "slurm-path":
        from hpcnb.backend import local_bin_dir

        print(local_bin_dir())
        return 0
    if command == "which-slurm":
        from hpcnb.backend import choose_slurm

        choice = choose_slurm()
        print(choice.slurm)
        print(f"  why: {choice.why}")
        return 0
    if command == "slurm":
        from hpcnb.localslurm.admin import main as admin

        return admin(rest)
    if command == "check-names":
        from hpcnb.localslurm.names import main as names

        return names(rest)
    if command == "kernel" and rest[:1] == ["install"]:
        from hpcnb.kernel import install

        print(install(user="--user" in rest))
        return 0
    if command == "lint":
        from hpcnb.lint import main as lint

        return lint(rest)
    print(f"hpcnb: unknown command {command!r}\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
