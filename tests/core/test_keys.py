"""Key layout: every key of one queue sits in one Cluster slot; bad names are refused.

Pure: no Redis needed. ``redis.crc.key_slot`` is redis-py's own CRC16 slot function.
"""

from __future__ import annotations

from typing import get_args

import pytest
from redis.crc import key_slot

import aioqueue
from aioqueue.core.keys import PRIORITY_LEVELS, QueueKeys, TenantRole, validate_name


def every_key(keys: QueueKeys) -> list[str]:
    """Every key role, found by introspection so that a new role cannot be forgotten here."""
    properties = [
        getattr(keys, name)
        for name, attr in vars(QueueKeys).items()
        if isinstance(attr, property) and name != "job_prefix"
    ]
    assert len(properties) >= 6, "introspection found too few key properties"
    return [
        *properties,
        *keys.ready_lists(),
        keys.ready(0),
        keys.ready(PRIORITY_LEVELS - 1),
        keys.job("0f8e-uuid"),
        keys.job("poison-17"),
        keys.job("{another}:id"),  # braces in an id cannot move the key: the first tag wins
        keys.job_prefix + "built-in-lua",  # how the scripts reach a record
        keys.job_prefix + "poison-1",
        keys.wake("host:1234:abcd"),
        keys.wake("w{x}"),
        keys.schedule_wake,
        *(keys.tenant_key(role) for role in get_args(TenantRole)),
        keys.tenant_key("ring", 9),
        keys.tenant_key("jobs", 5, "{acme}:eu"),  # a tenant's name cannot move it either
        keys.tenant_key("rate", "ü" * 100),
    ]


@pytest.mark.parametrize(
    ("prefix", "queue"),
    [
        ("aioqueue", "default"),
        ("t0123abc", "q"),
        ("app:v2", "emails.high-priority_1"),  # a prefix may hold colons; only the tag matters
        ("aioqueue", "ünïcödé"),
        ("p", "x" * 200),
    ],
)
def test_every_key_of_a_queue_shares_one_slot(prefix: str, queue: str) -> None:
    keys = QueueKeys.for_queue(prefix, queue)
    all_keys = every_key(keys)
    slots = {key_slot(key.encode()) for key in all_keys}
    assert slots == {key_slot(queue.encode())}, "all keys must hash by the {queue} tag alone"
    base = f"{prefix}:{{{queue}}}:"
    assert all(key.startswith(base) for key in all_keys)


def test_roles_do_not_collide() -> None:
    keys = QueueKeys.for_queue("aioqueue", "q")
    fixed = [
        keys.notify,
        keys.schedule,
        keys.schedule_wake,
        keys.active,
        keys.dead,
        keys.seq,
        *keys.ready_lists(),
    ]
    assert len(set(fixed)) == len(fixed)
    assert len(keys.ready_lists()) == PRIORITY_LEVELS
    assert keys.ready_lists() == [keys.ready(p) for p in range(PRIORITY_LEVELS)]
    assert keys.job("abc") == keys.job_prefix + "abc"
    assert keys.job("abc") not in fixed


def test_queues_with_one_prefix_get_distinct_keys() -> None:
    a = QueueKeys.for_queue("aioqueue", "a")
    b = QueueKeys.for_queue("aioqueue", "b")
    assert set(every_key(a)).isdisjoint(every_key(b))


@pytest.mark.parametrize(
    "name",
    ["", "{", "}", "a{b", "a}b", "{q}", ":", "a:b", " ", "a b", "a\tb", "a\nb", "x" * 201],
    ids=repr,
)
def test_bad_queue_names_raise_config_error(name: str) -> None:
    with pytest.raises(aioqueue.ConfigError):
        QueueKeys.for_queue("aioqueue", name)
    with pytest.raises(aioqueue.ConfigError):
        validate_name("queue", name)


def test_longest_allowed_name_is_200_characters() -> None:
    assert QueueKeys.for_queue("aioqueue", "x" * 200).name == "x" * 200


@pytest.mark.parametrize("bad", ["", "{", "}", "a{b}", "a b", "a\tb", "a\nb", "a\rb"], ids=repr)
def test_bad_prefixes_raise_config_error(bad: str) -> None:
    with pytest.raises(aioqueue.ConfigError):
        QueueKeys.for_queue(bad, "q")
