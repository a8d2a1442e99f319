"""Making the virtual node names resolve to this machine, without root.

Frameworks resolve the first node name for MASTER_ADDR (torch, Lightning) and Horovod resolves
host names to decide "local or ssh". Where the names already resolve (e.g. /etc/hosts lists them,
as `ci/real-slurm.sh` or an administrator can arrange) nothing is needed. Otherwise jobs get
Debian's libnss-wrapper preloaded with a private hosts file naming every node for IPv4 *and* IPv6
(torch's TCPStore retries IPv6 forever when a name has only an IPv4 entry).
"""
from __future__ import annotations

import errno
import glob
import json
import os
import sys

from . import paths
from .cluster import Cluster

FIX = (
    "install Debian's libnss-wrapper (`sudo apt-get install libnss-wrapper`), "
    "or add '127.0.0.1 {names}' to /etc/hosts"
)


def resolves(name: str) -> bool:
    import socket

    try:
        return any(info[4][0] in ("127.0.0.1", "::1") or info[4][0].startswith("127.")
                   for info in socket.getaddrinfo(name, None))
    except OSError:
        return False


def nss_wrapper_library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/libnss_wrapper.so*") + glob.glob("/usr/lib/libnss_wrapper.so*"))
    return found[0] if found else None


def resolver_env(cluster: Cluster, env: dict[str, str]) -> dict[str, str]:
    """Variables a job needs so its node names resolve ({} when they already do, or when the nodes
    have networks of their own: there each task's /etc/hosts names every node)."""
    from . import network

    if network.in_use():
        return {}
    found = _resolver(list(cluster.nodes))
    if not found:
        return {}
    library, hosts = found["library"], found["hosts"]
    preload = env.get("LD_PRELOAD", "")
    if library not in preload.split(":"):
        preload = f"{library}:{preload}" if preload else library
    return {"LD_PRELOAD": preload, "NSS_WRAPPER_HOSTS": hosts}


def _resolver(names: list[str]) -> dict[str, str]:
    """The nss_wrapper library and hosts file the node names need ({} if they resolve, or if there
    is no library), remembered in the state directory until /etc/hosts or the names change: each
    lookup and the library search cost every command some milliseconds."""
    try:
        etc = os.stat("/etc/hosts")
        key = [names, etc.st_ino, etc.st_mtime_ns, etc.st_size]
    except OSError:
        key = [names]
    memo = paths.state_dir() / "resolver.json"
    try:
        kept = json.loads(memo.read_text())
        if kept["key"] == key and (not kept["found"] or os.path.exists(kept["found"]["hosts"])):
            return kept["found"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _find_resolver(names)
    try:
        paths.write_private(memo, json.dumps({"key": key, "found": found}))
    except OSError:
        pass  # only a memo
    return found


def _find_resolver(names: list[str]) -> dict[str, str]:
    if all(resolves(n) for n in names):
        return {}
    library = nss_wrapper_library()
    if library is None:
        return {}
    hosts = paths.hosts_path()
    text = "".join(f"127.0.0.1 {n}\n::1 {n}\n" for n in names)
    if not hosts.exists() or hosts.read_text() != text:
        try:
            paths.write_private(hosts, text)
        except OSError as err:  # in a task of the nodes' own network the file is theirs, mounted here
            if err.errno != errno.EBUSY:
                raise
    return {"library": library, "hosts": str(hosts)}


def status(cluster: Cluster) -> tuple[bool, str]:
    names = list(cluster.nodes)
    if all(resolves(n) for n in names):
        return True, f"node names {', '.join(names)} resolve to this machine"
    if nss_wrapper_library():
        return True, "node names resolve inside jobs through libnss-wrapper (preloaded by the local Slurm)"
    return False, "node names do not resolve: multi-node frameworks will fail. Fix: " + FIX.format(names=" ".join(names))


def check() -> int:
    """``hpcnb check-names``: say whether the node names resolve; 0 if they do (or will in jobs), else 1."""
    from .commands.common import open_cluster

    _, cluster = open_cluster()
    ok, message = status(cluster)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1

