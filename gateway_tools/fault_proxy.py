"""Fault-injecting HTTP reverse proxy for simulating what breaks between a client and WordPress.

Tests and demos put a :class:`FaultProxy` in front of a real WordPress (or any HTTP server) and
point the client at ``proxy.url`` instead.  Requests are forwarded unchanged (method, path, query,
headers, body) and upstream's response is returned unchanged (status, headers, raw body bytes),
except when a registered :class:`Fault` matches the request.  Faults reproduce failure modes that
are hard to trigger on purpose against a real server:

* ``drop_response`` -- upstream commits the request but the client connection is reset (RST)
  before any response byte is sent: the client cannot tell whether the write happened.
* ``delay`` -- upstream's real response arrives only after ``Fault.seconds`` (client timeouts).
* ``drip_body`` -- upstream's status and headers at once, then its body one byte every
  ``Fault.seconds`` (a slow or hostile server: a per-read timeout restarts with every byte).
* ``status_after_forward`` -- upstream commits the request but the client sees a 5xx.
* ``status_without_forward`` -- the client sees a 5xx and upstream never saw the request.
* ``php_notice`` -- a PHP notice (HTML) is prepended to upstream's body, breaking JSON parsing.
* ``stray_output`` -- ``Fault.text`` (default a blank line) is prepended to upstream's body, as
  a plugin or theme file with whitespace after its closing ``?>`` or saved with a UTF-8 byte
  order mark prints it before every answer (before ``<?xml`` of an XML-RPC answer).
* ``unauthorized`` -- WordPress's 401 for a revoked application password, without forwarding.
* ``throttle`` -- 429/503 with ``Retry-After``, without forwarding.
* ``upstream_page`` -- an HTML page (``Fault.status``, default 403, titled ``Fault.title``) as
  a firewall, CDN challenge, load balancer or web server sends it, without forwarding;
  ``Fault.retry_after_header`` (seconds or an HTTP date) adds ``Retry-After``, and status 200
  stands for a login or maintenance page where JSON was expected.
* ``strip_authorization`` -- forwarded without its ``Authorization`` header, as Apache with
  PHP as CGI/FastCGI or an nginx ``fastcgi_params`` without it do: WordPress answers as to
  an anonymous caller.
* ``app_passwords_unavailable`` -- WordPress's 401 ``application_passwords_disabled`` (no
  HTTPS outside a local environment, or a security plugin switched them off), without
  forwarding.

A standing host behaviour (a cache in front of the REST API, a host answering REST only at
``?rest_route=``, a redirect) is set with ``proxy.front = HostFront(...)``
(:mod:`gateway_tools.host_fronts`); the front's own answers are recorded with ``fault_kind``
``"front:{kind}"`` and ``forwarded=False``.

Two failures come before any request: a stopped proxy refuses connections, and inside
:meth:`FaultProxy.unanswered_connects` a client's connect times out (nothing is sent).

Every request is recorded in :attr:`FaultProxy.requests` so tests can assert how many requests
actually reached upstream (see :meth:`FaultProxy.count`).

The proxy speaks HTTP/1.1 with keep-alive toward the client, always frames responses with
``Content-Length``, never follows redirects and never decodes content encodings.  It is
thread-safe: handler threads, the test thread and the serving thread may all use it at once.

Command line (runs until Ctrl-C and prints its URL on stdout)::

    python -m gateway_tools.fault_proxy --upstream http://127.0.0.1:8081 --port 8090 \\
        --fault '{"kind": "drop_response", "method": "POST", "path": "^/wp-json/wp/v2/posts/?$"}'
"""

from __future__ import annotations

import argparse
import html
import http.cookiejar
import json
import re
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import requests
import requests.adapters

from gateway_tools.host_fronts import HostFront

__all__ = [
    "FAULT_KINDS",
    "PHP_NOTICE",
    "UNAUTHORIZED_BODY",
    "APP_PASSWORDS_UNAVAILABLE_BODY",
    "Fault",
    "FaultProxy",
    "HostFront",
    "RequestRecord",
    "main",
]

