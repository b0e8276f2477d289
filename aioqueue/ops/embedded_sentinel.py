"""A Sentinel-managed master on loopback ports, for the tests and the benchmarks:
``EmbeddedSentinel(replicas=1, sentinels=3)`` starts a master and its replicas (embedded
servers, ``ops/embedded.py``), then the Sentinels that watch them, and stops them all when
the ``with`` block ends."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ServerUnavailable
from .embedded import (
    DIR_PREFIX,
    OWNER_FILE,
    PORT_ATTEMPTS,
    EmbeddedServer,
    Started,
    die_with_parent,
    find_server_binary,
    free_loopback_port,
    remove_stale_dirs,
    server_pid,
    terminate,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


class EmbeddedSentinel(Started):
    """A master, ``replicas`` replicas and ``sentinels`` Sentinels on 127.0.0.1 (one
    service, ``service``), from the same binary as ``EmbeddedServer``: for tests and
    benchmarks. ``url`` is the ``redis+sentinel://`` URL of the Sentinels; ``server_args``
    go to every data server (by default: a replica's full sync starts at once, not after
    Redis's default 5 s wait for more replicas)."""

    def __init__(
        self,
        service: str = "aioqueue",
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        server_args: Sequence[str] = ("--repl-diskless-sync-delay", "0"),
    ) -> None:
        self.service = service
        self.master = EmbeddedServer(extra_args=server_args)
        self.replicas = [
            EmbeddedServer(
                extra_args=["--replicaof", "127.0.0.1", str(self.master.port), *server_args]
            )
            for _ in range(replicas)
        ]
        self.sentinels = [_SentinelProcess() for _ in range(sentinels)]
        self._down_after_ms = down_after_ms
        self.announced: dict[int, int] = {}  # a server's port -> the port it is known by

    def announce(self, ports: dict[int, int]) -> None:
        """Have each server (by its port) known by ``ports[port]`` (a proxy's, for the
        network-cut tests): the Sentinels watch the master there, replicas announce it."""
        self.announced = dict(ports)
        for server in self.servers:
            if server.port in ports:
                server.add_args(
                    "--replica-announce-ip", "127.0.0.1",
                    "--replica-announce-port", str(ports[server.port]),
                )  # fmt: skip

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
            master = self.announced.get(self.master.port, self.master.port)
            for sentinel in self.sentinels:
                sentinel.start(self.service, master, quorum, self._down_after_ms)
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
        for attempt in range(PORT_ATTEMPTS):  # (as EmbeddedServer.start: a port taken meanwhile)
            if attempt:
                self.port = free_loopback_port()
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
            if self._serving(self._process):
                return
        raise ServerUnavailable(f"a Sentinel found no free port in {PORT_ATTEMPTS} tries")

    def _serving(self, process: subprocess.Popen[bytes]) -> bool:
        """Wait until this very process answers on the port; False if it exited because
        another process took the port between its choice and the start."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if server_pid(self.port) == process.pid:
                return True
            if process.poll() is not None:
                if server_pid(self.port) not in (None, process.pid):
                    return False
                raise ServerUnavailable(
                    f"a Sentinel on port {self.port} exited with {process.returncode}"
                )
            time.sleep(0.02)
        raise ServerUnavailable(f"a Sentinel on port {self.port} did not start")

    def stop(self) -> None:
        process, self._process = self._process, None
        terminate(process)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None
