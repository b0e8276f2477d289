"""What both sides use, written once as dependency providers: ``web.py`` takes them with
FastAPI's ``Depends``, ``tasks.py`` with aioqueue's. Plain functions and generators, so
neither framework needs to be imported here (a worker image has no FastAPI).

- ``get_settings``: the service's settings, from the environment.
- ``open_renderer``: a client of the (pretend) page renderer, closed after use. The API
  opens one per preview request; a worker opens one when it starts
  (``Depends(open_renderer, scope="worker")``) and closes it when it stops, after its jobs.

(No ``from __future__ import annotations``: FastAPI reads the annotations at run time.)
"""

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

SECONDS_PER_PAGE = 0.2  # how long render_page() pretends to work


@dataclass(frozen=True, slots=True)
class Settings:
    files_url: str  # where finished reports are published


def get_settings() -> Settings:
    """The settings (``REPORTS_FILES_URL``). A plain ``def``: FastAPI and aioqueue both
    run it in a thread, so a provider that reads a file or a vault may block."""
    return Settings(
        files_url=os.environ.get("REPORTS_FILES_URL", "https://files.example.com/reports")
    )


async def render_page(title: str, page: int) -> str:
    """One page of a report: the slow part (a query, a chart, a PDF page) stands here."""
    await asyncio.sleep(SECONDS_PER_PAGE)
    return f"{title}, page {page}: " + " ".join(f"figure-{page}-{n}" for n in range(10 * page))


class Renderer:
    """A client of the renderer (a connection pool to a rendering service, in real life)."""

    def __init__(self) -> None:
        self.closed = False

    async def page(self, title: str, page: int) -> str:
        if self.closed:
            raise RuntimeError("the renderer is closed")
        return await render_page(title, page)

    async def aclose(self) -> None:
        self.closed = True


async def open_renderer() -> AsyncIterator[Renderer]:
    """A renderer, closed however its user ends (the code after ``yield`` runs then)."""
    renderer = Renderer()
    try:
        yield renderer
    finally:
        await renderer.aclose()
