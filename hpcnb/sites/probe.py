"""``hpcnb site probe``: a site profile made from what a live Slurm says (any Slurm: a real one or the local one).

It runs Slurm's own commands, found on the PATH :mod:`hpcnb.backend` arranges (as the job API does):
``scontrol show config|partition|node|reservation``, ``sacctmgr show assoc|user`` and ``srun --help``,
and reads the environment ($SCRATCH, $PROJECT, $WORK, $SLURM_TMPDIR in a job, Lmod, container
runtimes). :func:`probe_site` returns the profile as TOML-ready data; every value carries its source,
what no command can say (quotas, purge policies, the site's rules, the guide) is a question, never a
guess. :func:`render_toml` (``hpcnb.sites.probe_toml``) writes it as a file :func:`load_profile` reads.
A command that fails, or a value that is odd, is said on stderr, kept as a problem, and the probe goes on.

Data layout: the profile's own keys, and in any table ``_from`` ({key: source}), ``_questions``
({key: question}); top level ``_problems`` (what failed or looked odd). Keys starting with ``_`` are
comments only.
"""
from __future__ import annotations

import getpass
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import hostlist

from hpcnb import backend
from hpcnb.sites.probe_toml import render_toml
from hpcnb.sites.values import expand_hostlist, parse_time_limit
from hpcnb.slurm.show import NULL_VALUES, parse_config, parse_gres, parse_records

__all__ = ["probe_site", "render_toml", "profile_name", "COMMAND_TIMEOUT_S"]

COMMAND_TIMEOUT_S = 30.0
#: Nodes of one kind kept per partition: the local Slurm emulates a site scaled down to a laptop.
NODES_PER_KIND = 2
_ENFORCING = {"associations", "limits", "qos", "safe", "wckeys"}
_RUNTIMES = ("apptainer", "singularity", "enroot", "podman-hpc", "charliecloud", "ch-run")
_STORAGE_VARS = (("scratch", "SCRATCH", "shared scratch space"), ("project", "PROJECT", "the project's shared space"),
                 ("work", "WORK", "work space"))
Run = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


class _Probe:
    """Runs Slurm's commands; keeps (and says on stderr) what failed or looked odd."""

    def __init__(self, run: Run | None = None, quiet: bool = False) -> None:
        self.run = run or (lambda args: backend.run(args, timeout=COMMAND_TIMEOUT_S))
        self.quiet = quiet
        self.local = run is None and backend.which_slurm() == "local"
        self.problems: list[str] = []

    def odd(self, text: str) -> None:
        self.problems.append(text)
        if not self.quiet:
            print(f"hpcnb site probe: {text}", file=sys.stderr)

    def command(self, args: list[str]) -> str | None:
        """The command's stdout; None (and a problem) when it is missing, fails or times out."""
        shown = " ".join(args)
        if self.local and args[0] not in backend.LOCAL_COMMANDS:  # never another Slurm's on the rest of PATH
            self.odd(f"`{shown}`: the local Slurm has no {args[0]}; going on")
            return None
        try:
            res = self.run(args)
        except (OSError, subprocess.TimeoutExpired) as err:
            self.odd(f"`{shown}` could not run ({err.strerror if isinstance(err, OSError) else 'timed out'}); going on")
            return None
        if res.returncode != 0:
            said = (res.stderr or res.stdout).strip().splitlines()
            self.odd(f"`{shown}` failed (exit {res.returncode}: {said[0] if said else 'no message'}); going on")
            return None
        return res.stdout


def profile_name(text: str) -> str:
    """``text`` as a profile name (lowercase letters, digits, '-' and '_'), e.g. a cluster's name."""
    name = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_")
    return name or "mysite"


def _value(record: dict[str, str], key: str) -> str | None:
    value = record.get(key, "").strip()
    return None if value in NULL_VALUES else value


