"""Topics (``client/topics``, ``worker/subscriptions``): ``topic_publish.lua``,
``topic_ack.lua``, ``topic_reclaim.lua``, ``topic_extend.lua``. Ordinary redis-py calls,
KEYS and ARGV built by name from each header (``core/keys.TopicKeys`` gives the keys)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from ...core.lifecycle import TopicClaim
from ...core.payload import encode_error
from ..loader import Script
from .replies import text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis

    from ...core.keys import TopicKeys
    from ...core.lifecycle import Settlement

_TOPIC_PUBLISH = Script("topic_publish")
_TOPIC_ACK = Script("topic_ack")
_TOPIC_RECLAIM = Script("topic_reclaim")
_TOPIC_EXTEND = Script("topic_extend")
SCRIPTS = (_TOPIC_PUBLISH, _TOPIC_ACK, _TOPIC_RECLAIM, _TOPIC_EXTEND)
_ACKED = frozenset({"complete", "fail", "abort"})  # topic_ack's plain acknowledgements


async def topic_publish(
    redis: Redis, keys: TopicKeys, bodies: Sequence[bytes], *, max_messages: int
) -> list[str]:
    """Append messages to a topic; their stream ids."""
    args = _TOPIC_PUBLISH.layout.args(max=max_messages, bodies=list(bodies))
    ids = await _TOPIC_PUBLISH(redis, _TOPIC_PUBLISH.layout.keys(keys), args)
    return [text(message_id) for message_id in ids]


async def topic_ack(
    redis: Redis,
    keys: TopicKeys,
    group: str,
    consumer: str,
    batch: Sequence[Settlement],
    attempts: Sequence[int],
    *,
    lease_ms: int,
    dead_max: int,
) -> list[bool]:
    """Settle a subscriber group's messages; True per message settled, False where the
    lease was lost (another worker claimed it)."""
    acked = [s.id for s in batch if s.outcome in _ACKED]
    others = [(s, n) for s, n in zip(batch, attempts, strict=True) if s.outcome not in _ACKED]
    args = _TOPIC_ACK.layout.args(
        group=group,
        consumer=consumer,
        lease_ms=lease_ms,
        dead_max=dead_max,
        processed_channel=keys.processed_channel,
        acked=b" ".join(acked),
        batch=orjson.dumps(
            [[s.id.decode(), s.outcome, _error_of(s), s.delay_ms, n] for s, n in others]
        ),
    )
    codes = await _TOPIC_ACK(redis, _TOPIC_ACK.layout.keys(keys), args)
    if not others:
        return [bool(code) for code in codes]
    # The codes come for the acked ids first, then the others: back in the batch's order.
    by_id = dict(zip([*acked, *(s.id for s, _ in others)], codes, strict=True))
    return [bool(by_id[s.id]) for s in batch]


async def topic_reclaim(
    redis: Redis,
    keys: TopicKeys,
    group: str,
    consumer: str,
    *,
    lease_ms: int,
    count: int,
    cursor: str,
    max_attempts: int,
    dead_max: int,
) -> TopicClaim:
    """Claim messages whose lease ran out (or whose retry is due); dead-letter those past
    their attempts."""
    expired_error = encode_error(
        "LeaseExpired", "lease expired on the last attempt: the worker died or stalled", ""
    )
    args = _TOPIC_RECLAIM.layout.args(
        group=group, consumer=consumer, lease_ms=lease_ms, count=count, cursor=cursor,
        max_attempts=max_attempts, dead_max=dead_max, expired_error=expired_error,
    )  # fmt: skip
    reply = await _TOPIC_RECLAIM(redis, _TOPIC_RECLAIM.layout.keys(keys), args)
    messages = [
        (reply[i], _pairs(reply[i + 1]), int(reply[i + 2])) for i in range(2, len(reply), 3)
    ]
    return TopicClaim(text(reply[0]), int(reply[1]), messages)


async def topic_extend(
    redis: Redis, keys: TopicKeys, group: str, consumer: str, ids: Sequence[bytes]
) -> list[bytes]:
    """Renew the leases of running messages; the ids no longer held."""
    args = _TOPIC_EXTEND.layout.args(group=group, consumer=consumer, ids=list(ids))
    return list(await _TOPIC_EXTEND(redis, _TOPIC_EXTEND.layout.keys(keys), args))


def _error_of(settlement: Settlement) -> str:
    """The error a dead letter keeps (a subscriber's result is not kept)."""
    return settlement.data.decode() if settlement.outcome == "bury" else ""


def _pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    return {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}
