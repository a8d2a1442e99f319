"""sinfo: partitions and nodes of the virtual cluster."""
from __future__ import annotations



import hostlist

from .. import alloc, db, formats
from .common import getopt_parse, open_cluster

DEFAULT_FORMAT = "%9P %.5a %.10l %.6D %.6t %N"
NODE_FORMAT = "%N %.6D %P %6t"
HEADERS = {
    "P": "PARTITION", "R": "PARTITION", "a": "AVAIL", "l": "TIMELIMIT", "D": "NODES", "t": "STATE", "T": "STATE",
    "N": "NODELIST", "n": "HOSTNAMES", "c": "CPUS", "m": "MEMORY", "G": "GRES", "C": "CPUS(A/I/O/T)",
    "e": "FREE_MEM", "O": "CPU_LOAD", "f": "AVAIL_FEATURES", "z": "S:C:T", "s": "JOB_SIZE",
}
# --Format field names -> (format letter, default width)
LONG_FIELDS = {
    "partition": "P", "partitionname": "R", "available": "a", "timelimit": "l", "nodes": "D", "statecompact": "t",
    "statelong": "T", "nodelist": "N", "nodehost": "n", "cpus": "c", "memory": "m", "gres": "G",
    "cpusstate": "C", "freemem": "e", "cpusload": "O", "features": "f",
}


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


def rows(cluster, conn, by_node: bool) -> list[dict]:
    states = node_states(cluster, conn)
    out = []
    for part in cluster.partitions.values():
        groups: dict[str, list[str]] = {}
        for name in part.nodes:
            key = name if by_node else states[name][0]
            groups.setdefault(key, []).append(name)
        for key, names in groups.items():
            out.append({"part": part, "nodes": names, "state": states[names[0]][0], "states": states})
    return out


def fields(row: dict, cluster) -> dict:
    part, names = row["part"], row["nodes"]
    first = cluster.nodes[names[0]]
    used = sum(row["states"][n][1] for n in names)
    total = sum(cluster.nodes[n].cpus for n in names)
    gpus = f"gpu:{first.gpus}" if first.gpus else "(null)"
    return {
        "P": lambda: part.name + ("*" if part.default else ""),
        "R": lambda: part.name,
        "a": lambda: "up",
        "l": lambda: "infinite" if part.max_time is None else formats.duration(part.max_time),
        "D": lambda: str(len(names)),
        "t": lambda: row["state"],
        "T": lambda: {"idle": "idle", "mix": "mixed", "alloc": "allocated"}[row["state"]],
        "N": lambda: hostlist.collect_hostlist(names),
        "n": lambda: "localhost",
        "c": lambda: str(first.cpus),
        "m": lambda: str(first.memory_mb),
        "G": lambda: gpus,
        "C": lambda: f"{used}/{total - used}/0/{total}",
        "e": lambda: str(first.memory_mb - row["states"][names[0]][2]),
        "O": lambda: "0.00",
        "f": lambda: ",".join(first.features) or "(null)",
        "z": lambda: f"1:{first.cpus}:1",
        "s": lambda: "1-infinite",
    }


def main(argv: list[str]) -> int:
    opts, _ = getopt_parse(
        "sinfo", argv, "o:O:hNp:lsa",
        ["format=", "Format=", "noheader", "Node", "partition=", "long", "summarize", "all"],
    )
    conn, cluster = open_cluster()
    fmt, show_header, by_node, partitions = DEFAULT_FORMAT, True, False, None
    for opt, val in opts:
        if opt in ("-o", "--format"):
            fmt = val
        elif opt in ("-O", "--Format"):
            fmt = long_format(val)
        elif opt in ("-h", "--noheader"):
            show_header = False
        elif opt in ("-N", "--Node"):
            by_node = True
            if fmt == DEFAULT_FORMAT:
                fmt = "%N %.6D %P %6t"
        elif opt in ("-p", "--partition"):
            partitions = set(val.split(","))
    lines = [formats.header(fmt, HEADERS)] if show_header else []
    for row in rows(cluster, conn, by_node):
        if partitions and row["part"].name not in partitions:
            continue
        lines.append(formats.render(fmt, fields(row, cluster)))
    print("\n".join(lines))
    return 0


def long_format(spec: str) -> str:
    """``-O partition:10,nodes`` -> an equivalent ``-o`` string (width 20 unless given)."""
    parts = []
    for item in spec.split(","):
        name, _, width = item.partition(":")
        letter = LONG_FIELDS.get(name.strip().lower())
        if letter is None:
            raise SystemExit(f"Invalid node format specification: {name}")
        right = width.startswith(".")
        size = width.lstrip(".") or "20"
        parts.append(f"%{'.' if right else ''}{size}{letter}")
    return " ".join(parts)



