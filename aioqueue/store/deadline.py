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
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio.retry import Retry
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.errors import describe

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from redis.backoff import AbstractBackoff

T = TypeVar("T")
Scope = contextlib.AbstractAsyncContextManager[None]


@dataclass(slots=True)
class Deadline:
    """The deadline of one call, and what its retries saw."""

    at: float  # event loop time
    patient: bool  # retry lost connections until ``at`` (not only a few times)
    seconds: float = 0.0  # as given (for the message)
    setting: str = ""  # the App setting it comes from (for the message)
    last_error: Exception | None = None  # the last a retry saw (for the message)

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


@contextlib.asynccontextmanager
async def keeping(deadline: Deadline | None) -> AsyncIterator[None]:
    """Run the block under ``deadline`` (one taken from a call earlier: see
    ``current``), or under none."""
    outer = _DEADLINE.get()
    if deadline is None or (outer is not None and outer.at <= deadline.at):
        yield  # none, or the enclosing call's deadline comes first
        return
    token = _DEADLINE.set(deadline)
    try:
        async with asyncio.timeout_at(deadline.at) as scope:
            yield
    except TimeoutError:
        if not scope.expired():  # someone else's timeout, raised through this block
            raise
        raise deadline.expired() from None
    finally:
        _DEADLINE.reset(token)


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
            deadline = Deadline(loop.time() + self.default, False, self.default)
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
