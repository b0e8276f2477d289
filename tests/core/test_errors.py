"""Error messages read as sentences, for one job and for many."""

from __future__ import annotations

from aioqueue import EnqueueUnconfirmed


def test_an_unconfirmed_enqueue_says_how_many_and_what_to_retry() -> None:
    one = EnqueueUnconfirmed(["j1"], ConnectionError("gone"))
    assert str(one).startswith("could not confirm that job j1 was enqueued (")
    assert str(one).endswith("retry with .options(id='j1')")
    many = EnqueueUnconfirmed([f"j{n}" for n in range(1_000_000)], ConnectionError("gone"))
    assert str(many).startswith("could not confirm that 1,000,000 jobs were enqueued (")
    assert str(many).endswith("retry with .options(id='j0') (and so on)")
