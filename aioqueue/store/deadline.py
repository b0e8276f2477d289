"""One total deadline per public call, retries included.

A public call runs ``within(seconds)``: an enqueue within the App's ``enqueue_timeout``,
a read or an admin call within its ``call_timeout``. The deadline lives in a context
variable, so every layer under the call sees what is left of it: the connections' retry
policy (``DeadlineRetry``) starts no retry past it, a Cluster call waiting out a slot
migration and a write held through a Sentinel failover wait no longer than it. At the
deadline the call is cancelled (a cancelled redis-py read or write drops its connection,
so nothing half-read is used again) and raises redis-py's ``TimeoutError``, naming the
setting, which the caller turns into ``EnqueueUnconfirmed`` or ``ServerUnavailable``.

A *patient* call (an enqueue) retries a lost connection for as long as its deadline
allows: it rides out a restart, a failover or a slot move it was given the time for.
Other calls also stop after the policy's few retries, so that a server that refuses
connections is reported at once. Outside any call (a worker's own loops), a policy may
have a default bound per command (the clients of user-driven calls do), or none.

A step of a shutdown (a wake-up token, a last ack, a heartbeat cleared) must not hold the
stop, and must not be cancelled either (cancelling many calls that share a client can
leave them stuck in its pool for several socket timeouts): it runs ``detached``, in a
task of its own under a deadline its retries respect, with no timer; its caller waits for
it as long as it chooses and may leave it behind, to end by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio.retry import Retry
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import describe

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine
    from types import TracebackType

    from redis.backoff import AbstractBackoff

T = TypeVar("T")
Scope = contextlib.AbstractAsyncContextManager[None]  # what ``within`` returns


@dataclass(slots=True)
class Deadline:
    """The deadline of one call, and what its retries saw."""

    at: float  # event loop time
    patient: bool  # retry lost connections until ``at`` (not only a few times)
    seconds: float = 0.0  # as given (for the message)
    setting: str = ""  # the App setting it comes from (for the message)
    last_error: Exception | None = None  # the last a retry saw (for the message)
    armed: bool = False  # a timer cancels the call at ``at`` (``keeping``)

    def expired(self) -> RedisTimeoutError:
        """The error a call raises at this deadline: the setting, and the last cause."""
        named = f" ({self.setting})" if self.setting else ""
        cause = f": {describe(self.last_error)}" if self.last_error is not None else ""
        return RedisTimeoutError(f"no answer within {self.seconds:g}s{named}{cause}")


_DEADLINE: ContextVar[Deadline | None] = ContextVar("aioqueue_deadline", default=None)


def current() -> Deadline | None:
    """The deadline of the call under way in this task, if any."""
    return _DEADLINE.get()


def remaining(default: float | None = None) -> float | None:
    """Seconds left to the call's deadline (possibly negative); ``default`` outside one."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return default
    return deadline.at - asyncio.get_running_loop().time()


def within(seconds: float, setting: str = "", *, patient: bool = False) -> Scope:
    """``async with within(...)``: run the block as one call of at most ``seconds``; an
    enclosing call's earlier deadline governs. Raises redis-py's TimeoutError at the
    deadline, naming ``setting`` (the App setting that gave it)."""
    at = asyncio.get_running_loop().time() + seconds
    return keeping(Deadline(at, patient, seconds, setting))


def bound(seconds: float, setting: str = "", *, patient: bool = False) -> Bound:
    """``with bound(...)``: the call's deadline, as ``within`` sets it, but without a
    timer of its own (a few µs saved per enqueue): the layer under it that waits arms
    one (``keeping``: the batcher, for a lone enqueue or for a flush)."""
    return Bound(seconds, setting, patient=patient)


class Bound:
    """See ``bound``."""

    __slots__ = ("_deadline", "_token")

    def __init__(self, seconds: float, setting: str = "", *, patient: bool = False) -> None:
        at = asyncio.get_running_loop().time() + seconds
        self._deadline = Deadline(at, patient, seconds, setting)
        self._token: Token[Deadline | None] | None = None

    def __enter__(self) -> None:
        outer = _DEADLINE.get()
        if outer is None or outer.at > self._deadline.at:
            self._token = _DEADLINE.set(self._deadline)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            _DEADLINE.reset(self._token)


def keeping(deadline: Deadline | None) -> Keeping:
    """``async with keeping(deadline)``: run the block under ``deadline`` (one taken from
    a call earlier: see ``current``), cancelled at it; or under none. An armed enclosing
    deadline that comes first governs."""
    return Keeping(deadline)


class Keeping:
    """See ``keeping`` (a class, not a generator: it runs once per enqueue or flush)."""

    __slots__ = ("_deadline", "_timeout", "_token", "_was_armed")

    def __init__(self, deadline: Deadline | None) -> None:
        self._deadline = deadline
        self._timeout: asyncio.Timeout | None = None
        self._token: Token[Deadline | None] | None = None
        self._was_armed = False

    async def __aenter__(self) -> None:
        deadline, outer = self._deadline, _DEADLINE.get()
        if deadline is None or (outer is not None and outer.armed and outer.at <= deadline.at):
            return  # none, or the enclosing call's deadline comes first
        self._token = _DEADLINE.set(deadline)
        self._was_armed, deadline.armed = deadline.armed, True
        self._timeout = asyncio.timeout_at(deadline.at)
        await self._timeout.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        timeout, deadline = self._timeout, self._deadline
        if timeout is None or deadline is None:
            return
        try:
            await timeout.__aexit__(kind, exc, tb)  # (raises TimeoutError if it cut the block)
        except TimeoutError:
            raise deadline.expired() from None
        finally:
            deadline.armed = self._was_armed
            if self._token is not None:
                _DEADLINE.reset(self._token)


