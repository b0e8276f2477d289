"""What an enqueue call becomes: per-call options, kept apart from the task's arguments,
and the checks and encoding that turn a call into a job for Redis (or raise, writing
nothing)."""

from __future__ import annotations

import math
import os
import time
from binascii import b2a_base64
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..core.errors import ConfigError
from ..core.handlers import Handler, check_call, check_carried
from ..core.ids import GENERATED_ID_ALPHABET
from ..core.lifecycle import NewJob
from ..core.limits import check_tenant
from ..core.payload import encode_payload
from ..core.priorities import DEFAULT_PRIORITY, resolve_priority
from ..core.settings import check_timeout

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


RESERVED_ID_PREFIXES = ("poison-", "periodic:", "debounce:")
"""Ids aioqueue mints start so (buried foreign entries, periodic ticks): a caller's may not."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Per-call options. They never share a namespace with the task's own arguments.

    Checked when made, so a bad option raises where it is written: ``id`` is a non-empty
    str not starting with a reserved prefix, ``timeout`` positive (the same rule as the
    task's), ``max_attempts`` at least 1, ``priority`` 0..9 or a name, ``delay`` from 0
    to MAX_DELAY (seconds or a timedelta) or ``at`` an aware datetime at most that far
    ahead (not both), ``expires`` positive, ``debounce`` positive, at most MAX_DELAY and
    only with an ``id`` (its key) and no ``delay`` or ``at`` (the window is the delay),
    ``group`` a non-empty str of at most 200 characters, ``tenant`` a str of 1-200 bytes,
    not only whitespace (neither with ``debounce``).
    """

    id: str | None = None
    priority: int | str | None = None
    delay: float | timedelta | None = None
    at: datetime | None = None
    timeout: float | None = None
    max_attempts: int | None = None
    replicas: int | None = None  # None: the App's ``replicas``
    expires: float | timedelta | None = None  # not started this long after due: it expires
    debounce: float | timedelta | None = None  # one run, this long after the last call
    group: str | None = None  # jobs of one group run one at a time, in enqueue order
    tenant: str | None = None  # tenants with ready jobs are served in turn (include/fair.lua)

    def __post_init__(self) -> None:
        if self.id is not None:
            check_job_id(self.id)
        if self.replicas is not None and (
            isinstance(self.replicas, bool)
            or not isinstance(self.replicas, int)
            or self.replicas < 0
        ):
            raise ConfigError("options: replicas must be an int >= 0")
        check_timeout(self.timeout, "options")
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise ConfigError("options: max_attempts must be an int of at least 1")
        if self.priority is not None:
            resolve_priority(self.priority)
        self.expires_ms()  # (each checks its option)
        self.delay_ms()
        self.due_ms()
        self.debounce_ms()
        if self.group is not None:
            check_group(self.group)
            if self.debounce is not None:
                raise ConfigError("options: a debounced call cannot have a group")
        if self.tenant is not None:
            check_tenant(self.tenant)
            if self.debounce is not None:
                raise ConfigError("options: a debounced call cannot have a tenant")

    @property
    def linked(self) -> bool:
        """Written by enqueue_linked.lua (a group or a tenant), not the enqueue batcher."""
        return self.group is not None or self.tenant is not None

    def debounce_ms(self) -> int | None:
        if self.debounce is None:
            return None
        window_ms = _span_ms("debounce", self.debounce, positive=True)
        if self.id is None:
            raise ConfigError("options: debounce needs an id (the calls to collapse share it)")
        if self.delay is not None or self.at is not None:
            raise ConfigError("options: debounce is the delay: leave out delay and at")
        return window_ms

    def expires_ms(self) -> int | None:
        if self.expires is None:
            return None
        return _span_ms("expires", self.expires, positive=True, bounded=False)

    def due_ms(self) -> int:
        """``at`` in epoch ms (0: none); ConfigError unless it is an aware datetime at most
        MAX_DELAY ahead, or given with a delay."""
        if self.at is None:
            return 0
        if not isinstance(self.at, datetime):
            raise ConfigError(f"options: at must be a datetime, not {_shown(self.at)}")
        if self.at.tzinfo is None:
            raise ConfigError("at= needs an aware datetime (with tzinfo), e.g. datetime.now(UTC)")
        if self.delay is not None:
            raise ConfigError("options: give delay or at, not both (the job runs once)")
        due_ms = int(self.at.timestamp() * 1000)
        if due_ms - time.time() * 1000 > MAX_DELAY.total_seconds() * 1000:
            raise ConfigError(
                f"options: at={self.at.isoformat()} is more than {_MAX_DELAY_TEXT} ahead"
            )
        return due_ms

    def delay_ms(self) -> int:
        """``delay`` in ms (0: none); ConfigError unless it is a finite number of seconds
        (or a timedelta) from 0 to MAX_DELAY."""
        return 0 if self.delay is None else _span_ms("delay", self.delay)


