"""The state of a queue consumer's fetch loop: what its take calls reported (``TakeState``),
and from it the loop's next step (``Step``).

Take calls run concurrently (the fetch loop pipelines them, and the promoter's take goes
through the same consumer), so each reports back here, through a named transition, and
the loop reads one step at a time: take; let the other takes come back; wait while the
queue's limits hold jobs back; pause after a failed take; or, once the queue ran dry,
wait for work. The loop decides what each step does (``consumer``); this module decides
which comes next.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.lifecycle import TakeResult


class Step(Enum):
    """What the fetch loop does next."""

    TAKE = "take"  # reserve room in the slots and send a take
    AWAIT = "await"  # a take reported one of the below: let the other takes come back first
    HELD = "held"  # the queue's limits hold jobs back: wait until one may start
    FAILED = "failed"  # a take failed: pause, then take again
    DRY = "dry"  # a take came back short: wait for work (burst mode: end once drained)


@dataclass(slots=True)
class TakeState:
    """What the fetch loop's take calls reported, changed only by the transitions below;
    ``step`` reads what the loop does next."""

    out: int = 0  # take calls in flight (the fetch loop's and the promoter's)
    # One take at a time until one comes back full: a worker woken for one job sends one
    # call, not consumer.TAKES_IN_FLIGHT (the extra calls would only delay that job).
    probing: bool = True
    failed: bool = False  # a take failed
    held: TakeResult | None = None  # a take the queue's limits held back
    dry_since: int | None = None  # a take came back short: the acks landed at its send
    # The wait consumed a notify token: the fetch loop's next take says so (unless a take
    # comes back short or fails first: the loop then waits anew, or pauses).
    woken: bool = False

    def step(self) -> Step:
        if self.held is None and self.dry_since is None and not self.failed:
            return Step.TAKE
        if self.out:
            return Step.AWAIT
        if self.held is not None:
            return Step.HELD
        return Step.FAILED if self.failed else Step.DRY

    def sent(self) -> None:
        self.out += 1

    def spend_wake(self) -> bool:
        """The fetch loop sends a take: whether it reports the consumed notify token."""
        woken, self.woken = self.woken, False
        return woken

    def take_failed(self) -> None:
        self.out -= 1
        self.failed, self.woken = True, False

    def took(
        self, result: TakeResult, asked: int, landed_before: int, *, woken: bool = False
    ) -> None:
        """A take of ``asked`` jobs came back, sent when ``landed_before`` acks had landed
        (``woken``: it reported the consumed notify token)."""
        self.out -= 1
        if result.held:  # the queue's limits keep the rest in ready for now
            self.held, self.probing = result, True
            # Held back with nothing taken, it popped nothing: the job that token announced
            # is still ready, so the take after the hold reports the token instead.
            self.woken = self.woken or (woken and not result.jobs)
        elif len(result.jobs) == asked:
            self.probing = False  # the queue has more: pipeline the takes
        else:
            self.woken = False
            if self.dry_since is None or landed_before < self.dry_since:
                self.dry_since = landed_before

    def end_hold(self) -> TakeResult:
        held, self.held = self.held, None
        assert held is not None
        return held

    def end_failure(self) -> None:
        """Paused after the failure: take again (a short take meanwhile is forgotten)."""
        self.failed, self.dry_since = False, None

    def end_dry_spell(self) -> int:
        """The loop waits for work now; the acks landed when the queue was found dry."""
        landed_before, self.dry_since, self.woken = self.dry_since or 0, None, False
        return landed_before

    def woke(self, woken: bool) -> None:
        """The wait ended (``woken``: it consumed a notify token): probe again. A take that
        came back short meanwhile (the promoter's) said the queue was dry before this
        wake-up: the next take decides anew. (Left set, it sent the loop back to wait
        with the token spent and the job it announced still ready.)"""
        self.probing, self.dry_since = True, None
        self.woken = woken and not self.failed  # (after a failure the loop pauses first)
