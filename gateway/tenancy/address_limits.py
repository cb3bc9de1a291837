"""Calls without a valid token, limited per client address (``GATEWAY_UNAUTHENTICATED_RATE``,
default ``30/60``: 30 such calls a minute per address and worker process), in memory: a
refused call writes nothing to the ledger (it is counted in the metrics instead).

Only refusals count: an address whose calls carry a valid token is never limited here (many
clients may share one address behind a proxy), and past the limit a call without a valid
token is answered 429 ``unauthenticated-rate-limited`` with ``Retry-After`` instead of 401.
The window is the ``limits`` library's fixed window over its in-memory storage (the library
Flask-Limiter is built on), created on first use, after the server forked the worker.
"""

from __future__ import annotations

import math
import threading
import time

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter

from gateway.core.config import Config

NAMESPACE = "unauthenticated"
EXTENSION = "gateway_address_limits"  # where an app keeps its AddressLimiter (app.extensions)


class AddressLimiter:
    """One app's counts of calls without a valid token, per client address (each app its
    own, made by the API's ``init_app``: tests that build many apps do not share counts)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._limiter: FixedWindowRateLimiter | None = None

    def _the_limiter(self) -> FixedWindowRateLimiter:
        with self._lock:
            if self._limiter is None:  # its storage's timer thread starts after the fork
                self._limiter = FixedWindowRateLimiter(MemoryStorage())
            return self._limiter

    def count_refusal(self, config: Config, address: str | None) -> int | None:
        """Count one call without a valid token from ``address``. Returns None while the
        address is within ``unauthenticated_rate``, else the seconds until its window ends
        (the ``Retry-After`` of the 429)."""
        if config.unauthenticated_rate is None:
            return None
        calls, seconds = config.unauthenticated_rate
        item = RateLimitItemPerSecond(calls, seconds)
        limiter, who = self._the_limiter(), address or "unknown"
        if limiter.hit(item, NAMESPACE, who):
            return None
        reset = limiter.get_window_stats(item, NAMESPACE, who).reset_time
        return max(1, math.ceil(reset - time.time()))
