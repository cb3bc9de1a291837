"""Requests that send a body before any token is checked, capped together per worker process
and per client address, in memory: the review page's forms (``POST /review/...``: the CSRF
check reads the form before the sign-in is known) and the webhooks (``POST /v1/webhooks/...``:
the signature is checked over the raw body). A caller dripping such a body holds its thread
while it drips (granian's body reads block until the bytes are there, docs/operations.md
"Slow request bodies"), so these requests may hold at most a quarter of a worker's threads (at
least 1), and at most 2 of them one client address; past either, 429
``unauthenticated-rate-limited`` with ``Retry-After: 1``, before any byte of the body is read.
Outside ``gateway serve`` (``worker_threads`` 0) nothing is capped.
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter

from gateway.core import exceptions as exc
from gateway.core.config import Config

PER_ADDRESS = 2  # token-less bodies one client address may send at once, per worker
PREFIXES = ("/review/", "/v1/webhooks/")

_lock = threading.Lock()
_in_flight: Counter[str] = Counter()  # client address -> its token-less bodies in flight
_held: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_tokenless", default=None
)


def applies(method: str, path: str) -> bool:
    """Whether a request sends its body before any token is checked (the module's list)."""
    return method == "POST" and path.startswith(PREFIXES)


def enter(config: Config, address: str | None) -> None:
    """Count the current request as one token-less body from ``address`` in this worker
    (a no-op outside ``gateway serve``); :func:`leave` gives it back.

    Raises:
        UnauthenticatedRateLimited (429, ``Retry-After: 1``): the worker holds a quarter of
            its threads (at least 1) in such requests, or ``address`` holds 2.
    """
    if not config.worker_threads or _held.get() is not None:
        return
    who = address or "unknown"
    cap = max(1, config.worker_threads // 4)
    with _lock:
        if sum(_in_flight.values()) >= cap or _in_flight[who] >= PER_ADDRESS:
            raise exc.UnauthenticatedRateLimited(
                "too many requests sending a body before any token is checked (sign-in, "
                "review forms, webhooks) are in flight; retry in 1 s",
                retry_after=1,
            )
        _in_flight[who] += 1
    _held.set(who)


def leave() -> None:
    """The end of the current request: give back what :func:`enter` counted, if anything."""
    who = _held.get()
    if who is None:
        return
    _held.set(None)
    with _lock:
        _in_flight[who] -= 1
        if _in_flight[who] <= 0:
            del _in_flight[who]
