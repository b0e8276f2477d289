"""The fetch loop's state (units): what the take calls report decides the loop's next step,
and a consumed notify token is reported by the next take unless the loop waits anew."""

from __future__ import annotations

from aioqueue.core.lifecycle import HELD_BY_CONCURRENCY, Promoted, Taken, TakeResult
from aioqueue.worker.takes import Step, TakeState


def result(jobs: int, held: int = 0) -> TakeResult:
    taken = [Taken(str(n).encode(), b"{}", 1, 1, "w:1") for n in range(jobs)]
    return TakeResult(taken, Promoted(0, None, 0), held)


def test_a_short_take_means_dry_once_the_other_takes_are_back() -> None:
    state = TakeState()
    assert state.step() is Step.TAKE
    state.sent()
    state.sent()
    state.took(result(10), asked=10, landed_before=3)  # full: pipeline the takes
    assert (state.step(), state.probing) == (Step.TAKE, False)
    state.sent()
    state.took(result(2), asked=10, landed_before=5)
    assert state.step() is Step.AWAIT
    state.took(result(1), asked=10, landed_before=4)  # the earlier send is kept
    assert state.step() is Step.DRY
    assert state.end_dry_spell() == 4
    state.woke(True)
    assert (state.step(), state.probing) == (Step.TAKE, True)
    assert state.spend_wake() is True
    assert state.spend_wake() is False  # one take reports the token


def test_a_hold_comes_first_then_the_failure_pause() -> None:
    state = TakeState()
    state.sent()
    state.sent()
    state.take_failed()
    state.took(result(1, held=HELD_BY_CONCURRENCY), asked=4, landed_before=0)
    assert state.step() is Step.HELD
    assert state.end_hold().held == HELD_BY_CONCURRENCY
    assert state.step() is Step.FAILED
    state.end_failure()
    assert state.step() is Step.TAKE


def test_a_consumed_token_is_dropped_when_a_take_fails_or_comes_back_short_first() -> None:
    state = TakeState()
    state.woke(True)
    state.sent()  # the promoter's take, before the fetch loop's
    state.took(result(0), asked=5, landed_before=0)
    assert state.step() is Step.DRY and not state.spend_wake()  # the loop waits anew
    state.end_dry_spell()
    state.sent()
    state.take_failed()  # the promoter's take fails while the loop waits
    state.woke(True)
    assert state.step() is Step.FAILED and not state.spend_wake()  # it pauses first


def test_a_token_spent_on_a_held_take_is_reported_by_the_next_take() -> None:
    """The take that reported the consumed notify token was held back by the queue's limits
    and took nothing: the take after the hold reports it, or the job it announced would
    have its token trimmed twice (one other job's token lost)."""
    state = TakeState()
    state.woke(True)
    state.sent()
    woken = state.spend_wake()
    state.took(result(0, held=123), asked=5, landed_before=0, woken=woken)
    assert state.step() is Step.HELD
    state.end_hold()
    assert state.step() is Step.TAKE
    assert state.spend_wake() is True
    state.sent()
    state.took(result(1, held=456), asked=5, landed_before=0, woken=True)  # took one: spent
    state.end_hold()
    assert state.spend_wake() is False
