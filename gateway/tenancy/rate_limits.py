"""Per-token request rate (``GATEWAY_TOKEN_RATE=N/SECONDS``), kept in the ledger and shared
by every worker and instance (no extra server): a fixed-window counter per token hash and
window (:class:`~gateway.ledger.models.RateWindow`), incremented by one upsert per request;
past N, 429 ``rate-limited`` with ``Retry-After`` = seconds to the next window. A probe once
made 5,000 job creations from one token in 18 s. The per-site concurrency slot is
:mod:`gateway.tenancy.site_slots`.

Off by default: it costs one upsert per request, which the benchmarks' 1,000 jobs from 32
clients would pay for nothing. The per-job write budget (:mod:`gateway.jobs.budgets`) is on by
default and costs one UPDATE per write.
"""

from __future__ import annotations

import logging
import math
import time

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.ledger.models import RateWindow

log = logging.getLogger(__name__)


def count_request(config: Config, key: str, now: float | None = None) -> None:
    """Count one request of the token hashed as ``key`` against ``GATEWAY_TOKEN_RATE``.

    Raises:
        RateLimited (429, ``Retry-After``): the token passed its allowance in this window.
    """
    if config.token_rate is None:
        return
    allowed, seconds = config.token_rate
    now = time.time() if now is None else now
    window = int(now // seconds)
    cursor = (
        RateWindow.insert(key=key, window=window, count=1)
        .on_conflict(
            conflict_target=[RateWindow.key, RateWindow.window],
            update={RateWindow.count: RateWindow.count + 1},
        )
        .returning(RateWindow.count)
        .execute()
    )
    count = next(iter(cursor)).count  # INSERT ... ON CONFLICT ... RETURNING: one statement
    if count == 1:  # first request of a window: forget this token's older windows
        RateWindow.delete().where(RateWindow.key == key, RateWindow.window < window).execute()
    if count > allowed:
        retry = max(1, math.ceil((window + 1) * seconds - now))
        raise exc.RateLimited(
            f"this token may make {allowed} requests per {seconds} s; "
            f"retry in {retry} s (GATEWAY_TOKEN_RATE)",
            retry_after=retry,
        )
