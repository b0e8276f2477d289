"""A Redis Cluster of embedded servers on loopback ports, for the tests and the benchmarks:
``EmbeddedCluster(masters=3)`` starts the nodes (``ops/embedded.py``), assigns the slots
and joins them, and stops them all when the ``with`` block ends."""

from __future__ import annotations

import random
import socket
import time
from typing import TYPE_CHECKING, Any

from ..core.errors import ServerUnavailable
from .embedded import EmbeddedServer, Started

if TYPE_CHECKING:
    from collections.abc import Callable


CLUSTER_SLOTS = 16384


class EmbeddedCluster(Started):
    """A Redis Cluster of ``masters`` primaries (each with ``replicas`` replicas) on
    127.0.0.1, from the same binary as ``EmbeddedServer``: for tests and benchmarks.

    The slots are split evenly between the masters (in port order); ``url`` is the
    ``redis+cluster://`` URL of every master. ``announce`` (before ``start``) has nodes
    tell clients another port than their own (a proxy's, for the network-cut tests); the
    nodes still talk to each other directly, on their bus ports.
    """

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 2000) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master and no negative replicas")
        args = [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms), "--cluster-require-full-coverage",
            "no", "--repl-diskless-sync-delay", "0",  # (a replica's first sync at once)
        ]  # fmt: skip
        self.masters = [_cluster_node(args) for _ in range(masters)]
        self.replicas = [_cluster_node(args) for _ in range(masters * replicas)]
        self._replicas_per_master = replicas
        self.announced: dict[int, int] = {}  # a node's port -> the port clients are told

    @property
    def nodes(self) -> list[EmbeddedServer]:
        return [*self.masters, *self.replicas]

    @property
    def url(self) -> str:
        ports = (self.announced.get(server.port, server.port) for server in self.masters)
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports)

    def announce(self, ports: dict[int, int]) -> None:
        """Have each node (by its port) announce ``ports[port]`` to clients."""
        self.announced = dict(ports)
        for server in self.nodes:
            if server.port in ports:
                server.keep_port()  # (the announced port points at this one)
                server.add_args(
                    "--cluster-announce-ip", "127.0.0.1",
                    "--cluster-announce-port", str(ports[server.port]),
                    "--cluster-announce-bus-port", str(server.port + 10_000),
                )  # fmt: skip

    def start(self, timeout: float = 20.0) -> str:
        """Start every node, assign the slots, join them, wait until the cluster is ok."""
        try:
            for server in self.nodes:
                server.start()
            self._form(timeout)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _form(self, timeout: float) -> None:
        from redis import Redis  # (sync: this runs before any event loop, or in a thread)

        clients: dict[int, Any] = {server.port: Redis(port=server.port) for server in self.nodes}
        try:
            share = CLUSTER_SLOTS // len(self.masters)
            for index, server in enumerate(self.masters):
                last = (
                    CLUSTER_SLOTS - 1 if index == len(self.masters) - 1 else (index + 1) * share - 1
                )
                clients[server.port].execute_command("CLUSTER ADDSLOTSRANGE", index * share, last)
            first = self.masters[0].port
            for server in self.nodes[1:]:
                clients[server.port].execute_command("CLUSTER MEET", "127.0.0.1", first)
            self._wait(clients, timeout, lambda c: _count_nodes(c) == len(self.nodes))
            for index, replica in enumerate(self.replicas):
                master = self.masters[index // self._replicas_per_master]
                master_id = _text(clients[master.port].execute_command("CLUSTER MYID"))
                clients[replica.port].execute_command("CLUSTER REPLICATE", master_id)
            self._wait(clients, timeout, _cluster_ok)
            # A replica can take over only once it has its master's data: until its first
            # sync is done, a failover (manual or not) would wait or never happen.
            replicas = {replica.port: clients[replica.port] for replica in self.replicas}
            self._wait(replicas, timeout, _synced)
        finally:
            for client in clients.values():
                client.close()

    def _wait(self, clients: dict[int, Any], timeout: float, ready: Callable[[Any], bool]) -> None:
        deadline = time.monotonic() + timeout
        while not all(ready(client) for client in clients.values()):
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the embedded cluster did not form within {timeout}s")
            time.sleep(0.05)

    def stop(self) -> None:
        for server in self.nodes:
            server.stop()


def _cluster_node(args: list[str]) -> EmbeddedServer:
    """A cluster node's server, on a port whose cluster bus port (port + 10000) is free too
    (chosen again if either is taken by the time it starts)."""
    return EmbeddedServer(port=_node_port(), extra_args=args, choose_port=_node_port)


def _node_port() -> int:
    for _ in range(100):
        port = random.randrange(20_000, 30_000)
        if _port_free(port) and _port_free(port + 10_000):
            return port
    raise ServerUnavailable("no free pair of loopback ports for a cluster node")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _count_nodes(client: Any) -> int:
    """How many nodes a node knows (redis-py parses CLUSTER NODES into a dict)."""
    nodes = client.execute_command("CLUSTER NODES")
    return len(nodes) if isinstance(nodes, dict) else len(_text(nodes).strip().splitlines())


def _synced(client: Any) -> bool:
    """Whether a replica is in sync with its master (its link is up)."""
    return bool(client.info("replication").get("master_link_status") == "up")


def _cluster_ok(client: Any) -> bool:
    info = client.execute_command("CLUSTER INFO")
    if isinstance(info, dict):
        return _text(info.get("cluster_state", "")) == "ok"
    return "cluster_state:ok" in _text(info)
