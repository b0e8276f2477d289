"""The chat example against the suite's server (``test_examples.py`` runs it once on its
own embedded server)."""

from __future__ import annotations

import aioqueue
from examples import chat


async def test_the_chat_demo(app: aioqueue.App) -> None:
    transcript: list[str] = []

    demo = await chat.run_demo(app, transcript.append)

    # carol joined #random without history: only the message sent after she joined;
    # alice was caught up whenever she sent, so her own messages are not unread to her
    assert demo.unread == {
        "alice": {"general": 2, "random": 0},
        "bob": {"general": 3},
        "carol": {"general": 3, "random": 1},
    }
    assert demo.crashed == demo.redelivered == [1, 2, 3]  # fetched, not acked: again
    # alice and bob have read: #general waits for carol, #random keeps only what she
    # has not read (the message before she joined went once alice had read it)
    assert demo.sizes_read == {"general": 3, "random": 1}
    assert demo.size_after_leave == 0  # carol left: nobody holds #random's last message
    assert demo.direct == ["alice: can you run standup?"]
    assert demo.inbox_size == 0
    assert demo.sizes_end == {"general": 0, "random": 0}
    assert demo.unread_end == {
        "alice": {"general": 0, "random": 0},
        "bob": {"general": 0},
        "carol": {"general": 0},
    }
    assert "    #general  3  carol: standup in 5" in transcript
    assert (await app.group("random").members()) == {"alice": 2}  # carol has left
