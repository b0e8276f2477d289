"""Commands packed by hand (RESP) and sent on a connection checked out of a pool.

The hot path (enqueues, takes, offers, acks) packs its EVALSHA itself, as redis-py would
but cheaper: redis-py's ``pack_command`` costs ~0.5 µs per argument, and the part of a
call that names the script and its keys is the same for every call of a queue, so
``scripts`` caches it (``evalsha_head``) and packs only what changes. This module knows
RESP and the connection; which keys and arguments a script takes is its header's business
(``layout``), read by ``scripts``.
"""

from __future__ import annotations

from inspect import Parameter, signature
from typing import TYPE_CHECKING, Any

from redis.asyncio import ConnectionPool
from redis.exceptions import NoScriptError, ResponseError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio.connection import AbstractConnection

    from ..core.lifecycle import NewJob
    from .layout import Arg
    from .loader import Script


def bulk(*args: bytes) -> bytes:
    """RESP bulk strings, one per argument."""
    return b"".join(b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args)


def array(count: int) -> bytes:
    """The header of a RESP array (a command) of ``count`` arguments."""
    return b"*%d\r\n" % count


def numbers(*values: int) -> bytes:
    """Integers as RESP bulk strings, in decimal."""
    return bulk(*(b"%d" % value for value in values))


def arg_bytes(arg: Arg) -> bytes:
    """An argument as redis-py would send it (an int or float in decimal, text in UTF-8)."""
    if isinstance(arg, bytes):
        return arg
    return (arg if isinstance(arg, str) else str(arg)).encode()


def evalsha_head(script: Script, keys: Sequence[str | bytes]) -> tuple[int, bytes]:
    """What a call of ``script`` over ``keys`` starts with (EVALSHA, sha, key count,
    keys), packed, and how many arguments that is: the same for every call of a queue."""
    parts = [b"EVALSHA", script.sha.encode(), b"%d" % len(keys), *map(arg_bytes, keys)]
    return len(parts), bulk(*parts)


def call(head: tuple[int, bytes], args: Sequence[Arg]) -> bytes:
    """One packed call: an ``evalsha_head`` and the call's ARGV."""
    count, packed = head
    return array(count + len(args)) + packed + bulk(*map(arg_bytes, args))


def wait(replicas: int, timeout: float) -> bytes:
    """WAIT: the connection's writes so far are on ``replicas`` replicas (or the timeout)."""
    return array(3) + bulk(b"WAIT") + numbers(replicas, max(1, int(timeout * 1000)))


# The seven arguments of one job (id, payload, priority, max_attempts, delay_ms, due_ms,
# fresh), in one format operation: the enqueue path packs thousands of them per second.
_JOB = b"$%d\r\n%b\r\n$%d\r\n%b\r\n$1\r\n%d\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$1\r\n%d\r\n"
JOB_ARGS = 7  # NewJob's first seven fields (enqueue.lua's header lists them: checked)


def jobs(new_jobs: Sequence[NewJob]) -> bytes:
    """The per-job arguments of an enqueue call, seven per job, in NewJob's field order."""
    parts = []
    for job in new_jobs:
        if not 0 <= job.priority <= 9:  # one digit on the wire, and one ready list per digit
            raise ValueError(f"priority must be 0..9, got {job.priority}")
        job_id = job.id.encode()
        attempts, delay, due = b"%d" % job.max_attempts, b"%d" % job.delay_ms, b"%d" % job.due_ms
        parts.append(_JOB % (
            len(job_id), job_id, len(job.payload), job.payload, job.priority,
            len(attempts), attempts, len(delay), delay, len(due), due, job.fresh,
        ))  # fmt: skip
    return b"".join(parts)


async def checkout(pool: ConnectionPool) -> AbstractConnection:
    """A connection of ``pool`` for a caller that sends packed commands on it (enqueues,
    takes); give it back with ``pool.release``. The pool's limit counts it as in use."""
    get: Callable[..., Awaitable[AbstractConnection]] = pool.get_connection
    # redis-py < 5.3 wants a command name (and ignores it); later versions warn if given one
    return await (get("_") if _NAME_REQUIRED else get())


def _name_required() -> bool:
    parameter = signature(ConnectionPool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is Parameter.empty


_NAME_REQUIRED = _name_required()


async def send(
    connection: AbstractConnection,
    script: Script,
    commands: list[bytes],
    on_reply: Callable[[int, Any], None] | None = None,
    resent: Callable[[list[bytes]], list[bytes]] | None = None,
) -> list[Any]:
    """``send_each``, raising the first error a call was answered with."""
    replies = await send_each(connection, script, commands, on_reply, resent)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


async def send_each(
    connection: AbstractConnection,
    script: Script,
    commands: list[bytes],
    on_reply: Callable[[int, Any], None] | None = None,
    resent: Callable[[list[bytes]], list[bytes]] | None = None,
) -> list[Any]:
    """Send packed calls of ``script`` in one write and read every reply, an error reply
    in its place (``on_reply(index, reply)`` as each good one arrives); load the script
    if Redis lost it.

    The connection's retry policy resends after a dropped connection: the scripts sent
    this way are safe to run twice (see ``connection``). ``resent(commands)`` gives what
    to send instead when it does (a call that must know it may have run already)."""
    sends = 0

    async def round_trip() -> list[Any]:
        nonlocal sends
        sends += 1
        await connection.send_packed_command(
            commands if sends == 1 or resent is None else resent(commands)
        )
        replies: list[Any] = []
        for index in range(len(commands)):
            try:
                replies.append(reply := await connection.read_response())
            except ResponseError as exc:  # read on: the connection stays in step
                replies.append(exc)
                continue
            if on_reply is not None:
                on_reply(index, reply)
        return replies

    async def disconnect(_: Exception) -> None:
        await connection.disconnect()

    replies = await connection.retry.call_with_retry(round_trip, disconnect)
    if any(isinstance(reply, NoScriptError) for reply in replies):
        # The server lacks the script (a restart, or a replica promoted by a failover:
        # SCRIPT LOAD is not replicated). Load it and send everything again, as after a
        # dropped connection: every script sent this way is safe to run twice.
        await connection.send_command("SCRIPT", "LOAD", script.source)
        await connection.read_response()
        replies = await connection.retry.call_with_retry(round_trip, disconnect)
    return replies
