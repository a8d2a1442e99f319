"""The course's JupyterLab, as ``make lab`` starts it: ``python -m hpcnb.course.lab [--port N] [--role R]``.

The Lab is the course's cluster: its notebooks and its terminals talk to the same Slurm.

- **Terminals**: bash started with ``--rcfile`` :data:`BASHRC` (the user's ``~/.bashrc``, then the
  course's folders first on ``PATH``: the venv's ``bin`` with ``hpcnb``, and the chosen Slurm's commands,
  the local ones unless ``HPCNB_SLURM=real``). Without it, jupyter-server-terminals starts a *login* shell
  when the server has no terminal of its own, and ``/etc/profile`` resets ``PATH``: ``squeue`` there ran
  the machine's ``/usr/bin/squeue``. The server's own ``PATH`` starts with the same folders (any other shell).
- **Kernels**: only the course's kernel (``hpcnb``) is offered once installed; a notebook stored with
  ``python3`` opens on it (JupyterLab takes the one kernel of the notebook's language).
- **Roles**: the ``student`` Lab (default) is started without nbgrader's instructor parts (the
  Formgrader, "Create Assignment", the course and assignment lists: :data:`STUDENT_CONFIG`, a Jupyter
  config folder put first on ``JUPYTER_CONFIG_PATH``); nbgrader's Validate button stays. The
  ``instructor`` Lab keeps them all.
- **Landing page**: :data:`LANDING` at the served folder's root opens first (else ``notebooks/``),
  rendered: :data:`LAB_SETTINGS` (the Lab's ``app_settings_dir``) makes Markdown files open in the
  Markdown Preview (``overrides.json``), their links to notebooks opening them in the Lab.

Arguments after ``--`` go to ``jupyter lab`` as they are (the tests: ``--no-browser``, a token...).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

ROLES = ("student", "instructor")
LANDING = "START.md"
HERE = Path(__file__).resolve().parent
BASHRC = HERE / "lab_bashrc.sh"
STUDENT_CONFIG = HERE / "student_lab"
LAB_SETTINGS = HERE / "lab_settings"
#: The environment variable the terminals' rcfile reads: the folders to put first on PATH.
PATH_VARIABLE = "HPCNB_LAB_PATH"


def course_path() -> list[str]:
    """The folders the notebooks' and terminals' PATH start with: this Python's ``bin`` (``hpcnb``,
    ``jupyter``), then the chosen Slurm's commands (the local Slurm's unless ``HPCNB_SLURM=real``)."""
    from hpcnb.backend import choose_slurm, local_bin_dir

    choice = choose_slurm()
    slurm = str(local_bin_dir()) if choice.slurm == "local" else choice.real_bin
    return [f for f in (str(Path(sys.executable).parent), slurm) if f]


def lab_env(role: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The Lab server's environment: the chosen Slurm pinned (``HPCNB_SLURM``: kernels and terminals
    agree), :func:`course_path` first on ``PATH`` and in :data:`PATH_VARIABLE`, and for a student the
    config folder without nbgrader's instructor parts (``HPCNB_*`` read from this process's environment)."""
    from hpcnb.backend import check_settings, choose_slurm

    env = dict(os.environ if env is None else env)
    check_settings()
    env["HPCNB_SLURM"] = choose_slurm().slurm
    first = course_path()
    rest = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p not in first]
    env["PATH"] = os.pathsep.join(first + rest)
    env[PATH_VARIABLE] = os.pathsep.join(first)
    if role == "student":
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
            [str(STUDENT_CONFIG), *[p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p]])
    return env


def _course_kernel_installed() -> bool:
    """Is the course's kernel (``hpcnb kernel install``) registered where this Jupyter looks?"""
    from jupyter_client.kernelspec import KernelSpecManager

    from hpcnb.course.kernel import KERNEL_NAME

    return KERNEL_NAME in KernelSpecManager().find_kernel_specs()


def lab_argv(root: Path, port: int | None, extra: Sequence[str] = ()) -> list[str]:
    """``jupyter lab``'s command line for the course served from ``root``."""
    from hpcnb.course.kernel import KERNEL_NAME

    landing = "/lab/tree/" + (LANDING if (root / LANDING).is_file() else "notebooks")
    shell = shutil.which("bash")
    argv = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--ServerApp.root_dir={root}",
            f"--LabApp.default_url={landing}", f"--LabApp.app_settings_dir={LAB_SETTINGS}"]
    if shell:  # else the server's own PATH (above) is what the terminals get
        argv.append(f"--ServerApp.terminado_settings=shell_command={[shell, '--rcfile', str(BASHRC), '-i']!r}")
    if port is not None:
        argv.append(f"--port={port}")
    if _course_kernel_installed():
        argv += [f"--KernelSpecManager.allowed_kernelspecs={KERNEL_NAME}",
                 f"--MappingKernelManager.default_kernel_name={KERNEL_NAME}"]
    else:
        print("hpcnb lab: the course kernel is not installed (`hpcnb kernel install`): every kernel is offered;"
              " run `import hpcnb; hpcnb.setup()` first in a notebook", file=sys.stderr)
    if os.geteuid() == 0:
        argv.append("--allow-root")  # Jupyter refuses root without it (root containers, CI)
    return argv + list(extra)


def _port(text: str) -> int:
    """``--port``'s value: a TCP port number, or argparse's one-line error."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    """Start the course's JupyterLab (this process becomes the server)."""
    from hpcnb.backend import SettingError

    args = list(sys.argv[1:] if argv is None else argv)
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    parser = argparse.ArgumentParser(prog="hpcnb lab", description="The course's JupyterLab (make lab).")
    parser.add_argument("--port", type=_port, default=None, help="the port (default: $JUPYTER_PORT, else 8888)")
    parser.add_argument("--role", choices=ROLES, default="student",
                        help="student (default): without nbgrader's instructor menus; instructor: with them")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the folder served (default: here)")
    opts = parser.parse_args(args)
    if not opts.root.is_dir():
        parser.error(f"--root {opts.root}: not a folder")
    try:
        env = lab_env(opts.role)
    except SettingError as err:
        print(f"hpcnb lab: {err}", file=sys.stderr)
        return 2
    command = lab_argv(opts.root.resolve(), opts.port, extra)
    sys.stdout.flush()
    os.execve(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
