"""The login node's way into the nodes' own network: a server a job runs is reached by its node's name.

On a real cluster the login node (a notebook's kernel, its shell) reaches a server on a compute
node at the node's name, ``curl node2:8888``, unless the server listens on the node's loopback
only. This machine's processes cannot route into the nodes' network (:mod:`.network`) without root,
so the *gateway* stands in for the route. Every :data:`POLL_S` it asks which TCP ports each node
listens on beyond its loopback (sock_diag in the node's network, as ``ss -tl`` asks) and listens on
the same port at the node's login-side address (``127.B.C.N``, a loopback address of this machine,
in a block drawn at random that no other gateway claims: :func:`claim_block`); each connection is
passed on to the node through a socket made inside the nodes' network by the fabric's holder, so
that it comes from the fabric's own address (:data:`.network.FABRIC_V4`). On the login node the node
names resolve to those addresses through nss_wrapper (:func:`.names.login_env`: the course kernel
preloads it).

Any user of this machine may listen on its loopback addresses, so a name must never lead to a
listener of another: every look also asks which TCP listeners of the machine other users hold at a
node's address, or at every address (``0.0.0.0:PORT`` answers for each node's address at PORT; of
root's and system accounts', outside ``/etc/login.defs``' UID_MIN-UID_MAX, the machine's services,
only those on a port a node serves count). A node such a listener could answer for is named at
:data:`.network.UNREACHED` in the hosts file while it is there (a connection to its name fails at
once), and ``hpcnb slurm status`` says why (:data:`.network.WITHHELD`). Once the gateway listens on a
port, no other user can take it (a listener of another uid cannot share it); a listener another user
starts between two looks (:data:`POLL_S`) on a port no node serves could answer until the next. A
connection whose client is another user's is closed unanswered (the kernel tells a loopback
connection's other end's uid: :func:`peer_uid`).

It runs as long as the fabric's holder, which started it: its end of the channel to the holder is
closed then, or the holder's record names another.
"""
from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import os
import socket
import struct
import sys
from pathlib import Path

from . import network, paths

POLL_S = 0.1
CLAIM_PORT = 65535
CLAIM_TRIES = 64  # random blocks tried for a claim, then one used unclaimed (another user's flood)
CONNECT_TIMEOUT_S = 10.0
TCP_LISTEN, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 10, 20, 1, 0x300, 2, 3
UID_AT = 64  # struct inet_diag_msg: 4 bytes, the socket's id (48), expires, queues (12), then its uid
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def listeners(diag: socket.socket) -> list[tuple[Address, int, int]]:
    """The TCP listeners of a network (address, port, owner's uid), IPv6 first, asked of ``diag``: a
    sock_diag netlink socket in that network (as ``ss -tl`` asks; reading ``/proc/PID/net/tcp`` walks
    every connection slot of the machine, milliseconds each time)."""
    found = []
    for family in (socket.AF_INET6, socket.AF_INET):
        request = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
        diag.send(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 0, 0)
                  + request)
        for reply in _replies(diag):
            address = ipaddress.ip_address(reply[8:12] if family == socket.AF_INET else reply[8:24])
            found.append((address, struct.unpack_from(">H", reply, 4)[0], struct.unpack_from("=I", reply, UID_AT)[0]))
    return found


def listening(diag: socket.socket) -> dict[int, int]:
    """The TCP ports a node listens on beyond its loopback, each with the address family to reach it
    by (IPv4 where a socket of either family would do), asked of ``diag`` in the node's network."""
    ports: dict[int, int] = {}
    for address, port, _ in listeners(diag):
        if not _v4(address).is_loopback:
            ports[port] = socket.AF_INET if address.version == 4 else socket.AF_INET6
    return ports


def peer_uid(diag: socket.socket, peer: tuple[str, int], own: tuple[str, int]) -> int | None:
    """The uid of the client's end of the IPv4 connection from ``peer`` to ``own`` on this machine,
    asked of ``diag`` (a sock_diag socket in this machine's network); None when not found."""
    request = (struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
               + struct.pack(">HH", peer[1], own[1]) + socket.inet_aton(peer[0]) + bytes(12)
               + socket.inet_aton(own[0]) + bytes(12) + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF))
    diag.send(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 0, 0) + request)
    data = diag.recv(65536)
    if len(data) < 16 + UID_AT + 4 or struct.unpack_from("=H", data, 4)[0] != SOCK_DIAG_BY_FAMILY:
        return None
    return struct.unpack_from("=I", data, 16 + UID_AT)[0]


