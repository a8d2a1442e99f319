"""The login node's way into the nodes' own network: a server a job runs is reached by its node's name.

On a real cluster the login node (a notebook's kernel, its shell) reaches a server on a compute
node at the node's name, ``curl node2:8888``, unless the server listens on the node's loopback
only. This machine's processes cannot route into the nodes' network (:mod:`.network`) without root,
so the *gateway* stands in for the route. Every :data:`POLL_S` it reads which TCP ports each node
listens on beyond its loopback (``/proc/PID/net/tcp`` of the process holding the node's network)
and listens on the same port at the node's login-side address (``127.B.C.N``, a loopback address
of this machine, in a block no other user's gateway holds: :func:`claim_block`); each connection is passed on to the node through
a socket made inside the nodes' network by the fabric's holder, where it comes from the fabric's
own address (:data:`.network.FABRIC_V4`). On the login node the node names resolve to those
addresses through nss_wrapper (:func:`.names.login_env`: the course kernel preloads it).

It runs as long as the fabric's holder, which started it: its end of the channel to the holder is
closed then, or the holder's record names another.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import sys
from pathlib import Path

from . import network, paths

POLL_S = 0.1
CLAIM_PORT = 65535
CONNECT_TIMEOUT_S = 10.0
LISTEN = "0A"  # st in /proc/net/tcp: TCP_LISTEN


def listening(pid: int) -> dict[int, int]:
    """The TCP ports the network namespace of ``pid`` listens on beyond its loopback, each with the
    address family to reach it by (IPv4 where a socket of either family would do)."""
    ports: dict[int, int] = {}
    for name, family in (("tcp6", socket.AF_INET6), ("tcp", socket.AF_INET)):
        try:
            with open(f"/proc/{pid}/net/{name}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == LISTEN:
                address, _, port = fields[1].partition(":")
                if not _loopback(address):
                    ports[int(port, 16)] = family
    return ports


def _loopback(hex_address: str) -> bool:
    """Whether an address as /proc/net/tcp{,6} writes it (32-bit words, host order) is a loopback one."""
    raw = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1] for i in range(0, len(hex_address), 8))
    address = ipaddress.ip_address(raw)
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


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
        for index, node in enumerate(self.record["names"]):
            for port, family in listening(self.record["nodes"][node]).items():
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
        try:
            inside = self._fabric_socket(family)
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(inside, target), CONNECT_TIMEOUT_S)
            node_reader, node_writer = await asyncio.open_connection(sock=inside)
        except (OSError, asyncio.TimeoutError):
            writer.close()  # refused on the node, as a client of a real one is
            return
        await asyncio.gather(_pump(reader, node_writer), _pump(node_reader, writer))
        for end in (writer, node_writer):
            end.close()

    def _fabric_socket(self, family: int) -> socket.socket:
        """A new TCP socket inside the nodes' network, made there by the fabric's holder."""
        self.channel.sendall(b"6" if family == socket.AF_INET6 else b"4")
        _, fds, _, _ = socket.recv_fds(self.channel, 1, 1)
        if not fds:
            raise OSError("the fabric's holder has gone")
        made = socket.socket(fileno=fds[0])
        made.setblocking(False)
        return made


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