#: All supported values of :attr:`Fault.kind`.
FAULT_KINDS: frozenset[str] = frozenset(
    {
        "drop_response",
        "delay",
        "drip_body",
        "status_after_forward",
        "status_without_forward",
        "php_notice",
        "unauthorized",
        "throttle",
        "upstream_page",
        "strip_authorization",
        "app_passwords_unavailable",
        "stray_output",
    }
)

#: Fault kinds for which the request is sent to upstream before the fault is applied.
_FORWARDING_KINDS: frozenset[str] = frozenset(
    {
        "drop_response",
        "delay",
        "drip_body",
        "status_after_forward",
        "php_notice",
        "strip_authorization",
        "stray_output",
    }
)

#: Text prepended to upstream's body by the ``php_notice`` fault (what PHP prints with
#: ``display_errors`` on).
PHP_NOTICE: bytes = (
    b"<br />\n<b>Notice</b>:  Undefined index: foo in "
    b"<b>/var/www/wp-includes/x.php</b> on line <b>1</b><br />\n"
)

#: JSON body of WordPress's 401 when an application password is wrong or revoked.
UNAUTHORIZED_BODY: bytes = json.dumps(
    {
        "code": "incorrect_password",
        "message": "The provided password is an invalid application password.",
        "data": {"status": 401},
    },
    separators=(",", ":"),
).encode()

#: JSON body of WordPress's 401 when application passwords are not available on the site.
APP_PASSWORDS_UNAVAILABLE_BODY: bytes = json.dumps(
    {
        "code": "application_passwords_disabled",
        "message": "Application passwords are not available.",
        "data": {"status": 401},
    },
    separators=(",", ":"),
).encode()

# Connection-specific headers that a proxy must not pass on (RFC 9110 section 7.6.1), plus
# headers the proxy sets itself.
_HOP_BY_HOP: frozenset[str] = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED_REQUEST: frozenset[str] = _HOP_BY_HOP | {"host", "content-length", "expect"}
_NOT_FORWARDED_RESPONSE: frozenset[str] = _HOP_BY_HOP | {"content-length"}

_RPC_METHOD = re.compile(rb"<methodName>\s*([\w.]+)\s*</methodName>")

_DEFAULT_STATUS: dict[str, int] = {
    "status_after_forward": 500,
    "status_without_forward": 500,
    "throttle": 429,
    "upstream_page": 403,
}


