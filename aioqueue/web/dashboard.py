"""The dashboard's Starlette app: routes, rendering, actions and error pages.

Links are built from the dashboard's own router and the ``root_path`` of the request
(which a ``Mount`` and ``uvicorn --root-path`` set), so they point inside the dashboard
wherever it is mounted, whatever the routes of the app around it are named.
"""

from __future__ import annotations

import time
import urllib.parse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..core import __version__
from ..core.errors import ServerRefused, ServerUnavailable
from . import guard, views
from .formatting import FILTERS, relative

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from starlette.requests import Request

    from ..app import App
    from ..client.queue import Queue
    from .guard import Authorize

HERE = Path(__file__).parent
PAGE_SIZE = 25
MAX_FORM_BYTES = 256 * 1024
BULK_BATCH = 1000  # dead jobs per script call of "requeue all" / "purge all"
ACTIONS = (
    "cancel", "requeue", "purge", "requeue-all", "purge-all", "pause", "resume", "run-now",
)  # fmt: skip
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


def create_dashboard(
    app: App,
    *,
    queues: Sequence[str] | None = None,
    actions: bool = False,
    authorize: Authorize | None = None,
    title: str = "aioqueue",
) -> Starlette:
    """The dashboard of ``app`` as an ASGI app: mount it (``Mount("/queues", ...)``) in
    a Starlette or FastAPI app, or run it alone (``aioqueue.web.serve``).

    ``queues``: the queues shown (default: ``app.queue_names()``, read on each request).
    ``actions``: show the buttons that cancel, requeue and purge jobs, and accept their
    POSTs (off by default: a read-only dashboard answers them 403). ``authorize``: called
    with the request before every action, plain or async; False refuses it (403). Pages
    themselves are not guarded: put the dashboard behind your app's authentication.
    """
    if queues is not None:
        for name in queues:
            app.queue(name)  # raises ConfigError for a name no queue can have
    return _Dashboard(app, queues, actions, authorize, title).web


