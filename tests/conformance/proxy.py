"""A proxy between a client under test and the suite's Redis: it forwards both ways, keeps
the commands clients send (parsed from RESP: arrays of bulk strings), and once armed
swallows the reply to the next script call and closes the client's connection (the call
ran; the client cannot know it)."""

from __future__ import annotations

import asyncio
import contextlib


class RequestReader:
    """Commands from a client's byte stream, fed in pieces as they come."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[list[bytes]]:
        self.buffer += data
        commands = []
        while (command := self._next()) is not None:
            commands.append(command)
        return commands

    def _next(self) -> list[bytes] | None:
        if not self.buffer.startswith(b"*"):
            return None
        at = self.buffer.find(b"\r\n")
        if at < 0:
            return None
        count, at = int(self.buffer[1:at]), at + 2
        parts = []
        for _ in range(count):
            end = self.buffer.find(b"\r\n", at)
            if end < 0:
                return None
            length, start = int(self.buffer[at + 1 : end]), end + 2
            if len(self.buffer) < start + length + 2:
                return None
            parts.append(self.buffer[start : start + length])
            at = start + length + 2
        self.buffer = self.buffer[at:]
        return parts


class RedisProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.armed = False  # swallow the reply to the next script call
        self.dropped = 0
        self.commands: list[list[bytes]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    def scripts(self) -> list[list[bytes]]:
        """The script calls seen (EVALSHA or EVAL), once each: a call resent after NOSCRIPT
        or a dropped connection counts once per distinct arguments."""
        seen: list[list[bytes]] = []
        for command in self.commands:
            if command[0].upper() in (b"EVALSHA", b"EVAL") and command[1:] not in seen:
                seen.append(command[1:])
        return seen

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        swallow = asyncio.Event()
        requests = RequestReader()

        async def upstream() -> None:
            while data := await reader.read(65536):
                commands = requests.feed(data)
                self.commands += commands
                if self.armed and any(c[0].upper().startswith(b"EVAL") for c in commands):
                    self.armed = False
                    swallow.set()
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                if swallow.is_set():  # the script ran; its reply never arrives
                    self.dropped += 1
                    return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        with contextlib.suppress(ConnectionError):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for stream in (writer, up_writer):
            stream.close()
        await asyncio.gather(*tasks, return_exceptions=True)