@dataclass(frozen=True)
class Fault:
    """One failure to inject into matching requests.

    Attributes:
        kind: one of :data:`FAULT_KINDS` (see the module docstring for what each does).
        method: HTTP method to match, case-insensitive; ``None`` matches any method.
        path: regular expression searched (``re.search``) in the request path without the
            query string, e.g. ``r"^/wp-json/wp/v2/posts/?$"``; ``None`` matches any path.
        query: regular expression searched in the raw query string (without ``?``, ``""`` when
            absent); ``None`` matches any query.
        body: regular expression searched in the request body (decoded as Latin-1), e.g.
            ``"<methodName>wp.newPost<"`` to target one XML-RPC method (every
            XML-RPC call is ``POST /xmlrpc.php``); ``None`` matches any body.
        times: how many matching requests get this fault before it is used up (an int >= 1);
            ``None`` means forever.
        seconds: ``delay``: seconds (float >= 0) to wait before answering; ``drip_body``:
            seconds between two bytes of the body.
        status: HTTP status for ``status_after_forward`` / ``status_without_forward`` (default
            500) and ``throttle`` (default 429); ignored by the other kinds.
        retry_after: ``throttle`` only: value of the ``Retry-After`` header, in seconds.
        title: ``upstream_page`` only: the page's ``<title>`` (default: status and phrase).
        retry_after_header: ``upstream_page`` only: a ``Retry-After`` value sent verbatim
            (delay-seconds or an HTTP date); ``None`` sends no header.
        after: how many matching requests pass through untouched before the fault applies
            (e.g. ``after=1``: the second matching request is the first one faulted).
        text: ``stray_output`` only: the bytes prepended to the body, as a ``str`` encoded
            UTF-8 (``"\ufeff"`` is a byte order mark); default one blank line.

    Raises:
        ValueError: (on construction) for an unknown kind, an invalid regex, ``times < 1``,
            negative ``seconds`` or ``retry_after``, or a status outside 100..599.
    """

    kind: str
    method: str | None = None
    path: str | None = None
    query: str | None = None
    body: str | None = None
    times: int | None = 1
    seconds: float = 0.0
    status: int | None = None
    retry_after: int = 1
    title: str | None = None
    retry_after_header: str | None = None
    after: int = 0
    text: str = "\n"
    _path_re: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _query_re: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _body_re: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            expected = sorted(FAULT_KINDS)
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {expected}")
        if self.times is not None and (not isinstance(self.times, int) or self.times < 1):
            raise ValueError(f"times must be None or an int >= 1, got {self.times!r}")
        if self.seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds!r}")
        if not isinstance(self.after, int) or self.after < 0:
            raise ValueError(f"after must be an int >= 0, got {self.after!r}")
        if self.retry_after < 0:
            raise ValueError(f"retry_after must be >= 0, got {self.retry_after!r}")
        if self.status is not None and not 100 <= self.status <= 599:
            raise ValueError(f"status must be in 100..599, got {self.status!r}")
        try:
            path_re = re.compile(self.path) if self.path is not None else None
            query_re = re.compile(self.query) if self.query is not None else None
            body_re = re.compile(self.body) if self.body is not None else None
        except re.error as exc:
            raise ValueError(f"invalid regex in fault {self.kind!r}: {exc}") from exc
        object.__setattr__(self, "_path_re", path_re)
        object.__setattr__(self, "_query_re", query_re)
        object.__setattr__(self, "_body_re", body_re)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        """Build a fault from a JSON-like mapping with the same keys as the constructor.

        Raises:
            ValueError: for unknown keys or invalid values.
        """
        allowed = {
            "kind",
            "method",
            "path",
            "query",
            "body",
            "times",
            "seconds",
            "status",
            "retry_after",
            "title",
            "retry_after_header",
            "after",
            "text",
        }
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown fault field(s): {sorted(unknown)}")
        if "kind" not in data:
            raise ValueError("fault needs a 'kind'")
        return cls(**data)

    @property
    def effective_status(self) -> int | None:
        """The status this fault answers with, defaults applied; ``None`` if not applicable."""
        if self.kind in _DEFAULT_STATUS:
            return self.status if self.status is not None else _DEFAULT_STATUS[self.kind]
        if self.kind in ("unauthorized", "app_passwords_unavailable"):
            return 401
        return None

    @property
    def forwards(self) -> bool:
        """Whether the request is sent to upstream before the fault is applied."""
        return self.kind in _FORWARDING_KINDS

    def matches(self, method: str, path: str, query: str, body: bytes = b"") -> bool:
        """Whether a request (method, path without query, raw query string, body) is
        targeted."""
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if self._path_re is not None and not self._path_re.search(path):
            return False
        if self._body_re is not None and not self._body_re.search(body.decode("latin-1")):
            return False
        return self._query_re is None or bool(self._query_re.search(query))


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request that went through the proxy.

    Attributes:
        method: request method, e.g. ``"POST"``.
        path: request path without the query string, e.g. ``"/wp-json/wp/v2/posts"``.
        query: raw query string without ``?`` (``""`` when absent).
        status: status sent (or about to be sent) to the client; ``None`` when no response was
            sent (``drop_response``).
        fault_kind: kind of the fault applied, or ``None`` for a plain pass-through.
        forwarded: ``True`` when upstream received the request (it answered, or the read of its
            answer timed out); ``False`` when the proxy answered by itself or could not reach
            upstream.
        time: when the request arrived, seconds since the epoch (``time.time()``).
        error: description of the upstream failure when the proxy answered 502/504 by itself,
            else ``None``.
        rpc_method: the XML-RPC ``methodName`` of the body (``wp.newPost``...), else ``None``.
    """

    method: str
    path: str
    query: str
    status: int | None
    fault_kind: str | None
    forwarded: bool
    time: float
    error: str | None = None
    rpc_method: str | None = None


@dataclass
class _LiveFault:
    fault: Fault
    remaining: int | None
    to_skip: int = 0


@dataclass
class _UpstreamResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


class _UpstreamError(Exception):
    """Upstream could not be reached or did not answer in time."""

    def __init__(self, status: int, message: str, forwarded: bool) -> None:
        super().__init__(message)
        self.status = status
        self.forwarded = forwarded


class _BadRequest(Exception):
    """The client's request could not be parsed (bad Content-Length or chunked framing)."""


