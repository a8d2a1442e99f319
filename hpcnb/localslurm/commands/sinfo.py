"""sinfo: partitions and nodes of the virtual cluster, in Slurm 22.05's formats.

Default, ``-l``, ``-s``, ``-N`` and ``-N -l`` layouts, ``-o`` letters and ``-O`` field names as the
real sinfo prints them (compared by tests/parity); node statistics (CPU_LOAD, FREE_MEM) are the host's.
"""
from __future__ import annotations

import os
import re
import sys
import time

import hostlist

from hpcnb.slurm.bounds import field_width
from hpcnb.slurm.times import format_squeue_time

from .. import alloc, db, formats
from .common import getopt_parse, open_cluster

DEFAULT_FORMAT = "%9P %.5a %.10l %.6D %.6t %N"
LONG_FORMAT = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
LONG_FORMAT_2411 = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %.11i %N"  # 24.11 adds RESERVATION
SUMMARY_FORMAT = "%9P %.5a %.10l %.16F %N"
NODE_FORMAT = "%9N %.6D %.9P %6t"
NODE_LONG_FORMAT = "%9N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
HEADERS = {
    "a": "AVAIL", "A": "NODES(A/I)", "b": "ACTIVE_FEATURES", "B": "MAX_CPUS_PER_NODE", "c": "CPUS",
    "C": "CPUS(A/I/O/T)", "d": "TMP_DISK", "D": "NODES", "e": "FREE_MEM", "E": "REASON", "f": "AVAIL_FEATURES",
    "F": "NODES(A/I/O/T)", "g": "GROUPS", "G": "GRES", "h": "OVERSUBSCRIBE", "H": "TIMESTAMP", "i": "RESERVATION",
    "l": "TIMELIMIT",
    "L": "DEFAULTTIME", "m": "MEMORY", "n": "HOSTNAMES", "N": "NODELIST", "o": "NODE_ADDR", "O": "CPU_LOAD",
    "p": "PRIO_TIER", "P": "PARTITION", "r": "ROOT", "R": "PARTITION", "s": "JOB_SIZE", "S": "ALLOCNODES",
    "t": "STATE", "T": "STATE", "w": "WEIGHT", "X": "SOCKETS", "Y": "CORES", "Z": "THREADS", "z": "S:C:T",
    "V": "CLUSTER", "v": "VERSION",
}
# --Format names (22.05) -> format letter
LONG_FIELDS = {
    "available": "a", "nodeai": "A", "features_act": "b", "maxcpuspernode": "B", "cpus": "c", "cpusstate": "C",
    "disk": "d", "nodes": "D", "freemem": "e", "reason": "E", "features": "f", "nodeaiot": "F", "groups": "g",
    "gres": "G", "oversubscribe": "h", "timestamp": "H", "time": "l", "defaulttime": "L", "memory": "m",
    "nodehost": "n", "nodelist": "N", "nodeaddr": "o", "cpusload": "O", "prioritytier": "p", "partition": "P",
    "root": "r", "partitionname": "R", "size": "s", "allocnodes": "S", "statecompact": "t", "statelong": "T",
    "weight": "w", "sockets": "X", "cores": "Y", "threads": "Z", "socketcorethread": "z", "cluster": "V",
    "version": "v",
}
LONG_STATES = {"idle": "idle", "mix": "mixed", "alloc": "allocated"}


def node_states(cluster, conn) -> dict[str, tuple[str, int, int]]:
    """node -> (state, allocated CPUs, allocated MB)."""
    running = db.jobs_where(conn, "state IN ('RUNNING','COMPLETING')")
    free = alloc.free_resources(cluster, [j["alloc"] for j in running])
    out = {}
    for name, node in cluster.nodes.items():
        used = node.cpus - free[name].cpus
        state = "idle" if used == 0 and free[name].idle else "alloc" if free[name].cpus == 0 else "mix"
        out[name] = (state, used, node.memory_mb - free[name].mem)
    return out