class _Dashboard:
    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None,
        actions: bool,
        authorize: Authorize | None,
        title: str,
    ) -> None:
        self.app = app
        self.queues = None if queues is None else tuple(queues)
        self.actions = actions
        self.authorize = authorize
        self.title = title
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # job arguments, results and errors are user data
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(FILTERS)
        self.web = Starlette(
            routes=[
                Route("/", self.overview_page, name="overview"),
                Route("/queue/{queue:path}", self.queue_page, name="queue"),
                Route("/job", self.job_page, name="job"),
                Route("/search", self.search_page, name="search"),
                Route("/periodic", self.periodic_page, name="periodic"),
                Route("/actions/{action}", self.action, methods=["POST"], name="action"),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
            ],
            exception_handlers={
                ServerUnavailable: self.unavailable,
                ServerRefused: self.unavailable,
            },
        )

    def names(self) -> tuple[str, ...]:
        return self.queues if self.queues is not None else tuple(self.app.queue_names())

    def queue(self, name: str | None) -> Queue | None:
        """The queue of this name if the dashboard shows it (else None: a 404)."""
        return self.app.queue(name) if name is not None and name in self.names() else None

    # -- links and rendering ---------------------------------------------------------------

    def link(
        self, request: Request, name: str, query: Mapping[str, Any] | None = None, **params: str
    ) -> str:
        """A path inside the dashboard, with the path parameters and query encoded."""
        quoted = {key: urllib.parse.quote(value, safe="") for key, value in params.items()}
        path = self.root(request) + str(self.web.router.url_path_for(name, **quoted))
        shown = {key: value for key, value in (query or {}).items() if value is not None}
        return f"{path}?{urllib.parse.urlencode(shown)}" if shown else path

    def root(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def static(self, request: Request, path: str) -> str:
        route = str(self.web.router.url_path_for("static", path=path))
        return f"{self.root(request)}{route}?v={__version__}"

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        fragment: str | None = None,
        status: int = 200,
        now_ms: int | None = None,
    ) -> HTMLResponse:
        """A page (or, for the live refresh's ``?partial=1``, its fragment); ``now_ms``:
        the instant its rows were computed for, so that a "next run" never reads "ago"."""
        if fragment is not None and request.query_params.get("partial") == "1":
            template = fragment
        token, new_token = guard.token(request)
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        html = self.env.get_template(template).render(
            request=request,
            title=self.title,
            section=template.strip("_").removesuffix(".html"),
            version=__version__,
            actions=self.actions,
            csrf_field=guard.FIELD,
            csrf_token=token,
            now_ms=now_ms,
            relative=partial(relative, now_ms=now_ms),
            link=partial(self.link, request),
            static=partial(self.static, request),
            **context,
        )
        response = HTMLResponse(html, status_code=status, headers=HEADERS)
        if self.actions and new_token:
            guard.remember(response, request, token, self.root(request) or "/")
        return response

    def error(self, request: Request, status: int, heading: str, message: str) -> HTMLResponse:
        fragment = "_error.html" if request.query_params.get("partial") == "1" else "error.html"
        retry = status == 503 and request.method == "GET"  # the page polls until Redis is back
        context = {"status": status, "heading": heading, "message": message, "retry": retry}
        return self.render(request, fragment, context, status=status)

    def no_queue(self, request: Request, name: str | None) -> HTMLResponse:
        return self.error(request, 404, "No such queue", f"this dashboard shows no queue {name!r}")

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        """Redis is down, or refused us: say so on a page, not in a traceback."""
        refused = isinstance(exc, ServerRefused)
        heading = "Redis refused the request" if refused else "Redis is not available"
        return self.error(request, 503, heading, str(exc))

    # -- pages -----------------------------------------------------------------------------

    async def overview_page(self, request: Request) -> Response:
        names = self.names()
        data = await views.overview(self.app, names)
        return self.render(request, "overview.html", {"data": data}, fragment="_overview.html")

    async def queue_page(self, request: Request) -> Response:
        name = request.path_params["queue"]
        queue = self.queue(name)
        if queue is None:
            return self.no_queue(request, name)
        state = request.query_params.get("state", "ready")
        if state not in views.STATES:
            return self.error(request, 400, "No such list", f"no job state {state!r}")
        page = _page_number(request.query_params.get("page"))
        task = request.query_params.get("task") or None
        tasks = sorted(task for task, t in self.app.tasks.items() if t.options.queue == name)
        data = await views.listing(queue, state, page, PAGE_SIZE, task=task, tasks=tasks)
        context = {"listing": data, "notice": _notice(request)}
        return self.render(request, "queue.html", context, fragment="_queue.html")

    async def job_page(self, request: Request) -> Response:
        name, job_id = request.query_params.get("queue"), request.query_params.get("id", "")
        queue = self.queue(name)
        if queue is None:
            return self.no_queue(request, name)
        info = await queue.info(job_id) if job_id else None
        if info is None:
            message = f"no job {job_id!r} in {queue.name} (never enqueued, or its record expired)"
            return self.error(request, 404, "No such job", message)
        context = {"queue": queue.name, "job": info, "notice": _notice(request)}
        return self.render(request, "job.html", context, fragment="_job.html")

    async def search_page(self, request: Request) -> Response:
        """A job by its id (straight to it when it is the one thing found), or a task by
        a part of its name (links to its jobs in each list)."""
        query = request.query_params.get("q", "").strip()
        found = await views.search(self.app, self.names(), query) if query else None
        if found is not None and len(found.jobs) == 1 and not found.tasks:
            [job] = found.jobs
            return RedirectResponse(
                self.link(request, "job", {"queue": job.queue, "id": job.id}), 303
            )
        context = {"found": found, "query": query, "states": views.STATES}
        return self.render(request, "search.html", context)

    async def periodic_page(self, request: Request) -> Response:
        now_ms, names = int(time.time() * 1000), self.names()
        rows = await views.periodic(self.app, names, now_ms)
        context = {"rows": rows}
        return self.render(
            request, "periodic.html", context, fragment="_periodic.html", now_ms=now_ms
        )

    # -- actions ---------------------------------------------------------------------------

    async def action(self, request: Request) -> Response:
        """Cancel, requeue or purge jobs, or pause or resume a queue, then go back to the
        page the form was on."""
        if not self.actions:
            return self.error(request, 403, "Actions are off", "this dashboard is read-only")
        if not await guard.authorized(self.authorize, request):
            return self.error(request, 403, "Not allowed", "you may not change jobs here")
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return self.error(request, 413, "Form too large", "select fewer jobs at once")
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"), max_num_fields=2000)
        forged = guard.forgery(request, form)
        if forged is not None:
            return self.error(request, 403, "Refused", f"refused {forged}")
        queue = self.queue(_first(form, "queue"))
        action = request.path_params["action"]
        if queue is None or action not in ACTIONS:
            return self.error(request, 404, "No such action", "unknown queue or action")
        ids = form.get("id", [])
        done = await _act(queue, action, ids)
        return RedirectResponse(self._back(request, queue, action, ids, form, done), 303)

    def _back(
        self,
        request: Request,
        queue: Queue,
        action: str,
        ids: Sequence[str],
        form: Mapping[str, list[str]],
        done: int,
    ) -> str:
        notice = {"done": action, "n": done}
        if _first(form, "back") == "job" and ids and action != "purge":
            return self.link(request, "job", {"queue": queue.name, "id": ids[0], **notice})
        state = _first(form, "state")
        query = {
            "state": state if state in views.STATES else None,
            "task": _first(form, "task") or None,
            "page": _page_number(_first(form, "page")),
            **notice,
        }
        return self.link(request, "queue", query, queue=queue.name)


async def _act(queue: Queue, action: str, ids: Sequence[str]) -> int:
    """Run one action; how many jobs it changed (pause, resume: 1 if the queue changed)."""
    if action in ("pause", "resume"):
        return int(await (queue.pause() if action == "pause" else queue.resume()))
    if action == "cancel":
        return sum([await queue.cancel(job_id) for job_id in ids])
    if action == "requeue":
        return await queue.requeue_dead(ids) if ids else 0
    if action == "purge":
        return await queue.purge_dead(ids) if ids else 0
    if action == "run-now":  # a scheduled (or retrying) job, due now
        return sum([await queue.reschedule(job_id, delay=0) for job_id in ids])
    bulk = queue.requeue_dead if action == "requeue-all" else queue.purge_dead
    remaining, done = (await queue.counts()).dead, 0
    while remaining > 0:  # in batches, up to what was dead when asked: never endless
        n = await bulk(limit=min(BULK_BATCH, remaining))
        if n == 0:
            break
        done, remaining = done + n, remaining - n
    return done


def _first(form: Mapping[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


def _page_number(raw: str | None) -> int:
    try:
        return max(1, int(raw or 1))
    except ValueError:
        return 1


def _notice(request: Request) -> dict[str, Any] | None:
    """What the action that led here did (``?done=requeue&n=3``), for the banner."""
    done = request.query_params.get("done")
    if done not in ACTIONS:
        return None
    try:
        n = max(0, int(request.query_params.get("n", "0")))
    except ValueError:
        n = 0
    return {"action": done, "n": n}