class FaultProxy:
    """Reverse proxy in front of ``upstream`` that injects registered :class:`Fault`\\ s.

    Args:
        upstream: base URL of the real server, e.g. ``"http://127.0.0.1:8081"``; a base path
            (``"http://host/wordpress"``) is prepended to every forwarded path.
        host: interface to listen on (default ``"127.0.0.1"``).
        port: TCP port to listen on; ``0`` (default) picks a free port, see :attr:`port`.
        timeout: upstream connect and read timeout in seconds (default 60).  When exceeded the
            client gets 504 (read timeout) or 502 (cannot connect).
        verbose: log one line per request to stderr (default: log nothing).

    Usage::

        with FaultProxy(upstream="http://127.0.0.1:8081") as proxy:
            proxy.add_fault(Fault(kind="drop_response", method="POST", path=r"^/wp-json/"))
            ...  # point the client at proxy.url
            assert proxy.count(method="POST", path=r"^/wp-json/", forwarded=True) == 1

    All methods are thread-safe.
    """

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        timeout: float = 60.0,
        verbose: bool = False,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream must be an http(s) URL, got {upstream!r}")
        self.upstream = upstream
        self.host = host
        self.timeout = timeout
        self.verbose = verbose
        self._requested_port = port
        self._upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self._upstream_host = parts.netloc.rsplit("@", 1)[-1]
        self._upstream_base_path = parts.path.rstrip("/")
        self._lock = threading.Lock()
        self._faults: list[_LiveFault] = []
        self._records: list[RequestRecord] = []
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _ProxyServer | None = None
        self._thread: threading.Thread | None = None
        self._session = _make_session()
        #: A standing host behaviour applied to every request, or None (see the module).
        self.front: HostFront | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FaultProxy:
        """Bind the listening socket and serve in a daemon thread; returns ``self``.

        Raises:
            RuntimeError: if already started.
            OSError: if the port cannot be bound.
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("FaultProxy already started")
            self._stopping.clear()
            server = _ProxyServer((self.host, self._requested_port), _ProxyHandler, self)
            self._server = server
        self._serve(server)
        return self

    def _serve(self, server) -> None:
        """Serve ``server`` on a daemon thread (kept as ``self._thread``)."""
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"FaultProxy:{server.server_port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, close client connections and wake pending delays; idempotent."""
        with self._lock:
            server, self._server = self._server, None
            connections = list(self._connections)
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._session.close()
        self._session = _make_session()

    def __enter__(self) -> FaultProxy:
        if self._server is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port actually listened on.

        Raises:
            RuntimeError: if the proxy is not started.
        """
        server = self._server
        if server is None:
            raise RuntimeError("FaultProxy is not started")
        return int(server.server_port)

    @property
    def url(self) -> str:
        """Base URL of the proxy, e.g. ``"http://127.0.0.1:54321"`` (no trailing slash).

        Raises:
            RuntimeError: if the proxy is not started.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @contextmanager
    def unanswered_connects(self) -> Iterator[None]:
        """While inside, no new connection to the proxy is established: the client's connect
        times out, as toward a host behind a firewall that drops packets. Nothing is sent, so
        nothing reaches upstream and nothing is recorded.

        How: the proxy stops accepting, closes the client connections it holds (so a client's
        pool has to connect anew), shrinks its listening backlog to nothing and fills it with
        one connection of its own; Linux then drops every further SYN (a full accept queue),
        so ``connect()`` waits until the client's timeout. On leaving, the backlog and the
        serving thread are restored on the same port.

        Raises:
            RuntimeError: if the proxy is not started.
        """
        with self._lock:
            server = self._server
            connections = list(self._connections)
        if server is None:
            raise RuntimeError("FaultProxy is not started")
        server.shutdown()  # the accept loop ends; the listening socket stays open
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.socket.listen(0)
        fillers = [socket.socket(server.address_family) for _ in range(2)]
        for filler in fillers:  # the first fills the queue, the second's SYN is dropped
            filler.setblocking(False)
            filler.connect_ex(server.server_address[:2])
        try:
            yield
        finally:
            for filler in fillers:
                filler.close()
            if self._server is server:  # not stopped meanwhile
                server.socket.listen(server.request_queue_size)
                self._serve(server)

    # ----------------------------------------------------------------- faults

    def add_fault(self, fault: Fault) -> Fault:
        """Register ``fault`` after the existing ones and return it.

        Faults are checked in the order added; the first one still live that matches a request
        applies to it (and one of its ``times`` is used up).
        """
        with self._lock:
            self._faults.append(_LiveFault(fault, fault.times, fault.after))
        return fault

    def clear_faults(self) -> None:
        """Remove all faults, used up or not."""
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> list[tuple[Fault, int | None]]:
        """Faults not yet used up, in order, each with its remaining uses (``None`` = forever)."""
        with self._lock:
            return [(live.fault, live.remaining) for live in self._faults]

    def _take_fault(self, method: str, path: str, query: str, body: bytes = b"") -> Fault | None:
        with self._lock:
            for index, live in enumerate(self._faults):
                if live.fault.matches(method, path, query, body):
                    if live.to_skip > 0:  # let this one through; later faults may match
                        live.to_skip -= 1
                        continue
                    if live.remaining is not None:
                        live.remaining -= 1
                        if live.remaining <= 0:
                            del self._faults[index]
                    return live.fault
        return None

    # ----------------------------------------------------------------- log

    @property
    def requests(self) -> list[RequestRecord]:
        """Snapshot (a new list) of all requests recorded since start or :meth:`reset_log`.

        A request is recorded once its outcome is known, *before* the client receives the
        response (or the connection reset), so a client that got its answer can rely on it.
        """
        with self._lock:
            return list(self._records)

    def reset_log(self) -> None:
        """Forget all recorded requests."""
        with self._lock:
            self._records.clear()

    def count(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        query: str | None = None,
        forwarded: bool | None = None,
        fault_kind: str | None = None,
        status: int | None = None,
        rpc_method: str | None = None,
    ) -> int:
        """Number of recorded requests matching all given criteria (``None`` = any).

        Args:
            method: request method, case-insensitive.
            path: regex searched in the request path (without query string).
            query: regex searched in the raw query string.
            forwarded: ``True`` to count only requests that reached upstream, ``False`` only
                those that did not.
            fault_kind: count only requests to which this fault kind was applied.
            status: count only requests answered with this status.
            rpc_method: regex searched in the XML-RPC ``methodName`` (requests without one
                never match).
        """
        rpc_re = re.compile(rpc_method) if rpc_method is not None else None
        path_re = re.compile(path) if path is not None else None
        query_re = re.compile(query) if query is not None else None
        return sum(
            1
            for rec in self.requests
            if (method is None or rec.method.upper() == method.upper())
            and (path_re is None or path_re.search(rec.path))
            and (query_re is None or query_re.search(rec.query))
            and (forwarded is None or rec.forwarded == forwarded)
            and (fault_kind is None or rec.fault_kind == fault_kind)
            and (status is None or rec.status == status)
            and (rpc_re is None or bool(rec.rpc_method and rpc_re.search(rec.rpc_method)))
        )

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    # ----------------------------------------------------------------- internals for handler

    def _register_connection(self, conn: socket.socket, active: bool) -> None:
        with self._lock:
            if active:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _forward(
        self,
        method: str,
        path_and_query: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        identity: bool,
    ) -> _UpstreamResponse:
        """Send one request upstream and read the whole raw (still encoded) response."""
        out_headers: dict[str, str] = {}
        connection_tokens = _connection_tokens(headers)
        for name, value in headers:
            lower = name.lower()
            if lower in _NOT_FORWARDED_REQUEST or lower in connection_tokens:
                continue
            if name in out_headers:
                separator = "; " if lower == "cookie" else ", "
                value = f"{out_headers[name]}{separator}{value}"
            out_headers[name] = value
        out_headers["Host"] = self._upstream_host
        if identity:
            for name in [n for n in out_headers if n.lower() == "accept-encoding"]:
                del out_headers[name]
            out_headers["Accept-Encoding"] = "identity"
        url = self._upstream_origin + self._upstream_base_path + path_and_query
        try:
            resp = self._session.request(
                method,
                url,
                headers=out_headers,
                data=body if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS") else None,
                stream=True,
                allow_redirects=False,
                timeout=self.timeout,
            )
        except requests.ConnectTimeout as exc:
            raise _UpstreamError(502, f"upstream connect timeout: {exc}", forwarded=False) from exc
        except requests.ReadTimeout as exc:
            raise _UpstreamError(504, f"upstream read timeout: {exc}", forwarded=True) from exc
        except requests.RequestException as exc:
            raise _UpstreamError(502, f"upstream unreachable: {exc}", forwarded=False) from exc
        try:
            try:
                raw_body = resp.raw.read(decode_content=False) if method != "HEAD" else b""
            except Exception as exc:  # urllib3 errors: timeouts, truncated bodies
                raise _UpstreamError(502, f"upstream body error: {exc}", forwarded=True) from exc
            resp.raw.release_conn()
        finally:
            resp.close()
        raw_headers = resp.raw.headers
        header_items = raw_headers.iteritems() if hasattr(raw_headers, "iteritems") else []
        return _UpstreamResponse(
            status=resp.status_code,
            reason=resp.reason or "",
            headers=[(str(k), str(v)) for k, v in header_items],
            body=raw_body,
        )


