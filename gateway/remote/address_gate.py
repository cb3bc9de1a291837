"""One log line per request of the listener (``gateway.listener.http``), and per-client-address
limits for every path of the listener that takes no token (all but ``/mcp``: the OAuth
metadata and the authorization server's endpoints), so no
caller without a token can freeze the listener (docs/operations.md "The remote MCP
listener"), in memory, per listener process:

* at most ``GATEWAY_OAUTH_RATE`` such requests per address and window (default 600 a minute:
  a sign-in takes about five requests, a refresh one, and claude.ai's or ChatGPT's users all
  come from their cloud's few addresses; the ``limits`` library's fixed window, as
  :mod:`gateway.tenancy.address_limits`);
* at most :data:`PER_ADDRESS` of them in flight per address, and :data:`IN_FLIGHT` in all.

Past either: 429 ``unauthenticated-rate-limited`` (RFC 9457 ``application/problem+json``)
with ``Retry-After``, before the request reaches the app. The client address is the TCP
peer's, or behind ``GATEWAY_PROXY_HOPS`` proxies the ``X-Forwarded-For`` entry that many hops
from the end (werkzeug's ``ProxyFix`` rule, as the API trusts them).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import Counter

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter

from gateway.core import exceptions as exc
from gateway.core.config import Config

PER_ADDRESS = 4  # token-less requests in flight per client address
IN_FLIGHT = 32  # token-less requests in flight in all
NAMESPACE = "listener-tokenless"
request_log = logging.getLogger("gateway.listener.http")


class AddressGate:
    """ASGI middleware around the listener's app: the module's limits on every path but
    ``token_path`` (whose requests the bearer check answers at once)."""

    def __init__(self, app, cfg: Config, token_path: str = "/mcp"):
        self.app = app
        self.cfg = cfg
        self.token_path = token_path
        self._limiter = FixedWindowRateLimiter(MemoryStorage())
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        who = client_address(scope, self.cfg.proxy_hops)
        send = _logged(scope, who, send)
        if scope["path"] == self.token_path:
            return await self.app(scope, receive, send)
        retry = self._enter(who)
        if retry is not None:
            return await _too_many(send, retry)
        # the routes behind it (the registration rate) see the same address
        scope = {**scope, "client": (who, (scope.get("client") or ("", 0))[1])}
        try:
            return await self.app(scope, receive, send)
        finally:
            with self._lock:
                self._in_flight[who] -= 1
                if self._in_flight[who] <= 0:
                    del self._in_flight[who]

    def _enter(self, who: str) -> int | None:
        """Count one request of ``who``: None when it may go on, else the seconds of its
        ``Retry-After``."""
        with self._lock:
            if self._in_flight[who] >= PER_ADDRESS or sum(self._in_flight.values()) >= IN_FLIGHT:
                return 1
            rate = self.cfg.oauth_rate
            if rate is not None:
                item = RateLimitItemPerSecond(*rate)
                if not self._limiter.hit(item, NAMESPACE, who):
                    reset = self._limiter.get_window_stats(item, NAMESPACE, who).reset_time
                    return max(1, math.ceil(reset - time.time()))
            self._in_flight[who] += 1
        return None


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


async def _too_many(send, retry: int) -> None:
    problem = exc.UnauthenticatedRateLimited(
        f"too many requests without a token from this address; retry in {retry} s",
        retry_after=retry,
    ).problem()
    body = json.dumps(problem).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(retry).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
