"""What ``/authorize`` answers a person in a browser when it refuses a request.

RFC 6749 §4.1.2.1: when the client or its redirect URI cannot be trusted, "the authorization
server SHOULD inform the resource owner of the error and MUST NOT automatically redirect";
the gateway never redirects an error to a client no editor approved
(:class:`gateway.oauth.routes.NoErrorRedirects`), so every refusal is answered to the
browser. :class:`ErrorPages` wraps ``/authorize`` and, for a request that prefers HTML
(:func:`prefers_html`: every browser's ``Accept``), turns the JSON refusal (``error``,
``error_description``) into a small page: the reason in plain words (:func:`explained`, for
the SDK's terse checks) above the raw reason the developer needs, the error code, what to do
(:func:`advice`: when to try again, from the answer's ``Retry-After``; for an unknown client
id, that a registration no editor approved is forgotten and the connector must be added
again). Status and headers stay those of the JSON answer (400; 503 with ``Retry-After``),
with the security headers of the review site's pages
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
import math
import re

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
from gateway.oauth import client_documents

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
#: What to do, by code; ``{wait}`` is the answer's ``Retry-After`` in words (:func:`duration`).
ADVICE = {
    BUSY: (
        "Sign-ins with this app that nobody finished wait for an editor until they expire, "
        "and the gateway keeps only so many at once. Start the connection again from the "
        "app in {wait}, when the next of them expires. If this keeps happening, tell the "
        "gateway's operator: something keeps starting sign-ins for this app and leaving them "
        "unfinished."
    ),
    BROKEN: (
        "Try again in a few minutes. If it keeps failing, tell the gateway's operator the "
        "error code and the time."
    ),
    CROWDED: (
        "Wait {wait}, then start the connection again from the app. The gateway limits "
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
#: An unknown dynamic registration's client id (the SDK's "Client ID '<id>' not found"; a
#: metadata document URL that could not be used says why instead,
#: :class:`gateway.oauth.routes.DocumentErrors`). ``{forgotten}``: after how long
#: ``GATEWAY_OAUTH_DCR_UNUSED_HOURS`` forgets a registration no editor approved.
RE_ADD_THE_APP = (
    "Most often the app registered itself with this gateway earlier and no editor approved "
    "a sign-in with it within {forgotten}, so the gateway forgot that registration while "
    "the app kept its old client ID. Remove the connector (the MCP server) from the app and "
    "add it again: the app then registers anew. If that does not help, ask the application's "
    "developer to fix it and give them the reason and the error code above."
)
NO_REASON = "The app's sign-in request was refused."
#: The SDK's "Client ID '<id>' not found" (``mcp.server.auth.handlers.authorize``).
CLIENT_NOT_FOUND = re.compile(r"Client ID '(.*)' not found", re.DOTALL)
#: The SDK's "Redirect URI '<uri>' not registered for client" (``mcp.shared.auth``).
REDIRECT_NOT_REGISTERED = re.compile(r"Redirect URI '.*' not registered", re.DOTALL)
#: Plain words for the SDK's request checks, by the field its lines name (``field: message``,
#: one a line: ``mcp.server.auth.errors.stringify_pydantic_error`` over its
#: ``AuthorizationRequest``); the raw lines stay on the page for the developer.
PLAIN_FIELDS = {
    "client_id": "The app did not say which app it is (no client_id).",
    "redirect_uri": "The address the app asked to be sent back to is not a valid URL.",
    "response_type": (
        "The app did not ask for an authorization code (response_type=code), the only kind "
        "of sign-in this gateway offers."
    ),
    "code_challenge": (
        "The app did not send a PKCE code challenge (S256), which this gateway requires."
    ),
    "code_challenge_method": (
        "The app asked for a PKCE method other than S256, the only one this gateway accepts."
    ),
}


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


def duration(seconds: float | None) -> str:
    """``seconds`` in words, rounded up: "a minute" up to 60, then minutes up to 90 minutes
    ("14 minutes"), then hours ("24 hours", "1.5 hours"); None (not known): "a few
    minutes"."""
    if seconds is None:
        return "a few minutes"
    if seconds <= 60:
        return "a minute"
    if seconds <= 90 * 60:
        return f"{math.ceil(seconds / 60)} minutes"
    return f"{math.ceil(seconds / 360) / 10:g} hours"


def _forgotten_client(description: str | None) -> bool:
    """Whether ``description`` is the SDK's unknown client for an id that is not a metadata
    document URL (so a dynamic registration, perhaps forgotten)."""
    found = CLIENT_NOT_FOUND.fullmatch(description or "")
    return found is not None and not client_documents.is_document_url(found.group(1))


