"""Errors of the WordPress transports (REST and XML-RPC). Each carries the HTTP facts (method,
URL, status, WordPress error ``code``), says whether the outcome is *definite* (a definite
refusal proves that nothing was created; anything else after the request left us means the
outcome is unknown) and says who answered: its ``origin``.

Origins: ``"wordpress"`` (a REST error body: JSON with ``code``, ``message`` and
``data.status``, or an XML-RPC fault), ``"upstream"`` (anything else: an HTML or empty page from
a firewall, CDN, load balancer, proxy or the web server in front of WordPress) and
``"network"`` (no answer at all). Only WordPress can refuse definitely; :func:`upstream_error`
builds the error for an upstream answer from plain HTTP facts (the table
:data:`UPSTREAM_ANSWERS`), so every transport classifies the same way.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Container
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser


class WordPressError(Exception):
    """Base class.

    Attributes:
        method, url: the call (the URL never carries credentials).
        status: HTTP status, or None when no response arrived.
        code: WordPress's error code (``rest_upload_sideload_error``...), or None.
        data: WordPress's ``data`` member (dict), or {}.
        definite: True when WordPress proved that it did not act.
        retry_after: seconds from a ``Retry-After`` header, or None.
        sent: False when the request provably never left the gateway (no connection could be
            made, or the XML-RPC client could not be set up before the call): nothing can
            have happened in WordPress, whatever the class says about the answer.
    """

    definite = False
    origin = "wordpress"  # who answered: "wordpress", "upstream", or "network" (no answer)

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        url: str = "",
        status: int | None = None,
        code: str | None = None,
        data: dict | None = None,
        retry_after: int | None = None,
        origin: str | None = None,
        sent: bool = True,
    ):
        super().__init__(message)
        self.sent = sent
        if origin is not None:
            self.origin = origin
        self.message = message
        self.method = method
        self.url = url
        self.status = status
        self.code = code
        self.data = data or {}
        self.retry_after = retry_after

    def as_dict(self) -> dict:
        """A JSON-safe summary for receipts and problem details (no credentials)."""
        return {
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "method": self.method,
            "url": self.url,
            "origin": self.origin,
        }


class WordPressRefused(WordPressError):
    """WordPress said no (a 4xx, or its 500 ``rest_upload_sideload_error``): nothing created."""

    definite = True


class WordPressAuthError(WordPressRefused):
    """401/403: the application password was revoked or the user lacks a capability."""


class WordPressDuplicate(WordPressRefused):
    """409 from the companion plugin's guard: an object with this operation key exists.

    ``existing_id`` names it, so the gateway adopts it instead of creating another."""

    @property
    def existing_id(self) -> int | None:
        value = self.data.get("existing_id")
        return int(value) if value is not None else None


class WordPressNotFound(WordPressRefused):
    """404: the object does not exist (or the route is missing)."""


class WordPressOutcomeUnknown(WordPressError):
    """The request may have been processed: timeout, reset, 5xx, or a 2xx without JSON."""


class WordPressUnavailable(WordPressOutcomeUnknown):
    """No connection could be made, or WordPress asked us to back off (429/503)."""


class UpstreamRefused(WordPressOutcomeUnknown):
    """An answer that did not come from WordPress: a non-2xx HTML or empty page (a firewall,
    CDN, load balancer, proxy or the web server's own 413), or a 2xx HTML page where JSON was
    expected (a login or maintenance page).

    It proves nothing about WordPress, so the outcome is unknown, never a refusal by
    WordPress. Extra attributes: ``content_type`` (without parameters, "" when absent),
    ``title`` (the page's ``<title>``, at most :data:`TITLE_CHARS` characters, or None).
    ``retryable`` is True for 429 and 503 (the block lifts by itself; ``retry_after`` says
    when), False otherwise (a person must act).
    """

    origin = "upstream"

    def __init__(
        self,
        message: str,
        *,
        content_type: str = "",
        title: str | None = None,
        location: str | None = None,
        suggested_url: str | None = None,
        **kw,
    ):
        super().__init__(message, **kw)
        self.content_type = content_type
        self.title = title
        self.location = location
        self.suggested_url = suggested_url

    @property
    def retryable(self) -> bool:
        return self.status in (429, 503)

    def as_dict(self) -> dict:
        return {
            **super().as_dict(),
            "origin": self.origin,
            "content_type": self.content_type,
            "title": self.title,
            **({"location": self.location} if self.location else {}),
        }


class CachedAnswer(UpstreamRefused):
    """A read answered by a cache in front of the REST API from its store, even when asked
    past it (``no-cache``, a query parameter used once, then a POST served as GET), or with a
    copy older than what WordPress answered to the gateway's own write: WordPress itself was
    not heard, so nothing can be confirmed, verified or repaired on it. ``evidence`` says what
    showed it (a header such as ``X-LiteSpeed-Cache: hit``, or the older ``modified_gmt``);
    a person must exclude the REST API from the cache (not retryable)."""

    def __init__(self, message: str, *, evidence: str = "", **kw):
        super().__init__(message, content_type="application/json", **kw)
        self.evidence = evidence

    def as_dict(self) -> dict:
        return {**super().as_dict(), "cache": self.evidence}


# --------------------------------------------------------------------------- WordPress's answers
# Which error an answer *from WordPress itself* is: a REST error body (JSON ``code`` +
# ``message``, ``data.status``) or an XML-RPC fault. The error class's ``definite`` is the
# verdict on the answer (gateway.core.answers.is_definite reads these tables for upstream
# "wordpress"); an answer from in front of WordPress is never definite (upstream_refusal).


@dataclass(frozen=True)
class Case:
    """One row of an answer table: answers whose status is in ``statuses`` (and whose error
    code is ``code``, when given) are ``error``; ``why`` says what the answer proves."""

    statuses: Container
    error: type[WordPressError]
    why: str
    code: str | None = None


class _Any:
    def __contains__(self, status) -> bool:
        return True


ANY_STATUS: Container = _Any()

#: A REST error body, first matching row wins; no row: WordPressOutcomeUnknown (another 5xx:
#: WordPress may have acted before it failed). The one definite 500: WordPress's
#: ``WP_REST_Attachments_Controller::upload_from_data`` answers ``rest_upload_sideload_error``
#: when ``wp_handle_sideload`` fails, after deleting the temporary file and before any
#: attachment exists.
REST_ANSWERS: tuple[Case, ...] = (
    Case((401, 403), WordPressAuthError, "the application password or the user's capability "
         "was refused: nothing was done"),
    Case((409,), WordPressDuplicate, "the companion plugin's guard: an object with this "
         "operation key exists (existing_id)", code="gateway_duplicate_operation"),
    Case((404,), WordPressNotFound, "no such object or route: nothing was done"),
    Case((429, 503), WordPressUnavailable, "WordPress asks to back off; try again later"),
    Case(range(400, 500), WordPressRefused, "WordPress refused the request before acting"),
    Case((500,), WordPressRefused, "the upload could not be stored (wp_handle_sideload "
         "failed): no attachment was created", code="rest_upload_sideload_error"),
)  # fmt: skip

#: An XML-RPC fault, by its fault code (:mod:`gateway.wordpress.xmlrpc_errors`): every fault
#: is WordPress's own answer (an ``IXR_Error``), hence definite.
FAULT_ANSWERS: tuple[Case, ...] = (
    Case((401, 403), WordPressAuthError, "the credentials or the capability were refused"),
    Case((404,), WordPressNotFound, "no such object"),
    Case(ANY_STATUS, WordPressRefused, "a fault: WordPress answered before acting"),
)


#: A page from in front of WordPress (no REST error body; for XML-RPC any answer but 200, as
#: WordPress answers every call with 200, faults included), first matching row wins. No row is
#: definite: such a page proves nothing about WordPress. The transports build their errors
#: with :func:`upstream_error`.
UPSTREAM_ANSWERS: tuple[Case, ...] = (
    Case((429, 503), UpstreamRefused, "a block that lifts by itself (retryable, Retry-After)"),
    Case(range(500, 600), WordPressOutcomeUnknown, "a 5xx may follow a request the proxy "
         "forwarded: WordPress may have acted"),
    Case(ANY_STATUS, UpstreamRefused, "a firewall, CDN, proxy or the web server answered "
         "instead of WordPress (a 2xx: a login or maintenance page); a person must act"),
)  # fmt: skip


def answer_case(status: int | None, code: str | None, fault: bool = False) -> Case | None:
    """The row of :data:`REST_ANSWERS` (``fault``: :data:`FAULT_ANSWERS`) that an answer of
    WordPress with ``status`` (for a fault: its fault code when it is an integer, else None)
    and error ``code`` falls under; None when no row does (an unknown outcome)."""
    for case in FAULT_ANSWERS if fault else REST_ANSWERS:
        if status in case.statuses and case.code in (None, code):
            return case
    return None


def answer_error(status: int | None, code: str | None, fault: bool = False) -> type[WordPressError]:
    """The error class of WordPress's own answer (:func:`answer_case`'s, or
    :class:`WordPressOutcomeUnknown` when no row matches)."""
    case = answer_case(status, code, fault)
    return WordPressOutcomeUnknown if case is None else case.error


def upstream_case(status: int) -> Case:
    """The row of :data:`UPSTREAM_ANSWERS` that a page from in front of WordPress with HTTP
    ``status`` falls under (every status has one)."""
    return next(case for case in UPSTREAM_ANSWERS if status in case.statuses)


# --------------------------------------------------------------------------- classification
# Transport-neutral: the REST client and the XML-RPC transport both pass the HTTP facts here.

TITLE_CHARS = 200
MAX_RETRY_AFTER = 24 * 3600


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> int | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110 section 10.2.3): either
    delay-seconds or an HTTP date. Returns None when absent or unparseable; a date in the
    past gives 0; capped at one day."""
    value = (value or "").strip()
    if not value:
        return None
    if value.isdigit():
        return min(int(value), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return min(max(0, math.ceil((when - now).total_seconds())), MAX_RETRY_AFTER)


class _TitleParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.inside = False
        self.done = False
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "title" and not self.done:
            self.inside = True

    def handle_endtag(self, tag):
        if tag == "title" and self.inside:
            self.inside, self.done = False, True

    def handle_data(self, data):
        if self.inside:
            self.parts.append(data)


def page_title(text: str) -> str | None:
    """The ``<title>`` of an HTML page (whitespace collapsed, at most :data:`TITLE_CHARS`
    characters), or None. Uses the standard library's forgiving ``html.parser``."""
    parser = _TitleParser()
    try:
        parser.feed(text[:65536])
        parser.close()
    except (AssertionError, ValueError):  # badly broken markup: no title
        return None
    title = " ".join("".join(parser.parts).split())
    return title[:TITLE_CHARS] or None


def is_wordpress_error_body(body) -> bool:
    """True for WordPress's REST error shape: an object with ``code`` and ``message``
    (``data.status`` usually present) - the mark that WordPress itself answered."""
    return isinstance(body, dict) and isinstance(body.get("code"), str) and "message" in body


def upstream_refusal(
    *,
    method: str,
    url: str,
    status: int,
    content_type: str,
    text: str,
    retry_after: str | None,
    location: str | None = None,
    suggested_url: str | None = None,
) -> UpstreamRefused:
    """The :class:`UpstreamRefused` for a response that did not come from WordPress.

    Args:
        status: the HTTP status (a 2xx means an HTML page where JSON was expected).
        content_type: the ``Content-Type`` header (parameters are dropped).
        text: the body as text (only the ``<title>`` is kept).
        retry_after: the raw ``Retry-After`` header, or None.
        location: a 3xx's ``Location`` (absolute), named in the message; ``suggested_url``:
            the site URL it suggests (:func:`gateway.wordpress.rest_root.suggested_site_url`).
    """
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    title = page_title(text) if text else None
    what = f"{status} {mime or 'response without a content type'}"
    if not text.strip():
        what += " (empty)"
    if title:
        what += f" titled {title!r}"
    if location and 300 <= status < 400:
        message = (
            f"a {status} redirect to {location} came back from in front of WordPress (the "
            f"site is served at {suggested_url or location})"
        )
    elif 200 <= status < 300:
        message = (
            f"a {what} page came back where WordPress answers JSON (a login, maintenance or "
            "challenge page in front of the REST API)"
        )
    else:
        message = (
            f"a {what} answer came from in front of WordPress (a firewall, CDN, load "
            "balancer, proxy or the web server), not from WordPress"
        )
    return UpstreamRefused(
        message,
        method=method,
        url=url,
        status=status,
        content_type=mime,
        title=title,
        retry_after=parse_retry_after(retry_after),
        location=location if 300 <= status < 400 else None,
        suggested_url=suggested_url if 300 <= status < 400 else None,
    )


def upstream_error(
    *,
    method: str,
    url: str,
    status: int,
    content_type: str,
    text: str,
    retry_after: str | None,
    message: str | None = None,
    location: str | None = None,
    suggested_url: str | None = None,
) -> WordPressError:
    """The error for a response that did not come from WordPress, by the row of
    :data:`UPSTREAM_ANSWERS` its status falls under: the :class:`UpstreamRefused` of
    :func:`upstream_refusal`, or (a 5xx other than 503) a :class:`WordPressOutcomeUnknown` of
    origin ``upstream`` carrying ``message`` (default: the page as :func:`upstream_refusal`
    describes it). Arguments as :func:`upstream_refusal`."""
    refusal = upstream_refusal(
        method=method,
        url=url,
        status=status,
        content_type=content_type,
        text=text,
        retry_after=retry_after,
        location=location,
        suggested_url=suggested_url,
    )
    error = upstream_case(status).error
    if issubclass(error, UpstreamRefused):
        return refusal
    return error(
        message or refusal.message, method=method, url=url, status=status, origin="upstream"
    )


def shortened(text: str, limit: int = 300) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, marked with `` …``
    when cut: an error detail is never cut mid-word."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 2]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:(") + " …"
