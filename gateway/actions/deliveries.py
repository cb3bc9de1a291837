"""Deliveries of the gateway's events to webhook endpoints (issue 57), signed as Standard
Webhooks 1.0 says, exactly once per event and endpoint.

An event row (``notification``, decided once by :mod:`gateway.actions.notifications`) goes to
every live endpoint of its tenant subscribed to its type (:mod:`gateway.actions.
webhook_endpoints`) and made before it:

* **fan-out** (:mod:`gateway.actions.fan_out`), first in each delivery pass: one
  ``webhook_delivery`` row per (event, endpoint), made once by the pair's unique constraint.
* **the POST** (:func:`deliver`): to the endpoint's URL through the notification URL's egress
  guard, connection pinned to the address checked, ``GATEWAY_NOTIFICATION_TIMEOUT`` for all
  of it, at most ``GATEWAY_NOTIFICATION_MAX_BYTES`` of the answer read; headers ``webhook-id``
  (:func:`gateway.core.event_ids.event_id`, the same on every attempt: receivers deduplicate
  on it), ``webhook-timestamp`` (this attempt's), ``webhook-signature`` (``v1,<base64 HMAC-SHA256>``
  of ``id.timestamp.body`` by the ``standardwebhooks`` package, a second one while a rotated
  secret's overlap lasts) and ``Idempotency-Key`` (the event's key, for today's receivers).
  A subscription endpoint's body is ``{"type", "timestamp", "data"}``; the legacy endpoint
  (the notification URL) keeps the flat body of before.
* **retries**: 2xx is DELIVERED; a retryable failure (5xx, no answer, unreachable) stays
  PENDING and backs off (:func:`retry_after`: 2 s doubled per failure, at most 10 minutes);
  a definite refusal (:func:`gateway.core.answers.
  is_definite`) is counted, backs off (:func:`backoff`) and after
  ``GATEWAY_NOTIFICATION_MAX_REFUSALS`` is REFUSED. One sender at a time (the claim, a
  conditional UPDATE judged by the database's clock); the endpoints take turns in a pass,
  each its own queue (:func:`gateway.core.rounds.take_turns`). State moves:
  :mod:`gateway.operations.transitions`.
* **when**: a worker's delivery thread (:func:`deliver_forever`) makes a pass as soon as this
  process decided an event (:data:`gateway.jobs.events.wake`), else every
  ``GATEWAY_NOTIFICATION_POLL_INTERVAL`` seconds; the sweep (``gateway reconcile``) too.
* **what a workflow reads**: :mod:`gateway.actions.delivery_views`.

Source: docs/api.md, "Webhook endpoints" and "Verifying a delivery"; Standard Webhooks 1.0.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import logging
import threading
import time
from urllib.parse import urlsplit

from standardwebhooks import Webhook

from gateway.actions import delivery_views
from gateway.actions import egress
from gateway.actions import fan_out
from gateway.actions import notifications
from gateway.actions import webhook_endpoints
from gateway.core import answers
from gateway.core import event_ids
from gateway.core import exceptions as exc
from gateway.core import rounds
from gateway.core.config import Config
from gateway.core.states import DELIVERED
from gateway.core.states import PENDING
from gateway.jobs import events
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.ledger.models import WebhookDelivery
from gateway.ledger.models import WebhookEndpoint
from gateway.operations import registry
from gateway.operations import transitions

log = logging.getLogger(__name__)

BACKOFF_SECONDS = 30.0  # after the first definite refusal; doubled after each, up to an hour
RETRY_SECONDS = 2.0  # after the first retryable failure (5xx, unreachable); doubled after each
RETRY_MAX_SECONDS = 600.0  # ... up to 10 minutes; never REFUSED for it

# --------------------------------------------------------------------------- one delivery


def body_of(event: Notification, endpoint: WebhookEndpoint) -> bytes:
    """The bytes POSTed: for the legacy endpoint the event row's flat payload (as before
    schema version 18); for a subscription ``{"type", "timestamp" (RFC 3339 UTC of the
    decision), "data": {"event_id", "job_id", "task_version", "post_id", "site", "reason",
    "text"}}``. The same bytes on every attempt."""
    payload = event.payload or {}
    if endpoint.legacy:
        return json.dumps(payload, ensure_ascii=False).encode()
    site = payload.get("site")
    if site is None:
        job = Job.get_or_none(Job.tenant == event.tenant, Job.job_id == event.job_id)
        site = job.site if job else None
    data = {
        "event_id": event_ids.event_id(event.key),
        "job_id": event.job_id,
        "task_version": event.task_version,
        "post_id": payload.get("post_id"),
        "site": site,
        "reason": payload.get("reason"),
        "text": payload.get("text"),
    }
    body = {
        "type": fan_out.event_type(event),
        "timestamp": db.rfc3339(event.created_at),
        "data": data,
    }
    return json.dumps(body, ensure_ascii=False).encode()


def headers_of(
    config: Config, event: Notification, endpoint: WebhookEndpoint, body: bytes, at: dt.datetime
) -> dict[str, str]:
    """The headers of one attempt at ``at`` (UTC, aware): Standard Webhooks 1.0's
    ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` (one ``v1,`` signature per
    secret of :func:`webhook_endpoints.signing_secrets`, space-separated; none for an endpoint
    without a secret), and ``Idempotency-Key``."""
    msg_id = event_ids.event_id(event.key)
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": event.key,
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
    }
    signing = webhook_endpoints.signing_secrets(config, endpoint, at.replace(tzinfo=None))
    if signing:
        headers["webhook-signature"] = " ".join(
            Webhook(secret).sign(msg_id, at, body) for secret in signing
        )
    return headers


def backoff(refusals: int) -> float:
    """Seconds a delivery waits after its ``refusals``-th definite refusal:
    :data:`BACKOFF_SECONDS` doubled after each, at most an hour."""
    return min(3600.0, BACKOFF_SECONDS * 2 ** max(0, refusals - 1))


def retry_after(failures: int) -> float:
    """Seconds a delivery waits after its ``failures``-th attempt that failed
    retryably (a 5xx, no answer, unreachable, a refused address): :data:`RETRY_SECONDS`
    doubled after each, at most :data:`RETRY_MAX_SECONDS`. Such a failure never makes it
    REFUSED (it stays PENDING until its receiver answers). After stripe-python's
    ``_sleep_time_seconds`` (exponential, capped), without jitter: one sender per row."""
    return min(RETRY_MAX_SECONDS, RETRY_SECONDS * 2 ** max(0, min(failures, 30) - 1))


def _claim(config: Config, row: WebhookDelivery) -> bool:
    return transitions.claim_delivery(row, config.notification_timeout + 20)


def deliver(config: Config, row: WebhookDelivery) -> WebhookDelivery:
    """One attempt of a PENDING delivery (no-op when settled or claimed by another sender).
    Never called inside an API request. Returns the row as stored afterwards (DELIVERED;
    PENDING with ``last_error``; REFUSED after the last definite refusal allowed). Never
    raises for the receiver's trouble."""
    if row.state != PENDING or not _claim(config, row):
        return WebhookDelivery.get_by_id(row.id)
    return _send_claimed(config, row)


def _send_claimed(config: Config, row: WebhookDelivery) -> WebhookDelivery:
    event = Notification.get_by_id(row.event_id)
    endpoint = WebhookEndpoint.get_by_id(row.endpoint_id)
    error, refused = _send(config, event, endpoint)
    where = f"endpoint {endpoint.public_id}"
    if error is None:
        transitions.delivered(row)
        log.info("job_id=%s: event %s delivered to %s", event.job_id, event.key, where)
    else:
        wait = (
            backoff(row.refusals + 1) if refused else retry_after(row.attempts + 1 - row.refusals)
        )
        state = transitions.release_delivery(
            row, error, refused, config.notification_max_refusals, wait
        )
        log.warning(
            "job_id=%s: event %s not delivered to %s (%s): %s",
            event.job_id,
            event.key,
            where,
            state,
            error,
        )
    return WebhookDelivery.get_by_id(row.id)


def _send(
    config: Config, event: Notification, endpoint: WebhookEndpoint
) -> tuple[str | None, bool]:
    """``(why the delivery did not take place, whether that is a definite refusal)``;
    ``(None, False)`` for a 2xx answer (RFC 9110 via :func:`answers.is_definite`)."""
    if endpoint.deleted_at is not None:
        return "its webhook endpoint was deleted", True
    url = endpoint.url
    try:
        where = notifications.check_url(config, url)
    except exc.ValidationFailed as refusal:
        return f"{origin(url)} is refused: {refusal.extensions['errors'][0]['message']}", False
    body = body_of(event, endpoint)
    headers = headers_of(config, event, endpoint, body, dt.datetime.now(dt.UTC))
    deadline = time.monotonic() + config.notification_timeout
    try:
        answer = egress.request(
            where, "POST", deadline, config.notification_max_bytes, headers, body
        )
    except egress.TooLarge:
        return f"{origin(url)} answered with more than {config.notification_max_bytes} bytes", False
    except egress.Failed as failure:
        return (
            f"{origin(url)} could not be reached within {config.notification_timeout:g} s: "
            f"{failure}",
            False,
        )
    if 200 <= answer.status < 300:
        return None, False
    definite = answers.is_definite(answers.RECEIVER, answer.status)
    return f"{origin(url)} answered HTTP {answer.status}", definite


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: what errors and logs name (the path of a chat
    webhook URL is often its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


# --------------------------------------------------------------------------- the pass


def resend_pending(config: Config, limit: int = 200) -> dict:
    """One delivery pass: :func:`fan_out.fan_out_all`, then the PENDING deliveries not held by a
    sender or backing off, each endpoint a queue of its own: the endpoints take turns, one
    attempt each, oldest first within an endpoint, so one receiver's many rows, slowness or
    failures delay only its own deliveries (issue 40; issue 57: not the tenant's other
    endpoints). An endpoint leaves the pass at its first failure, or once its attempts took
    ``notification_timeout`` seconds; a row another sender claimed first is passed over. A
    tenant has at most ``GATEWAY_WEBHOOK_ENDPOINTS_PER_TENANT`` queues, so one tenant's endpoints
    cannot starve another's for long. Returns ``{"delivered", "pending"}``: the deliveries
    this pass made DELIVERED, and those left PENDING."""
    fan_out.fan_out_all()
    counts = {"delivered": 0, "pending": 0}
    rows = WebhookDelivery.select().where(WebhookDelivery.state == PENDING)
    now = db.db_now()
    queues: dict[str, collections.deque] = {}
    for row in rows.order_by(WebhookDelivery.id).limit(limit):
        if row.claimed_until is not None and row.claimed_until > now:  # held, or backing off
            counts["pending"] += 1
        else:
            queue = f"{row.tenant} endpoint {row.endpoint_id}"
            queues.setdefault(queue, collections.deque()).append(row)

    def attempt(row: WebhookDelivery) -> bool:
        """One attempt; False (its endpoint leaves the pass) when this sender's failed."""
        if not _claim(config, row):  # another sender took it since the select: not a failure
            state, mine = WebhookDelivery.get_by_id(row.id).state, False
        else:
            state, mine = _send_claimed(config, row).state, True
        if mine and state == DELIVERED:
            counts["delivered"] += 1
        elif state == PENDING:
            counts["pending"] += 1
        return not mine or state == DELIVERED

    left = rounds.take_turns(
        queues, attempt, config.notification_timeout, name="notification delivery"
    )
    counts["pending"] += left
    return counts


def deliver_forever(config: Config, stop: threading.Event) -> None:
    """A worker's delivery thread: a pass (:func:`resend_pending`) whenever this process
    decided an event, else every ``notification_poll_interval`` seconds, until ``stop``.
    Each pass on its own ledger connection; a failing pass is logged, never fatal."""
    wake = events.wake
    while not stop.is_set():
        wake.wait(config.notification_poll_interval)
        wake.clear()
        try:
            with db.database.connection_context():
                resend_pending(config)
        except Exception:  # noqa: BLE001 - the thread must outlive a ledger hiccup
            log.exception("notification delivery pass failed; the next pass retries")


def redeliver(endpoint: WebhookEndpoint, event_public_id: str) -> dict:
    """Send the endpoint's REFUSED delivery of the event ``event_public_id`` (``evt_...``)
    again: back to PENDING with its refusals cleared, same ``webhook-id``, delivered by the
    next pass (this process's is woken). Returns its view.

    Raises:
        NotFound (404): the endpoint has no delivery of that event.
        DeliveryNotRefused (409): the delivery is PENDING or DELIVERED.
    """
    found = None
    rows = (
        WebhookDelivery.select(WebhookDelivery, Notification)
        .join(Notification, on=WebhookDelivery.event_id == Notification.id, attr="event")
        .where(WebhookDelivery.endpoint_id == endpoint.id)
        .order_by(WebhookDelivery.id.desc())
    )
    for row in rows.iterator():  # the id is a digest of the key: compared, not queried
        if event_ids.event_id(row.event.key) == event_public_id:
            found = row
            break
    if found is None:
        raise exc.NotFound(f"endpoint {endpoint.public_id} has no delivery of that event")
    if not transitions.redeliver(found):
        raise exc.DeliveryNotRefused(
            f"the delivery of {event_public_id} is {found.state}: only a REFUSED one is sent "
            "again (a PENDING one is retried by itself; a DELIVERED one never again)"
        )
    events.wake.set()
    log.info("tenant=%s: %s redelivers %s", endpoint.tenant, endpoint.public_id, event_public_id)
    return delivery_views.endpoint_delivery_view(found, found.event)


# --------------------------------------------------------------------------- the sweep


def sweep_pass(config) -> dict:
    """The sweep's part (registry ``sweep_pass``): decide ``needs_attention`` for idle jobs
    (:func:`notifications.attention_for_idle_jobs`, ``GATEWAY_ATTENTION_AFTER``), then one
    delivery pass (:func:`resend_pending`). Returns ``{"notifications": {"delivered",
    "pending", "attention_decided"}}``."""
    decided = notifications.attention_for_idle_jobs(config, config.attention_after)
    counts = resend_pending(config)
    counts["attention_decided"] = decided
    return {"notifications": counts}


def _resent_by_the_sweep(target, row, found=None, prefetched=None):
    raise RuntimeError(
        f"{row.operation_key}: a notification lives in its own table and is resent by the "
        "sweep (sweep_pass), never rebuilt from an operation row"
    )


registry.register(
    registry.Action(
        name=notifications.ACTION,
        recovery=registry.RESEND,  # same key, same body; the receiver deduplicates
        send=notifications.send_request,
        rebuild=_resent_by_the_sweep,
        step="none",
        scope=registry.SITE,  # no job's recover sends it; the sweep does
        sweep_pass=sweep_pass,
        binds=None,  # a POST to the endpoints: no WordPress object
    )
)
