"""Back-pressure shared by every worker and instance, kept in the ledger (no extra server):

* **Per-token request rate** (``GATEWAY_TOKEN_RATE=N/SECONDS``): a fixed-window counter per
  token hash and window (:class:`RateWindow`), incremented by one upsert per request; past N,
  429 ``rate-limited`` with ``Retry-After`` = seconds to the next window. A probe once made
  5,000 job creations from one token in 18 s.
* **Per-site concurrency** (``GATEWAY_SITE_CONCURRENCY=N``): at most N requests of a site
  talk to WordPress at once. A slot is a row in :class:`SiteSlot` whose unique
  ``(site_id, slot)`` pair is the lock (an INSERT wins or fails, never read-then-write); it is
  taken when a request first needs the site's WordPress client - so replays answered from the
  ledger take none - and released when the request ends. Past N: 429 ``site-busy`` with
  ``Retry-After``, and no WordPress call. A slot whose holder died frees itself after
  :func:`slot_ttl`.

Both are off by default: each costs ledger writes on the request path (one upsert per request;
an INSERT and a DELETE per WordPress-calling request), which the benchmarks' 1,000 jobs from
32 clients would pay for nothing. The per-job write budget (:mod:`gateway.jobs.budgets`) is on by
default and costs one UPDATE per write.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import math
import time
import uuid

from peewee import IntegrityError

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.ledger import db
from gateway.ledger.models import RateWindow
from gateway.ledger.models import SiteSlot

log = logging.getLogger(__name__)
_held: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("gateway_site_slots")


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


def slot_ttl(config: Config) -> float:
    """Seconds after which a held slot counts as abandoned: longer than any request that
    waits for WordPress (gunicorn's worker timeout is ``2 * wp_timeout + 30``)."""
    return config.wp_timeout * 2 + 60


def start_scope() -> None:
    """Begin a request: site slots are taken only inside a scope (the background sweep, one
    process with batched calls, runs without)."""
    _held.set([])


def hold_site_slot(config: Config, site_id: int) -> None:
    """Take one of the site's ``GATEWAY_SITE_CONCURRENCY`` slots for the current request
    (a no-op without a limit, outside a scope, or when this request holds one already).

    Raises:
        SiteBusy (429, ``Retry-After``): every slot is held.
    """
    held = _held.get(None)
    if not config.site_concurrency or held is None or held:
        return
    holder = uuid.uuid4().hex
    expires = db.utcnow() + dt.timedelta(seconds=slot_ttl(config))
    for _attempt in range(2):
        for slot in range(config.site_concurrency):
            try:
                with db.atomic():
                    row = SiteSlot.create(
                        site_id=site_id, slot=slot, holder=holder, expires_at=expires
                    )
            except IntegrityError:
                continue
            held.append(row.id)
            return
        freed = (
            SiteSlot.delete()
            .where(SiteSlot.site_id == site_id, SiteSlot.expires_at < db.utcnow())
            .execute()
        )
        if not freed:
            break
        log.warning("freed %s abandoned concurrency slots of site %s", freed, site_id)
    raise exc.SiteBusy(
        f"the site already has {config.site_concurrency} requests talking to WordPress "
        "(GATEWAY_SITE_CONCURRENCY); retry shortly",
        retry_after=1,
    )


def release_held() -> None:
    """Release the slots the current request holds and end its scope."""
    held = _held.get(None)
    _held.set(None)
    if held:
        SiteSlot.delete().where(SiteSlot.id << held).execute()
