"""Resource accounting: which nodes, CPUs, memory and GPU slots a request gets (block distribution)."""
from __future__ import annotations

import math

from hpcnb.slurm import constraints

from .cluster import Cluster, Node
from .request import JobRequest


class Free:
    """What is left on one node: CPUs, memory (MB), GPU indices, and whether nothing runs there."""

    __slots__ = ("cpus", "mem", "gpus", "idle")

    def __init__(self, cpus: int, mem: int, gpus: list[int], idle: bool) -> None:
        self.cpus, self.mem, self.gpus, self.idle = cpus, mem, gpus, idle


def free_resources(cluster: Cluster, allocations: list[list[dict]]) -> dict[str, Free]:
    """What is left on each node after the given running allocations."""
    free = {n: Free(node.cpus, node.memory_mb, list(range(node.gpus)), True) for n, node in cluster.nodes.items()}
    for alloc in allocations:
        for part in alloc:
            slot = free[part["node"]]
            slot.cpus -= part["cpus"]
            slot.mem -= part["mem"]
            slot.gpus = [g for g in slot.gpus if g not in part["gpus"]]
            slot.idle = False
    return free


def task_count(req: JobRequest) -> int:
    """Tasks the job asks for: -n, else nodes x --ntasks-per-node, else one per node."""
    if req.ntasks:
        return req.ntasks
    nodes = req.nodes_min or 1
    return nodes * (req.ntasks_per_node or 1)


def _mem_needed(req: JobRequest, cluster: Cluster, cpus: int) -> int:
    if req.mem_mb is not None:
        return req.mem_mb
    return (req.mem_per_cpu_mb or cluster.def_mem_per_cpu_mb) * cpus


