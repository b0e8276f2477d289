"""Run the dashboard alone, on uvicorn (what ``aioqueue dashboard`` calls)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING

import uvicorn

from ..core.errors import ConfigError
from .dashboard import create_dashboard

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ..app import App
    from .guard import Authorize

logger = logging.getLogger(__name__)


async def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    actions: bool = False,
    authorize: Authorize | None = None,
    queues: Sequence[str] | None = None,
    title: str = "aioqueue",
    root_path: str = "",
    log_level: str = "info",
) -> None:
    """Serve ``app``'s dashboard on ``host:port`` until the process is told to stop
    (Ctrl-C or SIGTERM: it then returns). ``root_path``: the path prefix a reverse
    proxy serves it under. The options are those of ``create_dashboard``. The caller
    owns ``app`` (close it afterwards). Raises ConfigError if it cannot listen there (a
    port in use); says where it listens once it does."""
    dashboard = create_dashboard(
        app, queues=queues, actions=actions, authorize=authorize, title=title
    )
    config = uvicorn.Config(
        dashboard, host=host, port=port, root_path=root_path, log_level=log_level,
        lifespan="off", ws="none", proxy_headers=False, log_config=None,  # logs as ours do
    )  # fmt: skip
    if actions and authorize is None and host not in ("127.0.0.1", "::1", "localhost"):
        logger.warning(
            "dashboard actions are on with no authorize hook, on %s: anyone who reaches it "
            "can cancel, requeue and purge jobs (put it behind your own authentication)",
            host,
        )
    sock = listen(host, port)  # a taken port fails here, before anything says "on"
    try:
        where = _address(host, sock.getsockname()[1], root_path)
        announce = f"aioqueue dashboard on {where} (actions {'on' if actions else 'off'})"
        await _Server(config, announce).serve(sockets=[sock])
    finally:
        sock.close()


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``; ConfigError saying why it cannot (a port taken
    by another process, an address not of this host)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ConfigError(f"the dashboard cannot listen on {host}:{port}: {reason}") from exc


def _address(host: str, port: int, root_path: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{root_path}/"


class _Server(uvicorn.Server):
    """uvicorn, except that it says where it listens once it does (given a socket, uvicorn
    says nothing), and that a signal that stopped it is not raised again afterwards (which
    kills the process: Ctrl-C would end ``aioqueue dashboard`` with status -2, and code
    after ``await serve()``, closing the app, would never run)."""

    def __init__(self, config: uvicorn.Config, announce: str) -> None:
        super().__init__(config)
        self._announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            logger.info("%s", self._announce)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