def _config(p: _Probe, data: dict[str, Any]) -> dict[str, str]:
    """slurm_version, cluster_name, memory default, KillWait, the account rule's enforcement, private /tmp."""
    text = p.command(["scontrol", "show", "config"])
    config = parse_config(text) if text else {}
    src = "scontrol show config"
    frm, questions = data["_from"], data["_questions"]
    version = re.match(r"(\d{2})\.(\d{2})", config.get("SLURM_VERSION", ""))
    if version:
        data["slurm_version"], frm["slurm_version"] = version.group(0), f"{src} (SLURM_VERSION = {config['SLURM_VERSION']})"
    elif text is not None:
        p.odd(f"{src} names no SLURM_VERSION (YY.MM); slurm_version left out")
    if _value(config, "ClusterName"):
        data["cluster_name"], frm["cluster_name"] = config["ClusterName"], f"{src} (ClusterName)"
    per_cpu, per_node = config.get("DefMemPerCPU", ""), config.get("DefMemPerNode", "")
    if per_cpu.isdigit() and int(per_cpu) > 0:
        data["def_mem_per_cpu_mb"], frm["def_mem_per_cpu_mb"] = int(per_cpu), f"{src} (DefMemPerCPU)"
    elif per_node.isdigit():
        questions["def_mem_per_cpu_mb"] = (f"Slurm gives DefMemPerNode = {per_node} (MB per node), not a per-CPU "
                                           "default; the profile keeps hpcnb's 500 MB per CPU")
    kill = re.match(r"(\d+)", config.get("KillWait", ""))
    if kill:
        data["kill_wait_s"], frm["kill_wait_s"] = int(kill.group(1)), f"{src} (KillWait)"
    enforce = {w.strip() for w in config.get("AccountingStorageEnforce", "").lower().split(",")}
    if text is not None:
        data["account_required"] = bool(enforce & _ENFORCING)
        frm["account_required"] = f"{src} (AccountingStorageEnforce = {config.get('AccountingStorageEnforce', '(none)')})"
    return config


def _partitions(p: _Probe) -> list[dict[str, Any]]:
    text = p.command(["scontrol", "show", "partition"])
    records = [r for r in parse_records(text or "") if "PartitionName" in r]
    if text is not None and not records:
        p.odd("`scontrol show partition` lists no partition")
    return records


def _nodes(p: _Probe) -> dict[str, dict[str, Any]]:
    """Each node's CPUs, memory, GPUs (count, type) and features, from ``scontrol show node``."""
    text = p.command(["scontrol", "show", "node"])
    nodes: dict[str, dict[str, Any]] = {}
    for record in parse_records(text or ""):
        name = record.get("NodeName")
        if not name:
            continue
        try:
            gres = [g for g in parse_gres(record.get("Gres", "")) if g[0] == "gpu"]
        except ValueError as err:
            p.odd(f"node {name}: {err}; its GPUs left out")
            gres = []
        if any(count is None for _, _, count in gres):
            p.odd(f"node {name}: GRES {record.get('Gres')!r} has no GPU count; its GPUs left out")
            gres = []
        if len({kind for _, kind, _ in gres}) > 1:
            p.odd(f"node {name}: GPUs of several types ({record.get('Gres')}); only the first type is kept")
        cpus, memory = record.get("CPUTot", ""), record.get("RealMemory", "")
        if not (cpus.isdigit() and memory.isdigit() and int(cpus) > 0 and int(memory) > 0):
            p.odd(f"node {name}: CPUTot={cpus or '?'} RealMemory={memory or '?'} are not usable; node left out")
            continue
        nodes[name] = {"cpus": int(cpus), "memory_mb": int(memory), "gpus": gres[0][2] if gres else 0,
                       "gpu_type": gres[0][1] if gres else None,
                       "features": [f for f in (_value(record, "AvailableFeatures") or "").split(",") if f]}
    return nodes


def _shape(node: dict[str, Any]) -> tuple:
    return (node["cpus"], node["memory_mb"], node["gpus"], node["gpu_type"], tuple(node["features"]))


def _default_time(p: _Probe, name: str, text: str | None, most: int | None) -> dict[str, str]:
    """{"default_time": DefaultTime} when it is a time within MaxTime; {} for none (and odd ones, said)."""
    try:
        seconds = parse_time_limit(text) if text else None
    except ValueError:
        seconds = None
    if not text or text.upper() in ("UNLIMITED", "INFINITE"):
        return {}
    if not seconds or (most is not None and seconds > most):
        p.odd(f"partition {name}: DefaultTime={text!r} is not a time within its MaxTime; left out")
        return {}
    return {"default_time": text}


