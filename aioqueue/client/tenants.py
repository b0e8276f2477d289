"""TenantAdmin: steering the fairness between a queue's tenants (``.options(tenant=...)``),
a base class of ``QueueAdmin``: their weights, their limits, and who has jobs ready.

Within a priority, the tenants with ready jobs take turns (``lua/include/fair.lua``, in
``take.lua``, for every worker at once): a turn is as many jobs as the tenant's weight.
A tenant's limits (a cap on its jobs running at once, a rate of starts) hold across every
worker; a tenant they hold waits out of turn, its jobs in order, until a job of it ends
(or is reclaimed) or its rate allows. Changes reach the workers' next takes; a tenant held
back sees them once it is looked at again (a job of it ending, its rate's next start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import ConfigError
from ..core.limits import TenantLimits, check_tenant, check_weights, make_tenant_limits
from ..store import tenants
from .host import clear_errors

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..core.keys import QueueKeys
    from ..core.records import TenantCount
    from .host import QueueHost


class TenantAdmin:
    """The tenants of one queue: weights, limits, and the ones with jobs ready."""

    _host: QueueHost
    keys: QueueKeys

    @clear_errors
    async def set_weights(self, weights: Mapping[str, int]) -> None:
        """Give these tenants a weight: the jobs each gets per turn (an int from 1 to
        1,000; 1 for any tenant not given one): ``set_weights({"acme": 3})`` serves acme
        three jobs for every one of a tenant of weight 1 while both have jobs ready."""
        checked = check_weights(weights)
        await tenants.set_weights(await self._host.client(), self.keys, checked)

    @clear_errors
    async def weights(self) -> dict[str, int]:
        """The weights set (``set_weights``) that are not 1."""
        return await tenants.weights(await self._host.client(), self.keys)

    @clear_errors
    async def set_tenant_limits(
        self,
        tenant: str | None = None,
        *,
        max_running: int | None = None,
        rate: str | None = None,
        burst: int = 1,
    ) -> TenantLimits:
        """Limit a tenant across every worker: at most ``max_running`` of its jobs running
        at once (a dead worker's count until their leases are reclaimed), and starts no
        faster than ``rate`` (``"10/s"``, ``"20/m"``, ...; ``burst`` at once after a quiet
        spell). ``tenant`` None sets the default of every tenant without limits of its
        own (a tenant's own replace the default whole). Replaces the limits set before;
        no limits removes them. Its jobs held back wait in order, out of turn; a tenant
        held back starts again at once if the new limits let it."""
        if tenant is not None:
            check_tenant(tenant)
        limits = make_tenant_limits(max_running=max_running, rate=rate, burst=burst)
        await tenants.set_limits(await self._host.client(), self.keys, tenant, limits)
        return limits

    @clear_errors
    async def tenant_limits(self, tenant: str | None = None) -> TenantLimits:
        """A tenant's limits, its own or else the default (``tenant`` None: the default)."""
        redis = await self._host.client()
        if tenant is not None:
            check_tenant(tenant)
            own = await tenants.limits(redis, self.keys, tenant)
            if own.to_field() is not None:
                return own
        return await tenants.limits(redis, self.keys, None)

    @clear_errors
    async def all_tenant_limits(self) -> dict[str | None, TenantLimits]:
        """Every tenant's own limits, and the default under None."""
        return await tenants.all_limits(await self._host.client(), self.keys)

    @clear_errors
    async def tenants(self, *, limit: int = 100, offset: int = 0) -> list[TenantCount]:
        """The tenants with jobs ready, most first: each one's ready and running jobs, and
        whether its limits hold it back now."""
        if limit < 0 or offset < 0:
            raise ConfigError("limit and offset must not be negative")
        return await tenants.ranked(
            await self._host.client(), self.keys, limit=limit, offset=offset
        )
