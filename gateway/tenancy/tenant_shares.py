"""Fair shares: what one tenant may hold of one ``gateway serve`` worker process, so that one
tenant's slow or heavy work degrades only that tenant. In memory (a counter per tenant behind
one lock): no ledger statement, no other server; each worker process keeps its own, so the
caps are per worker (``--workers N`` multiplies them).

* **Requests** (``GATEWAY_TENANT_REQUESTS``, default half of the worker's threads, at least
  1): a tenant's requests in flight in one worker, taken once the token is known
  (:func:`enter_request`, the API's authentication and the review page's sign-in check) and
  given back at the end of the request (:func:`leave_request`). The other tenants always
  keep the other threads, whatever this one's requests wait for.
* **Site calls** (``GATEWAY_TENANT_SITE_CALLS``, default 2): callers of one tenant talking to
  one of its sites at once in one worker, taken where the per-site slot is taken
  (:meth:`gateway.operations.target.Target.hold_slot`, before a side effect is claimed or a
  client made, so replays take none) and given back when the caller's
  :func:`gateway.tenancy.site_slots.scope` ends.

Over either share: 429 ``tenant-busy`` with ``Retry-After: 1``
(:class:`~gateway.core.exceptions.TenantBusy`, a kind of ``SiteBusy``, so the agent worker and
the sweep back off as they do from a busy site). Outside ``gateway serve`` (tests, CLI
commands, the sweep) ``worker_threads`` is 0 and nothing is capped.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections import Counter

from gateway.core import exceptions as exc
from gateway.core.config import Config

log = logging.getLogger(__name__)
_lock = threading.Lock()
_requests: Counter[str] = Counter()
_site_calls: Counter[tuple[str, int]] = Counter()
_request_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_tenant_request", default=None
)
_held_sites: contextvars.ContextVar[list[tuple[str, int]] | None] = contextvars.ContextVar(
    "gateway_tenant_sites", default=None
)


def _take(counter: Counter, key, cap: int) -> bool:
    with _lock:
        if counter[key] >= cap:
            return False
        counter[key] += 1
        return True


def _give(counter: Counter, key) -> None:
    with _lock:
        counter[key] -= 1
        if counter[key] <= 0:
            del counter[key]


def enter_request(config: Config, tenant: str) -> None:
    """Count one request of ``tenant`` in flight in this worker (a no-op without a cap, or
    when the current request already counts).

    Raises:
        TenantBusy (429, ``Retry-After: 1``): the tenant has ``tenant_request_cap`` requests
            in flight here already.
    """
    cap = config.tenant_request_cap
    if not cap or _request_tenant.get() is not None:
        return
    if not _take(_requests, tenant, cap):
        log.warning("tenant %s is over its request share (%s in flight)", tenant, cap)
        raise exc.TenantBusy(
            f"this tenant already has {cap} requests in flight in this worker "
            "(GATEWAY_TENANT_REQUESTS: the other tenants keep the other threads); retry shortly",
            retry_after=1,
            share="requests",
        )
    _request_tenant.set(tenant)


def leave_request() -> None:
    """The end of the current request: give back its request share, if it took one."""
    tenant = _request_tenant.get()
    if tenant is not None:
        _request_tenant.set(None)
        _give(_requests, tenant)


def start_sites() -> None:
    """Begin a caller's scope of site shares (:func:`gateway.tenancy.site_slots.start_scope`)."""
    _held_sites.set([])


def hold_site(config: Config, tenant: str, site_id: int) -> None:
    """Take one of ``tenant``'s ``tenant_site_calls`` shares of site ``site_id`` for the
    current scope (a no-op without a cap, outside a scope, or when the scope holds it).

    Raises:
        TenantBusy (429, ``Retry-After: 1``): the tenant's callers on that site in this worker
            are at the cap.
    """
    held = _held_sites.get()
    cap = config.tenant_site_cap
    key = (tenant, site_id)
    if not cap or held is None or key in held:
        return
    if not _take(_site_calls, key, cap):
        log.warning("tenant %s is over its share of site %s (%s callers)", tenant, site_id, cap)
        raise exc.TenantBusy(
            f"this tenant already has {cap} callers talking to this site in this worker "
            "(GATEWAY_TENANT_SITE_CALLS); retry shortly",
            retry_after=1,
            share="site_calls",
        )
    held.append(key)


def release_sites() -> None:
    """Give back the site shares the current scope holds and end it."""
    held = _held_sites.get()
    _held_sites.set(None)
    for key in held or ():
        _give(_site_calls, key)