_DETACHED: set[asyncio.Task[Any]] = set()  # (a task nobody refers to may be collected)


def detach(call: Coroutine[Any, Any, T], seconds: float) -> asyncio.Task[T]:
    """Run ``call`` in a task of its own whose retries stop at ``seconds`` from now (a
    ``bound``: no timer cancels it, so at worst it ends one socket timeout past that).
    Its caller may stop waiting for it at any time: what it raises is then dropped."""
    with bound(seconds):  # (the task copies the context, deadline included)
        task = asyncio.get_running_loop().create_task(call)
    _DETACHED.add(task)
    task.add_done_callback(_detached_done)
    return task


async def settle_within(call: Coroutine[Any, Any, T], seconds: float) -> bool:
    """``detach`` a call and wait for it at most ``seconds``: True if it ended in time
    (whatever it raised is dropped), False if it was left behind."""
    task = detach(call, seconds)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    return bool(done)


def _detached_done(task: asyncio.Task[Any]) -> None:
    _DETACHED.discard(task)
    if not task.cancelled():
        task.exception()  # (retrieved: whoever waited for it may have left)


class Unconfirmed(RedisConnectionError):
    """The connection's reply cannot be trusted to say where the call ran (a failover
    began while it was on its way): only a call safe to send twice goes again."""


class DeadlineRetry(Retry):
    """redis-py's retry policy, bounded by the call's deadline as well as by a count (see
    the module's docstring). ``default``: the bound, in seconds, of one command's retries
    sent outside any call (None: only the count). ``patient_connects``: a patient call
    also retries a connect that fails (nothing answers at the address) until its deadline;
    without it (one server: down is down, not a failover under way) only a few times."""

    def __init__(
        self,
        backoff: AbstractBackoff,
        retries: int,
        *,
        default: float | None = None,
        patient_connects: bool = True,
        supported_errors: tuple[type[RedisError], ...] = (RedisConnectionError, RedisTimeoutError),
    ) -> None:
        super().__init__(backoff, retries, supported_errors)
        self.default = default
        self.patient_connects = patient_connects

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = _DEADLINE.get()
        if deadline is None and self.default is not None:
            # No call around this command: bound its attempts here instead.
            deadline = Deadline(loop.time() + self.default, False, self.default, armed=True)
            return await _bounded(self, do, fail, is_retryable, with_failure_count, deadline)
        self._backoff.reset()  # type: ignore[no-untyped-call]
        failures = 0
        while True:
            try:
                return await do()
            except self._supported_errors as error:
                if is_retryable and not is_retryable(error):
                    raise
                if isinstance(error, AuthenticationError):
                    raise  # (a ConnectionError to redis-py: wrong credentials stay wrong)
                failures += 1
                if deadline is not None:
                    deadline.last_error = error
                await (fail(error, failures) if with_failure_count else fail(error))
                pause = self._backoff.compute(failures)
                if not self._again(failures, pause, deadline, loop.time(), error):
                    raise error
                if pause > 0:
                    await asyncio.sleep(pause)

    def _again(
        self, failures: int, pause: float, deadline: Deadline | None, now: float, error: Exception
    ) -> bool:
        """Whether to try once more after ``failures`` failures and a ``pause``. A call
        that may have run (its reply came across a failover: ``Unconfirmed``) goes again
        only if it is patient: aioqueue's own calls, made safe to send twice."""
        if deadline is not None and now + pause >= deadline.at:
            return False
        if deadline is not None and deadline.patient:
            if self.patient_connects or not _cannot_connect(error):
                return True
        elif isinstance(error, Unconfirmed):
            return False
        return self._retries < 0 or failures <= self._retries


def _cannot_connect(error: Exception) -> bool:
    """A connect that failed (refused, unreachable, timed out: redis-py says "...
    connecting to ..."), as opposed to a connection lost or a reply that never came."""
    return "connecting" in str(error)


async def _bounded(
    retry: DeadlineRetry,
    do: Callable[[], Awaitable[T]],
    fail: Callable[..., Any],
    is_retryable: Callable[[Exception], bool] | None,
    with_failure_count: bool,
    deadline: Deadline,
) -> T:
    """``call_with_retry`` as one call of its own, within the policy's default bound."""
    assert retry.default is not None
    token = _DEADLINE.set(deadline)
    try:
        try:
            async with asyncio.timeout_at(deadline.at) as scope:
                return await retry.call_with_retry(do, fail, is_retryable, with_failure_count)
        except TimeoutError:
            if not scope.expired():
                raise
        error = deadline.expired()
        with contextlib.suppress(RedisError, OSError):
            await (fail(error, 1) if with_failure_count else fail(error))  # drop the connection
        raise error
    finally:
        _DEADLINE.reset(token)