def _machine_diag() -> socket.socket:
    """A new sock_diag socket in this machine's network, the login side's (one per ask: an answer
    left unread by a failed ask never meets the next)."""
    diag = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, network.NETLINK_SOCK_DIAG)
    diag.settimeout(CONNECT_TIMEOUT_S)
    return diag


@functools.cache
def _ordinary_uids() -> range:
    """The uids of ordinary users (``/etc/login.defs``' UID_MIN to UID_MAX; 1000-60000 without it)."""
    found = {"UID_MIN": 1000, "UID_MAX": 60000}
    try:
        for line in Path("/etc/login.defs").read_text().splitlines():
            words = line.split()
            if len(words) == 2 and words[0] in found and words[1].isdigit():
                found[words[0]] = int(words[1])
    except OSError:
        pass
    return range(found["UID_MIN"], found["UID_MAX"] + 1)


def _v4(address: Address) -> Address:
    """An IPv4-mapped IPv6 address as the IPv4 address it stands for; any other as it is."""
    return getattr(address, "ipv4_mapped", None) or address


def _replies(diag: socket.socket):
    """The payloads of a netlink dump's messages, until its end."""
    while True:
        data, offset = diag.recv(65536), 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                raise OSError(-struct.unpack_from("=i", data, offset + 16)[0], "sock_diag")
            yield data[offset + 16:offset + length]
            offset += (length + 3) & ~3


def claim_block() -> tuple[int, socket.socket | None]:
    """A block of login-side addresses drawn at random that no other gateway of this machine claims,
    and the socket that claims it (UDP, at the block's last address: the kernel keeps the claim).
    Where :data:`CLAIM_TRIES` draws are all claimed (another user's flood), a block unclaimed and no
    socket: a listener of another user there only withholds names (:class:`Gateway`)."""
    for _ in range(CLAIM_TRIES):
        block = network.random_block()
        claim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            claim.bind((str(ipaddress.IPv4Address(block + 255)), CLAIM_PORT))
            return block, claim
        except OSError:
            claim.close()
    _log(f"{CLAIM_TRIES} blocks of loopback addresses drawn were all claimed: using one unclaimed")
    return network.random_block(), None


