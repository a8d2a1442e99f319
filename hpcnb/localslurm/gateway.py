"""The login node's way into the nodes' own network: a server a job runs is reached by its node's name.

On a real cluster the login node (a notebook's kernel, its shell) reaches a server on a compute
node at the node's name, ``curl node2:8888``, unless the server listens on the node's loopback
only. This machine's processes cannot route into the nodes' network (:mod:`.network`) without root,
so the *gateway* stands in for the route. Every :data:`POLL_S` it asks which TCP ports each node
listens on beyond its loopback (sock_diag in the node's network, as ``ss -tl`` asks) and listens on
the same port at the node's login-side address (``127.B.C.N``, a loopback address of this machine,
in a block no other user's gateway holds: :func:`claim_block`); each connection is passed on to the
node through a socket made inside the nodes' network by the fabric's holder, so that it comes from
the fabric's own address (:data:`.network.FABRIC_V4`). On the login node the node names resolve to
those addresses through nss_wrapper (:func:`.names.login_env`: the course kernel preloads it).

It runs as long as the fabric's holder, which started it: its end of the channel to the holder is
closed then, or the holder's record names another.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import struct
import sys
from pathlib import Path

from . import network, paths

POLL_S = 0.1
CLAIM_PORT = 65535
CONNECT_TIMEOUT_S = 10.0
TCP_LISTEN, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 10, 20, 1, 0x300, 2, 3


def listening(diag: socket.socket) -> dict[int, int]:
    """The TCP ports a node listens on beyond its loopback, each with the address family to reach it
    by (IPv4 where a socket of either family would do), asked of ``diag``: a sock_diag netlink socket
    in the node's network (as ``ss -tl`` asks; reading ``/proc/PID/net/tcp`` walks every connection
    slot of the machine, milliseconds each time)."""
    ports: dict[int, int] = {}
    for family in (socket.AF_INET6, socket.AF_INET):
        request = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
        diag.send(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 0, 0)
                  + request)
        for reply in _replies(diag):  # struct inet_diag_msg: 4 bytes, then the socket's id
            port = struct.unpack_from(">H", reply, 4)[0]
            address = ipaddress.ip_address(reply[8:12] if family == socket.AF_INET else reply[8:24])
            mapped = getattr(address, "ipv4_mapped", None)
            if not (address.is_loopback or (mapped and mapped.is_loopback)):
                ports[port] = family
    return ports


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


def claim_block(preferred: int) -> tuple[int, socket.socket]:
    """A block of login-side addresses no other gateway of this machine holds, from ``preferred`` on,
    and the socket that holds it (UDP, at the block's last address): the kernel keeps the claim."""
    first, span = (127 << 24) | (64 << 16), 128 << 16  # the blocks 127.64.0.0 - 127.191.255.0
    for step in range(256):
        block = first + (preferred - first + step * 256) % span
        claim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            claim.bind((str(ipaddress.IPv4Address(block + 255)), CLAIM_PORT))
            return block, claim
        except OSError:
            claim.close()
    raise OSError("no free block of loopback addresses for the login node's side")


class Gateway:
    """Listeners at the nodes' login-side addresses, one per port a node listens on."""

    def __init__(self, state: Path, channel: socket.socket, record: dict, block: int) -> None:
        self.state, self.channel, self.record, self.block = state, channel, record, block
        self.servers: dict[tuple[int, int], asyncio.AbstractServer | _Unserved] = {}
        self.diags: dict[int, socket.socket] = {}

    async def run(self) -> None:
        try:
            while self._wanted():
                await self._update()
                await asyncio.sleep(POLL_S)
        finally:
            for server in self.servers.values():
                server.close()

    def _wanted(self) -> bool:
        """While the holder that started it runs, and its record is the fabric's."""
        now = network.current(self.state)
        return bool(now) and now["holder"] == self.record["holder"]

    async def _update(self) -> None:
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
            if (index, port) not in self.servers:
                await self._listen(index, port, family)

    async def _listen(self, index: int, port: int, family: int) -> None:
        target = (network.address(index)[0 if family == socket.AF_INET else 1], port)

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._relay(reader, writer, family, target)

        try:
            self.servers[(index, port)] = await asyncio.start_server(relay, self._address(index), port)
        except OSError as err:  # e.g. a server of this machine holds the port on every address
            _log(f"{self._address(index)}:{port} for {self.record['names'][index]}: {err}")
            self.servers[(index, port)] = _Unserved()

    def _address(self, index: int) -> str:
        return network.login_address(index, self.block)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, family: int,
                     target: tuple[str, int]) -> None:
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
    """A port that could not be listened on (tried again once the node stops listening)."""

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
    channel = socket.socket(fileno=channel_fd)
    channel.settimeout(CONNECT_TIMEOUT_S)
    record = json.loads((state / network.RECORD).read_text())
    block, claim = claim_block(network.login_block(state))
    with claim:
        paths.write_private(paths.hosts_path(state), network.login_hosts_text(record["names"], block))
        asyncio.run(Gateway(state, channel, record, block).run())


if __name__ == "__main__":  # started by the fabric's starter: CHANNEL_FD STATE
    main(int(sys.argv[1]), Path(sys.argv[2]))
