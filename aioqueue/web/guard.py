"""What stands between a POST and an action: the ``authorize`` hook, and a CSRF check.

The CSRF check is a double-submit token: pages set a random token in a cookie
(``SameSite=Strict``, ``HttpOnly``, scoped to the dashboard's path) and repeat it in a
hidden field of every action form; a POST whose field does not match its cookie is
refused. Another site can neither read the token nor make the browser send the cookie.
Nothing is kept on the server, so any number of processes behind one address agree.
Browsers that say a request is cross-site (``Sec-Fetch-Site``) are refused outright.
"""

from __future__ import annotations

import hmac
import inspect
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request

if TYPE_CHECKING:
    from collections.abc import Mapping

    from starlette.responses import Response

Authorize = Callable[[Request], bool | Awaitable[bool]]
"""``authorize(request)``, sync or async: may this request run an action?"""

COOKIE = "aioqueue_csrf"
FIELD = "csrf"
_WELL_FORMED = re.compile(r"[A-Za-z0-9_-]{32}")


def token(request: Request) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (then set it with ``remember``)."""
    current = request.cookies.get(COOKIE, "")
    if _WELL_FORMED.fullmatch(current):
        return current, False
    return secrets.token_urlsafe(24), True


def remember(response: Response, request: Request, value: str, path: str) -> None:
    """Set the token's cookie on a page's response."""
    response.set_cookie(
        COOKIE, value, path=path or "/", httponly=True, samesite="strict",
        secure=request.url.scheme == "https",
    )  # fmt: skip


def forgery(request: Request, form: Mapping[str, list[str]]) -> str | None:
    """Why this POST looks forged, or None if it carries its page's token."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return "a cross-site request"
    cookie = request.cookies.get(COOKIE, "")
    sent = form.get(FIELD, [""])[0]
    if not cookie or not sent or not hmac.compare_digest(cookie.encode(), sent.encode()):
        return "the form's token is missing or stale: reload the page and try again"
    return None


async def authorized(authorize: Authorize | None, request: Request) -> bool:
    """Ask the hook (none: yes); it may be a plain function or a coroutine function."""
    if authorize is None:
        return True
    verdict = authorize(request)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return bool(verdict)