def _capacity(req: JobRequest, cluster: Cluster, node: Node, free: Free) -> int:
    """How many tasks of this request fit on the node now."""
    per_task = req.cpus_per_task or 1
    if req.exclusive and not free.idle:
        return 0
    if len(free.gpus) < req.gpus_per_node:
        return 0
    tasks = free.cpus // per_task
    if req.ntasks_per_node:
        tasks = min(tasks, req.ntasks_per_node)
    if req.mem_mb is not None:
        return tasks if free.mem >= req.mem_mb else 0
    mem_per_task = (req.mem_per_cpu_mb or cluster.def_mem_per_cpu_mb) * per_task
    return min(tasks, free.mem // mem_per_task) if mem_per_task else tasks


def place(req: JobRequest, cluster: Cluster, partition: str, free: dict[str, Free]) -> list[dict] | None:
    """Choose nodes for the request, or None if it does not fit now.

    Returns one dict per node: ``{"node", "tasks", "cpus", "mem", "gpus"}``.
    """
    group = _constraint(req)
    counted = constraints.counted(group) if group else set()
    preferred = {n for n, node in cluster.nodes.items() if counted & set(node.features)}
    least = constraints.nodes_counted(group) if group else 1
    for candidates in node_choices(req, cluster, partition, group):
        placed = _place_on(req, cluster, candidates, free, preferred, least)
        if placed is not None and (group is None or constraints.counts_met(
                group, [cluster.nodes[p["node"]].features for p in placed])):
            return placed
    return None


def _constraint(req: JobRequest) -> constraints.Group | None:
    """The job's ``--constraint`` (checked at submission, see :func:`never_fits`), or None."""
    return constraints.parse_constraint(req.constraint) if req.constraint else None


def node_choices(req: JobRequest, cluster: Cluster, partition: str,
                 group: constraints.Group | None) -> list[list[str]]:
    """The partition's nodes the job may have, with the GPU type it asks for and its features: one
    list for each way of resolving its matching ORs (``[a|b]``), empty lists left out."""
    typed = [n for n in cluster.partitions[partition].nodes
             if req.gpu_type is None or cluster.nodes[n].gpu_type == req.gpu_type]
    if group is None:
        return [typed] if typed else []
    choices = ([n for n in typed if constraints.node_matches(v, cluster.nodes[n].features)]
               for v in constraints.variants(group))
    return [names for names in choices if names]


def _place_on(req: JobRequest, cluster: Cluster, candidates: list[str], free: dict[str, Free],
              preferred: set[str], least: int) -> list[dict] | None:
    """:func:`place` on these candidate nodes only, the ``preferred`` ones (with a counted feature) first,
    on ``least`` nodes or more (what the constraint's counts ask for)."""
    ntasks = task_count(req)
    nodes_min = req.nodes_min or (math.ceil(ntasks / req.ntasks_per_node) if req.ntasks_per_node else 1)
    if least > nodes_min:  # as -N least: one task per node, unless -n says otherwise
        nodes_min = least
        ntasks = req.ntasks or least * (req.ntasks_per_node or 1)
    nodes_max = req.nodes_max or req.nodes_min or len(cluster.nodes)
    if req.nodelist:
        import hostlist

        wanted = hostlist.expand_hostlist(req.nodelist)
        if any(w not in candidates for w in wanted):
            return None
        candidates = wanted + [c for c in candidates if c not in wanted]
        nodes_min = max(nodes_min, len(wanted))
    if req.exclude:
        import hostlist

        excluded = set(hostlist.expand_hostlist(req.exclude))
        candidates = [c for c in candidates if c not in excluded]
    if not req.nodelist:  # best fit, as cons_tres: busier nodes first (checked against a real 22.05)
        candidates.sort(key=lambda c: (c not in preferred, free[c].cpus))

    chosen: list[tuple[str, int]] = []
    total = 0
    for name in candidates:
        cap = _capacity(req, cluster, cluster.nodes[name], free[name])
        if cap < 1:
            if req.nodelist and name in req.nodelist:
                return None
            continue
        chosen.append((name, cap))
        total += cap
        if len(chosen) >= nodes_min and total >= ntasks:
            break
    if len(chosen) < nodes_min or total < ntasks or len(chosen) > nodes_max:
        return None

    order = list(cluster.nodes)
    chosen.sort(key=lambda c: order.index(c[0]))  # an allocation lists its nodes in node order
    # block distribution: one task per chosen node first, then fill nodes in order
    tasks = [1] * len(chosen)
    left = ntasks - len(chosen)
    if left < 0:
        return None
    for i, (_, cap) in enumerate(chosen):
        extra = min(cap - 1, left)
        tasks[i] += extra
        left -= extra
    per_task = req.cpus_per_task or 1
    result = []
    for (name, _), count in zip(chosen, tasks):
        node = cluster.nodes[name]
        cpus = node.cpus if req.exclusive else count * per_task
        gpus = free[name].gpus[: req.gpus_per_node]
        mem = node.memory_mb if (req.exclusive and req.mem_mb is None and not req.mem_per_cpu_mb) else _mem_needed(req, cluster, cpus)
        result.append({"node": name, "tasks": count, "cpus": cpus, "mem": mem, "gpus": gpus})
    return result


def never_fits(req: JobRequest, cluster: Cluster, partition: str) -> str | None:
    """Why the request can never run in the partition (Slurm's reason text), or None."""
    part = cluster.partitions[partition]
    refused = "Requested node configuration is not available"
    try:
        group = _constraint(req)
    except constraints.ConstraintError:
        return constraints.INVALID
    features = {f for node in cluster.nodes.values() for f in node.features}
    if group and (constraints.unknown_features(group, features)
                  or cluster.since("24.11") and constraints.counts_misplaced(group)):
        return constraints.INVALID
    if not node_choices(req, cluster, partition, group):
        return refused  # no node of the partition has the GPU type or the features asked for
    if (req.nodes_min or 1) > len(part.nodes):
        # 22.05 accepts it (it pends with reason PartitionNodeLimit); 24.11 refuses it (captured)
        return refused if cluster.since("24.11") else None
    if req.nodelist:
        import hostlist

        try:
            wanted = hostlist.expand_hostlist(req.nodelist)
        except hostlist.BadHostlist:
            wanted = [req.nodelist]
        if any(name not in cluster.nodes for name in wanted):
            return "Invalid node name specified"
    if req.exclude:
        import hostlist

        try:
            hostlist.expand_hostlist(req.exclude)
        except hostlist.BadHostlist:
            return "Invalid node name specified"
    empty = free_resources(cluster, [])
    if place(req, cluster, partition, empty) is None:
        biggest = max(cluster.nodes[n].memory_mb for n in part.nodes)
        per_node_cpus = (req.cpus_per_task or 1) * (req.ntasks_per_node or 1)
        if req.mem_mb is not None and req.mem_mb > biggest or (
            req.mem_per_cpu_mb and req.mem_per_cpu_mb * per_node_cpus > biggest
        ):
            return "Memory specification can not be satisfied"
        if per_node_cpus > max(cluster.nodes[n].cpus for n in part.nodes):
            return "CPU count per node can not be satisfied"
        if req.gpus_per_node > max(cluster.nodes[n].gpus for n in part.nodes) or req.nodelist or req.exclusive:
            return refused
        # each node could hold its share, only not all of it at once: Slurm 22.05 accepts the job, which
        # then pends with reason PartitionConfig (checked live against a real 22.05, tests/parity);
        # 24.11 refuses it
        if cluster.since("24.11"):
            return refused
    return None
