"""One log line per request of the listener (``gateway.listener.http``), and the limits of
every path of the listener that takes no token (all but ``/mcp``: the OAuth metadata and the
authorization server's endpoints), so that no caller without a token can freeze the listener
or keep a new client out (docs/operations.md "The remote MCP listener"; issue 53), in memory,
per listener process. Such a request, in this order:

1. **is counted** against ``GATEWAY_OAUTH_RATE`` per address and window (default 600 a minute:
   a sign-in takes about five requests, a refresh one, and claude.ai's or ChatGPT's users all
   come from their cloud's few addresses; the ``limits`` library's fixed window, as
   :mod:`gateway.tenancy.address_limits`);
2. **has its whole body read** (at most :data:`MAX_BODY` bytes, else 413
   ``payload-too-large``) within :data:`BODY_SECONDS` of its headers (else 408
   ``body-too-slow``), by the event loop: a body in transit holds no thread and no slot, only
   one of :data:`READING_PER_ADDRESS` per address (a real client's small body arrives with its
   headers, so a shared cloud address never waits here);
3. **takes a slot**, at most :data:`PER_ADDRESS` per address and :data:`IN_FLIGHT` in all,
   held only while the app works on a body it already has (the ledger, a client metadata
   document fetch: :mod:`gateway.oauth.client_documents` fetches one per host at a time).

So slow bodies from a few addresses (8 addresses x 4 requests, issue 53) hold no slot, and a
new client's metadata, ``/authorize`` and ``/token`` are answered meanwhile. Past a limit: 429
``unauthenticated-rate-limited`` (RFC 9457 ``application/problem+json``) with
``Retry-After``, before the request reaches the app; at ``/authorize``, to a browser
(``Accept`` preferring HTML), the same status and ``Retry-After`` as the authorization
server's error page (:mod:`gateway.oauth.error_pages`), like the app's own refusals there.
The threads those slots may use are added to anyio's default thread limiter
(:func:`reserve_threads`), so ``/mcp``'s token checks and tool calls keep the threads they
had.

A connection dripping its headers holds a socket and nothing else (the app is called with
whole headers; uvicorn has no deadline for headers, only ``timeout_keep_alive`` between
requests): the TLS proxy's ``client_header_timeout`` bounds it (docs/mcp.md's nginx block).

The client address is the TCP peer's, or behind ``GATEWAY_PROXY_HOPS`` proxies the
``X-Forwarded-For`` entry that many hops from the end (werkzeug's ``ProxyFix`` rule, as the
API trusts them); uvicorn's own forwarded-header handling is off
(:func:`gateway.remote.listener.server_config`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter

import anyio
import anyio.to_thread
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.oauth import error_pages
from gateway.oauth.routes import AUTHORIZE_PATH
from gateway.oauth.routes import replay

PER_ADDRESS = 8  # token-less requests at work per client address (bodies read)
IN_FLIGHT = 32  # token-less requests at work in all
READING_PER_ADDRESS = 8  # token-less bodies in transit per client address
BODY_SECONDS = 10.0  # from a token-less request's headers to the end of its body
MAX_BODY = 64 * 1024  # bytes of a token-less body (the OAuth forms and registrations)
NAMESPACE = "listener-tokenless"
request_log = logging.getLogger("gateway.listener.http")


class AddressGate:
    """ASGI middleware around the listener's app: the module's limits on every path but
    ``token_path`` (whose requests the bearer check answers at once)."""

    def __init__(
        self,
        app,
        cfg: Config,
        token_path: str = "/mcp",
        page_paths: frozenset[str] = frozenset({AUTHORIZE_PATH}),
    ):
        self.app = app
        self.cfg = cfg
        self.token_path = token_path
        self.page_paths = page_paths
        self._limiter = FixedWindowRateLimiter(MemoryStorage())
        self._lock = threading.Lock()
        self._reading: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()
        self._threads_reserved = False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if not self._threads_reserved:
            self._threads_reserved = reserve_threads(IN_FLIGHT)
        who = client_address(scope, self.cfg.proxy_hops)
        send = _logged(scope, who, send)
        if scope["path"] == self.token_path:
            return await self.app(scope, receive, send)
        page = scope["path"] in self.page_paths and error_pages.wants_page(scope)
        retry = self._rate(who) or self._take(self._reading, who, READING_PER_ADDRESS, None)
        if retry is not None:
            return await _problem(send, _too_many(retry), page)
        try:
            body = await _read_body(receive)
        except exc.GatewayError as refusal:
            return await _problem(send, refusal, page)
        finally:
            self._give_back(self._reading, who)
        retry = self._take(self._in_flight, who, PER_ADDRESS, IN_FLIGHT)
        if retry is not None:
            return await _problem(send, _too_many(retry), page)
        # the routes behind it (the registration rate) see the same address
        scope = {**scope, "client": (who, (scope.get("client") or ("", 0))[1])}
        try:
            return await self.app(scope, replay(body, receive), send)
        finally:
            self._give_back(self._in_flight, who)

    def _rate(self, who: str) -> int | None:
        """Count one request of ``who`` against ``oauth_rate``: None when it may go on, else
        the seconds of its ``Retry-After``."""
        rate = self.cfg.oauth_rate
        if rate is None:
            return None
        item = RateLimitItemPerSecond(*rate)
        if self._limiter.hit(item, NAMESPACE, who):
            return None
        reset = self._limiter.get_window_stats(item, NAMESPACE, who).reset_time
        return max(1, math.ceil(reset - time.time()))

    def _take(self, counts: Counter[str], who: str, each: int, total: int | None) -> int | None:
        """One place of ``counts`` for ``who`` (at most ``each`` per address and ``total`` in
        all): None when taken, else 1 (the seconds of ``Retry-After``)."""
        with self._lock:
            if counts[who] >= each or (total is not None and sum(counts.values()) >= total):
                return 1
            counts[who] += 1
        return None

    def _give_back(self, counts: Counter[str], who: str) -> None:
        with self._lock:
            counts[who] -= 1
            if counts[who] <= 0:
                del counts[who]


def reserve_threads(extra: int) -> bool:
    """Add ``extra`` tokens to anyio's default thread limiter of the running event loop (the
    one ``anyio.to_thread.run_sync`` uses: the token checks and tool calls of ``/mcp``, the
    authorization server's ledger calls), so that ``extra`` token-less requests, each on at
    most one thread at a time, leave ``/mcp`` the threads it had. Returns True once done."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = limiter.total_tokens + extra
    return True


