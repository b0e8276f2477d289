"""``aioqueue.web.serve`` (what ``aioqueue dashboard`` runs): it says where it listens
only once it does, and a port taken by another process is one clear error."""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
import pytest

import aioqueue
from aioqueue.web import serve
from tests.helpers import wait_until


async def test_a_taken_port_is_a_config_error_and_nothing_claims_to_listen(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    caplog.set_level(logging.INFO)
    try:
        with pytest.raises(aioqueue.ConfigError, match=f"cannot listen on 127.0.0.1:{port}: "):
            await serve(app, port=port)
    finally:
        taken.close()
    assert not any("dashboard on" in record.getMessage() for record in caplog.records)


async def test_it_says_where_it_listens_once_it_does(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    caplog.set_level(logging.INFO)
    server = asyncio.create_task(serve(app, port=port))

    async def announced() -> bool:
        return any("dashboard on" in record.getMessage() for record in caplog.records)

    try:
        await wait_until(announced, timeout=10)
        [line] = [r.getMessage() for r in caplog.records if "dashboard on" in r.getMessage()]
        assert line == f"aioqueue dashboard on http://127.0.0.1:{port}/ (actions off)"
        async with httpx.AsyncClient() as http:  # listening as it says
            assert (await http.get(f"http://127.0.0.1:{port}/")).status_code == 200
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
