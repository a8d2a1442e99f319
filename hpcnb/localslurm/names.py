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
from pathlib import Path

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


def job_env(cluster: Cluster, env: dict[str, str]) -> dict[str, str]:
    """A job's environment with what makes its node names resolve: nothing where they already do,
    or where the nodes have networks of their own (there each task's /etc/hosts names every node).
    The login node's own resolver (:func:`login_env`) stays on the login node."""
    from . import apart

    env = dict(env)
    if env.get("NSS_WRAPPER_HOSTS") == str(paths.hosts_path()):
        del env["NSS_WRAPPER_HOSTS"]
        library = nss_wrapper_library()
        kept = [lib for lib in env.get("LD_PRELOAD", "").split(":") if lib and lib != library]
        env.pop("LD_PRELOAD", None)
        if kept:
            env["LD_PRELOAD"] = ":".join(kept)
    if apart.in_use():
        return env
    return env | _preload(_resolver(list(cluster.nodes)), env)


def login_env(env: dict[str, str]) -> dict[str, str]:
    """Variables the login node (the course kernel, a notebook's shell commands) needs so that the
    node names resolve there as on a cluster's: where the nodes have their own network, to the
    addresses the gateway listens at for them (:mod:`.gateway`; an address that leads nowhere
    until it runs, and for a name it withholds), else to this machine. {} where nss_wrapper is
    missing, or the names resolve already and the nodes share this machine's network."""
    from . import apart, network
    from .commands.common import open_cluster

    conn, cluster = open_cluster()
    conn.close()
    names = list(cluster.nodes)
    if not apart.in_use():
        found = _resolver(names)
    elif (library := nss_wrapper_library()) is None:
        found = {}
    else:
        hosts, text = paths.hosts_path(), network.login_hosts_text(names, None)  # none reached yet
        if not network.running() and not _has_text(hosts, text):  # (a running gateway has written its own)
            paths.write_private(hosts, text)
        found = {"library": library, "hosts": str(hosts)}
    return _preload(found, env)


def _preload(found: dict[str, str], env: dict[str, str]) -> dict[str, str]:
    if not found:
        return {}
    library, hosts = found["library"], found["hosts"]
    preload = env.get("LD_PRELOAD", "")
    if library not in preload.split(":"):
        preload = f"{library}:{preload}" if preload else library
    return {"LD_PRELOAD": preload, "NSS_WRAPPER_HOSTS": hosts}


def _has_text(path: Path, text: str) -> bool:
    try:
        return path.read_text() == text
    except OSError:
        return False


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
        found = kept["found"]  # (the file holds the nodes' own network's names once that has run)
        if kept["key"] == key and (not found or _has_text(Path(found["hosts"]), _shared_hosts_text(names))):
            return found
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
    text = _shared_hosts_text(names)
    if not _has_text(hosts, text):
        try:
            paths.write_private(hosts, text)
        except OSError as err:  # in a task of the nodes' own network the file is theirs, mounted here
            if err.errno != errno.EBUSY:
                raise
    return {"library": library, "hosts": str(hosts)}


def _shared_hosts_text(names: list[str]) -> str:
    return "".join(f"127.0.0.1 {n}\n::1 {n}\n" for n in names)


def status(cluster: Cluster) -> tuple[bool, str]:
    names = list(cluster.nodes)
    if all(resolves(n) for n in names):
        return True, f"node names {', '.join(names)} resolve to this machine"
    if nss_wrapper_library():
        return True, "node names resolve inside jobs through libnss-wrapper (preloaded by the local Slurm)"
    return False, "node names do not resolve: multi-node frameworks will fail. Fix: " + FIX.format(names=" ".join(names))


def check() -> int:
    """``hpcnb check-names``: say whether the node names resolve; 0 if they do (or will in jobs), else 1.
    Also why they lead nowhere on the login node, where they do not (:func:`.network.login_problem`)."""
    from . import network
    from .commands.common import open_cluster

    _, cluster = open_cluster()
    ok, message = status(cluster)
    print(message, file=sys.stdout if ok else sys.stderr)
    if problem := network.login_problem():
        print(f"on the login node, the node names lead nowhere: {problem}", file=sys.stderr)
    return 0 if ok else 1

