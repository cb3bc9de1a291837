"""Per-site concurrency (``GATEWAY_SITE_CONCURRENCY=N``): at most N callers of one site talk
to WordPress at once, whoever they are - HTTP requests, the agent worker, the sweep, CLI
commands - across every worker and instance, kept in the ledger (no extra server).

A slot is a row in :class:`~gateway.ledger.models.SiteSlot` whose unique ``(site_id, slot)``
pair is the lock (an INSERT wins or fails, never read-then-write). It is taken in one place,
:func:`hold`, called by :meth:`gateway.operations.target.Target.hold_slot` when a side effect
is about to be claimed or a WordPress client is first made for a target - so replays answered
from the ledger take none - and released when the caller's :func:`scope` ends. A slot whose
holder died frees itself after :func:`slot_ttl`.

Who opens a scope, and what each does when every slot is held (429 ``site-busy``,
:class:`~gateway.core.exceptions.SiteBusy`, raised before any claim or WordPress call):

* an HTTP request (the API's request hooks): the caller gets 429 with ``Retry-After``;
* the agent worker, one scope per job it works on: the required call is left unanswered and
  retried at the next pass (``later``), never failed to the model;
* the sweep (``gateway reconcile`` and the server's sweep thread), one scope per site and per
  extra pass: that site's rows stay as they are until the next sweep (``site_busy`` counted).

Outside a scope nothing is limited (a test or a script calling the domain directly).

Off by default: it costs an INSERT and a DELETE per WordPress-calling caller, which the
benchmarks' 1,000 jobs from 32 clients would pay for nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import logging
import uuid
from collections.abc import Callable
from collections.abc import Iterator

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.ledger import db
from gateway.ledger import unique
from gateway.ledger.models import SiteSlot
from gateway.tenancy import tenant_shares

log = logging.getLogger(__name__)
# {site id: slot row id} held by the current scope; None outside any scope.
_held: contextvars.ContextVar[dict[int, int] | None] = contextvars.ContextVar(
    "gateway_site_slots", default=None
)


def slot_ttl(config: Config) -> float:
    """Seconds after which a held slot counts as abandoned: longer than any caller that
    waits for WordPress (each call is bounded by ``wp_timeout``); a worker killed while holding
    one (SIGKILL, a crash) leaves it to expire."""
    return config.wp_timeout * 2 + 60


def start_scope() -> None:
    """Begin a scope where a ``with`` block does not fit (the API's request hooks); end it
    with :func:`release_held`. The scope also holds the tenant's site shares
    (:mod:`gateway.tenancy.tenant_shares`, in memory)."""
    _held.set({})
    tenant_shares.start_sites()


def release_held() -> None:
    """Release the slots the current scope holds and end it (the in-memory site shares
    first: that cannot fail)."""
    tenant_shares.release_sites()
    held = _held.get()
    _held.set(None)
    _delete(held)


def _delete(held: dict | None) -> None:
    """Delete the slot rows of ``held`` (the scope's ``{site id: slot row id}``), if any."""
    if held:
        SiteSlot.delete().where(SiteSlot.id << list(held.values())).execute()


def hand_over_held() -> Callable[[], None]:
    """Take the current scope's holds out of it (the site slots and, through
    :func:`gateway.tenancy.tenant_shares.hand_over`, the tenant's request and site shares)
    for an answer streamed after the request ends: the scope's end releases nothing of
    them, and the returned function releases them all, once (in a ledger connection of its
    own, as it runs after the request's connection was given back).

    Raises (from the returned function): peewee's DatabaseError when the ledger cannot be
    reached; the slot rows then expire by themselves (:func:`slot_ttl`)."""
    give_back = tenant_shares.hand_over()
    held = dict(_held.get() or {})
    if _held.get() is not None:
        _held.set({})

    def release() -> None:
        give_back()  # the in-memory shares first: that cannot fail
        if held:
            with db.database.connection_context():
                _delete(held)
            held.clear()

    return release


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """A caller's scope (one job of the agent worker, one site of the sweep): the slots
    taken inside are released at its end, also when it raises. Nested inside another scope
    it adds nothing (the outer one holds and releases)."""
    if _held.get() is not None:
        yield
        return
    start_scope()
    try:
        yield
    finally:
        release_held()


def hold(config: Config, site_id: int) -> None:
    """Take one of site ``site_id``'s ``GATEWAY_SITE_CONCURRENCY`` slots for the current
    scope (a no-op without a limit, outside a scope, or when the scope holds one of that site
    already).

    Raises:
        SiteBusy (429, ``Retry-After``): every slot is held.
    """
    held = _held.get()
    if not config.site_concurrency or held is None or site_id in held:
        return
    holder = uuid.uuid4().hex
    expires = db.utcnow() + dt.timedelta(seconds=slot_ttl(config))
    for _attempt in range(2):
        for slot in range(config.site_concurrency):
            row, created = unique.insert_or_get(
                lambda slot=slot: SiteSlot.create(
                    site_id=site_id, slot=slot, holder=holder, expires_at=expires
                )
            )
            if not created:  # the slot is held
                continue
            held[site_id] = row.id
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
        f"the site already has {config.site_concurrency} callers talking to WordPress "
        "(GATEWAY_SITE_CONCURRENCY); retry shortly",
        retry_after=1,
    )
