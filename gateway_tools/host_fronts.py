"""Standing behaviours of the hosts in front of WordPress, for :class:`~gateway_tools.fault_proxy.
FaultProxy` (``proxy.front = HostFront(...)``): unlike a fault, a front applies to every
request for as long as it is set. Each stands for a public report (docs/hosts.md):

* ``cache`` -- a cache in front of the REST API that keeps 200 answers to GET by URL whatever
  ``Cache-Control: no-cache`` says, in the request or in the answer (LiteSpeed's REST cache:
  litespeedtech/lscache_wp#413, #732). ``keep_query=False`` keys by path alone (a cache that
  drops query strings; a ``?rest_route=`` route still counts); ``override=True`` serves a POST
  carrying ``X-HTTP-Method-Override: GET`` from the store too (a cache that defeats even that);
  ``path`` (a regex on the path, or on the ``rest_route`` for a ``?rest_route=`` URL) limits
  what is stored; ``announce=False`` hides the ``X-Cache: HIT`` and ``Age`` a hit carries.
* ``rest_route_only`` -- a host that hides ``/wp-json/`` (404 from the web server, no
  forwarding) so that the REST API answers only at ``?rest_route=`` (tradik/wpexporter#66);
  a ``Link`` header naming ``/wp-json/`` is rewritten to ``/index.php?rest_route=/``, as
  WordPress advertises it with plain permalinks.
* ``redirect`` -- a host redirecting every request (301) to ``location`` plus the request's
  path and query (non-www to www: WP-API/node-wpapi#248).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from urllib.parse import parse_qs

FRONT_KINDS = frozenset({"cache", "rest_route_only", "redirect"})


@dataclass
class Canned:
    """An answer of the front itself (the proxy sends it as it sends upstream's)."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class HostFront:
    """One host behaviour (see the module); thread-safe."""

    kind: str
    keep_query: bool = True
    override: bool = False
    path: str | None = None
    announce: bool = True
    location: str = ""
    _store: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in FRONT_KINDS:
            raise ValueError(f"unknown front kind {self.kind!r}; expected {sorted(FRONT_KINDS)}")

    def answer(self, method: str, path: str, query: str, headers) -> Canned | None:
        """The front's own answer to a request (None: forward it)."""
        if self.kind == "redirect":
            target = self.location.rstrip("/") + path + (f"?{query}" if query else "")
            return Canned(301, "Moved Permanently", [("Location", target)], b"")
        if self.kind == "rest_route_only":
            if path.startswith("/wp-json"):
                return Canned(404, "Not Found", [("Content-Type", "text/html")], _NOT_FOUND)
            return None
        key = self._key(method, path, query, headers)
        with self._lock:
            kept = self._store.get(key) if key else None
        if kept is None:
            return None
        stored_at, canned = kept
        extra = [("X-Cache", "HIT"), ("Age", str(max(1, int(time.time() - stored_at))))]
        return Canned(
            canned.status,
            canned.reason,
            canned.headers + (extra if self.announce else []),
            canned.body,
        )

    def keep(self, method: str, path: str, query: str, headers, upstream):
        """Store or rewrite upstream's answer (an object with ``status``, ``reason``,
        ``headers``, ``body``); returns what the client gets."""
        if self.kind == "rest_route_only":
            upstream.headers = [
                (n, v.replace("/wp-json/", "/index.php?rest_route=/") if n.lower() == "link" else v)
                for n, v in upstream.headers
            ]
            return upstream
        key = self._key(method, path, query, headers)
        if self.kind == "cache" and key and upstream.status == 200:
            canned = Canned(upstream.status, upstream.reason, list(upstream.headers), upstream.body)
            with self._lock:
                self._store.setdefault(key, (time.time(), canned))
        return upstream

    def clear(self) -> None:
        """Forget every stored answer (a purge)."""
        with self._lock:
            self._store.clear()

    def _key(self, method: str, path: str, query: str, headers) -> str | None:
        """The store's key of a cacheable request, None for any other."""
        if self.kind != "cache":
            return None
        override = (headers.get("X-HTTP-Method-Override") or "").upper() == "GET"
        if not (method == "GET" or (self.override and method == "POST" and override)):
            return None
        route = (parse_qs(query).get("rest_route") or [""])[0]
        if not (path.startswith("/wp-json/") or route):
            return None
        if self.path is not None and not re.search(self.path, route or path):
            return None
        auth = headers.get("Authorization") or ""
        if self.keep_query:
            return f"{auth} {path}?{query}"
        return f"{auth} {path} {route}"


_NOT_FOUND = b"<html><head><title>404 Not Found</title></head><body>Not Found</body></html>"