class Gateway:
    """Listeners at the nodes' login-side addresses, one per port a node listens on."""

    def __init__(self, state: Path, channel: socket.socket, record: dict, block: int) -> None:
        self.state, self.channel, self.record, self.block = state, channel, record, block
        self.servers: dict[tuple[int, int], asyncio.AbstractServer | _Unserved] = {}
        self.diags: dict[int, socket.socket] = {}
        self.withheld: dict[int, str] | None = None  # node index: why its name does not resolve

    async def run(self) -> None:
        try:
            while self._wanted():
                await self._update()
                await asyncio.sleep(POLL_S)
        finally:
            for server in self.servers.values():
                server.close()
            now = network.current(self.state)
            if not now or now["holder"] == self.record["holder"]:  # (a new fabric's gateway names its own)
                network.forget_login_names(self.state, self.record["names"])

    def _wanted(self) -> bool:
        """While the holder that started it runs, and its record is the fabric's."""
        now = network.current(self.state)
        return bool(now) and now["holder"] == self.record["holder"]

    async def _update(self) -> None:
        self._withhold(self._held_by_others())
        found = {}
        for index in range(len(self.record["names"])):
            try:
                ports = listening(self._diag(index))
            except OSError as err:  # nothing changes this time; the next look asks with a new socket
                _log(f"which ports {self.record['names'][index]} listens on: {err}")
                self.diags.pop(index, None)
                return
            for port, family in ports.items():
                found[(index, port)] = family
        for key in self.servers.keys() - found.keys():
            self.servers.pop(key).close()
        for (index, port), family in found.items():
            if isinstance(self.servers.get((index, port), _Unserved()), _Unserved):  # new, or tried again
                await self._listen(index, port, family)

    async def _listen(self, index: int, port: int, family: int) -> None:
        target = (network.address(index)[0 if family == socket.AF_INET else 1], port)

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._relay(reader, writer, family, target)

        try:
            self.servers[(index, port)] = await asyncio.start_server(relay, self._address(index), port)
        except OSError as err:  # e.g. a server of this machine holds the port on every address
            said = f"{self._address(index)}:{port} for {self.record['names'][index]}: {err}"
            if getattr(self.servers.get((index, port)), "said", None) != said:
                _log(said)
            self.servers[(index, port)] = _Unserved(said)

    def _address(self, index: int) -> str:
        return network.login_address(index, self.block)

    def _held_by_others(self) -> dict[int, str]:
        """The nodes whose login-side address another user's listener could answer for, each with why
        (every node where none could be asked): one at its address, an ordinary user's at every
        address, a system account's or root's at every address on a port the node serves."""
        names, me, ordinary = self.record["names"], os.getuid(), _ordinary_uids()
        indexes = {ipaddress.ip_address(self._address(index)): index for index in range(len(names))}
        try:
            with _machine_diag() as diag:
                found = listeners(diag)
        except OSError as err:
            return dict.fromkeys(range(len(names)), f"the login side's listeners could not be asked: {err}")
        held: dict[int, str] = {}
        for address, port, uid in found:
            address = _v4(address)
            if uid == me or not (address in indexes or address.is_unspecified):
                continue
            if address in indexes:
                covered = [indexes[address]]
            else:
                covered = [i for i in indexes.values() if uid in ordinary or (i, port) in self.servers]
            where = "every address" if address.is_unspecified else f"{address}"
            for index in covered:
                held.setdefault(index, f"another user (uid {uid}) listens on port {port} of {where}")
        return held

    def _withhold(self, held: dict[int, str]) -> None:
        """Name on the login side every node but those ``held`` (theirs lead nowhere), and say why."""
        if held == self.withheld:
            return
        names = self.record["names"]
        said = "; ".join(f"{names[index]}: {why}" for index, why in sorted(held.items()))
        if held or self.withheld:
            _log(f"names withheld: {said}" if held else "every name leads to its node again")
        paths.write_private(self.state / network.WITHHELD,
                            f"the names of {', '.join(names[i] for i in sorted(held))} lead nowhere: {said}"
                            if held else "")
        paths.write_private(paths.hosts_path(self.state),
                            network.login_hosts_text(names, self.block, frozenset(held)))
        self.withheld = held

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, family: int,
                     target: tuple[str, int]) -> None:
        try:
            with _machine_diag() as diag:
                uid = peer_uid(diag, writer.get_extra_info("peername"), writer.get_extra_info("sockname"))
        except OSError:
            uid = None
        if uid != os.getuid():  # another user's client (or one not found): closed unanswered
            writer.close()
            return
        inside = None
        try:
            inside = self._fabric_socket(family)
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(inside, target), CONNECT_TIMEOUT_S)
            node_reader, node_writer = await asyncio.open_connection(sock=inside)
        except (OSError, asyncio.TimeoutError):
            if inside is not None:
                inside.close()
            writer.close()  # refused on the node, as a client of a real one is
            return
        await asyncio.gather(_pump(reader, node_writer), _pump(node_reader, writer))
        for end in (writer, node_writer):
            end.close()

    def _diag(self, index: int) -> socket.socket:
        """The sock_diag socket in the network of the node at ``index`` (asked for once)."""
        if index not in self.diags:
            self.diags[index] = self._ask(f"diag {index}")
            self.diags[index].settimeout(CONNECT_TIMEOUT_S)
        return self.diags[index]

    def _fabric_socket(self, family: int) -> socket.socket:
        """A new TCP socket inside the nodes' network."""
        made = self._ask("tcp6" if family == socket.AF_INET6 else "tcp4")
        made.setblocking(False)
        return made

    def _ask(self, what: str) -> socket.socket:
        """A socket the fabric's holder makes where only it may (:class:`.network._SocketMaker`)."""
        self.channel.send(what.encode())
        _, fds, _, _ = socket.recv_fds(self.channel, 16, 1)
        if not fds:
            raise OSError(f"the fabric's holder made no {what} socket")
        return socket.socket(fileno=fds[0])


class _Unserved:
    """A port that could not be listened on (tried again at each look), and why."""

    def __init__(self, said: str = "") -> None:
        self.said = said

    def close(self) -> None:
        pass


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, then pass the end on (a half-close, as TCP has it)."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def _log(line: str) -> None:
    print(f"gateway: {line}", file=sys.stderr, flush=True)


def main(channel_fd: int, state: Path) -> None:
    """Serve until the fabric's holder goes (the lock that says the gateway runs is held by an
    inherited descriptor, kept open until the process ends)."""
    channel = socket.socket(fileno=channel_fd)
    channel.settimeout(CONNECT_TIMEOUT_S)
    record = json.loads((state / network.RECORD).read_text())
    block, claim = claim_block()
    try:
        asyncio.run(Gateway(state, channel, record, block).run())
    finally:
        if claim is not None:
            claim.close()


if __name__ == "__main__":  # started by the fabric's starter: CHANNEL_FD LOCK_FD STATE
    main(int(sys.argv[1]), Path(sys.argv[3]))
