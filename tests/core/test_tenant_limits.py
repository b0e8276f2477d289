"""Tenants' names, weights and limits: checked before anything is written, and read back
as the take script reads them. Pure."""

from __future__ import annotations

from typing import Any

import pytest

import aioqueue
from aioqueue.core.limits import (
    TenantLimits,
    check_tenant,
    check_weights,
    make_tenant_limits,
)


@pytest.mark.parametrize("tenant", ["a", "acme corp", "x" * 200, "ü" * 100, "{tag}:with:colons"])
def test_good_tenants(tenant: str) -> None:
    assert check_tenant(tenant) == tenant


@pytest.mark.parametrize("tenant", ["", " ", "\n\t", "x" * 201, "ü" * 101, None, b"a", 1])
def test_bad_tenants_raise_one_line(tenant: Any) -> None:
    with pytest.raises(aioqueue.ConfigError) as caught:
        check_tenant(tenant)
    assert "\n" not in str(caught.value)


def test_weights_are_ints_from_1_to_1000() -> None:
    assert check_weights({"a": 1, "b": 1000}) == {"a": 1, "b": 1000}
    for weight in (0, -1, 1001, 2.0, True, None):
        with pytest.raises(aioqueue.ConfigError, match="weight of tenant 'a'"):
            check_weights({"a": weight})  # type: ignore[dict-item]
    with pytest.raises(aioqueue.ConfigError, match="map tenants"):
        check_weights([("a", 2)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        (TenantLimits(), None),
        (TenantLimits(max_running=3), "3 0 1"),
        (TenantLimits(interval_ms=100.0, burst=5), "0 100000 5"),
        (TenantLimits(2, 0.0005, 1), "2 1 1"),  # (at least a microsecond)
    ],
)
def test_limits_are_stored_as_take_reads_them(limits: TenantLimits, field: str | None) -> None:
    assert limits.to_field() == field
    if field is not None and limits.interval_ms != 0.0005:
        assert TenantLimits.from_field(field.encode()) == limits


@pytest.mark.parametrize("raw", [None, b"", b"3", b"a b c", b"1 2", b"-1 0 1"])
def test_a_malformed_field_reads_as_no_limits(raw: bytes | None) -> None:
    assert TenantLimits.from_field(raw) == TenantLimits()


def test_make_tenant_limits() -> None:
    assert make_tenant_limits(max_running=2, rate="10/s", burst=2) == TenantLimits(2, 100.0, 2)
    assert make_tenant_limits().describe() == "no limits"
    with pytest.raises(aioqueue.ConfigError, match="burst is the bursts of a rate"):
        make_tenant_limits(burst=3)
