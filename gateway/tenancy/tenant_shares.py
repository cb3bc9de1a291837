"""Fair shares: what one tenant may hold of one ``gateway serve`` worker process, so that one
tenant's slow or heavy work degrades only that tenant, while a tenant alone runs at full speed.
In memory (a counter per tenant behind one lock): no ledger statement, no other server; each
worker process keeps its own, so the shares are per worker (``--workers N`` multiplies them).

**The rule: shares bind only under contention.** Python cannot see granian's queue nor
preempt a request, and a request that waits does so on a thread; so the rule is said in
threads. A worker has ``T`` threads (``--threads``).

* **Requests**, taken at a request's first step that waits on something outside the
  gateway (:func:`enter_request`: :meth:`gateway.operations.target.Target.hold_slot` before
  any WordPress call, before an image download, :func:`enter_noted` before an OpenAI call)
  and given back at the end of the request (:func:`leave_request`). What the ledger answers
  alone (a replay of a stored receipt, a refusal, a job's state, a racer told that the
  first copy is in progress before it asks WordPress) takes none: it holds its thread for
  milliseconds, never long enough to keep another tenant waiting.

  - a tenant **alone** in the worker (no other tenant has a request in flight there) may
    hold every thread but one, ``T - 1`` (at least 1): the thread left over, the reserve,
    serves another tenant's first request at once, whatever this one's requests wait for;
  - while **another tenant** has a request in flight there, each tenant may start requests
    only while it holds fewer than its share, ``GATEWAY_TENANT_REQUESTS`` (default half of
    ``T``, at least 1). A tenant above its share when the other arrived keeps its running
    requests (none is preempted) until each ends (each bounded: the WordPress timeout, a
    download's deadline); meanwhile the newcomer is held to its share too, its requests past
    it answered 429 at once, served again once it retries after ``Retry-After``. Contention
    is judged when a request takes its share: a tenant whose slow calls entered while it was
    alone keeps them, and while they last it is the newcomer that meets the 429s (a limit of
    this rule, docs/security.md).

* **Site calls** (``GATEWAY_TENANT_SITE_CALLS``, default a quarter of ``T``, at least 2):
  callers of one tenant talking to one of its sites at once in one worker, taken where the
  per-site slot is taken (:meth:`gateway.operations.target.Target.hold_slot`, before a side
  effect is claimed or a client made, so replays take none) and given back when the caller's
  :func:`gateway.tenancy.site_slots.scope` ends. Binding only while another tenant has a
  request or a site call in flight in the worker; alone, the per-site slots
  (``GATEWAY_SITE_CONCURRENCY``, across processes) still protect the WordPress.

Over a share: 429 ``tenant-busy`` with ``Retry-After: 1``
(:class:`~gateway.core.exceptions.TenantBusy`, a kind of ``SiteBusy``, so the agent worker and
the sweep back off as they do from a busy site). Outside ``gateway serve`` (tests, CLI
commands, the sweep) ``worker_threads`` is 0 and nothing is capped.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator

from gateway.core import exceptions as exc
from gateway.core.config import Config

log = logging.getLogger(__name__)
_lock = threading.Lock()
_requests: Counter[str] = Counter()
_site_calls: Counter[tuple[str, int]] = Counter()
_request_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_tenant_request", default=None
)
_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_tenant_caller", default=None
)
_held_sites: contextvars.ContextVar[list[tuple[str, int]] | None] = contextvars.ContextVar(
    "gateway_tenant_sites", default=None
)


def _others_in_flight(tenant: str) -> bool:
    """Whether another tenant has a request or a site call in flight here (``_lock`` held)."""
    return any(t != tenant for t in _requests) or any(t != tenant for t, _ in _site_calls)


def _take(counter: Counter, key, tenant: str, alone: int, together: int) -> tuple[int, bool]:
    """Count one more of ``key`` unless the tenant holds its limit: ``alone`` while no other
    tenant is in flight here, else ``together`` (0: no limit in that case). Returns
    ``(0, contended)`` when taken, else ``(the limit that refused it, contended)``."""
    with _lock:
        contended = _others_in_flight(tenant)
        limit = together if contended else alone
        if limit and counter[key] >= limit:
            return limit, contended
        counter[key] += 1
        return 0, contended


def _give(counter: Counter, key) -> None:
    with _lock:
        counter[key] -= 1
        if counter[key] <= 0:
            del counter[key]


def enter_request(config: Config, tenant: str) -> None:
    """Count one request of ``tenant`` in flight in this worker (a no-op without a share, or
    when the current request already counts). The rule: the module's docstring.

    Raises:
        TenantBusy (429, ``Retry-After: 1``): the tenant holds ``T - 1`` requests here while
            alone, or its share (``tenant_request_cap``) while another tenant is in flight.
    """
    share = config.tenant_request_cap
    if not share or _request_tenant.get() is not None:
        return
    alone = max(1, config.worker_threads - 1, share)
    refused, contended = _take(_requests, tenant, tenant, alone, share)
    if refused:
        why = (
            "its share while another tenant is served here: GATEWAY_TENANT_REQUESTS"
            if contended
            else "alone: every thread of the worker (--threads) but the one kept for another tenant"
        )
        log.warning("tenant %s is at its request share (%s in flight, %s)", tenant, refused, why)
        raise exc.TenantBusy(
            f"this tenant already has {refused} requests in flight in this worker ({why}); "
            "retry shortly",
            retry_after=1,
            share="requests",
        )
    _request_tenant.set(tenant)


_bodies: Counter[str] = Counter()  # tenant -> its requests whose body is being read here


@contextlib.contextmanager
def reading_body(config: Config, tenant: str) -> Iterator[None]:
    """Count the current request as one of ``tenant``'s bodies being read in this worker
    while the block runs (a no-op without a share). A body comes at the client's pace, and
    a read of it holds the thread until the bytes are there: a tenant may be reading at
    most its request share of bodies at once (``GATEWAY_TENANT_REQUESTS``, default half the
    threads), alone or not; an ordinary body arrives in milliseconds and never meets it.

    Raises:
        TenantBusy (429, ``Retry-After: 1``, ``share: "bodies"``): the tenant is reading its
            share of bodies here already.
    """
    share = config.tenant_request_cap
    if not share:
        yield
        return
    if _take(_bodies, tenant, tenant, share, share)[0]:
        log.warning("tenant %s is at its share of bodies being read (%s)", tenant, share)
        raise exc.TenantBusy(
            f"this tenant already has {share} request bodies arriving in this worker "
            "(GATEWAY_TENANT_REQUESTS); send the whole body at once, or retry shortly",
            retry_after=1,
            share="bodies",
        )
    try:
        yield
    finally:
        _give(_bodies, tenant)


def note_caller(tenant: str) -> None:
    """Remember the current request's tenant (at authentication; counts nothing), for
    :func:`enter_noted` at a slow step that knows no job (an OpenAI call)."""
    _caller.set(tenant)


def enter_noted(config: Config) -> None:
    """:func:`enter_request` for the tenant :func:`note_caller` remembered (a no-op outside
    an authenticated request: the agent worker, the sweep, CLI commands).

    Raises:
        TenantBusy (429): as :func:`enter_request`.
    """
    tenant = _caller.get()
    if tenant is not None:
        enter_request(config, tenant)


def leave_request() -> None:
    """The end of the current request: give back its request share, if it took one, and
    forget its tenant (granian's threads serve one request after another)."""
    _caller.set(None)
    tenant = _request_tenant.get()
    if tenant is not None:
        _request_tenant.set(None)
        _give(_requests, tenant)


def hand_over() -> Callable[[], None]:
    """Take what the current request holds here (its request share, its site shares) out of
    the request, for an answer that goes on after the request's end (a streamed image): the
    request's teardown then gives back nothing, and the returned function gives it all back,
    once, however often it is called (``response.call_on_close``: at the stream's last byte
    or when the client goes away)."""
    tenant = _request_tenant.get()
    _request_tenant.set(None)
    sites = list(_held_sites.get() or ())
    if _held_sites.get() is not None:
        _held_sites.set([])
    given = threading.Event()

    def give_back() -> None:
        if given.is_set():
            return
        given.set()
        if tenant is not None:
            _give(_requests, tenant)
        for key in sites:
            _give(_site_calls, key)

    return give_back


def start_sites() -> None:
    """Begin a caller's scope of site shares (:func:`gateway.tenancy.site_slots.start_scope`)."""
    _held_sites.set([])


def hold_site(config: Config, tenant: str, site_id: int) -> None:
    """Take one of ``tenant``'s ``tenant_site_calls`` shares of site ``site_id`` for the
    current scope (a no-op without a cap, outside a scope, or when the scope holds it); binding
    only while another tenant is in flight in this worker (the module's docstring).

    Raises:
        TenantBusy (429, ``Retry-After: 1``): another tenant is in flight here and the
            tenant's callers on that site in this worker are at the cap.
    """
    held = _held_sites.get()
    cap = config.tenant_site_cap
    key = (tenant, site_id)
    if not cap or held is None or key in held:
        return
    if _take(_site_calls, key, tenant, 0, cap)[0]:
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