MAX_DELAY = timedelta(days=3653)
"""The furthest a job may be scheduled (``delay``, ``at``, ``debounce``): ten years. A
millisecond or second timestamp passed as a delay is refused, not scheduled for 33715."""
_MAX_DELAY_TEXT = f"ten years ({MAX_DELAY.total_seconds():,.0f} s)"


def _span_ms(option: str, value: object, *, positive: bool = False, bounded: bool = True) -> int:
    """A span of time in ms, from seconds (an int or a float) or a timedelta: finite, not
    negative (with ``positive``, above 0), and (``bounded``) at most MAX_DELAY; else
    ConfigError naming the option."""
    seconds = _seconds(value)
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        rule = (
            "must be positive: a finite number"
            if positive
            else "must be a finite number (0 or more)"
        )
        raise ConfigError(
            f"options: {option} {rule} of seconds or a timedelta, not {_shown(value)}"
        )
    if bounded and seconds > MAX_DELAY.total_seconds():
        raise ConfigError(
            f"options: {option}={value!r} is over {_MAX_DELAY_TEXT}: a timestamp? For a "
            "moment in time, pass at=datetime(...)"
        )
    return max(1, round(seconds * 1000)) if positive else round(seconds * 1000)


def _shown(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


NO_OPTIONS = JobOptions()  # shared by every call that sets none (it is frozen)


def _seconds(value: object) -> float:
    """Seconds from a number or a timedelta; NaN (never positive) for anything else."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return math.nan
    return float(seconds)


_TO_ID_ALPHABET = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", GENERATED_ID_ALPHABET
)


def new_job_id() -> str:
    """A new job id: 20 characters, the millisecond (Unix epoch, 48 bits) then 72 random
    bits, in base64 with an alphabet in ASCII order (``0-9A-Z_a-z~``): ids sort by when
    they were made, and those made in one millisecond share a done set (keys.done_slot).
    Shorter than a UUID's 36 characters, which every queued job carries in its key and its
    ready entry, at the same cost to make (~0.7 µs)."""
    stamp = (time.time_ns() // 1_000_000).to_bytes(6, "big")
    return b2a_base64(stamp + os.urandom(9), newline=False).translate(_TO_ID_ALPHABET).decode()


def check_group(group: str) -> None:
    """A group is any non-empty str of at most 200 characters (it ends a key's name)."""
    if not isinstance(group, str) or not group or len(group) > 200:
        raise ConfigError(
            f"options: group must be a non-empty str of at most 200 characters, not {group!r}"
        )


def check_job_id(job_id: str) -> None:
    """Reject ids that cannot be a caller's: not a str, empty, or in a reserved namespace."""
    if not isinstance(job_id, str):
        raise ConfigError(f"id must be a str, got {type(job_id).__name__}")
    if not job_id:
        raise ConfigError("id must not be empty (leave it out for a generated id)")
    if job_id.startswith(RESERVED_ID_PREFIXES):
        reserved = " or ".join(repr(prefix) for prefix in RESERVED_ID_PREFIXES)
        raise ConfigError(f"id {job_id!r}: ids starting with {reserved} are minted by aioqueue")


def prepare(
    task: Handler[..., Any] | str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    options: JobOptions,
    *,
    find_task: Callable[[str], Handler[..., Any] | None],
    max_payload_bytes: int,
    headers: Mapping[str, str] | None = None,
    replicas: int = 0,
    inputs: str | None = None,
) -> NewJob:
    """Check and encode one job; raise (writing nothing) on bad input. A task given by
    name is checked too when this app knows it. ``inputs``: the job is a workflow's
    parent, run with its children's outcomes as a first argument (``payload.INPUTS``)."""
    known: Handler[..., Any] | None
    if isinstance(task, Handler):
        name, known = task.name, task
    else:
        name, known = task, find_task(task)
    skip = 0 if inputs is None else 1  # (a workflow parent's first argument: its inputs)
    check_call(name, known, args, kwargs, skip=skip)
    payload = encode_payload(
        name,
        args,
        kwargs,
        options.timeout,
        max_payload_bytes,
        headers,
        options.expires_ms(),
        inputs,
    )
    check_carried(payload, name, known, args, kwargs, skip=skip)
    fresh = options.id is None
    job_id = new_job_id() if options.id is None else options.id
    if options is NO_OPTIONS:  # most enqueues: the task's defaults, nothing to resolve
        if known is None:
            return NewJob(job_id, payload, DEFAULT_PRIORITY, fresh=fresh, replicas=replicas)
        max_attempts = known.options.max_attempts
        return NewJob(job_id, payload, known.priority, max_attempts, fresh=fresh, replicas=replicas)
    default_priority = known.priority if known else DEFAULT_PRIORITY
    priority = default_priority if options.priority is None else resolve_priority(options.priority)
    max_attempts = options.max_attempts or (known.options.max_attempts if known else 0)
    delay_ms, due_ms = options.delay_ms(), options.due_ms()
    if options.replicas is not None:
        replicas = options.replicas
    return NewJob(job_id, payload, priority, max_attempts, delay_ms, due_ms, fresh, replicas)
