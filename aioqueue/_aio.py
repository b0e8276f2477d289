"""Small asyncio helpers shared by the worker's loops."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for ``event`` at most ``seconds``; True if it was set."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True
