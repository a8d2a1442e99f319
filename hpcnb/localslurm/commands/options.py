"""Pieces shared by sbatch, srun and salloc: option parsing into a JobRequest, and its errors."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from hpcnb.slurm.options import INPUT_VARIABLES, OptionError, lookup, parse_args

from ..request import JobRequest, SubmitError, UsageError, apply_option
from . import error

SUBMIT_FAILED = {
    "sbatch": "Batch job submission failed: {}",
    "salloc": "Job submit/allocate failed: {}",
    "srun": "Unable to allocate resources: {}",
}


def build_request(command: str, argv: list[str], directives: list[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[JobRequest, list[str]]:
    """Options from ``#SBATCH`` lines first, then the input environment variables (``SBATCH_ACCOUNT``...),
    then the command line (which wins), as Slurm reads them. Raises UsageError/OptionError."""
    req = JobRequest(command=command)
    opts, rest = parse_args(argv, command)
    if directives:
        script_opts, leftover = parse_args(directives, command)
        if leftover:
            raise UsageError(f"Invalid directive found in batch script: {leftover[0]}", exit_code=255)
        for spec, value in script_opts:
            apply_option(req, spec, value)
    environ = os.environ if environ is None else environ
    for variable, option in INPUT_VARIABLES[command].items():
        if environ.get(variable):
            apply_option(req, lookup(option, command), environ[variable])
    for spec, value in opts:
        apply_option(req, spec, value)
    return req, rest


def report(command: str, err: Exception) -> int:
    """Print a usage/submit error the way the real command does; return its exit code."""
    if isinstance(err, OptionError):
        sys.stderr.write(err.stderr_text())
        return err.exit_code
    if isinstance(err, UsageError):
        for line in getattr(err, "raw", ()):
            print(line, file=sys.stderr)
        error(command, *err.lines)
        return err.exit_code
    if isinstance(err, SubmitError):
        error(command, *err.before, SUBMIT_FAILED[command].format(err.reason))
        return 1
    raise err