def rows(cluster, conn, by_node: bool, summary: bool = False, shows_address: bool = False) -> list[dict]:
    """sinfo's lines: one per partition and node state (-s: per partition), and, as Slurm's sinfo
    matches lines on the fields it shows, per node address when ``%o`` is shown."""
    states = node_states(cluster, conn)
    addresses = _addresses(cluster) if shows_address else {}
    out = []
    if by_node:  # one line per node and partition, node by node
        for name in cluster.nodes:
            for part in cluster.partitions.values():
                if name in part.nodes:
                    out.append({"part": part, "nodes": [name], "state": states[name][0], "states": states,
                                "address": addresses.get(name)})
        return out
    for part in cluster.partitions.values():
        groups: dict[tuple, list[str]] = {}
        for name in part.nodes:
            groups.setdefault(("all" if summary else states[name][0], addresses.get(name)), []).append(name)
        for (_, address), names in groups.items():
            out.append({"part": part, "nodes": names, "state": states[names[0]][0], "states": states,
                        "address": address})
    return out


def _partition_name(part, width: int) -> str:
    """P: the name with ``*`` for the default partition; cut so that the ``*`` stays (``width`` > 0)."""
    name = part.name + ("*" if part.default else "")
    if width > 0 and part.default and len(name) > width:
        name = part.name[: max(0, width - 1)] + "*"
    return name


def _addresses(cluster) -> dict[str, str]:
    from .. import apart

    return apart.node_addresses(list(cluster.nodes))


def fields(row: dict, cluster) -> dict:
    part, names = row["part"], row["nodes"]
    first = cluster.nodes[names[0]]
    states = row["states"]
    used = sum(states[n][1] for n in names)
    total = sum(cluster.nodes[n].cpus for n in names)
    busy_nodes = sum(1 for n in names if states[n][0] != "idle")
    return {
        "P": lambda: part.name + ("*" if part.default else ""),
        "R": lambda: part.name,
        "a": lambda: "up",
        "A": lambda: f"{busy_nodes}/{len(names) - busy_nodes}",
        "b": lambda: ",".join(first.features) or "(null)",
        "B": lambda: "UNLIMITED",
        "c": lambda: str(first.cpus),
        "C": lambda: f"{used}/{total - used}/0/{total}",
        "d": lambda: "0",
        "D": lambda: str(len(names)),
        "e": lambda: str(_free_mb()),
        "E": lambda: "none",
        "f": lambda: ",".join(first.features) or "(null)",
        "F": lambda: f"{busy_nodes}/{len(names) - busy_nodes}/0/{len(names)}",
        "g": lambda: "all",
        "G": lambda: first.gres,
        "h": lambda: "NO",
        "H": lambda: "Unknown",
        "l": lambda: "infinite" if part.max_time is None else format_squeue_time(part.max_time),
        "L": lambda: "n/a" if part.default_time is None else format_squeue_time(part.default_time),
        "m": lambda: str(first.memory_mb),
        "n": lambda: "localhost",
        "N": lambda: hostlist.collect_hostlist(names),
        "o": lambda: row["address"],
        "O": lambda: f"{os.getloadavg()[0]:.2f}",
        "p": lambda: "1",
        "r": lambda: "no",
        "s": lambda: _job_size(part.max_nodes),
        "S": lambda: "all",
        "t": lambda: row["state"],
        "T": lambda: LONG_STATES[row["state"]],
        "i": lambda: "",
        "v": lambda: cluster.release,
        "V": lambda: "N/A",
        "w": lambda: "1",
        "X": lambda: "1",
        "Y": lambda: str(first.cpus),
        "Z": lambda: "1",
        "z": lambda: f"1:{first.cpus}:1",
    }


def _job_size(max_nodes: int | None) -> str:
    """sinfo's JOB_SIZE: the nodes a job may ask for there (``1-infinite``, ``1-4``, ``1``)."""
    if max_nodes is None:
        return "1-infinite"
    return "1" if max_nodes == 1 else f"1-{max_nodes}"


def _free_mb() -> int:
    try:
        import psutil

        return psutil.virtual_memory().available // (1024 * 1024)
    except Exception:  # noqa: BLE001
        return 0


_SPEC = re.compile(r"%(\.)?(\d*)([A-Za-z%])")


