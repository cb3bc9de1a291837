"""The fan-out of event rows to webhook endpoints (issue 57): which deliveries exist.

Each delivery pass (:func:`gateway.actions.deliveries.resend_pending`) first makes the missing
``webhook_delivery`` rows: one per event row (``notification``) of a live endpoint's tenant,
of a type it subscribed to, decided after the endpoint was made (``from_event_id``). The
(event, endpoint) pair is unique, so two passes racing make each row once. Each endpoint keeps
how far it was fanned out (``fanned_through``), which trails the newest events by
:data:`SETTLE`, so an event row committed late (a lower id from a longer transaction) is still
found. :func:`reach` tells, for one event row, whether any endpoint still owes it a delivery.
Source: docs/api.md, "Webhook endpoints".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from peewee import SQL
from peewee import Case
from peewee import NodeList
from peewee import Value
from peewee import fn

from gateway.core.states import ANY_EVENT
from gateway.core.states import EVENT_ALIASES
from gateway.jobs import events
from gateway.ledger import db
from gateway.ledger.models import Notification
from gateway.ledger.models import WebhookDelivery
from gateway.ledger.models import WebhookEndpoint

SETTLE = dt.timedelta(minutes=5)  # no event row's transaction stays open longer
FAN_OUT_LIMIT = 500  # event rows looked at per endpoint and pass


def event_type(row: Notification) -> str:
    """The event row's type as delivered: its vocabulary name (an old row's
    ``ready_for_approval`` is ``approval_pending``, :func:`gateway.jobs.events.name_of`)."""
    return events.name_of(row.event)


def _stored_names(event_types: list[str]) -> list[str]:
    """The ``notification.event`` values that are each of ``event_types`` (with aliases)."""
    names = list(event_types)
    names += [alias for alias, name in EVENT_ALIASES.items() if name in event_types]
    return names


# --------------------------------------------------------------------------- fan-out


def fan_out(endpoint: WebhookEndpoint) -> int:
    """Make the missing deliveries of ``endpoint``: one per event row of its tenant above
    ``max(from_event_id, fanned_through)`` of a subscribed type, at most
    :data:`FAN_OUT_LIMIT`; the pair's unique constraint makes each once, whoever else fans out
    at the same time. Moves ``fanned_through`` up to the newest event older than
    :data:`SETTLE` that it passed. Returns the deliveries made now."""
    floor = max(endpoint.from_event_id, endpoint.fanned_through)
    made = WebhookDelivery.select(WebhookDelivery.id).where(
        WebhookDelivery.event_id == Notification.id,
        WebhookDelivery.endpoint_id == endpoint.id,
    )
    events = Notification.select(Notification.id, Notification.created_at).where(
        Notification.tenant == endpoint.tenant, Notification.id > floor, ~fn.EXISTS(made)
    )
    if ANY_EVENT not in endpoint.event_types:
        events = events.where(Notification.event.in_(_stored_names(endpoint.event_types)))
    found = list(events.order_by(Notification.id).limit(FAN_OUT_LIMIT))
    created = 0
    if found:
        rows = [
            {"event_id": e.id, "endpoint_id": endpoint.id, "tenant": endpoint.tenant} for e in found
        ]
        created = WebhookDelivery.insert_many(rows).on_conflict_ignore().as_rowcount().execute()
    _settle(endpoint, floor, found[-1].id if len(found) == FAN_OUT_LIMIT else None)
    return created or 0


def _settle(endpoint: WebhookEndpoint, floor: int, ceiling: int | None) -> None:
    """Move ``fanned_through`` to the newest event row of the tenant older than
    :data:`SETTLE` (at most ``ceiling``: the last one looked at when the limit cut the
    look short). Only ever up: a conditional UPDATE."""
    settled = Notification.select(fn.MAX(Notification.id)).where(
        Notification.tenant == endpoint.tenant,
        Notification.id > floor,
        Notification.created_at < db.utcnow() - SETTLE,
    )
    if ceiling is not None:
        settled = settled.where(Notification.id <= ceiling)
    newest = settled.scalar()
    if newest:
        WebhookEndpoint.update(fanned_through=newest).where(
            WebhookEndpoint.id == endpoint.id, WebhookEndpoint.fanned_through < newest
        ).execute()


def fan_out_all() -> int:
    """:func:`fan_out` for every live endpoint; returns the deliveries made now."""
    endpoints = WebhookEndpoint.select().where(WebhookEndpoint.deleted_at.is_null())
    return sum(fan_out(endpoint) for endpoint in endpoints)


# --------------------------------------------------------------------------- what is owed


@dataclasses.dataclass(frozen=True, slots=True)
class Reach:
    """How far an event row reaches its tenant's endpoints (:func:`reach`): counts of the
    tenant's endpoints ever made (deleted ones too), the live ones, the live ones subscribed to
    its type, and of those the ones that still owe it a delivery (made before it, not fanned
    out past it)."""

    endpoints: int
    live: int
    subscribed: int
    owing: int


def _holds(value: str):
    """SQL: the endpoint's ``event_types`` (a JSON list stored as text) hold ``value``. A
    LIKE on the value as JSON quotes it (``"approved"``), LIKE's wildcards escaped (``_`` is
    one of them)."""
    quoted = json.dumps(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    pattern = Value(f"%{quoted}%", converter=False)  # not through the JSON field's converter
    escape = Value("\\", converter=False)
    return NodeList((WebhookEndpoint.event_types, SQL("LIKE"), pattern, SQL("ESCAPE"), escape))


def _count(condition):
    return fn.COALESCE(fn.SUM(Case(None, [(condition, 1)], 0)), 0)


def reach(event: Notification) -> Reach:
    """Which endpoints of ``event``'s tenant could still receive it, in one aggregate query
    over the tenant's endpoints (however many: counted by the database, none loaded). An
    endpoint owes the event a delivery when it is live, subscribed to its type (or ``*``; an
    endpoint's ``event_types`` never change), made before it (``from_event_id`` below its id)
    and not fanned out past it (``fanned_through`` below its id): the next delivery pass makes
    that delivery. Any other endpoint never will: :func:`fan_out` looks only above both."""
    live = WebhookEndpoint.deleted_at.is_null()
    subscribed = live & (_holds(ANY_EVENT) | _holds(event_type(event)))
    ahead = (WebhookEndpoint.from_event_id < event.id) & (WebhookEndpoint.fanned_through < event.id)
    row = (
        WebhookEndpoint.select(
            fn.COUNT(WebhookEndpoint.id),
            _count(live),
            _count(subscribed),
            _count(subscribed & ahead),
        )
        .where(WebhookEndpoint.tenant == event.tenant)
        .tuples()
        .get()
    )
    return Reach(*(int(n or 0) for n in row))
