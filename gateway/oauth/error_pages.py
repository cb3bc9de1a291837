"""What ``/authorize`` answers a person in a browser when it refuses a request.

RFC 6749 §4.1.2.1: when the client or its redirect URI cannot be trusted, "the authorization
server SHOULD inform the resource owner of the error and MUST NOT automatically redirect";
the gateway never redirects an error to a client no editor approved
(:class:`gateway.oauth.routes.NoErrorRedirects`), so every refusal is answered to the
browser. :class:`ErrorPages` wraps ``/authorize`` and, for a request that prefers HTML
(:func:`prefers_html`: every browser's ``Accept``), turns the JSON refusal (``error``,
``error_description``) into a small page: the reason in plain words, the error code, what to
do (:func:`advice`). Status and headers stay those of the JSON answer (400; 503 with
``Retry-After``), with the security headers of the review site's pages
(:data:`gateway.core.page_headers.SECURITY_HEADERS`). A request with no ``Accept``, with
``application/json`` or with ``*/*`` gets the JSON answer unchanged. Both carry
``Vary: Accept`` (RFC 9110 §12.5.5). The listener's own refusals at ``/authorize``, before
the app (429 ``unauthenticated-rate-limited``, 413 ``payload-too-large``, 408
``body-too-slow``: :mod:`gateway.remote.address_gate`), are shown with :func:`send_page`.

The page never shows ``state`` (the SDK's direct JSON answer carries it back; it is the
client's value, not the person's) and has no link to the unverified client's redirect URI.
It is rendered by Jinja with autoescaping from ``gateway/templates/oauth_error.html``, the
review site's shell (``page_base.html``), outside Flask: the listener is Starlette.
"""

from __future__ import annotations

import json

import jinja2
from starlette.types import ASGIApp
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from gateway.core import exceptions as exc
from gateway.core.page_headers import SECURITY_HEADERS

