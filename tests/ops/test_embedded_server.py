"""The embedded server is the one that answers on its port: a port taken by another
process between its choice and the start is chosen again (test processes run side by
side), never mistaken for the new server; a cluster node's, when its bus port (port +
10000) was taken, by a client's connection as often as not."""

from __future__ import annotations

import itertools
import socket

import pytest

from aioqueue import ServerUnavailable
from aioqueue.ops import embedded, embedded_cluster, embedded_sentinel
from aioqueue.ops.embedded import EmbeddedServer, server_pid


def test_a_port_taken_meanwhile_is_chosen_again(
    redis_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = itertools.chain([redis_server.port], iter(embedded.free_loopback_port, None))
    monkeypatch.setattr(embedded, "free_loopback_port", lambda: next(ports))
    with EmbeddedServer() as server:
        assert server.port != redis_server.port
        assert server_pid(server.port) == server.pid
    assert server_pid(redis_server.port) == redis_server.pid  # (the other one untouched)


def test_a_port_asked_for_and_taken_is_an_error(redis_server: EmbeddedServer) -> None:
    with pytest.raises(ServerUnavailable, match="exited"):
        EmbeddedServer(port=redis_server.port).start()


def test_a_sentinel_s_port_taken_meanwhile_is_chosen_again(
    redis_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = itertools.chain([redis_server.port], iter(embedded.free_loopback_port, None))
    monkeypatch.setattr(embedded_sentinel, "free_loopback_port", lambda: next(ports))
    with EmbeddedServer() as master:
        sentinel = embedded_sentinel._SentinelProcess()
        try:
            sentinel.start("svc", master.port, 1, 5000)
            assert sentinel.port != redis_server.port
            assert server_pid(sentinel.port) not in (None, redis_server.pid)
        finally:
            sentinel.stop()
    assert server_pid(redis_server.port) == redis_server.pid  # (the other one untouched)


def test_a_cluster_node_whose_bus_port_was_taken_starts_on_another() -> None:
    """Seen in a clean-clone run: a node of a test's cluster exited at start (its bus port,
    in the range of the machine's outgoing connections, was taken meanwhile)."""
    node = embedded_cluster._cluster_node(["--cluster-enabled", "yes"])
    chosen = node.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", chosen + 10_000))
        squatter.listen()
        try:
            node.start()
            assert node.port != chosen
            assert server_pid(node.port) == node.pid
        finally:
            node.stop()