def render(fmt: str, values: dict, part=None) -> str:
    """An ``-o`` format: ``%.N`` right-justifies, ``%N`` left-justifies; values are cut to N."""
    out, pos = [], 0
    for match in _SPEC.finditer(fmt):
        out.append(fmt[pos:match.start()])
        pos = match.end()
        right, width, letter = match.groups()
        if letter == "%":
            out.append("%")
            continue
        if letter not in values:
            out.append(match.group(0))
            continue
        value = values[letter]()
        if letter == "P" and part is not None:
            value = _partition_name(part, field_width(width) if width else 0)
        out.append(formats.cell(value, bool(right), width))
    out.append(fmt[pos:])
    return "".join(out)


def check_format(fmt: str) -> None:
    """Like sinfo: a ``%`` not followed by a field (e.g. ``%-6t``) is printed as is, with a warning."""
    for match in re.finditer(r"%(?![.\d]*[A-Za-z%])(.?)", fmt):
        print(f"Invalid node format specification: {match.group(1)}", file=sys.stderr)


def long_format(spec: str) -> list[tuple[str, int, bool]]:
    """``-O partition:10,nodes`` -> [(letter, width, right-justified)] (width 20 unless given)."""
    out = []
    for item in spec.split(","):
        name, _, width = item.partition(":")
        letter = LONG_FIELDS.get(name.strip().lower())
        if letter is None:
            print(f"sinfo: error: Invalid job format specification: {name.strip()}", file=sys.stderr)
            continue
        right = width.startswith(".")
        size = width.lstrip(".")  # sinfo's _parse_long_token: strtol, into an int
        out.append((letter, field_width(size, wraps=False) if size[:1].isdigit() else 20, right))
    return out


def render_long(spec: list[tuple[str, int, bool]], values: dict, part=None) -> str:
    out = []
    for letter, width, right in spec:
        value = values[letter]()
        if letter == "P" and part is not None:
            value = _partition_name(part, width)
        out.append(formats.cell(value, right, str(width)))
    return "".join(out)


def main(argv: list[str]) -> int:
    opts, _ = getopt_parse(
        "sinfo", argv, "o:O:hNp:lsa",
        ["format=", "Format=", "noheader", "Node", "partition=", "long", "summarize", "all"],
    )
    conn, cluster = open_cluster()
    fmt, spec, show_header, by_node, partitions, long, summary = None, None, True, False, None, False, False
    for opt, val in opts:
        if opt in ("-o", "--format"):
            fmt = val
        elif opt in ("-O", "--Format"):
            try:
                spec = long_format(val)
            except ValueError as err:  # a width no real sinfo prints
                print(f"sinfo: error: {err}", file=sys.stderr)
                return 1
        elif opt in ("-h", "--noheader"):
            show_header = False
        elif opt in ("-N", "--Node"):
            by_node = True
        elif opt in ("-p", "--partition"):
            partitions = set(val.split(","))
        elif opt in ("-l", "--long"):
            long = True
        elif opt in ("-s", "--summarize"):
            summary = True
    if fmt is None and spec is None:
        if by_node:
            fmt = NODE_LONG_FORMAT if long else NODE_FORMAT
        elif summary:
            fmt = SUMMARY_FORMAT
        else:
            fmt = (LONG_FORMAT_2411 if cluster.since("24.11") else LONG_FORMAT) if long else DEFAULT_FORMAT
    if fmt is not None:
        check_format(fmt)
        try:
            formats.check_widths(fmt)
        except ValueError as err:
            print(f"sinfo: error: {err}", file=sys.stderr)
            return 1
    lines = []
    if long and show_header:
        lines.append(time.strftime("%a %b %e %H:%M:%S %Y"))
    headers = {k: (lambda v=v: v) for k, v in HEADERS.items()}
    if show_header:
        lines.append(render_long(spec, headers) if spec is not None else render(fmt, headers))
    shows_address = any(letter == "o" for letter, _, _ in spec) if spec is not None else bool(
        re.search(r"%[.\d]*o", fmt))
    for row in rows(cluster, conn, by_node and not summary, summary, shows_address):
        if partitions and row["part"].name not in partitions:
            continue
        values = fields(row, cluster)
        lines.append(render_long(spec, values, row["part"]) if spec is not None else render(fmt, values, row["part"]))
    print("\n".join(lines))
    return 0
