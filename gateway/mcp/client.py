"""The MCP server's calls to the gateway's HTTP API (docs/api.md), with ``requests``.

Every call carries the caller's gateway token (``Authorization: Bearer``) and, when the MCP
client gave one, its request key (``Idempotency-Key``, docs/api.md "Client request keys").
A 2xx answer is an :class:`Answer`; anything else raises :class:`Problem` with the gateway's
RFC 9457 body, or one made here when no answer came:

* ``gateway-unreachable`` - no connection could be made: nothing was sent, nothing written;
* ``gateway-connection-lost`` - the request was sent and no answer came (a reset, a timeout,
  a gateway that died): WordPress may have been written, and only the gateway can tell -
  ``recover``, then the same call again with the same arguments.

"Wait" answers (409 ``operation-in-progress`` and ``request-key-in-progress``) are sent
again after ``Retry-After`` (at most :attr:`GatewayAPI.wait_seconds` in all): the same
request is safe to repeat, since its operation key is made from the job. A waiting call holds
one of the MCP server's threads, so each caller token may have at most
:attr:`GatewayAPI.waits_per_token` calls waiting at once; a call past that gets the "wait"
answer at once, with its ``retry_after``, and one caller cannot take the threads the other
callers of a shared server need.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from dataclasses import dataclass

import requests
from urllib3.exceptions import NewConnectionError

from gateway.core.exceptions import PROBLEM_BASE

WAIT_SLUGS = frozenset(("operation-in-progress", "request-key-in-progress"))


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


def _retry_after(response: requests.Response) -> int | None:
    value = response.headers.get("Retry-After", "")
    return int(value) if value.isdigit() else None


class GatewayAPI:
    """The gateway's ``/v1`` API at ``base_url`` (``http://127.0.0.1:8000``).

    Args:
        timeout: seconds for one call (a draft may write, read back and look up).
        wait_seconds: how long "wait" answers are waited for before they are handed on.
        waits_per_token: how many calls of one caller token may wait at once.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 120.0,
        wait_seconds: float = 20.0,
        waits_per_token: int = 4,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.wait_seconds = wait_seconds
        self.waits_per_token = waits_per_token
        self.session = requests.Session()
        self._waiting: Counter[str] = Counter()  # SHA-256 of a token -> its calls waiting
        self._lock = threading.Lock()

    def _start_waiting(self, token: str) -> str | None:
        """Count one more waiting call of ``token``: its key, or None when the token already
        has :attr:`waits_per_token` calls waiting."""
        key = hashlib.sha256(token.encode()).hexdigest()
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
        token: str,
        method: str,
        path: str,
        body: dict | None = None,
        request_key: str | None = None,
    ) -> Answer:
        """One API call (JSON in, JSON out), "wait" answers waited out (at most
        :attr:`waits_per_token` calls of one token at once: the module's docstring).

        Raises:
            Problem: the gateway refused (its problem body), or no answer came
                (``gateway-unreachable``, ``gateway-connection-lost``); a "wait" answer
                past :attr:`wait_seconds` or past the token's waits, with its
                ``retry_after``.
        """
        deadline = time.monotonic() + self.wait_seconds
        waiting: str | None = None
        try:
            while True:
                try:
                    return self._once(token, method, path, body, request_key)
                except Problem as problem:
                    pause = problem.retry_after or 1
                    if problem.slug not in WAIT_SLUGS or time.monotonic() + pause > deadline:
                        raise
                    if waiting is None and (waiting := self._start_waiting(token)) is None:
                        raise
                    time.sleep(pause)
        finally:
            if waiting is not None:
                self._stop_waiting(waiting)

    def _once(self, token, method, path, body, request_key) -> Answer:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if request_key is not None:
            headers["Idempotency-Key"] = request_key
        try:
            response = self.session.request(
                method,
                self.base_url + path,
                json=body,
                headers=headers,
                timeout=self.timeout,
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
        if 200 <= response.status_code < 300 and isinstance(document, dict):
            replayed = response.headers.get("Idempotent-Replayed") == "true"
            return Answer(response.status_code, document, replayed)
        if not isinstance(document, dict) or "type" not in document:
            document = {
                "type": PROBLEM_BASE + "gateway-answer-unreadable",
                "title": "The gateway's answer is not a problem document",
                "status": response.status_code,
                "detail": f"{method} {path} answered {response.status_code} without JSON",
                "retryable": response.status_code >= 500,
            }
        raise Problem(document, _retry_after(response))

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