def _layout(p: _Probe, records: list[dict[str, str]], nodes: dict[str, dict[str, Any]],
            data: dict[str, Any]) -> None:
    """[[partitions]] and [[nodes]]: per partition, up to NODES_PER_KIND nodes of each kind."""
    kept: list[str] = []
    partitions = []
    for record in records:
        name, src = record["PartitionName"], f"scontrol show partition {record['PartitionName']}"
        try:
            members = expand_hostlist(_value(record, "Nodes") or "")
        except ValueError:
            members = []
        members = [m for m in members if m in nodes]
        if not members:
            p.odd(f"partition {name} has no usable nodes (Nodes={record.get('Nodes', '')}); left out")
            continue
        chosen: list[str] = []
        for node in members:
            if sum(_shape(nodes[n]) == _shape(nodes[node]) for n in chosen) < NODES_PER_KIND:
                chosen.append(node)
        if len(chosen) < len(members):
            p.odd(f"partition {name}: {len(chosen)} of its {len(members)} nodes kept (up to {NODES_PER_KIND} "
                  "of each kind, for the local Slurm)")
        kept += [n for n in chosen if n not in kept]
        max_time = record.get("MaxTime", "UNLIMITED")
        try:
            seconds = parse_time_limit(max_time)
        except ValueError:
            p.odd(f"partition {name}: MaxTime={max_time!r} is not a time; INFINITE written")
            seconds = None
        if seconds == 0:
            p.odd(f"partition {name}: MaxTime=0; INFINITE written")
        details = ", ".join(f"{k}={record[k]}" for k in ("DefaultTime", "MaxNodes", "TotalNodes") if k in record)
        partitions.append({
            "name": name, "max_time": max_time if seconds else "INFINITE",
            **_default_time(p, name, _value(record, "DefaultTime"), seconds),
            **({"max_nodes": int(record["MaxNodes"])} if record.get("MaxNodes", "").isdigit() else {}),
            "default": record.get("Default") == "YES", "nodes": hostlist.collect_hostlist(chosen),
            "preemptible": (record.get("PreemptMode") or "OFF").upper() not in ("OFF", "N/A", ""),
            "description": f"From Slurm: {details}." if details else "",
            "_from": {"name": src}})
    if partitions and sum(part["default"] for part in partitions) != 1:
        p.odd(f"Slurm marks {sum(part['default'] for part in partitions)} partitions Default=YES; "
              f"{partitions[0]['name']} is marked default so that the profile loads")
        for part in partitions:
            part["default"] = part is partitions[0]
        partitions[0]["_questions"] = {"default": "which partition does sbatch use without -p here?"}
    data["partitions"] = partitions
    groups: dict[tuple, list[str]] = {}
    for name in kept:
        groups.setdefault(_shape(nodes[name]), []).append(name)
    data["nodes"] = [{"names": hostlist.collect_hostlist(names), **{k: v for k, v in nodes[names[0]].items() if v},
                      "_from": {"names": "scontrol show node"}} for names in groups.values()]
    types: dict[str, set[int]] = {}
    for shape in groups:
        if shape[3]:
            types.setdefault(shape[3], set()).add(shape[2])
    data["gpu_types"] = [{"name": t, **({"per_node": max(c)} if len(c) == 1 else {}),
                          "_from": {"name": "scontrol show node (Gres)"},
                          "_questions": {"memory_gb": "how much memory has this GPU? (no Slurm command says)"}}
                         for t, c in sorted(types.items())]
    if any(n["gpus"] for n in nodes.values()):
        data["gpu_request"], data["_from"]["gpu_request"] = "--gres=gpu:1", "scontrol show node (GRES gpu)"
        data["_questions"]["gpu_request"] = "does the site's guide ask for GPUs another way (--gpus-per-node=...)?"


def _accounts(p: _Probe, data: dict[str, Any]) -> None:
    """Accounts the user may charge, and the default one, from sacctmgr."""
    user = os.environ.get("USER") or getpass.getuser()
    text = p.command(["sacctmgr", "-nP", "show", "assoc", f"user={user}", "format=account"])
    accounts = sorted({line.strip() for line in (text or "").splitlines() if line.strip()})
    default = ""
    if text is not None:
        default = (p.command(["sacctmgr", "-nP", "show", "user", user, "format=defaultaccount"]) or "").strip()
    if accounts:
        data["notes"].append(f"Accounts you may charge (sacctmgr show assoc user={user}): {', '.join(accounts)}"
                             + (f"; the default one: {default}." if default else "."))
    enforced = data.get("account_required", False)
    if enforced and accounts:  # the default first: a job without --account runs under it
        data["accounts"] = sorted(accounts, key=lambda a: a != default)
        data["_from"]["accounts"] = f"sacctmgr show assoc user={user}, show user {user} (DefaultAccount)"
    if enforced and default:
        data["account_required"] = False  # enforced, but a job without --account gets the default one
    elif enforced:
        data["_questions"]["account_required"] = ("Slurm enforces accounts and no default account was found: "
                                                  "if you have one (sacctmgr show user $USER), write false")
    if accounts or enforced:
        data["account_directive"] = f"--account={default or (accounts[0] if len(accounts) == 1 else '<account>')}"
        data["_from"]["account_directive"] = "sacctmgr show assoc, show user" if accounts else "scontrol show config"
        data["_questions"]["account_directive"] = "does the site want --account on every job (or another option)?"


