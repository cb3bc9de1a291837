"""The MCP tools' calls to the gateway's HTTP API (docs/api.md): one tool layer, two adapters.

* :class:`HttpTransport` (``gateway mcp``, stdio and its streamable HTTP): ``requests`` to
  the gateway's URL; the caller is a gateway token, sent as ``Authorization: Bearer``.
* :class:`WsgiTransport` (the remote MCP listener of ``gateway serve``, :mod:`gateway.remote`):
  a WSGI call of the gateway's own app, given to it (this package never imports the app); the
  caller is a principal, put in the request's environ under
  :data:`gateway.core.callers.PRINCIPAL_ENVIRON`; no token is sent anywhere.

Both share everything else here: every call carries, when the MCP client gave one, its
request key (``Idempotency-Key``, docs/api.md "Client request keys").
A 2xx answer is an :class:`Answer`; anything else raises :class:`Problem` with the gateway's
RFC 9457 body, or one made here when no answer came:

* ``gateway-unreachable`` - no connection could be made: nothing was sent, nothing written;
* ``gateway-connection-lost`` - the request was sent and no answer came (a reset, a timeout,
  a gateway that died): WordPress may have been written, and only the gateway can tell -
  ``recover``, then the same call again with the same arguments.

"Wait" answers are waited out here, never in the gateway (a wait there would hold one of its
threads and a share of the tenant), since sending the same request again is safe (its
operation key is made from the job): :meth:`GatewayAPI.call` ends a racing or doubled call
with the same answer as the first one.

* 409 ``operation-in-progress`` naming an operation of the call's own job: the job's
  operations are read (``GET /v1/jobs/{job_id}``, ledger reads only) every 0.25 s, rising to
  1 s, until that operation has left PREPARED/SENT; then the request is sent once more, and
  the gateway answers with the stored receipt (or reconciles it). The gateway's own
  ``Retry-After`` there (when absence could first be proven, about 30 s) stays what it is;
* ``operation-in-progress`` of a key that is not the job's (a site-scoped term key),
  ``request-key-in-progress``, 429 ``tenant-busy`` and ``site-busy`` (nothing was sent):
  sent again after a backoff of 0.25 s rising to 1 s.

Either way for at most :attr:`GatewayAPI.wait_seconds` in all; an answer still "wait" after
that is handed on (for an operation in flight: ``recover`` is its next step). A waiting call
holds one of the MCP server's threads, so each caller (a token, by its SHA-256; a principal,
by its ``token_hash``) may have at most :attr:`GatewayAPI.waits_per_token` calls waiting at
once, whatever they wait for; a call past that gets the "wait" answer at once, with its
``retry_after``, and one caller cannot take the threads the other callers of a shared server
need (issue 40).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from typing import Protocol

import requests
from urllib3.exceptions import NewConnectionError
from werkzeug.test import EnvironBuilder
from werkzeug.test import run_wsgi_app

from gateway.core import states
from gateway.core.callers import PRINCIPAL_ENVIRON
from gateway.core.exceptions import PROBLEM_BASE

IN_FLIGHT = "operation-in-progress"
WAIT_SLUGS = frozenset((IN_FLIGHT, "request-key-in-progress", "tenant-busy", "site-busy"))
UNSETTLED = frozenset((states.PREPARED, states.SENT))  # an operation a request still works on
FIRST_PAUSE, LAST_PAUSE = 0.25, 1.0  # seconds between looks, doubling from the first


def pauses():
    """The backoff between looks at a job or sends of a request: 0.25, 0.5, 1, 1, ... s."""
    pause = FIRST_PAUSE
    while True:
        yield pause
        pause = min(LAST_PAUSE, pause * 2)


def of_job(operation_key: str, job_id: str) -> bool:
    """Whether ``operation_key`` (``{tenant}/{job_id}/v{n}/{action}[/{slot}]``) is one of job
    ``job_id``'s own operations, not a site-scoped one (``{tenant}/site/{site}/term/...``)."""
    parts = operation_key.split("/")
    return len(parts) >= 4 and parts[1] == job_id and parts[2].startswith("v")