def _make_session() -> requests.Session:
    """A pooled session that adds nothing of its own to forwarded requests.

    No default headers, no cookies kept between requests (the proxy is shared by all clients),
    no environment proxies or .netrc, no retries.
    """
    session = requests.Session()
    session.trust_env = False
    session.headers.clear()
    session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=64, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Header names listed in ``Connection`` headers (also hop-by-hop), lower-cased."""
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def _decode_body(body: bytes, encoding: str) -> bytes | None:
    """Decode a gzip/deflate body; ``None`` when the encoding is unsupported or data is bad."""
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error:
        return None
    return None


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        proxy: FaultProxy,
    ) -> None:
        self.proxy = proxy
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), which can block on DNS; skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    # --- plumbing

    def setup(self) -> None:
        super().setup()
        self.server.proxy._register_connection(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.proxy._register_connection(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.proxy.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    # --- request handling

    def _read_body(self) -> bytes:
        transfer_encoding = self.headers.get("Transfer-Encoding", "")
        if "chunked" in transfer_encoding.lower():
            return self._read_chunked()
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            return b""
        try:
            length = int(length_header)
        except ValueError as exc:
            raise _BadRequest(f"bad Content-Length {length_header!r}") from exc
        if length < 0:
            raise _BadRequest(f"bad Content-Length {length_header!r}")
        body = self.rfile.read(length)
        if len(body) != length:
            raise _BadRequest("request body shorter than Content-Length")
        return body

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            line = self.rfile.readline(65537)
            if not line:
                raise _BadRequest("connection closed inside chunked body")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as exc:
                raise _BadRequest(f"bad chunk size {size_text!r}") from exc
            if size == 0:
                break
            data = self.rfile.read(size)
            if len(data) != size:
                raise _BadRequest("connection closed inside chunk")
            chunks.append(data)
            self.rfile.readline(65537)  # CRLF after the chunk data
        while True:  # trailer section, ends with an empty line
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
        return b"".join(chunks)

    def _handle(self) -> None:
        proxy = self.server.proxy
        arrived = time.time()
        method = self.command
        target = self.path
        if not target.startswith("/"):  # absolute-form, as sent to a forward proxy
            parts = urlsplit(target)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        path, _, query = target.partition("?")
        body = b""

        def record(
            status: int | None,
            fault_kind: str | None,
            forwarded: bool,
            error: str | None = None,
        ) -> None:
            rpc = _RPC_METHOD.search(body[:512])
            proxy._record(
                RequestRecord(
                    method,
                    path,
                    query,
                    status,
                    fault_kind,
                    forwarded,
                    arrived,
                    error,
                    rpc.group(1).decode("ascii", "replace") if rpc else None,
                )  # fmt: skip
            )

        try:
            body = self._read_body()
        except _BadRequest as exc:
            self.close_connection = True
            record(400, None, False, str(exc))
            self._send_simple(400, "text/plain; charset=utf-8", f"Bad request: {exc}\n".encode())
            return

        front = proxy.front
        canned = front.answer(method, path, query, self.headers) if front else None
        if canned is not None:
            record(canned.status, f"front:{front.kind}", False)
            self._send_upstream(method, canned)
            return

        fault = proxy._take_fault(method, path, query, body)
        kind = fault.kind if fault is not None else None

        if fault is not None and not fault.forwards:
            self._answer_without_forward(fault, record)
            return

        try:
            headers = self.headers.items()
            if kind == "strip_authorization":
                headers = [(n, v) for n, v in headers if n.lower() != "authorization"]
            upstream = proxy._forward(
                method,
                target,
                headers,
                body,
                identity=kind in ("php_notice", "stray_output"),
            )
        except _UpstreamError as exc:
            record(exc.status, kind, exc.forwarded, str(exc))
            if kind == "drop_response" and exc.forwarded:
                self._reset_connection()
                return
            self._send_simple(exc.status, "text/plain; charset=utf-8", f"{exc}\n".encode())
            return

        if front is not None:
            upstream = front.keep(method, path, query, self.headers, upstream)
        if fault is None:
            record(upstream.status, None, True)
            self._send_upstream(method, upstream)
        elif kind == "drop_response":
            record(None, kind, True)
            self._reset_connection()
        elif kind == "delay":
            record(upstream.status, kind, True)
            proxy._stopping.wait(fault.seconds)
            self._send_upstream(method, upstream)
        elif kind == "drip_body":
            record(upstream.status, kind, True)
            self._send_upstream(method, upstream, drip=fault.seconds)
        elif kind == "status_after_forward":
            status = fault.effective_status or 500
            record(status, kind, True)
            self._send_simple(status, "text/html; charset=UTF-8", _error_html(status))
        elif kind == "php_notice":
            record(upstream.status, kind, True)
            self._send_upstream(method, _with_php_notice(upstream))
        elif kind == "stray_output":
            record(upstream.status, kind, True)
            self._send_upstream(method, _with_php_notice(upstream, fault.text.encode("utf-8")))
        elif kind == "strip_authorization":
            record(upstream.status, kind, True)
            self._send_upstream(method, upstream)
        else:  # pragma: no cover - guarded by FAULT_KINDS / _FORWARDING_KINDS
            raise AssertionError(f"unhandled fault kind {kind!r}")

    def _answer_without_forward(
        self, fault: Fault, record: Callable[[int, str, bool], None]
    ) -> None:
        status = fault.effective_status or 500
        record(status, fault.kind, False)
        if fault.kind == "unauthorized":
            self._send_simple(401, "application/json; charset=UTF-8", UNAUTHORIZED_BODY)
        elif fault.kind == "app_passwords_unavailable":
            body = APP_PASSWORDS_UNAVAILABLE_BODY
            self._send_simple(401, "application/json; charset=UTF-8", body)
        elif fault.kind == "throttle":
            self._send_simple(
                status,
                "text/plain; charset=utf-8",
                f"{status} Too many requests, retry after {fault.retry_after} s\n".encode(),
                extra_headers=[("Retry-After", str(fault.retry_after))],
            )
        elif fault.kind == "upstream_page":
            headers = []
            if fault.retry_after_header is not None:
                headers.append(("Retry-After", fault.retry_after_header))
            self._send_simple(
                status,
                "text/html; charset=UTF-8",
                _error_html(status, fault.title),
                extra_headers=headers,
            )
        else:  # status_without_forward
            self._send_simple(status, "text/html; charset=UTF-8", _error_html(status))

    # --- responses

    def _send_upstream(self, method: str, upstream: _UpstreamResponse, drip: float = 0) -> None:
        connection_tokens = _connection_tokens(upstream.headers)
        try:
            self.send_response_only(upstream.status, upstream.reason or None)
            upstream_length: str | None = None
            for name, value in upstream.headers:
                lower = name.lower()
                if lower == "content-length":
                    upstream_length = value
                if lower in _NOT_FORWARDED_RESPONSE or lower in connection_tokens:
                    continue
                self.send_header(name, value)
            no_body = method == "HEAD" or upstream.status < 200 or upstream.status in (204, 304)
            if method == "HEAD":
                if upstream_length is not None:
                    self.send_header("Content-Length", upstream_length)
            elif not no_body:
                self.send_header("Content-Length", str(len(upstream.body)))
            self.end_headers()
            if not no_body and drip:
                self.wfile.flush()
                for i in range(len(upstream.body)):  # one byte at a time, until stopped
                    if self.server.proxy._stopping.wait(drip):
                        break
                    self.wfile.write(upstream.body[i : i + 1])
                    self.wfile.flush()
            elif not no_body:
                self.wfile.write(upstream.body)
            self.wfile.flush()
        except OSError:  # client went away (e.g. it timed out during a delay)
            self.close_connection = True

    def _send_simple(
        self,
        status: int,
        content_type: str,
        body: bytes,
        extra_headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for name, value in extra_headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _reset_connection(self) -> None:
        """Abort the client connection with a TCP RST and no response bytes."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        # The descriptor is released (sending RST) once finish() closes rfile; the server's own
        # shutdown(SHUT_WR) afterwards then fails harmlessly instead of sending a FIN.
        self.connection.close()


