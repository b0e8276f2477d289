"""The chat example, against the suite's server and once on its own (embedded server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aioqueue
from aioqueue.store.embedded import EmbeddedServer
from examples import chat

ROOT = Path(__file__).resolve().parents[1]


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


def test_the_chat_example_runs_on_its_own_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIOQUEUE_REDIS_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "examples.chat"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"AIOQUEUE_REDIS_URL is not set: started a private {EmbeddedServer().name} at" in out
    assert "    carol  {'general': 3, 'random': 1}" in out
    assert "(#general [1, 2, 3] again: read at least once, never lost)" in out
    assert "carol leaves #random without reading it; kept in #random: 0" in out
    assert "carol's inbox: ['alice: can you run standup?']; kept after her ack: 0" in out
    assert "everyone has read everything; kept: {'general': 0, 'random': 0}" in out