def _reservations(p: _Probe, data: dict[str, Any]) -> None:
    text = p.command(["scontrol", "show", "reservation"])
    for record in parse_records(text or ""):
        if "ReservationName" in record:
            data["notes"].append("Reservation {} (scontrol show reservation): nodes {}, {} to {}, users {}, accounts {}."
                                 .format(*(record.get(k, "?") for k in ("ReservationName", "Nodes", "StartTime",
                                                                         "EndTime", "Users", "Accounts"))))


def _environment(p: _Probe, data: dict[str, Any], config: dict[str, str]) -> None:
    """Storage from the environment, private /tmp, Lmod, container runtimes."""
    env, in_job = os.environ, "SLURM_JOB_ID" in os.environ
    storage = [{"name": "home", "path": "$HOME", "node_local": False, "use": "Your home directory.",
                "_from": {"path": "the environment ($HOME)"}}]
    for name, var, use in _STORAGE_VARS:
        if env.get(var):
            storage.append({"name": name, "path": f"${var}", "node_local": False, "use": f"${var}: {use}.",
                            "_from": {"path": f"the environment (${var}={env[var]})"}})
    if in_job:
        data["slurm_tmpdir"] = bool(env.get("SLURM_TMPDIR"))
        data["_from"]["slurm_tmpdir"] = f"the environment of job {env['SLURM_JOB_ID']} ($SLURM_TMPDIR)"
    else:
        data["_questions"]["slurm_tmpdir"] = ("do jobs get $SLURM_TMPDIR? Only a job can tell: run the probe "
                                              "inside one (srun hpcnb site probe -o FILE)")
    if data["slurm_tmpdir"]:
        storage.append({"name": "node-local", "path": "$SLURM_TMPDIR", "node_local": True,
                        "purged": "deleted when the job ends", "use": "The job's own folder on each node.",
                        "_from": {"path": "the environment ($SLURM_TMPDIR in a job)"}})
    container = config.get("JobContainerType", "")
    if "tmpfs" in container:
        storage.append({"name": "tmp", "path": "/tmp", "node_local": True, "purged": "deleted when the job ends",
                        "use": "Private to the job on each node (job_container/tmpfs).",
                        "_from": {"path": f"scontrol show config (JobContainerType = {container})"}})
    for tier in storage:
        tier["_questions"] = {"quota_bytes": "quota, backup and purge policy? (no Slurm command says)"}
    data["storage"] = storage
    if env.get("LMOD_CMD") or shutil.which("module"):
        data["notes"].append(f"Lmod is there ($LMOD_CMD={env.get('LMOD_CMD', '?')}): module avail lists the software.")
        data["_questions"]["modules"] = 'which `module load` lines do the lessons need (python = "module load ...")?'
    runtimes = [f"{r} ({shutil.which(r)})" for r in _RUNTIMES if shutil.which(r)]
    help_text = "" if p.local else p.command(["srun", "--help"]) or ""  # the local srun has no plugins
    if "--container-image" in help_text:
        runtimes.append("pyxis (srun --container-image)")
    if re.search(r"--environment\b", help_text):
        runtimes.append("CSCS container engine (srun --environment)")
    if runtimes:
        data["notes"].append(f"Container runtimes: {', '.join(runtimes)}.")


def probe_site(name: str | None = None, *, run: Run | None = None, quiet: bool = False) -> dict[str, Any]:
    """The site profile of the Slurm on PATH as TOML-ready data (see the module's docstring);
    ``name``: the profile's name (default: the cluster's name, made a profile name); ``run``: what
    runs one command (default: :func:`hpcnb.backend.run`, COMMAND_TIMEOUT_S each); ``quiet``: no stderr."""
    p = _Probe(run, quiet)
    host = socket.gethostname()  # no DNS lookup: nothing waits on a resolver
    data: dict[str, Any] = {"_from": {}, "_questions": {}, "notes": [], "account_required": False,
                            "slurm_tmpdir": False, "gpu_request": "", "jupyter": ""}
    config = _config(p, data)
    cluster = data.get("cluster_name") or "mysite"
    data.update(name=profile_name(name or cluster), title=f"{cluster} (probed)",
                source=f"hpcnb site probe on {host}: what this Slurm's commands said",
                login_hosts=[] if "SLURM_JOB_ID" in os.environ else [host])
    data["_from"]["login_hosts"] = "hostname (where the probe ran)"
    _layout(p, _partitions(p), _nodes(p), data)
    _accounts(p, data)
    _reservations(p, data)
    _environment(p, data, config)
    if config.get("MaxArraySize"):
        data["notes"].append(f"MaxArraySize = {config['MaxArraySize']} (scontrol show config).")
    data["_questions"].update(jupyter="how does Jupyter run here (a portal, a job and a tunnel)?",
                              rules="which rules does the site's guide give (login node use, storage, fair share)?")
    data["_problems"] = p.problems
    return data