def _error_html(status: int, title: str | None = None) -> bytes:
    """Small HTML error page like the ones nginx/Apache send for 5xx (``title`` replaces
    the default ``<title>``, HTML-escaped)."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    head = html.escape(title) if title is not None else f"{status} {phrase}"
    return (
        f"<html>\r\n<head><title>{head}</title></head>\r\n<body>\r\n"
        f"<center><h1>{status} {phrase}</h1></center>\r\n</body>\r\n</html>\r\n"
    ).encode()


def _with_php_notice(upstream: _UpstreamResponse, text: bytes = PHP_NOTICE) -> _UpstreamResponse:
    """Upstream's response with ``text`` (:data:`PHP_NOTICE`) prepended to its (decoded)
    body."""
    headers = list(upstream.headers)
    body = upstream.body
    encodings = [v.strip().lower() for k, v in headers if k.lower() == "content-encoding"]
    encoding = encodings[-1] if encodings else "identity"
    if encoding != "identity":
        decoded = _decode_body(body, encoding)
        if decoded is not None:  # else: leave it encoded; the notice breaks it anyway
            body = decoded
            headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
    return _UpstreamResponse(upstream.status, upstream.reason, headers, text + body)


# --------------------------------------------------------------------------- CLI


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gateway_tools.fault_proxy",
        description="Fault-injecting HTTP reverse proxy (runs until Ctrl-C).",
    )
    parser.add_argument(
        "--upstream", required=True, help="upstream base URL, e.g. http://127.0.0.1:8081"
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="listen port (default: a free port)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="upstream timeout in seconds (default 60)"
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="JSON",
        help='fault as JSON, e.g. \'{"kind": "throttle", "status": 503, "times": null}\'; '
        "repeatable, checked in order",
    )
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the proxy from the command line; returns the process exit status."""
    args = _parse_args(argv)
    try:
        faults = [Fault.from_dict(json.loads(text)) for text in args.fault]
    except (ValueError, TypeError) as exc:
        print(f"invalid --fault: {exc}", file=sys.stderr)
        return 2
    proxy = FaultProxy(
        args.upstream, host=args.host, port=args.port, timeout=args.timeout, verbose=args.verbose
    )
    for fault in faults:
        proxy.add_fault(fault)
    stop = threading.Event()
    # Installed explicitly: a process started in the background inherits SIGINT as ignored.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    proxy.start()
    print(proxy.url, flush=True)
    try:
        while not stop.wait(1):
            pass
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