JSON = "application/json"
HTML = "text/html"
#: The headers of the JSON answer that the page replaces (its own type, length and cache rule).
_REPLACED = {b"content-type", b"content-length", b"cache-control", b"vary"}
_PAGES = jinja2.Environment(
    loader=jinja2.PackageLoader("gateway", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
BUSY = "temporarily_unavailable"
BROKEN = "server_error"
#: The listener's own refusals of a request without a token (RFC 9457 problem slugs,
#: :mod:`gateway.remote.address_gate`), shown with the same page.
CROWDED = exc.UnauthenticatedRateLimited.slug
SLOW = exc.BodyTooSlow.slug
TITLES = {
    BUSY: "Too many sign-in requests are waiting",
    BROKEN: "The gateway could not handle this sign-in",
    CROWDED: "Too many sign-in requests from your network",
    SLOW: "The request did not arrive in time",
}
REFUSED_TITLE = "This app cannot connect"
ADVICE = {
    BUSY: (
        "Wait a minute, then start the connection again from the app. If this keeps "
        "happening, ask an editor to open the sign-in requests already waiting for this app."
    ),
    BROKEN: (
        "Try again in a few minutes. If it keeps failing, tell the gateway's operator the "
        "error code and the time."
    ),
    CROWDED: (
        "Wait a minute, then start the connection again from the app. The gateway limits "
        "requests per network address, and many came from yours."
    ),
    SLOW: (
        "Start the connection again from the app. If it keeps happening, the network between "
        "you and the gateway is holding requests back."
    ),
}
#: For every other code (``invalid_request``, ``invalid_target``, ``unsupported_response_type``
#: and the rest of RFC 6749 §4.1.2.1, the listener's ``payload-too-large``): the app's request
#: is wrong, not the person's doing.
FIX_THE_APP = (
    "Trying again the same way will not help: the app sent a request this gateway does not "
    "accept. Ask the application's developer to fix it and give them the reason and the "
    "error code above. If the reason is about the gateway itself (a certificate it does not "
    "trust, a host it may not reach), tell the gateway's operator instead."
)
NO_REASON = "The app's sign-in request was refused."


def prefers_html(accept: str | None) -> bool:
    """Whether an ``Accept`` header value asks for HTML rather than JSON: ``text/html`` has
    a higher quality than ``application/json`` (RFC 9110 §12.5.1, wildcards counted:
    a browser's ``text/html,...,*/*;q=0.8``, or ``text/html`` alone), or the same quality
    and ``text/html`` is named before ``application/json``. No header, ``*/*`` (curl,
    requests), ``application/json`` or an unreadable value: False (JSON, as before)."""
    if not accept:
        return False
    asked = parse_accept_header(accept, MIMEAccept)
    html, json_ = asked.quality(HTML), asked.quality(JSON)
    if html != json_:
        return html > json_
    named = [value for value, _ in asked if value in (HTML, JSON)]
    return html > 0 and named[:1] == [HTML]


def advice(error: str) -> str:
    """What the person should do after the refusal ``error`` (an OAuth error code)."""
    return ADVICE.get(error, FIX_THE_APP)


def render(error: str, description: str | None) -> bytes:
    """The page (UTF-8 HTML) for the refusal ``error`` with ``error_description``
    ``description`` (None: a generic reason); every value is escaped by Jinja."""
    page = _PAGES.get_template("oauth_error.html").render(
        title=TITLES.get(error, REFUSED_TITLE),
        reason=description or NO_REASON,
        error=error,
        advice=advice(error),
    )
    return page.encode("utf-8")


def wants_page(scope: Scope) -> bool:
    """Whether the ASGI request ``scope`` :func:`prefers_html` (its ``Accept`` headers, one
    or several, read as one list)."""
    values = [v for k, v in scope.get("headers", []) if k == b"accept"]
    return prefers_html(b", ".join(values).decode("latin-1") if values else None)


def _refusal(body: bytes) -> tuple[str, str | None] | None:
    """``(error, error_description)`` of a JSON refusal, or None when ``body`` is not one."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("error"), str):
        return None
    description = answer.get("error_description")
    return answer["error"], description if isinstance(description, str) else None


def _page_headers(kept: list, length: int) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in kept if k.lower() not in _REPLACED]
    security = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
    return [
        (b"content-type", b"text/html; charset=utf-8"),
        *security,
        *kept,
        (b"vary", b"Accept"),
        (b"content-length", str(length).encode()),
    ]


async def send_page(
    send: Send, status: int, error: str, description: str | None, headers: list | None = None
) -> None:
    """Answer with :func:`render`'s page for ``error``: ``status``, the security headers,
    ``Vary: Accept``, and ``headers`` (``[(name, value)]`` as bytes, e.g. ``Retry-After``;
    their content type, length, cache rule and ``Vary`` are replaced)."""
    page = render(error, description)
    start = _page_headers(list(headers or []), len(page))
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": page})


class ErrorPages:
    """ASGI wrapper of ``/authorize`` (outermost): a JSON answer with a status of 400 or more
    becomes :func:`render`'s page, same status, for a request that :func:`prefers_html`;
    any other request's answer passes with ``Vary: Accept`` added to such a refusal. A body
    that is not a JSON refusal passes as it came."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        html = wants_page(scope)
        held: list[Message] = []
        chunks: list[bytes] = []

        async def shown(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_json_refusal(message):
                headers = [*message.get("headers", []), (b"vary", b"Accept")]
                message = {**message, "headers": headers}
                if html:
                    held.append(message)
                    return
            if held and message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await _send_page(send, held[0], b"".join(chunks))
                return
            await send(message)

        await self.app(scope, receive, shown)


def _is_json_refusal(start: Message) -> bool:
    headers = dict(start.get("headers", []))
    kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    return start["status"] >= 400 and kind == JSON.encode()


async def _send_page(send: Send, start: Message, body: bytes) -> None:
    """The page for the held JSON refusal (``start``, ``body``), or the refusal itself when
    its body is not one."""
    refusal = _refusal(body)
    if refusal is None:
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    await send_page(send, start["status"], *refusal, start.get("headers", []))
