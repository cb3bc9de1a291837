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
* **what a workflow reads** (:func:`summary`): an event's state from its deliveries; without
  any, PENDING while an endpoint still owes one (:func:`gateway.actions.fan_out.reach`),
  UNSUBSCRIBED when none ever will (no live endpoint subscribes to its type, those that do
  came after it, or all were deleted), with ``last_error`` saying why.

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
from gateway.core.states import REFUSED
from gateway.core.states import UNSUBSCRIBED
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
LIST_LIMIT = 100  # deliveries an endpoint's list shows, newest first
NOWHERE = (
    "no notification URL is set for tenant {tenant} (gateway notifications set-url) and no "
    "webhook endpoint subscribes its events (POST /v1/webhook-endpoints)"
)
# Why an event is UNSUBSCRIBED (summary): no delivery, and no live endpoint owes one.
UNSUBSCRIBED_TYPE = (
    "no webhook endpoint of tenant {tenant} subscribes to {type} events, so none receives this "
    'one: POST /v1/webhook-endpoints with event_types ["{type}"] (or ["*"]) subscribes one '
    "to the {type} events decided after it"
)
UNSUBSCRIBED_EARLIER = (
    "this {type} event was decided before the webhook endpoints of tenant {tenant} that "
    "subscribe to {type} events were made: an endpoint receives only the events decided after "
    "it was made"
)
UNSUBSCRIBED_DELETED = (
    "every webhook endpoint of tenant {tenant} was deleted, and one made now (POST "
    "/v1/webhook-endpoints, gateway notifications set-url) receives only the events decided "
    "after it"
)


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


# --------------------------------------------------------------------------- views


def delivery_view(row: WebhookDelivery, endpoint_public_id: str) -> dict:
    """One delivery as ``GET /v1/jobs/{id}/notifications`` lists it."""
    return {
        "endpoint_id": endpoint_public_id,
        "state": row.state,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "delivered_at": db.rfc3339(row.delivered_at),
    }


def summary(event: Notification) -> dict:
    """What an event row's deliveries say, for :func:`notifications.notification_view`:
    ``state``, ``attempts``, ``last_error`` and ``delivered_at`` of the legacy endpoint's
    delivery when there is one, else their aggregate (DELIVERED once every delivery is, REFUSED
    once none is pending and one was refused, else PENDING), and ``deliveries`` (one per
    endpoint, oldest first). Without any delivery (:func:`undelivered`): PENDING while a live
    endpoint still owes one, or while the tenant never had an endpoint; else UNSUBSCRIBED.
    One query with deliveries, two without."""
    found = list(
        WebhookDelivery.select(WebhookDelivery, WebhookEndpoint.public_id, WebhookEndpoint.legacy)
        .join(WebhookEndpoint, on=WebhookDelivery.endpoint_id == WebhookEndpoint.id)
        .where(WebhookDelivery.event_id == event.id)
        .order_by(WebhookDelivery.id)
        .objects()
    )
    if not found:
        return undelivered(event)
    views = [delivery_view(row, row.public_id) for row in found]
    legacy = [row for row in found if row.legacy]
    if legacy:
        chosen = legacy[-1]
        state, attempts = chosen.state, chosen.attempts
        last_error, delivered_at = chosen.last_error, chosen.delivered_at
    else:
        states = {row.state for row in found}
        state = (
            DELIVERED
            if states == {DELIVERED}
            else REFUSED
            if PENDING not in states and REFUSED in states
            else PENDING
        )
        attempts = sum(row.attempts for row in found)
        errors = [row.last_error for row in found if row.last_error]
        last_error = errors[-1] if errors else None
        times = [row.delivered_at for row in found if row.delivered_at]
        delivered_at = max(times) if times and state == DELIVERED else None
    return {
        "state": state,
        "attempts": attempts,
        "last_error": last_error,
        "delivered_at": db.rfc3339(delivered_at),
        "deliveries": views,
    }


def undelivered(event: Notification) -> dict:
    """:func:`summary` of an event row without any delivery, from the tenant's endpoints as
    they stand (:func:`fan_out.reach`, one query):

    * PENDING, ``last_error`` null: a live endpoint subscribed to its type was made before it
      and has not fanned out past it; the next delivery pass makes that delivery;
    * PENDING, ``last_error`` :data:`NOWHERE`: the tenant never had an endpoint; the first
      one, a notification URL (``gateway notifications set-url``), receives it;
    * UNSUBSCRIBED otherwise: no endpoint will ever receive it, ``last_error`` says why
      (:data:`UNSUBSCRIBED_TYPE`: none subscribes to its type, how to subscribe one;
      :data:`UNSUBSCRIBED_EARLIER`: those that do were made after it;
      :data:`UNSUBSCRIBED_DELETED`: every endpoint was deleted).

    Source: docs/api.md, "Notification" (``state``)."""
    reach = fan_out.reach(event)
    words = {"tenant": event.tenant, "type": fan_out.event_type(event)}
    state, last_error = UNSUBSCRIBED, None
    if reach.owing:
        state = PENDING
    elif not reach.endpoints:
        state, last_error = PENDING, NOWHERE.format(**words)
    elif not reach.live:
        last_error = UNSUBSCRIBED_DELETED.format(**words)
    elif reach.subscribed:
        last_error = UNSUBSCRIBED_EARLIER.format(**words)
    else:
        last_error = UNSUBSCRIBED_TYPE.format(**words)
    return {
        "state": state,
        "attempts": 0,
        "last_error": last_error,
        "delivered_at": None,
        "deliveries": [],
    }


def endpoint_delivery_view(row: WebhookDelivery, event: Notification) -> dict:
    """One delivery as ``GET /v1/webhook-endpoints/{id}/deliveries`` lists it."""
    return {
        "event_id": event_ids.event_id(event.key),
        "type": fan_out.event_type(event),
        "job_id": event.job_id,
        "task_version": event.task_version,
        "state": row.state,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "created_at": db.rfc3339(row.created_at),
        "delivered_at": db.rfc3339(row.delivered_at),
    }


def of_endpoint(endpoint: WebhookEndpoint, limit: int = LIST_LIMIT) -> list[dict]:
    """The endpoint's newest ``limit`` deliveries, newest first
    (:func:`endpoint_delivery_view`)."""
    rows = (
        WebhookDelivery.select(WebhookDelivery, Notification)
        .join(Notification, on=WebhookDelivery.event_id == Notification.id, attr="event")
        .where(WebhookDelivery.endpoint_id == endpoint.id)
        .order_by(WebhookDelivery.id.desc())
        .limit(limit)
    )
    return [endpoint_delivery_view(row, row.event) for row in rows]


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
    return endpoint_delivery_view(found, found.event)


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