@dataclass(frozen=True)
class Answer:
    """A 2xx answer: HTTP ``status``, JSON ``body``, and whether the gateway answered from
    what it had stored (``Idempotent-Replayed: true``)."""

    status: int
    body: dict
    replayed: bool


class Problem(Exception):
    """A refusal or a failure, as an RFC 9457 problem ``body`` (``type``, ``title``,
    ``status``, ``detail``, ``retryable`` and the problem's extensions), plus the seconds of
    ``Retry-After`` when the gateway sent it."""

    def __init__(self, body: dict, retry_after: int | None = None):
        super().__init__(body.get("detail") or body.get("title") or "problem")
        self.body = body
        self.retry_after = retry_after

    @property
    def slug(self) -> str:
        """The problem type's last path segment (``operation-key-reused``)."""
        return str(self.body.get("type", "")).rsplit("/", 1)[-1]


def _made_here(slug: str, title: str, detail: str) -> Problem:
    return Problem(
        {
            "type": PROBLEM_BASE + slug,
            "title": title,
            "status": 503,
            "detail": detail,
            "retryable": True,
        },
        retry_after=2,
    )


def _retry_after(value: str | None) -> int | None:
    value = value or ""
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class Reply:
    """What a transport brings back: the HTTP ``status``, the JSON ``document`` (None when
    the body is not JSON) and the headers the tool layer reads."""

    status: int
    document: Any
    replayed: bool
    retry_after: int | None


class PrincipalLike(Protocol):
    """What the in-process adapter needs of a caller: the API's own
    :class:`gateway.tenancy.tokens.Principal` (this package may not import it), whose
    ``token_hash`` keys the caller's waits."""

    token_hash: str


Caller = str | PrincipalLike  # a gateway token (HTTP) or a principal (in process)


def caller_key(caller: Caller) -> str:
    """The name a caller's waits are counted under: a token's SHA-256, a principal's
    ``token_hash`` (never a token)."""
    if isinstance(caller, str):
        return hashlib.sha256(caller.encode()).hexdigest()
    return caller.token_hash


