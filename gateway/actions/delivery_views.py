"""What an event's deliveries say (issue 57): the views the API, the resume points and the
MCP tools read of :mod:`gateway.actions.deliveries`' rows.

* :func:`summary`: one event row's state for a workflow (``GET /v1/jobs/{id}/notifications``):
  its deliveries' aggregate, the legacy endpoint's own when there is one; without any delivery
  (:func:`undelivered`), PENDING while an endpoint still owes one
  (:func:`gateway.actions.fan_out.reach`), UNSUBSCRIBED when none ever will, with
  ``last_error`` saying why.
* :func:`of_endpoint`: an endpoint's newest deliveries
  (``GET /v1/webhook-endpoints/{id}/deliveries``).

Source: docs/api.md, "Notification" and "Webhook endpoints".
"""

from __future__ import annotations

from gateway.actions import fan_out
from gateway.core import event_ids
from gateway.core.states import DELIVERED
from gateway.core.states import PENDING
from gateway.core.states import REFUSED
from gateway.core.states import UNSUBSCRIBED
from gateway.ledger import db
from gateway.ledger.models import Notification
from gateway.ledger.models import WebhookDelivery
from gateway.ledger.models import WebhookEndpoint

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
    "it was made; a workflow reads the events it missed with GET /v1/job-changes (the changes "
    "feed) or GET /v1/jobs/{job_id}/notifications"
)
UNSUBSCRIBED_DELETED = (
    "every webhook endpoint of tenant {tenant} was deleted, and one made now (POST "
    "/v1/webhook-endpoints, gateway notifications set-url) receives only the events decided "
    "after it"
)


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
    words = {"tenant": event.tenant, "type": fan_out.event_type(event), "job_id": event.job_id}
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
