"""Turning a validated request into queued jobs (the controller's job-submit path)."""
from __future__ import annotations

import json
import os
import pwd
import sqlite3

from hpcnb.slurm.arrays import parse_array as array_spec
from hpcnb.slurm.constraints import as_stored

from . import db, dependencies, envvars, paths, transitions
from .alloc import never_fits
from .cluster import Cluster
from .procs import current_rlimits
from .names import job_env
from .request import JobRequest, SubmitError


def parse_array(spec: str) -> tuple[list[int], int | None]:
    """``1-10:2%3`` / ``1,4,7`` -> (task ids, throttle) (:func:`hpcnb.slurm.arrays.parse_array`);
    a spec Slurm refuses raises SubmitError."""
    try:
        return array_spec(spec)
    except ValueError as err:
        raise SubmitError(str(err)) from None


def exports_all(spec: str | None) -> bool:
    """Does ``--export`` leave the whole environment to the job (unset, or ALL in any case)?"""
    return not spec or spec.upper() == "ALL"


def export_env(spec: str | None, environ: dict[str, str]) -> dict[str, str]:
    """``--export`` (sbatch, srun): ALL (default), NONE, or a list of names / NAME=value (with or
    without ALL); ALL and NONE in any case.

    The local Slurm's own settings (:data:`envvars.LOCAL_SETTINGS`) are kept whatever it says:
    they stand for the cluster's configuration, which a real slurmd reads from slurm.conf.
    """
    if exports_all(spec):
        return dict(environ)
    assert spec is not None
    items = spec.split(",")
    everything = any(item.upper() == "ALL" for item in items)
    env = dict(environ) if everything else {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    if spec.upper() != "NONE":
        for item in items:
            if item.upper() in ("ALL", "NONE"):
                continue
            name, eq, value = item.partition("=")
            if eq:
                env[name] = value
            elif name in environ:
                env[name] = environ[name]
    env.update({name: environ[name] for name in envvars.LOCAL_SETTINGS if name in environ})
    return env


def finalize(req: JobRequest, cluster: Cluster, conn: sqlite3.Connection) -> str:
    """Check the request against the cluster; returns the partition. Raises SubmitError like slurmctld."""
    partition = req.partition or cluster.default_partition.name
    if "," in partition:
        partition = partition.split(",")[0]
    if partition not in cluster.partitions:
        raise SubmitError("Invalid partition name specified", f"invalid partition specified: {partition}")
    option = cluster.account_option
    if cluster.account_required and option and option not in req.given:
        raise SubmitError(
            "Invalid account or account/partition combination specified",
            f"You have to specify a project for your jobs with --{option} (e.g. {cluster.account_directive}).",
        )
    if cluster.accounts and req.account is not None:
        if req.account.lower() not in cluster.accounts:  # Slurm keeps account names in lowercase
            raise SubmitError("Invalid account or account/partition combination specified")
        req.account = req.account.lower()
    if req.constraint:
        req.constraint = as_stored(req.constraint)  # scontrol's Features= shows a comma as &
    why = never_fits(req, cluster, partition)
    if why in ("Memory specification can not be satisfied", "CPU count per node can not be satisfied"):
        raise SubmitError("Requested node configuration is not available", why)
    if why:
        raise SubmitError(why)
    if req.dependency:
        try:
            _, terms = dependencies.parse_dependency(req.dependency)
        except ValueError:
            raise SubmitError("Job dependency problem") from None
        # 22.05 drops a dependency on a job it does not know; 24.11 refuses the job (captured)
        if cluster.since("24.11") and any(not dependencies.known_job(conn, ref) for _, refs in terms for ref in refs):
            raise SubmitError("Job dependency problem")
    return partition


def queue_jobs(
    conn: sqlite3.Connection, req: JobRequest, cluster: Cluster, kind: str, script: bytes | None,
    name: str, owner_pid: int | None = None,
) -> list[int]:
    """Validate and insert the job (or array tasks) in one transaction; returns the job ids.

    All or nothing: a refusal or a failure leaves no job, no used id and no stored script behind.
    """
    user = _user_name()
    stored: list[int] = []
    try:
        with db.transaction(conn):
            partition = finalize(req, cluster, conn)
            ids, throttle = parse_array(req.array) if req.array else ([None], None)
            count = len(ids)
            base = db.next_job_ids(conn, count)
            data = req.to_dict()
            data["array_ids"] = ids if req.array else None
            part = cluster.partitions[partition]
            time_limit = req.time_limit if req.time_given else (part.default_time or part.max_time)
            now = db.now()
            job_ids = []
            for index, task in enumerate(ids):
                # Slurm gives the array's last task the array's own id, the others new ids in order
                job_id = base if (task is None or index == count - 1) else base + 1 + index
                transitions.queue(conn, {
                    "id": job_id, "array_job_id": base if task is not None else None, "array_task_id": task,
                    "array_throttle": throttle, "name": db_text(name), "user": user, "uid": os.getuid(),
                    "account": db_text(req.account) or cluster.default_account, "partition": partition, "kind": kind,
                    "reason": _first_reason(req, now), "submit_time": now, "eligible_time": max(now, req.begin or now),
                    "time_limit": time_limit, "held": 1 if req.hold else 0, "req": json.dumps(data),
                    "supervisor_pid": owner_pid, "supervisor_ctime": _ctime(owner_pid),
                })
                job_ids.append(job_id)
                if script is not None:
                    stored.append(job_id)
                    _store_script(job_id, script)  # inside the transaction: the controller can't start it first
    except BaseException:
        import shutil

        for job_id in stored:
            shutil.rmtree(paths.state_dir() / "jobs" / str(job_id), ignore_errors=True)
        raise
    return sorted(job_ids)


def db_text(text: str | None) -> str | None:
    """A name for a TEXT column: bytes that are not UTF-8 (kept exactly in the request) shown as U+FFFD."""
    if text is None:
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _store_script(job_id: int, script: bytes) -> None:
    path = paths.job_dir(job_id) / "slurm_script"  # the name $0 shows, as with slurmd
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
    with os.fdopen(fd, "wb") as fh:
        fh.write(script)


def _first_reason(req: JobRequest, now: float) -> str:
    """The reason squeue shows before the first scheduling pass: slurmctld sets it at submission
    (a held job, a dependency, a begin time), so it never shows None in between."""
    if req.hold:
        return "JobHeldUser"
    if req.dependency:
        return "Dependency"
    return "BeginTime" if (req.begin or now) > now else "None"


def _ctime(pid: int | None) -> float | None:
    from .procs import create_time

    return create_time(pid) if pid else None


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER", str(os.getuid()))


def _sbatch_variables(req: JobRequest) -> dict[str, str]:
    """What sbatch 22.05 adds to the job's environment: for any --export but ALL, SLURM_EXPORT_ENV
    (the default --export of the job's sruns); with that or --get-user-env, SLURM_GET_USER_ENV=1:
    slurmd loads the login environment under the job's. (SLURM_PRIO_PROCESS: envvars.job_vars.)"""
    added: dict[str, str] = {}
    if not exports_all(req.export):
        added["SLURM_EXPORT_ENV"] = str(req.export)
    if not exports_all(req.export) or "get-user-env" in req.given:
        added["SLURM_GET_USER_ENV"] = "1"
    return added


def base_request_fields(req: JobRequest, environ: dict[str, str], cluster: Cluster) -> None:
    """Fill what every submission records: environment, directories, submit host."""
    req.env = export_env(req.export, environ)
    if req.command == "sbatch":
        req.env.update(_sbatch_variables(req))
    req.env = job_env(cluster, req.env)
    req.submit_dir = os.getcwd()
    req.workdir = os.path.abspath(req.chdir) if req.chdir else os.getcwd()
    req.submit_host = envvars.submit_host()
    req.rlimits = current_rlimits()  # applied to the job as Slurm's PropagateResourceLimits=ALL does
    mask = os.umask(0)
    os.umask(mask)
    req.umask = mask
    req.nice = os.getpriority(os.PRIO_PROCESS, 0)
