"""What the query commands print: sacct, squeue, sinfo, scontrol show job/node/partition/hostnames,
and the output file names that %-patterns give.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from .harness import (DATE_LINE, TIME_RE, Norm, Side, backfill_year, compare, intentional, name_addresses,
                      node_address, on_both, parse_keyvals)


SCRIPT = "#!/bin/bash\necho out-line\necho err-line >&2\nsrun -N1 -n1 true\n"


def check_all(case: str, got: dict[str, dict]) -> None:
    errors = []
    for aspect in got["real"]:
        try:
            compare(f"format: {case} [{aspect}]", got["local"][aspect], got["real"][aspect])
        except AssertionError as err:
            errors.append(str(err))
    assert not errors, "\n\n".join(errors)


# -- output file names -----------------------------------------------------------------------------
PATTERNS = {
    "x-j-N-u": ["-J", "pat", "-o", "%x-%j-%N-%u.out", "-e", "%x-%A_%a.err"],
    "array-A-a-j": ["--array=1-2", "-o", "arr-%A_%a-%j.out"],
    "array-default": ["--array=1-2"],
    "default": [],
    "percent-n-t-s": ["-o", "lit-%%-%n-%t-%s.out"],
    "subdir-absolute": ["-o", "{wd}/sub/%j.log", "-e", "{wd}/sub/%j.err"],
    # dask-jobqueue's %J (jobid.stepid: the job id alone for the batch step) and zero-padding widths
    # (widths on ids wider than any id, so that each side pads: see padded_ids)
    "J-and-widths": ["-o", "pad-%8j-%12j-%1j-%0j-%09J.out", "-e", "J-%J.err"],
    "array-widths": ["--array=3-4", "-o", "arr-%A-%a-%4a-%8A-%J.out", "-e", "arr-%2a-%3t-%3n-%2s.err"],
    # widths on text, and what is not a pattern: %12q keeps "2q", %3% keeps "3%", %% and a lone %
    "widths-on-text-and-odd": ["-J", "nm", "-o", "txt-%3x-%3u-%5a-%q-%-3j-%.3j-%+j.out",
                               "-e", "q-%12q-%3%x-%%-%%%x-%0%x-%5"],
    # a backslash turns expansion off; the backslashes go (one of a pair stays)
    "backslash": ["-o", r"esc\%j-%x.out", "-e", r"esc2\\%j\-%x%"],
}


def padded_ids(norm: Norm, text: str) -> str:
    """Zero-padded job ids (%8j: 00000264) numbered with their width (<J0:8>): the two sides'
    ids may differ in length."""
    for num in norm.ids:
        text = re.sub(rf"(?<![0-9A-Za-z])0+{num}(?![0-9])",
                      lambda m: f"<J{norm.ids.index(num)}:{len(m.group(0))}>", text)
    return text


@pytest.mark.parametrize("case", list(PATTERNS))
def test_output_file_names(sides, case: str) -> None:
    """The files a batch job's -o/-e patterns give, what is in them, and scontrol's StdOut/StdErr."""
    def one(side: Side) -> dict:
        wd = side.workdir(f"pattern-{case}")
        (wd / "sub").mkdir()
        args = [a.replace("{wd}", str(wd)) for a in PATTERNS[case]]
        job_id = side.sbatch(args, wd, SCRIPT)
        side.wait_done(job_id, wd)
        norm = Norm(side, [wd], side.job_ids(job_id, wd))
        files = {padded_ids(norm, norm.path(str(p.relative_to(wd)))): p for p in wd.rglob("*")
                 if p.is_file() and p.name != "job.sh"}
        shown = side.ok(["scontrol", "show", "job", str(job_id)], wd).stdout.split()
        return {"files": sorted(files),
                "contents": {name: norm.text(path.read_text()) for name, path in files.items()},
                "scontrol StdOut/StdErr": sorted(padded_ids(norm, norm.text(x)) for x in shown
                                                 if x.startswith(("StdOut=", "StdErr=")))}

    # %N: the node's short name, from the slurmstepd's gethostname(); each real slurmd of the CI has
    # a hostname of its own (ci/real-slurm.sh), as on a cluster
    got = on_both(sides, one)
    check_all(f"output names {case}", got)


# -- sacct -------------------------------------------------------------------------------------------
SACCT_FIELDS = (
    "JobID,JobIDRaw,JobName,Partition,Account,AllocCPUS,State,ExitCode,DerivedExitCode,NNodes,NCPUS,NTasks,"
    "NodeList,AllocTRES,ReqTRES,ReqMem,ReqCPUS,ReqNodes,Timelimit,TimelimitRaw,User,UID,Group,GID,WorkDir,QOS,Cluster,AllocNodes,Layout"
)
SACCT_JOBS = {
    "N2-n2-two-steps": (["-N2", "-n2"], "#!/bin/bash\nsrun hostname\nsrun -N1 -n1 true\n"),
    "gres-gpu1": (["--gres=gpu:1", "-n1"], "#!/bin/bash\nsrun true\n"),
    "c2-mem300M": (["-c2", "--mem=300M", "-t", "7"], "#!/bin/bash\nsrun -c1 true\n"),
    "gpus-per-node-N2": (["-N2", "--gpus-per-node=1", "-p", "short"], "#!/bin/bash\nsrun true\n"),
    "mem-per-cpu": (["-n2", "--mem-per-cpu=100"], "#!/bin/bash\nsrun -n1 true\nexit 1\n"),
}


def _sacct_rows(side: Side, norm: Norm, job_id: int, wd: Path, fields: str) -> list[str]:
    res = side.ok(["sacct", "-P", "-j", str(job_id), "--format", fields], wd)
    lines = res.stdout.splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split("|")
        cells[0] = norm.job(cells[0])
        if fields.startswith("JobID,JobIDRaw"):
            cells[1] = norm.job(cells[1])
        out.append(backfill_year(norm.path("|".join(cells))))
    return out


@pytest.mark.parametrize("case", list(SACCT_JOBS))
def test_sacct_rows(sides, case: str) -> None:
    args, script = SACCT_JOBS[case]

    def one(side: Side) -> dict:
        wd = side.workdir(f"sacct-{case}")
        job_id = side.sbatch(["-o", "out.txt", *args], wd, script)
        side.wait_done(job_id, wd)
        norm = Norm(side, [wd], [job_id])
        plain = side.ok(["sacct", "-j", str(job_id)], wd).stdout.splitlines()
        return {
            "sacct -P --format": _sacct_rows(side, norm, job_id, wd, SACCT_FIELDS),
            "sacct -X -p -n": [norm.job(x) for x in side.ok(
                ["sacct", "-X", "-p", "-n", "-j", str(job_id), "--format", "JobID,State,ExitCode"], wd).stdout.split()],
            "sacct (default columns)": [norm.job(line) if i > 1 else line for i, line in enumerate(_fixed(plain))],
        }

    check_all(f"sacct {case}", on_both(sides, one))


def _fixed(lines: list[str]) -> list[str]:
    """Fixed-width lines, with the (right-padded) job id column made id-length independent."""
    out = []
    for line in lines:
        first, rest = line[:12], line[12:]
        out.append(f"{first.strip()}@{len(line)}|{rest}")
    return out


def test_sacct_brief_and_units(sides) -> None:
    def one(side: Side) -> dict:
        wd = side.workdir("sacct-brief")
        job_id = side.sbatch(["-o", "out.txt"], wd, "#!/bin/bash\nexit 4\n")
        side.wait_done(job_id, wd)
        norm = Norm(side, [wd], [job_id])
        brief = side.ok(["sacct", "-b", "-j", str(job_id)], wd).stdout.splitlines()
        bad = side.run(["sacct", "-j", str(job_id), "--format", "JobID,Nope"], wd)
        restarts = side.run(["sacct", "-j", str(job_id), "--format", "JobID,Restarts"], wd)
        widths = side.ok(["sacct", "-j", str(job_id), "--format", "JobID%5,JobName%-3,State%20,ExitCode"], wd)
        unknown = side.run(["sacct", "-j", "999999999"], wd)
        return {"sacct -b": [norm.job(line) if i > 1 else line for i, line in enumerate(_fixed(brief))],
                "bad field": (bad.rc, bad.stdout, bad.stderr),
                "no Restarts field in 22.05": (restarts.rc, re.sub(r"(?m)^\d+", "<J>", restarts.stdout),
                                               restarts.stderr),
                "explicit widths": [re.sub(r"^ *\d+", "<J>", line) for line in widths.stdout.splitlines()],
                "unknown job": (unknown.rc, unknown.stdout, unknown.stderr)}

    check_all("sacct -b / bad field", on_both(sides, one))


# -- squeue ------------------------------------------------------------------------------------------
SQUEUE_FMT = "%i|%A|%F|%K|%P|%j|%u|%t|%T|%D|%C|%R|%r|%l|%b|%m|%c|%E|%q|%a|%o|%Z|%V|%S|%e|%L|%M"


def _squeue_lines(side: Side, norm: Norm, wd: Path, ids: list[int], fmt: str) -> list[str]:
    res = side.ok(["squeue", "-j", ",".join(map(str, ids)), "-o", fmt], wd)
    lines = res.stdout.splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split("|")
        for i in range(min(3, len(cells))):
            cells[i] = norm.job(cells[i])
        cells = [norm.dep(c) if c.startswith("after") else c for c in cells]
        out.append(norm.text("|".join(cells)))
    return out


def _running_and_pending(side: Side, case: str) -> tuple[Path, Norm, int, int]:
    wd = side.workdir(case)
    # exec: SIGTERM then ends the batch step itself (with a shell in between, a real Slurm records
    # 0:15 or 143:0, whichever of shell and child dies first)
    run = side.sbatch(["-o", "run.txt", "-J", "runner", "-t", "30", "--gres=gpu:1", "--mem=200M"], wd,
                      "#!/bin/bash\nexec sleep 300\n", "run.sh")
    held = side.sbatch(["-o", "held.txt", "--hold", "-n2", "-c1", "-p", "short", "-J", "a-long-job-name",
                        f"--dependency=afterany:{run}"], wd, "#!/bin/bash\ntrue\n", "held.sh")
    side.wait_state(run, wd, {"RUNNING"})
    norm = Norm(side, [wd], [run, held])
    return wd, norm, run, held


def test_squeue_formats(sides) -> None:
    def one(side: Side) -> dict:
        wd, norm, run, held = _running_and_pending(side, "squeue-formats")
        time.sleep(1.5)  # the real slurmctld sets the pending job's reason at its next pass
        try:
            fields = _squeue_lines(side, norm, wd, [run, held], SQUEUE_FMT)
            default = side.ok(["squeue", "-j", f"{run},{held}"], wd).stdout.splitlines()
            long = side.ok(["squeue", "-l", "-j", f"{run},{held}"], wd).stdout
            widths = side.ok(["squeue", "-j", f"{run},{held}", "-o", "%.5i %10j %.3t %5D %-8P %.4C"], wd).stdout
            noheader = side.ok(["squeue", "-h", "-j", str(held), "-o", "%i %T %r"], wd).stdout
            bad = side.run(["squeue", "-j", "999999999"], wd)
        finally:
            side.run(["scancel", str(run), str(held)], wd)
        return {
            "squeue -o all fields": [re.sub(r"\|\d+:\d\d(?=\||$)", "|<TIME>", x) for x in fields],
            "squeue default": [_squeue_fixed(norm, line) for line in default],
            "squeue -l": [_squeue_fixed(norm, line) for line in long.splitlines()],
            "squeue -o widths": [_squeue_fixed(norm, line, 5) for line in widths.splitlines()],
            "squeue -h": norm.text(noheader),
            "squeue -j unknown": (bad.rc, bad.stdout, bad.stderr),
        }

    check_all("squeue running+pending", on_both(sides, one))


def test_squeue_steps(sides) -> None:
    """``squeue -s``/``--steps[=LIST]`` (issue 40): a running job's steps in the default step format
    (STEPID NAME PARTITION USER TIME NODELIST), a step list, ``-h`` with a step format."""
    def one(side: Side) -> dict:
        wd = side.workdir("squeue-steps")
        job = side.sbatch(["-N2", "-n2", "-J", "stepper", "-o", "steps.txt"], wd, "#!/bin/bash\nsrun sleep 300\n",
                          "steps.sh")
        norm = Norm(side, [wd], [job])
        try:
            side.wait_state(job, wd, {"RUNNING"})
            deadline = time.time() + 60
            while f"{job}.0" not in side.ok(["squeue", "-h", "-s", "-j", str(job), "-o", "%i"], wd).stdout:
                assert time.time() < deadline, "the step did not start"
                time.sleep(0.5)
            default = side.ok(["squeue", "--steps", "-j", str(job)], wd).stdout.splitlines()
            listed = side.ok(["squeue", f"--steps={job}.batch", "-o", "%i|%j|%P|%A|%N|%l"], wd).stdout
            grouped = side.ok(["squeue", "-hs", f"{job}.0", "-o", "%i|%j|%A|%N"], wd).stdout
        finally:
            side.run(["scancel", str(job)], wd)
        return {
            "squeue -s default": [_step_line(norm, line) for line in default],
            "squeue --steps=LIST": [norm.job(x) for x in listed.splitlines()],
            "squeue -hs LIST": [norm.job(x) for x in grouped.splitlines()],
        }

    check_all("squeue steps", on_both(sides, one))


def _step_line(norm: Norm, line: str) -> str:
    """A fixed-width ``squeue -s`` line: its length, then its words with the step's job id numbered
    and the run time (``0:03``) as ``<T>``."""
    words = line.split()
    words[0] = norm.job(words[0])
    return f"{len(line)}|" + " ".join("<T>" if re.fullmatch(r"\d+:\d\d", w) else w for w in words)


def _squeue_fixed(norm: Norm, line: str, width: int = 18) -> str:
    """A fixed-width squeue line with the job id (right-justified in ``width``) normalised, and TIME."""
    if DATE_LINE.fullmatch(line):
        return "<DATE>"
    head, rest = line[:width], line[width:]
    rest = re.sub(r"(?<= )\d+:\d\d(?= )", "<T>", norm.text(rest))
    return f"{norm.job(head.strip())}@{len(line)}|{rest}"


# -- scontrol show job -------------------------------------------------------------------------------
VOLATILE_JOB_KEYS = {"SubmitTime", "EligibleTime", "AccrueTime", "StartTime", "EndTime", "LastSchedEval",
                     "RunTime", "Priority"}
# slurmctld's priority-age bookkeeping: "Unknown" or a time depending on how an array task was split off
# and which of slurmctld's schedulers started the job (see INTENTIONAL["scheduler"])
ANY_VALUE_KEYS = {"AccrueTime", "Scheduler"}


def job_record(side: Side, norm: Norm, job: str, wd: Path) -> list[tuple[str, str]]:
    text = side.ok(["scontrol", "show", "job", job], wd).stdout
    out = []
    for key, value in parse_keyvals(text).items():
        if key in ("JobId", "ArrayJobId"):
            value = norm.job(value)
        elif key in ANY_VALUE_KEYS or key in VOLATILE_JOB_KEYS and (
                TIME_RE.fullmatch(value) or re.fullmatch(r"[\d:-]+", value)):
            value = f"<{key}>"
        elif key == "AllocNode:Sid":
            value = "<ALLOC_NODE>"  # see INTENTIONAL["alloc_node"]
        elif key == "Dependency":
            value = re.sub(r":(\d+)", lambda m: ":" + norm.job(m.group(1)), value)
        elif key == "TimeLimit":
            value = backfill_year(value)
        else:
            value = norm.path(value)
        out.append((key, value))
    return out


def test_scontrol_show_job(sides) -> None:
    def one(side: Side) -> dict:
        wd, norm, run, held = _running_and_pending(side, "scontrol-job")
        time.sleep(1.5)
        try:
            running = job_record(side, norm, str(run), wd)
            pending = job_record(side, norm, str(held), wd)
            one_line = side.ok(["scontrol", "-o", "show", "job", str(held)], wd).stdout
        finally:
            side.run(["scancel", str(run), str(held)], wd)
        side.wait_done(run, wd)
        side.wait_done(held, wd)
        done = job_record(side, norm, str(run), wd)
        bad = side.run(["scontrol", "show", "job", "999999999"], wd)
        return {"running": running, "pending (held, dependency)": pending, "cancelled": done,
                "-o: lines": len(one_line.strip().splitlines()),
                "unknown job": (bad.rc, bad.stdout, bad.stderr)}

    check_all("scontrol show job", on_both(sides, one))


def test_scontrol_show_job_completed_array(sides) -> None:
    def one(side: Side) -> dict:
        wd = side.workdir("scontrol-job-array")
        job_id = side.sbatch(["--array=1-3%2", "-N2", "-n2", "-o", "o-%A_%a.txt"], wd, "#!/bin/bash\nsrun true\n")
        side.wait_done(job_id, wd)
        norm = Norm(side, [wd], side.job_ids(job_id, wd))
        return {"task 2": job_record(side, norm, f"{job_id}_2", wd), "task 3": job_record(side, norm, f"{job_id}_3", wd)}

    check_all("scontrol show job (array)", on_both(sides, one))


# -- sinfo, scontrol show node/partition, hostnames -------------------------------------------------
def _sinfo_outputs(side: Side, wd: Path) -> dict:
    def out(*argv: str) -> list[str]:
        res = side.run(["sinfo", *argv], wd)
        # the nodes' addresses (%o): each Slurm's own network
        lines = [name_addresses(DATE_LINE.sub("<DATE>", x)) for x in res.stdout.splitlines()]
        if "-N" in argv:  # the real sinfo lists a node's partitions in no fixed order
            head = [x for x in lines[:2] if x == "<DATE>" or x.startswith("NODELIST")]
            lines = head + sorted(lines[len(head):])
        return lines + ([f"[rc={res.rc}] {res.stderr}"] if res.rc or res.stderr else [])

    return {
        "sinfo": out(),
        "sinfo -N": out("-N"),
        "sinfo -l": out("-l"),
        "sinfo -N -l": out("-N", "-l"),
        "sinfo -s": out("-s"),
        "sinfo -p short": out("-p", "short"),
        "sinfo -h": out("-h"),
        "sinfo -o": out("-o", "%P %a %l %D %t %N %c %m %G %C %z %s %F %f %T"),
        "sinfo -o widths": out("-o", "%10P|%.3D|%-6t|%.12N|%5c"),
        "sinfo -O": out("-O", "partition,available,nodes,statecompact,nodelist,cpus,memory,gres"),
        "sinfo -O widths": out("-O", "partition:5,nodelist:.12,cpusstate"),
        "sinfo -O bad": out("-O", "partition,timelimit"),
        "sinfo -O more": out("-O", "partition:.10,statelong:3,time,nodeaddr,reason:5,nodeaiot,socketcorethread"),
        "sinfo -o more": out("-o", "%5P|%.3P|%20E|%H|%R|%l|%L|%X %Y %Z|%A|%n|%o|%w|%g|%h|%r|%S|%B|%b"),
    }


def quiet(long_jobs) -> None:
    """Wait until the long jobs of cases_9_long are over: their ends differ by up to 30 s."""
    for long in (long_jobs or {}).values():
        long.wait_over()


def test_sinfo_idle_or_busy(sides, long_jobs) -> None:
    """sinfo of the cluster at rest."""
    quiet(long_jobs)
    got = on_both(sides, lambda side: _sinfo_outputs(side, side.workdir("sinfo-now")))
    check_all("sinfo (as now)", got)


def test_sinfo_with_a_job(sides, long_jobs) -> None:
    quiet(long_jobs)

    def one(side: Side) -> dict:
        wd = side.workdir("sinfo-job")
        job_id = side.sbatch(["-o", "out.txt", "-N2", "-n2"], wd, "#!/bin/bash\nsleep 300\n")
        side.wait_state(job_id, wd, {"RUNNING"})
        time.sleep(0.5)
        try:
            return _sinfo_outputs(side, wd)
        finally:
            side.run(["scancel", str(job_id)], wd)
            side.wait_done(job_id, wd)

    check_all("sinfo (a 2-node job running)", on_both(sides, one))


NODE_STATS = {"CPULoad", "FreeMem", "OS", "BootTime", "SlurmdStartTime", "LastBusyTime", "Port"}


def node_record(text: str) -> list[list[tuple[str, str]]]:
    out = []
    for block in text.strip().split("\n\n"):
        kv = parse_keyvals(block)
        out.append([(k, "<stat>" if k in NODE_STATS else node_address(v) if k == "NodeAddr" else v)
                    for k, v in kv.items()])
    return out


def test_scontrol_show_node_and_partition(sides, long_jobs) -> None:
    quiet(long_jobs)

    def one(side: Side) -> dict:
        wd = side.workdir("scontrol-node")
        node1 = side.ok(["scontrol", "show", "node", "node1"], wd).stdout
        nodes = side.ok(["scontrol", "show", "nodes"], wd).stdout
        parts = side.ok(["scontrol", "show", "partition"], wd).stdout
        short = side.ok(["scontrol", "show", "partition", "short"], wd).stdout
        bad_node = side.run(["scontrol", "show", "node", "node9"], wd)
        bad_part = side.run(["scontrol", "show", "partition", "nope"], wd)
        return {"show node node1": node_record(node1), "show nodes": node_record(nodes),
                "show partition": [list(parse_keyvals(b).items()) for b in parts.strip().split("\n\n")],
                "show partition short": short,
                "unknown node": (bad_node.rc, bad_node.stdout, bad_node.stderr),
                "unknown partition": (bad_part.rc, bad_part.stdout, bad_part.stderr)}

    got = on_both(sides, one)
    check_all("scontrol show node/partition", got)
    # the host's live figures are normalised away; both sides must show every one of them
    loc_stats = sorted({k for k, _ in got["local"]["show node node1"][0]} & NODE_STATS)
    rea_stats = sorted({k for k, _ in got["real"]["show node node1"][0]} & NODE_STATS)
    intentional("format: scontrol show node [live statistics]", "node_stats", loc_stats, rea_stats,
                sorted(NODE_STATS), sorted(NODE_STATS))


def test_best_fit_placement(sides, long_jobs) -> None:
    """Which node a job gets: the busiest one it fits on (cons_tres best fit), in node order."""
    quiet(long_jobs)

    def one(side: Side) -> dict:
        wd = side.workdir("placement")
        first = side.sbatch(["-o", "a.txt", "-w", "node2"], wd, "#!/bin/bash\nsleep 60\n", "a.sh")
        side.wait_state(first, wd, {"RUNNING"})
        second = side.sbatch(["-o", "b.txt"], wd, "#!/bin/bash\nsleep 60\n", "b.sh")
        side.wait_state(second, wd, {"RUNNING"})
        third = side.sbatch(["-o", "c.txt", "-c2"], wd, "#!/bin/bash\nsleep 60\n", "c.sh")
        side.wait_state(third, wd, {"RUNNING"})
        nodes = side.ok(["squeue", "-h", "-j", f"{first},{second},{third}", "-o", "%j %N"], wd).stdout
        side.run(["scancel", str(first), str(second), str(third)], wd)
        for job in (first, second, third):
            side.wait_done(job, wd)
        return {"nodes": sorted(nodes.splitlines())}

    check_all("placement (best fit)", on_both(sides, one))


HOSTNAMES = {
    "range": ["node[1-2]"],
    "list": ["node1,node2"],
    "mixed": ["node[1-2],gpu[01-03],login"],
    "padded": ["n[008-011]"],
}


def test_scontrol_show_hostnames(sides) -> None:
    def one(side: Side) -> dict:
        wd = side.workdir("hostnames")
        out = {}
        for name, args in HOSTNAMES.items():
            res = side.run(["scontrol", "show", "hostnames", *args], wd)
            out[name] = (res.rc, res.stdout, res.stderr)
        res = side.run(["scontrol", "show", "hostlist", "node1,node2,node3"], wd)
        out["hostlist"] = (res.rc, res.stdout, res.stderr)
        res = side.run(["scontrol", "show", "hostnames"], wd)
        out["outside a job, no argument"] = (res.rc, res.stdout, res.stderr)
        # the reader leaves after one line of more than a pipe holds: killed by SIGPIPE, silently
        res = side.run("set -o pipefail; scontrol show hostnames 'n[1-20000]' | head -n 1", wd)
        out["| head -n 1"] = (res.rc, res.stdout, res.stderr)
        job_id = side.sbatch(["-o", "out.txt", "-N2"], wd,
                             "#!/bin/bash\nscontrol show hostnames\nscontrol show hostnames $SLURM_JOB_NODELIST | wc -l\n")
        side.wait_done(job_id, wd)
        out["inside a 2-node job"] = (wd / "out.txt").read_text()
        return out

    check_all("scontrol show hostnames", on_both(sides, one))