class HttpTransport:
    """Calls the gateway at ``base_url`` (``http://127.0.0.1:8000``) with ``requests``, the
    caller's token as ``Authorization: Bearer``; ``timeout``: seconds for one call.

    Raises (from :meth:`send`):
        Problem: ``gateway-unreachable`` (nothing sent) or ``gateway-connection-lost``.
    """

    def __init__(self, base_url: str, timeout: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()

    def send(self, caller: Caller, method, path, body, headers: dict) -> Reply:
        """One request of ``caller`` (a gateway token)."""
        if not isinstance(caller, str):
            raise TypeError("the HTTP transport calls with a gateway token")
        headers = {**headers, "Authorization": f"Bearer {caller}"}
        try:
            response = self.session.request(
                method, self.base_url + path, json=body, headers=headers, timeout=self.timeout
            )
        except requests.ConnectionError as error:
            if _never_sent(error):
                raise _made_here(
                    "gateway-unreachable",
                    "The gateway cannot be reached",
                    f"no connection to the gateway at {self.base_url}; nothing was sent",
                ) from None
            raise _lost(method, path) from None
        except requests.Timeout:
            raise _lost(method, path) from None
        try:
            document = response.json()
        except ValueError:
            document = None
        return Reply(
            response.status_code,
            document,
            response.headers.get("Idempotent-Replayed") == "true",
            _retry_after(response.headers.get("Retry-After")),
        )


class WsgiTransport:
    """Calls a WSGI ``app`` (the gateway's own, :func:`gateway.app.create_app`, made once by
    whoever runs this) in the calling thread, with the caller's principal in the environ under
    :data:`PRINCIPAL_ENVIRON` and no ``Authorization`` header: the app authenticates it where
    it authenticates tokens, and every other step (validation, request keys, shares, rate
    limits, logs) is the one an HTTP request takes. ``remote_addr``: the client address the
    app sees (its logs, its per-address limits). Uses werkzeug's public
    ``EnvironBuilder`` and ``run_wsgi_app``."""

    def __init__(self, app: Callable, remote_addr: str = "127.0.0.1"):
        self.app = app
        self.remote_addr = remote_addr

    def send(self, caller: Caller, method, path, body, headers: dict) -> Reply:
        """One request of ``caller`` (a principal)."""
        if isinstance(caller, str):
            raise TypeError("the in-process transport calls with a principal, never a token")
        target, _, query = path.partition("?")
        builder = EnvironBuilder(
            path=target,
            method=method,
            query_string=query,
            headers=headers,
            data=None if body is None else json.dumps(body),
            content_type=None if body is None else "application/json",
            environ_base={PRINCIPAL_ENVIRON: caller, "REMOTE_ADDR": self.remote_addr},
        )
        try:
            environ = builder.get_environ()
        finally:
            builder.close()
        app_iter, status, answer_headers = run_wsgi_app(self.app, environ, buffered=True)
        try:
            raw = b"".join(app_iter)
        finally:
            getattr(app_iter, "close", lambda: None)()
        try:
            document = json.loads(raw) if raw else None
        except ValueError:
            document = None
        return Reply(
            int(status.split(" ", 1)[0]),
            document,
            answer_headers.get("Idempotent-Replayed") == "true",
            _retry_after(answer_headers.get("Retry-After")),
        )


class GatewayAPI:
    """The gateway's ``/v1`` API through ``transport``: an :class:`HttpTransport`, or a base
    URL for one (``http://127.0.0.1:8000``), or a :class:`WsgiTransport`.

    Args:
        timeout: seconds for one call over HTTP (a draft may write, read back and look up).
        wait_seconds: how long "wait" answers are waited for before they are handed on.
        waits_per_token: how many calls of one caller may wait at once.
    """

    def __init__(
        self,
        transport: str | HttpTransport | WsgiTransport,
        timeout: float = 120.0,
        wait_seconds: float = 20.0,
        waits_per_token: int = 4,
    ):
        if isinstance(transport, str):
            transport = HttpTransport(transport, timeout)
        self.transport = transport
        self.wait_seconds = wait_seconds
        self.waits_per_token = waits_per_token
        self._waiting: Counter[str] = Counter()  # a caller's key -> its calls waiting
        self._lock = threading.Lock()

    def _start_waiting(self, caller: Caller) -> str | None:
        """Count one more waiting call of ``caller``: its key (:func:`caller_key`), or None
        when the caller already has :attr:`waits_per_token` calls waiting."""
        key = caller_key(caller)
        with self._lock:
            if self._waiting[key] >= self.waits_per_token:
                return None
            self._waiting[key] += 1
        return key

    def _stop_waiting(self, key: str) -> None:
        with self._lock:
            self._waiting[key] -= 1
            if self._waiting[key] <= 0:
                del self._waiting[key]

    def call(
        self,
        token: Caller,
        method: str,
        path: str,
        body: dict | None = None,
        request_key: str | None = None,
        job_id: str | None = None,
    ) -> Answer:
        """One API call (JSON in, JSON out) of the caller ``token`` (a gateway token over
        HTTP, a principal in process) with "wait" answers waited out (the module's
        docstring): ``job_id`` names the job whose operations a racing call waits for.

        Raises:
            Problem: the gateway refused (its problem body), or no answer came
                (``gateway-unreachable``, ``gateway-connection-lost``); a "wait" answer still
                "wait" after :attr:`wait_seconds`, or past the caller's
                :attr:`waits_per_token`, with its ``retry_after``.
        """
        deadline = time.monotonic() + self.wait_seconds
        backoff = pauses()
        waiting: str | None = None
        try:
            while True:
                try:
                    return self._once(token, method, path, body, request_key)
                except Problem as problem:
                    if problem.slug not in WAIT_SLUGS:
                        raise
                    if waiting is None and (waiting := self._start_waiting(token)) is None:
                        raise
                    if not self._waited(token, problem, job_id, deadline, backoff):
                        raise
        finally:
            if waiting is not None:
                self._stop_waiting(waiting)

    def _waited(self, token, problem: Problem, job_id, deadline: float, backoff) -> bool:
        """Wait before the next send: for the job's operation named in ``problem`` to settle,
        or one step of ``backoff``. False when ``deadline`` came first."""
        key = str(problem.body.get("operation_key") or "")
        if problem.slug == IN_FLIGHT and job_id is not None and of_job(key, job_id):
            return self._settled(token, job_id, key, deadline)
        return _pause(next(backoff), deadline)

    def _settled(self, token: Caller, job_id: str, key: str, deadline: float) -> bool:
        """Read job ``job_id`` (``GET /v1/jobs/{job_id}``) every 0.25 s rising to 1 s until its
        operation ``key`` has left PREPARED/SENT (or is gone). False at ``deadline``."""
        for pause in pauses():
            if not _pause(pause, deadline):
                return False
            try:
                job = self._once(token, "GET", f"/v1/jobs/{job_id}", None, None).body
            except Problem:
                continue  # a look that failed proves nothing: look again
            found = [
                r.get("state") for r in job.get("operations", ()) if r.get("operation_key") == key
            ]
            if not found or found[0] not in UNSETTLED:
                return True
        return False  # pragma: no cover - pauses() never ends

    def _once(self, token, method, path, body, request_key) -> Answer:
        headers = {"Accept": "application/json"}
        if request_key is not None:
            headers["Idempotency-Key"] = request_key
        reply = self.transport.send(token, method, path, body, headers)
        document = reply.document
        if 200 <= reply.status < 300 and isinstance(document, dict):
            return Answer(reply.status, document, reply.replayed)
        if not isinstance(document, dict) or "type" not in document:
            document = {
                "type": PROBLEM_BASE + "gateway-answer-unreadable",
                "title": "The gateway's answer is not a problem document",
                "status": reply.status,
                "detail": f"{method} {path} answered {reply.status} without JSON",
                "retryable": reply.status >= 500,
            }
        raise Problem(document, reply.retry_after)

    def token_valid(self, token: str) -> bool:
        """Whether the gateway knows ``token`` (``GET /v1/jobs?limit=1`` is not a 401).

        Raises:
            Problem: the gateway cannot be reached or answered something unexpected.
        """
        try:
            self._once(token, "GET", "/v1/jobs?limit=1", None, None)
        except Problem as problem:
            if problem.slug == "unauthenticated":
                return False
            if problem.slug in ("forbidden", "rate-limited"):
                return True  # known token, refused for another reason
            raise
        return True


def _pause(seconds: float, deadline: float) -> bool:
    """Sleep ``seconds`` unless that would pass ``deadline`` (``time.monotonic()``)."""
    if time.monotonic() + seconds > deadline:
        return False
    time.sleep(seconds)
    return True


def _never_sent(error: requests.ConnectionError) -> bool:
    """A connection that was never made (refused, no route, DNS), so nothing was sent."""
    reason = error.args[0] if error.args else None
    reason = getattr(reason, "reason", reason)
    return isinstance(reason, NewConnectionError) or isinstance(
        error, requests.exceptions.ConnectTimeout
    )


def _lost(method: str, path: str) -> Problem:
    return _made_here(
        "gateway-connection-lost",
        "The gateway's answer was lost",
        f"{method} {path} was sent and no answer came: WordPress may have been written. "
        "Call recover for the job, then this tool again with exactly the same arguments",
    )