async def _read_body(receive) -> bytes:
    """The request's whole body, read within :data:`BODY_SECONDS`.

    Raises:
        BodyTooSlow (408): the body did not end in time.
        PayloadTooLarge (413): more than :data:`MAX_BODY` bytes.
    """
    chunks, size = [], 0
    with anyio.move_on_after(BODY_SECONDS) as deadline:
        while True:
            message = await receive()
            chunk = message.get("body", b"") if message["type"] == "http.request" else b""
            size += len(chunk)
            if size > MAX_BODY:
                raise exc.PayloadTooLarge(f"a body without a token is at most {MAX_BODY} bytes")
            chunks.append(chunk)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
    if deadline.cancelled_caught:
        raise exc.BodyTooSlow(
            f"the body did not arrive within {BODY_SECONDS:g} s of the headers; send it again",
            retry_after=1,
        )
    return b"".join(chunks)


def _logged(scope, who: str, send):
    """``send`` that writes the request's one log line (``gateway.listener.http``: method,
    path, status, client address) when its answer starts. Never the query string, which
    carries ``state`` and PKCE values, nor any header (tokens)."""
    started = time.perf_counter()

    async def sending(message):
        if message["type"] == "http.response.start":
            request_log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": message["status"],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                    "client": who,
                },
            )
        await send(message)

    return sending


def client_address(scope, proxy_hops: int) -> str:
    """The client's address: the TCP peer's, or the ``X-Forwarded-For`` entry ``proxy_hops``
    from the end when that many proxies are trusted (the peer's when the header is short)."""
    peer = (scope.get("client") or ("unknown", 0))[0]
    if proxy_hops <= 0:
        return peer
    forwarded = ",".join(
        value.decode("latin-1")
        for name, value in scope.get("headers", ())
        if name == b"x-forwarded-for"
    )
    hops = [part.strip() for part in forwarded.split(",") if part.strip()]
    return hops[-proxy_hops] if len(hops) >= proxy_hops else peer


def _too_many(retry: int) -> exc.GatewayError:
    return exc.UnauthenticatedRateLimited(
        f"too many requests without a token from this address; retry in {retry} s",
        retry_after=retry,
    )


async def _problem(send, error: exc.GatewayError, page: bool = False) -> None:
    """``error`` as an RFC 9457 answer (``Retry-After`` when it has one), or, with ``page``
    (a browser at ``/authorize``), as the authorization server's error page with the same
    status and ``Retry-After`` (:func:`gateway.oauth.error_pages.send_page`)."""
    retry = [] if error.retry_after is None else [(b"retry-after", str(error.retry_after).encode())]
    if page:
        await error_pages.send_page(send, error.status, error.slug, error.detail, retry)
        return
    body = json.dumps(error.problem()).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        *retry,
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