def advice(
    error: str,
    description: str | None = None,
    retry_after: int | None = None,
    unused_hours: float | None = None,
) -> str:
    """What the person should do after the refusal ``error`` (an OAuth error code or the
    listener's problem slug) said with ``description``: ``retry_after`` is the answer's
    ``Retry-After`` in seconds (None: none sent), ``unused_hours`` the
    ``GATEWAY_OAUTH_DCR_UNUSED_HOURS`` a registration no editor approved is kept (None: not
    said)."""
    if error in ADVICE:
        return ADVICE[error].format(wait=duration(retry_after))
    if _forgotten_client(description):
        forgotten = "a while" if unused_hours is None else duration(unused_hours * 3600)
        return RE_ADD_THE_APP.format(forgotten=forgotten)
    return FIX_THE_APP


def explained(description: str | None) -> list[str]:
    """Plain sentences for the raw reasons of the SDK's checks in ``description`` (an
    unknown client id, a redirect URI not registered, a missing or wrong field:
    :data:`PLAIN_FIELDS`), in the order said; empty when there are none."""
    if description is None:
        return []
    if CLIENT_NOT_FOUND.fullmatch(description):
        return ["The gateway does not know the client ID the app sent."]
    if REDIRECT_NOT_REGISTERED.match(description):
        return ["The app asked to be sent back to an address it did not register here."]
    fields = [line.split(": ", 1)[0] for line in description.splitlines() if ": " in line]
    return list(dict.fromkeys(PLAIN_FIELDS[f] for f in fields if f in PLAIN_FIELDS))


def render(
    error: str,
    description: str | None,
    retry_after: int | None = None,
    unused_hours: float | None = None,
) -> bytes:
    """The page (UTF-8 HTML) for the refusal ``error`` with ``error_description``
    ``description`` (None: a generic reason): plain words for it (:func:`explained`), the
    raw reason, the code and :func:`advice` (``retry_after`` and ``unused_hours`` as
    there); every value is escaped by Jinja."""
    page = _PAGES.get_template("oauth_error.html").render(
        title=TITLES.get(error, REFUSED_TITLE),
        explained=explained(description),
        reason=description or NO_REASON,
        error=error,
        advice=advice(error, description, retry_after, unused_hours),
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


def _retry_after(headers: list) -> int | None:
    """The seconds of a ``Retry-After`` among ``headers`` (``[(name, value)]`` as bytes), or
    None (absent, or an HTTP date: the gateway sends seconds)."""
    for name, value in headers:
        if name.lower() == b"retry-after" and value.strip().isdigit():
            return int(value)
    return None


async def send_page(
    send: Send,
    status: int,
    error: str,
    description: str | None,
    headers: list | None = None,
    unused_hours: float | None = None,
) -> None:
    """Answer with :func:`render`'s page for ``error``: ``status``, the security headers,
    ``Vary: Accept``, and ``headers`` (``[(name, value)]`` as bytes, e.g. ``Retry-After``,
    whose seconds the advice names; their content type, length, cache rule and ``Vary`` are
    replaced). ``unused_hours``: ``GATEWAY_OAUTH_DCR_UNUSED_HOURS`` (:func:`advice`)."""
    headers = list(headers or [])
    page = render(error, description, _retry_after(headers), unused_hours)
    start = _page_headers(headers, len(page))
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": page})


class ErrorPages:
    """ASGI wrapper of ``/authorize`` (outermost): a JSON answer with a status of 400 or more
    becomes :func:`render`'s page, same status, for a request that :func:`prefers_html`;
    any other request's answer passes with ``Vary: Accept`` added to such a refusal. A body
    that is not a JSON refusal passes as it came. ``unused_hours``: the configured
    ``GATEWAY_OAUTH_DCR_UNUSED_HOURS``, named in the advice for an unknown client id."""

    def __init__(self, app: ASGIApp, unused_hours: float | None = None):
        self.app = app
        self.unused_hours = unused_hours

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
                    await _send_page(send, held[0], b"".join(chunks), self.unused_hours)
                return
            await send(message)

        await self.app(scope, receive, shown)


def _is_json_refusal(start: Message) -> bool:
    headers = dict(start.get("headers", []))
    kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    return start["status"] >= 400 and kind == JSON.encode()


async def _send_page(send: Send, start: Message, body: bytes, unused_hours: float | None) -> None:
    """The page for the held JSON refusal (``start``, ``body``), or the refusal itself when
    its body is not one."""
    refusal = _refusal(body)
    if refusal is None:
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    await send_page(send, start["status"], *refusal, start.get("headers", []), unused_hours)
